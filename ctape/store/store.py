"""The tape directory on disk: files, objects, durability, locks, and the index.

Layout (docs/format.md is the full description):

    TAPE/ctape.json                              created once by init: format, version, tape id
    TAPE/sessions/<session>/<writer>-<time>.seg   append-only segments, one writer each
    TAPE/sessions/<session>/pack-<hash>.pack      immutable files written by compact
    TAPE/packs/                                   reserved (created, not written yet)

An append writes its new objects and its ref record to the session's segment of
this writer in one write() and one fsync. Everything else (where an object
lives, which records a session has) is in the local index and can be rebuilt.

The Store opens a tape, lists its files, keeps their descriptors and writes; it
inherits the index kept fresh (freshness.py) and the reads of records and objects
(reading.py). What a tape's folder is lives in folder.py, and how a record is read
and judged in records.py.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import socket
import stat
import threading
import time
import warnings
import weakref
from contextlib import contextmanager
from typing import Iterator, Optional

from blake3 import blake3

from . import segment
from ..model.errors import (
    NOATIME_WARNING,
    ConflictError,
    CtapeError,
    CtapeWarning,
    InvalidInput,
    NotATape,
    StorageError,
    UnsafePath,
)
from .files import (  # noqa: F401 - TYPE_*, CODEC_*, open_for_reading and zstd are used through this module too
    CODEC_RAW,
    CODEC_ZSTD,
    TYPE_BLOB,
    TYPE_ENTRY,
    UNREAD_ATIME_NS,
    check_not_symlink,
    fsync_dir,
    place_new,
    lock_waiting,
    open_for_reading,
    reads_move_atime,
    storage_error,
    write_all,
    zstd,
)
from .folder import (  # noqa: F401 - CLONING, is_tape, unfinished_clone are read from here too
    _LOST_IDENTITY,
    absolute,
    CLONING,
    FORMAT_FILE,
    FORMAT_NAME,
    FORMAT_VERSION,
    _holds_history,
    _refuse_unfinished_clone,
    _remove_dead_temporaries,
    is_tape,
    refuse_inside_tape,
    tape_around,
    unfinished_clone,
)
from .freshness import Freshness
from .index import Index, Kept, default_cache_root, index_file
from ..model.models import brief, NAME_RE
from .reading import LOST_VALUE, PENDING, QUARANTINE, REPORT, REPORT_MAX, Reading  # noqa: F401 - the constants are read from here too
from .records import (  # noqa: F401 - read from here too
    REBUILD_TRIES,
    TYPE_WITHHELD,
    StaleRow,
    damaged_object_names,
    file_header_problem,
    pack_name_matches,
    record_problem,
    retried,
    segment_writer,
)
from .segment import RACY_NS, SegmentWriter, forget_holders

_TAPE_ID = re.compile(r"[0-9a-f]{32}")  # ctape.json's tape_id, as init writes it (secrets.token_hex(16))
KEPT_SESSIONS = 1024  # sessions (and folders) whose last look a Store keeps, to skip the next one
DEFAULT_MAX_OBJECT = 1 << 30  # refuse frames that claim more than this when decompressed
# Descriptors a process keeps open, so that one that reads or writes thousands of sessions
# stays below the usual limits of `ulimit -n` (1,024 on Linux, 256 on macOS): files it reads
# (the oldest opened is closed first; a read of another opens it again) and writers it keeps
# between writes (each holds its session's folder, its segment and up to segment.KEPT_MAX
# written ones, 3-6 in all; the one used longest ago is closed as at exit, and a later write
# to its session reopens it, ~0.5 ms). At most ~210 in all, ~140 as a rule.
READ_FDS_MAX = 64
WRITERS_MAX = 24
LISTING_REUSE_NS = 1_000_000_000  # a folder's listing stands this long while the folder is unchanged (Store._list_dir)
LISTING_REUSE_MIN_FILES = 32  # smaller folders are listed at every look (Store._list_dir)


_OPEN: "weakref.WeakSet[Store]" = weakref.WeakSet()  # every Store of this process (_after_fork)
_INHERITED: list = []  # a forked child's connections of its parent's, kept from being closed


def _forked_child() -> None:
    forget_holders()
    for store in list(_OPEN):
        store._after_fork()


os.register_at_fork(after_in_child=_forked_child)



def cache_folder_of(root: str, tape_id: str, base: Optional[str] = None) -> str:
    """The folder of a tape's index cache and local settings: named by the tape's id, its
    real path and its folder's inode, so an rsync'd copy (a new folder) never shares it."""
    st = os.stat(root)
    # (a path's undecodable bytes are surrogates in Python: encoded back as they were)
    # (and as bytes whatever the locale: a latin-1 one decodes a UTF-8 name to other
    # characters, which re-encoded gave another key: a second cache, the session choice lost)
    key = blake3(f"{tape_id}|".encode() + os.fsencode(os.path.realpath(root)) + f"|{st.st_dev}|{st.st_ino}".encode()).hexdigest()[:20]
    return os.path.join(base or default_cache_root(), key)



def writer_from_env() -> Optional[str]:
    """CTAPE_WRITER, the writer id this process writes under (docs/format.md), when set."""
    env = os.environ.get("CTAPE_WRITER")
    if env and not re.fullmatch(r"[a-z0-9]{4,32}", env):
        why = f"it is {len(env)} characters long" if not 4 <= len(env) <= 32 else "it holds other characters"
        raise InvalidInput(f"CTAPE_WRITER must be 4-32 characters of a-z and 0-9 ({why}); set it to a name like laptop1, or unset it")
    return env or None

class Store(Freshness, Reading):
    """One open tape directory."""

    def __init__(self, root: str, *, cache_dir: Optional[str] = None, max_object: Optional[int] = None, _cloning: bool = False):
        self.root = absolute(root)
        meta_path = os.path.join(self.root, FORMAT_FILE)
        if os.path.lexists(self.root) and not os.path.isdir(self.root):
            raise NotATape(f"{self.root} is a file, not a tape directory; pass the tape's folder")
        if not os.path.isdir(self.root):
            raise NotATape(f"no tape directory at {self.root if len(self.root) <= 4096 else brief(self.root, 200)}; create one with `ctape init`")
        if not _cloning:  # (only the clone that makes it opens it meanwhile)
            _refuse_unfinished_clone(self.root)
        check_not_symlink(meta_path)
        try:
            with open(meta_path, "rb") as f:
                meta = json.loads(f.read(1 << 16))
        except FileNotFoundError:
            if _holds_history(self.root):
                raise NotATape(_LOST_IDENTITY.format(root=self.root)) from None
            around = tape_around(self.root)
            if around is not None:  # a folder of a tape: init there is refused, so say which tape it is
                raise NotATape(f"{self.root} is a folder inside the tape {around}, not a tape; pass --dir {around}") from None
            raise NotATape(f"{self.root} is not a tape directory (no {FORMAT_FILE}); create one with `ctape init`") from None
        except ValueError:
            raise NotATape(f"{meta_path} is damaged; restore it from a copy of the tape") from None
        except OSError as e:
            raise NotATape(f"cannot read {meta_path}: {e.strerror}; check its permissions") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
            raise NotATape(f"{self.root} is not a ctape tape directory")
        if not isinstance(meta.get("version", 0), int) or isinstance(meta.get("version"), bool) or meta.get("version", 0) < 0:
            raise NotATape(f"{meta_path} is damaged (its version is not a number); restore it from a copy of the tape")
        if "version" not in meta or not (isinstance(meta.get("tape_id"), str) and _TAPE_ID.fullmatch(meta["tape_id"])):
            # every ctape.json ever written has both: a key renamed by a flipped bit read as a
            # tape of version 0 with no id, and fsck said nothing (found by an audit)
            raise NotATape(f"{meta_path} is damaged (its version or tape_id is missing or not as init writes it); restore it from a copy of the tape")
        if meta.get("version", 0) > FORMAT_VERSION:
            raise NotATape(f"{self.root} uses format version {meta['version']}; upgrade ctape to read it")
        self.tape_id = str(meta.get("tape_id", ""))
        # a version-1 tape may also be written by a ctape that does not know D and Z
        # records (and would take them for damage): it gets none
        self.dictionaries = meta.get("version", 0) >= 2
        for sub in ("sessions", "packs"):
            check_not_symlink(os.path.join(self.root, sub))
        self.max_object = _max_object(max_object)
        if cache_dir is not None and (not isinstance(cache_dir, (str, os.PathLike)) or "\0" in str(os.fspath(cache_dir))):
            raise InvalidInput(f"cache_dir is the path of a folder (a str or os.PathLike), not {brief(cache_dir, 80)}")
        self.writer = self._writer_id()
        self.index = Index(self._index_path(cache_dir))
        refused = self.index.refused_at_limit()
        if refused is not None and refused != self.max_object:
            # records the cache holds as unreadable because they claimed more than another
            # process's limit may read under this one: the files are read again (and the
            # cache then notes this limit, if it refuses any)
            self.index.stale = True
        self._fds: dict[int, int] = {}  # file id -> descriptor read through, oldest first (READ_FDS_MAX)
        self._fd_lock = threading.Lock()  # a descriptor is closed only while no thread reads through it
        self._uses = 0  # counts writes: which writer was used longest ago (WRITERS_MAX)
        self._known: dict[str, tuple] = Kept(KEPT_SESSIONS)  # session -> ({file name: size}, the cache's rebuilds) as last seen
        self._listings: dict[str, tuple] = Kept(KEPT_SESSIONS)  # folder -> (its inode and times, listed at (wall, monotonic), sizes, growing files): _list_dir
        self._whole_at: Optional[int] = None  # the cache's rebuilds when this process last refreshed every file
        self.refs_cache = RefsCache()  # session -> (index version, its RefState): Session.refs
        self._writers: dict[str, "SegmentWriter"] = {}
        self.locked_writers: dict[str, "SegmentWriter"] = {}  # those of _writers holding their session's lock
        self._batch_depth = 0
        self._lock = threading.RLock()
        self.pending: dict[str, tuple[int, bytes]] = {}  # objects written but not yet indexed
        self._cctx = None
        self._dctx = None
        self._blocks: dict[tuple[int, int], dict[str, bytes]] = {}
        self._dicts: dict[tuple[int, int, int], object] = {}  # (file, offset, crc) -> decompressor with that dictionary
        self._atimes_work: Optional[bool] = None
        self.unsafe_sessions: set[str] = set()  # sessions a symlink refuses (list_files)
        self._headers_seen: dict[str, tuple[int, int]] = {}  # file -> (inode, ctime) whose header verify_headers read
        self._losses: Optional[tuple] = None  # _salvage_losses: (quarantine/ as listed, what its reports name)
        self._held: dict[str, tuple[int, set[str]]] = {}  # damaged file -> (size, names its damaged object records hold)
        self.discard_listeners: list = []  # called with the hashes of objects a failed batch dropped
        # what this process read from data files: lets tests prove that a question
        # about one session does not read the whole tape
        self.io = {"bytes_read": 0, "records_read": 0, "files_indexed": 0}
        self.entries_written = 0  # entries this process wrote (not found on the tape): import says how many were new
        _OPEN.add(self)

    # -- a child process after fork -------------------------------------------------

    def _after_fork(self) -> None:
        """In the child of os.fork(): the descriptors, the session locks, the SQLite
        connection and the queued writes are the parent's. The child shares the locks'
        open file descriptions, so a flock would no longer keep the two apart, and both
        would append to one segment from stale offsets. The child lets go of all of it
        and starts afresh as a new process would: new writers take the locks through
        descriptors of their own, a new connection reads the same cache. Nothing of the
        parent's is unlocked, closed in a way it can see, or written."""
        if isinstance(self.index, _ClosedIndex):
            return  # closed before the fork: nothing to let go of
        self._lock = threading.RLock()  # another thread of the parent may have held them
        self._fd_lock = threading.Lock()
        for w in self._writers.values():
            w.abandon()
        # a fork inside a batch: the child is inside it too (the `with` blocks unwind in
        # both), so its depth stays; what the batch had queued was the parent's and is
        # gone with the writers, and the child's own writes go out when it leaves the batch
        self._writers, self.locked_writers = {}, {}
        self.pending = {}
        self._fds = {}  # not closed: a read through the parent's copies is harmless, but let go
        old = self.index
        _INHERITED.append(old)  # never closed here: closing a connection may write (SQLite: not across fork)
        self.index = Index(None if old.path == ":memory:" else old.path)
        if old.path == ":memory:":
            self.index.stale = True
        self.refs_cache = RefsCache()
        self._known = Kept(KEPT_SESSIONS)
        self._listings = Kept(KEPT_SESSIONS)
        self._whole_at = None

    # -- identity ---------------------------------------------------------------

    def _writer_id(self) -> str:
        env = writer_from_env()
        if env:
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
        ident = (f"{self.tape_id}|{machine}|{socket.gethostname()}|".encode("utf-8", "surrogateescape")
                 + os.fsencode(os.path.realpath(self.root)) + f"|{st.st_dev}|{st.st_ino}".encode())  # (the path's bytes: cache_folder_of)
        return blake3(ident).hexdigest()[:12]

    def _index_path(self, cache_dir: Optional[str]) -> Optional[str]:
        base = cache_dir or default_cache_root()
        d = cache_folder_of(self.root, self.tape_id, base)
        try:
            if cache_dir is None and not os.environ.get("CTAPE_CACHE_DIR") and not os.path.isdir(os.path.dirname(os.path.dirname(base))):
                return None  # the home the default names does not exist (HOME=/nonexistent): never made, as git never makes it
            os.makedirs(base, mode=0o700, exist_ok=True)  # the cache root too: 0700, not the umask's
            os.makedirs(d, mode=0o700, exist_ok=True)
            path = os.path.join(d, index_file())
            if os.path.exists(path) and not os.access(path, os.W_OK):
                return None
            return path
        except OSError:
            return None  # no writable cache: index in memory, rebuilt per process

    @staticmethod
    def init(root: str, tape_id: Optional[str] = None, version: int = FORMAT_VERSION, _cloning: bool = False) -> bool:
        """Create a tape directory (with this id and format version: a clone's are its
        remote's); False when one is there already. A failure takes back what it made."""
        root = absolute(root)
        meta_path = os.path.join(root, FORMAT_FILE)
        writer_from_env()  # a bad one is refused now, not by every command after an init that said it worked
        refuse_inside_tape(root, "clone into" if _cloning else "init")
        if os.path.lexists(root) and not os.path.isdir(root):
            raise InvalidInput(f"cannot init: {root} exists and is not a directory; choose another path")
        if os.path.isdir(root):
            if not _cloning:
                _refuse_unfinished_clone(root)
            check_not_symlink(meta_path)
            _remove_dead_temporaries(root)
            if os.path.exists(meta_path):
                return False
            if _holds_history(root):  # a new identity would part it from its copies and remotes
                raise InvalidInput(_LOST_IDENTITY.format(root=root))
        made: list[str] = []  # folders this call created, the deepest last
        tmp = meta_path + f".tmp{os.getpid()}-{secrets.token_hex(4)}"
        try:
            for d in (root, os.path.join(root, "sessions"), os.path.join(root, "packs")):
                if not os.path.isdir(d):
                    try:
                        os.makedirs(d, mode=0o700)
                    except FileExistsError:
                        continue  # another process's init made it meanwhile: theirs, not taken back
                    made.append(d)
            body = json.dumps({"format": FORMAT_NAME, "version": version, "tape_id": tape_id or secrets.token_hex(16)}) + "\n"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                write_all(fd, body.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                if not place_new(tmp, meta_path):  # never replaces a ctape.json written meanwhile
                    return False
            finally:
                if os.path.lexists(tmp):
                    os.unlink(tmp)
            for d in (root, os.path.dirname(root)):
                fsync_dir(d)
        except OSError as e:
            for path in (tmp, *reversed(made)):
                try:
                    (os.rmdir if path in made else os.unlink)(path)
                except OSError:
                    pass
            raise storage_error(e, f"a tape at {root}", after="") from None
        return True

    # -- files ------------------------------------------------------------------

    def atimes_work(self, warn: bool = True) -> bool:
        """Do reads move access times where this tape lives? Probed once, at the first
        write; where they do not, writers never append to a segment that has a name
        (segment.py) and a warning says why (CtapeWarning; `status` and `fsck` say it
        in their reports instead)."""
        if self._atimes_work is None:
            try:
                self._atimes_work = reads_move_atime(self.root)
            except OSError:
                self._atimes_work = True  # nothing can be written here anyway (read-only, full)
            if not self._atimes_work and warn:
                warnings.warn(NOATIME_WARNING, CtapeWarning, stacklevel=2)
        return self._atimes_work

    def session_dir(self, session: str) -> str:
        return os.path.join(self.root, "sessions", session)

    def list_files(self, session: Optional[str] = None) -> dict[str, int]:
        """Data files (relative path -> size) of one session plus packs, or of the whole tape.

        A symlink in a session (its folder, or a data file) refuses that session: listing
        it raises UnsafePath; listing the whole tape leaves it out and names it in
        `unsafe_sessions`, so the other sessions go on (fsck reports it)."""
        out = self._list_dir("packs")
        if session is not None:
            out.update(self._list_dir(f"sessions/{session}"))
            return out
        try:
            names = os.listdir(os.path.join(self.root, "sessions"))
        except FileNotFoundError:
            names = []
        for n in sorted(names):
            try:
                out.update(self._list_dir(f"sessions/{n}"))
                self.unsafe_sessions.discard(n)
            except UnsafePath:
                self.unsafe_sessions.add(n)
        return out

    def _list_dir(self, d: str) -> dict[str, int]:
        """The data files of one folder (relative path -> size). A command reads a session's
        files several times (its refs, its view, its streams: `status` six), and a session
        of thousands of sealed segments (a `push --follow` seals one at each push) paid a
        `stat` of each every time. The listing is reused while the folder stands as it
        was: the same inode and change times (a file made, removed or renamed into it, as
        compaction, a writer and rsync do, moves them), for at most LISTING_REUSE_NS, and
        only when the listing was not racy (taken within the file system's time
        granularity of the folder's last change), for folders of LISTING_REUSE_MIN_FILES
        files or more (a small one costs little to list). The files that may grow in place
        are looked at again every time: every segment no copy has read (a writer appends
        only to those: its access time is still UNREAD_ATIME_NS, segment.py; with access
        times not kept, every segment) and each writer's newest. What else changes a file
        in place (a copy truncating an older segment over itself) is seen within
        LISTING_REUSE_NS, when the folder is listed again: a reused size only ever says
        that nothing changed (a file noted lost is looked at before it is taken as back),
        and a writer lists the folder afresh before it builds on it (forget_listing)."""
        full = os.path.join(self.root, d)
        now, age_from = time.time_ns(), time.monotonic_ns()
        dst = check_not_symlink(full)
        if dst is None:
            self._listings.pop(d, None)
            return {}
        key = (dst.st_ino, dst.st_mtime_ns, dst.st_ctime_ns)
        memo = self._listings.get(d)
        # its age by the monotonic clock: a wall clock stepped back (NTP, a resumed VM) would
        # keep it for the whole step; and none is kept across such a step
        if memo is not None and memo[0] == key and age_from - memo[2] < LISTING_REUSE_NS and now >= memo[1]:
            out = self._listing_again(memo[3], memo[4])
            if out is not None:
                return out
        out: dict[str, int] = {}
        growing: list[tuple[str, int]] = []  # (segment, inode) of those no copy has read
        newest: dict[str, tuple[str, int]] = {}  # writer -> (its newest segment, inode)
        try:
            with os.scandir(full) as it:
                for e in it:
                    if e.name.endswith((".seg", ".pack")):
                        st = e.stat(follow_symlinks=False)
                        if stat.S_ISLNK(st.st_mode):
                            raise UnsafePath(f"refusing symlink inside the tape directory: {d}/{e.name}; replace it with the real file")
                        if stat.S_ISREG(st.st_mode):
                            rel = f"{d}/{e.name}"
                            out[rel] = st.st_size
                            if rel[-4:] == ".seg":
                                if st.st_atime_ns == UNREAD_ATIME_NS:
                                    growing.append((rel, st.st_ino))
                                w = e.name.split("-", 1)[0]  # segment_writer
                                if w not in newest or newest[w][0] < rel:
                                    newest[w] = (rel, st.st_ino)
        except (FileNotFoundError, NotADirectoryError):
            self._listings.pop(d, None)
            return out
        # a change within the clock's granularity of the listing may leave the times as they were
        granularity = 2_000_000_000 if dst.st_mtime_ns % 1_000_000_000 == 0 else RACY_NS
        if len(out) >= LISTING_REUSE_MIN_FILES and max(dst.st_mtime_ns, dst.st_ctime_ns) < now - granularity:
            self._listings[d] = (key, now, age_from, out, tuple(set(growing) | set(newest.values())))
        else:
            self._listings.pop(d, None)
        return dict(out)

    def forget_listing(self, session: str) -> None:
        """The next look at the session lists its folder (a writer's reload: what it
        builds on is read from the files as they are, never from a reused listing)."""
        self._listings.pop(f"sessions/{session}", None)

    def _listing_again(self, sizes: dict[str, int], growing: tuple) -> Optional[dict[str, int]]:
        """A folder's listing reused (_list_dir), with the sizes of the files that may grow
        looked at again; None when one of them was replaced or went (list it again)."""
        out = dict(sizes)
        for rel, ino in growing:
            try:
                st = os.stat(os.path.join(self.root, rel), follow_symlinks=False)
            except FileNotFoundError:
                return None
            if st.st_ino != ino or not stat.S_ISREG(st.st_mode):
                return None
            out[rel] = st.st_size
        return out

    def damage(self, session: str) -> list[tuple[str, int]]:
        """Files of a session (and packs) with damaged records: (path, level). A file found
        shorter than this machine had read it (acknowledged records lost) counts as level 2."""
        prefixes = (f"sessions/{session}/", "packs/")
        found = {p: c for p, (_, _, _, c) in self.index.file_rows(prefixes, damaged=True).items()}
        for p, _, _ in self.index.lost_rows():
            if p.startswith(prefixes):
                found[p] = 2
        return sorted(found.items())

    def sessions(self) -> list[str]:
        """Session folders; anything else in sessions/ (a stray `.stfolder`, a file) is left
        to fsck, which reports it, and does not stop the commands that list sessions."""
        try:
            names = os.listdir(os.path.join(self.root, "sessions"))
        except FileNotFoundError:
            return []
        return sorted(n for n in names if NAME_RE.fullmatch(n) and not n.endswith(".lock") and os.path.isdir(os.path.join(self.root, "sessions", n)))

    def _read_fd(self, file_id: int) -> int:
        """This process's descriptor of a file, opened if need be; the caller holds _fd_lock
        while it reads through it (another thread may close it once the lock is free)."""
        fd = self._fds.get(file_id)
        if fd is None:
            rel = self.index.path_of(file_id)
            if rel is None:
                raise StaleRow("the index points at a file it no longer lists (another process rebuilt it)")
            fd = open_for_reading(os.path.join(self.root, rel))
            while len(self._fds) >= READ_FDS_MAX:
                os.close(self._fds.pop(next(iter(self._fds))))
            self._fds[file_id] = fd
        return fd

    def _close_read_fds(self) -> None:
        with self._fd_lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def is_open(self) -> bool:
        return not isinstance(self.index, _ClosedIndex)

    def check_open(self) -> None:
        """InvalidInput ("this Tape is closed") once closed."""
        if isinstance(self.index, _ClosedIndex):
            _closed()

    def close(self) -> None:
        if isinstance(self.index, _ClosedIndex):
            return
        for w in list(self._writers.values()):
            w.release()
        self._writers.clear()
        self._close_read_fds()
        self.index.close()
        self.index = _ClosedIndex()  # every later use says so (not sqlite3's "closed database")

    def __del__(self):
        # a Store dropped without close() (a Tape made per request and left to the collector)
        # lets go of its descriptors: they went with it only at the process's end, and a
        # server that made one per request ran out of them (EMFILE after ~500 requests at
        # 1,024). Without taking any lock: the collector runs wherever an allocation falls,
        # also while this thread holds the session's lock through another Store (close()'s
        # check of kept segments waited for it there, for ever)
        try:
            for w in list(self._writers.values()):
                w.abandon()
            self._writers.clear()
            self._close_read_fds()
            self.index.close()  # (its rows are written, as before)
            self.index = _ClosedIndex()
        except Exception:  # noqa: BLE001 - best effort, at interpreter exit too
            pass

    # -- objects ----------------------------------------------------------------------

    def encode_object(self, type_: int, body: bytes, h: str) -> bytes:
        """The `O` record body of object h (objects of 64 KiB or more get one; smaller
        ones go into blocks): compressed, or raw when compression does not make it smaller."""
        if self._cctx is None:
            self._cctx = zstd().ZstdCompressor(level=3, write_content_size=True)
        data, codec = self._cctx.compress(body), CODEC_ZSTD
        if len(data) >= len(body):
            data, codec = body, CODEC_RAW
        return bytes.fromhex(h) + bytes((type_, codec)) + data

    # -- writing ---------------------------------------------------------------------

    def writing(self, session: str) -> "_Writing":
        """Hold the session's lock; on exit the writes are durable (or, in a batch, queued).

        The writer of a session stays open between writes, with what it knows
        (refs, active segment); taking the lock checks cheaply that nobody else
        wrote meanwhile, and reloads when someone did. (A class, not a generator:
        importers take it once an entry.)
        """
        return _Writing(self, session)

    def _close_idle_writers(self) -> None:
        """Close the writers used longest ago, as at exit (what a copy may lack is repeated,
        segment.release), down to three quarters of WRITERS_MAX; a writer holding its
        session's lock (in a batch) or with writes queued stays. Called under _lock."""
        idle = sorted((w for w in self._writers.values() if not w.locked and not w.buf and not w.block and w.held_ref is None), key=lambda w: w.used)
        for w in idle[: len(self._writers) - WRITERS_MAX * 3 // 4]:
            del self._writers[w.session]
            try:
                w.release()
            except (OSError, CtapeError):
                # its descriptors are gone or going, and the write under way is another
                # session's; the next write to this one starts afresh and meets the problem
                pass

    def batch(self) -> "_Batch":
        """Writes inside share one fsync per file at the end; an exception discards them all."""
        return _Batch(self)


class _Batch:
    """Store.batch: `with store.batch():`. A class, not a generator: a KeyboardInterrupt
    that lands as a generator's `__enter__` returns (a signal handler raises at any call)
    left the generator suspended with the batch open, so the process's later appends were
    queued in a batch nobody would end, and returned hashes that were never written (found
    by an audit)."""

    __slots__ = ("store", "open", "lock")

    def __init__(self, store: Store):
        self.store = store
        self.open = False

    def __enter__(self) -> None:
        st = self.store
        st.check_open()
        # the lock taken is the one given back: a child forked inside the batch has a new
        # one (Store._after_fork), and leaves the batch holding this copy of the parent's
        self.lock = st._lock
        self.lock.acquire()
        try:
            st._batch_depth += 1
            self.open = True
        except BaseException:
            self.lock.release()
            raise

    def __del__(self) -> None:
        # an interrupt at the very entry of __exit__ (a signal lands at any call) skipped it:
        # the batch ends here, its writes dropped, when the with statement lets go of it
        if getattr(self, "open", False):  # (not set: __init__ itself was interrupted)
            try:
                self.__exit__(KeyboardInterrupt, None, None)
            except Exception:  # noqa: BLE001 - collected in another thread (its lock is not ours to give back)
                pass

    def __exit__(self, kind, value, tb) -> bool:
        if not self.open:
            return False
        self.open = False
        st = self.store
        st._batch_depth -= 1  # (no call since the entry: nothing lands between)
        contested = None
        try:
            if isinstance(value, ConflictError):
                contested = getattr(value, "contested", None)
            if st._batch_depth == 0:
                writers = list(st.locked_writers.values())
                done = 0
                try:
                    if kind is None:
                        for w in writers:
                            w.flush(durable=True)
                            done += 1
                except OSError as e:
                    if e.errno in (errno.EMFILE, errno.ENFILE):
                        raise _too_many_files(st) from None
                    raise
                finally:
                    for w in writers[done:]:
                        w.discard()  # not written: drop, so no later append writes them
                    for w in writers:
                        w.unlock()
                    if len(st._writers) > WRITERS_MAX:
                        st._close_idle_writers()  # a batch over many sessions: their descriptors go with it
                    if contested is not None:
                        _wait_for_lock(contested)
        finally:
            self.lock.release()
        return False


def _wait_for_lock(folder: str) -> None:
    """A batch gave up waiting for a session's lock while holding others
    (SegmentWriter._wait_holding_others), and has let go of them: wait for that lock
    holding nothing, so that the batch it waited for ends before this one is run again.
    Given back at once, the caller's next try took its first lock again before the other
    batch, which polls for it, could: the two met the same way at every try. The wait has
    an end too (BATCH_LOCK_WAIT): the holder may be a batch kept open for hours, and this
    thread holds the Tape's lock meanwhile (its other threads wait with it); past it the
    error comes back all the same, and the caller decides."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return  # gone meanwhile: nothing to wait for
    try:
        lock_waiting(fd, segment.BATCH_LOCK_WAIT)
    finally:
        os.close(fd)


def _too_many_files(store: "Store") -> StorageError:
    """EMFILE in a write: a batch holds the lock of every session it writes until it ends."""
    n = len(store.locked_writers)
    return StorageError(
        f"too many open files: {'this batch holds ' + str(n) + ' sessions, ' if store._batch_depth else ''}"
        f"two descriptors each until it ends; raise the limit (`ulimit -n`) or write fewer sessions in one batch "
        f"(a batch that ends with this error writes nothing)")


class RefsCache(Kept):
    """The refs of the sessions read last, each with the index version it was read at."""

    LIMIT = 256

    def __init__(self):
        super().__init__(self.LIMIT)


def limit_advice(store) -> Optional[str]:
    """What to say instead of "damaged" when this process refused records only because its
    own decompression limit is below the default (a CTAPE_MAX_OBJECT=100 meant as KiB): they
    may be intact, and `fsck --salvage` under that limit would move intact files out of
    reach (found by an audit). None when the limit is the default or higher, or refused
    nothing."""
    if store.max_object >= DEFAULT_MAX_OBJECT or store.index.refused_at_limit() != store.max_object:
        return None
    return (f"records there claim more than this process's CTAPE_MAX_OBJECT ({store.max_object} bytes, below the default "
            f"{DEFAULT_MAX_OBJECT}) and may be intact: read them without CTAPE_MAX_OBJECT, or with a higher one, "
            "before any `ctape fsck --salvage`")


def _max_object(given: Optional[int]) -> int:
    """The decompression limit: `max_object`, else $CTAPE_MAX_OBJECT, else DEFAULT_MAX_OBJECT;
    a number of bytes, at least 1."""
    where = "max_object" if given is not None else "CTAPE_MAX_OBJECT"
    value: object = given if given is not None else os.environ.get("CTAPE_MAX_OBJECT") or DEFAULT_MAX_OBJECT
    try:
        n = int(value) if not isinstance(value, (bool, float)) else None
    except (TypeError, ValueError):
        n = None
    if n is None or n < 1:
        raise InvalidInput(f"{where} is a number of bytes (at least 1), not {str(value)[:40]!r}; the default is {DEFAULT_MAX_OBJECT}")
    return n


def _closed():
    raise InvalidInput("this Tape is closed; open it again (Tape.open(path)) to use it")


class _ClosedIndex:
    """The index of a closed Store: any use raises InvalidInput."""

    def __getattr__(self, name):
        _closed()

    def sync(self) -> None:  # Store.__del__'s last write: nothing left to write
        pass


class _Writing:
    """Store.writing: `with store.writing(session) as w`. Hardened as _Batch is against a
    KeyboardInterrupt that lands at any call (a signal handler, Jupyter's "interrupt"): one
    right after the lock was taken, or at the very entry of __exit__, left the Tape's lock
    held for good, and every other thread of the process on that Tape (LangGraph's writer
    threads, the Agents SDK's, a stream's flush) waited for ever (found by an audit)."""

    __slots__ = ("store", "session", "w", "lock", "open")

    def __init__(self, store: Store, session: str):
        self.store, self.session = store, session
        self.open = False

    def __enter__(self) -> SegmentWriter:
        st = self.store
        if isinstance(st.index, _ClosedIndex):
            _closed()
        # the lock taken is the one given back (a forked child has a new one), and given
        # back only when this call took it: an interrupt may land as acquire() returns
        self.lock = lock = st._lock
        before = lock._recursion_count()
        try:
            lock.acquire()
            w = st._writers.get(self.session)
            if w is None:
                if len(st._writers) >= WRITERS_MAX:
                    st._close_idle_writers()
                w = SegmentWriter(st, self.session)
                st._writers[self.session] = w
            st._uses += 1
            w.used = st._uses
            if not w.locked:
                w.lock()
            self.w = w
            self.open = True
        except OSError as e:
            self.open = False
            if lock._recursion_count() > before:
                lock.release()
            if e.errno in (errno.EMFILE, errno.ENFILE):
                raise _too_many_files(st) from None
            raise
        except BaseException:
            self.open = False
            if lock._recursion_count() > before:
                lock.release()
            raise
        return w

    def __del__(self) -> None:
        # an interrupt at the very entry of __exit__ skipped it: the write ends here, dropped,
        # when the with statement lets go of this object (in the thread that holds the lock).
        # Not before: a traceback kept (IPython's sys.last_traceback) keeps the object, and
        # the lock, until it is replaced (docs/python-api.md)
        if getattr(self, "open", False):
            try:
                self.__exit__(KeyboardInterrupt, None, None)
            except Exception:  # noqa: BLE001 - collected in another thread (its lock is not ours to give back)
                pass

    def __exit__(self, kind, value, tb) -> bool:
        if not self.open:
            return False
        self.open = False
        st = self.store
        try:
            if st._batch_depth == 0:
                w = self.w
                try:
                    if kind is None:
                        w.flush(durable=True)
                    else:
                        w.discard()
                finally:
                    w.unlock()
        finally:
            self.lock.release()
        return False
