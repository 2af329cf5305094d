"""The tape directory on disk: files, objects, durability, locks, and the index.

Layout (docs/format.md is the full description):

    TAPE/ctape.json                              created once by init: format, version, tape id
    TAPE/sessions/<session>/<writer>-<time>.seg   append-only segments, one writer each
    TAPE/sessions/<session>/pack-<hash>.pack      immutable files written by compact
    TAPE/packs/                                   reserved (created, not written yet)

An append writes its new objects and its ref record to the session's segment of
this writer in one write() and one fsync. Everything else (where an object
lives, which records a session has) is in the local index and can be rebuilt.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import socket
import stat
import threading
import time
import zlib
from contextlib import contextmanager
from typing import Iterator, Optional

from blake3 import blake3

from . import framing, packing
from .canonical import canonical_json, object_hash
from .errors import CorruptObject, EntryNotFound, InvalidInput, NotATape, ObjectTooLarge, StorageError, UnsafePath
from .index import Index, IndexBatch, default_cache_root, hash_key

FORMAT_FILE = "ctape.json"
FORMAT_NAME = "ctape-tape"
FORMAT_VERSION = 1
SEGMENT_LIMIT = 64 << 20  # roll to a new segment past this size
DEFAULT_MAX_OBJECT = 1 << 30  # refuse frames that claim more than this when decompressed
COMPRESS_MIN = 256  # smaller objects are stored raw: zstd saves little on them and costs time per append

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


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _storage_error(e: OSError, what: str) -> StorageError:
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


class Store:
    """One open tape directory."""

    def __init__(self, root: str, *, cache_dir: Optional[str] = None, max_object: Optional[int] = None):
        self.root = os.path.abspath(root)
        meta_path = os.path.join(self.root, FORMAT_FILE)
        if not os.path.isdir(self.root):
            raise NotATape(f"no tape directory at {self.root}; create one with `ctape init`")
        check_not_symlink(meta_path)
        try:
            with open(meta_path, "rb") as f:
                meta = json.loads(f.read(1 << 16))
        except FileNotFoundError:
            raise NotATape(f"{self.root} is not a tape directory (no {FORMAT_FILE}); create one with `ctape init`") from None
        except (ValueError, OSError):
            raise NotATape(f"{meta_path} is damaged; restore it from a copy of the tape") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
            raise NotATape(f"{self.root} is not a ctape tape directory")
        if meta.get("version", 0) > FORMAT_VERSION:
            raise NotATape(f"{self.root} uses format version {meta['version']}; upgrade ctape to read it")
        self.tape_id = str(meta.get("tape_id", ""))
        for sub in ("sessions", "packs"):
            check_not_symlink(os.path.join(self.root, sub))
        self.max_object = max_object or int(os.environ.get("CTAPE_MAX_OBJECT", DEFAULT_MAX_OBJECT))
        self.writer = self._writer_id()
        self.index = Index(self._index_path(cache_dir))
        self._fds: dict[int, int] = {}
        self._known: dict[str, dict[str, int]] = {}  # session -> {file name: size} as last seen
        self._writers: dict[str, "SegmentWriter"] = {}
        self._batch_depth = 0
        self._lock = threading.RLock()
        self.pending: dict[str, tuple[int, bytes]] = {}  # objects written but not yet indexed
        self._cctx = None
        self._dctx = None
        self._blocks: dict[tuple[int, int], dict[str, bytes]] = {}
        self.discard_listeners: list = []  # called with the hashes of objects a failed batch dropped
        # what this process read from data files: lets tests prove that a question
        # about one session does not read the whole tape
        self.io = {"bytes_read": 0, "records_read": 0, "files_indexed": 0}

    # -- identity ---------------------------------------------------------------

    def _writer_id(self) -> str:
        env = os.environ.get("CTAPE_WRITER")
        if env:
            if not re.fullmatch(r"[a-z0-9]{4,32}", env):
                raise InvalidInput("CTAPE_WRITER must be 4-32 characters of a-z and 0-9")
            return env
        st = os.stat(self.root)
        machine = ""
        for p in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
            try:
                with open(p) as f:
                    machine = f.read().strip()
                break
            except OSError:
                continue
        ident = f"{self.tape_id}|{machine}|{socket.gethostname()}|{os.path.realpath(self.root)}|{st.st_dev}|{st.st_ino}"
        return blake3(ident.encode()).hexdigest()[:12]

    def _index_path(self, cache_dir: Optional[str]) -> Optional[str]:
        base = cache_dir or default_cache_root()
        st = os.stat(self.root)
        key = blake3(f"{self.tape_id}|{os.path.realpath(self.root)}|{st.st_dev}|{st.st_ino}".encode()).hexdigest()[:20]
        d = os.path.join(base, key)
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            path = os.path.join(d, "index.sqlite")
            if os.path.exists(path) and not os.access(path, os.W_OK):
                return None
            return path
        except OSError:
            return None  # no writable cache: index in memory, rebuilt per process

    @staticmethod
    def init(root: str) -> bool:
        """Create a tape directory; False when one is there already."""
        root = os.path.abspath(root)
        meta_path = os.path.join(root, FORMAT_FILE)
        if os.path.lexists(root) and not os.path.isdir(root):
            raise InvalidInput(f"cannot init: {root} exists and is not a directory; choose another path")
        if os.path.isdir(root):
            check_not_symlink(meta_path)
            if os.path.exists(meta_path):
                return False
        try:
            os.makedirs(root, mode=0o700, exist_ok=True)
            for sub in ("sessions", "packs"):
                os.makedirs(os.path.join(root, sub), mode=0o700, exist_ok=True)
            body = json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION, "tape_id": secrets.token_hex(16)}) + "\n"
            tmp = meta_path + f".tmp{os.getpid()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, body.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, meta_path)  # never replaces a ctape.json written meanwhile
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
            for d in (root, os.path.dirname(root)):
                _fsync_dir(d)
        except OSError as e:
            raise _storage_error(e, f"tape directory {root}") from None
        return True

    # -- files ------------------------------------------------------------------

    def session_dir(self, session: str) -> str:
        return os.path.join(self.root, "sessions", session)

    def list_files(self, session: Optional[str] = None) -> dict[str, int]:
        """Data files (relative path -> size) of one session plus packs, or of the whole tape."""
        out: dict[str, int] = {}
        dirs = ["packs"]
        if session is None:
            try:
                names = os.listdir(os.path.join(self.root, "sessions"))
            except FileNotFoundError:
                names = []
            dirs += [f"sessions/{n}" for n in sorted(names)]
        else:
            dirs.append(f"sessions/{session}")
        for d in dirs:
            full = os.path.join(self.root, d)
            check_not_symlink(full)
            try:
                with os.scandir(full) as it:
                    for e in it:
                        if e.name.endswith((".seg", ".pack")):
                            st = e.stat(follow_symlinks=False)
                            if stat.S_ISLNK(st.st_mode):
                                raise UnsafePath(f"refusing symlink inside the tape directory: {d}/{e.name}; replace it with the real file")
                            if stat.S_ISREG(st.st_mode):
                                out[f"{d}/{e.name}"] = st.st_size
            except (FileNotFoundError, NotADirectoryError):
                continue
        return out

    def damage(self, session: str) -> list[tuple[str, int]]:
        """Files of a session (and packs) with damaged records: (path, level)."""
        prefixes = (f"sessions/{session}/", "packs/")
        return [(p, c) for p, (_, _, _, c) in self.index.file_rows().items() if c and p.startswith(prefixes)]

    def sessions(self) -> list[str]:
        try:
            names = os.listdir(os.path.join(self.root, "sessions"))
        except FileNotFoundError:
            return []
        return sorted(n for n in names if os.path.isdir(os.path.join(self.root, "sessions", n)))

    def _read_fd(self, file_id: int) -> int:
        fd = self._fds.get(file_id)
        if fd is None:
            rel = self.index.path_of(file_id)
            if rel is None:
                raise EntryNotFound("index points at an unknown file; run `ctape fsck`")
            fd = open_for_reading(os.path.join(self.root, rel))
            self._fds[file_id] = fd
        return fd

    def close(self) -> None:
        for w in list(self._writers.values()):
            w.release()
        self._writers.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self.index.close()

    def __del__(self):
        try:
            self.index.sync()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass

    # -- index freshness ------------------------------------------------------------

    def refresh(self, session: Optional[str] = None) -> bool:
        """Bring the index up to date with the files; True when anything changed."""
        files = self.list_files(session)
        if session is not None and self._known.get(session) == files:
            return False
        rows = self.index.file_rows()
        scope = ("packs/",) if session is not None else ("packs/", "sessions/")
        prefixes = scope + ((f"sessions/{session}/",) if session is not None else ())
        for path, (fid, indexed, _, _) in rows.items():
            if path.startswith(prefixes) and (path not in files or files[path] < indexed):
                self._full_reindex()
                return True
        changed = False
        for path, size in files.items():
            row = rows.get(path)
            indexed = row[1] if row else 0
            if size > indexed or row is None:
                self._index_file(path, indexed)
                changed = True
        if session is not None:
            self._known[session] = files
        return changed

    def _full_reindex(self) -> None:
        """Rebuild the index from every file, in one transaction (readers never see it half-built)."""
        self._blocks.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._known.clear()
        batches = []
        with self.index.rebuilding():
            for path in self.list_files(None):
                batches.append(self._scan_file(path, 0))
            self.index.apply_many(batches)

    def _index_file(self, rel: str, start: int) -> None:
        self.index.apply(self._scan_file(rel, start))

    def _scan_file(self, rel: str, start: int) -> IndexBatch:
        """Index rows for the records of a file from `start` on."""
        fid = self.index.file_id(rel)
        batch = IndexBatch()
        try:
            fd = open_for_reading(os.path.join(self.root, rel))
        except (OSError, UnsafePath):
            return batch
        try:
            size = os.fstat(fd).st_size
            data = os.pread(fd, size - start, start) if size > start else b""
        finally:
            os.close(fd)
        self.io["bytes_read"] += len(data)
        self.io["files_indexed"] += 1
        indexed, torn, corrupt = start, 0, 0
        for item in framing.scan(data, 0):
            if isinstance(item, framing.Damage):
                if item.torn:
                    torn = 1
                    break
                corrupt = max(corrupt, _damage_level(data, item))
                continue
            self._index_record(batch, fid, start + item.offset, item.type, item.body)
            indexed = start + item.end
        if corrupt and not torn:
            indexed = start + len(data)
        batch.files.append((fid, indexed, torn, corrupt))
        return batch

    def _index_record(self, batch: IndexBatch, fid: int, offset: int, type_: int, body: bytes) -> None:
        if type_ == framing.T_BLOCK:
            try:
                inner = self.block_items(fid, offset, body)
            except CorruptObject:
                return  # fsck reports it
            for rec in inner:
                if rec.type != framing.T_BLOCK:
                    self._index_record(batch, fid, offset, rec.type, rec.body)
        elif type_ == framing.T_OBJECT:
            h = body[:32].hex()
            batch.objects.append((hash_key(h), fid, offset, 1 if body[32] == TYPE_ENTRY else 0))
        elif type_ == framing.T_REF:
            try:
                rec = json.loads(body)
                batch.add_ref(fid, offset, body, rec)
            except (ValueError, KeyError, TypeError):
                pass  # fsck reports unreadable records
        elif type_ == framing.T_PARTIAL:
            try:
                batch.add_partial(json.loads(body), body)
            except (ValueError, KeyError, TypeError):
                pass

    # -- objects ----------------------------------------------------------------------

    def encode_object(self, type_: int, body: bytes, h: Optional[str] = None) -> tuple[str, bytes]:
        """(hash, the object record's frame body)."""
        if h is None:
            h = object_hash(b"entry" if type_ == TYPE_ENTRY else b"blob", body)
        if len(body) >= COMPRESS_MIN:
            if self._cctx is None:
                self._cctx = zstd().ZstdCompressor(level=3, write_content_size=True)
            data, codec = self._cctx.compress(body), CODEC_ZSTD
            if len(data) >= len(body):
                data, codec = body, CODEC_RAW
        else:
            data, codec = body, CODEC_RAW
        return h, bytes.fromhex(h) + bytes((type_, codec)) + data

    def decode_object(self, h: str, rec_body: bytes) -> tuple[int, bytes]:
        if rec_body[:32].hex() != h:
            raise CorruptObject(f"object {h} is not where the index says; run `ctape fsck`")
        type_, codec = rec_body[32], rec_body[33]
        data = rec_body[34:]
        if codec == CODEC_ZSTD:
            body = self.decompress(data, f"object {h}")
        elif codec == CODEC_RAW:
            body = data
        else:
            raise CorruptObject(f"object {h} has an unknown codec {codec}; run `ctape fsck`")
        kind = b"entry" if type_ == TYPE_ENTRY else b"blob"
        if object_hash(kind, body) != h:
            raise CorruptObject(f"object {h} is corrupt (hash mismatch); run `ctape fsck`")
        return type_, body

    def read_record_at(self, file_id: int, offset: int, want_type: bool = False):
        """The body of the record at `offset` (with its type when asked), checksum verified."""
        try:
            fd = self._read_fd(file_id)
        except FileNotFoundError:
            raise EntryNotFound("a file the index names is gone (compacted?)") from None
        head = os.pread(fd, framing.HEADER_SIZE, offset)
        parsed = framing.parse_header(head) if len(head) == framing.HEADER_SIZE else None
        if parsed is None:
            raise CorruptObject(f"damaged record at offset {offset} of {self.index.path_of(file_id)}; run `ctape fsck`")
        type_, length = parsed
        rest = os.pread(fd, length + framing.TRAILER_SIZE, offset + framing.HEADER_SIZE)
        body = rest[:length]
        self.io["bytes_read"] += framing.HEADER_SIZE + len(rest)
        self.io["records_read"] += 1
        if len(rest) != length + framing.TRAILER_SIZE or int.from_bytes(rest[length:], "little") != zlib.crc32(body):
            raise CorruptObject(f"damaged record at offset {offset} of {self.index.path_of(file_id)}; run `ctape fsck`")
        return (type_, body) if want_type else body

    def block_items(self, file_id: int, offset: int, body: bytes) -> list[framing.Record]:
        """The records inside a pack block."""
        where = f"block at offset {offset} of {self.index.path_of(file_id)}"
        return packing.decode_block(self.decompress(body, where), where)

    def block_records(self, file_id: int, offset: int, body: bytes) -> dict[str, bytes]:
        """The object records inside a pack block, by hash (the last few blocks are cached)."""
        key = (file_id, offset)
        cached = self._blocks.get(key)
        if cached is None:
            cached = {r.body[:32].hex(): r.body for r in self.block_items(file_id, offset, body) if r.type == framing.T_OBJECT}
            self._blocks[key] = cached
            if len(self._blocks) > 8:
                self._blocks.pop(next(iter(self._blocks)))
        return cached

    def decompress(self, data: bytes, what: str) -> bytes:
        """Decompress a zstd frame, refusing one that claims more than max_object bytes."""
        z = zstd()
        try:
            size = z.frame_content_size(data)
        except z.ZstdError:
            raise CorruptObject(f"{what} is corrupt (bad zstd frame); run `ctape fsck`") from None
        if size < 0 or size > self.max_object:
            raise ObjectTooLarge(f"{what} claims {size} bytes, over the limit of {self.max_object}; raise CTAPE_MAX_OBJECT if you trust this tape")
        if self._dctx is None:
            self._dctx = z.ZstdDecompressor()
        try:
            return self._dctx.decompress(data, max_output_size=size)
        except z.ZstdError:
            raise CorruptObject(f"{what} is corrupt (zstd data); run `ctape fsck`") from None

    def read_object_at(self, h: str, file_id: int, offset: int) -> tuple[int, bytes]:
        cached = self._blocks.get((file_id, offset))
        if cached is not None and h in cached:
            return self.decode_object(h, cached[h])
        type_, body = self.read_record_at(file_id, offset, want_type=True)
        if type_ == framing.T_BLOCK:
            inner = self.block_records(file_id, offset, body).get(h)
            if inner is None:
                raise CorruptObject(f"object {h} is not in the block the index names; run `ctape fsck`")
            body = inner
        return self.decode_object(h, body)

    def get_object(self, h: str) -> tuple[int, bytes]:
        """(type, canonical body) of an object, verified against its hash."""
        p = self.pending.get(h)
        if p is not None:
            return p
        loc = self.index.find_object(h)
        if loc is None:
            self.refresh()
            loc = self.index.find_object(h)
            if loc is None:
                self._not_found(h)
        try:
            return self.read_object_at(h, *loc)
        except (CorruptObject, EntryNotFound):
            # the index may be stale (files replaced by compaction): rebuild once and retry
            self._full_reindex()
            loc = self.index.find_object(h)
            if loc is None:
                self._not_found(h)
            return self.read_object_at(h, *loc)

    def _not_found(self, h: str):
        """An object the index cannot find: damaged if the tape has damaged records, else not here yet."""
        damaged = [p for p, (_, _, _, c) in self.index.file_rows().items() if c]
        if damaged:
            raise CorruptObject(f"object {h} cannot be read: damaged records in {', '.join(damaged[:3])}; run `ctape fsck`")
        raise EntryNotFound(f"object {h} is not in this tape (not synced yet, or removed)")

    def has_object(self, h: str) -> bool:
        return h in self.pending or self.index.find_object(h) is not None

    # -- writing ---------------------------------------------------------------------

    @contextmanager
    def writing(self, session: str) -> Iterator["SegmentWriter"]:
        """Hold the session's lock; on exit the writes are durable (or, in a batch, queued).

        The writer of a session stays open between writes, with what it knows
        (refs, active segment); taking the lock checks cheaply that nobody else
        wrote meanwhile, and reloads when someone did.
        """
        with self._lock:
            w = self._writers.get(session)
            if w is None:
                w = SegmentWriter(self, session)
                self._writers[session] = w
            if not w.locked:
                w.lock()
            ok = False
            try:
                yield w
                ok = True
            finally:
                if self._batch_depth == 0:
                    try:
                        if ok:
                            w.flush(durable=True)
                        else:
                            w.discard()
                    finally:
                        w.unlock()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Writes inside share one fsync per file at the end; an exception discards them all."""
        with self._lock:
            self._batch_depth += 1
            ok = False
            try:
                yield
                ok = True
            finally:
                self._batch_depth -= 1
                if self._batch_depth == 0:
                    writers = [w for w in self._writers.values() if w.locked]
                    done = 0
                    try:
                        if ok:
                            for w in writers:
                                w.flush(durable=True)
                                done += 1
                    finally:
                        for w in writers[done:]:
                            w.discard()  # not written: drop, so no later append writes them
                        for w in writers:
                            w.unlock()


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _damage_level(data: bytes, d: framing.Damage) -> int:
    """1: a damaged object record (reading that object fails); 2: anything else, which may
    have been a ref record, so the refs read from this file cannot be trusted."""
    head = data[d.offset : d.offset + framing.HEADER_SIZE]
    parsed = framing.parse_header(head) if len(head) == framing.HEADER_SIZE else None
    return 1 if parsed is not None and parsed[0] == framing.T_OBJECT else 2


def _files_row(file_id: int, indexed: int) -> IndexBatch:
    b = IndexBatch()
    b.files.append((file_id, indexed, 0, 0))
    return b


class SegmentWriter:
    """The lock and the active segment of one session, for this writer."""

    def __init__(self, store: Store, session: str):
        self.store = store
        self.session = session
        self.dir = store.session_dir(session)
        self.dir_fd = -1
        self.fd = -1
        self.locked = False
        self.rel: Optional[str] = None
        self.file_id = 0
        self.offset = 0
        self.buf = bytearray()
        self.batch = IndexBatch()
        self.new_objects: list[str] = []
        self.new_set: set[str] = set()
        self.created = False
        self.refstate = None  # the session's refs as this writer knows them (see session.py)
        self.held_ref: Optional[dict] = None  # an append record waiting for the batch's end
        self.fresh: set[str] = set()  # entries this writer created (their children are new too)
        self.last_entry: tuple[Optional[str], int] = (None, 0)  # (hash, seq) of the last entry it wrote
        self.partials_checked = False
        self._seen_dir: Optional[int] = None  # the session folder's mtime when the view was taken
        self._seen_sizes: dict[str, int] = {}  # and its data files' sizes
        self._others_grow = False  # the folder holds segments of other writer ids
        self.made_dir = False  # this writer created the session folder and has not written to it yet
        self.atime_seen: Optional[int] = None  # the active segment's access time after our last write
        self.derived: Optional[dict] = None  # state and pending calls at derived_head (see Session._track_derived)
        self.derived_head: Optional[str] = None

    # -- locking and the cached view ------------------------------------------------

    def lock(self) -> None:
        while True:
            if self.dir_fd < 0:
                self._open_dir()
            fcntl.flock(self.dir_fd, fcntl.LOCK_EX)
            if os.fstat(self.dir_fd).st_nlink > 0:
                break
            # the folder was removed while we waited (a discarded first write): start over
            os.close(self.dir_fd)
            self.dir_fd = -1
        self.locked = True
        try:
            if not self._view_is_current():
                self._reload()
        except BaseException:
            self.unlock()
            raise

    def unlock(self) -> None:
        if self.locked:
            fcntl.flock(self.dir_fd, fcntl.LOCK_UN)
            self.locked = False

    def view_is_current(self) -> bool:
        """Without the lock: may this writer's view still be used for reading?"""
        return self.dir_fd >= 0 and not self.buf and self._view_is_current()

    def _view_is_current(self) -> bool:
        """Did anyone change the session since this writer last looked?

        Writers on this machine append to the same segment (same writer id), so
        its size tells; new files (another writer, an rsync, compaction) change
        the folder's mtime. An mtime too close to when it was read could hide a
        second change in the same clock tick, so such a view is not trusted.
        """
        if self._seen_dir is None or self.refstate is None:
            return False
        if os.fstat(self.dir_fd).st_mtime_ns != self._seen_dir:
            return False
        if self._others_grow:
            # segments of other writer ids (CTAPE_WRITER, another path to this folder)
            # grow without changing the folder: compare every file's size
            return self._sizes() == self._seen_sizes
        if self.fd >= 0:
            return os.fstat(self.fd).st_size == self.offset
        return self.rel is None or os.stat(os.path.join(self.store.root, self.rel)).st_size == self.offset

    def _sizes(self) -> dict[str, int]:
        """Every data file of the session and its size (writers with other ids append too)."""
        out = {}
        with os.scandir(self.dir) as it:
            for e in it:
                if e.name.endswith((".seg", ".pack")):
                    out[e.name] = e.stat(follow_symlinks=False).st_size
        return out

    def _reload(self) -> None:
        st = self.store
        mtime = os.fstat(self.dir_fd).st_mtime_ns
        st.refresh(self.session)
        self.refstate = None
        self.partials_checked = False
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self._open_segment()
        racy = time.time_ns() - mtime < 50_000_000
        self._seen_dir = None if racy else mtime
        self._seen_sizes = self._sizes()
        mine = f"{self.store.writer}-"
        self._others_grow = any(n.endswith(".seg") and not n.startswith(mine) for n in self._seen_sizes)

    def _open_dir(self) -> None:
        st = self.store
        sessions = os.path.join(st.root, "sessions")
        check_not_symlink(self.dir)
        try:
            if not os.path.isdir(self.dir):
                os.makedirs(sessions, mode=0o700, exist_ok=True)
                os.mkdir(self.dir, 0o700)
                _fsync_dir(sessions)
                self.made_dir = True
        except FileExistsError:
            pass
        except OSError as e:
            raise _storage_error(e, f"session {self.session}") from None
        self.dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)

    def _open_segment(self) -> None:
        st = self.store
        rows = st.index.file_rows()
        prefix = f"sessions/{self.session}/{st.writer}-"
        mine = sorted(p for p in rows if p.startswith(prefix) and p.endswith(".seg"))
        self.rel = None
        if mine:
            last = mine[-1]
            fid, indexed, torn, corrupt = rows[last]
            size = os.stat(os.path.join(st.root, last), follow_symlinks=False).st_size
            fst = os.stat(os.path.join(st.root, last), follow_symlinks=False)
            copied = fst.st_atime_ns > fst.st_mtime_ns  # read since its last write: a copy may exist
            if not torn and not corrupt and not copied and size == indexed and size < SEGMENT_LIMIT:
                self.rel, self.file_id, self.offset = last, fid, size
                self.atime_seen = fst.st_atime_ns
                if size == 0:  # created by a writer that died before its first write
                    self._queue_header()


    def _create_segment(self) -> None:
        st = self.store
        # Names carry the creation time, so a name is never used twice, even after
        # compaction removed the file and an rsync without --delete brought an old copy back.
        while True:
            rel = f"sessions/{self.session}/{st.writer}-{time.time_ns():020d}.seg"
            try:
                fd = os.open(os.path.join(st.root, rel), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                break
            except FileExistsError:
                continue
            except OSError as e:
                raise _storage_error(e, f"session {self.session}") from None
        self.fd = fd
        self.atime_seen = os.fstat(fd).st_atime_ns
        _fsync_dir(self.dir)
        self.rel, self.file_id, self.offset = rel, st.index.file_id(rel), 0
        self.created = True
        self._seen_dir = None  # we changed the folder ourselves
        self._queue_header()

    def _header_frame(self) -> bytes:
        head = canonical_json({"format": "ctape-segment", "version": 1, "writer": self.store.writer, "session": self.session})
        return framing.frame(framing.T_HEADER, head)

    def _queue_header(self) -> None:
        self.buf += self._header_frame()

    # -- queueing records ---------------------------------------------------------------

    # -- copies taken while we append -----------------------------------------------------
    #
    # A growing segment must never be appended to once another copy of it may exist:
    # `rsync -a` back from that copy would replace the longer file with the shorter one.
    # A copy is a read, and a read moves the file's access time (relatime, the Linux
    # default, updates it when it is not newer than the last write; ctape's own readers
    # use O_NOATIME). So a writer notes the access time when it writes; if it has moved
    # before the next write, the segment is sealed and a new one started; if it moved
    # during a write, that write is repeated in a new segment before it is acknowledged.

    def _atime(self) -> int:
        return os.fstat(self.fd).st_atime_ns if self.fd >= 0 else os.stat(os.path.join(self.store.root, self.rel)).st_atime_ns

    def _begin(self) -> None:
        """At the first record of a write: seal the segment if it was read since our last write."""
        if self.rel is None:
            return
        if self.fd < 0:
            self.fd = os.open(os.path.join(self.store.root, self.rel), os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        atime = self._atime()
        if self.atime_seen is not None and atime != self.atime_seen:
            self._close_segment()
        else:
            self.atime_seen = atime

    def _frame(self, type_: int, body: bytes) -> int:
        """Queue one record; returns its offset in the file."""
        if not self.buf:
            self._begin()
        if self.rel is None or self.offset + len(self.buf) >= SEGMENT_LIMIT:
            if self.rel is not None:
                # a full segment is synced before it is left, and a held ref record stays
                # queued: it must not move a ref before the write (or batch) it ends
                self.flush(durable=True, with_held=False)
                self._close_segment()
            self._create_segment()
        offset = self.offset + len(self.buf)
        self.buf += framing.frame(type_, body)
        return offset

    def put_object(self, type_: int, body: bytes, new: bool = False) -> str:
        """Queue an object unless the tape has it; `new` skips the look-up for one that cannot exist yet."""
        st = self.store
        h = object_hash(b"entry" if type_ == TYPE_ENTRY else b"blob", body)
        if h in self.new_set:
            return h
        # an object still queued by another session's writer is not on disk yet: if that
        # write failed, this one would refer to nothing, so it gets its own copy
        if h not in st.pending and not new and st.index.find_object(h) is not None:
            return h
        h, rec = st.encode_object(type_, body, h)
        offset = self._frame(framing.T_OBJECT, rec)
        self.batch.objects.append((hash_key(h), self.file_id, offset, 1 if type_ == TYPE_ENTRY else 0))
        st.pending[h] = (type_, body)
        self.new_objects.append(h)
        self.new_set.add(h)
        return h

    def put_ref(self, rec: dict, coalesce: bool = False) -> None:
        """Queue a ref record. Inside a batch, consecutive appends that move the same
        ref share one record (the last position), written when the batch ends."""
        held = self.held_ref
        if held is not None:
            if coalesce and held["set"].keys() == rec["set"].keys():
                self.held_ref = rec  # the ref log replays the records, so the old value follows
                return
            self.held_ref = None
            self._frame_ref(held)
        if coalesce and self.store._batch_depth > 0:
            self.held_ref = rec
        else:
            self._frame_ref(rec)

    def _frame_ref(self, rec: dict) -> None:
        body = canonical_json(rec)
        offset = self._frame(framing.T_REF, body)
        self.batch.add_ref(self.file_id, offset, body, rec)

    def put_partial(self, rec: dict) -> None:
        body = canonical_json(rec)
        self._frame(framing.T_PARTIAL, body)
        self.batch.add_partial(rec, body)

    # -- writing --------------------------------------------------------------------------

    def flush(self, durable: bool, with_held: bool = True) -> None:
        if self.held_ref is not None and with_held:
            held, self.held_ref = self.held_ref, None
            self._frame_ref(held)
        if not self.buf:
            return
        st = self.store
        try:
            if self.fd < 0:
                self.fd = os.open(os.path.join(st.root, self.rel), os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
            _write_all(self.fd, self.buf)
            if durable:
                os.fdatasync(self.fd)
            before, self.atime_seen = self.atime_seen, self._atime()
            read_meanwhile = before is not None and self.atime_seen != before
        except OSError as e:
            self._undo_write()
            raise _storage_error(e, f"session {self.session}") from None
        records = bytes(self.buf[len(self._header_frame()) :] if self.created else self.buf)
        self.offset += len(self.buf)
        self._seen_sizes[os.path.basename(self.rel)] = self.offset
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
            self._repeat_in_new_segment(records, durable)

    def _repeat_in_new_segment(self, records: bytes, durable: bool) -> None:
        """The segment was read while we wrote, so the reader's copy may lack this write.
        Write the same records again to a new segment (a record does not depend on where
        it sits): the write then survives whatever later happens to the copied file.
        Index rows still point at the first copy, which this machine keeps."""
        self._close_segment()
        try:
            self._create_segment()
            self.buf += records
            _write_all(self.fd, self.buf)
            if durable:
                os.fdatasync(self.fd)
            self.atime_seen = self._atime()
        except OSError as e:
            self._undo_write()
            raise _storage_error(e, f"session {self.session}") from None
        self.offset = len(self.buf)
        self.buf = bytearray()
        self.created = False
        self.store.index.add(_files_row(self.file_id, self.offset))

    def discard(self) -> None:
        """Drop what was queued and not written; forget the view it was built on.

        A segment file or session folder that this writer created for the
        discarded writes, and that holds nothing, goes too: the tape is left as it was."""
        self._forget_queued()
        if self.created and self.rel is not None:
            try:
                path = os.path.join(self.store.root, self.rel)
                if os.path.getsize(path) == 0:
                    self._close_segment()
                    os.unlink(path)
                    self.created = False
            except OSError:
                pass
        if self.made_dir:
            try:
                os.rmdir(self.dir)  # only succeeds when empty
                _fsync_dir(os.path.dirname(self.dir))
                os.close(self.dir_fd)
                self.dir_fd = -1
                self.store._writers.pop(self.session, None)
                self.locked = False
            except OSError:
                pass

    def _forget_queued(self) -> None:
        for h in self.new_objects:
            self.store.pending.pop(h, None)
        for listener in self.store.discard_listeners:
            listener(self.new_objects)
        self.new_objects = []
        self.new_set = set()
        self.batch = IndexBatch()
        self.buf = bytearray()
        self.held_ref = None
        self.derived = self.derived_head = None
        self.fresh = set()
        self.refstate = None
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
                self._close_segment()
                self.created = False
                os.unlink(path)
                _fsync_dir(self.dir)
                return
            if self.fd >= 0:
                os.ftruncate(self.fd, self.offset)
                os.fdatasync(self.fd)
                self.atime_seen = self._atime()
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
            os.close(self.fd)
            self.fd = -1
        self.rel = None
        self.atime_seen = None

    def release(self) -> None:
        self.unlock()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1
