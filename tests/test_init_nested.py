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
    # a folder holding a tape in .ctape/ names that tape, as --dir does: nothing changes
    for args in (["--dir", proj, "init"], ["init", proj]):
        p = run_cli(*args, cwd=tmp_path, check=True)
        assert f"{tape} is already a tape; nothing changed" in p.stderr.decode()
    assert snapshot(tmp_path) == before
    # below a folder whose tape commands here used: ./.ctape is made (SPEC 5), as git nests a
    # repository, and init says which tape commands here stop using (never silently: issue 24)
    p = run_cli("init", cwd=proj / "src", check=True)
    err = p.stderr.decode()
    assert f"Initialized empty tape in {proj / 'src' / '.ctape'}" in err, err
    assert f"now use this tape, not {tape}" in err and err.count("\n") == 2, err
    p = run_cli("sessions", cwd=proj / "src", check=True)
    assert p.stdout == b""
    p = run_cli("sessions", cwd=proj, check=True)
    assert b"chat" in p.stdout, p.stdout
    # again: nothing changes, nothing to note
    p = run_cli("init", cwd=proj / "src", check=True)
    assert p.stderr.decode().count("\n") == 1 and b"nothing changed" in p.stderr


def test_init_below_a_home_tape_makes_the_projects_own(tmp_path):
    """A user who keeps ~/.ctape could not `ctape init` in any project under home (refused:
    "commands here already use the tape ~/.ctape"), where SPEC 5 says init makes ./.ctape.
    Found by a contract audit."""
    home = tmp_path / "home"
    (home / "code" / "proj").mkdir(parents=True)
    run_cli("init", cwd=home, check=True)
    p = run_cli("init", cwd=home / "code" / "proj")
    assert p.returncode == 0, p.stderr
    assert (home / "code" / "proj" / ".ctape" / "sessions").is_dir() or (home / "code" / "proj" / ".ctape").is_dir()
    run_cli("append", "user", "--text", "hi", "-s", "p", cwd=home / "code" / "proj", check=True)
    assert run_cli("sessions", cwd=home, check=True).stdout == b""


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
