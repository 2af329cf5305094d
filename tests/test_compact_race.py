"""compact beside writers whose single write takes long: a large value, a long batch.

A compaction that took its snapshot of file sizes while such a write was under way
cut the record in two, skipped it when packing and again when rescuing what came
later, then removed the file: the writer had printed its hash, and the entry's blob
was gone (issue 17, item 1). Every append a writer acknowledged must survive every
compaction, whatever it overlaps; real processes, default grace and `--grace now`.

Short here; `CTAPE_SLOW=1` runs each case for minutes (CTAPE_RACE_SECONDS sets how long).
"""

import os
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from ctape import Tape

SLOW = bool(os.environ.get("CTAPE_SLOW"))
SECONDS = float(os.environ.get("CTAPE_RACE_SECONDS", 300 if SLOW else 6))

# appends values of a few MB (incompressible: each write() stays large), one at a time
LARGE = r"""
import os, sys, time, ctape
path, session, seconds, size = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
s = ctape.Tape.open(path).session(session)
end = time.time() + seconds
i = 0
while time.time() < end or i < 3:
    e = s.append("tool_result", {"call_id": f"c{i}", "output": os.urandom(size // 2).hex()})
    print(e.hash, flush=True)
    i += 1
"""

# long batches of small appends: one large write() at the end of each
BATCH = r"""
import os, sys, time, ctape
path, session, seconds, n = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
t = ctape.Tape.open(path)
s = t.session(session)
end = time.time() + seconds
round_ = 0
while time.time() < end or round_ < 2:
    hashes = []
    with t.batch():
        for i in range(n):
            out = f"unique {round_} {i} " + os.urandom(24).hex() if i % 4 else "same output " * 50
            hashes.append(s.append("tool_result", {"call_id": f"b{i}", "output": out}).hash)
    print(" ".join(hashes), flush=True)
    round_ += 1
"""

COMPACT = r"""
import sys, time, ctape
path, grace, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
end = time.time() + seconds
rounds = 0
while time.time() < end or rounds < 2:
    t = ctape.Tape.open(path)
    t.compact(expire="now", grace=grace)
    t.close()
    rounds += 1
print(rounds)
"""


def _run(tape_dir, writers, grace):
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tape_dir), *map(str, args)], stdout=subprocess.PIPE, text=True) for code, args in writers]
    comp = subprocess.Popen([sys.executable, "-c", COMPACT, str(tape_dir), grace, str(SECONDS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked = []
    for (code, args), p in zip(writers, procs):
        out, _ = p.communicate(timeout=SECONDS + 600)
        assert p.returncode == 0
        acked.append((args[0], out.split()))
    out, err = comp.communicate(timeout=SECONDS + 600)
    assert comp.returncode == 0, err
    assert int(out) >= 2
    t = Tape.open(tape_dir)
    try:
        for session, hashes in acked:
            found = []
            for e in t.session(session).log():  # one at a time: the slow run's values are 40 MB each
                assert e.payload["output"]  # the entry and its blob read back (log reads both)
                found.append(e.hash)
            assert found[::-1] == hashes, f"{session}: acknowledged appends lost or out of order"
        report = t.fsck()
        assert report["ok"], report["problems"]
    finally:
        t.close()
    return sum(len(h) for _, h in acked)


@pytest.mark.parametrize("grace", ["14d", "now"])
def test_large_appends_beside_compactions(tape_dir, grace):
    # values of 6 MB here, 40 MB in the slow run: each append is one write() of that size,
    # long enough for a snapshot to fall inside it
    assert _run(tape_dir, [(LARGE, ("big", SECONDS, (40 if SLOW else 6) << 20))], grace) >= 3


@pytest.mark.parametrize("grace", ["14d", "now"])
def test_long_batches_beside_compactions(tape_dir, grace):
    assert _run(tape_dir, [(BATCH, ("batch", SECONDS, 20000)), (LARGE, ("big", SECONDS, 2 << 20))], grace) >= 2


def test_compact_inside_a_batch_is_refused(tape):
    s = tape.session("chat")
    s.append("user", {"content": "hi"})
    with pytest.raises(Exception) as exc:
        with tape.batch():
            s.append("user", {"content": "in a batch"})
            tape.compact()
    assert "batch" in str(exc.value)
    assert [e.payload["content"] for e in s.log()] == ["hi"]


def test_a_record_cut_by_the_snapshot_survives(tmp_path):
    """Deterministic form of the race: the bytes of one acknowledged append (a large
    object, then its block with the entry and the ref record) are half in the file when
    compact takes its snapshot, the rest arrives before the swap, as with a long write().
    Before the fix the record that straddled the snapshot was skipped when packing and
    when rescuing, and its file removed: the append was gone."""
    import shutil

    a, b = tmp_path / "a", tmp_path / "b"
    Tape.init(a).close()
    t = Tape.open(a)
    t.session("chat").append("user", {"content": "read the log"})
    t.close()
    shutil.copytree(a, b, symlinks=True)
    t = Tape.open(a)
    big = t.session("chat").append("tool_result", {"call_id": "c1", "output": os.urandom(1 << 20).hex()})
    t.close()
    # what that append added to A's files (a new segment, or the tail of the old one)
    new = {}
    for p in (a / "sessions" / "chat").iterdir():
        q = b / "sessions" / "chat" / p.name
        have = q.stat().st_size if q.exists() else 0
        if p.stat().st_size > have:
            new[q] = p.read_bytes()[have:]
    ((target, data),) = new.items()
    assert len(data) > 1 << 20
    cut = len(data) // 2
    with open(target, "ab") as f:
        f.write(data[:cut])  # under way when the snapshot is taken

    def progress(msg):
        if msg.startswith("compact: swapping"):
            with open(target, "ab") as f:
                f.write(data[cut:])  # done (and acknowledged) before the swap

    tb = Tape.open(b)
    tb.compact(expire="now", grace="now", progress=progress)
    tb.close()
    tb = Tape.open(b)
    try:
        assert tb.session("chat").head.hash == big.hash
        assert tb.get(big.hash).payload["output"] == big.payload["output"]
        assert tb.fsck()["ok"]
    finally:
        tb.close()


# -- a reader's rebuild beside a compaction (false "lost acknowledged records") ------------------
# A reader that finds files gone (a compaction replaced them) rebuilds its index from the
# files it lists. A compaction in another process may put its pack in place and remove the
# files it replaces between that listing and the reading: the index then held the claims of
# neither, they looked lost, and the session was marked as having lost acknowledged records,
# in the index cache its writers share: every write to it was refused until `fsck --salvage`,
# though nothing was lost.


def test_a_rebuild_during_a_compactions_swap_judges_no_loss(tmp_path):
    """Deterministic: the compaction runs right after the rebuild listed the files."""
    d = str(tmp_path / "t")
    reader = Tape.init(d, cache_dir=str(tmp_path / "c1"))
    for i in range(3):
        reader.session("chat").append("user", {"content": f"from the reader's process {i}"})
    other = Tape.open(d, cache_dir=str(tmp_path / "c2"))
    other.session("chat").append("assistant", {"content": "from another process"})
    other.compact(expire="now", grace="now")  # the reader's segment is gone: its next refresh rebuilds
    other.session("chat").append("user", {"content": "and one more"})
    store = reader.store
    scan, swapped = store._scan_file, []

    def scan_after_a_swap(rel, start):
        if not swapped:
            swapped.append(other.compact(expire="now", grace="now"))  # pack in, listed files out
        return scan(rel, start)

    store._scan_file = scan_after_a_swap
    try:
        store.refresh()
    finally:
        store._scan_file = scan
    assert swapped and swapped[0]["removed_files"] >= 2, swapped
    assert store.index.lost_rows() == []
    reader.session("chat").append("assistant", {"content": "the reader writes on"})  # was: CorruptObject
    texts = [e.payload["content"] for e in reader.session("chat").log()]
    assert texts == ["the reader writes on", "and one more", "from another process"] + [f"from the reader's process {i}" for i in (2, 1, 0)]
    other.close()
    reader.close()


READ_LOOP = r"""
import sys, time, ctape
path, seconds = sys.argv[1], float(sys.argv[2])
t = ctape.Tape.open(path)
end = time.time() + seconds
n = 0
while time.time() < end:
    t.store.refresh()  # as any read does: the index follows the files
    n += 1
assert t.store.index.lost_rows() == [], t.store.index.lost_rows()
print(n)
"""


def test_readers_beside_compactions_never_mark_a_session_lost(tape_dir):
    """Real processes sharing the index cache: a reader refreshing in a loop, a writer and a
    compaction in a loop. The writer is never refused, and nothing is marked lost."""
    Tape.init(tape_dir).close()
    reader = subprocess.Popen([sys.executable, "-c", READ_LOOP, str(tape_dir), str(SECONDS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    comp = subprocess.Popen([sys.executable, "-c", COMPACT, str(tape_dir), "now", str(SECONDS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    written = []
    end = time.time() + SECONDS
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        while time.time() < end:
            written.append(s.append("user", {"content": f"message {len(written)}"}).hash)
            time.sleep(0.005)
    out, err = reader.communicate(timeout=SECONDS + 600)
    assert reader.returncode == 0, err[-2000:]
    assert int(out) > 10
    out, err = comp.communicate(timeout=SECONDS + 600)
    assert comp.returncode == 0, err[-2000:]
    with Tape.open(tape_dir) as t:
        assert [e.hash for e in t.session("chat").log()] == written[::-1]
        assert t.store.index.lost_rows() == []


def test_a_deleted_branch_compacted_away_in_another_process_is_no_loss(tmp_path):
    """A compaction (expire=now) drops a branch's deletion with the claims it deleted: the
    ref has no claim left, and reads as it did (absent). A reader whose index still held
    those claims found them gone with the files and marked the session as having lost
    acknowledged records: writes to it were refused until `fsck --salvage`."""
    d = str(tmp_path / "t")
    reader = Tape.init(d, cache_dir=str(tmp_path / "c1"))
    s = reader.session("chat")
    s.append("user", {"content": "hi"})
    s.branch("side")
    s.checkout("side")
    s.append("user", {"content": "on side"})
    s.checkout("main")
    s.delete_branch("side")
    s.append("user", {"content": "on main"})
    other = Tape.open(d, cache_dir=str(tmp_path / "c2"))
    assert other.compact(expire="now", grace="now")["freed_objects"] >= 1
    other.close()
    reader.store.refresh()
    assert reader.store.index.lost_rows() == []
    s.append("assistant", {"content": "the reader writes on"})  # was: CorruptObject (lost acknowledged records)
    assert [e.payload["content"] for e in s.log()] == ["the reader writes on", "on main", "hi"]
    assert set(s.view().branches) == {"main"}
    reader.close()


@contextmanager
def stale_rebuild_after_refresh(writer: Tape, reader: Tape, listing: dict):
    """Inside: the writer's first refresh is followed at once by the reader's rebuild of the
    shared index cache from `listing` (a listing taken earlier, as by another process that
    then waited for the cache's write lock). Yields a list that is non-empty once it ran."""
    refresh, fired = writer.store.refresh, []

    def refresh_then_a_stale_rebuild(session=None):
        changed = refresh(session)
        if not fired:
            fired.append(1)
            real = reader.store.list_files
            reader.store.list_files = lambda session=None: dict(listing)
            try:
                reader.store._full_reindex()
            finally:
                reader.store.list_files = real
        return changed

    writer.store.refresh = refresh_then_a_stale_rebuild
    try:
        yield fired
    finally:
        writer.store.refresh = refresh


def test_a_rebuild_between_a_writers_refresh_and_its_refs_orphans_nothing(tmp_path):
    """A writer that found the session changed (a compaction) reads its refs from the index
    cache after bringing it up to date. Another process's rebuild may commit in between, from
    a listing taken before the writer's newest segment had its name: the index then lacked
    the claims that segment holds until the next refresh, and the writer took HEAD from what
    was left. Its next append got an older parent, and the entry before it fell off the
    history (seen once in a CI run of the real-process test above)."""
    d, cache = str(tmp_path / "t"), str(tmp_path / "cache")
    w = Tape.init(d, cache_dir=cache)
    s = w.session("chat")
    s.append("user", {"content": "a"})
    s.append("user", {"content": "b"})
    other = Tape.open(d, cache_dir=cache)
    other.compact(expire="now", grace="now")  # the writer's segment is gone: its next write reloads
    before_c = other.store.list_files(None)  # a listing taken before the writer's next segment
    s.append("user", {"content": "c"})  # a new segment
    reader = Tape.open(d, cache_dir=cache)
    os.utime(s.store.session_dir("chat"))  # the folder changed: the writer reloads at its next write
    with stale_rebuild_after_refresh(w, reader, before_c) as fired:
        s.append("user", {"content": "d"})
    assert fired
    texts = [e.payload["content"] for e in s.log()]
    assert texts == ["d", "c", "b", "a"], texts
    for t in (reader, other, w):
        t.close()


def test_a_rebuild_between_a_writers_refresh_and_its_streams_records_no_stream(tmp_path):
    """The same window for the streams a writer records before its first write (a dead
    writer's interrupted stream, SPEC 6): a rebuild from an older listing dropped the rows
    of a stream's end (its ref record, in the newest segment), the stream looked open, and
    the next append recorded a spurious `streaming` entry on a branch of its own. (Found by
    review of the fix above.)"""
    d, cache = str(tmp_path / "t"), str(tmp_path / "cache")
    a = Tape.init(d, cache_dir=cache)
    s = a.session("chat")
    s.append("user", {"content": "q"})
    with s.stream(flush_interval=60) as st:
        st.write("hel")
        st.flush()
        other = Tape.open(d, cache_dir=cache)
        other.compact(expire="now", grace="now")  # the partial record goes into the pack
        other.close()
        before = a.store.list_files(None)  # a listing taken before the stream's end is written
        st.write("lo")
    b, reader = Tape.open(d, cache_dir=cache), Tape.open(d, cache_dir=cache)
    with stale_rebuild_after_refresh(b, reader, before) as fired:
        b.session("chat").append("user", {"content": "next"})
    assert fired
    assert [(e.kind, e.payload["content"]) for e in b.session("chat").log()] == [("user", "next"), ("assistant", "hello"), ("user", "q")]
    assert set(b.session("chat").refs().branches) == {"main"}
    for t in (reader, b, a):
        t.close()
