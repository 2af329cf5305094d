"""SegmentWriter: one session's lock and active segment, for this writer.

An append queues its records here and `flush` writes them with one write and
one fdatasync. The writer keeps its view of the session (refs, active segment,
where it left off) between appends and checks cheaply, under the session lock,
whether anyone else wrote meanwhile. It seals its segment once a copy of it may
exist (see "copies taken while we append" below).

SegmentWriter inherits that check and the reload of its view (writer_view.py), and
the repeats of what a copy of a segment may lack (repeats.py).
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
import threading
import time
from typing import TYPE_CHECKING, Optional

from . import framing, packing
from ..model.errors import ConflictError, CtapeError, InvalidInput, InvalidName
from ..model.canonical import canonical_json, object_hash
from ..model.models import check_new_session_name
from .files import TYPE_BLOB, TYPE_ENTRY, UNREAD_ATIME_NS, check_not_symlink, fsync_dir, lock_waiting, place_new, storage_error, write_all, zstd
from .index import IndexBatch, hash_key
from .repeats import Repeats
from .writer_view import RACY_NS, WriterView  # noqa: F401 - RACY_NS is read from here too

if TYPE_CHECKING:
    from .store import Store

SEGMENT_LIMIT = 64 << 20  # roll to a new segment past this size
BLOCK_BYTES = 1 << 20  # in a batch: uncompressed bytes of records per block
BLOCK_OBJECT_MAX = 64 << 10  # larger objects stay on their own, so reading one needs no neighbours
# Small blocks (a durable append is one) are compressed with a dictionary of the session's
# recent raw block bytes, written to the segment as a `D` record (see packing.py):
DICT_AFTER = 4  # small blocks in a segment before it gets a dictionary
DICT_MIN = 16 << 10  # size of a segment's first dictionary
DICT_MAX = 64 << 10  # size of the largest
DICT_REFRESH = 8  # a new dictionary once this many times its size has been compressed with it
DICT_BLOCK_MAX = 256 << 10  # larger blocks compress well alone
BATCH_LOCK_WAIT = 60.0  # seconds a batch holding other sessions waits for one more (_wait_holding_others)
KEPT_MAX = 4  # segments a writer keeps its descriptor of after writing to them (see "copies that come back", repeats.py)


# the writer of this process holding each session folder's lock, by the folder's (st_dev,
# st_ino): a thread that asks again through another Store's writer would wait on itself
_HOLDERS: dict[tuple[int, int], "SegmentWriter"] = {}


def forget_holders() -> None:
    """In a child after fork: the locks it lists are its parent's."""
    _HOLDERS.clear()


class SegmentWriter(WriterView, Repeats):
    """The lock and the active segment of one session, for this writer."""

    def __init__(self, store: Store, session: str):
        self.store = store
        self.session = session
        self.dir = store.session_dir(session)
        self.dir_fd = -1
        self.fd = -1
        self._locked = False
        self._held: Optional[tuple[int, int]] = None  # the folder's (st_dev, st_ino) while locked (_HOLDERS)
        self._thread = 0  # the thread that took the lock
        self.used = 0  # when this writer was last used, in the store's count of writes
        self.rel: Optional[str] = None
        self.file_id = 0
        self.offset = 0
        self.buf = bytearray()
        self.block: list[tuple] = []  # records of a batch waiting to be compressed together
        self.block_size = 0
        self._bctx = None
        self.dict: Optional[_Dictionary] = None  # the dictionary in use, in the active segment
        # raw bytes of this writer's last blocks: the material for its dictionaries. Only this
        # session's own text: a dictionary is stored in the session's files, which may be
        # synced, shared or kept where other sessions are not. Only text the session's files
        # still hold: dropped when a file leaves the folder or a redaction arrives (`_forget_recent`)
        self.recent = bytearray()
        self.recent_epoch = 0  # the index's redaction_epoch when `recent` began
        self.raw_blocks: dict[int, bytes] = {}  # offset -> raw bytes of the Z blocks queued in buf
        self.plain_blocks: tuple[Optional[str], int] = (None, 0)  # small blocks in a segment without one
        self.batch = IndexBatch()
        self.new_objects: list[str] = []
        self.new_set: set[str] = set()
        self.created = False
        self._refstate = None  # the session's refs as this writer knows them (see session.py)
        self.vouched = False  # whether its next ref record needs no `gap` (Session._put_ref)
        # a run of appends in a batch that moved HEAD's branch, its ref record not built yet
        # (Session._follow_last): (the function that builds it, its arguments)
        self.follow: Optional[tuple] = None
        self.held_ref: Optional[dict] = None  # an append record waiting for the batch's end
        self.repeats_due: dict[str, tuple] = {}  # rel -> (fd, fstat) of segments seen read: their repeats go with the next write
        self.last_ref: Optional[tuple] = None  # (RefState, the record last applied to it): Session._follow_last
        self.fresh: set[str] = set()  # entries this writer created, with no child yet (their first child is new too)
        self.last_entry: tuple[Optional[str], int] = (None, 0)  # (hash, seq) of the last entry it wrote
        self.partials_checked = False
        # the session folder's change time (ctime) when the view was taken: not its mtime,
        # which `rsync -a` sets back to the sender's after changing the folder
        self._seen_dir: Optional[int] = None
        self._seen_files: dict[str, object] = {}  # and its data files (`_listing`)
        self._racy_until = 0  # until then (ns), the folder's mtime alone cannot be trusted
        self._racy_lock = threading.Lock()  # a reader thread clears it, the writer sets it (`_view_is_current`)
        self.ino = 0  # the active segment's inode
        self._others_grow = False  # the folder holds segments of other writer ids
        # a segment this writer made, named after its active one: (path, size, inode) (`_note_own_file`)
        self._newer_segment: Optional[tuple[str, int, int]] = None
        self._noted: dict[str, int] = {}  # files it made since it last listed the folder: name -> inode (`stat`'s)
        self.made_dir = False  # this writer created the session folder and has not written to it yet
        self.derived: Optional[dict] = None  # state and pending calls at derived_head (see Session._track_derived)
        self.derived_head: Optional[str] = None
        self.derived_epoch = 0  # the index's redaction_epoch when `derived` was folded from reads
        # segments this writer wrote to: path -> [descriptor, [(write's offset, when it was synced)]]
        self.kept: dict[str, list] = {}

    # -- locking and the cached view ------------------------------------------------

    @property
    def refstate(self):
        """The session's refs as this writer knows them, with a pending run of appends'
        record applied (built under the store's lock: another thread waits for the batch)."""
        if self.follow is not None:
            with self.store._lock:
                self.end_follow()
        return self._refstate

    @refstate.setter
    def refstate(self, value) -> None:
        if self.follow is not None and value is not self._refstate:
            self.end_follow()  # never dropped with the view it was made on (discard drops it first)
        self._refstate = value

    def end_follow(self) -> None:
        """Build and queue the ref record of the pending run of appends, if any."""
        f, self.follow = self.follow, None
        if f is not None:
            f[0](self, *f[1:])

    @property
    def locked(self) -> bool:
        return self._locked

    @locked.setter
    def locked(self, value: bool) -> None:
        # the store keeps the writers holding their lock, for the end of a batch: a process
        # that wrote many sessions keeps a writer for each, and must not look at them all
        self._locked = value
        if value:
            self.store.locked_writers[self.session] = self
        elif self.store.locked_writers.get(self.session) is self:
            del self.store.locked_writers[self.session]

    def lock(self) -> None:
        while True:
            if self.dir_fd < 0:
                self._open_dir()
            try:
                fcntl.flock(self.dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._not_held_by_this_thread()
                if any(w is not self for w in self.store.locked_writers.values()):
                    self._wait_holding_others()
                else:
                    fcntl.flock(self.dir_fd, fcntl.LOCK_EX)
            dst = os.fstat(self.dir_fd)
            if dst.st_nlink > 0:
                break
            # the folder was removed while we waited (a discarded first write): start over
            os.close(self.dir_fd)
            self.dir_fd = -1
        self.locked = True
        self._held, self._thread = (dst.st_dev, dst.st_ino), threading.get_ident()
        _HOLDERS[self._held] = self
        try:
            if not self._view_is_current(dst):
                if self.kept:
                    self.check_kept(closing=False)
                self._reload()
            else:
                if self._newer_segment is not None or any(rel != self.rel and k[1] for rel, k in self.kept.items()):
                    # a segment this writer left (sealed), or is about to leave for its repeat,
                    # may have been read by a copy: what the copy lacks goes with the next
                    # write, as after a reload (the active one's read is `_begin`'s, while it stays)
                    self.check_kept(closing=False)
                if self._newer_segment is not None:
                    self._take_up_newer()
        except BaseException:
            self.unlock()
            raise

    def _wait_holding_others(self) -> None:
        """Wait for this session's lock while a batch of this Tape holds other sessions'. A
        batch takes them as it comes to them and keeps them to its end, so two batches that
        write the same sessions in two orders may each wait for the other for good (flock
        sees no deadlock). So the wait here has an end: past BATCH_LOCK_WAIT seconds,
        ConflictError, and the batch writes nothing (the other goes on). The end is drawn
        between once and twice that, so that two batches waiting for each other do not give
        up together and meet again the same way when run again at once: one gives up, the
        other goes on. `compact` never waits while holding a lock (ops/compact_locks.py,
        _lock_sessions)."""
        start = time.monotonic()
        if lock_waiting(self.dir_fd, BATCH_LOCK_WAIT * (1 + secrets.randbelow(1000) / 1000)):
            return
        fcntl.flock(self.dir_fd, fcntl.LOCK_UN)  # (a timer that went off just as the lock came: not kept)
        held = sorted(s for s, w in self.store.locked_writers.items() if w is not self)
        err = ConflictError(
            f"session {self.session!r} stayed locked for {time.monotonic() - start:.1f} s while this batch holds "
            f"{', '.join(repr(s) for s in held[:3])}{' ...' if len(held) > 3 else ''}: another batch may be waiting for "
            f"them (batches that write several sessions in different orders wait for each other); a batch that ends "
            f"with this error writes nothing: run it again, or write the sessions in one order")
        err.contested = self.dir  # the batch waits for it once it let go of the others (Store.batch)
        raise err

    def unlock(self) -> None:
        if self.locked:
            if _HOLDERS.get(self._held) is self:
                del _HOLDERS[self._held]
            fcntl.flock(self.dir_fd, fcntl.LOCK_UN)
            self.locked = False

    def _not_held_by_this_thread(self) -> None:
        """Another process, or another Tape of this process, holds the session's lock. When
        it is another Tape used by this very thread (inside its batch), waiting would never
        end: say so instead."""
        fst = os.fstat(self.dir_fd)
        holder = _HOLDERS.get((fst.st_dev, fst.st_ino))
        if holder is not None and holder.store is not self.store and holder._thread == threading.get_ident():
            raise InvalidInput(f"session {self.session!r} is locked by another Tape this thread uses (inside its batch): "
                               f"write through that Tape, or end its batch first")

    def _open_dir(self) -> None:
        st = self.store
        sessions = os.path.join(st.root, "sessions")
        check_not_symlink(self.dir)
        try:
            if not os.path.isdir(self.dir):
                check_new_session_name(self.session)  # a new session: its name must read as one
                os.makedirs(sessions, mode=0o700, exist_ok=True)
                os.mkdir(self.dir, 0o700)
                fsync_dir(sessions)
                self.made_dir = True
        except FileExistsError:
            pass
        except OSError as e:
            raise storage_error(e, f"session {self.session}") from None
        if not self.made_dir:
            _check_case_twin(sessions, self.session)
        self.dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)

    def _open_segment(self) -> None:
        st = self.store
        newest = st.index.last_segment(f"sessions/{self.session}/{st.writer}-")
        self.rel = None
        if newest is not None:
            last, (fid, indexed, torn, corrupt) = newest
            try:
                fst = os.stat(os.path.join(st.root, last), follow_symlinks=False)
            except FileNotFoundError:
                # a row of the shared index cache that another process wrote from an older
                # listing, the file since compacted away: a new segment, as after any doubt
                return
            size = fst.st_size
            copied = fst.st_atime_ns != UNREAD_ATIME_NS  # read since it was made: a copy may exist
            # a second name for the file (a hard link planted from outside the tape, or a
            # `cp -al` backup) would receive every append too: never write to such a file
            shared = fst.st_nlink != 1 or not stat.S_ISREG(fst.st_mode)
            if not torn and not corrupt and not copied and not shared and size == indexed and 0 < size < SEGMENT_LIMIT:
                self.rel, self.file_id, self.offset, self.ino = last, fid, size, fst.st_ino

    def _create_segment(self, repeats: Optional[dict] = None) -> None:
        """Start a new segment. Its file appears at the end of the first write, whole
        (see `_publish`): queue its header and remember its name."""
        rel = self._new_segment_name()
        self.rel, self.file_id, self.offset = rel, self.store.index.file_id(rel), 0
        self.created = True
        self.buf += self._header_frame(repeats)

    def _new_segment_name(self) -> str:
        """Names carry the creation time, so a name is never used twice, even after
        compaction removed the file and an rsync without --delete brought an old copy back.

        The time is past the writer's newest segment's here, and never below 0. A clock
        behind (stepped back, or before 1970) named a new segment that sorts before the
        newest, which stayed the writer's "last": when that one was sealed (read by a
        backup), every append started another file; and a time before 1970 put a minus sign
        in the name, which sync does not take for a segment, so the file was never pushed
        and push said "up to date" (found by an audit)."""
        st = self.store
        prefix = f"sessions/{self.session}/{st.writer}-"
        n = max(time.time_ns(), 0)
        last = st.index.last_segment(prefix)
        if last is not None:
            digits = last[0][len(prefix) : -len(".seg")]
            if digits.isdigit():
                n = max(n, int(digits) + 1)
        while True:
            rel = f"{prefix}{n:020d}.seg"
            if not os.path.lexists(os.path.join(st.root, rel)):
                return rel
            n += 1

    def _publish(self) -> None:
        """The queued bytes of a new segment become its file, whole (`_publish_file`)."""
        self.fd = self._publish_file(self.rel, self.buf)
        self.ino = os.fstat(self.fd).st_ino

    def _publish_file(self, rel: str, content: bytes) -> int:
        """Write `content` to a file with no name yet, set its access time to
        UNREAD_ATIME_NS, sync it and give it its name; returns its descriptor. No copy can
        ever see a segment empty or without its header and first records, and any later
        read of it moves its access time."""
        path = os.path.join(self.store.root, rel)
        fd, tmp = _unnamed_file(self.dir)
        try:
            write_all(fd, content)
            os.utime(fd, ns=(UNREAD_ATIME_NS, os.fstat(fd).st_mtime_ns))
            os.fsync(fd)
            if tmp is None:
                # with a folder fd, os.link calls linkat with AT_SYMLINK_FOLLOW (plain link()
                # would link the /proc symlink itself)
                os.link(f"/proc/self/fd/{fd}", os.path.basename(path), dst_dir_fd=self.dir_fd, follow_symlinks=True)
            else:
                os.rename(tmp, path)
            tmp = None
            fsync_dir(self.dir)
        except BaseException:
            os.close(fd)
            if tmp is not None:
                _unlink_quietly(tmp)
            raise
        self._note_own_file(os.path.basename(path), os.fstat(fd).st_ino)
        return fd

    def _header_frame(self, repeats: Optional[dict] = None) -> bytes:
        head = {"format": "ctape-segment", "version": 1, "writer": self.store.writer, "session": self.session}
        if repeats:
            head["repeats"] = repeats
        head = canonical_json(head)
        return framing.frame(framing.T_HEADER, head)

    # -- copies taken while we append -----------------------------------------------------
    #
    # A growing segment must never be appended to once another copy of it may exist:
    # `rsync -a` back from that copy would replace the longer file with the shorter one.
    # A copy is a read, and a read moves the file's access time. A segment is made with
    # its access time set to UNREAD_ATIME_NS, an instant long past, and appears only
    # with its first bytes in it; relatime (the Linux default) updates an access time
    # older than a day on every read, and ctape's own readers use O_NOATIME. So
    # "was it read" is "has its access time left UNREAD_ATIME_NS", whatever the clock's
    # tick. If it has before a write, the segment is sealed and a new one started; if it
    # moved during a write, that write is repeated in a new segment before it is
    # acknowledged. Where reads do not move access times (a noatime mount: see
    # atime_probe), every write goes to a new segment instead.

    def _atime(self) -> int:
        return os.fstat(self.fd).st_atime_ns if self.fd >= 0 else os.stat(os.path.join(self.store.root, self.rel)).st_atime_ns

    def _open_fd(self) -> None:
        """Open the active segment for appending, if this process does not hold it open."""
        if self.fd < 0:
            # read and write: the descriptor may have to give back what it wrote (check_kept)
            self.fd = os.open(os.path.join(self.store.root, self.rel), os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW)

    def _write_buf(self, durable: bool) -> bool:
        """Write the queued bytes (and sync them when durable). Was the segment read while
        we wrote? (A new segment cannot have been: it had no name.)"""
        if self.fd < 0 and self.created:
            self._publish()
            return False
        self._open_fd()
        write_all(self.fd, self.buf)
        if durable:
            os.fdatasync(self.fd)
        return self._atime() != UNREAD_ATIME_NS

    def _begin(self) -> None:
        """At the first record of a write: seal the segment if it was read since it was
        made, or if reads cannot be seen on this file system."""
        atimes_work = self.store.atimes_work()
        if self.rel is None or (self.created and self.fd < 0):
            return
        self._open_fd()
        fst = os.fstat(self.fd)
        if fst.st_atime_ns != UNREAD_ATIME_NS or fst.st_nlink != 1 or not atimes_work:
            k = self.kept.get(self.rel)
            if fst.st_atime_ns != UNREAD_ATIME_NS and k is not None and k[1]:
                # a copy read it: it may lack the writes made just before, and reach a third
                # copy after this file did; the repeat goes with the write that sealed it
                # (flush), not before: a write discarded (a rejected batch) leaves the tape
                # as it was, and the close or the next look repeats them instead
                self.repeats_due.setdefault(self.rel, (self.fd, fst))
            self._close_segment()

    def _frame(self, type_: int, body: bytes) -> int:
        """Queue one record; returns its offset in the file."""
        self._room()
        return self._queue(type_, body)

    def _room(self) -> None:
        """Make sure the next record has a segment to go to."""
        if not self.buf:
            self._begin()
        if self.rel is None or self.offset + len(self.buf) >= SEGMENT_LIMIT:
            if self.rel is not None:
                # a full segment is synced before it is left; a held ref record and an
                # open block stay queued: no ref may move before the write (or batch) it ends
                self.flush(durable=True, with_queued=False)
                self._close_segment()
            self._create_segment()

    def _queue(self, type_: int, body: bytes) -> int:
        offset = self.offset + len(self.buf)
        self.buf += framing.frame(type_, body)
        return offset

    def put_object(self, type_: int, body: bytes, new: bool = False, refs: Optional[list[str]] = None, h: Optional[str] = None) -> str:
        """Queue an object unless the tape has it; `new` skips the look-up for one that
        cannot exist yet; `refs` are the hashes it refers to, when known (see packing.py);
        `h`, its hash when the caller has it already."""
        st = self.store
        if h is None:
            h = object_hash(b"entry" if type_ == TYPE_ENTRY else b"blob", body)
        if h in self.new_set:
            return h
        # an object still queued by another session's writer is not on disk yet: if that
        # write failed, this one would refer to nothing, so it gets its own copy
        if h not in st.pending and not new:
            loc = st.index.find_object(h)
            # the row may outlive its file: a compaction by a process with another cache
            # removed it (this cache's rows of other sessions are not looked at before a
            # write), and a value it dropped is stored nowhere. Under this session's lock a
            # file still there stays until this write is done (the swap takes every lock,
            # and rescues what new entries refer to)
            if loc is not None and st.file_on_disk(loc[0]):
                return h
            if type_ == TYPE_BLOB and any(path == "$" for path, _ in st.index.redactions().get(h, ())):
                # a value redacted whole stays unwritten (as compaction leaves it), here
                # when an agent or an import writes the same text again: the entry that
                # refers to it reads as the marker (docs/format.md section 17)
                return h
        if len(body) < BLOCK_OBJECT_MAX:
            # small objects go into the write's block, compressed together (as in packs)
            self._to_block(framing.T_OBJECT, (h, type_, body), (h, type_), refs)
        else:
            offset = self._frame(framing.T_OBJECT, st.encode_object(type_, body, h))
            self.batch.objects.append((hash_key(h), self.file_id, offset, 1 if type_ == TYPE_ENTRY else 0))
        # named among this write's objects before it is pending: an exception between the
        # two (a KeyboardInterrupt lands anywhere) must never leave it pending for good, where
        # other writes would refer to it and nothing writes it
        self.new_objects.append(h)
        self.new_set.add(h)
        st.pending[h] = (type_, body)
        if type_ == TYPE_ENTRY:
            st.entries_written += 1
        return h

    def put_ref(self, rec: dict, coalesce: bool = False) -> None:
        """Queue a ref record. Inside a batch, consecutive appends that move the same
        ref share one record (the last position), written when the batch ends."""
        held = self.held_ref
        if held is not None:
            if coalesce and held["set"].keys() == rec["set"].keys() and "gap" not in held:  # a gap is never dropped
                self.held_ref = rec  # the ref log replays the records, so the old value follows
                return
            self.held_ref = None
            self._frame_ref(held)
        if coalesce and self.store._batch_depth > 0:
            self.held_ref = rec
        else:
            self._frame_ref(rec)

    def _frame_ref(self, rec: dict) -> None:
        # a ref record goes into the block, after the entries it names: a torn write
        # can then never leave a record whose entries are missing
        refs = [v for v in rec["set"].values() if v is not None and v[:1] != "@"]
        refs += [v for v in rec.get("old", {}).values() if v is not None and v[:1] != "@"]
        if rec.get("at"):
            refs.append(rec["at"])
        self._to_block(framing.T_REF, canonical_json(rec), rec, refs)

    # -- blocks: a write's records compressed together (see packing.py) ---------------------------

    def _to_block(self, type_: int, body, what, refs: Optional[list[str]] = None) -> None:
        """Queue a record for the block: a ref record's body, or an object as (name, type,
        canonical data) (packing.encode_block)."""
        self.block.append((type_, body, refs, what))
        self.block_size += len(body[2]) if type_ == framing.T_OBJECT else len(body)
        if self.block_size >= BLOCK_BYTES:
            self._close_block()

    def _close_block(self) -> None:
        """Frame the queued block (see packing.py) and add its index rows."""
        if not self.block:
            return
        items, self.block, self.block_size = self.block, [], 0
        raw = packing.encode_block([item[:3] for item in items])
        self._room()
        d = self._dictionary() if len(raw) < DICT_BLOCK_MAX else None
        if d is None:
            offset = self._queue(framing.T_BLOCK, self._plain().compress(raw))
        else:
            here = self.offset + len(self.buf)
            offset = self._queue(framing.T_DICT_BLOCK, packing.dict_block_body(here - d.offset, d.cctx.compress(raw)))
            d.used += len(raw)
            self.raw_blocks[offset] = raw  # in case the write must be repeated without dictionaries
        if len(raw) < DICT_BLOCK_MAX:
            recent = self.recent
            if not recent:
                self.recent_epoch = self.store.index.redaction_epoch
            recent += raw
            if len(recent) > 2 * DICT_MAX:
                del recent[:-DICT_MAX]
        for type_, body, _, what in items:
            if type_ == framing.T_OBJECT:
                h, kind = what
                self.batch.objects.append((hash_key(h), self.file_id, offset, 1 if kind == TYPE_ENTRY else 0))
            else:
                self.batch.add_ref(what)

    def _plain(self):
        if self._bctx is None:
            self._bctx = zstd().ZstdCompressor(level=3, write_content_size=True, write_checksum=True)
        return self._bctx

    def _dictionary(self) -> Optional["_Dictionary"]:
        """The dictionary for the next small block of the active segment: the one in use,
        or a new one made from the blocks this writer wrote last to the session, queued as
        a `D` record.

        A segment gets its first dictionary once DICT_AFTER small blocks went into it
        without one (a single batch or import would not repay it), and that one is small,
        as a short session would not repay a large one; each next dictionary is twice the
        size of the last, up to DICT_MAX. A tape of format version 1 gets none."""
        if not self.store.dictionaries:
            return None
        d = self.dict if self.dict is not None and self.dict.rel == self.rel else None
        if d is None or d.used >= DICT_REFRESH * len(d.content):
            self._forget_redacted()
        recent = self.recent
        if d is None:
            rel, plain = self.plain_blocks
            plain = plain if rel == self.rel else 0
            if plain < DICT_AFTER or len(recent) < DICT_MIN:
                self.plain_blocks = (self.rel, plain + 1)
                return None
            size = DICT_MIN
        elif d.used >= DICT_REFRESH * len(d.content):
            if len(recent) < DICT_MIN:
                return d  # its material was dropped (_forget_redacted): this one is in the file already
            size = min(DICT_MAX, 2 * len(d.content))
        else:
            return d
        content = bytes(recent[-size:])
        offset = self._queue(framing.T_DICT, self._plain().compress(content))
        self.dict = _Dictionary(self.rel, offset, content)
        return self.dict

    def _forget_redacted(self) -> None:
        """Before a new dictionary is made of `recent`: when a redaction arrived since its
        bytes began, they may hold the redacted text, which a `D` record would
        write again into a new file after `compact` took it out of the old ones (nothing
        reads a dictionary for secrets: it is no entry). So they are dropped; the blocks
        written from then on are material again. Redactions made by other processes are
        in the index cache they share, or read with their records when the session is
        reloaded (the redacting writer's segment changes the folder)."""
        idx = self.store.index
        idx.redactions()
        if idx.redaction_epoch != self.recent_epoch:
            self.recent.clear()

    def put_partial(self, rec: dict) -> None:
        body = canonical_json(rec)
        self._frame(framing.T_PARTIAL, body)
        self.batch.add_partial(rec, body)

    # -- writing --------------------------------------------------------------------------

    def flush(self, durable: bool, with_queued: bool = True) -> None:
        """Write what is queued (durably: synced before it returns). Any exception leaves
        the file and this writer as they were before the write: an error of the disk is
        undone in _flush; anything else (a KeyboardInterrupt from a signal handler lands at
        any line) is undone here, where it left the queued records half framed or half
        written and the next write built on them, or on an entry never written (found by
        an audit: damaged blocks, and appends whose parent was nowhere)."""
        try:
            self._flush(durable, with_queued)
        except CtapeError:
            raise  # a failed write: _flush undid it
        except BaseException:
            self._undo_write()
            raise

    def _flush(self, durable: bool, with_queued: bool) -> None:
        if with_queued:
            self.end_follow()
            if self.held_ref is not None:
                held, self.held_ref = self.held_ref, None
                self._frame_ref(held)
            self._close_block()
        if not self.buf:
            return
        if self.repeats_due:
            due, self.repeats_due = self.repeats_due, {}
            try:
                for rel in sorted(due, reverse=True):  # the newest first: the segment just sealed holds the latest writes
                    fd, fst = due[rel]
                    k = self.kept.get(rel)
                    if k is not None and k[0] == fd and k[1]:
                        self._repeat_before_read(rel, fd, fst, k[1])
            except OSError as e:
                # nothing of this write is on disk: drop it as a discard does (what is left to
                # repeat keeps its writes in `kept`: the next look sees the read again)
                self._forget_queued()
                if self.created and self.fd < 0:
                    self._close_segment()
                    self.created = False
                raise storage_error(e, f"session {self.session}") from None
        st = self.store
        try:
            read_meanwhile = self._write_buf(durable)
        except OSError as e:
            self._undo_write()
            raise storage_error(e, f"session {self.session}") from None
        written, start = self.buf, self.offset
        raw_blocks, self.raw_blocks = self.raw_blocks, {}
        if not read_meanwhile:
            self._note_written(start)
        self.offset += len(written)
        self.buf = bytearray()
        self.made_dir = False
        self.batch.files.append((self.file_id, self.offset, 0, 0))
        st.index.add(self.batch)
        self.batch = IndexBatch()
        for h in self.new_objects:
            st.pending.pop(h, None)
        self.new_objects = []
        self.new_set = set()
        self.created = False
        if read_meanwhile:
            records = self._without_dictionaries(bytes(written), start, raw_blocks)
            self._repeat_in_new_segment(records, durable, start)

    def discard(self) -> None:
        """Drop what was queued and not written; forget the view it was built on.

        A session folder that this writer created for the discarded writes goes too
        (a new segment's file only appears with its first write): the tape is left as it was."""
        self._forget_queued()
        if self.created and self.fd < 0:
            self._close_segment()
            self.created = False
        self._remove_made_dir()

    def _remove_made_dir(self) -> None:
        """The session folder this writer created, when nothing was written in it."""
        if self.made_dir:
            try:
                os.rmdir(self.dir)  # only succeeds when empty
                fsync_dir(os.path.dirname(self.dir))
                os.close(self.dir_fd)
                self.dir_fd = -1
                self.store._writers.pop(self.session, None)
                self.locked = False
                self.made_dir = False
            except OSError:
                pass

    def _forget_queued(self) -> None:
        if self.buf or self.block:
            # the text of blocks that are not written (a discarded batch, a failed write) may
            # be in the dictionary material already: never put it in a later `D` record
            self.recent.clear()
        for h in self.new_objects:
            self.store.pending.pop(h, None)
        for listener in self.store.discard_listeners:
            listener(self.new_objects)
        self.new_objects = []
        self.new_set = set()
        self.batch = IndexBatch()
        self.buf = bytearray()
        self.block, self.block_size = [], 0
        self.raw_blocks = {}
        if self.dict is not None and self.dict.offset >= self.offset:
            self.dict = None  # its record was never written
        self.held_ref = None
        self.follow = None  # its record was never written: the appends it moved over are dropped too
        self.repeats_due = {}
        self.derived = self.derived_head = None
        self.fresh = set()
        self.refstate = None
        self.last_ref = None
        self._seen_dir = None

    def _undo_write(self) -> None:
        """After a failed write (full disk, I/O error) put the file back as it was.

        The bytes were never acknowledged, so cutting them off edits nothing that
        anyone has seen. If that fails too, never append after them again.
        """
        self._forget_queued()
        if self.rel is None:
            return
        path = os.path.join(self.store.root, self.rel)
        try:
            if self.created:
                # the write that would have made the file failed; if it got its name
                # before failing, it holds nothing acknowledged
                named = self.fd >= 0
                self._close_segment()
                self.created = False
                if named:
                    os.unlink(path)
                    fsync_dir(self.dir)
                # a new session's folder goes too: left, it blocked `session cp` to that
                # name ("already exists") while no command listed the session (an audit)
                self._remove_made_dir()
                return
            if self.fd >= 0:
                os.ftruncate(self.fd, self.offset)
                os.fdatasync(self.fd)
                self._forget_indexed_tail()
                return
        except OSError:
            pass
        self._close_segment()

    def _forget_indexed_tail(self) -> None:
        """Another process may have indexed the bytes just cut off: start the index over."""
        try:
            self.store._full_reindex()
        except Exception:  # noqa: BLE001 - the index is a cache; a later reader rebuilds it
            pass

    def _close_segment(self) -> None:
        if self.fd >= 0:
            k = self.kept.get(self.rel) if self.rel is not None else None
            if k is None or k[0] != self.fd:
                os.close(self.fd)
            self.fd = -1
        self.rel = None
        while len(self.kept) > KEPT_MAX:
            self._drop_kept(next(iter(self.kept)))

    def release(self) -> None:
        """At close: what a copy may lack of the kept segments is repeated (check_kept),
        then every descriptor goes."""
        if self.kept and self.dir_fd >= 0:
            try:
                if not self.locked:
                    fcntl.flock(self.dir_fd, fcntl.LOCK_EX)
                    self.locked = True
                self.check_kept(closing=True)
            except OSError:
                pass  # closing goes on; what could not be repeated stays as it is
        self.unlock()
        self._close_segment()
        for rel in list(self.kept):
            self._drop_kept(rel)
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def abandon(self) -> None:
        """In a child process after fork: let go of the descriptors inherited from the
        parent without touching what they hold. Closing a copy of a descriptor never
        releases the parent's flock (that goes with the last descriptor of the open file
        description); `unlock` would release it, so it is not called here."""
        fds = {self.dir_fd, self.fd, *(k[0] for k in self.kept.values())} - {-1}
        self.dir_fd = self.fd = -1
        self.kept = {}
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


class _Dictionary:
    """A `D` record of the active segment and a compressor that uses it."""

    def __init__(self, rel: str, offset: int, content: bytes):
        z = zstd()
        self.rel, self.offset, self.content, self.used = rel, offset, content, 0
        # level 3 for this dictionary's size, with match tables of 64 + 32 KiB instead of
        # level 3's 512 + 256: the blocks are small (a durable append's is ~1 KB), and the
        # tables, loaded for every block, had left the CPU's caches between two appends
        # (18-24 µs a block in the writer against 4 in a loop; 6-8 µs of a durable append
        # saved, 4-11% of its CPU, for 0.2-0.7% more bytes: docs/performance.md, "Smaller
        # match tables for dictionary blocks")
        p = z.ZstdCompressionParameters.from_level(3, source_size=DICT_BLOCK_MAX, dict_size=len(content))
        p = z.ZstdCompressionParameters(
            window_log=p.window_log, hash_log=14, chain_log=13, search_log=p.search_log, min_match=p.min_match,
            target_length=p.target_length, strategy=p.strategy, write_content_size=True, write_checksum=True)
        d = z.ZstdCompressionDict(content, dict_type=z.DICT_TYPE_RAWCONTENT)
        d.precompute_compress(compression_params=p)
        self.cctx = z.ZstdCompressor(dict_data=d, compression_params=p)


def _unnamed_file(folder: str) -> tuple[int, Optional[str]]:
    """A new file in `folder` for appending, with no name yet (O_TMPFILE; the caller
    links it in), or, where the file system has no unnamed files, under a temporary
    name (`.tmp-seg-*`, which no reader takes for a segment; the caller renames it)."""
    if hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd"):  # linked by its /proc name
        try:
            return os.open(folder, os.O_TMPFILE | os.O_RDWR | os.O_APPEND, 0o600), None
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    tmp = os.path.join(folder, f".tmp-seg-{secrets.token_hex(6)}")
    return os.open(tmp, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), tmp


def _check_case_twin(sessions: str, name: str) -> None:
    """On a file system that ignores case (macOS by default, Windows, exFAT and vfat) the
    sessions `chat` and `Chat` share one folder: each read the other's files as damage,
    and salvage folded one into the other (found by an audit). Where the folder answers to
    another case of the name, its real name must be this one."""
    other = name.swapcase()
    if other == name or not os.path.isdir(os.path.join(sessions, other)):
        return  # a name without letters, or a file system that keeps case apart: one stat
    names = os.listdir(sessions)
    if name not in names:
        twin = next((n for n in names if n.casefold() == name.casefold()), other)
        raise InvalidName(f"session {name!r} cannot be kept here: this file system ignores case, and session {twin!r} "
                          "has its folder; pick a name that differs in more than case")


def new_file_whole(folder: str, name: str, data: bytes) -> bool:
    """folder/name appears whole with `data`, durably (a file with no name yet, synced, then
    linked in; the folder synced); False when a file of that name is there already."""
    fd, tmp = _unnamed_file(folder)
    try:
        write_all(fd, data)
        os.fsync(fd)
        try:
            if tmp is None:  # linkat with a folder fd follows the /proc link (plain link() would not)
                dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dfd, follow_symlinks=True)
                finally:
                    os.close(dfd)
            elif not place_new(tmp, os.path.join(folder, name)):
                return False
        except FileExistsError:
            return False
    finally:
        os.close(fd)
        if tmp is not None and os.path.lexists(tmp):
            os.unlink(tmp)
    fsync_dir(folder)
    return True


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
