"""ctape's own lossless dump: one JSON object per line.

    {"ctape": "export", "version": 1, "session": "chat"}
    {"hash": ..., "parent": ..., "seq": ..., "kind": ..., "time": ..., "payload": ..., "meta": ..., "delta": ...}
    ...                                   (parents before children)
    {"ctape": "refs", "session": "chat", "branches": {"main": "<hash>"}, "head": "@main", "tags": {"v1": "<hash>"}}

    {"ctape": "redactions", "redact": [{"object": "<hash>", "path": "$.payload.content", "kind": "aws-access-key"}]}

("tags" only when the session has some; "redactions" only when an entry of the file was redacted: its line shows the
marker, `[redacted: KIND]`, so it no longer hashes to its name.) Importing recomputes every hash and refuses a line
whose hash does not match, so `import jsonl` of an export rebuilds the same entries and the same refs. A redacted entry
is the exception: into a tape that holds it, it is that entry (nothing new); into another, its text can no longer give
its hash, so it and the entries after it are written under new hashes (each of those is still checked against its
name, with the parent it had), and the refs follow them (docs/import.md, "A redacted session exports and imports").
"""

from __future__ import annotations

import json
from typing import Iterator, Optional

import re

from ..model.canonical import parse_json
from ..errors import CtapeError, InvalidInput
from ._common import entries_for_export, imported_names, lines_of, safe_refs
from .reading import cannot_read, real_path
from ..model.models import NAME_RE, brief, check_name, later_version
from ..model import redaction
from ..model.refs import TAG
from ..history.session import entry_hash

HASH_RE = re.compile(r"[0-9a-f]{64}")

HEADER = "export"
EXPORT_VERSION = 1  # the exports this ctape writes and reads; a later one raises it for what an older reader would misread
LINE = "ctape.line"  # kept on an entry line's dict while it is read: its line number, for messages


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


def export(tape, ref: str, tally=None) -> Iterator[str]:
    """Every entry as it is (`tally` is for the formats that cannot carry some)."""
    dump = lambda v: json.dumps(v, ensure_ascii=False, sort_keys=True)  # noqa: E731
    if NAME_RE.fullmatch(ref) and tape._session_exists(ref):
        s = tape.session(ref)
        st = s.refs()
        s.check_refs_read_back(st)  # before any line: not an export of no entries
        yield dump({"ctape": HEADER, "version": EXPORT_VERSION, "session": ref})
        redacted: list[dict] = []
        for e in session_entries(tape, ref):
            yield _entry_line(tape, e, dump, redacted)
        if redacted:
            yield dump({"ctape": "redactions", "redact": redacted})
        conflicts = st.conflicts  # a property that walks every branch: once, not per branch
        line = {"ctape": "refs", "session": ref, "branches": {b: h for b, h in st.branches.items() if b not in conflicts}, "head": st.head}
        if st.tags:
            line["tags"] = dict(st.tags)
        yield dump(line)
        return
    path = entries_for_export(tape, ref)  # root -> REF
    yield dump({"ctape": HEADER, "version": EXPORT_VERSION, "ref": ref})
    redacted = []
    for e in path:
        yield _entry_line(tape, e, dump, redacted)
    if redacted:
        yield dump({"ctape": "redactions", "redact": redacted})


def _entry_line(tape, e, dump, redacted: list[dict]) -> str:
    """An entry's line. One that shows a redaction marker and no longer hashes to its name
    (a place a redaction names, or a value redacted whole that it refers to) adds its
    markers to `redacted`: an import must know why its hash does not check out."""
    line = dump(e.to_json())
    if "[redacted: " in line:
        found = redaction.markers(e.payload, e.meta, e.delta)
        if found and entry_hash(e.kind, e.payload, e.meta, e.delta, e.time, e.parent, e.seq) != e.hash:
            redacted += [{"object": e.hash, "path": p, "kind": k} for p, k in found]
    return line


def import_files(tape, files: list[str], session: Optional[str], progress: bool = False) -> list[str]:
    out = []
    for path in files:
        out.append(import_file(tape, path, session))
    return out


def import_file(tape, path: str, session: Optional[str]) -> str:
    header, entries, refs, redacted = _read(path)
    written = tape.store.entries_written
    name = session or header.get("session") or (refs or {}).get("session")
    if not name:
        raise InvalidInput(f"{path}: no session name in the file; pass -s NAME")
    check_name(name, "session name")
    s = tape.session(name)
    by_hash = {e["hash"]: e for e in entries}
    ordered = _parents_first(tape, path, entries, by_hash)
    wanted, head = _wanted_refs(tape, path, refs, by_hash)
    tags = _wanted_tags(tape, path, refs, by_hash)
    done: set[str] = set()
    notes: list[str] = []
    for e in ordered:
        if e["hash"] in redacted and not redaction.markers(e["payload"], e.get("meta"), e.get("delta")):
            # a line's text cannot be checked once redacted: taken on the file's word only
            # where it shows what a redaction leaves
            raise InvalidInput(f"{path}:{e[LINE]}: entry {e['hash'][:12]} is named as redacted but shows no redaction marker (edited?); nothing was imported")
    renamed: dict[str, str] = {}  # a redacted entry written under a new hash, and those after it
    unredacted = 0  # entries the file shows redacted that this tape holds as they were
    with tape.batch():
        for e in ordered:
            parent = renamed.get(e["parent"], e["parent"])
            mine = _entry(tape, e["hash"]) if e["hash"] in redacted else None
            if mine is not None:
                # the tape holds the entry itself: perhaps as its text before the redaction
                unredacted += not redaction.markers(mine.payload, mine.meta, mine.delta)
                continue
            if parent != e["parent"] and e["hash"] not in redacted and entry_hash(
                    e["kind"], e["payload"], e.get("meta") or {}, e.get("delta"), e["time"], e["parent"], e["seq"]) != e["hash"]:
                raise InvalidInput(f"{path}: entry {e['hash'][:12]} does not hash to its name (edited?); nothing was imported")
            got = s.put_entry(e["kind"], e["payload"], e.get("meta") or {}, e.get("delta"), e["time"], parent)
            if got.hash != e["hash"]:
                if e["hash"] not in redacted and parent == e["parent"]:
                    old = " or redacted before an export by an older ctape" if redaction.markers(e["payload"], e.get("meta"), e.get("delta")) else ""
                    raise InvalidInput(f"{path}: entry {e['hash'][:12]} does not hash to its name (edited?{old}); nothing was imported")
                renamed[e["hash"]] = got.hash
            done.add(got.hash)
        if renamed:
            wanted = {b: renamed.get(h, h) for b, h in wanted.items()}
            head = renamed.get(head, head)
            tags = {t: renamed.get(h, h) for t, h in tags.items()}
        changes, notes = safe_refs(tape, s, wanted, head) if wanted else ({}, [])
        if unredacted:
            notes.append(f"{unredacted} entr{'y' if unredacted == 1 else 'ies'} the file shows redacted "
                         f"{'is' if unredacted == 1 else 'are'} not redacted in this tape: `ctape redact --scan`, or redact by path")
        tag_changes, tag_notes = _safe_tags(s, tags)
        changes.update(tag_changes)
        notes += tag_notes
        if changes:
            s.set_refs("import", changes)
    if renamed and changes:
        first = sum(1 for h in renamed if h in redacted)
        after = len(renamed) - first
        notes.insert(0, f"{first} entr{'y' if first == 1 else 'ies'} redacted before the export"
                        f"{f' and the {after} after them' if after else ''} {'has' if len(renamed) == 1 else 'have'} new hashes here "
                        "(a redacted text no longer gives its entry's hash)")
    if not changes:
        return f"nothing new in {path}: session {name} already holds {'its entry' if len(entries) == 1 else f'its {len(entries)} entries'}" + ("; " + "; ".join(notes) if notes else "")
    fresh = tape.store.entries_written - written
    more = f" ({fresh} new to the tape)" if fresh < len(entries) else ""
    return f"imported {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} into session {name}{more}" + ("; " + "; ".join(notes) if notes else "")


def _wanted_refs(tape, path: str, refs: Optional[dict], by_hash: dict) -> tuple[dict, str]:
    """The branches and HEAD the file asks for, checked before anything is written:
    a value that is not an entry of the file or of the tape is a one-line error."""

    def entry(h, what: str) -> str:
        return _entry_of(tape, path, by_hash, h, what)

    if not refs:
        if not by_hash:
            return {}, "@main"
        tips = set(by_hash) - {e["parent"] for e in by_hash.values()}
        tip = max((by_hash[t] for t in tips), key=lambda e: (e["seq"], e["hash"]))
        return {"main": tip["hash"]}, "@main"
    branches = refs.get("branches") or {}
    if not isinstance(branches, dict):
        raise InvalidInput(f"{path}: the refs line's branches must be an object of branch: hash")
    wanted = {}
    for b, h in branches.items():
        check_name(b, "branch name")
        wanted[b] = None if h is None else entry(h, f"branch {b}")
    head = refs.get("head") or "@main"
    if isinstance(head, str) and head.startswith("@"):
        check_name(head[1:], "branch name")
        if by_hash and wanted.get(head[1:]) is None:
            # HEAD on no branch of the file: the session would look empty, its next
            # append a new root
            raise InvalidInput(f"{path}: the refs line puts HEAD on branch {head[1:]!r}, which the file does not have; "
                               f"name one of its branches ({', '.join(sorted(b for b, h in wanted.items() if h)) or 'none'}) or an entry")
    else:
        entry(head, "head")
    return wanted, head


def _wanted_tags(tape, path: str, refs: Optional[dict], by_hash: dict) -> dict[str, str]:
    """The tags the refs line carries (an export of a session with tags), checked like its branches."""
    tags = (refs or {}).get("tags") or {}
    if not isinstance(tags, dict):
        raise InvalidInput(f"{path}: the refs line's tags must be an object of tag: hash")
    for name, h in tags.items():
        check_name(name, "tag name")
        _entry_of(tape, path, by_hash, h, f"tag {name}")
    return tags


def _entry_of(tape, path: str, by_hash: dict, h, what: str) -> str:
    """`h` when it names an entry of the file or the tape; else a one-line error, before anything is written."""
    if not (isinstance(h, str) and HASH_RE.fullmatch(h) and (h in by_hash or _is_entry(tape, h))):
        raise InvalidInput(f"{path}: {what} is {h!r}, which is no entry of the file or the tape; nothing was imported")
    return h


def _safe_tags(session, tags: dict[str, str]) -> tuple[dict, list[str]]:
    """A tag the session does not have is created; one it has elsewhere stays where it is
    (a tag never moves without -f), and the file's goes to NAME-imported."""
    have = session.refs().tags if session.exists() else {}
    changes: dict = {}
    notes: list[str] = []
    for name, h in tags.items():
        for n in imported_names(name):
            if have.get(n) == h:
                break
            if n not in have:
                changes[TAG + n] = have[n] = h
                if n != name:
                    notes.append(f"tag {name} names another entry here: the imported one is tag {n}")
                break
    return changes, notes


def _is_entry(tape, h: str) -> bool:
    return _entry(tape, h) is not None


def _entry(tape, h: str):
    """The tape's entry h, or None when it holds none by that name."""
    try:
        return tape.read_entry(h)
    except CtapeError:
        return None


def _redacted_objects(path: str, lineno: int, obj: dict) -> set[str]:
    places = obj.get("redact")
    if not isinstance(places, list) or not all(isinstance(x, dict) and isinstance(x.get("object"), str) and HASH_RE.fullmatch(x["object"]) for x in places):
        raise InvalidInput(f"{path}:{lineno}: the redactions line must list places, each with an entry hash as its object (edited?); nothing was imported")
    return {x["object"] for x in places}


def _read(path: str):
    header: dict = {}
    entries: list[dict] = []
    refs = None
    redacted: set[str] = set()
    try:
        f = open(real_path(path), "rb")
    except OSError as e:
        raise cannot_read(path, e) from None
    with f:
        for lineno, raw in enumerate(lines_of(f), 1):
            if not raw.strip():
                continue
            try:
                obj = parse_json(raw)
            except json.JSONDecodeError:
                raise InvalidInput(f"{path}:{lineno}: not a JSON line; is this a ctape export?") from None
            except UnicodeDecodeError:
                raise InvalidInput(f"{path}:{lineno}: not UTF-8; is this a ctape export?") from None
            except ValueError as e:
                raise InvalidInput(f"{path}:{lineno}: cannot be imported: {e}") from None
            if not isinstance(obj, dict):
                raise InvalidInput(f"{path}:{lineno}: expected a JSON object")
            tag = obj.get("ctape")
            if tag == HEADER:
                header = obj
                version = obj.get("version", 1)
                if later_version(version, EXPORT_VERSION):
                    raise InvalidInput(f"{path}:{lineno}: an export of version {brief(version, 20)}, which this ctape does not know: "
                                       "the file was written by a newer ctape; upgrade ctape to import it")
            elif tag == "refs":
                refs = obj
            elif tag == "redactions":
                redacted |= _redacted_objects(path, lineno, obj)
            elif isinstance(tag, str):
                # a line type of a later ctape's exports: say so, not "not an entry line"
                # (an audit of mixed versions: older builds refused redacted exports so)
                raise InvalidInput(f"{path}:{lineno}: a line of type {brief(tag, 40)}, which this ctape does not know: "
                                   "the file was written by a newer ctape; upgrade ctape to import it")
            elif {"hash", "kind", "payload", "time"} <= obj.keys():
                obj.setdefault("parent", None)
                _check_links(path, lineno, obj)
                obj[LINE] = lineno
                entries.append(obj)
            else:
                raise InvalidInput(f"{path}:{lineno}: not a ctape entry line")
    if not entries and not refs:
        raise InvalidInput(f"{path}: no entries found; is this a ctape export (`ctape export SESSION`)?")
    return header, entries, refs, redacted


def _check_links(path: str, lineno: int, obj: dict) -> None:
    """An entry line's hash and parent are full entry hashes (the parent may be null)."""
    if not (isinstance(obj["hash"], str) and HASH_RE.fullmatch(obj["hash"])):
        raise InvalidInput(f"{path}:{lineno}: hash {json.dumps(obj['hash'])} is not a full entry hash (edited?); nothing was imported")
    p = obj["parent"]
    if p is not None and not (isinstance(p, str) and HASH_RE.fullmatch(p)):
        raise InvalidInput(f"{path}:{lineno}: parent {json.dumps(p)} is not a full entry hash or null (edited?); nothing was imported")


def _parents_first(tape, path: str, entries: list[dict], by_hash: dict) -> list[dict]:
    """The entries, each after its parent (by seq, then hash), checked before anything is
    written: every parent is in the file or the tape, no parent link leads back to its
    entry, and the `seq` a line gives is its parent's + 1 (1 for a root): put_entry works
    it out (it is part of the entry), so a line that says another one was edited. A line
    without `seq` gets it."""
    seq: dict[str, int] = {}
    for e in entries:
        chain: list[dict] = []
        on_chain: set[str] = set()
        h = e["hash"]
        while h not in seq:
            x = by_hash.get(h)
            if x is None:  # a parent that is not in the file
                if not _is_entry(tape, h):
                    child = chain[-1]
                    raise InvalidInput(f"{path}:{child[LINE]}: entry {child['hash'][:12]} needs parent {h[:12]}, which is neither in the file nor in the tape; nothing was imported")
                seq[h] = tape.read_entry(h).seq
                break
            if h in on_chain:
                raise InvalidInput(f"{path}:{x[LINE]}: entry {h[:12]} is its own ancestor (edited?); nothing was imported")
            chain.append(x)
            on_chain.add(h)
            if x["parent"] is None:
                break
            h = x["parent"]
        for x in reversed(chain):
            seq[x["hash"]] = seq[x["parent"]] + 1 if x["parent"] is not None else 1
    for e in entries:
        want = seq[e["hash"]]
        stated = e.setdefault("seq", want)
        if type(stated) is not int or stated != want:
            why = f"does not follow its parent's ({want - 1})" if e["parent"] is not None else "is not 1, the seq of an entry without a parent"
            raise InvalidInput(f"{path}:{e[LINE]}: seq {json.dumps(stated)} {why} (edited?); nothing was imported")
    return sorted(entries, key=lambda e: (e["seq"], e["hash"]))
