"""Whole-tape checks and figures: fsck and stats. Both read every file."""

from __future__ import annotations

import json
import os
import stat
from typing import TYPE_CHECKING, Iterator

from . import framing
from .canonical import blob_refs
from .errors import CorruptObject
from .files import TYPE_ENTRY
from .refs import well_formed

if TYPE_CHECKING:
    from .tape import Tape


def walk_files(tape: "Tape") -> Iterator[tuple[str, os.stat_result]]:
    """Every path under the tape directory (relative), without following symlinks."""
    root = tape.store.root
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            yield os.path.relpath(full, root), os.lstat(full)


def fsck(tape: "Tape") -> dict:
    """Verify everything. Problems make `ok` false (exit 1); warnings do not."""
    store = tape.store
    problems: list[dict] = []
    warnings: list[dict] = []
    objects: dict[str, int] = {}  # hash -> type
    entry_refs: dict[str, tuple[str, list[str]]] = {}  # entry -> (file, referenced hashes)
    records: list[tuple[str, dict]] = []
    files = 0

    def problem(what, text, severity="corrupt"):
        problems.append({"what": what, "problem": text, "severity": severity})

    for rel, st in walk_files(tape):
        if stat.S_ISLNK(st.st_mode):
            problem(rel, "symlink inside the tape directory (ctape never follows it); replace it with the real file", "unsafe")
            continue
        if not stat.S_ISREG(st.st_mode) or not rel.endswith((".seg", ".pack")):
            continue
        files += 1
        items = list(store.scan_file(rel))
        for i, item in enumerate(items):
            if isinstance(item, framing.Damage):
                if item.torn and i == len(items) - 1:
                    warnings.append({"what": f"{rel}@{item.offset}", "problem": f"torn tail ({item.reason}): an unfinished write, skipped"})
                else:
                    problem(f"{rel}@{item.offset}", item.reason)
                continue
            if item.type == framing.T_OBJECT:
                h = item.body[:32].hex()
                try:
                    type_, body = store.decode_object(h, item.body)
                except CorruptObject as e:
                    problem(f"object {h}", str(e).split(";")[0])
                    continue
                objects[h] = type_
                if type_ == TYPE_ENTRY:
                    try:
                        raw = json.loads(body)
                        refs = blob_refs([raw.get("payload"), raw.get("meta"), raw.get("delta")], [])
                        if raw.get("parent"):
                            refs.append(raw["parent"])
                        entry_refs[h] = (rel, refs)
                    except (ValueError, AttributeError):
                        problem(f"entry {h}", "entry body is not valid JSON")
            elif item.type == framing.T_REF:
                try:
                    rec = json.loads(item.body)
                except ValueError:
                    problem(f"{rel}@{item.offset}", "ref record is not valid JSON")
                    continue
                if not well_formed(rec):
                    problem(f"{rel}@{item.offset}", "ref record has fields of the wrong type (s, w, n, lc, set, old): not written by ctape")
                    continue
                records.append((rel, rec))
    me = store.writer

    def missing(what, h, rel):
        name = os.path.basename(rel)
        writer = name.split("-")[0] if name.endswith(".seg") else None
        if writer and writer != me:
            problem(what, f"refers to {h}, which has not arrived yet (written on another machine): run rsync again", "not-synced")
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
    dangling = _dangling(entry_refs, reachable_roots, objects)
    if dangling:
        warnings.append({"what": f"{len(dangling)} entries", "problem": "dangling: no branch, HEAD or ref-log record reaches them (compact removes them)"})
    return {
        "ok": not problems,
        "problems": problems,
        "warnings": warnings,
        "objects": len(objects),
        "records": len(records),
        "files": files,
        "dangling": len(dangling),
    }


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
                    sizes[h] = len(body)
                    if type_ == TYPE_ENTRY:
                        entries += 1
                        raw = json.loads(body)
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
