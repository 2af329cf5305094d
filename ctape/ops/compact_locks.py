"""compact and the locks: the compaction lock (one compaction at a time, salvage takes it
too), every session's lock held together for the swap without a deadlock beside batches
(`_lock_sessions`), the snapshot of the files taken under each session's lock, and the
temporary packs a killed compaction left.
"""

from __future__ import annotations

import fcntl
import os
import time

from ..model.errors import ConflictError, UnsafePath
from ..store.files import fsync_dir, lock_waiting
from ..store.store import Store

POLITE_SECONDS = 1.0  # _lock_sessions: how long it takes locks only without waiting while holding others
HOLD_WAIT = 5.0  # then the wait for each lock while holding the ones before: well below a batch's (BATCH_LOCK_WAIT)


def _lock_sessions(store: Store, sessions: list[str]) -> list[int]:
    """Every session's lock, held together (their folders' descriptors).

    A batch takes the locks of the sessions it writes as it comes to them and holds them
    to its end, in its own order: compaction waiting for s1 while holding s0, beside a
    batch that holds s1 and waits for s0, hung both for good (found by an audit). So at
    first a busy lock is waited for with nothing else held (the others let go), then kept
    while the rest are tried again without waiting. That alone starves beside writers that
    keep a few sessions busy at all times: some lock was always taken at the moment of the
    try (8 processes appending without pause kept compaction from its swap for 50 s). So
    after POLITE_SECONDS it takes them in order instead, waiting for each while holding
    the ones before (in the kernel: files.lock_waiting), but at most HOLD_WAIT each: a
    batch that holds that one and waits for one held here waits longer (BATCH_LOCK_WAIT),
    so compaction gives way first (lets go of all, waits for that lock alone, and tries
    again), and neither hangs."""
    fds: dict[str, int] = {}
    try:
        for s in sessions:
            fds[s] = os.open(store.session_dir(s), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        held: set[str] = set()
        polite_until = time.monotonic() + POLITE_SECONDS
        while True:
            busy = None
            for s in sessions:
                if s in held:
                    continue
                # at first without waiting; then in order, holding the ones before
                if not lock_waiting(fds[s], HOLD_WAIT if time.monotonic() >= polite_until else 0):
                    busy = s
                    break
                held.add(s)
            if busy is None:
                return [fds[s] for s in sessions]
            for s in held:
                fcntl.flock(fds[s], fcntl.LOCK_UN)
            fcntl.flock(fds[busy], fcntl.LOCK_EX)  # the only one held while waiting
            held = {busy}
    except BaseException:
        for fd in fds.values():
            os.close(fd)  # (closing lets go of its lock)
        raise


def _snapshot(store: Store) -> dict[str, int]:
    """Every data file and its size, each session's taken under its lock: a writer holds
    the lock from its write() to the end of its fsync, so no size falls inside an append
    (a torn tail a crash left is still possible: pass 1 notes where whole records end)."""
    out = {p: size for p, size in store.list_files(None).items() if p.startswith("packs/")}
    for s in store.sessions():
        if s in store.unsafe_sessions:
            continue  # a symlink in it: left alone, like damage (fsck reports it)
        try:
            fd = os.open(store.session_dir(s), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except (FileNotFoundError, NotADirectoryError):
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            store.forget_listing(s)  # the sizes as they are under the lock, not as a look before it found them
            out.update(store.list_files(s))
        except UnsafePath:
            store.unsafe_sessions.add(s)
        finally:
            os.close(fd)
    return out


def _remove_stale_temp_packs(store: Store) -> None:
    """A `.tmp-pack-*` is written only under the compaction lock, which this process holds:
    any found now was left by a compaction that was killed."""
    for s in store.sessions():
        d = store.session_dir(s)
        try:
            names = [n for n in os.listdir(d) if n.startswith(".tmp-pack-")]
        except OSError:
            continue
        for n in names:
            try:
                os.unlink(os.path.join(d, n))
            except OSError:
                pass
        if names:
            fsync_dir(d)


class _compaction_lock:
    def __init__(self, store: Store):
        self.store = store
        self.fd = -1

    def __enter__(self):
        self.fd = os.open(self.store.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise ConflictError("another `ctape compact` is running on this tape; wait for it to finish") from None
        return self

    def __exit__(self, *exc):
        os.close(self.fd)
