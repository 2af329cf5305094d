"""Gemini CLI sessions (`~/.gemini/tmp/<project>/chats/session-*.json` and `.jsonl`).

Gemini CLI (packages/core/src/services/chatRecordingService.ts) has written two layouts:

- up to 0.37 (April 2026), one JSON document `{sessionId, projectHash, startTime,
  lastUpdated, messages: [...], summary?, kind?, directories?}`, written again whole
  (`JSON.stringify(record, null, 2)`) after every change;
- since then, JSON Lines: a metadata line (the same without `messages`), then one line per
  message, written again in full when the message changes (tokens, tool calls and their
  results are added to the last one), `{"$set": {...}}` for metadata (after every message:
  `lastUpdated`; `messages` replaces them all, a checkpoint after /compress), and
  `{"$rewindTo": id}` when the user rewinds (that message and all after it are gone).

Messages: `type` `user` (content: a string or Gemini API parts), `gemini` (content,
`thoughts`, `toolCalls` each with `args`, `status` and `result`, `tokens`, `model`),
`info`, `warning`, `error` (shown to the user, never sent to the model).

What the agent sends next is what `loadConversationRecord` and
`convertSessionToClientHistory` rebuild: the latest version of each message, in order,
info/warning/error and slash commands left out; a model turn's thoughts, text and calls,
then the calls' results. The entries follow it: a message is its entries (hidden
reasoning, assistant text, one `tool_call` per call, one `tool_result` per result; a
user message its text, or the results its `functionResponse` parts carry when no earlier
record gave them); a newer version of the last message adds the entries it adds (or a
hidden entry holding the record when it only adds tokens); a rewind, a checkpoint or a
change to an earlier message starts a new thread where the kept messages end, and the old
thread stays as a branch. Every record is kept in `meta["gemini"]`, so `export --format
gemini` gives the file back: the lines of a JSON Lines file, or the document of a JSON one
(rebuilt from the records on the path, as Gemini CLI's own loader rebuilds it).

A JSON document imported into a session whose `main` (or `main-imported...`) holds an
earlier version of it continues from there: messages already there add nothing, new ones
are appended (the document is rewritten whole, so this is how a grown file is told from a
rewritten one). docs/import.md has the mapping table.
"""

from __future__ import annotations

import json
import os
import uuid as uuidlib
from datetime import datetime, timezone
from typing import Any, Iterator, Optional

from ..errors import InvalidInput
from ..model.models import HIDDEN, NAME_RE
from . import _common as c

FMT = "gemini"
CONTAINER = "ctape.container"  # meta: the entry holds a JSON document's metadata (its list is `messages`)
AT = "ctape.at"  # meta: where `messages` was among the document's keys
COPY = "ctape.copy"  # meta: a message laid out again after an earlier one changed (its record is elsewhere)
MESSAGE_TYPES = ("user", "gemini", "info", "warning", "error")


# -- recognising records -------------------------------------------------------------------


def is_metadata(v: Any) -> bool:
    return isinstance(v, dict) and isinstance(v.get("sessionId"), str) and isinstance(v.get("projectHash"), str) and "id" not in v


def is_session(v: Any) -> bool:
    """A whole session document (the JSON layout)."""
    return is_metadata(v) and isinstance(v.get("messages"), list)


def is_message(v: Any) -> bool:
    return isinstance(v, dict) and isinstance(v.get("id"), str) and v.get("type") in MESSAGE_TYPES


def is_record(v: Any) -> bool:
    """A line Gemini CLI writes: metadata, a message, `$set` or `$rewindTo` (or a whole document)."""
    if not isinstance(v, dict):
        return False
    return is_metadata(v) or is_message(v) or isinstance(v.get("$set"), dict) or isinstance(v.get("$rewindTo"), str)


def record_time(v: Any) -> Optional[str]:
    if not isinstance(v, dict):
        return None
    if isinstance(v.get("$set"), dict):
        return c.valid_time(v["$set"].get("lastUpdated"))
    return c.valid_time(v.get("timestamp")) or c.valid_time(v.get("lastUpdated")) or c.valid_time(v.get("startTime"))


# -- mapping a message to entries ------------------------------------------------------------


def _parts(content: Any) -> list:
    """A PartListUnion as a list of parts (a string is a text part)."""
    if content is None:
        return []
    items = content if isinstance(content, list) else [content]
    return [{"text": p} if isinstance(p, str) else p for p in items]


def part_text(content: Any) -> str:
    """Gemini CLI's partListUnionToString (verbose): what it tests a user message by."""
    out = []
    for p in _parts(content):
        if not isinstance(p, dict):
            continue
        if "thought" in p and p.get("thought") is not None and not isinstance(p.get("text"), str):
            out.append(f"[Thought: {p['thought']}]")
        elif isinstance(p.get("functionCall"), dict):
            out.append(f"[Function Call: {p['functionCall'].get('name')}]")
        elif isinstance(p.get("functionResponse"), dict):
            out.append(f"[Function Response: {p['functionResponse'].get('name')}]")
        elif isinstance(p.get("inlineData"), dict):
            out.append(f"[{p['inlineData'].get('mimeType') or 'unknown'}]")
        elif isinstance(p.get("text"), str):
            out.append(p["text"])
    return "".join(out)


def ignored(v: dict) -> bool:
    """A user message Gemini CLI does not send again (isIgnoredUserContent): empty, a
    slash or `?` command, or context it injects itself."""
    t = part_text(v.get("content")).strip()
    return not t or t.startswith(("/", "?", "<session_context>", "<hook_context>"))


def _image(p: dict) -> Optional[dict]:
    d = p.get("inlineData")
    if isinstance(d, dict) and isinstance(d.get("data"), str):
        return {"type": "image_url", "image_url": {"url": f"data:{d.get('mimeType') or 'application/octet-stream'};base64,{d['data']}"}}
    return None


def _content(parts: list) -> Any:
    """Parts the model sees as a message's content: text joined into one string, or a list
    of parts when images (or other data) are among them; None when there is nothing."""
    out: list = []
    for p in parts:
        if not isinstance(p, dict):
            continue
        if isinstance(p.get("text"), str) and not p.get("thought"):
            if out and out[-1].get("type") == "text":
                out[-1] = {"type": "text", "text": out[-1]["text"] + p["text"]}
            else:
                out.append({"type": "text", "text": p["text"]})
        elif _image(p):
            out.append(_image(p))
        elif not p.get("thought") and not any(k in p for k in ("functionCall", "functionResponse", "thoughtSignature", "text")):
            out.append(p)  # fileData, executableCode...: kept as they are
    if not out:
        return None
    if all(p.get("type") == "text" for p in out):
        text = "".join(p["text"] for p in out)
        return text if text else None
    return out


def _response_output(resp: Any) -> tuple[Any, bool]:
    """(output, is_error) of a functionResponse's `response`: its `output` or `error` text
    when that is all it holds, else the object."""
    if isinstance(resp, dict):
        if set(resp) == {"output"} and isinstance(resp["output"], str):
            return resp["output"], False
        if set(resp) == {"error"} and isinstance(resp["error"], str):
            return resp["error"], True
    return resp, False


def result_output(result: Any, call_id: Optional[str]) -> tuple[Any, bool]:
    """A tool call's `result` (PartListUnion) as (output, is_error): the function response's
    output, with any other parts (text, images) after it as parts."""
    if isinstance(result, str):
        return result, False
    outputs: list = []
    error = False
    rest: list = []
    for p in _parts(result):
        fr = p.get("functionResponse") if isinstance(p, dict) else None
        if isinstance(fr, dict):
            out, err = _response_output(fr.get("response"))
            outputs.append(out)
            error = error or err
        else:
            rest.append(p)
    extra = _content(rest)
    if not extra and len(outputs) == 1:
        return outputs[0], error
    parts = [{"type": "text", "text": o if isinstance(o, str) else json.dumps(o, ensure_ascii=False)} for o in outputs]
    parts += [{"type": "text", "text": extra}] if isinstance(extra, str) else (extra or [])
    return parts, error


def _thoughts(v: dict, parts: list) -> str:
    out = []
    for t in v.get("thoughts") if isinstance(v.get("thoughts"), list) else []:
        if isinstance(t, dict):
            subj, desc = t.get("subject"), t.get("description")
            out.append(f"**{subj}** {desc}" if subj else str(desc or ""))
    for p in parts:
        if isinstance(p, dict) and p.get("thought") and isinstance(p.get("text"), str):
            out.append(p["text"])
    return "\n\n".join(x for x in out if x)


def map_message(v: dict, answered: set) -> list[tuple[str, dict, bool]]:
    """One message as [(kind, payload, hidden)], never empty. `answered`: the call ids
    whose results are already on the thread (a user message's functionResponse parts
    repeat what the calls' own results say)."""
    t = v.get("type")
    parts = _parts(v.get("content"))
    if t == "user":
        if ignored(v):
            return [("user", {"content": _content(parts) or part_text(parts)}, True)]
        out = []
        for p in parts:
            fr = p.get("functionResponse") if isinstance(p, dict) else None
            if isinstance(fr, dict) and isinstance(fr.get("id"), str) and fr["id"] not in answered:
                output, err = _response_output(fr.get("response"))
                out.append(("tool_result", {"call_id": fr["id"], "output": output, **({"is_error": True} if err else {})}, False))
                answered = answered | {fr["id"]}
        said = _content([p for p in parts if not (isinstance(p, dict) and "functionResponse" in p)])
        if said is not None:
            out.append(("user", {"content": said}, False))
        return out or [("user", {"content": part_text(parts)}, True)]
    if t == "gemini":
        out = []
        thought = _thoughts(v, parts)
        if thought:
            out.append(("assistant", {"content": thought, "type": "reasoning"}, True))
        said = _content(parts)
        if said is not None:
            out.append(("assistant", {"content": said}, False))
        calls = [tc for tc in v.get("toolCalls") if isinstance(tc, dict) and isinstance(tc.get("id"), str)] if isinstance(v.get("toolCalls"), list) else []
        ids = {tc["id"] for tc in calls}
        for p in parts:  # newer records: calls in the content too
            fc = p.get("functionCall") if isinstance(p, dict) else None
            if isinstance(fc, dict) and isinstance(fc.get("id"), str) and fc["id"] not in ids and isinstance(fc.get("name"), str):
                out.append(("tool_call", {"call_id": fc["id"], "name": fc["name"], "arguments": fc.get("args")}, False))
        for tc in calls:
            out.append(("tool_call", {"call_id": tc["id"], "name": tc.get("name"), "arguments": tc.get("args")}, False))
        for tc in calls:
            if tc.get("result") is not None:
                output, err = result_output(tc["result"], tc["id"])
                payload = {"call_id": tc["id"], "output": output}
                if err or tc.get("status") == "error":
                    payload["is_error"] = True
                out.append(("tool_result", payload, False))
        return out or [("assistant", {"content": part_text(parts)}, True)]
    text = part_text(parts)
    if t == "error":
        return [("error", {"message": text}, True)]
    return [("system", {"content": text, "type": t if isinstance(t, str) else None}, True)]


def _label(v: Any) -> tuple[str, dict, bool]:
    """A hidden entry for a record that is no message."""
    if isinstance(v, dict) and isinstance(v.get("$rewindTo"), str):
        return ("system", {"content": f"gemini rewind to {v['$rewindTo']}", "type": "rewind"}, True)
    if isinstance(v, dict) and isinstance(v.get("$set"), dict):
        return ("system", {"content": "gemini set " + ", ".join(sorted(map(str, v["$set"])))[:200], "type": "set"}, True)
    if is_metadata(v):
        return ("system", {"content": f"gemini session {v['sessionId']}", "type": "session"}, True)
    return ("system", {"content": "gemini record"}, True)


# -- laying out records ------------------------------------------------------------------------


class _Msg:
    __slots__ = ("id", "record", "parts", "base", "results", "calls")

    def __init__(self, mid: str, record: dict, parts: list, base: Optional[str]):
        self.id, self.record, self.parts, self.base = mid, record, parts, base
        self.results = {p["call_id"] for k, p, _ in parts if k == "tool_result"}
        self.calls = {p["call_id"] for k, p, _ in parts if k == "tool_call"}


def _answered(msgs: list) -> set:
    """The call ids whose latest call has its result on the thread of these messages: a
    call that uses an id again (an agent that numbers its calls per turn, a SWE-agent
    trajectory exported to Gemini) is open until its own result comes; its result was
    taken for a repeat of the first call's and dropped (found by an audit)."""
    out: set = set()
    for m in msgs:
        out = (out - m.calls) | m.results
    return out


class Builder:
    """The entries of a session's records, in order; `tip` is the current thread's last
    entry and `msgs` its messages (the conversation Gemini CLI would load)."""

    def __init__(self, session, clock: c.Clock, tip: Optional[str] = None, msgs: Optional[list] = None, meta: Optional[dict] = None):
        self.s, self.clock = session, clock
        self.tip = tip
        self.msgs: list[_Msg] = msgs or []
        self.meta = meta  # a document's metadata on the thread so far
        self.left: list[tuple[str, str]] = []  # (branch name base, tip) of the threads left behind
        self.entries = 0

    def _answered(self, upto: int) -> set:
        return _answered(self.msgs[:upto])

    def _put(self, parts: list, first_meta: dict, time: Optional[str], line: int, item: Optional[int] = None, copy: bool = False) -> None:
        t = self.clock.take(time)
        for k, (kind, payload, hide) in enumerate(parts):
            if k == 0 and not copy:
                meta = c.hidden(first_meta) if hide else first_meta
            else:
                meta = c.part_meta(FMT, line, k, hide)
                if item is not None:
                    meta[c.ITEM] = item
                if copy:
                    meta[COPY] = True
            self.tip = self.s.put_entry(kind, payload, meta, None, t, self.tip).hash
            self.entries += 1

    def _leave(self, name: str) -> None:
        """The current thread goes on as a branch; a new one starts where the caller says."""
        if self.tip is not None:
            self.left.append((name, self.tip))

    def record(self, v: Any, meta: dict, line: int, item: Optional[int] = None) -> None:
        """One record of the JSON Lines layout (or a message of a document)."""
        if isinstance(v, dict) and isinstance(v.get("$rewindTo"), str):
            self._rewind(v, meta, line)
        elif is_message(v):
            self.message(v, meta, line, item)
        elif isinstance(v, dict) and isinstance(v.get("$set"), dict) and isinstance(v["$set"].get("messages"), list):
            self._checkpoint(v, meta, line)
        else:
            self._put([_label(v)], c.hidden(meta), record_time(v), line, item)

    def message(self, v: dict, meta: dict, line: int, item: Optional[int] = None, skip_same: bool = False) -> None:
        """A message, or a newer version of one on the thread (`skip_same`: one that equals
        the version there adds nothing: a document written again)."""
        at = next((i for i, m in enumerate(self.msgs) if m.id == v["id"]), None)
        if at is None:
            parts = map_message(v, self._answered(len(self.msgs)))
            self.msgs.append(_Msg(v["id"], v, parts, self.tip))
            self._put(parts, meta, record_time(v), line, item)
            return
        old = self.msgs[at]
        if skip_same and old.record == v:
            return
        parts = map_message(v, self._answered(at))
        if at == len(self.msgs) - 1 and parts[: len(old.parts)] == old.parts:
            extra = parts[len(old.parts):] or [("system", {"content": f"gemini update of message {v['id']}", "type": "update"}, True)]
            self._put(extra, meta, record_time(v), line, item)
            self.msgs[at] = _Msg(v["id"], v, parts, old.base)
            return
        # an earlier message changed, or the last one changed what it had: a new thread
        # from before it, the later messages laid out again after it
        self._leave(f"replaced-{v['id'][:8]}")
        later = self.msgs[at + 1:]
        self.tip = old.base
        self.msgs = self.msgs[:at]
        self.msgs.append(_Msg(v["id"], v, parts, self.tip))
        self._put(parts, meta, record_time(v), line, item)
        for m in later:
            mparts = map_message(m.record, self._answered(len(self.msgs)))
            self.msgs.append(_Msg(m.id, m.record, mparts, self.tip))
            self._put(mparts, {}, None, line, item, copy=True)

    def _rewind(self, v: dict, meta: dict, line: int) -> None:
        target = v["$rewindTo"]
        at = next((i for i, m in enumerate(self.msgs) if m.id == target), None)
        self._leave(f"rewound-{target[:8]}")
        if at is None:  # Gemini CLI's loader: an unknown id clears every message
            self.tip, self.msgs = None, []
        else:
            self.tip, self.msgs = self.msgs[at].base, self.msgs[:at]
        self._put([_label(v)], c.hidden(meta), None, line)

    def _checkpoint(self, v: dict, meta: dict, line: int) -> None:
        """`{"$set": {"messages": [...]}}`: the messages become these (after /compress)."""
        new = [m for m in v["$set"]["messages"] if is_message(m)]
        k = 0
        while k < min(len(new), len(self.msgs)) and new[k] == self.msgs[k].record:
            k += 1
        if k < len(self.msgs):
            self._leave(f"before-checkpoint-line{line}")
            self.tip, self.msgs = self.msgs[k].base, self.msgs[:k]
        self._put([_label(v)], c.hidden(meta), record_time(v), line)
        for j, m in enumerate(new[k:], 1):
            parts = map_message(m, self._answered(len(self.msgs)))
            self.msgs.append(_Msg(m["id"], m, parts, self.tip))
            self._put(parts, {}, record_time(m), line, copy=True)

    def document(self, doc: dict, fresh: bool) -> None:
        """A whole JSON document: its metadata, then its messages. `fresh`: nothing of it is
        on the thread yet; else the thread holds an earlier version and only what changed
        is added (a message that differs before the last one starts a new thread there)."""
        rest = {k: val for k, val in doc.items() if k != "messages"}
        holder = {FMT: rest, c.LINE: 1, CONTAINER: "messages", AT: list(doc).index("messages")}
        msgs = [m for m in doc["messages"]]
        if fresh:
            self._put([_label(doc)], c.hidden(holder), record_time(doc), 1)
            for i, m in enumerate(msgs):
                self._document_message(m, i)
            return
        k = 0
        while k < min(len(msgs), len(self.msgs)) and is_message(msgs[k]) and msgs[k] == self.msgs[k].record:
            k += 1
        grows = k == len(self.msgs) or (k == len(self.msgs) - 1 and k < len(msgs) and is_message(msgs[k]) and msgs[k]["id"] == self.msgs[k].id
                                         and map_message(msgs[k], self._answered(k))[: len(self.msgs[k].parts)] == self.msgs[k].parts)
        if grows and k == len(msgs) == len(self.msgs) and rest == self.meta:
            return  # the document as the thread has it: nothing new
        if not grows:
            # rewound (Gemini CLI's rewind truncates the document) or a message before the
            # last changed: the thread the agent goes on with is the document's, as after a
            # `$rewindTo` line; the one before keeps a branch, named as that line names it
            # (a name another rewind of this session took stays that one's: a document holds
            # no history of its rewinds, so the name is made unique among the session's).
            # Only a document written after the thread's is the agent's next step: an older
            # one (a backup copy, an earlier version imported again) goes beside `main` as a
            # file that went another way (`main-imported`), and `main` stays.
            gone = self.msgs[k]
            if _updated(rest) is not None and _updated(self.meta) is not None and _updated(rest) > _updated(self.meta):
                edited = k < len(msgs) and is_message(msgs[k]) and msgs[k].get("id") == gone.id
                base = c.session_name(f"{'replaced' if edited else 'rewound'}-{gone.id[:8]}", "branch")[:120]
                have = self.s.refs().branches if self.s.exists() else {}
                name, n = base, 2
                while have.get(name, self.tip) != self.tip:
                    name, n = f"{base}-{n}", n + 1
                self._leave(name)
            self.tip, self.msgs = gone.base, self.msgs[:k]
        self._put([_label(doc)], c.hidden(holder), record_time(doc), 1)
        for i in range(k, len(msgs)):
            self._document_message(msgs[i], i, skip_same=True)

    def _document_message(self, m: Any, i: int, skip_same: bool = False) -> None:
        meta = {FMT: m, c.LINE: 1, c.ITEM: i}
        if is_message(m):
            self.message(m, meta, 1, i, skip_same)
        else:
            self._put([("system", {"content": "gemini record"}, True)], c.hidden(meta), record_time(m), 1, i)

    def refs(self) -> dict[str, str]:
        out = {"main": self.tip}
        taken = {"main"}
        for base, tip in self.left:
            out[c.branch_name(base, taken)] = tip
        return out


def _updated(meta: Optional[dict]) -> Optional[datetime]:
    """A document's `lastUpdated` (Gemini CLI sets it at every write), None without one."""
    v = meta.get("lastUpdated") if isinstance(meta, dict) else None
    try:
        t = datetime.fromisoformat(v) if isinstance(v, str) else None
    except ValueError:
        return None
    return t if t is None or t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def thread_of(tape, tip: Optional[str]) -> Optional[tuple[list[_Msg], dict]]:
    """(the messages on the path root -> tip as a Builder keeps them, the document's
    metadata), from the records the entries hold; None when the path holds no Gemini CLI
    document."""
    path = []
    h = tip
    while h is not None:
        e = tape.read_entry(h)
        path.append(e)
        h = e.parent
    msgs: list[_Msg] = []
    meta: Optional[dict] = None
    for e in reversed(path):
        m = e.meta if isinstance(e.meta, dict) else {}
        if c.source_format(m) != FMT or c.PART in m or COPY in m:
            continue
        rec = m.get(FMT)
        if CONTAINER in m:
            meta = {**(meta or {}), **rec} if isinstance(rec, dict) else (meta or {})
            continue
        if is_message(rec):
            at = next((i for i, x in enumerate(msgs) if x.id == rec["id"]), None)
            answered = _answered(msgs[: len(msgs) if at is None else at])
            parts = map_message(rec, answered)
            if at is None:
                msgs.append(_Msg(rec["id"], rec, parts, e.parent))
            else:
                msgs[at] = _Msg(rec["id"], rec, parts, msgs[at].base)
    return (msgs, meta) if meta is not None else None


# -- import ---------------------------------------------------------------------------------


class Incomplete(InvalidInput):
    """A session document that is not (yet) whole JSON: Gemini CLI may be writing it."""


class Empty(InvalidInput):
    """A session with no message yet (Gemini CLI deletes such files when it exits)."""


def import_files(tape, files: list[str], session: Optional[str], progress: bool = False) -> list[str]:
    return [import_file(tape, path, session, progress) for path in files]


def _read(f, path: str):
    """("document", doc) or ("lines", [Line...], note) for a session file."""
    first = next((raw for raw in c.lines_of(f) if raw.strip()), b"")
    try:
        v = c.loads(first)
    except (ValueError, UnicodeDecodeError):
        v = None
    if v is None or is_session(v):
        f.seek(0)
        try:
            doc = c.loads(c.read_whole(f))
        except (ValueError, UnicodeDecodeError):
            raise Incomplete(f"{path}: not JSON and not JSON Lines; is this a Gemini CLI session file?") from None
        if not is_session(doc):
            raise InvalidInput(f"{path}: no Gemini CLI session found (expected {{sessionId, projectHash, messages}}); is this a Gemini CLI session file?")
        if not doc["messages"]:
            raise Empty(f"{path}: a Gemini CLI session that holds no message yet; nothing was imported")
        return "document", doc, ""
    f.seek(0)
    lines = list(c.scan_lines(f))
    note = c.unfinished_note(lines)
    valid = sum(1 for ln in lines if ln.ok and is_record(ln.value))
    if not valid:
        raise InvalidInput(f"{path}: no Gemini CLI record found (expected JSON lines like {{sessionId, projectHash}}, {{id, type, content}}); is this a Gemini CLI session file?")
    if not any(ln.ok and is_message(ln.value) for ln in lines):
        raise Empty(f"{path}: a Gemini CLI session that holds no message yet; nothing was imported")
    return "lines", lines, note


class Layout:
    """What importing a file laid out: the session, its refs, counts, and where it ended."""

    def __init__(self, name: str, refs: dict, records: int, entries: int, end: int, line: int, notes: list, new_records: int,
                 document: bool = False):
        self.name, self.refs, self.records, self.entries = name, refs, records, entries
        self.end, self.line, self.notes, self.new_records = end, line, notes, new_records
        self.document = document  # a JSON document (written again whole), not JSON Lines


def layout(tape, path: str, session: Optional[str], progress: bool = False, after_line: int = 0) -> Layout:
    """Write the entries of a file (in the caller's batch; refs are not moved).
    `after_line`: for a JSON Lines file, the records after that line are the new ones."""
    with c.open_source(path) as f:
        kind, data, note = _read(f, path)
        if kind == "document":
            sid = data.get("sessionId")
            first_time = record_time(data) or next((record_time(m) for m in data["messages"] if record_time(m)), None)
        else:
            sid = next((ln.value.get("sessionId") for ln in data if ln.ok and is_metadata(ln.value)), None)
            first_time = next((record_time(ln.value) for ln in data if ln.ok and record_time(ln.value)), None)
        name = c.check_target(session or c.session_name(sid, path))
        s = tape.session(name)
        clock = c.Clock(first_time or c.undated_time(tape, s, path))
        bar = c.Progress(path, progress)
        raw = 0
        if kind == "document":
            tip, msgs, meta = _continue_from(tape, s, data)
            b = Builder(s, clock, tip, msgs, meta)
            if msgs is not None:
                b.clock = c.Clock(_time_of(tape, tip) or clock.last)
            before = b.entries
            b.document(data, fresh=msgs is None)
            records = 1 + len(data["messages"])
            new_records = records if msgs is None else (1 if b.entries > before else 0)
            end, line = _size(f), 1
        else:
            b = Builder(s, clock)
            for ln in data:
                value = c.read_at(f, ln)
                if not ln.ok:
                    raw += 1
                    b._put([("system", {"content": "gemini line that is not JSON"}, True)], c.raw_line_meta(FMT, value, ln.number), None, ln.number)
                else:
                    b.record(value, c.record_meta(FMT, value, ln.number), ln.number)
                bar.update(ln.offset)
            records = len(data)
            new_records = sum(1 for ln in data if ln.number > after_line)
            end = data[-1].offset + data[-1].length if data else 0
            line = data[-1].number if data else 0
        bar.done()
    notes = [f"kept {raw} " + c.plural(raw, "line that is not JSON as it is", "lines that are not JSON as they are") if raw else "", note]
    return Layout(name, b.refs(), records, b.entries, end, line, notes, new_records, document=kind == "document")


def _size(f) -> int:
    f.seek(0, os.SEEK_END)
    return f.tell()


def import_file(tape, path: str, session: Optional[str], progress: bool = False) -> str:
    written = tape.store.entries_written
    with tape.batch():
        lay = layout(tape, path, session, progress)
        s = tape.session(lay.name)
        changes, ref_notes = c.safe_refs(tape, s, lay.refs)
        if changes:
            s.set_refs("import", changes, source=FMT)
    return c.summary_line(path, lay.name, lay.records, lay.entries, len(lay.refs), lay.notes + ref_notes, bool(changes), tape.store.entries_written - written)


def _time_of(tape, h: Optional[str]) -> Optional[str]:
    return tape.read_entry(h).time if h else None


def _continue_from(tape, s, doc: dict) -> tuple[Optional[str], Optional[list], Optional[dict]]:
    """(tip, its messages, its metadata) of the branch (main, main-imported, ...) that holds
    the longest start of this document's messages, or Nones: a fresh import."""
    if not s.exists():
        return None, None, None
    branches = s.refs().branches
    best: tuple = (0, None, None, None)
    for name in c.imported_names("main"):
        tip = branches.get(name)
        if tip is None:
            if name != "main":
                break
            continue
        found = thread_of(tape, tip)
        if found is None:
            continue
        msgs, meta = found
        k = 0
        new = doc["messages"]
        while k < min(len(new), len(msgs)) and isinstance(new[k], dict) and new[k].get("id") == msgs[k].id:
            k += 1
        if k > best[0] or (best[1] is None and not msgs and not new):
            best = (k, tip, msgs, meta)
    return best[1:]


# -- export ---------------------------------------------------------------------------------


# what a native entry of these kinds becomes: Gemini CLI has no record for a system prompt or a
# milestone (formats.export_notes tells the user)
DEMOTES = {"system": "info lines", "anchor": "info lines"}

# an error that answers a tool call: how it is written, what an import reads back (c.tallied)
ANSWERS = ("a functionResponse holding an error", "a tool_result entry with is_error")


def export(tape, ref: str, tally: Optional[dict] = None) -> Iterator[str]:
    """The records back: a JSON document when the history came from one (the path to the
    session's HEAD, or to REF), else JSON lines in source order."""
    entries = c.entries_for_export(tape, ref)
    write = c.tallied(synthesize, tally, tape, entries)
    # a Gemini document's: the openai importer marks its containers with the same key (a
    # SWE-agent .traj), and such a session exported as an empty document (found by an audit)
    if any(CONTAINER in e.meta and c.source_format(e.meta) == FMT for e in entries if isinstance(e.meta, dict)):
        yield from _export_document(tape, ref)
        return
    has_meta = any(is_metadata((e.meta or {}).get(FMT)) for e in entries if isinstance(e.meta, dict) and c.source_format(e.meta) == FMT)
    names: dict[str, str] = {}
    for e in entries:
        m = e.meta if isinstance(e.meta, dict) else {}
        src = c.source_format(m)
        if src == FMT:
            if c.PART in m or COPY in m:
                continue
            if c.raw_line(m) is not None:
                yield c.raw_line(m)
            elif FMT in m:
                yield c.dumps(m[FMT])
            continue
        if src is not None and m.get(HIDDEN):
            continue
        if not has_meta:
            has_meta = True
            yield c.dumps(_metadata(tape, ref, entries))
        rec = write(e, names)
        if rec is not None:
            yield c.dumps(rec)


def _metadata(tape, ref: str, entries: list) -> dict:
    times = [e.time for e in entries]
    name = ref if NAME_RE.fullmatch(ref) else "ctape-export"
    return {"sessionId": name, "projectHash": "", "startTime": min(times), "lastUpdated": max(times), "kind": "main"}


def _export_document(tape, ref: str) -> Iterator[str]:
    """The document Gemini CLI's loader would rebuild from the records on the path."""
    tip = tape.resolve(ref)
    path = []
    h = tip
    while h is not None:
        e = tape.read_entry(h)
        path.append(e)
        h = e.parent
    meta: dict = {}
    at = None
    msgs: dict[str, Any] = {}
    extra: list = []  # items of the list that were no message, in place
    for e in reversed(path):
        m = e.meta if isinstance(e.meta, dict) else {}
        if c.source_format(m) != FMT or c.PART in m or COPY in m:
            continue
        rec = m.get(FMT)
        if CONTAINER in m and isinstance(rec, dict):
            meta.update(rec)
            at = m.get(AT, at)
        elif is_message(rec):
            msgs[rec["id"]] = rec
        elif c.ITEM in m:
            extra.append(rec)
    items = list(msgs.values()) + extra
    keys = list(meta)
    doc: dict = {}
    pos = at if isinstance(at, int) and 0 <= at <= len(keys) else len(keys)
    for i, k in enumerate(keys):
        if i == pos:
            doc["messages"] = items
        doc[k] = meta[k]
    doc.setdefault("messages", items)
    yield json.dumps(doc, ensure_ascii=False, indent=2)


def _id(h: str) -> str:
    return str(uuidlib.UUID(h[:32]))


def synthesize(e, names: dict) -> Optional[dict]:
    """A message record for an entry that did not come from Gemini CLI."""
    if isinstance(e.meta, dict) and e.meta.get(HIDDEN):
        return None
    p = e.payload if isinstance(e.payload, dict) else {}
    base = {"id": _id(e.hash), "timestamp": e.time}
    if e.kind == "user":
        return {**base, "type": "user", "content": _gemini_parts(p.get("content"))}
    if e.kind in ("assistant", "streaming"):
        content = p.get("content")
        return {**base, "type": "gemini", "content": content if isinstance(content, str) else _gemini_parts(content)}
    if e.kind == "system":
        return {**base, "type": "info", "content": c.text_of(p.get("content"))}
    if e.kind == "tool_call":
        names[str(p.get("call_id"))] = p.get("name")
        call = {"id": p.get("call_id"), "name": p.get("name"), "args": p.get("arguments"), "status": "scheduled", "timestamp": e.time}
        return {**base, "type": "gemini", "content": "", "toolCalls": [call]}
    if e.kind == "tool_result":
        out = p.get("output")
        key = "error" if p.get("is_error") else "output"
        resp = {key: out if isinstance(out, str) else c.text_of(out)}
        fr = {"id": p.get("call_id"), "name": names.get(str(p.get("call_id"))), "response": resp}
        return {**base, "type": "user", "content": [{"functionResponse": fr}]}
    if e.kind == "error":
        return {**base, "type": "error", "content": p.get("message")}
    if e.kind == "anchor":
        return {**base, "type": "info", "content": p.get("summary") or p.get("name")}
    return None


def _gemini_parts(content: Any) -> list:
    """Gemini parts for a message's content in any agent's shape: text, a thinking block as
    a thought part (read back as reasoning, not as the answer), and media as `inlineData` or
    `fileData` (never their JSON or base64 as text: found by an audit); any other part as
    its JSON text."""
    from ..ops.media import left_out, media_of

    if isinstance(content, str):
        return [{"text": content}]
    out = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, str):
            out.append({"text": part})
            continue
        if not isinstance(part, dict):
            continue
        if part.get("type") == "thinking" and isinstance(part.get("thinking"), str):
            if part["thinking"]:
                out.append({"text": part["thinking"], "thought": True})
            continue
        if part.get("type") == "redacted_thinking":
            continue  # encrypted: nothing Gemini could read
        if isinstance(part.get("text"), str):
            out.append({"text": part["text"]})
            continue
        m = media_of(part)
        if m is not None and m.data:
            out.append({"inlineData": {"mimeType": m.media_type or "application/octet-stream", "data": m.data}})
        elif m is not None and m.url:
            out.append({"fileData": {"fileUri": m.url, **({"mimeType": m.media_type} if m.media_type else {})}})
        elif m is not None and m.text is not None:
            out.append({"text": m.text})
        elif m is not None:
            out.append({"text": left_out(m, "Gemini")})
        else:
            out.append({"text": json.dumps(part, ensure_ascii=False)})
    return out


def chats_root() -> str:
    """Where Gemini CLI keeps its projects' chats: $GEMINI_CLI_HOME/.gemini/tmp (else ~/.gemini/tmp)."""
    home = os.environ.get("GEMINI_CLI_HOME") or os.path.expanduser("~")
    return os.path.join(home, ".gemini", "tmp")
