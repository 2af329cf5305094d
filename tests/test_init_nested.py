"""`ctape init` never nests a tape silently (issue 24, item 9)."""

from conftest import run_cli, snapshot


def test_init_refuses_inside_a_tape(tmp_path):
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    run_cli("init", cwd=proj, check=True)
    tape = proj / ".ctape"
    run_cli("--dir", tape, "append", "user", "--text", "hi", "-s", "chat", check=True)
    before = snapshot(tmp_path)
    for args, cwd in ((["init"], tape), (["init"], tape / "sessions"), (["init", "sub"], tape),
                      (["--dir", tape / "x", "init"], tmp_path)):
        p = run_cli(*args, cwd=cwd)
        err = p.stderr.decode()
        assert p.returncode == 2 and f"inside the tape {tape}" in err, (args, err)
        assert err.count("\n") == 1 and "Traceback" not in err
    # below a folder whose tape commands here would use: refused unless the path is given
    p = run_cli("init", cwd=proj / "src")
    assert p.returncode == 2 and f"commands here already use the tape {tape}" in p.stderr.decode()
    assert b"ctape init .ctape" in p.stderr
    assert snapshot(tmp_path) == before
    # a folder holding a tape in .ctape/ names that tape, as --dir does: nothing changes
    for args in (["--dir", proj, "init"], ["init", proj]):
        p = run_cli(*args, cwd=tmp_path, check=True)
        assert f"{tape} is already a tape; nothing changed" in p.stderr.decode()
    assert snapshot(tmp_path) == before
    # asked for by path: made, and commands in src/ now use it
    p = run_cli("init", ".ctape", cwd=proj / "src", check=True)
    assert b"Initialized empty tape" in p.stderr
    p = run_cli("sessions", cwd=proj / "src", check=True)
    assert p.stdout == b""


def test_no_command_makes_a_tape_inside_another(tmp_path):
    """`demo` and `clone` made a whole tape inside another one's folder (init refused it):
    `demo` with --dir inside a session's folder, `clone URL TAPE/sessions/x`. The outer
    tape then took the clone for one of its sessions and wrote its appends into the inner
    tape's root. Every way of making a tape refuses it now, the Python API's too, in one
    line, and the outer tape is left as it was. (Found by an audit.)"""
    import pytest

    from ctape import Tape
    from ctape.errors import InvalidInput

    tape, remote = tmp_path / "T", tmp_path / "remote"
    remote.mkdir()
    run_cli("--dir", tape, "init", check=True)
    run_cli("--dir", tape, "append", "user", "--text", "hi", "-s", "chat", check=True)
    run_cli("--dir", tape, "remote", "add", "o", f"file://{remote}", check=True)
    run_cli("--dir", tape, "push", "o", check=True)
    before = snapshot(tape)
    for args in (["--dir", tape / "sessions" / "chat", "demo", "--no-crash"], ["--dir", tape / "packs" / "x", "demo"],
                 ["clone", f"file://{remote}", tape / "sessions" / "cl"], ["clone", f"file://{remote}", tape / "new"]):
        p = run_cli(*args, cwd=tmp_path)
        err = p.stderr.decode()
        assert p.returncode == 2 and f"inside the tape {tape}" in err, (args, err)
        assert err.count("\n") == 1 and "Traceback" not in err
    with pytest.raises(InvalidInput, match="inside the tape"):
        Tape.init(tape / "sessions" / "py")
    assert snapshot(tape) == before
    run_cli("clone", f"file://{remote}", tmp_path / "outside", check=True)  # outside it: as before
