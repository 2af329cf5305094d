"""What `log` shows: entries newest first from one or more tips, through filters.

Filters: kinds, a case-insensitive substring of the payload's text (--grep), a time
window (--since / --until: RFC 3339, or a duration back from now such as 2h or 3d),
and hidden entries (bookkeeping marked by importers and integrations) left out unless
asked for. Several tips are walked together, newest first by (time, seq), each entry
once. Like git, the walk stops once every line left is older than --since (times
along a line of history only grow, so what lies below is older still).
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional

from ..model.errors import InvalidInput
from ..model.models import HIDDEN, Entry, kind_value, time_seconds
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
        return cls({kind_value(k) for k in kinds}, grep.casefold() if grep else None, when(since, "--since"), when(until, "--until"), hidden)

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


def start_points(tape, session: Optional[str], refs: Iterable[str] = (), every_branch: bool = False) -> list[str]:
    """The entries a log starts from: each REF (default: the session's HEAD), and with
    `every_branch` also HEAD and every branch of the session; each once, HEAD's first."""
    refs = list(refs)
    tips = [tape.resolve(r, session) for r in refs]
    st = tape.session(session).refs() if session else None
    if st is not None and (not refs or every_branch):
        tips += [st.head_hash, *(st.branches.values() if every_branch else ())]
    return list(dict.fromkeys(h for h in tips if h))


def walk(tape, tips: Iterable[Optional[str]], flt: Optional[Filter] = None, limit: Optional[int] = None) -> Iterator[Entry]:
    """Entries reachable from `tips`, newest first, each once, that pass `flt`."""
    flt = flt or Filter()
    heap: list = []
    queued: set[str] = set()

    def push(h: Optional[str]) -> None:
        if h is not None and h not in queued:
            queued.add(h)
            e = tape.read_entry(h)
            heapq.heappush(heap, (-time_seconds(e.time), -e.seq, h, e))

    for h in tips:
        push(h)
    shown = 0
    parent: Optional[str] = None
    while True:
        if limit is not None and shown >= limit:
            return  # before reading the next parent, which may not have arrived yet (rsync)
        push(parent)
        if not heap:
            return
        neg_t, _, _, e = heapq.heappop(heap)
        if flt.since is not None and -neg_t < flt.since and (not heap or -heap[0][0] < flt.since):
            return  # this line and every other one are older than --since from here on
        if flt.match(e):
            yield e
            shown += 1
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
