"""What `log` shows: entries newest first from one or more tips, through filters.

Filters: kinds, a case-insensitive substring of the payload's text (--grep), a time
window (--since / --until: RFC 3339, or a duration back from now such as 2h or 3d),
and hidden entries (bookkeeping marked by importers and integrations) left out unless
asked for. Several tips are walked together, newest first by (time, seq), each entry
once. Like git, the walk stops once every line left is older than --since, after SLOP
entries in a row older than it (times along a line of history mostly grow; see SLOP).

`graph_order` is the order `log --graph` draws in: git's --topo-order (below).
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional

from ..model.errors import CorruptObject, EntryNotFound, InvalidInput, RefsDamaged
from ..model.models import brief, Entry, HIDDEN, kind_value, time_seconds
from ..model.timespec import parse_when


def is_hidden(e: Entry) -> bool:
    return isinstance(e.meta, dict) and bool(e.meta.get(HIDDEN))


def when(text: Any, what: str = "time") -> Optional[float]:
    """Seconds since the epoch for an RFC 3339 time or a duration back from now (2h, 3d), or
    a number of seconds since the epoch: timespec.parse_when's rules, so a Python caller
    meets the same bounds (InvalidInput) as the command line."""
    if text is None:
        return None
    return time_seconds(parse_when(text, what))


def payload_text(value: Any) -> str:
    """Every string in a payload (keys of tool arguments included), for --grep."""
    out: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            for k, x in v.items():
                if k != "call_id":
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif v is not None and not isinstance(v, bool):
            out.append(json.dumps(v))

    walk(value)
    return "\n".join(out)


@dataclass
class Filter:
    kinds: set = field(default_factory=set)
    grep: Optional[str] = None
    since: Optional[float] = None
    until: Optional[float] = None
    hidden: bool = False

    @classmethod
    def make(cls, kinds: Iterable[str] = (), grep: Optional[str] = None, since: Any = None, until: Any = None, hidden: bool = False) -> "Filter":
        if grep is not None and not grep:
            raise InvalidInput("--grep needs some text")
        kinds = [kinds] if isinstance(kinds, str) else kinds  # one kind, not its letters
        if grep is not None and not isinstance(grep, str):
            raise InvalidInput(f"grep is a string to look for, not {brief(grep, 40)}")
        after, before = time_window(since, until)
        return cls({kind_value(k) for k in kinds}, grep.casefold() if grep else None, after, before, hidden)

    def match(self, e: Entry) -> bool:
        if self.kinds and e.kind not in self.kinds:
            return False
        if not self.hidden and is_hidden(e):
            return False
        if self.since is not None or self.until is not None:
            t = time_seconds(e.time)
            if (self.since is not None and t < self.since) or (self.until is not None and t > self.until):
                return False
        if self.grep is not None and self.grep not in payload_text(e.payload).casefold():
            return False
        return True


def time_window(since: Any, until: Any) -> tuple[Optional[float], Optional[float]]:
    """--since and --until in seconds (None where not given); InvalidInput when since is the
    later one (`--since 2h --until 3d`: the two read the other way round), where nothing
    could match and the command would print nothing and say nothing."""
    after, before = when(since, "--since"), when(until, "--until")
    if after is not None and before is not None and after > before:
        raise InvalidInput(f"--since {since} is later than --until {until}: no entry can be both; "
                           "--since takes the earlier time (e.g. --since 3d --until 2h)")
    return after, before


def start_points(tape, session: Optional[str], refs: Iterable[str] = (), every_branch: bool = False, full: bool = False) -> list[str]:
    """The entries a log starts from: each REF (default: the session's HEAD), and with
    `every_branch` also HEAD and every branch of the session; each once, HEAD's first.
    HEAD's entry is read here: when it is gone or damaged and HEAD has moved, the refs are
    read again (Session.from_head), so the log shows the session as it is now."""
    refs = list(refs)
    tips = [tape.resolve(r, session) for r in refs]
    if session and (not refs or every_branch):

        def read(st) -> list:
            if st.head_hash:
                tape.read_entry(st.head_hash)
            return [st.head_hash, *(st.branches.values() if every_branch else ())]

        sess = tape.session(session)
        try:
            tips += sess.from_head(read, full=full or every_branch, missing_ok=every_branch)
        except RefsDamaged:
            raise
        except (EntryNotFound, CorruptObject):  # HEAD stayed there: the walk shows what reads back
            st = sess.refs() if full or every_branch else sess.view()
            tips += [st.head_hash, *(st.branches.values() if every_branch else ())]
        if every_branch and not any(tips):
            sess.check_refs_read_back(sess.refs())
    return list(dict.fromkeys(h for h in tips if h))


ABOVE = 1024  # hidden entries passed over on the way down to a shown one, kept for its labels
# --since: the walk goes on this many entries in a row older than the bound before it stops.
# Times along a history mostly grow, but not always: a clock stepped back, `append --time`,
# an imported transcript with an odd record or decreasing times (it stopped at the first
# older entry, and `log --since` of such a Codex rollout showed none of its 10 entries in
# range: found by an audit). git's walk has the same kind of slop (5 commits).
SLOP = 1000


def walk(tape, tips: Iterable[Optional[str]], flt: Optional[Filter] = None, limit: Optional[int] = None, above: Optional[dict] = None) -> Iterator[Entry]:
    """Entries reachable from `tips`, newest first, each once, that pass `flt`.

    `above`, when given, learns for each shown entry the hidden entries that the walk
    passed over on the way down to it (hash -> [(hash, seq), ...], nearest the tips
    first, at most ABOVE): where a branch, a tag or HEAD on a hidden entry is shown
    when hidden entries are left out (`log` without --hidden). Set before the entry is
    yielded."""
    flt = flt or Filter()
    heap: list = []
    queued: set[str] = set()
    passed: dict[str, list] = {}  # entry -> the hidden entries left out above it (only with `above`)
    carry = above is not None and not flt.hidden

    stopped: list[Exception] = []  # the first line that ended at an entry that cannot be read

    def push(h: Optional[str]) -> None:
        if h is not None and h not in queued:
            queued.add(h)
            try:
                e = tape.read_entry(h)
            except (CorruptObject, EntryNotFound) as err:
                # that line ends here; the others go on (`log --all` beside a gap a salvage
                # left showed nothing of the other branches: found by an audit), and the
                # walk ends with it, where the caller says where history stops
                stopped.append(err)
                return
            heapq.heappush(heap, (-time_seconds(e.time), -e.seq, h, e))

    def end() -> None:
        if stopped:
            raise stopped[0]

    for h in tips:
        push(h)
    shown = 0
    older = 0  # entries in a row older than --since
    parent: Optional[str] = None
    while True:
        if limit is not None and shown >= limit:
            return end()  # before reading the next parent, which may not have arrived yet (rsync)
        push(parent)
        if not heap:
            return end()
        neg_t, _, _, e = heapq.heappop(heap)
        if flt.since is not None and -neg_t < flt.since:
            older += 1
            if older > SLOP and (not heap or -heap[0][0] < flt.since):
                return end()  # SLOP entries in a row older than --since, and every line left too
        else:
            older = 0
        over = passed.pop(e.hash, None) if carry else None
        if flt.match(e):
            if over:
                above[e.hash] = over
            yield e
            shown += 1
        elif carry and e.parent is not None and is_hidden(e):
            over = over or []
            if len(over) < ABOVE:
                over.append((e.hash, e.seq))
            into = passed.setdefault(e.parent, over)
            if into is not over:  # two lines meet: the parent is below both
                into.extend(over[: ABOVE - len(into)])
        parent = e.parent


def newest_visible(tape, h: Optional[str], within: int = 10000) -> Optional[Entry]:
    """The newest entry at or below h that is not hidden (looking at most `within` back)."""
    n = 0
    while h is not None and n < within:
        e = tape.read_entry(h)
        if not is_hidden(e):
            return e
        h, n = e.parent, n + 1
    return None


KEPT = 64  # a line is read one entry ahead of what is shown: a few suffice, and entries may be large


def graph_order(tape, tips: Iterable[Optional[str]]) -> Iterator[Entry]:
    """Entries reachable from `tips` in the order `log --graph` draws them, as git's
    --topo-order: each entry after all of its children, and a line of history kept
    together until it reaches an entry that has other children still to show. Then the
    line that leads to that entry is shown next (the newest one, when several do), so the
    lines drawn side by side stay few whatever the number of branches. Lines with nothing
    left to wait for (other roots, other branches) follow one after another: the first
    tip's (HEAD's) first, then the others newest first.

    An entry's children have its seq + 1, so whether every child of an entry has been
    seen is known once every entry deeper than it has been read: `explore` reads entries
    deepest first, only as deep as the drawing has gone, so `log --graph -n N` reads in
    proportion to N and the tips (not the whole history), and the whole graph is read
    once, each entry once or twice (linear)."""
    firsts = [(e.hash, e.seq, time_seconds(e.time)) for e in map(tape.read_entry, dict.fromkeys(h for h in tips if h))]
    if not firsts:
        return
    order = firsts[:1] + sorted(firsts[1:], key=lambda t: (t[2], t[1]), reverse=True)
    depth = {h: seq for h, seq, _ in order}  # every entry found so far -> its seq
    newest = {h: i for i, (h, _, _) in enumerate(order)}  # -> the first tip in `order` that leads to it
    frontier = [(-seq, i, h) for i, (h, seq, _) in enumerate(order)]  # found, not read yet: deepest first
    heapq.heapify(frontier)
    waiting: dict[str, int] = {}  # entry -> its children read and not shown yet
    children: dict[str, list] = {}  # entry -> heap of (newest, child): who leads to it
    shown: set[str] = set()
    ended: set[str] = set()  # roots shown before explore reached them (tips of lines of their own)
    kept: dict[str, Entry] = {}  # entries read by explore, not shown yet (the newest few: reading is the cost)

    def explore(below: int) -> None:
        """Read every found entry deeper than `below`, counting it as its parent's child."""
        while frontier and -frontier[0][0] > below:
            _, _, h = heapq.heappop(frontier)
            if h in ended:
                continue  # a root shown already: nothing below it to count
            try:
                e = tape.read_entry(h)
            except (EntryNotFound, CorruptObject):
                continue  # showing it says so (and stops there); nothing below it is known
            kept[h] = e
            if len(kept) > KEPT:
                del kept[next(iter(kept))]
            p = e.parent
            if p is None:
                continue
            waiting[p] = waiting.get(p, 0) + 1
            heapq.heappush(children.setdefault(p, []), (newest[h], h))
            if p not in depth:
                depth[p] = e.seq - 1
                newest[p] = newest[h]
                heapq.heappush(frontier, (1 - e.seq, newest[h], p))
            elif newest[h] < newest[p]:
                newest[p] = newest[h]

    def leading_to(h: str) -> str:
        """The tip of the newest line not shown yet that leads down to h (h when none)."""
        while True:
            kids = children.get(h)
            while kids and kids[0][1] in shown:
                heapq.heappop(kids)
            if not kids:
                return h
            h = kids[0][1]

    blocked: list[str] = []  # entries where a line stopped to wait for another, newest last
    stopped: list[Exception] = []  # the first line that ended at an entry that cannot be read
    next_tip = 0
    cur: Optional[str] = None
    while True:
        if cur is None:
            while blocked and blocked[-1] in shown:
                blocked.pop()
            if blocked:
                cur = leading_to(blocked[-1])
            while cur is None and next_tip < len(order):
                t = order[next_tip][0]
                next_tip += 1
                if t not in shown:
                    explore(depth[t])
                    if not waiting.get(t):
                        cur = t
            if cur is None:
                # only a tape whose seqs do not follow their parents gets here with entries
                # left: show them as they come rather than leave them out
                explore(-1)
                cur = next((h for h in depth if h not in shown), None)
                if cur is None:
                    if stopped:
                        raise stopped[0]  # where the caller says history stops
                    return
        try:
            e = kept.pop(cur, None) or tape.read_entry(cur)
        except (EntryNotFound, CorruptObject) as err:
            # that line ends here, the others are drawn on (as `walk` does)
            stopped.append(err)
            shown.add(cur)
            ended.add(cur)
            cur = None
            continue
        shown.add(cur)
        yield e
        cur, p = None, e.parent
        if p is None:
            ended.add(e.hash)
        elif p not in shown:
            explore(depth.get(p, e.seq - 1))
            left = waiting.get(p, 1) - 1
            waiting[p] = left
            if left <= 0:
                cur = p
            else:
                blocked.append(p)
