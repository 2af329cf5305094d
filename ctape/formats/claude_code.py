"""Claude Code session files (`~/.claude/projects/<cwd-slug>/<sessionId>.jsonl`).

Each line becomes one entry, or several when it holds several tool results or
content blocks; the line itself is kept in `meta["claude-code"]` with its line
number, so `export --format claude-code` gives the file back record for record.

The `uuid`/`parentUuid` tree keeps its shape. Records are laid out in threads: a
record extends the thread of its parent when the parent is that thread's tip; a
record whose parent is further back starts a new thread (a fork, which becomes a
branch), except for the two things that only look like forks in these files:
parallel tool results (each result's parent is its own tool_use line) and
bookkeeping lines (progress, attachments, hooks, snapshots), which are spliced in
where they appear. A parent that appears later in the file is waited for.
Subagent files (every message a sidechain) go to a session of their own,
`<session>-agent-<agentId>`; inline sidechains become branches `agent-<agentId>`.
docs/import.md has the mapping table.
"""

from __future__ import annotations

import glob
import json
import os
import uuid as uuidlib
from collections import defaultdict, deque
from typing import Any, Callable, Iterator, Optional

from ..errors import InvalidInput
from ..model.models import HIDDEN
from . import _common as c

FMT = "claude-code"
MESSAGE_TYPES = ("user", "assistant")
SPLICE_WINDOW = 256  # how far back a parallel tool result's parent may be on its thread
MEMO = 65536  # export: how many entries' uuids to remember at most


# -- mapping --------------------------------------------------------------------------


def _blocks_content(blocks: list) -> Any:
    if all(isinstance(b, dict) and b.get("type") == "text" for b in blocks):
        return "".join(b.get("text") or "" for b in blocks)
    return blocks


def _split(kind: str, blocks: list, special: str) -> list[tuple[str, dict, bool]]:
    """Content blocks in order: runs of plain blocks as one `kind` entry, each tool block its own entry."""
    out: list[tuple[str, dict, bool]] = []
    run: list = []

    def flush():
        if run:
            out.append((kind, {"content": _blocks_content(list(run))}, False))
            run.clear()

    for b in blocks:
        if special == "tool_use" and isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str) and isinstance(b.get("name"), str):
            flush()
            out.append(("tool_call", {"call_id": b["id"], "name": b["name"], "arguments": b.get("input")}, False))
        elif special == "tool_result" and isinstance(b, dict) and b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str):
            flush()
            payload = {"call_id": b["tool_use_id"], "output": b.get("content")}
            if isinstance(b.get("is_error"), bool):
                payload["is_error"] = b["is_error"]
            out.append(("tool_result", payload, False))
        else:
            run.append(b)
    flush()
    return out or [(kind, {"content": []}, False)]


def map_record(v: Any) -> list[tuple[str, dict, bool]]:
    """One record as entries: [(kind, payload, hidden), ...], never empty."""
    if not isinstance(v, dict):
        return [("system", {"content": "claude-code record"}, True)]
    t = v.get("type")
    msg = v.get("message") if isinstance(v.get("message"), dict) else {}
    content = msg.get("content")
    if t == "assistant" and (v.get("isApiErrorMessage") or (msg.get("model") == "<synthetic>" and v.get("error"))):
        text = c.text_of(content) or str(v.get("error") or "API error")
        return [("error", {"message": text}, True)]  # Claude Code never sends these to the model: status, not context
    if t in MESSAGE_TYPES and "message" in v:
        if isinstance(content, list):
            return _split(t, content, "tool_use" if t == "assistant" else "tool_result")
        return [(t, {"content": content if isinstance(content, str) else c.text_of(content)}, False)]
    if t == "system" and v.get("subtype") == "compact_boundary":
        # where Claude Code replaced the conversation by a summary (the next user line,
        # isCompactSummary): the default context view starts here (ops/context.py)
        return [("anchor", {"name": "compact_boundary", "summary": v.get("content"), "compaction": True}, False)]
    label = v.get("summary") if t == "summary" else v.get("content")
    sub = v.get("subtype") or v.get("operation") or _type_of(v.get("data")) or _type_of(v.get("attachment"))
    text = label if isinstance(label, str) else f"claude-code {t}" + (f" {sub}" if isinstance(sub, str) else "")
    return [("system", {"content": text, "type": t if isinstance(t, str) else None}, True)]


def _type_of(v: Any) -> Any:
    return v.get("type") if isinstance(v, dict) else None


def is_record(v: Any) -> bool:
    return isinstance(v, dict) and isinstance(v.get("type"), str) and ("uuid" in v or "sessionId" in v or "leafUuid" in v or "messageId" in v)


# -- the first pass: structure only ----------------------------------------------------------


class Info:
    """What the second pass needs to know about a line, without its content."""

    __slots__ = ("line", "uuid", "parent", "message", "results", "sidechain", "agent", "unlinked", "parts")

    def __init__(self, line: c.Line, v: Any, keep: bool = False):
        self.line = line
        d = v if isinstance(v, dict) else {}
        u, p = d.get("uuid"), d.get("parentUuid") or d.get("logicalParentUuid")
        self.uuid = u if isinstance(u, str) else None
        self.parent = p if isinstance(p, str) else None
        # no parentUuid key at all (Claude Code always writes one, null for a root): the line
        # says nothing about a tree, so it continues the file like a line of a linear log
        self.unlinked = "parentUuid" not in d and "logicalParentUuid" not in d
        parts = map_record(v) if line.ok else None
        self.parts = parts if keep else None  # the entries of the record, while its value is held (_Stream)
        kinds = [k for k, _, _ in parts] if parts is not None else ["system"]
        self.message = self.uuid is not None and (d.get("type") in MESSAGE_TYPES or "anchor" in kinds)
        self.results = "tool_result" in kinds
        self.sidechain = d.get("isSidechain") is True
        self.agent = d.get("agentId") if isinstance(d.get("agentId"), str) else None


def is_subagent(infos: list[Info]) -> Optional[str]:
    """The agentId when every message of the file is a sidechain (a subagent file)."""
    msgs = [i for i in infos if i.message]
    if msgs and all(i.sidechain for i in msgs):
        return next((i.agent for i in msgs if i.agent), None) or "sidechain"
    return None


# -- the second pass: entries and threads ------------------------------------------------------


class Thread:
    def __init__(self, tip: Optional[str], first: Info):
        self.tip = tip
        self.first = first
        self.has_message = False
        self.first_message: Optional[Info] = None  # names the branch: stable while the thread grows
        self.last_index = -1


class Builder:
    def __init__(self, session, f, infos: list[Info], first_time: Optional[str], bar: c.Progress):
        self.s, self.f, self.infos, self.bar = session, f, infos, bar
        self.clock = c.Clock(first_time)
        self.in_file = {i.uuid for i in infos if i.uuid}
        self.entry_of: dict[str, str] = {}
        self.thread_of: dict[str, Thread] = {}
        self.parent_of: dict[str, Optional[str]] = {}
        self.after: dict[str, str] = {}  # entry -> bookkeeping entry spliced right after it
        self.threads: list[Thread] = []
        self.last: Optional[Thread] = None
        self.entries = 0
        self.raw_lines = 0
        self.done: set[int] = set()  # lines processed
        # `ctape watch` counts the records the tape did not hold: is_new(h) tells whether the
        # last entry of a record was written now (it is never kept with a saved layout)
        self.is_new: Optional[Callable[[str], bool]] = None
        self.fresh = 0

    def run(self, start: int = 0) -> None:
        """Lay out every line from `start` on (the lines before it are done, in file order,
        none of them waiting: see _Stream)."""
        waiting: dict[str, list[int]] = defaultdict(list)
        for i in range(start, len(self.infos)):
            info = self.infos[i]
            p = info.parent
            if info.message and p and p in self.in_file and p not in self.entry_of and p != info.uuid:
                waiting[p].append(i)  # its parent is further down the file
            else:
                self._cascade(i, waiting, False)
        # parents that never came (a cycle): break each at its earliest line, in file order
        # (one pass over the lines still waiting: linear, whatever the number of cycles)
        for i in sorted(i for js in waiting.values() for i in js):
            if i not in self.done:
                self._cascade(i, waiting, True)

    def _cascade(self, i: int, waiting: dict, force_root: bool) -> None:
        """Process line i, then every line that was waiting for it, depth first in file order."""
        todo = deque([(i, force_root)])
        while todo:
            j, root = todo.popleft()
            self._process(j, root)
            u = self.infos[j].uuid
            if u and u in waiting:
                todo.extendleft((k, False) for k in reversed(waiting.pop(u)) if k not in self.done)

    def _thread_for(self, info: Info, force_root: bool) -> Thread:
        p = None if force_root else info.parent
        if not info.message:
            return self.last or self._new_thread(None, info)
        if p is None or p not in self.entry_of:
            if self.last and not info.sidechain and (not self.last.has_message or (info.unlinked and not force_root)):
                return self.last  # bookkeeping lines before the first message: one prelude; or an unlinked line
            return self._new_thread(None, info)
        pe, t = self.entry_of[p], self.thread_of[p]
        first = pe
        while pe in self.after:  # children of X go after the bookkeeping lines spliced after X
            pe = self.after[pe]
        if first != pe:
            self.after[first] = pe  # the next child of X need not walk the splice again
        if t.tip == pe or (info.results and self._recent_ancestor(pe, t.tip)):
            return t
        return self._new_thread(pe, info)

    def _new_thread(self, tip: Optional[str], info: Info) -> Thread:
        t = Thread(tip, info)
        self.threads.append(t)
        return t

    def _recent_ancestor(self, h: str, tip: Optional[str]) -> bool:
        for _ in range(SPLICE_WINDOW):
            if tip is None:
                return False
            if tip == h:
                return True
            tip = self.parent_of.get(tip)
        return False

    def _process(self, i: int, force_root: bool) -> None:
        self.done.add(i)
        info = self.infos[i]
        t = self._thread_for(info, force_root)
        value = info.line.value  # parsed by the scan, when it is still held (_Stream)
        if value is None:
            value = c.read_at(self.f, info.line)
        info.line.value = None
        n = info.line.number
        if info.line.ok:
            parts = getattr(info, "parts", None) or map_record(value)  # (a layout saved by an older ctape has no parts)
            info.parts = None
            time = self.clock.take(value.get("timestamp") if isinstance(value, dict) else None)
        else:
            parts = [("system", {"content": "claude-code line that is not JSON"}, True)]
            time = self.clock.last
            self.raw_lines += 1
        parent = t.tip
        for k, (kind, payload, hide) in enumerate(parts):
            if k == 0:
                meta = c.record_meta(FMT, value, n, hide) if info.line.ok else c.raw_line_meta(FMT, value, n)
            else:
                meta = c.part_meta(FMT, n, k, hide)
            h = self.s.put_entry(kind, payload, meta, None, time, parent).hash
            self.parent_of[h] = parent
            parent = h
            self.entries += 1
        if self.is_new is not None and self.is_new(parent):
            self.fresh += 1
        if not info.message and t.tip is not None:
            self.after[t.tip] = parent
        t.tip = parent
        t.has_message = t.has_message or info.message
        if info.message and t.first_message is None:
            t.first_message = info
        t.last_index = max(t.last_index, i)
        if info.uuid and info.uuid not in self.entry_of:
            self.entry_of[info.uuid] = parent
            self.thread_of[info.uuid] = t
        self.last = t
        self.bar.update(info.line.offset)

    def refs(self) -> dict[str, str]:
        """Branch `main` at the thread of the last non-sidechain message; every other thread a branch."""
        main = None
        for info in reversed(self.infos):
            if info.message and not info.sidechain and info.uuid in self.thread_of:
                main = self.thread_of[info.uuid]
                break
        main = main or self.last
        out = {"main": main.tip}
        taken = {"main"}
        for t in self.threads:
            if t is main or t.tip is None:
                continue
            first = t.first_message or t.first
            u = first.uuid or f"line{first.line.number}"
            base = (f"agent-{first.agent}" if first.agent else f"sidechain-{u[:8]}") if first.sidechain else f"fork-{u[:8]}"
            out[c.branch_name(base, taken)] = t.tip
        return out


# -- import ---------------------------------------------------------------------------


def import_files(tape, files: list[str], session: Optional[str], progress: bool = False) -> list[str]:
    out = []
    todo = list(files)
    listed = {os.path.abspath(p) for p in files}
    single = len(files) == 1
    main_name: dict[str, str] = {}  # sessionId -> session its main file went to
    i = 0
    while i < len(todo):
        path = todo[i]
        i += 1
        line, sid, name, agent = import_file(tape, path, session, progress, single and i == 1, main_name)
        out.append(line)
        if not agent:
            main_name[sid or ""] = name
            for extra in find_subagent_files(path, sid):
                if os.path.abspath(extra) not in listed:
                    listed.add(os.path.abspath(extra))
                    todo.append(extra)
    return out


def find_subagent_files(path: str, sid: Optional[str]) -> list[str]:
    """Subagent transcripts of a session file: `<session>/subagents/agent-*.jsonl`, and
    `agent-*.jsonl` beside it whose records carry the same sessionId."""
    stem = os.path.splitext(path)[0]
    found = sorted(glob.glob(os.path.join(glob.escape(stem), "subagents", "agent-*.jsonl")))
    if sid:
        for p in sorted(glob.glob(os.path.join(glob.escape(os.path.dirname(path) or "."), "agent-*.jsonl"))):
            try:
                with open(p, "rb") as f:
                    first = json.loads(next(c.lines_of(f), b"{}"))
            except (OSError, ValueError, InvalidInput):  # not one of ours, or unreadable
                continue
            if isinstance(first, dict) and first.get("sessionId") == sid:
                found.append(p)
    return found


def import_file(tape, path: str, session: Optional[str], progress: bool, exact: bool, main_name: dict):
    from . import seen

    read = seen.prepass(path)  # a line too long is refused here, before anything is written
    written = tape.store.entries_written
    options = {"session": session, "exact": bool(exact and session)}
    got = seen.lookup(tape, path, FMT, options, read)
    if got is not None and _name_of(got.get("sid"), got.get("agent"), path, session, exact, main_name) == got["session"]:
        line = c.summary_line(path, got["session"], got.get("records", 0), 0, 0, [], False)
        return line, got.get("sid"), got["session"], got.get("agent")
    # two readers of the file: the scan's, and the layout's, which reads lines again by offset
    with c.open_source(path) as f, c.open_source(path) as again:
        bar = c.Progress(path, progress)
        with tape.batch():
            st = _Stream(tape, f, again, path, session, exact, main_name, bar)
            st.scan()
            b, name, agent, sid, infos = st.builder, st.name, st.agent, st.sid, st.infos
            b.run(st.done)
            refs = b.refs()
            changes, ref_notes = c.safe_refs(tape, tape.session(name), refs)
            if changes:
                tape.session(name).set_refs("import", changes, source=FMT)
        bar.done()
    if not st.undated:
        seen.remember(tape, path, FMT, options, read, session=name, refs=refs, records=len(infos), sid=sid, agent=agent)
    notes = [f"subagent {agent}" if agent else "", f"kept {b.raw_lines} " + c.plural(b.raw_lines, "line that is not JSON as it is", "lines that are not JSON as they are") if b.raw_lines else "", st.truncated, *ref_notes]
    return c.summary_line(path, name, len(infos), b.entries, len(refs), notes, bool(changes), tape.store.entries_written - written), sid, name, agent


def _name_of(sid: Optional[str], agent: Optional[str], path: str, session: Optional[str], exact: bool, main_name: dict) -> str:
    base = session or main_name.get(sid or "") or c.session_name(sid, path)
    return base if (exact and session) or not agent else c.session_name(f"{base}-agent-{agent}", path)


HOLD = 8 << 20  # bytes of lines whose parsed values the scan keeps for the layout to come


class _Stream:
    """One pass over a Claude Code file that also lays it out, so that each line is parsed
    once (it was twice: a scan, then a read by offset for the layout).

    Run() lays out lines in file order, except that a message whose parent comes later in
    the file waits for it. While reading, that cannot be told from a parent that is not in
    the file at all, so the scan lays out lines as run() would only up to the first
    message whose parent is not laid out yet (none, in files Claude Code writes: a parent
    comes before its children), and from there on run() does the rest, reading those
    lines again by offset. Lines are laid out one behind the scan (the last line may be
    one being written, which is skipped), and only once the session is known: its id
    (else -s), a message that is not a sidechain (else the file may be a subagent's, which
    goes to a session of its own) and the first time (which the lines before it take).
    Until then, up to HOLD bytes of parsed lines are kept; the values of the others are
    dropped (read again later). So memory holds one line's value at a time, not the file."""

    def __init__(self, tape, f, again, path: str, session: Optional[str], exact: bool, main_name: dict, bar: c.Progress):
        self.tape, self.f, self.again, self.path, self.session, self.exact, self.main_name, self.bar = tape, f, again, path, session, exact, main_name, bar
        self.infos: list[Info] = []
        self.builder: Optional[Builder] = None
        self.done = 0  # lines laid out while reading
        self.stalled = False
        self.first_time: Optional[str] = None
        self.sid: Optional[str] = None
        self.main = False
        self.held = 0
        self.name: Optional[str] = None
        self.agent: Optional[str] = None
        self.truncated = ""
        self.undated = False

    def scan(self) -> None:
        valid = 0
        for ln in c.scan_lines(self.f):
            v = ln.value
            if ln.ok:
                valid += is_record(v)
                if isinstance(v, dict):
                    self.first_time = self.first_time or c.valid_time(v.get("timestamp"))
                    self.sid = self.sid or (v.get("sessionId") if isinstance(v.get("sessionId"), str) else None)
            info = Info(ln, v, keep=True)
            self.infos.append(info)
            self.main = self.main or (info.message and not info.sidechain)
            if self.builder is None and self.main and self.first_time and (self.session or self.sid):
                self._start(None)
            if self.builder is not None and not self.stalled:
                self._lay_out(len(self.infos) - 1)
            if self.builder is None or self.stalled:
                if ln.value is not None and (self.stalled or self.held + ln.length > HOLD):
                    ln.value = info.parts = None  # read again by offset when it is laid out
                else:
                    self.held += ln.length
        self.truncated = c.unfinished_note(self.infos)
        if not valid:
            raise InvalidInput(f"{self.path}: no Claude Code record found (expected JSON lines with type, uuid, sessionId); is this a Claude Code session file?")
        self.agent = is_subagent(self.infos)
        if self.builder is None:
            self._start(self.agent)
        self.builder.in_file = {i.uuid for i in self.infos if i.uuid}

    def _start(self, agent: Optional[str]) -> None:
        self.name = c.check_target(_name_of(self.sid, agent, self.path, self.session, self.exact, self.main_name))
        s = self.tape.session(self.name)
        first = self.first_time
        if first is None:
            self.undated = True
            first = c.undated_time(self.tape, s, self.path)
        elif self.infos and self.infos[0].line.ok:
            v = self.infos[0].line.value
            v = c.read_at(self.again, self.infos[0].line) if v is None else v
            if isinstance(v, dict) and c.valid_time(v.get("timestamp")) is None:
                first = c.prelude_time(self.tape, s, FMT, v) or first
        self.builder = Builder(s, self.again, self.infos, first, self.bar)

    def _lay_out(self, upto: int) -> None:
        """Lay out the lines before `upto` (the newest line read waits for the next)."""
        b, infos = self.builder, self.infos
        while self.done < upto:
            info = infos[self.done]
            p = info.parent
            if info.message and p and p != info.uuid and p not in b.entry_of:
                self.stalled = True  # later in the file, or not in it: run() tells once all is read
                for later in infos[self.done:]:
                    later.line.value = later.parts = None
                return
            b._process(self.done, False)
            self.done += 1
        self.held = 0


# -- export ---------------------------------------------------------------------------


# what a native entry of these kinds becomes: Claude Code has no record for a system prompt or
# a milestone (formats.export_notes tells the user)
DEMOTES = {"system": "system notice lines", "anchor": "system notice lines"}

# an error that answers a tool call: how it is written, what an import reads back (c.tallied)
ANSWERS = ("a tool_result block with is_error: true", "a tool_result entry with is_error")


def export(tape, ref: str, tally: Optional[dict] = None) -> Iterator[str]:
    links = _Links(tape)
    return c.export_records(tape, ref, FMT, lambda e: synthesize(e, links), order=_keep_main_last, tally=tally)


def _keep_main_last(tape, ref: str, entries: list) -> list:
    """Entries of a SESSION in the order that keeps `main` main on import: Claude Code's
    layout makes main the thread of the file's last message, so entries appended on
    another branch go right after the imported line they grew from (or first, for a
    branch of their own), and main's own appended entries last."""
    if not (c.NAME_RE.fullmatch(ref) and tape._session_exists(ref)):
        return entries
    main = tape.session(ref).refs().branches.get("main")
    on_main = set()
    h = main
    while h is not None and h not in on_main:
        on_main.add(h)
        h = tape.read_entry(h).parent
    by_hash = {e.hash: e for e in entries}

    def imported(e) -> bool:
        return isinstance(e.meta, dict) and isinstance(e.meta.get(c.LINE), int)

    after: dict = {}  # imported entry -> off-main entries appended from it
    first: list = []
    rest: list = []
    for e in entries:
        if imported(e):
            rest.append(e)
        elif e.hash in on_main:
            continue
        else:
            a = e.parent
            while a is not None and a in by_hash and not imported(by_hash[a]):
                a = by_hash[a].parent
            (after.setdefault(a, []) if a in by_hash else first).append(e)
    out = list(first)
    for e in rest:
        out.append(e)
        out.extend(after.get(e.hash, []))
    out.extend(e for e in entries if not imported(e) and e.hash in on_main)
    return out


def notes(tape, ref: str) -> list[str]:
    """What `export --format claude-code` cannot carry, for the user (on stderr)."""
    if not (c.NAME_RE.fullmatch(ref) and tape._session_exists(ref)):
        return []
    others = sorted(b for b in tape.session(ref).refs().branches if b != "main")
    if not others:
        return []
    return [f"claude-code files keep the tree, not branch names: on import, main is main again and the other "
            f"branches ({', '.join(others[:5])}{', ...' if len(others) > 5 else ''}) come back as fork-*/sidechain-* branches "
            f"(export --format jsonl keeps every name)"]


def _uuid(h: Optional[str]) -> Optional[str]:
    return str(uuidlib.UUID(h[:32])) if h else None


class _Links:
    """The uuid a Claude Code line written for an entry's parent has, and the session id
    around it: a record imported from Claude Code keeps its own uuid; an entry that
    carries no line of its own (a part of a record, a bookkeeping line without uuid)
    stands for the nearest ancestor that does; a native entry is named by its hash."""

    def __init__(self, tape):
        self.tape = tape
        self.memo: dict[str, tuple[Optional[str], Optional[str]]] = {}

    def of(self, h: Optional[str]) -> tuple[Optional[str], Optional[str]]:
        """(uuid of the line that stands for entry h, sessionId of the nearest record at or above it)."""
        path = []
        x = h
        while x is not None and x not in self.memo:
            e = self.tape.read_entry(x)
            path.append(e)
            x = e.parent
        above = self.memo[x] if x is not None else (None, None)
        if len(self.memo) + len(path) > MEMO:
            self.memo.clear()  # memory stays bounded; a later walk goes a little further
        for e in reversed(path):
            m = e.meta if isinstance(e.meta, dict) else {}
            src = c.source_format(m)
            rec = m.get(FMT) if src == FMT else None
            if isinstance(rec, dict) and isinstance(rec.get("uuid"), str):
                sid = rec.get("sessionId")
                above = (rec["uuid"], sid if isinstance(sid, str) else above[1])
            elif src != FMT and not m.get(HIDDEN):  # a line synthesize writes
                above = (_uuid(e.hash), above[1])
            self.memo[e.hash] = above
        return above if h is not None else (None, None)


def synthesize(e, links: Optional[_Links] = None) -> Optional[dict]:
    """A Claude Code line for an entry that did not come from Claude Code."""
    if isinstance(e.meta, dict) and e.meta.get(HIDDEN):
        return None
    p = e.payload if isinstance(e.payload, dict) else {}
    parent, sid = links.of(e.parent) if links is not None else (_uuid(e.parent), None)
    base = {"parentUuid": parent, "uuid": _uuid(e.hash), "timestamp": e.time}
    if sid:
        base["sessionId"] = sid
    if e.kind == "tool_call":
        block = {"type": "tool_use", "id": p.get("call_id"), "name": p.get("name"), "input": p.get("arguments")}
        return {**base, "type": "assistant", "message": {"role": "assistant", "content": [block]}}
    if e.kind == "tool_result":
        block = {"type": "tool_result", "tool_use_id": p.get("call_id"), "content": p.get("output")}
        if isinstance(p.get("is_error"), bool):
            block["is_error"] = p["is_error"]
        return {**base, "type": "user", "message": {"role": "user", "content": [block]}}
    if e.kind in ("assistant", "streaming"):
        content = p.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else c.parts_for(content, FMT, "assistant")
        return {**base, "type": "assistant", "message": {"role": "assistant", "content": blocks}}
    if e.kind == "user":
        return {**base, "type": "user", "message": {"role": "user", "content": c.parts_for(p.get("content"), FMT, "user")}}
    if e.kind == "anchor" and p.get("compaction") is True:  # where an agent replaced its history
        return {**base, "type": "system", "subtype": "compact_boundary", "content": p.get("summary") or p.get("name")}
    if e.kind == "anchor":  # a milestone: a status line, which changes nothing in what the agent sends
        return {**base, "type": "system", "content": c.anchor_label(p), "level": "info"}
    if e.kind == "error":
        return {**base, "type": "assistant", "isApiErrorMessage": True, "message": {"role": "assistant", "content": [{"type": "text", "text": p.get("message")}]}}
    return {**base, "type": "system", "content": c.text_of(p.get("content"))}


# -- incremental import (ctape watch) ---------------------------------------------------------


def start_builder(session, first_time: Optional[str]) -> Builder:
    """A Builder with no line yet, for `extend` (ctape watch)."""
    return Builder(session, None, [], first_time, c.Progress("", False))


def extend(b: Builder, f, infos: list[Info], orphans: set) -> bool:
    """Lay out lines appended to the file since the builder's last call (`ctape watch`), as
    Builder.run lays out the whole file. `f` reads the new lines at their `line.offset`.

    The layout equals run() over the file so far unless a new line is the parent of an
    earlier line that was made a root because its parent had not come yet: `orphans`
    holds those parents, and extend then returns False without doing anything (the
    caller imports the whole file again)."""
    if any(i.uuid in orphans for i in infos if i.uuid):
        return False
    b.f = f
    start = len(b.infos)
    b.infos.extend(infos)
    b.in_file.update(i.uuid for i in infos if i.uuid)
    waiting: dict[str, list[int]] = defaultdict(list)
    for i in range(start, len(b.infos)):
        info = b.infos[i]
        p = info.parent
        if info.message and p and p in b.in_file and p not in b.entry_of and p != info.uuid:
            waiting[p].append(i)
        else:
            if info.message and p and p not in b.in_file:
                orphans.add(p)
            b._cascade(i, waiting, False)
    while waiting:  # as in run(): parents that never came (a cycle)
        p, js = min(waiting.items(), key=lambda kv: kv[1][0])
        orphans.add(p)
        i = js.pop(0)
        if not js:
            del waiting[p]
        b._cascade(i, waiting, True)
    return True
