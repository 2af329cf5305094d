"""The local index: a SQLite cache of where things are in the tape's files.

Everything here can be rebuilt from the tape directory, so the index lives
outside it (in $CTAPE_CACHE_DIR, else ~/.cache/ctape) and is never fsync'd: a
crash or a deleted cache costs a rescan, never data. Each file's row says up to
which offset it has been read; a file that grew (an append, an rsync) is read
from there on, so keeping the index fresh costs a stat per file plus the new
bytes. A file that shrank or vanished (compaction, an rsync that brought an old
copy back) makes the index start over.

Tables:
  files    path -> how far it has been indexed, and any damage seen there
  objects  first 8 bytes of a hash -> (file, offset, is_entry)
  writers  the newest n and Lamport clock of each writer of a session
  claims   the newest record of each writer for each ref of a session; a claim a gap cuts off
           is kept beside it under the key "WRITER N" (model/refs.py: claim_key)
  gaps     the `gap` of each record that has one: (lo, hi) of its writer
  vouched  per session, the n of the record with `gap` this cache's writer wrote: from
           then on this cache vouches for the writer's own records (it notices a loss),
           until a salvage (kept across rebuilds, like `lost`)
  partials partial-stream chunks; closed: streams that were recorded
  keyframes derived state snapshots (state, pending calls) at every 256th entry
  views    an integration's text for an entry, with the entry's parent (the Agents SDK
           session's items): a path is read back with one query. Named by entry hash,
           like keyframes, so they never go stale and survive rebuilds
  lost     files found shorter than this machine had read them, or gone with claims on
           refs that nothing supersedes (kept across rebuilds; cleared when the file
           is whole again or salvaged)
  repeated segments whose records from `floor` on were written again in a later segment
           (the later one's header says so): a copy of one cut anywhere past `floor` may
           come back by rsync and loses nothing
  expired  the newest deletion of each writer for each ref of a session that a compaction
           with this cache dropped (expired, with the claims it deleted): those claims
           are superseded, not lost, when a look finds them gone with the files (kept
           across rebuilds, like `lost`)

The ref log itself (`ctape reflog`, SESSION@{N}) is read from the session's files when
asked: a row per ref record made this cache as large as the tape for sessions written
one append at a time.

Rows are gathered in an IndexBatch and written by the part of the Index it inherits
(index_batch.py).
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import sys
import time
from contextlib import contextmanager
from typing import Iterable, Optional

from .index_batch import Applying, IndexBatch

SCHEMA_VERSION = 18  # 15: redactions; 16: gaps (cut-off claims); 17: expired; 18: view bodies compressed (VIEW_PACKED). A bump also names a new file (index_file): versions never share one
# A views row's body longer than this is kept zstd-compressed, as a blob: the Agents SDK's
# and LangGraph's rows hold items and checkpoints as JSON text, which made the cache 10-15 x
# the tape it indexes (the tape's blocks are compressed; found by measuring, 2026-12-07)
VIEW_PACKED = 256

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS files(id INTEGER PRIMARY KEY AUTOINCREMENT, path TEXT UNIQUE NOT NULL,
    indexed INTEGER NOT NULL DEFAULT 0, torn INTEGER NOT NULL DEFAULT 0, corrupt INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS objects(key INTEGER PRIMARY KEY, file INTEGER NOT NULL,
    offset INTEGER NOT NULL, entry INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS claims(session TEXT NOT NULL, ref TEXT NOT NULL, w TEXT NOT NULL,
    n INTEGER NOT NULL, lc INTEGER NOT NULL, value TEXT, seen TEXT NOT NULL, at TEXT,
    PRIMARY KEY(session, ref, w)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS partials(session TEXT NOT NULL, stream TEXT NOT NULL, off INTEGER NOT NULL,
    body TEXT NOT NULL, PRIMARY KEY(session, stream, off)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS closed(session TEXT NOT NULL, stream TEXT NOT NULL,
    PRIMARY KEY(session, stream)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS keyframes(key INTEGER PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS writers(session TEXT NOT NULL, w TEXT NOT NULL, n INTEGER NOT NULL,
    lc INTEGER NOT NULL, PRIMARY KEY(session, w)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lost(path TEXT PRIMARY KEY, expected INTEGER NOT NULL, found INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS repeated(path TEXT PRIMARY KEY, floor INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS views(name TEXT NOT NULL, key INTEGER NOT NULL, hash TEXT NOT NULL,
    parent TEXT, pkey INTEGER, body, PRIMARY KEY(name, key));
CREATE TABLE IF NOT EXISTS lost_keys(path TEXT NOT NULL, key INTEGER NOT NULL, PRIMARY KEY(path, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS redactions(object TEXT NOT NULL, path TEXT NOT NULL, kind TEXT NOT NULL,
    PRIMARY KEY(object, path)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gaps(session TEXT NOT NULL, w TEXT NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL,
    PRIMARY KEY(session, w, hi)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vouched(session TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS expired(session TEXT NOT NULL, ref TEXT NOT NULL, w TEXT NOT NULL,
    n INTEGER NOT NULL, lc INTEGER NOT NULL, seen TEXT NOT NULL, PRIMARY KEY(session, ref, w)) WITHOUT ROWID;
"""


class Kept(dict):
    """A dict of at most `limit` keys, the first put in dropped first: what a Tape keeps per
    session or per file it met. A server that met 20,000 sessions in one Tape kept each
    one's listing (0.65 KB a session, never dropped; found by an audit of long-lived
    processes). A key dropped is worked out again when next asked for."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def __setitem__(self, key, value) -> None:
        if key not in self and len(self) >= self.limit:
            del self[next(iter(self))]
        super().__setitem__(key, value)


def versioned_file(stem: str, version: int, shared_up_to: int) -> str:
    """A cache file's name, one per schema version after `shared_up_to` (whose versions
    share `STEM.sqlite`): a ctape of another version keeps its own cache beside this one
    instead of dropping the tables under a running process of this version."""
    return f"{stem}.sqlite" if version <= shared_up_to else f"{stem}-{version}.sqlite"


def index_file(version: Optional[int] = None) -> str:
    """The index cache's file name in a tape's cache folder: one per schema version from
    16 on (versioned_file). Dropped under a running process (`watch`, `serve`, an agent's
    Tape), its file ids would name other files, and its next appends judged a session to
    have lost acknowledged records."""
    return versioned_file("index", SCHEMA_VERSION if version is None else version, 15)


KEPT_PATHS = 4096  # file id -> path rows kept in memory (Index.path_of)
SQLITE_CORRUPT, SQLITE_NOTADB = 11, 26  # SQLite's primary result codes for a damaged file

TABLES = ("meta", "files", "objects", "records", "claims", "partials", "closed", "keyframes", "writers", "lost", "views", "repeated",
          "gaps", "vouched", "expired")


def connect_cache(path: str) -> sqlite3.Connection:
    """A connection to one of the caches outside the tape (this index, search.py's): never
    fsync'd (a crash costs a rescan, never data), shared by threads, WAL beside readers.
    The file is its owner's only, as the tape's files are (it holds their text): SQLite
    gives its -wal and -shm files the same permissions."""
    if path != ":memory:":
        _owner_only(path)
    db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA busy_timeout=60000")
    if path != ":memory:":
        # processes opening a new cache at once: one of them turns it to WAL, and SQLite
        # answers the others' switch "database is locked" at once, past its busy handler
        for attempt in range(200):
            try:
                db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as e:
                if not _busy(e) or attempt == 199:
                    raise
                time.sleep(0.01)
    db.execute("PRAGMA synchronous=OFF")
    return db


def _owner_only(path: str) -> None:
    """Create the cache file readable by its owner only, or make an older one so."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        return
    except FileExistsError:
        pass
    except OSError:
        return  # sqlite3 says what is wrong with the place (or the store goes to memory)
    for name in (path, path + "-wal", path + "-shm"):
        try:
            st = os.stat(name, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077 and st.st_uid == os.getuid():
                os.chmod(name, 0o600)
        except OSError:
            pass


def cache_schema(db: sqlite3.Connection) -> Optional[int]:
    """The schema version a cache was written with (None: new, or not one of ours)."""
    try:
        row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        return int(row[0]) if row else None
    except (sqlite3.OperationalError, ValueError):
        return None


def ensure_schema(db: sqlite3.Connection, version: int, tables: tuple[str, ...], schema: str, also: str = "",
                  always: bool = False) -> bool:
    """Drop `tables` and create `schema` (then run `also`), in one transaction, when the
    cache is not of `version` (or `always`: a cache emptied on purpose); True when it did.
    The version is read again inside the write transaction: two processes opening a new
    or older cache at once make it once, where the second used to drop what the first had
    begun to fill (file ids it had handed out then named other files, and a session was
    judged to have lost acknowledged records)."""
    if not always and cache_schema(db) == version:
        return False
    db.execute("BEGIN IMMEDIATE")
    try:
        made = always or cache_schema(db) != version
        if made:
            for stmt in [f"DROP TABLE IF EXISTS {t}" for t in tables] + schema.split(";") + also.split(";"):
                if stmt.strip():
                    db.execute(stmt)
            db.execute("INSERT OR REPLACE INTO meta VALUES('schema', ?)", (str(version),))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return made


def hash_key(h: str) -> int:
    """The signed 64-bit integer of a hash's first 16 hex digits (SQLite's integer key)."""
    v = int(h[:16], 16)
    return v - (1 << 64) if v >= 1 << 63 else v


def prefix_range(prefix: str) -> tuple[int, int]:
    p = prefix[:16]
    lo = int(p.ljust(16, "0"), 16)
    hi = int(p.ljust(16, "f"), 16)
    conv = lambda v: v - (1 << 64) if v >= 1 << 63 else v  # noqa: E731
    return conv(lo), conv(hi)


class Index(Applying):
    """The SQLite cache, plus rows this process wrote but has not applied yet.

    Appends add their rows with `add`; they are applied in bulk (every
    APPLY_EVERY rows, before any query that needs them, and at close), so the
    durable append path costs no SQLite transaction. Losing them (a crash) only
    means the next reader indexes those bytes from the file again.
    """

    APPLY_EVERY = 2048

    def __init__(self, path: Optional[str]):
        self.path = path or ":memory:"
        self.home = path  # the cache file's place, kept when the rows go to memory (localstate.cache_folder)
        self.pending = IndexBatch()
        self.pending_objects: dict[int, tuple[int, int]] = {}
        self.pending_keyframes: dict[int, str] = {}
        self._paths: dict[int, str] = Kept(KEPT_PATHS)  # file id -> path (one dropped is asked again)
        self._in_rebuild = False
        self.generation = 0  # one more at every change this process makes (see version)
        self.stale = False  # the rows were lost (the cache went to memory): the store rebuilds
        self._redactions: Optional[tuple] = None  # (version, places by object)
        self.places = 0  # redacted places this process knows of (only grows): see redacted_places
        # what this process knows is redacted grows: one more each time (see redaction_news).
        # Derived values computed before (Session._track_derived, integrations' caches) may
        # hold the text and are computed again
        self.redaction_epoch = 0
        self._redaction_rows: Optional[int] = None  # rows of the redactions table when last read
        try:
            self.db = self._connect(self.path)
        except sqlite3.Error as e:
            if self.path == ":memory:":
                raise
            if not self._made_again(e):
                self._degrade(e)
        try:
            self.redactions()  # known before anything is derived: later news is news
        except sqlite3.Error:
            pass  # read at the first use instead

    # -- a cache that cannot be written ----------------------------------------------

    def _made_again(self, err: Exception) -> bool:
        """A cache file SQLite finds damaged ("database disk image is malformed", "file is
        not a database": it is never fsync'd, so a power cut can leave it so) is removed and
        made again, empty: the store rebuilds it from the tape. Kept, every later command
        warned and read without a cache for good, and a cut the cache would have caught as
        lost acknowledged data read as a torn tail (found by an audit). False when err is
        not damage, or the new file cannot be made either."""
        code = getattr(err, "sqlite_errorcode", None)
        if self.path == ":memory:" or code is None or code & 0xFF not in (SQLITE_CORRUPT, SQLITE_NOTADB):
            return False
        sys.stderr.write(f"ctape: warning: the index cache {self.path} is damaged ({err}); made it again from the tape\n")
        old = getattr(self, "db", None)
        if old is not None:
            try:
                old.close()
            except sqlite3.Error:
                pass
        for name in (self.path, self.path + "-wal", self.path + "-shm"):
            try:
                os.unlink(name)
            except FileNotFoundError:
                pass
            except OSError:
                return False
        try:
            self.db = self._connect(self.path)
        except sqlite3.Error:
            return False
        self._rows_gone()
        return True

    def _degrade(self, err: Exception) -> None:
        """The cache file cannot be written (its disk is full, it went read-only, I/O
        errors): say so once, and go on with an index in memory that the store rebuilds
        from the tape. The tape itself is not touched by this. A damaged file is made
        again instead (_made_again)."""
        if self.path == ":memory:" or _busy(err):
            raise err
        if self._made_again(err):
            return
        sys.stderr.write(f"ctape: warning: the index cache {self.path} cannot be written ({err}); reading the tape without it (slower)\n")
        old = getattr(self, "db", None)
        self.path = ":memory:"
        self.db = self._connect(":memory:")
        if old is not None:
            try:
                old.close()
            except sqlite3.Error:
                pass
        self._rows_gone()

    def _rows_gone(self) -> None:
        """The rows are in a new, empty database (in memory, or a damaged file made again):
        what this process had queued for the old one goes, and the store rebuilds."""
        self.generation = getattr(self, "generation", 0) + 1
        self.pending = IndexBatch()
        self.pending_objects.clear()
        self.pending_keyframes.clear()
        self._paths.clear()
        self.stale = True

    @staticmethod
    def _connect(path: str) -> sqlite3.Connection:
        db = connect_cache(path)
        if ensure_schema(db, SCHEMA_VERSION, TABLES, SCHEMA):
            try:
                db.execute("VACUUM")  # give back the dropped tables' pages (the tables are empty: cheap)
            except sqlite3.OperationalError:
                pass  # another process is using the cache: the pages are reused as it grows
        if db.execute("SELECT 1 FROM meta WHERE key='derived-after-redactions'").fetchone() is None:
            # a cache written before redactions reached derived rows (_redactions_arrived) may
            # hold keyframes and views folded from text a redaction removed: they go, once
            try:
                db.executescript(
                    "BEGIN IMMEDIATE;"
                    "DELETE FROM keyframes WHERE EXISTS (SELECT 1 FROM redactions);"
                    "DELETE FROM views WHERE EXISTS (SELECT 1 FROM redactions);"
                    "INSERT OR REPLACE INTO meta VALUES('derived-after-redactions', '1');COMMIT;"
                )
            except sqlite3.OperationalError:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                # a cache that cannot be written: its next writable open does it
        return db

    # -- files ---------------------------------------------------------------

    def add(self, batch: "IndexBatch") -> None:
        p = self.pending
        p.extend(batch)
        for key, fid, off, _ in batch.objects:
            self.pending_objects.setdefault(key, (fid, off))
        for key, body in batch.keyframes:
            self.pending_keyframes[key] = body
        if batch.redactions:
            # applied at once: the cache's keyframes and views go with them, and no read
            # meanwhile finds the text there
            self.redaction_news()
            self.sync()
        elif len(p.objects) + len(p.writers) >= self.APPLY_EVERY:
            self.sync()

    def sync(self) -> None:
        """Apply the rows this process has added."""
        if self.pending.empty():
            return
        batch, self.pending = self.pending, IndexBatch()
        self.apply(batch)
        self.pending_objects.clear()
        self.pending_keyframes.clear()

    def close(self) -> None:
        try:
            self.sync()
        except sqlite3.Error:
            pass
        self.db.close()

    def file_rows(self, prefixes: Optional[tuple[str, ...]] = None, damaged: bool = False) -> dict[str, tuple[int, int, int, int]]:
        """(id, indexed, torn, corrupt) of each file by path: every file, or only those whose
        path starts with one of `prefixes` (a range of the path's index each: a question
        about one session costs the same in a tape of 10 sessions as of 100,000); with
        `damaged`, only the files with damaged records (a session of thousands of sealed
        segments is asked at every read)."""
        self.sync()
        cond = " AND corrupt > 0" if damaged else ""
        if prefixes is None:
            return {p: (i, ix, t, c) for i, p, ix, t, c in self.db.execute("SELECT id, path, indexed, torn, corrupt FROM files WHERE 1" + cond)}
        out = {}
        for pre in prefixes:
            # the paths that start with pre sort from pre up to pre with its last character one higher
            rows = self.db.execute("SELECT id, path, indexed, torn, corrupt FROM files WHERE path >= ? AND path < ?" + cond,
                                   (pre, pre[:-1] + chr(ord(pre[-1]) + 1)))
            out.update((p, (i, ix, t, c)) for i, p, ix, t, c in rows)
        return out

    def last_segment(self, prefix: str) -> Optional[tuple[str, tuple[int, int, int, int]]]:
        """The segment whose path sorts last of those starting with `prefix` (a writer's newest
        in a session), with its row as in `file_rows`; one step of the path's index however
        many segments the writer left."""
        self.sync()
        row = self.db.execute("SELECT id, path, indexed, torn, corrupt FROM files WHERE path >= ? AND path < ? AND path LIKE '%.seg' "
                              "ORDER BY path DESC LIMIT 1", (prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1))).fetchone()
        return None if row is None else (row[1], (row[0], row[2], row[3], row[4]))

    def file_id(self, path: str) -> int:
        while True:
            row = self.db.execute("SELECT id FROM files WHERE path=?", (path,)).fetchone()
            if row:
                return row[0]
            # again after the insert: another process's rebuild may delete the new row before
            # it is read (a writer names its segment before the file exists, and a rebuild
            # drops the rows of files it did not list)
            try:
                self.db.execute("INSERT OR IGNORE INTO files(path) VALUES(?)", (path,))
            except sqlite3.OperationalError as e:
                if self._in_rebuild:
                    raise
                self._degrade(e)

    def object_keys_in(self, path: str) -> set[int]:
        """The keys (hash_key) of the objects this index places in file `path`, and those a
        rebuild found the file no longer yields: what salvage names as lost when the file's
        records no longer say (a block that does not decode)."""
        return self.object_keys_from(path, 0) | self.lost_keys(path)

    def object_keys_from(self, path: str, offset: int) -> set[int]:
        """The keys of the objects this index places in file `path` at `offset` or after."""
        row = self.db.execute("SELECT id FROM files WHERE path=?", (path,)).fetchone()
        return {k for (k,) in self.db.execute("SELECT key FROM objects WHERE file=? AND offset>=?", (row[0], offset))} if row else set()

    def note_lost_keys(self, path: str, keys: Iterable[int]) -> None:
        """Objects file `path` held that no file holds now (it went, or was cut): salvage
        names them by key, so reads take them for lost wherever they are referred to."""
        rows = [(path, k) for k in keys if not self.has_key(k)]
        try:
            self.db.executemany("INSERT OR IGNORE INTO lost_keys VALUES(?,?)", rows)
        except sqlite3.OperationalError as e:
            self._degrade(e)
            self.db.executemany("INSERT OR IGNORE INTO lost_keys VALUES(?,?)", rows)

    def lost_keys(self, path: str) -> set[int]:
        """The keys of the objects a rebuild found file `path` no longer yields (a damaged
        block hides their names; see rebuilding)."""
        return {k for (k,) in self.db.execute("SELECT key FROM lost_keys WHERE path=?", (path,))}

    def has_key(self, key: int) -> bool:
        return key in self.pending_objects or self.db.execute("SELECT 1 FROM objects WHERE key=?", (key,)).fetchone() is not None

    def forget_objects(self, file_ids: list[int]) -> None:
        """Drop the object rows that point into these files (gone from the tape)."""
        for i in range(0, len(file_ids), 500):
            part = file_ids[i : i + 500]
            self._write(f"DELETE FROM objects WHERE file IN ({','.join('?' * len(part))})", tuple(part))

    def path_of(self, file_id: int) -> Optional[str]:
        # AUTOINCREMENT never reuses an id while the table lives; an index dropped and made
        # again (by a ctape of another schema version) starts over, and so does a rebuild here
        path = self._paths.get(file_id)
        if path is None:
            row = self.db.execute("SELECT path FROM files WHERE id=?", (file_id,)).fetchone()
            if row is None:
                return None
            path = self._paths[file_id] = row[0]
        return path

    @contextmanager
    def rebuilding(self):
        """Empty the index and fill it again inside one write transaction."""
        self._paths.clear()
        self.pending = IndexBatch()
        self.pending_objects.clear()
        self.pending_keyframes.clear()
        self.generation += 1
        self.db.execute("BEGIN IMMEDIATE")
        self._in_rebuild = True
        try:
            # keyframes stay: they are named by entry hash, so they never go stale
            # the objects placed before, to learn which a damaged file no longer yields
            # (a block that does not decode hides its objects' names; salvage names them by key)
            self.db.execute("DROP TABLE IF EXISTS temp.before_rebuild")
            self.db.execute("CREATE TEMP TABLE before_rebuild AS SELECT key, file FROM objects")
            for t in ("objects", "claims", "partials", "closed", "writers", "repeated", "gaps"):
                self.db.execute(f"DELETE FROM {t}")
            self.db.execute("DELETE FROM meta WHERE key='refused-at-limit'")  # noted again if refused again
            self.db.execute("INSERT INTO meta VALUES('rebuilds', '1') ON CONFLICT(key) DO UPDATE SET value=CAST(value AS INTEGER) + 1")
            self.db.execute("UPDATE files SET indexed=0, torn=0, corrupt=0")
            yield
            if self.db.execute("SELECT 1 FROM files WHERE corrupt > 0 LIMIT 1").fetchone():
                self.db.execute("INSERT OR IGNORE INTO lost_keys SELECT f.path, b.key FROM files f JOIN temp.before_rebuild b ON b.file = f.id "
                                "WHERE f.corrupt > 0 AND b.key NOT IN (SELECT key FROM objects)")
            self.db.execute("DROP TABLE temp.before_rebuild")
            self.db.execute("DELETE FROM files WHERE indexed=0 AND torn=0 AND corrupt=0 AND id NOT IN (SELECT file FROM objects)")
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as e:
            self._rollback()
            if _busy(e) or self.path == ":memory:":
                raise
            self._degrade(e)
            raise IndexDegraded() from None
        except BaseException:
            self._rollback()
            raise
        finally:
            self._in_rebuild = False

    def _rollback(self) -> None:
        try:
            self.db.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def apply_many(self, batches: list["IndexBatch"]) -> None:
        merged = IndexBatch()
        for b in batches:
            merged.extend(b)
        self.apply(merged)

    # -- queries -------------------------------------------------------------------

    def find_object(self, h: str) -> Optional[tuple[int, int]]:
        key = hash_key(h)
        loc = self.pending_objects.get(key)
        if loc is not None:
            return loc
        row = self.db.execute("SELECT file, offset FROM objects WHERE key=?", (key,)).fetchone()
        return (row[0], row[1]) if row else None

    def missing(self, hashes: Iterable[str]) -> set[str]:
        """Which of these objects the index does not place (find_object for many: one query
        a chunk, where a query each cost ~20 µs on a 30,000-line ref log)."""
        todo = {hash_key(h): h for h in hashes}
        for key in [k for k in todo if k in self.pending_objects]:
            del todo[key]
        keys = list(todo)
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            for (key,) in self.db.execute(f"SELECT key FROM objects WHERE key IN ({','.join('?' * len(chunk))})", chunk):
                todo.pop(key, None)
        return set(todo.values())

    def entries_with_prefix(self, prefix: str, limit: int = 20) -> list[tuple[int, int]]:
        self.sync()
        lo, hi = prefix_range(prefix)
        return self.db.execute(
            "SELECT file, offset FROM objects WHERE key BETWEEN ? AND ? AND entry=1 LIMIT ?", (lo, hi, limit)
        ).fetchall()

    def claims(self, session: str) -> list[tuple]:
        self.sync()
        return self.db.execute(
            "SELECT ref, w, n, lc, value, seen, at FROM claims WHERE session=?", (session,)
        ).fetchall()

    def claims_on(self, session: str, refs: list[str], values: list[str] = (), contested: bool = True) -> list[tuple]:
        """The claims on `refs` and on the refs with a claim whose value is one of `values`;
        with `contested`, also on every conflict branch and every ref that more than one
        writer claims: with those, the refs named resolve as among all (model/refs.py)
        without reading every claim of a session (an import of 300,000 roots made as many
        branches). Lists of a few hundred at most."""
        self.sync()
        refs, values = list(refs), list(values)
        where = [f"ref IN ({','.join('?' * len(refs))})"] if refs else []
        where += [f"value IN ({','.join('?' * len(values))})"] if values else []
        args = [session, *refs, *values]
        if contested:
            where.append("instr(ref, '.conflict-') > 0")
            if self.db.execute("SELECT count(*) FROM writers WHERE session=?", (session,)).fetchone()[0] > 1:
                where.append("ref IN (SELECT ref FROM claims WHERE session=? GROUP BY ref HAVING count(*) > 1)")
                args.append(session)
        if not where:
            return []
        return self.db.execute(
            f"SELECT ref, w, n, lc, value, seen, at FROM claims WHERE session=? AND ({' OR '.join(where)})", args
        ).fetchall()

    def sessions(self) -> list[str]:
        self.sync()
        return [r[0] for r in self.db.execute("SELECT DISTINCT session FROM claims ORDER BY session")]

    def max_lc_and_seen(self, session: str) -> tuple[int, dict[str, int]]:
        self.sync()
        rows = self.db.execute("SELECT w, n, lc FROM writers WHERE session=?", (session,)).fetchall()
        return max((lc for _, _, lc in rows), default=0), {w: n for w, n, _ in rows}

    def stream_closed(self, session: str, stream: str) -> bool:
        """Has a record named this stream (its entry recorded, here or on another copy)?"""
        self.sync()
        return self.db.execute("SELECT 1 FROM closed WHERE session=? AND stream=? LIMIT 1", (session, stream)).fetchone() is not None

    def open_partials(self, session: str) -> list[dict]:
        self.sync()
        rows = self.db.execute(
            "SELECT p.body FROM partials p WHERE p.session=? AND NOT EXISTS "
            "(SELECT 1 FROM closed c WHERE c.session=p.session AND c.stream=p.stream) ORDER BY p.stream, p.off",
            (session,),
        ).fetchall()
        return [json.loads(b) for (b,) in rows]

    def redactions(self) -> dict[str, list[tuple[str, str]]]:
        """Every redacted place: object hash -> [(path, kind)] (docs/format.md section 17)."""
        v = (self.version(), len(self.pending.redactions))  # no sync: reads on the append path stay cheap
        if self._redactions is None or self._redactions[0] != v:
            out: dict[str, list[tuple[str, str]]] = {}
            rows = self.db.execute("SELECT object, path, kind FROM redactions").fetchall()
            for obj, path, kind in rows + self.pending.redactions:
                if (path, kind) not in out.get(obj, ()):
                    out.setdefault(obj, []).append((path, kind))
            if self._redactions is not None and self._redactions[1] == out:
                out = self._redactions[1]  # the same object while nothing changed: callers compare identity
            places = sum(map(len, out.values()))
            if places > self.places:
                self.places = places
                self.redaction_news()
            self._redactions = (v, out)
            self._redaction_rows = len(rows)
        return self._redactions[1]

    def redaction_news(self) -> None:
        """This process learns of redactions: values derived before from what it read or
        wrote (keyframes not applied yet, a writer's derived values) may hold their text."""
        self.redaction_epoch += 1
        self.pending.keyframes.clear()
        self.pending_keyframes.clear()

    def _redactions_arrived(self) -> bool:
        """Inside a write transaction, before derived rows (keyframes, views) go into the
        cache: did another process add redactions since this one last read them? Its rows
        were derived without knowing them and are not written (a cache: only speed is lost);
        the redaction's own transaction deleted the rows written before it."""
        n = self.db.execute("SELECT count(*) FROM redactions").fetchone()[0]
        if self._redaction_rows is None:
            self._redaction_rows = n  # nothing read yet: what was derived came from new entries
            return False
        if n == self._redaction_rows:
            return False
        self._redactions = None
        self.redactions()  # read them now (redaction_news, when they add places)
        return True

    def scrub(self) -> None:
        """Rewrite the cache file without free pages, so that no text a redaction removed
        stays in it (SQLite keeps deleted rows' bytes until the pages are reused)."""
        self.sync()
        try:
            self.db.execute("DELETE FROM keyframes")
            self.db.execute("DELETE FROM views")
            self.db.execute("VACUUM")
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass  # a cache: at worst it keeps what it had until it is deleted

    def keyframe(self, h: str) -> Optional[dict]:
        body = self.pending_keyframes.get(hash_key(h))
        if body is not None:
            return json.loads(body)
        row = self.db.execute("SELECT body FROM keyframes WHERE key=?", (hash_key(h),)).fetchone()
        return json.loads(row[0]) if row else None

    # -- files found shorter than they were read (not part of a rebuild: the files cannot tell)

    def note_lost(self, path: str, expected: int, found: int) -> None:
        self._write(
            "INSERT INTO lost VALUES(?,?,?) ON CONFLICT(path) DO UPDATE SET expected=max(expected, excluded.expected), found=excluded.found",
            (path, expected, found),
        )

    def note_repeated(self, path: str, floor: int) -> None:
        self._write("INSERT INTO repeated VALUES(?,?) ON CONFLICT(path) DO UPDATE SET floor=min(floor, excluded.floor)", (path, floor))

    def floors(self) -> dict[str, int]:
        """Segment -> the offset from which its records are also in a later segment."""
        return dict(self.db.execute("SELECT path, floor FROM repeated"))

    def note_expired(self, rows: list[tuple]) -> None:
        """Deletions a compaction drops: (session, ref, writer, n, lc, seen as the claims
        table has it). The newest of each writer for each ref is kept."""
        sql = ("INSERT INTO expired VALUES(?,?,?,?,?,?) ON CONFLICT(session, ref, w) DO UPDATE SET "
               "n=excluded.n, lc=excluded.lc, seen=excluded.seen WHERE excluded.n > expired.n")
        try:
            self.db.executemany(sql, rows)
        except sqlite3.OperationalError as e:
            self._degrade(e)
            self.db.executemany(sql, rows)

    def expired(self, session: str) -> list[tuple]:
        """The session's deletions compactions dropped (note_expired), as claim rows."""
        return self.db.execute("SELECT ref, w, n, lc, NULL, seen, NULL FROM expired WHERE session=?", (session,)).fetchall()

    def lost_rows(self) -> list[tuple[str, int, int]]:
        return self.db.execute("SELECT path, expected, found FROM lost ORDER BY path").fetchall()

    def clear_lost(self, path: str) -> None:
        self._write("DELETE FROM lost WHERE path=?", (path,))

    def _write(self, sql: str, args: tuple) -> None:
        try:
            self.db.execute(sql, args)
        except sqlite3.OperationalError as e:
            self._degrade(e)
            self.db.execute(sql, args)

    def put_keyframe(self, h: str, body: dict) -> None:
        self._put_derived("INSERT OR REPLACE INTO keyframes VALUES(?,?)", [(hash_key(h), json.dumps(body))])

    def _put_derived(self, sql: str, rows: list) -> None:
        """Write rows derived from entries' values (keyframes, views), unless redactions
        arrived meanwhile (_redactions_arrived). A cache write that fails (read-only cache,
        busy) costs only speed."""
        own = not self.db.in_transaction  # inside a rebuild's transaction: the rows go with it
        try:
            if own:
                self.db.execute("BEGIN IMMEDIATE")
            if not self._redactions_arrived():
                self.db.executemany(sql, rows)
            if own:
                self.db.execute("COMMIT")
        except sqlite3.OperationalError:
            if own:
                self._rollback()


    # -- views: an integration's text per entry, read back a whole path at a time --------

    def put_views(self, name: str, rows: list[tuple[str, Optional[str], Optional[str]]]) -> None:
        """Keep (entry hash, parent hash, text) rows under `name`."""
        if not rows:
            return
        from .files import zstd

        cctx = zstd().ZstdCompressor(level=3)  # (one a call: an Index may be shared by threads, a context may not)
        values = [(name, hash_key(h), h, p, None if p is None else hash_key(p), _packed(cctx, body)) for h, p, body in rows]
        self._put_derived("INSERT OR IGNORE INTO views VALUES(?,?,?,?,?,?)", values)

    @staticmethod
    def _unpacked(body, dctx=None):
        """A views row's body as it was put (compressed ones decompressed)."""
        if not isinstance(body, bytes):
            return body
        if dctx is None:
            from .files import zstd

            dctx = zstd().ZstdDecompressor()
        return dctx.decompress(body).decode("utf-8", "surrogatepass")

    def view_path(self, name: str, head: str, limit: int) -> list[tuple[str, Optional[str], Optional[str]]]:
        """The rows kept under `name` from `head` back along parents, newest first: at most
        `limit` (the path's length), ending where a row is missing or does not link
        (a 64-bit key shared by two hashes: the caller reads those entries instead)."""
        try:
            rows = self.db.execute(
                "WITH RECURSIVE p(hash, parent, pkey, body) AS ("
                " SELECT hash, parent, pkey, body FROM views WHERE name=? AND key=?"
                " UNION ALL SELECT v.hash, v.parent, v.pkey, v.body FROM p JOIN views v ON v.name=? AND v.key=p.pkey"
                ") SELECT hash, parent, body FROM p LIMIT ?",
                (name, hash_key(head), name, limit),
            ).fetchall()
        except sqlite3.OperationalError:
            return []
        out, want = [], head
        dctx = None
        for h, p, body in rows:
            if h != want:
                break
            if isinstance(body, bytes) and dctx is None:
                from .files import zstd

                dctx = zstd().ZstdDecompressor()
            out.append((h, p, self._unpacked(body, dctx)))
            want = p
        return out


def _packed(cctx, body: Optional[str]):
    """A views row's body as kept: compressed past VIEW_PACKED characters."""
    if body is None or len(body) <= VIEW_PACKED:
        return body
    return cctx.compress(body.encode("utf-8", "surrogatepass"))


class IndexDegraded(Exception):
    """A rebuild met a cache that cannot be written; the index is now in memory: rebuild again."""


def _busy(err: Exception) -> bool:
    return "locked" in str(err) or "busy" in str(err)


def default_cache_root() -> str:
    """$CTAPE_CACHE_DIR, else $XDG_CACHE_HOME/ctape, else ~/.cache/ctape. A relative
    $XDG_CACHE_HOME is ignored, as its spec says (it made a cache per working folder), and
    an empty or relative $HOME is read from the user database (an empty one put the cache
    at /.cache); found by an audit."""
    env = os.environ.get("CTAPE_CACHE_DIR")
    if env:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = xdg if xdg and os.path.isabs(xdg) else os.path.join(_home(), ".cache")
    return os.path.join(base, "ctape")


def _home() -> str:
    home = os.environ.get("HOME")
    if home and os.path.isabs(home):
        return home
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError):
        return os.path.expanduser("~")
