"""Small file-system helpers shared by the store, segments, packs and checks.

Object type and codec bytes live here too: every module that reads or writes
object records agrees on them.
"""

from __future__ import annotations

import errno
import os
import stat

from .errors import StorageError, UnsafePath

TYPE_ENTRY = ord("E")
TYPE_BLOB = ord("B")
CODEC_RAW = 0
CODEC_ZSTD = 1

_zstd = None


def zstd():
    global _zstd
    if _zstd is None:
        import zstandard

        _zstd = zstandard
    return _zstd


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def storage_error(e: OSError, what: str) -> StorageError:
    if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return StorageError(f"cannot write {what}: the tape directory is read-only ({e.strerror}); use a writable copy")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageError(f"cannot write {what}: no space left on the device; free space and retry (nothing acknowledged was lost)")
    return StorageError(f"cannot write {what}: {e.strerror}")


def open_for_reading(path: str) -> int:
    """Open a data file to read it without touching its access time.

    Writers use the access time to notice that a copy of their growing segment
    was taken (by rsync, say): ctape's own reads must not look like one.
    O_NOATIME is refused for files of other users; then a plain open is used.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW
    try:
        return os.open(path, flags | getattr(os, "O_NOATIME", 0))
    except PermissionError:
        return os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePath(f"refusing symlink inside the tape directory: {path}") from None
        raise


def check_not_symlink(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"refusing symlink inside the tape directory: {path}; replace it with the real file or folder")


def write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
