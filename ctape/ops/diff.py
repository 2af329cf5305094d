"""Where two histories part: the common base of two refs and the entries after it.

Both refs are walked up to the same seq first (the deeper one only: `seq` is the depth,
so the walk knows how far to go), then side by side until they meet. The work is
linear in the distance from each ref to the base, never in the depth of the history.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from ..model.errors import RefNotFound


@dataclass
class Diff:
    base: Optional[str]  # the newest entry both histories hold (None: nothing in common)
    left: list[str] = field(default_factory=list)  # entries after the base up to REF1, oldest first
    right: list[str] = field(default_factory=list)  # the same for REF2
    left_ref: Optional[str] = None  # the entry REF1 names
    right_ref: Optional[str] = None

    def to_json(self) -> dict:
        return {"base": self.base, "left": self.left, "right": self.right, "left_ref": self.left_ref, "right_ref": self.right_ref}


def diff(tape, ref1: str, ref2: str, session: Optional[str] = None) -> Diff:
    h1 = _resolve(tape, ref1, session)
    h2 = _resolve(tape, ref2, session)
    left: list[str] = []
    right: list[str] = []
    a, b = tape.read_entry(h1), tape.read_entry(h2)
    while a is not None and b is not None and a.seq > b.seq:
        left.append(a.hash)
        a = tape.read_entry(a.parent) if a.parent else None
    while a is not None and b is not None and b.seq > a.seq:
        right.append(b.hash)
        b = tape.read_entry(b.parent) if b.parent else None
    while a is not None and b is not None and a.hash != b.hash:
        left.append(a.hash)
        right.append(b.hash)
        a = tape.read_entry(a.parent) if a.parent else None
        b = tape.read_entry(b.parent) if b.parent else None
    base = a.hash if a is not None and b is not None else None
    # no common base: whatever is left of either side is its own
    for rest, out in ((a, left), (b, right)):
        while base is None and rest is not None:
            out.append(rest.hash)
            rest = tape.read_entry(rest.parent) if rest.parent else None
    left.reverse()
    right.reverse()
    return Diff(base, left, right, h1, h2)


def _resolve(tape, ref: str, session: Optional[str]) -> str:
    h = tape.resolve(ref, session)
    if h is None:
        raise RefNotFound(f"{ref!r} has no entries yet: nothing to compare")
    return h


def payload_lines(payload: Any, indent: str = "") -> list[str]:
    """A payload as lines of text to compare: every field on its own line, text as it
    reads (a multi-line string indented under its key), other values as JSON."""
    if isinstance(payload, dict) and payload:
        out = []
        for k, v in payload.items():
            if isinstance(v, str) and "\n" in v:
                out.append(f"{indent}{k}:")
                out += [indent + "  " + line for line in v.splitlines()]
            elif isinstance(v, dict) and v:
                out.append(f"{indent}{k}:")
                out += payload_lines(v, indent + "  ")
            else:
                out.append(f"{indent}{k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}")
        return out
    return [indent + line for line in json.dumps(payload, ensure_ascii=False, indent=2, sort_keys=True).splitlines()]


def payload_diff(tape, h1: str, h2: str, context: int = 3) -> list[str]:
    """A unified diff of two entries' payloads (and kinds), as lines."""
    a, b = tape.read_entry(h1), tape.read_entry(h2)
    la = [f"kind: {a.kind}"] + payload_lines(a.payload)
    lb = [f"kind: {b.kind}"] + payload_lines(b.payload)
    return list(difflib.unified_diff(la, lb, fromfile=h1[:12], tofile=h2[:12], lineterm="", n=context))
