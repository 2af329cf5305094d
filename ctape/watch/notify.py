"""Waiting for transcript files to change: inotify through ctypes on Linux, polling elsewhere.

`Notifier.wait(timeout)` returns the keys of the sources that changed (a set), or None
when everything should be looked at again (polling, a new folder, an overflow).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct
import sys
import time
from typing import Optional

from .sources import source_key

IN_MODIFY = 0x002
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
MASK = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
EVENT = struct.Struct("iIII")


class Polling:
    """Look at every source once per interval."""

    kind = "polling"

    def __init__(self, interval: float = 1.0):
        self.interval = interval

    def add_tree(self, folder: str) -> None:
        pass

    def expect(self, folder: str) -> None:
        pass  # every pass looks at every root

    def check_roots(self) -> bool:
        return False

    def wait(self, timeout: float) -> Optional[set]:
        time.sleep(min(timeout, self.interval))
        return None

    def close(self) -> None:
        pass


class Inotify:
    """Linux inotify on every folder under the watched roots (ctypes, no dependency)."""

    kind = "inotify"

    def __init__(self):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd = fd
        self.dirs: dict[int, str] = {}  # watch -> the folder's name (its path)
        self.wds: dict[str, int] = {}  # the other way
        self.watched: set[str] = set()
        self.expected: set[str] = set()  # roots that do not exist yet
        self.on_the_way: set[str] = set()  # folders watched for the next step to one
        self.trees: set[str] = set()  # folders watched for what they hold (add_tree)
        self.roots: set[str] = set()  # every root asked for (expect), there or not
        self.inodes: dict[int, tuple[int, int]] = {}  # watch -> the folder it was put on

    def add_tree(self, folder: str) -> None:
        for root, dirs, _ in os.walk(folder):
            self._watch(root)
            self.trees.add(root)

    def expect(self, folder: str) -> bool:
        """A root: its tree is watched (add_tree). One that does not exist yet (the agent
        was never run here), or no more (_gone): its nearest folder that does is watched,
        for the creation of the next folder on the way only (not its whole tree), and so on
        down, so the root is watched within a pass of its creation rather than at the
        minute's rescan. True when the root is there now."""
        folder = os.path.abspath(folder)
        self.roots.add(folder)
        self.expected.add(folder)
        step = folder
        while not os.path.isdir(step):
            parent = os.path.dirname(step)
            if parent == step:
                return False
            step = parent
        if step == folder:
            self.expected.discard(folder)
            self.add_tree(folder)
            return True
        self.on_the_way.add(step)
        self._watch(step)
        return False

    def _arrived(self, path: str) -> bool:
        """A folder created in one watched on the way to expected roots: go on down (True
        when a root is now there and watched)."""
        found = False
        for root in sorted(self.expected):
            if root == path or root.startswith(path + os.sep):
                found |= self.expect(root)
        return found

    def _watch(self, folder: str) -> None:
        try:
            st = os.stat(folder)
        except OSError:
            return  # gone meanwhile
        here = (st.st_dev, st.st_ino)
        if folder in self.watched and self.inodes.get(self.wds.get(folder, -1)) == here:
            return  # (under this name is another folder than the one watched: a folder renamed over it)
        wd = self._add(self.fd, os.fsencode(folder), MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err == errno.ENOSPC:
                raise OSError(err, "too many inotify watches (fs.inotify.max_user_watches)")
            return  # gone meanwhile, or not readable
        was = self.dirs.get(wd)
        if was is not None and was != folder:  # the same folder, moved here: its old name is free
            self._forget(was)
        old = self.wds.get(folder)
        if old is not None and old != wd:  # the folder that had this name is gone (replaced)
            self.dirs.pop(old, None)
            self.inodes.pop(old, None)
        self.dirs[wd], self.wds[folder], self.inodes[wd] = folder, wd, here
        self.watched.add(folder)
        if was is not None and was != folder and was in self.roots:
            self.expect(was)  # a root moved into another root: waited for under its name again

    def _forget(self, folder: str) -> None:
        """A folder's name is no longer watched (its watch may go on under another name)."""
        self.watched.discard(folder)
        self.trees.discard(folder)
        self.on_the_way.discard(folder)
        self.wds.pop(folder, None)

    def check_roots(self) -> bool:
        """At the minute's rescan: a root whose folder is not the one watched under its name
        (a folder above it was renamed or removed, which tells a watch nothing) is watched
        again (_gone). True when one is."""
        moved = False
        for root in sorted(self.roots):
            wd = self.wds.get(root)
            if wd is None:
                continue  # expected (not there yet), or gone and waited for already
            try:
                st = os.stat(root)
                if (st.st_dev, st.st_ino) == self.inodes.get(wd):
                    continue
            except OSError:
                pass
            self._gone(wd, root)
            moved = True
        return moved

    def _gone(self, wd: int, folder: str) -> bool:
        """A watched folder was deleted or moved away (a watch follows its folder: moved, it
        would report the new place's changes under the old name). Forget it and the folders
        under it, and wait for the roots at or under it to be made again, as for a root
        that never was (expect): a user who empties ~/.codex/sessions, or moves it aside,
        and the agent that makes it again are seen at once, not at the minute's rescan.
        True when such a root is there again. Moved to a place watched too (renamed inside
        a root), the folder is watched there already (_watch): nothing to do."""
        try:
            st = os.stat(folder)
            if (st.st_dev, st.st_ino) == self.inodes.get(wd) and self.dirs.get(wd) == folder:
                return False  # renamed inside a watched folder: already watched under its new name
        except OSError:
            pass
        stale = [(w, f) for w, f in self.dirs.items() if f == folder or f.startswith(folder + os.sep)]
        for w, f in stale:
            del self.dirs[w]
            self.inodes.pop(w, None)
            self._forget(f)
            self._rm(self.fd, w)  # (a deleted one's watch is gone already: an error, ignored)
        back = False
        for root in sorted(self.roots):
            if root == folder or root.startswith(folder + os.sep):
                back |= self.expect(root)
        return back

    def wait(self, timeout: float) -> Optional[set]:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return set()
        time.sleep(0.05)  # let a burst of writes arrive: one pass for them all
        changed: set = set()
        rescan = False
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            pos = 0
            while pos + EVENT.size <= len(data):
                wd, mask, _cookie, length = EVENT.unpack_from(data, pos)
                name = data[pos + EVENT.size : pos + EVENT.size + length].rstrip(b"\0")
                pos += EVENT.size + length
                if mask & IN_Q_OVERFLOW:
                    rescan = True
                    continue
                folder = self.dirs.get(wd)
                if mask & IN_IGNORED:
                    self.dirs.pop(wd, None)
                    self.inodes.pop(wd, None)
                    if folder:
                        self._forget(folder)
                    continue
                if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                    if folder is not None and self._gone(wd, folder):
                        rescan = True
                    continue
                if folder is None or not name:
                    continue
                path = os.path.join(folder, os.fsdecode(name))
                if folder in self.on_the_way and mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO) and self._arrived(path):
                    rescan = True
                if folder not in self.trees:
                    continue  # watched only on the way to a root: nothing else here counts
                if mask & IN_ISDIR:
                    if mask & (IN_CREATE | IN_MOVED_TO):
                        self.add_tree(path)
                        rescan = True  # files may have arrived before the watch
                    continue
                changed.add(source_key(path))
        return None if rescan else changed

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def notifier(poll: bool = False):
    """inotify where the system has it, polling otherwise (or when asked)."""
    if not poll and sys.platform.startswith("linux"):
        try:
            return Inotify()
        except (OSError, AttributeError):
            pass
    return Polling()
