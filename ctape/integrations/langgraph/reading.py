"""Reading checkpoints: ``_Reading``, the part of ``TapeSaver`` behind ``get_tuple`` and
``list`` (a checkpoint with its channel values and pending writes; history newest first,
each parent's values derived from its child's), and the threads a tape holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, get_checkpoint_id, writes_sort_key

from ..naming import plain_id
from .gcpause import _gc_paused
from .index import KEY, _Thread
from .values import _MISSING, _isolated


class _Reading:
    """Reading, a part of ``TapeSaver`` (saver.py): it uses the saver's tape, codec, lock,
    prefix and ``session_for``, the index (``_thread``), the values (``_value``, ``_cache``,
    ``_prime_parent``) and ``_dec_write``, next to the ``_enc_write`` it undoes (writing.py)."""

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
        return self._read_tuple(th, tid, ns, cid, None)[0]

    def _read_tuple(self, th: _Thread, tid: str, ns: str, cid: str, child: Optional[tuple[dict, dict]]) -> tuple[CheckpointTuple, tuple[dict, dict]]:
        """The tuple, and (its payload, its values) for priming its parent's (see list)."""
        cp = th.cps[(ns, cid)]
        e = self.tape.read_entry(cp.hash)
        p = e.payload
        if child is not None and child[0].get("parent_entry") == cp.hash:
            self._prime_parent(child[0], child[1], cp.hash)
        checkpoint = self.codec.dec(p["checkpoint"])
        values = {}
        raw = {}
        with _gc_paused():
            for ch in checkpoint.get("channel_versions", {}):
                v = self._value(cp.hash, ch)
                if v is not _MISSING:
                    self._cache((cp.hash, ch), v)
                    raw[ch] = v
                    values[ch] = _isolated(v)
        checkpoint["channel_values"] = values
        parent = cp.parent_id
        tup = CheckpointTuple(
            config={"configurable": {"thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint=checkpoint,
            metadata=self.codec.dec(p["metadata"]),
            parent_config={"configurable": {"thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": parent}} if parent else None,
            pending_writes=self._pending_writes(th, ns, cid),
        )
        return tup, (p, raw)

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
        return [(merged[k][0], merged[k][1], self._dec_write(merged[k][2])) for k in order]

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
        # newest first across the threads and namespaces asked for, as SqliteSaver orders
        # them (by checkpoint id), so that `limit` takes the same checkpoints
        todo = []
        for tid in tids:
            with self._lock:
                th = self._thread(tid)
                nss = [want_ns] if want_ns is not None else sorted(th.ids)
                todo += [(c, tid, ns, th) for ns in nss for c in reversed(th.live_ids(ns))]
        if len(tids) > 1 or want_ns is None:
            todo.sort(key=lambda t: t[0], reverse=True)  # stable: one thread's namespaces stay in order on a tie
        child = None
        for cid, tid, ns, th in todo:
            if want_id and cid != want_id:
                continue
            if before_id and cid >= before_id:
                continue
            with self._lock:
                if (ns, cid) in th.deleted or (ns, cid) not in th.cps:
                    continue  # deleted meanwhile
                if filter:
                    md = self.codec.dec(self.tape.read_entry(th.cps[(ns, cid)].hash).payload["metadata"])
                    if not all(md.get(k) == v for k, v in filter.items()):
                        continue
                if limit is not None and limit <= 0:
                    return
                tup, child = self._read_tuple(th, tid, ns, cid, child)
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
