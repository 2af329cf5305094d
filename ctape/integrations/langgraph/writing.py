"""Writing checkpoints and pending writes: ``_Writing``, the part of ``TapeSaver`` behind
``put`` and ``put_writes``. Only what changed is stored (channel records), new messages
become conversation entries, a step that replaced or removed messages writes the line again
(``_rewrite``), a subgraph's entries join the root line, and the refs move; with the
helpers that tell whether a list grew from another (``_extends``) and point records at a
rewrite's copies (``_remap``).
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Sequence
from typing import Any, Optional

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP, ChannelVersions, Checkpoint, CheckpointMetadata, get_checkpoint_metadata

from ...model.models import HIDDEN, parse_time, plural
from .codec import _is_message, _message_entries, _shown
from .index import KEY, TOMBSTONES, _Cp, _main_branch, _parent_ns, _Thread
from .values import _MISSING, _isolated

# the run config's durability mode, in what LangGraph hands a saver's put (not public API:
# when it is missing, a run is taken to save its writes, LangGraph's default)
_DURABILITY = "__pregel_durability"


class _Writing:
    """Writing, a part of ``TapeSaver`` (saver.py): it uses the saver's tape, codec, lock,
    ``_parked`` writes and caches, the index (``_thread``, ``_brief``, ``_save``), the
    values (``_value``, ``_msg_hashes``, ``_load_message``) and the interrupts
    (``_interrupt_entries``, ``_answer_interrupts``)."""

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
                self._put(th, tid, ns, checkpoint, md, new_versions, parent_id, conf.get(_DURABILITY) != "exit")
        return {"configurable": {"thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def _put(self, th: _Thread, tid: str, ns: str, checkpoint: Checkpoint, md: dict, new_versions: ChannelVersions, parent_id: Optional[str],
             saves_writes: bool = True) -> None:
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
            if not ns and parent_id is None:
                tip = self._before_root(s)
            if ns:  # a subgraph's checkpoints join the root line where it ends
                tip, joined = self._join_root(s, tip)
                if joined is not None:
                    base_ids = {**base_ids, "joined": joined}
            start = tip
            if not ns and md.get("source") in ("input", "loop") and th.interrupts and tip is not None:
                tip = self._went_past(s, th, cid, parent_id, md.get("source"), saves_writes, tip, written)
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
            self._cache((e.hash, ch), self._as_read(v, specs.get(ch)))
        th.tips = dict(s.refs().branches)
        self._save(th)

    def _as_read(self, v: Any, spec: Optional[dict]) -> Any:
        """What a new process reads of a channel value just stored: a copy of v, except
        what the serde wrote (a lone surrogate, a bytearray, a set, a dataclass), which is
        kept as the serde reads it back (the surrogate as "?", bytes), as SqliteSaver's
        reads give it in this process too (found by an audit: this process read
        "x\ud800y" where a new one read "x?y")."""
        if spec is not None and "v" in spec and _serde_in(spec["v"]):
            return self.codec.dec(spec["v"])
        items = spec.get("append") if spec is not None else None
        if items and any(map(_serde_in, items)):
            return _isolated(v[:len(v) - len(items)]) + [self.codec.dec(x) for x in items]
        return _isolated(v)

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
        note = f"rewrite for checkpoint {cid}: {removed} {plural(removed, 'message', 'messages')} replaced or removed"
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

    def _before_root(self, s) -> Optional[str]:
        """Where a thread's first root checkpoint goes: at the end of main when main holds
        only what a subgraph wrote before it (its saves arrive from worker threads, and a
        subgraph run by the first step can write before its caller's first checkpoint
        lands), so the run stays one line; else it starts a line."""
        main_tip = s.refs().branches.get("main")
        lg = self._brief(main_tip).lg if main_tip is not None else None
        return main_tip if lg and lg.get("checkpoint_ns") and "joined" not in lg else None

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


def _serde_in(enc: dict) -> bool:
    """Did the serde write (part of) this encoded value (_Codec.enc): the value itself, a
    message, or a message of a list?"""
    return "b" in enc or "b" in enc.get("m1", ()) or any("b" in m for m in enc.get("m", ()))
