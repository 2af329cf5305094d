"""A Tape dropped without close() gives its file descriptors back (found by an audit).

The integrations invite a `TapeSession(id, path)` per request, and a Tape made per request
and left to the collector kept its segment's, its folder's and its index's descriptors
until the process ended: a server that did so failed with "too many open files" after
~500 requests at `ulimit -n` 1,024. A real process under a low limit."""

import subprocess
import sys

SCRIPT = r"""
import gc, os, resource, sys, ctape
resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
p = sys.argv[1]
ctape.Tape.init(p).session("s").append("user", {"content": "x"})
before = len(os.listdir("/proc/self/fd"))
for i in range(400):
    t = ctape.Tape.open(p)
    t.session("s").append("user", {"content": f"q{i}"})
    t.session("s").status()
    del t
    gc.collect()
print(before, len(os.listdir("/proc/self/fd")))
"""


def test_a_dropped_tape_closes_its_descriptors(tmp_path):
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "t")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    before, after = map(int, p.stdout.split())
    assert after <= before + 2, (before, after)


def test_read_entry_of_something_that_is_no_hash_is_a_ctape_error(tmp_path):
    """`read_entry("zz")` raised a bare ValueError, `read_entry(None)` a TypeError."""
    import pytest

    import ctape

    with ctape.Tape.init(tmp_path / "t") as t:
        h = t.session("s").append("user", {"content": "x"}).hash
        assert t.read_entry(h.upper()).hash == h
        for bad in ("zz", None, "Z" * 64, 5):
            with pytest.raises(ctape.errors.InvalidInput, match="full hash"):
                t.read_entry(bad)


def test_a_dropped_tape_is_let_go_without_a_lock(tmp_path):
    """The collector runs wherever an allocation falls: also while this thread holds the
    session's lock through another Tape. Closing the dropped one there waited for that lock
    for ever (its check of kept segments takes it): found by the suite, which hung. It
    lets go of its descriptors without taking any lock."""
    import threading

    import ctape

    p = tmp_path / "t"
    ctape.Tape.init(p).close()
    dropped = ctape.Tape.open(p)
    dropped.session("s").append("user", {"content": "kept segment"})
    live = ctape.Tape.open(p)
    done = []
    with live.store.writing("s"):  # this thread holds the session's lock
        th = threading.Thread(target=lambda: (dropped.store.__del__(), done.append(1)), daemon=True)
        th.start()
        th.join(20)
    assert done, "the dropped Tape waited for the session's lock"
    live.session("s").append("user", {"content": "after"})
    assert [e.payload["content"] for e in live.session("s").log()] == ["after", "kept segment"]
    live.close()
