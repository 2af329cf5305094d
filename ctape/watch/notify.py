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
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
MASK = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF
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
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd = fd
        self.dirs: dict[int, str] = {}
        self.watched: set[str] = set()
        self.expected: set[str] = set()  # roots that do not exist yet
        self.on_the_way: set[str] = set()  # folders watched for the next step to one
        self.trees: set[str] = set()  # folders watched for what they hold (add_tree)

    def add_tree(self, folder: str) -> None:
        for root, dirs, _ in os.walk(folder):
            self._watch(root)
            self.trees.add(root)

    def expect(self, folder: str) -> bool:
        """A root that does not exist yet (the agent was never run here): its nearest
        folder that does is watched, for the creation of the next folder on the way only
        (not its whole tree), and so on down, so the root is watched within a pass of its
        creation rather than at the minute's rescan. True when the root is there now."""
        folder = os.path.abspath(folder)
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
        if folder in self.watched:
            return
        wd = self._add(self.fd, os.fsencode(folder), MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err == errno.ENOSPC:
                raise OSError(err, "too many inotify watches (fs.inotify.max_user_watches)")
            return  # gone meanwhile, or not readable
        self.dirs[wd] = folder
        self.watched.add(folder)

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
                    if folder:
                        self.watched.discard(folder)
                        self.trees.discard(folder)
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
