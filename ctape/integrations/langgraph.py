"""A LangGraph checkpointer that keeps checkpoints on a tape: ``TapeSaver``.

How a thread lives on the tape:

- A thread is one session (``lg-<thread_id>``; see ``naming.session_name``). Its root
  namespace grows on branch ``main`` (HEAD is attached to it); a subgraph namespace
  grows on branch ``ns-<hash>``.
- A checkpoint is one hidden entry. Its tape parent is the last entry stored for its
  parent checkpoint (the checkpoint itself, or its newest pending-writes entry), so
  the tape path of a checkpoint is its whole history, like a git commit.
- Pending writes are hidden entries chained after their checkpoint.
- Only what changed is stored: a channel whose version did not move is not written
  again (its value is read through the parent); a list channel that grew is stored as
  the new items only. New chat messages become ordinary ``user`` / ``assistant`` /
  ``tool_call`` / ``tool_result`` entries just before their checkpoint, so
  ``ctape log``, ``status`` and ``context`` show the conversation, and the checkpoint
  refers to them by hash. Storage grows with what happened, not with history length
  times steps.
- A fork (``update_state`` on an old checkpoint, time travel, a late write) keeps
  both lines: the newest checkpoint of a namespace is always on its main branch, the
  line it left keeps a branch of its own (``main.was-<hash>`` / ``main.cp-<id>``).
- ``copy_thread`` writes one ref record: the new session's branches point at the same
  entries. ``delete_thread`` and ``prune`` move refs only (the tape is append-only;
  ``ctape compact`` later frees what no branch reaches). ``delete_for_runs`` and
  pruned checkpoints are hidden by tombstone entries on branch ``tombstones``.

The saver keeps an in-memory index per thread (checkpoint id -> entry), built by one
walk from the thread's branches and kept current by its own writes; another process's
writes are picked up from the refs.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import math
import os
import random
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    SerializerProtocol,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)

from ..models import HIDDEN, parse_time
from ..tape import Tape
from .naming import open_tape, plain_id, session_name, short_hash

__all__ = ["TapeSaver"]

KEY = "langgraph"  # meta key holding LangGraph's ids on every entry the saver writes
TOMBSTONES = "tombstones"
_MISSING = object()


# -- values <-> JSON ----------------------------------------------------------------------------


def _is_json(v: Any, depth: int = 0) -> bool:
    """True when v survives a JSON round trip unchanged (exact types, finite floats)."""
    if depth > 64:
        return False
    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return True
    if t is float:
        return math.isfinite(v)
    if t is list:
        return all(_is_json(x, depth + 1) for x in v)
    if t is dict:
        return all(type(k) is str and _is_json(x, depth + 1) for k, x in v.items())
    return False


def _copy_json(v: Any) -> Any:
    if type(v) is dict:
        return {k: _copy_json(x) for k, x in v.items()}
    if type(v) is list:
        return [_copy_json(x) for x in v]
    return v


def _is_message(v: Any) -> bool:
    from langchain_core.messages import BaseMessage

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
        t, b = d["s"]
        return self.serde.loads_typed((t, base64.b64decode(b)))

    def _serde(self, v: Any) -> dict:
        t, b = self.serde.dumps_typed(v)
        return {"s": [t, base64.b64encode(b).decode("ascii")]}

    def enc_message(self, m: Any) -> dict:
        """A message as langchain's own dict form when that round-trips exactly."""
        from langchain_core.messages import message_to_dict, messages_from_dict

        try:
            d = message_to_dict(m)
            if _is_json(d) and messages_from_dict([d])[0] == m:
                return {"d": d}
        except Exception:  # noqa: BLE001 - any failure means: use the serde
            pass
        return self._serde(m)

    def dec_message(self, d: dict) -> Any:
        from langchain_core.messages import messages_from_dict

        if "d" in d:
            return messages_from_dict([_copy_json(d["d"])])[0]
        return self.dec(d)


def _message_entries(m: Any) -> list[tuple[str, dict]]:
    """The conversation entries (kind, payload) that show one LangChain message on the tape."""
    content = m.content if _is_json(m.content) else str(m.content)
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
            out.append(("tool_call", {"call_id": str(c.get("id") or ""), "name": str(c.get("name") or ""), "arguments": args if _is_json(args) else str(args)}))
        return out
    if t in ("tool", "ToolMessageChunk"):
        p = {"call_id": str(getattr(m, "tool_call_id", "") or ""), "output": content}
        if getattr(m, "status", None) == "error":
            p["is_error"] = True
        return [("tool_result", p)]
    return [("system", {"content": content})]  # other roles: kept, hidden from context


# -- the per-thread index ------------------------------------------------------------------------


@dataclass
class _Cp:
    hash: str
    seq: int
    parent_id: Optional[str]


@dataclass
class _Thread:
    """What one thread's session holds, found by walking its branches."""

    name: str
    tips: dict[str, str] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    cps: dict[tuple[str, str], _Cp] = field(default_factory=dict)
    ids: dict[str, list[str]] = field(default_factory=dict)  # ns -> sorted checkpoint ids
    writes: dict[tuple[str, str], list[tuple[int, str]]] = field(default_factory=dict)  # (seq, entry hash)
    seg: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)  # newest entry of a checkpoint's segment
    stored_at: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (ns, channel, version) -> entry
    deleted: set[tuple[str, str]] = field(default_factory=set)

    def add(self, e) -> None:
        """Index one entry the saver wrote (walking finds them in any order)."""
        if e.hash in self.seen:
            return
        self.seen.add(e.hash)
        lg = e.meta.get(KEY) if isinstance(e.meta, dict) else None
        if not isinstance(lg, dict):
            return
        typ = lg.get("type")
        ns = lg.get("checkpoint_ns", "")
        cid = lg.get("checkpoint_id")
        key = (ns, cid)
        if typ == "checkpoint":
            old = self.cps.get(key)
            if old is None or e.seq > old.seq:
                self.cps[key] = _Cp(e.hash, e.seq, lg.get("parent_checkpoint_id"))
                ids = self.ids.setdefault(ns, [])
                if old is None:
                    bisect.insort(ids, cid)
            self._bump(key, e.seq, e.hash)
            versions = (e.payload.get("versions") or {}) if isinstance(e.payload, dict) else {}
            for ch, spec in (e.payload.get("channels") or {}).items():
                if "at" not in spec and "absent" not in spec and ch in versions:
                    self.stored_at[(ns, ch, str(versions[ch]))] = e.hash
        elif typ == "writes":
            self.writes.setdefault(key, []).append((e.seq, e.hash))
            self.writes[key].sort()
            self._bump(key, e.seq, e.hash)
        elif typ == "tombstone":
            for ns_, cid_ in e.payload.get("delete", []):
                self.deleted.add((ns_, cid_))

    def _bump(self, key: tuple[str, str], seq: int, h: str) -> None:
        cur = self.seg.get(key)
        if cur is None or seq > cur[0]:
            self.seg[key] = (seq, h)

    def live_ids(self, ns: str) -> list[str]:
        return [c for c in self.ids.get(ns, []) if (ns, c) not in self.deleted]

    def latest(self, ns: str) -> Optional[str]:
        for c in reversed(self.ids.get(ns, [])):
            if (ns, c) not in self.deleted:
                return c
        return None


def _main_branch(ns: str) -> str:
    return "main" if ns == "" else f"ns-{short_hash(ns, 12)}"


# -- the saver -----------------------------------------------------------------------------------


class TapeSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on a ctape tape directory.

    ``TapeSaver(".ctape")`` (created if missing) or ``TapeSaver(tape)``. Every method has
    its async twin; a saver may be shared by threads and by concurrent graph runs.
    """

    def __init__(self, tape: Union[str, os.PathLike, Tape], *, prefix: str = "lg-", serde: Optional[SerializerProtocol] = None, cache_size: int = 256):
        super().__init__(serde=serde)
        self.tape, self._owns = open_tape(tape)
        self.prefix = prefix
        self.codec = _Codec(self.serde)
        self._lock = threading.RLock()
        self._threads: dict[str, _Thread] = {}
        self._values: OrderedDict[tuple[str, str], Any] = OrderedDict()  # (entry, channel) -> value
        self._cache_size = cache_size
        self._parked: dict[tuple[str, str, str], list[dict]] = {}  # writes that came before their checkpoint

    def close(self) -> None:
        if self._owns:
            self.tape.close()

    def __enter__(self) -> "TapeSaver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    async def __aenter__(self) -> "TapeSaver":
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    def session_for(self, thread_id: str) -> str:
        """The session name that holds a thread (for ``ctape log -s NAME``)."""
        return session_name(self.prefix, str(thread_id))

    # -- the index ------------------------------------------------------------------------------

    def _thread(self, thread_id: str) -> _Thread:
        name = self.session_for(thread_id)
        s = self.tape.session(name)
        branches = dict(s.refs().branches) if s.exists() else {}
        th = self._threads.get(name)
        if th is not None and th.tips == branches:
            return th
        if th is None or any(b not in branches for b in th.tips):
            th = _Thread(name)  # first look, or someone deleted a branch: walk it all
        self._walk(th, [h for b, h in sorted(branches.items()) if th.tips.get(b) != h])
        th.tips = branches
        self._threads[name] = th
        return th

    def _walk(self, th: _Thread, tips: list[str]) -> None:
        stack = list(tips)
        while stack:
            h = stack.pop()
            while h is not None and h not in th.seen:
                if not self.tape.has_entry(h):
                    break  # not synced yet: the next rsync brings it
                e = self.tape.read_entry(h)
                th.add(e)
                h = e.parent

    # -- values ------------------------------------------------------------------------------

    def _cache(self, key: tuple[str, str], value: Any) -> None:
        self._values[key] = value
        self._values.move_to_end(key)
        while len(self._values) > self._cache_size:
            self._values.popitem(last=False)

    def _value(self, h: Optional[str], ch: str) -> Any:
        """The value of channel ch at checkpoint entry h (_MISSING when it has none)."""
        steps: list[tuple[str, Any]] = []
        base: Any = _MISSING
        while h is not None:
            got = self._values.get((h, ch), _MISSING)
            if got is not _MISSING:
                base = got
                break
            p = self.tape.read_entry(h).payload
            spec = p["channels"].get(ch)
            if spec is None:  # unchanged: as at the parent checkpoint
                h = p.get("parent_entry")
            elif "v" in spec:
                base = self.codec.dec(spec["v"])
                break
            elif "absent" in spec:
                break
            elif "at" in spec:
                h = spec["at"]
            elif "append" in spec:
                steps.append((h, [self.codec.dec(x) for x in spec["append"]]))
                h = p.get("parent_entry")
            elif "msgs" in spec:
                steps.append((h, [self._load_message(m) for m in spec["msgs"]]))
                h = p.get("parent_entry")
            else:
                raise ValueError(f"checkpoint entry {h} has an unknown channel record {spec!r}")
        value = base
        for _, items in reversed(steps):
            value = (list(value) if value is not _MISSING else []) + items
        return value

    def _load_message(self, h: str) -> Any:
        e = self.tape.read_entry(h)
        rec = dict(e.meta[KEY]["message"])
        if "d" in rec and "content" not in rec["d"]["data"]:
            d = {"type": rec["d"]["type"], "data": dict(rec["d"]["data"])}
            p = e.payload
            d["data"]["content"] = p["content"] if "content" in p else p.get("output")
            rec = {"d": d}
        return self.codec.dec_message(rec)

    # -- reading -----------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        conf = config["configurable"]
        tid = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        with self._lock:
            th = self._thread(tid)
            cid = get_checkpoint_id(config) or th.latest(ns)
            if cid is None or (ns, cid) not in th.cps or (ns, cid) in th.deleted:
                return None
            return self._tuple(th, tid, ns, cid)

    def _tuple(self, th: _Thread, tid: str, ns: str, cid: str) -> CheckpointTuple:
        cp = th.cps[(ns, cid)]
        e = self.tape.read_entry(cp.hash)
        p = e.payload
        checkpoint = self.codec.dec(p["checkpoint"])
        values = {}
        for ch in checkpoint.get("channel_versions", {}):
            v = self._value(cp.hash, ch)
            if v is not _MISSING:
                self._cache((cp.hash, ch), v)
                values[ch] = list(v) if type(v) is list else v
        checkpoint["channel_values"] = values
        parent = cp.parent_id
        return CheckpointTuple(
            config={"configurable": {"thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint=checkpoint,
            metadata=self.codec.dec(p["metadata"]),
            parent_config={"configurable": {"thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": parent}} if parent else None,
            pending_writes=self._pending_writes(th, ns, cid),
        )

    def _pending_writes(self, th: _Thread, ns: str, cid: str) -> list[tuple[str, str, Any]]:
        merged: dict[tuple[str, int], tuple[str, str, dict, str]] = {}
        for _, h in th.writes.get((ns, cid), []):
            p = self.tape.read_entry(h).payload
            task_id, task_path = p["task_id"], p.get("task_path", "")
            for idx, ch, enc in p["writes"]:
                k = (task_id, idx)
                if idx >= 0 and k in merged:
                    continue
                merged[k] = (task_id, ch, enc, task_path)
        order = sorted(merged, key=lambda k: writes_sort_key(merged[k][3], *k))
        return [(merged[k][0], merged[k][1], self.codec.dec(merged[k][2])) for k in order]

    def list(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> Iterator[CheckpointTuple]:
        conf = (config or {}).get("configurable", {})
        tids = [str(conf["thread_id"])] if "thread_id" in conf else self._thread_ids()
        want_ns = conf.get("checkpoint_ns")
        want_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        for tid in tids:
            with self._lock:
                th = self._thread(tid)
                nss = [want_ns] if want_ns is not None else sorted(th.ids)
                todo = [(ns, c) for ns in nss for c in reversed(th.live_ids(ns))]
            for ns, cid in todo:
                if want_id and cid != want_id:
                    continue
                if before_id and cid >= before_id:
                    continue
                with self._lock:
                    if filter:
                        md = self.codec.dec(self.tape.read_entry(th.cps[(ns, cid)].hash).payload["metadata"])
                        if not all(md.get(k) == v for k, v in filter.items()):
                            continue
                    if limit is not None and limit <= 0:
                        return
                    tup = self._tuple(th, tid, ns, cid)
                if limit is not None:
                    limit -= 1
                yield tup

    def _thread_ids(self) -> list[str]:
        out = []
        for name in self.tape.store.sessions():
            tid = plain_id(self.prefix, name)
            if tid is None and name.startswith(self.prefix):
                tid = self._thread_id_from_entries(name)
            if tid is not None and self.session_for(tid) == name:
                out.append(tid)
        return out

    def _thread_id_from_entries(self, name: str) -> Optional[str]:
        s = self.tape.session(name)
        for h in s.refs().branches.values():
            e = self.tape.read_entry(h)
            lg = e.meta.get(KEY) if isinstance(e.meta, dict) else None
            if isinstance(lg, dict) and isinstance(lg.get("thread_id"), str):
                return lg["thread_id"]
        return None

    # -- writing -----------------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        conf = config["configurable"]
        tid = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        parent_id = conf.get("checkpoint_id")
        cid = checkpoint["id"]
        md = get_checkpoint_metadata(config, metadata)
        with self._lock:
            th = self._thread(tid)
            self._put(th, tid, ns, checkpoint, md, new_versions, parent_id)
        return {"configurable": {"thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def _put(self, th: _Thread, tid: str, ns: str, checkpoint: Checkpoint, md: dict, new_versions: ChannelVersions, parent_id: Optional[str]) -> None:
        cid = checkpoint["id"]
        parent = th.cps.get((ns, parent_id)) if parent_id else None
        parent_entry = parent.hash if parent else None
        parent_versions = self.tape.read_entry(parent_entry).payload["versions"] if parent_entry else {}
        values = checkpoint.get("channel_values", {})
        versions = {k: v for k, v in checkpoint.get("channel_versions", {}).items()}
        specs: dict[str, dict] = {}
        new_messages: dict[str, list[Any]] = {}
        keep: dict[str, Any] = {}
        for ch in sorted(set(versions) | set(new_versions)):
            ver = versions.get(ch, new_versions.get(ch))
            if ch not in new_versions:
                if parent_entry and ch in parent_versions and str(parent_versions[ch]) == str(ver):
                    continue  # unchanged: read through the parent
                at = th.stored_at.get((ns, ch, str(ver)))
                specs[ch] = {"at": at} if at else {"absent": 1}
                continue
            if ch not in values:
                specs[ch] = {"absent": 1}
                continue
            v = values[ch]
            keep[ch] = v
            if type(v) is list:
                prev = self._value(parent_entry, ch) if parent_entry else _MISSING
                base = [] if prev is _MISSING else prev
                if type(base) is list and len(v) >= len(base) and all(a is b or a == b for a, b in zip(base, v)):
                    items = v[len(base):]
                    if items and all(_is_message(x) for x in items):
                        new_messages[ch] = items
                        continue
                    if prev is not _MISSING:
                        specs[ch] = {"append": [self.codec.enc(x) for x in items]}
                        continue
            specs[ch] = {"v": self.codec.enc(v)}
        cp_body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        time = _entry_time(checkpoint.get("ts"))
        s = self.tape.session(th.name)
        base_ids = {"thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": cid}
        written = []
        with self.tape.batch():
            tip = th.seg[(ns, parent_id)][1] if parent_id and (ns, parent_id) in th.seg else None
            start = tip
            for ch, items in new_messages.items():
                hashes = []
                for m in items:
                    parts = _message_entries(m)
                    rec = self.codec.enc_message(m)
                    if "d" in rec and parts[0][0] != "tool_call":
                        rec = {"d": {"type": rec["d"]["type"], "data": {k: v for k, v in rec["d"]["data"].items() if k != "content"}}}
                    for i, (kind, payload) in enumerate(parts):
                        lg = {"type": "message", "channel": ch, **base_ids}
                        if i == 0:
                            lg["message"] = rec
                        meta = {KEY: lg}
                        if kind == "system" and m.type not in ("system", "SystemMessageChunk"):
                            meta[HIDDEN] = True  # a role ctape has no kind for: kept, not shown
                        e = s.put_entry(kind, payload, meta, None, time, tip)
                        written.append(e)
                        tip = e.hash
                        if i == 0:
                            hashes.append(e.hash)
                specs[ch] = {"msgs": hashes}
            payload = {
                "checkpoint": self.codec.enc(cp_body),
                "metadata": self.codec.enc(md),
                "versions": {k: str(v) for k, v in versions.items()},
                "channels": specs,
                "parent_entry": parent_entry,
            }
            meta = {HIDDEN: True, KEY: {"type": "checkpoint", "parent_checkpoint_id": parent_id, **base_ids}}
            e = s.put_entry("system", payload, meta, None, time, tip)
            written.append(e)
            latest = th.latest(ns)
            self._move_refs(th, s, ns, start, e.hash, newest=latest is None or cid >= latest, label=cid)
            for w in written:
                th.add(w)
            for payload in self._parked.pop((th.name, ns, cid), []):
                self._write_entry(th, s, tid, ns, cid, payload)
        for ch, v in keep.items():
            self._cache((e.hash, ch), list(v) if type(v) is list else v)
        th.tips = dict(s.refs().branches)

    def _move_refs(self, th: _Thread, s, ns: str, parent: Optional[str], tip: str, *, newest: bool, label: str) -> None:
        """One ref record: the branch at `parent` moves to `tip`; the newest checkpoint is on main."""
        branches = s.refs().branches
        main = _main_branch(ns)
        at_parent = [b for b, h in branches.items() if h == parent and parent is not None and b != TOMBSTONES]
        changes: dict[str, Optional[str]] = {}
        if newest:
            changes[main] = tip
            old = branches.get(main)
            if old is not None and old != parent:
                changes[f"{main}.was-{old[:12]}"] = old
            for b in at_parent:
                if b != main:
                    changes[b] = None
        elif at_parent:
            first = main if main in at_parent else sorted(at_parent)[0]
            changes[first] = tip
            for b in at_parent:
                if b != first:
                    changes[b] = None
        else:
            name = f"{main}.cp-{label}"[:100]
            if name in branches:
                name = f"{name}-{tip[:8]}"
            changes[name] = tip
        if ns == "" and s.refs().head != "@main" and "main" in changes:
            changes["HEAD"] = "@main"
        elif s.refs().head is None and "main" not in branches and "main" not in changes:
            pass  # a thread with subgraph checkpoints only: no HEAD yet
        s.set_refs("langgraph", changes)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        conf = config["configurable"]
        tid = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        cid = conf["checkpoint_id"]
        with self._lock:
            th = self._thread(tid)
            parked = self._parked.get((th.name, ns, cid))
            have = set()
            for _, h in th.writes.get((ns, cid), []):
                p = self.tape.read_entry(h).payload
                have.update((p["task_id"], idx) for idx, _, _ in p["writes"])
            for p in parked or []:
                have.update((p["task_id"], idx) for idx, _, _ in p["writes"])
            recs = []
            for i, (ch, v) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(ch, i)
                if idx >= 0 and (task_id, idx) in have:
                    continue  # first write of a task wins, as in LangGraph's own savers
                recs.append([idx, ch, self.codec.enc(v)])
            if not recs:
                return
            payload = {"task_id": task_id, "task_path": task_path, "writes": recs}
            if (ns, cid) not in th.cps:
                # LangGraph's async durability can send a checkpoint's writes before the
                # checkpoint itself: keep them until it arrives, then store them after it
                self._parked.setdefault((th.name, ns, cid), []).append(payload)
                return
            s = self.tape.session(th.name)
            with self.tape.batch():
                e = self._write_entry(th, s, tid, ns, cid, payload)
            th.add(e)
            th.tips = dict(s.refs().branches)

    def _write_entry(self, th: _Thread, s, tid: str, ns: str, cid: str, payload: dict):
        meta = {HIDDEN: True, KEY: {"type": "writes", "thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": cid}}
        tip = th.seg.get((ns, cid), (0, None))[1]
        e = s.put_entry("system", payload, meta, None, None, tip)
        self._move_refs(th, s, ns, tip, e.hash, newest=False, label=cid)
        th.add(e)
        return e

    # -- deleting, copying, pruning -------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        with self._lock:
            name = self.session_for(str(thread_id))
            s = self.tape.session(name)
            if not s.exists():
                return
            st = s.refs()
            if st.branches or st.head is not None:
                changes: dict[str, Optional[str]] = {b: None for b in st.branches}
                changes["HEAD"] = None
                s.set_refs("langgraph-delete-thread", changes)
            self._threads.pop(name, None)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """By reference: the target's branches point at the source's entries; nothing is copied."""
        with self._lock:
            src = self._thread(str(source_thread_id))
            if not src.tips:
                return
            dst = self.tape.session(self.session_for(str(target_thread_id)))
            old = dst.refs().branches if dst.exists() else {}
            changes: dict[str, Optional[str]] = {b: None for b in old if b not in src.tips}
            changes.update(src.tips)
            changes["HEAD"] = "@main" if "main" in src.tips else None
            dst.set_refs("langgraph-copy-thread", changes, source=self.session_for(str(source_thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Hide every checkpoint (and its writes) whose metadata run_id is one of run_ids."""
        runs = set(run_ids)
        if not runs:
            return
        with self._lock:
            for tid in self._thread_ids():
                th = self._thread(tid)
                gone = []
                for (ns, cid), cp in th.cps.items():
                    if (ns, cid) in th.deleted:
                        continue
                    md = self.codec.dec(self.tape.read_entry(cp.hash).payload["metadata"])
                    if md.get("run_id") in runs:
                        gone.append([ns, cid])
                self._tombstone(th, sorted(gone))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """keep_latest: hide all but the newest checkpoint of each namespace; delete: delete_thread."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        with self._lock:
            for tid in thread_ids:
                if strategy == "delete":
                    self.delete_thread(tid)
                    continue
                th = self._thread(str(tid))
                gone = [[ns, c] for ns in sorted(th.ids) for c in th.live_ids(ns)[:-1]]
                self._tombstone(th, gone)

    def _tombstone(self, th: _Thread, gone: list) -> None:
        if not gone:
            return
        s = self.tape.session(th.name)
        meta = {HIDDEN: True, KEY: {"type": "tombstone"}}
        with self.tape.batch():
            e = s.put_entry("system", {"content": "", "delete": gone}, meta, None, None, th.tips.get(TOMBSTONES))
            s.set_refs("langgraph-delete", {TOMBSTONES: e.hash})
        th.add(e)
        th.tips = dict(s.refs().branches)

    # -- versions ------------------------------------------------------------------------------

    def get_next_version(self, current: Optional[str], channel: None) -> str:
        if current is None:
            v = 0
        elif isinstance(current, int):
            v = current
        else:
            v = int(current.split(".")[0])
        return f"{v + 1:032}.{random.random():016}"

    # -- async twins ---------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in items:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def _entry_time(ts: Any) -> Optional[str]:
    if isinstance(ts, str):
        try:
            return parse_time(ts)
        except Exception:  # noqa: BLE001 - a checkpoint with an odd ts gets the clock
            return None
    return None


