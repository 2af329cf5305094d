"""A process reuses a folder's listing while the folder stands as it was (Store._list_dir):
a command reading a session of thousands of sealed segments lists it once, not once per
look. These check that nothing another process (or a copy) does to the folder is missed:
a new segment, a writer's segment growing in place, a change within the clock's
granularity of the listing, and a file replaced under the same name."""

import os
import shutil
import time
from types import SimpleNamespace

from conftest import run_cli

import ctape.store.store as store_mod
from ctape import Tape


def _append(tape_dir, text: str, writer: str) -> str:
    """An append by another process with an index cache of its own (another machine on a
    shared folder, or what rsync brings): only the folder tells this process of it."""
    cache = os.path.join(os.path.dirname(str(tape_dir)), f"cache-{writer}")
    return run_cli("--dir", tape_dir, "append", "user", f'{{"content": "{text}"}}', "-s", "s",
                   env={"CTAPE_WRITER": writer, "CTAPE_CACHE_DIR": cache}, check=True).stdout.decode().strip()


def _seal(folder: str) -> None:
    """Read the newest segment, as a copy (push, rsync) does: the writer's next append
    starts a new one, and this one is sealed."""
    newest = max(x for x in os.listdir(folder) if x.endswith(".seg"))
    with open(os.path.join(folder, newest), "rb") as f:
        f.read()


def test_a_command_lists_a_session_once(tape_dir, monkeypatch):
    """`status` looks at a session's files six times; a folder of 300 sealed segments is
    listed (and each file `stat`ed) once. Fails when every look lists the folder again."""
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        folder = os.path.join(tape_dir, "sessions", "s")
        for i in range(300):  # a push between any two appends seals the segment: one file each
            s.append("user", {"content": f"m{i}"})
            _seal(folder)
    assert len(os.listdir(folder)) >= 300
    time.sleep(store_mod.RACY_NS / 1e9 * 2)  # past the racy window of the last change
    listed = []
    real = os.scandir

    def counting(path):
        listed.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(store_mod.os, "scandir", counting)
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
        first = s.append("user", {"content": "first"}).hash
        time.sleep(store_mod.RACY_NS / 1e9 * 2)
        assert [e.hash for e in s.log()] == [first]  # listed, and not racy: the listing is kept
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
        assert [e.hash for e in s.log()][:4] == [c, b, a, first]


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


def test_a_sealed_segment_cut_in_place_is_seen_within_the_reuse_time(tape_dir):
    """An older segment truncated over itself (a copy written in place) moves no time of
    the folder: the reused listing keeps its old size for at most LISTING_REUSE_NS."""
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        folder = os.path.join(tape_dir, "sessions", "s")
        s.append("user", {"content": "one"})
        old = next(x for x in os.listdir(folder) if x.endswith(".seg"))
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
