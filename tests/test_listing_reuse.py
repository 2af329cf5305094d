"""A process reuses a folder's listing while the folder stands as it was (Store._list_dir):
a command reading a session of thousands of sealed segments lists it once, not once per
look. These check that nothing another process (or a copy) does to the folder is missed:
a new segment, a writer's segment growing in place, a change within the clock's
granularity of the listing, and a file replaced under the same name."""

import json
import os
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

from conftest import run_cli

import ctape.store.store as store_mod
from ctape import Tape

WRITER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "listing_writer.py")


def _append(tape_dir, text: str, writer: str, own_cache: bool = True) -> str:
    """An append by another process; with `own_cache`, with an index cache of its own
    (another machine on a shared folder, or what rsync brings): only the folder tells this
    process of it."""
    env = {"CTAPE_WRITER": writer}
    if own_cache:
        env["CTAPE_CACHE_DIR"] = os.path.join(os.path.dirname(str(tape_dir)), f"cache-{writer}")
    return run_cli("--dir", tape_dir, "append", "user", f'{{"content": "{text}"}}', "-s", "s",
                   env=env, check=True).stdout.decode().strip()


def _seal(folder: str) -> None:
    """Read the newest segment, as a copy (push, rsync) does: the writer's next append
    starts a new one, and this one is sealed."""
    newest = max(x for x in os.listdir(folder) if x.endswith(".seg"))
    with open(os.path.join(folder, newest), "rb") as f:
        f.read()


def _fill(s, folder: str, n: int = 40) -> None:
    """n appends, each sealed by a copy's read: a folder of n segments or more, past
    LISTING_REUSE_MIN_FILES (smaller folders are listed at every look)."""
    assert n >= store_mod.LISTING_REUSE_MIN_FILES
    for i in range(n):
        s.append("user", {"content": f"fill {i}"})
        _seal(folder)


def test_a_command_lists_a_session_once(tape_dir, monkeypatch):
    """`status` looks at a session's files six times; a folder of 300 sealed segments is
    listed (and each file `stat`ed) once. Fails when every look lists the folder again."""
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        folder = os.path.join(tape_dir, "sessions", "s")
        _fill(s, folder, 300)  # a push between any two appends seals the segment: one file each
    assert len(os.listdir(folder)) >= 300
    time.sleep(store_mod.RACY_NS / 1e9 * 2)  # past the racy window of the last change
    listed = []
    real = os.scandir

    def counting(path):
        listed.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(store_mod.os, "scandir", counting)
    monkeypatch.setattr(store_mod, "LISTING_REUSE_NS", 60 * 10**9)  # a loaded machine's slow command: still one
    with Tape.open(tape_dir) as t:
        st = t.session("s").status()
    assert st["head"] is not None, st
    assert listed.count("s") == 1, listed


def test_what_other_processes_do_to_a_listed_folder_is_seen_at_once(tape_dir):
    """A reader that listed the session sees, at its next look (well within the reuse
    time): a segment of another writer made since, that segment grown in place, a
    segment of a third writer; and a segment replaced under its name by a copy."""
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        _fill(s, os.path.join(tape_dir, "sessions", "s"))
        first = s.append("user", {"content": "first"}).hash
        time.sleep(store_mod.RACY_NS / 1e9 * 2)
        assert s.head.hash == first  # listed, and not racy: the listing is kept
        a = _append(tape_dir, "a new segment of writer b", "wrtrb")
        assert s.head.hash == a
        time.sleep(store_mod.RACY_NS / 1e9 * 2)
        s.log()
        b = _append(tape_dir, "b grows in place", "wrtrb")
        assert s.head.hash == b
        time.sleep(store_mod.RACY_NS / 1e9 * 2)
        s.log()
        c = _append(tape_dir, "a third writer", "wrtrc")
        assert s.head.hash == c
        assert [e.hash for e in s.log()][:4] == [c, b, a, first]  # newest first


def test_a_change_right_after_a_listing_is_never_hidden_by_the_clock(tape_dir, monkeypatch):
    """Files made in quick succession, a listing taken between any two: where a folder's
    times move in steps of the kernel's clock tick (Linux before 6.13, many file systems),
    a file made in the tick of the listing leaves them as they were, so such a listing is
    not kept. This kernel gives a fine-grained time to a change after a `stat`; the coarse
    clock is simulated by rounding the folder's times, as the store reads them, down to a
    10 ms tick. Fails when a listing taken in the tick of a change is kept."""
    tick = 10_000_000
    real = os.lstat

    def coarse(path, *a, **k):
        st = real(path, *a, **k)
        if not str(path).endswith("sessions/s"):
            return st
        return SimpleNamespace(st_mode=st.st_mode, st_ino=st.st_ino, st_mtime_ns=st.st_mtime_ns // tick * tick,
                               st_ctime_ns=st.st_ctime_ns // tick * tick)

    with Tape.open(tape_dir) as t:
        t.session("s").append("user", {"content": "x"})
        folder = os.path.join(tape_dir, "sessions", "s")
        seg = next(x for x in os.listdir(folder) if x.endswith(".seg"))
        writer = seg.split("-", 1)[0]
        monkeypatch.setattr(store_mod.os, "lstat", coarse)
        for i in range(300):
            name = f"sessions/s/{writer}-{10**19 + i:020d}.seg"  # a copy's segment arriving (rsync)
            shutil.copyfile(os.path.join(folder, seg), os.path.join(tape_dir, name))
            assert name in t.store.list_files("s"), i


def test_a_sealed_segment_cut_in_place_is_seen_within_the_reuse_time(tape_dir, monkeypatch):
    """An older segment truncated over itself (a copy written in place) moves no time of
    the folder: the reused listing keeps its old size for at most LISTING_REUSE_NS."""
    monkeypatch.setattr(store_mod, "LISTING_REUSE_NS", 3 * 10**9)  # "within": also on a loaded machine
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        folder = os.path.join(tape_dir, "sessions", "s")
        _fill(s, folder)
        s.append("user", {"content": "one"})
        old = max(x for x in os.listdir(folder) if x.endswith(".seg"))
        _seal(folder)
        s.append("user", {"content": "two"})  # in a new segment: `old` grows no more
        assert max(os.listdir(folder)) != old
        time.sleep(store_mod.RACY_NS / 1e9 * 2)
        rel = f"sessions/s/{old}"
        size = t.store.list_files("s")[rel]
        with open(os.path.join(folder, old), "r+b") as f:
            f.truncate(size - 5)
        assert t.store.list_files("s")[rel] == size  # within the reuse time: the listing stands
        time.sleep(store_mod.LISTING_REUSE_NS / 1e9)
        assert t.store.list_files("s")[rel] == size - 5


def test_a_loss_noted_elsewhere_stays_noted(tape_dir):
    """Found by review: an older segment cut over itself (a shorter copy written in place),
    another process notes the loss; this process, whose reused listing still gives the old
    size, took the file for restored and cleared the note for good (`fsck` no longer said
    acknowledged records were lost, and appends went on). A size from a reused listing
    never clears a loss."""
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        folder = os.path.join(tape_dir, "sessions", "s")
        _fill(s, folder)
        _append(tape_dir, "b1", "wrtrb", own_cache=False)
        _append(tape_dir, "b2", "wrtrb", own_cache=False)
        cut = next(x for x in os.listdir(folder) if x.startswith("wrtrb-"))
        _seal(folder)  # a copy reads it: the next append goes to a new segment, and nothing is repeated
        _append(tape_dir, "b3", "wrtrb", own_cache=False)
        assert max(x for x in os.listdir(folder) if x.startswith("wrtrb-")) != cut
        rel = f"sessions/s/{cut}"
        time.sleep(store_mod.RACY_NS / 1e9 * 2)
        t.store.refresh("s")  # listed, and kept
        size = os.path.getsize(os.path.join(folder, cut))
        with open(os.path.join(folder, cut), "r+b") as f:  # cut inside its last record, in place
            f.truncate(size - 7)
        p = run_cli("--dir", tape_dir, "status", "-s", "s")  # a new process lists it: the loss is noted
        assert rel in [p for p, _, _ in t.store.index.lost_rows()], p.stderr
        t.store.refresh("s")
        assert rel in [p for p, _, _ in t.store.index.lost_rows()]
        time.sleep(store_mod.LISTING_REUSE_NS / 1e9)
        t.store.refresh("s")
        assert rel in [p for p, _, _ in t.store.index.lost_rows()]
    assert run_cli("--dir", tape_dir, "append", "user", '{"content": "x"}', "-s", "s").returncode != 0


def test_a_segment_grown_in_place_behind_a_newer_one_is_seen(tape_dir, monkeypatch):
    """Found by review: a writer whose left segment a copy read publishes the repeat (a
    newer name) and only then appends to its active segment, which is no longer its
    newest; another process that listed the folder between the two (here: told to look
    there) kept that listing, so it missed the acknowledged append (a reader) or built on
    the entry before it (a writer of the same id: the append was lost from history, fsck
    ok). Every segment no copy has read is looked at again, and a writer lists afresh."""
    from ctape.store.segment import SegmentWriter

    folder = os.path.join(tape_dir, "sessions", "s")
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        _fill(s, folder)
        others = [subprocess.Popen([sys.executable, WRITER, str(tape_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True) for _ in range(2)]
        try:
            for p in others:
                assert p.stdout.readline().strip() == "ready"

            def ask(p, line: str) -> dict:
                p.stdin.write(line + "\n")
                p.stdin.flush()
                return json.loads(p.stdout.readline())

            def read_active() -> None:  # a copy (push, rsync) reads this process's active segment
                with open(os.path.join(tape_dir, t.store._writers["s"].rel), "rb") as f:
                    f.read()

            writer, reader = others
            s.append("user", {"content": "e1"})
            read_active()
            s.append("user", {"content": "e2"})  # a new segment N, and the repeat of e1 after it
            ask(writer, "append w2-first")  # the other process takes the newest up
            read_active()  # N: its write of e2 is to be repeated at the next append
            names = set(os.listdir(folder))
            looked = []
            write_buf = SegmentWriter._write_buf

            def then_look(self, durable):
                if not looked:  # the repeat is out; the append to the active segment comes next
                    assert set(os.listdir(folder)) - names, "no repeat was published first"
                    time.sleep(store_mod.RACY_NS / 1e9 * 2)
                    looked.extend(ask(p, "head") for p in others)
                return write_buf(self, durable)

            monkeypatch.setattr(SegmentWriter, "_write_buf", then_look)
            e3 = s.append("user", {"content": "e3"}).hash
            monkeypatch.setattr(SegmentWriter, "_write_buf", write_buf)
            assert looked
            assert ask(reader, "head")["hash"] == e3
            assert ask(writer, "append w2-second")["parent"] == e3
        finally:
            for p in others:
                p.stdin.close()
                p.wait(timeout=60)


def test_a_writer_never_builds_on_a_reused_listing(tape_dir, monkeypatch):
    """A change the folder's times do not show (a network file system whose server's clock
    lags this machine's, a clock stepped back) leaves a reused listing stale until it
    expires. A reader then sees a new file up to 1 s late; a writer must not build on it
    (its append would get an older parent: a fork, or with one writer id an entry lost
    from history). The stale listing is made here by hand: the folder's present times
    given to a listing taken before another process's append."""
    folder = os.path.join(tape_dir, "sessions", "s")
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        _fill(s, folder)
        time.sleep(store_mod.RACY_NS / 1e9 * 2)
        t.store.refresh("s")
        kept = t.store._listings["sessions/s"]
        monkeypatch.setattr(store_mod, "LISTING_REUSE_NS", 60 * 10**9)  # the stale listing stands, however slow the machine
        x = _append(tape_dir, "x", "wrtrb")  # another machine's writer, on the shared folder
        dst = os.lstat(folder)
        t.store._listings["sessions/s"] = ((dst.st_ino, dst.st_mtime_ns, dst.st_ctime_ns), time.time_ns(), time.monotonic_ns(), *kept[3:])
        assert "sessions/s/" + next(n for n in os.listdir(folder) if n.startswith("wrtrb-")) not in t.store.list_files("s")
        assert s.append("user", {"content": "y"}).parent == x


def test_a_wall_clock_stepped_back_keeps_no_listing(tape_dir, monkeypatch):
    """Found by the second review: the reuse time was measured on the wall clock, so a
    clock stepped back an hour (NTP, a resumed VM) after a listing kept it an hour: a
    sealed segment cut in place went unreported, a pulled segment grown in place unread.
    The age is taken from the monotonic clock, and no listing outlives a step back."""
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        folder = os.path.join(tape_dir, "sessions", "s")
        _fill(s, folder)
        time.sleep(store_mod.RACY_NS / 1e9 * 2)
        old = sorted(x for x in os.listdir(folder) if x.endswith(".seg"))[0]
        rel = f"sessions/s/{old}"
        size = t.store.list_files("s")[rel]
        real = time.time_ns
        monkeypatch.setattr(store_mod.time, "time_ns", lambda: real() - 3600 * 10**9)
        with open(os.path.join(folder, old), "r+b") as f:
            f.truncate(size - 5)
        time.sleep(store_mod.LISTING_REUSE_NS / 1e9)
        assert t.store.list_files("s")[rel] == size - 5
