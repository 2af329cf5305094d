"""Where two histories part: the common base of two refs and the entries after it.

Finding the base. `seq` is an entry's depth, so both refs are first brought to the same
seq (the deeper one only), then walked side by side until they meet. Both walks jump
KEY_EVERY (256) entries at a time along the keyframes that derived values keep at every
256th entry (each names the keyframe 256 above it on its path) while the two sides'
keyframes still differ, and step one parent at a time only within the last 256. So the
base costs about distance/256 + 2x256 reads, never the depth of the history nor the
length of the two sides.

Listing. A side's entries are read from its REF down to the base, one parent at a time,
taking only what a listing needs (parent, seq, kind, the sizes for `--stat`) from the
entry's stored body: its payload is not rebuilt and its large values are not fetched
unless bytes are counted. With `limit`, only the `limit` oldest entries of each side are
read (reached by a keyframe jump from the REF), and each side's length comes from the
seqs. Every entry is read once per diff.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

from ..history import derived
from ..model import redaction
from ..model.canonical import blob_refs
from ..model.errors import RefNotFound
from ..model.schema import decode_entry
from ..store.files import TYPE_ENTRY


@dataclass
class Diff:
    base: Optional[str]  # the newest entry both histories hold (None: nothing in common)
    left: list[str] = field(default_factory=list)  # entries after the base up to REF1, oldest first
    right: list[str] = field(default_factory=list)  # the same for REF2
    left_ref: Optional[str] = None  # the entry REF1 names
    right_ref: Optional[str] = None
    left_kinds: list[str] = field(default_factory=list)  # the kind of each entry of `left`
    right_kinds: list[str] = field(default_factory=list)
    left_count: int = 0  # entries after the base up to REF1 (len(left) unless a limit cut it)
    right_count: int = 0
    base_seq: int = 0  # the base's seq (0: no base)
    left_stat: Optional[dict] = None  # {"entries", "kinds": {kind: n}, "bytes"} when asked for
    right_stat: Optional[dict] = None
    first_pair: Optional[tuple[str, str]] = None  # the first entry after the base on each side
    entries_read: int = 0  # entries this diff read: the measure of its work

    @property
    def complete(self) -> bool:
        """Whether `left` and `right` list every entry after the base (no limit cut them)."""
        return len(self.left) == self.left_count and len(self.right) == self.right_count

    def to_json(self) -> dict:
        out = {
            "base": self.base,
            "left": self.left,
            "right": self.right,
            "left_ref": self.left_ref,
            "right_ref": self.right_ref,
            "left_kinds": self.left_kinds,
            "right_kinds": self.right_kinds,
            "left_count": self.left_count,
            "right_count": self.right_count,
        }
        if self.left_stat is not None:
            out["stat"] = {"left": self.left_stat, "right": self.right_stat}
        return out


class _Node(NamedTuple):
    parent: Optional[str]
    seq: int
    kind: str
    body: int  # bytes of the stored entry body
    blobs: tuple  # hashes of the large values it refers to


class _Nodes:
    """What a walk needs of each entry, read once from its stored body (not rebuilt)."""

    def __init__(self, tape, sizes: bool = False):
        self.tape = tape
        self.sizes = sizes  # keep what `size` needs (the large values each entry refers to)
        self.store = tape.store
        self.seen: dict[str, _Node] = {}
        self.redacted = tape.redactions()

    def get(self, h: str) -> _Node:
        n = self.seen.get(h)
        if n is None:
            n = self.seen[h] = self._read(h)
        return n

    def _read(self, h: str) -> _Node:
        type_, body = self.store.get_object(h)
        if type_ != TYPE_ENTRY:  # a withheld form (redaction), or a value that is not an entry
            e = self.tape.read_entry(h)  # the errors of a read, and the redaction rules
            return _Node(e.parent, e.seq, e.kind, len(body), ())
        raw = decode_entry(h, body)
        blobs = tuple(blob_refs([raw["payload"], raw["meta"], raw["delta"]], [])) if self.sizes and b"\\u0000b" in body else ()
        return _Node(raw["parent"], raw["seq"], raw["kind"], len(body), blobs)

    def size(self, h: str) -> int:
        """Bytes an entry holds: its stored body and its large values (as read_entry counts)."""
        n = self.get(h)
        total = n.body
        for b in n.blobs:
            if b in self.redacted:
                total += len(redaction.marker(self.redacted[b][0][1]).encode())
            else:
                total += len(self.store.read_value(b, h))  # a value lost to damage counts as its marker, as read_entry reads it
        return total

    def up(self, h: str, back: int) -> str:
        """The entry `back` parents above h (which has at least that many)."""
        return derived.ancestor(h, back, self.get, self.store.index.keyframe)

    def prev_key(self, h: str) -> Optional[str]:
        """The keyframe KEY_EVERY entries above keyframe h, if the index keeps h's."""
        k = self.store.index.keyframe(h)
        p = k.get("prev_key") if k else None
        return p if p and self.get(p).seq == self.get(h).seq - derived.KEY_EVERY else None


def diff(
    tape, ref1: str, ref2: str, session: Optional[str] = None, limit: Optional[int] = None, stat: bool = False, newest: bool = False
) -> Diff:
    """Where the histories of ref1 and ref2 part. Each side lists its entries after the
    base, oldest first: all of them, or (`limit`) the `limit` oldest (`newest`: the
    `limit` newest); `first_pair` is the first entry after the base on each side (None
    when a side has none). `stat` counts each side's entries by kind and its bytes (this
    reads every entry of both sides)."""
    h1 = _resolve(tape, ref1, session)
    h2 = _resolve(tape, ref2, session)
    nodes = _Nodes(tape, sizes=stat)
    base = merge_base(nodes, h1, h2)
    base_seq = nodes.get(base).seq if base else 0
    d = Diff(base, left_ref=h1, right_ref=h2, base_seq=base_seq)
    want = None if stat else limit
    d.left, d.left_count = _side(nodes, h1, base_seq, want, newest)
    d.right, d.right_count = _side(nodes, h2, base_seq, want, newest)
    if d.left and d.right:
        d.first_pair = (_first(nodes, d.left, d.left_count, h1), _first(nodes, d.right, d.right_count, h2))
    if stat:
        d.left_stat, d.right_stat = _stat(nodes, d.left), _stat(nodes, d.right)
        if limit is not None:
            d.left, d.right = (d.left[-limit:], d.right[-limit:]) if newest else (d.left[:limit], d.right[:limit])
    d.left_kinds = [nodes.get(h).kind for h in d.left]
    d.right_kinds = [nodes.get(h).kind for h in d.right]
    d.entries_read = len(nodes.seen)
    return d


def merge_base(nodes: _Nodes, a: str, b: str) -> Optional[str]:
    """The newest entry that both a and b have in their history (None: none)."""
    sa, sb = nodes.get(a).seq, nodes.get(b).seq
    if sa > sb:
        a = nodes.up(a, sa - sb)
    elif sb > sa:
        b = nodes.up(b, sb - sa)
    while a != b:  # a and b are at the same seq
        na, nb = nodes.get(a), nodes.get(b)
        if na.seq % derived.KEY_EVERY == 0:
            pa, pb = nodes.prev_key(a), nodes.prev_key(b)
            if pa is not None and pb is not None and pa != pb:
                a, b = pa, pb  # the keyframes 256 above still differ: the base is further up
                continue
        if na.parent is None or nb.parent is None:
            return None  # two roots: nothing in common
        a, b = na.parent, nb.parent
    return a


def _side(nodes: _Nodes, tip: str, base_seq: int, limit: Optional[int], newest: bool = False) -> tuple[list[str], int]:
    """(the entries after the base up to tip, oldest first, at most `limit` of them, the
    oldest or the `newest`; how many there are in all)."""
    count = nodes.get(tip).seq - base_seq
    h: Optional[str] = tip
    if limit is not None and count > limit and not newest:
        h = nodes.up(tip, count - limit)
    want = count if limit is None else min(count, limit)
    out: list[str] = []
    while h is not None and len(out) < want:
        out.append(h)
        h = nodes.get(h).parent
    out.reverse()
    return out, count


def _first(nodes: _Nodes, listed: list[str], count: int, tip: str) -> str:
    """The first entry after the base on a side (listed: some of its entries, oldest first)."""
    return listed[0] if len(listed) == count else nodes.up(tip, count - 1)


def _stat(nodes: _Nodes, hashes: list[str]) -> dict:
    kinds = Counter(nodes.get(h).kind for h in hashes)
    return {
        "entries": len(hashes),
        "kinds": dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))),
        "bytes": sum(nodes.size(h) for h in hashes),
    }


def _resolve(tape, ref: str, session: Optional[str]) -> str:
    h = tape.resolve(ref, session)
    if h is None:
        raise tape.no_entries(ref, session, ": nothing to compare")
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


def payload_diff(tape, h1: str, h2: str, context: int = 3, labels: tuple[str, str] = ("", "")) -> list[str]:
    """A unified diff of two entries' payloads (and kinds), as lines; each side is named
    by its hash, after `labels` when given."""
    a, b = tape.read_entry(h1), tape.read_entry(h2)
    la = [f"kind: {a.kind}"] + payload_lines(a.payload)
    lb = [f"kind: {b.kind}"] + payload_lines(b.payload)
    names = [f"{label} {h[:12]}".strip() for label, h in zip(labels, (h1, h2))]
    return list(difflib.unified_diff(la, lb, fromfile=names[0], tofile=names[1], lineterm="", n=context))
