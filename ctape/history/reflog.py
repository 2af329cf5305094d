"""A session's ref log: every ref record read back from its files, replayed in order.

The index keeps each ref's claims, not the records that made them (a copy would be as
large as the tape for sessions written one append at a time), so the ref log is read from
the files when asked for: `ctape reflog`, `SESSION@{N}` (Session.head_at), salvage's
check of what HEAD held, and `watch`'s position records. Records are ordered by Lamport
clock, writer and number (docs/format.md, section 12); replaying them gives every line of
the log and the positions HEAD has had.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

from ..model import schema
from ..model.refs import HEAD
from ..store import framing

if TYPE_CHECKING:
    from .session import Session


def lines(session: "Session") -> list[dict]:
    """Every ref move, newest first. Lines that moved HEAD carry `at`: N of SESSION@{N}.
    `gone` marks the values ("old", "new") whose entry this tape does not hold: a
    record kept for a ref's current value may name an entry `compact` removed since
    (invariant 7: never left pointing at a removed object unmarked), or one not synced yet."""
    out, _ = replay(session)
    named = {line[k] for line in out for k in ("old", "new") if isinstance(line[k], str) and not line[k].startswith("@")}
    gone = {h for h in session.store.index.missing(named) if not session.tape.has_entry(h)}  # has_entry: the index brought up to date first
    for line in out:
        line["gone"] = [k for k in ("old", "new") if line[k] in gone]
    return out


def records(session: "Session") -> list[dict]:
    """Every ref record of the session, oldest first (Lamport clock, writer, n), read
    from its files: the index keeps no copy (it would be as large as the tape for
    sessions written one append at a time), and this is read only for the ref log."""
    store = session.store
    tries = 3
    while True:
        tries -= 1
        files = store.list_files(session.name)
        try:
            found = _read_records(session, files)
        except FileNotFoundError:
            if not tries:
                raise
            continue  # a compaction replaced files while we read them: their records are in its pack
        # the folder changed while we read (a listing taken during a compaction's rename
        # may hold neither the old files nor the new pack): read again
        if not tries or set(store.list_files(session.name)) == set(files):
            return found


def _read_records(session: "Session", files: Iterable[str]) -> list[dict]:
    found: dict[tuple, dict] = {}
    for rel in files:
        for item in session.store.scan_file(rel):
            if isinstance(item, framing.Record) and item.type == framing.T_REF:
                rec, why = schema.read_ref_record(item.body, session.name)
                if why is None:  # fsck reports the others
                    found.setdefault((rec["w"], rec["n"]), rec)  # a write repeated after a copy
    return sorted(found.values(), key=lambda r: (r["lc"], r["w"], r["n"]))


def replay(session: "Session") -> tuple[list[dict], list[str]]:
    """(the ref log's lines, newest first; the entries HEAD has pointed at, newest first)."""
    session.store.refresh(session.name)  # so that the index knows every entry the ref log names
    branches: dict[str, Optional[str]] = {}
    head: Optional[str] = None
    positions: list[str] = []
    last_at: Optional[str] = None  # where HEAD was after the record before (None: nowhere)
    out: list[dict] = []
    for rec in records(session):
        before = {ref: (head if ref == HEAD else branches.get(ref)) for ref in rec.get("set", {})}
        for ref, value in rec.get("set", {}).items():
            if ref == HEAD:
                head = value
            else:
                branches[ref] = value
        at = branches.get(head[1:]) if head and head.startswith("@") else head
        # a move to an entry, from another one or from nowhere: back at the entry HEAD had
        # before a `session rm` (or an unborn branch) is a position of its own, as git
        # counts every checkout (that re-import's lines had no @{N}, found by an audit)
        moved = bool(at) and at != last_at
        last_at = at
        if moved:
            positions.append(at)
        for ref, new in sorted(rec.get("set", {}).items()):
            out.append(
                {
                    "ref": ref if ref == HEAD else f"{session.name}/{ref}",
                    "old": (rec["old"] or {}).get(ref) if "old" in rec else before.get(ref),
                    "new": new,
                    "op": rec.get("op"),
                    "time": rec.get("t"),
                    "writer": rec.get("w"),
                    "head": at,
                    "_pos": len(positions) - 1 if moved else None,
                }
            )
    out.reverse()
    total = len(positions)
    for i, line in enumerate(out):
        # numbered for @{N} (SPEC 5): a line that did not move HEAD has no N
        pos = line.pop("_pos")
        line["index"] = line["at"] = None if pos is None else total - 1 - pos
        line["line"] = i
    return out, positions[::-1]
