"""watch's inotify notifier (ctape/watch/notify.py) on real folders: a root that goes away
and comes back, however it went (removed, moved aside, a folder above it renamed), is
watched again, and a folder renamed inside a root stays watched under its new name."""

import os
import sys
import time

import pytest

if not sys.platform.startswith("linux"):
    pytest.skip("inotify is Linux's", allow_module_level=True)

from ctape.watch.notify import Inotify  # noqa: E402
from ctape.watch.sources import source_key  # noqa: E402


def changes(n: Inotify, want, seconds: float = 10.0):
    """Wait until a wait() result satisfies want (a rescan, None, counts for every change)."""
    end = time.monotonic() + seconds
    seen: set = set()
    while time.monotonic() < end:
        got = n.wait(0.5)
        if got is None:
            return None
        seen |= got
        if want(seen):
            return seen
    return seen


@pytest.fixture
def notifier():
    n = Inotify()
    yield n
    n.close()


def test_a_root_under_a_renamed_folder_is_watched_again_at_the_rescan(tmp_path, notifier):
    # renaming a folder above a root tells the root's watch nothing: the minute's rescan
    # (check_roots) finds the root's name on another folder and watches that one
    root = tmp_path / "home" / ".codex" / "sessions"
    root.mkdir(parents=True)
    assert notifier.expect(str(root))
    (tmp_path / "home" / ".codex").rename(tmp_path / "home" / ".codex-old")
    root.mkdir(parents=True)
    assert notifier.check_roots()
    f = root / "a.jsonl"
    f.write_bytes(b"{}\n")
    got = changes(notifier, lambda s: source_key(str(f)) in s)
    assert got is None or source_key(str(f)) in got, got
    # and the old folder's changes are not reported under the root's name
    old = tmp_path / "home" / ".codex-old" / "sessions" / "b.jsonl"
    old.write_bytes(b"{}\n")
    got = changes(notifier, lambda s: False, seconds=1.5)
    assert got is not None and source_key(str(root / "b.jsonl")) not in got, got


def test_check_roots_leaves_a_root_that_stayed(tmp_path, notifier):
    root = tmp_path / "r"
    root.mkdir()
    assert notifier.expect(str(root))
    assert not notifier.check_roots()


@pytest.mark.parametrize("how", ["removed", "moved aside"])
def test_a_root_made_again_is_watched_at_once(tmp_path, notifier, how):
    root = tmp_path / "r"
    (root / "p").mkdir(parents=True)
    assert notifier.expect(str(root))
    if how == "removed":
        (root / "p").rmdir()
        root.rmdir()
    else:
        root.rename(tmp_path / "r-old")
    assert changes(notifier, lambda s: False, seconds=1.0) is not None  # nothing to look at yet
    (root / "p").mkdir(parents=True)
    f = root / "p" / "a.jsonl"
    f.write_bytes(b"{}\n")
    got = changes(notifier, lambda s: source_key(str(f)) in s)
    assert got is None or source_key(str(f)) in got, got  # a rescan (the root arrived), or the file


def test_a_folder_renamed_inside_a_root_stays_watched_under_its_new_name(tmp_path, notifier):
    root = tmp_path / "r"
    (root / "p").mkdir(parents=True)
    assert notifier.expect(str(root))
    (root / "p").rename(root / "q")
    changes(notifier, lambda s: False, seconds=1.0)
    f = root / "q" / "a.jsonl"
    f.write_bytes(b"{}\n")
    got = changes(notifier, lambda s: source_key(str(f)) in s)
    assert got is None or source_key(str(f)) in got, got
    assert str(root / "q") in notifier.watched and str(root / "p") not in notifier.watched
    # a new folder under the old name is watched too
    (root / "p").mkdir()
    changes(notifier, lambda s: False, seconds=1.0)
    g = root / "p" / "b.jsonl"
    g.write_bytes(b"{}\n")
    got = changes(notifier, lambda s: source_key(str(g)) in s)
    assert got is None or source_key(str(g)) in got, got


def test_a_folder_renamed_over_an_empty_one_is_watched_under_that_name(tmp_path, notifier):
    # rename(2) replaces an empty folder (`mv -T a b`, a day folder written under a temporary
    # name and renamed into place): the name stood for the doomed folder's watch, so the
    # moved one was not watched, and the moved one's watch was then taken off (a review)
    root = tmp_path / "r"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    assert notifier.expect(str(root))
    (root / "a").rename(root / "b")
    changes(notifier, lambda s: False, seconds=1.0)
    f = root / "b" / "x.jsonl"
    f.write_bytes(b"{}\n")
    got = changes(notifier, lambda s: source_key(str(f)) in s)
    assert got is None or source_key(str(f)) in got, got


def test_a_root_moved_into_another_root_is_waited_for_under_its_name(tmp_path, notifier):
    one, two = tmp_path / "codex" / "sessions", tmp_path / "claude" / "projects"
    one.mkdir(parents=True)
    two.mkdir(parents=True)
    assert notifier.expect(str(one)) and notifier.expect(str(two))
    one.rename(two / "moved")
    changes(notifier, lambda s: False, seconds=1.0)
    one.mkdir()
    changes(notifier, lambda s: False, seconds=1.0)
    f = one / "t.jsonl"
    f.write_bytes(b"{}\n")
    got = changes(notifier, lambda s: source_key(str(f)) in s)
    assert got is None or source_key(str(f)) in got, got
