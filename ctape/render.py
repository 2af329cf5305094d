"""Human-readable text for the CLI: log lines, the branch graph, status."""

from __future__ import annotations

import json
import os
import sys
from typing import Iterable, Optional

from .models import Entry


def _color(text: str, code: str) -> str:
    if os.environ.get("NO_COLOR") or not sys.stdout.isatty():
        return text
    return f"\033[{code}m{text}\033[0m"


def summary(e: Entry, width: int = 72) -> str:
    p = e.payload if isinstance(e.payload, dict) else {}
    if e.kind == "tool_call":
        args = json.dumps(p.get("arguments"), ensure_ascii=False, sort_keys=True)
        text = f"{p.get('name')}({args}) [{p.get('call_id')}]"
    elif e.kind == "tool_result":
        out = p.get("output")
        out = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)
        err = " ERROR" if p.get("is_error") else ""
        text = f"[{p.get('call_id')}]{err} {out}"
    elif e.kind == "anchor":
        text = str(p.get("name"))
    elif e.kind == "error":
        text = str(p.get("message"))
    else:
        c = p.get("content")
        if isinstance(c, list):
            c = " ".join(str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in c)
        text = c if isinstance(c, str) else json.dumps(e.payload, ensure_ascii=False)
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def decorations(tape, session: Optional[str]) -> dict[str, list[str]]:
    if not session or not tape._session_exists(session):
        return {}
    st = tape.session(session).refs()
    deco: dict[str, list[str]] = {}
    for b, h in sorted(st.branches.items()):
        label = f"HEAD -> {b}" if st.branch == b else b
        deco.setdefault(h, []).append(label)
    if st.branch is None and st.head_hash:
        deco.setdefault(st.head_hash, []).insert(0, "HEAD")
    return deco


def _deco(e: Entry, deco: dict) -> str:
    names = deco.get(e.hash)
    return " " + _color("(" + ", ".join(names) + ")", "36") if names else ""


def oneline(e: Entry, deco: dict) -> str:
    return f"{_color(e.hash[:12], '33')}{_deco(e, deco)} {e.kind:<11} {summary(e)}"


def full(e: Entry, deco: dict) -> str:
    lines = [
        _color(f"entry {e.hash}", "33") + _deco(e, deco),
        f"Kind:   {e.kind}",
        f"Seq:    {e.seq}",
        f"Date:   {e.time}",
    ]
    if e.meta:
        lines.append(f"Meta:   {json.dumps(e.meta, ensure_ascii=False, sort_keys=True)}")
    lines += ["", "    " + summary(e, 200), ""]
    return "\n".join(lines)


def show(e: Entry) -> list[str]:
    out = [
        _color(f"entry {e.hash}", "33"),
        f"Parent: {e.parent or '(root)'}",
        f"Kind:   {e.kind}",
        f"Seq:    {e.seq}",
        f"Date:   {e.time}",
    ]
    if e.meta:
        out.append(f"Meta:   {json.dumps(e.meta, ensure_ascii=False, sort_keys=True)}")
    if e.delta is not None:
        out.append(f"Delta:  {json.dumps(e.delta, ensure_ascii=False, sort_keys=True)}")
    out.append("")
    out += ["    " + line for line in json.dumps(e.payload, ensure_ascii=False, indent=2).splitlines()]
    return out


def graph(tape, session: Optional[str], ref: Optional[str], limit: Optional[int], kinds: Iterable[str]) -> list[str]:
    """Every branch of a session (or the path from REF) as an ASCII graph, newest first."""
    deco = decorations(tape, session)
    tips: list[str] = []
    if ref:
        h = tape.resolve(ref, session)
        if h:
            tips.append(h)
    elif session:
        st = tape.session(session).refs()
        for h in [st.head_hash, *st.branches.values()]:
            if h and h not in tips:
                tips.append(h)
    want = set(k.replace("-", "_") for k in kinds)
    # newest first by depth; a bounded frontier keeps this proportional to what is shown
    frontier = {h: tape.read_entry(h) for h in tips}
    lanes: list[Optional[str]] = []
    lines: list[str] = []
    shown = 0
    while frontier and (limit is None or shown < limit):
        h = max(frontier, key=lambda x: (frontier[x].seq, frontier[x].time, x))
        e = frontier.pop(h)
        cols = [i for i, x in enumerate(lanes) if x == h]
        if not cols:
            lanes.append(h)
            cols = [len(lanes) - 1]
        col = cols[0]
        for extra in reversed(cols[1:]):  # branches that fork here join their lane first, as in git
            merge = "".join(
                "|/" if i == extra - 1 else ("" if i == extra else ("| " if x is not None else "  "))
                for i, x in enumerate(lanes)
            )
            lines.append(merge.rstrip())
            lanes[extra] = None
            while lanes and lanes[-1] is None:
                lanes.pop()
        if not want or e.kind in want:
            row = "".join("* " if i == col else ("| " if x is not None else "  ") for i, x in enumerate(lanes))
            lines.append(f"{row}{oneline(e, deco)}")
            shown += 1
        lanes[col] = e.parent
        while lanes and lanes[-1] is None:
            lanes.pop()
        if e.parent and e.parent not in frontier:
            frontier[e.parent] = tape.read_entry(e.parent)
    return lines


def status(st: dict) -> list[str]:
    out = [f"session {st['session']}"]
    if st["head"] is None:
        out.append("no entries yet")
    elif st["branch"]:
        out.append(f"On branch {st['branch']} at {st['head'][:12]} (seq {st['seq']})")
    else:
        out.append(f"HEAD detached at {st['head'][:12]} (seq {st['seq']})")
    if st.get("incomplete"):
        out.append("HEAD's entry has not arrived yet (sync in progress?): run rsync again")
    if st["last_entry"]:
        le = st["last_entry"]
        out.append(f"last entry: {le['kind']} at {le['time']}")
    if st["pending_tool_calls"]:
        out.append(f"pending tool calls ({len(st['pending_tool_calls'])}):")
        for c in st["pending_tool_calls"]:
            out.append(f"  {c['call_id']}  {c['name']}  (entry {c['hash'][:12]})")
    if st["interrupted_stream"]:
        s = st["interrupted_stream"]
        how = "recorded as a streaming entry" if s.get("recorded") else "not yet recorded: run `ctape recover`"
        out.append(f"interrupted stream ({len(s['content'] or '')} chars, {how}): {summary_text(s['content'])}")
    if st["last_error"]:
        le = st["last_error"]
        out.append(f"last error: {summary_text(str(le.get('message')))} (entry {le['hash'][:12]})")
    for c in st.get("conflicts", []):
        out.append(f"conflict: branch {c} holds the other side of a sync; keep it, check it out or delete it")
    return out


def summary_text(text: Optional[str], width: int = 60) -> str:
    t = " ".join((text or "").split())
    return t if len(t) <= width else t[: width - 1] + "…"


def reflog_line(r: dict, session: str) -> str:
    old = (r["old"] or "-")[:12]
    new = (r["new"] or "(deleted)")[:12]
    at = f"{session}@{{{r['at']}}}" if r["at"] is not None else ""
    return f"{r['index']:>4} {at:<14} {r['ref']:<24} {r['op']:<9} {old:>12} -> {new:<12} {r['time']}"
