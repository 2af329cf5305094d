"""Channel values and messages <-> the JSON the tape holds: a value as readable JSON
where it survives the round trip, through the saver's serde (its bytes as Latin-1 text)
where not, a message in langchain's own dict form; the conversation entries that show a
message; and the parse of the index cache's CHUNKS rows (``_loads``).
"""

from __future__ import annotations

import base64
import json
import math
import re
from typing import Any

from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
from langgraph.checkpoint.base import SerializerProtocol

from ...model.models import copy_json as _copy_json
from ...model.redaction import is_marker


try:  # a dependency of langsmith, so of langchain-core: there wherever LangGraph is
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - json alone reads the same rows
    _orjson_loads = None


# an integer of 19 digits or more in JSON text (outside strings, and maybe inside one): orjson
# reads one beyond 64 bits as a float, so a CHUNKS row that may hold one is not written
_LONG_INT = re.compile(r"[\[,:]-?[0-9]{19}")


def _loads(text: str) -> Any:
    """json.loads of a CHUNKS row, by orjson where it can: twice as fast, and the rows are
    most of a new process's first read (a 300-step thread: 1 MB of JSON). The same values:
    what orjson refuses (a lone surrogate, NaN) json reads, and what it would read otherwise
    (an integer beyond 64 bits) no CHUNKS row holds (_LONG_INT)."""
    if _orjson_loads is not None:
        try:
            return _orjson_loads(text)
        except ValueError:
            pass
    return json.loads(text)


def _is_json(v: Any, depth: int = 0) -> bool:
    """True when v survives a JSON round trip unchanged (exact types, finite floats)."""
    if depth > 64:
        return False
    t = type(v)
    if t is str:
        return _utf8(v)
    if v is None or t is bool or t is int:
        return True
    if t is float:
        return math.isfinite(v)
    if t is list:
        return all(_is_json(x, depth + 1) for x in v)
    if t is dict:
        return all(type(k) is str and _utf8(k) and _is_json(x, depth + 1) for k, x in v.items())
    return False


def _utf8(s: str) -> bool:
    """Can the tape hold s as text? Not with a lone surrogate (a model's reply cut inside an
    emoji): such a value goes through the serde, which writes it as LangGraph's own savers
    do (the surrogate as "?")."""
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _text(v: Any) -> str:
    """v as text the tape can hold: a lone surrogate as "?", as LangGraph's savers store it."""
    s = v if type(v) is str else str(v)
    return s if _utf8(s) else s.encode("utf-8", "replace").decode("utf-8")


def _scrubbed(v: Any, depth: int = 0) -> Any:
    """A message's content or a tool call's arguments for the conversation entries: JSON
    as it is, with every string that holds a lone surrogate as _text gives it (not the
    whole value as its Python repr); what is not JSON, as text."""
    if _is_json(v):
        return v
    t = type(v)
    if depth < 64 and (t is list or t is tuple):
        return [_scrubbed(x, depth + 1) for x in v]
    if depth < 64 and t is dict and all(type(k) is str for k in v):
        return {_text(k): _scrubbed(x, depth + 1) for k, x in v.items()}
    return _text(v)  # a string with a lone surrogate, or a value that is no JSON


def _is_message(v: Any) -> bool:
    return isinstance(v, BaseMessage)


class _Codec:
    """Channel values as readable JSON where they can be, the saver's serde where not."""

    def __init__(self, serde: SerializerProtocol):
        self.serde = serde

    def enc(self, v: Any) -> dict:
        if _is_json(v):
            return {"j": v}
        if type(v) is list and v and all(_is_message(x) for x in v):
            return {"m": [self.enc_message(x) for x in v]}
        if _is_message(v):
            return {"m1": self.enc_message(v)}
        return self._serde(v)

    def dec(self, d: dict) -> Any:
        if "j" in d:
            return _copy_json(d["j"])  # callers may change what they get; the tape's copy must not
        if "m" in d:
            return [self.dec_message(x) for x in d["m"]]
        if "m1" in d:
            return self.dec_message(d["m1"])
        if "b" in d:
            t, text = d["b"]
            if is_marker(text):
                return text  # redacted (ctape redact): the marker stands for the value
            return self.serde.loads_typed((t, text.encode("latin-1")))
        t, b = d["s"]  # base64: written before 2026-12-03
        if is_marker(b):
            return b
        return self.serde.loads_typed((t, base64.b64decode(b)))

    def _serde(self, v: Any) -> dict:
        """A value the serde writes (msgpack), as text: its bytes as Latin-1 characters, so
        that the strings inside stay readable where `ctape scan` looks (base64 hid them:
        a token in a dataclass was pushed unseen), and a redaction can replace it."""
        t, b = self.serde.dumps_typed(v)
        return {"b": [t, b.decode("latin-1")]}

    def enc_message(self, m: Any) -> dict:
        """A message as langchain's own dict form when that round-trips exactly."""
        try:
            d = message_to_dict(m)
            if _is_json(d) and messages_from_dict([d])[0] == m:
                return {"d": d}
        except Exception:  # noqa: BLE001 - any failure means: use the serde
            pass
        return self._serde(m)

    def dec_message(self, d: dict) -> Any:
        if "d" in d:
            return messages_from_dict([_copy_json(d["d"])])[0]
        return self.dec(d)


def _message_entries(m: Any) -> list[tuple[str, dict]]:
    """The conversation entries (kind, payload) that show one LangChain message on the tape."""
    content = _scrubbed(m.content)
    t = m.type
    if t in ("human", "HumanMessageChunk"):
        return [("user", {"content": content})]
    if t in ("system", "SystemMessageChunk"):
        return [("system", {"content": content})]
    if t in ("ai", "AIMessageChunk"):
        out: list[tuple[str, dict]] = []
        calls = getattr(m, "tool_calls", None) or []
        if content or not calls:
            out.append(("assistant", {"content": content}))
        for c in calls:
            args = c.get("args")
            out.append(("tool_call", {"call_id": _text(c.get("id") or ""), "name": _text(c.get("name") or ""), "arguments": _scrubbed(args)}))
        return out
    if t in ("tool", "ToolMessageChunk"):
        p = {"call_id": _text(getattr(m, "tool_call_id", "") or ""), "output": content}
        if getattr(m, "status", None) == "error":
            p["is_error"] = True
        return [("tool_result", p)]
    return [("system", {"content": content})]  # other roles: kept, hidden from context


def _shown(m: Any) -> bool:
    """Is a root graph's message shown on the tape (`_write_messages`): every role ctape
    has a kind for."""
    return not (_message_entries(m)[0][0] == "system" and m.type not in ("system", "SystemMessageChunk"))
