"""Redactions: which values of which objects a tape no longer shows (docs/format.md section 17).

A redaction is a ref record (op "redact", `set` empty) whose `redact` list names
places: an object (an entry or a blob) and a JSON path inside it. Reads replace the
value at each place with MARKER; `compact` then drops the original bytes (an entry is
kept as its withheld form, a blob goes whole). Paths are a small JSONPath subset:
`$`, `.name`, `["any key"]`, `[N]`; `[#K]`, the value under the object key whose key_id
is K (16 hex digits of its blake3), and `{#K}` (last), that key itself, which a redaction
renames to a marker, the value under it kept: so that a path never spells out a key that
is itself a secret. An entry's paths start with `$.payload`, `$.meta` or `$.delta`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Optional

from blake3 import blake3

from .canonical import canonical_json
from .errors import InvalidInput

OP = "redact"
ROOTS = ("payload", "meta", "delta")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STEP = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d{1,9})\]|\[("(?:[^"\\]|\\.)*")\]|\[#([0-9a-f]{16})\]|\{#([0-9a-f]{16})\}')


class KeyStep:
    """A path step that names an object key by its key_id, not by its text: the value
    under it (`[#K]`), or the key itself (`{#K}`, `itself`)."""

    __slots__ = ("id", "itself")

    def __init__(self, key_id: str, itself: bool = False):
        self.id, self.itself = key_id, itself

    @classmethod
    def of(cls, key: str, itself: bool = False) -> "KeyStep":
        return cls(key_id(key), itself)

    def __eq__(self, other: object) -> bool:
        return type(other) is KeyStep and other.id == self.id and other.itself == self.itself

    def __hash__(self) -> int:
        return hash(("KeyStep", self.id, self.itself))

    def __repr__(self) -> str:
        return f"KeyStep({self.id!r}, itself={self.itself})"

    def find(self, d: dict) -> Optional[str]:
        """The key of d that this step names, or None. A step into the value under a key
        also finds the key once redacted (renamed to a marker that ends with the start of
        its key id): a value under it may be redacted by a later record."""
        renamed = None if self.itself else f" {self.id[:8]}]"
        for k in d:
            if type(k) is str:
                if key_id(k) == self.id:
                    return k
                if renamed is not None and k.endswith(renamed) and k.startswith("[redacted: "):
                    return k
        return None


def key_id(key: str) -> str:
    return blake3(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def key_marker(kind: str, key: str) -> str:
    """What a redacted key becomes: a marker told apart from other redacted keys of its object."""
    return f"[redacted: {kind} {key_id(key)[:8]}]"


def marker(kind: str) -> str:
    """What a read shows where a value was redacted."""
    return f"[redacted: {kind}]"


def is_marker(value: Any) -> bool:
    """Is `value` what a read shows where a value was redacted?"""
    return type(value) is str and value.startswith("[redacted: ") and value.endswith("]")


_MARKER = re.compile(r"\[redacted: ([a-z0-9_-]{1,40})(?: [0-9a-f]{8})?\]")  # marker() or key_marker()


def markers(payload: Any, meta: Any, delta: Any) -> list[tuple[str, str]]:
    """(JSON path, kind) of every marker in an entry's values, as reads show them: a value
    that is one, or a key renamed to one (its path names the key as it now reads)."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[list, Any]] = [(["payload"], payload), (["meta"], meta), (["delta"], delta)]
    while stack:
        steps, v = stack.pop()
        if type(v) is str:
            m = _MARKER.fullmatch(v)
            if m:
                out.append((format_path(steps), m.group(1)))
        elif isinstance(v, dict):
            for k, x in v.items():
                m = _MARKER.fullmatch(k)
                if m:
                    out.append((format_path(steps + [k]), m.group(1)))
                stack.append((steps + [k], x))
        elif isinstance(v, list):
            stack.extend((steps + [i], x) for i, x in enumerate(v))
    return sorted(out)


def parse_path(text: str) -> list:
    """`$.payload.args[0]["a b"]` -> ["payload", "args", 0, "a b"]; InvalidInput otherwise."""
    if not isinstance(text, str) or not text.startswith("$"):
        raise InvalidInput(f"bad JSON path {text!r}: it starts with $, like $.payload.content")
    steps: list = []
    pos = 1
    while pos < len(text):
        m = _STEP.match(text, pos)
        if m is None:
            raise InvalidInput(f"bad JSON path {text!r} at character {pos + 1}: use .name, [N] or [\"key\"]")
        name, index, quoted, under, kid = m.groups()
        if kid is not None and m.end() != len(text):
            raise InvalidInput(f"bad JSON path {text!r}: {{#...}} names a key itself, so it comes last; [#...] is the value under it")
        steps.append(name if name is not None else int(index) if index is not None else KeyStep(under) if under is not None
                     else KeyStep(kid, True) if kid is not None else json.loads(quoted))
        pos = m.end()
    return steps


def format_path(steps: Iterable) -> str:
    out = ["$"]
    for s in steps:
        if isinstance(s, int):
            out.append(f"[{s}]")
        elif type(s) is KeyStep:
            out.append("{#" + s.id + "}" if s.itself else "[#" + s.id + "]")
        elif _IDENT.fullmatch(s):
            out.append("." + s)
        else:
            out.append("[" + json.dumps(s, ensure_ascii=False) + "]")
    return "".join(out)


def entry_path(text: str) -> list:
    """A path inside an entry: it must go into payload, meta or delta."""
    steps = parse_path(text)
    if not steps or steps[0] not in ROOTS:
        raise InvalidInput(f"bad JSON path {text!r}: an entry's path starts with $.payload, $.meta or $.delta")
    return steps


def get_at(value: Any, steps: list) -> tuple[bool, Any]:
    """(True, the value at `steps`) or (False, None) when the path is not there. A path
    that ends with {#K} (a KeyStep of the key itself) gives the key."""
    for s in steps:
        if type(s) is KeyStep:
            k = s.find(value) if type(value) is dict else None
            if k is None:
                return False, None
            if s.itself:  # (last: parse_path sees to it)
                return True, k
            value = value[k]
        elif isinstance(s, int) and type(value) is list and 0 <= s < len(value):
            value = value[s]
        elif isinstance(s, str) and type(value) is dict and (k := _key(value, s)) is not None:
            value = value[k]
        else:
            return False, None
    return True, value


def _key(d: dict, step: str) -> Optional[str]:
    """The key of d a name step names: itself, or, for the marker a redacted key reads as
    (`[redacted: KIND K8]`: a path a scan of the redacted entry gave), the key it stands
    for in a body read before the renaming."""
    if step in d:
        return step
    m = _KEY_MARKER.fullmatch(step)
    if m is None:
        return None
    return next((k for k in d if type(k) is str and key_id(k).startswith(m.group(1))), None)


_KEY_MARKER = re.compile(r"\[redacted: [a-z0-9_-]{1,40} ([0-9a-f]{8})\]")


def _set_at(value: Any, steps: list, new: Any) -> Any:
    """A copy of `value` with `new` at `steps` (copies only along the path); unchanged when absent."""
    if not steps:
        return new
    s, rest = steps[0], steps[1:]
    if type(s) is KeyStep:
        k = s.find(value) if type(value) is dict else None
        if k is None:
            return value
        if s.itself:  # the key itself (last): renamed, its value kept (`new` is the marker's kind)
            return {(key_marker(new, k) if x == k else x): v for x, v in value.items()}
        out = dict(value)
        out[k] = _set_at(value[k], rest, new)
        return out
    if isinstance(s, int) and type(value) is list and 0 <= s < len(value):
        out = list(value)
        out[s] = _set_at(value[s], rest, new)
        return out
    if isinstance(s, str) and type(value) is dict and (k := _key(value, s)) is not None:
        out = dict(value)
        out[k] = _set_at(value[k], rest, new)
        return out
    return value


def apply(raw: dict, places: Iterable[tuple[str, str]]) -> dict:
    """An entry body (as stored: blob references in place) with the value at each
    (path, kind) replaced by its marker, and each key a path ends on renamed to one. A
    path that is not there changes nothing. The order does not change the result (a step
    into a key finds it once renamed too: KeyStep.find, _key); the deepest paths go first,
    then by text, so that it is one order on every copy."""
    todo = []
    for path, kind in places:
        try:
            todo.append((entry_path(path), path, kind))
        except InvalidInput:
            continue  # a record another version wrote: nothing this version can place
    todo.sort(key=lambda t: (-len(t[0]), t[1], t[2]))
    for steps, _, kind in todo:
        found, old = get_at(raw, steps)
        if not found:
            continue
        if steps and type(steps[-1]) is KeyStep and steps[-1].itself:
            raw = _set_at(raw, steps, kind)
        elif old != marker(kind):
            raw = _set_at(raw, steps, marker(kind))
    return raw


def withheld_body(raw: dict, places: Iterable[tuple[str, str]]) -> bytes:
    """The canonical bytes of an entry's withheld form: its body with every redacted value
    replaced by the marker (what the pack keeps instead of the original)."""
    return canonical_json(apply(raw, places))


def record_items(rec: dict) -> list[tuple[str, str, str]]:
    """The (object, path, kind) places a redaction record names (none for other records)."""
    if rec.get("op") != OP:
        return []
    out = []
    for item in rec.get("redact") or ():
        if type(item) is dict and type(item.get("object")) is str and type(item.get("path")) is str and type(item.get("kind")) is str:
            out.append((item["object"], item["path"], item["kind"]))
    return out


def place(obj: str, path: str, kind: str, blob: Optional[str] = None) -> list[dict]:
    """The items of a redaction record for one value: the entry's path, and the blob itself
    when the value is stored as one (a blob goes whole, wherever it is referred to)."""
    items = [{"object": obj, "path": path, "kind": kind}]
    if blob:
        items.append({"object": blob, "path": "$", "kind": kind})
    return items
