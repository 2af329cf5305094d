"""`ctape redact`: take values out of a tape, on every copy, keeping every hash
(SPEC section 18; the record and what it proves: docs/format.md section 17).

A redaction is one ref record per session (op "redact", nothing in `set`) naming
places: (entry hash, JSON path, kind), and the blob itself when the value is stored
as one. It travels like any ref record (rsync, push, pull); every copy that has it
shows the marker at once, and its next `compact` drops the bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

from ..model import redaction
from ..model.canonical import is_hash
from ..model.errors import InvalidInput
from ..model.schema import decode_entry
from ..store.files import TYPE_ENTRY
from ..store.store import TYPE_WITHHELD
from .scan import Detectors, Finding, check_regex, scan

if TYPE_CHECKING:
    from ..history.tape import Tape

RECORD_ITEMS = 1000  # places per record: a long scan result becomes several records


def _place(tape: "Tape", h: str, path: str, kind: str) -> Optional[list[dict]]:
    """The record items for one value; None when it is already redacted. InvalidInput
    when the entry or the path is not there or the value is not text."""
    steps = redaction.entry_path(path)
    type_, body = tape.store.get_object(h)
    if type_ not in (TYPE_ENTRY, TYPE_WITHHELD):
        raise InvalidInput(f"{h} is a payload value, not an entry; give an entry hash")
    raw = decode_entry(h, body)
    red = tape.redactions()
    raw = redaction.apply(raw, red.get(h, ()))
    found, value = redaction.get_at(raw, steps)
    if not found:
        raise InvalidInput(f"entry {h[:12]} has nothing at {path}; see `ctape show {h[:12]} --json`")
    if type(value) is not str:
        raise InvalidInput(f"the value at {path} is not text; give the path of a string inside it")
    if value.startswith("[redacted: "):
        return None
    blob = value[2:] if value[:2] == "\0b" and len(value) == 66 else None
    if blob in red:
        return None
    return redaction.place(h, redaction.format_path(steps), kind, blob)


def redact(tape: "Tape", session: str, places: Iterable[tuple[str, str, str]]) -> dict:
    """Redact (entry, path, kind) places with records in `session`. Every place is
    checked before anything is written: a bad one changes nothing."""
    items, done = [], set()
    for h, path, kind in places:
        h = tape.resolve(h, session) if not is_hash(h) else h
        got = _place(tape, h, path, kind)
        if got is None:
            continue
        for item in got:
            key = (item["object"], item["path"])
            if key not in done:
                done.add(key)
                items.append(item)
    sess = tape.session(session)
    for i in range(0, len(items), RECORD_ITEMS):
        sess.set_refs(redaction.OP, {}, redact=items[i:i + RECORD_ITEMS])
    return {"session": session, "redacted": [i for i in items if i["path"] != "$"],
            "blobs": [i["object"] for i in items if i["path"] == "$"]}


def redact_findings(tape: "Tape", findings: Iterable[Finding]) -> list[dict]:
    """Redact each finding in its own session (one run of records per session)."""
    by_session: dict[str, list] = {}
    for f in findings:
        by_session.setdefault(f.session, []).append((f.hash, f.path, f.kind))
    return [redact(tape, s, places) for s, places in sorted(by_session.items())]


def redact_scan(tape: "Tape", sessions: Optional[list[str]] = None) -> list[dict]:
    return redact_findings(tape, scan(tape, sessions)["findings"])


def redact_pattern(tape: "Tape", regex: str, sessions: Optional[list[str]] = None, kind: str = "pattern") -> list[dict]:
    check_regex(regex)
    det = Detectors([{"kind": kind, "regex": regex}], entropy=False, builtin=False)
    return redact_findings(tape, scan(tape, sessions, detectors=det, include_allowed=True)["findings"])
