"""Batches over several sessions beside `compact` and beside each other, with real processes.

A batch takes the lock of each session it writes when it comes to it and keeps it to its
end, in the order the caller writes. `compact` took every session's lock in sorted order,
waiting for each while holding the ones before: a batch that wrote s1 then s0 beside a
compaction hung both processes for good, and so did two batches writing s0, s1 and s1, s0
(flock sees no deadlock; found by an audit, which hit it on its first compaction). Now
compaction never waits while it holds a lock (`_lock_sessions`), and a batch that holds
some sessions waits for another one at most `BATCH_LOCK_WAIT` seconds, then raises
`ConflictError` and writes nothing.
"""

import json
import os
import subprocess
import sys
import textwrap
import time

from ctape import Tape

from conftest import run_cli

BATCHES = textwrap.dedent(
    """
    import json, random, sys, time
    import ctape, ctape.store.segment as seg
    from ctape import ConflictError
    seg.BATCH_LOCK_WAIT = float(sys.argv[4])
    d, order, n = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
    rng = random.Random(sys.argv[2])
    t = ctape.Tape.open(d)
    done = conflicts = 0
    while done < n:
        try:
            with t.batch():
                for s in order:
                    t.session(s).append("user", {"content": f"{sys.argv[2]} {done} " + "x" * rng.randint(10, 3000)})
                    time.sleep(rng.random() * 0.03)
        except ConflictError:
            conflicts += 1
            continue
        done += 1
    t.close()
    print(json.dumps({"done": done, "conflicts": conflicts}))
    """
)


def _start(tmp_path, d, order: str, n: int, wait: float = 60.0) -> subprocess.Popen:
    script = tmp_path / "batches.py"
    script.write_text(BATCHES)
    return subprocess.Popen([sys.executable, str(script), str(d), order, str(n), str(wait)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "CTAPE_CACHE_DIR": str(tmp_path / "cache")})


def _finish(p: subprocess.Popen, deadline: float, what: str) -> dict:
    try:
        out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError(f"{what} made no end: a deadlock")
    assert p.returncode == 0, err.decode()[-2000:]
    return json.loads(out)


def _tape(tmp_path):
    d = tmp_path / "t"
    t = Tape.init(d, cache_dir=tmp_path / "cache")
    for s in ("s0", "s1"):
        t.session(s).append("user", {"content": "seed"})
    t.close()
    return d


def _entries(d, tmp_path, s: str) -> int:
    t = Tape.open(d, cache_dir=tmp_path / "cache")
    try:
        return sum(1 for _ in t.session(s).log())
    finally:
        t.close()


def test_a_batch_writing_s1_then_s0_and_compact_both_finish(tmp_path):
    d = _tape(tmp_path)
    deadline = time.monotonic() + 120
    w = _start(tmp_path, d, "s1,s0", 150)
    env = {**os.environ, "CTAPE_CACHE_DIR": str(tmp_path / "cache")}
    compactions = 0
    while w.poll() is None and time.monotonic() < deadline:
        c = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(d), "compact", "--grace", "now"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _, err = c.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            c.kill()
            w.kill()
            raise AssertionError("compact made no end beside the batch: a deadlock")
        assert c.returncode == 0, err.decode()
        compactions += 1
    res = _finish(w, deadline, "the batches")
    assert res["done"] == 150 and compactions >= 3
    assert _entries(d, tmp_path, "s0") == _entries(d, tmp_path, "s1") == 151


def test_two_batches_in_opposite_orders_both_finish_and_write_whole_batches(tmp_path):
    d = _tape(tmp_path)
    deadline = time.monotonic() + 120
    a = _start(tmp_path, d, "s0,s1", 20, wait=0.2)
    b = _start(tmp_path, d, "s1,s0", 20, wait=0.2)
    ra, rb = _finish(a, deadline, "the batches s0, s1"), _finish(b, deadline, "the batches s1, s0")
    # every batch that ended without the error wrote both its entries; the refused ones none
    assert ra["done"] == rb["done"] == 20
    assert ra["conflicts"] + rb["conflicts"] > 0, "the two orders never met: the test shows nothing"
    assert _entries(d, tmp_path, "s0") == _entries(d, tmp_path, "s1") == 41


WATCH = textwrap.dedent(
    """
    import sys
    import ctape.store.segment as seg
    seg.BATCH_LOCK_WAIT = 0.1  # this side gives way first
    from ctape.cli import main
    main(["--dir", sys.argv[1], "watch", "--once", sys.argv[2]])
    """
)

HOLDER = textwrap.dedent(
    """
    import fcntl, json, os, sys, time
    import ctape, ctape.store.segment as seg
    from ctape import ConflictError
    seg.BATCH_LOCK_WAIT = 1.0
    d, first, second, flags = sys.argv[1:5]
    t = ctape.Tape.open(d)
    conflicts = 0

    def taken(session):  # does another process hold the session's lock now?
        fd = os.open(os.path.join(d, "sessions", session), os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    with t.batch():
        t.session(second).append("user", {"content": "held"})
        open(os.path.join(flags, "held"), "w").close()
        while not taken(first):  # the watch pass took the first session: it will want ours next
            time.sleep(0.002)
        try:
            t.session(first).append("user", {"content": "then"})
        except ConflictError:
            conflicts += 1
    t.close()
    print(json.dumps({"conflicts": conflicts}))
    """
)


def test_a_watch_pass_gives_way_whole_to_a_batch_in_the_other_order(tmp_path):
    """`ctape watch` imports many files in one batch. Beside a batch that holds the second
    session and waits for the first, the watch pass (holding the first, waiting for the
    second) must give way as a whole: its batch ends, so the other goes on. It took the
    ConflictError for one file's problem and went on with the pass, holding its locks (the
    other batch waited on, and timed out too when the pass was long) and writing the rest
    of its batch, where the error says a batch that ends with it writes nothing (found by
    a review). The files it gave up are imported by the next pass."""
    import shutil
    from pathlib import Path

    from test_watch import entry_hashes, session_of

    fixtures = Path(__file__).parent / "fixtures" / "transcripts" / "claude-code"
    src = tmp_path / "src"
    src.mkdir()
    files = [fixtures / "daaain__claude-code-log__cb2e607c-c758-415a-8b45-c49e4631906a.jsonl",
             fixtures / "daaain__claude-code-log__fe869ecb-c176-478f-9734-7e4b8ef12cff.jsonl"]
    for i, f in enumerate(files):
        shutil.copy(f, src / f"{i}-{f.name}")  # the pass takes them in this order
    first, second = (session_of(f, "claude-code") for f in files)
    # then more sessions, so the pass goes on well past the other batch's wait (a first pass
    # over many transcripts holds its batch for minutes)
    text = files[1].read_bytes()
    for i in range(80):
        (src / f"2-{i:02d}.jsonl").write_bytes(text.replace(second.encode(), f"00000000-0000-4000-8000-{i:012d}".encode()))
    d = _tape(tmp_path)
    env = {**os.environ, "CTAPE_CACHE_DIR": str(tmp_path / "cache")}
    for s in (first, second):  # both sessions exist, so the holder can write the second first
        run_cli("--dir", d, "append", "user", "--text", "start", "-s", s, env=env, check=True)
    (tmp_path / "h.py").write_text(HOLDER)
    (tmp_path / "w.py").write_text(WATCH)
    holder = subprocess.Popen([sys.executable, str(tmp_path / "h.py"), str(d), first, second, str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 90
    while not (tmp_path / "held").exists():
        assert time.monotonic() < deadline and holder.poll() is None, holder.stderr.read().decode()
        time.sleep(0.02)
    w = subprocess.run([sys.executable, str(tmp_path / "w.py"), str(d), str(src)], capture_output=True, env=env, timeout=90)
    res = _finish(holder, deadline, "the holder's batch")
    assert res["conflicts"] == 0, "the other batch had to give way too: the watch pass kept its locks"
    assert w.returncode == 1 and b"stayed locked" in w.stderr, w.stderr.decode()
    with Tape.open(d, cache_dir=tmp_path / "cache") as t:  # "a batch that ends with this error writes nothing"
        assert len(entry_hashes(t, first)) == 2, "the pass that gave way wrote part of its batch"  # start, then
    w = subprocess.run([sys.executable, str(tmp_path / "w.py"), str(d), str(src)], capture_output=True, env=env, timeout=90)
    assert w.returncode == 0, w.stderr.decode()
    fresh = tmp_path / "fresh"
    Tape.init(fresh, cache_dir=tmp_path / "cache2").close()
    run_cli("--dir", fresh, "watch", "--once", src, env={"CTAPE_CACHE_DIR": str(tmp_path / "cache2")}, check=True)
    with Tape.open(d, cache_dir=tmp_path / "cache") as ours, Tape.open(fresh, cache_dir=tmp_path / "cache2") as theirs:
        for s in (first, second):  # every entry the files make is in the tape (beside the start and the holder's)
            want = entry_hashes(theirs, s)
            assert want and want <= entry_hashes(ours, s), s


LONG_HOLDER = textwrap.dedent(
    """
    import os, sys, time
    import ctape
    d, flags = sys.argv[1], sys.argv[2]
    t = ctape.Tape.open(d)
    with t.batch():  # a batch kept open for a long time (an agent's whole run in one batch)
        t.session("s1").append("user", {"content": "held"})
        open(os.path.join(flags, "held"), "w").close()
        end = time.monotonic() + 40  # (a bound for the test itself: the code before waited all of it)
        while not os.path.exists(os.path.join(flags, "done")) and time.monotonic() < end:
            time.sleep(0.01)
    t.close()
    """
)


def test_a_batch_that_gave_way_to_a_long_batch_hears_of_it_in_bounded_time(tmp_path, monkeypatch):
    """A batch that holds s0 and waits for s1 gives way with ConflictError; before it says
    so it waits for s1 holding nothing (so that a retry at once goes through). That second
    wait had no end: beside a batch kept open for hours the caller heard nothing for hours,
    with the Tape's lock held (its other threads waited too; noted by the last review). It
    now ends after BATCH_LOCK_WAIT as the first one does."""
    import ctape.store.segment as seg
    from ctape import ConflictError

    d = _tape(tmp_path)
    env = {**os.environ, "CTAPE_CACHE_DIR": str(tmp_path / "cache")}
    (tmp_path / "h.py").write_text(LONG_HOLDER)
    holder = subprocess.Popen([sys.executable, str(tmp_path / "h.py"), str(d), str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "held").exists():
            assert time.monotonic() < deadline and holder.poll() is None, holder.stderr.read().decode()
            time.sleep(0.02)
        monkeypatch.setattr(seg, "BATCH_LOCK_WAIT", 0.3)
        t = Tape.open(d, cache_dir=tmp_path / "cache")
        start = time.monotonic()
        try:
            with t.batch():
                t.session("s0").append("user", {"content": "mine"})
                t.session("s1").append("user", {"content": "mine too"})
            raise AssertionError("the batch went through while another held s1")
        except ConflictError:
            took = time.monotonic() - start
        # 0.3-0.6 s for the first wait, 0.3 s for the second; the holder holds on 40 s or until told
        assert took < 20, f"the error came after {took:.1f} s: the wait for the holder's end had no limit"
        assert holder.poll() is None, "the holder ended first: the test shows nothing"
        assert [e.payload["content"] for e in t.session("s0").log()] == ["seed"]  # the batch wrote nothing
        t.close()
    finally:
        (tmp_path / "done").touch()
        holder.communicate(timeout=60)
    assert holder.returncode == 0


BUSY = textwrap.dedent(
    """
    import sys, time
    import ctape
    d, name, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    t = ctape.Tape.open(d)
    s = t.session(name)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with t.batch():  # an integration's step: the session's lock held for the step's length
            s.append("user", {"content": "step"})
            time.sleep(0.1)
    t.close()
    """
)


def test_compact_takes_every_lock_beside_sessions_that_are_always_busy(tmp_path):
    """Four processes keep their sessions' locks almost all the time (a 100 ms step, then
    the next at once). Compaction took a busy lock alone and tried the rest without waiting,
    so its swap waited for a moment when the other three were free together: minutes here
    (found measuring 8 writers appending without pause: 50 s). After a
    second of that it now takes them in order, waiting in the kernel for each (at most a
    few seconds while it holds the ones before, so that a batch waiting for one of those
    gets it first)."""
    d = tmp_path / "t"
    with Tape.init(d, cache_dir=tmp_path / "cache") as t:
        for s in ("s0", "s1", "s2", "s3"):
            t.session(s).append("user", {"content": "seed"})
    env = {**os.environ, "CTAPE_CACHE_DIR": str(tmp_path / "cache")}
    (tmp_path / "busy.py").write_text(BUSY)
    busy = [subprocess.Popen([sys.executable, str(tmp_path / "busy.py"), str(d), s, "150"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for s in ("s0", "s1", "s2", "s3")]
    try:
        time.sleep(3)  # all four busy
        assert all(p.poll() is None for p in busy)
        c = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(d), "compact", "--grace", "now"], env=env,
                           capture_output=True, timeout=60)  # the code before took minutes
        assert c.returncode == 0, c.stderr.decode()
        assert all(p.poll() is None for p in busy), "a busy process ended first: the test shows nothing"
    finally:
        for p in busy:
            p.kill()
            p.communicate()
    with Tape.open(d, cache_dir=tmp_path / "fresh") as f:
        assert f.fsck()["ok"]


def test_lock_waiting_is_bounded_and_leaves_the_signal_as_it_was(tmp_path):
    """files.lock_waiting: the kernel wait for a lock another process holds ends at its
    limit with False, takes the lock when it comes free within it, and leaves SIGALRM and
    the interval timer as they were (on the main thread and off it, where it polls)."""
    import signal
    import threading

    from ctape.store.files import lock_waiting

    folder = tmp_path / "f"
    folder.mkdir()
    hold = textwrap.dedent(
        """
        import fcntl, os, sys, time
        fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
        """
    )
    for seconds, want in ((30, False), (1.0, True)):
        p = subprocess.Popen([sys.executable, "-c", hold, str(folder), str(seconds)], stdout=subprocess.PIPE)
        assert p.stdout.readline() == b"held\n"
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            start = time.monotonic()
            assert lock_waiting(fd, 3.0) is want
            assert time.monotonic() - start < 10
            assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL and signal.getitimer(signal.ITIMER_REAL)[0] == 0
            if not want:
                out = []
                th = threading.Thread(target=lambda: out.append(lock_waiting(fd, 0.5)))
                th.start()
                th.join(30)
                assert out == [False]
        finally:
            os.close(fd)
            p.kill()
            p.wait()
