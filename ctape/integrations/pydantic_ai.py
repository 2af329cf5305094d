"""pydantic-ai message history on a tape: the ``TapeHistory`` capability, and
``save_messages`` / ``load_messages``.

A run that persists itself, step by step, continuing the session's history::

    from pydantic_ai import Agent
    from ctape import Tape
    from ctape.integrations.pydantic_ai import TapeHistory

    s = Tape.open(".ctape").session("chat-42")
    agent = Agent("openai:gpt-5", capabilities=[TapeHistory(s)])
    agent.run_sync("hi")             # history loaded from the tape, every message saved
    agent.run_sync("and then?")      # continues the same conversation

Or by hand::

    result = agent.run_sync("hi", message_history=load_messages(s))
    save_messages(s, result.all_messages())   # or new_messages(): either stores the turn once

Saving is idempotent: the messages are compared with the history at HEAD, and only what
extends it is appended (a history that is already there, a prefix of it or any run of
its messages appends nothing; messages found nowhere in it are appended after it; a
whole history whose first message differs is a line from the root). A history that was
rewritten (the same start, then different messages) branches off the last shared message,
as pydantic-ai's own ConversationStore does: the session's branch moves to the new line
and the old line keeps a branch ``<branch>.was-<hash>``.

Messages go through pydantic-ai's own ``ModelMessagesTypeAdapter``. Every part of a
message is one entry of the matching kind: system prompt -> ``system``, user prompt ->
``user``, text -> ``assistant``, thinking -> hidden ``assistant``, tool call ->
``tool_call``, tool return -> ``tool_result`` (``is_error`` when it failed), a retry (a retried
tool return, or a retry prompt for a tool) -> ``error`` with its ``call_id`` (without a tool: ``user``); anything else is kept hidden. The exact
part (and, on a message's first part, the message without its parts) is in the entry's
meta, so ``load_messages`` gives back equal messages, and ``log`` / ``status`` /
``context`` read the conversation.

After a crash while a tool ran, the tape ends with calls no result answers. A
``TapeHistory`` run given a new prompt closes them with pydantic-ai's own repair (an
``interrupted`` tool return, saved); a run without a prompt resumes them. Calls a run
deferred on purpose (``DeferredToolRequests``) are named by a hidden entry and left alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from collections import OrderedDict
from typing import Any, Optional, Sequence

from ..errors import InvalidInput
from ..model.models import HIDDEN, Entry, brief, copy_json, plural
from ..model.redaction import is_marker
from ..session import Session

__all__ = ["TapeHistory", "save_messages", "load_messages", "part_entry"]

PART = "pydantic_ai.part"
MESSAGE = "pydantic_ai.message"
DEFERRED = "pydantic_ai.deferred"  # a hidden entry after a run that ended in DeferredToolRequests: the call ids


def _adapter():
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    return ModelMessagesTypeAdapter


def part_entry(part: dict) -> tuple[str, dict, bool]:
    """(kind, payload, hidden) for one part, as pydantic-ai dumps it in JSON mode."""
    pk = part.get("part_kind")
    content = part.get("content")
    if pk == "system-prompt":
        return "system", {"content": content}, False
    if pk == "user-prompt":
        return "user", {"content": content}, False
    if pk == "text":
        return "assistant", {"content": content}, False
    if pk == "thinking":
        return "assistant", {"content": content, "thinking": True}, True
    if pk in ("tool-call", "builtin-tool-call"):
        return "tool_call", {"call_id": str(part.get("tool_call_id") or ""), "name": str(part.get("tool_name") or ""), "arguments": part.get("args")}, False
    if pk in ("tool-return", "builtin-tool-return"):
        call_id = str(part.get("tool_call_id") or "")
        outcome = part.get("outcome", "success")
        if outcome == "retried":  # the model is asked to call again: an error answer to this call
            return "error", {"message": content if isinstance(content, str) else str(content), "call_id": call_id}, False
        payload = {"call_id": call_id, "output": content}
        if outcome not in (None, "success"):
            payload["is_error"] = True
            payload["outcome"] = outcome
        return "tool_result", payload, False
    if pk == "retry-prompt":
        text = content if isinstance(content, str) else str(content)
        if part.get("tool_name"):
            return "error", {"message": text, "call_id": str(part.get("tool_call_id") or "")}, False
        return "user", {"content": text}, False
    return "system", {"content": "", "part_kind": str(pk)}, True


# -- the history at a head ---------------------------------------------------------------------------

# (message dumps, the last entry of each message, the tape's redacted places) per head hash.
# A head hash names its whole history, so an entry here is stale only once a redaction
# arrives (the places move); it saves re-reading the history at every save.
_HISTORIES: OrderedDict[str, tuple[list[dict], list[str], int]] = OrderedDict()
_HISTORIES_LOCK = threading.Lock()


def _new_lock_in_child() -> None:
    """A forked child gets a new lock: one a parent thread held at the fork stays held."""
    global _HISTORIES_LOCK
    _HISTORIES_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_in_child)


def _history(session: Session, head: Optional[str]) -> tuple[list[dict], list[str]]:
    if head is None:
        return [], []
    places = session.tape.redacted_places()
    with _HISTORIES_LOCK:
        got = _HISTORIES.get(head)
    if got is not None and got[2] == places:
        return list(got[0]), list(got[1])
    msgs: list[dict] = []
    ends: list[str] = []
    entries = list(session.log(head))
    for e in reversed(entries):
        meta = e.meta if isinstance(e.meta, dict) else {}
        if MESSAGE in meta:
            msgs.append({**meta[MESSAGE], "parts": []})
            ends.append(e.hash)
        if PART in meta and msgs:
            msgs[-1]["parts"].append(meta[PART])
            ends[-1] = e.hash
    _remember(session, head, msgs, ends)
    return msgs, ends


def _remember(session: Session, head: str, msgs: list[dict], ends: list[str]) -> None:
    places = session.tape.redacted_places()
    with _HISTORIES_LOCK:
        _HISTORIES[head] = (list(msgs), list(ends), places)
        _HISTORIES.move_to_end(head)
        while len(_HISTORIES) > 16:
            _HISTORIES.popitem(last=False)


# -- saving and loading --------------------------------------------------------------------------------


class _HeadMoved(Exception):
    """Another writer moved HEAD between the look at the history and the session's lock."""


def save_messages(session: Session, messages: Sequence[Any], *, whole: bool = False) -> list[Entry]:
    """Store pydantic-ai messages at the session's HEAD: what extends the history there.

    ``result.all_messages()`` and ``result.new_messages()`` store the same thing; saving
    again stores nothing, an older turn's messages included. ``whole=True`` says the
    messages are a whole history, from its first message (``TapeHistory`` saves so): one
    whose first message differs from the stored one's is then a rewrite from the start,
    not new messages. Without it, a list whose first message starts a conversation (a
    system prompt) or whose second message is the stored second one is taken as whole.
    Returns the entries written."""
    # messages given as JSON dicts (read back from a file) dump as they are; anything else
    # is refused below by validation, with one error rather than pydantic's warnings too
    if isinstance(messages, (str, bytes, dict)) or not hasattr(messages, "__iter__"):
        raise InvalidInput(f"save_messages takes a list of pydantic-ai messages (ModelRequest / ModelResponse), not {brief(messages, 40)}")
    try:
        dumped = _adapter().dump_python(list(messages), mode="json", warnings=False)
    except ValueError as e:  # pydantic_core's PydanticSerializationError: a value with no JSON form
        raise InvalidInput(f"a message holds a value pydantic cannot write as JSON ({str(e).splitlines()[0]}); "
                           "give tool returns and arguments JSON values, dataclasses or pydantic models") from None
    for _ in range(20):
        try:
            return _save(session, dumped, whole)
        except _HeadMoved:
            continue  # the batch wrote nothing: compare with the history at the new HEAD
    return _save(session, dumped, whole, last=True)


def _save(session: Session, dumped: list[dict], whole: bool, last: bool = False) -> list[Entry]:
    st = session.refs() if session.exists() else None
    head = st.head_hash if st is not None else None
    have, ends = _history(session, head)
    c = 0
    while c < len(have) and c < len(dumped) and _same(have[c], dumped[c]):
        c += 1
    if c == len(dumped):
        return []  # all of it is there already
    if c == len(have):
        parent, new = head, dumped[c:]  # it extends the history (all_messages())
    elif c > 0:
        parent, new = ends[c - 1], dumped[c:]  # rewritten after message c: branch off there
    elif whole or _starts_conversation(dumped[0]) or (len(dumped) > 1 and len(have) > 1 and _same(have[1], dumped[1])):
        parent, new = None, dumped  # the whole history, rewritten from its first message: a line from the root
    else:
        # messages that do not start the history (new_messages()): already there (an older
        # turn saved again), the end of the history and more, rewritten after a run they
        # share with it, or new (after HEAD)
        at, m = _found_in(have, dumped)
        if m == len(dumped):
            return []
        if at is None:
            parent, new = head, dumped
        elif at + m == len(have):
            parent, new = head, dumped[m:]
        else:
            c = at + m
            parent, new = ends[c - 1], dumped[m:]
    try:
        _adapter().validate_python(new)  # what load_messages will read back: refused now, not then
    except ValueError as e:  # pydantic's ValidationError
        raise InvalidInput(f"not pydantic-ai messages ({str(e).splitlines()[0]}); give ModelRequest / ModelResponse objects") from None
    out: list[Entry] = []
    with session.tape.batch():
        tip = parent
        for kind, payload, meta, time in _entries(new):
            if parent == head:
                e = session.append(kind, payload, meta=meta, time=time)  # at HEAD, after any concurrent append
            else:
                e = session.put_entry(kind, payload, meta, None, time, tip)
            out.append(e)
            tip = e.hash
        if parent != head:
            # the session's lock is held since the first write: a HEAD that moved since it
            # was read (another writer's append) must not be left off every branch
            now = session.refs().head_hash
            if now != head and not last:
                raise _HeadMoved  # (the batch ends with it: nothing is written)
            _move(session, st, now, parent, tip)  # the line it leaves keeps a branch
    if out and out[0].parent == parent:  # nobody appended in between: the history at tip is known
        keep = len(have) if parent == head else c if parent is not None else 0
        _remember(session, tip, have[:keep] + new, ends[:keep] + _ends(out))
    return out


def _entries(messages: list[dict]):
    """(kind, payload, meta, time) for each part of each dumped message."""
    for msg in messages:
        parts = msg.get("parts") or []
        head_meta = {k: v for k, v in msg.items() if k != "parts"}
        if not parts:
            yield "system", {"content": ""}, {MESSAGE: head_meta, HIDDEN: True}, _time(msg)
            continue
        for i, part in enumerate(parts):
            kind, payload, hidden = part_entry(part)
            meta: dict = {PART: part}
            if i == 0:
                meta[MESSAGE] = head_meta
            if hidden:
                meta[HIDDEN] = True
            yield kind, payload, meta, _time(part) or _time(msg)


def _found_in(have: list[dict], dumped: list[dict]) -> tuple[Optional[int], int]:
    """Where dumped's messages stand in the history: (j, m) for the place j whose next m
    messages are dumped's first m, m as large as it gets (the latest such place on a tie);
    (None, 0) when dumped's first message is nowhere in it."""
    best: tuple[Optional[int], int] = (None, 0)
    for j in range(len(have) - 1, -1, -1):
        if not _same(have[j], dumped[0]):
            continue
        m = 1
        while m < len(dumped) and j + m < len(have) and _same(have[j + m], dumped[m]):
            m += 1
        if m > best[1]:
            best = (j, m)
        if m == len(dumped) or j + m == len(have):
            break  # all of it, or the end of the history and more: the latest such place
    return best


def _starts_conversation(msg: dict) -> bool:
    """A request with a system prompt: pydantic-ai puts one only at a conversation's start."""
    return msg.get("kind") == "request" and any(isinstance(p, dict) and p.get("part_kind") == "system-prompt" for p in msg.get("parts") or ())


def _same(stored: Any, given: Any) -> bool:
    """Is a stored message (as the tape reads it) the given one? Equal, except that where a
    redaction left its marker, any value the caller still holds is taken for the one that
    was there: an agent that kept a secret in memory and saves its history again does not
    write the secret back."""
    if stored == given:
        return True
    if is_marker(stored):
        return True
    if type(stored) is dict:
        return type(given) is dict and stored.keys() == given.keys() and all(_same(stored[k], given[k]) for k in stored)
    if type(stored) is list:
        return type(given) is list and len(stored) == len(given) and all(map(_same, stored, given))
    return False


def _ends(entries: list[Entry]) -> list[str]:
    ends: list[str] = []
    for e in entries:
        if MESSAGE in e.meta:
            ends.append(e.hash)
        else:
            ends[-1] = e.hash
    return ends


def _move(session: Session, st, head: str, parent: Optional[str], tip: str) -> None:
    """One ref record for a rewritten history: HEAD (its branch, or itself when detached)
    to the new line's tip; the line it left keeps a branch."""
    if st.branch is None:
        changes: dict[str, Optional[str]] = {"HEAD": tip, f"detached.was-{head[:12]}": head}
    else:
        changes = {st.branch: tip, f"{st.branch}.was-{head[:12]}": head}
    session.set_refs("pydantic-ai", changes)


def load_messages(session: Session, ref: Optional[str] = None) -> list[Any]:
    """The pydantic-ai messages on the path root -> REF (default: HEAD), as ModelMessage objects."""
    if not session.exists():
        return []
    head = session.tape.resolve(ref, session.name) if ref else session.refs().head_hash
    msgs, _ = _history(session, head)
    # copies: pydantic keeps the nested values it is given (a tool call's args), and these are
    # the history cache's and the entries' own; a caller that changes a loaded message in
    # place (a history processor that trims a tool's output) changes only its copy
    return _adapter().validate_python(copy_json(msgs))


def _mark_deferred(session: Session, output: Any) -> None:
    """After a run that ended in DeferredToolRequests: a hidden entry naming the calls that
    wait for ``deferred_tool_results``, so a later run does not take them for calls a crash
    left unanswered (``_close_crashed_calls``)."""
    from pydantic_ai import DeferredToolRequests

    if not isinstance(output, DeferredToolRequests):
        return
    ids = [c.tool_call_id for c in list(output.calls) + list(output.approvals)]
    if not ids:
        return
    head = session.refs().head_hash
    msgs, ends = _history(session, head)
    e = session.append("system", {"content": f"{len(ids)} deferred tool {plural(len(ids), 'call waits for its result', 'calls wait for their results')}"}, meta={HIDDEN: True, DEFERRED: ids})
    if e.parent == head:
        _remember(session, e.hash, msgs, ends)


def _close_crashed_calls(session: Session, history: list[Any]) -> list[Any]:
    """The history a run with a new prompt continues: when it ends with tool calls that no
    result answers and that no run deferred (the process died while they ran, e.g. kill -9),
    they are closed with pydantic-ai's own repair (a ``ToolReturnPart`` with outcome
    ``interrupted`` and pydantic-ai's synthesized-return marker), as ``ctape context``
    closes a pending call. pydantic-ai would refuse the prompt otherwise ("unprocessed tool
    calls"). A run without a prompt resumes the calls instead, and this is not called."""
    from pydantic_ai.messages import ModelResponse

    try:
        from pydantic_ai.messages import repair_messages
    except ImportError:  # an older pydantic-ai: its own refusal says what to do
        return history
    last = history[-1] if history else None
    if not isinstance(last, ModelResponse) or not last.tool_calls:
        return history
    head = session.refs().head_hash
    _, ends = _history(session, head)
    h = head
    while h is not None and h != ends[-1]:  # the entries after the last message
        e = session.tape.read_entry(h)
        if isinstance(e.meta, dict) and DEFERRED in e.meta:
            return history  # deferred on purpose: left for deferred_tool_results
        h = e.parent
    return history + repair_messages([last])[1:]


def _loaded(session: Session, prompt: bool) -> list[Any]:
    """The history a run starts from (TapeHistory.before_run): a run with a new prompt has
    calls a dead process left unanswered closed (_close_crashed_calls)."""
    history = load_messages(session)
    return _close_crashed_calls(session, history) if prompt else history


def _after_run(session: Session, messages: list[Any], output: Any) -> None:
    save_messages(session, messages, whole=True)
    _mark_deferred(session, output)


def _time(d: dict) -> Optional[str]:
    t = d.get("timestamp")
    return t if isinstance(t, str) else None


# -- the capability -------------------------------------------------------------------------------------


def _capability_base():
    try:
        from pydantic_ai.capabilities import AbstractCapability
    except ImportError as e:  # pydantic-ai 1.x, which the extra allowed until 2026-12-06 (an audit met it)
        raise ImportError("TapeHistory needs pydantic-ai 2.0 or later (capabilities): pip install -U 'pydantic-ai-slim>=2.0' (ctape's pydantic-ai extra)") from e

    return AbstractCapability


def __getattr__(name: str):
    if name == "TapeHistory":
        cls = _make_capability()
        globals()["TapeHistory"] = cls
        return cls
    raise AttributeError(name)


def _make_capability():
    base = _capability_base()

    @dataclasses.dataclass
    class TapeHistory(base):  # type: ignore[misc, valid-type]
        """A pydantic-ai capability that keeps an agent's runs on a ctape session.

        ``Agent(model, capabilities=[TapeHistory(session)])``: a run given no
        ``message_history`` continues the session's history (``load=False`` to start
        each run fresh); every message the run adds is saved as soon as the next one
        is complete (a model response when its node ends, a request once the model has
        answered it; a crash loses at most the message in progress), and the rest when
        the run ends. Saving is idempotent (see ``save_messages``), so passing
        ``message_history=load_messages(session)`` yourself stores nothing twice."""

        session: Session
        load: bool = True
        _start: int = dataclasses.field(default=0, repr=False)

        async def for_run(self, ctx):
            return dataclasses.replace(self)  # per-run state: where the run's messages start

        # The reads and saves run in a worker thread (asyncio.to_thread), as the other
        # integrations' do: each save is an fsync, and may wait for another thread's batch or
        # another process's lock on the session; run on the event loop, they held every other
        # task of the loop (a 3 s stall beside another process's batch; found by an audit).

        async def before_run(self, ctx) -> None:
            if self.load and not ctx.messages:
                prompt = getattr(ctx, "prompt", None) is not None
                ctx.messages[:0] = await asyncio.to_thread(_loaded, self.session, prompt)
            self._start = len(ctx.messages)
            if ctx.messages:  # a given history that is not on the tape yet
                await asyncio.to_thread(save_messages, self.session, list(ctx.messages), whole=True)

        async def after_node_run(self, ctx, *, node, result):
            done = list(ctx.messages)
            if done and getattr(done[-1], "kind", None) != "response":
                done = done[:-1]  # a request may still be completed (instructions, parts) by the next node
            if len(done) > self._start:
                await asyncio.to_thread(save_messages, self.session, done, whole=True)
            return result

        async def after_run(self, ctx, *, result):
            await asyncio.to_thread(_after_run, self.session, result.all_messages(), getattr(result, "output", None))
            return result

    TapeHistory.__module__ = __name__
    return TapeHistory
