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
# tags are refs named TAG + NAME: never a valid branch name, so listings keep them apart
TAG = "tag:"


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
    """A session's refs as resolved from the claims of every writer."""

    claims: dict[str, dict[str, Claim]] = field(default_factory=dict)  # ref -> writer -> claim
    branches: dict[str, str] = field(default_factory=dict)
    head: Optional[str] = None  # "@branch", an entry hash, or None (no HEAD yet)
    conflicts: dict[str, str] = field(default_factory=dict)  # conflict branch -> branch it shadows
    tags: dict[str, str] = field(default_factory=dict)  # tag name -> entry hash
    settle: dict[str, Optional[str]] = field(default_factory=dict)  # refs a next record must write
    lc: int = 0
    seen: dict[str, int] = field(default_factory=dict)  # writer -> newest n read

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

    def apply(self, rec: dict) -> None:
        """Take one more record into account (any order gives the same result)."""
        w, n = rec["w"], rec["n"]
        seen = rec.get("seen") or {}
        for ref, value in rec.get("set", {}).items():
            mine = self.claims.setdefault(ref, {})
            old = mine.get(w)
            if old is None or n > old.n:
                mine[w] = Claim(ref, w, n, rec["lc"], value, seen)
        self.lc = max(self.lc, rec["lc"])
        self.seen[w] = max(self.seen.get(w, 0), n)
        for ref in rec.get("set", {}):
            self._resolve_ref(ref)

    def resolve_all(self) -> None:
        self.branches.clear()
        self.conflicts.clear()
        self.tags.clear()
        self.settle.clear()
        self.head = None
        for ref in sorted(self.claims):
            self._resolve_ref(ref)

    def _resolve_ref(self, ref: str) -> None:
        cs = list(self.claims.get(ref, {}).values())
        if self.conflicts:
            for name in [c for c, of in self.conflicts.items() if of == ref]:
                del self.conflicts[name]
                self.branches.pop(name, None)
                self.settle.pop(name, None)
        self.settle.pop(ref, None)
        if len(cs) == 1:  # one writer moves this ref (the usual case): nothing to weigh
            standing = cs
            winner = cs[0]
        else:
            standing = [c for c in cs if not any(o is not c and o.seen.get(c.w, 0) >= c.n for o in cs)]
            winner = max(standing, key=lambda c: (c.lc, c.w))
        if ref == HEAD:
            self.head = winner.value
        elif ref.startswith(TAG):  # a tag: one winner, no conflict branch (a tag names, it holds no work)
            if winner.value is not None:
                self.tags[ref[len(TAG):]] = winner.value
            else:
                self.tags.pop(ref[len(TAG):], None)
        elif winner.value is not None:
            self.branches[ref] = winner.value
        else:
            self.branches.pop(ref, None)
        if len(standing) == 1:
            return
        self.settle[ref] = winner.value
        if ref == HEAD or ref.startswith(TAG):
            return
        for c in standing:
            if c is winner or c.value is None or c.value == winner.value:
                continue
            name = conflict_name(ref, c.w)
            if name not in self.claims:
                self.branches[name] = c.value
                self.conflicts[name] = ref
                self.settle[name] = c.value


def well_formed(rec) -> bool:
    """A ref record whose fields have the types ctape writes (a hand-made one may not):
    the ref log orders and replays only these, and fsck reports the others."""
    return (isinstance(rec, dict) and isinstance(rec.get("s"), str) and isinstance(rec.get("w"), str)
            and type(rec.get("n")) is int and type(rec.get("lc")) is int
            and isinstance(rec.get("set", {}), dict) and isinstance(rec.get("old", {}), (dict, type(None))))


def conflict_name(branch: str, writer: str) -> str:
    suffix = f".conflict-{writer[:8]}"
    return branch[: 128 - len(suffix)] + suffix


def from_rows(rows, lc: int, seen: dict[str, int]) -> RefState:
    state = RefState(lc=lc, seen=dict(seen))
    for ref, w, n, lc_, value, seen_json in rows:
        state.claims.setdefault(ref, {})[w] = Claim(ref, w, n, lc_, value, json.loads(seen_json))
    state.resolve_all()
    return state
