"""A LangGraph checkpointer that keeps checkpoints on a tape: ``TapeSaver``.

How a thread lives on the tape:

- A thread is one session (``lg-<thread_id>``; see ``naming.session_name``). It grows on
  branch ``main`` (HEAD is attached to it). Subgraph namespaces (``node:<task id>``, a new
  one for every run of a subgraph) join the same line: their entries are hidden, marked
  with the root segment they joined (``joined``), and the root's next checkpoint goes on
  after them. A subgraph run refers to its caller's state (``at``/``base``/``dict_at``
  records, pending writes as ``ref`` + what they add) instead of copying the conversation,
  so a turn costs the same however long the thread. (Tapes written before this have a
  branch ``ns-<hash>`` per namespace; they are still read.)
- A checkpoint is one hidden entry. Its tape parent is the last entry stored for its
  parent checkpoint (the checkpoint itself, or its newest pending-writes entry), so
  the tape path of a checkpoint is its whole history, like a git commit.
- Pending writes are hidden entries chained after their checkpoint. Writes that arrive
  after the checkpoint's child (LangGraph sends them from worker threads, in every
  durability mode) go at the end of the line, marked with the segment they joined, so a
  linear run stays one branch.
- Only what changed is stored: a channel whose version did not move is not written
  again (its value is read through the parent); a list channel that grew is stored as
  the new items only. New chat messages become ordinary ``user`` / ``assistant`` /
  ``tool_call`` / ``tool_result`` entries just before their checkpoint, so
  ``ctape log``, ``status`` and ``context`` show the conversation, and the checkpoint
  refers to them by hash. Storage grows with what happened, not with history length
  times steps.
- The conversation view follows the graph: when a step replaces (same id) or removes
  (``RemoveMessage``) a message, the line from the first changed message on is written
  again after a hidden ``rewrite`` entry, with the changed messages hidden and the
  checkpoint records pointing at the copies (see ``_rewrite``); every checkpoint stays
  on the path, the replaced text stays on the tape. A fork from a checkpoint of the
  copied line writes its messages again, shown (``_hidden_on_path``).
- ``interrupt(value)`` is a hidden ``tool_call`` named ``waiting_for_input`` (the value
  as JSON where it can be), answered by a hidden ``tool_result`` with the resume value:
  ``ctape status`` shows the thread waiting for input.
- A fork (``update_state`` on an old checkpoint, time travel) keeps both lines: the
  newest checkpoint of a namespace is always on its main branch, the line it left keeps
  a branch of its own (``main.was-<hash>``; ``main.cp-<id>`` for writes to a checkpoint
  on no branch's line).
- ``copy_thread`` writes one ref record: the new session's branches point at the same
  entries. ``delete_thread`` and ``prune`` move refs only (the tape is append-only;
  ``ctape compact`` later frees what no branch reaches). ``delete_for_runs`` and
  pruned checkpoints are hidden by tombstone entries on branch ``tombstones``.

The saver keeps an in-memory index per thread (checkpoint id -> entry), built by one
walk from the thread's branches and kept current by its own writes; another process's
writes are picked up from the refs. ``list`` (``get_state_history``) reads newest first
and derives each parent's values from its child's by undoing the child's change, so a
thread's history costs what changed, not the whole state per checkpoint.

``TapeSaver`` is put together here from its parts, one job each: ``_Index`` (index.py),
``_Values`` (values.py), ``_Reading`` (reading.py), ``_Writing`` (writing.py) and
``_Interrupts`` (interrupts.py). This module holds the rest: opening and closing,
deleting, copying and pruning threads, versions, and the async twins.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from typing import Any, Optional, Union

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple, SerializerProtocol

from ...model.models import HIDDEN
from ...tape import Tape
from ..naming import open_tape, session_name
from .codec import _Codec
from .index import KEY, TOMBSTONES, _Brief, _Index, _Thread
from .interrupts import _Interrupts
from .reading import _Reading
from .values import _Values
from .writing import _Writing


class TapeSaver(_Reading, _Writing, _Interrupts, _Values, _Index, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on a ctape tape directory.

    ``TapeSaver(".ctape")`` (created if missing) or ``TapeSaver(tape)``. Every method has
    its async twin; a saver may be shared by threads and by concurrent graph runs.
    """

    def __init__(self, tape: Union[str, os.PathLike, Tape], *, prefix: str = "lg-", serde: Optional[SerializerProtocol] = None, cache_size: int = 256):
        super().__init__(serde=serde)
        self.tape, self._owns = open_tape(tape)
        self.prefix = prefix
        self.codec = _Codec(self.serde)
        self._threads: OrderedDict[str, _Thread] = OrderedDict()  # the THREADS_KEPT used last (index.py)
        self._briefs: dict[str, _Brief] = {}  # entry hash -> what the saver needs of it
        self._values: OrderedDict[tuple[str, str], Any] = OrderedDict()  # (entry, channel) -> value
        self._cache_size = cache_size
        self._parked: dict[tuple[str, str, str], list[dict]] = {}  # writes that came before their checkpoint
        self._taken: dict[str, Any] = {}  # session -> the last resume value a task's list answered (the null task's write may come after)
        self._places: Optional[int] = None  # the tape's redacted places when the above were read

    @property
    def _lock(self):
        """The Tape's own lock (history/turns.py): the saver's state and the Tape's are
        guarded together, so a thread in a `tape.batch()` that runs a graph and one that
        reads a checkpoint never hold one lock each and wait for the other. Asked of the
        Tape each time, not kept: a forked child gets a new one (Store._after_fork), and a
        saver that kept the parent's hung in 18 of 20 children forked while a parent thread
        was inside it (found by an audit)."""
        return self.tape.store._lock

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
        self._save(th)

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
