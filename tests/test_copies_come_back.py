"""A copy whose size was taken before a write and whose data was read after it (rsync's
sender opens a file, takes its size, and reads that many bytes, maybe much later) lacks
the write, and the writer's check after the write saw no read yet. When that copy comes
back (`rsync -a B/ A/` renames it over the longer file), the write must not be lost:
the writer keeps the descriptors of the segments it wrote to and repeats what the shorter
file lacks (store/repeats.py, "copies that come back"). Found by tests/test_live_rsync.py
under load (seed 1: 403,997 bytes lost) and reproduced by the live model once its copies
read only the size they took at open (tests/test_sync_model.py, `opened`)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

from ctape import Tape

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed (.ci/run installs it)")


def rsync(src, dst, *flags):
    subprocess.run(["rsync", "-a", *flags, f"{src}/", f"{dst}/"], check=True)


def copy_sized_at_open(src_file: str, dst_file: str, between) -> None:
    """rsync's sender and receiver for one file: open, size, `between`, read that size,
    write beside the destination, rename over it with the source's listed mtime."""
    listed = os.stat(src_file)
    fd = os.open(src_file, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        between()
        data = os.pread(fd, size, 0)
    finally:
        os.close(fd)
    tmp = dst_file + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.utime(tmp, ns=(listed.st_atime_ns, listed.st_mtime_ns))
    os.rename(tmp, dst_file)


def history(t: Tape, session: str) -> set[str]:
    out, h = set(), t.session(session).refs().head_hash
    while h is not None:
        out.add(h)
        h = t.read_entry(h).parent
    return out


def stale_copy(tmp_path, monkeypatch, before: int = 0):
    """A (this process's writer, still open), and B: a copy of A whose segment lacks the
    append made between its open and its read. `before` appends first: enough of them and
    the late one is a block compressed with a dictionary written before it."""
    monkeypatch.setenv("CTAPE_WRITER", "wcomeback")
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    t = Tape.init(a)
    s = t.session("c")
    acked = [s.append("user", {"content": "one"}).hash]
    for i in range(before):
        acked.append(s.append("assistant", {"content": f"step {i}: " + "the build passed, 412 tests, 3 skipped. " * 12}).hash)
    rsync(a, b, "--exclude=*.seg")  # everything but the segment, which the copy below reads first
    seg = glob.glob(os.path.join(a, "sessions", "c", "*.seg"))[-1]
    rel = os.path.relpath(seg, a)
    copy_sized_at_open(seg, os.path.join(b, rel), lambda: acked.append(s.append("user", {"content": "two " * 500}).hash))
    assert os.path.getsize(os.path.join(b, rel)) < os.path.getsize(seg)  # the copy lacks "two"
    return t, a, b, acked


def check(a: str, acked: list[str]) -> None:
    with Tape.open(a) as t:
        assert set(acked) <= history(t, "c")
        f = t.fsck()
        assert f["ok"], f["problems"]


@pytest.mark.parametrize("before", [0, 80])
def test_the_copy_comes_back_while_the_writer_appends_on(tmp_path, monkeypatch, before):
    t, a, b, acked = stale_copy(tmp_path, monkeypatch, before)
    if before:  # the late append went into a block that needs a dictionary before the cut
        from ctape.store import framing

        seg = glob.glob(os.path.join(a, "sessions", "c", "*.seg"))[-1]
        types = [r.type for r in framing.scan(open(seg, "rb").read()) if isinstance(r, framing.Record)]
        assert types[-1] == framing.T_DICT_BLOCK and framing.T_DICT in types
    rsync(b, a)  # the shorter segment over the longer one
    acked.append(t.session("c").append("user", {"content": "three"}).hash)
    t.close()
    check(a, acked)
    rsync(a, b)
    rsync(b, a)
    check(a, acked)
    check(b, acked)


def test_the_copy_comes_back_before_the_writer_closes(tmp_path, monkeypatch):
    t, a, b, acked = stale_copy(tmp_path, monkeypatch)
    rsync(b, a)
    t.close()  # no more appends: the close looks
    check(a, acked)


@pytest.mark.parametrize("before", [0, 80])
def test_the_copy_comes_back_after_the_writer_closed(tmp_path, monkeypatch, before):
    t, a, b, acked = stale_copy(tmp_path, monkeypatch, before)
    t.close()  # the segment was read: the writes just before the read are repeated
    rsync(b, a)
    check(a, acked)
    rsync(a, b)
    check(b, acked)


def test_what_came_back_is_repeated_once(tmp_path, monkeypatch):
    t, a, b, acked = stale_copy(tmp_path, monkeypatch)
    rsync(b, a)
    s = t.session("c")
    for i in range(3):  # each append finds the folder changed: the check runs each time
        acked.append(s.append("user", {"content": f"after {i}"}).hash)
        rsync(b, a)
    t.close()
    check(a, acked)
    repeats = [p for p in glob.glob(os.path.join(a, "sessions", "c", "*.seg")) if b'"repeats"' in open(p, "rb").read(200)]
    assert len(repeats) == 1, repeats


def test_kept_descriptors_do_not_pile_up(tmp_path, monkeypatch):
    """Two writers of one session in one process, taking turns: each append makes the other
    reload its view and open the segment again; the descriptor it kept goes then."""
    monkeypatch.setenv("CTAPE_WRITER", "wturns")
    d = str(tmp_path / "A")
    Tape.init(d).close()
    t1, t2 = Tape.open(d), Tape.open(d)
    try:
        for i in range(5):
            t1.session("c").append("user", {"content": f"one {i}"})
            t2.session("c").append("user", {"content": f"two {i}"})
        before = len(os.listdir("/proc/self/fd"))
        for i in range(100):
            t1.session("c").append("user", {"content": f"one {i}"})
            t2.session("c").append("user", {"content": f"two {i}"})
        assert len(os.listdir("/proc/self/fd")) <= before + 2
    finally:
        t1.close()
        t2.close()


def test_the_stale_copy_reaches_a_third_copy_after_the_long_file(tmp_path, monkeypatch):
    """Found by the live model (seed 50235 of test_many_sequences_with_writers_during_rsync):
    the stale copy B never comes back to A, but reaches C, which already had the long file
    from A. A's writer, still open, wrote again meanwhile: that write found the segment read
    (and sealed it), so it must also repeat what a copy that read it may lack, where C gets
    it with the same sync that brings the write. Before, only A's close did, and C, left
    with the shorter file, refused every append ("lost acknowledged records")."""
    t, a, b, acked = stale_copy(tmp_path, monkeypatch)
    c = str(tmp_path / "C")
    rsync(a, c)  # C reads the long segment
    with Tape.open(c) as tc:
        assert set(acked) <= history(tc, "c")
    acked.append(t.session("c").append("user", {"content": "three"}).hash)  # A's writer goes on
    rsync(a, c)
    rsync(b, c, "--exclude=ctape.json")  # B's shorter copy of the segment over C's
    with Tape.open(c) as tc:
        acked.append(tc.session("c").append("user", {"content": "four, on C"}).hash)
    check(c, acked)
    t.close()
    rsync(c, a)
    check(a, acked)


def test_a_third_copy_that_gets_the_stale_copy_before_the_writer_looked_names_its_writer(tmp_path, monkeypatch):
    """What docs/sync.md leaves ("Writers appending while rsync runs"): C gets B's stale
    copy before A's writer wrote again or closed (nothing saw the read yet). C had read
    the long file, so it refuses to write to the session; the refusal and fsck say what
    happened and which machine to sync from (writer wcomeback), not the generic guess
    (an rsync --delete or --inplace), and one sync from A makes C whole (the live model
    found this order: seed 9504)."""
    t, a, b, acked = stale_copy(tmp_path, monkeypatch)
    c = str(tmp_path / "C")
    rsync(a, c)  # C reads the long segment
    monkeypatch.setenv("CTAPE_WRITER", "wthirdcopy")
    with Tape.open(c) as tc:
        assert set(acked) <= history(tc, "c")
    rsync(b, c, "--exclude=ctape.json")  # B's shorter copy of the segment over C's
    with Tape.open(c) as tc:
        with pytest.raises(Exception, match=r"lost acknowledged records: sessions/c/wcomeback-\S+ is shorter than this machine "
                                            r"had read it \(an older copy of it came from another copy of the tape; a sync from the "
                                            r"machine that writes it \(writer wcomeback\) brings the rest back\)"):
            tc.session("c").append("user", {"content": "refused"})
        problems = tc.fsck()["problems"]
        assert any("writer wcomeback" in p["problem"] for p in problems), problems
    rsync(a, c)  # A's long file again
    with Tape.open(c) as tc:
        acked.append(tc.session("c").append("user", {"content": "on C, after the sync"}).hash)
    check(c, acked)
    t.close()
