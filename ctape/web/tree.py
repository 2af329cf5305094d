"""A session's branch tree: every branch, conflict branch, fork point and anchor,
laid out on the server and drawn as SVG.

`Graph` keeps, per session, the few fields of each entry the tree needs (parent,
seq, kind, anchor name, usage). It is filled by walking parents from every tip
and extended incrementally: after an append only the new entries are read, so a
page of a long session pays the walk once, not per request or per client. A walk
stops after WALK_LIMIT entries per session; the tree then says what it left out.
"""

from __future__ import annotations

import hashlib
import heapq
import time
from dataclasses import dataclass, field
from typing import Optional

from ..errors import CorruptObject, EntryNotFound
from .markdown import esc
from .queries import is_hidden

WALK_LIMIT = 200_000  # entries remembered per session
MAX_NODES = 400  # nodes drawn; anchors beyond this are left out (newest kept)
ROW, LANE, PAD, LEFT = 26, 22, 14, 48


@dataclass(slots=True)
class Node:
    parent: Optional[str]
    seq: int
    kind: str
    anchor: Optional[str]
    hidden: bool


@dataclass
class Graph:
    nodes: dict[str, Node] = field(default_factory=dict)
    tips: dict[str, str] = field(default_factory=dict)  # label -> hash
    current: Optional[str] = None  # label of HEAD's branch, or "HEAD" when detached
    conflicts: set[str] = field(default_factory=set)
    truncated: bool = False
    missing: bool = False  # an entry on some path has not arrived yet (an rsync under way)
    damaged: bool = False  # an entry on some path cannot be read (damaged records)
    sig: str = ""
    frontier: list = field(default_factory=list)  # heap of (-seq, hash) still to read
    queued: set = field(default_factory=set)

    @property
    def complete(self) -> bool:
        return not self.frontier

    def update(self, tape, session, budget: Optional[float] = None) -> bool:
        """Read the refs, then unseen entries newest first (every branch alike) for at most
        `budget` seconds (None: all of them). True when the whole history is read."""
        refs = session.refs()
        tips = dict(refs.branches)
        if refs.branch is None and refs.head_hash:
            tips["HEAD"] = refs.head_hash
        self.tips = tips
        self.current = refs.branch or ("HEAD" if refs.head_hash else None)
        self.conflicts = set(refs.conflicts)
        for h in sorted(set(tips.values())):
            self._push(h, -(1 << 62))  # tips first: their seq is not known yet
        deadline = None if budget is None else time.monotonic() + budget
        while self.frontier:
            if deadline is not None and time.monotonic() > deadline:  # one read can decode a whole block
                break
            _, h = heapq.heappop(self.frontier)
            self.queued.discard(h)
            if h in self.nodes:
                continue
            if len(self.nodes) >= WALK_LIMIT:
                self.truncated = True
                self.frontier.clear()
                self.queued.clear()
                break
            try:
                e = tape.read_entry(h)
            except EntryNotFound:  # not synced yet: the walk stops there
                self.missing = True
                continue
            except CorruptObject:  # damaged: the walk stops there too
                self.damaged = True
                continue
            anchor = e.payload.get("name") if e.kind == "anchor" and isinstance(e.payload, dict) else None
            self.nodes[h] = Node(e.parent, e.seq, e.kind, str(anchor) if anchor is not None else None, is_hidden(e))
            if e.parent is not None:
                self._push(e.parent, 1 - e.seq)
        state = repr(sorted(tips.items())) + repr(refs.head) + ("" if self.complete else f"|{len(self.nodes)}")
        self.sig = hashlib.blake2b(state.encode(), digest_size=8).hexdigest()  # what a page compares
        return self.complete

    def _push(self, h: str, prio: int) -> None:
        if h not in self.nodes and h not in self.queued:
            self.queued.add(h)
            heapq.heappush(self.frontier, (prio, h))

    def path(self, tip: str) -> list[str]:
        """Hashes root -> tip of the remembered part of the path."""
        out = []
        h: Optional[str] = tip
        while h is not None and h in self.nodes:
            out.append(h)
            h = self.nodes[h].parent
        return out[::-1]

    def totals(self) -> dict:
        kinds: dict[str, int] = {}
        for n in self.nodes.values():
            kinds[n.kind] = kinds.get(n.kind, 0) + 1
        return {"entries": len(self.nodes), "kinds": kinds}


@dataclass
class Drawn:
    h: str
    seq: int
    lane: int
    labels: list[str]
    classes: list[str]
    parent: Optional[int]  # index of the drawn node above it
    gap: int  # entries between it and that node, not drawn


def layout(g: Graph) -> list[Drawn]:
    """The nodes worth drawing (roots, forks, tips, anchors), each with a lane, in row order."""
    children: dict[str, int] = {}
    for n in g.nodes.values():
        if n.parent is not None:
            children[n.parent] = children.get(n.parent, 0) + 1
    # lanes: the current branch first, then the others by name
    order = sorted(g.tips.items(), key=lambda kv: (kv[0] != g.current, kv[0]))
    lane_of: dict[str, int] = {}
    keep: dict[str, list[str]] = {}
    anchors: list[str] = []
    for lane, (label, tip) in enumerate(order):
        h: Optional[str] = tip
        while h is not None and h in g.nodes and h not in lane_of:  # down to a drawn path
            lane_of[h] = lane
            n = g.nodes[h]
            if n.parent is None or n.parent not in g.nodes or children.get(h, 0) > 1:
                keep.setdefault(h, [])
            if n.anchor is not None and h not in keep:
                anchors.append(h)
            h = n.parent
        if tip in g.nodes:
            keep.setdefault(tip, []).append(label)
    anchors = sorted(set(anchors), key=lambda h: g.nodes[h].seq)
    room = max(0, MAX_NODES - len(keep))
    for h in anchors[len(anchors) - room :] if room else []:
        keep.setdefault(h, [])
    rows = sorted(keep, key=lambda h: (g.nodes[h].seq, lane_of[h]))
    index = {h: i for i, h in enumerate(rows)}
    out: list[Drawn] = []
    for h in rows:
        n = g.nodes[h]
        # the nearest drawn ancestor, and how many entries lie between
        p, gap = n.parent, 0
        while p is not None and p in g.nodes and p not in index:
            p, gap = g.nodes[p].parent, gap + 1
        labels = list(keep[h])
        classes = []
        if n.anchor is not None:
            labels.append("⚓ " + n.anchor)
            classes.append("anchor")
        if any(lab in g.conflicts for lab in keep[h]):
            classes.append("conflict")
        if keep[h]:
            classes.append("tip")
        if children.get(h, 0) > 1:
            classes.append("fork")
        if n.kind in ("error", "streaming"):
            classes.append(n.kind)
        out.append(Drawn(h, n.seq, lane_of[h], labels, classes, index.get(p) if p in index else None, gap))
    return out


def svg(g: Graph, session: str, viewing: Optional[str], link) -> str:
    """The tree as an SVG of links: each node opens the conversation up to it."""
    drawn = layout(g)
    if not drawn:
        return '<p class="muted">no entries yet</p>'
    on_path = set(g.path(viewing)) if viewing else set()
    lanes = max(d.lane for d in drawn) + 1
    text_x = LEFT + (lanes - 1) * LANE + 14
    width = text_x + 200
    height = PAD * 2 + ROW * (len(drawn) - 1) + 4
    parts = [f'<svg class="tree" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="branch tree">']

    def xy(i: int) -> tuple[int, int]:
        return LEFT + drawn[i].lane * LANE, PAD + i * ROW

    for i, d in enumerate(drawn):
        if d.parent is None:
            continue
        (x1, y1), (x2, y2) = xy(d.parent), xy(i)
        cls = "edge on" if d.h in on_path else "edge"
        if x1 == x2:
            parts.append(f'<path class="{cls}" d="M{x1} {y1} V{y2}"/>')
        else:
            parts.append(f'<path class="{cls}" d="M{x1} {y1} C{x1} {y1 + ROW * 0.8} {x2} {y1 + ROW * 0.2} {x2} {y1 + ROW} V{y2}"/>')
        if d.gap:
            gx, anchor = (LEFT - 9, "end") if d.lane == 0 else (x2 + 6, "start")
            parts.append(f'<text class="gap" x="{gx}" y="{(y1 + y2) // 2 + 4}" text-anchor="{anchor}">+{d.gap}</text>')
    for i, d in enumerate(drawn):
        x, y = xy(i)
        cls = " ".join(["node", *d.classes, *(["on"] if d.h in on_path else []), *(["viewing"] if d.h == viewing else [])])
        if d.labels:
            label = ", ".join(d.labels)
        elif "fork" in d.classes:
            label = f"fork at {d.seq}"
        else:
            label = "root" if d.seq == 1 else "… older entries"
        title = f"{d.h[:12]} · seq {d.seq}" + (f" · {', '.join(d.labels)}" if d.labels else "")
        parts.append(
            f'<a class="{cls}" href="{esc(link(d.h))}" data-hash="{d.h}" data-labels="{esc(" ".join(d.labels))}">'
            f"<title>{esc(title)}</title>"
            f'<circle cx="{x}" cy="{y}" r="{6 if d.labels else 4}"/>'
            f'<text x="{text_x}" y="{y + 4}">{esc(_clip(label, 26))} <tspan class="seq">#{d.seq}</tspan></text></a>'
        )
    parts.append("</svg>")
    note = ""
    if not g.complete:
        note += f'<p class="muted loading">reading the history: {len(g.nodes):,} entries so far…</p>'
    if g.truncated:
        note += f'<p class="muted">only the newest {WALK_LIMIT:,} entries are drawn</p>'
    if g.missing:
        note += '<p class="muted">some entries have not arrived yet (a sync under way?)</p>'
    if g.damaged:
        note += '<p class="muted">older entries cannot be read: damaged records (see <code>ctape fsck</code>)</p>'
    return "".join(parts) + note


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
