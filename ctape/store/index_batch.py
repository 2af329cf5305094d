"""Writing indexed records to the index cache: IndexBatch, the rows gathered while a file
is scanned or a write is queued, and the part of the Index (index.py inherits this class)
that writes a batch in one SQLite transaction (the newest claim of each writer wins, claims
a gap cuts off move to keys of their own, rows read from files another process's rebuild
dropped are left out), with the reads of what those writes keep beside the rows (gaps, the
vouched record, rebuilds, the limit under which blocks were refused).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Optional

from ..model.refs import CUT_KEY, HEAD, claim_key, cut_off, tip_at


def boot_id() -> Optional[str]:
    """This boot of the machine (Linux); None where there is no such thing to read."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


class IndexBatch:
    """Rows gathered while scanning or writing, applied in one SQLite transaction."""

    __slots__ = ("objects", "writers", "claims", "gaps", "partials", "closed", "files", "keyframes", "redactions", "refused_at")

    def __init__(self):
        self.keyframes: list = []
        self.objects: list = []
        self.writers: list = []  # (session, writer, n, lc) of every ref record
        self.claims: list = []
        self.gaps: list = []  # (session, writer, lo, hi): a record's `gap`
        self.partials: list = []
        self.closed: list = []
        self.files: list = []
        self.redactions: list = []  # (object, path, kind) of every redaction record
        self.refused_at: list = []  # the limit (max_object) of each block refused as too large

    def extend(self, other: "IndexBatch") -> None:
        for name in self.__slots__:
            getattr(self, name).extend(getattr(other, name))

    def empty(self) -> bool:
        return not (self.objects or self.writers or self.claims or self.gaps or self.partials or self.closed or self.files or self.keyframes
                    or self.redactions or self.refused_at)

    def add_ref(self, rec: dict) -> None:
        s, w, n, lc = rec["s"], rec["w"], rec["n"], rec["lc"]
        self.writers.append((s, w, n, lc))
        seen = rec.get("seen") or {}
        if rec.get("cut"):
            seen = {**seen, CUT_KEY: rec["cut"]}
        seen = json.dumps(seen, sort_keys=True) if seen else "{}"
        gap = rec.get("gap")
        if type(gap) is int and 0 <= gap < n:
            self.gaps.append((s, w, gap, n))
        at = tip_at(rec)  # only a record attaching HEAD has one, and HEAD is in a record of its own
        for ref, value in rec.get("set", {}).items():
            self.claims.append((s, ref, w, n, lc, value, seen, at if ref == HEAD else None))
        if rec.get("stream"):
            self.closed.append((s, rec["stream"]))
        if rec.get("op") == "redact":
            from ..model.redaction import record_items

            self.redactions.extend(record_items(rec))

    def add_partial(self, rec: dict, body: bytes) -> None:
        self.partials.append((rec["s"], rec["stream"], rec["off"], body.decode("utf-8")))


class Applying:
    """The Index's writes of batches of rows (a part of Index)."""

    _boot_checked = False  # vouched(): the boot this cache vouched in was compared with this one

    # -- writing a batch of indexed records -------------------------------------

    def apply(self, batch: "IndexBatch", scanned: bool = False) -> None:
        """Write a batch of rows: a writer's (queued by `add`), or with `scanned` those a scan
        of one file read (Store._index_file)."""
        if batch.empty():
            return
        if self._in_rebuild:
            self._apply(batch)
            return
        try:
            self._apply(batch, scanned)
        except sqlite3.OperationalError as e:
            self._degrade(e)  # the rows are dropped: the store rebuilds the memory index

    def version(self) -> tuple:
        """Changes whenever the rows may have: this process applied some, rebuilt or moved
        to memory, or another process committed to the same cache (SQLite's data_version)."""
        return self.generation, id(self.db), self.db.execute("PRAGMA data_version").fetchone()[0]

    def _apply(self, batch: "IndexBatch", scanned: bool = False) -> None:
        self.generation += 1
        db = self.db
        own = not self._in_rebuild
        if own:
            db.execute("BEGIN IMMEDIATE")
        try:
            if own:
                batch = self._without_gone_files(batch, scanned)
            if batch.objects:
                db.executemany("INSERT OR IGNORE INTO objects VALUES(?,?,?,?)", batch.objects)
            # keyframes before redactions: a new redaction then deletes them with the others
            if batch.keyframes and not self._redactions_arrived():
                db.executemany("INSERT OR REPLACE INTO keyframes VALUES(?,?)", batch.keyframes)
            if batch.redactions:
                before = db.total_changes
                db.executemany("INSERT OR IGNORE INTO redactions VALUES(?,?,?)", batch.redactions)
                added = db.total_changes - before
                if added:
                    # derived values and integration views may hold the text: computed again
                    # on demand, through reads that show the marker (docs/format.md section 17)
                    db.execute("DELETE FROM keyframes")
                    db.execute("DELETE FROM views")
                    self.redaction_news()
                    if self._redaction_rows is not None:
                        self._redaction_rows += added  # known: this process read them
            if batch.writers:
                writers: dict[tuple, tuple] = {}  # (session, writer) -> largest n and lc
                odd = []  # counters that are not integers (a hand-made record): SQLite compares them
                for s, w, n, lc in batch.writers:
                    if type(n) is not int or type(lc) is not int:
                        odd.append((s, w, n, lc))
                        continue
                    old = writers.get((s, w))
                    writers[(s, w)] = (n, lc) if old is None else (max(n, old[0]), max(lc, old[1]))
                db.executemany(
                    "INSERT INTO writers VALUES(?,?,?,?) ON CONFLICT(session, w) DO UPDATE SET "
                    "n=max(n, excluded.n), lc=max(lc, excluded.lc)",
                    [(s, w, n, lc) for (s, w), (n, lc) in writers.items()] + odd,
                )
            gaps = self._apply_gaps(batch) if batch.gaps or batch.claims else {}
            if batch.claims:
                newest: dict[tuple, tuple] = {}  # a writer's claim with the largest n wins
                odd = []
                for row in batch.claims:
                    if type(row[3]) is not int:
                        odd.append(row)
                        continue
                    hi = cut_off(gaps.get(row[:3:2]), row[3]) if gaps else None
                    if hi is not None:  # cut off: kept beside the writer's newer claims
                        row = (row[0], row[1], claim_key(row[2], row[3], hi), *row[3:])
                    key = row[:3]
                    old = newest.get(key)
                    if old is None or row[3] > old[3]:
                        newest[key] = row
                db.executemany(
                    "INSERT INTO claims VALUES(?,?,?,?,?,?,?,?) ON CONFLICT(session, ref, w) DO UPDATE SET "
                    "n=excluded.n, lc=excluded.lc, value=excluded.value, seen=excluded.seen, at=excluded.at "
                    "WHERE excluded.n > claims.n",
                    list(newest.values()) + odd,
                )
            if batch.partials:
                db.executemany("INSERT OR IGNORE INTO partials VALUES(?,?,?,?)", batch.partials)
            if batch.closed:
                db.executemany("INSERT OR IGNORE INTO closed VALUES(?,?)", batch.closed)
            if batch.files:
                files: dict[int, tuple] = {}  # file -> (largest indexed, last torn, largest corrupt)
                for file_id, indexed, torn, corrupt in batch.files:  # written by this code: integers
                    old = files.get(file_id)
                    files[file_id] = (indexed, torn, corrupt) if old is None else (max(indexed, old[0]), torn, max(corrupt, old[2]))
                db.executemany(
                    "UPDATE files SET indexed=max(indexed, ?), torn=?, corrupt=max(corrupt, ?) WHERE id=?",
                    [(i, t, c, f) for f, (i, t, c) in files.items()],
                )
            if batch.refused_at:
                # the smallest limit that refused a block: what was refused at a larger limit is
                # refused at it too, so only another limit needs the files read again
                db.execute(
                    "INSERT INTO meta VALUES('refused-at-limit', ?) ON CONFLICT(key) DO UPDATE SET "
                    "value=min(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))",
                    (min(batch.refused_at),),
                )
            if own:
                db.execute("COMMIT")
        except BaseException:
            if own:
                self._rollback()
            raise

    def _without_gone_files(self, batch: "IndexBatch", scanned: bool) -> "IndexBatch":
        """Inside the write transaction: the rows of `batch` less those read from a file
        whose row is gone. Another process's rebuild deletes the row of every file it did
        not find (a compaction removed it; AUTOINCREMENT never gives its id again), and
        rows read from that file before it went (a reader's older listing, a writer's
        queued rows) would name an object the tape no longer holds: a writer would take
        it as there and not write it again. A scan of one file that is gone brings nothing:
        its claims, streams and writers went with it (what the compaction kept is in its
        pack; a claim on a branch whose deletion it dropped would bring the branch back).
        A writer's claims always stay: its file may have lost its row to a rebuild that
        listed the files before the file had its name, and the next look indexes it again.
        Derived rows and redactions stay."""
        fids = list({f for _, f, _, _ in batch.objects} | {f for f, _, _, _ in batch.files})
        have: set[int] = set()
        for i in range(0, len(fids), 500):
            part = fids[i : i + 500]
            have.update(r[0] for r in self.db.execute(f"SELECT id FROM files WHERE id IN ({','.join('?' * len(part))})", part))
        if len(have) == len(fids):
            return batch
        kept = IndexBatch()
        kept.extend(batch)
        kept.objects = [row for row in batch.objects if row[1] in have]
        kept.files = [row for row in batch.files if row[0] in have]
        if scanned and not have:
            kept.writers, kept.claims, kept.gaps, kept.partials, kept.closed = [], [], [], [], []
        return kept

    def _apply_gaps(self, batch: "IndexBatch") -> dict[tuple, list]:
        """Add the batch's gaps, move the claims each new one cuts off to their own keys
        (claim_key), and return every gap of the writers whose claims the batch holds:
        (session, writer) -> [(lo, hi)]. A gap that arrives after a newer claim of its
        writer (its record read after theirs) may come too late for a claim that newer one
        replaced: the cache is marked for a rebuild, which reads every gap first."""
        db = self.db
        for s, w, lo, hi in batch.gaps:
            before = db.total_changes
            db.execute("INSERT OR IGNORE INTO gaps VALUES(?,?,?,?)", (s, w, lo, hi))
            if db.total_changes == before:
                continue
            db.execute("INSERT OR IGNORE INTO claims SELECT session, ref, w || ' ' || n, n, lc, value, seen, at FROM claims "
                       "WHERE session=? AND w=? AND n>? AND n<?", (s, w, lo, hi))
            db.execute("DELETE FROM claims WHERE session=? AND w=? AND n>? AND n<?", (s, w, lo, hi))
            if not self._in_rebuild and db.execute("SELECT 1 FROM claims WHERE session=? AND w=? AND n>? LIMIT 1",
                                                   (s, w, hi)).fetchone():
                self.stale = True
        pairs = {(row[0], row[2]) for row in batch.claims}
        if not pairs:
            return {}
        sessions = sorted({s for s, _ in pairs})
        out: dict[tuple, list] = {}
        for i in range(0, len(sessions), 500):
            part = sessions[i:i + 500]
            for s, w, lo, hi in db.execute(f"SELECT session, w, lo, hi FROM gaps WHERE session IN ({','.join('?' * len(part))})", part):
                if (s, w) in pairs:
                    out.setdefault((s, w), []).append((lo, hi))
        return out

    def gaps(self, session: str) -> dict[str, list]:
        """Writer -> [(lo, hi)]: the gaps of the session's records (model/refs.py)."""
        self.sync()
        out: dict[str, list] = {}
        for w, lo, hi in self.db.execute("SELECT w, lo, hi FROM gaps WHERE session=?", (session,)):
            out.setdefault(w, []).append((lo, hi))
        return out

    def vouched(self, session: str, writer: str = "") -> Optional[int]:
        """The n of the record with `gap` that this cache's writer wrote in the session, or None.
        A cache vouches within one boot of the machine: a machine restored from a snapshot
        (a VM's disk, with the tape and this cache) has lost what it wrote after it, and
        its files and cache agree with each other, so nothing else tells. After a restart,
        each session's first record declares an empty gap again; after a restore, what the
        writer wrote past the snapshot, brought back by a sync, is then cut off and kept on
        a conflict branch, not replaced (docs/sync.md; found by an audit of clocks). The
        boot is kept per writer: machines that share a cache (a home folder on NFS) would
        otherwise each take the other's boot for a restart at every write (found in review)."""
        if not self._boot_checked:
            self._boot_checked = True
            boot, key = boot_id(), f"vouched-boot:{writer}"
            row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
            if boot is not None and (row is None or row[0] != boot):
                self._write("DELETE FROM vouched", ())
                self._write("INSERT OR REPLACE INTO meta VALUES(?, ?)", (key, boot))
        row = self.db.execute("SELECT n FROM vouched WHERE session=?", (session,)).fetchone()
        return row[0] if row else None

    def note_vouched(self, session: str, n: int) -> None:
        self._write("INSERT INTO vouched VALUES(?,?) ON CONFLICT(session) DO UPDATE SET n=excluded.n", (session, n))

    def forget_vouched(self, session: str) -> None:
        """After a salvage: the writer's next record there declares a gap again."""
        self._write("DELETE FROM vouched WHERE session=?", (session,))

    def rebuilds(self) -> int:
        """How many times a process rebuilt this cache (Store._refresh: rows read before one
        may be gone, those of files its listing lacked)."""
        row = self.db.execute("SELECT value FROM meta WHERE key='rebuilds'").fetchone()
        return int(row[0]) if row else 0

    def refused_at_limit(self) -> Optional[int]:
        """The decompression limit (Store.max_object) under which the cache noted blocks as
        unreadable because they claimed more, or None. Under another limit they may read:
        the store then reads the files again rather than trust that damage."""
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='refused-at-limit'").fetchone()
        except sqlite3.Error:
            return None
        return int(row[0]) if row else None
