"""compact: which ref records stay and what they reach. Kept are the records younger than
--expire and those the refs still follow from: the kept records must resolve every ref
(value, HEAD, conflict branches) as all the records do, by model/refs.py's rules. Their
values are the roots, and `_mark` walks the entry graph from them.
"""

from __future__ import annotations

from typing import NamedTuple

from ..model.refs import HEAD, Claim, RefState, claim_key, conflict_name, cut_off, own_gap, saw, shown, standing_claims
from .compact_scan import Rec, Scan

TIME_FLOOR, TIME_FLOOR_US = "1980", 315_532_800 * 10**6  # record times before 1980 are no times (formats/_common.FILE_TIME_FLOOR)
SKEW_US = 86_400 * 10**6  # a record's clock value this far past now is a clock that ran ahead: not trusted


class Cutoff(NamedTuple):
    """--expire's bound. A record is young when its time is at or after `t` (RFC 3339), or
    its clock value (`lc`: microseconds since the epoch when it was made at the latest, and
    past every record its writer had read) is at or after `lc`, unless that value is more
    than a day past `now_lc` (a clock that ran ahead would keep every later record young).
    The clock value covers a record made under a clock behind: a branch deleted a minute
    ago on a machine whose clock said 1970 had expired at once (found by an audit)."""

    t: str
    lc: int
    now_lc: int

    def young(self, r: Rec) -> bool:
        if r.t < TIME_FLOOR and r.lc < TIME_FLOOR_US and self.lc < self.now_lc:
            # made under a clock at 1970 (a dead RTC battery), with nothing read from a right
            # one: its age is unknown, and it is kept but by `--expire now` (a branch deleted
            # there was freed at the next compaction: found by an audit)
            return True
        return r.t >= self.t or self.lc <= r.lc <= self.now_lc + SKEW_US


def _kept_records(records: list[Rec], cutoff: Cutoff, scan: Scan) -> tuple[list[Rec], set[bytes]]:
    """Records younger than the cutoff, plus those the refs still follow from.

    A claim that another writer's claim had seen (a move or a deletion made after
    reading it) no longer decides its ref on any copy: once it expires its record
    goes, and with it the data only it reached. What is kept gives every ref the same
    value and conflict branches as all records do (see _session_kept)."""
    by_session: dict[str, list[Rec]] = {}
    for r in records:
        by_session.setdefault(r.s, []).append(r)
    keep: set[tuple] = set()
    roots: set[bytes] = set()
    for recs in by_session.values():
        kept, head_root = _session_kept(recs, cutoff, scan.session_gaps(recs[0].s))
        keep |= kept
        roots |= head_root
    out, seen = [], set()
    for r in records:
        ident = (r.s, r.w, r.n)
        if ident in keep and ident not in seen:
            seen.add(ident)
            out.append(r)
    return out, roots


def _session_kept(recs: list[Rec], cutoff: Cutoff, gaps: dict[str, list]) -> tuple[set[tuple], set[bytes]]:
    """Start from the young records, the holders of the claims the refs show (the winner
    when it sets a value or is HEAD's, each tip a conflict branch holds) and the records with the session's largest Lamport clock
    (a writer takes its next n from the clock, so n never repeats); then, while some ref
    would resolve differently from these alone (an older claim that a dropped record had
    superseded), add the records that superseded it. Also the root no record sets: the
    tip a HEAD on a branch deleted on another copy stays at (section 12, rule 7)."""
    full = _claims(recs, gaps)
    whole = _resolve(full)
    want = {ref: _outcome(cs) for ref, cs in full.items()}
    top = max(r.lc for r in recs)
    kept = {(r.s, r.w, r.n) for r in recs if cutoff.young(r) or r.lc == top}
    for ref, cs in full.items():
        pairs = standing_pairs(cs)
        win, others = shown(ref, [c for c, _ in pairs])
        for c, r in pairs:
            if (c is win and (c.value is not None or ref == HEAD)) or any(c is o for o in others):
                kept.add((r.s, r.w, r.n))
    while True:
        sub = _claims([r for r in recs if (r.s, r.w, r.n) in kept], gaps)
        more = set()
        for ref, cs in full.items():
            have = sub.get(ref, {})
            if _outcome(have) == want[ref]:
                continue
            standing = {(c.w, c.n) for c, _ in standing_pairs(cs)}
            for c, r in standing_pairs(cs):
                more.add((r.s, r.w, r.n))
            for c, _ in standing_pairs(have):
                if (c.w, c.n) not in standing:  # superseded by a claim that is not kept: keep one
                    more |= {(r.s, r.w, r.n) for o, r in cs.values() if saw(o, c)}
        if more <= kept:
            more = _holders_across_refs(full, whole, sub)
            if more <= kept:
                return kept, _hash_values([whole.head]) if whole.head_from else set()
        kept |= more


def _holders_across_refs(full: dict, whole: RefState, sub: dict) -> set[tuple]:
    """What one ref's claims decide for another. A conflict branch's name depends on the
    claims on that name (section 12, rule 4: `-N` when a record set it to another value
    since), and a HEAD attached to a branch deleted on another copy stays at the tip its
    writer attached at, while the branch's claims say it is deleted (`RefState._head_on_deleted`): when the kept records would resolve
    differently, keep the standing claims those were weighed against."""
    if _outcome_of(whole) == _outcome_of(_resolve(sub)):
        return set()
    names = [whole.head_from] if whole.head_from else []
    for ref, cs in full.items():
        for c in shown(ref, [c for c, _ in standing_pairs(cs)])[1]:
            names += [conflict_name(ref, c.w, c.value), conflict_name(ref, c.w, c.value, c.n)]
    return {(r.s, r.w, r.n) for name in names for _, r in standing_pairs(full.get(name, {}))}


def _resolve(claims: dict) -> RefState:
    st = RefState(claims={ref: {w: c for w, (c, _) in cs.items()} for ref, cs in claims.items()})
    st.resolve_all()
    return st


def _outcome_of(st: RefState) -> tuple:
    return st.branches, st.head, st.tags


def _claims(recs: list[Rec], gaps: dict[str, list]) -> dict[str, dict[str, tuple[Claim, Rec]]]:
    """ref -> claim key -> (its claim, the record holding it): each writer's newest record
    setting the ref, and each claim one of its gaps cuts off (model/refs.py: claim_key)."""
    out: dict[str, dict[str, tuple[Claim, Rec]]] = {}
    for r in recs:
        hi = cut_off(gaps.get(r.w), r.n) if gaps else None
        key = claim_key(r.w, r.n, hi)
        for ref, value in r.set:
            mine = out.setdefault(ref, {})
            old = mine.get(key)
            if old is None or r.n > old[0].n:
                cut = {w: list(ns) for w, ns in r.cut} or None
                mine[key] = (Claim(ref, r.w, r.n, r.lc, value, dict(r.seen), r.at if ref == HEAD else None, cut, hi,
                                   own_gap(gaps.get(r.w), r.n)), r)
    return out


def standing_pairs(cs: dict[str, tuple[Claim, Rec]]) -> list[tuple[Claim, Rec]]:
    standing = {id(c) for c in standing_claims([c for c, _ in cs.values()])}
    return [(c, r) for c, r in cs.values() if id(c) in standing]


def _outcome(cs: dict[str, tuple[Claim, Rec]]) -> tuple:
    """What a ref's claims show: the winning value and each other standing tip (its conflict branch)."""
    if not cs:
        return (None, ())
    ref = next(iter(cs.values()))[0].ref
    win, others = shown(ref, [c for c, _ in standing_pairs(cs)])
    return (win.value, tuple((c.w, c.n, c.value) for c in others))


def _hash_values(values) -> set[bytes]:
    return {bytes.fromhex(v) for v in values if isinstance(v, str) and len(v) == 64 and not v.startswith("@")}


def _roots(scan: Scan, kept: list[Rec], cutoff: Cutoff) -> set[bytes]:
    """Every kept record's new values; the old values too while the record has not expired."""
    roots: set[bytes] = set()
    for r in kept:
        roots |= _hash_values(v for _, v in r.set)
        if cutoff.young(r):
            roots |= _hash_values(r.old)
    roots |= _hash_values(base for key, base in scan.partial_streams.items() if key not in scan.closed)
    return roots


def _mark(graph: dict[bytes, tuple], roots: set[bytes]) -> set[bytes]:
    live: set[bytes] = set()
    stack = list(roots)
    while stack:
        h = stack.pop()
        if h in live:
            continue
        live.add(h)
        stack.extend(x for x in graph.get(h, ()) if x not in live)
    return live


def _moves(removed: dict[str, set[bytes]], kept: list[Rec], cutoff: Cutoff, graph: dict[bytes, tuple], sessions: list[str]) -> dict[str, set[bytes]]:
    """Where the objects that removed sessions' files hold and other sessions reach go:
    session -> the objects its pack takes over (each to the first session, by name, that
    reaches it). `removed`: removed session -> the live objects its files hold; `sessions`:
    the sessions that may take them (none removed: a removed copy's young records reach
    them too, and it would keep them under its name). A copy of
    a session (`session cp`) refers to entries stored in the first session's files; once
    that one is removed, its folder would keep them for good, and with them its name
    (docs/privacy.md: a session named like a secret is copied under another name, then
    removed)."""
    held = set().union(*removed.values()) if removed else set()
    by_session: dict[str, list[Rec]] = {}
    for r in kept:
        by_session.setdefault(r.s, []).append(r)
    out: dict[str, set[bytes]] = {}
    for name in sessions:
        if not held:
            break
        own = by_session.get(name, [])
        roots = _hash_values(v for r in own for _, v in r.set) | _hash_values(v for r in own if cutoff.young(r) for v in r.old)
        reach = _mark(graph, roots) & held
        if reach:
            out[name] = reach
            held -= reach
    return out
