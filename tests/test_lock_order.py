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
