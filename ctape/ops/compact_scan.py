"""compact, pass 1: the records of every file read once, and what they tell (docs/format.md
section 13): the entry graph (each entry's parent and blob links), the ref records
(`Rec`), the streams still open, each pack's ref records and gaps, the files with damage,
and where each file's whole records end (the swap reads on from there).
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple, Optional

from ..store import framing
from ..model.errors import CorruptObject
from ..model.refs import tip_at
from ..model import redaction, schema
from ..store.files import TYPE_ENTRY
from ..store.store import TYPE_WITHHELD, Store, file_header_problem, record_problem, segment_writer
from ..model.schema import object_record_problem


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
