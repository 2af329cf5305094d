"""Full-text search over every entry's payload, in a rebuildable SQLite FTS5 cache.

The search index is its own SQLite file beside the index cache (search_file()), never
inside the tape: deleting it costs a rebuild, never data. It is brought up to date
before each query, lazily, the way the index cache is: for every data file it keeps how
far it has read it for search, and reads what the index cache has seen beyond that
(appends, files that arrived by rsync, packs written by compaction). Entries are
content-addressed and never change, so an entry is indexed once, whichever file it is
read from; a file rewritten by `compact` only costs reading it again.

Tables:
  files    data file -> how far it has been read for search
  entries  entry (first 8 bytes of its hash) -> full hash, text id, home session, kind,
           time (microseconds), seq, hidden
  texts    text id (numbered in the order texts were indexed) -> text key (a hash of the
           text), and the text's first HEAD_BYTES, zstd-compressed, for snippets
  fts      contentless FTS5 table: one row per distinct text, rowid = the text id
  retry    entries whose large values had not arrived yet (an rsync under way)

Text (ctape/ops/searchtext.py): the payload's strings, without ids and binary-looking runs.
Identical texts (the same file read twice, the same test output) are one FTS row shared by
their entries: the key is computed from the payload with its large values still as blob
hashes, so a repeated tool output is neither read nor tokenized again.

Which session a hit is reported for: the session whose files hold the entry (its home)
while that session exists and the search is not limited to another one; otherwise a
session whose branches, tags or HEAD reach the entry (checked with seq and the keyframe
jumps of derived.ancestor).
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable, Iterator, Optional

from blake3 import blake3

from ..history import derived
from ..store import framing
from ..model.errors import ConflictError, CorruptObject, CtapeError, EntryNotFound, InvalidInput, UnsafePath
from ..model import redaction
from ..store.files import CODEC_RAW, TYPE_ENTRY, zstd
from ..store.store import REBUILD_TRIES, TYPE_WITHHELD
from ..store.index import connect_cache, ensure_schema, hash_key, versioned_file
from .searchtext import (  # noqa: F401 (parse_query, fts_expression: API)
    EXACT,
    MATCH_NAMES,
    Matcher,
    entry_text,
    fts_expression,
    has_match,
    parse_query,
    parse_terms,
    payload_parts,
    payload_text,
    snippet,
    text_key,
)
from ..model.models import brief, check_name, EntryKind, format_time, HIDDEN, kind_value
from ..model.timespec import parse_when

SCHEMA_VERSION = 4  # a bump also names a new file (search_file): versions never share one


def search_file(version: Optional[int] = None) -> str:
    """The search cache's file name beside the index cache: one per schema version from 5
    on (versioned_file). Emptied under a running `serve` or agent's Tape, it would be
    indexed whole again at that process's next search."""
    return versioned_file("search", SCHEMA_VERSION if version is None else version, 4)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS files(path TEXT PRIMARY KEY, done INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sessions(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS entries(key INTEGER PRIMARY KEY, hash BLOB NOT NULL, text INTEGER NOT NULL,
    session INTEGER, kind INTEGER NOT NULL, time INTEGER NOT NULL, seq INTEGER NOT NULL, hidden INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS entries_text ON entries(text);
CREATE TABLE IF NOT EXISTS texts(id INTEGER PRIMARY KEY, key INTEGER NOT NULL, head BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS texts_key ON texts(key);
CREATE TABLE IF NOT EXISTS retry(hash TEXT PRIMARY KEY, session TEXT) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(body, content='', tokenize='unicode61 remove_diacritics 2');
"""

TABLES = ("fts", "entries", "texts", "files", "sessions", "retry", "meta")
KINDS = [k.value for k in EntryKind]
BATCH = 2000  # entries per write transaction while indexing
HEAD_BYTES = 4096  # of each text kept (compressed) for snippets: a match further in reads the entry
RANK_WINDOW = 4000  # matching texts ranked at a time, newest first (see SearchIndex.query)
# texts longer than their kept head whose head shows no exact match: each is read whole to
# be graded (an exact match past the head ranked after other-case ones and said "words"),
# at most REGRADE_MAX of a window; those beyond are graded by their heads. Whole texts up to
# REGRADE_KEEP characters are kept for the snippet.
REGRADE_MAX = 256
REGRADE_KEEP = 64 << 10
UNSEEN = 3  # a grade below searchtext's: a quoted phrase that may lie past a text's kept head


@dataclass(frozen=True)
class Hit:
    session: Optional[str]
    hash: str
    kind: str
    time: str
    snippet: str
    match: str = "words"  # "exact": every term as typed; "literal": in another case or accents; "words": the words only

    def to_json(self) -> dict:
        return {"session": self.session, "hash": self.hash, "kind": self.kind, "time": self.time, "snippet": self.snippet, "match": self.match}


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _micros(t: str) -> int:
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return 0
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - _EPOCH) // timedelta(microseconds=1)


def _time_text(micros: int) -> str:
    return format_time(_EPOCH + timedelta(microseconds=micros))


# -- the index ----------------------------------------------------------------------------------------


class SearchIndex:
    """The search cache of one open tape."""

    def __init__(self, tape):
        self.tape = tape
        self.store = tape.store
        idx_path = self.store.index.path
        path = os.path.join(os.path.dirname(idx_path), search_file()) if idx_path != ":memory:" else ":memory:"
        if path != ":memory:" and not os.access(path if os.path.exists(path) else os.path.dirname(path), os.W_OK):
            path = ":memory:"  # no writable cache: searched from memory, indexed again per process
        self.path = path
        try:
            self.db = self._connect(self.path)
        except sqlite3.Error:
            self.path = ":memory:"
            self.db = self._connect(self.path)
        self._session_ids: dict[str, int] = {}
        self._session_names: dict[int, str] = {}
        self._built: Optional[tuple[str, str]] = None  # the cache's state when the last update pass completed
        self.complete = False  # whether the last update's last pass was complete (see update)

    @staticmethod
    def _connect(path: str) -> sqlite3.Connection:
        db = connect_cache(path)
        ensure_schema(db, SCHEMA_VERSION, TABLES, SCHEMA, SearchIndex._new_generation(""))
        return db

    @staticmethod
    def _new_generation(redactions: str) -> str:
        return f"INSERT INTO meta VALUES('generation', '{os.urandom(8).hex()}');INSERT INTO meta VALUES('redactions', '{redactions}')"

    @staticmethod
    def _drop(db: sqlite3.Connection, redactions: str = "") -> None:
        """Empty tables, a new generation, and the fingerprint of the redactions the next
        rows will be written with, in one transaction."""
        ensure_schema(db, SCHEMA_VERSION, TABLES, SCHEMA, SearchIndex._new_generation(redactions), always=True)

    def _state(self) -> tuple[str, str]:
        """(generation, redactions fingerprint) of the cache's rows. Another process that
        indexes the tape again from nothing starts a new generation: what this one read
        of the cache before that (how far each file was read, the rows' numbers) is void."""
        rows = dict(self.db.execute("SELECT key, value FROM meta WHERE key IN ('generation', 'redactions')"))
        return rows.get("generation", ""), rows.get("redactions", "")

    def _fingerprint(self) -> str:
        red = self.tape.redactions()
        return blake3(json.dumps(sorted((o, sorted(p)) for o, p in red.items())).encode()).hexdigest() if red else ""

    def close(self) -> None:
        self.db.close()

    def rebuild(self, redactions: str = "") -> None:
        """Forget everything; the next update reads the whole tape again."""
        self._drop(self.db, redactions)
        self.forget_session_numbers()
        try:
            self.db.execute("VACUUM")
        except sqlite3.OperationalError:
            pass

    # -- keeping it fresh -------------------------------------------------------------------

    def scrub(self) -> None:
        """Empty the cache when it was built with other redactions (compact's caches)."""
        self._redactions_changed(self._fingerprint(), self._state())

    def forget_freed(self) -> bool:
        """After a compaction that freed entries: when the cache holds one that the tape no
        longer does, forget it all (tables dropped, file vacuumed), as for a redaction; the
        next search reads the tape again. A contentless full-text table cannot take rows out
        without the text they were made from, and the text of a session removed and
        compacted away stayed in the cache for good (found by an audit: a rolling window of
        sessions grew the cache without bound, and docs/privacy.md says compact cleans it)."""
        store = self.store
        for (h,) in self.db.execute("SELECT hash FROM entries"):
            if not store.has_object(bytes(h).hex()):
                break
        else:
            return False
        self.rebuild(self._state()[1])
        try:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.OperationalError:
            pass
        return True

    def _redactions_changed(self, fp: str, state: tuple[str, str]) -> bool:
        """When the tape's redactions (fingerprint `fp`) are not those this cache was built
        with, forget it all (tables dropped, file vacuumed: no page keeps the text) and
        note the new ones."""
        if state[1] == fp:
            return False
        self.rebuild(fp)
        try:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.OperationalError:
            pass
        return True

    def update(self, progress: Optional[Callable[[str], None]] = None) -> int:
        """Index what the tape holds and this cache has not read yet; returns the number
        of entries added.

        A compaction in another process moves entries from the files a pass listed into a
        pack the pass did not list (made after its listing, or after the index's refresh):
        such a pass is incomplete, and another one follows (at most REBUILD_TRIES), so that
        a search finds every entry the tape held when it began (`complete` says whether
        the last pass was)."""
        added = 0
        for _ in range(REBUILD_TRIES):
            n, complete = self._update_pass(progress)
            added += n
            if complete:
                break
        self.complete = complete
        return added

    def _update_pass(self, progress: Optional[Callable[[str], None]]) -> tuple[int, bool]:
        """One pass of update: (entries added, whether it is complete: no file went or
        came under it, and no other process indexed the tape again from nothing)."""
        store = self.store
        store.refresh()
        self._built = None
        state = self._state()  # before anything else is read of the cache (see _Writer)
        fp = self._fingerprint()
        if self._redactions_changed(fp, state):  # indexed again from nothing: the redacted text is dropped
            state = self._state()
            if state[1] != fp:
                return 0, False  # another process's view of the redactions took the cache meanwhile
        rows = store.index.file_rows()
        present = store.list_files(None)
        complete = rows.keys() >= present.keys()  # else a file was made after the refresh
        done = dict(self.db.execute("SELECT path, done FROM files"))
        gone = [p for p in done if p not in present]
        todo = []
        for path in sorted(present):
            row = rows.get(path)
            if row is None:
                continue
            indexed = row[1]
            start = done.get(path, 0)
            if start > indexed:  # the file was replaced by a shorter one: read it again
                start = 0
            if indexed > start:
                todo.append((path, start, indexed))
        retry = self.db.execute("SELECT hash, session FROM retry").fetchall()
        if not todo and not gone and not retry:
            self._built = state
            return 0, complete
        try:
            w = _Writer(self, state[0])
        except _Dropped:
            return 0, False
        try:
            for path, session in [(h, s) for h, s in retry]:
                w.retry(path, session)
            for n, (path, start, end) in enumerate(todo, 1):
                if progress and end - start > (1 << 20):
                    progress(f"search: indexing {path} ({(end - start) >> 20} MB, file {n} of {len(todo)})")
                home = path.split("/")[1] if path.startswith("sessions/") else None
                try:
                    for rec in store.scan_file(path, start, end):
                        if isinstance(rec, framing.Record) and rec.type == framing.T_OBJECT and rec.body[32] in (TYPE_ENTRY, TYPE_WITHHELD):
                            w.add_record(rec.body, home)
                except FileNotFoundError:
                    complete = False  # gone meanwhile (a compaction): its entries are in a pack not listed
                    continue
                except UnsafePath:
                    continue  # fsck reports it
                w.file_done(path, end)
            for path in gone:
                w.forget_file(path)
            w.commit()
        except _Dropped:
            w.rollback()
            return w.added, False
        except BaseException:
            w.rollback()
            raise
        self._built = state
        return w.added, complete

    def forget_session_numbers(self) -> None:
        """Session numbers are kept between statements, but they are the cache's: another
        process that indexes the tape again from nothing (its redactions changed) numbers
        the sessions anew. Forgotten when a write transaction or a query begins."""
        self._session_ids.clear()
        self._session_names.clear()

    def session_id(self, name: Optional[str]) -> Optional[int]:
        if name is None:
            return None
        sid = self._session_ids.get(name)
        if sid is None:
            self.db.execute("INSERT OR IGNORE INTO sessions(name) VALUES(?)", (name,))
            sid = self.db.execute("SELECT id FROM sessions WHERE name=?", (name,)).fetchone()[0]
            self._session_ids[name] = sid
            self._session_names[sid] = name
        return sid

    def session_name(self, sid: Optional[int]) -> Optional[str]:
        if sid is None:
            return None
        name = self._session_names.get(sid)
        if name is None:
            row = self.db.execute("SELECT name FROM sessions WHERE id=?", (sid,)).fetchone()
            name = row[0] if row else None
            if name is not None:
                self._session_names[sid] = name
        return name

    # -- asking -------------------------------------------------------------------------------------

    def answer(self, query: str, session: Optional[str], kinds: list, since: Optional[str], until: Optional[str],
               limit: Optional[int], hidden: bool, progress: Optional[Callable[[str], None]] = None) -> list["Hit"]:
        """Bring the cache up to date, then ask it, in one read of the generation the
        update completed in: rows another process wrote with other redactions (its search
        began before a redaction this one knows) or an emptied cache are never answered from,
        nor is an update that compactions elsewhere kept from completing. Either every entry
        the tape held when the search began is found, or the search says to search again."""
        for _ in range(REBUILD_TRIES):
            self.update(progress)
            if not self.complete:
                continue
            self.db.execute("BEGIN")
            try:
                if self._built is not None and self._state() == self._built:
                    return list(self.query(query, session, kinds, since, until, limit, hidden))
            finally:
                self.db.execute("COMMIT")
        raise ConflictError("other processes kept changing the tape's files or its search cache under this search "
                            "(compactions, redactions); search again")

    def query(
        self,
        query: str,
        session: Optional[str] = None,
        kinds: Iterable[str] = (),
        since: Optional[str] = None,
        until: Optional[str] = None,
        limit: Optional[int] = 20,
        hidden: bool = False,
        live: Optional[set[str]] = None,
    ) -> Iterator[Hit]:
        """Hits best first: exact matches first (every term as typed), then literal ones
        (another case or accents), then the rest (the same words, other punctuation between);
        bm25 within each, newer entries first among equals. A quoted phrase must occur
        literally (searchtext.Matcher): FTS5, which splits words at every punctuation mark,
        only proposes the candidates.

        bm25 ranks every row it is given, so a word that matches most of a large tape would
        cost time in proportion to the tape. Matching texts are therefore taken newest first
        (text ids count up as texts are indexed), RANK_WINDOW at a time, and each window is
        graded and ranked: a query matching fewer texts than that is ranked exactly; a more
        common one gets the best of the newest matches first, then of older ones while more
        hits are wanted."""
        self.forget_session_numbers()
        terms = parse_terms(query)
        words = [t.text for t in terms]
        matcher = Matcher(terms)
        expr = fts_expression(words)
        cond, cargs = [], []
        want = sorted({KINDS.index(kind_value(k)) for k in kinds})
        if want:
            cond.append(f"AND kind IN ({','.join('?' * len(want))})")
            cargs += want
        if since:
            cond.append("AND time >= ?")
            cargs.append(_micros(since))
        if until:
            cond.append("AND time <= ?")
            cargs.append(_micros(until))
        if not hidden:
            cond.append("AND hidden = 0")
        entries_sql = ("SELECT hash, session, kind, seq, text, time FROM entries WHERE text IN (SELECT value FROM json_each(?)) "
                       + " ".join(cond) + " ORDER BY time DESC")
        texts: dict[int, str] = {}  # the window's texts (their heads, or whole when read)

        def candidates():
            below = 1 << 62
            while True:
                window = self.db.execute(
                    "SELECT rowid, rank FROM fts WHERE fts MATCH ? AND rowid < ? ORDER BY rowid DESC LIMIT ?",
                    (expr, below, RANK_WINDOW),
                ).fetchall()
                if not window:
                    return
                texts.clear()
                texts.update(self._heads([tid for tid, _ in window]))
                graded = []
                regraded = 0
                for tid, rank in window:
                    head = texts.get(tid, "")
                    grade = self._grade(head, matcher)
                    if grade != EXACT and regraded < REGRADE_MAX and len(head.encode("utf-8")) > HEAD_BYTES - 4:
                        # the head of a longer text: the match may be better further in
                        regraded += 1
                        whole = self._whole_text(tid)
                        if whole is not None:
                            grade = matcher.grade(whole)
                            if len(whole) <= REGRADE_KEEP:
                                texts[tid] = whole  # for the snippet: not read again
                    if grade is not None:  # None: a quoted phrase that is not there literally
                        graded.append((grade, rank, -tid, tid))
                graded.sort()
                for i in range(0, len(graded), 64):  # the entries of the best texts first
                    chunk = graded[i : i + 64]
                    order = {g[3]: j for j, g in enumerate(chunk)}
                    rows = self.db.execute(entries_sql, [json.dumps(list(order))] + cargs).fetchall()
                    rows.sort(key=lambda r: order[r[4]])  # stable: newest first within a text
                    for r in rows:
                        yield r + (chunk[order[r[4]]][0],)
                if len(window) < RANK_WINDOW:
                    return
                below = window[-1][0]

        alive: dict[str, bool] = {}

        def is_live(name: Optional[str]) -> bool:
            if name is None:
                return False
            if live is not None:
                return name in live
            if name not in alive:
                alive[name] = self.tape._session_exists(name)  # not removed by `session rm`
            return alive[name]

        def others():
            return live if live is not None else self.tape.store.sessions()
        reach = _Reach(self.tape)
        seen: dict[int, tuple] = {}  # texts read whole to grade them: (grade, text)
        count = 0
        for hb, sid, kind, seq, tid, micros, grade in candidates():
            h = hb.hex()
            if not self.store.has_object(h):
                continue  # removed by a compaction since it was indexed
            home = self.session_name(sid)
            if session is not None:
                if home != session and not reach.reaches(session, h, seq):
                    continue
                where = session
            elif is_live(home):
                where = home
            else:
                where = next((s for s in sorted(others()) if is_live(s) and reach.reaches(s, h, seq)), None)
                if where is None:
                    continue  # no session reaches it any more
            text = texts.get(tid, "")
            if grade == UNSEEN and tid in seen:  # another entry of a text read already
                grade, text = seen[tid]
                if grade is None:
                    continue
            elif grade == UNSEEN or not has_match(text, words):  # the match lies past the kept head: read the entry
                try:
                    text = payload_text(self.tape.read_entry(h).payload)
                except CtapeError:
                    continue
                if grade == UNSEEN:
                    grade = seen.setdefault(tid, (matcher.grade(text), text))[0]
                    if grade is None:
                        continue  # the quoted phrase is not in this text, literally
            yield Hit(where, h, KINDS[kind], _time_text(micros), snippet(text, words, matcher=matcher), MATCH_NAMES[grade])
            count += 1
            if limit is not None and count >= limit:
                return

    def _whole_text(self, tid: int) -> Optional[str]:
        """The whole text of a text id, read from an entry that holds it (None when none
        reads back: it is graded by its head, as before)."""
        row = self.db.execute("SELECT hash FROM entries WHERE text = ? LIMIT 1", (tid,)).fetchone()
        if row is None:
            return None
        try:
            return payload_text(self.tape.read_entry(row[0].hex()).payload)
        except CtapeError:
            return None

    def _heads(self, tids: list[int]) -> dict[int, str]:
        """The kept heads of some texts (the first HEAD_BYTES of each)."""
        dctx = zstd().ZstdDecompressor()
        out = {}
        for tid, head in self.db.execute("SELECT id, head FROM texts WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(tids),)):
            try:
                out[tid] = dctx.decompress(head).decode("utf-8", "replace")
            except Exception:  # noqa: BLE001 - a damaged cache row: the entry is read instead
                out[tid] = ""
        return out

    @staticmethod
    def _grade(head: str, matcher: Matcher) -> Optional[int]:
        """How a text matches (searchtext.Matcher), judged from its kept head. A quoted
        phrase not in the head of a longer text may lie further in: UNSEEN, ranked after
        the rest and read when its turn comes (reading every such text of a common word
        up front would cost a read per candidate). Unquoted words found only past the head
        rank as the head shows them."""
        grade = matcher.grade(head)
        if grade is None and (len(head.encode("utf-8")) > HEAD_BYTES - 4 or not head):
            return UNSEEN
        return grade

    def stats(self) -> dict:
        """Sizes of the search cache (for the benchmark and `ctape stats`-like reports)."""
        entries = self.db.execute("SELECT count(*) FROM entries").fetchone()[0]
        texts = self.db.execute("SELECT count(DISTINCT text) FROM entries").fetchone()[0]
        size = 0
        if self.path != ":memory:":
            for suffix in ("", "-wal"):
                try:
                    size += os.path.getsize(self.path + suffix)
                except OSError:
                    pass
        return {"entries": entries, "texts": texts, "bytes": size, "path": self.path}


class _Dropped(Exception):
    """Another process emptied the cache since this pass read it: the pass starts again."""


class _Writer:
    """Rows of one update pass, written in transactions of BATCH entries, each begun only
    while the cache is of the generation the pass read: rows computed from what an
    emptied cache held (how far a file was read, a text's number) are never written."""

    def __init__(self, index: SearchIndex, generation: str):
        self.ix = index
        self.db = index.db
        self.generation = generation
        self.added = 0
        self.pending = 0
        self.texts_new: dict[int, int] = {}  # text key -> id, of this write transaction
        self.cctx = zstd().ZstdCompressor(level=3)
        self._begin()

    def _begin(self) -> None:
        """A write transaction; what earlier ones learnt of the cache's numbering is
        forgotten, since another process may have indexed the tape again meanwhile."""
        self.db.execute("BEGIN IMMEDIATE")
        if self.ix._state()[0] != self.generation:
            self.rollback()
            raise _Dropped()
        self.ix.forget_session_numbers()
        self.texts_new.clear()

    def _text_id(self, key: int) -> Optional[int]:
        tid = self.texts_new.get(key)
        if tid is None:
            row = self.db.execute("SELECT id FROM texts WHERE key=?", (key,)).fetchone()
            tid = row[0] if row else None
        return tid

    def add_record(self, body: bytes, home: Optional[str]) -> None:
        h = body[:32].hex()
        key = hash_key(h)
        if self.db.execute("SELECT 1 FROM entries WHERE key=?", (key,)).fetchone():
            return
        try:
            canonical = body[34:] if body[33] == CODEC_RAW else self.ix.store.decode_object(h, body)[1]
            raw = json.loads(canonical)
        except (CorruptObject, ValueError):
            return  # fsck reports it
        red = self.ix.tape.redactions()
        if h in red and isinstance(raw, dict):
            raw = redaction.apply(raw, red[h])
        self.add_entry(h, key, raw, home)

    def _blob(self, b: str) -> bytes:
        red = self.ix.tape.redactions()
        if b in red:
            return redaction.marker(red[b][0][1]).encode()
        return self.ix.store.get_object(b)[1]

    def add_entry(self, h: str, key: int, raw: dict, home: Optional[str]) -> bool:
        try:
            kind = KINDS.index(raw["kind"])
            payload, meta, t, seq = raw["payload"], raw["meta"], raw["time"], int(raw["seq"])
        except (KeyError, TypeError, ValueError):
            return False
        parts = payload_parts(payload, [])
        tkey = text_key(parts)
        tid = self._text_id(tkey)
        if tid is None:
            try:
                text = entry_text(parts, self._blob)
            except (EntryNotFound, CorruptObject):
                # a large value that has not arrived (rsync under way): index it later
                self.db.execute("INSERT OR IGNORE INTO retry VALUES(?,?)", (h, home))
                return False
            head = text.encode("utf-8")[:HEAD_BYTES].decode("utf-8", "ignore").encode("utf-8")
            # numbered by SQLite inside the write transaction (the last id + 1): a number this
            # process chose from an earlier read could be one another indexer took meanwhile
            tid = self.db.execute("INSERT INTO texts(key, head) VALUES(?,?)", (tkey, self.cctx.compress(head))).lastrowid
            self.db.execute("INSERT INTO fts(rowid, body) VALUES(?,?)", (tid, text))
            self.texts_new[tkey] = tid
        hidden = 1 if isinstance(meta, dict) and meta.get(HIDDEN) else 0
        self.db.execute(
            "INSERT OR IGNORE INTO entries VALUES(?,?,?,?,?,?,?,?)",
            (key, bytes.fromhex(h), tid, self.ix.session_id(home), kind, _micros(t), seq, hidden),
        )
        self.added += 1
        self.pending += 1
        if self.pending >= BATCH:
            self.db.execute("COMMIT")
            self._begin()
            self.pending = 0
        return True

    def retry(self, h: str, home: Optional[str]) -> None:
        key = hash_key(h)
        self.db.execute("DELETE FROM retry WHERE hash=?", (h,))
        if self.db.execute("SELECT 1 FROM entries WHERE key=?", (key,)).fetchone():
            return
        try:
            raw = json.loads(self.ix.store.get_object(h)[1])
        except (EntryNotFound, CorruptObject, ValueError):
            return  # gone (compacted away): nothing to index
        self.add_entry(h, key, raw, home)

    def file_done(self, path: str, end: int) -> None:
        self.db.execute("INSERT OR REPLACE INTO files VALUES(?,?)", (path, end))

    def forget_file(self, path: str) -> None:
        self.db.execute("DELETE FROM files WHERE path=?", (path,))

    def commit(self) -> None:
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        try:
            self.db.execute("ROLLBACK")
        except sqlite3.OperationalError:
            pass


class _Reach:
    """Does a session reach an entry? Its branches, tags and HEAD, walked up by seq."""

    def __init__(self, tape):
        self.tape = tape
        self.tips: dict[str, list] = {}
        self.memo: dict[tuple, bool] = {}

    def _tips(self, session: str) -> list:
        tips = self.tips.get(session)
        if tips is None:
            tips = []
            if self.tape._session_exists(session):
                st = self.tape.session(session).refs()
                for h in {*st.branches.values(), *st.tags.values(), st.head_hash} - {None}:
                    try:
                        tips.append((h, self.tape.read_entry(h).seq))
                    except CtapeError:
                        continue
            self.tips[session] = tips
        return tips

    def reaches(self, session: str, h: str, seq: int) -> bool:
        key = (session, h)
        got = self.memo.get(key)
        if got is None:
            tape = self.tape
            got = False
            for tip, tip_seq in self._tips(session):
                if tip_seq >= seq and derived.ancestor(tip, tip_seq - seq, tape.read_entry, tape.store.index.keyframe) == h:
                    got = True
                    break
            self.memo[key] = got
        return got


def search(tape, query: str, session: Optional[str] = None, kinds: Iterable[str] = (), since: Optional[str] = None,
           until: Optional[str] = None, limit: Optional[int] = 20, hidden: bool = False,
           progress: Optional[Callable[[str], None]] = None) -> list[Hit]:
    """Tape.search: bring the search cache up to date, then ask it."""
    parse_query(query)  # bad input fails before any work
    if session is not None:
        check_name(session, "session name")  # (a session with no entries has no hits: [])
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise InvalidInput(f"limit is a number of hits (0 or more) or None, not {brief(limit, 40)}")
    if kinds is None or not isinstance(kinds, (str, list, tuple, set, frozenset)):
        raise InvalidInput(f"kinds is a kind or a list of kinds (user, assistant, ...), not {brief(kinds)}")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    # the times as `log` and the command line read them (RFC 3339, or 2h / 3d back from now):
    # one that does not parse was taken for 1970
    since = None if since is None else parse_when(since, "since")
    until = None if until is None else parse_when(until, "until")
    for k in kinds:
        kind_value(k)
    if limit is not None and (type(limit) is not int or limit < 0):
        raise InvalidInput(f"limit (-n) is a number of hits, 0 or more, not {brief(limit)}")
    return tape._search_index().answer(query, session, kinds, since, until, limit, hidden, progress)
