"""OpenAI-style transcripts: Chat Completions messages, and agent files that hold them.

Accepted shapes:
- a JSON list of messages (or of OpenHands events), read whole;
- JSON Lines, one message, event or container per line, streamed;
- an object holding the list: a container with `history` or `messages` (SWE-agent
  `.traj`, an OpenHands eval `output.jsonl` line, a request body).

A message or event is one entry (an assistant message with tool calls: its text,
then one `tool_call` per call). A container is a hidden entry naming its list's key,
one entry per item, and a hidden entry holding everything but its list (so that a
file rewritten as its list grows keeps the entries of the shorter one), and each
container starts a conversation of its own (a root; the last is branch `main`, earlier ones are
branches `run-<instance_id or line>`). Export in this format writes each record
back, a container with its list put back in. docs/import.md has the mapping table.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Optional

from ..errors import InvalidInput
from ..model.models import HIDDEN
from . import _common as c

FMT = "openai"
CONTAINER = "ctape.container"  # meta key: which field of the container record held the list
LIST_KEYS = ("history", "messages")


# -- recognising records -------------------------------------------------------------------


def is_message(v: Any) -> bool:
    return isinstance(v, dict) and isinstance(v.get("role"), str)


def is_event(v: Any) -> bool:
    return isinstance(v, dict) and ("action" in v or "observation" in v) and ("source" in v or "id" in v)


def list_key(v: Any) -> Optional[str]:
    if isinstance(v, dict) and not is_message(v):
        for k in LIST_KEYS:
            if isinstance(v.get(k), list):
                return k
    return None


def is_gemini(v: Any) -> bool:
    """A Gemini CLI session ({sessionId, projectHash, startTime, lastUpdated, messages}),
    or the first line of one in its newer JSON Lines layout (the same without messages,
    which follow one a line): its messages are no chat messages (`type: user|gemini`)."""
    return (
        isinstance(v, dict)
        and isinstance(v.get("sessionId"), str)
        and "projectHash" in v
        and (isinstance(v.get("messages"), list) or ("type" not in v and "messages" not in v))
    )


def is_record(v: Any) -> bool:
    """A chat message, an OpenHands event, or a container whose list holds them (or is
    empty): a list of something else (a Gemini CLI session's messages) is not one."""
    if is_message(v) or is_event(v):
        return True
    key = list_key(v)
    if key is None or is_gemini(v):
        return False
    return not v[key] or any(is_message(i) or is_event(i) for i in v[key])


def record_time(v: Any) -> Optional[str]:
    return c.valid_time(v.get("timestamp")) if isinstance(v, dict) else None


# -- mapping --------------------------------------------------------------------------


def _hidden(label: str) -> tuple[str, dict, bool]:
    return ("system", {"content": label}, True)


def map_message(m: dict) -> list[tuple[str, dict, bool]]:
    role, content = m.get("role"), m.get("content")
    if role in ("system", "developer"):
        return [("system", {"content": content if content is not None else ""}, False)]
    if role == "user":
        return [("user", {"content": content if content is not None else ""}, False)]
    if role in ("tool", "function"):
        ids = m.get("tool_call_ids") if isinstance(m.get("tool_call_ids"), list) else [m.get("tool_call_id") or m.get("name") or ""]
        ids = [i for i in ids if isinstance(i, str)] or [""]
        return [("tool_result", {"call_id": i, "output": content}, False) for i in ids]
    if role == "assistant":
        out = []
        calls = m.get("tool_calls") if isinstance(m.get("tool_calls"), list) else []
        fc = m.get("function_call") if isinstance(m.get("function_call"), dict) else None
        if content not in (None, "", []) or not (calls or fc):
            out.append(("assistant", {"content": content if content is not None else ""}, False))
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) else {}
            cid, name = call.get("id") if isinstance(call, dict) else None, fn.get("name")
            if isinstance(cid, str) and isinstance(name, str):
                out.append(("tool_call", {"call_id": cid, "name": name, "arguments": c.tool_arguments(fn.get("arguments"))}, False))
        if fc and isinstance(fc.get("name"), str):  # legacy function calling: paired by name
            out.append(("tool_call", {"call_id": fc["name"], "name": fc["name"], "arguments": c.tool_arguments(fc.get("arguments"))}, False))
        return out or [("assistant", {"content": ""}, False)]
    return [_hidden(f"openai message role {role}")]


def _response(tcm: dict) -> tuple[dict, dict]:
    """(the raw model response OpenHands keeps on each action of it, its first choice's message)."""
    resp = tcm.get("model_response") if isinstance(tcm.get("model_response"), dict) else {}
    choices = resp.get("choices") if isinstance(resp.get("choices"), list) else []
    msg = choices[0].get("message") if choices and isinstance(choices[0], dict) and isinstance(choices[0].get("message"), dict) else {}
    return resp, msg


def _model_call(tcm: dict) -> Optional[tuple[str, Any]]:
    """(name, arguments) of the call as the model wrote it, from the raw response: the
    action's own `args` are the runtime's (defaults and internals added)."""
    _, msg = _response(tcm)
    for call in msg.get("tool_calls") if isinstance(msg.get("tool_calls"), list) else []:
        fn = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) else {}
        if call.get("id") == tcm.get("tool_call_id") and isinstance(fn.get("name"), str):
            return fn["name"], c.tool_arguments(fn.get("arguments"))
    return None


def response_usage(v: Any, seen: set) -> Optional[dict]:
    """{"usage", "model"} of the model response an OpenHands event carries, the first time
    that response is seen (an action and its observation both carry it), else None."""
    tcm = v.get("tool_call_metadata") if isinstance(v, dict) and isinstance(v.get("tool_call_metadata"), dict) else {}
    resp, _ = _response(tcm)
    rid = resp.get("id")
    if not isinstance(resp.get("usage"), dict) or rid in seen:
        return None
    if rid is not None:
        seen.add(rid)
    out = {"usage": resp["usage"]}
    if isinstance(resp.get("model"), str):
        out["model"] = resp["model"]
    return out


def _model_text(tcm: dict, said: Optional[set]) -> list[tuple[str, dict, bool]]:
    """The text the model wrote with its tool calls (in the raw response OpenHands keeps
    on each action of it), once per response."""
    resp, msg = _response(tcm)
    text = msg.get("content")
    rid = resp.get("id")
    if said is not None and rid is not None:
        if rid in said:
            return []
        said.add(rid)
    return [("assistant", {"content": text}, False)] if isinstance(text, str) and text else []


def map_event(ev: dict, said: Optional[set] = None) -> list[tuple[str, dict, bool]]:
    """An OpenHands event: messages, tool calls (actions) and results (observations);
    `said` holds the ids of the model responses whose text is already written."""
    action, obs, src = ev.get("action"), ev.get("observation"), ev.get("source")
    args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
    tcm = ev.get("tool_call_metadata") if isinstance(ev.get("tool_call_metadata"), dict) else {}
    cid, fname = tcm.get("tool_call_id"), tcm.get("function_name")
    text = ev.get("message") if isinstance(ev.get("message"), str) else ""
    if action == "message":
        kind = "user" if src == "user" else "assistant"
        return [(kind, {"content": args.get("content") if isinstance(args.get("content"), str) else text}, False)]
    if action == "system":
        return [("system", {"content": args.get("content") if isinstance(args.get("content"), str) else text}, False)]
    if action == "finish":  # the agent's last word; OpenHands never runs it, so it is no pending call
        before = _model_text(tcm, said)
        call = _model_call(tcm)
        model_args = call[1] if call and isinstance(call[1], dict) else {}
        final = model_args.get("message") or args.get("final_thought") or args.get("message") or text
        if any(_same_text(p["content"], final) for _, p, _ in before):
            return before  # one answer is one message
        return before + [("assistant", {"content": final}, False)]
    if action is not None and isinstance(cid, str) and isinstance(fname, str):
        name, arguments = _model_call(tcm) or (fname, args)
        return _model_text(tcm, said) + [("tool_call", {"call_id": cid, "name": name, "arguments": arguments}, False)]
    if obs is not None and isinstance(cid, str):
        return [("tool_result", {"call_id": cid, "output": ev.get("content"), "is_error": obs == "error"}, False)]
    if obs == "error":
        return [("error", {"message": str(ev.get("content") or text or "error")}, False)]
    return [_hidden(f"openhands {'action ' + str(action) if action is not None else 'observation ' + str(obs)}")]


def _same_text(a: Any, b: Any) -> bool:
    return isinstance(a, str) and isinstance(b, str) and a.strip() == b.strip()


def map_record(v: Any, said: Optional[set] = None) -> list[tuple[str, dict, bool]]:
    if is_message(v):
        return map_message(v)
    if is_event(v):
        return map_event(v, said)
    return [_hidden("openai record")]


# -- reading --------------------------------------------------------------------------


def _records(f, path: str):
    """(line number, Line or None, value) for every record, and a note on a truncated tail.

    JSON Lines are streamed (values read again on the second pass); a JSON document
    (a list, or one object spread over lines) is read whole.
    """
    f.seek(0)
    first = next((raw for raw in c.lines_of(f) if raw.strip()), b"")
    try:
        if isinstance(c.loads(first), list):
            raise ValueError("a JSON list: a document, read whole")
        lines = list(_scan(f))
        note = c.unfinished_note(lines)
        return [(ln.number, ln, None) for ln in lines], note
    except (ValueError, UnicodeDecodeError):
        pass
    f.seek(0)
    try:
        doc = c.loads(c.read_whole(f))
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput(f"{path}: not JSON and not JSON Lines; expected chat messages, a SWE-agent .traj or OpenHands events") from None
    items = doc if isinstance(doc, list) else [doc]
    return [(i, None, v) for i, v in enumerate(items, 1)], ""


def _scan(f) -> Iterator[c.Line]:
    f.seek(0)
    for ln in c.scan_lines(f):
        yield ln


# -- import ---------------------------------------------------------------------------


def import_files(tape, files: list[str], session: Optional[str], progress: bool = False) -> list[str]:
    return [import_file(tape, path, session, progress) for path in files]


def import_file(tape, path: str, session: Optional[str], progress: bool = False) -> str:
    written = tape.store.entries_written
    with c.open_source(path) as f:
        records, note = _records(f, path)
        first_time, valid, gemini = None, 0, False
        for _, ln, v in records:
            value = c.read_at(f, ln) if ln is not None and ln.ok else v
            valid += is_record(value)
            gemini = gemini or is_gemini(value)
            first_time = first_time or record_time(value) or _first_item_time(value)
        if not valid:
            if gemini:
                raise InvalidInput(f"{path}: a Gemini CLI session, not an OpenAI-style transcript; import it as one: ctape import gemini FILE")
            raise InvalidInput(f"{path}: no chat message, OpenHands event or history found; is this an OpenAI-style transcript?")
        name = c.check_target(session or c.session_name(None, path))
        s = tape.session(name)
        w = _Writer(s, c.Clock(first_time or c.undated_time(tape, s, path)))
        bar = c.Progress(path, progress)
        with tape.batch():
            for number, ln, v in records:
                if ln is not None and not ln.ok:
                    w.put([_hidden("openai line that is not JSON")], c.raw_line_meta(FMT, c.read_at(f, ln), number), None, number)
                    w.raw += 1
                    continue
                w.record(c.read_at(f, ln) if ln is not None else v, number)
                if ln is not None:
                    bar.update(ln.offset)
            changes, ref_notes = c.safe_refs(tape, s, w.refs())
            if changes:
                s.set_refs("import", changes, source=FMT)
        bar.done()
    notes = [f"kept {w.raw} " + c.plural(w.raw, "line that is not JSON as it is", "lines that are not JSON as they are") if w.raw else "", note, *ref_notes]
    return c.summary_line(path, name, len(records), w.entries, len(w.runs) or 1, notes, bool(changes), tape.store.entries_written - written)


def _first_item_time(v: Any) -> Optional[str]:
    k = list_key(v)
    for item in v[k] if k else ():
        t = record_time(item)
        if t:
            return t
    return None


class _Writer:
    """Entries in file order; each container record starts a new root."""

    def __init__(self, session, clock: c.Clock):
        self.s, self.clock = session, clock
        self.tip: Optional[str] = None
        self.runs: list[tuple[str, int]] = []  # (name base, index of the run's container)
        self.tips: list[Optional[str]] = []
        self.entries = 0
        self.raw = 0
        self.said: set = set()  # OpenHands model responses whose text is written
        self.counted: set = set()  # OpenHands model responses whose usage is on an entry
        self.open: list = []  # call ids of the conversation's calls without a result yet

    def put(self, parts, first_meta: dict, time_value: Any, line: int, item: Optional[int] = None) -> None:
        t = self.clock.take(time_value)
        for k, (kind, payload, hide) in enumerate(parts):
            meta = (c.hidden(first_meta) if hide else first_meta) if k == 0 else c.part_meta(FMT, line, k, hide)
            if k and item is not None:
                meta[c.ITEM] = item
            self.tip = self.s.put_entry(kind, payload, meta, None, t, self.tip).hash
            self.entries += 1
            if kind == "tool_call" and not hide:
                self.open.append(payload["call_id"])
            elif kind == "tool_result" and payload.get("call_id") in self.open:
                self.open.remove(payload["call_id"])
        if self.tips:
            self.tips[-1] = self.tip

    def record(self, v: Any, line: int) -> None:
        key = list_key(v)
        if key is None:
            meta = c.record_meta(FMT, v, line, not is_record(v))
            if is_event(v):
                meta.update(response_usage(v, self.counted) or {})
            self.put(self._parts(v), meta, record_time(v), line)
            return
        if self.entries and not self.runs:  # messages before the first container: a run of their own
            self.runs.append(("run-line1", 1))
            self.tips.append(self.tip)
        if self.entries:
            self.tip = None  # a new conversation
            self.open = []
        base = v.get("instance_id") if isinstance(v.get("instance_id"), str) else f"line{line}"
        self.runs.append((f"run-{base}", line))
        self.tips.append(None)
        # the container opens its run with its list's key only, and its other fields close
        # it (c.TAIL): a file rewritten as its list grows (a SWE-agent `.traj` after each
        # step) keeps every entry of the shorter version, and moves its branches forward
        meta = c.record_meta(FMT, {}, line, True)
        meta[CONTAINER] = key
        when = record_time(v)
        self.put([_hidden(f"openai container ({key})")], meta, when, line)
        for i, item in enumerate(v[key]):
            meta = {FMT: item, c.LINE: line, c.ITEM: i}
            if not is_record(item):
                meta[HIDDEN] = True
            elif is_event(item):
                meta.update(response_usage(item, self.counted) or {})  # ops/usage.py reads it
            self.put(self._parts(item), meta, record_time(item), line, i)
        meta = c.record_meta(FMT, {k: val for k, val in v.items() if k != key}, line, True)
        meta[c.TAIL] = key
        self.put([_hidden(f"openai container's other fields ({len(v[key])} items in {key})")], meta, when, line)

    def _parts(self, v: Any) -> list[tuple[str, dict, bool]]:
        """A record's entries; mini-swe-agent's closing `exit` message (`{"role": "exit",
        "content": submission, "extra": {"exit_status", "submission"}}`) is what the last
        command gave when it ended the run (Submitted), so it is the result of the calls
        still open, not an interrupted call; with none open it is bookkeeping."""
        if is_message(v) and v.get("role") == "exit":
            extra = v.get("extra") if isinstance(v.get("extra"), dict) else {}
            status = extra.get("exit_status")
            if self.open:
                out = {"output": v.get("content")}
                if isinstance(status, str):
                    out["exit_status"] = status
                return [("tool_result", {"call_id": cid, **out}, False) for cid in list(self.open)]
            return [("system", {"content": f"exit: {status}" if isinstance(status, str) else "exit", "type": "exit"}, True)]
        return map_record(v, self.said)

    def refs(self) -> dict[str, str]:
        if not self.runs:
            return {"main": self.tip}
        out = {"main": self.tips[-1]}
        taken = {"main"}
        for (base, _), tip in zip(self.runs[:-1], self.tips[:-1]):
            out[c.branch_name(base, taken)] = tip
        return out


# -- export ---------------------------------------------------------------------------

# an error that answers a tool call: how it is written, what an import reads back (c.tallied)
ANSWERS = ("a tool message", "a tool_result entry without is_error (a tool message has no such flag)")


def export(tape, ref: str, tally: Optional[dict] = None) -> Iterator[str]:
    """Records back as JSON lines; a container with its items put back in its list."""
    entries = c.entries_for_export(tape, ref)
    write = c.tallied(synthesize, tally, tape, entries, FMT)
    group: Optional[tuple[dict, str, list]] = None
    for e in entries:
        m = e.meta if isinstance(e.meta, dict) else {}
        src = c.source_format(m)
        if src == FMT and c.PART in m:
            continue
        if src == FMT and c.ITEM in m:
            if group is not None:
                group[2].append(m[FMT])
            continue
        if src == FMT and c.TAIL in m:  # the container's other fields (tapes before 2026-12 keep them on its first entry)
            if group is not None:
                group = (m[FMT], group[1], group[2])
            continue
        if group is not None:
            yield c.dumps({**group[0], group[1]: group[2]})
            group = None
        if src == FMT:
            if CONTAINER in m:
                group = (m[FMT], m[CONTAINER], [])
            elif c.raw_line(m) is not None:
                yield c.raw_line(m)
            elif FMT in m:
                yield c.dumps(m[FMT])
        elif not (src and m.get(HIDDEN)):
            msg = write(e)
            if msg is not None:
                yield c.dumps(msg)
    if group is not None:
        yield c.dumps({**group[0], group[1]: group[2]})


def synthesize(e) -> Optional[dict]:
    """A Chat Completions message for an entry that did not come from this format."""
    if isinstance(e.meta, dict) and e.meta.get(HIDDEN):
        return None
    p = e.payload if isinstance(e.payload, dict) else {}
    if e.kind in ("system", "user", "assistant", "streaming"):  # a stream: one the agent went on from (c.tallied leaves out the others)
        role = "assistant" if e.kind == "streaming" else e.kind
        content = c.parts_for(p.get("content"), FMT, role)
        return None if c.only_thoughts(p.get("content"), content) else {"role": role, "content": content}
    if e.kind == "tool_call":
        args = p.get("arguments")
        fn = {"name": p.get("name"), "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}
        return {"role": "assistant", "content": None, "tool_calls": [{"id": p.get("call_id"), "type": "function", "function": fn}]}
    if e.kind == "tool_result":
        out = p.get("output")
        text = c.tool_output(out)
        return {"role": "tool", "tool_call_id": p.get("call_id"), "content": text if text is not None else json.dumps(out, ensure_ascii=False)}
    return None  # an error: one that answers a call comes here as a tool_result (c.tallied)
