"""Interrupts on the tape: ``_Interrupts``, the part of ``TapeSaver`` that writes an
``interrupt(value)`` as a hidden ``tool_call`` named ``WAITING`` (``ctape status`` shows
the thread waiting for input) and its resume value, or a note, as the hidden
``tool_result`` that answers it.
"""

from __future__ import annotations

from typing import Any, Optional

from ...model.models import HIDDEN
from .codec import _is_json
from .index import KEY, _Thread

WAITING = "waiting_for_input"  # the name of the (hidden) tool call an interrupt() makes
_INTERRUPT, _RESUME = "__interrupt__", "__resume__"
_NULL_TASK = "00000000-0000-0000-0000-000000000000"  # the task id of Command(resume=...) writes
# the hidden answers of an interrupt the graph went past without a resume value on the tape
NEW_INPUT = "[no answer: the graph was given new input]"
NOT_SAVED = "[no answer on the tape: the graph went on past this interrupt]"
_NONE = object()


class _Interrupts:
    """Interrupts, a part of ``TapeSaver`` (saver.py): it uses the saver's tape and codec;
    ``_Writing`` calls it when it stores a checkpoint or pending writes."""

    def _interrupt_entries(self, s, th: _Thread, ns: str, cid: str, segment: str, payload: dict, tip: str, extra: Optional[dict] = None) -> str:
        """An interrupt() is a hidden tool call named WAITING, its value as JSON where it can
        be: `ctape status` lists it as pending until Command(resume=...) answers it.

        A task's own `__resume__` writes hold the values its interrupt() calls took, in
        order; LangGraph writes the list again as each call reads it, so a payload can hold
        several, the last the longest. A call records how many values its task had taken
        when it asked ("taken"): the task's list answers it with the value at that place."""
        written: list = []
        task = payload["task_id"]
        values = self._resume_values(payload) if task != _NULL_TASK else []
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
                                                "task_id": task, "taken": len(values), **(extra or {})}}
                    e = s.put_entry("tool_call", call, meta, None, None, tip)
                    written.append(e)
                    tip = e.hash
            elif ch == _RESUME and task == _NULL_TASK:
                value = self.codec.dec(enc)
                if self._taken.pop(th.name, _NONE) == _readable(value):
                    # Command(resume=value)'s own write (the root's), after the task that
                    # took the value (maybe in a subgraph): its answer is on the tape; the
                    # call waiting now is the task's next
                    continue
                tip = self._answer_interrupts(s, th, ns, cid, tip, value, written, None, segment, extra)
        if values:
            tip = self._answer_task_resume(s, th, ns, cid, tip, task, values, written, segment, extra)
        for e in written:
            th.add(e)
        return tip

    def _answer_task_resume(self, s, th: _Thread, ns: str, cid: str, tip: str, task_id: str, values: list, written: list,
                            segment: str, extra: Optional[dict]) -> str:
        """A task's resume values (`_interrupt_entries`) answer its calls still waiting.
        `Command(resume={interrupt_id: value})` answers only this way (no write of the null
        task). One answered already (by a plain Command(resume=...), whose write comes
        first) is not pending any more: nothing is written twice. A call asked in the same
        payload has taken every value: it waits.

        The call waiting on this line may have been written by a caller of the task (the
        task's subgraph's caller, or a functional API entrypoint awaiting an @task): each
        writes the interrupt with its own task id, one id, and the first to arrive is the
        call. The task's own calls are then the ids in its own `__interrupt__` writes for
        this checkpoint, at the places they record (`_asked_by`).

        A call the saver closed with a note because a later step arrived first
        (`_went_past`: this write came later still) is answered after the note: the tape
        then holds both, and the answer is the last word."""
        waiting = {c["call_id"]: c for c in self.tape.derived(tip)["pending"] if c.get("name") == WAITING}
        places = {}  # call id -> how many values the task had taken when it asked
        for call_id, c in waiting.items():
            lg = _lg_of(self._brief(c["hash"]))
            if lg.get("task_id") == task_id:
                places[call_id] = lg.get("taken")
        if not places:
            places = self._asked_by(th, ns, cid, task_id)
        asked_now = {e.hash for e in written}
        for call_id, at in places.items():
            c = waiting.get(call_id)
            if c is None and call_id not in th.noted:
                continue
            if c is not None and c["hash"] in asked_now:
                continue
            at = len(values) - 1 if at is None else at  # (a call written before calls recorded their place)
            if at >= len(values):
                continue
            p = {"call_id": call_id, "output": _readable(values[at])}
            lg = {"type": "resume", "checkpoint_ns": ns, "checkpoint_id": cid, "segment": segment or cid, **(extra or {})}
            if c is None:
                lg.update(call_id=call_id, late=True)  # after the saver's note
            e = s.put_entry("tool_result", p, {HIDDEN: True, KEY: lg}, None, None, tip)
            written.append(e)
            th.add(e)
            tip = e.hash
            # LangGraph writes a plain Command(resume=value) first (the null task's write)
            # and the task's list after it, from worker threads: when the task's comes
            # first, the null task's may still arrive, and must not answer the next call
            self._taken[th.name] = p["output"]
        return tip

    def _asked_by(self, th: _Thread, ns: str, cid: str, task_id: str) -> dict[str, Optional[int]]:
        """The interrupt ids a task's own `__interrupt__` writes for checkpoint (ns, cid)
        hold, each with the number of values the task had taken when it asked."""
        out: dict[str, Optional[int]] = {}
        for _, h in th.writes.get((ns, cid), ()):
            payload = self.tape.read_entry(h).payload
            if not isinstance(payload, dict) or payload.get("task_id") != task_id:
                continue
            taken = len(self._resume_values(payload))
            for _, ch, enc in payload["writes"]:
                if ch == _INTERRUPT:
                    for intr in self.codec.dec(enc) or ():
                        out.setdefault(str(getattr(intr, "id", "") or cid), taken)
        return out

    def _resume_values(self, payload: dict) -> list:
        """The values a task's interrupt() calls took, from its `__resume__` writes in one
        payload of writes: LangGraph writes the list again as each call reads it, the last
        the longest."""
        lists = [self.codec.dec(enc) for _, ch, enc in payload["writes"] if ch == _RESUME]
        return next((v for v in reversed(lists) if type(v) is list), [])

    def _went_past(self, s, th: _Thread, cid: str, parent_id: Optional[str], source: str, saves_writes: bool, tip: str, written: list) -> str:
        """Answer with a note the interrupts a new root checkpoint cid shows the graph went
        past, pending at tip, its parent's line: LangGraph lists them no more.

        - New input (source "input") instead of Command(resume=...): every interrupt asked
          before it will not be answered.
        - A step saved (source "loop") after the step that was interrupted: with
          durability="exit", LangGraph saves no resume value (nor new input's checkpoint),
          so every interrupt asked before it. Otherwise a task that takes its resume value
          writes it for the parent checkpoint, and that write may arrive after this
          checkpoint (saves come from worker threads): only an interrupt asked before the
          parent, whose step the graph went on from without answering it (a fork by
          update_state, then a run from the fork). A fork by update_state itself keeps it
          waiting: a resume there answers it.

        Checkpoint ids grow with time (LangGraph orders a thread's checkpoints by them), and
        an interrupt's entry holds the id of the checkpoint its task ran from; a subgraph's
        holds one of the subgraph's, made after its caller's: a subgraph run by this very
        step may write its interrupt before the step's checkpoint arrives, and it still
        waits."""
        before = cid if source == "input" or not saves_writes else parent_id
        if before is None:
            return tip
        pending = [c for c in self.tape.derived(tip)["pending"] if c.get("name") == WAITING]
        asked = [c for c in pending if (_lg_of(self._brief(c["hash"])).get("checkpoint_id") or "") < before]
        note = NEW_INPUT if source == "input" else NOT_SAVED
        return self._answer_interrupts(s, th, "", cid, tip, None, written, note, calls=asked)

    def _answer_interrupts(self, s, th: _Thread, ns: str, cid: str, tip: str, value: Any, written: list, note: Optional[str], segment: Optional[str] = None, extra: Optional[dict] = None,
                           calls: Optional[list] = None) -> str:
        """Hidden tool results for the interrupts pending at tip (or the given calls of
        those): the resume value, or a note."""
        pending = calls if calls is not None else [c for c in self.tape.derived(tip)["pending"] if c.get("name") == WAITING]
        if not pending:
            return tip
        by_id = isinstance(value, dict) and value and all(k in {c["call_id"] for c in pending} for k in value)
        for c in pending:
            if by_id and c["call_id"] not in value:
                continue
            answer = value[c["call_id"]] if by_id else value
            p = {"call_id": c["call_id"], "output": _readable(answer) if note is None else note}
            lg = {"type": "resume", "checkpoint_ns": ns, "checkpoint_id": cid, "segment": segment or cid, **(extra or {})}
            if note == NOT_SAVED:
                lg.update(call_id=c["call_id"], noted=True)  # a task's late resume write may still answer it
            meta = {HIDDEN: True, KEY: lg}
            e = s.put_entry("tool_result", p, meta, None, None, tip)
            written.append(e)
            tip = e.hash
        return tip


def _lg_of(e) -> dict:
    """LangGraph's ids of an entry (or its brief) the saver wrote; {} for another."""
    m = e.meta
    lg = m.get(KEY) if isinstance(m, dict) else None
    return lg if isinstance(lg, dict) else {}


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
