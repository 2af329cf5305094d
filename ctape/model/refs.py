"""Ref records, and how a session's branches and HEAD follow from them.

Every move of a branch or HEAD is a ref record written by one writer:

    {"s": session, "w": writer, "n": n, "lc": lamport, "seen": {writer: n},
     "t": time, "op": "append", "set": {"main": "<hash>", "HEAD": "@main"},
     "old": {"main": "<hash>"}}

`n` grows with every record of the writer in the session (ctape writes n = lc);
`lc` is a Lamport clock (one more than the largest it has seen); `seen` holds, for
each other writer, the `n` of its claim on the refs this record sets that the
writer had read (records of old versions: its newest record of any ref). A value
in `set` is an entry hash, "@BRANCH" (HEAD attached) or null (deleted).

For each ref, the newest record of each writer is that writer's claim. A claim
is superseded when another writer's claim on the ref has seen it: a move or a
deletion replaces exactly what its writer had seen. When more than one claim
stands (two copies moved one ref, then synced), one wins everywhere: a value
over a deletion (a concurrent append survives a delete), then the highest
(lc, writer). Each other standing tip stays visible as the branch
BRANCH.conflict-WRITER8-TIP8, so one branch may carry several; a tag's other
values likewise stay as tags NAME.conflict-WRITER8-TIP8. The next record
written to the session settles them by writing the winner and the conflict
branches (and tags) as ordinary refs. See docs/format.md section 12.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Container, Optional

from .errors import InvalidName

HEAD = "HEAD"
MOVED_TRIES = 8  # a reader of a ref that moved while a compaction removed where it was starts again at most this often
CONFLICT = ".conflict-"
# tags are refs named TAG + NAME: never a valid branch name, so listings keep them apart
TAG = "tag:"


def check_new_name(name: str, what: str, existing: Container[str]) -> str:
    """Refuse a new branch or tag name that holds CONFLICT: such names are how a sync keeps
    the other side of a conflict, so `status` and `branch` would list a user's own branch
    as one. Names that exist already (a conflict branch moved on purpose) stay usable."""
    if CONFLICT in name and name not in existing:
        raise InvalidName(f"invalid {what} {name!r}: '{CONFLICT}' marks the other side of a sync conflict "
                          f"(ctape makes those names itself); pick another name")
    return name


@dataclass(slots=True)
class Claim:
    ref: str
    w: str
    n: int
    lc: int
    value: Optional[str]
    seen: dict
    at: Optional[str] = None  # HEAD attached to a branch: the branch's tip as its writer saw it (`at`)
    cut: Optional[dict] = None  # the record's `cut`: writer -> [n, ...] of cut-off claims it had read
    hi: Optional[int] = None  # cut off: the n of its writer's record whose `gap` holds it (cut_off)
    gap: Optional[int] = None  # the record's own `gap`: the newest n of its writer it had read


# A writer's own records that it could not read when it wrote again (an `rsync --delete`
# took its newest files, and a third copy brings them back later) are "cut off": the first
# record a writer writes in a session through an index cache that cannot vouch for its own
# history (a new cache, or one that salvaged a loss) carries `gap`: the newest n of its own
# it had read there. Its records with gap < n < that record's n are cut off by it: a later
# record of the same writer replaces one only when its `cut` names it, as a record of
# another writer replaces a claim only when its `seen` does. See docs/format.md section 12.
CUT_KEY = "~cut"  # the index keeps a record's `cut` beside its `seen` under this key (no writer id has "~")


def cut_off(gaps: Optional[list], n: int) -> Optional[int]:
    """The record n of a writer cut off by one of its gaps [(lo, hi)]: the smallest such hi, or None."""
    if not gaps:
        return None
    his = [hi for lo, hi in gaps if lo < n < hi]
    return min(his) if his else None


def own_gap(gaps: Optional[list], n: int) -> Optional[int]:
    """The `gap` of the record n of a writer with these gaps, if it has one."""
    for lo, hi in gaps or ():
        if hi == n:
            return lo
    return None


def claim_key(w: str, n: int, hi: Optional[int]) -> str:
    """Where a claim is kept among its ref's claims: its writer, or, cut off, its writer and
    n too: a writer's newer record does not replace a cut-off claim it had not read."""
    return w if hi is None else f"{w} {n}"


def rank(ref: str, c: Claim) -> int:
    """2: a value; 1: a deletion; 0: a conflict branch set to the very tip its name records
    (a settling record writing it again: whoever deleted the branch had seen that tip)."""
    if c.value is None:
        return 1
    if CONFLICT in ref and c.value[:8] == ref[ref.rindex(CONFLICT) + len(CONFLICT):].split("-")[1][:8]:
        return 0
    return 2


def shown(ref: str, standing: list[Claim]) -> tuple[Claim, list[Claim]]:
    """The claim that decides a ref, and the other standing claims whose tips need a
    conflict branch. A value beats a deletion (a concurrent append survives a delete),
    then the highest (lc, writer) wins; a tip equal to the winner's needs nothing."""
    if len(standing) == 1:
        return standing[0], []
    ranked = {id(c): rank(ref, c) for c in standing}
    if any(r == 1 for r in ranked.values()):
        standing = [c for c in standing if ranked[id(c)] != 0]
    win = max(standing, key=lambda c: (ranked[id(c)], c.lc, c.w))
    others = [c for c in standing if c is not win and c.value is not None and c.value != win.value]
    if ref == HEAD:  # HEAD on another branch: that branch keeps its entries
        others = [c for c in others if not c.value.startswith("@")]
    return win, sorted(others, key=lambda c: (c.w, c.n))


def standing_claims(cs: list[Claim]) -> list[Claim]:
    """The claims no other writer's claim on the same ref had seen."""
    if len(cs) == 1:
        return cs
    return [c for c in cs if not any(o is not c and saw(o, c) for o in cs)]


def saw(o: Claim, c: Claim) -> bool:
    """Claim o was written after reading claim c (o supersedes c). A writer's later record
    has read its earlier ones, unless a gap cuts them off from it; another writer's has
    read those its `seen` reaches. A cut-off claim is reached by a `seen` that stops before
    the record that cut it off, or by a `cut` that names it."""
    if o.w == c.w:
        if o.n <= c.n:
            return False
        if c.hi is None or o.n < c.hi:
            return True
        # o read its writer's records up to its own gap: c among them, as a record like any
        # other, when that did not reach the record that cut c off (o would have named it)
        return (o.gap is not None and c.n <= o.gap < c.hi) or _names(o.cut, c)
    n = o.seen.get(c.w, 0)
    if type(n) is not int:
        return False
    if c.hi is None:
        return n >= c.n
    return c.n <= n < c.hi or _names(o.cut, c)


def _names(cut: Optional[dict], c: Claim) -> bool:
    ks = cut.get(c.w) if cut else None
    return type(ks) is list and any(type(k) is int and c.n <= k < c.hi for k in ks)


@dataclass
class RefState:
    """A session's refs as resolved from the claims of every writer."""

    claims: dict[str, dict[str, Claim]] = field(default_factory=dict)  # ref -> writer -> claim
    branches: dict[str, str] = field(default_factory=dict)
    head: Optional[str] = None  # "@branch", an entry hash, or None (no HEAD yet)
    head_from: Optional[str] = None  # the deleted branch whose last tip HEAD stays at (_head_on_deleted)
    unsettled: dict[str, str] = field(default_factory=dict)  # conflict branch no record wrote yet -> its ref
    tags: dict[str, str] = field(default_factory=dict)  # tag name -> entry hash
    settle: dict[str, Optional[str]] = field(default_factory=dict)  # refs a next record must write
    lc: int = 0
    seen: dict[str, int] = field(default_factory=dict)  # writer -> newest n read
    gaps: dict[str, list] = field(default_factory=dict)  # writer -> [(lo, hi)]: the `gap` of each record that has one

    def copy(self) -> "RefState":
        """A copy to change (claims are replaced, never changed, so they are shared)."""
        return replace(self, claims={ref: dict(cs) for ref, cs in self.claims.items()}, branches=dict(self.branches),
                       unsettled=dict(self.unsettled), tags=dict(self.tags), settle=dict(self.settle), seen=dict(self.seen),
                       gaps={w: list(g) for w, g in self.gaps.items()})

    @property
    def branch(self) -> Optional[str]:
        return self.head[1:] if self.head and self.head.startswith("@") else None

    @property
    def shown_branch(self) -> Optional[str]:
        """The branch status and listings show: HEAD's, and `main` in a session no ref record
        started yet (one that holds only a stream cut off): its first record starts it there,
        as git shows an unborn branch. None when detached, or HEAD's record has not arrived."""
        if self.head is None and not self.branches:
            return "main"
        return self.branch

    @property
    def head_hash(self) -> Optional[str]:
        if self.head is None:
            return None
        if self.head.startswith("@"):
            return self.branches.get(self.head[1:])
        return self.head

    @property
    def conflicts(self) -> dict[str, str]:
        """Every conflict branch -> the ref whose other tip it holds: the ones the claims
        show now, and the ones a record has settled, until someone deletes or renames them."""
        out = {b: b[: b.rindex(CONFLICT)] for b in self.branches if CONFLICT in b}
        out.update((b, of) for b, of in self.unsettled.items() if not b.startswith(TAG))
        return out

    @property
    def tag_conflicts(self) -> dict[str, str]:
        """Every conflict tag -> the tag whose other value it holds (a sync found two values
        for one tag: one wins, the other stays as NAME.conflict-WRITER8-TIP8), until deleted."""
        return {t: t[: t.rindex(CONFLICT)] for t in self.tags if CONFLICT in t}

    @property
    def head_missing(self) -> bool:
        """HEAD has no claim on this copy while branches have: its record has not arrived (a
        copy cut off between a session's files, one bringing a branch's record without the
        one that set HEAD). HEAD is unknown, not unborn: an append would start a new root
        and take its branch (`main`) from the entries the branch holds."""
        return self.head is None and not self.claims.get(HEAD) and bool(self.branches)

    @property
    def removed(self) -> bool:
        """Every ref of the session was deleted (`session rm`), and nothing came back."""
        return bool(self.claims) and not self.branches and self.head is None

    def seen_for(self, refs, me: str) -> dict[str, int]:
        """What a record setting `refs` has seen: each other writer's claim on them, and
        everything those claims (and this writer's own) had seen. Carrying the claims'
        `seen` on keeps a superseded claim superseded when a compaction dropped the record
        that superseded it and an older copy brings the claim back (rsync never deletes)."""
        out: dict[str, int] = {}
        for ref in refs:
            for c in self.claims.get(ref, {}).values():
                if c.w != me and c.n > out.get(c.w, 0):
                    out[c.w] = c.n
                for o, n in c.seen.items():
                    if o != me and type(n) is int and n > out.get(o, 0):
                        out[o] = n
        return out

    def cut_for(self, refs) -> dict[str, list[int]]:
        """What a record setting `refs` names of the cut-off claims it has read (saw): for
        each writer, this one included, and each of its gaps, the newest such claim on them,
        and what those claims' own `cut` named (carried on, as `seen` is). Empty when none."""
        best: dict[tuple, int] = {}  # (writer, the hi of the gap that cuts it off) -> n

        def note(w: str, n: int) -> None:
            hi = cut_off(self.gaps.get(w), n)  # None: a gap this copy has not read yet
            if n > best.get((w, hi), 0):
                best[(w, hi)] = n

        for ref in refs:
            for c in self.claims.get(ref, {}).values():
                if c.hi is not None:
                    note(c.w, c.n)
                if c.cut:
                    for w, ks in c.cut.items():
                        for k in ks if type(ks) is list else ():
                            if type(k) is int:
                                note(w, k)
        out: dict[str, list[int]] = {}
        for (w, _), n in best.items():
            out.setdefault(w, []).append(n)
        return {w: sorted(ns) for w, ns in sorted(out.items())}

    def apply(self, rec: dict) -> None:
        """Take one more record into account (any order gives the same result)."""
        if not self._moved_own_branch(rec):
            self._apply_resolving(rec)

    def _moved_own_branch(self, rec: dict) -> bool:
        """The common case, done without resolving: a writer moves a branch on which it holds
        the only claim, with nothing unsettled. The claim is replaced and the branch takes its
        value; every other ref resolves as before (HEAD's claims did not change, and the
        branch it may attach to still exists). False (nothing done) in every other case."""
        sets = rec.get("set")
        if self.settle or self.unsettled or sets is None or len(sets) != 1 or "gap" in rec or "cut" in rec:
            return False
        ((ref, value),) = sets.items()
        cs = self.claims.get(ref)
        if value is None or cs is None or len(cs) != 1 or ref not in self.branches or CONFLICT in ref:
            return False
        w, n = rec["w"], rec["n"]
        old = cs.get(w)
        if old is None or n <= old.n or old.hi is not None or (self.gaps and cut_off(self.gaps.get(w), n) is not None):
            return False
        cs[w] = Claim(ref, w, n, rec["lc"], value, rec.get("seen") or {}, None)
        self.branches[ref] = value
        self.lc = max(self.lc, rec["lc"])
        self.seen[w] = max(self.seen.get(w, 0), n)
        return True

    def _apply_resolving(self, rec: dict) -> None:
        """`apply` for any record: resolve every ref it touches (and HEAD) from their claims."""
        w, n = rec["w"], rec["n"]
        seen = rec.get("seen") or {}
        cut = rec.get("cut") or None
        sets = rec.get("set", {})
        gap = rec.get("gap")
        new_gap = type(gap) is int and 0 <= gap < n and (gap, n) not in self.gaps.get(w, ())
        if new_gap:
            self._add_gap(w, gap, n)
        hi = cut_off(self.gaps.get(w), n)
        key = claim_key(w, n, hi)
        for ref, value in sets.items():
            mine = self.claims.setdefault(ref, {})
            old = mine.get(key)
            if old is None or n > old.n:
                mine[key] = Claim(ref, w, n, rec["lc"], value, seen, tip_at(rec) if ref == HEAD else None, cut, hi,
                                  gap if new_gap else own_gap(self.gaps.get(w), n))
        self.lc = max(self.lc, rec["lc"])
        self.seen[w] = max(self.seen.get(w, 0), n)
        if new_gap or any(CONFLICT in ref for ref in sets):
            self.resolve_all()  # a conflict branch's name may now be taken: its ref is named anew
            return
        affected = set(sets) | {self.unsettled[r] for r in sets if r in self.unsettled}
        if HEAD in self.claims:
            affected.add(HEAD)  # where HEAD goes when it was deleted depends on the branches
        for ref in sorted(affected):
            self._resolve_ref(ref)
        self._default_head()
        self._head_on_deleted()

    def _add_gap(self, w: str, lo: int, hi: int) -> None:
        """A record of writer w with `gap` lo, at n hi: its claims in between are cut off,
        each kept apart from the writer's newer claims (claim_key)."""
        self.gaps.setdefault(w, []).append((lo, hi))
        for ref, cs in self.claims.items():
            for key, c in list(cs.items()):
                if c.w == w and lo < c.n < hi:
                    now = cut_off(self.gaps[w], c.n)
                    if now != c.hi:
                        del cs[key]
                        moved = replace(c, hi=now)
                        cs[claim_key(w, c.n, now)] = moved

    def resolve_all(self) -> None:
        self.branches.clear()
        self.unsettled.clear()
        self.tags.clear()
        self.settle.clear()
        self.head = self.head_from = None
        for ref in sorted(self.claims):
            self._resolve_ref(ref)
        self._default_head()
        self._head_on_deleted()

    def _resolve_ref(self, ref: str) -> None:
        if self.unsettled:
            for name in [c for c, of in self.unsettled.items() if of == ref]:
                del self.unsettled[name]
                if name not in self.claims:
                    if name.startswith(TAG):
                        self.tags.pop(name[len(TAG):], None)
                    else:
                        self.branches.pop(name, None)
                self.settle.pop(name, None)
        self.settle.pop(ref, None)
        cs = list(self.claims.get(ref, {}).values())
        if not cs:
            return
        standing = standing_claims(cs)
        winner, others = shown(ref, standing)
        if ref == HEAD:
            self.head = winner.value
            self.head_from = None
        elif ref.startswith(TAG):  # a tag: one winner; another value stays as a conflict tag
            if winner.value is not None:
                self.tags[ref[len(TAG):]] = winner.value
            else:
                self.tags.pop(ref[len(TAG):], None)
        elif winner.value is not None:
            self.branches[ref] = winner.value
        else:
            self.branches.pop(ref, None)
        if len({c.value for c in standing}) == 1:
            return  # claims that agree need no settling
        self.settle[ref] = winner.value
        for c in others:
            name = self._conflict_name(ref, c)
            if name is not None:
                if ref.startswith(TAG):  # "tag:NAME.conflict-...": a tag, shown by `tag` and `status`
                    self.tags[name[len(TAG):]] = c.value
                else:
                    self.branches[name] = c.value
                self.unsettled[name] = ref
                self.settle[name] = c.value

    def _conflict_name(self, ref: str, c: Claim) -> Optional[str]:
        """The branch that shows a losing tip: named by its writer and tip, so every
        round of sync gets its own. None when a branch of that name already holds it."""
        for name in (conflict_name(ref, c.w, c.value), conflict_name(ref, c.w, c.value, c.n)):
            taken = self.claims.get(name)
            if not taken:
                return name
            if shown(name, standing_claims(list(taken.values())))[0].value == c.value:
                return None
        return None  # both names were used for other tips since: nothing sane is left to show it

    def _default_head(self) -> None:
        """A session whose HEAD was deleted while a concurrent append brought a branch back
        attaches HEAD to that branch (main first), and the next record writes it."""
        if self.head is None and self.branches and HEAD in self.claims:
            conflicts = self.conflicts  # a property that walks every branch: once, not per branch
            plain = sorted(b for b in self.branches if b not in conflicts)
            name = "main" if "main" in self.branches else (plain or sorted(self.branches))[0]
            self.head = "@" + name
            self.settle[HEAD] = self.head

    def _head_on_deleted(self) -> None:
        """HEAD attached to a branch that a deletion on another copy removed (the checkout
        and the deletion did not see each other: a checkout needs the branch): HEAD stays,
        detached, at the tip the branch had when HEAD's writer attached to it (the record's
        `at`), so the entries it was working on stay reachable, as `branch -D` of the
        checked-out branch does. The next record writes it. A HEAD attached by the writer
        that deleted the branch is an unborn branch and stays so (`pop_item` of a first
        item: HEAD on the branch, then the branch deleted), and so is one whose record has
        no `at` (written before it, or attached to a branch that did not exist yet)."""
        b = self.branch
        if b is None or b in self.branches or not self.claims.get(b):
            return
        gone = shown(b, standing_claims(list(self.claims[b].values())))[0]
        mine = [c for c in standing_claims(list(self.claims.get(HEAD, {}).values())) if c.value == self.head]
        if gone.value is not None or not mine or any(c.w == gone.w for c in mine):
            return
        at = max(mine, key=lambda c: (c.lc, c.w)).at
        if at is None:
            return
        self.head = at
        self.head_from = b
        self.settle[HEAD] = at


def tip_at(rec: dict) -> Optional[str]:
    """The `at` of a record attaching HEAD to a branch, when it is an entry hash."""
    at = rec.get("at")
    return at if type(at) is str and len(at) == 64 and all(ch in "0123456789abcdef" for ch in at) else None


def conflict_name(branch: str, writer: str, tip: str, n: Optional[int] = None) -> str:
    """BRANCH.conflict-WRITER8-TIP8 (-N when that name was used for another tip since)."""
    suffix = f"{CONFLICT}{writer[:8]}-{tip.lstrip('@')[:8]}" + (f"-{n}" if n is not None else "")
    return branch[: 128 - len(suffix)] + suffix


def from_rows(rows, lc: int, seen: dict[str, int], gaps: Optional[dict[str, list]] = None) -> RefState:
    """The refs from the index's claim rows (a row's writer column may be a claim_key)."""
    state = RefState(lc=lc, seen=dict(seen), gaps={w: list(g) for w, g in (gaps or {}).items()})
    parsed: dict[str, tuple] = {}  # claims share a few `seen` texts (most are "{}"); read only
    for ref, key, n, lc_, value, seen_json, at in rows:
        got = parsed.get(seen_json)
        if got is None:
            got = parsed[seen_json] = split_seen(json.loads(seen_json))
        w = key.split(" ", 1)[0]
        hi = cut_off(state.gaps.get(w), n)
        mine = state.claims.setdefault(ref, {})
        key = claim_key(w, n, hi)
        old = mine.get(key)
        if old is None or n > old.n:
            mine[key] = Claim(ref, w, n, lc_, value, got[0], at, got[1], hi, own_gap(state.gaps.get(w), n))
    state.resolve_all()
    return state


def split_seen(stored: dict) -> tuple[dict, Optional[dict]]:
    """The index's `seen` text holds the record's `cut` under CUT_KEY: (seen, cut)."""
    if CUT_KEY not in stored:
        return stored, None
    seen = dict(stored)
    return seen, seen.pop(CUT_KEY) or None
