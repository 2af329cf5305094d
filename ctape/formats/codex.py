"""Codex CLI rollout files (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`).

Each line `{"timestamp", "type", "payload"}` becomes one entry (Codex writes one item
per line), chained in file order on branch `main`; a `compacted` line becomes its anchor
followed by the items of its `replacement_history`, where the agent's view starts.
The line itself is kept in `meta["codex"]`, so `export --format codex` gives the
file back record for record. docs/import.md has the mapping table.
"""

from __future__ import annotations

import json
import re
from collections import deque
from typing import Any, Iterator, Optional

from ..errors import InvalidInput
from ..model.canonical import normal_time
from ..model.models import HIDDEN
from . import _common as c

FMT = "codex"
LEGACY_ITEMS = {"message", "reasoning", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output", "web_search_call", "local_shell_call"}


def is_record(v: Any) -> bool:
    """A line Codex could have written: the envelope, or the legacy bare header/items."""
    if not isinstance(v, dict):
        return False
    if isinstance(v.get("type"), str) and isinstance(v.get("payload"), dict):
        return True
    t = v.get("type")
    return (isinstance(t, str) and t in LEGACY_ITEMS) or v.get("record_type") == "state" or ("id" in v and "instructions" in v)


def session_id(v: Any) -> Optional[str]:
    if not isinstance(v, dict):
        return None
    if v.get("type") == "session_meta" and isinstance(v.get("payload"), dict):
        return v["payload"].get("id")
    if "id" in v and "instructions" in v:  # legacy header
        return v.get("id")
    return None


def record_time(v: Any) -> Optional[str]:
    if not isinstance(v, dict):
        return None
    t = v.get("timestamp")
    if t is None and isinstance(v.get("payload"), dict):
        t = v["payload"].get("timestamp")
    if isinstance(t, str) and t:  # c.valid_time(t)
        try:
            return normal_time(t)
        except InvalidInput:
            return None
    return None


# -- mapping --------------------------------------------------------------------------


def _hidden(label: str, **extra) -> tuple[str, dict, bool]:
    return ("system", {"content": label, **extra}, True)


def _content(parts: Any) -> Any:
    """Text parts joined into one string; anything else (images) kept as the part list."""
    if isinstance(parts, list) and all(isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text") and isinstance(p.get("text") or "", str) for p in parts):
        return "".join(p.get("text") or "" for p in parts)
    return parts if isinstance(parts, (str, list)) else c.text_of(parts)


def output_of(out: Any) -> Any:
    """A tool output as the model reads it: a string stays one; a list of content items
    (`input_text`, `input_image`: newer Codex writes outputs so, e.g. a `custom_tool_call`
    named `exec`) becomes its text, or text and image parts; anything else is kept."""
    if not isinstance(out, list) or not out or not all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in out):
        return out
    parts: list = []
    for p in out:
        if p["type"] in ("input_text", "output_text", "text") and isinstance(p.get("text"), str):
            if parts and parts[-1]["type"] == "text":
                parts[-1] = {"type": "text", "text": parts[-1]["text"] + p["text"]}
            else:
                parts.append({"type": "text", "text": p["text"]})
        elif p["type"] in ("input_image", "image_url") and isinstance(p.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": p["image_url"]}})
        else:
            return out  # something this does not know: kept as it is
    if len(parts) == 1 and parts[0]["type"] == "text":
        return parts[0]["text"]
    return parts


def search_call_id(item: dict, number: int) -> Optional[str]:
    """The id a `tool_search_call` is known by: its call_id, else (a search the server ran
    writes none) its item id, else its line."""
    cid = item.get("call_id")
    if isinstance(cid, str):
        return cid
    return item["id"] if isinstance(item.get("id"), str) else f"tool_search@{number}"


def map_item(item: dict, call_id: Any = None) -> tuple[str, dict, bool]:
    """A Responses API item (response_item payload, or a legacy bare line) as (kind,
    payload, hidden); `call_id` stands in for an item that names none (tool search)."""
    t = item.get("type")
    call_id = item.get("call_id") if isinstance(item.get("call_id"), str) else call_id
    if t == "message":
        role = item.get("role")
        kind = {"user": "user", "assistant": "assistant"}.get(role if isinstance(role, str) else None, "system")
        return (kind, {"content": _content(item.get("content"))}, False)
    if t == "reasoning":
        summary = c.text_of(item.get("summary"))
        return ("assistant", {"content": summary, "type": "reasoning"}, True)
    if t == "agent_message":  # a message between agents: its text, unless encrypted
        parts = item.get("content") if isinstance(item.get("content"), list) else []
        texts = [p.get("text") for p in parts if isinstance(p, dict)]
        if texts and all(isinstance(x, str) for x in texts) and "\n".join(texts).strip():
            return ("assistant", {"content": "\n".join(texts)}, False)
        return _hidden("codex agent_message", type=t)
    if isinstance(t, str) and t.endswith("_output") and isinstance(call_id, str):
        # function_call_output, custom_tool_call_output, tool_search_output (its `tools`)
        return ("tool_result", {"call_id": call_id, "output": output_of(item["output"]) if "output" in item else item.get("tools")}, False)
    if isinstance(t, str) and t.endswith("_call") and isinstance(call_id, str):
        name = item.get("name") if isinstance(item.get("name"), str) else t.removesuffix("_call")
        args = c.tool_arguments(item["arguments"]) if "arguments" in item else item.get("input", item.get("action"))
        return ("tool_call", {"call_id": call_id, "name": name, "arguments": args}, False)
    return _hidden(f"codex {t}", type=t)


def map_record(v: Any, spoken: bool = False) -> tuple[str, dict, bool]:
    """One line as (kind, payload, hidden); `spoken`: an event_msg user_message or
    agent_message that is the only record of its message (see `Voices`)."""
    if not isinstance(v, dict):
        return _hidden("codex record")
    rtype, p = v.get("type"), v.get("payload")
    if not isinstance(p, dict):  # legacy layout: bare header, state markers and items
        if "instructions" in v and isinstance(v.get("instructions"), str):
            return ("system", {"content": v["instructions"]}, False)
        if isinstance(rtype, str) and rtype in LEGACY_ITEMS:
            return map_item(v)
        return _hidden("codex " + str(rtype or v.get("record_type")))
    if rtype == "session_meta":
        text = (p.get("base_instructions") or {}).get("text") if isinstance(p.get("base_instructions"), dict) else None
        if isinstance(text, str) and text:
            return ("system", {"content": text}, False)
        return _hidden("codex session_meta")
    if rtype == "response_item":
        return map_item(p)
    if rtype == "compacted":
        return ("anchor", {"name": "compacted", "summary": p.get("message"), "compaction": True, "keep": []}, False)
    if spoken and rtype == "event_msg" and p.get("type") == "user_message":
        return ("user", {"content": _event_content(p)}, False)
    if spoken and rtype == "event_msg" and p.get("type") == "agent_message":
        return ("assistant", {"content": p.get("message") if isinstance(p.get("message"), str) else ""}, False)
    if rtype == "event_msg" and p.get("type") == "error" and isinstance(p.get("message"), str):
        return ("error", {"message": p["message"]}, True)
    sub = p.get("type")
    return _hidden(f"codex {rtype}" + (f" {sub}" if isinstance(sub, str) else ""), type=rtype)


def map_entries(v: Any, spoken: bool = False, instructions: Optional[str] = None) -> list[tuple[str, dict, bool]]:
    """One line as its entries: one, except a `compacted` line, which is the anchor where
    Codex replaced its history, then the items of its `replacement_history` (what Codex
    sends from then on, after its instructions: the anchor's `keep` names the entry of
    those, `instructions`)."""
    first = map_record(v, spoken)
    if first[0] != "anchor":
        return [first]
    first[1]["keep"] = [instructions] if instructions else []
    items = v["payload"].get("replacement_history")
    rest = [map_item(i) if isinstance(i, dict) else _hidden("codex replacement item") for i in items] if isinstance(items, list) else []
    return [first, *rest]


def is_instructions(v: Any, kind: str, hide: bool) -> bool:
    """A session_meta line that gave the system message (base_instructions)."""
    return kind == "system" and not hide and isinstance(v, dict) and v.get("type") == "session_meta"


def _event_content(p: dict) -> Any:
    text = p.get("message") if isinstance(p.get("message"), str) else ""
    images = [u for u in p.get("images") or [] if isinstance(u, str)] if isinstance(p.get("images"), list) else []
    if not images:
        return text
    return [{"type": "text", "text": text}] + [{"type": "image_url", "image_url": {"url": u}} for u in images]


# -- which records are the conversation ---------------------------------------------------
#
# Codex writes a message twice in most versions: the `response_item` message (what is
# replayed to the model) and an `event_msg` user_message / agent_message (the UI stream).
# Newer versions write some requests only as the event. An event is the conversation
# when no response_item message of its role with the same text is in its run: the lines
# between two records of the other side (for a user message: assistant messages, tool
# calls and outputs; for an agent message: user messages, tool calls and outputs).

_PLACEHOLDER = re.compile(r"\[REDACTED_[A-Z_]+ (len=\d+ sha=[0-9a-f]+)\]")


def _said(text: Any) -> int:
    """A key for a message's text: equal for the two records of one message
    (sanitised captures name the placeholder differently in the two records)."""
    t = text if isinstance(text, str) else c.text_of(text)
    if "[REDACTED_" in t:  # (the substitution costs most of this; most texts hold none)
        t = _PLACEHOLDER.sub(r"[REDACTED \1]", t)
    return hash(t.strip())


def _item_keys(content: Any) -> tuple[int, ...]:
    """Keys an event's text may match: the whole text, and the first text part (with
    images, Codex writes the request, then `<image>`, the image, `</image>` as parts)."""
    keys = [_said(_content(content))]
    if isinstance(content, list):
        first = next((p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)), None)
        if first is not None:
            keys.append(_said(first))
    return tuple(keys)


TURN_ENDS = ("task_complete", "turn_aborted")  # events after a turn's last record


def classify(v: Any) -> Optional[tuple[str, tuple[int, ...]]]:
    """("U"|"A"|"EU"|"EA", text keys) for the records of a message, ("X", ()) for a tool
    call or output and for the end of a turn (TURN_ENDS: a watcher that reads up to it
    knows an agent event without an echo so far is the message), None for the rest."""
    if not isinstance(v, dict):
        return None
    p = v.get("payload") if isinstance(v.get("payload"), dict) else (v if isinstance(v.get("type"), str) and v["type"] in LEGACY_ITEMS else None)
    if p is None:
        return None
    t = p.get("type")
    if v.get("type") == "event_msg":
        if t in ("user_message", "agent_message"):
            return ("EU" if t == "user_message" else "EA", (_said(p.get("message") if isinstance(p.get("message"), str) else ""),))
        if t in TURN_ENDS:  # the turn is over: no echo of its messages comes after it
            return ("X", ())
        return None
    if v.get("type") not in ("response_item", None) and not (isinstance(v.get("type"), str) and v["type"] in LEGACY_ITEMS):
        return None
    if t == "message" and p.get("role") in ("user", "assistant"):
        return ("U" if p["role"] == "user" else "A", _item_keys(p.get("content")))
    if isinstance(t, str) and (t.endswith("_call") or t.endswith("_output")):
        return ("X", ())
    return None


class Voices:
    """Which events are the only record of their message, a line at a time: an event is
    answered once its run closes (at the next record of the other side, or at a turn's
    end), or, at the end of what a file holds, as `end_unfinished` decides."""

    SIDES = (("U", "EU", ("A", "EA", "X")), ("A", "EA", ("U", "EU", "X")))

    def __init__(self):
        self.runs = (_Run(), _Run())
        self.voiced: set[int] = set()
        self.open: set[int] = set()  # events whose run goes on: not answered yet

    def add(self, number: int, cls: Optional[tuple[str, tuple[int, ...]]]) -> None:
        if cls is None:
            return
        for (item, event, ends), run in zip(self.SIDES, self.runs):
            if cls[0] in ends:
                self._close(run)
            elif cls[0] == item:
                for key in set(cls[1]):
                    run.items.setdefault(key, deque()).append(number)
            elif cls[0] == event:
                run.events.append((number, cls[1][0]))
                self.open.add(number)

    def end_unfinished(self) -> None:
        """The end of what a file holds now, its last turn perhaps not over (no turn end
        closed the runs): the open events are decided as a reader that cannot wait decides
        them (voiced_so_far), so that an import of the file now and of the file grown give
        its lines the same entries. Closing the runs here voiced an agent event whose echo
        was yet to be written, and the grown file's import, finding the echo, made it hidden: a new
        entry, and every later one on a new thread."""
        self.voiced |= self.voiced_so_far()
        self.open.clear()
        self.runs = (_Run(), _Run())

    def _close(self, run: "_Run") -> None:
        for number, _ in run.events:
            self.open.discard(number)
        self.voiced |= run.close()

    def voiced_so_far(self) -> set[int]:
        """The open user events that no item echoes so far, for a reader that must decide
        before their runs end (`ctape watch` at the end of what a file holds now); the runs
        go on as they are. A user event comes after the item that echoes it (Codex writes
        the request, then its event: so in every real rollout of tests/fixtures), so one
        without an echo so far has none. An agent event comes before its echo: one without
        an echo so far is left out (not voiced), as a reader that cannot wait must take it.
        An event an item echoes stays echoed whatever follows (the first event takes the
        first item)."""
        return self.runs[0].voiced_now() & self.open


class _Run:
    """The messages of one side between two records of the other side."""

    def __init__(self):
        self.items: dict[int, deque] = {}  # text key -> the run's items (by line) with that key
        self.events: list[tuple[int, int]] = []

    def close(self) -> set[int]:
        """The run's events that no item echoes; starts a new run."""
        voiced = self.voiced_now()
        self.items, self.events = {}, []
        return voiced

    def voiced_now(self) -> set[int]:
        """The run's events that no item of the run so far echoes."""
        used: set[int] = set()
        voiced = set()
        for number, key in self.events:
            found = deque(self.items.get(key) or ())
            while found and found[0] in used:
                found.popleft()
            if found:
                used.add(found.popleft())
            else:
                voiced.add(number)
        return voiced


# -- import ---------------------------------------------------------------------------


def import_files(tape, files: list[str], session: Optional[str], progress: bool = False) -> list[str]:
    return [import_file(tape, path, session, progress) for path in files]


def import_file(tape, path: str, session: Optional[str], progress: bool = False) -> str:
    from . import seen

    read = seen.prepass(path)  # a line too long is refused here, before anything is parsed
    written = tape.store.entries_written
    got = seen.lookup(tape, path, FMT, {"session": session}, read)
    if got is not None:  # the same bytes, imported before, all there: nothing new
        return c.summary_line(path, got["session"], got.get("records", 0), 0, 1, [], False)
    # two readers of the file: the scan's, and one that reads lines again by offset
    with c.open_source(path) as f, c.open_source(path) as again:
        bar = c.Progress(path, progress)
        with tape.batch():
            st = _Stream(tape, f, again, path, session, bar)
            st.run()
            changes, ref_notes = c.safe_refs(tape, st.s, {"main": st.parent})
            if changes:
                st.s.set_refs("import", changes, source=FMT)
        bar.done()
    if st.first_time and st.parent is not None:  # a file with no time takes its session's: not kept
        seen.remember(tape, path, FMT, {"session": session}, read, session=st.s.name, refs={"main": st.parent}, records=st.records)
    notes = [f"kept {st.kept_raw} " + c.plural(st.kept_raw, "line that is not JSON as it is", "lines that are not JSON as they are") if st.kept_raw else "", st.truncated, *ref_notes]
    return c.summary_line(path, st.s.name, st.records, st.entries, 1, notes, bool(changes), tape.store.entries_written - written)


HOLD = 8 << 20  # bytes of parsed lines kept while they wait to be imported


class _Stream:
    """One pass over a rollout that also imports it, so that each line is parsed once (it
    was twice: a scan for the session, the first time and the voiced events, then a read
    of every line again by offset to import it).

    Lines are imported in file order once what they need is known: the session (its id,
    else the file's name, unless -s names it), the first time (which the lines before it
    take), a record (a file with none is refused before anything is written), and for an
    event that may be the only record of its message, the end of its run (Voices). The
    newest line waits for the next one (the last line, when it is not JSON, is one being
    written, and is skipped). Up to HOLD bytes of waiting lines keep their parsed values;
    past that the values are dropped and read again by offset when their turn comes, so
    memory holds a few lines' values, not the file's."""

    def __init__(self, tape, f, again, path: str, session: Optional[str], bar: c.Progress):
        self.tape, self.f, self.again, self.path, self.session, self.bar = tape, f, again, path, session, bar
        self.queue: deque = deque()  # lines read, not imported yet
        self.held = 0  # bytes of the queued lines whose values are kept
        self.voices = Voices()
        self.valid = 0
        self.first_time: Optional[str] = None
        self.sid: Optional[str] = None
        self.s = None  # the session, once known
        self.clock: Optional[c.Clock] = None
        self.parent: Optional[str] = None
        self.instructions: Optional[str] = None
        self.records = self.entries = self.kept_raw = 0
        self.truncated = ""

    def run(self) -> None:
        queue, voices = self.queue, self.voices
        add, still_open = voices.add, voices.open
        for ln in c.scan_lines(self.f):
            if ln.ok:
                v = ln.value
                add(ln.number, classify(v))
                if not self.valid:
                    self.valid = is_record(v)
                if not self.first_time:
                    self.first_time = record_time(v)
                if not self.sid:
                    self.sid = session_id(v)
                if v is not None:
                    self.held += ln.length
            queue.append(ln)
            if self.s is None and self.valid and self.first_time and (self.session or self.sid):
                self._start()
            if self.s is not None and len(queue) > 1 and queue[0].number not in still_open:
                self._put_ready(reading=True)
            if self.held > HOLD:
                for waiting in queue:
                    waiting.value = None  # read again by offset when it is imported
                self.held = 0
        self.truncated = c.unfinished_note(queue)
        if not self.valid:
            raise InvalidInput(f"{self.path}: no Codex rollout record found (expected JSON lines like {{\"timestamp\", \"type\", \"payload\"}}); is this a Codex session file?")
        voices.end_unfinished()  # a finished turn's runs were closed by its end (TURN_ENDS)
        if self.s is None:
            self._start()
        self._put_ready(reading=False)

    def _start(self) -> None:
        self.s = self.tape.session(c.check_target(self.session or c.session_name(self.sid, self.path)))
        self.clock = c.Clock(self.first_time or c.undated_time(self.tape, self.s, self.path))

    def _put_ready(self, reading: bool) -> None:
        """Import the queued lines that can be, in order (while reading, all but the newest)."""
        q, still_open, voiced, bar = self.queue, self.voices.open, self.voices.voiced, self.bar
        while len(q) > reading and q[0].number not in still_open:
            ln = q.popleft()
            value = ln.value
            if value is None:
                value = c.read_at(self.again, ln)  # dropped, or not JSON (its bytes)
            else:
                self.held -= ln.length
                ln.value = None
            self.kept_raw += not ln.ok
            self.parent, self.instructions, n = _put(self.s, ln.number, value, ln.ok, self.parent, self.clock, ln.number in voiced, self.instructions)
            self.entries += n
            self.records += 1
            if bar.on:
                bar.update(ln.offset)


# -- export ---------------------------------------------------------------------------


# what a native entry of these kinds becomes (formats.export_notes tells the user)
DEMOTES = {"anchor": "background events"}

# an error that answers a tool call: how it is written, what an import reads back (c.tallied)
ANSWERS = ("a function_call_output", "a tool_result entry without is_error (a Codex output has no such flag)")


def export(tape, ref: str, tally: Optional[dict] = None) -> Iterator[str]:
    return c.export_records(tape, ref, FMT, synthesize, tally=tally)


def synthesize(e) -> Optional[dict]:
    """A rollout line for an entry that did not come from Codex."""
    p = e.payload if isinstance(e.payload, dict) else {}
    if isinstance(e.meta, dict) and e.meta.get(HIDDEN):
        return None
    if e.kind in ("user", "assistant", "system"):
        role = {"system": "developer"}.get(e.kind, e.kind)
        ptype = "output_text" if e.kind == "assistant" else "input_text"
        content = p.get("content")
        parts = [{"type": ptype, "text": content}] if isinstance(content, str) else c.parts_for(content, FMT, e.kind)
        if c.only_thoughts(content, parts):
            return None
        item = {"type": "message", "role": role, "content": parts}
    elif e.kind == "tool_call":
        args = p.get("arguments")
        item = {"type": "function_call", "name": p.get("name"), "arguments": args if isinstance(args, str) else json.dumps(args), "call_id": p.get("call_id")}
    elif e.kind == "tool_result":
        out = p.get("output")
        text = c.tool_output(out)
        item = {"type": "function_call_output", "call_id": p.get("call_id"), "output": text if text is not None else json.dumps(out)}
    elif e.kind == "anchor" and p.get("compaction") is True:  # where an agent replaced its history
        return {"timestamp": e.time, "type": "compacted", "payload": {"message": p.get("summary") or p.get("name"), "replacement_history": []}}
    elif e.kind == "anchor":  # a milestone: an event Codex shows and never sends to the model
        return {"timestamp": e.time, "type": "event_msg", "payload": {"type": "background_event", "message": c.anchor_label(p)}}
    elif e.kind == "error":
        return {"timestamp": e.time, "type": "event_msg", "payload": {"type": "error", "message": p.get("message")}}
    else:  # streaming: the partial text of an assistant message
        item = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": p.get("content")}]}
    return {"timestamp": e.time, "type": "response_item", "payload": item}


# -- incremental import (ctape watch) ---------------------------------------------------------


def _put(s, number: int, value: Any, ok: bool, parent: Optional[str], clock: c.Clock, spoken: bool, instructions: Optional[str]):
    """One line as its entries after `parent`: (the last entry's hash, the instructions
    entry so far, how many entries)."""
    if not ok:
        meta = c.raw_line_meta(FMT, value, number)
        return s.put_entry("system", {"content": "codex line that is not JSON"}, meta, None, clock.last, parent).hash, instructions, 1
    t = record_time(value)  # clock.take(t), t being in normal form already
    t = clock.last = t or clock.last
    first = map_record(value, spoken)
    kind, payload, hide = first
    if kind != "anchor" and _search_item(value) is None:  # one line, one entry: most lines
        meta = {FMT: value, c.LINE: number}
        if hide:
            meta[HIDDEN] = True
        parent = s.put_entry(kind, payload, meta, None, t, parent).hash
        if kind == "system" and not hide and value.get("type") == "session_meta":  # is_instructions
            instructions = parent
        return parent, instructions, 1
    parts = map_entries(value, spoken, instructions)
    search = _search_item(value)
    if search is not None and not isinstance(search.get("call_id"), str):
        if search.get("type") == "tool_search_call":
            parts = [map_item(search, search_call_id(search, number))]
        else:
            cid = _open_search(s, parent)
            parts = [map_item(search, cid)] if cid else parts
    for k, (kind, payload, hide) in enumerate(parts):
        meta = c.record_meta(FMT, value, number, hide) if k == 0 else c.part_meta(FMT, number, k, hide)
        parent = s.put_entry(kind, payload, meta, None, t, parent).hash
        if k == 0 and is_instructions(value, kind, hide):
            instructions = parent
    return parent, instructions, len(parts)


def _search_item(v: Any) -> Optional[dict]:
    """The tool_search_call / tool_search_output item of a line, if it is one."""
    p = v.get("payload") if isinstance(v, dict) and v.get("type") == "response_item" else None
    if isinstance(p, dict) and p.get("type") in ("tool_search_call", "tool_search_output"):
        return p
    return None


SEARCH_BACK = 256  # how many entries back a tool_search_output without a call_id looks for its call


def _open_search(s, h: Optional[str]) -> Optional[str]:
    """The call_id of the newest tool_search call before h that has no result yet: the
    call a tool_search_output that names none answers (the server ran the search)."""
    answered: set = set()
    for _ in range(SEARCH_BACK):
        if h is None:
            return None
        e = s.tape.read_entry(h)
        p = e.payload if isinstance(e.payload, dict) else {}
        if e.kind == "tool_result":
            answered.add(p.get("call_id"))
        elif e.kind == "tool_call" and p.get("name") == "tool_search" and p.get("call_id") not in answered:
            return p.get("call_id")
        h = e.parent
    return None


def _instructions_before(s, h: Optional[str]) -> Optional[str]:
    """The newest entry at or before h that holds Codex's instructions (session_meta)."""
    while h is not None:
        e = s.tape.read_entry(h)
        m = e.meta if isinstance(e.meta, dict) else {}
        if is_instructions(m.get(FMT), e.kind, bool(m.get(HIDDEN))):
            return h
        h = e.parent
    return None


UNKNOWN = "?"  # the instructions entry before a line, not looked for yet (no hash looks like it)


def put_line(s, number: int, value: Any, ok: bool, parent: Optional[str], clock: c.Clock, spoken: bool = False,
             instructions: Optional[str] = UNKNOWN) -> tuple[str, Optional[str]]:
    """One line as its entries after `parent`, exactly as import_file makes them (`ctape
    watch` imports the lines appended since its last pass with this); `value` is the
    record, or the line's text when it is not JSON; `spoken`: an event that is the only
    record of its message (`Voices`); `instructions`: the entry that holds Codex's
    instructions before this line (None: there is none; UNKNOWN: looked for by walking
    back, at a `compacted` line only). Returns the last entry's hash, and the instructions
    entry after the line (to give with the next one)."""
    compacted = ok and isinstance(value, dict) and value.get("type") == "compacted"
    if compacted and instructions == UNKNOWN:
        instructions = _instructions_before(s, parent)
    parent, instructions, _ = _put(s, number, value, ok, parent, clock, spoken, instructions)
    return parent, instructions
