"""Tape: one open tape directory: its sessions, entries and refs.

The verbs over it (compact, fsck, search, diff, usage...) live in ctape/ops; the Tape
users import, ctape.Tape (ctape/tape.py), is this class with those verbs added."""

from __future__ import annotations

import json
import os
import sys
import weakref
from collections import OrderedDict
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Optional

from . import derived, tags
from .turns import take_turns, takes_own_turn
from ..model.canonical import BLOB_MIN, internalize, is_hash
from ..model.errors import AmbiguousRef, CorruptObject, EntryNotFound, InvalidInput, ObjectTooLarge, RefNotFound
from ..model.models import brief, check_name, Entry, NAME_RE, plural
from ..model import refs as refmod
from ..model.refs import HEAD, MOVED_TRIES
from ..model.refspec import SessionOfRef, parse_ref
from ..model.timespec import shown
from ..model.schema import decode_entry
from ..model import redaction
from ..store.files import TYPE_ENTRY
from ..store.store import TYPE_WITHHELD, StaleRow, Store

if TYPE_CHECKING:
    from .session import Session


ENTRY_CACHE = 4096  # entries kept decoded per Tape
ENTRY_CACHE_BYTES = 64 << 20  # and at most about this many bytes of them
TEXTS_KEPT_BYTES = 64 << 20  # values (blobs) kept decoded per Tape: one that many entries share is read twice
READ_ONCE_KEPT = 4096  # hashes of values read once, remembered so that a second read keeps the value
DERIVED_KEPT = 1024  # derived values kept for an importer's latest entries
HEAD_FACTS = "ctape.head-facts.1"  # index cache rows: entry hash -> [seq, time], for the session lists
REF_SHOWN = 90  # characters of a ref an error quotes (a session's name and a whole hash fit)


@take_turns
class Tape:
    """A tape directory. Open with Tape.open(path) or create with Tape.init(path). Threads
    sharing one take turns (turns.py)."""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        take_turns(cls)

    def __init__(self, store: "Store | str | os.PathLike"):
        if not isinstance(store, Store):  # Tape(path): what Tape.open(path) does
            store = Store(_folder(store))
        self.store = store
        # recently read entries, with the bytes each holds: bounded in count and in bytes
        # (an entry can carry megabytes of tool output)
        self._entries: OrderedDict[str, tuple[Entry, int]] = OrderedDict()
        self._entry_bytes = 0
        # the text of values read last (_text): identical tool outputs are stored once, and
        # kept, they are also read and decoded once by a log or an export of every entry
        self._texts: OrderedDict[str, tuple[str, int]] = OrderedDict()  # hash -> (text, bytes held)
        self._read_once: OrderedDict[str, None] = OrderedDict()  # values read once, not kept (yet)
        self._text_bytes = 0
        self._losses_seen: Optional[dict] = None  # the salvage losses _texts were read under
        self._redacted_seen: Optional[dict] = None
        self._derived_at: dict[str, dict] = {}  # _remember_derived
        # (session, entry hash) of each stream a dead writer left that a write of this Tape
        # recorded first (Session._record_partials): the command line says so
        self.recorded_streams: list[tuple[str, str]] = []
        self._streams: "weakref.WeakSet" = weakref.WeakSet()  # stream writers under way (close ends them)
        store.discard_listeners.append(self._forget)
        from ..store.localstate import mark

        mark(store)

    def _clear_entries(self) -> None:
        """Forget every decoded entry and value (the next reads go to the files)."""
        self._entries.clear()
        self._entry_bytes = 0
        self._forget_texts()

    def _forget(self, hashes) -> None:
        """Entries (and values) of a discarded batch were never stored: drop them from the caches too."""
        for h in hashes:
            cached = self._entries.pop(h, None)
            if cached is not None:
                self._entry_bytes -= cached[1]
            kept = self._texts.pop(h, None)
            if kept is not None:
                self._text_bytes -= kept[1]

    @classmethod
    def init(cls, path: str | os.PathLike = ".ctape", **kw) -> "Tape":
        path = _folder(path)
        Store.init(path)
        return cls(Store(path, **kw))

    @classmethod
    def open(cls, path: str | os.PathLike = ".ctape", **kw) -> "Tape":
        return cls(Store(_folder(path), **kw))

    @property
    def _session_class(self) -> type["Session"]:
        """What `session()` returns: the history's Session here; ctape.Tape gives ctape.Session."""
        from .session import Session

        return Session

    @property
    def path(self) -> str:
        return self.store.root

    def close(self) -> None:
        """Release locks and descriptors. A stream still under way is cut here, as a dead
        writer's would be: what it received is flushed and its lock let go, so `status`
        shows it interrupted and the next write (or `recover`) records it; its later
        writes and its end raise InvalidInput."""
        failed: Optional[BaseException] = None
        if self.store.is_open():
            for w in list(self._streams):
                try:
                    w.cut_by_close()
                except Exception as e:  # noqa: BLE001 - a flush that failed (a full disk): the others are cut, the store closed, then it is raised
                    failed = failed or e
        self.store.close()
        if failed is not None:
            raise failed

    def __enter__(self) -> "Tape":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @takes_own_turn
    def session(self, name: str) -> "Session":
        self.store.check_open()
        return self._session_class(self, name)

    def batch(self):
        """Many appends, one fsync at the end. Session locks are held until then. (The
        store's context manager itself: a generator here could be left suspended with the
        batch open by a KeyboardInterrupt, store._Batch.)"""
        return self.store.batch()

    # -- entries ------------------------------------------------------------------

    def redactions(self) -> dict[str, list[tuple[str, str]]]:
        """Every redacted place of the tape, by object (docs/format.md section 17). Entries
        read before a new redaction arrived are forgotten, so reads show it at once."""
        return self._redactions()

    def _redactions(self) -> dict[str, list[tuple[str, str]]]:
        """redactions(), for a caller that holds the store's lock (turns.py)."""
        red = self.store.index.redactions()
        if red is not self._redacted_seen:
            self._redacted_seen = red
            self._clear_entries()
            self._derived_at.clear()
        return red

    def redacted_places(self) -> int:
        """How many places of the tape are redacted: a number that only grows. A cache of
        values read from entries (an integration's, keyed by tape path rather than by Tape)
        keeps the number it was filled at and starts over when it moves, as reads show a new
        redaction at once."""
        self._redactions()
        return self.store.index.places

    @takes_own_turn
    def read_entry(self, h: str) -> Entry:
        if type(h) is not str or len(h) != 64 or h.strip("0123456789abcdef"):
            if type(h) is str and len(h) == 64 and not h.strip("0123456789abcdefABCDEF"):
                h = h.lower()
            else:  # (a bare ValueError or TypeError from deep inside, before)
                raise InvalidInput(f"read_entry takes an entry's full hash (64 hex digits), not {brief(h, 80)}; "
                                   "resolve a ref or a prefix with tape.resolve(ref, session) first")
        with self.store._lock:
            return self._read_entry(h)

    def _read_entry(self, h: str) -> Entry:
        """read_entry, for a caller that holds the store's lock (turns.py)."""
        redacted = self._redactions()  # first: a redaction that arrived clears the cache
        cached = self._entries.get(h)
        if cached is not None:
            self._entries.move_to_end(h)
            return cached[0]
        type_, body = self.store.get_object(h)
        if type_ not in (TYPE_ENTRY, TYPE_WITHHELD):
            raise EntryNotFound(f"{h} is a payload value, not an entry")
        raw = decode_entry(h, body)  # CorruptObject naming h when it is not an entry body
        if h in redacted:
            raw = redaction.apply(raw, redacted[h])
        size = len(body)

        def get_text(b: str) -> str:
            nonlocal size
            if b in redacted:  # a blob that is a secret goes whole, wherever it is referred to
                return redaction.marker(redacted[b][0][1])
            text, held = self._text(b, h)
            size += held
            return text

        e = Entry(
            hash=h,
            parent=raw["parent"],
            seq=raw["seq"],
            kind=raw["kind"],
            time=raw["time"],
            payload=internalize(raw["payload"], get_text),
            meta=internalize(raw["meta"], get_text),
            delta=internalize(raw["delta"], get_text),
        )
        self._entries[h] = (e, size)
        self._entry_bytes += size
        while len(self._entries) > ENTRY_CACHE or (self._entry_bytes > ENTRY_CACHE_BYTES and len(self._entries) > 1):
            self._entry_bytes -= self._entries.popitem(last=False)[1][1]
        return e

    def _text(self, b: str, entry: str) -> tuple[str, int]:
        """The text of value b, which `entry` refers to, and the bytes of memory it holds.
        A value read a second time is one entries share: it is kept while TEXTS_KEPT_BYTES
        allow (the least recently read go first, one over a quarter of that is not kept),
        so a process that reads each value once (an import checking what it holds) keeps
        none. A value is named by the hash of its bytes, verified when read: a kept one is
        never stale. A salvage since the last read drops them all: a value it moved away
        now reads as lost, as in every other process."""
        losses = self.store._salvage_losses()
        if losses is not self._losses_seen:
            self._losses_seen = losses
            self._forget_texts()
        kept = self._texts.get(b)
        if kept is not None:
            self._texts.move_to_end(b)
            return kept
        data = self.store.read_value(b, entry)  # a value lost to damage reads as its marker
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptObject(f"blob {b} is not UTF-8 text; run `ctape fsck`") from None
        kept = (text, sys.getsizeof(text))  # (1 to 4 bytes a character, by the widest one)
        if len(text) < BLOB_MIN or kept[1] > TEXTS_KEPT_BYTES // 4:  # (a shorter one is a marker: never kept)
            return kept
        if b not in self._read_once:
            self._read_once[b] = None
            if len(self._read_once) > READ_ONCE_KEPT:
                self._read_once.popitem(last=False)
        else:
            del self._read_once[b]
            self._texts[b] = kept
            self._text_bytes += kept[1]
            while self._text_bytes > TEXTS_KEPT_BYTES:
                self._text_bytes -= self._texts.popitem(last=False)[1][1]
        return kept

    def _forget_texts(self) -> None:
        self._texts.clear()
        self._text_bytes = 0  # (_read_once stays: it holds hashes, no text)

    def has_entry(self, h: str) -> bool:
        return self.store.has_object(h)

    def derived(self, h: Optional[str], remember: bool = False) -> dict:
        """State, pending calls, last error... at entry h (history/derived.py); read only:
        its parts may be shared with values kept for other entries. `remember`: keep them
        among the recent ones, for a reader that goes on down the same path (an export:
        the next look walks back to here, not to a keyframe)."""
        self._redactions()  # first: values kept from before a redaction are dropped
        idx = self.store.index
        d = derived.derive(h, self._read_entry, idx.keyframe, idx.put_keyframe, self._derived_at.get)
        if remember and h is not None:
            self._remember_derived(h, d)
        return d

    def _remember_derived(self, h: str, d: dict) -> None:
        """Keep the derived values at entry h (an importer's latest entries: the tips of the
        threads it writes in turns, and keyframes not in the index yet). An entry's values
        follow from its hash alone, so they go stale only when a redaction arrives (redactions())."""
        self._derived_at[h] = d
        if len(self._derived_at) > DERIVED_KEPT:
            del self._derived_at[next(iter(self._derived_at))]

    # -- refs ------------------------------------------------------------------------

    def no_entries(self, ref: str, session: Optional[str], what: str = "") -> RefNotFound:
        """The error for a REF that names no entry (a session, or its HEAD, with none yet);
        RefsDamaged is raised instead where the session's refs are in damaged records."""
        name = ref if NAME_RE.fullmatch(ref) and self._session_exists(ref) else session if ref == HEAD else None
        if name is not None:
            s = self.session(name)
            s.check_refs_read_back(s.view())  # damaged, not empty
        return RefNotFound(f"{shown(ref, REF_SHOWN)} has no entries yet{what}")

    def get(self, ref: str, session: Optional[str] = None) -> Entry:
        """The entry REF names. When it is gone or damaged and REF, resolved again, names
        another entry (a HEAD or branch that moved while a compaction removed where it was:
        Session.from_head), that one."""
        h = self.resolve(ref, session)
        for n in range(MOVED_TRIES):
            if h is None:
                raise self.no_entries(ref, session)
            try:
                return self.read_entry(h)
            except ObjectTooLarge:
                raise
            except (EntryNotFound, CorruptObject):
                again = self.resolve(ref, session)
                if again == h or n == MOVED_TRIES - 1:
                    raise
                h = again
        raise AssertionError("unreachable")

    def resolve(self, ref: str, session: Optional[str] = None) -> Optional[str]:
        """The entry hash a REF names (None for a session or branch with no entry yet)."""
        if session is not None:
            check_name(session, "session name")
        spec = parse_ref(ref)
        h = self._resolve_base(spec.base, session, spec.reflog)
        if h is None or spec.back == 0:
            return h
        up = derived.ancestor(h, spec.back, self._read_entry, self.store.index.keyframe)
        if up is None:
            seq = self.read_entry(h).seq
            before = f"only {seq - 1} {plural(seq - 1, 'entry', 'entries')}" if seq > 1 else "no entry"
            raise RefNotFound(f"{shown(ref, REF_SHOWN)} goes past the root: {spec.base} has {before} before it")
        return up

    def _resolve_base(self, base: str, session: Optional[str], reflog: Optional[int]) -> Optional[str]:
        if reflog is not None and (base == HEAD or base.endswith("/" + HEAD)):  # HEAD@{N}: the current session's
            name = (base[: -len(HEAD) - 1] or None) if "/" in base else session
            if name is None:
                raise RefNotFound(f"{base}@{{N}} needs a session: pass -s NAME, or write SESSION@{{N}}")
            from .sessions import require

            return self._session_class(self, require(self, name, prefix=False)).head_at(reflog)
        if reflog is not None:
            if "/" in base:  # (SESSION/HEAD@{N} is above) a branch has no positions of its own here
                s_ = base.partition("/")[0]
                hint = f"`ctape reflog {s_}` lists" if NAME_RE.fullmatch(s_) else "`ctape reflog SESSION` lists"
                raise InvalidInput(f"invalid ref {shown(f'{base}@{{{reflog}}}', REF_SHOWN)}: @{{N}} follows a session or HEAD, "
                                   f"not a branch; {hint} the moves of every branch")
            name = base if NAME_RE.fullmatch(base) and self._session_exists(base) else session
            if name is None or (base != name and not self._session_exists(base)):
                raise RefNotFound(f"@{{N}} needs a session: {shown(base, REF_SHOWN)} is not one (it counts HEAD's positions in a "
                                  f"session's ref log: SESSION@{{N}}, or HEAD@{{N}} -s SESSION; `ctape reflog` lists every branch's moves)")
            return self._session_class(self, name).head_at(reflog)
        if is_hash(base):
            if not self.store.has_object(base):
                self.store.refresh()
                if not self.store.has_object(base):
                    raise EntryNotFound(f"no entry {base} in this tape (not synced yet?)")
            return base
        if "/" in base:
            s, _, b = base.partition("/")
            if NAME_RE.fullmatch(s) and (NAME_RE.fullmatch(b) or tags.is_tag_ref(b)) and self._session_exists(s):
                found, h = self._named_in(self._session_class(self, s), b)
                if found:
                    return h
                raise RefNotFound(f"session {s!r} has no branch, tag or anchor {shown(b, REF_SHOWN)}; see `ctape branch -s {s}` and `ctape tag -s {s}`")
            raise RefNotFound(f"unknown ref {shown(base, REF_SHOWN)}; use SESSION/BRANCH with an existing session")
        if (session is not None and (NAME_RE.fullmatch(base) or tags.is_tag_ref(base)) and self._session_exists(session)
                and not (type(session) is SessionOfRef and base == session)):
            found, h = self._named_in(self._session_class(self, session), base)
            if found:
                return h
        if NAME_RE.fullmatch(base) and self._session_exists(base):
            sess = self._session_class(self, base)
            st = sess.view()
            if st.head_missing:
                raise sess.head_not_arrived(st)
            return st.head_hash
        if len(base) >= 4 and all(c in "0123456789abcdef" for c in base.lower()):
            return self._resolve_prefix(base.lower())
        hint = "see `ctape sessions` and `ctape log`"
        if ".." in base:  # git's A..B (what B has that A has not): no range is a ref here
            hint = "A..B ranges are not read here: `ctape diff A B` compares two refs, `ctape log B` shows B's history"
        elif NAME_RE.fullmatch(base) and session is None:  # a session's name, most likely (SPEC 5: the closest ones)
            from .sessions import closest

            hint = closest(self, base)
        if 0 < len(base) < 4 and all(c in "0123456789abcdef" for c in base.lower()):
            # perhaps a short hash (git takes 4 or more digits too): say so (audit)
            hint += "; an entry hash prefix needs at least 4 hex digits (`ctape log --oneline` shows 12)"
        raise RefNotFound(f"unknown ref {shown(base, REF_SHOWN)}: not a session, branch, tag, anchor or entry hash; {hint}")

    @staticmethod
    def _named_in(sess: "Session", name: str) -> tuple[bool, Optional[str]]:
        """A name within a session: HEAD (as in git: HEAD~2; never a branch name, those are
        refused), then a branch, then a tag, then an anchor (SPEC 13). (False, None) when
        it is none of them; HEAD of a session with no entry yet is (True, None)."""
        st = sess.view([name] if tags.is_tag_ref(name) else [name, refmod.TAG + name])
        if name == HEAD:
            if st.head_missing:
                raise sess.head_not_arrived(st)
            return True, st.head_hash
        if name in st.branches:
            return True, st.branches[name]
        h = tags.named_entry(sess, name, st)
        return h is not None, h

    def _resolve_prefix(self, prefix: str) -> str:
        self.store.refresh()
        try:
            found = self._entries_with_prefix(prefix)
        except StaleRow:  # a compaction in another process removed a file its rows name
            found = self.store.reread(lambda: self._entries_with_prefix(prefix))
        if not found:
            raise RefNotFound(f"no entry starts with {shown(prefix, REF_SHOWN)} on this tape; {self._prefix_hint(prefix)}")
        if len(found) > 1:
            raise AmbiguousRef(f"{shown(prefix, REF_SHOWN)} is ambiguous: {', '.join(sorted(found)[:10])}; give more digits")
        return found[0]

    def _prefix_hint(self, prefix: str) -> str:
        """What a hex prefix that starts no entry may have meant: an imported session's id
        (Claude Code and Codex name sessions by hex UUIDs, and `sessions` shows them cut
        short), which a REF takes whole and `-s` by a prefix (found by an audit)."""
        from .sessions import live_names

        named = sorted(n for n in live_names(self) if n.lower().startswith(prefix))
        if len(named) == 1:
            return f"session {named[0]} starts with it: a REF takes a session's whole name (only `-s` takes a prefix)"
        if named:
            return f"sessions {', '.join(named[:3])}{' ...' if len(named) > 3 else ''} start with it: a REF takes a session's whole name"
        return "`ctape log` shows the entries (`log --all` every branch)"

    def _entries_with_prefix(self, prefix: str) -> list[str]:
        """The hashes of the entries the index holds that start with `prefix` (64 at most)."""
        found = []
        from ..store.framing import BLOCK_TYPES

        for fid, off in self.store.index.entries_with_prefix(prefix, limit=64):
            type_, body = self.store.read_record_at(fid, off, want_type=True)
            inner = self.store.block_records(fid, off, body, type_).values() if type_ in BLOCK_TYPES else [body]
            for rec in inner:
                h = rec[:32].hex()
                if h.startswith(prefix) and rec[32] in (TYPE_ENTRY, TYPE_WITHHELD) and h not in found:
                    found.append(h)
        return found

    def _session_exists(self, name: str) -> bool:
        """A session with a folder that was not removed (`session rm`)."""
        if not os.path.isdir(self.store.session_dir(name)):
            return False
        from ..model.errors import CtapeError
        from .sessions import is_removed

        try:
            return not is_removed(self._session_class(self, name).view())
        except CtapeError:
            return True  # damaged refs: the session is there, and its commands say what is wrong

    # -- whole-tape views -----------------------------------------------------------------

    def sessions(self) -> list[dict]:
        """Every session (removed ones left out), with `current` true for this machine's choice."""
        from ..store.localstate import chosen_session

        chosen = chosen_session(self.store)
        return self.store.settled_all(lambda: [row for name in self.store.sessions() if (row := self._listed(name, chosen))])

    def _listed(self, name: str, chosen: Optional[str]) -> Optional[dict]:
        """A session's row of sessions(), read inside Store.settled_all: the whole tape was
        refreshed once, not each session (20,000 sessions had cost 0.4-1 ms each)."""
        from .sessions import is_removed

        if name in self.store.unsafe_sessions:
            # a symlink where one of its files should be: that session cannot be read
            # (its commands say why); the others are listed as ever (SPEC 14)
            return {"session": name, "head": None, "branch": None, "entries": 0, "last_time": None, "damaged": True,
                    "current": name == chosen}
        st = self._session_class(self, name)
        refs = st.view()
        if is_removed(refs):
            return None
        damaged = bool(st.damage())
        if not refs.claims and not damaged and not self.store.index.open_partials(name):
            return None  # objects and no ref record: an import or batch killed before its end wrote nothing visible
        h = refs.head_hash
        facts = self._head_facts(h) if h else None
        return {
            "session": name,
            "head": h,
            "branch": refs.shown_branch,
            "entries": facts[0] if facts else 0,
            "last_time": facts[1] if facts else None,
            "damaged": damaged,
            "current": name == chosen,
        }

    def _head_facts(self, h: str) -> Optional[tuple[int, str]]:
        """(seq, time) of entry h, kept in the index cache (HEAD_FACTS): both are in the
        entry's hashed body, so a kept row never goes stale. None when the entry is not here
        (not synced yet) or damaged (damage stays in its session: listed, marked, and fsck
        names it)."""
        idx = self.store.index
        if not self.store.has_object(h):
            return None
        kept = idx.view_path(HEAD_FACTS, h, 1)
        if kept:
            seq, t = json.loads(kept[0][2])
            return seq, t
        try:
            e = self.read_entry(h)
        except CorruptObject:
            return None
        idx.put_views(HEAD_FACTS, [(h, e.parent, json.dumps([e.seq, e.time]))])
        return e.seq, e.time

    def session_names(self) -> list[str]:
        """The names of the tape's sessions (removed ones left out)."""
        from .sessions import live_names

        return live_names(self)

    def current_session(self) -> Optional[str]:
        """The session chosen on this machine with use_session (None if none)."""
        from ..store.localstate import chosen_session

        return chosen_session(self.store)

    def default_session(self) -> str:
        """The session used when none is named: this machine's choice, else the only one."""
        from .sessions import default

        return default(self)

    def use_session(self, name: Optional[str]) -> None:
        """Make `name` this machine's default session for the tape (None: forget the choice).
        Kept in the index cache folder, outside the tape, so rsync does not carry it."""
        from ..store.localstate import choose_session
        from .sessions import require

        choose_session(self.store, None if name is None else require(self, name))

    def remove_session(self, name: str) -> dict:
        """Remove a session (a ref record setting its branches and HEAD to null)."""
        from .sessions import remove

        return remove(self, name)

    def copy_session(self, src: str, new: str) -> dict:
        """A new session whose refs point at SRC's entries (a session, SESSION/BRANCH or an entry)."""
        from .sessions import copy

        return copy(self, src, new)


def _folder(path: Any) -> str:
    """A tape's path as given to init and open; InvalidInput (a CtapeError) for anything
    that is not one, as the API's errors all are."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise InvalidInput(f"a tape is opened by the path of its folder (a str or os.PathLike), not {brief(path, 80)}")
    path = os.fspath(path)
    if "\0" in str(path):
        raise InvalidInput(f"a path holds no NUL character: {brief(path, 80)}")
    return path
