"""compact, the swap: with every session locked for a moment, what was appended since the
snapshot is checked, new appends to files about to go and the objects new entries refer
to are carried into rescue packs, then the old files are removed and the index rebuilt.
"""

from __future__ import annotations

import os
from typing import Optional

from ..store import framing
from ..store.files import TYPE_ENTRY, fsync_dir
from ..store.store import Store, record_problem
from .compact_locks import _lock_sessions
from .compact_packs import _pack, _take_back
from .compact_reach import _hash_values, _mark
from .compact_scan import Scan, _learn, _records


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
            _take_back(store, [*rescue_packs, *(p for packs in written.values() for p in packs)], snapshot)
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


def _rescue_pack(store: Store, session: str, frames: list[bytes]) -> Optional[str]:
    with _pack(store, session) as pw:
        for fr in frames:
            for item in framing.scan(fr):
                if item.type == framing.T_OBJECT:
                    pw.add_object(item.body)
                elif item.type != framing.T_HEADER:
                    pw.add_record(item.type, item.body)
        return pw.finish()
