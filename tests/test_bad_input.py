"""Bad input and hostile files (SPEC section 12, invariant 8), through the real command.

Every rejected command: the right exit status (2 bad usage or input, 1 not found or
corrupt), exactly one line on stderr, nothing on stdout, no traceback anywhere, and the
tape directory byte-identical afterwards.
"""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import run_cli, snapshot
from ctape import Tape

BAD_NAMES = ["../x", "a/b", "a" * 200, "x.lock", ".hidden", "sp ace", "é"]


@pytest.fixture
def chat(tape_dir):
    """A tape with session `chat` (3 entries on main, branch `alt` at the second)."""
    t = Tape.open(tape_dir)
    s = t.session("chat")
    hashes = [s.append("user", {"content": "one"}).hash, s.append("assistant", {"content": "two"}).hash]
    s.branch("alt")
    hashes.append(s.append("user", {"content": "three"}).hash)
    t.close()
    return tape_dir, hashes


def check_rejected(p, code, before=None, after_dir=None):
    out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    assert "Traceback" not in out + err, err
    assert p.returncode == code, (p.returncode, err)
    assert len(err.splitlines()) == 1 and err.endswith("\n"), f"want one line on stderr, got {err!r}"
    assert out == "", out
    if before is not None:
        assert snapshot(after_dir) == before, "a rejected command changed the tape directory"
    return err


def rejected(tape_dir, *args, code, input=None, env=None):
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, *args, input=input, env=env)
    return check_rejected(p, code, before, tape_dir)


# -- payloads and kinds -----------------------------------------------------------------


@pytest.mark.parametrize(
    "args,stdin",
    [
        (["append", "user", '{"content": '], None),
        (["append", "user", "not json"], None),
        (["append", "user", "{'content': 'x'}"], None),
        (["append", "user", "NaN"], None),
        (["append", "user"], b'{"content": "x"'),
        (["append", "user", "-"], b"\n"),
        (["append", "user", '{"content": "x"}', "--delta", "{oops"], None),
        (["append", "user", "[1, 2]"], None),  # not an object
        (["append", "user", '"text"'], None),
        (["append", "tool_call", '{"name": "bash"}'], None),  # no call_id
        (["append", "tool_result", '{"output": "x"}'], None),
        (["append", "anchor", "{}"], None),
        (["append", "error", '{"call_id": "c"}'], None),
        (["append", "user", '{"content": "x"}', "--meta", "novalue"], None),
        (["append", "user", '{"content": "x"}', "--meta", "=v"], None),
        (["append", "user", '{"content": "x"}', "--time", "yesterday"], None),
        (["append", "user", '{"content": "x", "n": NaN}'], None),
        (["append", "user", '{"content": "\\ud800"}'], None),  # lone surrogate
    ],
)
def test_invalid_payload(chat, args, stdin):
    tape_dir, _ = chat
    rejected(tape_dir, *args, "-s", "chat", input=stdin, code=2)


@pytest.mark.parametrize("kind", ["bogus", "User", "tool", "tool__call", "", "anchor ", "system\n"])
def test_unknown_kind(chat, kind):
    tape_dir, _ = chat
    err = rejected(tape_dir, "append", kind, '{"content": "x"}', "-s", "chat", code=2)
    assert "kind" in err


@pytest.mark.parametrize("data", [b"\xff\xfe", b'{"content": "\xc3\x28"}', b"abc\x80", b"\xed\xa0\x80"])
@pytest.mark.parametrize("mode", [["--text"], []])
def test_non_utf8_stdin(chat, data, mode):
    tape_dir, _ = chat
    err = rejected(tape_dir, "append", "user", *mode, "-s", "chat", input=data, code=2)
    assert "UTF-8" in err


def test_deeply_nested_payload(chat):
    tape_dir, _ = chat
    rejected(tape_dir, "append", "user", "-s", "chat", input=b'{"content": ' + b"[" * 100000 + b"]" * 100000 + b"}", code=2)


# -- names ------------------------------------------------------------------------------

SESSION_COMMANDS = [
    ["append", "user", '{"content": "x"}', "-s", "{}"],
    ["anchor", "milestone", "-s", "{}"],
    ["log", "-s", "{}"],
    ["status", "-s", "{}"],
    ["state", "-s", "{}"],
    ["checkout", "chat", "-s", "{}"],
    ["branch", "-s", "{}"],
    ["branch", "newb", "-s", "{}"],
    ["reflog", "{}"],
    ["reflog", "-s", "{}"],
]


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("cmd", SESSION_COMMANDS, ids=lambda c: "-".join(c[:2]))
def test_bad_session_name(chat, cmd, name):
    tape_dir, _ = chat
    err = rejected(tape_dir, *[a.replace("{}", name) for a in cmd], code=2)
    assert "invalid session name" in err


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_session_name_in_env(chat, name):
    tape_dir, _ = chat
    rejected(tape_dir, "append", "user", '{"content": "x"}', env={"CTAPE_SESSION": name}, code=2)


BRANCH_COMMANDS = [
    ["branch", "{}", "-s", "chat"],
    ["branch", "{}", "chat", "-s", "chat"],
    ["branch", "-d", "{}", "-s", "chat"],
    ["checkout", "-b", "{}", "chat", "-s", "chat"],
]


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("cmd", BRANCH_COMMANDS, ids=lambda c: "-".join(c[:2]))
def test_bad_branch_name(chat, cmd, name):
    tape_dir, _ = chat
    err = rejected(tape_dir, *[a.replace("{}", name) for a in cmd], code=2)
    assert "invalid branch name" in err


def test_bad_names_never_touch_a_path(chat, tmp_path):
    tape_dir, _ = chat
    for name in ["../escaped", "../../escaped2", "a/../../escaped3"]:
        run_cli("--dir", tape_dir, "append", "user", '{"content": "x"}', "-s", name)
        run_cli("--dir", tape_dir, "branch", name, "-s", "chat")
    assert not any(p.name.startswith("escaped") for p in tmp_path.rglob("*"))


@pytest.mark.parametrize("cmd", [["branch", "", "-s", "chat"], ["branch", "-d", "", "-s", "chat"]])
def test_empty_branch_name(chat, cmd):
    tape_dir, _ = chat
    rejected(tape_dir, *cmd, code=2)


def test_empty_branch_name_for_checkout_b(chat):
    tape_dir, _ = chat
    rejected(tape_dir, "checkout", "-b", "", "chat", "-s", "chat", code=2)


@pytest.mark.parametrize(
    "cmd",
    [
        ["append", "user", '{"content": "x"}', "-s", ""],
        ["log", "-s", ""],
        ["status", "-s", ""],
        ["reflog", ""],
        ["log", "--since", "yesterday"],
        ["log", "-s", "chat", "-n", "-1"],
    ],
)
def test_usage_errors_are_one_line(chat, cmd):
    tape_dir, _ = chat
    rejected(tape_dir, *cmd, code=2)


@pytest.mark.parametrize(
    "cmd", [["append", "user", '{"content": "x"}', "-s", ""], ["log", "-s", ""], ["status", "-s", ""], ["reflog", ""]]
)
def test_empty_session_name_is_usage_error(chat, cmd):
    tape_dir, _ = chat
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, *cmd)
    assert p.returncode == 2 and b"Traceback" not in p.stderr + p.stdout
    assert snapshot(tape_dir) == before


# -- refs -------------------------------------------------------------------------------

UNKNOWN_REFS = ["nosuch", "chat/nosuch", "nosuch/main", "ffff", "0" * 64, "chat~3", "chat~99", "chat/alt~2", "chat^^^", "chat@{99}", "../x"]
REF_COMMANDS = [
    ["show", "{}"],
    ["log", "{}"],
    ["state", "{}"],
    ["checkout", "{}", "-s", "chat"],
    ["checkout", "-b", "nb", "{}", "-s", "chat"],
    ["branch", "nb", "{}", "-s", "chat"],
    ["log", "{}", "-s", "chat"],
]


@pytest.mark.parametrize("ref", UNKNOWN_REFS)
def test_unknown_ref_show(chat, ref):
    tape_dir, _ = chat
    rejected(tape_dir, "show", ref, code=1)


@pytest.mark.parametrize("ref", ["nosuch", "chat/nosuch", "ffff", "0" * 64, "chat~3", "chat@{99}"])
@pytest.mark.parametrize("cmd", REF_COMMANDS[1:], ids=lambda c: "-".join(c[:2]))
def test_unknown_ref(chat, cmd, ref):
    tape_dir, _ = chat
    rejected(tape_dir, *[a.replace("{}", ref) for a in cmd], code=1)


@pytest.mark.parametrize("ref", ["chat~3", "chat/alt~2", "chat/main~5", "chat^^^^"])
def test_past_the_root_says_so(chat, ref):
    tape_dir, _ = chat
    err = rejected(tape_dir, "show", ref, code=1)
    assert "past the root" in err


def test_past_the_root_by_hash(chat):
    tape_dir, hashes = chat
    assert run_cli("--dir", tape_dir, "show", hashes[0] + "~0", "--json").returncode == 0
    err = rejected(tape_dir, "show", hashes[0] + "~1", code=1)
    assert "past the root" in err
    rejected(tape_dir, "checkout", hashes[2][:8] + "~3", "-s", "chat", code=1)


@pytest.mark.parametrize("ref", ["chat@{x}", "chat~x", "~1", "chat@{", "chat@{-1}", "chat^x"])
def test_malformed_ref(chat, ref):
    tape_dir, _ = chat
    rejected(tape_dir, "show", ref, code=2)


def test_superscript_reflog_number(chat):
    tape_dir, _ = chat
    rejected(tape_dir, "show", "chat@{²}", code=2)


@pytest.mark.parametrize("cmd", [["checkout", "chat", "-s", "fresh"], ["checkout", "nosuch", "-s", "fresh"], ["branch", "-d", "x", "-s", "fresh"]])
def test_rejected_command_on_new_session_creates_nothing(chat, cmd):
    tape_dir, _ = chat
    rejected(tape_dir, *cmd, code=1)


def test_ambiguous_prefix(tape_dir):
    t = Tape.open(tape_dir)
    s = t.session("amb")
    seen: dict[str, str] = {}
    pair = None
    i = 0
    while pair is None:
        with t.batch():
            for _ in range(100):
                h = s.append("user", {"content": f"m{i}"}).hash
                i += 1
                if h[:4] in seen:
                    pair = (seen[h[:4]], h)
                    break
                seen[h[:4]] = h
        assert i < 5000
    t.close()
    prefix = pair[0][:4]
    others = [h for h in seen.values() if h.startswith(prefix)]  # only the first of each prefix is kept in seen
    assert others == [pair[0]]
    for cmd in (["show", prefix], ["log", prefix], ["checkout", prefix, "-s", "amb"], ["state", prefix], ["branch", "nb", prefix, "-s", "amb"]):
        err = rejected(tape_dir, *cmd, code=1)
        assert "ambiguous" in err and pair[0] in err and pair[1] in err, err
    # one more digit (if it differs) resolves it
    n = next(k for k in range(5, 65) if pair[0][:k] != pair[1][:k])
    p = run_cli("--dir", tape_dir, "show", pair[1][:n], "--json", check=True)
    assert p.stdout.decode().count(pair[1]) == 1


# -- the tape directory itself ----------------------------------------------------------

MISSING_DIR_COMMANDS = [
    ["append", "user", '{"content": "x"}', "-s", "chat"],
    ["anchor", "m", "-s", "chat"],
    ["log", "-s", "chat"],
    ["show", "chat"],
    ["checkout", "chat", "-s", "chat"],
    ["branch", "-s", "chat"],
    ["branch", "b", "-s", "chat"],
    ["reflog", "chat"],
    ["status", "-s", "chat"],
    ["state", "-s", "chat"],
    ["fsck"],
    ["sessions"],
    ["stats"],
]


@pytest.mark.parametrize("cmd", MISSING_DIR_COMMANDS, ids=lambda c: "-".join(c[:2]))
def test_missing_tape_directory(tmp_path, cmd):
    missing = tmp_path / "nope" / "tape"
    p = run_cli("--dir", missing, *cmd)
    err = check_rejected(p, 1)
    assert "ctape init" in err
    assert not (tmp_path / "nope").exists()
    p = run_cli(*cmd, env={"CTAPE_DIR": str(missing)})
    check_rejected(p, 1)
    assert not (tmp_path / "nope").exists()


def test_dir_naming_a_file_says_so(tmp_path):
    f = tmp_path / "afile"
    f.write_bytes(b"precious\n")
    for cmd in MISSING_DIR_COMMANDS[:4]:
        err = check_rejected(run_cli("--dir", f, *cmd), 1)
        assert "is a file, not a tape directory" in err and "ctape init" not in err  # init would refuse it too
    assert f.read_bytes() == b"precious\n"


@pytest.mark.parametrize("cmd", MISSING_DIR_COMMANDS[:4], ids=lambda c: "-".join(c[:2]))
def test_no_tape_found_upwards(tmp_path, cmd):
    here = tmp_path / "a" / "b"
    here.mkdir(parents=True)
    if any((p / ".ctape").exists() for p in [here, *here.parents]):
        pytest.skip("a .ctape exists above the test directory")
    before = snapshot(tmp_path)
    p = run_cli(*cmd, cwd=here)
    err = check_rejected(p, 1)
    assert ".ctape" in err
    assert snapshot(tmp_path) == before


def test_a_plain_directory_is_not_a_tape(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    (d / "notes.txt").write_text("x")
    before = snapshot(d)
    for cmd in MISSING_DIR_COMMANDS:
        check_rejected(run_cli("--dir", d, *cmd), 1)
    assert snapshot(d) == before


@pytest.mark.parametrize("how", ["arg", "dir"])
def test_init_over_a_file(tmp_path, how):
    f = tmp_path / "afile"
    f.write_bytes(b"precious\n")
    p = run_cli("init", f) if how == "arg" else run_cli("--dir", f, "init")
    check_rejected(p, 2)
    assert f.read_bytes() == b"precious\n"
    assert sorted(os.listdir(tmp_path)) == ["afile"]


def test_init_inside_a_file(tmp_path):
    f = tmp_path / "afile"
    f.write_bytes(b"precious\n")
    p = run_cli("init", f / "sub")
    assert p.returncode in (1, 2)
    check_rejected(p, p.returncode)
    assert f.read_bytes() == b"precious\n"


def test_a_mistyped_import_format_is_named_as_such(chat, tmp_path):
    tape_dir, _ = chat
    f = tmp_path / "t.jsonl"
    f.write_text('{"role": "user", "content": "hi"}\n')
    err = rejected(tape_dir, "import", "codexx", f, code=2)
    assert "'codexx' is neither a FORMAT" in err and "claude-code" in err


def test_reflog_n_is_never_negative(chat):
    tape_dir, _ = chat
    rejected(tape_dir, "reflog", "chat", "-n", "-1", code=2)


@pytest.mark.parametrize("name", ["a/b", "", "../x"])
def test_pull_of_a_session_name_that_cannot_exist(chat, tmp_path, name):
    """A name no session can have is a typo (exit 2), as everywhere else; a valid name the
    remote does not hold yet is only a warning (docs/remotes.md)."""
    tape_dir, _ = chat
    (tmp_path / "remote").mkdir()
    run_cli("--dir", tape_dir, "remote", "add", "origin", f"file://{tmp_path / 'remote'}")
    err = rejected(tape_dir, "pull", "-s", name, code=2)
    assert "invalid session name" in err


def test_a_tape_that_lost_its_ctape_json(chat):
    """A copy cut short (ctape.json missing beside its sessions): every command says to
    restore it, and `init` refuses, where it once gave the tape a new identity (so its
    copies and remotes took it for another tape)."""
    tape_dir, _ = chat
    (tape_dir / "ctape.json").unlink()
    before = snapshot(tape_dir)
    for args in (["log", "-s", "chat"], ["status", "-s", "chat"], ["append", "user", "--text", "x", "-s", "chat"]):
        err = check_rejected(run_cli("--dir", tape_dir, *args), 1)
        assert "holds sessions but no ctape.json" in err and "restore ctape.json" in err
    err = check_rejected(run_cli("init", tape_dir), 2)
    assert "new identity" in err
    assert snapshot(tape_dir) == before


@pytest.mark.parametrize("version", ['"2"', "null", "true", "-1", "[2]"])
def test_a_ctape_json_whose_version_is_not_a_number(chat, version):
    tape_dir, _ = chat
    path = tape_dir / "ctape.json"
    meta = path.read_text().replace('"version": 2', f'"version": {version}')
    assert meta != path.read_text()
    path.write_text(meta)
    before = snapshot(tape_dir)
    err = check_rejected(run_cli("--dir", tape_dir, "sessions"), 1)
    assert "ctape.json is damaged" in err and "internal error" not in err
    assert snapshot(tape_dir) == before


@pytest.mark.parametrize("change", [('"version"', '"tersion"'), ('"tape_id"', '"Tape_id"'), ('"tape_id": "', '"tape_id": "x')],
                         ids=["version-renamed", "tape_id-renamed", "tape_id-not-hex"])
def test_a_ctape_json_missing_its_version_or_tape_id_is_damaged(chat, change):
    """One flipped bit that renames a key read as a tape of version 0 with no id, and fsck
    passed (audit): every ctape.json ever written has both."""
    tape_dir, _ = chat
    path = tape_dir / "ctape.json"
    meta = path.read_text().replace(*change)
    assert meta != path.read_text()
    path.write_text(meta)
    before = snapshot(tape_dir)
    for args in (["sessions"], ["fsck"]):
        err = check_rejected(run_cli("--dir", tape_dir, *args), 1)
        assert "ctape.json is damaged" in err and "restore it from a copy" in err
    assert snapshot(tape_dir) == before


def test_init_over_an_existing_tape_changes_nothing(chat):
    tape_dir, _ = chat
    before = snapshot(tape_dir)
    p = run_cli("init", tape_dir)
    assert p.returncode == 0 and p.stdout == b""
    assert "nothing changed" in p.stderr.decode()
    assert snapshot(tape_dir) == before


def test_files_are_owner_only(chat):
    tape_dir, _ = chat
    for root, dirs, files in os.walk(tape_dir):
        for n in dirs + files:
            mode = os.lstat(os.path.join(root, n)).st_mode & 0o777
            assert mode & 0o077 == 0, (n, oct(mode))
    assert os.stat(tape_dir).st_mode & 0o077 == 0


# -- symlinks ---------------------------------------------------------------------------

READ_COMMANDS = [["log", "-s", "chat"], ["show", "chat"], ["status", "-s", "chat"], ["reflog", "chat"], ["state", "-s", "chat"], ["branch", "-s", "chat"]]
WRITE_COMMANDS = [
    ["append", "user", '{"content": "x"}', "-s", "chat"],
    ["anchor", "m", "-s", "chat"],
    ["checkout", "alt", "-s", "chat"],
    ["branch", "nb", "-s", "chat"],
]


def _symlink(tape_dir, what):
    """Move a real file or folder out of the tape and leave a symlink to it in its place."""
    outside = tape_dir.parent / "outside"
    outside.mkdir(exist_ok=True)
    if what == "ctape.json":
        target = tape_dir / "ctape.json"
    elif what == "sessions":
        target = tape_dir / "sessions"
    elif what == "session dir":
        target = tape_dir / "sessions" / "chat"
    else:
        (seg,) = (tape_dir / "sessions" / "chat").glob("*.seg")
        target = seg
    moved = outside / target.name
    shutil.move(str(target), str(moved))
    os.symlink(moved, target)


@pytest.mark.parametrize("what", ["ctape.json", "sessions"])
@pytest.mark.parametrize("cmd", READ_COMMANDS + WRITE_COMMANDS + [["fsck"], ["sessions"]], ids=lambda c: "-".join(c[:2]))
def test_symlink_at_the_top_is_refused(chat, what, cmd):
    tape_dir, _ = chat
    _symlink(tape_dir, what)
    outside = snapshot(tape_dir.parent / "outside")
    err = rejected(tape_dir, *cmd, code=1)
    assert "symlink" in err
    assert snapshot(tape_dir.parent / "outside") == outside


def test_an_unreadable_segment_is_an_error_even_with_no_index_cache(chat, tmp_path):
    """On a new machine (no index cache yet) a segment that cannot be read was skipped as
    if empty: `log` printed nothing and exited 0, `status` blamed a sync. Now every
    reader says which file it cannot read (as it did with a warm cache)."""
    tape_dir, _ = chat
    (seg,) = (tape_dir / "sessions" / "chat").glob("*.seg")
    os.chmod(seg, 0)
    prefix = []
    if os.geteuid() == 0:  # root reads anything: drop the capabilities that let it
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv(1) to read as root without permission overrides")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTAPE_")}
    try:
        for args in (["log", "-s", "chat"], ["status", "-s", "chat"], ["sessions"], ["search", "one"]):
            env["CTAPE_CACHE_DIR"] = str(tmp_path / f"cold-{args[0]}")
            p = subprocess.run([*prefix, sys.executable, "-m", "ctape", "--dir", str(tape_dir), *args], env=env, capture_output=True)
            err = check_rejected(p, 1)
            assert "cannot read sessions/chat/" in err and "Permission denied" in err, err
    finally:
        os.chmod(seg, 0o600)


def test_a_symlinked_segment_the_cache_knew_is_unsafe_not_lost(chat):
    """A segment this machine had read, replaced by a symlink: fsck said its records were
    lost ("849 bytes shorter", the link's own length) and `fsck --salvage` wrote a pending
    report before refusing, so that after the real file was put back a salvage recorded a
    loss for good. Now: unsafe only, salvage writes nothing, and the file put back is whole."""
    tape_dir, _ = chat
    run_cli("--dir", tape_dir, "log", "-s", "chat", check=True)  # the cache knows every size
    (seg,) = (tape_dir / "sessions" / "chat").glob("*.seg")
    real = seg.read_bytes()
    _symlink(tape_dir, "segment")
    before = snapshot(tape_dir)
    for args in (["fsck"], ["fsck", "--salvage"]):
        p = run_cli("--dir", tape_dir, *args)
        out = p.stdout.decode() + p.stderr.decode()
        assert p.returncode == 1 and "symlink" in out and "lost" not in out, out
        assert snapshot(tape_dir) == before
    seg.unlink()
    seg.write_bytes(real)
    p = run_cli("--dir", tape_dir, "fsck")
    assert p.returncode == 0 and b"warning" not in p.stdout + p.stderr, p.stdout + p.stderr


@pytest.mark.parametrize("what", ["session dir", "segment"])
def test_symlink_inside_is_reported_by_fsck(chat, what):
    tape_dir, _ = chat
    _symlink(tape_dir, what)
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "fsck")
    assert p.returncode == 1
    assert b"symlink" in p.stdout and b"Traceback" not in p.stdout + p.stderr
    assert snapshot(tape_dir) == before


@pytest.mark.parametrize("what", ["session dir", "segment"])
@pytest.mark.parametrize("cmd", WRITE_COMMANDS, ids=lambda c: "-".join(c[:2]))
def test_symlink_inside_refuses_writes(chat, what, cmd):
    tape_dir, _ = chat
    _symlink(tape_dir, what)
    outside = snapshot(tape_dir.parent / "outside")
    err = rejected(tape_dir, *cmd, code=1)
    assert "symlink" in err
    assert snapshot(tape_dir.parent / "outside") == outside


@pytest.mark.parametrize("what", ["session dir", "segment"])
@pytest.mark.parametrize("cmd", READ_COMMANDS, ids=lambda c: "-".join(c[:2]))
def test_symlink_inside_refuses_reads(chat, what, cmd):
    tape_dir, _ = chat
    _symlink(tape_dir, what)
    err = rejected(tape_dir, *cmd, code=1)
    assert "symlink" in err


# -- a read-only tape directory ---------------------------------------------------------


@pytest.fixture
def readonly_view(chat, tmp_path):
    """The tape seen through a read-only bind mount (root ignores file modes)."""
    tape_dir, hashes = chat
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount(8) for a read-only bind mount")
    r = subprocess.run(["mount", "--bind", "-o", "ro", str(tape_dir), str(ro)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot make a read-only bind mount here: {r.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True)
        probe = ro / "probe"
        try:
            probe.touch()
            probe.unlink()
            pytest.skip("the bind mount is writable; cannot test a read-only tape")
        except OSError:
            pass
        yield ro, tape_dir, hashes
    finally:
        subprocess.run(["umount", str(ro)], capture_output=True)


@pytest.mark.parametrize(
    "cmd",
    [
        ["append", "user", '{"content": "x"}', "-s", "chat"],
        ["append", "user", '{"content": "x"}', "-s", "newsession"],
        ["anchor", "m", "-s", "chat"],
        ["checkout", "alt", "-s", "chat"],
        ["branch", "nb", "-s", "chat"],
        ["branch", "-d", "alt", "-s", "chat"],
    ],
    ids=lambda c: "-".join(c[:2]) + ("-new" if "newsession" in c else ""),
)
def test_read_only_tape_refuses_writes(readonly_view, cmd):
    ro, tape_dir, _ = readonly_view
    before = snapshot(tape_dir)
    p = run_cli("--dir", ro, *cmd)
    err = check_rejected(p, 1)
    assert "read-only" in err
    assert snapshot(tape_dir) == before


def test_read_only_tape_still_reads(readonly_view):
    ro, _, hashes = readonly_view
    p = run_cli("--dir", ro, "log", "-s", "chat", "--json", check=True)
    assert [line for line in p.stdout.decode().splitlines() if line][0].count(hashes[2]) == 1
    assert run_cli("--dir", ro, "show", hashes[0][:10], check=True).returncode == 0
    assert run_cli("--dir", ro, "fsck").returncode == 0
    assert run_cli("--dir", ro, "status", "-s", "chat", check=True).returncode == 0


def test_init_in_read_only_place(readonly_view):
    ro, _, _ = readonly_view
    p = run_cli("init", ro / "sub")
    check_rejected(p, 2)  # ro is a tape: refused before any write, as a tape inside a tape (issue 24)
    assert not (ro / "sub").exists()


# -- a 100 MB payload through stdin ------------------------------------------------------


def test_100mb_payload_through_stdin(tape_dir, tmp_path):
    size = 100 << 20
    output = (b"PASSED tests/test_x.py::test_%d line of output\n" * (size // 40 + 1))[:size]
    body = b'{"call_id": "c1", "output": "' + output.replace(b"\n", b"\\n") + b'"}'
    src = tmp_path / "big.json"
    src.write_bytes(body)
    del body
    with open(src, "rb") as f:
        p = subprocess.Popen(
            [sys.executable, "-m", "ctape", "--dir", str(tape_dir), "append", "tool_result", "-s", "big"],
            stdin=f,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = p.stdout.read(), p.stderr.read()
        _, status, usage = os.wait4(p.pid, 0)  # this child's own peak memory
        p.returncode = os.waitstatus_to_exitcode(status)
    assert p.returncode == 0, err
    peak = usage.ru_maxrss * 1024
    assert peak < 10 * size, f"peak RSS {peak >> 20} MiB for a {size >> 20} MiB payload"
    h = out.decode().strip()
    t = Tape.open(tape_dir)
    try:
        e = t.get(h)
        assert e.payload["call_id"] == "c1"
        assert len(e.payload["output"]) == size
        assert e.payload["output"].encode() == output
    finally:
        t.close()
    disk = sum(f.stat().st_size for f in (tape_dir / "sessions").rglob("*.seg"))
    assert disk < size // 10  # stored compressed


def test_the_cache_is_owner_only_whatever_the_umask(chat, tmp_path):
    """SPEC 12: files are created readable only by their owner. The tape's were; the cache's
    imports.json, watch.json and watch layouts were 0644 under umask 022, its root 0755."""
    tape_dir, _ = chat
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTAPE_")}
    env["CTAPE_CACHE_DIR"] = str(cache)
    fixtures = "/work/shared/fixtures/transcripts"
    for args in (["import", f"{fixtures}/openai-chat/SWE-agent__SWE-agent__function_calling_replace_from_source__marshmallow-1867.traj"],
                 ["watch", "--once", f"{fixtures}/claude-code"], ["search", "x"]):
        p = subprocess.run(["sh", "-c", 'umask 022; exec "$@"', "sh", sys.executable, "-m", "ctape", "--dir", str(tape_dir), *args],
                           env=env, capture_output=True)
        assert p.returncode == 0, (args, p.stderr)
    seen = 0
    for root, dirs, files in os.walk(cache):
        for n in [root, *(os.path.join(root, f) for f in files)]:
            assert os.lstat(n).st_mode & 0o077 == 0, (n, oct(os.lstat(n).st_mode))
            seen += 1
    assert seen > 5 and any(cache.rglob("watch.json")) and any(cache.rglob("watch-layouts/*"))


# -- found by an audit (2026-12-05) ------------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", "-5", "0", "1e6"])
@pytest.mark.parametrize("command", [["import", "{fixture}", "-s", "m"], ["watch", "--once", "{folder}"], ["stream", "-s", "m"]])
def test_a_bad_record_limit_is_refused_as_bad_input(chat, tmp_path, value, command):
    """$CTAPE_MAX_RECORD that is not a positive number of bytes was an internal error
    ("invalid literal for int()"), said once per file by watch, and -5 or 0 refused every
    line as "longer than -5 bytes"."""
    tape_dir, _ = chat
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "t.jsonl").write_text('{"type": "user", "uuid": "u1", "sessionId": "s", "message": {"role": "user", "content": "hi"}}\n')
    args = [a.format(fixture=folder / "t.jsonl", folder=folder) for a in command]
    err = rejected(tape_dir, *args, code=2, input=b"", env={"CTAPE_MAX_RECORD": value})
    assert "CTAPE_MAX_RECORD must be a positive whole number of bytes" in err, err


def test_allow_secrets_without_remote_is_a_usage_error(chat):
    """`compact --allow-secrets` ran a local compaction and ignored the flag (help: "With
    --remote: ...")."""
    tape_dir, _ = chat
    err = rejected(tape_dir, "compact", "--allow-secrets", code=2)
    assert "--allow-secrets goes with --remote" in err


def test_a_delta_that_is_not_an_object_is_taken_and_said(chat):
    """A merge patch that is not an object replaces the whole state (RFC 7396), as the API
    keeps it; on the command line `--delta 5` for `--delta '{"k": 5}'` wiped the state
    unsaid. It is still taken, with a warning that says what it did and how to set keys."""
    tape_dir, _ = chat
    run_cli("--dir", tape_dir, "append", "user", "--text", "x", "-s", "chat", "--delta", '{"cwd": "/repo"}', check=True)
    p = run_cli("--dir", tape_dir, "append", "user", "--text", "y", "-s", "chat", "--delta", "5", check=True)
    assert p.stderr.decode().startswith("ctape: warning: --delta '5' is not a JSON object: it replaces the whole state"), p.stderr
    assert run_cli("--dir", tape_dir, "state", "-s", "chat", check=True).stdout.strip() == b"5"
    for quiet in ('{"a": 1}', "null"):
        p = run_cli("--dir", tape_dir, "append", "user", "--text", "z", "-s", "chat", "--delta", quiet, check=True)
        assert p.stderr == b"", (quiet, p.stderr)


def test_small_refusals_and_better_advice(chat, tmp_path):
    """Found by an audit: a repeated --meta key kept the last silently; `redact --kind ''`
    wrote the marker `[redacted: ]`; a folder remote inside the tape was taken (push then
    failed on the tape's own files); `--dir` a folder inside a tape said to run `ctape
    init` there, which is refused; an unknown entry prefix said no next step; RFC 3339's
    lower-case t and z were refused."""
    tape_dir, _ = chat
    assert "--meta a is given twice" in rejected(tape_dir, "append", "user", "--text", "x", "-s", "chat", "--meta", "a=b", "--meta", "a=c", code=2)
    for kind in ("", "Bad Kind", "x" * 41):
        assert "bad kind" in rejected(tape_dir, "redact", "--pattern", "one", "--kind", kind, "-s", "chat", code=2)
    for inside in (tape_dir, os.path.join(tape_dir, "sessions", "x")):
        assert "inside this tape's folder" in rejected(tape_dir, "remote", "add", "self", f"file://{inside}", code=2)
    before = snapshot(tape_dir)
    p = run_cli("--dir", os.path.join(tape_dir, "sessions"), "log")
    err = check_rejected(p, 1)
    assert f"inside the tape {tape_dir}" in err and f"pass --dir {tape_dir}" in err and "ctape init" not in err, err
    assert snapshot(tape_dir) == before
    assert "`ctape log` shows the entries" in rejected(tape_dir, "show", "deadbeef", "-s", "chat", code=1)
    p = run_cli("--dir", tape_dir, "append", "user", "--text", "late", "-s", "chat", "--time", "2026-01-02t03:04:05z", check=True)
    shown = run_cli("--dir", tape_dir, "show", p.stdout.decode().strip(), "--json", check=True).stdout
    assert b'"2026-01-02T03:04:05.000000Z"' in shown


def test_a_full_disk_under_the_output_is_the_outputs(chat):
    """`export ... > /dev/full` said "no space left on the device; free space and retry", as
    if the tape's disk were full; log and show named the output."""
    tape_dir, _ = chat
    with open("/dev/full", "wb") as full:
        p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "export", "chat"], stdout=full, stderr=subprocess.PIPE)
    err = p.stderr.decode()
    assert p.returncode == 1 and err.startswith("ctape: error: cannot write the output: no space left on the device"), err
    # a command that only reads says nothing changed (it told you to look with `ctape log`: audit)
    assert "nothing in the tape changed" in err and "ctape log" not in err, err


def test_clone_into_an_empty_name_is_a_usage_error(tmp_path):
    """(audit, 2026-12-07) `clone URL ''` took '' for the current folder ("not empty")."""
    p = run_cli("clone", f"file://{tmp_path}/remote", "", cwd=tmp_path)
    assert p.returncode == 2 and b"'DIR': is empty" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
