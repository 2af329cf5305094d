"""An OpenAI Agents SDK session on a tape: ``TapeSession``.

Built like the SDK's ``SQLiteSession(session_id, db_path)``::

    from agents import Agent, Runner
    from ctape.integrations.openai_agents import TapeSession

    session = TapeSession("user-42", ".ctape")
    await Runner.run(agent, "hi", session=session)

Every input item is one tape entry of the matching kind (user / system / assistant
messages, ``function_call`` -> ``tool_call``, ``function_call_output`` ->
``tool_result``; other item types are kept as hidden entries), with the exact item in
``meta["openai_agents.item"]``, so ``get_items`` gives back equal items and ``ctape
log`` / ``status`` / ``context`` read the conversation. ``pop_item`` moves the branch
back one entry (the item stays on the tape, and in the ref log); ``clear_session``
starts a new, empty branch (the old one keeps its history).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from typing import Any, Optional, Union

from ..models import HIDDEN
from ..tape import Tape
from .naming import open_tape, session_name

__all__ = ["TapeSession", "item_entry"]

ITEM = "openai_agents.item"


def _text(content: Any) -> Any:
    """Message content as ctape shows it: a string, or the parts when they are not all text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if len(texts) == len(content):
            return "".join(texts)
    return content


def item_entry(item: dict) -> tuple[str, dict, bool]:
    """(kind, payload, hidden) for one Responses input item."""
    t = item.get("type")
    role = item.get("role")
    if t in (None, "message") and role in ("user", "system", "developer", "assistant"):
        kind = {"developer": "system"}.get(role, role)
        return kind, {"content": _text(item.get("content"))}, False
    if t == "function_call":
        args = item.get("arguments")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            pass
        return "tool_call", {"call_id": str(item.get("call_id") or ""), "name": str(item.get("name") or ""), "arguments": args}, False
    if t == "function_call_output":
        return "tool_result", {"call_id": str(item.get("call_id") or ""), "output": item.get("output")}, False
    return "system", {"content": "", "type": str(t)}, True  # reasoning, web search, ...: kept, not shown


class TapeSession:
    """The SDK's Session protocol (get_items, add_items, pop_item, clear_session) on a tape."""

    def __init__(self, session_id: str, tape: Union[str, os.PathLike, Tape] = ".ctape", *, prefix: str = "", session_settings: Any = None):
        self.session_id = session_id
        self.session_settings = session_settings
        self.tape, self._owns = open_tape(tape)
        self.name = session_name(prefix, session_id)
        self.session = self.tape.session(self.name)
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._owns:
            self.tape.close()

    # -- sync core ------------------------------------------------------------------------

    def _items(self, limit: Optional[int]) -> list[dict]:
        out = []
        with self._lock:
            for e in self.session.log() if self.session.exists() else ():
                if isinstance(e.meta, dict) and ITEM in e.meta:
                    out.append(e.meta[ITEM])
                    if limit is not None and len(out) >= limit:
                        break
        out.reverse()
        return json.loads(json.dumps(out))  # the caller's copy

    def _add(self, items: list[dict]) -> None:
        if not items:
            return
        with self._lock, self.tape.batch():
            for item in items:
                item = json.loads(json.dumps(item, default=_jsonable))
                kind, payload, hidden = item_entry(item)
                meta = {ITEM: item}
                if hidden:
                    meta[HIDDEN] = True
                self.session.append(kind, payload, meta=meta)

    def _pop(self) -> Optional[dict]:
        with self._lock:
            if not self.session.exists():
                return None
            st = self.session.refs()
            h = st.head_hash
            while h is not None:
                e = self.tape.read_entry(h)
                if isinstance(e.meta, dict) and ITEM in e.meta:
                    ref = st.branch if st.branch is not None else "HEAD"
                    changes = {ref: e.parent} if e.parent or ref == "HEAD" else {ref: None, "HEAD": "@" + ref}
                    self.session.set_refs("pop-item", changes, popped=e.hash)
                    return json.loads(json.dumps(e.meta[ITEM]))
                h = e.parent
            return None

    def _clear(self) -> None:
        with self._lock:
            if not self.session.exists() or self.session.refs().head_hash is None:
                return
            branches = self.session.refs().branches
            n = 2
            while f"main-{n}" in branches:
                n += 1
            self.session.set_refs("clear-session", {"HEAD": f"@main-{n}"})

    # -- the SDK's async protocol --------------------------------------------------------------

    async def get_items(self, limit: Optional[int] = None) -> list[dict]:
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        return await asyncio.to_thread(self._items, limit)

    async def add_items(self, items: list[dict]) -> None:
        await asyncio.to_thread(self._add, list(items))

    async def pop_item(self) -> Optional[dict]:
        return await asyncio.to_thread(self._pop)

    async def clear_session(self) -> None:
        await asyncio.to_thread(self._clear)


def _jsonable(o: Any) -> Any:
    if hasattr(o, "model_dump"):
        return o.model_dump(exclude_unset=True)
    raise TypeError(f"{type(o).__name__} is not JSON")
