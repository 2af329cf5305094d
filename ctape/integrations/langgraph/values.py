"""Channel values at a checkpoint entry: ``_Values``, the part of ``TapeSaver`` that reads
a channel's value through the checkpoint records (unchanged, ``at``, ``append``, ``msgs``,
...), keeps recent ones in a cache, and builds messages back from their entries; and
``_isolated``, the copy of a value that the cache and the caller do not share.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, messages_from_dict

from .codec import _copy_json, _is_message

_MISSING = object()
# the classes langchain's messages_from_dict builds for the usual message types, by its "type"
_MESSAGE_CLASSES = {"human": HumanMessage, "ai": AIMessage, "system": SystemMessage, "tool": ToolMessage}


class _Values:
    """Channel values, a part of ``TapeSaver`` (saver.py): it uses the saver's tape, codec,
    ``_values`` (the cache) and ``_cache_size``, and the index's ``_brief``."""

    def _cache(self, key: tuple[str, str], value: Any) -> None:
        self._values[key] = value
        self._values.move_to_end(key)
        while len(self._values) > self._cache_size:
            self._values.popitem(last=False)

    def _value(self, h: Optional[str], ch: str) -> Any:
        """The value of channel ch at checkpoint entry h (_MISSING when it has none)."""
        steps: list[tuple[Optional[int], list]] = []  # (messages kept from the parent, new items)
        base: Any = _MISSING
        while h is not None:
            got = self._values.get((h, ch), _MISSING)
            if got is not _MISSING:
                base = got
                break
            p = self._brief(h).payload
            spec = p["channels"].get(ch)
            if spec is not None and "big" in spec:
                spec = self.tape.read_entry(h).payload["channels"][ch]
            if spec is None:  # unchanged: as at the parent checkpoint
                h = p.get("parent_entry")
            elif "v" in spec:
                base = self.codec.dec(spec["v"])
                break
            elif "absent" in spec:
                break
            elif "at" in spec:
                h = spec["at"]
            elif "dict_at" in spec:
                rest = self.codec.dec(spec["rest"])
                refs = {k: r if type(r) is list else [r, []] for k, r in spec["dict_at"].items()}
                base = {k: (list(self._value(refs[k][0], k)) + [self.codec.dec(x) for x in refs[k][1]] if k in refs else rest[k]) for k in spec["keys"]}
                break
            elif "append" in spec:
                steps.append((None, [self.codec.dec(x) for x in spec["append"]]))
                h = spec.get("base") or p.get("parent_entry")  # base: a subgraph grows from its caller's value
            elif "msgs" in spec:
                steps.append((spec.get("keep"), [self._load_message(m) for m in spec["msgs"]]))
                if spec.get("keep") == 0:
                    break  # nothing comes from the parent
                h = spec.get("base") or p.get("parent_entry")
            else:
                raise ValueError(f"checkpoint entry {h} has an unknown channel record {spec!r}")
        if not steps:
            return base
        value = list(base) if base is not _MISSING else []  # our own list: grown in place
        for keep, items in reversed(steps):
            if keep is not None:
                del value[keep:]
            value += items
        return value

    def _msg_hashes(self, h: Optional[str], ch: str) -> Optional[list[str]]:
        """The entries (the first of each message) that hold channel ch's messages at
        checkpoint entry h; None when part of the value is not stored as message entries."""
        key = (h, ch + "\0#")
        steps: list[tuple[Optional[int], list]] = []
        base: list[str] = []
        while h is not None:
            got = self._values.get((h, ch + "\0#"), _MISSING)
            if got is not _MISSING:
                base = got
                break
            p = self._brief(h).payload
            spec = p["channels"].get(ch)
            if spec is None:
                h = p.get("parent_entry")
            elif "at" in spec:
                h = spec["at"]
            elif "absent" in spec:
                break
            elif "msgs" in spec:
                steps.append((spec.get("keep"), spec["msgs"]))
                if spec.get("keep") == 0:
                    break
                h = spec.get("base") or p.get("parent_entry")
            elif spec.get("append") == []:
                h = spec.get("base") or p.get("parent_entry")  # written without a change (a node returned {"messages": []})
            elif spec.get("v") == {"j": []}:
                break  # an empty list: no messages
            else:
                return None  # a whole value or appended non-messages: no entries to point at
        value = list(base)
        for keep, items in reversed(steps):
            if keep is not None:
                del value[keep:]
            value += items
        self._cache(key, value)
        return list(value)

    def _prime_parent(self, child: dict, child_values: dict, parent_hash: str) -> None:
        """Cache the parent checkpoint's channel values by undoing the child's changes:
        reading history newest first then costs what changed, not the whole state again."""
        for ch, v in child_values.items():
            spec = child["channels"].get(ch)
            if spec is not None and "base" in spec:
                continue  # grown from another checkpoint's value: the parent has none
            if spec is None:
                parent = v
            elif type(v) is list and "append" in spec:
                parent = v[: len(v) - len(spec["append"])]
            elif type(v) is list and "msgs" in spec and "keep" not in spec:
                parent = v[: len(v) - len(spec["msgs"])]
            elif type(v) is list and "msgs" in spec and "drop" in spec:
                parent = v[: spec["keep"]] + [self._load_message(m) for m in spec["drop"]]
            else:
                continue
            if (parent_hash, ch) not in self._values:
                self._cache((parent_hash, ch), parent)

    def _load_message(self, h: str) -> Any:
        e = self._brief(h)
        rec = e.lg["message"]
        if "d" not in rec:
            m = self.codec.dec_message(rec)
            return self._redacted_message(h, m) if type(m) is str else m
        # langchain's dict form, the content from the entry's payload when the record left
        # it out; containers copied (the brief's must not change), atoms as they are
        d = rec["d"]
        data = {}
        for k, v in d["data"].items():
            if type(v) is dict or type(v) is list:
                v = _copy_json(v) if v else type(v)()  # most are empty: {} and [] need no walk
            data[k] = v
        if "content" not in data:
            p = e.payload
            data["content"] = _copy_json(p["content"] if "content" in p else p.get("output"))
        cls = _MESSAGE_CLASSES.get(d["type"])
        if cls is not None:
            return cls(**data)  # what messages_from_dict does for these types, without its two calls a message
        return messages_from_dict([{"type": d["type"], "data": data}])[0]

    def _redacted_message(self, h: str, text: str) -> Any:
        """A message whose serde record was redacted (`text`, the marker): one of its role,
        built from what its conversation entry shows (the marker too, when the text held
        the secret), so the graph goes on with a message where it had one."""
        e = self.tape.read_entry(h)
        p = e.payload if isinstance(e.payload, dict) else {}
        content = p.get("content", p.get("output", text))
        content = content if isinstance(content, (str, list)) else text
        if e.kind == "user":
            return HumanMessage(content=content)
        if e.kind in ("assistant", "tool_call"):
            return AIMessage(content=content if e.kind == "assistant" else text)
        if e.kind == "tool_result":
            return ToolMessage(content=content, tool_call_id=str(p.get("call_id") or ""))
        return SystemMessage(content=content)


def _isolated(v: Any) -> Any:
    """A copy of a channel value that later changes to v do not reach, and that the
    caller may change: the saver's cache must keep what the checkpoint held, as a saver
    that serializes does (a node that changes its state in place would otherwise change
    every earlier checkpoint read in this process). Messages are kept, not copied: a
    graph makes new messages rather than changing old ones; a list of them is copied."""
    t = type(v)
    if v is None or t is str or t is int or t is float or t is bool or t is bytes:
        return v
    if t is list:
        if all(map(_is_message, v)):
            return list(v)
        return [_isolated(x) for x in v]
    if t is tuple:
        return [_isolated(x) for x in v]  # what a serializing saver gives back (and a new process)
    if t is dict and all(type(k) is str for k in v):
        return {k: _isolated(x) for k, x in v.items()}
    if _is_message(v):
        return v
    try:
        return copy.deepcopy(v)
    except Exception:  # noqa: BLE001 - a value that cannot be copied is kept as it is
        return v
