"""Pure values: entry kinds, entries, names and times. No I/O here."""

from __future__ import annotations

import re
import time as _time
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Optional

from dataclasses import dataclass

from .errors import InvalidInput, InvalidName


class EntryKind(str, Enum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    STREAMING = "streaming"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    ANCHOR = "anchor"
    ERROR = "error"

    @classmethod
    def parse(cls, text: str) -> "EntryKind":
        return cls(kind_value(text))


KINDS = {k.value: k.value for k in EntryKind} | {"tool-call": "tool_call", "tool-result": "tool_result"}


def kind_value(kind: Any) -> str:
    """The canonical kind string for a kind name (the CLI also takes tool-call / tool-result)."""
    v = KINDS.get(kind) if type(kind) is str else None  # the common case, and EntryKind (a str) below
    if v is None and isinstance(kind, str):
        v = KINDS.get(str(kind.value) if isinstance(kind, EntryKind) else kind)
    if v is None:
        raise InvalidInput(f"unknown kind {brief(kind, 60)}; use one of: {', '.join(k.value for k in EntryKind)}")
    return v


@dataclass(frozen=True, slots=True, init=False)
class Entry:
    """One history item. `hash` names it and, through `parent`, its whole history.

    A plain frozen dataclass rather than a pydantic model: entries are built on
    the append path and on every read, where a model's construction cost shows up.
    Its __init__ (below the class) sets the slots directly: the one a frozen
    dataclass makes goes through object.__setattr__ for each field, 1.4 µs an entry.
    """

    hash: str
    parent: Optional[str]
    seq: int
    kind: str
    time: str
    payload: Any
    meta: dict
    delta: Any = None

    def to_json(self) -> dict:
        return {
            "hash": self.hash,
            "parent": self.parent,
            "seq": self.seq,
            "kind": self.kind,
            "time": self.time,
            "payload": self.payload,
            "meta": self.meta,
            "delta": self.delta,
        }

    @property
    def call_id(self) -> Optional[str]:
        p = self.payload
        return p.get("call_id") if isinstance(p, dict) and isinstance(p.get("call_id"), str) else None


def _entry_init():
    """Entry.__init__: each field set through its slot (the class is frozen to everyone else)."""
    s_hash, s_parent, s_seq, s_kind, s_time, s_payload, s_meta, s_delta = (
        Entry.__dict__[f].__set__ for f in ("hash", "parent", "seq", "kind", "time", "payload", "meta", "delta"))

    def __init__(self, hash: str, parent: Optional[str], seq: int, kind: str, time: str, payload: Any, meta: dict, delta: Any = None) -> None:
        s_hash(self, hash)
        s_parent(self, parent)
        s_seq(self, seq)
        s_kind(self, kind)
        s_time(self, time)
        s_payload(self, payload)
        s_meta(self, meta)
        s_delta(self, delta)

    __init__.__qualname__ = "Entry.__init__"
    return __init__


Entry.__init__ = _entry_init()  # type: ignore[method-assign]


# meta key marking an entry that is kept but is not a conversation message (an import's
# bookkeeping record, for example): `context` leaves such entries out
HIDDEN = "ctape.hidden"


NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


# names a branch may not have: `HEAD` is the key of HEAD itself in every ref record (a
# branch of that name would be taken for HEAD), and a full hash is read as an entry
RESERVED_BRANCHES = ("HEAD",)
_FULL_HASH = re.compile(r"[0-9a-fA-F]{64}")  # any case: a REF matches hash prefixes whatever their case


def copy_json(v: Any) -> Any:
    """A JSON value with new dicts and lists at every level (the strings and numbers, which
    cannot change, shared): what an integration hands out is the caller's to change, while
    an entry's values are the tape's, kept by the process's cache of entries."""
    if type(v) is dict:
        return {k: copy_json(x) for k, x in v.items()}
    if type(v) is list:
        return [copy_json(x) for x in v]
    return v


def brief(value: Any, most: int = 40) -> str:
    """A value as an error message quotes it: its repr, at most about `most` characters,
    whatever it is. A 3 MB name was quoted whole, and an int of more than 4,300 digits has
    no text form at all, so quoting one raised ValueError instead of the error meant
    (found by an audit)."""
    if isinstance(value, (str, bytes, bytearray)):
        text = repr(value[: most + 1])
    else:
        try:
            text = repr(value)
        except (ValueError, RecursionError, MemoryError):
            kind = type(value).__name__
            return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind} too large to show"
    return text if len(text) <= most else text[: max(1, most - 3)] + "..."


def check_name(name: str, what: str = "name") -> str:
    """Validate a session or branch name before it is used anywhere, paths included.
    A "branch name" must also not read as something else in a REF (check_branch_name)."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or name.endswith(".lock"):
        raise InvalidName(
            f"invalid {what} {brief(name, 44)}: use 1-128 of A-Z a-z 0-9 . _ -, starting with a letter or digit, not ending in .lock"
        )
    if what == "branch name":
        if name in RESERVED_BRANCHES:
            raise InvalidName(f"invalid branch name {name!r}: HEAD names the session's HEAD itself; pick another name")
        if _FULL_HASH.fullmatch(name):
            raise InvalidName(f"invalid branch name {name[:12]}...: a 64-hex name reads as an entry hash; pick another name")
    return name


def check_new_session_name(name: str) -> str:
    """A session about to be made: its name must also not read as something else in a REF,
    where a session's name stands for its HEAD (`ctape show NAME`): HEAD itself, or a
    64-hex name, which reads as an entry hash (such a session could not be exported or
    shown; found by an audit). Sessions that exist keep their names."""
    check_name(name, "session name")
    if name in RESERVED_BRANCHES:
        raise InvalidName(f"invalid session name {name!r}: HEAD names a session's HEAD; pick another name")
    if _FULL_HASH.fullmatch(name):
        raise InvalidName(f"invalid session name {name[:12]}...: a 64-hex name reads as an entry hash; pick another name")
    return name


def check_branch_name(name: str) -> str:
    return check_name(name, "branch name")


_second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text


def plural(n: int, one: str, many: str) -> str:
    """`one` when n is 1, else `many`: "1 entry", "2 entries"."""
    return one if n == 1 else many


def later_version(value: Any, known: int) -> bool:
    """Is `value`, a format's version as a file or a remote states it, one this ctape does
    not know (past `known`, or no whole number)? A later ctape raises a version for what an
    earlier one would misread, and the earlier one refuses it instead."""
    return not isinstance(value, int) or isinstance(value, bool) or value > known


def human_bytes(n: int) -> str:
    """A size as people read it: "812 bytes", "4.2 KB", "1.3 GB" (powers of 1,000)."""
    x = float(n)
    for unit in ("bytes", "KB", "MB", "GB"):
        if x < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{x:.1f} {unit}"
        x /= 1000
    return str(n)


def now_rfc3339() -> str:
    global _second
    sec, rem = divmod(_time.time_ns(), 1_000_000_000)
    cached = _second  # read once: another thread may replace it meanwhile
    if cached[0] != sec:
        cached = _second = (sec, _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(sec)))
    return f"{cached[1]}.{rem // 1000:06d}Z"


# the times an entry can carry: years 0001-9999 once normalised to UTC, written with
# four digits, so that times sort as text and every stored time parses again
TIME_RANGE = "years 0001-9999 in UTC"


def format_time(dt: datetime) -> str:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    u = dt.astimezone(timezone.utc)  # OverflowError outside years 1-9999 (parse_time says so)
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}.{u.microsecond:06d}Z"


def parse_time(text: str) -> str:
    """Normalise an RFC 3339 / ISO 8601 time to ctape's form (UTC, microseconds, Z).
    A time outside years 0001-9999 once in UTC (0001-01-01T00:00:00+00:30) is refused.
    RFC 3339 allows a lower-case t and z (its section 5.6)."""
    try:
        dt = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except (ValueError, AttributeError, TypeError):
        raise InvalidInput(f"invalid time {brief(text, 64)}; use RFC 3339, e.g. 2026-01-02T03:04:05Z") from None
    try:
        return format_time(dt)
    except OverflowError:
        raise InvalidInput(f"time {text[:60]!r} is out of range: ctape stores {TIME_RANGE}") from None


def time_seconds(text: str) -> float:
    """Seconds since the epoch of a stored time (also the 1-3 digit years of old ctape versions)."""
    m = re.fullmatch(r"(\d{1,4})(-.*)", text)
    if m is not None and len(m.group(1)) < 4:
        text = f"{int(m.group(1)):04d}{m.group(2)}"
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


_REQUIRED = {
    "tool_call": ("call_id", "name"),
    "tool_result": ("call_id",),
    "anchor": ("name",),
    "error": ("message",),
}


# messages: {"content": text or a list of parts}; a stream's partial text is text
_CONTENT = {"system": (str, list), "user": (str, list), "assistant": (str, list), "streaming": (str,)}


def check_payload(kind: str, payload: Any) -> None:
    """The payload conventions of SPEC section 3: an object, with the fields its kind needs
    (a message's "content" a string or a list of parts; extra fields are kept).

    A field that is there must have its type (an audit found each of these accepted): a
    tool_result's "is_error" a boolean, an error's "call_id" a string (null too is refused:
    no importer or integration writes it), an anchor's "name" not blank. A tool_call with
    no "arguments" and a tool_result with no "output" are kept, read as null, as they
    always were: tapes hold such entries, and their exports must import again
    (docs/python-api.md)."""
    if not isinstance(payload, dict):
        raise InvalidInput(f"{_a(kind)} payload must be a JSON object, e.g. {{\"content\": \"...\"}}")
    for key in _REQUIRED.get(kind, ()):
        if not isinstance(payload.get(key), str):
            raise InvalidInput(f"{_a(kind)} payload needs a string {key!r}")
    types = _CONTENT.get(kind)
    if types is not None:
        content = payload.get("content")
        if not isinstance(content, types):
            what = "a string" if types == (str,) else "a string or a list of parts"
            got = "no \"content\"" if "content" not in payload else f"\"content\" of type {_json_type(content)}"
            raise InvalidInput(f"{_a(kind)} payload needs \"content\": {what} (got {got}), e.g. {{\"content\": \"...\"}} "
                               "(or --text for plain text)")
    elif kind == "tool_result":
        if "is_error" in payload and type(payload["is_error"]) is not bool:
            raise InvalidInput(f"a tool_result's \"is_error\" must be true or false (got {_json_type(payload['is_error'])}); "
                               "leave it out when the call succeeded")
    elif kind == "error":
        if "call_id" in payload and not isinstance(payload["call_id"], str):
            raise InvalidInput(f"an error's \"call_id\" must be a string, the tool call's id (got {_json_type(payload['call_id'])}); "
                               "leave it out for an error of no call")
    elif kind == "anchor" and not payload["name"].strip():
        raise InvalidInput("an anchor payload needs a non-empty \"name\", e.g. {\"name\": \"tests-green\"}")


def _a(kind: str) -> str:
    return f"{'an' if kind[:1] in 'aeio' else 'a'} {kind}"  # an assistant, an anchor, an error; a user


def _json_type(value: Any) -> str:
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object",
            type(None): "null"}.get(type(value), type(value).__name__)
