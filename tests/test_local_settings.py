"""This machine's settings files in the cache folder (privacy.json, remotes.json) are read,
changed and written whole; two commands editing one at once each keep their change.

Forced interleaving: the first edit is paused between its read and its write while the
second runs in another thread. Before the lock, the second finished in that gap and the
first then wrote over it: `ctape scan --add-pattern` said the pattern was added, and later
scans and push's secret check never looked for it."""

import threading
import time

from ctape import Tape
from ctape.ops import scan as scanmod
from ctape.sync import remote


def _first_paused_between_read_and_write(read_module, read_name, first, second):
    """Run first() in a thread paused right after its read, then second() in another thread;
    let the first go on after the second had time to finish (it blocks, with the lock)."""
    real = getattr(read_module, read_name)
    paused, go = threading.Event(), threading.Event()

    def read(*args, **kw):
        out = real(*args, **kw)
        if threading.current_thread().name == "first" and not paused.is_set():
            paused.set()
            assert go.wait(30)
        return out

    setattr(read_module, read_name, read)
    try:
        a = threading.Thread(target=first, name="first")
        a.start()
        assert paused.wait(30)
        b = threading.Thread(target=second, name="second")
        b.start()
        time.sleep(0.5)  # without the lock the second edit is done by now
        go.set()
        a.join(30)
        b.join(30)
        assert not a.is_alive() and not b.is_alive()
    finally:
        setattr(read_module, read_name, real)


def _two_processes(tmp_path):
    """Two Tapes (as two processes would open it) on one tape and one cache folder."""
    d, cache = tmp_path / "t", str(tmp_path / "cache")
    Tape.init(d, cache_dir=cache).close()
    return Tape.open(d, cache_dir=cache), Tape.open(d, cache_dir=cache)


def test_two_privacy_edits_at_once_both_stay(tmp_path):
    ta, tb = _two_processes(tmp_path)
    _first_paused_between_read_and_write(
        scanmod, "load_settings",
        lambda: scanmod.allow(ta, "0123456789abcdef"),
        lambda: scanmod.add_pattern(tb, r"bluefalcon-\d+", "codename"),
    )
    got = scanmod.load_settings(ta)
    assert got == {"patterns": [{"kind": "codename", "regex": r"bluefalcon-\d+"}], "allowed": ["0123456789abcdef"]}


def test_two_remotes_added_at_once_both_stay(tmp_path):
    ta, tb = _two_processes(tmp_path)
    _first_paused_between_read_and_write(
        remote, "remotes",
        lambda: remote.add(ta.store, "one", f"file://{tmp_path}/r1"),
        lambda: remote.add(tb.store, "two", f"file://{tmp_path}/r2"),
    )
    assert sorted(remote.remotes(ta.store)) == ["one", "two"]
