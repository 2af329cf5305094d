"""Ref records, and how a session's branches and HEAD follow from them.

Every move of a branch or HEAD is a ref record written by one writer:

    {"s": session, "w": writer, "n": n, "lc": lamport, "seen": {writer: n},
     "t": time, "op": "append", "set": {"main": "<hash>", "HEAD": "@main"},
     "old": {"main": "<hash>"}}

`n` counts this writer's records in the session; `lc` is a Lamport clock (one
more than the largest it has seen); `seen` holds the newest `n` of every other
writer whose records were read before this one was written. A value in `set` is
an entry hash, "@BRANCH" (HEAD attached) or null (deleted).

For each ref, the newest record of each writer is that writer's claim. A claim
is superseded when another writer's claim has seen it. When more than one claim
stands (two machines moved one branch, then synced), the one with the highest
(lc, writer) wins everywhere, and each other tip stays visible as the branch
BRANCH.conflict-WRITER. The next record written to the session settles it by
writing the winner and the conflict branches as ordinary refs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

HEAD = "HEAD"


@dataclass
class Claim:
    ref: str
    w: str
    n: int
    lc: int
    value: Optional[str]
    seen: dict


@dataclass
class RefState:
    branches: dict[str, str] = field(default_factory=dict)
    head: Optional[str] = None  # "@branch", an entry hash, or None (no HEAD yet)
    conflicts: dict[str, str] = field(default_factory=dict)  # conflict branch -> branch it shadows
    settle: dict[str, Optional[str]] = field(default_factory=dict)  # refs a next record must write
    lc: int = 0
    seen: dict[str, int] = field(default_factory=dict)

    @property
    def branch(self) -> Optional[str]:
        return self.head[1:] if self.head and self.head.startswith("@") else None

    @property
    def head_hash(self) -> Optional[str]:
        if self.head is None:
            return None
        if self.head.startswith("@"):
            return self.branches.get(self.head[1:])
        return self.head


def resolve(claims: list[Claim], lc: int, seen: dict[str, int]) -> RefState:
    by_ref: dict[str, list[Claim]] = {}
    for c in claims:
        by_ref.setdefault(c.ref, []).append(c)
    state = RefState(lc=lc, seen=dict(seen))
    for ref in sorted(by_ref):
        cs = by_ref[ref]
        standing = [c for c in cs if not any(o is not c and o.seen.get(c.w, 0) >= c.n for o in cs)]
        winner = max(standing, key=lambda c: (c.lc, c.w))
        if ref == HEAD:
            state.head = winner.value
        elif winner.value is not None:
            state.branches[ref] = winner.value
        losers = [c for c in standing if c is not winner and c.value is not None and c.value != winner.value]
        if len(standing) > 1:
            state.settle[ref] = winner.value
        if ref == HEAD:
            continue
        for c in losers:
            name = conflict_name(ref, c.w)
            if name not in by_ref:
                state.branches[name] = c.value
                state.conflicts[name] = ref
                state.settle[name] = c.value
    if state.head and state.head.startswith("@") and state.head[1:] not in state.branches:
        pass  # attached to a branch with no entry yet (a new session): head_hash is None
    return state


def conflict_name(branch: str, writer: str) -> str:
    suffix = f".conflict-{writer[:8]}"
    return branch[: 128 - len(suffix)] + suffix


def claims_from_rows(rows) -> list[Claim]:
    return [Claim(ref, w, n, lc, value, json.loads(seen)) for ref, w, n, lc, value, seen in rows]


def apply_record(claims: list[Claim], rec: dict) -> list[Claim]:
    """Claims after one more record (used to keep a writer's view current in a batch)."""
    out = [c for c in claims if not (c.w == rec["w"] and c.ref in rec["set"])]
    for ref, value in rec["set"].items():
        out.append(Claim(ref, rec["w"], rec["n"], rec["lc"], value, rec.get("seen") or {}))
    return out
