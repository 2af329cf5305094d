"""Small file-system helpers shared by the store, segments, packs and checks.

Object type and codec bytes live here too: every module that reads or writes
object records agrees on them.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional

from ..model.errors import StorageError, UnsafePath

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


def make_folder(path: str, parents: int = 0) -> str:
    """Make `path`, and its `parents` nearest parents, as folders only the user reads
    (0700); each one made is synced into its parent, so that a crash keeps it (and what
    is then written in it). A symlink in their place is refused (UnsafePath)."""
    chain = [path]
    for _ in range(parents):
        chain.insert(0, os.path.dirname(chain[0]))
    for d in chain:
        check_not_symlink(d)
        if not os.path.isdir(d):
            os.makedirs(d, mode=0o700, exist_ok=True)
            fsync_dir(os.path.dirname(d))
    return path


TOO_LARGE = ("the file would pass this process's file size limit or the file system's largest file; raise the "
             "limit (`ulimit -f unlimited`) or use another file system (FAT32 stops at 4 GiB), and retry")


def storage_error(e: OSError, what: str, after: str = "nothing acknowledged was lost") -> StorageError:
    """A failed write as one line that says what to do; `after`: what the failure left as
    it was (said in parentheses when space ran out)."""
    if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return StorageError(f"cannot write {what}: the tape directory is read-only ({e.strerror}); use a writable copy")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageError(f"cannot write {what}: no space left on the device; free space and retry" + (f" ({after})" if after else ""))
    if e.errno == errno.EFBIG:
        return StorageError(f"cannot write {what}: {TOO_LARGE}" + (f" ({after})" if after else ""))
    return StorageError(f"cannot write {what}: {e.strerror}")


def pread_all(fd: int, size: int, offset: int = 0) -> bytes:
    """Up to `size` bytes from `offset` (fewer only at the end of the file)."""
    out = bytearray()
    while len(out) < size:
        chunk = os.pread(fd, size - len(out), offset + len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def decompress_prefix(frame: bytes, most: int, dctx=None) -> bytes:
    """What a damaged zstd frame gives before its decoder stops (at most `most` bytes):
    output comes an inner block of 128 KiB at a time, so bytes before the damage come
    out whole. Not verified: a damaged inner block may decode to other bytes without an
    error (the frame's checksum says so only at its end), so the caller checks each record
    it takes from them."""
    z = zstd()
    dobj = (dctx or z.ZstdDecompressor()).decompressobj()
    out, size = [], 0
    for at in range(0, len(frame), 1 << 14):
        try:
            piece = dobj.decompress(frame[at : at + (1 << 14)])
        except z.ZstdError:
            break
        out.append(piece)
        size += len(piece)
        if size >= most:
            break
    return b"".join(out)[:most]


def dict_decompressor(content: bytes):
    """A zstd decompressor for blocks compressed with `content` as a raw dictionary (a `D` record's)."""
    z = zstd()
    return z.ZstdDecompressor(dict_data=z.ZstdCompressionDict(content, dict_type=z.DICT_TYPE_RAWCONTENT))


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


# The access time a new segment is given: 2000-01-01T00:00:00Z, a whole day, so any file
# system stores it as it is; a read by anyone but ctape moves it (segment.py).
UNREAD_ATIME_NS = 946_684_800 * 1_000_000_000


def reads_move_atime(folder: str) -> bool:
    """Does a plain read of a file in `folder` move the file's access time?

    The probe is a file with no name (O_TMPFILE; where there is none, a `.tmp-probe-*`
    removed at once) whose access time is set far in the past, read once by a second
    open file: under relatime and strictatime its access time moves; under noatime, and
    on file systems that keep no access times, it stays. Rsync both ways is safe only
    where it moves (docs/sync.md)."""
    past = UNREAD_ATIME_NS
    tmp = None
    try:
        fd = os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o600)
        again = f"/proc/self/fd/{fd}"
    except (AttributeError, OSError):
        tmp = os.path.join(folder, f".tmp-probe-{os.getpid()}-{os.urandom(4).hex()}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        again = tmp
    try:
        os.write(fd, b"x")
        os.utime(fd, ns=(past, os.fstat(fd).st_mtime_ns))
        reader = os.open(again, os.O_RDONLY)
        try:
            os.read(reader, 1)
        finally:
            os.close(reader)
        return os.fstat(fd).st_atime_ns != past
    finally:
        os.close(fd)
        if tmp is not None:
            os.unlink(tmp)


def check_not_symlink(path: str) -> Optional[os.stat_result]:
    """Refuse a symlink at `path` (UnsafePath); its lstat, or None when nothing is there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"refusing symlink inside the tape directory: {path}; replace it with the real file or folder")
    return st


def lock_within(fd: int, seconds: float) -> bool:
    """Take an exclusive flock on `fd` if it comes free within `seconds` (flock itself waits
    without end): polled, the pause doubling from 1 ms to 50 ms. False when it did not."""
    end = time.monotonic() + seconds
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= end:
                return False
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


class _TimedOut(Exception):
    pass


def lock_waiting(fd: int, seconds: float) -> bool:
    """flock `fd`, waiting in the kernel for at most `seconds` (an interval timer ends the
    wait). A waiter in the kernel is woken at each release; polling (lock_within) lost to
    processes that take the lock again at once: 8 of them appending without pause kept
    compaction from its swap for 50 s, where this takes it in a second. Only on the main
    thread with SIGALRM unused (the signal is the only way to end an flock wait); else
    polled. False may also come when the timer went off just after the lock was taken:
    a caller given False lets go of it (segment) or waits for it next with nothing else
    held, which a lock held already passes at once (compact)."""
    if (seconds <= 0 or threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL
            or signal.getitimer(signal.ITIMER_REAL)[0]):
        return lock_within(fd, seconds)

    def expire(signum, frame):
        raise _TimedOut()

    signal.signal(signal.SIGALRM, expire)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds)
            fcntl.flock(fd, fcntl.LOCK_EX)
            return True
        except _TimedOut:
            return False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _TimedOut:  # went off after the try's end (it fires once): held, unless the try ended otherwise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (held already: passes; free: taken now)
            return True
        except BlockingIOError:
            return False
    finally:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def copy_bytes(src: int, dst: int, n: int) -> None:
    """Copy the first n bytes of file src to dst (at its position): in the kernel where it
    can (copy_file_range, a shared extent on file systems that have them), else by reads."""
    done = 0
    if hasattr(os, "copy_file_range"):
        try:
            while done < n:
                got = os.copy_file_range(src, dst, n - done, done)
                if got == 0:
                    break
                done += got
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM):
                raise
    while done < n:
        b = os.pread(src, min(n - done, 1 << 20), done)
        if not b:
            raise OSError(errno.EIO, f"file ended at {done} of {n} bytes while copied")
        write_all(dst, b)
        done += len(b)


def room_for_open_files(need: int) -> tuple[bool, int]:
    """Whether this process may hold `need` descriptors at once, raising its soft limit
    toward the hard one when that is what stands in the way (a desktop's soft limit is often
    1,024 or 256 with a hard one far above, as Go's runtime raises it for every program);
    (yes or no, the limit now)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return True, soft
    if hard != resource.RLIM_INFINITY and hard < need:
        return False, hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    except (ValueError, OSError):
        return False, soft
    return True, need


# the advice for a damaged file in the tape's top-level packs/ (fsck, a refused append, a read's warning)
PACKS_ADVICE = ("ctape writes nothing to packs/ and salvage leaves it: restore the file from another copy of the tape, "
                "or move it out of the tape directory")


def damage_advice(rel: str, salvage: str) -> str:
    """What to do about damage in the data file `rel`: `salvage` (the caller's wording of
    "run `ctape fsck --salvage`"), or PACKS_ADVICE for a file in packs/, which salvage leaves."""
    return PACKS_ADVICE if rel.startswith("packs/") else salvage


# what link() says on a file system without hard links (exFAT, vfat, many FUSE and SMB
# mounts): EPERM on Linux's exFAT and vfat, ENOTSUP/EOPNOTSUPP or ENOSYS elsewhere
NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS)


def place_new(tmp: str, path: str) -> bool:
    """A whole file `tmp` (written and synced) takes the name `path` unless a file has it:
    False then, and `tmp` stays for the caller to remove. A hard link does this at once,
    where link() exists; without hard links (init on an exFAT stick said "the tape
    directory is read-only": found by an audit) `tmp` is renamed to `path` after a look
    that it is not there: still whole, but two processes making the same name in the same
    instant could both succeed, the later one's bytes kept (every caller writes the same
    bytes under a name, or a ctape.json two inits race for). `tmp` is gone when True."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError as e:
        if os.path.lexists(path):
            return False
        if e.errno not in NO_HARD_LINKS:
            raise
        os.rename(tmp, path)
        return True
    os.unlink(tmp)
    return True


def second_name(src: str, dst: str) -> bool:
    """`dst` becomes a copy of the file `src` that stays when `src` is replaced: a hard link,
    or where the file system has none, a copy of its bytes (synced, renamed in whole).
    False when `dst` is there already."""
    try:
        os.link(src, dst)
        return True
    except FileExistsError:
        return False
    except OSError as e:
        if e.errno not in NO_HARD_LINKS:
            raise
    tmp = f"{dst}.tmp-{os.getpid()}"
    fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            copy_bytes(fd_in, fd, os.fstat(fd_in).st_size)
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        os.close(fd_in)
    try:
        return place_new(tmp, dst)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


@contextmanager
def uninterrupted(reraise: bool = True) -> Iterator[None]:
    """SIGINT held off while a clean-up runs (the demo's, a failed clone's): a second
    Ctrl-C, or the one `timeout` sends to the whole process group after the first, would
    stop it half done. Raised once the clean-up is over (unless not `reraise`: the
    process is exiting on an interrupt already). Only in the main thread, where Python
    runs signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = signal.signal(signal.SIGINT, lambda sig, frame: got.append(sig))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
    if got and reraise and callable(old):
        old(signal.SIGINT, None)


def open_private(path: str, mode: str = "w"):
    """A file (new or emptied) only its owner may read, whatever the umask: the cache's
    files describe the tape (paths, positions, names)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    return os.fdopen(fd, mode)
