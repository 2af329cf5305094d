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
import zlib
from contextlib import contextmanager
from typing import Callable, Iterator, NamedTuple, Optional, TypeVar

from blake3 import blake3

from . import framing, packing, segment
from ..model import refs as refmod
from ..model.canonical import object_hash
from ..model.errors import (
    NOATIME_WARNING,
    ConflictError,
    CorruptObject,
    CtapeError,
    CtapeWarning,
    EntryNotFound,
    InvalidInput,
    LostToDamage,
    NotATape,
    ObjectTooLarge,
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
    dict_decompressor,
    fsync_dir,
    lock_waiting,
    open_for_reading,
    pread_all,
    reads_move_atime,
    storage_error,
    write_all,
    zstd,
)
from .index import Index, IndexBatch, IndexDegraded, default_cache_root, hash_key, index_file
from ..model.models import brief, NAME_RE
from ..model.schema import header_gaps, header_problem, object_record_problem, read_partial_record, read_ref_record
from .segment import RACY_NS, SegmentWriter, forget_holders

TYPE_WITHHELD = ord("W")  # an entry kept without its redacted values (docs/format.md section 17)
LOST_VALUE = "[lost: damaged]"  # what a read shows for a value lost to damage (docs/format.md section 15)
QUARANTINE = "quarantine"  # damaged files moved aside by `fsck --salvage`: kept, never read
REPORT = ".salvage.json"  # beside each: what was lost
REPORT_MAX = 64 << 20  # a salvage report is read up to this (its kept entries make a big salvage's long)
PENDING = ".salvage.pending"  # the report of a salvage not finished yet (the rerun finishes it)
FORMAT_FILE = "ctape.json"
FORMAT_NAME = "ctape-tape"
FORMAT_VERSION = 2  # 2: segments may hold dictionaries (D) and blocks compressed with them (Z)
DEFAULT_MAX_OBJECT = 1 << 30  # refuse frames that claim more than this when decompressed
# Descriptors a process keeps open, so that one that reads or writes thousands of sessions
# stays below the usual limits of `ulimit -n` (1,024 on Linux, 256 on macOS): files it reads
# (the oldest opened is closed first; a read of another opens it again) and writers it keeps
# between writes (each holds its session's folder, its segment and up to segment.KEPT_MAX
# written ones, 3-6 in all; the one used longest ago is closed as at exit, and a later write
# to its session reopens it, ~0.5 ms). At most ~210 in all, ~140 as a rule.
READ_FDS_MAX = 64
WRITERS_MAX = 24
REBUILD_TRIES = 4  # readings of every file while another process changes them (Store._rebuild)
LISTING_REUSE_NS = 1_000_000_000  # a folder's listing stands this long while the folder is unchanged (Store._list_dir)
LISTING_REUSE_MIN_FILES = 32  # smaller folders are listed at every look (Store._list_dir)
SETTLE_TRIES = 20  # refreshes before a session's refs are read from an index no rebuild replaced meanwhile (Store.settled)
T = TypeVar("T")


_LOST_IDENTITY = (
    "{root} holds sessions but no " + FORMAT_FILE + " (a copy cut short?): restore " + FORMAT_FILE + " from another copy "
    "of the tape (rsync), or clone it again; `ctape init` would give it a new identity, which its copies and remotes refuse"
)


CLONING = ".ctape-clone"  # in a tape's folder while `ctape clone` makes it (sync/pull.py)


def unfinished_clone(root: str) -> Optional[str]:
    """The remote a clone that did not finish was making this folder from ("" when its
    marker says none), or None when no clone is unfinished here."""
    path = os.path.join(root, CLONING)
    if not os.path.lexists(path):
        return None
    try:
        with open(path, "rb") as f:
            url = json.loads(f.read(1 << 16)).get("url")
        return url if isinstance(url, str) else ""
    except (OSError, ValueError, AttributeError):
        return ""  # cut while it was written


def is_tape(path: str) -> bool:
    """Does `path` hold a tape (its identity file names ctape's format)?"""
    try:
        with open(os.path.join(path, FORMAT_FILE), "rb") as f:
            meta = json.loads(f.read(1 << 16))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT_NAME


def refuse_inside_tape(root: str, what: str = "init") -> None:
    """A tape is never made inside another one (`init`, `clone`, `demo`, Tape.init): the
    outer tape holds only its own files, would take the inner one's folder for a session
    (or warn of foreign files in it), and write its appends into the inner tape's root."""
    top = os.path.abspath(root)
    if os.path.dirname(top) == top:
        # every path of the machine would then be inside it, and no tape could be made
        # anywhere else (an audit's `Tape.init("/")`, as root, did that)
        raise InvalidInput(f"cannot {what} {top}: a tape at the root of the file system holds every other path; give a folder of its own")
    up = tape_around(root)
    if up is not None:
        raise InvalidInput(f"cannot {what} {os.path.abspath(root)}: it is inside the tape {up}, which holds only ctape's own files; "
                           "pick a path outside it")


def tape_around(path: str) -> Optional[str]:
    """The tape whose folder holds `path` (below its top), if any."""
    up = os.path.dirname(os.path.abspath(path))
    while True:
        if is_tape(up):
            return up
        if os.path.dirname(up) == up:
            return None
        up = os.path.dirname(up)


def _refuse_unfinished_clone(root: str) -> None:
    url = unfinished_clone(root)
    if url is not None:
        again = f"ctape clone {url} {root}" if url else f"ctape clone URL {root}"
        raise NotATape(f"{root} is a clone that did not finish (it was stopped): it does not hold the remote's history yet; "
                       f"run `{again}` again to finish it, or remove the folder")


def _remove_dead_temporaries(root: str) -> None:
    """Remove the temporary identity files (ctape.json.tmp<pid>-<hex>) of inits on this
    machine that were killed before they finished: nothing else removes them."""
    for name in os.listdir(root):
        m = re.fullmatch(re.escape(FORMAT_FILE) + r"\.tmp(\d+)-[0-9a-f]+", name)
        if m is None:
            continue
        if _alive(int(m.group(1))):
            continue  # another init right now
        try:
            os.unlink(os.path.join(root, name))
        except OSError:
            pass


def _alive(pid: int) -> bool:
    """Whether process pid runs on this machine (a zombie, killed and not reaped yet, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _holds_history(root: str) -> bool:
    """Does the folder hold a tape's files (sessions or packs) without its identity?"""
    for sub in ("sessions", "packs"):
        try:
            if os.listdir(os.path.join(root, sub)):
                return True
        except OSError:
            pass
    return False


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
    key = blake3(f"{tape_id}|{os.path.realpath(root)}|{st.st_dev}|{st.st_ino}".encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return os.path.join(base or default_cache_root(), key)


class Store:
    """One open tape directory."""

    def __init__(self, root: str, *, cache_dir: Optional[str] = None, max_object: Optional[int] = None, _cloning: bool = False):
        self.root = os.path.abspath(root)
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
        self._known: dict[str, tuple] = {}  # session -> ({file name: size}, the cache's rebuilds) as last seen
        self._listings: dict[str, tuple] = {}  # folder -> (its inode and times, listed at (wall, monotonic), sizes, growing files): _list_dir
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
        self._known = {}
        self._listings = {}
        self._whole_at = None

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
        return blake3(ident.encode("utf-8", "surrogateescape")).hexdigest()[:12]

    def _index_path(self, cache_dir: Optional[str]) -> Optional[str]:
        base = cache_dir or default_cache_root()
        d = cache_folder_of(self.root, self.tape_id, base)
        try:
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
        root = os.path.abspath(root)
        meta_path = os.path.join(root, FORMAT_FILE)
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
                os.link(tmp, meta_path)  # never replaces a ctape.json written meanwhile
            except FileExistsError:
                return False
            finally:
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

    # -- index freshness ------------------------------------------------------------

    def refresh(self, session: Optional[str] = None) -> bool:
        """Bring the index up to date with the files; True when anything changed."""
        if self.index.stale:  # the cache could not be written: the index is in memory now
            self._full_reindex()
            return True
        changed = self._refresh(session)
        if self.index.stale:
            self._full_reindex()
            return True
        return changed

    def settled(self, session: str, read: Callable[[], T]) -> T:
        """`read()` (of the session's rows: its refs) after a refresh, from an index that no
        rebuild replaced in between. Another process's rebuild may commit after the refresh,
        from a listing taken before the session's newest file had its name: until the next
        refresh the index lacks that file's claims, and refs read then are older than the
        files (a writer building on them would give its next append an older parent). A
        rebuild counts itself in the cache (index.rebuilds), so one meanwhile is seen and the
        refresh done again; rebuilds follow compactions, so this ends."""
        for _ in range(SETTLE_TRIES):
            before = self.index.rebuilds()
            self.refresh(session)
            out = read()
            if self.index.rebuilds() == before:
                return out
        raise StorageError(f"session {session!r}: the index cache was rebuilt by another process at each of {SETTLE_TRIES} reads; "
                           "retry when the compactions beside this command are done")

    def _refresh(self, session: Optional[str]) -> bool:
        if session is None:
            whole_at = self.index.rebuilds()  # before the listing: a rebuild after it is news
        files = self.list_files(session)
        # the rows read last still hold while the files are as listed then, unless another
        # process rebuilt the cache since: its listing may predate a file, whose rows it removed
        mark = (files, self.index.rebuilds()) if session is not None else None
        if mark is not None and self._known.get(session) == mark:
            return False
        scope = ("packs/",) if session is not None else ("packs/", "sessions/")
        prefixes = scope + ((f"sessions/{session}/",) if session is not None else ())
        rows = self.index.file_rows(prefixes)
        shrunk, gone = [], {}
        for path, (fid, indexed, _, _) in rows.items():
            size = files.get(path)
            if size is None and path.startswith("sessions/") and path.split("/")[1] in self.unsafe_sessions:
                continue  # a symlink in its session: refused, not lost (fsck reports it as unsafe)
            if size is None or size < indexed:
                # the rows may be newer than the listing: another process that made the file,
                # or appended to it, and indexed it since. Only a file that is gone or short
                # now is (files only grow)
                size = self._size_now(path)
                if size is None:
                    gone[path] = indexed
                elif size < indexed:
                    shrunk.append((path, indexed, size))
        if shrunk or gone:
            sessions = {p.split("/")[1] for p in gone if p.startswith("sessions/")}
            before = {s: self.index.claims(s) for s in sessions}
            settled = self._full_reindex()
            self._note_lost(shrunk, gone if settled else {}, before)
            return True
        floors = self.index.floors()
        for path, expected, _ in self.index.lost_rows():
            back = min(expected, floors.get(path, expected))
            size = files.get(path, -1)
            if size >= back:
                size = self._size_now(path)  # a reused listing's size proves nothing: look
            if size is not None and size >= back:
                self.index.clear_lost(path)  # the file is back (restored from a copy)
        changed = self._index_grown(files, rows)
        if mark is not None:
            self._known[session] = mark
        if session is None:
            self._whole_at = whole_at
        return changed

    def _index_grown(self, files: dict[str, int], rows: dict[str, tuple]) -> bool:
        """Index the files (path -> size) that are new or grew since `rows` (file_rows)."""
        changed = False
        for path, size in files.items():
            row = rows.get(path)
            indexed = row[1] if row else 0
            if size > indexed or row is None:
                self._index_file(path, indexed)
                changed = True
        return changed

    def _size_now(self, rel: str) -> Optional[int]:
        try:
            return os.stat(os.path.join(self.root, rel), follow_symlinks=False).st_size
        except FileNotFoundError:
            return None

    def _note_lost(self, shrunk: list[tuple[str, int, int]], gone: dict[str, int], before: dict[str, list[tuple]]) -> None:
        """After a rebuild: which of the files found shorter than this machine had read them,
        or gone, lost acknowledged records. A file is only ever appended to, so a shorter
        one lost what it held past its length, unless a later segment repeats it from there
        (`repeated`: a copy taken during a write came back). Files that go are fine while
        every claim on a ref this machine had read still stands or was superseded (another
        copy compacted them, and `rsync --delete` brought its pack); a claim that vanished
        unseen took the entries it held with it: the session's files that went are lost."""
        floors = self.index.floors()
        for path, indexed, found in shrunk:
            if found < floors.get(path, indexed):
                self.index.note_lost(path, indexed, found)
        for session, old in before.items():
            gaps = self.index.gaps(session)
            now = refmod.from_rows(self.index.claims(session), 0, {}, gaps).claims
            was = refmod.from_rows(old, 0, {}, gaps).claims
            dropped = _deleted_refs(was, now)
            # deletions a compaction with this cache dropped, with what they had read: `old`
            # may never have held them (a writer's queued rows, a rebuild from an older listing)
            expired = refmod.from_rows(self.index.expired(session), 0, {}, gaps).claims
            # a claim that is still there, or that one there had read (superseded: model/refs.py)
            if any(not any((o.w, o.n) == (c.w, c.n) or refmod.saw(o, c) for o in now.get(ref, {}).values())
                   and not any(refmod.saw(o, c) for o in expired.get(ref, {}).values())
                   for ref, cs in was.items() if ref not in dropped for c in cs.values()):
                for path, indexed in gone.items():
                    if path.startswith(f"sessions/{session}/"):
                        self.index.note_lost(path, indexed, 0)

    def _full_reindex(self) -> bool:
        """Rebuild the index from every file, in one transaction (readers never see it
        half-built). False when the files kept changing under it (see _rebuild)."""
        try:
            settled = self._rebuild()
        except IndexDegraded:  # the cache could not be written: again, in memory
            settled = self._rebuild()
        self.index.stale = False
        return settled

    def _rebuild(self) -> bool:
        """Index every file; again while the names of the files changed during the reading
        (at most REBUILD_TRIES times): a compaction in another process, taking no lock a
        reader takes, may put its pack in place and remove the files it replaces between
        the listing and the reading, and an index of the files that were left then lacks
        the claims of both. Such an index is only a cache that the next refresh completes,
        but the claims it lacks looked lost (_note_lost), and a session marked so refuses
        writes. False: still changing at the last try (the caller judges no loss by it)."""
        for _ in range(REBUILD_TRIES):
            self._blocks.clear()
            self._dicts.clear()
            self._close_read_fds()
            self._known.clear()
            listed = self.list_files(None)
            with self.index.rebuilding():
                self.index.apply_many([self._scan_file(path, 0) for path in listed])
            now = self.list_files(None)
            if now.keys() == listed.keys():
                return True
        # still changing: the files listed last may be gone (what they held is in a pack the
        # listing lacks), and the index would lack a session's claims and objects. Complete
        # it from the files as they are now, as a refresh does; the rows of the files gone
        # since stay (the next refresh rebuilds) except their objects, which a writer would
        # take as stored (what a compaction dropped is not in its pack)
        rows = self.index.file_rows()
        self.index.forget_objects([fid for path, (fid, _, _, _) in rows.items() if path not in now])
        self._index_grown(now, rows)
        return False

    def _index_file(self, rel: str, start: int) -> None:
        self._forget_reads(self.index.file_id(rel))
        self.index.apply(self._scan_file(rel, start), scanned=True)

    def _forget_reads(self, file_id: int) -> None:
        """Drop what this process keeps open or decoded of a file that changed: an rsync
        may have replaced it (a new inode under the same name)."""
        with self._fd_lock:
            fd = self._fds.pop(file_id, None)
            if fd is not None:
                os.close(fd)
        for cache in (self._blocks, self._dicts):
            for key in [k for k in cache if k[0] == file_id]:
                del cache[key]

    def _scan_file(self, rel: str, start: int) -> IndexBatch:
        """Index rows for the records of a file from `start` on. Damage is noted per file
        (fsck names it); what reads back is indexed."""
        fid = self.index.file_id(rel)
        parts = rel.split("/")
        session = parts[1] if parts[0] == "sessions" else None
        batch = IndexBatch()
        try:
            fd = open_for_reading(os.path.join(self.root, rel))
        except (FileNotFoundError, NotADirectoryError, UnsafePath):
            return batch  # gone since the listing (a compaction); a symlink is refused where it is listed
        except OSError as e:  # unreadable: never taken for a file with nothing in it
            raise StorageError(f"cannot read {rel}: {e.strerror}; check its permissions (ctape needs to read every file of the tape)") from None
        try:
            size = os.fstat(fd).st_size
            # pread_all: one pread returns at most 2 GiB - 4 KiB on Linux, and a pack of a
            # session with multi-MB values grows past it (the pack then failed its name check)
            data = pread_all(fd, size - start, start) if size > start else b""
            self.io["bytes_read"] += len(data)
            self.io["files_indexed"] += 1
            indexed, torn, corrupt = start, 0, 0
            src = Source(fd, data, start)
            is_pack = rel.endswith(".pack")
            writer = segment_writer(rel)
            if is_pack and start == 0 and not pack_name_matches(rel, data):
                corrupt = 2  # a pack is named by the hash of its bytes: these are not those bytes
            head = data if start == 0 else os.pread(fd, min(size, 4096), 0)
            first = next(iter(framing.scan(head, 0)), None)
            if size and file_header_problem(rel, first) and not (isinstance(first, framing.Damage) and first.torn):
                batch.files.append((fid, size, 0, 2))  # damage: nothing in it is used (fsck says why)
                return batch
            if start == 0 and writer is not None and isinstance(first, framing.Record):
                self._note_repeats(rel, writer, first.body)
            if start == 0 and is_pack and session is not None and isinstance(first, framing.Record):
                header = json.loads(first.body)  # checked above
                batch.gaps += [(session, w, lo, hi) for w, lo, hi in header_gaps(header)]
            for item in framing.scan(data, 0):
                if isinstance(item, framing.Damage):
                    if item.torn and not is_pack:
                        torn = 1
                        break
                    corrupt = max(corrupt, 2 if is_pack else _damage_level(data, item))  # packs never grow: a cut one lost records
                    if item.torn:
                        break
                    continue
                if not self._index_record(batch, fid, start + item.offset, item.type, item.body, src, session, writer):
                    corrupt = 2  # a block that does not decode may have held ref records
                indexed = start + item.end
        finally:
            os.close(fd)
        if corrupt and not torn:
            indexed = start + len(data)
        batch.files.append((fid, indexed, torn, corrupt))
        return batch

    def verify_headers(self, session: str) -> None:
        """Read the header of each of a session's files again. A file changed in place keeps
        its size, so the index does not look at it again; a writer calls this when it
        takes up a session, and a header found damaged marks the file as damage (the
        writer then refuses: its refs may be wrong)."""
        rows = self.index.file_rows((f"sessions/{session}/",))
        for rel in self.list_files(session):
            row = rows.get(rel)
            if row is None or row[3] or not rel.startswith("sessions/"):
                continue  # not indexed yet (the next scan checks it), or already damage
            st = os.stat(os.path.join(self.root, rel), follow_symlinks=False)
            seen = (st.st_ino, st.st_ctime_ns)  # any write changes the ctime, and nothing can set it back
            if self._headers_seen.get(rel) == seen or st.st_size == 0:
                continue  # read already, or empty: no record in it can move a ref
            self._headers_seen[rel] = seen
            fd = open_for_reading(os.path.join(self.root, rel))
            try:
                first = next(iter(framing.scan(os.pread(fd, 4096, 0), 0)), None)
            finally:
                os.close(fd)
            if file_header_problem(rel, first) and not (isinstance(first, framing.Damage) and first.torn):
                b = IndexBatch()
                b.files.append((row[0], row[1], row[2], 2))
                self.index.apply(b)

    def _note_repeats(self, rel: str, writer: str, header: bytes) -> None:
        """A segment that repeats the records of an earlier one of its writer from an
        offset on (its header's `repeats`, segment.py) makes that one safe to find cut
        back to anywhere past the offset."""
        rep = json.loads(header).get("repeats")
        if type(rep) is dict and type(rep.get("from")) is int and rep["from"] >= 0 and type(rep.get("file")) is str:
            if re.fullmatch(re.escape(writer) + r"-[0-9]{20}\.seg", rep["file"]):
                self.index.note_repeated(f"{os.path.dirname(rel)}/{rep['file']}", rep["from"])

    def _index_record(self, batch: IndexBatch, fid: int, offset: int, type_: int, body: bytes, src: "Source", session: Optional[str],
                      writer: Optional[str] = None) -> bool:
        """Add the index rows of one record; False for a record that cannot be used: a block
        that does not decode, or a ref or stream record that is malformed or names another
        session than the folder it is in (it could move refs it has no business moving).
        fsck reports each."""
        if type_ in framing.BLOCK_TYPES:
            try:
                inner = self.block_items(fid, offset, body, type_, src)
            except ObjectTooLarge:
                batch.refused_at.append(self.max_object)  # unreadable at this limit only: see Index.refused_at_limit
                return False
            except CorruptObject:
                return False
            ok = True
            for rec in inner:
                if rec.type not in framing.BLOCK_TYPES:
                    ok = self._index_record(batch, fid, offset, rec.type, rec.body, src, session, writer) and ok
            return ok
        if type_ == framing.T_OBJECT:
            if object_record_problem(body):
                return False
            h = body[:32].hex()
            batch.objects.append((hash_key(h), fid, offset, 1 if body[32] in (TYPE_ENTRY, TYPE_WITHHELD) else 0))
        elif type_ in (framing.T_REF, framing.T_PARTIAL):
            rec = record_problem(type_, body, session, writer)
            if isinstance(rec, str):
                return False
            if type_ == framing.T_REF:
                batch.add_ref(rec)
            else:
                batch.add_partial(rec, body)
        return True

    def scan_file(self, rel: str, start: int = 0, end: Optional[int] = None, ends: Optional[dict] = None) -> Iterator[framing.Record | framing.Damage]:
        """Every record of a data file from `start` to `end` (default: its size), at offsets
        in the file. The records inside a block come out one by one, at the block's offset;
        a block that does not decode, and a dictionary record that does not decompress
        (even one no block uses), come out as damage. `ends`, when given, gets
        ends[rel] = the offset just after the last whole record read: where a later read
        must start so that a record cut by `end` (a write under way) is not skipped."""
        fd = open_for_reading(os.path.join(self.root, rel))
        try:
            size = os.fstat(fd).st_size if end is None else end
            data = pread_all(fd, size - start, start) if size > start else b""
            src = Source(fd, data, start)  # a block's dictionary is read from what this read
            file_id = None
            if ends is not None:
                ends[rel] = start
            for item in framing.scan(data):
                offset = start + item.offset
                if isinstance(item, framing.Damage):
                    yield framing.Damage(offset, item.torn, item.reason)
                    continue
                if ends is not None:
                    ends[rel] = start + item.end
                if item.type == framing.T_DICT:
                    try:
                        self.decompress(item.body, f"dictionary at offset {offset} of {rel}")
                    except CorruptObject as e:
                        yield framing.Damage(offset, False, str(e).split(";")[0])
                        continue
                    yield framing.Record(offset, item.type, item.body)
                elif item.type in framing.BLOCK_TYPES:
                    if file_id is None:
                        file_id = self.index.file_id(rel)
                    try:
                        inner = self.block_items(file_id, offset, item.body, item.type, src)
                    except CorruptObject as e:
                        yield framing.Damage(offset, False, str(e).split(";")[0])
                        continue
                    for rec in inner:
                        yield framing.Record(offset, rec.type, rec.body)
                else:
                    yield framing.Record(offset, item.type, item.body)
        finally:
            os.close(fd)

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

    def decode_object(self, h: str, rec_body: bytes) -> tuple[int, bytes]:
        why = object_record_problem(rec_body)
        if why:
            raise CorruptObject(f"object {h}: {why}; run `ctape fsck`")
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
        if type_ == TYPE_WITHHELD:
            return type_, body  # an entry's withheld form: its hash names the original (docs/format.md section 17)
        kind = b"entry" if type_ == TYPE_ENTRY else b"blob"
        if object_hash(kind, body) != h:
            raise CorruptObject(f"object {h} is corrupt (hash mismatch); run `ctape fsck`")
        return type_, body

    def read_record_at(self, file_id: int, offset: int, want_type: bool = False, fd: Optional[int] = None):
        """The body of the record at `offset` (with its type when asked), checksum verified;
        read through `fd` when given, else through this process's descriptor of the file."""
        if fd is None:
            with self._fd_lock:
                try:
                    read = _pread_record(self._read_fd(file_id), offset)
                except FileNotFoundError:
                    raise StaleRow("a file the index names is gone (compacted?)") from None
        else:
            read = _pread_record(fd, offset)
        if read is None:
            raise CorruptObject(f"damaged record at offset {offset} of {self.index.path_of(file_id)}; run `ctape fsck`")
        type_, length, rest = read
        body = rest[:length]
        self.io["bytes_read"] += framing.HEADER_SIZE + len(rest)
        self.io["records_read"] += 1
        if len(rest) != length + framing.TRAILER_SIZE or int.from_bytes(rest[length:], "little") != zlib.crc32(body):
            raise CorruptObject(f"damaged record at offset {offset} of {self.index.path_of(file_id)}; run `ctape fsck`")
        return (type_, body) if want_type else body

    def block_items(self, file_id: int, offset: int, body: bytes, type_: int = framing.T_BLOCK, src: Optional["Source"] = None,
                    refs: bool = True) -> list[framing.Record]:
        """The records inside a block (`K`, or `Z` with its dictionary); ref records only with `refs`."""
        where = f"block at offset {offset} of {self.index.path_of(file_id)}"
        return packing.decode_block(self.block_raw(file_id, offset, body, type_, where, src), where, refs)

    def block_raw(self, file_id: int, offset: int, body: bytes, type_: int, where: str, src: Optional["Source"] = None) -> bytes:
        """The decompressed bytes of a block record. A scan of the file passes what it read
        (`src`), and a `Z` block's dictionary is then taken from those same bytes or read
        through the same descriptor, never through another view of the file."""
        if type_ != framing.T_DICT_BLOCK:
            return self.decompress(body, where)
        distance, frame = packing.split_dict_block(body)
        if not 0 < distance <= offset:
            raise CorruptObject(f"damaged {where}: its dictionary offset is impossible; run `ctape fsck`")
        return self.decompress(frame, where, self._dictionary(file_id, offset - distance, where, src))

    def _dictionary(self, file_id: int, offset: int, where: str, src: Optional["Source"]):
        """A decompressor for the dictionary record at `offset`; the last few are cached by
        file, offset, the record's length and its checksum (a file cut and written again,
        or replaced, may hold another dictionary at the same offset)."""
        if src is None:
            # a block read on its own: a cached dictionary is known by its record's frame
            # (length and stored checksum, 2 small reads), not by reading its body again
            key = self._dict_key(file_id, offset)
            dctx = self._dicts.pop(key, None) if key is not None else None
            if dctx is not None:
                self._dicts[key] = dctx
                return dctx
        try:
            rec = src.record_at(offset) if src is not None else None
            if rec is None:
                rec = self.read_record_at(file_id, offset, want_type=True, fd=src.fd if src is not None else None)
        except CorruptObject:
            raise CorruptObject(f"damaged {where}: its dictionary record is damaged; run `ctape fsck`") from None
        type_, body = rec
        if type_ != framing.T_DICT:
            raise CorruptObject(f"damaged {where}: no dictionary record where it points; run `ctape fsck`")
        key = (file_id, offset, len(body), zlib.crc32(body))
        dctx = self._dicts.pop(key, None)
        if dctx is None:
            dctx = dict_decompressor(self.decompress(body, f"dictionary at offset {offset} of {self.index.path_of(file_id)}"))
            if len(self._dicts) >= 4:
                self._dicts.pop(next(iter(self._dicts)))
        self._dicts[key] = dctx  # most recently used last
        return dctx

    def _dict_key(self, file_id: int, offset: int) -> Optional[tuple]:
        """(file, offset, length, stored checksum) of the dictionary record at `offset`, read
        from its frame only; None when there is no whole dictionary record's frame there
        (the full read then says what is wrong)."""
        with self._fd_lock:
            try:
                fd = self._read_fd(file_id)
            except (FileNotFoundError, EntryNotFound):
                return None
            head = os.pread(fd, framing.HEADER_SIZE, offset)
            parsed = framing.parse_header(head) if len(head) == framing.HEADER_SIZE else None
            if parsed is None or parsed[0] != framing.T_DICT:
                return None
            tail = os.pread(fd, framing.TRAILER_SIZE, offset + framing.HEADER_SIZE + parsed[1])
        if len(tail) != framing.TRAILER_SIZE:
            return None
        return (file_id, offset, parsed[1], int.from_bytes(tail, "little"))

    def block_records(self, file_id: int, offset: int, body: bytes, type_: int = framing.T_BLOCK) -> dict[str, bytes]:
        """The object records inside a block, by hash (the last few blocks are cached)."""
        key = (file_id, offset)
        cached = self._blocks.get(key)
        if cached is None:
            items = self.block_items(file_id, offset, body, type_, refs=False)
            cached = {r.body[:32].hex(): r.body for r in items if r.type == framing.T_OBJECT}
            self._blocks[key] = cached
            if len(self._blocks) > 8:
                self._blocks.pop(next(iter(self._blocks)))
        return cached

    def decompress(self, data: bytes, what: str, dctx=None) -> bytes:
        """Decompress a zstd frame, refusing one that claims more than max_object bytes."""
        z = zstd()
        try:
            size = z.frame_content_size(data)
        except z.ZstdError:
            raise CorruptObject(f"{what} is corrupt (bad zstd frame); run `ctape fsck`") from None
        if size < 0 or size > self.max_object:
            raise ObjectTooLarge(f"{what} claims {size} bytes, over the limit of {self.max_object}; raise CTAPE_MAX_OBJECT if you trust this tape")
        if dctx is None:
            if self._dctx is None:
                self._dctx = z.ZstdDecompressor()
            dctx = self._dctx
        try:
            return dctx.decompress(data, max_output_size=size)
        except z.ZstdError:
            raise CorruptObject(f"{what} is corrupt (zstd data); run `ctape fsck`") from None

    def read_object_at(self, h: str, file_id: int, offset: int) -> tuple[int, bytes]:
        cached = self._blocks.get((file_id, offset))
        if cached is None:
            type_, body = self.read_record_at(file_id, offset, want_type=True)
            if type_ not in framing.BLOCK_TYPES:
                return self.decode_object(h, body)
            cached = self.block_records(file_id, offset, body, type_)
        inner = cached.get(h)
        if inner is None:
            raise CorruptObject(f"object {h} is not in the block the index names; run `ctape fsck`")
        # inside a block an object has no stored name: its name was computed from these
        # very bytes when the block was decoded, so there is nothing left to verify
        return inner[32], inner[34:]

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
            # the index may be stale (files replaced by compaction): rebuild and read again
            return self.reread(lambda: self._read_indexed(h))

    def _read_indexed(self, h: str) -> tuple[int, bytes]:
        loc = self.index.find_object(h)
        if loc is None:
            # another process's rebuild, from a listing taken before a compaction's pack had
            # its name, may have committed after ours: its rows lack that pack until a look
            self.refresh()
            loc = self.index.find_object(h)
        if loc is None:
            self._not_found(h)
        return self.read_object_at(h, *loc)

    def reread(self, read: Callable[[], T]) -> T:
        """After a read through the index failed: rebuild the index and `read()` again; again
        while the rows it reads name a file gone meanwhile (StaleRow: a compaction in another
        process, whose cache is not this one), at most REBUILD_TRIES times."""
        return retried(read, StaleRow, before=self._full_reindex)

    def _not_found(self, h: str):
        """An object the index cannot find: damaged if the tape has damaged records, lost if
        a salvage report names it, else not here yet."""
        damaged = list(self.index.file_rows(damaged=True))
        if damaged and self.index.refused_at_limit() == self.max_object:
            raise ObjectTooLarge(f"object {h} cannot be read: {', '.join(damaged[:3])} holds records that claim more than the limit of "
                                 f"{self.max_object} bytes, or are damaged; raise CTAPE_MAX_OBJECT if you trust this tape, and see `ctape fsck`")
        where = self.lost_to_damage(h)
        if where and where.startswith(QUARANTINE):
            # gone for good, a hole in history like one not synced yet (readers stop there)
            raise LostToDamage(f"object {h} was lost to damage (salvaged: see {where})")
        if where:
            raise CorruptObject(f"object {h} cannot be read: damaged records in {where}; run `ctape fsck`, and `ctape fsck --salvage` to keep what is intact")
        raise EntryNotFound(f"object {h} is not in this tape (not synced yet, or removed)")

    def lost_to_damage(self, h: str) -> Optional[str]:
        """Where an object the index cannot find went, when damage is why: the salvage
        report that names it as lost, else the damaged files that could hold it (a record
        that fails its checksum hides its name). None: nothing says it was damaged (not
        synced yet, or removed)."""
        report = self._salvage_losses().get(h) or self._salvage_lost_keys().get(hash_key(h))
        if report:
            return report
        damaged = self.damaged_files()
        return ", ".join(damaged[:3]) + (" ..." if len(damaged) > 3 else "") if damaged else None

    def damaged_files(self) -> list[str]:
        """Every file of the tape with damaged records or lost acknowledged ones."""
        return sorted(set(self.index.file_rows(damaged=True)) | {p for p, _, _ in self.index.lost_rows()})

    def read_value(self, h: str, entry: Optional[str] = None) -> bytes:
        """The bytes of a value (blob) that `entry` refers to. A value known to be lost to
        damage reads as LOST_VALUE, so that the entry still reads (docs/format.md section
        15): a salvage report names it, or (damage stays in its session, SPEC 14) a damaged
        record of another session's file holds it. Otherwise a value that cannot be read
        fails as get_object does: damage in the entry's own session stops the read (one
        line that names the files and --salvage), one not here yet is EntryNotFound."""
        try:
            return self.get_object(h)[1]
        except ObjectTooLarge:
            raise  # readable under a higher limit: not lost
        except (CorruptObject, EntryNotFound):
            if h in self._salvage_losses() or hash_key(h) in self._salvage_lost_keys():
                return LOST_VALUE.encode()
            mine = self.session_of(entry)
            key = hash_key(h)
            held = [p for p in self.damaged_files() if h in self._damaged_names(p) or self._holds(p, h) or key in self.index.lost_keys(p)]
            if held and mine is not None and not any(p.startswith(f"sessions/{mine}/") for p in held):
                return LOST_VALUE.encode()
            raise

    def session_of(self, h: Optional[str]) -> Optional[str]:
        """The session whose file holds object h (None when unknown or in packs/)."""
        loc = self.index.find_object(h) if h else None
        rel = self.index.path_of(loc[0]) if loc else None
        return rel.split("/")[1] if rel and rel.startswith("sessions/") else None

    def _holds(self, rel: str, h: str) -> bool:
        """Does the index place object h in file rel (where it does not read back)?"""
        loc = self.index.find_object(h)
        return loc is not None and self.index.path_of(loc[0]) == rel

    def _damaged_names(self, rel: str) -> set[str]:
        """damaged_object_names of a file, kept while the file keeps its size."""
        try:
            size = os.lstat(os.path.join(self.root, rel)).st_size
        except OSError:
            return set()
        cached = self._held.get(rel)
        if cached is None or cached[0] != size:
            cached = self._held[rel] = (size, damaged_object_names(self.root, rel))
        return cached[1]

    def _salvage_losses(self) -> dict[str, str]:
        """Every object the salvage reports (final or pending) name as lost: hash -> report.
        Read again only when quarantine/ changed."""
        base = os.path.join(self.root, QUARANTINE)
        names = []
        try:
            for d in sorted(os.scandir(base), key=lambda e: e.name):
                if d.is_dir(follow_symlinks=False):
                    for e in os.scandir(d.path):
                        if e.name.endswith((REPORT, PENDING)) and not e.name.startswith(".") and e.is_file(follow_symlinks=False):
                            st = e.stat(follow_symlinks=False)
                            names.append((f"{QUARANTINE}/{d.name}/{e.name}", st.st_size, st.st_mtime_ns))
        except (FileNotFoundError, NotADirectoryError):
            pass
        key = tuple(sorted(names))
        if self._losses is not None and self._losses[0] == key:
            return self._losses[1]
        losses: dict[str, str] = {}
        keys: dict[int, str] = {}  # objects a report names by index key only (their records no longer said)
        for rel, _, _ in key:
            try:
                with open(os.path.join(self.root, rel), "rb") as f:
                    report = json.loads(f.read(REPORT_MAX))
                for lost in report.get("missing", []):
                    if isinstance(lost, str):
                        losses.setdefault(lost, rel)
                for k in report.get("missing_keys", []):
                    if type(k) is int:
                        keys.setdefault(k, rel)
            except (OSError, ValueError, AttributeError, TypeError):
                continue  # fsck reports an unreadable report
        self._losses = (key, losses, keys)
        return losses

    def _salvage_lost_keys(self) -> dict[int, str]:
        """The index keys (hash_key) of objects the salvage reports name by key: hash_key -> report."""
        self._salvage_losses()
        return self._losses[2]

    def file_on_disk(self, file_id: int) -> bool:
        """Whether the file an index row points into is still in the tape (not only open in
        this process: a descriptor keeps a removed file readable here)."""
        rel = self.index.path_of(file_id)
        return rel is not None and os.path.lexists(os.path.join(self.root, rel))

    def has_object(self, h: str) -> bool:
        """Does the tape hold object h? The index answers; when it says no after another
        process rebuilt the cache (from a listing that may predate a file, whose rows that
        rebuild removed: see _refresh), or before this process ever looked at every file,
        it is brought up to date and asked again. A plain "not here" costs one query."""
        if h in self.pending or self.index.find_object(h) is not None:
            return True
        if self._whole_at is None or self.index.rebuilds() != self._whole_at:
            self.refresh()
            return self.index.find_object(h) is not None
        return False

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

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Writes inside share one fsync per file at the end; an exception discards them all."""
        with self._lock:
            self._batch_depth += 1
            ok = False
            contested = None
            try:
                yield
                ok = True
            except ConflictError as e:
                contested = getattr(e, "contested", None)
                raise
            finally:
                self._batch_depth -= 1
                if self._batch_depth == 0:
                    writers = list(self.locked_writers.values())
                    done = 0
                    try:
                        if ok:
                            for w in writers:
                                w.flush(durable=True)
                                done += 1
                    except OSError as e:
                        if e.errno in (errno.EMFILE, errno.ENFILE):
                            raise _too_many_files(self) from None
                        raise
                    finally:
                        for w in writers[done:]:
                            w.discard()  # not written: drop, so no later append writes them
                        for w in writers:
                            w.unlock()
                        if len(self._writers) > WRITERS_MAX:
                            self._close_idle_writers()  # a batch over many sessions: their descriptors go with it
                        if contested is not None:
                            _wait_for_lock(contested)


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


def retried(read: Callable[[], T], errors, before: Optional[Callable[[], object]] = None) -> T:
    """read(), again while it fails with `errors` (a compaction in another process removed
    a file meanwhile), at most REBUILD_TRIES times: the last try's error is raised.
    `before()` runs ahead of each try."""
    for n in range(REBUILD_TRIES):
        if before is not None:
            before()
        try:
            return read()
        except errors:
            if n == REBUILD_TRIES - 1:
                raise
    raise AssertionError("unreachable")


class StaleRow(EntryNotFound):
    """A row of the index names a file that is gone: another process removed it (compact)
    after the index was read. Not damage: rebuild the index and read again (Store.reread)."""


class Source(NamedTuple):
    """What a scan of a file read: the descriptor it read through, and the bytes it read
    from offset `base` on."""

    fd: Optional[int]
    data: bytes
    base: int

    def record_at(self, offset: int) -> Optional[tuple[int, bytes]]:
        """(type, body) of the record at `offset` if it lies in the bytes read (None if not);
        CorruptObject if those bytes are not a good record."""
        pos = offset - self.base
        if pos < 0 or pos >= len(self.data):
            return None
        item = next(framing.scan(self.data, pos), None)
        if not isinstance(item, framing.Record) or item.offset != pos:
            raise CorruptObject(f"damaged record at offset {offset}")
        return item.type, item.body


class RefsCache(dict):
    """The refs of the sessions read last, each with the index version it was read at."""

    LIMIT = 256

    def __setitem__(self, key, value) -> None:
        if key not in self and len(self) >= self.LIMIT:
            del self[next(iter(self))]
        super().__setitem__(key, value)


def _deleted_refs(was: dict, now: dict) -> set[str]:
    """The refs of claims `was` (refmod.from_rows) that every claim left (none in `now`)
    while their claims showed them deleted: a compaction drops an expired deletion together
    with the claims it deleted, and the ref reads as it did (absent). No loss."""
    out = set()
    for ref, cs in was.items():
        if ref not in now:
            win, others = refmod.shown(ref, refmod.standing_claims(list(cs.values())))
            if win.value is None and not others:
                out.add(ref)
    return out


def damaged_object_names(root: str, rel: str) -> set[str]:
    """The names of the object records of a data file that fail their checksum: a body
    starts with its name, which most damage (a bit flipped inside a large value) leaves
    whole. Another session may refer to such a value (values are stored once per tape); a
    name the damage hit is a hash that nothing refers to."""
    try:
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
    except OSError:
        return set()
    names = set()
    for item in framing.scan(data):
        if isinstance(item, framing.Damage) and not item.torn:
            parsed = framing.parse_header(data[item.offset : item.offset + framing.HEADER_SIZE])
            if parsed and parsed[0] == framing.T_OBJECT and parsed[1] > 33:
                start = item.offset + framing.HEADER_SIZE
                names.add(data[start : start + 32].hex())
    return names


def pack_name_matches(rel: str, data: bytes) -> bool:
    """A pack's name is `pack-` + the first 32 hex digits of the blake3 of all its bytes."""
    name = os.path.basename(rel)
    return name == f"pack-{blake3(data).hexdigest()[:32]}.pack"


def record_problem(type_: int, body: bytes, session: Optional[str], writer: Optional[str] = None):
    """The decoded ref or stream record, or a short reason (str) why it cannot be used:
    not JSON, fields of the wrong type or range (ctape/model/schema.py), a session other
    than the folder's (`session`; None for packs/, which may hold any), or, in a
    segment, a ref record of another writer than the one the file belongs to (`writer`)."""
    rec, why = (read_ref_record if type_ == framing.T_REF else read_partial_record)(body, session)
    if not why and writer is not None and type_ == framing.T_REF and rec["w"] != writer:
        why = f"ref record of writer {rec['w']!r} in a segment of writer {writer!r}"
    return why if why else rec


def segment_writer(rel: str) -> Optional[str]:
    """The writer a segment belongs to, by its name (`<writer>-<time>.seg`); None for a pack."""
    name = os.path.basename(rel)
    return name.split("-", 1)[0] if name.endswith(".seg") else None


def file_header_problem(rel: str, first) -> Optional[str]:
    """Why the first record of a data file (a framing.Record, or None when the file has
    none) is not the header its path calls for: the format its name says, the session
    of its folder, and for a segment the writer its name says. Such a file is damage,
    never data: it could otherwise move the refs of a session or a writer it does not
    belong to."""
    if first is None or not isinstance(first, framing.Record) or first.type != framing.T_HEADER:
        return "file does not start with a header record"
    try:
        head = json.loads(first.body)
    except ValueError:
        return "file header is not JSON"
    parts = rel.split("/")
    session = parts[1] if parts[0] == "sessions" and len(parts) == 3 else None
    fmt = "ctape-segment" if rel.endswith(".seg") else "ctape-pack"
    return header_problem(head, fmt, session, segment_writer(rel))


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


def _damage_level(data: bytes, d: framing.Damage) -> int:
    """1: a damaged object record (reading that object fails); 2: anything else, which may
    have been a ref record, so the refs read from this file cannot be trusted."""
    head = data[d.offset : d.offset + framing.HEADER_SIZE]
    parsed = framing.parse_header(head) if len(head) == framing.HEADER_SIZE else None
    return 1 if parsed is not None and parsed[0] == framing.T_OBJECT else 2


def _pread_record(fd: int, offset: int) -> Optional[tuple[int, int, bytes]]:
    """(type, body length, the bytes after the header: body and trailer, fewer if the file
    ends) of the record at `offset`; None when no record header is there."""
    head = os.pread(fd, framing.HEADER_SIZE, offset)
    parsed = framing.parse_header(head) if len(head) == framing.HEADER_SIZE else None
    if parsed is None:
        return None
    type_, length = parsed
    return type_, length, os.pread(fd, length + framing.TRAILER_SIZE, offset + framing.HEADER_SIZE)


def _closed():
    raise InvalidInput("this Tape is closed; open it again (Tape.open(path)) to use it")


class _ClosedIndex:
    """The index of a closed Store: any use raises InvalidInput."""

    def __getattr__(self, name):
        _closed()

    def sync(self) -> None:  # Store.__del__'s last write: nothing left to write
        pass


class _Writing:
    """Store.writing: `with store.writing(session) as w`."""

    __slots__ = ("store", "session", "w")

    def __init__(self, store: Store, session: str):
        self.store, self.session = store, session

    def __enter__(self) -> SegmentWriter:
        st = self.store
        if isinstance(st.index, _ClosedIndex):
            _closed()
        st._lock.acquire()
        try:
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
        except OSError as e:
            st._lock.release()
            if e.errno in (errno.EMFILE, errno.ENFILE):
                raise _too_many_files(st) from None
            raise
        except BaseException:
            st._lock.release()
            raise
        self.w = w
        return w

    def __exit__(self, kind, value, tb) -> bool:
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
            st._lock.release()
        return False
