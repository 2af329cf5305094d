"""Whole-tape checks and figures: fsck and stats. Both read every file."""

from __future__ import annotations

import json
import re
import os
import stat
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from ..store import framing
from ..model.canonical import blob_refs
from ..model.errors import NOATIME_WARNING, CorruptObject, ObjectTooLarge, UnsafePath
from ..store.files import PACKS_ADVICE, TYPE_ENTRY
from ..model.models import NAME_RE, plural
from ..model.schema import decode_entry
from ..store.index import hash_key
from ..store.records import cut_cause
from ..store.store import LOST_VALUE, PENDING, QUARANTINE, REPORT, REPORT_MAX, TYPE_WITHHELD, damaged_object_names, file_header_problem, record_problem, retried, segment_writer

LEFT_IN_PLACE = "(left in place: what remains is intact)"  # a salvage report's kept_at for a file cut short (salvage.py)

if TYPE_CHECKING:
    from ..history.tape import Tape




def walk_files(tape: "Tape") -> Iterator[tuple[str, os.stat_result]]:
    """Every path under the tape directory (relative), without following symlinks, except
    what is inside quarantine/."""
    root = tape.store.root
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if dirpath == root and QUARANTINE in dirnames:
            dirnames.remove(QUARANTINE)
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            yield os.path.relpath(full, root), os.lstat(full)


def stray(rel: str, st: os.stat_result) -> Optional[str]:
    """Why a path is not part of the tape's layout (docs/format.md section 1), or None.
    Stray paths are reported as warnings and do not stop any command."""
    parts = rel.split("/")
    if len(parts) == 1:
        ok = rel in ("ctape.json", "sessions", "packs")
    elif parts[0] == "packs":
        ok = len(parts) == 2 and parts[1].endswith(".pack") and stat.S_ISREG(st.st_mode)
    elif parts[0] == "sessions":
        if len(parts) == 2:
            ok = stat.S_ISDIR(st.st_mode) and bool(NAME_RE.fullmatch(parts[1])) and not parts[1].endswith(".lock")
        else:
            ok = len(parts) == 3 and stat.S_ISREG(st.st_mode) and parts[2].endswith((".seg", ".pack"))
    else:
        ok = False
    if ok:
        return None
    if parts[-1].startswith(".tmp-seg-"):
        return "a segment left unnamed by a writer that was killed while making it (nothing acknowledged is in it): remove it"
    if parts[-1].startswith(".tmp-pack-"):
        return "a pack left unfinished by a compaction that was killed: `ctape compact` or `ctape fsck --salvage` removes it"
    return "not part of a tape (ctape ignores it); move it out of the tape directory"


def fsck(tape: "Tape") -> dict:
    """Verify everything. Problems make `ok` false (exit 1); warnings do not."""
    return _while_files_go(_fsck, tape)


def _while_files_go(read_all: Callable[["Tape"], dict], tape: "Tape") -> dict:
    """read_all(tape), again while a file it listed is gone when it reads it: a compaction
    in another process swapped its pack in meanwhile, and the files read would lack what
    the removed ones held (objects taken for missing)."""
    return retried(lambda: read_all(tape), FileNotFoundError)


def _fsck(tape: "Tape") -> dict:
    store = tape.store
    problems: list[dict] = []
    warnings: list[dict] = []
    objects: dict[str, int] = {}  # hash -> type
    withheld: set[str] = set()  # entries kept as their withheld form (redacted, docs/format.md section 17)
    entry_refs: dict[str, tuple[str, list[str]]] = {}  # entry -> (file, referenced hashes)
    records: list[tuple[str, dict]] = []
    damaged_files: list[str] = [rel for rel, _, _ in store.index.lost_rows()]  # files whose damage could hide an object
    held: dict[str, str] = {}  # object -> the file whose damaged record holds it
    files = 0

    def problem(what, text, severity="corrupt"):
        if what.startswith("packs/") and "fsck --salvage" in text:
            # salvage never touches packs/ (nothing ctape writes goes there): its advice said
            # "nothing to salvage" and the same problem again (found by an audit)
            text = text[: text.index("run `ctape fsck --salvage`")].rstrip("; (,") + "; " + PACKS_ADVICE
        problems.append({"what": what, "problem": text, "severity": severity})

    try:
        store.refresh()  # notes files found shorter than this machine had read them
    except UnsafePath:
        pass  # a symlink: reported below, path by path
    if not store.atimes_work(warn=False):
        warnings.append({"what": "tape", "problem": NOATIME_WARNING})
    for rel, expected, found in store.index.lost_rows():
        gone = not os.path.lexists(os.path.join(store.root, rel))
        what = f"the file is gone ({expected} bytes this machine had read; no other file holds its entries)" if gone else \
            f"{expected - found} bytes shorter than this machine had read it ({found} of {expected}" + \
            (f": {cause})" if (cause := cut_cause(rel, store.writer)) else ")")
        problem(rel, f"lost acknowledged data: {what}; restore it from another copy (rsync), or run `ctape fsck --salvage` to keep what is left", "lost")
    for rel, st in walk_files(tape):
        if stat.S_ISLNK(st.st_mode):
            problem(rel, "symlink inside the tape directory (ctape never follows it); replace it with the real file", "unsafe")
            continue
        why = stray(rel, st)
        if why:
            warnings.append({"what": rel, "problem": why})
            continue
        if not stat.S_ISREG(st.st_mode) or not rel.endswith((".seg", ".pack")):
            continue
        if st.st_nlink > 1:
            warnings.append({"what": rel, "problem": f"hard link: {st.st_nlink} paths share this file; ctape no longer appends to it (it starts a new segment)"})
        files += 1
        session = rel.split("/")[1] if rel.startswith("sessions/") else None
        is_pack = rel.endswith(".pack")
        if is_pack and not _pack_hash_ok(store, rel):
            problem(rel, "pack does not match its name (its bytes were changed or cut): records are lost; run `ctape fsck --salvage`")
            damaged_files.append(rel)
        items = list(store.scan_file(rel))
        writer = segment_writer(rel)
        header_bad = file_header_problem(rel, items[0] if items else None) if st.st_size else None
        if header_bad and not (isinstance(items[0], framing.Damage) and items[0].torn):
            problem(rel, f"{header_bad}: nothing in it is used; run `ctape fsck --salvage` to quarantine it")
            damaged_files.append(rel)
            continue
        for i, item in enumerate(items):
            if isinstance(item, framing.Damage):
                if item.torn and i == len(items) - 1 and not is_pack:
                    warnings.append({"what": f"{rel}@{item.offset}", "problem": f"torn tail ({item.reason}): an unfinished write, skipped"})
                else:
                    problem(f"{rel}@{item.offset}", item.reason)
                    damaged_files.append(rel)
                continue
            if item.type == framing.T_OBJECT:
                h = item.body[:32].hex()
                try:
                    type_, body = store.decode_object(h, item.body)
                except CorruptObject as e:
                    problem(f"object {h}", str(e).split(";")[0])
                    if not isinstance(e, ObjectTooLarge):  # that one reads under a higher limit
                        held[h] = rel
                    continue
                objects[h] = type_
                if type_ == TYPE_WITHHELD:
                    withheld.add(h)
                if type_ in (TYPE_ENTRY, TYPE_WITHHELD):
                    try:
                        raw = decode_entry(h, body)  # the seven keys, their types and ranges
                    except CorruptObject as e:
                        problem(f"entry {h}", str(e).split(";")[0])
                        continue
                    refs = blob_refs([raw.get("payload"), raw.get("meta"), raw.get("delta")], [])
                    if raw.get("parent"):
                        refs.append(raw["parent"])
                    entry_refs[h] = (rel, refs)
            elif item.type in (framing.T_REF, framing.T_PARTIAL):
                rec = record_problem(item.type, item.body, session, writer)
                if isinstance(rec, str):
                    what = "ref record" if item.type == framing.T_REF else "stream record"
                    problem(f"{rel}@{item.offset}", f"{what}: {rec}; it is not used")
                    continue
                if item.type == framing.T_REF:
                    records.append((rel, rec))
        if rel in damaged_files:
            held.update((h, rel) for h in damaged_object_names(store.root, rel))
    me = store.writer
    reports = quarantine_reports(store.root)
    salvaged_away = {h for r in reports for h in r["missing"]}
    salvaged_keys = {k for r in reports for k in r["missing_keys"]}  # named by index key only (salvage.py)

    red = tape.redactions()

    def missing(what, h, rel):
        if h in salvaged_away or hash_key(h) in salvaged_keys:
            return  # lost to damage; the salvage report (a warning below) names it
        if h in red:
            return  # a redacted value, gone on purpose: listed under "redacted"
        if h in held:
            problem(what, f"refers to {h}, lost to damage in {held[h]} (it reads as {LOST_VALUE!r}); run `ctape fsck --salvage` to keep what is intact", "damaged")
            return
        if damaged_files:  # a damaged record hides its name: it may be one of them
            where = ", ".join(sorted(set(damaged_files))[:3])
            problem(what, f"refers to missing object {h}: the damaged records of {where} may have held it "
                          "(`ctape fsck --salvage` keeps what is intact), or it has not arrived yet (rsync again)", "missing")
            return
        name = os.path.basename(rel)
        writer = name.split("-")[0] if name.endswith(".seg") else None
        if writer and writer != me:
            problem(what, f"refers to {h}, which has not arrived yet (written on another machine): run rsync or `ctape pull` again", "not-synced")
        else:
            problem(what, f"refers to missing object {h}", "missing")

    for h, (rel, refs) in entry_refs.items():
        for r in refs:
            if r not in objects:
                missing(f"entry {h}", r, rel)
    reachable_roots = set()
    for rel, rec in records:
        s = rec.get("s")
        for ref, value in (rec.get("set") or {}).items():
            if value and not value.startswith("@"):
                reachable_roots.add(value)
                if value not in objects:
                    missing(f"ref {s}/{ref} (record {rec.get('w')}#{rec.get('n')})", value, rel)
    for name in pending_salvages(store.root):
        problem(name, "a salvage was interrupted: run `ctape fsck --salvage` again to finish it", "unfinished")
    for report in reports:
        lost = report["missing"]
        count = len({hash_key(h) for h in lost} | set(report["missing_keys"]))
        gone = f"; gone: {count} {plural(count, 'entry or value', 'entries or values')}" + (f" ({', '.join(h[:12] for h in lost[:3])}{' ...' if len(lost) > 3 else ''})" if lost else "") if count else ""
        where = report["kept_at"]
        kept = "the file was left in place (what remains is intact)" if where == LEFT_IN_PLACE else f"the damaged file is kept in {where}"
        if "pulled_from" in report and where != LEFT_IN_PLACE:
            kept += f" on {'copy ' + report['copy'] if report.get('copy') else 'the copy that salvaged it'}"
        warnings.append({"what": report["file"], "problem": f"salvaged on {report['time']}: {report['lost']}{gone}; {kept}"})
    from .redact import lost_redactions

    gone_red = lost_redactions(tape, [rec for _, rec in records])
    if gone_red:
        o, path, _ = gone_red[0]
        problem(f"{len(gone_red)} redacted {plural(len(gone_red), 'place', 'places')}",
                f"this machine knows {plural(len(gone_red), 'its redaction', 'their redactions')} (first: {o[:12]} at {path}), but no "
                "file of the tape records it any more: the file that did is gone (an rsync --delete, or a backup restored, from "
                "a copy without it?); this machine still shows the marker, another copy or a fresh index shows the text, and "
                "a copy of the folder carries it; run `ctape fsck --salvage` to record the redaction again", "lost-redaction")
    dangling = _dangling(entry_refs, reachable_roots, objects)
    if dangling:
        warnings.append({"what": f"{len(dangling)} {plural(len(dangling), 'entry', 'entries')}", "problem": "dangling: no branch, HEAD or ref-log record reaches them (compact removes them)"})
    redacted = [{"object": o, "path": p, "kind": k, "bytes": "withheld" if o in withheld else "dropped" if o not in objects else "pending compact"}
                for o, places in sorted(red.items()) for p, k in places]
    return {
        "ok": not problems,
        "redacted": redacted,
        "problems": problems,
        "warnings": warnings,
        "objects": len(objects),
        "records": len(records),
        "files": files,
        "dangling": len(dangling),
    }


def _pack_hash_ok(store, rel: str) -> bool:
    from ..store.files import open_for_reading, pread_all
    from ..store.store import pack_name_matches

    fd = open_for_reading(os.path.join(store.root, rel))
    try:
        data = pread_all(fd, os.fstat(fd).st_size, 0)  # a pack may be over the 2 GiB one pread returns
    finally:
        os.close(fd)
    return pack_name_matches(rel, data)


_COUNTED = re.compile(r"\d+ damaged (?:place\(s\)|places?)")  # "place(s)": reports written before 2026-12-07
_CUT = re.compile(r"\d+ bytes of acknowledged records lost \(the file (is gone|was cut from \d+ to \d+ bytes)\)")


def shareable_loss(lost: str) -> str:
    """What a salvage report's `lost` may say beyond this copy (a remote's manifest): the
    count of damaged places, or a cut file's sizes; anything else as a plain phrase (the
    reasons stay home: a record that failed its schema may be quoted there). Applied
    twice, the same."""
    if _CUT.fullmatch(lost):
        return lost
    m = _COUNTED.match(lost)
    return m.group(0) if m else "damaged records"


def report_identity(report: dict) -> str:
    """A salvage report's identity: the same on every copy that holds it, however it came
    (rsync carries the report, a pull writes it again from a manifest with its text cut to
    shareable_loss), whatever else the copy adds to it."""
    from blake3 import blake3

    body = {"file": report["file"], "time": report["time"], "lost": shareable_loss(report["lost"]), "missing": sorted(set(report["missing"]))}
    return blake3(json.dumps(body, sort_keys=True).encode()).hexdigest()


def quarantine_reports(root: str) -> list[dict]:
    """What `fsck --salvage` wrote about each file it moved into quarantine/: one report
    each, however many copies of it a copy holds (its own, and the one a pull wrote from a
    remote's manifest, brought together by rsync)."""
    out = []
    base = os.path.join(root, QUARANTINE)
    for dirpath, _, filenames in os.walk(base, followlinks=False):
        for name in sorted(filenames):
            if name.endswith(REPORT):
                try:
                    with open(os.path.join(dirpath, name), "rb") as f:
                        r = json.loads(f.read(REPORT_MAX))  # the kept entries make a big salvage's report long
                    report = {k: str(r.get(k, "?")) for k in ("file", "time", "lost", "kept_at")}
                    report["missing"] = [h for h in _listed(r.get("missing")) if isinstance(h, str)]
                    report["missing_keys"] = [k for k in _listed(r.get("missing_keys")) if type(k) is int]
                    if isinstance(r.get("copy"), str):
                        report["copy"] = r["copy"]  # the writer id of the copy that salvaged
                    if isinstance(r.get("pulled_from"), str):
                        report["pulled_from"] = r["pulled_from"]
                    out.append(report)
                except (OSError, ValueError, AttributeError):
                    out.append({"file": os.path.relpath(os.path.join(dirpath, name), root), "time": "?", "lost": "unreadable salvage report", "kept_at": QUARANTINE, "missing": [], "missing_keys": []})
    return _one_each(out)


def _listed(v) -> list:
    return v if isinstance(v, list) else []  # a report edited by hand, or of another version


def _one_each(reports: list[dict]) -> list[dict]:
    """One report per salvage: a copy's own (no "pulled_from": its full text) before one a
    pull wrote of the same salvage."""
    kept, seen = [], set()
    for report in sorted(reports, key=lambda r: "pulled_from" in r):  # stable: the walk's order otherwise
        key = report_identity(report)
        if key not in seen:
            seen.add(key)
            kept.append(report)
    return kept


def pending_salvages(root: str) -> list[str]:
    base = os.path.join(root, QUARANTINE)
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(base, followlinks=False)
                  for n in names if n.endswith(PENDING) and not n.startswith("."))


def _dangling(entry_refs, roots, objects) -> list[str]:
    seen = set()
    stack = [r for r in roots if r in entry_refs]
    while stack:
        h = stack.pop()
        if h in seen:
            continue
        seen.add(h)
        for r in entry_refs.get(h, ("", []))[1]:
            if r in entry_refs and r not in seen:
                stack.append(r)
    return [h for h in entry_refs if h not in seen]


def stats(tape: "Tape") -> dict:
    """Objects, logical bytes (as if every entry stored its values inline), stored bytes."""
    return _while_files_go(_stats, tape)


def _stats(tape: "Tape") -> dict:
    store = tape.store
    sizes: dict[str, int] = {}
    entry_blobs: list[tuple[int, list[str]]] = []
    stored = 0
    entries = 0
    for rel, st in walk_files(tape):
        if stat.S_ISREG(st.st_mode) and rel.endswith((".seg", ".pack")):
            stored += st.st_size
            for item in store.scan_file(rel):
                if isinstance(item, framing.Record) and item.type == framing.T_OBJECT:
                    h = item.body[:32].hex()
                    if h in sizes:
                        continue
                    try:
                        type_, body = store.decode_object(h, item.body)
                    except CorruptObject:
                        continue
                    if type_ not in (TYPE_ENTRY, TYPE_WITHHELD):  # a redacted entry, compacted, is still one
                        sizes[h] = len(body)
                    else:
                        try:
                            raw = decode_entry(h, body)
                        except CorruptObject:
                            continue  # fsck names it
                        entries += 1
                        sizes[h] = len(body)
                        entry_blobs.append((len(body), blob_refs([raw.get("payload"), raw.get("meta"), raw.get("delta")], [])))
    logical = sum(size + sum(sizes.get(b, 0) for b in blobs) for size, blobs in entry_blobs)
    unique = sum(sizes.values())
    return {
        "objects": len(sizes),
        "entries": entries,
        "blobs": len(sizes) - entries,
        "logical_bytes": logical,
        "unique_bytes": unique,
        "stored_bytes": stored,
        "dedupe_saving": round(1 - unique / logical, 4) if logical else 0.0,
        "compression_ratio": round(stored / logical, 4) if logical else 0.0,
    }
