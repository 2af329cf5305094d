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
   records that are kept; open partial streams. What a removed session's files
   hold that another session reaches goes to that session's pack instead (a copy
   made by `session cp` outlives its source: compact_reach._moves). Packs are
   written under a temporary name, fsync'd, then renamed: created whole.
4. Freeze writers (every session lock) for a moment: whatever was appended
   since the snapshot, to old files or new ones, is checked. New appends to a
   file about to go are copied into a rescue pack, and objects that new entries
   refer to are rescued from the files about to go. Then the old files are
   removed and the index rebuilt.

So an append that returns during compaction is never lost, and with the default
grace an object that a concurrent writer deduplicated against is young enough,
or is rescued.

This module runs the steps and counts what they keep and free (the report, `--dry-run`);
the steps are in modules of their own (code imports from them; tests read a few names
from here): compact_scan.py (pass 1: the records of every file), compact_reach.py (the ref records
kept and the objects they reach), compact_redacted.py (redactions as compaction applies
them), compact_packs.py (writing a pack), compact_locks.py (the compaction lock, the
session locks, the snapshot, temporary packs) and compact_swap.py (the swap: what arrived
meanwhile is carried over, then the old files go).
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from typing import Callable, Optional

from ..store import framing
from ..model.errors import CorruptObject, InvalidInput, StorageError
from ..history.sessions import is_removed
from ..model.models import NAME_RE, format_time, plural
from ..model.refs import CUT_KEY, HEAD
from ..store.files import room_for_open_files, zstd
from ..store.store import Store
from .compact_locks import _compaction_lock, _remove_stale_temp_packs, _snapshot
from .compact_packs import _take_back, _write_pack
from .compact_reach import Cutoff, _claims, _kept_records, _mark, _moves, _resolve, _roots  # noqa: F401 - _claims and _resolve are read from here too (tests)
from .compact_redacted import Redacted, _forget_freed_in_search, _scrub_caches
from .compact_scan import Rec, _entries_of, _records, _scan
from .compact_swap import _freeze_and_swap


def parse_duration(text, what: str = "duration") -> float:
    """Seconds in `now`, `30m`, `12h`, `14d`, `2w` (or a number of seconds): timespec's
    rules, so a Python caller meets the same bounds (InvalidInput) as the command line."""
    from ..model.timespec import parse_duration as parse

    return parse(text, what)


FILES_BESIDE_LOCKS = 256  # descriptors compaction holds besides one per session (files read, packs written, the index)


def _check_open_files(store: Store) -> None:
    """The swap holds every session's lock at once, a descriptor each: a tape of more
    sessions than the limit of open files failed there, after a pack was written beside
    every session's files, and again at every run (found by an audit). The soft limit is
    raised where the hard one allows; else compaction stops before it writes anything."""
    n = len(store.sessions())
    ok, limit = room_for_open_files(n + FILES_BESIDE_LOCKS)
    if not ok:
        raise StorageError(
            f"compact holds every session's lock at once: {n} sessions need about {n + FILES_BESIDE_LOCKS} open files, "
            f"and this process may open {limit}; raise the limit (`ulimit -n {n + FILES_BESIDE_LOCKS}`) and run it again "
            "(nothing was changed)")


def compact(tape, expire="90d", grace="14d", dry_run: bool = False, progress: Optional[Callable[[str], None]] = None) -> dict:
    store: Store = tape.store
    expire_s = parse_duration(expire, "--expire")
    grace_s = parse_duration(grace, "--grace")
    say = progress or (lambda msg: None)
    now = time.time()
    cutoff = Cutoff(format_time(datetime.fromtimestamp(now - expire_s, timezone.utc)), int((now - expire_s) * 1e6), int(now * 1e6))
    if store._batch_depth:
        raise InvalidInput("compact cannot run inside a batch (it waits for every session's lock, and the batch holds some); run it after the batch")
    with _compaction_lock(store):
        _remove_stale_temp_packs(store)
        store.index.sync()
        store.refresh()
        _check_open_files(store)
        snapshot = _snapshot(store)
        ages = {p: now - _mtime(store, p) for p in snapshot}
        say(f"compact: reading {len(snapshot)} {plural(len(snapshot), 'file', 'files')}")
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
        taken, given = _moved(tape, by_session, snapshot, live, kept_records, cutoff, scan)
        written: dict[str, list[str]] = {}
        try:
            for n, (session, files) in enumerate(sorted(by_session.items()), 1):
                say(f"compact: packing session {n}/{len(by_session)}")
                if session not in taken and session not in given and _already_compact(files, dropped_in, scan.file_records, kept_ids):
                    continue
                pack = _write_pack(store, session, files, snapshot, ages, grace_s, live, kept_ids, open_streams, red,
                                   scan.session_gaps(session), taken.get(session), given.get(session, frozenset()))
                written[session] = [pack] if pack else []
        except BaseException:  # out of space, interrupted: the tape as it was
            _take_back(store, (p for packs in written.values() for p in packs), snapshot)
            raise
        # before any file goes: a look that finds the files gone may judge from rows that
        # never held the deletions dropped here (model/refs.py saw; Store._note_lost)
        store.index.note_expired(_expired_deletions(scan.records, kept_ids, written))
        removed = _freeze_and_swap(store, snapshot, written, scan, live, say)
        if red.places:
            _scrub_caches(tape)
            from .redact import scrub_quarantine

            report["scrubbed_quarantine"] = scrub_quarantine(store, red)
        if report["freed_objects"]:
            _forget_freed_in_search(tape)
        report["files_after"] = len(store.list_files(None))
        report["removed_files"] = removed
        return report


def _moved(tape, by_session: dict[str, list[str]], snapshot, live: set[bytes], kept: list[Rec], cutoff: Cutoff,
           scan) -> tuple[dict[str, dict[str, set[bytes]]], dict[str, frozenset]]:
    """The live objects removed sessions' files hold, moved to the packs of sessions that
    reach them (compact_reach._moves): (session -> file -> the objects its pack takes
    from that file, removed session -> the objects its pack leaves out)."""
    held: dict[str, dict[str, set[bytes]]] = {}  # removed session -> file -> its live objects
    gone: set[str] = set()  # every removed session: none takes objects over
    # (a removal sets HEAD to null: only the sessions with such a record are read whole)
    unset = {r.s for r in kept if (HEAD, None) in r.set}
    for name, files in by_session.items():
        if name not in unset or not NAME_RE.fullmatch(name) or not is_removed(tape.session(name).refs()):
            continue
        gone.add(name)
        for path in files:
            keys = {rec.body[:32] for rec in _records(tape.store, path, 0, snapshot[path]) if rec.type == framing.T_OBJECT} & live
            if keys:
                held.setdefault(name, {})[path] = keys
    if not held:
        return {}, {}
    moves = _moves({name: set().union(*by_file.values()) for name, by_file in held.items()}, kept, cutoff, scan.graph,
                   sorted(set(by_session) - gone))
    taken: dict[str, dict[str, set[bytes]]] = {}
    given: dict[str, set[bytes]] = {}
    for to, keys in moves.items():
        for name, by_file in held.items():
            for path, there in by_file.items():
                if there & keys:
                    taken.setdefault(to, {})[path] = there & keys
                    given.setdefault(name, set()).update(there & keys)
    return taken, {name: frozenset(keys) for name, keys in given.items()}


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


def _mtime(store: Store, path: str) -> float:
    st = os.stat(os.path.join(store.root, path), follow_symlinks=False)
    return max(st.st_mtime, st.st_ctime)
