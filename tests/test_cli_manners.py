"""Small things a user meets at the terminal (found by an audit, 2026-12-05)."""

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from conftest import run_cli, snapshot
from ctape import Tape


def test_a_command_reading_stdin_at_a_terminal_says_so_and_reads_it(tmp_path):
    """`ctape append user -s chat` typed with the payload forgotten waited in silence; now
    one line on stderr says it reads the terminal, and what is typed there is the payload."""
    d = tmp_path / "t"
    Tape.init(d).close()
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(d), "append", "user", "-s", "chat"],
                         stdin=slave, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen, end = b"", time.monotonic() + 20
    while b"reading from the terminal" not in seen and time.monotonic() < end:
        if select.select([master], [], [], 0.2)[0]:
            seen += os.read(master, 1024)
    assert b"reading from the terminal (end with Ctrl-D" in seen, seen
    os.write(master, b'{"content": "typed"}\n\x04')  # Ctrl-D at the start of a line: end of input
    out, _ = p.communicate(timeout=30)
    os.close(master)
    assert p.returncode == 0 and len(out.strip()) == 64
    with Tape.open(d) as t:
        assert t.get("chat").payload == {"content": "typed"}


def test_piped_stdin_gets_no_such_line(tmp_path):
    d = tmp_path / "t"
    Tape.init(d).close()
    p = run_cli("--dir", d, "append", "user", "-s", "chat", input=b'{"content": "piped"}')
    assert p.returncode == 0 and p.stderr == b"", p.stderr


def test_reflog_refuses_two_sessions(tmp_path):
    """`reflog a -s b` printed a's log and ignored -s b; two sessions are a usage error,
    as other contradicting options are. $CTAPE_SESSION is a default, not a contradiction."""
    d = tmp_path / "t"
    with Tape.init(d) as t:
        t.session("a").append("user", {"content": "x"})
        t.session("b").append("user", {"content": "y"})
    p = run_cli("--dir", d, "reflog", "a", "-s", "b")
    assert p.returncode == 2 and b"two sessions" in p.stderr, p.stderr
    p = run_cli("--dir", d, "reflog", "a", "-s", "a")
    assert p.returncode == 0
    p = run_cli("--dir", d, "reflog", "a", "--json", env={"CTAPE_SESSION": "b"})
    import json

    rows = [json.loads(x) for x in p.stdout.splitlines()]
    assert p.returncode == 0 and rows and any(r["ref"] == "a/main" for r in rows) and not any(r["ref"].startswith("b/") for r in rows), p.stderr


def _at_a_terminal(args, env):
    """stdout of a real `ctape` process whose stdout is a terminal (a pty)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "ctape", *args], stdout=slave, stderr=subprocess.PIPE,
                         env={**os.environ, **env})
    os.close(slave)
    out = b""
    while True:
        try:
            r = select.select([master], [], [], 10)[0]
            chunk = os.read(master, 65536) if r else b""
        except OSError:  # the child closed its side
            chunk = b""
        if not chunk:
            break
        out += chunk
    p.wait(timeout=30)
    os.close(master)
    return out


def test_colours_only_where_a_terminal_shows_them(tmp_path):
    """Colours at a terminal; none with NO_COLOR, nor where TERM=dumb (which shows the
    escape codes as text; git leaves them out there too: an audit found them)."""
    d = tmp_path / "t"
    with Tape.init(d) as t:
        t.session("s").extend([("user", {"content": "hi"}), ("tool_call", {"call_id": "c", "name": "ls", "arguments": {}})])
    args = ["--dir", str(d), "log", "-s", "s", "--no-pager"]
    base = {"NO_COLOR": "", "TERM": "xterm"}
    assert b"\x1b[" in _at_a_terminal(args, base)
    assert b"\x1b[" not in _at_a_terminal(args, {**base, "TERM": "dumb"})
    assert b"\x1b[" not in _at_a_terminal(args, {**base, "NO_COLOR": "1"})


def test_watch_once_says_when_it_found_no_transcript(tmp_path):
    """A folder with no transcript (a wrong path, the tape itself) said nothing, as a pass
    with nothing new does; now one line says so. Nothing new stays silent."""
    d = tmp_path / "t"
    Tape.init(d).close()
    empty = tmp_path / "empty"
    empty.mkdir()
    p = run_cli("--dir", d, "watch", "--once", empty)
    assert p.returncode == 0 and b"watch: no transcript in" in p.stderr, p.stderr
    src = tmp_path / "src"
    src.mkdir()
    import shutil
    from pathlib import Path

    fixture = Path(__file__).parent / "fixtures" / "transcripts" / "claude-code"
    shutil.copy(sorted(fixture.glob("*.jsonl"))[0], src)
    assert b"imported" in run_cli("--dir", d, "watch", "--once", src).stderr
    p = run_cli("--dir", d, "watch", "--once", src)
    assert p.returncode == 0 and p.stderr == b"", p.stderr
    # a folder of other files (no transcript among them) is a wrong folder too: it was silent
    # because it had files (found by an audit of the docs)
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / "notes.jsonl").write_text('{"a": 1}\n')
    (wrong / "log.jsonl").write_text("plain text\n")
    p = run_cli("--dir", d, "watch", "--once", wrong)
    assert p.returncode == 0 and b"watch: no transcript in" in p.stderr and b"its 2 files are none ctape knows" in p.stderr, p.stderr
    shutil.copy(sorted(fixture.glob("*.jsonl"))[1], wrong)  # (another than src's: that one is on the tape)
    assert b"imported" in run_cli("--dir", d, "watch", "--once", wrong).stderr
    p = run_cli("--dir", d, "watch", "--once", wrong)  # a transcript there, nothing new: silent
    assert p.returncode == 0 and p.stderr == b"", p.stderr


def test_since_after_until_is_refused_with_the_way_round(tmp_path):
    """`log --since 2h --until 3d` printed nothing and said nothing (an audit): the two
    read the other way round, and no entry can be both."""
    d = tmp_path / "t"
    with Tape.init(d) as t:
        t.session("s").append("user", {"content": "hi"})
    from conftest import snapshot

    before = snapshot(d)
    p = run_cli("--dir", d, "log", "-s", "s", "--since", "2h", "--until", "3d")
    assert p.returncode == 2 and b"is later than --until" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert snapshot(d) == before
    p = run_cli("--dir", d, "log", "-s", "s", "--since", "3d", "--until", "2000-01-01")
    assert p.returncode == 2
    p = run_cli("--dir", d, "log", "-s", "s", "--since", "3d", "--json")
    assert p.returncode == 0 and b'"hi"' in p.stdout
    p = run_cli("--dir", d, "search", "hi", "--since", "2h", "--until", "3d")
    assert p.returncode == 2 and b"is later than --until" in p.stderr, p.stderr


def test_an_error_line_that_cannot_be_written_is_no_traceback(tmp_path):
    """stderr on a full disk: the one-line error fails to write; the exit code still says
    what happened, with no traceback written after it (found by an audit; strace fails the
    write for real)."""
    import shutil

    import pytest

    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("needs strace (.ci/run installs it)")
    d = tmp_path / "t"
    Tape.init(d).close()
    err = tmp_path / "err.txt"
    for n in (1, 2):
        with open(err, "wb") as f:
            p = subprocess.run([strace, "-f", "-qq", "-o", "/dev/null", "-P", str(err), "-e", "trace=write",
                                "-e", f"inject=write:error=ENOSPC:when={n}", "--",
                                sys.executable, "-m", "ctape", "--dir", str(d), "show", "deadbeef"], stderr=f, timeout=60)
        assert p.returncode in (1, 2) and b"Traceback" not in err.read_bytes(), (n, p.returncode, err.read_bytes())


def test_a_branch_reflog_ref_is_a_usage_error(tmp_path):
    """`SESSION/BRANCH@{N}` is a ref ctape does not have (@{N} follows a session or HEAD):
    bad usage, exit 2, as other malformed @{} refs; it was exit 1, "not found"."""
    d = tmp_path / "t"
    with Tape.init(d) as t:
        s = t.session("chat")
        s.append("user", {"content": "x"})
        s.branch("alt")
    p = run_cli("--dir", d, "show", "chat/alt@{1}")
    assert p.returncode == 2 and b"not a branch" in p.stderr and b"ctape reflog chat" in p.stderr, p.stderr
    assert run_cli("--dir", d, "show", "chat/HEAD@{0}").returncode == 0
    assert run_cli("--dir", d, "show", "chat@{0}").returncode == 0


def test_fsck_salvage_of_a_clean_read_only_tape_only_checks_it(tmp_path):
    """A clean tape needs no salvage, so `fsck --salvage` of a read-only one (a backup, a
    mount) checks it and exits 0; it refused, exit 1 (an audit). A damaged read-only tape is
    still refused, with nothing changed. A real read-only bind mount (needs root)."""
    import shutil

    import pytest

    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount(8) for a read-only bind mount")
    d = tmp_path / "t"
    with Tape.init(d) as t:
        t.session("s").extend([("user", {"content": f"m{i} " + "x" * 300}) for i in range(20)])
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "--bind", str(d), str(ro)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only here")
        env = {"CTAPE_CACHE_DIR": str(tmp_path / "cache")}
        p = run_cli("--dir", ro, "fsck", "--salvage", env=env)
        assert p.returncode == 0 and b"nothing to salvage" in p.stdout + p.stderr, p.stderr
    finally:
        subprocess.run(["umount", str(ro)], capture_output=True)
    seg = next((d / "sessions" / "s").glob("*.seg"))
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0xFF  # damage in the middle
    seg.write_bytes(bytes(data))
    subprocess.run(["mount", "--bind", str(d), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True)
        p = run_cli("--dir", ro, "fsck", "--salvage", env={"CTAPE_CACHE_DIR": str(tmp_path / "cache2")})
        assert p.returncode == 1 and b"read-only" in p.stderr, p.stderr
    finally:
        subprocess.run(["umount", str(ro)], capture_output=True)


def test_a_ref_past_the_root_says_how_many_entries_there_are_in_words(tape_dir):
    """`~N` past the root names what is before the base, counted in plain English (it said
    "only 1 entries" and "only 0 entries")."""
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        first = s.append("user", {"content": "one"}).hash
        second = s.append("user", {"content": "two"}).hash
        s.append("user", {"content": "three"})
    cases = {"HEAD~5": "HEAD has only 2 entries before it", f"{second[:12]}~2": f"{second[:12]} has only 1 entry before it",
             f"{first[:12]}~1": f"{first[:12]} has no entry before it"}
    for ref, said in cases.items():
        r = run_cli("--dir", tape_dir, "log", "-s", "s", ref)
        err = r.stderr.decode()
        assert r.returncode == 1 and err.count("\n") == 1 and f"goes past the root: {said}" in err, (ref, err)


def test_an_unknown_session_on_a_tape_of_one_names_it(tape_dir):
    with Tape.open(tape_dir) as t:
        t.session("solo").append("user", {"content": "hi"})
    r = run_cli("--dir", tape_dir, "log", "-s", "zzzzzz")
    assert r.returncode == 1 and "its only session is solo" in r.stderr.decode(), r.stderr


def test_counts_of_one_are_said_in_the_singular(tape_dir, tmp_path):
    """fsck, compact, `@{N}` past the ref log and an import that kept a line not JSON say
    "1 object", "1 file", "1 HEAD position", "1 line" (they said "1 objects", "1 files",
    "1 HEAD position(s)", "1 lines")."""
    with Tape.open(tape_dir) as t:
        t.session("a").append("user", {"content": "hi"})
    said = run_cli("--dir", tape_dir, "fsck").stderr.decode()
    assert "checked 1 object, 2 ref records in 1 file" in said, said
    said = run_cli("--dir", tape_dir, "compact", "--grace", "now").stdout.decode()
    assert said.startswith("kept 1 object ("), said
    r = run_cli("--dir", tape_dir, "log", "-s", "a", "HEAD@{5}")
    assert r.returncode == 1 and "the ref log has only 1 HEAD position\n" in r.stderr.decode(), r.stderr
    src = tmp_path / "t.jsonl"
    src.write_text('not json\n{"type":"user","message":{"role":"user","content":"x"},"uuid":"u1",'
                   '"timestamp":"2026-01-01T00:00:00Z","sessionId":"q"}\n')
    said = run_cli("--dir", tape_dir, "import", "claude-code", str(src), "-s", "q").stderr.decode()
    assert "kept 1 line that is not JSON as it is" in said, said
    for text in (said,):
        assert "(s)" not in text and " 1 lines" not in text


def test_git_ranges_and_exclusions_say_what_to_use_instead(tape_dir):
    """`log main..alt` and `log ^alt main` are git's ranges; ctape reads no range as a ref.
    They said "unknown ref" with a generic hint and "nothing before '^a'"; they now point
    at `diff` (audit, 2026-12-06)."""
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        s.append("user", {"content": "one"})
        s.branch("alt")
    r = run_cli("--dir", tape_dir, "log", "main..alt", "-s", "chat")
    err = r.stderr.decode()
    assert r.returncode == 1 and err.count("\n") == 1 and "A..B ranges are not read here: `ctape diff A B`" in err, err
    r = run_cli("--dir", tape_dir, "log", "^alt", "main", "-s", "chat")
    err = r.stderr.decode()
    assert r.returncode == 2 and "nothing before '^';" in err and "`ctape diff A B`" in err, err


def test_a_mistyped_command_reads_as_one_sentence(tape_dir):
    r = run_cli("--dir", tape_dir, "lgo")
    err = r.stderr.decode()
    assert r.returncode == 2 and "Did you mean 'log'? (see `" in err and "?;" not in err, err


def test_a_write_to_a_session_chosen_by_prefix_names_it(tape_dir):
    """`-s` takes a unique prefix (SPEC 13). A read shows what it read; `branch -D main -s
    chat` deleted a branch of `chat-long` and said nothing of whose (audit, 2026-12-06).
    Writes that move refs now say which session the prefix named; a whole name, or a read,
    says nothing more."""
    with Tape.open(tape_dir) as t:
        t.session("chat-long").append("user", {"content": "one"})
    for args in (["branch", "b1", "-s", "chat"], ["tag", "t1", "-s", "chat"], ["checkout", "b1", "-s", "chat"],
                 ["branch", "-D", "main", "-s", "chat"]):
        r = run_cli("--dir", tape_dir, *args)
        assert r.returncode == 0 and "note: -s chat is session chat-long" in r.stderr.decode(), (args, r.stderr)
    for args in (["branch", "b2", "-s", "chat-long"], ["log", "-s", "chat"], ["status", "-s", "chat"]):
        r = run_cli("--dir", tape_dir, *args)
        assert r.returncode == 0 and "note:" not in r.stderr.decode(), (args, r.stderr)


def test_branch_lists_a_detached_head_first_as_git_does(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        first = s.append("user", {"content": "one"}).hash
        s.append("user", {"content": "two"})
        s.checkout(first)
    lines = run_cli("--dir", tape_dir, "branch", "-s", "s", check=True).stdout.decode().splitlines()
    assert lines[0] == f"* (HEAD detached at {first[:12]})" and lines[1].startswith("  main "), lines


def test_ctrl_c_is_one_line_in_a_log_and_starts_a_line_at_a_terminal(tmp_path):
    """Ctrl-C during a command that waits (`import -` on an open pipe) printed a blank line
    first (click's own), so a script's log had an empty line before `ctape: error:
    interrupted`. Now the line comes alone, and at a terminal it starts after the `^C`
    the terminal echoed rather than beside it."""
    import signal

    d = tmp_path / "t"
    Tape.init(d).close()
    cmd = [sys.executable, "-m", "ctape", "--dir", str(d), "import", "-", "-s", "x"]
    keep_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731 - as from a terminal
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=keep_sigint)
    time.sleep(1.5)  # started, waiting for its input
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130 and err == b"ctape: error: interrupted\n", err

    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=slave, preexec_fn=keep_sigint)
    os.close(slave)
    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=30)
    seen, end = b"", time.monotonic() + 10
    while b"interrupted" not in seen and time.monotonic() < end:
        if select.select([master], [], [], 0.2)[0]:
            seen += os.read(master, 1024)
    os.close(master)
    assert p.returncode == 130 and seen.replace(b"\r", b"") == b"\nctape: error: interrupted\n", seen


def test_out_of_memory_is_one_line_that_says_so(tmp_path):
    """A transcript with one record of 60 MB imported under a memory limit said "internal
    error: MemoryError: ; ... report it" (found by an audit). It is one line naming the
    memory and what to do, exit 1, and the tape is as it was."""
    import json
    import resource
    import subprocess
    import sys

    limit = 200 << 20

    def run(*args):
        return subprocess.run([sys.executable, "-m", "ctape", *map(str, args)], capture_output=True,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))

    if run("--help").returncode != 0:
        pytest.skip("ctape does not start under a 200 MB address space here")
    src = tmp_path / "big.jsonl"
    src.write_text(json.dumps({"parentUuid": None, "type": "user", "uuid": "u1", "sessionId": "s", "cwd": "/p",
                               "timestamp": "2025-07-14T22:59:30.699Z", "message": {"role": "user", "content": "x" * 60_000_000}}) + "\n")
    d = tmp_path / "t"
    run_cli("init", d, check=True)
    before = snapshot(str(d))
    p = run("--dir", d, "import", "claude-code", src, "-s", "big")
    err = p.stderr.decode()
    assert p.returncode == 1 and err.count("\n") == 1 and "out of memory" in err and "ulimit -v" in err, err
    assert snapshot(str(d)) == before


def test_errors_that_left_a_new_user_stuck_say_what_to_do(tmp_path):
    """Found by an audit of the docs: `append tool-result --text` without a call id said the
    payload needs a 'call_id', with no payload to put it in; `usage --since 7d` on a tape
    whose usage is all older said "no token usage recorded", as if there were none."""
    d = tmp_path / "t"
    t = Tape.init(d)
    t.session("chat").append("assistant", {"content": "hi"}, meta={"usage": {"input_tokens": 10, "output_tokens": 5}},
                              time="2020-01-01T00:00:00Z")
    t.close()
    before = snapshot(d)
    p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(d), "append", "tool-result", "--text", "-s", "chat"],
                       input=b"out", capture_output=True)
    assert p.returncode == 2 and "--meta call_id=ID" in p.stderr.decode(), p.stderr.decode()
    assert snapshot(d) == before
    p = run_cli("--dir", d, "usage", "--since", "7d")
    assert p.returncode == 0 and "no token usage recorded since " in p.stderr.decode(), p.stderr.decode()
    assert "without --since" in p.stderr.decode()
    assert "10" in run_cli("--dir", d, "usage", check=True).stdout.decode()


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "latin-1"}, {"PYTHONIOENCODING": "ascii"},
                                 {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}], ids=["latin-1", "ascii", "C"])
def test_output_is_utf8_whatever_the_locale(tmp_path, env):
    """Under a latin-1 locale every command whose output held a "…" failed with an internal
    UnicodeEncodeError, and --json came out in latin-1 (found by an audit)."""
    d = tmp_path / "t"
    with Tape.init(d) as t:
        t.session("fr").append("user", {"content": "café " + "long enough that the one-line view has to shorten it " * 3})
    run_env = {**os.environ, **env}
    for args in (["log", "-s", "fr", "--oneline"], ["sessions"], ["status", "-s", "fr"], ["log", "-s", "fr", "--json"]):
        p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(d), *args], capture_output=True, env=run_env, timeout=60)
        assert p.returncode == 0 and b"Traceback" not in p.stderr and not p.stderr, (args, p.stderr)
        text = p.stdout.decode("utf-8")  # UTF-8, or this raises
        assert "café" in text, (args, text)
        if "--json" in args:
            import json

            assert json.loads(text)["payload"]["content"].startswith("café ")


def test_a_file_dated_1970_gives_its_untimed_records_the_time_they_are_read(tmp_path):
    """SPEC 10: records without a time get the file's time, never 1970. A file whose time is
    0 or 1 (the Nix store, reproducible archives) stamped them 1970 (found by an audit);
    a re-import gives the same entries."""
    d = tmp_path / "t"
    Tape.init(d).close()
    src = tmp_path / "run.json"
    src.write_text('[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]')
    os.utime(src, (1, 1))
    run_cli("--dir", d, "import", src, "-s", "r", check=True)
    with Tape.open(d) as t:
        times = [e.time for e in t.session("r").log()]
    assert times and all(x >= "2026" for x in times), times
    again = run_cli("--dir", d, "import", src, "-s", "r", check=True)
    assert b"nothing new" in again.stderr


def test_the_cache_folder_from_odd_home_and_xdg_values(tmp_path):
    """A relative $XDG_CACHE_HOME is ignored (its spec says so: it made a cache per working
    folder); an empty $HOME is read from the user database (it put the cache at /.cache);
    a $HOME that does not exist is never made (a cache under /nonexistent appeared; the
    index goes to memory). Found by an audit."""
    import pwd

    from ctape.store.index import default_cache_root

    real_home = pwd.getpwuid(os.getuid()).pw_dir
    env = {k: v for k, v in os.environ.items() if k not in ("CTAPE_CACHE_DIR", "XDG_CACHE_HOME", "HOME")}
    probe = [sys.executable, "-c", "from ctape.store.index import default_cache_root; print(default_cache_root())"]
    for extra, want in (({"HOME": "", "XDG_CACHE_HOME": "relcache"}, os.path.join(real_home, ".cache", "ctape")),
                        ({"HOME": str(tmp_path), "XDG_CACHE_HOME": "relcache"}, os.path.join(str(tmp_path), ".cache", "ctape")),
                        ({"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "x")}, str(tmp_path / "x" / "ctape"))):
        got = subprocess.run(probe, env={**env, **extra}, capture_output=True, check=True, cwd=tmp_path).stdout.decode().strip()
        assert got == want, (extra, got)
    d = tmp_path / "t"
    with Tape.init(d, cache_dir=str(tmp_path / "c")) as t:
        t.session("s").append("user", {"content": "hi"})
    nohome = tmp_path / "nohome"
    p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(d), "log", "-s", "s", "--oneline"],
                       env={**env, "HOME": str(nohome)}, capture_output=True, timeout=60)
    assert p.returncode == 0 and b"hi" in p.stdout, p.stderr
    assert not nohome.exists()
    assert default_cache_root()  # (this process's own environment is left alone)


def test_a_removed_working_folder_is_named_as_the_cause(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    p = subprocess.run(["bash", "-c", f"cd {gone} && rmdir {gone} && exec {sys.executable} -m ctape log"],
                       capture_output=True, timeout=60, env={k: v for k, v in os.environ.items() if k != "CTAPE_DIR"})
    err = p.stderr.decode()
    assert p.returncode == 1 and err.count("\n") == 1 and "current folder" in err and "no longer exists" in err, err


def test_stats_names_the_tape_the_commands_here_use(tmp_path):
    """No command said which tape it used (the nearest .ctape/ upwards, $CTAPE_DIR or
    --dir): a user in a sub-folder of another project could not tell (found by an audit).
    `stats` names it first, as `git rev-parse --show-toplevel` names a repository."""
    import json

    Tape.init(tmp_path / ".ctape").close()
    sub = tmp_path / "src" / "deep"
    sub.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "CTAPE_DIR"}
    p = subprocess.run([sys.executable, "-m", "ctape", "stats"], cwd=sub, env=env, capture_output=True, check=True)
    first = p.stdout.decode().splitlines()[0]
    assert first.split(None, 1) == ["tape", str((tmp_path / ".ctape").resolve())], first
    p = subprocess.run([sys.executable, "-m", "ctape", "stats", "--json"], cwd=sub, env=env, capture_output=True, check=True)
    assert json.loads(p.stdout)["tape"] == str((tmp_path / ".ctape").resolve())
