"""Keeping the index up to date with the files: the part of the Store (store.py inherits
this class) that notices the files that are new, grew, shrank or went, rebuilds the index
when another process changed them under it (a compaction), notes the acknowledged records
that were lost, and turns a file's records into index rows.
"""

from __future__ import annotations

import json
import os
import stat
import re
from typing import Callable, Optional, TypeVar

from . import framing
from ..model import refs as refmod
from ..model.canonical import blob_refs, is_hash
from ..model.errors import CorruptObject, ObjectTooLarge, StorageError, UnsafePath
from .files import TYPE_ENTRY, open_for_reading, pread_all
from .index import IndexBatch, IndexDegraded, hash_key
from ..model.schema import header_gaps, object_record_problem
from .records import REBUILD_TRIES, TYPE_WITHHELD, Source, _damage_level, file_header_problem, pack_name_matches, record_problem, segment_writer

SETTLE_TRIES = 20  # refreshes before a session's refs are read from an index no rebuild replaced meanwhile (Store.settled)
T = TypeVar("T")


class Freshness:
    """The Store's index kept up to date with its files (a part of Store)."""

    _all_settled = False  # inside settled_all: the whole tape was refreshed just before

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
        refresh done again; rebuilds follow compactions, so this ends. Inside settled_all,
        `read()` alone: the whole tape was refreshed, and settled_all checks the rebuilds."""
        if self._all_settled:
            return read()
        for _ in range(SETTLE_TRIES):
            before = self.index.rebuilds()
            self.refresh(session)
            out = read()
            if self.index.rebuilds() == before:
                return out
        raise StorageError(f"session {session!r}: the index cache was rebuilt by another process at each of {SETTLE_TRIES} reads; "
                           "retry when the compactions beside this command are done")

    def settled_all(self, read: Callable[[], T]) -> T:
        """settled() for a reader of every session at once (`sessions`, `usage`, the web's
        list): one refresh of the whole tape instead of one a session, and the same check
        that no rebuild came between it and the rows `read()` took; the settled() calls
        inside `read()` only read. Each session is as it was at the refresh, as each was at
        its own refresh before. For readers only, within one turn of the Tape (turns.py):
        a writer reloads its session's files before it builds on them."""
        with self._lock:  # (the flag is the Store's: no other thread reads meanwhile)
            if self._all_settled:
                return read()
            for _ in range(SETTLE_TRIES):
                before = self.index.rebuilds()
                self.refresh()
                self._all_settled = True
                try:
                    out = read()
                finally:
                    self._all_settled = False
                if self.index.rebuilds() == before:
                    return out
        raise StorageError(f"the index cache was rebuilt by another process at each of {SETTLE_TRIES} reads; "
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
            # the objects they held past what is left, for those judged lost (_note_lost)
            held = {p: self.index.object_keys_in(p) for p in gone}
            held.update((p, self.index.object_keys_from(p, found)) for p, _, found in shrunk)
            settled = self._full_reindex()
            self._note_lost(shrunk, gone if settled else {}, before, held)
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
        """The size of a data file now; None when it is gone, or something else stands under
        its name (a folder made there read as a file of 4,096 bytes, nothing lost: found by
        an audit, and `compact` then forgot the loss for good)."""
        try:
            st = os.stat(os.path.join(self.root, rel), follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def _note_lost(self, shrunk: list[tuple[str, int, int]], gone: dict[str, int], before: dict[str, list[tuple]],
                   held: Optional[dict[str, set]] = None) -> None:
        """After a rebuild: which of the files found shorter than this machine had read them,
        or gone, lost acknowledged records. A file is only ever appended to, so a shorter
        one lost what it held past its length, unless a later segment repeats it from there
        (`repeated`: a copy taken during a write came back). Files that go are fine while
        every claim on a ref this machine had read still stands or was superseded (another
        copy compacted them, and `rsync --delete` brought its pack); a claim that vanished
        unseen took the entries it held with it: the session's files that went are lost.
        `held`: the objects each file held (past what is left of it), of which those no file
        holds now are noted with the loss: a value stored once per tape may be referred to by
        other sessions, which read it as lost once salvage has reported it (found by an
        audit: they failed as "not synced yet" for good)."""
        floors = self.index.floors()
        held = held or {}
        for path, indexed, found in shrunk:
            if found < floors.get(path, indexed):
                self.index.note_lost(path, indexed, found)
                self.index.note_lost_keys(path, held.get(path, ()))
        for session, old in before.items():
            gaps = self.index.gaps(session)
            now = refmod.from_rows(self.index.claims(session), 0, {}, gaps).claims
            was = refmod.from_rows(old, 0, {}, gaps).claims
            dropped = _deleted_refs(was, now)
            # deletions a compaction with this cache dropped, with what they had read: `old`
            # may never have held them (a writer's queued rows, a rebuild from an older listing)
            expired = refmod.from_rows(self.index.expired(session), 0, {}, gaps).claims
            # a claim that is still there, or that one there had read (superseded: model/refs.py)
            vanished = any(not any((o.w, o.n) == (c.w, c.n) or refmod.saw(o, c) for o in now.get(ref, {}).values())
                           and not any(refmod.saw(o, c) for o in expired.get(ref, {}).values())
                           for ref, cs in was.items() if ref not in dropped for c in cs.values())
            # a claim that stands and names an entry only a gone file held: its claims were
            # superseded, but what a later record points at went with it (found by an audit:
            # "not arrived yet" for good, and salvage found nothing to do)
            mine = {path: indexed for path, indexed in gone.items() if path.startswith(f"sessions/{session}/")}
            missing = {k for path in mine for k in held.get(path, ()) if not self.index.has_key(k)}
            if vanished or (missing and self._refers_to(session, missing)):
                for path, indexed in mine.items():
                    self.index.note_lost(path, indexed, 0)
                    self.index.note_lost_keys(path, held.get(path, ()))

    def _refers_to(self, session: str, keys: set) -> bool:
        """Does a record left in the session's files name an object of `keys` (a ref's
        value, an entry's parent, a value an entry refers to) that no file holds? A file
        whose claims later records superseded can still hold the entries they point at, or
        their ancestors: gone, those are lost data, not "not arrived yet" for good (found by
        an audit). `keys` were judged missing by the index the rebuild made from its listing,
        and the files are read later: a writer may have written a value again since, with an
        entry that refers to it, in a file that listing lacked (found by a real-process race:
        a false loss, and the writer refused every append). So the objects named are looked
        for again once the files are read, after the index takes in what they gained."""
        named = set()
        for rel in self.list_files(session):
            try:
                for item in self.scan_file(rel):
                    if not isinstance(item, framing.Record):
                        continue
                    if item.type == framing.T_OBJECT and len(item.body) > 32 and item.body[32] == TYPE_ENTRY:
                        raw = json.loads(self.decode_object(item.body[:32].hex(), item.body)[1])
                        names = blob_refs([raw.get("payload"), raw.get("meta"), raw.get("delta")], [raw.get("parent")])
                    elif item.type == framing.T_REF:
                        names = list((json.loads(item.body).get("set") or {}).values())
                    else:
                        continue
                    named.update(k for k in (hash_key(h) for h in names if isinstance(h, str) and is_hash(h)) if k in keys)
            except (OSError, CorruptObject, ValueError, AttributeError):
                continue  # damaged or gone too: its own loss is judged apart
        if not named:
            return False
        try:
            self._index_grown(self.list_files(None), self.index.file_rows())
        except (OSError, StorageError, CorruptObject):
            # a file that cannot be read now: judged by the rebuild's rows, as before. The
            # loss must be noted now or never (the gone file's rows are gone with the rebuild)
            pass
        return any(not self.index.has_key(k) for k in named)

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
