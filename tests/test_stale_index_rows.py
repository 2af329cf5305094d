"""Rows of the shared index cache that name a file a compaction removed.

Processes that open one tape share its index cache. One of them may write rows from a
listing that is already old: it read a segment, another process's `compact` replaced
the segment by a pack (removed the file, rebuilt the cache), and then the first one
applied what it had read. Such rows name a file that is gone. Every reader of the cache
must take them for what they are (a stale cache, refreshed and read again, or skipped),
never for an object the tape holds, nor for damage or loss. The races are replayed at
their precise moment with hooks (as in tests/test_compact_race.py): real files, real
SQLite, a second Tape doing the compaction.
"""

import os

from ctape import Tape


def _doomed_value(tape_dir, cache_dir):
    """A session whose branch `doomed` held a large value, then was deleted: a compaction
    with expire=now drops the value. Written with a cache of its own, so that the shared
    cache has never seen these files. Returns the value."""
    t = Tape.init(tape_dir, cache_dir=cache_dir)
    s = t.session("chat")
    s.append("user", {"content": "kept"})
    s.branch("doomed")
    s.checkout("doomed")
    value = "only on doomed " * 200  # a blob of its own (BLOB_MIN)
    s.append("tool_result", {"call_id": "x", "output": value})
    s.checkout("main")
    s.delete_branch("doomed")
    t.close()
    return value


def _index_with_a_compaction_between_read_and_apply(tape_dir, shared):
    """A reader indexes the session's segment: it reads the file, then another process
    compacts (the segment goes, the value with it, and the shared cache is rebuilt), then
    the reader applies the rows it read, as a slow reader does."""
    reader = Tape.open(tape_dir, cache_dir=shared)
    store = reader.store
    scan, done = store._scan_file, []

    def scan_then_compact(rel, start):
        batch = scan(rel, start)
        if not done and rel.endswith(".seg"):
            other = Tape.open(tape_dir, cache_dir=shared)
            done.append(other.compact(expire="now", grace="now"))
            other.close()
        return batch

    store._scan_file = scan_then_compact
    try:
        store.refresh()
    finally:
        store._scan_file = scan
    assert done and done[0]["freed_objects"] >= 2, done
    return reader


def test_a_stale_object_row_is_not_taken_for_a_value_the_tape_holds(tmp_path):
    """The writer dedups a value against the index: a row left by a reader that read the
    value's segment before a compaction dropped it made the writer skip writing the value,
    and the new entry referred to nothing (its value lost)."""
    d, shared = str(tmp_path / "t"), str(tmp_path / "shared")
    value = _doomed_value(d, str(tmp_path / "own"))
    reader = _index_with_a_compaction_between_read_and_apply(d, shared)
    reader.close()
    w = Tape.open(d, cache_dir=shared)
    e = w.session("chat").append("tool_result", {"call_id": "y", "output": value})
    w.close()
    t = Tape.open(d, cache_dir=str(tmp_path / "fresh"))
    try:
        assert t.get(e.hash).payload["output"] == value
        assert t.fsck()["ok"], t.fsck()["problems"]
    finally:
        t.close()
