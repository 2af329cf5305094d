"""What an agent needs to resume: pending tool calls, an interrupted stream, the last error."""

from __future__ import annotations

import json

from typing import TYPE_CHECKING, Optional

from ..model.errors import NOATIME_WARNING, CorruptObject, EntryNotFound, LostToDamage
from ..store.store import QUARANTINE
from .logview import is_hidden
from .stream import open_streams

if TYPE_CHECKING:
    from .session import Session


def error_text(message) -> str:
    """An error's message as one text to show: a tool result's output may be a list of
    parts (Claude Code's `tool_result` with `is_error`), whose texts are joined; its Python
    form was shown before (`[{'text': ...`; found by an audit)."""
    if isinstance(message, str):
        return message
    if isinstance(message, list):
        texts = [p.get("text") if isinstance(p, dict) else p for p in message]
        return " ".join(t for t in texts if isinstance(t, str))
    return "" if message is None else json.dumps(message, ensure_ascii=False, default=str)


def _refs_to_read(session: "Session"):
    """The session's view, read again while HEAD's entry is gone or damaged and HEAD moved
    meanwhile (Session.from_head); as it is when HEAD stayed (the history is incomplete)."""

    def readable(st):
        if st.head_hash and not st.head_missing:
            session.tape.read_entry(st.head_hash)
        return st

    try:
        return session.from_head(readable, missing_ok=True)
    except (EntryNotFound, CorruptObject):
        return session.view()


def status(session: "Session") -> dict:
    tape = session.tape
    refs = _refs_to_read(session)  # HEAD, its branch, conflict branches: not every branch
    h = refs.head_hash
    incomplete = (bool(h) and not tape.has_entry(h)) or refs.head_missing
    why: Optional[str] = None  # why part of the history is missing: "damaged", "lost" (to damage) or None (not arrived)
    if not h and session.refs_lost_to_damage(refs):
        incomplete, why = True, "damaged"  # its ref records are in a damaged block: not "no entries yet"
    if incomplete and h and not refs.head_missing:
        where = tape.store.lost_to_damage(h)
        why = None if where is None else "lost" if where.startswith(QUARANTINE) else "damaged"
    head, d = None, {"pending": [], "last_error": None}
    if h and not incomplete:
        try:
            head = tape.read_entry(h)
            d = tape.derived(h)
        except (EntryNotFound, CorruptObject) as e:
            # an entry or value on the path has not arrived yet (an rsync under way), or
            # is damaged (`damaged` below names the files): what follows from it is unknown
            incomplete = True
            why = _missing_why(e)
    interrupted = None
    streams = open_streams(session) if session.exists() else []
    if streams:
        s = streams[-1]
        interrupted = {"content": s["content"], "stream": s["stream"], "base": s["base"], "time": s["time"], "recorded": False,
                       "live": s["live"]}
    elif head is not None and head.kind == "streaming" and not is_hidden(head):  # bookkeeping is no answer cut short
        c = head.payload.get("content") if isinstance(head.payload, dict) else None
        interrupted = {"content": c, "hash": head.hash, "time": head.time, "recorded": True}
    last_error = None
    e = None
    if d["last_error"]:
        try:
            e = tape.read_entry(d["last_error"])
        except (EntryNotFound, CorruptObject) as err:
            incomplete = True
            why = why or _missing_why(err)
    if e is not None:
        p = e.payload if isinstance(e.payload, dict) else {}
        msg = p.get("message") if e.kind == "error" else p.get("output")
        last_error = {"hash": e.hash, "kind": e.kind, "message": msg, "call_id": p.get("call_id"), "time": e.time}
    return {
        "session": session.name,
        "head": h,
        "branch": refs.shown_branch,
        "detached": refs.head is not None and refs.branch is None,
        "seq": head.seq if head else 0,
        "last_entry": {"hash": head.hash, "kind": head.kind, "time": head.time} if head else None,
        "pending_tool_calls": list(d["pending"]),
        "interrupted_stream": interrupted,
        "last_error": last_error,
        "conflicts": sorted(refs.conflicts),
        "incomplete": incomplete,
        "incomplete_because": why if incomplete else None,
        "damaged": session.damage(),
        "warnings": [] if tape.store.atimes_work(warn=False) else [NOATIME_WARNING],
    }


def _missing_why(e: Exception) -> Optional[str]:
    """"damaged", "lost" or None (not arrived yet), from the error a read of history gave
    (store._not_found raises each)."""
    if isinstance(e, CorruptObject):
        return "damaged"
    return "lost" if isinstance(e, LostToDamage) else None
