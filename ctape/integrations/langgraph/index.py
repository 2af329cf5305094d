"""The saver's per-thread index: what it needs of each entry (``_Brief``), what one
thread holds (``_Thread``: checkpoint id -> entry, pending writes, segments), and
``_Index``, the part of ``TapeSaver`` that builds it by one walk from the thread's branches,
from the index cache's rows (VIEW, CHUNKS, OLD_CHUNKS) where there are some, and writes the
rows of what it read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

from .codec import _LONG_INT, _loads
from .gcpause import _gc_paused

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
THREADS_KEPT = 128  # threads a saver keeps indexed in memory, the least recently used dropped first
_BIG = 2048  # a channel value stored whole ("v"/"append") longer than this stays on the tape only
TOMBSTONES = "tombstones"


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
    noted: set = field(default_factory=set)  # calls closed with NOT_SAVED that no late resume answered yet

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
            if lg.get("noted"):
                self.noted.add(lg.get("call_id"))
            elif lg.get("late"):
                self.noted.discard(lg.get("call_id"))
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


class _Index:
    """The per-thread index, a part of ``TapeSaver`` (saver.py): it uses the saver's tape,
    ``session_for``, ``_threads``, ``_briefs``, ``_values`` and ``_places``."""

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
            self._threads.move_to_end(name)
            return th
        if th is None or any(b not in branches for b in th.tips):
            th = _Thread(name, briefs=self._briefs)  # first look, or someone deleted a branch: walk it all
        with _gc_paused():
            self._walk(th, [h for b, h in sorted(branches.items()) if th.tips.get(b) != h])
        th.tips = branches
        self._threads[name] = th
        self._threads.move_to_end(name)
        while len(self._threads) > THREADS_KEPT:
            # the least recently used thread goes, and what the saver kept of its entries:
            # a server that saw 1,000 threads held them all (182 MB, and growing; found by
            # an audit of long-lived processes). Its next look reads its rows again (a few
            # queries for 1,000 steps); an entry another thread shares is read again if need be
            _, old = self._threads.popitem(last=False)
            for h in old.seen:
                self._briefs.pop(h, None)
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
