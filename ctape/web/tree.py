"""A session's branch tree: every branch, tag, conflict branch, fork point and anchor,
laid out on the server and drawn as SVG.

`Graph` keeps, per session, the few fields of each entry the tree needs (parent,
seq, kind, anchor name, hidden), read from the entry's own record without its
payload values (a message of 100 MB costs the walk what a short one does). It is
filled by walking parents from every tip and extended incrementally: after an append
only the new entries are read, so a page of a long session pays the walk once, not per
request or per client. A walk stops after WALK_LIMIT entries per session; the tree then
says what it left out.

Threads: requests run in parallel, so one walker at a time extends a Graph (others do
not wait for it: they draw what it published last) and what it read is published under
a short lock, which drawing holds too.
"""

from __future__ import annotations

import hashlib
import heapq
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from ..errors import CorruptObject, EntryNotFound
from ..model.canonical import internalize
from ..model.models import HIDDEN
from ..model.schema import decode_entry
from ..store.files import TYPE_ENTRY
from ..store.store import TYPE_WITHHELD
from .conversation import listed
from .markdown import esc

WALK_LIMIT = 200_000  # entries remembered per session
MAX_NODES = 400  # nodes drawn; anchors beyond this are left out (newest kept)
MAX_LANES = 32  # branches and tags drawn, each with its line; past it, the newest tips (wider is no tree)
LABELS_LISTED = 50  # branch and tag names a node lists (its title, data-labels, data-tags)
ROW, LANE, PAD, LEFT = 26, 22, 14, 48
GAP_CHAR = 7  # px a character of a "+N" gap label takes at most (11px font)
TAG = "tag:"  # how a tag is labelled: the way a ref names it (`tag:NAME`)


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
    tags: dict[str, str] = field(default_factory=dict)  # tag name -> hash
    current: Optional[str] = None  # label of HEAD's branch, or "HEAD" when detached
    conflicts: set[str] = field(default_factory=set)
    truncated: bool = False
    missing: bool = False  # an entry on some path has not arrived yet (an rsync under way)
    damaged: bool = False  # an entry on some path cannot be read (damaged records)
    sig: str = ""
    frontier: list = field(default_factory=list)  # heap of (-seq, hash) still to read
    queued: set = field(default_factory=set)
    read_once: bool = False  # the refs were read at least once
    checked: float = 0.0  # time.monotonic() of the last update
    lock: threading.Lock = field(default_factory=threading.Lock)  # held to publish and to draw
    walking: threading.Lock = field(default_factory=threading.Lock)  # held by the one walker

    @property
    def complete(self) -> bool:
        return self.read_once and not self.frontier

    def update(self, tape, session, budget: Optional[float] = None, wait: bool = False) -> bool:
        """Read the refs, then unseen entries newest first (every branch and tag alike) for
        at most `budget` seconds (None: all of them). When another request is walking
        already, return at once (unless `wait`): the tree it publishes is drawn meanwhile.
        True when the whole history is read."""
        if not self.walking.acquire(blocking=wait):
            return self.complete
        try:
            self._walk(tape, session, budget)
        finally:
            self.walking.release()
        return self.complete

    def _walk(self, tape, session, budget: Optional[float]) -> None:
        refs = session.refs()
        tips = dict(refs.branches)
        if refs.branch is None and refs.head_hash:
            tips["HEAD"] = refs.head_hash
        tags = dict(refs.tags)
        for h in sorted(set(tips.values()) | set(tags.values())):
            self._push(h, -(1 << 62))  # tips first: their seq is not known yet
        new: dict[str, Node] = {}
        missing = damaged = truncated = False
        deadline = None if budget is None else time.monotonic() + budget
        while self.frontier:
            if deadline is not None and time.monotonic() > deadline:  # one read can decode a whole block
                break
            _, h = heapq.heappop(self.frontier)
            self.queued.discard(h)
            if h in self.nodes or h in new:
                continue
            if len(self.nodes) + len(new) >= WALK_LIMIT:
                truncated = True
                self.frontier.clear()
                self.queued.clear()
                break
            try:
                n = skeleton(tape, h)
            except EntryNotFound:  # not synced yet: the walk stops there
                missing = True
                continue
            except CorruptObject:  # damaged: the walk stops there too
                damaged = True
                continue
            new[h] = n
            if n.parent is not None and n.parent not in self.nodes:
                self._push(n.parent, 1 - n.seq)
        self.read_once = True
        state = repr(sorted(tips.items())) + repr(sorted(tags.items())) + repr(refs.head) + ("" if self.complete else f"|{len(self.nodes) + len(new)}")
        with self.lock:  # what drawing sees changes here, all at once
            self.nodes.update(new)
            self.tips = tips
            self.tags = tags
            self.current = refs.branch or ("HEAD" if refs.head_hash else None)
            self.conflicts = set(refs.conflicts)
            self.missing |= missing
            self.damaged |= damaged
            self.truncated |= truncated
            self.sig = hashlib.blake2b(state.encode(), digest_size=8).hexdigest()  # what a page compares
            self.checked = time.monotonic()

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
        with self.lock:
            for n in self.nodes.values():
                kinds[n.kind] = kinds.get(n.kind, 0) + 1
            return {"entries": len(self.nodes), "kinds": kinds}


def skeleton(tape, h: str) -> Node:
    """What the tree needs of entry h, from its record alone: its payload values (blobs,
    however large) are not read; an anchor's name is (anchors are short), through
    read_entry, so a redaction applies to it as everywhere."""
    type_, body = tape.store.get_object(h)
    if type_ not in (TYPE_ENTRY, TYPE_WITHHELD):
        raise EntryNotFound(f"{h} is a payload value, not an entry")
    raw = decode_entry(h, body)
    anchor = None
    if raw["kind"] == "anchor":
        p = tape.read_entry(h).payload
        anchor = p.get("name") if isinstance(p, dict) else None
    meta = raw["meta"]
    hidden = isinstance(meta, dict) and bool(internalize(meta.get(HIDDEN), lambda b: "x"))
    return Node(raw["parent"], raw["seq"], raw["kind"], str(anchor) if anchor is not None else None, hidden)


@dataclass
class Drawn:
    h: str
    seq: int
    lane: int
    labels: list[str]
    classes: list[str]
    parent: Optional[int]  # index of the drawn node above it
    gap: int  # entries between it and that node, not drawn


def layout(g: Graph, viewing: Optional[str] = None) -> list[Drawn]:
    """The nodes worth drawing (roots, forks, tips, tags, anchors, and the entry the page
    shows the path to, `viewing`), each with a lane, in row order. A branch gets a lane; a
    tag on no branch's path gets one of its own."""
    children: dict[str, int] = {}
    for n in g.nodes.values():
        if n.parent is not None:
            children[n.parent] = children.get(n.parent, 0) + 1
    tagged: dict[str, list[str]] = {}
    for name, h in sorted(g.tags.items()):
        tagged.setdefault(h, []).append(TAG + name)
    # lanes: the current branch first, then the others by name, then tags off every branch;
    # past MAX_LANES, the newest tips (docs/serve.md: the drawing is bounded however many
    # branches a session has: 2,000 made an SVG of 2,001 nodes, 834 KB and 44,126 px wide)
    order = sorted(g.tips.items(), key=lambda kv: (kv[0] != g.current, kv[0]))
    order += [(labels[0], h) for h, labels in tagged.items()]
    if len(order) > MAX_LANES:
        newest = sorted(order, key=lambda kv: (kv[0] != g.current, -(g.nodes[kv[1]].seq if kv[1] in g.nodes else 0), kv[0]))
        kept = set(newest[:MAX_LANES])
        order = [kv for kv in order if kv in kept]
    lane_of: dict[str, int] = {}
    keep: dict[str, list[str]] = {}
    anchors: list[str] = []
    lane = 0
    for label, tip in order:
        if label.startswith(TAG) and tip in lane_of:
            continue  # a tag on a path already drawn: a label there, not a lane
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
            if not label.startswith(TAG):
                keep.setdefault(tip, []).append(label)
            lane += 1
    for h, labels in tagged.items():
        if h in lane_of:
            keep.setdefault(h, []).extend(labels)
    if viewing is not None and viewing in lane_of:
        keep.setdefault(viewing, [])  # a page pinned to an entry between two drawn nodes: marked where it is
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
        if any(not lab.startswith(TAG) for lab in keep[h]):
            classes.append("tip")
        if any(lab.startswith(TAG) for lab in keep[h]):
            classes.append("tag")
        if children.get(h, 0) > 1:
            classes.append("fork")
        if n.kind in ("error", "streaming"):
            classes.append(n.kind)
        out.append(Drawn(h, n.seq, lane_of[h], labels, classes, index.get(p) if p in index else None, gap))
    return out


def gap_width(gap: int) -> int:
    return GAP_CHAR * len(f"+{gap:,}")


def lane_xs(drawn: list[Drawn]) -> tuple[list[int], int]:
    """The x of each lane and of the labels' column. A "+N" gap label is written just right
    of its lane's line (lane 0: in the margin on its left), so each lane is made wide enough
    for its widest one: no gap label reaches the next lane's line or the labels' column,
    whatever the number of roots and branches."""
    lanes = max(d.lane for d in drawn) + 1
    need = [0] * lanes
    for d in drawn:
        if d.gap:
            need[d.lane] = max(need[d.lane], 6 + gap_width(d.gap) + 4)
    xs = [max(LEFT, need[0] + 4)]
    for lane in range(1, lanes):
        xs.append(xs[-1] + max(LANE, need[lane - 1] if lane > 1 else 0))
    return xs, xs[-1] + max(14, need[lanes - 1] if lanes > 1 else 0)


def gap_row(drawn: list[Drawn], i: int, curves: list[tuple[float, int, int]]) -> float:
    """The row (a half-row: between two nodes' rows, where no node label is) at which node
    i's gap label goes: on the vertical part of its edge and off every fork's curve that
    crosses the label (a curve runs from its parent's row to the next), the middle such
    row. `curves`: (half-row, lower lane, higher lane) of every edge that changes lane."""
    d = drawn[i]
    p = d.parent
    first = p + 1 if drawn[p].lane != d.lane and i - p >= 2 else p  # past its own curve
    slots = [r + 0.5 for r in range(first, i)]
    if d.lane:  # lane 0 writes in the margin on its left, where no curve goes
        crossed = {row for row, lo, hi in curves if lo <= d.lane < hi}
        slots = [r for r in slots if r not in crossed] or slots
    return slots[len(slots) // 2]


def svg(g: Graph, session: str, viewing: Optional[str], link) -> str:
    """The tree as an SVG of links: each node opens the conversation up to it."""
    with g.lock:  # a walker publishing meanwhile waits for the drawing
        return _svg(g, session, viewing, link)


def _svg(g: Graph, session: str, viewing: Optional[str], link) -> str:
    drawn = layout(g, viewing)
    if not drawn:
        if not g.complete:
            return f'<p class="muted loading">reading the history: {len(g.nodes):,} entries so far…</p>'
        return '<p class="muted">no entries yet</p>'
    on_path = set(g.path(viewing)) if viewing else set()
    xs, text_x = lane_xs(drawn)
    labels = [_label(d, viewing) for d in drawn]
    # 7 px a character, a guess (no font is known here): the page's script widens the
    # drawing to what the browser drew (labels of wide letters were cut at its edge)
    width = text_x + 8 + 7 * max(len(_clip(label, 26)) + len(f" #{d.seq}") for label, d in zip(labels, drawn))
    height = PAD * 2 + ROW * (len(drawn) - 1) + 4
    parts = [f'<svg class="tree" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="branch tree">']

    def xy(i: int) -> tuple[int, int]:
        return xs[drawn[i].lane], PAD + i * ROW

    curves = [(d.parent + 0.5, *sorted((drawn[d.parent].lane, d.lane))) for d in drawn if d.parent is not None and drawn[d.parent].lane != d.lane]
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
            gy = PAD + int(gap_row(drawn, i, curves) * ROW)
            gx, anchor = (x2 - 9, "end") if d.lane == 0 else (x2 + 6, "start")
            parts.append(f'<text class="gap" x="{gx}" y="{gy + 4}" text-anchor="{anchor}">+{d.gap:,}</text>')
    for i, d in enumerate(drawn):
        x, y = xy(i)
        cls = " ".join(["node", *d.classes, *(["on"] if d.h in on_path else []), *(["viewing"] if d.h == viewing else [])])
        label = labels[i]
        # at most LABELS_LISTED of each (10,000 branches on one entry made this node 3 MB)
        title = f"{d.h[:12]} · seq {d.seq}" + (f" · {listed(d.labels, LABELS_LISTED)}" if d.labels else "")
        branches = [lab for lab in d.labels if not lab.startswith(TAG)][:LABELS_LISTED]
        tags = [lab[len(TAG):] for lab in d.labels if lab.startswith(TAG)][:LABELS_LISTED]
        parts.append(
            f'<a class="{cls}" href="{esc(link(d.h))}" data-hash="{d.h}" data-labels="{esc(" ".join(branches))}"'
            + (f' data-tags="{esc(" ".join(tags))}"' if tags else "")
            + f"><title>{esc(title)}</title>"
            f'<circle cx="{x}" cy="{y}" r="{6 if d.labels else 4}"/>'
            f'<text x="{text_x}" y="{y + 4}">{esc(_clip(label, 26))} <tspan class="seq">#{d.seq}</tspan></text></a>'
        )
    parts.append("</svg>")
    note = ""
    if not g.complete:
        note += f'<p class="muted loading">reading the history: {len(g.nodes):,} entries so far…</p>'
    if g.truncated:
        note += f'<p class="muted">only the newest {WALK_LIMIT:,} entries are drawn</p>'
    lines = len(g.tips) + len({h for h in g.tags.values()})
    if lines > MAX_LANES:
        note += f'<p class="muted">the {MAX_LANES} newest branch and tag tips are drawn, of {len(g.tips) + len(g.tags):,}</p>'
    if g.missing:
        note += '<p class="muted">some entries have not arrived yet (a sync under way?)</p>'
    if g.damaged:
        note += '<p class="muted">older entries cannot be read: damaged records (see <code>ctape fsck</code>)</p>'
    return "".join(parts) + note


def _label(d: Drawn, viewing: Optional[str] = None) -> str:
    if d.labels:
        return ", ".join(d.labels)
    if "fork" in d.classes:
        return f"fork at {d.seq}"
    if d.seq == 1:
        return "root"
    return "shown here" if d.h == viewing else "… older entries"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
