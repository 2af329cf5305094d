"""A writer keeps its view of a session across the segments it makes itself (a session that
`push --follow` leaves with a file per push), and still sees what anyone else adds.

The view (store/writer_view.py, `_view_is_current`) is what lets an append skip re-reading the index
rows of every file of the session. A writer that made a new segment used to forget it, so a
session of thousands of segments cost a reload (a listing and a `stat` of every file, three
times, and the refs read again) at every append: ~170 ms at 4,500 files. These tests count
reloads, never time: they fail on that code, and they check that what another writer, an
rsync or the writer's own repeats add in between is not missed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from ctape import Tape
from ctape.errors import InvalidInput
from ctape.store import segment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_newest(tape_dir: str, session: str) -> None:
    """Read the newest segment as a copy (push, rsync) does: its access time moves, and the
    writer seals it and starts a new one at its next append."""
    folder = os.path.join(tape_dir, "sessions", session)
    newest = max(n for n in os.listdir(folder) if n.endswith(".seg"))
    with open(os.path.join(folder, newest), "rb") as f:
        f.read()


def count_reloads(monkeypatch) -> list[int]:
    calls = [0]
    real = segment.SegmentWriter._reload

    def counted(self):
        calls[0] += 1
        return real(self)

    monkeypatch.setattr(segment.SegmentWriter, "_reload", counted)
    return calls


def chain(s) -> list[str]:
    return [e.payload["content"] for e in reversed(list(s.log()))]


def test_a_writer_keeps_its_view_across_its_own_new_segments(tmp_path, monkeypatch):
    d = str(tmp_path / "t")
    t = Tape.init(d, cache_dir=str(tmp_path / "c"))
    s = t.session("s")
    s.append("user", {"content": "m0"})
    reloads = count_reloads(monkeypatch)
    for i in range(1, 60):
        read_newest(d, "s")
        s.append("user", {"content": f"m{i}"})
    files = [n for n in os.listdir(os.path.join(d, "sessions", "s")) if n.endswith(".seg")]
    assert len(files) >= 59  # a segment per read, and the repeats of what a read may lack
    assert reloads[0] <= 2, f"{reloads[0]} reloads in 59 appends"
    assert chain(s) == [f"m{i}" for i in range(60)]
    t.close()
    t2 = Tape.open(d, cache_dir=str(tmp_path / "c2"))
    assert chain(t2.session("s")) == [f"m{i}" for i in range(60)]
    assert t2.fsck()["ok"]
    t2.close()


def test_two_tapes_of_one_writer_id_take_turns_across_repeats(tmp_path):
    """Two writers of the same id (two processes on one machine) append to the newest
    segment of that id, and each knows the other wrote by its size. A repeat is named after
    the active segment, so a writer that kept its view must move on to it as a reload would:
    otherwise it appends to an older segment, which the other writer's view never looks at,
    and the other builds on refs without those appends."""
    d = str(tmp_path / "t")
    a = Tape.init(d, cache_dir=str(tmp_path / "ca"))
    b = Tape.open(d, cache_dir=str(tmp_path / "cb"))
    sa, sb = a.session("s"), b.session("s")
    sa.append("user", {"content": "m0"})
    want = ["m0"]
    for i in range(1, 40):
        read_newest(d, "s")
        w = (sa, sb)[i % 3 == 0]
        w.append("user", {"content": f"m{i}"})
        want.append(f"m{i}")
    assert chain(sa) == want
    assert chain(sb) == want
    a.close()
    b.close()


def test_a_writer_that_repeated_sees_the_other_writer_of_its_id(tmp_path):
    """The turn above, one step at a time: writer A's write seals a read segment, repeats
    what the read may lack in a segment named after its new active one, and keeps its view;
    writer B (same id) takes up that newest segment and appends to it in place, which leaves
    the folder's change time as it was. A's next append must build on B's."""
    d = str(tmp_path / "t")
    a = Tape.init(d, cache_dir=str(tmp_path / "ca"))
    b = Tape.open(d, cache_dir=str(tmp_path / "cb"))
    sa, sb = a.session("s"), b.session("s")
    sa.append("user", {"content": "m0"})
    read_newest(d, "s")
    sa.append("user", {"content": "m1"})
    folder = os.path.join(d, "sessions", "s")
    assert len(os.listdir(folder)) == 3  # the read one, A's new active one, the repeat
    sb.append("user", {"content": "m2"})
    assert len(os.listdir(folder)) == 3  # B appended in place
    time.sleep(2 * segment.RACY_NS / 1e9)  # the folder's change time alone is trusted again
    sa.append("user", {"content": "m3"})
    assert chain(sa) == ["m0", "m1", "m2", "m3"]
    assert chain(sb) == ["m0", "m1", "m2", "m3"]
    a.close()
    b.close()


def test_a_file_added_before_a_writers_new_segment_is_seen(tmp_path, monkeypatch):
    """A file that lands in the folder while a writer holds the lock and before it names a
    new segment (an rsync does not take the lock; here the pack a compaction made in another
    copy, which holds a branch made there): the folder's change time then cannot tell the
    two changes apart, so the listing after the new segment must."""
    monkeypatch.setenv("CTAPE_WRITER", "samewriter")  # one writer id in both copies: no segment of another id is watched
    d, other = str(tmp_path / "t"), str(tmp_path / "other")
    t = Tape.init(d, cache_dir=str(tmp_path / "c"))
    s = t.session("s")
    s.append("user", {"content": "here"})
    shutil.copytree(d, other)
    o = Tape.open(other, cache_dir=str(tmp_path / "co"))
    o.session("s").branch("theirs")
    o.compact()
    o.close()
    folder, theirs = os.path.join(d, "sessions", "s"), os.path.join(other, "sessions", "s")
    packs = [n for n in os.listdir(theirs) if n.endswith(".pack")]
    assert packs and not set(packs) & set(os.listdir(folder))
    read_newest(d, "s")
    reloads = count_reloads(monkeypatch)
    with t.batch():
        s.append("user", {"content": "in the batch"})  # under the lock, queued: the segment read is sealed
        for n in packs:  # the copy lands before the batch's new segment gets its name
            shutil.copy2(os.path.join(theirs, n), os.path.join(folder, n + ".part"))
            os.replace(os.path.join(folder, n + ".part"), os.path.join(folder, n))
    time.sleep(2 * segment.RACY_NS / 1e9)  # past the tick of the new segment: its change time is trusted
    # the writer's own view, not a reader's, decides: a writer that missed the pack would
    # make a second branch of that name
    with pytest.raises(InvalidInput, match="already exists"):
        s.branch("theirs")
    assert reloads[0] >= 1
    s.append("user", {"content": "after"})
    assert chain(s) == ["here", "in the batch", "after"]
    t.close()


def test_a_reader_in_the_writers_process_sees_the_other_writers_append(tmp_path):
    """Reads without the lock use the writer's view while it holds (`view_is_current`). A
    writer that made a repeat goes on there at its next write; until then another
    process of its id may take it up and append in place, which moves nothing the view
    checks: reads must not take the view for current meanwhile."""
    d = str(tmp_path / "t")
    a = Tape.init(d, cache_dir=str(tmp_path / "ca"))
    sa = a.session("s")
    sa.append("user", {"content": "m0"})
    read_newest(d, "s")
    sa.append("user", {"content": "m1"})  # seals the read segment: a new one and a repeat
    code = ("import sys; from ctape import Tape; b = Tape.open(sys.argv[1], cache_dir=sys.argv[2]); "
            "b.session('s').append('user', {'content': 'm2'}); b.close()")
    subprocess.run([sys.executable, "-c", code, d, str(tmp_path / "cb")], check=True, env=dict(os.environ, PYTHONPATH=ROOT))
    assert chain(sa) == ["m0", "m1", "m2"]
    assert chain(a.session("s")) == ["m0", "m1", "m2"]
    a.close()


def test_a_segment_left_for_a_repeat_and_read_then_is_repeated_before_a_crash(tmp_path):
    """A writer that goes on in its repeat leaves its active segment without sealing it. A
    copy that took that segment's size before the last write to it and read it after
    lacks that write: the write is repeated with the next one, so when the writer dies
    and the short copy comes back (`rsync -a` renames it over the longer file), nothing
    acknowledged is lost."""
    d = str(tmp_path / "t")
    folder = os.path.join(d, "sessions", "s")
    script = r'''
import os, subprocess, sys
from ctape import Tape
d, root = sys.argv[1], sys.argv[2]
folder = os.path.join(d, "sessions", "s")
def segs(): return sorted(n for n in os.listdir(folder) if n.endswith(".seg"))
def read(n):
    with open(os.path.join(folder, n), "rb") as f: f.read()
s = Tape.init(d, cache_dir=os.path.join(root, "ca")).session("s")
s.append("user", {"content": "m0"}); s0 = segs()[-1]
read(s0)
s.append("user", {"content": "m1"})  # seals s0: a new segment n1, and r1 repeating s0
n1, r1 = [n for n in segs() if n != s0]
s.append("user", {"content": "m2"})  # goes on in r1, the newest
s.append("user", {"content": "m3"})
read(n1)  # a copy reads n1
subprocess.run([sys.executable, "-c", "import sys; from ctape import Tape; t = Tape.open(sys.argv[1], cache_dir=sys.argv[2]); "
                "t.session('s').append('user', {'content': 'x4'}); t.close()", d, os.path.join(root, "cx")],
               env=dict(os.environ, CTAPE_WRITER="otherwriter"), check=True)
size = os.path.getsize(os.path.join(folder, r1))
s.append("user", {"content": "m5"})  # to r1; n1's read is repeated in a new file, named after r1
with open(os.path.join(folder, r1), "rb") as f:  # a copy of r1: its size taken before m5, read after
    short = f.read(size)
with open(os.path.join(root, "short"), "wb") as f:
    f.write(short)
s.append("user", {"content": "m6"})
print(r1)
sys.stdout.flush()
os._exit(0)  # killed: no close
'''
    p = subprocess.run([sys.executable, "-c", script, d, str(tmp_path)], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 0, p.stderr[-2000:]
    r1 = p.stdout.split()[-1]
    shutil.copy2(tmp_path / "short", os.path.join(folder, r1 + ".part"))
    os.replace(os.path.join(folder, r1 + ".part"), os.path.join(folder, r1))  # the short copy comes back
    t = Tape.open(d, cache_dir=str(tmp_path / "fresh"))
    assert chain(t.session("s")) == ["m0", "m1", "m2", "m3", "x4", "m5", "m6"]
    assert t.fsck()["ok"]
    t.close()


def test_a_file_of_its_own_replaced_in_the_tick_it_was_made_is_seen(tmp_path, monkeypatch):
    """The view holds the inode of each file the writer made; the next look compares the
    folder's with it (where the folder's inode differs from `stat`'s, as on overlayfs, a
    `stat` of that file decides). A copy renamed over the writer's new segment right after
    it got its name (an rsync bringing another version, before the writer reads the
    folder's change time) has another inode either way: the writer reloads."""
    d = str(tmp_path / "t")
    folder = os.path.join(d, "sessions", "s")
    t = Tape.init(d, cache_dir=str(tmp_path / "c"))
    s = t.session("s")
    s.append("user", {"content": "m0"})
    read_newest(d, "s")
    real = segment.fsync_dir
    armed = [True]

    def fsync_then_replace(path):
        real(path)
        segs = sorted(n for n in os.listdir(folder) if n.endswith(".seg"))
        if armed[0] and len(segs) == 3:  # the read one, the repeat of it, and the new one just named
            armed[0] = False
            made = segs[-2]  # the new segment (the repeat is named after it)
            shutil.copy2(os.path.join(folder, made), os.path.join(folder, made + ".part"))
            os.replace(os.path.join(folder, made + ".part"), os.path.join(folder, made))

    monkeypatch.setattr(segment, "fsync_dir", fsync_then_replace)
    s.append("user", {"content": "m1"})
    assert not armed[0]
    monkeypatch.setattr(segment, "fsync_dir", real)
    reloads = count_reloads(monkeypatch)
    s.append("user", {"content": "m2"})
    assert reloads[0] == 1
    assert chain(s) == ["m0", "m1", "m2"]
    t.close()


@pytest.mark.parametrize("left", [False, True], ids=["active-read", "left-segment-read"])
def test_a_repeat_that_cannot_be_written_fails_its_write_and_is_made_by_the_next(tmp_path, monkeypatch, left):
    """A write that must first repeat what a copy may lack (the segment read: the active
    one, or one the writer left for its repeat) and cannot (the disk is full) fails whole:
    the append is not written later by the next one, the session is not stuck, and the
    next write makes the repeat. (The failure is injected into the repeat's file only.)"""
    import errno

    d = str(tmp_path / "t")
    folder = os.path.join(d, "sessions", "s")
    t = Tape.init(d, cache_dir=str(tmp_path / "c"))
    s = t.session("s")
    want = ["m0", "m1"]
    for text in want:
        s.append("user", {"content": text})

    def segs():
        return sorted(n for n in os.listdir(folder) if n.endswith(".seg"))

    if left:
        first = segs()[-1]
        read_newest(d, "s")
        s.append("user", {"content": "m1b"})  # seals it: a repeat of it, and a new segment (taken up next)
        new = [n for n in segs() if n != first][0]
        s.append("user", {"content": "m1c"})
        want += ["m1b", "m1c"]
        read_seg = new
    else:
        read_seg = segs()[-1]
    with open(os.path.join(folder, read_seg), "rb") as f:
        f.read()
    real, fail = segment.SegmentWriter._repeat_from, [True]

    def full_disk(self, *a, **k):
        if fail[0]:
            fail[0] = False
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **k)

    monkeypatch.setattr(segment.SegmentWriter, "_repeat_from", full_disk)
    with pytest.raises(Exception, match="no space left"):
        s.append("user", {"content": "failed"})
    s.append("user", {"content": "m3"})
    want.append("m3")
    assert chain(s) == want
    assert any(read_seg.encode() in open(os.path.join(folder, n), "rb").read(300) for n in segs() if n != read_seg)
    t.close()
    f = Tape.open(d, cache_dir=str(tmp_path / "fresh"))
    assert chain(f.session("s")) == want
    assert f.fsck()["ok"]
    f.close()


def _writer_with_a_view(tmp_path):
    """A tape whose session `s` has one entry, and its writer, holding a current view."""
    d = str(tmp_path / "t")
    t = Tape.init(d, cache_dir=str(tmp_path / "c"))
    s = t.session("s")
    s.append("user", {"content": "m0"})
    w = t.store._writers["s"]
    assert w.view_is_current()
    return d, t, s, w


def test_a_reader_thread_never_ends_a_tick_the_writer_set_during_its_look(tmp_path, monkeypatch):
    """A reader thread looks at the writer's view without the session's lock
    (`view_is_current`) and, once its listing proves the view past the racy tick, ends that
    tick. The writer may note a file of its own while the reader lists (a new tick, when a
    second change could hide in the folder's change time): the reader ended that one too,
    and until the writer next listed, its view trusted the change time alone. Here the
    writer's note lands inside the reader's listing."""
    d, t, s, w = _writer_with_a_view(tmp_path)
    w._racy_until = time.time_ns() - 1  # a tick the writer set before, and that has passed
    later = time.time_ns() + 10**12
    real = w._listing

    def listing_while_the_writer_notes_a_file():
        out = real()
        with w._racy_lock:
            w._racy_until = later  # as `_note_own_file` sets it, from the writer's thread
        return out

    monkeypatch.setattr(w, "_listing", listing_while_the_writer_notes_a_file)
    assert w.view_is_current()
    assert w._racy_until == later
    monkeypatch.setattr(w, "_listing", real)
    w._racy_until = time.time_ns() - 1
    assert w.view_is_current() and w._racy_until == 0  # with nothing set meanwhile, the look ends its tick
    t.close()


def test_a_writer_whose_segment_lost_its_name_in_the_same_tick_writes_a_new_one(tmp_path):
    """A compaction in another process packs the writer's active segment and removes it. The
    folder's change time tells the writer, unless the removal shares a clock tick with the
    change the writer saw last (and that tick's racy window has closed, or the clock stepped
    back): its view then looked current. The append itself went to a new segment (`_begin`
    seals a segment whose link count is not 1), but the view was kept without a reload:
    index rows naming the removed file, the dictionary material of records a compaction may
    have dropped, and readers of the view (`view_is_current`) told it was current. The
    segment's link count, from the fstat the look already makes, now says so whatever the
    clock. Replayed here: the segment goes, and the writer's view is set to the folder as
    it is after (the same change time)."""
    d, t, s, w = _writer_with_a_view(tmp_path)
    with Tape.open(d, cache_dir=str(tmp_path / "other")) as other:
        other.compact(grace="now")  # the segment goes into a pack, and is removed
    folder = os.path.join(d, "sessions", "s")
    assert not any(n.endswith(".seg") for n in os.listdir(folder))
    w._seen_dir = os.stat(folder).st_ctime_ns  # the removal in the tick the writer saw last
    w._racy_until = 0
    w._seen_files = {n: os.stat(os.path.join(folder, n)).st_ino for n in os.listdir(folder)}
    w._others_grow = False
    assert not w.view_is_current()
    h = s.append("user", {"content": "m1"}).hash
    t.close()
    with Tape.open(d, cache_dir=str(tmp_path / "fresh")) as f:
        assert [e.payload["content"] for e in f.session("s").log()] == ["m1", "m0"]
        assert f.get(h).payload["content"] == "m1"
        assert f.fsck()["ok"]
