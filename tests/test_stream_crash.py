"""Interrupted streams, with real processes and real signals (SPEC section 6).

A slow writer (its own process) feeds numbered chunks to `ctape stream` every
~50 ms and logs the wall time at which each chunk was written. After a kill -9
the partial text must be a prefix of what was sent and hold everything sent
more than 0.5 s before the kill; `recover` (or the next append) turns it into
exactly one `streaming` entry whose parent is the HEAD the stream started from.
"""

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import run_cli

S = "chat"
WINDOW = 0.5  # SPEC: everything sent more than 0.5 s before a kill survives

# Chunk i as text. The middle dot is two bytes in UTF-8 and the slow writer
# splits every chunk inside it, so the stream must decode across reads.
def chunk(i: int) -> str:
    return f"<{i:04d}\u00b7>"


WRITER = textwrap.dedent(
    """
    import os, sys, time
    log = open(sys.argv[1], "a")
    n, delay, hold = int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "hold"
    for i in range(n):
        b = f"<{i:04d}\\u00b7>".encode()
        os.write(1, b[:6])          # cut inside the two-byte middle dot
        os.write(1, b[6:])
        log.write(f"{i} {time.time()!r}\\n")
        log.flush()
        time.sleep(delay)
    if hold:
        time.sleep(3600)            # keep the pipe open: no EOF
    """
)

PY_STREAMER = textwrap.dedent(
    """
    import sys, time
    import ctape
    d, s, logpath, n, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    tape = ctape.Tape.open(d)
    session = tape.session(s)
    log = open(logpath, "a")
    with session.stream() as w:
        for i in range(n):
            w.write(f"<{i:04d}\\u00b7>")
            log.write(f"{i} {time.time()!r}\\n")
            log.flush()
            time.sleep(0.05)
        if mode == "hold":
            time.sleep(3600)
        if mode == "raise":
            raise RuntimeError("model API went away")
    if mode == "normal":
        print(w.entry.hash)
    tape.close()
    """
)


# -- helpers ------------------------------------------------------------------------------


def cli(tape_dir, *args, **kw):
    return run_cli("--dir", tape_dir, *args, **kw)


def cli_json(tape_dir, *args):
    p = cli(tape_dir, *args, "--json")
    assert p.returncode == 0, p.stderr.decode()
    return json.loads(p.stdout)


def log_entries(tape_dir):
    p = cli(tape_dir, "log", "-s", S, "--json")
    assert p.returncode == 0, p.stderr.decode()
    return [json.loads(line) for line in p.stdout.decode().splitlines()]


def read_log(path):
    """[(chunk index, time written)] from a writer's log (a torn last line is ignored)."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2 and line.endswith("\n"):
                out.append((int(parts[0]), float(parts[1])))
    return out


def sent_text(log, extra=1):
    """Everything the writer may have sent: the logged chunks plus `extra` written but not yet logged."""
    n = (log[-1][0] + 1) if log else 0
    return "".join(chunk(i) for i in range(n + extra))


def required_text(log, t_kill):
    """What must survive: every chunk written more than WINDOW seconds before the kill."""
    return "".join(chunk(i) for i, t in log if t < t_kill - WINDOW)


def start_session(tape_dir):
    """A session with one entry: the HEAD the stream starts from."""
    p = cli(tape_dir, "append", "user", '{"content": "tell me a long story"}', "-s", S)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode().strip()


def wait_for_first_flush(tape_dir, proc, timeout=15.0):
    """Block until the stream process has persisted something (so it is up and running)."""
    from ctape import Tape

    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "the stream process died early"
        t = Tape.open(tape_dir)
        try:
            st = t.session(S).status()
        finally:
            t.close()
        part = st["interrupted_stream"]
        # a streaming entry at HEAD (recorded by an earlier round) is not this stream
        if part and not part.get("recorded") and part.get("content"):
            return
        time.sleep(0.05)
    raise AssertionError("the stream never flushed its first chunk")


def spawn_cli_stream(tape_dir, logpath, n=2000, delay=0.05, hold=True, extra_args=()):
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(logpath), str(n), str(delay), "hold" if hold else "eof"],
        stdout=subprocess.PIPE,
    )
    stream = subprocess.Popen(
        [sys.executable, "-m", "ctape", "--dir", str(tape_dir), "stream", "-s", S, *extra_args],
        stdin=writer.stdout,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    writer.stdout.close()  # only the stream holds the read end now
    return writer, stream


def spawn_py_stream(tape_dir, logpath, n=2000, mode="hold"):
    return subprocess.Popen(
        [sys.executable, "-c", PY_STREAMER, str(tape_dir), S, str(logpath), str(n), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def reap(*procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def kill9(proc):
    t_kill = time.time()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    return t_kill


def check_interrupted(tape_dir, logpath, t_kill):
    """status --json after a kill: a prefix of what was sent, holding everything older than 0.5 s."""
    log = read_log(logpath)
    st = cli_json(tape_dir, "status", "-s", S)
    part = st["interrupted_stream"]
    assert part is not None, st
    assert not part.get("recorded"), f"the killed stream left no partial: status shows the recorded {part}"
    content = part["content"]
    sent = sent_text(log)
    need = required_text(log, t_kill)
    assert sent.startswith(content), f"not a prefix of what was sent: {content[-40:]!r}"
    assert content.startswith(need), (
        f"lost text sent more than {WINDOW}s before the kill: have {len(content)} chars, need {len(need)}"
    )
    assert len(need) > 0, "the test killed too early to prove anything"
    return content


def check_recover(tape_dir, base, content):
    """recover records exactly one streaming entry after `base`; a second recover records nothing."""
    p = cli(tape_dir, "recover", "-s", S)
    assert p.returncode == 0, p.stderr.decode()
    hashes = p.stdout.decode().split()
    assert len(hashes) == 1
    entries = log_entries(tape_dir)
    streaming = [e for e in entries if e["kind"] == "streaming"]
    assert len(streaming) == 1
    (e,) = streaming
    assert e["hash"] == hashes[0]
    assert e["parent"] == base
    assert e["payload"] == {"content": content}
    assert entries[0]["hash"] == e["hash"], "HEAD moves to the recorded stream"

    again = cli(tape_dir, "recover", "-s", S)
    assert again.returncode == 0, again.stderr.decode()
    assert again.stdout.decode().strip() == ""
    assert log_entries(tape_dir) == entries
    st = cli_json(tape_dir, "status", "-s", S)
    assert st["head"] == e["hash"]
    assert st["interrupted_stream"]["content"] == content  # a streaming entry at HEAD is still interrupted
    return e


# -- kill -9 --------------------------------------------------------------------------------


def test_kill9_cli_stream_then_recover(tape_dir, tmp_path):
    base = start_session(tape_dir)
    logpath = tmp_path / "sent.log"
    writer, stream = spawn_cli_stream(tape_dir, logpath)
    try:
        wait_for_first_flush(tape_dir, stream)
        time.sleep(1.2)
        t_kill = kill9(stream)
    finally:
        reap(stream, writer)
    content = check_interrupted(tape_dir, logpath, t_kill)
    assert log_entries(tape_dir)[0]["hash"] == base, "a kill leaves no entry behind by itself"
    check_recover(tape_dir, base, content)


def test_kill9_cli_stream_at_random_instants(tape_dir, tmp_path):
    seed = int(os.environ.get("CTAPE_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    for round_ in range(4):
        session_base = start_session(tape_dir) if round_ == 0 else log_entries(tape_dir)[0]["hash"]
        logpath = tmp_path / f"sent-{round_}.log"
        writer, stream = spawn_cli_stream(tape_dir, logpath)
        try:
            wait_for_first_flush(tape_dir, stream)
            time.sleep(0.6 + rng.random() * 1.6)
            t_kill = kill9(stream)
        finally:
            reap(stream, writer)
        try:
            content = check_interrupted(tape_dir, logpath, t_kill)
            e = check_recover_many(tape_dir, session_base, content, round_ + 1)
        except AssertionError as err:
            raise AssertionError(f"round {round_}, CTAPE_TEST_SEED={seed}: {err}") from err
        assert e["parent"] == session_base


def check_recover_many(tape_dir, base, content, expected_streaming):
    p = cli(tape_dir, "recover", "-s", S)
    assert p.returncode == 0, p.stderr.decode()
    assert len(p.stdout.decode().split()) == 1
    entries = log_entries(tape_dir)
    streaming = [e for e in entries if e["kind"] == "streaming"]
    assert len(streaming) == expected_streaming, "one streaming entry per killed stream, never one per flush"
    assert entries[0]["kind"] == "streaming" and entries[0]["parent"] == base
    assert entries[0]["payload"]["content"] == content
    assert cli(tape_dir, "recover", "-s", S).stdout.decode().strip() == ""
    return entries[0]


def test_kill9_then_append_records_partial_first_once(tape_dir, tmp_path):
    base = start_session(tape_dir)
    logpath = tmp_path / "sent.log"
    writer, stream = spawn_cli_stream(tape_dir, logpath)
    try:
        wait_for_first_flush(tape_dir, stream)
        time.sleep(0.9)
        t_kill = kill9(stream)
    finally:
        reap(stream, writer)
    content = check_interrupted(tape_dir, logpath, t_kill)

    p = cli(tape_dir, "append", "user", '{"content": "are you still there?"}', "-s", S)
    assert p.returncode == 0, p.stderr.decode()
    user_hash = p.stdout.decode().strip()
    p = cli(tape_dir, "append", "assistant", '{"content": "yes"}', "-s", S)
    assert p.returncode == 0, p.stderr.decode()
    assert cli(tape_dir, "recover", "-s", S).stdout.decode().strip() == ""

    entries = log_entries(tape_dir)
    assert [e["kind"] for e in entries] == ["assistant", "user", "streaming", "user"]
    streaming = entries[2]
    assert streaming["parent"] == base
    assert streaming["payload"] == {"content": content}
    assert entries[1]["hash"] == user_hash and entries[1]["parent"] == streaming["hash"]
    st = cli_json(tape_dir, "status", "-s", S)
    assert st["interrupted_stream"] is None


def test_kill9_python_stream_writer(tape_dir, tmp_path):
    base = start_session(tape_dir)
    logpath = tmp_path / "sent.log"
    proc = spawn_py_stream(tape_dir, logpath)
    try:
        wait_for_first_flush(tape_dir, proc)
        time.sleep(0.5 + random.random())
        t_kill = kill9(proc)
    finally:
        reap(proc)
    content = check_interrupted(tape_dir, logpath, t_kill)
    check_recover(tape_dir, base, content)


def test_kill9_python_stream_then_python_append(tape_dir, tmp_path):
    from ctape import Tape

    base = start_session(tape_dir)
    logpath = tmp_path / "sent.log"
    proc = spawn_py_stream(tape_dir, logpath)
    try:
        wait_for_first_flush(tape_dir, proc)
        time.sleep(0.8)
        t_kill = kill9(proc)
    finally:
        reap(proc)
    content = check_interrupted(tape_dir, logpath, t_kill)
    t = Tape.open(tape_dir)
    try:
        s = t.session(S)
        e = s.append("user", {"content": "again"})
        s.append("user", {"content": "and again"})
        assert s.recover() == []
        kinds = [x.kind for x in s.log()]
        assert kinds == ["user", "user", "streaming", "user"]
        rec = t.get(e.parent)
        assert rec.kind == "streaming" and rec.parent == base and rec.payload == {"content": content}
    finally:
        t.close()


# -- signals that let the process clean up ----------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("interval", [None, "30"])
def test_sigterm_sigint_record_partial_at_once(tape_dir, tmp_path, sig, interval):
    """All text read so far is recorded at once, even before any periodic flush (--interval 30)."""
    base = start_session(tape_dir)
    logpath = tmp_path / "sent.log"
    n = 12
    extra = ("--interval", interval) if interval else ()
    writer, stream = spawn_cli_stream(tape_dir, logpath, n=n, delay=0.02, hold=True, extra_args=extra)
    try:
        deadline = time.time() + 15
        while len(read_log(logpath)) < n and time.time() < deadline:
            time.sleep(0.05)
        assert len(read_log(logpath)) == n
        time.sleep(1.0)  # let the stream read everything (startup included)
        assert stream.poll() is None
        stream.send_signal(sig)
        rc = stream.wait(timeout=10)
    finally:
        reap(stream, writer)
    assert rc != 0
    err = stream.stderr.read().decode()
    assert "Traceback" not in err and "the partial text was recorded" in err
    entries = log_entries(tape_dir)
    assert [e["kind"] for e in entries] == ["streaming", "user"]
    assert entries[0]["parent"] == base
    assert entries[0]["payload"] == {"content": "".join(chunk(i) for i in range(n))}
    assert cli(tape_dir, "recover", "-s", S).stdout.decode().strip() == ""
    assert len(log_entries(tape_dir)) == 2


def test_an_interrupt_before_any_text_says_nothing_was_recorded(tape_dir):
    base = start_session(tape_dir)
    stream = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "stream", "-s", S],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)  # started, waiting for its first text
        stream.send_signal(signal.SIGINT)
        rc = stream.wait(timeout=10)
    finally:
        stream.kill()
        stream.wait()
    err = stream.stderr.read().decode()
    assert rc == 130 and "Traceback" not in err
    assert "no text had arrived, so nothing was recorded" in err
    assert [e["hash"] for e in log_entries(tape_dir)] == [base]


def test_eof_appends_one_assistant(tape_dir, tmp_path):
    """A normal EOF appends one assistant entry and prints its hash."""
    base = start_session(tape_dir)
    logpath = tmp_path / "sent.log"
    n = 15
    writer, stream = spawn_cli_stream(tape_dir, logpath, n=n, delay=0.05, hold=False)
    try:
        out, err = stream.communicate(timeout=30)
    finally:
        reap(stream, writer)
    assert stream.returncode == 0, err.decode()
    printed = out.decode().split()
    assert len(printed) == 1
    entries = log_entries(tape_dir)
    assert [e["kind"] for e in entries] == ["assistant", "user"]
    assert entries[0]["hash"] == printed[0] and entries[0]["parent"] == base
    assert entries[0]["payload"] == {"content": "".join(chunk(i) for i in range(n))}
    st = cli_json(tape_dir, "status", "-s", S)
    assert st["interrupted_stream"] is None and st["head"] == printed[0]
    assert cli(tape_dir, "recover", "-s", S).stdout.decode().strip() == ""


def test_stream_into_new_session_then_kill(tape_dir, tmp_path):
    """A stream can start a session; while only the partial exists, status says head: null."""
    logpath = tmp_path / "sent.log"
    writer, stream = spawn_cli_stream(tape_dir, logpath)
    try:
        wait_for_first_flush(tape_dir, stream)
        time.sleep(0.8)
        t_kill = kill9(stream)
    finally:
        reap(stream, writer)
    content = check_interrupted(tape_dir, logpath, t_kill)
    st = cli_json(tape_dir, "status", "-s", S)
    # on branch main, as git's unborn branch: the recorded stream starts it there (it said
    # "branch": null with "detached": false; found by a contract audit)
    assert st["head"] is None and st["branch"] == "main" and st["detached"] is False, st
    listed = [json.loads(line) for line in run_cli("--dir", tape_dir, "sessions", "--json", check=True).stdout.splitlines()]
    assert [(r["session"], r["head"], r["branch"]) for r in listed] == [(S, None, "main")], listed
    e = check_recover(tape_dir, None, content)
    assert e["seq"] == 1
    assert cli_json(tape_dir, "status", "-s", S)["branch"] == "main"


def test_python_stream_normal_exit(tape_dir, tmp_path):
    """The block exits normally after several flushes: one assistant entry, no streaming entry."""
    base = start_session(tape_dir)
    p = spawn_py_stream(tape_dir, tmp_path / "a.log", n=16, mode="normal")
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err.decode()
    entries = log_entries(tape_dir)
    assert [e["kind"] for e in entries] == ["assistant", "user"]
    assert entries[0]["hash"] == out.decode().strip() and entries[0]["parent"] == base
    assert entries[0]["payload"] == {"content": "".join(chunk(i) for i in range(16))}


def test_python_stream_exception_records_partial(tape_dir, tmp_path):
    base = start_session(tape_dir)
    p = spawn_py_stream(tape_dir, tmp_path / "b.log", n=12, mode="raise")
    out, err = p.communicate(timeout=30)
    assert p.returncode != 0 and b"model API went away" in err
    entries = log_entries(tape_dir)
    assert [e["kind"] for e in entries] == ["streaming", "user"]
    assert entries[0]["parent"] == base
    assert entries[0]["payload"] == {"content": "".join(chunk(i) for i in range(12))}
    assert cli(tape_dir, "recover", "-s", S).stdout.decode().strip() == ""
    assert len(log_entries(tape_dir)) == 2


def test_a_second_stream_records_the_one_a_killed_writer_left_first(tape_dir):
    """SPEC 6: an interrupted stream becomes one `streaming` entry no later than the next
    write to the session, and a stream is one: the second stream, killed too, goes on after
    the first one's entry (not on a side branch beside it), and status names the newest."""
    cli(tape_dir, "append", "user", "--text", "q", "-s", S, check=True)
    for text in ("first partial", "second partial"):
        feeder = subprocess.Popen([sys.executable, "-c", f"import os, time; os.write(1, {text!r}.encode()); time.sleep(60)"], stdout=subprocess.PIPE)
        streamer = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "stream", "-s", S, "--interval", "0.05"], stdin=feeder.stdout)
        feeder.stdout.close()
        deadline = time.time() + 20
        while text not in json.dumps(cli_json(tape_dir, "status", "-s", S).get("interrupted_stream") or {}):
            assert time.time() < deadline, "the stream's text never reached the tape"
            time.sleep(0.05)
        streamer.send_signal(signal.SIGKILL)
        streamer.wait()
        feeder.kill()
        feeder.wait()
    status = cli_json(tape_dir, "status", "-s", S)
    assert "second partial" in json.dumps(status["interrupted_stream"])
    cli(tape_dir, "recover", "-s", S, check=True)
    entries = log_entries(tape_dir)
    assert [(e["kind"], e["payload"].get("content")) for e in entries] == [
        ("streaming", "second partial"), ("streaming", "first partial"), ("user", "q")]
    branches = cli(tape_dir, "branch", "-s", S, "--json", check=True).stdout.decode().splitlines()
    assert [json.loads(line)["name"] for line in branches] == ["main"]  # no stream-* branch beside it


# -- found by an audit (2026-12-05): a live stream is no interrupted one ----------------------------------


def test_a_live_stream_is_left_alone_by_another_tapes_write(tmp_path):
    """Another Tape (or process) writing to the session recorded a stream that was still
    being written as interrupted: its text came twice (a `streaming` entry, then the
    `assistant` one). A stream's writer holds a lock while it runs; only a stream whose
    lock is free is a dead writer's."""
    import ctape

    tape = ctape.Tape.init(tmp_path / "t")
    s = tape.session("s")
    s.append("user", {"content": "question"})
    with s.stream() as w:
        w.write("Hello ")
        w.flush()
        other = ctape.Tape.open(tape.path)
        other.session("s").append("tool_result", {"call_id": "x", "output": "log line"})
        st = other.session("s").status()["interrupted_stream"]
        assert st["live"] is True and st["content"] == "Hello " and not st["recorded"], st
        other.close()
        w.write("world")
    got = [(e.kind, e.payload.get("content", e.payload.get("output"))) for e in reversed(list(s.log()))]
    assert got == [("user", "question"), ("tool_result", "log line"), ("assistant", "Hello world")], got
    tape.close()


def test_a_stream_held_by_one_tape_is_not_live_on_another_tape_of_the_process(tmp_path):
    """The process's own locks were kept by stream id alone: a stream of another tape with
    the same id (a tape written with an id given, or a copy's record of it) was taken for
    live here, and its partial text never recorded. They are kept by tape and stream."""
    import ctape
    from ctape.history import stream

    a, b = ctape.Tape.init(tmp_path / "a"), ctape.Tape.init(tmp_path / "b")
    s = a.session("s")
    s.append("user", {"content": "question"})
    with s.stream() as w:
        w.write("Hello ")
        w.flush()
        assert stream.is_live(a.store, w.id)
        assert not stream.is_live(b.store, w.id)
    a.close()
    b.close()


def test_closing_the_tape_cuts_its_stream_as_a_death_would(tmp_path):
    """(audit, 2026-12-06) Tape.close() with a stream under way kept the stream's lock until
    the process ended (every other Tape saw it live, so `recover()` did nothing), took
    later writes silently and lost them. Now close() flushes what arrived and lets go of
    the lock: another Tape sees an interrupted stream and records it; the writer's later
    write and its end raise InvalidInput."""
    import ctape

    tape = ctape.Tape.init(tmp_path / "t")
    s = tape.session("s")
    s.append("user", {"content": "question"})
    w = s.stream(flush_interval=60)  # no flush of its own before the close
    w.__enter__()
    w.write("received before the close")
    tape.close()
    with pytest.raises(ctape.InvalidInput, match="Tape was closed"):
        w.write(" and after it")
    with pytest.raises(ctape.InvalidInput, match="Tape was closed"):
        w.__exit__(None, None, None)
    with ctape.Tape.open(tmp_path / "t") as other:
        st = other.session("s").status()["interrupted_stream"]
        assert st["live"] is False and st["content"] == "received before the close", st
        assert [e.payload["content"] for e in other.session("s").recover()] == ["received before the close"]
    # a block that fails on its own after the close ends with its own exception
    with ctape.Tape.open(tmp_path / "t") as t2:
        with pytest.raises(KeyError):
            with t2.session("s").stream() as w2:
                w2.write("x")
                t2.close()
                raise KeyError("the block's own")


def test_a_stream_killed_after_another_process_wrote_keeps_everything_it_flushed(tmp_path):
    """The other process's write recorded the live stream at its text so far and closed
    it; what the stream flushed after that was never read back once its writer was killed
    (fsync'd text lost). Now the write leaves the live stream open, and after the kill the
    next write records all of it."""
    import ctape

    p = str(tmp_path / "t")
    ctape.Tape.init(p).session("s").append("user", {"content": "go"})
    child = (
        "import ctape, sys, time\n"
        f"s = ctape.Tape.open({p!r}).session('s')\n"
        "with s.stream(flush_interval=0.05) as w:\n"
        "    w.write('part1 '); w.flush(); print('a', flush=True); sys.stdin.readline()\n"
        "    w.write('part2 '); w.flush(); print('b', flush=True); time.sleep(120)\n"
    )
    pr = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert pr.stdout.readline() == "a\n"
        t = ctape.Tape.open(p)
        t.session("s").append("user", {"content": "meanwhile"})
        assert t.session("s").status()["interrupted_stream"]["live"] is True  # left open: its writer runs
        t.close()
        pr.stdin.write("\n")
        pr.stdin.flush()
        assert pr.stdout.readline() == "b\n"
    finally:
        pr.kill()
        pr.wait()
    t = ctape.Tape.open(p)
    s = t.session("s")
    st = s.status()["interrupted_stream"]
    assert st["content"] == "part1 part2 " and st["live"] is False, st
    rec = s.recover()
    assert [e.payload["content"] for e in rec] == ["part1 part2 "]
    streamed = [e for b in s.refs().branches.values() for e in s.log(b) if e.kind == "streaming"]
    assert [e.payload["content"] for e in streamed] == ["part1 part2 "]  # once, whole
    t.close()


def test_a_chunk_with_a_lone_surrogate_is_refused_at_write_and_the_stream_goes_on(tmp_path):
    """A chunk holding a lone surrogate was taken; the flush thread then died on it (a
    traceback on stderr) and nothing written after it was kept, and the stream's end raised.
    It is refused where it is written, and the stream goes on. (Found by an audit.)"""
    import ctape

    tape = ctape.Tape.init(tmp_path / "t")
    s = tape.session("s")
    s.append("user", {"content": "q"})
    with s.stream(flush_interval=0.05) as w:
        w.write("A long answer... ")
        time.sleep(0.2)
        with pytest.raises(ctape.errors.InvalidInput, match="lone surrogate"):
            w.write("cut \ud83d emoji")
        time.sleep(0.2)
        w.write("and more text")
    assert [(e.kind, e.payload["content"]) for e in s.log()][0] == ("assistant", "A long answer... and more text")
    tape.close()


def test_a_surrogate_pair_split_between_two_chunks_is_joined(tmp_path):
    """Text cut by UTF-16 code units (JavaScript's strings) can end a chunk with the first
    half of an emoji; the second half begins the next chunk. The chunk was refused as a lone
    surrogate, and the character lost. The half is held back and joined: the entry and a flush
    in between see whole characters only."""
    import ctape

    tape = ctape.Tape.init(tmp_path / "t")
    s = tape.session("s")
    with s.stream(flush_interval=0.05) as w:
        w.write("smile \ud83d")
        assert w.content() == "smile "  # the half is not a character yet
        time.sleep(0.2)  # flushed in between: the partial record holds whole characters
        w.write("\ude00 and \ud83d\ude00 in one chunk, \U0001F600 as one")
    assert next(s.log()).payload["content"] == "smile \U0001F600 and \U0001F600 in one chunk, \U0001F600 as one"

    with s.stream() as w:
        w.write("a \ud83d")
        with pytest.raises(ctape.errors.InvalidInput, match="first half of a surrogate pair"):
            w.write("b")  # not the second half: refused, and the half dropped
        w.write("b")  # so the same chunk written again is taken
        w.write(" ends cut \ud83d")  # a half left at the end is not a character: dropped
    assert next(s.log()).payload["content"] == "a b ends cut "
    tape.close()


def test_a_live_stream_is_left_alone_by_a_process_with_another_cache_folder(tmp_path):
    """Found by an audit: the lock that shows a stream live was in the cache folder, so a
    process with another one (CTAPE_CACHE_DIR, an agent's `cache_dir=`) took the stream for
    a dead writer's, recorded it as interrupted, and its text came twice. The lock is in a
    folder of the user's now, whatever the cache."""
    import ctape

    tape = ctape.Tape.init(tmp_path / "t", cache_dir=str(tmp_path / "agent-cache"))
    s = tape.session("s")
    s.append("user", {"content": "question"})
    with s.stream() as w:
        w.write("Hello ")
        w.flush()
        p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(tmp_path / "t"), "append", "tool_result",
                            '{"call_id": "x", "output": "log line"}', "-s", "s"],
                           capture_output=True, env={**os.environ, "CTAPE_CACHE_DIR": str(tmp_path / "cli-cache")})
        assert p.returncode == 0 and b"interrupted stream" not in p.stderr, p.stderr.decode()
        w.write("world")
    got = [(e.kind, e.payload.get("content", e.payload.get("output"))) for e in reversed(list(s.log()))]
    assert got == [("user", "question"), ("tool_result", "log line"), ("assistant", "Hello world")], got
    tape.close()


def test_a_stream_locked_where_older_versions_kept_the_lock_is_live(tmp_path):
    """A ctape before 2026-12-07 streaming on this machine holds its lock in the cache folder:
    still live for this version; once let go, a dead writer's."""
    import fcntl

    import ctape
    from ctape.history import stream as streaming
    from ctape.store.localstate import cache_folder

    with ctape.Tape.init(tmp_path / "t") as tape:
        path = os.path.join(cache_folder(tape.store), "streams", "s0123456789.lock")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert streaming.is_live(tape.store, "s0123456789")
        os.close(fd)
        assert not streaming.is_live(tape.store, "s0123456789")


HOLDER = r"""
import sys, ctape
t = ctape.Tape.open(sys.argv[1])
s = t.session("s")
w = s.stream()
w.__enter__()
w.write("Hello ")
w.flush()
print("ready", flush=True)
sys.stdin.read()
"""


def test_a_live_stream_is_seen_whatever_the_writers_environment(tmp_path):
    """Found in review: the lock folder came from XDG_RUNTIME_DIR or TMPDIR, which differ
    between a desktop session, cron, ssh and a systemd service: a checker in another one
    looked elsewhere and took the stream for dead. The folders are fixed paths now, and a
    checker looks in each."""
    import ctape

    d = tmp_path / "t"
    with ctape.Tape.init(d) as t:
        t.session("s").append("user", {"content": "question"})
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "tmp").mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path / "run"), "TMPDIR": str(tmp_path / "tmp"),
           "CTAPE_CACHE_DIR": str(tmp_path / "other-cache")}
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(d)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        assert p.stdout.readline() == b"ready\n"
        with ctape.Tape.open(d) as t:
            assert t.session("s").status()["interrupted_stream"]["live"] is True
    finally:
        p.kill()
        p.wait()
    with ctape.Tape.open(d) as t:
        assert t.session("s").status()["interrupted_stream"]["live"] is False


def test_stream_of_nothing_records_nothing(tape_dir):
    """(audit, 2026-12-07) `my-llm-client | ctape stream` with the client missing (nothing
    on stdin): an empty assistant entry was appended, exit 0, and `context` left it out in
    silence. Now refused as `append` with nothing on stdin is, and the tape is unchanged."""
    from conftest import snapshot

    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "stream", "-s", "chat", input=b"")
    assert p.returncode == 2 and b"nothing arrived on stdin" in p.stderr, p.stderr
    assert snapshot(tape_dir) == before
