"""An OpenAI Agents SDK session on a tape: ``TapeSession``.

Built like the SDK's ``SQLiteSession(session_id, db_path)``::

    from agents import Agent, Runner
    from ctape.integrations.openai_agents import TapeSession

    session = TapeSession("user-42", ".ctape")
    await Runner.run(agent, "hi", session=session)

Every input item is one tape entry of the matching kind (user / system / assistant
messages, ``function_call`` -> ``tool_call``, ``function_call_output`` ->
``tool_result``; reasoning -> a hidden ``assistant`` entry holding its summary text; other
item types -> hidden entries with a one-line description), with the exact item in
``meta["openai_agents.item"]``, so ``get_items`` gives back equal items and ``ctape
log`` / ``status`` / ``context`` read the conversation. ``pop_item`` moves the branch
back one entry (the item stays on the tape, and in the ref log); ``clear_session``
starts a new, empty branch (the old one keeps its history).

What the SDK's ``AdvancedSQLiteSession`` adds is here too, by reference instead of by
copying: ``create_branch_from_turn`` / ``create_branch_from_content`` make a ctape branch
at the entry before a user turn and switch to it, ``switch_to_branch``,
``list_branches``, ``delete_branch``, ``get_conversation_turns``,
``find_turns_by_content``; ``store_run_usage`` records a run's token usage as a hidden
entry after its turn (naming the branch it counts for), ``get_session_usage`` /
``get_turn_usage`` read them as AdvancedSQLiteSession's ``turn_usage`` rows read.

``get_items`` keeps the current path's items in memory, keyed by entry hash and shared
by every TapeSession on the same tape and session in the process: each call reads the
session's refs and only the entries that are new since the last call (another process's
appends, a pop or a branch switch are found the same way).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time as _time
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Optional, Union

from ..errors import CtapeError, InvalidInput
from ..model.canonical import entry_body
from ..model.models import HIDDEN, check_name, plural
from ..model.redaction import is_marker
from ..model.refs import check_new_name
from ..tape import Tape
from .naming import open_tape, session_name

__all__ = ["TapeSession", "item_entry"]

ITEM = "openai_agents.item"
# an item the tape cannot hold as a value (NaN, a lone surrogate, nesting past its limit:
# SQLiteSession stores what json.dumps writes): its JSON text, ASCII-escaped, read back exactly
ITEM_JSON = "openai_agents.item_json"
# the index cache's rows (ctape/store/index.py, views): one row per run of entries added
# together, named by the last entry's hash, its parent the first entry's parent, its body a
# line per entry oldest first: the entry's hash (64 characters) then the item's JSON (empty
# for an entry that holds no item). JSON text has no raw newline.
VIEW = "openai_agents.path"
USAGE = "openai_agents.usage"


def _text(content: Any) -> Any:
    """Message content as ctape shows it: a string, or the parts when they are not all text.
    Content SQLiteSession takes and no message payload is (none, a number, an object: a
    chat-style assistant turn with tool calls has `"content": null`) shows as its JSON text
    ("" for none); the item itself is kept as it was (meta), so get_items gives it back."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if len(texts) == len(content):
            return "".join(texts)
        if all(isinstance(p, dict) for p in content):
            return content
    if content is None:
        return ""
    return json.dumps(content, ensure_ascii=False, default=str)


def _reasoning_text(item: dict) -> str:
    parts = list(item.get("summary") or []) + list(item.get("content") or [])
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"]]
    if texts:
        return "\n\n".join(texts)
    enc = item.get("encrypted_content")
    if isinstance(enc, str) and enc:
        return f"[reasoning: {len(enc)} characters, encrypted]"
    return "[reasoning]"


def _describe(item: dict) -> str:
    """One line for an item type ctape has no kind for (web search, computer use, ...)."""
    t = str(item.get("type"))
    rest = {k: v for k, v in item.items() if k not in ("type", "id") and v not in (None, "", [], {})}
    text = json.dumps(rest, ensure_ascii=False, sort_keys=True, default=str)
    return f"[{t}] {text if len(text) <= 200 else text[:199] + '…'}"


def item_entry(item: dict) -> tuple[str, dict, bool]:
    """(kind, payload, hidden) for one Responses input item (anything JSON that is not an
    object, which SQLiteSession keeps too: a hidden entry that shows its JSON text)."""
    if not isinstance(item, dict):
        return "system", {"content": json.dumps(item, ensure_ascii=False, default=str)}, True
    t = item.get("type")
    role = item.get("role")
    if t in (None, "message") and role in ("user", "system", "developer", "assistant"):
        kind = {"developer": "system"}.get(role, role)
        return kind, {"content": _text(item.get("content"))}, False
    if t == "function_call":
        args = item.get("arguments")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            pass
        return "tool_call", {"call_id": str(item.get("call_id") or ""), "name": str(item.get("name") or ""), "arguments": args}, False
    if t == "function_call_output":
        return "tool_result", {"call_id": str(item.get("call_id") or ""), "output": item.get("output")}, False
    if t == "reasoning":  # readable in `log`, kept out of the prompt
        return "assistant", {"content": _reasoning_text(item), "reasoning": True}, True
    return "system", {"content": _describe(item), "type": str(t)}, True


def _is_user(item: Any) -> bool:
    return isinstance(item, dict) and item.get("role") == "user" and item.get("type") in (None, "message")


def _user_text(item: dict) -> str:
    c = _text(item.get("content"))
    return c if isinstance(c, str) else json.dumps(c, ensure_ascii=False)


class _Path:
    """The items on one path root -> head, as JSON text, kept current by entry hash."""

    def __init__(self):
        self.lock = threading.Lock()
        self.head: Optional[str] = None
        self.hashes: list[str] = []
        self.items: list[Optional[str]] = []  # the item's JSON, None for other entries
        self.pos: dict[str, int] = {}
        self.places: Optional[int] = None  # the tape's redacted places when the items were read

    def sync(self, tape: Tape, head: Optional[str]) -> None:
        places = tape.redacted_places()
        if places != self.places:
            # a redaction arrived: items read before may hold its text; read them again
            # (the index cache dropped its rows with it)
            self.head, self.hashes, self.items, self.pos, self.places = None, [], [], {}, places
        if head == self.head:
            return
        new: list[tuple[str, Optional[str], Optional[str]]] = []  # (hash, parent, item JSON), newest first
        h = head
        read = []
        limit = tape.read_entry(h).seq + 1 if h is not None and h not in self.pos else 0
        while h is not None and h not in self.pos:
            # a path read before (by any process) comes back in one query of the index cache;
            # an entry without a row (another process's append not cached yet) is read, and
            # the query asked again from its parent
            start = h
            rows = tape.store.index.view_path(VIEW, h, limit)
            for row in (r for _, parent, body in rows for r in _unpack(parent, body)):
                if h is None or h in self.pos or row[0] != h:
                    break
                new.append(row)
                h = row[1]
            if h != start:
                continue
            e = tape.read_entry(h)
            read.append(_row(e))
            new.append(read[-1])
            h = e.parent
        read.reverse()
        tape.store.index.put_views(VIEW, _view_rows(read))
        cut = self.pos[h] + 1 if h is not None else 0
        for gone in self.hashes[cut:]:
            del self.pos[gone]
        del self.hashes[cut:], self.items[cut:]
        for h2, _, text in reversed(new):
            self.pos[h2] = len(self.hashes)
            self.hashes.append(h2)
            self.items.append(text)
        self.head = head

    def extend(self, tape: Tape, rows: list[tuple[str, Optional[str], Optional[str]]], old_head: Optional[str]) -> None:
        """Our own appends: kept in the index cache for other processes (one row for each
        run of linked entries), and here when we were current (no need to read them back)."""
        tape.store.index.put_views(VIEW, _view_rows(rows))
        if old_head != self.head:
            return
        if self.places is None and self.head is None:
            # a path begun here: its texts are current, not to be read again at the first sync
            self.places = tape.redacted_places()
        for h, _, text in rows:
            self.pos[h] = len(self.hashes)
            self.hashes.append(h)
            self.items.append(text)
            self.head = h

    def text_of(self, h: str) -> Optional[str]:
        """The item JSON of entry h on this path, as it was given (None: not on it, or no item)."""
        i = self.pos.get(h)
        return self.items[i] if i is not None else None

    def keep_tip(self, tape: Tape, h: Optional[str]) -> None:
        """A row of the index cache that ends at h, an entry of this path, so that a path
        from h's later children (after a pop) reads its items as given, in any process: the
        rows written so far end at the tips they were appended at."""
        i = self.pos.get(h) if h is not None else None
        if i is None:
            return
        lo = max(0, i + 1 - RUN)
        rows = [(self.hashes[j], self.hashes[j - 1] if j else None, self.items[j]) for j in range(lo, i + 1)]
        tape.store.index.put_views(VIEW, _view_rows(rows))  # one run of at most RUN: one row, ending at h

    def item_list(self, limit: Optional[int]) -> list[dict]:
        texts = [t for t in self.items if t is not None]
        if limit is not None and limit >= 0:  # a negative limit is none, as SQLite's LIMIT -1 (SQLiteSession keeps it so)
            texts = texts[-limit:] if limit > 0 else []
        return json.loads("[" + ",".join(texts) + "]")  # the caller's copy


def _item_of(e) -> Any:
    """The item entry e holds (None: no item)."""
    meta = e.meta
    if not isinstance(meta, dict):
        return None
    if ITEM in meta:
        return meta[ITEM]
    text = meta.get(ITEM_JSON)
    if not isinstance(text, str):
        return None
    return _redacted_item(e) if is_marker(text) else json.loads(text)


def _redacted_item(e) -> dict:
    """An item kept as its JSON text whose text was redacted (`ctape redact`): an item of
    its kind made from the entry's payload, which shows the marker where the secret was."""
    p = e.payload if isinstance(e.payload, dict) else {}
    if e.kind == "tool_call":
        args = p.get("arguments")
        return {"type": "function_call", "call_id": p.get("call_id", ""), "name": p.get("name", ""),
                "arguments": args if isinstance(args, str) else json.dumps(args)}
    if e.kind == "tool_result":
        return {"type": "function_call_output", "call_id": p.get("call_id", ""), "output": p.get("output")}
    role = e.kind if e.kind in ("user", "assistant", "system") else "system"
    return {"role": role, "content": p.get("content", "")}


def _row(e) -> tuple[str, Optional[str], Optional[str]]:
    """An index cache row of entry e: an item kept as its JSON text keeps that text."""
    item = _item_of(e)
    if item is None:
        return e.hash, e.parent, None
    text = e.meta.get(ITEM_JSON)
    if ITEM in e.meta or not isinstance(text, str) or is_marker(text):
        text = _item_text(item)
    return e.hash, e.parent, text


def _kept_exactly(item: Any) -> tuple[tuple[str, dict, dict], str]:
    """The entry for an item the tape cannot hold as a value, and its text: the item as
    ASCII-escaped JSON text in meta, the payload a readable copy (_plain)."""
    text = json.dumps(item, default=_jsonable, ensure_ascii=True)
    kind, payload, hidden = item_entry(json.loads(text))
    meta: dict = {ITEM_JSON: text}
    if hidden:
        meta[HIDDEN] = True
    return (kind, _plain(payload), meta), text


_SURROGATE = re.compile("[\ud800-\udfff]")


def _plain(v: Any, depth: int = 0) -> Any:
    """A value the tape holds, for reading: NaN and infinities as their names, a lone
    surrogate as U+FFFD, what is nested past 60 levels as its JSON text."""
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return str(v)
    if isinstance(v, str):
        try:
            v.encode("utf-8")
            return v
        except UnicodeEncodeError:
            return _SURROGATE.sub("\ufffd", v)
    if isinstance(v, (dict, list)) and depth > 60:
        return json.dumps(v, ensure_ascii=True)[:10_000]
    if isinstance(v, dict):
        return {_plain(k, depth + 1): _plain(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x, depth + 1) for x in v]
    return v


RUN = 64  # entries per view row at most: a path cut inside a row (pop_item, a branch) is
# read from there back to the row's start (at most RUN - 1 entries), then comes from the cache


def _view_rows(rows: list[tuple[str, Optional[str], Optional[str]]]) -> list[tuple[str, Optional[str], str]]:
    """View rows for (hash, parent, item JSON) rows, oldest first: one per run of linked entries."""
    runs: list[list] = []
    for r in rows:
        if runs and runs[-1][-1][0] == r[1] and len(runs[-1]) < RUN:
            runs[-1].append(r)
        else:
            runs.append([r])
    return [(run[-1][0], run[0][1], "\n".join(h + (text or "") for h, _, text in run)) for run in runs]


def _unpack(parent: Optional[str], body: str) -> list[tuple[str, Optional[str], Optional[str]]]:
    """A view row's entries as (hash, parent, item JSON), newest first."""
    out = []
    for line in body.split("\n"):
        h = line[:64]
        out.append((h, parent, line[64:] or None))
        parent = h
    out.reverse()
    return out


# One _Path per (tape directory, session) in this process, shared by every TapeSession on
# it: apps often make a session object per request. Entries never change, so a path read
# once stays right until a redaction arrives (then it is read again); sync() reads only
# what moved since.
_PATHS: "OrderedDict[tuple[str, str], _Path]" = OrderedDict()
_PATHS_LOCK = threading.Lock()


def _forget_locks_in_child() -> None:
    """A forked child gets new locks: a parent thread inside add_items at the fork held a
    path's lock, which no thread of the child would ever let go (8 of 10 children hung at
    their first add_items; found by an audit). The paths stay: entries never change."""
    global _PATHS_LOCK
    _PATHS_LOCK = threading.Lock()
    for p in _PATHS.values():
        p.lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_locks_in_child)


def _shared_path(tape: Tape, name: str) -> _Path:
    key = (os.path.realpath(tape.path), name)
    with _PATHS_LOCK:
        p = _PATHS.get(key)
        if p is None:
            p = _PATHS[key] = _Path()
        _PATHS.move_to_end(key)
        while len(_PATHS) > 64:
            _PATHS.popitem(last=False)
        return p


class TapeSession:
    """The SDK's Session protocol (get_items, add_items, pop_item, clear_session) on a tape,
    plus AdvancedSQLiteSession's branches and usage."""

    def __init__(self, session_id: str, tape: Union[str, os.PathLike, Tape] = ".ctape", *, prefix: str = "", session_settings: Any = None):
        self.session_id = session_id
        if session_settings is not None:  # as SQLiteSession takes them (a dict of the fields too)
            try:
                from agents.memory.session_settings import coerce_session_settings
            except ImportError:  # an SDK without it: a dict of the fields
                from agents.memory import SessionSettings

                session_settings = SessionSettings(**session_settings) if isinstance(session_settings, dict) else session_settings
            else:
                session_settings = coerce_session_settings(session_settings)
        self.session_settings = session_settings
        self.tape, self._owns = open_tape(tape)
        # an int id as SQLiteSession keeps it (its TEXT column stores 5 as '5'): the same session as "5"
        self.name = session_name(prefix, str(session_id) if type(session_id) is int else session_id)
        self.session = self.tape.session(self.name)
        self._path = _shared_path(self.tape, self.name)

    def close(self) -> None:
        if self._owns:
            self.tape.close()

    @contextmanager
    def _locked(self):
        """The Tape's lock (history/turns.py), then the path's, which every TapeSession of this
        directory shares whatever its Tape: always in this order, so a thread in a
        `tape.batch()` that adds items never waits on one that reads them and waits on it."""
        with self.tape.store._lock, self._path.lock:
            yield

    # -- sync core ------------------------------------------------------------------------

    def _head(self) -> Optional[str]:
        return self.session.refs().head_hash if self.session.exists() else None

    def _items(self, limit: Optional[int]) -> list[dict]:
        with self._locked():
            self._path.sync(self.tape, self._head())
            return self._path.item_list(limit)

    def _add(self, items: list[dict]) -> None:
        if not items:
            return
        texts = [_item_text(item) for item in items]
        rows = []
        copies = json.loads("[" + ",".join(texts) + "]")  # the tape's own copies, plain JSON, in one parse
        for item in copies:
            kind, payload, hidden = item_entry(item)
            rows.append((kind, payload, {ITEM: item, HIDDEN: True} if hidden else {ITEM: item}))
        with self._locked():
            # one call: the entries at HEAD, then one ref record and one fsync (Session.extend);
            # the first one's parent is the HEAD they went on after
            try:
                made = self.session.extend(rows)
            except InvalidInput:
                # an item the tape cannot hold as a value (extend queued nothing): those are
                # kept as their exact JSON text, as SQLiteSession keeps every item
                for i, item in enumerate(copies):
                    if not _holdable(rows[i]):
                        rows[i], texts[i] = _kept_exactly(item)
                made = self.session.extend(rows)
            written = [(e.hash, e.parent, text) for e, text in zip(made, texts)]
            self._path.extend(self.tape, written, written[0][1])

    def _pop(self) -> Optional[dict]:
        with self._locked():
            if not self.session.exists():
                return None
            with self.tape.batch():
                # the session's lock first, held to the batch's end: HEAD is read under it, so
                # an item another process adds meanwhile is never moved off the branch (or
                # popped twice), as SQLiteSession's one DELETE
                with self.tape.store.writing(self.session.name):
                    pass
                st = self.session.refs()
                h = st.head_hash
                self._path.sync(self.tape, h)  # the items as given (their keys' order), where known
                usage = []  # usage records after the popped item (newest first)
                while h is not None:
                    e = self.tape.read_entry(h)
                    item = _item_of(e)
                    if item is not None:
                        text = self._path.text_of(e.hash)
                        ref = st.branch if st.branch is not None else "HEAD"
                        to = e.parent
                        if usage and to is not None and not _is_user(item):
                            # the turn keeps its other items, so it keeps its usage, as
                            # AdvancedSQLiteSession keeps the turn's row: the records go on
                            # after the new end of the branch
                            for u in reversed(usage):
                                to = self.session.put_entry(u.kind, u.payload, u.meta, None, u.time, to).hash
                        changes = {ref: to} if to or ref == "HEAD" else {ref: None, "HEAD": "@" + ref}
                        self.session.set_refs("pop-item", changes, popped=e.hash)
                        self._path.keep_tip(self.tape, e.parent)
                        return json.loads(text) if text is not None else json.loads(json.dumps(item))
                    if isinstance(e.meta, dict) and USAGE in e.meta:
                        usage.append(e)
                    h = e.parent
                return None

    def _clear(self) -> None:
        with self._locked():
            if not self.session.exists() or self.session.refs().head_hash is None:
                return
            used = self.session.refs().claims  # a name never used: one deleted elsewhere would bring its tip back
            n = 2
            while f"main-{n}" in used:
                n += 1
            self.session.set_refs("clear-session", {"HEAD": f"@main-{n}"})

    # -- turns and branches --------------------------------------------------------------

    def _entries(self, ref: Optional[str]) -> list:
        """The entries root -> ref (a branch name; default HEAD), oldest first."""
        if not self.session.exists():
            return []
        if ref is None:
            h = self._head()
        else:
            h = self.session.refs().branches.get(ref)
            if h is None:
                raise ValueError(f"Branch '{ref}' does not exist")
        out = []
        while h is not None:
            e = self.tape.read_entry(h)
            out.append(e)
            h = e.parent
        out.reverse()
        return out

    def _turns(self, branch_id: Optional[str]) -> list[dict]:
        turns = []
        for e in self._entries(branch_id):
            item = _item_of(e)
            if _is_user(item):
                text = _user_text(item)
                turns.append({"turn": len(turns) + 1, "content": text[:100] + ("..." if len(text) > 100 else ""), "full_content": text, "timestamp": e.time, "can_branch": True, "hash": e.hash})
        return turns

    def _branch_from(self, turn_number: int, branch_name: Optional[str]) -> str:
        with self._locked():
            turns = self._turns(None)
            if not 1 <= turn_number <= len(turns):
                raise ValueError(f"Turn {turn_number} does not contain a user message in branch '{self._current()}'")
            name = branch_name if branch_name is not None else f"branch_from_turn_{turn_number}_{int(_time.time())}"
            if not name.strip():
                raise ValueError("Branch name cannot be empty")
            try:
                check_name(name, "branch name")
            except CtapeError as e:
                raise ValueError(str(e)) from None
            st = self.session.refs()
            try:
                check_new_name(name, "branch name", st.branches)
            except CtapeError as e:
                raise ValueError(str(e)) from None
            if name in st.branches or st.head == "@" + name:
                raise ValueError(f"Branch '{name}' already exists in this session")
            at = self.tape.read_entry(turns[turn_number - 1]["hash"]).parent
            changes: dict[str, Optional[str]] = {"HEAD": "@" + name}
            if at is not None:
                changes[name] = at  # by reference: the branch points at the entry before the turn
            elif name in st.claims:
                changes[name] = None  # a name used before: ours, deleted, so HEAD stays unborn on it
            self.session.set_refs("branch-from-turn", changes, turn=turn_number)
            return name

    def _current(self) -> str:
        st = self.session.refs() if self.session.exists() else None
        return (st.branch if st is not None else None) or "main"

    def _switch(self, branch_id: str) -> None:
        with self._locked():
            st = self.session.refs() if self.session.exists() else None
            if st is None or (branch_id not in st.branches and st.head != "@" + branch_id):
                raise ValueError(f"Branch '{branch_id}' does not exist")
            if st.head != "@" + branch_id:
                self.session.set_refs("switch-branch", {"HEAD": "@" + branch_id})

    def _delete(self, branch_id: str, force: bool) -> None:
        if not branch_id or not branch_id.strip():
            raise ValueError("Branch ID cannot be empty")
        if branch_id == "main":
            raise ValueError("Cannot delete the 'main' branch")
        with self._locked():
            st = self.session.refs() if self.session.exists() else None
            if st is None or branch_id not in st.branches:
                raise ValueError(f"Branch '{branch_id}' does not exist")
            changes: dict[str, Optional[str]] = {branch_id: None}
            if st.branch == branch_id:
                if not force:
                    raise ValueError(f"Cannot delete current branch '{branch_id}'. Use force=True or switch branches first")
                changes["HEAD"] = "@main"
            self.session.set_refs("delete-branch", changes)

    def _list_branches(self) -> list[dict]:
        if not self.session.exists():
            return []
        st = self.session.refs()
        created: dict[str, str] = {}
        for r in reversed(self.session.reflog()):  # oldest first
            b = str(r.get("ref", "")).partition("/")[2]
            if b in st.branches and b not in created:
                created[b] = r.get("time")
        out = []
        for b in sorted(st.branches):
            items = [i for i in map(_item_of, self._entries(b)) if i is not None]
            out.append({"branch_id": b, "message_count": len(items), "user_turns": sum(1 for i in items if _is_user(i)), "is_current": st.branch == b, "created_at": created.get(b)})
        out.sort(key=lambda d: (d["created_at"] or "", d["branch_id"]))
        return out

    # -- usage ------------------------------------------------------------------------------

    def _store_usage(self, usage: Any) -> None:
        if usage is None:
            return
        rec = {
            "requests": int(getattr(usage, "requests", 0) or 0),
            "input_tokens": int(getattr(usage, "input_tokens", 0) or 0),
            "output_tokens": int(getattr(usage, "output_tokens", 0) or 0),
            "total_tokens": int(getattr(usage, "total_tokens", 0) or 0),
            "input_tokens_details": _details(getattr(usage, "input_tokens_details", None)),
            "output_tokens_details": _details(getattr(usage, "output_tokens_details", None)),
        }
        with self._locked():
            turns = sum(1 for t in self._path_items_now() if _is_user(t))
            if turns == 0:
                return  # no turn to attach it to, as in AdvancedSQLiteSession
            rec["user_turn_number"] = turns
            rec["branch"] = self._current()  # the branch it counts for (AdvancedSQLiteSession's branch_id)
            cached = (rec["input_tokens_details"] or {}).get("cached_tokens", 0)
            generic = {"input_tokens": rec["input_tokens"], "output_tokens": rec["output_tokens"], "cached_tokens": cached or 0, "requests": rec["requests"]}
            text = f"usage of turn {turns}: {rec['requests']} {plural(rec['requests'], 'request', 'requests')}, {rec['input_tokens']} in, {rec['output_tokens']} out"
            old = self._head()
            e = self.session.append("system", {"content": text}, meta={HIDDEN: True, USAGE: rec, "usage": generic})
            self._path.extend(self.tape, [_row(e)], old)

    def _path_items_now(self) -> list[dict]:
        self._path.sync(self.tape, self._head())
        return self._path.item_list(None)

    def _usage_records(self, branch_id: Optional[str], all_branches: bool) -> list[tuple[str, dict]]:
        """(branch, usage record) per turn, as AdvancedSQLiteSession's turn_usage rows: a
        branch has the records stored while it was the current branch and still on its
        path (a branch made from a turn does not inherit the turns before it, a pop that
        empties a turn takes its record away), the newest record of a turn winning.
        Records written before they named their branch count for every branch they are on,
        once."""
        if not self.session.exists():
            return []
        st = self.session.refs()
        names = sorted(st.branches) if all_branches else [branch_id or self._current()]
        seen: set[str] = set()
        out = []
        for b in names:
            h = st.branches.get(b) if (all_branches or branch_id) else self._head()
            turns_seen: set[int] = set()
            while h is not None:
                e = self.tape.read_entry(h)
                rec = e.meta.get(USAGE) if isinstance(e.meta, dict) else None
                if rec is not None and rec.get("branch", b) == b and rec.get("user_turn_number") not in turns_seen and e.hash not in seen:
                    seen.add(e.hash)
                    turns_seen.add(rec.get("user_turn_number"))
                    out.append((b, rec))
                h = e.parent
        return out

    # -- the SDK's async protocol --------------------------------------------------------------

    async def get_items(self, limit: Optional[int] = None) -> list[dict]:
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        return await asyncio.to_thread(self._items, limit)

    async def add_items(self, items: list[dict]) -> None:
        await _finished(asyncio.to_thread(self._add, list(items)))

    async def pop_item(self) -> Optional[dict]:
        return await _finished(asyncio.to_thread(self._pop))

    async def clear_session(self) -> None:
        await _finished(asyncio.to_thread(self._clear))

    # -- AdvancedSQLiteSession's additions ----------------------------------------------------

    async def create_branch_from_turn(self, turn_number: int, branch_name: Optional[str] = None) -> str:
        """A branch holding the history before user turn `turn_number`, and switch to it."""
        return await _finished(asyncio.to_thread(self._branch_from, turn_number, branch_name))

    async def create_branch_from_content(self, search_term: str, branch_name: Optional[str] = None) -> str:
        found = await self.find_turns_by_content(search_term)
        if not found:
            raise ValueError(f"No user turns found containing '{search_term}'")
        return await self.create_branch_from_turn(found[0]["turn"], branch_name)

    async def switch_to_branch(self, branch_id: str) -> None:
        await _finished(asyncio.to_thread(self._switch, branch_id))

    async def delete_branch(self, branch_id: str, force: bool = False) -> None:
        """Delete a branch's name (its entries stay on the tape until `ctape compact`)."""
        await _finished(asyncio.to_thread(self._delete, branch_id, force))

    async def list_branches(self) -> list[dict]:
        return await asyncio.to_thread(self._list_branches)

    async def get_conversation_turns(self, branch_id: Optional[str] = None) -> list[dict]:
        turns = await asyncio.to_thread(self._turns, branch_id)
        return [{k: v for k, v in t.items() if k != "hash"} for t in turns]

    async def find_turns_by_content(self, search_term: str, branch_id: Optional[str] = None) -> list[dict]:
        turns = await self.get_conversation_turns(branch_id)
        return [t for t in turns if search_term in t["full_content"]]

    async def store_run_usage(self, result: Any) -> None:
        """Record a finished run's usage (``result.context_wrapper.usage``) for the current turn."""
        usage = getattr(getattr(result, "context_wrapper", None), "usage", None)
        await _finished(asyncio.to_thread(self._store_usage, usage))

    async def get_session_usage(self, branch_id: Optional[str] = None) -> Optional[dict[str, int]]:
        """Usage added up over one branch, or over every branch (a shared turn counted once)."""
        recs = await asyncio.to_thread(self._usage_records, branch_id, branch_id is None)
        if not recs:
            return None
        total = {k: sum(r[k] for _, r in recs) for k in ("requests", "input_tokens", "output_tokens", "total_tokens")}
        total["total_turns"] = len(recs)
        return total

    async def get_turn_usage(self, user_turn_number: Optional[int] = None, branch_id: Optional[str] = None) -> Union[list[dict], dict]:
        """Every turn's usage on a branch (default: the current one), oldest turn first, or
        one turn's ({} when it has none): AdvancedSQLiteSession's rows, keys and order."""
        recs = await asyncio.to_thread(self._usage_records, branch_id, False)
        keys = ("requests", "input_tokens", "output_tokens", "total_tokens", "input_tokens_details", "output_tokens_details")
        rows = sorted(({"user_turn_number": r["user_turn_number"], **{k: r.get(k) for k in keys}} for _, r in recs), key=lambda r: r["user_turn_number"])
        if user_turn_number is None:
            return rows
        return next(({k: r[k] for k in keys} for r in rows if r["user_turn_number"] == user_turn_number), {})


async def _finished(change):
    """Await a change of the session to its end even when the caller is cancelled, then
    raise the cancellation: a write runs in a thread that a cancel does not stop, so
    returning at once would let it land after the caller's next call (a cancelled
    add_items after a clear_session). SQLiteSession waits the same way."""
    task = asyncio.ensure_future(change)
    cancelled: Optional[BaseException] = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as e:
            cancelled = cancelled or e
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller gets
        raise cancelled
    return task.result()


def _details(d: Any) -> Optional[dict]:
    """Token details as AdvancedSQLiteSession stores them: the object's fields
    (``__dict__``) as JSON; None when absent or not JSON."""
    if not d or not hasattr(d, "__dict__"):
        return None
    try:
        return json.loads(json.dumps(d.__dict__))
    except (TypeError, ValueError):
        return None


def _holdable(row: tuple[str, dict, dict]) -> bool:
    """Whether the tape takes the entry (kind, payload, meta) as it is."""
    kind, payload, meta = row
    try:
        entry_body(kind, payload, meta, None, None, 1, "2026-01-01T00:00:00Z", lambda b: "0" * 64)
        return True
    except InvalidInput:
        return False


def _jsonable(o: Any) -> Any:
    if hasattr(o, "model_dump"):
        return o.model_dump(exclude_unset=True)
    raise TypeError(f"{type(o).__name__} is not JSON")


# json.dumps(item, default=_jsonable, ensure_ascii=False), with the encoder made once rather
# than at every call (a few µs an item on the add_items path)
_item_text = json.JSONEncoder(default=_jsonable, ensure_ascii=False).encode
