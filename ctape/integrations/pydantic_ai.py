"""pydantic-ai message history on a tape: ``save_messages`` and ``load_messages``.

::

    from ctape import Tape
    from ctape.integrations.pydantic_ai import load_messages, save_messages

    s = Tape.open(".ctape").session("chat-42")
    result = agent.run_sync("hi", message_history=load_messages(s))
    save_messages(s, result.new_messages())

Messages go through pydantic-ai's own ``ModelMessagesTypeAdapter``. Every part of a
message is one entry of the matching kind: system prompt -> ``system``, user prompt ->
``user``, text -> ``assistant``, thinking -> hidden ``assistant``, tool call ->
``tool_call``, tool return -> ``tool_result`` (``is_error`` when it failed), a retry (a retried
tool return, or a retry prompt for a tool) -> ``error`` with its ``call_id`` (without a tool: ``user``); anything else is kept hidden. The exact
part (and, on a message's first part, the message without its parts) is in the entry's
meta, so ``load_messages`` gives back equal messages, and ``log`` / ``status`` /
``context`` read the conversation.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ..models import HIDDEN, Entry
from ..session import Session

__all__ = ["save_messages", "load_messages", "part_entry"]

PART = "pydantic_ai.part"
MESSAGE = "pydantic_ai.message"


def _adapter():
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    return ModelMessagesTypeAdapter


def part_entry(part: dict) -> tuple[str, dict, bool]:
    """(kind, payload, hidden) for one part, as pydantic-ai dumps it in JSON mode."""
    pk = part.get("part_kind")
    content = part.get("content")
    if pk == "system-prompt":
        return "system", {"content": content}, False
    if pk == "user-prompt":
        return "user", {"content": content}, False
    if pk == "text":
        return "assistant", {"content": content}, False
    if pk == "thinking":
        return "assistant", {"content": content, "thinking": True}, True
    if pk in ("tool-call", "builtin-tool-call"):
        return "tool_call", {"call_id": str(part.get("tool_call_id") or ""), "name": str(part.get("tool_name") or ""), "arguments": part.get("args")}, False
    if pk in ("tool-return", "builtin-tool-return"):
        call_id = str(part.get("tool_call_id") or "")
        outcome = part.get("outcome", "success")
        if outcome == "retried":  # the model is asked to call again: an error answer to this call
            return "error", {"message": content if isinstance(content, str) else str(content), "call_id": call_id}, False
        payload = {"call_id": call_id, "output": content}
        if outcome not in (None, "success"):
            payload["is_error"] = True
            payload["outcome"] = outcome
        return "tool_result", payload, False
    if pk == "retry-prompt":
        text = content if isinstance(content, str) else str(content)
        if part.get("tool_name"):
            return "error", {"message": text, "call_id": str(part.get("tool_call_id") or "")}, False
        return "user", {"content": text}, False
    return "system", {"content": "", "part_kind": str(pk)}, True


def save_messages(session: Session, messages: Sequence[Any]) -> list[Entry]:
    """Append pydantic-ai messages (e.g. ``result.new_messages()``) at the session's HEAD."""
    dumped = _adapter().dump_python(list(messages), mode="json")
    out: list[Entry] = []
    with session.tape.batch():
        for msg in dumped:
            parts = msg.get("parts") or []
            head = {k: v for k, v in msg.items() if k != "parts"}
            if not parts:
                out.append(session.append("system", {"content": ""}, meta={MESSAGE: head, HIDDEN: True}, time=_time(msg)))
                continue
            for i, part in enumerate(parts):
                kind, payload, hidden = part_entry(part)
                meta: dict = {PART: part}
                if i == 0:
                    meta[MESSAGE] = head
                if hidden:
                    meta[HIDDEN] = True
                out.append(session.append(kind, payload, meta=meta, time=_time(part) or _time(msg)))
    return out


def load_messages(session: Session, ref: Optional[str] = None) -> list[Any]:
    """The pydantic-ai messages on the path root -> REF (default: HEAD), as ModelMessage objects."""
    entries = list(session.log(ref)) if session.exists() else []
    msgs: list[dict] = []
    for e in reversed(entries):
        meta = e.meta if isinstance(e.meta, dict) else {}
        if MESSAGE in meta:
            msgs.append({**meta[MESSAGE], "parts": []})
        if PART in meta and msgs:
            msgs[-1]["parts"].append(meta[PART])
    return _adapter().validate_python(msgs)


def _time(d: dict) -> Optional[str]:
    t = d.get("timestamp")
    return t if isinstance(t, str) else None
