"""compact: remove what nothing reaches, and pack what is left.

1. Under the tape's compaction lock (one compaction at a time), take a snapshot
   of every data file and its size.
2. Read every file once: the entry graph (parent and blob links) and the ref
   records. Roots are the claims that still stand on every ref (branches, HEAD,
   conflict tips; a claim that a later move or deletion had seen does not),
   every ref record younger than --expire (anchors are reached
   through the records that appended them) and the start of every open stream.
3. For each session, write one pack: the objects that are reachable, or that sit
   in a file younger than --grace, compressed together in blocks; the ref
   records that are kept; open partial streams. Packs are written under a
   temporary name, fsync'd, then renamed: created whole.
4. Freeze writers (every session lock) for a moment: whatever was appended
   since the snapshot, to old files or new ones, is checked. New appends to a
   file about to go are copied into a rescue pack, and objects that new entries
   refer to are rescued from the files about to go. Then the old files are
   removed and the index rebuilt.

So an append that returns during compaction is never lost, and with the default
grace an object that a concurrent writer deduplicated against is young enough,
or is rescued.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import time
from datetime import datetime, timezone
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, NamedTuple, Optional

from blake3 import blake3

from ..store import framing, packing
from ..model.canonical import canonical_json
from ..model.errors import ConflictError, CorruptObject, InvalidInput, StorageError, UnsafePath
from ..model.models import format_time
from ..model.refs import CUT_KEY, HEAD, Claim, RefState, claim_key, conflict_name, cut_off, own_gap, saw, shown, standing_claims, tip_at
from ..model import redaction, schema
from ..model.schema import decode_entry
from ..store.files import TYPE_ENTRY, fsync_dir, lock_waiting, storage_error, zstd
from ..store.store import TYPE_WITHHELD
from ..model.schema import object_record_problem
from ..store.store import Store, file_header_problem, record_problem, segment_writer

BLOCK_BYTES = 2 << 20  # uncompressed bytes per pack block: larger compresses better, reads cost more
BLOCK_LEVEL = 12  # zstd level: 19 saves ~12% more but compresses ~10x slower
POLITE_SECONDS = 1.0  # _lock_sessions: how long it takes locks only without waiting while holding others
HOLD_WAIT = 5.0  # then the wait for each lock while holding the ones before: well below a batch's (BATCH_LOCK_WAIT)
LARGE_OBJECT = 64 << 10  # objects this large stay on their own (read without their neighbours)


def parse_duration(text, what: str = "duration") -> float:
    """Seconds in `now`, `30m`, `12h`, `14d`, `2w` (or a number of seconds): timespec's
    rules, so a Python caller meets the same bounds (InvalidInput) as the command line."""
    from ..model.timespec import parse_duration as parse

    return parse(text, what)


class Rec(NamedTuple):
    """The parts of a ref record compaction needs (kept small: a tape may hold millions)."""

    s: str
    w: str
    n: int
    t: str
    set: tuple  # ((ref, value), ...)
    old: tuple  # old values
    lc: int = 0
    seen: tuple = ()  # ((writer, n), ...): the claims this record supersedes
    at: Optional[str] = None  # HEAD attached to a branch: its tip then (refs.tip_at)
    redact: bool = False  # a redaction record: kept for good (docs/format.md section 17)
    gap: Optional[int] = None  # the record's `gap` (its pack's header keeps it once the record goes)
    cut: tuple = ()  # ((writer, (n, ...)), ...): the cut-off claims it had read

    @classmethod
    def parse(cls, body: bytes) -> "Rec":
        return cls.of(json.loads(body))

    @classmethod
    def of(cls, r: dict) -> "Rec":
        return cls(r["s"], r["w"], r["n"], r.get("t", ""), tuple((r.get("set") or {}).items()), tuple((r.get("old") or {}).values()),
                   r.get("lc", 0), tuple((r.get("seen") or {}).items()), tip_at(r), r.get("op") == redaction.OP,
                   r.get("gap"), tuple((w, tuple(ns)) for w, ns in (r.get("cut") or {}).items()))


# links from an entry's canonical bytes: its parent and its blob references (anything
# that looks like one counts: keeping an object too many is safe, one too few is not)
LINKS = re.compile(rb'"parent":"([0-9a-f]{64})"|\\u0000b([0-9a-f]{64})')


class Scan:
    """What pass 1 learns from every file. Hashes are kept as 32-byte strings."""

    def __init__(self):
        self.graph: dict[bytes, tuple] = {}  # entry -> the objects it refers to
        self.records: list[Rec] = []
        self.closed: set[tuple[str, str]] = set()
        self.partial_streams: dict[tuple[str, str], Optional[str]] = {}
        self.file_records: dict[str, list[tuple]] = {}  # pack path -> (s, w, n) of its ref records
        self.damaged: set[str] = set()  # files holding damaged records
        self.ends: dict[str, int] = {}  # file -> end of the last whole record read (the swap reads on from there)
        self.gaps: dict[str, set] = {}  # session -> {(writer, lo, hi)}: from records and pack headers (section 13)

    def session_gaps(self, session: str) -> dict[str, list]:
        out: dict[str, list] = {}
        for w, lo, hi in sorted(self.gaps.get(session, ())):
            out.setdefault(w, []).append((lo, hi))
        return out


def compact(tape, expire="90d", grace="14d", dry_run: bool = False, progress: Optional[Callable[[str], None]] = None) -> dict:
    store: Store = tape.store
    expire_s = parse_duration(expire, "--expire")
    grace_s = parse_duration(grace, "--grace")
    say = progress or (lambda msg: None)
    now = time.time()
    cutoff = format_time(datetime.fromtimestamp(now - expire_s, timezone.utc))
    if store._batch_depth:
        raise InvalidInput("compact cannot run inside a batch (it waits for every session's lock, and the batch holds some); run it after the batch")
    with _compaction_lock(store):
        _remove_stale_temp_packs(store)
        store.index.sync()
        store.refresh()
        snapshot = _snapshot(store)
        ages = {p: now - _mtime(store, p) for p in snapshot}
        say(f"compact: reading {len(snapshot)} files")
        scan = _scan(store, snapshot, say)
        # compaction removes the files it replaces: never one with damaged records in it,
        # whose bytes may still be recovered by hand or from another copy of the tape. A
        # damaged session is left as it is (`ctape fsck --salvage` handles it) and
        # everything its files hold counts as reachable; the other sessions are compacted.
        damaged = scan.damaged | {p for p in store.index.file_rows(damaged=True) if p in snapshot}
        damaged |= {p for p, _, _ in store.index.lost_rows() if p in snapshot}
        if any(p.startswith("packs/") for p in damaged):
            raise CorruptObject(
                f"not compacting: damaged records in {', '.join(sorted(damaged)[:3])}; run `ctape fsck`, "
                "then restore those files from another copy of the tape or move them out of it"
            )
        skipped = sorted({p.split("/")[1] for p in damaged} | store.unsafe_sessions)
        work = {p: size for p, size in snapshot.items() if p.split("/")[1] not in skipped}
        pinned = _entries_of(store, {p: size for p, size in snapshot.items() if p not in work})
        if store.unsafe_sessions:
            # a symlink in a session: its files are never read, so what they refer to in
            # other sessions' files is unknown: pack, but free nothing
            grace_s = float("inf")
        kept_records, head_roots = _kept_records(scan.records, cutoff, scan)
        have = {(r.s, r.w, r.n) for r in kept_records}
        kept_records += [r for r in scan.records if r.redact and (r.s, r.w, r.n) not in have]
        red = Redacted(tape.redactions())
        roots = _roots(scan, kept_records, cutoff) | head_roots | pinned
        live = _mark(scan.graph, roots) - red.blobs
        report = _plan(store, work, ages, grace_s, live, red)
        dropped_in, kept_in = report.pop("dropped_in"), report.pop("kept_in")
        report["skipped_sessions"] = skipped
        report.update(files_before=len(snapshot), dry_run=dry_run, expired_records=len(scan.records) - len(kept_records))
        kept_ids = {(r.s, r.w, r.n) for r in kept_records}
        open_streams = {k for k in scan.partial_streams if k not in scan.closed}
        by_session: dict[str, list[str]] = {}
        for p in work:
            parts = p.split("/")
            if parts[0] == "sessions":
                by_session.setdefault(parts[1], []).append(p)
        if dry_run:
            report["files_after"] = _files_after(snapshot, by_session, dropped_in, kept_in, scan.file_records, kept_ids, open_streams)
            return report
        written: dict[str, list[str]] = {}
        try:
            for n, (session, files) in enumerate(sorted(by_session.items()), 1):
                say(f"compact: packing session {n}/{len(by_session)}")
                if _already_compact(files, dropped_in, scan.file_records, kept_ids):
                    continue
                pack = _write_pack(store, session, files, snapshot, ages, grace_s, live, kept_ids, open_streams, red,
                                   scan.session_gaps(session))
                written[session] = [pack] if pack else []
        except BaseException:  # out of space, interrupted: the tape as it was
            _take_back(store, (p for packs in written.values() for p in packs))
            raise
        # before any file goes: a look that finds the files gone may judge from rows that
        # never held the deletions dropped here (model/refs.py saw; Store._note_lost)
        store.index.note_expired(_expired_deletions(scan.records, kept_ids, written))
        removed = _freeze_and_swap(store, snapshot, written, scan, live, say)
        if red.places:
            _scrub_caches(tape)
            from .redact import scrub_quarantine

            report["scrubbed_quarantine"] = scrub_quarantine(store, red)
        report["files_after"] = len(store.list_files(None))
        report["removed_files"] = removed
        return report


# -- pass 1 ------------------------------------------------------------------------------


def _scan(store: Store, snapshot: dict[str, int], say) -> Scan:
    scan = Scan()
    for i, (path, size) in enumerate(sorted(snapshot.items()), 1):
        if i % 50 == 0:
            say(f"compact: reading file {i}/{len(snapshot)}")
        for rec in _records(store, path, 0, size, scan.ends, scan.damaged):
            before = len(scan.records)
            if not _learn(store, scan, rec, path):
                scan.damaged.add(path)
            if len(scan.records) > before and path.endswith(".pack"):
                r = scan.records[-1]
                scan.file_records.setdefault(path, []).append((r.s, r.w, r.n))
    return scan


def _entries_of(store: Store, files: dict[str, int]) -> set[bytes]:
    """Every entry held in these files (a damaged session's: all of it stays)."""
    out: set[bytes] = set()
    for path, size in files.items():
        for rec in _records(store, path, 0, size):
            if rec.type == framing.T_OBJECT and rec.body[32] == TYPE_ENTRY:
                out.add(rec.body[:32])
    return out


def _records(store: Store, path: str, start: int, end: Optional[int], ends: Optional[dict] = None, damaged: Optional[set] = None):
    """The records of a file between two offsets that read back (fsck reports the rest);
    dictionaries are left out: packs compress alone. `damaged` collects the file when it
    holds damage (a torn tail of a segment is an unfinished write, not damage). A file
    whose header is not its own (another session or writer) is damage: its objects still
    read back (their names prove them), its ref and stream records are left out."""
    records_ok = True
    for i, item in enumerate(store.scan_file(path, start, end, ends)):
        if i == 0 and start == 0 and file_header_problem(path, item) and not (isinstance(item, framing.Damage) and item.torn):
            records_ok = False
            if damaged is not None:
                damaged.add(path)
        if not records_ok and isinstance(item, framing.Record) and item.type in (framing.T_REF, framing.T_PARTIAL):
            continue
        if isinstance(item, framing.Record):
            if item.type == framing.T_OBJECT and object_record_problem(item.body):
                if damaged is not None:
                    damaged.add(path)
            elif item.type != framing.T_DICT:
                yield item
        elif damaged is not None and (not item.torn or path.endswith(".pack")):
            damaged.add(path)


def _learn(store: Store, scan: Scan, rec: framing.Record, path: str) -> bool:
    """Take one record into the scan; False when it is damaged."""
    if rec.type == framing.T_OBJECT:
        if rec.body[32] not in (TYPE_ENTRY, TYPE_WITHHELD):
            return True
        key = rec.body[:32]
        if key in scan.graph:
            return True
        try:
            _, body = store.decode_object(key.hex(), rec.body)
        except CorruptObject:
            return False
        scan.graph[key] = tuple(bytes.fromhex((a or b).decode()) for a, b in LINKS.findall(body))
    elif rec.type == framing.T_HEADER:
        if path.endswith(".pack"):
            header, why = schema.read_header(rec.body)
            if header is not None:
                scan.gaps.setdefault(header["session"], set()).update(schema.header_gaps(header))
    elif rec.type in (framing.T_REF, framing.T_PARTIAL):
        parts = path.split("/")
        r = record_problem(rec.type, rec.body, parts[1] if parts[0] == "sessions" else None, segment_writer(path))
        if isinstance(r, str):
            return False
        if rec.type == framing.T_PARTIAL:
            scan.partial_streams[(r["s"], r["stream"])] = r.get("base")
            return True
        scan.records.append(Rec.of(r))
        gap = r.get("gap")
        if gap is not None:
            scan.gaps.setdefault(r["s"], set()).add((r["w"], gap, r["n"]))
        if r.get("stream"):
            scan.closed.add((r["s"], r["stream"]))
    return True


def _kept_records(records: list[Rec], cutoff: str, scan: Scan) -> tuple[list[Rec], set[bytes]]:
    """Records younger than the cutoff, plus those the refs still follow from.

    A claim that another writer's claim had seen (a move or a deletion made after
    reading it) no longer decides its ref on any copy: once it expires its record
    goes, and with it the data only it reached. What is kept gives every ref the same
    value and conflict branches as all records do (see _session_kept)."""
    by_session: dict[str, list[Rec]] = {}
    for r in records:
        by_session.setdefault(r.s, []).append(r)
    keep: set[tuple] = set()
    roots: set[bytes] = set()
    for recs in by_session.values():
        kept, head_root = _session_kept(recs, cutoff, scan.session_gaps(recs[0].s))
        keep |= kept
        roots |= head_root
    out, seen = [], set()
    for r in records:
        ident = (r.s, r.w, r.n)
        if ident in keep and ident not in seen:
            seen.add(ident)
            out.append(r)
    return out, roots


def _session_kept(recs: list[Rec], cutoff: str, gaps: dict[str, list]) -> tuple[set[tuple], set[bytes]]:
    """Start from the young records, the holders of the claims the refs show (the winner
    when it sets a value or is HEAD's, each tip a conflict branch holds) and the records with the session's largest Lamport clock
    (a writer takes its next n from the clock, so n never repeats); then, while some ref
    would resolve differently from these alone (an older claim that a dropped record had
    superseded), add the records that superseded it. Also the root no record sets: the
    tip a HEAD on a branch deleted on another copy stays at (section 12, rule 7)."""
    full = _claims(recs, gaps)
    whole = _resolve(full)
    want = {ref: _outcome(cs) for ref, cs in full.items()}
    top = max(r.lc for r in recs)
    kept = {(r.s, r.w, r.n) for r in recs if r.t >= cutoff or r.lc == top}
    for ref, cs in full.items():
        pairs = standing_pairs(cs)
        win, others = shown(ref, [c for c, _ in pairs])
        for c, r in pairs:
            if (c is win and (c.value is not None or ref == HEAD)) or any(c is o for o in others):
                kept.add((r.s, r.w, r.n))
    while True:
        sub = _claims([r for r in recs if (r.s, r.w, r.n) in kept], gaps)
        more = set()
        for ref, cs in full.items():
            have = sub.get(ref, {})
            if _outcome(have) == want[ref]:
                continue
            standing = {(c.w, c.n) for c, _ in standing_pairs(cs)}
            for c, r in standing_pairs(cs):
                more.add((r.s, r.w, r.n))
            for c, _ in standing_pairs(have):
                if (c.w, c.n) not in standing:  # superseded by a claim that is not kept: keep one
                    more |= {(r.s, r.w, r.n) for o, r in cs.values() if saw(o, c)}
        if more <= kept:
            more = _holders_across_refs(full, whole, sub)
            if more <= kept:
                return kept, _hash_values([whole.head]) if whole.head_from else set()
        kept |= more


def _holders_across_refs(full: dict, whole: RefState, sub: dict) -> set[tuple]:
    """What one ref's claims decide for another. A conflict branch's name depends on the
    claims on that name (section 12, rule 4: `-N` when a record set it to another value
    since), and a HEAD attached to a branch deleted on another copy stays at the tip its
    writer attached at, while the branch's claims say it is deleted (`RefState._head_on_deleted`): when the kept records would resolve
    differently, keep the standing claims those were weighed against."""
    if _outcome_of(whole) == _outcome_of(_resolve(sub)):
        return set()
    names = [whole.head_from] if whole.head_from else []
    for ref, cs in full.items():
        for c in shown(ref, [c for c, _ in standing_pairs(cs)])[1]:
            names += [conflict_name(ref, c.w, c.value), conflict_name(ref, c.w, c.value, c.n)]
    return {(r.s, r.w, r.n) for name in names for _, r in standing_pairs(full.get(name, {}))}


def _resolve(claims: dict) -> RefState:
    st = RefState(claims={ref: {w: c for w, (c, _) in cs.items()} for ref, cs in claims.items()})
    st.resolve_all()
    return st


def _outcome_of(st: RefState) -> tuple:
    return st.branches, st.head, st.tags


def _claims(recs: list[Rec], gaps: dict[str, list]) -> dict[str, dict[str, tuple[Claim, Rec]]]:
    """ref -> claim key -> (its claim, the record holding it): each writer's newest record
    setting the ref, and each claim one of its gaps cuts off (model/refs.py: claim_key)."""
    out: dict[str, dict[str, tuple[Claim, Rec]]] = {}
    for r in recs:
        hi = cut_off(gaps.get(r.w), r.n) if gaps else None
        key = claim_key(r.w, r.n, hi)
        for ref, value in r.set:
            mine = out.setdefault(ref, {})
            old = mine.get(key)
            if old is None or r.n > old[0].n:
                cut = {w: list(ns) for w, ns in r.cut} or None
                mine[key] = (Claim(ref, r.w, r.n, r.lc, value, dict(r.seen), r.at if ref == HEAD else None, cut, hi,
                                   own_gap(gaps.get(r.w), r.n)), r)
    return out


def standing_pairs(cs: dict[str, tuple[Claim, Rec]]) -> list[tuple[Claim, Rec]]:
    standing = {id(c) for c in standing_claims([c for c, _ in cs.values()])}
    return [(c, r) for c, r in cs.values() if id(c) in standing]


def _outcome(cs: dict[str, tuple[Claim, Rec]]) -> tuple:
    """What a ref's claims show: the winning value and each other standing tip (its conflict branch)."""
    if not cs:
        return (None, ())
    ref = next(iter(cs.values()))[0].ref
    win, others = shown(ref, [c for c, _ in standing_pairs(cs)])
    return (win.value, tuple((c.w, c.n, c.value) for c in others))


def _hash_values(values) -> set[bytes]:
    return {bytes.fromhex(v) for v in values if isinstance(v, str) and len(v) == 64 and not v.startswith("@")}


def _roots(scan: Scan, kept: list[Rec], cutoff: str) -> set[bytes]:
    """Every kept record's new values; the old values too while the record has not expired."""
    roots: set[bytes] = set()
    for r in kept:
        roots |= _hash_values(v for _, v in r.set)
        if r.t >= cutoff:
            roots |= _hash_values(r.old)
    roots |= _hash_values(base for key, base in scan.partial_streams.items() if key not in scan.closed)
    return roots


def _mark(graph: dict[bytes, tuple], roots: set[bytes]) -> set[bytes]:
    live: set[bytes] = set()
    stack = list(roots)
    while stack:
        h = stack.pop()
        if h in live:
            continue
        live.add(h)
        stack.extend(x for x in graph.get(h, ()) if x not in live)
    return live


class Redacted:
    """The tape's redactions as compaction needs them: blobs that go whole, and entries
    that are kept only as their withheld form (docs/format.md section 17)."""

    def __init__(self, places: dict[str, list[tuple[str, str]]]):
        self.places = places
        self.blobs = {bytes.fromhex(o) for o, ps in places.items() if any(p == "$" for p, _ in ps)}
        self.entries = {bytes.fromhex(o): [pk for pk in ps if pk[0] != "$"] for o, ps in places.items()
                        if any(p != "$" for p, _ in ps)}

    def withheld(self, store: Store, rec_body: bytes) -> Optional[bytes]:
        """The withheld form of a redacted entry's object record (None when it does not read)."""
        h = rec_body[:32].hex()
        try:
            _, body = store.decode_object(h, rec_body)
            raw = decode_entry(h, body)
        except CorruptObject:
            return None
        return redaction.withheld_body(raw, self.entries[rec_body[:32]])

    def changes(self, store: Store, rec_body: bytes) -> bool:
        """Whether a pack holding this object record must be written again."""
        key = rec_body[:32]
        if key in self.blobs:
            return True
        if key not in self.entries:
            return False
        if rec_body[32] != TYPE_WITHHELD:
            return True
        _, body = store.decode_object(key.hex(), rec_body)
        return self.withheld(store, rec_body) != body


def _scrub_caches(tape) -> None:
    """Caches outside the tape keep no redacted text: the index is vacuumed, the search
    cache rebuilt when it was built before the redactions."""
    from .search import SearchIndex

    tape.store.index.scrub()
    si = SearchIndex(tape)
    try:
        si.scrub()
    finally:
        si.close()
    from .scan import forget_redacted

    forget_redacted(tape)
    if tape.store.index.path != ":memory:":
        _forget_other_versions(os.path.dirname(tape.store.index.path))


_OTHER_VERSION = re.compile(r"(index|search)(-\d+)?\.sqlite(-wal|-shm|-journal)?")


def _forget_other_versions(folder: str) -> None:
    """The index and search caches another ctape version keeps in the same folder (one file
    per schema version) hold text this version's redactions never reached: removed (a
    cache: that version builds it again from the tape, and a process of it that has one
    open keeps reading its own copy until it closes)."""
    from ..store.index import index_file
    from .search import search_file

    ours = {index_file(), search_file()}
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = _OTHER_VERSION.fullmatch(name)
        if m is not None and name[: len(name) - len(m.group(3) or "")] not in ours:
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


def _plan(store: Store, snapshot, ages, grace_s, live, red: Optional[Redacted] = None) -> dict:
    kept = freed = kept_bytes = freed_bytes = 0
    seen: set[str] = set()
    dropped_in: dict[str, int] = {}
    kept_in: dict[str, int] = {}  # path -> objects kept from it
    for path, size in snapshot.items():
        young = ages[path] < grace_s
        for rec in _records(store, path, 0, size):
            if rec.type != framing.T_OBJECT:
                continue
            h = rec.body[:32]
            if red is not None and (h in red.blobs or h in red.entries) and red.changes(store, rec.body):
                dropped_in[path] = dropped_in.get(path, 0) + 1  # redacted bytes go: the pack is written again
                if h in red.blobs:
                    freed += 1
                    freed_bytes += _logical_size(rec.body)
                    continue
            if h in seen:
                dropped_in[path] = dropped_in.get(path, 0) + 1  # a second copy goes
                continue
            size = _logical_size(rec.body)
            if h in live or (young and not (red is not None and h in red.blobs)):
                kept += 1
                kept_bytes += size
                seen.add(h)
                kept_in[path] = kept_in.get(path, 0) + 1
            else:
                freed += 1
                freed_bytes += size
                dropped_in[path] = dropped_in.get(path, 0) + 1
    return {"kept_objects": kept, "kept_bytes": kept_bytes, "freed_objects": freed, "freed_bytes": freed_bytes, "dropped_in": dropped_in,
            "kept_in": kept_in}


def _files_after(snapshot, by_session, dropped_in, kept_in, file_records, kept_ids, open_streams) -> int:
    """The data files a run would leave (`--dry-run`): every file but those of the sessions
    it packs, and a pack for each of those that keeps anything (a pack with nothing in it is
    not written: PackWriter.finish). Appends during a real run may add files."""
    n = len(snapshot)
    for session, files in by_session.items():
        if _already_compact(files, dropped_in, file_records, kept_ids):
            continue
        n -= len(files)
        if any(kept_in.get(p) for p in files) or any(k[0] == session for k in kept_ids) or any(k[0] == session for k in open_streams):
            n += 1
    return n


def _logical_size(body: bytes) -> int:
    """An object's uncompressed size, so that reports do not depend on how it is stored."""
    if body[33] == 1:
        try:
            return max(zstd().frame_content_size(body[34:]), 0)
        except zstd().ZstdError:
            return len(body) - 34
    return len(body) - 34


def _already_compact(files: list[str], dropped_in: dict[str, int], file_records: dict, kept_ids: set) -> bool:
    """One pack from which nothing would go: no object, no expired ref record."""
    if len(files) != 1 or not files[0].endswith(".pack") or dropped_in.get(files[0]):
        return False
    return all(r in kept_ids for r in file_records.get(files[0], ()))


# -- writing packs ------------------------------------------------------------------------------


class PackWriter:
    """Builds a pack block by block (see packing.py), then installs it under its content hash."""

    def __init__(self, store: Store, session: str, gaps: Optional[dict[str, list]] = None):
        self.store = store
        self.session = session
        self.dir = store.session_dir(session)
        self.tmp = os.path.join(self.dir, f".tmp-pack-{secrets.token_hex(6)}")
        self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        self.hasher = blake3()
        self.block: list[tuple[int, bytes]] = []
        self.block_size = 0
        self.objects: set[str] = set()
        self.count = 0
        self.cctx = zstd().ZstdCompressor(level=BLOCK_LEVEL, write_content_size=True, write_checksum=True)
        try:
            header: dict = {"format": "ctape-pack", "version": 1, "session": session}
            if gaps:  # the gaps of the records read, which may go: a cut-off claim may come back later
                header["gaps"] = {w: sorted([lo, hi] for lo, hi in pairs) for w, pairs in sorted(gaps.items())}
            self._write(framing.frame(framing.T_HEADER, canonical_json(header)))
        except BaseException:
            self.abort()
            raise

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.hasher.update(data)

    def add_object(self, body: bytes) -> None:
        """Add an object record body (hash, type, codec, data) unless the pack has it."""
        h = body[:32].hex()
        if h in self.objects:
            return
        if len(body) >= LARGE_OBJECT:  # large: on its own, so reading it needs no neighbours
            self.objects.add(h)
            self.count += 1
            self._write(framing.frame(framing.T_OBJECT, body))
            return
        try:
            # verified: inside a block the name is not stored, and the references to it
            # become distances, so a wrong name would silently rename what points at it
            _, raw = self.store.decode_object(h, body)
        except CorruptObject:
            return  # it does not read back (fsck reports it); compaction keeps what does
        self.objects.add(h)
        self.count += 1
        if len(raw) >= LARGE_OBJECT * 4:
            self._write(framing.frame(framing.T_OBJECT, body))
            return
        self._add(framing.T_OBJECT, body[:33] + b"\0" + raw)

    def add_withheld(self, h: str, body: bytes) -> None:
        """An entry's withheld form: an object record of its own (type W, named by the
        original's hash, which it no longer matches: never inside a block, where names
        are computed from the bytes)."""
        if h in self.objects:
            return
        self.objects.add(h)
        self.count += 1
        self._write(framing.frame(framing.T_OBJECT, self.store.encode_object(TYPE_WITHHELD, body, h)))

    def add_record(self, type_: int, body: bytes) -> None:
        """A ref or partial record, in order among the objects (its hashes point at them)."""
        self.count += 1
        self._add(type_, body)

    def _add(self, type_: int, body: bytes) -> None:
        self.block.append((type_, body))
        self.block_size += len(body)
        if self.block_size >= BLOCK_BYTES:
            self._flush_block()

    def _flush_block(self) -> None:
        if self.block:
            raw = packing.encode_block(self.block)
            self._write(framing.frame(framing.T_BLOCK, self.cctx.compress(raw)))
            self.block, self.block_size = [], 0

    def finish(self) -> Optional[str]:
        """fsync, rename to pack-<hash>.pack, fsync the folder; returns the relative path."""
        self._flush_block()
        os.fsync(self.fd)
        os.close(self.fd)
        if self.count == 0:
            os.unlink(self.tmp)
            return None
        name = f"pack-{self.hasher.hexdigest()[:32]}.pack"
        final = os.path.join(self.dir, name)
        os.rename(self.tmp, final)
        fsync_dir(self.dir)
        return f"sessions/{self.session}/{name}"

    def abort(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


def _pack_error(e: OSError, session: str) -> StorageError:
    return storage_error(e, f"a pack of session {session}", after="compact removed nothing: the tape is as it was")


def _take_back(store: Store, packs: Iterable[Optional[str]]) -> None:
    """Remove the packs a compaction wrote before it failed, before it removed anything:
    what they hold is still in the files they were to replace."""
    folders = set()
    for rel in packs:
        if rel is None:
            continue
        try:
            os.unlink(os.path.join(store.root, rel))
            folders.add(os.path.dirname(os.path.join(store.root, rel)))
        except OSError:
            pass
    for d in folders:
        try:
            fsync_dir(d)
        except OSError:
            pass


@contextmanager
def _pack(store: Store, session: str, gaps: Optional[dict[str, list]] = None) -> Iterator[PackWriter]:
    """A PackWriter for the session: a failure takes its half-written pack back, and a full
    disk (or any OSError) is the one line _pack_error says."""
    try:
        pw = PackWriter(store, session, gaps)
    except OSError as e:
        raise _pack_error(e, session) from None
    try:
        yield pw
    except OSError as e:
        pw.abort()
        raise _pack_error(e, session) from None
    except BaseException:
        pw.abort()
        raise


def _write_pack(store, session, files, snapshot, ages, grace_s, live, kept_ids, open_streams, red: Redacted,
                gaps: Optional[dict[str, list]] = None) -> Optional[str]:
    with _pack(store, session, gaps) as pw:
        done: set[bytes] = set()
        for path in sorted(files):
            young = ages[path] < grace_s
            for rec in _records(store, path, 0, snapshot[path]):
                if rec.type == framing.T_OBJECT:
                    key = rec.body[:32]
                    if key in red.blobs:
                        continue  # a redacted value goes whole, young or not
                    if not (young or key in live):
                        continue
                    if key in red.entries:
                        body = red.withheld(store, rec.body)
                        if body is not None:
                            pw.add_withheld(key.hex(), body)
                        continue
                    pw.add_object(rec.body)
                elif rec.type in (framing.T_REF, framing.T_PARTIAL) and rec.body not in done:
                    r = json.loads(rec.body)
                    keep = (r["s"], r["w"], r["n"]) in kept_ids if rec.type == framing.T_REF else (r["s"], r["stream"]) in open_streams
                    if keep:
                        done.add(rec.body)
                        pw.add_record(rec.type, rec.body)
        return pw.finish()


def _expired_deletions(records: list[Rec], kept_ids: set, written: dict) -> list[tuple]:
    """The deletions (a ref set to None) that go with the files of the sessions packed:
    index rows (session, ref, writer, n, lc, seen) for the cache's `expired` table. The
    claims such a deletion had read go with it: they are superseded, not lost, though a
    process whose index rows never held the deletion (a writer's queued rows, a rebuild
    from a listing older than its segment) finds only them gone."""
    out = []
    for r in records:
        if r.s in written and (r.s, r.w, r.n) not in kept_ids:
            seen = dict(r.seen)
            if r.cut:
                seen[CUT_KEY] = {w: list(ns) for w, ns in r.cut}
            text = json.dumps(seen, sort_keys=True) if seen else "{}"
            out.extend((r.s, ref, r.w, r.n, r.lc, text) for ref, value in r.set if value is None)
    return out


# -- the swap -----------------------------------------------------------------------------------------


def _freeze_and_swap(store: Store, snapshot, written, scan: Scan, live: set[str], say) -> int:
    """With every session locked: carry over what arrived since the snapshot, then remove old files."""
    say("compact: swapping files")
    sessions = sorted(set(store.sessions()) - store.unsafe_sessions)
    fds = _lock_sessions(store, sessions)
    try:
        now_files = store.list_files(None)
        doomed = {p for s, packs in written.items() for p in snapshot if p.startswith(f"sessions/{s}/") and p not in packs}
        # 1. what was appended after the snapshot
        fresh: list[tuple[str, framing.Record]] = []
        for path, size in now_files.items():
            # from the end of the last whole record pass 1 read, not from the snapshot's size:
            # a record cut by the snapshot (a write under way, a torn tail) was not packed
            start = scan.ends.get(path, 0)
            if path in written.get(path.split("/")[1] if path.startswith("sessions/") else "", []):
                continue
            if size > start:
                fresh.extend((path, rec) for rec in _records(store, path, start, size))
        # 2. objects the fresh entries and records reach that are not kept
        needed: set[bytes] = set()
        for path, rec in fresh:
            if rec.type == framing.T_OBJECT and rec.body[32] == TYPE_ENTRY:
                _learn(store, scan, rec, path)
            elif rec.type == framing.T_REF:
                r = record_problem(rec.type, rec.body, None)
                if not isinstance(r, str):
                    needed |= _hash_values(list(r.get("set", {}).values()) + list((r.get("old") or {}).values()))
        for path, rec in fresh:
            if rec.type == framing.T_OBJECT and rec.body[32] == TYPE_ENTRY:
                needed.update(scan.graph.get(rec.body[:32], ()))
        rescue = _mark(scan.graph, needed) - live
        # 3. a rescue pack per session for fresh records in doomed files and rescued objects
        rescued = 0
        by_session: dict[str, list[bytes]] = {}
        for path, rec in fresh:
            if path in doomed:
                by_session.setdefault(path.split("/")[1], []).append(framing.frame(rec.type, rec.body))
        if rescue:
            for path in sorted(doomed):
                for rec in _records(store, path, 0, snapshot[path]):
                    if rec.type == framing.T_OBJECT and rec.body[:32] in rescue:
                        by_session.setdefault(path.split("/")[1], []).append(framing.frame(rec.type, rec.body))
                        rescue.discard(rec.body[:32])
                        rescued += 1
        rescue_packs: list[Optional[str]] = []
        try:
            for session, frames in by_session.items():
                rescue_packs.append(_rescue_pack(store, session, frames))
        except BaseException:  # nothing removed yet: the tape as it was
            _take_back(store, [*rescue_packs, *(p for packs in written.values() for p in packs)])
            raise
        # 4. remove what the packs replace
        for path in sorted(doomed):
            try:
                os.unlink(os.path.join(store.root, path))
            except FileNotFoundError:
                pass
        for s in {p.split("/")[1] for p in doomed}:
            fsync_dir(store.session_dir(s))
        store._full_reindex()  # before writers may go on, so they find the index whole
        return len(doomed)
    finally:
        for fd in fds:
            os.close(fd)


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


def _rescue_pack(store: Store, session: str, frames: list[bytes]) -> Optional[str]:
    with _pack(store, session) as pw:
        for fr in frames:
            for item in framing.scan(fr):
                if item.type == framing.T_OBJECT:
                    pw.add_object(item.body)
                elif item.type != framing.T_HEADER:
                    pw.add_record(item.type, item.body)
        return pw.finish()


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


def _mtime(store: Store, path: str) -> float:
    st = os.stat(os.path.join(store.root, path), follow_symlinks=False)
    return max(st.st_mtime, st.st_ctime)


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
