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
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import gc
import json
import math
import operator
import os
import random
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage, message_to_dict, messages_from_dict
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

from ..model.models import HIDDEN, parse_time
from ..model.redaction import is_marker
from ..tape import Tape
from .naming import open_tape, plain_id, session_name

__all__ = ["TapeSaver", "WAITING"]

KEY = "langgraph"  # meta key holding LangGraph's ids on every entry the saver writes
VIEW = "langgraph.entries"  # the index cache's rows: what the saver needs of each entry (ctape/store/index.py, views)
# ... and the same, CHUNK entries a row: the entries at seq k*CHUNK+1 .. (k+1)*CHUNK of a path
# (seq is the depth, so every path through an entry agrees on its chunk), named by the last,
# its parent the first one's parent, its body one JSON object, entries oldest first:
# {"q": the first one's seq, "h": [hashes], "lg": [meta[KEY] each], "p": [brief payload each]}.
# A new process reads a 1,000-step thread in ~110 rows, not 7,000, one JSON parse a row.
CHUNKS = "langgraph.chunks.json"
# Rows of the first chunk format, still read (written by earlier versions, which read no
# CHUNKS rows): a line per entry, oldest first, its hash then the brief's JSON. Reading them
# split and joined every line again, ~1/5 of a new process's first read of a 300-step thread.
OLD_CHUNKS = "langgraph.chunks"
CHUNK = 64
_BIG = 2048  # a channel value stored whole ("v"/"append") longer than this stays on the tape only
TOMBSTONES = "tombstones"
WAITING = "waiting_for_input"  # the name of the (hidden) tool call an interrupt() makes
_INTERRUPT, _RESUME = "__interrupt__", "__resume__"
_NULL_TASK = "00000000-0000-0000-0000-000000000000"  # the task id of Command(resume=...) writes
_MISSING = object()
# the classes langchain's messages_from_dict builds for the usual message types, by its "type"
_MESSAGE_CLASSES = {"human": HumanMessage, "ai": AIMessage, "system": SystemMessage, "tool": ToolMessage}


# -- values <-> JSON ----------------------------------------------------------------------------

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


def _copy_json(v: Any) -> Any:
    if type(v) is dict:
        return {k: _copy_json(x) for k, x in v.items()}
    if type(v) is list:
        return [_copy_json(x) for x in v]
    return v


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


# -- the per-thread index ------------------------------------------------------------------------


class _Brief:
    """What the saver needs of one entry of a thread, without its full payload: LangGraph's
    ids (meta), seq, parent, and for a checkpoint its versions and channel records (small
    values inline), for a message its text. Kept in the index cache outside the tape (rows
    of view VIEW, named by entry hash: they never go stale), so a new process learns a
    thread from one query instead of reading every entry back to the root."""

    __slots__ = ("hash", "parent", "seq", "lg", "payload")

    def __init__(self, h: str, parent: Optional[str], seq: int, lg: Optional[dict], payload: dict):
        self.hash, self.parent, self.seq = h, parent, seq
        self.lg = lg if type(lg) is dict else None  # LangGraph's ids (meta[KEY]); None for other entries
        self.payload = payload

    @property
    def meta(self) -> dict:
        return {KEY: self.lg} if self.lg is not None else {}

    @classmethod
    def of(cls, e) -> "_Brief":
        lg = e.meta.get(KEY) if isinstance(e.meta, dict) else None
        if not isinstance(lg, dict):
            return cls(e.hash, e.parent, e.seq, None, {})
        p = e.payload if isinstance(e.payload, dict) else {}
        typ = lg.get("type")
        brief: dict = {}
        if typ == "checkpoint":
            channels = {}
            for ch, spec in (p.get("channels") or {}).items():
                if ("v" in spec or "append" in spec or "rest" in spec) and len(json.dumps(spec, ensure_ascii=False)) > _BIG:
                    spec = {"big": 1}  # read from the entry when asked
                channels[ch] = spec
            brief = {"versions": p.get("versions") or {}, "channels": channels, "parent_entry": p.get("parent_entry")}
        elif typ == "message" and "message" in lg:
            brief = {k: p[k] for k in ("content", "output") if k in p}
        elif typ == "tombstone":
            brief = {"delete": p.get("delete", [])}
        return cls(e.hash, e.parent, e.seq, lg, brief)

    def body(self) -> str:
        return json.dumps({"q": self.seq, "lg": self.lg, "p": self.payload}, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_row(cls, h: str, parent: Optional[str], body: str) -> "_Brief":
        d = json.loads(body)
        return cls(h, parent, d["q"], d["lg"], d["p"])


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
    ids: dict[str, list[str]] = field(default_factory=dict)  # ns -> checkpoint ids (sorted_ids sorts them)
    unsorted: set[str] = field(default_factory=set)  # namespaces whose ids were added since the last sort
    writes: dict[tuple[str, str], list[tuple[int, str]]] = field(default_factory=dict)  # (seq, entry hash)
    seg: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)  # newest entry of a checkpoint's segment
    stored_at: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (ns, channel, version) -> entry
    deleted: set[tuple[str, str]] = field(default_factory=set)
    interrupts: bool = False  # has the thread ever waited for input
    briefs: dict = field(default_factory=dict)  # the saver's entry hash -> _Brief (shared by its threads)
    unsaved: list = field(default_factory=list)  # briefs not yet in the index cache
    chunk_ends: list = field(default_factory=list)  # entries that end a CHUNKS row not known to be in the cache
    spawned: dict = field(default_factory=dict)  # subgraph namespace -> the caller's checkpoint entry it started from

    def add(self, e, chunked: bool = False) -> None:
        """Index one entry the saver wrote (walking finds them in any order)."""
        h = e.hash
        if h in self.seen:
            return
        self.seen.add(h)
        if type(e) is not _Brief:
            e = _Brief.of(e)
            self.unsaved.append(e)
        self.briefs[h] = e
        seq = e.seq
        if not chunked and seq % CHUNK == 0:
            self.chunk_ends.append(h)
        lg = e.lg
        if lg is None:
            return
        typ = lg.get("type")
        if typ == "message":
            pass  # nothing to index: the checkpoint that follows refers to it
        elif typ == "checkpoint":
            ns = lg.get("checkpoint_ns", "")
            key = (ns, lg.get("checkpoint_id"))
            old = self.cps.get(key)
            if old is None or seq > old.seq:
                self.cps[key] = _Cp(h, seq, lg.get("parent_checkpoint_id"))
                if old is None:
                    ids = self.ids.setdefault(ns, [])
                    if ids and key[1] < ids[-1]:
                        self.unsorted.add(ns)  # a walk adds them newest first: sorted once, when asked
                    ids.append(key[1])
            self._bump(key, seq, h)
            p = e.payload
            versions = p.get("versions") or {}
            for ch, spec in (p.get("channels") or {}).items():
                if "at" not in spec and "absent" not in spec and ch in versions:
                    self.stored_at[(ns, ch, str(versions[ch]))] = h
        elif typ == "writes":
            ns, cid = lg.get("checkpoint_ns", ""), lg.get("checkpoint_id")
            lst = self.writes.setdefault((ns, cid), [])
            lst.append((seq, h))
            if len(lst) > 1:
                lst.sort()
            self._bump((ns, lg.get("segment", cid)), seq, h)
        elif typ in ("interrupt", "resume"):
            self.interrupts = True
            self._bump((lg.get("checkpoint_ns", ""), lg.get("segment", lg.get("checkpoint_id"))), seq, h)
        elif typ == "tombstone":
            for ns_, cid_ in e.payload.get("delete", []):
                self.deleted.add((ns_, cid_))
        if "joined" in lg:  # a subgraph's entry on the root line: the root segment goes on after it
            self._bump(("", lg["joined"]), seq, h)

    def _bump(self, key: tuple[str, str], seq: int, h: str) -> None:
        cur = self.seg.get(key)
        if cur is None or seq > cur[0]:
            self.seg[key] = (seq, h)

    def sorted_ids(self, ns: str) -> list[str]:
        """The namespace's checkpoint ids, oldest first (ids are added in any order, sorted when asked)."""
        ids = self.ids.get(ns, [])
        if ns in self.unsorted:
            ids.sort()
            self.unsorted.discard(ns)
        return ids

    def live_ids(self, ns: str) -> list[str]:
        return [c for c in self.sorted_ids(ns) if (ns, c) not in self.deleted]

    def latest(self, ns: str) -> Optional[str]:
        for c in reversed(self.sorted_ids(ns)):
            if (ns, c) not in self.deleted:
                return c
        return None


def _main_branch(ns: str) -> str:
    """The branch a namespace grows on: every namespace joins the root line, ``main``
    (tapes written before subgraphs joined it have ``ns-<hash>`` branches: still read)."""
    return "main"


def _parent_ns(ns: str) -> str:
    """The namespace a subgraph runs in: ``a:1|b:2`` -> ``a:1``; ``a:1`` -> the root."""
    return ns.rsplit("|", 1)[0] if "|" in ns else ""


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
        # the Tape's own lock (history/turns.py): the saver's state and the Tape's are guarded
        # together, so a thread in a `tape.batch()` that runs a graph and one that reads a
        # checkpoint never hold one lock each and wait for the other
        self._lock = self.tape.store._lock
        self._threads: dict[str, _Thread] = {}
        self._briefs: dict[str, _Brief] = {}  # entry hash -> what the saver needs of it
        self._values: OrderedDict[tuple[str, str], Any] = OrderedDict()  # (entry, channel) -> value
        self._cache_size = cache_size
        self._parked: dict[tuple[str, str, str], list[dict]] = {}  # writes that came before their checkpoint
        self._places: Optional[int] = None  # the tape's redacted places when the above were read

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
        places = self.tape.redacted_places()
        if places != self._places:
            # a redaction arrived: what was read before may hold its text. Read again, the
            # next invoke resumes from the redacted values and extends them (nothing of the
            # secret is written back); the index cache dropped its rows with it
            self._threads.clear()
            self._briefs.clear()
            self._values.clear()
            self._places = places
        name = self.session_for(thread_id)
        s = self.tape.session(name)
        branches = dict(s.refs().branches)  # none for a session not there or removed (`session rm` sets every ref to null)
        th = self._threads.get(name)
        if th is not None and th.tips == branches:
            return th
        if th is None or any(b not in branches for b in th.tips):
            th = _Thread(name, briefs=self._briefs)  # first look, or someone deleted a branch: walk it all
        with _gc_paused():
            self._walk(th, [h for b, h in sorted(branches.items()) if th.tips.get(b) != h])
        th.tips = branches
        self._threads[name] = th
        self._save(th)
        return th

    def _walk(self, th: _Thread, tips: list[str]) -> None:
        """Index what is new on the thread's branches, back to what is known. Entries come
        from the index cache's rows (a new process reads a 1,000-step thread with a few
        queries, not 6,000 entry reads); an entry without a row is read from the tape, and
        its row written. The queries ask for 16, 64, 256, ... rows, so a few new entries
        on a long thread cost a few rows, not the thread."""
        index = self.tape.store.index
        for h in tips:
            while h is not None and h not in th.seen:
                chunks = index.view_path(CHUNKS, h, 1 << 20)
                if chunks:  # h ends a chunk: whole chunks back to the root or to a gap
                    h = self._add_chunks(th, chunks)
                    continue
                chunks = index.view_path(OLD_CHUNKS, h, 1 << 20)
                if chunks:
                    h = self._add_old_chunks(th, chunks)
                    continue
                # single rows, as far as the start of h's chunk (its parent ends the chunk before)
                rows = index.view_path(VIEW, h, CHUNK)
                if rows:
                    h = self._add_rows(th, rows, CHUNK)
                    continue
                if not self.tape.has_entry(h):
                    break  # not synced yet: the next rsync brings it
                e = self.tape.read_entry(h)
                th.add(self._briefs.get(h) or e)
                h = e.parent

    def _add_chunks(self, th: _Thread, chunks: list) -> Optional[str]:
        """CHUNKS rows (newest first) until a known entry; returns where to go on from. A
        row's body is parsed in one call, straight from the row (a 1,000-step thread is
        7,000 entries, and a new process's first get_state reads them all)."""
        seen, briefs, add, seen_add = th.seen, self._briefs, th.add, th.seen.add
        for _, parent, body in chunks:
            d = _loads(body)
            hs, lgs, ps, q = d["h"], d["lg"], d["p"], d["q"]
            for i in range(len(hs) - 1, -1, -1):
                h2 = hs[i]
                if h2 in seen:
                    return h2
                b = briefs.get(h2)
                if b is None:
                    lg = lgs[i]
                    b = _Brief(h2, hs[i - 1] if i else parent, q + i, lg, ps[i])
                    if type(lg) is dict and lg.get("type") == "message" and "joined" not in lg:
                        seen_add(h2)  # all that add() does for a root message (most entries of a chat)
                        briefs[h2] = b
                        continue
                add(b, True)
        return chunks[-1][1]  # where the rows end

    def _add_old_chunks(self, th: _Thread, chunks: list) -> Optional[str]:
        """OLD_CHUNKS rows (newest first) until a known entry; returns where to go on from. Each
        row's body is a line per entry, oldest first: its hash, then its brief's JSON; the
        bodies are split into lists (no tuple per entry) and parsed in one call: a
        1,000-step thread is 7,000 entries, and a new process's first get_state reads them all."""
        hashes: list[str] = []
        parents: list[Optional[str]] = []
        texts: list[str] = []
        for _, parent, body in chunks:
            lines = body.split("\n")
            hs = [line[:64] for line in lines]
            hashes += reversed(hs)
            parents += reversed([parent] + hs[:-1])
            texts += reversed([line[64:] for line in lines])
        seen = th.seen
        n = len(hashes) if seen.isdisjoint(hashes) else next(i for i, x in enumerate(hashes) if x in seen)
        bodies = json.loads("[" + ",".join(texts[:n]) + "]")  # one parse, not one a row
        briefs, add, seen_add = self._briefs, th.add, seen.add
        for h2, parent, d in zip(hashes, parents, bodies):
            b = briefs.get(h2)
            if b is None:
                lg = d["lg"]
                b = _Brief(h2, parent, d["q"], lg, d["p"])
                if type(lg) is dict and lg.get("type") == "message" and "joined" not in lg and h2 not in seen:
                    seen_add(h2)  # all that add() does for a root message (most entries of a chat)
                    briefs[h2] = b
                    continue
            add(b, True)
        return hashes[n] if n < len(hashes) else parents[-1]  # a known entry, or where the rows end

    def _add_rows(self, th: _Thread, rows: list, chunk: Optional[int]) -> Optional[str]:
        """Index cache rows (hash, parent, brief JSON), newest first, until a known entry (or,
        with chunk, until the first entry of a chunk); returns where to go on from."""
        n = next((i for i, r in enumerate(rows) if r[0] in th.seen), len(rows))
        bodies = json.loads("[" + ",".join(r[2] for r in rows[:n]) + "]")  # one parse, not one a row
        for (h2, parent, _), d in zip(rows, bodies):
            th.add(self._briefs.get(h2) or _Brief(h2, parent, d["q"], d["lg"], d["p"]), chunked=chunk is None)
            if chunk is not None and d["q"] % chunk == 1:
                return parent  # it ends the chunk before: read whole chunks from there
        return rows[n][0] if n < len(rows) else rows[-1][1]  # a known entry, or where the rows end

    def _save(self, th: _Thread) -> None:
        """Keep the briefs of entries this process wrote or read in the index cache, one
        row each, and CHUNK a row for every chunk it has whole."""
        index = self.tape.store.index
        if th.unsaved:
            rows = [(b.hash, b.parent, b.body()) for b in th.unsaved]
            th.unsaved.clear()
            index.put_views(VIEW, rows)
        if th.chunk_ends:
            chunks = []
            for end in th.chunk_ends:
                line: list[_Brief] = []
                h: Optional[str] = end
                while h is not None and len(line) < CHUNK and h in self._briefs:
                    line.append(self._briefs[h])
                    h = line[-1].parent
                if len(line) == CHUNK and line[-1].seq % CHUNK == 1:
                    line.reverse()
                    body = {"q": line[0].seq, "h": [b.hash for b in line], "lg": [b.lg for b in line], "p": [b.payload for b in line]}
                    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
                    if not _LONG_INT.search(text):  # else its entries are read from their own rows
                        chunks.append((end, line[0].parent, text))
            th.chunk_ends.clear()
            index.put_views(CHUNKS, chunks)

    def _brief(self, h: str) -> _Brief:
        b = self._briefs.get(h)
        if b is None:
            b = self._briefs[h] = _Brief.of(self.tape.read_entry(h))
        return b

    # -- values ------------------------------------------------------------------------------

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
            with self._forgotten_on_error(th):
                self._put(th, tid, ns, checkpoint, md, new_versions, parent_id)
        return {"configurable": {"thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def _put(self, th: _Thread, tid: str, ns: str, checkpoint: Checkpoint, md: dict, new_versions: ChannelVersions, parent_id: Optional[str]) -> None:
        cid = checkpoint["id"]
        parent = th.cps.get((ns, parent_id)) if parent_id else None
        parent_entry = parent.hash if parent else None
        parent_versions = self._brief(parent_entry).payload["versions"] if parent_entry else {}
        values = checkpoint.get("channel_values", {})
        versions = {k: v for k, v in checkpoint.get("channel_versions", {}).items()}
        specs: dict[str, dict] = {}
        new_messages: dict[str, list[Any]] = {}
        rewritten: dict[str, list[Any]] = {}  # channels whose messages were replaced or removed
        bases: dict[str, str] = {}  # channels that grow from the caller's checkpoint (a subgraph's first)
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
            if ns and parent_entry is None and v and type(v) is dict:
                # a subgraph run's input (__start__) holds its caller's state: refer to it
                spec = self._refer(th, ns, v)
                if spec is not None:
                    specs[ch] = spec
                    continue
            if type(v) is list:
                prev = self._value(parent_entry, ch) if parent_entry else _MISSING
                if prev is _MISSING and ns:
                    # a subgraph's channel starts as its caller's: grow from the caller's value
                    src = self._spawned_from(th, ns)
                    sv = self._value(src, ch) if src is not None else _MISSING
                    if type(sv) is list and sv and _extends(v, sv):
                        prev = sv
                        bases[ch] = src
                base = [] if prev is _MISSING else prev
                if type(base) is list and _extends(v, base):
                    items = v[len(base):]
                    if not items and ch in bases:
                        specs[ch] = {"at": bases[ch]}
                        continue
                    if items and all(_is_message(x) for x in items):
                        new_messages[ch] = items
                        continue
                    if prev is not _MISSING:
                        specs[ch] = {"append": [self.codec.enc(x) for x in items]}
                        if ch in bases:
                            specs[ch]["base"] = bases[ch]
                        continue
                elif type(base) is list and base and all(_is_message(x) for x in base) and all(_is_message(x) for x in v):
                    # the graph replaced (same id) or removed messages: rewrite the view
                    hashes = self._msg_hashes(parent_entry, ch)
                    if hashes is not None and len(hashes) == len(base):
                        rewritten[ch] = hashes
                        continue
            specs[ch] = {"v": self.codec.enc(v)}
        # a fork from a checkpoint that a rewrite copied: its messages are hidden copies on its
        # path, so they are written again where the fork starts (`_hidden_on_path`)
        restore = self._hidden_on_path(th, ns, parent_id, parent_entry, values, [ch for ch in values if ch in new_messages or (ch not in new_versions and ch not in specs)])
        cp_body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        time = _entry_time(checkpoint.get("ts"))
        s = self.tape.session(th.name)
        base_ids = {"thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": cid}
        written: list = []
        msg_hashes: dict[str, list[str]] = {}  # per message channel, its entries at this checkpoint
        with self.tape.batch():
            tip = th.seg[(ns, parent_id)][1] if parent_id and (ns, parent_id) in th.seg else None
            if ns:  # a subgraph's checkpoints join the root line where it ends
                tip, joined = self._join_root(s, tip)
                if joined is not None:
                    base_ids = {**base_ids, "joined": joined}
            start = tip
            if not ns and md.get("source") == "input" and th.interrupts and tip is not None:
                # new input instead of Command(resume=...): the interrupt will not be answered
                tip = self._answer_interrupts(s, th, ns, cid, tip, None, written, "[no answer: the graph was given new input]")
            copies: dict[str, str] = {}  # entry -> its copy, when a rewrite wrote the line again
            if rewritten:
                tip, hashes_after, copies = self._rewrite(s, th, ns, cid, tip, rewritten, values, time, written)
                for ch, (kept, dropped) in hashes_after.items():
                    tip, hashes = self._write_messages(s, ch, values[ch][kept:], base_ids, time, tip, written)
                    specs[ch] = {"keep": kept, "msgs": hashes, "drop": dropped}
                    msg_hashes[ch] = rewritten[ch][:kept] + hashes
            for ch, (k, shown) in restore.items():
                tip, hashes = self._write_messages(s, ch, values[ch][k:], base_ids, time, tip, written)
                specs[ch] = {"keep": k, "msgs": hashes, "drop": shown[k:]}
                msg_hashes[ch] = shown[:k] + hashes
                new_messages.pop(ch, None)
            for ch, items in new_messages.items():
                tip, hashes = self._write_messages(s, ch, items, base_ids, time, tip, written)
                specs[ch] = {"msgs": hashes}
                if ch in bases:
                    specs[ch]["base"] = bases[ch]
                    before = self._values.get((bases[ch], ch + "\0#"), _MISSING)
                else:
                    before = self._values.get((parent_entry, ch + "\0#"), _MISSING) if parent_entry else []
                if before is not _MISSING:
                    msg_hashes[ch] = list(before) + hashes
            where = f" in {ns}" if ns else ""
            payload = {
                "content": f"checkpoint {cid}{where} ({md.get('source', '?')}, step {md.get('step', '?')})",
                "checkpoint": self.codec.enc(cp_body),
                "metadata": self.codec.enc(md),
                "versions": {k: str(v) for k, v in versions.items()},
                "channels": specs,
                "parent_entry": parent_entry,
            }
            meta = {HIDDEN: True, KEY: {"type": "checkpoint", "parent_checkpoint_id": parent_id, **base_ids}}
            if copies:
                # the parent checkpoint (and any entry a record points at) was copied: point
                # at the copies, which main reaches, not at the line compact will drop
                payload = _remap(payload, copies)
            e = s.put_entry("system", payload, meta, None, time, tip)
            written.append(e)
            for ch, hashes in msg_hashes.items():
                self._cache((e.hash, ch + "\0#"), hashes)
            latest = th.latest(ns)
            self._move_refs(th, s, ns, start, e.hash, newest=latest is None or cid >= latest, label=cid)
            for w in written:
                th.add(w)
            for w in self._parked.pop((th.name, ns, cid), []):
                self._write_entry(th, s, tid, ns, cid, self._writes_payload(th, ns, cid, w["task_id"], w["task_path"], w["writes"]))
        for ch, v in keep.items():
            self._cache((e.hash, ch), _isolated(v))
        th.tips = dict(s.refs().branches)
        self._save(th)

    def _hidden_on_path(self, th: _Thread, ns: str, parent_id: Optional[str], parent_entry: Optional[str], values: dict, channels: list) -> dict[str, tuple[int, list[str]]]:
        """Message channels whose messages at the parent checkpoint are hidden on the tape
        path to it, when a new checkpoint forks from an older one (time travel): a rewrite
        (`_rewrite`) copies the line before its checkpoint with the replaced messages
        hidden, and every checkpoint of that line now points at a copy, so a fork from one
        of them would show (`log`, `context`) only what it adds. Per channel: (the index of
        the first such message, the parent's message entries). On the line itself (the
        parent is the newest checkpoint) the messages are shown: nothing is read."""
        if ns or parent_entry is None or parent_id == th.latest(ns):
            return {}
        out = {}
        for ch in channels:
            v = values.get(ch)
            if type(v) is not list or not v or not all(_is_message(x) for x in v):
                continue
            hashes = self._msg_hashes(parent_entry, ch)
            if not hashes or len(hashes) > len(v):
                continue
            for i, h in enumerate(hashes):
                if self.tape.read_entry(h).meta.get(HIDDEN) and _shown(v[i]):
                    out[ch] = (i, hashes)
                    break
        return out

    def _write_messages(self, s, ch: str, items: list, base_ids: dict, time: Optional[str], tip: Optional[str], written: list) -> tuple[Optional[str], list[str]]:
        """New chat messages as conversation entries; the hash of each message's first entry."""
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
                if base_ids["checkpoint_ns"]:
                    meta[HIDDEN] = True  # a subgraph's own copy: the root's state is the conversation
                e = s.put_entry(kind, payload, meta, None, time, tip)
                written.append(e)
                tip = e.hash
                if i == 0:
                    hashes.append(e.hash)
        return tip, hashes

    def _rewrite(self, s, th: _Thread, ns: str, cid: str, tip: str, rewritten: dict, values: dict, time: Optional[str], written: list):
        """Make the path to the new checkpoint show the messages as the graph now has them.

        The path keeps every earlier checkpoint (so the whole history stays one line), but a
        message the graph replaced or removed must not be visible on it any more. So the line
        from the first changed message on is written again after a hidden `rewrite` entry:
        the same entries, with the changed channels' messages marked hidden, and checkpoint
        records pointing at the copies. The new messages follow. Only what came after the
        first change is copied (a trim of old messages copies the recent turns, not the
        history), and the original line stays on the tape until `compact` (the ref log and
        the copies' hidden messages keep what it held).
        Returns the new tip, per channel (messages kept from the start, the hidden copies
        of the entries that held the rest), and the copies (entry -> copy)."""
        starts = {}
        for ch, hashes in rewritten.items():
            new, old = values[ch], [self._load_message(h) for h in hashes]
            c = 0
            while c < len(old) and c < len(new) and (old[c] is new[c] or old[c] == new[c]):
                c += 1
            starts[ch] = c
        firsts = [self.tape.read_entry(rewritten[ch][c]) for ch, c in starts.items() if c < len(rewritten[ch])]
        if not firsts:  # only appends after all (e.g. a shorter list that equals a prefix): nothing to hide
            first = None
        else:
            first = min(firsts, key=lambda e: e.seq)
        line = []
        h = tip if first is not None else None
        while h is not None:
            e = self.tape.read_entry(h)
            line.append(e)
            if h == first.hash:
                break
            h = e.parent
        if h is None:
            line = []  # not on this path (cannot happen for a parent's own messages): hide nothing
        line.reverse()
        fork = line[0].parent if line else tip
        removed = sum(len(rewritten[ch]) - starts[ch] for ch in rewritten)
        note = f"rewrite for checkpoint {cid}: {removed} message(s) replaced or removed"
        marker = s.put_entry("system", {"content": note, "was": tip}, {HIDDEN: True, KEY: {"type": "rewrite", "checkpoint_ns": ns, "checkpoint_id": cid}}, None, time, fork)
        written.append(marker)
        mapping: dict[str, str] = {}
        cur = marker.hash
        for e in line:
            meta = dict(e.meta)
            lg = meta.get(KEY) if isinstance(meta.get(KEY), dict) else {}
            payload = e.payload
            if lg.get("type") == "message" and lg.get("channel") in rewritten and lg.get("checkpoint_ns", "") == ns:
                meta[HIDDEN] = True
            elif lg.get("type") == "checkpoint":
                payload = _remap(payload, mapping)
            elif lg.get("type") == "writes":
                payload = _remap_writes(payload, mapping)
            n = s.put_entry(e.kind, payload, meta, e.delta, e.time, cur)
            mapping[e.hash] = n.hash
            written.append(n)
            cur = n.hash
        for key, lst in th.writes.items():
            if any(h in mapping for _, h in lst):
                th.writes[key] = [(q, h) for q, h in lst if h not in mapping]
        out = {}
        for ch, hashes in rewritten.items():
            kept = starts[ch] if first is None else sum(1 for h in hashes if h not in mapping)
            kept = min(kept, starts[ch])
            out[ch] = (kept, [mapping.get(h, h) for h in hashes[kept:]])
        return cur, out, mapping

    def _move_refs(self, th: _Thread, s, ns: str, parent: Optional[str], tip: str, *, newest: bool, label: str) -> None:
        """One ref record: the branch at `parent` moves to `tip`; the newest checkpoint is on main."""
        branches = s.refs().branches
        main = _main_branch(ns)
        if ns:  # a subgraph's entries went on at main's tip (_join_root)
            changes = {main: tip}
            if s.refs().head is None:
                changes["HEAD"] = "@main"
            s.set_refs("langgraph", changes)
            return
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
            raw = []
            for i, (ch, v) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(ch, i)
                if idx >= 0 and (task_id, idx) in have:
                    continue  # first write of a task wins, as in LangGraph's own savers
                raw.append((idx, ch, v))
            if not raw:
                return
            if (ns, cid) not in th.cps:
                # LangGraph's async durability can send a checkpoint's writes before the
                # checkpoint itself: keep them until it arrives, then store them after it
                # (encoded then, so a value can refer to the checkpoint's: _enc_write)
                self._parked.setdefault((th.name, ns, cid), []).append({"task_id": task_id, "task_path": task_path, "writes": raw})
                return
            s = self.tape.session(th.name)
            with self._forgotten_on_error(th), self.tape.batch():
                self._write_entry(th, s, tid, ns, cid, self._writes_payload(th, ns, cid, task_id, task_path, raw))
            th.tips = dict(s.refs().branches)
            self._save(th)

    @contextlib.contextmanager
    def _forgotten_on_error(self, th: _Thread):
        """A write that fails (a value the tape refuses, a full disk) leaves nothing on the
        tape, but it may have noted entries of its batch in the thread's memory: the next
        call reads the thread again (it pointed at entries never written, and every later
        call on the thread failed with "not in this tape")."""
        parked = {k: list(v) for k, v in self._parked.items() if k[0] == th.name}  # a put takes its writes out
        try:
            yield
        except BaseException:
            # every thread reads again (the briefs are shared: a thread kept with some of
            # them gone would save its index rows short), and writes put_writes accepted
            # before their checkpoint wait for it again
            self._threads.clear()
            self._briefs.clear()
            self._values.clear()
            self._parked.update(parked)
            raise

    def _writes_payload(self, th: _Thread, ns: str, cid: str, task_id: str, task_path: str, raw: list) -> dict:
        recs = [[idx, ch, self._enc_write(th, ns, cid, ch, v)] for idx, ch, v in raw]
        channels = sorted({r[1] for r in recs})
        return {"content": f"writes for checkpoint {cid}: {', '.join(channels)}", "task_id": task_id, "task_path": task_path, "writes": recs}

    def _enc_write(self, th: _Thread, ns: str, cid: str, ch: str, v: Any) -> dict:
        """A pending write's value. A list that starts with channel ch's value at the
        checkpoint (a subgraph hands back its whole state; a subgraph's input is its
        caller's) refers to that value: {"ref": entry, "ch": ch, "plus": [the rest]}, so a
        write costs what it adds, not the conversation again."""
        if type(v) is list and v and (ns, cid) in th.cps:
            bases = [th.cps[(ns, cid)].hash]
            if ns:
                bases.append(self._spawned_from(th, ns))
            for src in bases:
                sv = self._value(src, ch) if src is not None else _MISSING
                if type(sv) is list and sv and _extends(v, sv):
                    return {"ref": src, "ch": ch, "plus": [self.codec.enc(x) for x in v[len(sv):]]}
        return self.codec.enc(v)

    def _dec_write(self, enc: dict) -> Any:
        if "ref" in enc:
            return _isolated(self._value(enc["ref"], enc["ch"])) + [self.codec.dec(x) for x in enc["plus"]]
        return self.codec.dec(enc)

    def _write_entry(self, th: _Thread, s, tid: str, ns: str, cid: str, payload: dict):
        """Store a checkpoint's pending writes where its line ends.

        LangGraph sends writes from worker threads, so a checkpoint's writes may arrive
        after its child checkpoint (with every durability mode). They then go at the end of
        the line, after the child, marked with the segment they joined: a linear run stays
        one branch, and the writes are still found by checkpoint id. A subgraph's writes
        go at the end of the root line (_join_root)."""
        seg = th.seg.get((ns, cid), (0, None))[1]
        branches = s.refs().branches
        ids = {"thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": cid}
        tip, segment = seg, cid
        extra: dict = {}
        main_tip = branches.get(_main_branch(ns))
        if ns:
            tip, joined = self._join_root(s, seg)
            if joined is not None:
                extra["joined"] = joined
        elif seg not in branches.values() and main_tip is not None and self._descends(main_tip, th.cps[(ns, cid)]):
            tip = main_tip
            segment = self._root_segment(main_tip) or cid
        lg = {"type": "writes", **ids, **extra}
        if segment != cid:
            lg["segment"] = segment
        e = s.put_entry("system", payload, {HIDDEN: True, KEY: lg}, None, None, tip)
        th.add(e)
        last = self._interrupt_entries(s, th, ns, cid, segment, payload, e.hash, extra)
        self._move_refs(th, s, ns, tip, last, newest=False, label=cid)
        return e

    def _descends(self, h: str, cp: _Cp) -> bool:
        """Is checkpoint cp on the path to entry h?"""
        while h is not None:
            if h == cp.hash:
                return True
            e = self._brief(h)
            if e.seq <= cp.seq:
                return False
            h = e.parent
        return False

    def _root_segment(self, h: Optional[str]) -> Optional[str]:
        """The root checkpoint whose segment of the line entry h ends (None: no root checkpoint)."""
        lg = self._brief(h).meta.get(KEY) if h is not None else None
        if not isinstance(lg, dict):
            return None
        if lg.get("checkpoint_ns"):
            return lg.get("joined")
        return lg.get("segment") or lg.get("checkpoint_id")

    def _join_root(self, s, tip: Optional[str]) -> tuple[Optional[str], Optional[str]]:
        """Where a subgraph's next entry goes: at the end of the root line (main), and the
        root segment it joins. Subgraph runs get a new namespace each time (``node:<task
        id>``); a branch per namespace would leave a branch per run, so every namespace
        grows on main, its entries hidden, the root's next checkpoint after them."""
        main_tip = s.refs().branches.get("main")
        if main_tip is None:
            return tip, None  # a thread with subgraph checkpoints only (so far)
        return main_tip, self._root_segment(main_tip)

    def _refer(self, th: _Thread, ns: str, v: dict) -> Optional[dict]:
        """A channel record for a subgraph run's input that refers to the caller's
        checkpoint: {"dict_at": {key: [entry, [items after]]}, "rest": ..., "keys": [...]}
        for the keys whose list starts with the caller's channel of that name (the caller's
        checkpoint may not hold the newest input yet: LangGraph's writes are asynchronous).
        None when none does."""
        src = self._spawned_from(th, ns)
        if src is None:
            return None
        refs = {}
        for k, x in v.items():
            if type(k) is str and type(x) is list and x:
                sv = self._value(src, k)
                if type(sv) is list and sv and _extends(x, sv):
                    refs[k] = [src, [self.codec.enc(y) for y in x[len(sv):]]]
        if not refs:
            return None
        return {"dict_at": refs, "rest": self.codec.enc({k: x for k, x in v.items() if k not in refs}), "keys": list(v)}

    def _spawned_from(self, th: _Thread, ns: str) -> Optional[str]:
        """The entry of the checkpoint a subgraph run started from: the newest of the
        namespace it runs in when the run was first seen (the caller moves on while the
        run's last writes arrive)."""
        if ns not in th.spawned:
            pns = _parent_ns(ns)
            cid = th.latest(pns)
            th.spawned[ns] = th.cps[(pns, cid)].hash if cid is not None else None
        return th.spawned[ns]

    # -- interrupts ----------------------------------------------------------------------------

    def _interrupt_entries(self, s, th: _Thread, ns: str, cid: str, segment: str, payload: dict, tip: str, extra: Optional[dict] = None) -> str:
        """An interrupt() is a hidden tool call named WAITING, its value as JSON where it can
        be: `ctape status` lists it as pending until Command(resume=...) answers it."""
        written: list = []
        for _, ch, enc in payload["writes"]:
            if ch == _INTERRUPT:
                # an interrupt inside a subgraph is written by the subgraph and by each
                # caller, with one id: one call waits
                waiting = {c["call_id"] for c in self.tape.derived(tip)["pending"] if c.get("name") == WAITING}
                for intr in self.codec.dec(enc) or ():
                    value = getattr(intr, "value", intr)
                    call = {"call_id": str(getattr(intr, "id", "") or cid), "name": WAITING, "arguments": _readable(value)}
                    if call["call_id"] in waiting:
                        continue
                    waiting.add(call["call_id"])
                    meta = {HIDDEN: True, KEY: {"type": "interrupt", "checkpoint_ns": ns, "checkpoint_id": cid, "segment": segment,
                                                "task_id": payload["task_id"], **(extra or {})}}
                    e = s.put_entry("tool_call", call, meta, None, None, tip)
                    written.append(e)
                    tip = e.hash
            elif ch == _RESUME and payload["task_id"] == _NULL_TASK:
                tip = self._answer_interrupts(s, th, ns, cid, tip, self.codec.dec(enc), written, None, segment, extra)
            elif ch == _RESUME:
                tip = self._answer_task_resume(s, ns, cid, tip, payload["task_id"], self.codec.dec(enc), written, segment, extra)
        for e in written:
            th.add(e)
        return tip

    def _answer_task_resume(self, s, ns: str, cid: str, tip: str, task_id: str, values: Any, written: list, segment: str,
                            extra: Optional[dict]) -> str:
        """A task's own `__resume__` write: the resume values its interrupt() calls took, in
        order, written when one takes a value. `Command(resume={interrupt_id: value})`
        answers only this way (no write of the null task), so the interrupt the task waits
        on (a task stops at its first unanswered one) is answered by the list's last value.
        One answered already (by a plain Command(resume=...), whose write comes first) is
        not pending any more: nothing is written twice."""
        if type(values) is not list or not values:
            return tip
        for c in self.tape.derived(tip)["pending"]:
            if c.get("name") != WAITING:
                continue
            m = self.tape.read_entry(c["hash"]).meta
            if isinstance(m, dict) and isinstance(m.get(KEY), dict) and m[KEY].get("task_id") == task_id:
                p = {"call_id": c["call_id"], "output": _readable(values[-1])}
                meta = {HIDDEN: True, KEY: {"type": "resume", "checkpoint_ns": ns, "checkpoint_id": cid, "segment": segment or cid, **(extra or {})}}
                e = s.put_entry("tool_result", p, meta, None, None, tip)
                written.append(e)
                return e.hash
        return tip

    def _answer_interrupts(self, s, th: _Thread, ns: str, cid: str, tip: str, value: Any, written: list, note: Optional[str], segment: Optional[str] = None, extra: Optional[dict] = None) -> str:
        """Hidden tool results for the interrupts pending at tip: the resume value, or a note."""
        pending = [c for c in self.tape.derived(tip)["pending"] if c.get("name") == WAITING]
        if not pending:
            return tip
        by_id = isinstance(value, dict) and value and all(k in {c["call_id"] for c in pending} for k in value)
        for c in pending:
            if by_id and c["call_id"] not in value:
                continue
            answer = value[c["call_id"]] if by_id else value
            p = {"call_id": c["call_id"], "output": _readable(answer) if note is None else note}
            meta = {HIDDEN: True, KEY: {"type": "resume", "checkpoint_ns": ns, "checkpoint_id": cid, "segment": segment or cid, **(extra or {})}}
            e = s.put_entry("tool_result", p, meta, None, None, tip)
            written.append(e)
            tip = e.hash
        return tip

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


def _extends(v: list, base: list) -> bool:
    """Does list v start with the items of base: the same objects (one C pass: a
    2,000-message history costs microseconds), or equal ones of the same types all the
    way down? Plain equality is not enough: 1 == True == 1.0, so [True, 7] stored as
    "[1] + [7]" would come back as [1, 7] from the tape."""
    n = len(base)
    if len(v) < n:
        return False
    head = v[:n]
    if all(map(operator.is_, head, base)):
        return True
    return head == base and all(map(_same, head, base))


def _same(a: Any, b: Any) -> bool:
    """a == b, with the same types inside (and the same sign of a zero): what the tape
    gives back for one is what it gives back for the other."""
    if a is b:
        return True
    t = type(a)
    if t is not type(b):
        return False
    if t is list or t is tuple:
        return len(a) == len(b) and all(map(_same, a, b))
    if t is dict:
        return (len(a) == len(b) and all(k in b and _same(x, b[k]) for k, x in a.items())
                and {(type(k), k) for k in a} == {(type(k), k) for k in b})
    if t is float:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if t is set or t is frozenset:
        return len(a) == len(b) and {(type(x), x) for x in a} == {(type(x), x) for x in b}
    if t is str or t is int or t is bool or t is bytes or a is None or _is_message(a):
        return a == b
    return False  # any other object equal but not the same one (a model, a dataclass): stored whole


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


def _readable(v: Any) -> Any:
    """A value as JSON for people: itself when it is JSON, a pydantic model's or a
    dataclass's JSON form, else its repr."""
    if _is_json(v):
        return v
    try:
        if hasattr(v, "model_dump"):
            d = v.model_dump(mode="json")
        else:
            import dataclasses

            d = dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else None
        if d is not None and _is_json(d):
            return d
    except Exception:  # noqa: BLE001 - anything odd is shown as its repr
        pass
    return repr(v)


def _remap(payload: dict, mapping: dict[str, str]) -> dict:
    """A checkpoint record whose entry references point at the copies made by a rewrite."""
    p = dict(payload)
    if p.get("parent_entry") in mapping:
        p["parent_entry"] = mapping[p["parent_entry"]]
    channels = {}
    for ch, spec in p["channels"].items():
        spec = dict(spec)
        for k in ("at", "base"):
            if k in spec:
                spec[k] = mapping.get(spec[k], spec[k])
        if "dict_at" in spec:
            spec["dict_at"] = {k: ([mapping.get(r[0], r[0]), r[1]] if type(r) is list else mapping.get(r, r)) for k, r in spec["dict_at"].items()}
        for k in ("msgs", "drop"):
            if k in spec:
                spec[k] = [mapping.get(h, h) for h in spec[k]]
        channels[ch] = spec
    p["channels"] = channels
    return p


_MANY_YOUNG = 10_000  # young objects at the end of _gc_paused from which they go to the oldest generation
_PROMOTE_BUDGET = 250_000  # ... and at most this many between two full collections (see _gc_paused)
_promoted = [0, -1]  # objects moved so since the full collection numbered [1]


@contextlib.contextmanager
def _gc_paused():
    """No cyclic garbage collection while a thread's index or a conversation is built: both
    make tens of thousands of objects that all stay, and the collector, started again and
    again by the allocations, walked them all each time (more than half of a new process's
    first get_state on a 1,000-step thread). Nothing they make is garbage; the collector's
    state is restored after, whatever it was, and when they are many they skip the young
    generations (below)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        young = gc.get_count()[0]
        if young >= _MANY_YOUNG and gc.get_freeze_count() == 0:
            # tens of thousands of new objects that stay (a thread's index, read once in a
            # process): move them to the oldest generation at once (freeze, then unfreeze:
            # two list splices) instead of leaving them for the next young-generation pass
            # to visit (30-40 ms of a new process's first get_state on a 1,000-step thread).
            # Only then: a step's few hundred objects take the usual way. Not when the
            # application froze objects itself (a server before fork): unfreeze would undo
            # that. Garbage cycles that were young then (a graph compiled per request, say)
            # wait for the next full collection, which CPython starts by its own count of
            # promoted objects, not ours: at most _PROMOTE_BUDGET objects go this way
            # between two full collections, so what waits stays bounded.
            full = gc.get_stats()[2]["collections"]
            if full != _promoted[1]:
                _promoted[0], _promoted[1] = 0, full
            if _promoted[0] + young <= _PROMOTE_BUDGET:
                _promoted[0] += young
                gc.freeze()
                gc.unfreeze()
        if was:
            gc.enable()


def _remap_writes(payload: dict, mapping: dict[str, str]) -> dict:
    """A pending-writes record whose references (_enc_write) point at a rewrite's copies."""
    if not any(type(enc) is dict and enc.get("ref") in mapping for _, _, enc in payload["writes"]):
        return payload
    writes = [[i, ch, {**enc, "ref": mapping[enc["ref"]]} if type(enc) is dict and enc.get("ref") in mapping else enc] for i, ch, enc in payload["writes"]]
    return {**payload, "writes": writes}


def _entry_time(ts: Any) -> Optional[str]:
    if isinstance(ts, str):
        try:
            return parse_time(ts)
        except Exception:  # noqa: BLE001 - a checkpoint with an odd ts gets the clock
            return None
    return None


