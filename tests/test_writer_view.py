"""A writer keeps its view of a session across the segments it makes itself (a session that
`push --follow` leaves with a file per push), and still sees what anyone else adds.

The view (segment.py, `_view_is_current`) is what lets an append skip re-reading the index
rows of every file of the session. A writer that made a new segment used to forget it, so a
session of thousands of segments cost a reload (a listing and a `stat` of every file, three
times, and the refs read again) at every append: ~170 ms at 4,500 files. These tests count
reloads, never time: they fail on that code, and they check that what another writer, an
rsync or the writer's own repeats add in between is not missed.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from ctape import Tape
from ctape.errors import InvalidInput
from ctape.store import segment


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
