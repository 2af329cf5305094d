"""What an agent needs to resume: pending tool calls, an interrupted stream, the last error."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model.errors import NOATIME_WARNING, CorruptObject, EntryNotFound
from .stream import open_streams

if TYPE_CHECKING:
    from .session import Session


def status(session: "Session") -> dict:
    tape = session.tape
    refs = session.view()  # HEAD, its branch, conflict branches: not every branch
    h = refs.head_hash
    incomplete = (bool(h) and not tape.has_entry(h)) or refs.head_missing
    head, d = None, {"pending": [], "last_error": None}
    if h and not incomplete:
        try:
            head = tape.read_entry(h)
            d = tape.derived(h)
        except (EntryNotFound, CorruptObject):
            # an entry or value on the path has not arrived yet (an rsync under way), or
            # is damaged (`damaged` below names the files): what follows from it is unknown
            incomplete = True
    interrupted = None
    streams = open_streams(session) if session.exists() else []
    if streams:
        s = streams[-1]
        interrupted = {"content": s["content"], "stream": s["stream"], "base": s["base"], "time": s["time"], "recorded": False}
    elif head is not None and head.kind == "streaming":
        c = head.payload.get("content") if isinstance(head.payload, dict) else None
        interrupted = {"content": c, "hash": head.hash, "time": head.time, "recorded": True}
    last_error = None
    e = None
    if d["last_error"]:
        try:
            e = tape.read_entry(d["last_error"])
        except (EntryNotFound, CorruptObject):
            incomplete = True
    if e is not None:
        p = e.payload if isinstance(e.payload, dict) else {}
        msg = p.get("message") if e.kind == "error" else p.get("output")
        last_error = {"hash": e.hash, "kind": e.kind, "message": msg, "call_id": p.get("call_id"), "time": e.time}
    return {
        "session": session.name,
        "head": h,
        "branch": refs.branch,
        "detached": refs.head is not None and refs.branch is None,
        "seq": head.seq if head else 0,
        "last_entry": {"hash": head.hash, "kind": head.kind, "time": head.time} if head else None,
        "pending_tool_calls": list(d["pending"]),
        "interrupted_stream": interrupted,
        "last_error": last_error,
        "conflicts": sorted(refs.conflicts),
        "incomplete": incomplete,
        "damaged": session.damage(),
        "warnings": [] if tape.store.atimes_work(warn=False) else [NOATIME_WARNING],
    }
