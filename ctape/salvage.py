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

from . import framing
from .compact import PackWriter, _compaction_lock, _remove_stale_temp_packs
from .canonical import blob_refs, is_hash
from .errors import CorruptObject, StorageError
from .files import TYPE_ENTRY, fsync_dir, storage_error
from .maintenance import QUARANTINE
from .models import now_rfc3339
from .store import Store, pack_name_matches, record_problem

if TYPE_CHECKING:
    from .tape import Tape


def salvage(tape: "Tape") -> dict:
    store = tape.store
    if not os.access(store.root, os.W_OK) or not os.access(os.path.join(store.root, "sessions"), os.W_OK):
        raise StorageError(f"cannot salvage: {store.root} is read-only; nothing was changed (make it writable, or salvage a writable copy)")
    with _compaction_lock(store):
        temp = _count_temp_packs(store)
        _remove_stale_temp_packs(store)
        store.refresh()
        salvaged, lost = [], []
        for rel in sorted(store.list_files(None)):
            if not rel.startswith("sessions/"):
                continue  # packs/ is read but never written: move a damaged file there out by hand
            if _problems(store, rel):
                done = _salvage_file(store, rel)
                if done:
                    salvaged.append(done)
        for rel, expected, found in store.index.lost_rows():
            store.index.clear_lost(rel)
            lost.append({"file": rel, "lost": f"{expected - found} bytes of acknowledged records lost (the file was cut from {expected} to {found} bytes)",
                         "kept_at": "(left in place: what remains is intact)", "links": {}})
        if not (salvaged or lost):
            return {"salvaged": [], "truncated": [], "removed_temp_packs": temp}
        store._full_reindex()
        for done in salvaged + lost:
            missing = sorted({h for refs in done.pop("links").values() for h in refs if not store.has_object(h)})
            _write_report(store, done["file"], done.pop("lost"), done["kept_at"], missing=missing, **{k: v for k, v in done.items() if k in ("kept_records", "pack")})
            done["missing"] = missing
        for session in sorted({d["file"].split("/")[1] for d in salvaged + lost}):
            _keep_orphans(tape, session, [d for d in salvaged if d["file"].split("/")[1] == session])
        return {"salvaged": salvaged, "truncated": [d["file"] for d in lost], "removed_temp_packs": temp}


def _keep_orphans(tape: "Tape", session: str, done: list[dict]) -> None:
    """Entries kept from a damaged file whose child was lost reach no branch any more
    (their chain broke at the damage): each such tip gets a branch `salvaged-<hash8>`, so
    that they are listed and no compaction removes them."""
    kept = {h: parent for d in done for h, parent in d.pop("entries").items()}
    if not kept:
        return
    s = tape.session(session)
    refs = s.refs()
    reached: set[str] = set()
    for h in list(refs.branches.values()) + ([refs.head_hash] if refs.head_hash else []):
        while h and h not in reached and tape.has_entry(h):
            reached.add(h)
            h = tape.read_entry(h).parent
    parents = set(kept.values())
    tips = sorted(h for h in kept if h not in parents and h not in reached)
    changes = {}
    for h in tips:
        if tape.has_entry(h):
            changes[f"salvaged-{h[:8]}"] = h
    if changes:
        s.set_refs("salvage", changes)


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
            why = record_problem(item.type, item.body, session)
            if isinstance(why, str):
                reasons.append(f"offset {item.offset}: record {why}")
    return reasons


def _salvage_file(store: Store, rel: str) -> dict:
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
        pw = PackWriter(store, session)
        try:
            for item in store.scan_file(rel):
                if not isinstance(item, framing.Record) or item.type in (framing.T_HEADER, framing.T_DICT):
                    continue
                if item.type == framing.T_OBJECT:
                    before = pw.count
                    pw.add_object(item.body)  # verified there: an object that does not read back is left out
                    if pw.count > before:
                        kept += 1
                        _note_entry(store, item.body, links, entries)
                elif item.type in (framing.T_REF, framing.T_PARTIAL):
                    rec = record_problem(item.type, item.body, session)
                    if not isinstance(rec, str):
                        pw.add_record(item.type, item.body)
                        kept += 1
                        values = rec.get("set", {}).values() if item.type == framing.T_REF else [rec.get("base")]
                        links[f"record {rec.get('w')}#{rec.get('n')}"] = [v for v in values if isinstance(v, str) and is_hash(v)]
            pack = pw.finish()
        except OSError as e:
            pw.abort()
            raise storage_error(e, "salvage") from None
        except BaseException:
            pw.abort()
            raise
        where = _quarantine(store, rel)
        lost = f"{len(reasons)} damaged place(s): " + "; ".join(reasons[:5]) + (" ..." if len(reasons) > 5 else "")
        return {"file": rel, "kept_records": kept, "pack": pack, "quarantined": where, "kept_at": where, "problems": reasons,
                "lost": lost, "links": links, "entries": entries}
    finally:
        os.close(fd)


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


def _quarantine(store: Store, rel: str) -> str:
    session, name = rel.split("/")[1], rel.split("/")[2]
    qdir = os.path.join(store.root, QUARANTINE, session)
    try:
        os.makedirs(qdir, mode=0o700, exist_ok=True)
        fsync_dir(os.path.join(store.root, QUARANTINE))
        fsync_dir(store.root)
        target, n = os.path.join(qdir, name), 1
        while os.path.lexists(target):  # the same name salvaged before (an rsync brought it back)
            n += 1
            target = os.path.join(qdir, f"{name}.{n}")
        os.rename(os.path.join(store.root, rel), target)
        fsync_dir(qdir)
        fsync_dir(store.session_dir(session))
    except OSError as e:
        raise storage_error(e, "quarantine") from None
    return os.path.relpath(target, store.root)


def _write_report(store: Store, rel: str, lost: str, kept_at: str, **extra) -> None:
    session, name = rel.split("/")[1], rel.split("/")[-1]
    qdir = os.path.join(store.root, QUARANTINE, session)
    body = {"file": rel, "time": now_rfc3339(), "lost": lost, "kept_at": kept_at, **extra}
    try:
        os.makedirs(qdir, mode=0o700, exist_ok=True)
        path, n = os.path.join(qdir, f"{name}.salvage.json"), 1
        while os.path.lexists(path):
            n += 1
            path = os.path.join(qdir, f"{name}.{n}.salvage.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, (json.dumps(body, ensure_ascii=False, sort_keys=True) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(qdir)
    except OSError as e:
        raise storage_error(e, "salvage report") from None
