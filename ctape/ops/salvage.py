"""fsck --salvage: keep what is intact of damaged files, and move the files aside.

For each data file of a session that holds damage (a record that fails its checks, a
block that does not decode, a ref or stream record that is malformed or names another
session, a pack whose bytes do not match its name), under the session's lock:

1. every record that still reads back (objects verified against their hash, ref and
   stream records that pass their checks) is written into a new pack of the session;
2. the damaged file is moved into `quarantine/<session>/` inside the tape, with a
   `<name>.salvage.json` report of what was lost beside it. Nothing there is read again
   (fsck lists the reports as warnings); nothing is deleted.

A file found shorter than this machine had read it (lost acknowledged bytes) keeps its
place (what is left of it is intact): the loss is written down in a report the same way
and no longer fails fsck. What a compaction left unfinished (`.tmp-pack-*`) is removed.
"""

from __future__ import annotations

import json
import os
import fcntl
from typing import TYPE_CHECKING, Optional

from ..history import reflog
from ..store import framing, packing
from .compact_locks import _compaction_lock, _remove_stale_temp_packs
from .compact_packs import PackWriter
from ..model.canonical import blob_refs, is_hash
from ..model.errors import CorruptObject, InvalidInput, StorageError
from ..store.files import TYPE_ENTRY, decompress_prefix, dict_decompressor, fsync_dir, open_for_reading, pread_all, second_name, storage_error
from ..model.refs import HEAD
from .maintenance import LEFT_IN_PLACE, PENDING, QUARANTINE, REPORT
from ..model.models import now_rfc3339, plural
from ..store.index import hash_key
from ..store.store import DEFAULT_MAX_OBJECT, Store, damaged_object_names, file_header_problem, pack_name_matches, record_problem, segment_writer

if TYPE_CHECKING:
    from ..history.tape import Tape

TEMP = ".tmp-"  # a report being written


def salvage(tape: "Tape") -> dict:
    """_salvage, then the redactions this machine knows that no file records any more are
    recorded again (`redactions`: session -> places; ops/redact.lost_redactions)."""
    from .redact import lost_redactions, record_again

    out = _salvage(tape)
    lost = lost_redactions(tape)
    if lost and not os.access(os.path.join(tape.store.root, "sessions"), os.W_OK):
        raise StorageError(f"cannot salvage: {tape.store.root} is read-only; nothing was changed (make it writable, or salvage a writable copy)")
    out["redactions"] = record_again(tape, lost) if lost else {}
    return out


def _salvage(tape: "Tape") -> dict:
    """Restartable at every instant: each damaged file's intact records go into a new pack
    (durable), then a pending report says what was lost and where the file goes (the
    intent, durable), then the file moves. The refs are settled and the report made final
    last. A run killed anywhere leaves either the damaged file (salvaged again) or a
    pending report, which the next run finishes."""
    store = tape.store
    if not os.access(store.root, os.W_OK) or not os.access(os.path.join(store.root, "sessions"), os.W_OK):
        # a clean tape needs no salvage: `fsck --salvage` of a read-only one only checks it
        store.refresh()
        if (_pending(store) or store.index.lost_rows() or _count_temp_packs(store)
                or any(rel.startswith("sessions/") and _problems(store, rel) for rel in store.list_files(None))):
            raise StorageError(f"cannot salvage: {store.root} is read-only; nothing was changed (make it writable, or salvage a writable copy)")
        return {"salvaged": [], "truncated": [], "refs": {}, "removed_temp_packs": 0}
    if store.max_object < DEFAULT_MAX_OBJECT:
        # salvage takes what it cannot read for lost: under a limit below the default, intact
        # records that claim more than it would go to quarantine with the file (an audit
        # found a `CTAPE_MAX_OBJECT=100`, meant as KiB, do that to a whole session)
        raise InvalidInput(f"cannot salvage under this limit: CTAPE_MAX_OBJECT ({store.max_object} bytes) is below the default "
                           f"({DEFAULT_MAX_OBJECT}), so intact records that claim more would be taken for damage; run it "
                           "without CTAPE_MAX_OBJECT (or with a higher one); nothing was changed")
    with _compaction_lock(store):
        temp = _count_temp_packs(store)
        _remove_stale_temp_packs(store)
        _remove_stale_temp_reports(store)
        for path, intent in _pending(store):
            _move(store, intent)  # a run killed after writing its intent: finish the move first
        store.refresh()
        # packs/ is read but never written: move a damaged file there out by hand
        damaged = [rel for rel in sorted(store.list_files(None)) if rel.startswith("sessions/") and _problems(store, rel)]
        # the objects the cache placed in each damaged file while it read whole: the records
        # that would name them may be what was lost
        known = {rel: store.index.object_keys_in(rel) for rel in damaged}
        if damaged:
            store._full_reindex()  # what the cache learned before the damage must not count as there
        for rel in damaged:
            _salvage_file(store, rel, known.get(rel, set()))
        noted = {intent["file"] for _, intent in _pending(store) if "quarantined" not in intent}
        for rel, expected, found in store.index.lost_rows():
            if rel not in noted:
                gone = not os.path.lexists(os.path.join(store.root, rel))
                how = "the file is gone" if gone else f"the file was cut from {expected} to {found} bytes"
                # the values it held that no file holds now (noted with the loss), named by key:
                # entries of other sessions that refer to one read it as lost
                keys = sorted(k for k in store.index.lost_keys(rel) if not store.index.has_key(k))
                _write_intent(store, rel, {"lost": f"{expected - found} bytes of acknowledged records lost ({how})",
                                           "kept_at": LEFT_IN_PLACE, "missing": [], "missing_keys": keys})
            store.index.clear_lost(rel)
        pending = _pending(store)
        if not pending:
            return {"salvaged": [], "truncated": [], "refs": {}, "removed_temp_packs": temp}
        store._full_reindex()
        refs = {}
        for session in sorted({intent["file"].split("/")[1] for _, intent in pending}):
            # records of this writer may be among those lost: its next record here says so
            # (`gap`), or a copy that still has them would take them for replaced by it
            store.index.forget_vouched(session)
            kept = {h: p for _, i in pending if i["file"].split("/")[1] == session for h, p in i.get("entries", {}).items()}
            changes = _settle_refs(tape, session, kept)
            if changes:
                refs[session] = changes
        for path, _ in pending:
            os.rename(path, path[: -len(PENDING)] + REPORT)  # the report is final: salvage is done
            fsync_dir(os.path.dirname(path))
        intents = [i for _, i in pending]
        salvaged = [{k: i.get(k, 0) for k in ("file", "kept_records", "recovered", "pack", "quarantined", "missing")} for i in intents if "quarantined" in i]
        return {"salvaged": salvaged, "truncated": [i["file"] for i in intents if "quarantined" not in i], "refs": refs, "removed_temp_packs": temp}


def _settle_refs(tape: "Tape", session: str, kept: dict) -> dict:
    """After salvage HEAD stands on intact history (docs/format.md section 15): each tip of
    the session's intact entries that no ref reaches gets a branch `salvaged-<hash8>` (those
    kept from the damaged files, and those of intact files whose history went on in a lost
    entry: `main` stops at the loss, and the older side was on no ref, for `compact` to free);
    HEAD, when its claim was lost or names what is gone, attaches to main, else to the
    branch with the deepest tip. A branch whose tip was lost here is left as it is: the
    salvage's ref record travels to every copy, and on one that holds the tip intact (an
    rsync copy, a clone) removing the branch would leave an acknowledged entry on no ref
    (compact then freed it). Here its history stops at the loss, as the report says."""
    s = tape.session(session)
    st = s.refs()
    branches = {b: h for b, h in st.branches.items() if tape.has_entry(h)}
    changes: dict = {}
    head = st.head_hash if st.head_hash and tape.has_entry(st.head_hash) else None
    reached: set[str] = set()
    for h in [*branches.values(), head]:
        while h and h not in reached and tape.has_entry(h):
            reached.add(h)
            h = tape.read_entry(h).parent
    # each record's move, from the value before it; the ref log of a removed session too
    # (`reflog()` refuses one: its removal's record is what says its tips were left)
    moves = [(line["old"], line["new"]) for line in reflog.replay(s)[0]]
    for h in sorted(_cut_off(tape, {**_read_session(tape.store, session)[1], **kept}, reached, moves, branches)):
        branches[f"salvaged-{h[:8]}"] = changes[f"salvaged-{h[:8]}"] = h
    if head is None and branches:
        def depth(b):
            e = tape.read_entry(branches[b])
            return (e.seq, e.time, b)
        changes[HEAD] = "@" + ("main" if "main" in branches else max(branches, key=depth))
    if changes:
        s.set_refs("salvage", changes)
    return changes


def _cut_off(tape: "Tape", intact: dict, reached: set, moves: list, branches: dict) -> set:
    """The tips of what the loss cut off: the session's intact entries (entry -> parent)
    that no ref reaches now, less what was on no ref before the damage either. That is
    peeled from the leaves: a leaf every ref move away from which (in the ref log) deleted
    the ref, went to an entry that does not descend from it (an undo or a
    `pop_item`, a reset, HEAD checked out away from a detached entry), or went to a
    descendant peeled already, was left on purpose, and its parent is judged next once
    all its children are. A move whose target cannot be walked back past the leaf's depth
    (the walk meets the loss) may have gone forward through the loss, and a leaf no record
    moved away from tells nothing: such a leaf is cut off and gets a branch. Salvage then
    keeps what the damage cut off, not every undo of an agent's life."""
    unreached = {h for h in intact if h not in reached and tape.has_entry(h)}
    children: dict[str, int] = {}
    for h, parent in intact.items():
        if parent is not None and tape.has_entry(h):
            children[parent] = children.get(parent, 0) + 1
    away: dict[str, list] = {}
    for old, new in moves:
        if old in unreached:
            away.setdefault(old, []).append(new)
    peeled: set[str] = set()
    cut: set[str] = set()
    todo = [h for h in unreached if not children.get(h)]
    while todo:
        h = todo.pop()
        if not _left(tape, h, away.get(h, ()), branches, peeled):
            cut.add(h)
            continue
        peeled.add(h)
        parent = intact.get(h)
        if parent in unreached:
            children[parent] -= 1
            if not children[parent]:
                todo.append(parent)
    return cut


def _left(tape: "Tape", h: str, news: list, branches: dict, peeled: set) -> bool:
    """Whether entry h was on no ref before the damage, by the moves away from it."""
    if not news:
        return False
    for new in news:
        if new is None:
            continue  # the ref deleted there
        target = branches.get(new[1:]) if isinstance(new, str) and new.startswith("@") else new
        if target is None:
            return False  # HEAD attached to a branch this copy no longer has: no telling
        if target in peeled:
            continue  # forward, onto what was left on purpose
        if _descends(tape, target, h) is not False:
            return False  # forward (or maybe, through the loss)
    return True


def _descends(tape: "Tape", h: Optional[str], ancestor: str) -> Optional[bool]:
    """Whether entry `h` has `ancestor` in its history; None when the walk meets an entry
    this tape does not hold before it can tell."""
    depth = tape.read_entry(ancestor).seq
    while isinstance(h, str) and is_hash(h):
        if h == ancestor:
            return True
        if not tape.has_entry(h):
            return None
        e = tape.read_entry(h)
        if e.seq <= depth:
            return False
        h = e.parent
    return None if h is not None else False


def _count_temp_packs(store: Store) -> int:
    n = 0
    for s in store.sessions():
        try:
            n += sum(1 for name in os.listdir(store.session_dir(s)) if name.startswith(".tmp-pack-"))
        except OSError:
            pass
    return n


def _problems(store: Store, rel: str) -> list[str]:
    """Why a data file needs salvage (empty: it does not). A torn tail of a segment is
    not damage: it is an unfinished write, which readers skip."""
    session = rel.split("/")[1]
    is_pack = rel.endswith(".pack")
    reasons = []
    try:
        if is_pack:
            with open(os.path.join(store.root, rel), "rb") as f:
                if not pack_name_matches(rel, f.read()):
                    reasons.append("the pack's bytes do not match its name")
        items = list(store.scan_file(rel))
    except FileNotFoundError:
        return []  # compacted away meanwhile
    if _header_problem(rel, items):
        reasons.append(f"{_header_problem(rel, items)}: its ref and stream records are not used")
    for i, item in enumerate(items):
        if isinstance(item, framing.Damage):
            if item.torn and i == len(items) - 1 and not is_pack:
                continue
            reasons.append(f"offset {item.offset}: {item.reason}")
        elif item.type == framing.T_OBJECT:
            try:
                store.decode_object(item.body[:32].hex(), item.body)
            except CorruptObject as e:
                reasons.append(f"offset {item.offset}: {str(e).split(';')[0]}")
        elif item.type in (framing.T_REF, framing.T_PARTIAL):
            why = record_problem(item.type, item.body, session, segment_writer(rel))
            if isinstance(why, str):
                reasons.append(f"offset {item.offset}: record {why}")
    return reasons


def _header_problem(rel: str, items: list) -> "str | None":
    """A file that does not start with its own header (another session's or writer's, or
    none) is damage: the objects in it still prove themselves by their names, but its ref
    and stream records could move refs it has no business moving."""
    first = items[0] if items else None
    if isinstance(first, framing.Damage) and first.torn:
        return None
    return file_header_problem(rel, first)


def _salvage_file(store: Store, rel: str, known: set[int]) -> dict:
    """`known`: the keys of the objects the index placed in the file before the damage."""
    session = rel.split("/")[1]
    fd = os.open(store.session_dir(session), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # no write is under way while the file is read and moved
        reasons = _problems(store, rel)
        if not reasons:
            return {}
        kept = 0
        links: dict[str, list[str]] = {}  # what each kept entry or record refers to
        entries: dict[str, Optional[str]] = {}  # kept entry -> its parent
        try:
            pw = PackWriter(store, session, store.index.gaps(session))  # a damaged pack's header held some of them
        except OSError as e:
            raise storage_error(e, f"a pack of session {session}", after="salvage moved nothing") from None
        records_ok = not _header_problem(rel, list(store.scan_file(rel, 0, 4096)))
        candidates: list[bytes] = []  # objects read from the readable start of damaged blocks
        others = _referred_by_others(store, session, rel)
        try:
            for item in store.scan_file(rel):
                if isinstance(item, framing.Damage) and not item.torn:
                    candidates += _readable_objects(store, rel, item.offset)
                if not isinstance(item, framing.Record) or item.type in (framing.T_HEADER, framing.T_DICT):
                    continue
                if item.type == framing.T_OBJECT:
                    before = pw.count
                    pw.add_object(item.body)  # verified there: an object that does not read back is left out
                    if pw.count > before:
                        kept += 1
                        known.discard(hash_key(item.body[:32].hex()))
                        _note_entry(store, item.body, links, entries)
                elif item.type in (framing.T_REF, framing.T_PARTIAL) and records_ok:
                    rec = record_problem(item.type, item.body, session, segment_writer(rel))
                    if not isinstance(rec, str):
                        pw.add_record(item.type, item.body)
                        kept += 1
                        values = rec.get("set", {}).values() if item.type == framing.T_REF else [rec.get("base")]
                        links[f"record {rec.get('w')}#{rec.get('n')}"] = [v for v in values if isinstance(v, str) and is_hash(v)]
            recovered = _keep_vouched(store, pw, candidates, known, others, links, entries)
            kept += recovered
            where = _free_name(store, session, rel.split("/")[2])
            pack = pw.finish(before_rename=lambda new: _keep_before_replaced(store, rel, new, where))
        except OSError as e:
            pw.abort()
            raise storage_error(e, f"a pack of session {session}", after="salvage moved nothing") from None
        except BaseException:
            pw.abort()
            raise
        gone = {h for refs in links.values() for h in refs} | damaged_object_names(store.root, rel)
        # and what the session's other files refer to that no file holds: a pack damaged
        # before this copy's index read it names nothing it held (its block does not decode),
        # and the entries after it (in a segment) refer into it; unnamed, fsck, status and
        # every clone read those as "not arrived yet: run rsync again" (found by an audit)
        gone |= others
        missing = sorted(h for h in gone if not store.has_object(h))
        lost = f"{len(reasons)} damaged {plural(len(reasons), 'place', 'places')}: " + "; ".join(reasons[:5]) + (" ..." if len(reasons) > 5 else "")
        # objects the damaged records held whose names they no longer say (a block that
        # does not decode), by the index's keys: reads take a value of one as lost, in
        # every session that refers to it (a value is stored once per tape)
        named = {hash_key(h) for h in missing}
        missing_keys = sorted(k for k in known if k not in named and not store.index.has_key(k))
        intent = _write_intent(store, rel, {"lost": lost, "kept_at": where, "quarantined": where, "kept_records": kept, "pack": pack,
                                            "problems": reasons, "missing": missing, "missing_keys": missing_keys, "entries": entries,
                                            "recovered": recovered})
        _move(store, intent)
        return intent
    finally:
        os.close(fd)


def _keep_before_replaced(store: Store, rel: str, new: str, where: str) -> None:
    """The salvaged pack is about to take the damaged file's own name: a pack whose records
    all read back, with bytes added after them or changed outside them, is written again
    as the very pack its name says. The damaged file then goes to quarantine first, by a
    second name (a hard link), so at no instant is the name empty and the damaged bytes
    are kept; the move that follows finds it there (found by an audit: the move took the
    new pack to quarantine, and the session was left with no entries)."""
    if new != rel:
        return
    src, dst = os.path.join(store.root, rel), os.path.join(store.root, where)
    try:
        if not second_name(src, dst):  # a copy where the file system has no hard links
            return
    except OSError as e:
        raise storage_error(e, "quarantine", after="salvage moved nothing") from None
    fsync_dir(os.path.dirname(dst))


def _readable_objects(store: Store, rel: str, offset: int) -> list[bytes]:
    """The objects that decode from the start of a damaged block record at `offset` (its
    header intact, its body not): one flipped byte in a pack's 2 MiB block lost all of it,
    though zstd gives back the inner blocks before the damage whole. Candidates only:
    _keep_vouched decides which are kept."""
    fd = open_for_reading(os.path.join(store.root, rel))
    try:
        type_, body, _ = _record_at(fd, offset)
        dctx = None
        if type_ == framing.T_DICT_BLOCK:
            distance, body = packing.split_dict_block(body)
            dict_type, content, whole = _record_at(fd, offset - distance) if 0 < distance <= offset else (None, b"", False)
            if dict_type != framing.T_DICT or not whole:
                return []
            dctx = dict_decompressor(store.decompress(content, f"dictionary at offset {offset - distance} of {rel}"))
        elif type_ != framing.T_BLOCK:
            return []
    except (OSError, CorruptObject):
        return []
    finally:
        os.close(fd)
    raw = decompress_prefix(body, store.max_object, dctx)
    return [rec.body for rec in packing.objects_before_damage(raw)]


def _record_at(fd: int, offset: int) -> tuple[Optional[int], bytes, bool]:
    """(type, body, whether its checksum holds) of the record whose header is at `offset`;
    (None, b"", False) where no header is."""
    head = pread_all(fd, framing.HEADER_SIZE, offset)
    parsed = framing.parse_header(head) if len(head) == framing.HEADER_SIZE else None
    if parsed is None:
        return None, b"", False
    rest = pread_all(fd, parsed[1] + framing.TRAILER_SIZE, offset + framing.HEADER_SIZE)
    return parsed[0], rest[: parsed[1]], isinstance(next(framing.scan(head + rest), None), framing.Record)


def _keep_vouched(store: Store, pw: PackWriter, candidates: list[bytes], keys: set[int], others: set[str],
                  links: dict, entries: dict) -> int:
    """Keep the candidates whose names something intact vouches for, and count them. A
    damaged block's bytes may decode to other bytes without an error, and inside a block
    names are computed, not stored: an object the damage changed comes out under a name of
    its own, which nothing intact names. Vouching: the keys this machine's index read in
    the file while it was whole (`keys`), the hashes the kept records and the session's
    other files refer to (`others`), and, in turn, the parents and values of each entry
    kept here. Anything else is left out: a made-up entry would be history never written."""
    vouched = {h for refs in links.values() for h in refs} | others
    kept, waiting = 0, candidates
    while waiting:
        later = []
        for body in waiting:
            h = body[:32].hex()
            if h not in vouched and hash_key(h) not in keys:
                later.append(body)
                continue
            before = pw.count
            pw.add_object(body)
            if pw.count > before:
                kept += 1
                keys.discard(hash_key(h))
                _note_entry(store, body, links, entries)
                vouched.update(links.get(f"entry {h}", ()))
        if len(later) == len(waiting):
            break
        waiting = later
    return kept


def _referred_by_others(store: Store, session: str, rel: str) -> set[str]:
    """The objects that the entries and ref records of the session's other files refer to."""
    links, _ = _read_session(store, session, skip=rel)
    return {h for refs in links.values() for h in refs}


def _read_session(store: Store, session: str, skip: Optional[str] = None) -> tuple[dict, dict]:
    """(what each entry and ref record of the session's files refers to, each entry's
    parent), from every file of the session but `skip`."""
    links: dict[str, list[str]] = {}
    entries: dict[str, Optional[str]] = {}
    for other in sorted(store.list_files(session)):
        if other == skip or not other.startswith(f"sessions/{session}/"):
            continue
        try:
            for item in store.scan_file(other):
                if not isinstance(item, framing.Record):
                    continue
                if item.type == framing.T_OBJECT and len(item.body) > 33:
                    _note_entry(store, item.body, links, entries)
                elif item.type == framing.T_REF:
                    rec = record_problem(item.type, item.body, session, segment_writer(other))
                    if not isinstance(rec, str):
                        values = (rec.get("set") or {}).values()
                        links[f"record {other}@{item.offset}"] = [v for v in values if isinstance(v, str) and is_hash(v)]
        except (OSError, CorruptObject):
            continue  # damaged or gone too: its own salvage names what it held
    return links, entries


def _note_entry(store: Store, body: bytes, links: dict, entries: dict) -> None:
    """Remember what a kept entry refers to: its parent and its values."""
    if body[32] != TYPE_ENTRY:
        return
    h = body[:32].hex()
    try:
        raw = json.loads(store.decode_object(h, body)[1])
        refs = blob_refs([raw.get("payload"), raw.get("meta"), raw.get("delta")], [])
    except (CorruptObject, ValueError, AttributeError):
        return
    parent = raw.get("parent") if isinstance(raw.get("parent"), str) else None
    entries[h] = parent
    links[f"entry {h}"] = refs + ([parent] if parent else [])


def _quarantine_dir(store: Store, session: str) -> str:
    """quarantine/<session>/, each folder made 0700 (transcripts hold secrets) and durable."""
    qdir = os.path.join(store.root, QUARANTINE)
    for d in (qdir, os.path.join(qdir, session)):
        try:
            os.mkdir(d, 0o700)
            fsync_dir(os.path.dirname(d))
        except FileExistsError:
            pass
    return os.path.join(qdir, session)


def _free_name(store: Store, session: str, name: str) -> str:
    """Where a damaged file goes: its name and this copy's writer id, or that with .N when
    it was salvaged here before (an rsync brought it back) or another salvage's pending
    report claims it. The writer id keeps two copies that each salvaged the same file
    apart: rsync put one's report (and damaged file) over the other's."""
    qdir = _quarantine_dir(store, session)
    base = f"{name}.{store.writer}"
    target, n = base, 1
    while any(os.path.lexists(os.path.join(qdir, target + end)) for end in ("", REPORT, PENDING)):
        n += 1
        target = f"{base}.{n}"
    return os.path.relpath(os.path.join(qdir, target), store.root)


def _write_intent(store: Store, rel: str, body: dict) -> dict:
    """The report, written whole (a temporary name, fsync, rename, folder fsync) before
    anything moves: `<kept_at>.salvage.pending` until salvage is done, then `.salvage.json`."""
    body = {"file": rel, "time": now_rfc3339(), "copy": store.writer, **body}
    session = rel.split("/")[1]
    qdir = _quarantine_dir(store, session)
    base = body.get("quarantined") or _free_name(store, session, rel.split("/")[2])
    path = os.path.join(store.root, base + PENDING)
    tmp = os.path.join(qdir, TEMP + os.path.basename(path))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, (json.dumps(body, ensure_ascii=False, sort_keys=True) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
        fsync_dir(qdir)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise storage_error(e, "the salvage report", after="salvage moved nothing") from None
    return body


def _move(store: Store, intent: dict) -> None:
    """Move a damaged file to where its report says, unless it is there already."""
    if "quarantined" not in intent:
        return  # a cut file keeps its place
    src, dst = os.path.join(store.root, intent["file"]), os.path.join(store.root, intent["quarantined"])
    if os.path.lexists(dst) or not os.path.lexists(src):
        return
    try:
        os.rename(src, dst)
        fsync_dir(os.path.dirname(dst))
        fsync_dir(os.path.dirname(src))
    except OSError as e:
        raise storage_error(e, "quarantine") from None


def _pending(store: Store) -> list[tuple[str, dict]]:
    """The reports of a salvage not finished yet (path, report), oldest first."""
    out = []
    base = os.path.join(store.root, QUARANTINE)
    for session in sorted(_listdir(base)):
        for name in sorted(_listdir(os.path.join(base, session))):
            if name.endswith(PENDING) and not name.startswith(TEMP):
                path = os.path.join(base, session, name)
                with open(path, "rb") as f:  # written whole (renamed into place)
                    out.append((path, json.loads(f.read())))
    return sorted(out, key=lambda p: p[1]["time"])


def _remove_stale_temp_reports(store: Store) -> None:
    base = os.path.join(store.root, QUARANTINE)
    for session in _listdir(base):
        for name in _listdir(os.path.join(base, session)):
            if name.startswith(TEMP):
                os.unlink(os.path.join(base, session, name))


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []
