"""Session: one conversation, its branches, HEAD and ref log."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional, TypeVar

import copy
import json
import os
import re
import time

from . import derived
from .turns import take_turns, takes_own_turn
from .branching import Branching
from ..model import schema
from ..model import refs as refmod
from ..store.index import hash_key
from ..model.canonical import check_keys, entry_body, normal_time, object_hash
from ..model.errors import CorruptObject, CtapeError, EntryNotFound, InvalidInput, ObjectTooLarge, RefNotFound, RefsDamaged
from ..model.models import HIDDEN, brief, check_name, check_payload, Entry, now_rfc3339, plural
from ..model.refs import HEAD, MOVED_TRIES, RefState
from ..store.files import TYPE_BLOB, TYPE_ENTRY
from ..store.records import cut_cause
from ..store.segment import SegmentWriter
from ..model.models import kind_value as check_kind

if TYPE_CHECKING:
    from .tape import Tape


HASH_RE = re.compile(r"[0-9a-f]{64}")
T = TypeVar("T")


@take_turns
class Session(Branching):
    """One conversation of a Tape; threads sharing the Tape take turns (turns.py)."""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        take_turns(cls)

    def __init__(self, tape: "Tape", name: str):
        self.tape = tape
        self.store = tape.store
        self.name = check_name(name, "session name")

    def __repr__(self) -> str:
        return f"Session({self.name!r})"

    # -- refs ------------------------------------------------------------------------

    def refs(self) -> RefState:
        """The session's refs now (while this process holds the session's lock: its own view)."""
        w = self.store._writers.get(self.name)
        if w is not None and w.refstate is not None and (w.locked or w.view_is_current()):
            return w.refstate
        return self.store.settled(self.name, self._cached_refs)

    def view(self, refs: Iterable[str] = (), values: Iterable[str] = ()) -> RefState:
        """The refs a reader of HEAD needs, without resolving every branch: HEAD, the branch
        it is on, `refs` (branch names, or TAG + a tag name), the branches and tags at one of
        `values` (entry hashes) and every conflict branch, each as refs() has it; the other
        branches and tags are left out. An import of 300,000 roots has as many branches,
        which `status` or `log -n 20` need not resolve (model/refs.py: a ref resolves from
        its own claims; conflict branches from the claims of refs several writers claim).
        refs() itself when it is at hand (this process writes the session, or read it
        since), or when HEAD was deleted: where it goes then depends on every branch."""
        w = self.store._writers.get(self.name)
        if w is not None and w.refstate is not None and (w.locked or w.view_is_current()):
            return w.refstate
        return self.store.settled(self.name, lambda: self._view_from_index(refs, values))

    def from_head(self, read: Callable[[RefState], T], full: bool = False, missing_ok: bool = False) -> T:
        """read(refs) for a reader that starts at HEAD (refs() when `full`, else view()).
        Refused (RefNotFound) where this copy has not received HEAD's record though it has
        the branches' (RefState.head_missing): HEAD is unknown there, not "no entries yet",
        and a reader must not answer as if it were (an empty log, an empty prompt); unless
        `missing_ok` (status says so, `log --all` shows the branches). When
        the read fails at an entry that is gone or damaged, and the refs read again put HEAD
        elsewhere, it starts again from there: what it began at was not the session's any
        more. Two ways this happens:
        - HEAD moved meanwhile and a compaction removed the entry it named a moment earlier
          (`compact --grace now` beside a writer, SPEC 8; git's readers fail there);
        - the index cache named as HEAD an entry whose record is damaged: reading it taught
          this copy of the damage, and the refs read again leave that record out.
        Anything else (HEAD stayed where it was; a record above this process's size limit,
        which says nothing of the tape) is raised as it is."""
        if not callable(read):
            raise InvalidInput(f"from_head takes a function of the session's refs (a RefState), not {brief(read, 40)}")
        st = self.refs() if full else self.view()
        if st.head_missing and not missing_ok:
            raise self.head_not_arrived(st)
        if not missing_ok:
            self.check_refs_read_back(st)
        for n in range(MOVED_TRIES):
            try:
                return read(st)
            except ObjectTooLarge:
                raise
            except (EntryNotFound, CorruptObject):
                again = self.refs() if full else self.view()
                if n == MOVED_TRIES - 1 or again.head_hash == st.head_hash:
                    raise
                st = again
        raise AssertionError("unreachable")

    def _view_from_index(self, refs: Iterable[str], values: Iterable[str]) -> RefState:
        idx = self.store.index
        idx.sync()
        version = idx.version()
        hit = self.store.refs_cache.get(self.name)
        if hit is not None and hit[0] == version:
            return hit[1]
        refs, values = sorted(set(refs) - {HEAD}), sorted(set(values))
        key = (self.name, tuple(refs), tuple(values))
        hit = self.store.refs_cache.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        lc, seen = idx.max_lc_and_seen(self.name)
        gaps = idx.gaps(self.name)
        rows = idx.claims_on(self.name, [HEAD, *refs], values)
        st = refmod.from_rows(rows, lc, seen, gaps)
        if st.branch is not None and st.branch not in st.claims:
            rows += idx.claims_on(self.name, [st.branch], contested=False)
            st = refmod.from_rows(rows, lc, seen, gaps)
        if st.head is None:
            return self._cached_refs()
        self.store.refs_cache[key] = (version, st)
        return st

    def _cached_refs(self) -> RefState:
        """The refs read last when nothing changed since (a session of many branches is
        resolved once a command), else read now. Callers only read them."""
        idx = self.store.index
        idx.sync()
        key = idx.version()
        hit = self.store.refs_cache.get(self.name)
        if hit is not None and hit[0] == key:
            return hit[1]
        st = self._load_refs()
        self.store.refs_cache[self.name] = (key, st)
        return st

    def refs_lost_to_damage(self, st: RefState) -> Optional[str]:
        """The damaged file that holds the session's refs when none read back (no HEAD, and
        a file of the session with damage beyond a single object: a block that does not
        decode, say, which held the ref records); None otherwise."""
        if st.head is not None:
            return None
        damaged = [path for path, level in self.store.damage(self.name) if level >= 2]
        return damaged[0] if damaged else None

    def check_refs_read_back(self, st: RefState) -> None:
        """RefsDamaged where no HEAD reads back because the session's ref records are in
        damaged records (refs_lost_to_damage): a reader must fail there, not answer "no
        entries yet" (an empty log, prompt or export: found by an audit)."""
        where = self.refs_lost_to_damage(st)
        if where is not None:
            raise RefsDamaged(f"session {self.name!r} has no HEAD that reads back: its ref records are in damaged "
                              f"records of {where}; run `ctape fsck --salvage` to keep what is intact")

    def damage(self) -> list[str]:
        """Files of this session known to hold damage (a record that fails its checks, or
        acknowledged bytes lost): reads go on from what reads back. Empty when healthy."""
        return [path for path, level in self.store.damage(self.name)]

    def check_refs_intact(self) -> None:
        """Refuse to write on refs that a damaged record may have changed (a damaged record
        that is not an object, or lost bytes). Reading goes on; the CLI warns."""
        damaged = [path for path, level in self.store.damage(self.name) if level >= 2]
        lost = {p for p, _, _ in self.store.index.lost_rows()}
        if damaged and damaged[0] in lost:
            rel = damaged[0]
            gone = not os.path.lexists(os.path.join(self.store.root, rel))
            why = (None if gone else cut_cause(rel, self.store.writer)) or \
                "an rsync --delete or --inplace, or the folder replaced by another copy of the tape?"
            raise CorruptObject(
                f"session {self.name!r} lost acknowledged records: {rel} is {'gone' if gone else 'shorter than this machine had read it'} "
                f"({why}); its branches and HEAD may be wrong, so nothing is written to it; "
                "sync it back from a copy that has it, or run `ctape fsck --salvage` to go on without it")
        if damaged:
            from ..store.files import damage_advice

            what = damage_advice(damaged[0], "run `ctape fsck --salvage` to keep what is intact, then retry")
            raise CorruptObject(
                f"session {self.name!r} has a damaged record in {damaged[0]}: its branches and HEAD may be wrong, "
                f"so nothing is written to it; {what}"
            )

    def _load_refs(self) -> RefState:
        idx = self.store.index
        lc, seen = idx.max_lc_and_seen(self.name)
        return refmod.from_rows(idx.claims(self.name), lc, seen, idx.gaps(self.name))

    @property
    def head(self) -> Optional[Entry]:
        return self.from_head(lambda st: self.tape.read_entry(st.head_hash) if st.head_hash else None)

    @property
    def branch_name(self) -> Optional[str]:
        return self.view().branch

    def exists(self) -> bool:
        return self.tape._session_exists(self.name)

    def _writer_refs(self, w: SegmentWriter) -> RefState:
        if w.refstate is None:

            def read() -> RefState:
                self.check_refs_intact()  # the damage and lost rows too, from a settled index
                return self._cached_refs()

            self.store.forget_listing(self.name)  # built on the files as they are now
            w.refstate = self.store.settled(self.name, read).copy()  # the writer's own: it applies its records
            # this cache vouches for the writer's own records here once it wrote a record
            # with `gap` that is on the tape (a write killed before its fsync left none)
            v = self.store.index.vouched(self.name, self.store.writer)
            w.vouched = v is not None and w.refstate.seen.get(self.store.writer, 0) >= v
        return w.refstate

    def _recorded_text(self, text: str) -> str:
        """Typed text a ref record keeps (a checkout's REF, the session a copy came from) as
        it is recorded: the API's Session masks what looks like a secret (ops/scan.py)."""
        return text

    def _write_ref(self, w: SegmentWriter, op: str, changes: dict[str, Optional[str]], **extra: Any) -> dict:
        """Write one ref record moving `changes`. A sync conflict still open is settled
        first, by records of their own (op "settle", one per ref: the conflict branches,
        then the winner), so that deleting a conflict branch leaves nothing that keeps
        its entries from `compact`."""
        for field in ("ref", "source"):  # text a user typed, which no redaction reaches: masked if it looks like a secret
            if isinstance(extra.get(field), str):
                extra[field] = self._recorded_text(extra[field])
        st = self._writer_refs(w)
        settle = {ref: v for ref, v in st.settle.items() if ref not in changes}
        old = self._old_values(st, changes)  # as the user saw them (a settle ends unsettled conflict branches)
        for ref in sorted(settle, key=lambda r: (refmod.CONFLICT not in r, r)):
            self._put_ref(w, st, "settle", {ref: settle[ref]}, {}, coalesce=False)
        # HEAD in a record of its own: a record that stays for one claim keeps every value
        # it sets, so HEAD's claim must not keep a branch's old tip from `compact`. HEAD
        # goes last (a new session: main, then HEAD on it), or first when a branch goes
        # (HEAD leaves it, then it is deleted)
        parts = [{k: v for k, v in changes.items() if k != HEAD}]
        if HEAD in changes and parts[0]:
            head_first = any(v is None for v in parts[0].values())
            parts.insert(0 if head_first else 1, {HEAD: changes[HEAD]})
        elif HEAD in changes:
            parts = [{HEAD: changes[HEAD]}]
        parts = [p for part in parts for p in self._by_seen(st, part)]
        # inside a batch, plain appends moving one ref share a record (segment.put_ref);
        # the time every append passes is not an extra that would keep them apart
        coalesce = op == "append" and not (extra.keys() - {"time"}) and len(parts) == 1
        rec: dict = {}
        for part in parts:
            rec = self._put_ref(w, st, op, part, dict(extra), coalesce=coalesce, old={k: old[k] for k in part})
        return rec

    def _by_seen(self, st: RefState, part: dict) -> list[dict]:
        """A record's `seen` holds one n per writer for all the refs it sets, so refs whose
        claims were read to different points go in records of their own: a deletion of
        two branches must not supersede a claim on one that was only read on the other."""
        if len(part) < 2:
            return [part]
        groups: dict[tuple, dict] = {}
        for ref, value in part.items():
            key = (tuple(sorted(st.seen_for([ref], self.store.writer).items())),
                   tuple((w, tuple(ns)) for w, ns in st.cut_for([ref]).items()))
            groups.setdefault(key, {})[ref] = value
        return list(groups.values())

    @staticmethod
    def _old_values(st: RefState, refs) -> dict[str, Optional[str]]:
        return {ref: st.head if ref == HEAD else st.tags.get(ref[len(refmod.TAG):]) if ref.startswith(refmod.TAG) else st.branches.get(ref)
                for ref in refs}

    def _put_ref(self, w: SegmentWriter, st: RefState, op: str, sets: dict[str, Optional[str]], extra: dict,
                 coalesce: bool, old: Optional[dict] = None) -> dict:
        me = self.store.writer
        # n = lc, a hybrid logical clock: one more than every clock read, and never less
        # than the time in microseconds, so it is larger than every n this writer wrote even
        # when it cannot see them: a compaction dropped its newest records (the claims that
        # superseded them have larger clocks), or `rsync --delete` took its files away
        # and a third copy brings them back later (docs/format.md section 6)
        n = max(st.seen.get(me, 0) + 1, st.lc + 1, time.time_ns() // 1000)
        rec = {
            "s": self.name,
            "w": me,
            "n": n,
            "lc": n,
            "t": extra.pop("time", None) or now_rfc3339(),
            "op": op,
            "set": sets,
        }
        if op != "append":
            # an append moves a ref from the new entry's parent: its old value is implied,
            # and the ref log works it out when it replays the records
            rec["old"] = old if old is not None else self._old_values(st, sets)
        target = sets.get(HEAD)
        if isinstance(target, str) and target.startswith("@") and st.branches.get(target[1:]):
            # the tip HEAD attaches at: where it stays if another copy deletes the branch meanwhile
            rec["at"] = st.branches[target[1:]]
        # what this record replaces: the claims on its refs this writer has read (a deletion
        # supersedes exactly those; a claim it had not read still stands)
        seen = st.seen_for(sets, me)
        if seen:
            rec["seen"] = seen
        cut = st.cut_for(sets)
        if cut:
            rec["cut"] = cut  # the cut-off claims among those: named, as a threshold cannot reach them
        if not w.vouched:
            # this cache cannot vouch that this writer has read every record of its own (it
            # is new, or salvaged a loss): what it wrote after its newest own record here
            # and this cache never read is cut off, not replaced (docs/format.md section 12)
            rec["gap"] = st.seen.get(me, 0)
            w.vouched = True
            self.store.index.note_vouched(self.name, n)
        if extra:
            rec.update(extra)
            why = schema.ref_record_problem(rec, self.name)
            if why is not None:  # readers would call it damaged: refused before anything is queued
                raise InvalidInput(f"cannot write this ref record: {why}")
        w.put_ref(rec, coalesce=coalesce)
        st.apply(rec)
        w.last_ref = (st, rec)
        return rec

    # -- appending -----------------------------------------------------------------------

    @takes_own_turn  # its writes and reads are under store.writing, which holds the lock
    def append(
        self,
        kind: str,
        payload: Any = None,
        meta: Optional[dict] = None,
        delta: Any = None,
        time: Optional[str] = None,
        *,
        op: str = "append",
        record_extra: Optional[dict] = None,
    ) -> Entry:
        """Append one entry at HEAD and move HEAD (or its branch) to it."""
        kind, meta = _checked(kind, payload, meta)
        if op != "append" or record_extra:
            _check_record_args(op, {}, record_extra or {})
        with self.store.writing(self.name) as w:
            if not w.partials_checked:
                self._record_partials(w, skip=(record_extra or {}).get("stream"))
            # the view as it is: a run of appends this batch left pending goes on (_follow_last)
            st = w._refstate or self._writer_refs(w)
            e = self._put_entry(w, kind, payload, meta, delta, time, self._head_to_extend(st))
            self._track_derived(w, e)
            if op != "append" or record_extra or not self._follow_last(w, st, e, time is not None):
                self._write_ref(w, op, self._advance(st, e.hash), time=None if time else e.time, **(record_extra or {}))
            return e

    def _follow_last(self, w: SegmentWriter, st: RefState, e: Entry, time_given: bool) -> bool:
        """Write the record of an append that moves HEAD's branch from e's parent to e as a
        copy of the last record this writer applied to its refs, when that one was a plain
        append moving the same branch to e's parent: the record `_write_ref` would build,
        without building it again. Its `seen` stays: no other writer's claim changed since
        (a write by anyone else makes the writer read the refs again, into a new RefState),
        and its own claim's `seen` is that record's. Inside a batch the record is not even
        built until the run of such appends ends (`w.follow`: at the batch's end, at any
        other write, or when anything asks for the writer's refs); only the batch's last
        record is written anyway (segment.put_ref). False (nothing done) in any other case."""
        b = st.branch
        if w.follow is not None:
            build, run_st, run_b, run_prev, run_head = w.follow[:5]
            if run_st is st and run_b == b and run_head == e.parent:
                # the run goes on: only the batch's last record is written, and RefState.apply
                # of the last gives what applying each would (a later n of the same writer wins)
                w.follow = (build, st, b, run_prev, e.hash, e.time, time_given)
                st.branches[b] = e.hash
                return True
            w.end_follow()
        last = w.last_ref
        if last is None or last[0] is not st or b is None or st.settle:
            return False
        prev = last[1]
        sets = prev["set"]
        if prev["op"] != "append" or len(sets) != 1 or sets.get(b, False) != e.parent or not prev.keys() <= _PLAIN_APPEND:
            return False
        if self.store._batch_depth > 0:
            # in a batch: the record waits for the run's end (the batch's, or a write that is
            # no such append); HEAD's branch moves now, for the next append and for readers
            w.follow = (_follow_record, st, b, prev, e.hash, e.time, time_given)
            st.branches[b] = e.hash
            return True
        _follow_record(w, st, b, prev, e.hash, e.time, time_given)
        return True

    def extend(self, items: Iterable[Any]) -> list[Entry]:
        """Append many entries at HEAD, each the child of the one before, and move HEAD (or
        its branch) once, to the last: one ref record and (outside a batch) one fsync for
        them all, as a batch of appends writes. Each item is (kind, payload), (kind,
        payload, meta), (kind, payload, meta, delta) or a dict with those keys (and
        "time"). Every item is checked before anything is written: a bad one writes none."""
        rows = []
        if isinstance(items, (str, bytes, dict)) or not hasattr(items, "__iter__"):
            raise InvalidInput("extend takes a list of items: (kind, payload[, meta[, delta]]) or dicts with kind and payload")
        for it in items:
            if isinstance(it, dict):
                odd = it.keys() - _ITEM_KEYS
                if odd:  # a misspelt "metadata" was dropped without a word (found by an audit)
                    raise InvalidInput(f"an item of extend has the key {brief(sorted(map(str, odd))[0], 40)}; its keys are "
                                       "kind, payload, meta, delta and time")
                kind, payload, meta, delta, t = it.get("kind"), it.get("payload"), it.get("meta"), it.get("delta"), it.get("time")
            elif isinstance(it, (tuple, list)) and 2 <= len(it) <= 4:
                kind, payload, meta, delta, t = (*it, None, None, None)[:4] + (None,)
            else:
                raise InvalidInput("each item is (kind, payload[, meta[, delta]]) or a dict with kind and payload")
            kind, meta = _checked(kind, payload, meta)
            rows.append((kind, payload, meta, delta, t))
        if not rows:
            return []
        out: list[Entry] = []
        with self.store.writing(self.name) as w:
            self._record_partials(w)
            st = self._writer_refs(w)
            parent = self._head_to_extend(st)
            made, seq = [], None
            for kind, payload, meta, delta, t in rows:  # every body checked before any is queued
                m = self._entry_bytes(w, kind, payload, meta, delta, t, parent, seq)
                made.append(m)
                parent, seq = m[-1], m[5] + 1
            for m in made:
                e = self._queue_entry(w, m)
                self._track_derived(w, e)
                out.append(e)
            last = out[-1]
            self._write_ref(w, "append", self._advance(st, last.hash), time=None if rows[-1][4] else last.time)
        return out

    def _track_derived(self, w: SegmentWriter, e: Entry, remember: bool = False) -> None:
        """Keep state and pending calls of the chain being appended to, and save a keyframe
        every KEY_EVERY entries, so `state` and `status` never walk far (written with the index).
        `remember` (importers, which write many threads in turns): also keep the values at e
        among the tape's recent ones, so going back to a thread's tip costs no walk; and a
        hole or damage on the path only leaves the thread without keyframes."""
        idx = self.tape.store.index
        if e.seq % derived.KEY_EVERY == 0:
            idx.redactions()  # a keyframe is kept: learn of redactions made elsewhere first
        if w.derived_head != e.parent or w.derived is None or w.derived_epoch != idx.redaction_epoch:
            # (a redaction arrived since w.derived was folded: it may hold the text)
            try:
                w.derived = derived.empty() if e.parent is None else self.tape.derived(e.parent)
                w.derived_epoch = idx.redaction_epoch
            except (EntryNotFound, CorruptObject) as err:
                # the chain has a hole (lost to damage and salvaged, or not synced yet): what
                # follows from it is unknown, and the append needs none of it; no keyframe is
                # kept for it. Damage not salvaged yet (CorruptObject) stops the append.
                if isinstance(err, CorruptObject) and not remember:
                    raise
                w.derived, w.derived_head = None, None
                return
        w.derived = derived.step(w.derived, e)
        w.derived_head = e.hash
        if remember:
            self.tape._remember_derived(e.hash, w.derived)
        if e.seq % derived.KEY_EVERY == 0:
            w.batch.keyframes.append((hash_key(e.hash), json.dumps(w.derived)))

    def _head_to_extend(self, st: RefState) -> Optional[str]:
        """HEAD's entry, where an append (or a branch from HEAD) starts; None in a session
        with no entries. Refused at a HEAD this copy does not know (RefState.head_missing):
        an append would start a new root and move the branch off the entries it holds, and
        "no entries yet" would be wrong."""
        if st.head_missing:
            raise self.head_not_arrived(st)
        return st.head_hash

    def head_not_arrived(self, st: RefState) -> RefNotFound:
        """The refusal where HEAD's record has not arrived on this copy (RefState.head_missing)."""
        b = "main" if "main" in st.branches else sorted(st.branches)[0]
        return RefNotFound(
            f"session {self.name!r}: HEAD's record has not arrived on this copy, though its branches have "
            f"(a copy cut off between files?); run rsync again, or check out a branch (ctape checkout {b} -s {self.name})"
        )

    @staticmethod
    def _advance(st: RefState, h: str) -> dict[str, Optional[str]]:
        """The ref changes that move HEAD to a new child entry h."""
        if st.head is None:  # a new session starts on branch main
            return {"main": h, HEAD: "@main"}
        if st.branch is not None:
            return {st.branch: h}
        return {HEAD: h}

    def _put_entry(self, w: SegmentWriter, kind: str, payload: Any, meta: dict, delta: Any, time: Optional[str], parent: Optional[str]) -> Entry:
        return self._queue_entry(w, self._entry_bytes(w, kind, payload, meta, delta, time, parent))

    def _entry_bytes(self, w: SegmentWriter, kind: str, payload: Any, meta: dict, delta: Any, time: Optional[str], parent: Optional[str],
                     seq: Optional[int] = None) -> tuple:
        """Everything an entry writes, worked out and checked before anything is queued: a
        value refused half way (NaN after a large string) leaves no blob behind, in a batch
        too, where nothing is discarded after a refused call."""
        if seq is None:  # (extend gives it: its parents are not queued yet)
            if parent is None:
                seq = 1
            elif parent == w.last_entry[0]:
                seq = w.last_entry[1] + 1
            else:
                seq = self.tape.read_entry(parent).seq + 1
        t = normal_time(time) if time is not None else now_rfc3339()  # 0 or "" is refused, not now
        refs = [parent] if parent is not None else []
        blobs: list[tuple[str, bytes]] = []

        def put_blob(b: bytes) -> str:
            h = object_hash(b"blob", b)
            blobs.append((h, b))
            refs.append(h)
            return h

        body = entry_body(kind, payload, meta, delta, parent, seq, t, put_blob)
        return kind, payload, meta, delta, parent, seq, t, refs, blobs, body, object_hash(b"entry", body)

    def _queue_entry(self, w: SegmentWriter, made: tuple) -> Entry:
        kind, payload, meta, delta, parent, seq, t, refs, blobs, body, h = made
        for bh, b in blobs:
            w.put_object(TYPE_BLOB, b, h=bh)
        # the first child of an entry this writer created cannot be on the tape already; a
        # second may be (the same child again: a transcript imported again by a watcher)
        n_before = len(w.new_objects)
        new = parent is not None and parent in w.fresh
        w.put_object(TYPE_ENTRY, body, new=new, refs=refs, h=h)
        if new:
            w.fresh.discard(parent)
        if len(w.new_objects) > n_before:  # written now, not found on the tape
            if len(w.fresh) > 4096:
                w.fresh.clear()
            w.fresh.add(h)
        # the caller keeps its dicts (and may change them), so this Entry is not cached
        e = Entry(hash=h, parent=parent, seq=seq, kind=kind, time=t, payload=payload, meta=meta, delta=delta)
        w.last_entry = (h, seq)
        return e

    def _record_partials(self, w: SegmentWriter, skip: Optional[str] = None) -> None:
        """Turn an interrupted stream left by a dead writer into one `streaming` entry."""
        if w.partials_checked:
            return
        w.partials_checked = True
        from .stream import record_partials

        self.tape.recorded_streams += [(self.name, e.hash) for e in record_partials(self, w, skip=skip)]

    @contextmanager
    def _writing(self) -> Iterator[SegmentWriter]:
        """The session's writer, for a write that moves refs: a stream a dead writer left is
        recorded first (SPEC 6: no later than the next write), where it began."""
        with self.store.writing(self.name) as w:
            self._record_partials(w)
            yield w

    # -- moving refs ------------------------------------------------------------------------

    def _must_exist(self) -> None:
        if not self.exists():
            from .sessions import unknown

            raise unknown(self.tape, self.name)

    def _not_removed(self) -> None:
        """Reading a removed session (`session rm`) fails as unknown, as the command line
        does; a session not written yet reads as empty (its first append creates it)."""
        from .sessions import is_removed, unknown

        if is_removed(self.view()):
            raise unknown(self.tape, self.name)

    def put_entry(self, kind: str, payload: Any, meta: Optional[dict] = None, delta: Any = None, time: Optional[str] = None, parent: Optional[str] = None) -> Entry:
        """Store an entry after `parent` without moving any ref (importers; pair with set_refs)."""
        kind, meta = _checked(kind, payload, meta)
        if parent is not None and (type(parent) is not str or not HASH_RE.fullmatch(parent)):
            raise InvalidInput(f"parent is a full entry hash (64 hex) or None, not {brief(parent, 70)}")
        with self.store.writing(self.name) as w:
            e = self._put_entry(w, kind, payload, meta, delta, time, parent)
            self._track_derived(w, e, remember=True)
            return e

    def set_refs(self, op: str, changes: dict[str, Optional[str]], **extra: Any) -> None:
        """Write one ref record as is (import, sync tools); every value must be a ref:
        an entry of this tape, "@BRANCH" for HEAD, or null (delete)."""
        _check_record_args(op, changes, extra)
        self._check_ref_values(changes)
        with self.store.writing(self.name) as w:
            self._write_ref(w, op, changes, **extra)

    def _check_ref_values(self, changes: dict) -> None:
        for ref, value in changes.items():
            if ref.startswith(refmod.TAG):
                check_name(ref[len(refmod.TAG):], "tag name")
            elif ref != HEAD:
                check_name(ref, "branch name")
            if value is None:
                continue
            if ref == HEAD and isinstance(value, str) and value.startswith("@"):
                check_name(value[1:], "branch name")
                continue
            if not (isinstance(value, str) and HASH_RE.fullmatch(value) and self._is_entry(value)):
                raise InvalidInput(f"{ref}: {brief(value, 80)} is not an entry of this tape; give a full entry hash" + (" or @BRANCH" if ref == HEAD else ""))

    def _is_entry(self, h: str) -> bool:
        try:
            self.tape.read_entry(h)
            return True
        except CtapeError:
            return False

    # -- reading ----------------------------------------------------------------------------

    def log(
        self,
        ref: Optional[str] = None,
        limit: Optional[int] = None,
        kinds: Iterable[str] = (),
        *,
        grep: Optional[str] = None,
        since: Any = None,
        until: Any = None,
        hidden: bool = True,
        all: bool = False,
    ) -> Iterator[Entry]:
        """Entries newest first from REF (default HEAD), following parents. `all`: from every
        branch and HEAD; `grep`, `since`, `until`, `hidden=False`: as `ctape log` (logview.py)."""
        if limit is not None and (type(limit) is not int or limit < 0):
            raise InvalidInput(f"limit is a number of entries (0 or more), not {brief(limit)}")
        for name, flag in (("hidden", hidden), ("all", all)):
            if type(flag) is not bool:  # hidden="no" read as true
                raise InvalidInput(f"{name} is True or False, not {brief(flag)}")
        self._not_removed()
        kinds = [kinds] if isinstance(kinds, str) else kinds  # one kind, not its letters
        if isinstance(kinds, (bytes, dict)) or not hasattr(kinds, "__iter__"):
            raise InvalidInput(f"kinds is a kind or a list of kinds (user, assistant, ...), not {brief(kinds, 40)}")
        if all or grep is not None or since is not None or until is not None or not hidden:
            from .logview import Filter, start_points, walk

            tips = [self.tape.resolve(ref, self.name)] if ref and not all else start_points(self.tape, self.name, every_branch=all, full=True)
            return walk(self.tape, tips, Filter.make(kinds, grep, since, until, hidden), limit)
        return self._log_chain(ref, limit, kinds)

    def _log_chain(self, ref: Optional[str], limit: Optional[int], kinds: Iterable[str]) -> Iterator[Entry]:
        want = {check_kind(k) for k in kinds}
        if ref:
            h, e = self.tape.resolve(ref, self.name), None
        else:  # read before the first yield: a HEAD that moved under a compaction is followed
            e = self.from_head(lambda st: self.tape._read_entry(st.head_hash) if st.head_hash else None, full=True)
            h = e.hash if e else None
        count = 0
        while h is not None and (limit is None or count < limit):
            if e is None or e.hash != h:
                e = self.tape._read_entry(h)  # each step under the lock (turns.py)
            if not want or e.kind in want:
                yield e
                count += 1
            h = e.parent

    def reflog(self) -> list[dict]:
        """Every ref move, newest first (history/reflog.py)."""
        from . import reflog

        self._not_removed()
        return reflog.lines(self)

    def head_positions(self) -> list[str]:
        """Entry hashes HEAD has pointed at, newest first (for SESSION@{N})."""
        from . import reflog

        return reflog.replay(self)[1]

    def head_at(self, n: int) -> Optional[str]:
        if n == 0:
            return self.refs().head_hash
        pos = self.head_positions()
        if n >= len(pos):
            raise RefNotFound(f"{self.name}@{{{n}}}: the ref log has only {len(pos)} HEAD {plural(len(pos), 'position', 'positions')}")
        return pos[n]

    def status(self) -> dict:
        from .recovery import status

        self._not_removed()
        return status(self)

    def state(self, ref: Optional[str] = None) -> Any:
        self._not_removed()
        # a copy: the caller's to change, and derived values are shared
        if ref:
            return copy.deepcopy(self.tape.derived(self.tape.resolve(ref, self.name))["state"])
        return self.from_head(lambda st: copy.deepcopy(self.tape.derived(st.head_hash)["state"]))

    def stream(self, flush_interval: float = 0.5):
        from .stream import StreamWriter

        return StreamWriter(self, flush_interval)

    def recover(self) -> list[Entry]:
        from .stream import recover

        return recover(self)


_ITEM_KEYS = frozenset(("kind", "payload", "meta", "delta", "time"))


def _follow_record(w: SegmentWriter, st: RefState, b: str, prev: dict, h: str, t: str, time_given: bool) -> None:
    """Queue and apply the record of appends that moved branch b (HEAD's) from prev's value
    to h: prev, a plain append record of this writer, with the branch, its clock and the
    time changed (Session._follow_last)."""
    rec = dict(prev)
    rec["n"] = rec["lc"] = max(prev["n"] + 1, st.lc + 1, time.time_ns() // 1000)
    rec["t"] = now_rfc3339() if time_given else t
    rec["set"] = {b: h}
    w.put_ref(rec, coalesce=True)
    st.apply(rec)
    w.last_ref = (st, rec)


_PLAIN_APPEND = frozenset(("s", "w", "n", "lc", "t", "op", "set", "seen"))  # the keys of an append record with no extras


# the fields every ref record has (docs/format.md section 6): set_refs' extra fields go beside them
RECORD_FIELDS = frozenset({"s", "w", "n", "lc", "t", "op", "set", "old", "seen", "at", "cut", "gap"})


def _check_record_args(op: Any, changes: Any, extra: dict) -> None:
    """What set_refs (and append's op / record_extra) are given, before anything is written."""
    if type(op) is not str or not op:
        raise InvalidInput(f"a ref record's op must be a non-empty string (e.g. \"import\"), not {brief(op, 40)}")
    if not isinstance(changes, dict) or not all(type(k) is str for k in changes):
        raise InvalidInput("changes must be a dict from ref names (a branch, HEAD, tag:NAME) to an entry hash, \"@BRANCH\" or None")
    taken = sorted(extra.keys() & RECORD_FIELDS)
    if taken:
        raise InvalidInput(f"{', '.join(taken)}: the ref record's own field{'s' if len(taken) > 1 else ''}, "
                           f"set by ctape; give extra fields other names")
    check_keys(list(extra.values()))
    if extra.get("time") is not None:
        extra["time"] = normal_time(extra["time"])


def entry_hash(kind: str, payload: Any, meta: Optional[dict], delta: Any, time: str, parent: Optional[str], seq: int) -> str:
    """The hash `put_entry` gives this entry after `parent` at `seq`, with nothing written:
    an importer checks a line it will write after a parent of another name (formats/jsonl.py)."""
    kind, meta = _checked(kind, payload, meta)
    return object_hash(b"entry", entry_body(kind, payload, meta, delta, parent, seq, normal_time(time), lambda b: object_hash(b"blob", b)))


def _checked(kind: Any, payload: Any, meta: Any) -> tuple[str, dict]:
    """An entry's kind (as stored) and meta ({} for none), once kind, payload and meta are
    valid. (A delta is any JSON value: a merge patch, RFC 7386, replaces the state with a
    value that is not an object, as SPEC section 1 has it.)"""
    kind = check_kind(kind)
    check_payload(kind, payload)
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise InvalidInput("meta must be a JSON object")
    if not isinstance(meta.get(HIDDEN, False), bool):
        # every reader takes any value but false and empty ones for the marker: "false" hid
        raise InvalidInput(f'meta "{HIDDEN}" takes true (the entry is bookkeeping, left out of context) or false, '
                           f"not {json.dumps(meta[HIDDEN])}")
    return kind, meta
