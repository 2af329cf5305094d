"""Fixes from a CLI audit: each case runs the real command (a subprocess, as the user
runs it) and checks its exit status, its one-line message, and that a refused command
leaves the tape byte-identical.

1. `import FORMAT FILE...` checks every file before writing anything.
2. Closed stdin or stdout: one line, exit 2, nothing written.
3. A ref that needs a session, with several sessions and none chosen: the error that
   lists them (exit 2); a hash or hash prefix still needs no session.
4. `branch -d/-D` takes one name (as `tag -d`).
5. `session use PREFIX` names the session it chose.
6. `stream` with invalid UTF-8 records nothing, unless a flush already put part of it on
   disk: then it keeps the text before the bad byte, and says so.
7. `export`, `show`, `state`, `context` of a damaged session warn as `log` does.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading

import pytest

from ctape import Tape

from conftest import run_cli, snapshot

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "transcripts"
CODEX = FIXTURES / "codex-rollout" / "madshn__localpush__rollout-2026-02-23T13-19-38-019c8a70-dda7-7f33-98ea-f30553347322.jsonl"
CLAUDE = FIXTURES / "claude-code" / "daaain__claude-code-log__fe869ecb-c176-478f-9734-7e4b8ef12cff.jsonl"


def one_line_error(p, *words):
    err = p.stderr.decode()
    assert err.count("\n") == 1 and err.startswith("ctape: error: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    for w in words:
        assert w in err, err
    return err


def run_closed(fd, *args, input=None):
    """`ctape ARGS` with descriptor `fd` (0 or 1) closed, as `<&-` or `>&-` in a shell."""
    return subprocess.run(
        [sys.executable, "-m", "ctape", *map(str, args)],
        input=input,
        stdout=subprocess.PIPE if fd != 1 else None,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.close(fd),
    )


def add(tape_dir, session, *texts):
    t = Tape.open(tape_dir)
    out = [t.session(session).append("user", {"content": x}).hash for x in texts]
    t.close()
    return out


# -- 1. import: every file is checked before anything is written ------------------------------


@pytest.fixture
def files(tmp_path):
    good = tmp_path / "good.jsonl"
    shutil.copy(CODEX, good)
    bad = tmp_path / "bad.txt"
    bad.write_text("not a transcript\n")
    cc = tmp_path / "cc.jsonl"
    shutil.copy(CLAUDE, cc)
    return good, bad, cc


@pytest.mark.parametrize("fmt", [["codex"], []], ids=["named", "detected"])
def test_import_refuses_a_later_bad_file_before_writing(tape_dir, files, fmt):
    good, bad, _ = files
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "import", *fmt, good, bad, "-s", "s")
    assert p.returncode == 2
    one_line_error(p, "bad.txt")
    assert snapshot(tape_dir) == before


def test_import_named_format_refuses_a_file_of_another_format(tape_dir, files):
    good, _, cc = files
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "import", "codex", good, cc, "-s", "s")
    assert p.returncode == 2
    one_line_error(p, "cc.jsonl", "not a codex transcript", "claude-code", "nothing was imported")
    assert snapshot(tape_dir) == before


def test_import_named_format_checks_stdin_and_files_together(tape_dir, files):
    good, bad, _ = files
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "import", "codex", "-", bad, "-s", "s", input=good.read_bytes())
    assert p.returncode == 2
    one_line_error(p, "bad.txt")
    assert snapshot(tape_dir) == before
    p = run_cli("--dir", tape_dir, "import", "codex", "-", good, "-s", "s", input=good.read_bytes())
    assert p.returncode == 0, p.stderr
    assert b"nothing new in" in p.stderr  # the second copy of the same records adds nothing


# -- 2. closed stdin and stdout -------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["append", "user", "--text", "-s", "s"], ["append", "user", "-s", "s"], ["import", "codex", "-", "-s", "s"], ["stream", "-s", "s"]],
    ids=["append-text", "append-json", "import", "stream"],
)
def test_closed_stdin_is_one_line_and_writes_nothing(tape_dir, args):
    before = snapshot(tape_dir)
    p = run_closed(0, "--dir", tape_dir, *args)
    assert p.returncode == 2
    one_line_error(p, "stdin is closed")
    assert p.stdout == b""
    assert snapshot(tape_dir) == before


@pytest.mark.parametrize(
    "args",
    [["log", "-s", "s"], ["show", "s"], ["export", "s"], ["state", "-s", "s"], ["context", "-s", "s"], ["status", "-s", "s"],
     ["sessions"], ["reflog", "s"], ["branch", "-s", "s"], ["tag", "-s", "s"],
     # these exited 0 with their output gone (found by an audit); an append's hash too
     ["search", "hello"], ["stats"], ["usage"], ["diff", "s", "s"], ["remote", "list"], ["append", "user", "--text", "x", "-s", "s"]],
    ids=lambda a: " ".join(a[:2]),
)
def test_closed_stdout_is_one_line(tape_dir, args):
    add(tape_dir, "s", "hello")
    before = snapshot(tape_dir)
    p = run_closed(1, "--dir", tape_dir, *args)
    assert p.returncode == 2
    one_line_error(p, "stdout is closed")
    assert snapshot(tape_dir) == before


# -- 3. a ref that needs a session -----------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["show", "HEAD"], ["show", "HEAD@{1}"], ["show", "HEAD~1"], ["show", "main"], ["diff", "main", "main"], ["log", "HEAD"],
     ["state", "main"], ["context", "HEAD"]],
    ids=lambda a: " ".join(a),
)
def test_a_ref_that_needs_a_session_lists_the_sessions(tape_dir, args):
    add(tape_dir, "a", "one", "two")
    add(tape_dir, "b", "three")
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, *args)
    assert p.returncode == 2
    one_line_error(p, "several sessions (a, b)", "-s NAME")
    assert snapshot(tape_dir) == before


def test_a_hash_or_prefix_needs_no_session(tape_dir):
    one, two = add(tape_dir, "a", "one", "two")
    add(tape_dir, "b", "three")
    for ref in (two, two[:10], f"{two}~1", "a", "a/main~1", "a@{1}"):
        p = run_cli("--dir", tape_dir, "show", ref, "--json")
        assert p.returncode == 0, (ref, p.stderr)
        assert json.loads(p.stdout)["hash"] in (one, two)
    p = run_cli("--dir", tape_dir, "log", two, one, "--oneline")
    assert p.returncode == 0, p.stderr
    p = run_cli("--dir", tape_dir, "show", "HEAD", "-s", "a", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["hash"] == two


def test_diff_asks_for_a_session_when_its_second_ref_needs_one(tape_dir):
    one, two = add(tape_dir, "a", "one", "two")
    add(tape_dir, "b", "three")
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "diff", one, "main")
    assert p.returncode == 2
    one_line_error(p, "'main' needs a session", "several sessions (a, b)")
    assert snapshot(tape_dir) == before
    assert run_cli("--dir", tape_dir, "diff", one, "a/main").returncode == 0


# -- 4. branch -d takes one name ---------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["-d", "-D"])
def test_branch_delete_refuses_more_names(tape_dir, flag):
    add(tape_dir, "s", "one")
    for b in ("a", "b"):
        assert run_cli("--dir", tape_dir, "branch", b, "-s", "s").returncode == 0
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "branch", flag, "a", "b", "-s", "s")
    assert p.returncode == 2
    one_line_error(p, f"{flag} takes one branch name")
    assert snapshot(tape_dir) == before
    p = run_cli("--dir", tape_dir, "branch", flag, "a", "-s", "s")
    assert p.returncode == 0, p.stderr
    names = {json.loads(x)["name"] for x in run_cli("--dir", tape_dir, "branch", "-s", "s", "--json").stdout.splitlines()}
    assert names == {"main", "b"}


# -- 5. session use PREFIX -------------------------------------------------------------------------


def test_session_use_prefix_prints_the_session_it_chose(tape_dir):
    add(tape_dir, "early", "one")
    add(tape_dir, "other", "two")
    p = run_cli("--dir", tape_dir, "session", "use", "earl")
    assert p.returncode == 0, p.stderr
    assert p.stderr.decode() == "default session is now early\n"
    rows = [json.loads(x) for x in run_cli("--dir", tape_dir, "sessions", "--json").stdout.splitlines()]
    assert [r["session"] for r in rows if r["current"]] == ["early"]


# -- 6. stream: invalid UTF-8 ---------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"hello \xff world", "h\u00e9llo \u00e9".encode()[:-1] + b"(", "caf\u00e9".encode("latin-1")])
def test_stream_piped_whole_with_a_bad_byte_records_nothing(tape_dir, data):
    """SPEC 12: non-UTF-8 text on stdin is a clear error and changes nothing, a bad byte
    after valid text (or inside a multibyte character) as much as one at the start."""
    run_cli("--dir", tape_dir, "append", "user", "--text", "hi", "-s", "s")
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "stream", "-s", "s", input=data)
    assert p.returncode == 2
    err = one_line_error(p, "not valid UTF-8 at character", "nothing was recorded")
    assert "kept" not in err
    assert snapshot(tape_dir) == before


def test_a_live_stream_cut_by_a_bad_byte_keeps_what_was_on_disk(tape_dir):
    """Once a flush has put part of a live stream on disk, a bad byte cuts it off as a kill
    would: the text before it is kept as one streaming entry, and the error says so."""
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "stream", "-s", "s", "--interval", "0.05"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write("h\u00e9llo ".encode())
    p.stdin.flush()
    for _ in range(600):  # until a flush has put it on disk: status reports the interrupted stream
        st = json.loads(run_cli("--dir", tape_dir, "status", "-s", "s", "--json").stdout or b"{}")
        if (st.get("interrupted_stream") or {}).get("content") == "h\u00e9llo ":
            break
        threading.Event().wait(0.05)
    else:
        p.kill()
        raise AssertionError("the stream never flushed")
    out, err = p.communicate(b"world \xff more")
    assert p.returncode == 2
    one_line_error(subprocess.CompletedProcess([], 2, out, err), "not valid UTF-8 after 12 characters", "was kept as a streaming entry")
    (line,) = run_cli("--dir", tape_dir, "log", "-s", "s", "--json").stdout.splitlines()
    e = json.loads(line)
    assert e["kind"] == "streaming" and e["payload"] == {"content": "h\u00e9llo world "}


def test_stream_that_starts_with_a_bad_byte_records_nothing_and_says_so(tape_dir):
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "stream", "-s", "s", input=b"\xffhello")
    assert p.returncode == 2
    err = one_line_error(p, "not valid UTF-8", "nothing was recorded")
    assert "kept" not in err
    assert snapshot(tape_dir) == before


# -- 7. damaged files: every reader warns --------------------------------------------------------------


@pytest.fixture
def damaged(tape_dir):
    add(tape_dir, "s", "one", "two", "three")
    (seg,) = sorted((tape_dir / "sessions" / "s").glob("*.seg"))
    data = bytearray(seg.read_bytes())
    data[-30] ^= 1
    seg.write_bytes(bytes(data))
    return tape_dir


WARNING = "ctape: warning: session 's' has damaged records in sessions/s/"


def test_export_of_a_damaged_session_warns(damaged):
    p = run_cli("--dir", damaged, "export", "s")
    assert p.returncode == 0, p.stderr
    err = p.stderr.decode()
    assert err.startswith(WARNING) and err.count("\n") == 1, err
    lines = [json.loads(line) for line in p.stdout.splitlines()]  # stdout stays JSON Lines
    assert [x["payload"]["content"] for x in lines if "payload" in x] == ["one", "two"]
    log = run_cli("--dir", damaged, "log", "-s", "s")
    assert log.returncode == 0 and log.stderr.decode() == err


@pytest.mark.parametrize("args", [["export", "s"], ["show", "s"], ["state", "-s", "s"], ["context", "-s", "s"]], ids=lambda a: a[0])
def test_readers_of_a_damaged_session_warn_as_log_does(damaged, args):
    run_cli("--dir", damaged, "log", "-s", "s")  # the first read after the damage meets it
    log = run_cli("--dir", damaged, "log", "-s", "s")
    assert log.returncode == 0 and log.stderr.decode().startswith(WARNING), log.stderr
    p = run_cli("--dir", damaged, *args)
    assert (p.returncode, p.stderr) == (log.returncode, log.stderr)


# -- from a black-box audit of the docs and bad inputs (2026-12-04) --------------------------


def test_empty_names_and_refs_are_their_own_errors(tape_dir, tmp_path):
    """An empty -s, --dir or REF (an unset variable in a script) is refused in one line,
    never read as "not given": `import -s ''` imported into the file's own session,
    `--dir ''` looked for a tape upwards, `show ''` and `checkout ''` asked for a session."""
    for s in ("a", "b"):
        run_cli("--dir", tape_dir, "append", "user", "--text", "hi", "-s", s, check=True)
    before = snapshot(tape_dir)
    one_line_error(run_cli("--dir", tape_dir, "import", "claude-code", CLAUDE, "-s", ""), "invalid session name ''")
    for cmd in (["show", ""], ["checkout", ""], ["log", ""], ["context", ""]):
        p = run_cli("--dir", tape_dir, *cmd)
        assert p.returncode != 0, cmd
        one_line_error(p, "empty ref")
    p = run_cli("--dir", "", "log", cwd=tape_dir)
    assert p.returncode == 2
    one_line_error(p, "--dir is empty")
    assert snapshot(tape_dir) == before
    # an empty CTAPE_SESSION is unset, as in every tool that reads variables
    p = run_cli("--dir", tape_dir, "log", "-s", "a", env={"CTAPE_SESSION": ""})
    assert p.returncode == 0, p.stderr


def test_a_path_that_cannot_be_read_says_what_is_wrong(tape_dir, tmp_path):
    one_line_error(run_cli("--dir", tape_dir, "import", ""), "cannot read '': no such file; check the path")
    one_line_error(run_cli("--dir", tape_dir, "import", tmp_path / "none.jsonl"), "no such file; check the path")
    (tmp_path / "remote").write_text("a file")
    run_cli("--dir", tape_dir, "remote", "add", "f", f"file://{tmp_path / 'remote'}", check=True)
    for cmd in ("push", "pull"):
        one_line_error(run_cli("--dir", tape_dir, cmd, "f"), "is a file, not a folder")
    p = run_cli("clone", f"file://{tmp_path / 'nowhere'}", tmp_path / "c")
    one_line_error(p, "does not exist; check the URL")


def test_output_that_cannot_be_written_after_an_append_says_it_was_recorded(tape_dir):
    """`append > /dev/full`: the entry is on the tape and only its hash could not be
    printed; the message said "free space and retry", which appends it twice."""
    with open("/dev/full", "wb") as full:
        p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "append", "user", "--text", "once", "-s", "s"],
                           stdout=full, stderr=subprocess.PIPE)
    assert p.returncode == 1
    one_line_error(p, "cannot write the output: no space left on the device", "before running it again")
    log = run_cli("--dir", tape_dir, "log", "-s", "s", "--oneline", check=True).stdout
    assert log.count(b"once") == 1, log
