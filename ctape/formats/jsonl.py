"""ctape's own lossless dump: one JSON object per line.

    {"ctape": "export", "version": 1, "session": "chat"}
    {"hash": ..., "parent": ..., "seq": ..., "kind": ..., "time": ..., "payload": ..., "meta": ..., "delta": ...}
    ...                                   (parents before children)
    {"ctape": "refs", "session": "chat", "branches": {"main": "<hash>"}, "head": "@main"}

Importing recomputes every hash and refuses a line whose hash does not match,
so `import jsonl` of an export rebuilds the same entries and the same refs.
"""

from __future__ import annotations

import json
from typing import Iterator, Optional

from ..errors import InvalidInput
from ._common import entries_for_export, set_import_refs
from ..models import NAME_RE, check_name
from ..refs import HEAD

HEADER = "export"


def session_entries(tape, name: str) -> list:
    """Every entry the session has ever pointed at (branches, HEAD, ref log), parents first."""
    s = tape.session(name)
    roots = set()
    for line in s.reflog():
        for v in (line["new"], line["old"]):
            if v and not v.startswith("@"):
                roots.add(v)
    seen: dict[str, object] = {}
    stack = [r for r in roots if tape.has_entry(r)]
    while stack:
        h = stack.pop()
        if h in seen:
            continue
        e = tape.read_entry(h)
        seen[h] = e
        if e.parent and e.parent not in seen:
            stack.append(e.parent)
    return sorted(seen.values(), key=lambda e: (e.seq, e.time, e.hash))


def export(tape, ref: str) -> Iterator[str]:
    dump = lambda v: json.dumps(v, ensure_ascii=False, sort_keys=True)  # noqa: E731
    if NAME_RE.fullmatch(ref) and tape._session_exists(ref):
        s = tape.session(ref)
        st = s.refs()
        yield dump({"ctape": HEADER, "version": 1, "session": ref})
        for e in session_entries(tape, ref):
            yield dump(e.to_json())
        yield dump({"ctape": "refs", "session": ref, "branches": {b: h for b, h in st.branches.items() if b not in st.conflicts}, "head": st.head})
        return
    path = entries_for_export(tape, ref)  # root -> REF
    yield dump({"ctape": HEADER, "version": 1, "ref": ref})
    for e in path:
        yield dump(e.to_json())


def import_files(tape, files: list[str], session: Optional[str], progress: bool = False) -> list[str]:
    out = []
    for path in files:
        out.append(import_file(tape, path, session))
    return out


def import_file(tape, path: str, session: Optional[str]) -> str:
    header, entries, refs = _read(path)
    name = session or header.get("session") or (refs or {}).get("session")
    if not name:
        raise InvalidInput(f"{path}: no session name in the file; pass -s NAME")
    check_name(name, "session name")
    s = tape.session(name)
    by_hash = {e["hash"]: e for e in entries}
    done: set[str] = set()
    with tape.batch():
        for e in _parents_first(entries, by_hash):
            if e["parent"] and e["parent"] not in done and e["parent"] not in by_hash and not tape.has_entry(e["parent"]):
                raise InvalidInput(f"{path}: entry {e['hash'][:12]} needs parent {e['parent'][:12]}, which is neither in the file nor in the tape")
            got = s.put_entry(e["kind"], e["payload"], e.get("meta") or {}, e.get("delta"), e["time"], e["parent"])
            if got.hash != e["hash"]:
                raise InvalidInput(f"{path}: entry {e['hash'][:12]} does not hash to its name (edited?); nothing was imported")
            done.add(got.hash)
        changes: dict = {}
        if refs:
            for b, h in (refs.get("branches") or {}).items():
                check_name(b, "branch name")
                changes[b] = h
            if refs.get("head"):
                changes[HEAD] = refs["head"]
        elif entries:
            tips = set(by_hash) - {e["parent"] for e in entries}
            tip = max((by_hash[t] for t in tips), key=lambda e: (e["seq"], e["hash"]))
            changes = {"main": tip["hash"], HEAD: "@main"}
        new = bool(changes) and set_import_refs(s, changes)
    if not new:
        return f"nothing new in {path}: session {name} already holds its {len(entries)} entries"
    return f"imported {len(entries)} entries into session {name}"


def _read(path: str):
    header: dict = {}
    entries: list[dict] = []
    refs = None
    try:
        f = open(path, "rb")
    except OSError as e:
        raise InvalidInput(f"cannot read {path}: {e.strerror}") from None
    with f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                raise InvalidInput(f"{path}:{lineno}: not a JSON line; is this a ctape export?") from None
            if not isinstance(obj, dict):
                raise InvalidInput(f"{path}:{lineno}: expected a JSON object")
            tag = obj.get("ctape")
            if tag == HEADER:
                header = obj
            elif tag == "refs":
                refs = obj
            elif {"hash", "kind", "payload", "time"} <= obj.keys():
                obj.setdefault("parent", None)
                entries.append(obj)
            else:
                raise InvalidInput(f"{path}:{lineno}: not a ctape entry line")
    if not entries and not refs:
        raise InvalidInput(f"{path}: no entries found; is this a ctape export (`ctape export SESSION`)?")
    return header, entries, refs


def _parents_first(entries: list[dict], by_hash: dict) -> list[dict]:
    return sorted(entries, key=lambda e: (e.get("seq") or 0, e["hash"]))
