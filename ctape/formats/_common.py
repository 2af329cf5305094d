"""What the transcript importers and exporters share: reading lines, times, meta keys, export order.

Every imported record keeps its original JSON value in the entry's meta under the
format's name (`meta["claude-code"]`, `meta["codex"]`, `meta["openai"]`), together
with its 1-based line number (`meta["ctape.line"]`). Export in the same format
writes those values back in line order. A record that becomes several entries (a
user line holding two tool results, an assistant message with three tool calls)
keeps the record on its first entry; the others carry `ctape.part`. A line that is
not JSON is kept verbatim as `ctape.raw` on a hidden entry and written back as is;
when its bytes are not UTF-8 either, they are kept as base64 in `ctape.raw.b64` and
exported as a str whose undecodable bytes are surrogate escapes, so that
`line.encode("utf-8", "surrogateescape")` gives the original bytes back.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import time
import re
import sys
from typing import Any, Callable, Iterable, Iterator, Optional

from ..model.canonical import MAX_DEPTH, MAX_RECORD, max_record, nesting_problem, normal_time, parse_json, parse_record  # noqa: F401 - MAX_RECORD is read from here too
from ..errors import CtapeError, InvalidInput, RefNotFound
from ..ops.media import TEXT_PARTS
from ..model.models import HIDDEN, NAME_RE, Entry, RESERVED_BRANCHES, check_name, plural  # noqa: F401 - NAME_RE is read from here too
from ..model.redaction import is_marker
from ..model.refs import HEAD
from .reading import cannot_read, display_stem, is_stdin, real_path, too_long  # noqa: F401 - too_long is read from here too

LINE = "ctape.line"  # 1-based line of the source file the record came from
PART = "ctape.part"  # 1, 2, ... for the extra entries made from one record
ITEM = "ctape.item"  # position of a message inside a container record (openai)
TAIL = "ctape.tail"  # on the entry that closes a record read whole: a container's other fields (openai)
RAW = "ctape.raw"  # the text of a line that is not JSON, kept verbatim
RAW_B64 = "ctape.raw.b64"  # the bytes (base64) of a line that is neither JSON nor UTF-8
FORMAT = "ctape.format"  # the format a RAW line came from
EPOCH = "1970-01-01T00:00:00Z"  # the last resort of a Clock (importers pass the file's time: undated_time)


# -- reading ----------------------------------------------------------------------------


_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def loads(text) -> Any:
    """JSON text as a value ctape can store (canonical.parse_record: no NaN, Infinity, 1e400
    or integer of thousands of digits), else ValueError; also refuses a lone surrogate
    escape such as "\\ud800" and nesting deeper than IMPORT_DEPTH (such a line is then
    kept verbatim, as text)."""
    value = parse_record(text)
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    if _SURROGATE.search(raw):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a lone surrogate escape") from None
    if len(raw) > IMPORT_DEPTH and _brackets(raw) > IMPORT_DEPTH and nesting_problem(value, max_depth=IMPORT_DEPTH):
        raise ValueError("nested too deeply")
    return value


def _brackets(raw: bytes) -> int:
    """How many "[" and "{" `raw` holds (a bound on its nesting). bytes.replace finds them
    with memchr, two to three times faster than bytes.count on lines with few of them (most
    lines); a long line is counted in place, not copied."""
    if len(raw) > _STEP:
        return raw.count(b"[") + raw.count(b"{")
    return 2 * len(raw) - len(raw.replace(b"[", b"")) - len(raw.replace(b"{", b""))


# a record's value goes into an entry's meta a level or two down: lines nested deeper than
# this are kept as text, so that no record can break the limit of MAX_DEPTH
IMPORT_DEPTH = MAX_DEPTH - 4

_STEP = 1 << 20  # a long line is read this much at a time
BUFFER = 1 << 16  # bytes a source file is read at a time (lines of transcripts are a few KB)


def lines_of(f) -> Iterator[bytes]:
    """The lines of a binary file as `for raw in f` gives them, each read in bounded
    memory: a line longer than max_record() bytes is refused (InvalidInput) once that
    much of it is read."""
    limit = max_record()
    for number in itertools.count(1):
        raw = f.readline(_STEP)
        if len(raw) == _STEP and raw[-1:] != b"\n":
            raw = _long_line(f, raw, limit, number)
        if not raw:
            return
        if len(raw) - (raw[-1:] == b"\n") > limit:
            raise too_long(f, number, limit)
        yield raw


def _long_line(f, start: bytes, limit: int, number: int) -> bytes:
    buf = bytearray(start)
    while buf[-1:] != b"\n" and len(buf) <= limit:
        more = f.readline(_STEP)
        if not more:
            break
        buf += more
    if len(buf) - (buf[-1:] == b"\n") > limit:
        raise too_long(f, number, limit)
    return bytes(buf)


def read_whole(f) -> bytes:
    """The rest of a file that is one JSON document, refused beyond max_record() bytes."""
    limit = max_record()
    data = f.read(limit + 1)
    if len(data) > limit:
        raise too_long(f, None, limit)
    return data


class Line:
    """One non-blank line of a JSON Lines file: where it is and what it holds.

    `whole` is False only for the file's last line when it has no line end and is not
    complete JSON text: a line the tool may still be writing (see unfinished_note). Any
    other line that is not a value ctape can store (`ok` False) is kept verbatim."""

    __slots__ = ("number", "offset", "length", "value", "ok", "whole")

    def __init__(self, number: int, offset: int, length: int, value: Any, ok: bool, whole: bool = True):
        self.number, self.offset, self.length, self.value, self.ok, self.whole = number, offset, length, value, ok, whole


def is_json_text(raw: bytes) -> bool:
    """True when `raw` is complete JSON text, whatever values it holds (1e400, NaN, an
    integer of thousands of digits, deep nesting: ctape keeps such a line as text)."""
    try:
        json.loads(raw, parse_int=str, parse_float=str, parse_constant=str)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
    return True


def unfinished_note(lines: list) -> str:
    """Drops the last of `lines` (Lines, or objects with a `.line`) when a tool may still be
    writing it, and says so for the summary line; else "". A complete last line (it ends
    with a newline, or is complete JSON) stays, kept verbatim if ctape cannot store it as
    parsed, exactly as the same line in the middle of the file would be."""
    if not lines:
        return ""
    last = getattr(lines[-1], "line", lines[-1])
    if last.whole:
        return ""
    lines.pop()
    return f"skipped the incomplete last line {last.number} (file still being written?)"


def tool_arguments(text: Any) -> Any:
    """Tool-call arguments that arrive as a JSON string, parsed when they are JSON."""
    if isinstance(text, str):
        try:
            return loads(text)
        except ValueError:
            return text
    return text


def open_source(path: str):
    """The transcript's content, seekable (a pipe or `.zst` file: its copy, reading.spooled)."""
    try:
        return open(real_path(path), "rb", buffering=BUFFER)
    except OSError as e:
        raise cannot_read(path, e) from None


def scan_lines(f) -> Iterator[Line]:
    """Every non-blank line with its parsed value (value None and ok False when not JSON,
    or not a value ctape can store; `whole` False for a last line still being written).
    (lines_of and the parse in one loop: a few calls less a line, which is most of the
    cost of short lines.)"""
    limit = max_record()
    readline = f.readline
    offset = number = 0
    while True:
        number += 1
        raw = readline(_STEP)
        length = len(raw)
        if length == _STEP and raw[-1:] != b"\n":
            raw = _long_line(f, raw, limit, number)
            length = len(raw)
        if not length:
            return
        if length > limit and length - (raw[-1:] == b"\n") > limit:
            raise too_long(f, number, limit)
        if raw[:1] == b"{" or raw.strip():
            try:
                value = loads(raw)
            except (ValueError, UnicodeDecodeError):
                # no line end: the last line, maybe still being written (unless complete JSON)
                yield Line(number, offset, length, None, False, raw[-1:] == b"\n" or is_json_text(raw))
            else:
                yield Line(number, offset, length, value, True)
        offset += length


def read_at(f, line: Line) -> Any:
    """The value of a line found by scan_lines, read again (keeps memory bounded);
    for a line that is not JSON, its bytes without the line end."""
    f.seek(line.offset)
    raw = f.read(line.length)
    return loads(raw) if line.ok else raw.rstrip(b"\r\n")


def ends_with_newline(f) -> bool:
    f.seek(0, os.SEEK_END)
    if f.tell() == 0:
        return True
    f.seek(-1, os.SEEK_END)
    return f.read(1) == b"\n"


# -- times ------------------------------------------------------------------------------


class Clock:
    """Entry times from the records: a record without a (valid) time takes the previous one's.

    Records before the first timed one take the first time found in the file, so
    no time ever comes from the clock at import.
    """

    def __init__(self, first: Optional[str]):
        self.last = first or EPOCH

    def take(self, value: Any) -> str:
        if isinstance(value, str) and value:
            try:
                self.last = normal_time(value)
            except InvalidInput:
                pass
        return self.last


FILE_TIME_FLOOR = 315_532_800  # 1980-01-01: a modification time before it is no time (see file_time)


def file_time(path: str) -> Optional[str]:
    """The file's modification time (RFC 3339 UTC): the time of records that carry none
    (SPEC 10: never 1970); None for stdin and pipes read now. A file whose time is before
    1980 gets the time it is read: the Nix store, reproducible archives and some unpackers
    set 0 or 1, which stamped every entry 1970 (found by an audit)."""
    import datetime

    from ..model.models import format_time

    for p in (str(path), real_path(path)):  # a `.zst` file's own time, else its copy's (stdin: now)
        try:
            st = os.stat(p)
        except OSError:
            continue
        when = st.st_mtime if st.st_mtime >= FILE_TIME_FLOOR else time.time()
        return format_time(datetime.datetime.fromtimestamp(when, datetime.timezone.utc))
    return None


def undated_time(tape, session, path: str) -> Optional[str]:
    """The time for the records of a file that has none (SPEC 10: the file's time, never
    1970): the time its session's first imported entry got when the session already holds
    one (so a file imported again, or grown, gives the same entries), else the file's."""
    root = _imported_root(tape, session)
    return root.time if root is not None else file_time(path)


def prelude_time(tape, session, fmt: str, first: Any) -> Optional[str]:
    """The time for the untimed records a file starts with (Claude Code's summary lines),
    when an import of the file before it held a timed record gave them one (the file's
    time) and is the session's root: so the grown file's import gives them the same
    entries, and goes on from them (before, they took the first record's time, and the
    whole file went on a new thread). None when the session's root is not this file's
    first record."""
    root = _imported_root(tape, session)
    if root is not None and root.meta.get(LINE) == 1 and root.meta.get(fmt) == first:
        return root.time
    return None


def _imported_root(tape, session):
    """The root of `main` in a session that exists, when an import wrote it; else None."""
    if session is None or not session.exists():
        return None
    h = session.refs().branches.get("main")
    root = None
    while h is not None:
        root = tape.read_entry(h)
        h = root.parent
    if root is not None and isinstance(root.meta, dict) and isinstance(root.meta.get(LINE), int):
        return root
    return None


def valid_time(value: Any) -> Optional[str]:
    if isinstance(value, str) and value:
        try:
            return normal_time(value)
        except InvalidInput:
            return None
    return None


# -- names ------------------------------------------------------------------------------


def session_name(candidate: Any, path: str) -> str:
    """A valid session name from a record's id, else from the file name (stdin has none)."""
    if not (isinstance(candidate, str) and candidate) and is_stdin(path):
        raise InvalidInput(f"{path}: its records name no session; name one with -s NAME (nothing was imported)")
    for text in (candidate, display_stem(path)):
        if isinstance(text, str) and text:
            name = re.sub(r"[^A-Za-z0-9._-]+", "-", text).lstrip("._-")[:128].rstrip(".")
            if name.endswith(".lock"):
                name = name[:-5]
            if name and NAME_RE.fullmatch(name):
                return name
    raise InvalidInput(f"{path}: cannot derive a session name; pass -s NAME")


def branch_name(base: str, taken: set) -> str:
    name = session_name(base, "branch")[:120]
    out, n = name, 2
    while out in taken or out in RESERVED_BRANCHES:
        out, n = f"{name}-{n}", n + 1
    taken.add(out)
    return out


# -- writing ----------------------------------------------------------------------------


def hidden(meta: dict) -> dict:
    meta[HIDDEN] = True
    return meta


def record_meta(fmt: str, record: Any, line: int, is_hidden: bool = False) -> dict:
    meta = {fmt: record, LINE: line}
    return hidden(meta) if is_hidden else meta


def raw_line_meta(fmt: str, raw: bytes | str, line: int) -> dict:
    try:
        kept: dict = {RAW: raw if isinstance(raw, str) else raw.decode("utf-8")}
    except UnicodeDecodeError:
        kept = {RAW_B64: base64.b64encode(raw).decode("ascii")}
    return hidden({**kept, FORMAT: fmt, LINE: line})


def raw_line(meta: dict) -> Optional[str]:
    """The line a raw-line entry keeps (undecodable bytes as surrogate escapes; a redacted
    one as its marker), else None."""
    if isinstance(meta.get(RAW), str):
        return meta[RAW]
    kept = meta.get(RAW_B64)
    if isinstance(kept, str):
        return kept if is_marker(kept) else base64.b64decode(kept).decode("utf-8", "surrogateescape")
    return None


def part_meta(fmt: str, line: int, part: int, is_hidden: bool = False) -> dict:
    meta = {FORMAT: fmt, LINE: line, PART: part}
    return hidden(meta) if is_hidden else meta


def is_ancestor(tape, a: str, b: str) -> bool:
    """True when entry a is b or on b's path to its root."""
    from ..history.derived import ancestor

    ea, eb = tape.read_entry(a), tape.read_entry(b)
    if ea.seq > eb.seq:
        return False
    return ancestor(b, eb.seq - ea.seq, tape.read_entry, tape.store.index.keyframe) == a


def imported_names(name: str) -> list[str]:
    """Where an import puts a ref whose name is taken by another value here: NAME, then
    NAME-imported, NAME-imported-2, ..."""
    return [name, f"{name}-imported"] + [f"{name}-imported-{n}" for n in range(2, 100)]


def _replaces_tail(tape, old: str, new: str) -> bool:
    """Is `old` the closing bookkeeping entry of a record read whole (TAIL: a container's
    fields besides its list), and `new` the tip of that record written again, grown or
    with those fields changed (it extends what `old` closed)? Then a branch at `old` moves
    to `new`: what `old` held, the file no longer says (the ref log keeps it until
    `--expire`)."""
    try:
        e = tape.read_entry(old)
    except CtapeError:
        return False
    m = e.meta if isinstance(e.meta, dict) else {}
    return TAIL in m and e.parent is not None and (e.parent == new or is_ancestor(tape, e.parent, new))


def safe_refs(tape, session, wanted: dict, head: str = "@main", say_ahead: bool = True) -> tuple[dict, list[str]]:
    """The ref changes an import may make: it never removes or rewinds a ref, and never
    takes an entry off the refs (but a closing bookkeeping entry, below).

    A branch the session does not have is created; one the imported tip extends moves
    forward (a file that grew; a record read whole that grew replaces its closing
    bookkeeping entry, `_replaces_tail`); one ahead of the imported tip stays; one that went
    another way stays too, and the imported tip goes to `BRANCH-imported` (or moves
    that one forward, or `-imported-2`, ...), unless the tip the branch would leave is one
    this import puts on another branch: the file's layout moved on (an OpenHands
    `output.jsonl` with a run appended: `main` names the last run, and the run it named
    gets its own branch), so the branch moves as a fresh import would lay it out, and no
    entry leaves the refs (every tip wanted ends on a branch, or behind one). A null asks
    to delete: it is ignored. HEAD is set only when the session has none yet.
    `say_ahead=False` leaves out the note on a branch ahead of the imported tip (a file
    that grew, read by a watcher behind another one that moved the branch: not shorter).

    A stream a dead writer left in the session is recorded first (SPEC 6: no later than the
    next write), so the changes are worked out from the refs that record moved."""
    if session.exists():
        session.recover()
    st = session.refs() if session.exists() else None
    branches = dict(st.branches) if st else {}
    changes: dict = {}
    notes: list[str] = []
    named = set(wanted.values())  # a branch may leave a tip that another one takes
    for b, h in wanted.items():
        if h is None:
            if b in branches:
                notes.append(f"left branch {b} as it is (an import never deletes a branch)")
            continue
        for name in imported_names(b):
            old = branches.get(name)
            if old is None:
                changes[name] = branches[name] = h
                if name != b:
                    notes.append(f"branch {b} went another way: the imported one is branch {name}")
                break
            if old == h or is_ancestor(tape, h, old):
                if name == b and old != h and say_ahead:
                    notes.append(f"kept branch {b}: it is ahead of the imported one")
                break
            if is_ancestor(tape, old, h) or _replaces_tail(tape, old, h):
                changes[name] = branches[name] = h
                break
            if name == b and old in named:  # (wanted[b] is not old: named by another)
                others = sorted(k for k, v in wanted.items() if v == old and k != b)
                changes[name] = branches[name] = h
                notes.append(f"moved branch {b} to the imported one: the entry it named is on branch {others[0]}")
                break
    if st is None or st.head is None:
        changes[HEAD] = head
    return changes, notes


class Progress:
    """A one-line progress report on stderr, by bytes read; silent when off."""

    def __init__(self, path: str, on: bool):
        self.on = on
        self.path = path
        self.total = os.path.getsize(real_path(path)) if on else 0
        self.shown = -1

    def update(self, offset: int) -> None:
        if not self.on or not self.total:
            return
        pct = min(100, offset * 100 // self.total)
        if pct != self.shown and pct % 5 == 0:
            self.shown = pct
            sys.stderr.write(f"\rimporting {os.path.basename(self.path)}: {pct:3d}%")
            sys.stderr.flush()

    def done(self) -> None:
        if self.on and self.shown >= 0:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()


NOTHING_NEW = "nothing new in "  # how summary_line begins when an import changed nothing (watch keeps quiet then)


def summary_line(path: str, name: str, records: int, entries: int, branches: int, notes: Iterable[str], new: bool = True,
                 new_entries: Optional[int] = None) -> str:
    """The line an import prints. `new_entries`: how many of `entries` the tape did not hold
    (a transcript imported again after it grew: "(50 entries, 25 new to the tape)")."""
    if not new:
        return f"{NOTHING_NEW}{path}: session {name} already holds {plural(records, 'its record', f'its {records} records')}"
    text = f"imported {records} {plural(records, 'record', 'records')} from {path} into session {name} ({entries} {plural(entries, 'entry', 'entries')}"
    if new_entries is not None and new_entries < entries:
        text += f", {new_entries} new to the tape"
    text += f", {branches} branches)" if branches > 1 else ")"
    notes = [n for n in notes if n]
    return text + ("; " + "; ".join(notes) if notes else "")


def check_target(name: str) -> str:
    return check_name(name, "session name")


# -- exporting --------------------------------------------------------------------------


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def entries_for_export(tape, ref: str) -> list:
    """For a SESSION: every entry reachable from its branches and HEAD, in source order
    (imported entries by line, then the others by depth); for any other REF: root -> REF."""
    if NAME_RE.fullmatch(ref) and tape._session_exists(ref):
        sess = tape.session(ref)
        st = sess.refs()
        sess.check_refs_read_back(st)  # damaged, not a session of no entries
        tips = [h for h in list(st.branches.values()) + [st.head_hash] if h]
        seen: dict[str, Any] = {}
        stack = list(tips)
        while stack:
            h = stack.pop()
            if h in seen or not tape.has_entry(h):
                continue
            e = tape.read_entry(h)
            seen[h] = _order_key(e)
            if e.parent and e.parent not in seen:
                stack.append(e.parent)
        ordered = sorted(seen.items(), key=lambda kv: kv[1])
        return [tape.read_entry(h) for h, _ in ordered]
    h = tape.resolve(ref)
    if h is None:
        raise RefNotFound(f"{ref!r} has no entries to export")
    path = []
    while h:
        e = tape.read_entry(h)
        path.append(e)
        h = e.parent
    return path[::-1]


def _order_key(e) -> tuple:
    m = e.meta if isinstance(e.meta, dict) else {}
    line = m.get(LINE)
    if isinstance(line, int):
        return (0, line, m.get(ITEM, -1), m.get(PART, 0), e.seq, e.hash)
    return (1, 0, 0, 0, e.seq, e.hash)


FORMATS = ("claude-code", "codex", "openai", "gemini")


def source_format(meta: dict) -> Optional[str]:
    if isinstance(meta.get(FORMAT), str):
        return meta[FORMAT]
    return next((k for k in FORMATS if k in meta), None)


ANSWER = "error answering a call"  # tally kind of an error written as its call's failed result


def tallied(synthesize: Callable, tally: Optional[dict], tape=None, entries: Optional[list] = None,
            fmt: Optional[str] = None) -> Callable:
    """`synthesize` (an exporter's: a record for an entry of another origin, or None),
    counting what it made of each visible entry in `tally`: (kind, written) -> entries.
    formats.export_notes tells the user what the format could not carry from it.

    Given the `tape` and the `entries` exported, two kinds no agent format has a record for
    are written so that an import gives back what `status` and `context` saw (SPEC 3, 6):
    an `error` that answers a tool call on its path is written as a failed `tool_result`
    (tallied as ANSWER), so the call is not pending after an import and the error's text
    is its result; an interrupted stream that nothing exported follows (the end of a
    branch) is left out, as `context` leaves it out by default. A stream the agent went on
    from is an assistant message in `context`, and is written as one.

    Claude's thinking blocks, which `fmt` may have no part for (parts_for leaves them out),
    are counted as THOUGHT; a message of nothing else is counted as its blocks alone."""
    ends = _childless(entries) if entries is not None else set()

    def counted(e, *args):
        kind = e.kind
        if tape is not None and e.kind == "error" and answers_call(tape, e):
            kind = ANSWER
            p = e.payload
            e = Entry(e.hash, e.parent, e.seq, "tool_result", e.time, {"call_id": p["call_id"], "output": p.get("message"), "is_error": True}, e.meta, e.delta)
        rec = None if e.kind == "streaming" and e.hash in ends else synthesize(e, *args)
        if tally is not None and not (isinstance(e.meta, dict) and e.meta.get(HIDDEN)):  # bookkeeping: not the user's
            left = thoughts(e) if fmt in NO_THOUGHTS else 0
            if left:
                tally[(THOUGHT, False)] = tally.get((THOUGHT, False), 0) + left
            if not (left and rec is None):
                key = (kind, rec is not None)
                tally[key] = tally.get(key, 0) + 1
        return rec

    return counted


def _childless(entries: list) -> set[str]:
    """The entries no other entry of the list names as its parent."""
    parents = {e.parent for e in entries}
    return {e.hash for e in entries if e.hash not in parents}


def answers_call(tape, e) -> bool:
    """True when `e`, an error with a call_id, answers a tool call: a call of that id is
    pending at its parent, as `status` counts pending calls (SPEC 3; the derived values,
    read from the nearest keyframe: bounded work per error, where a walk to the root made
    an export of many errors quadratic)."""
    cid = e.payload.get("call_id") if isinstance(e.payload, dict) else None
    if not isinstance(cid, str) or e.parent is None or (isinstance(e.meta, dict) and e.meta.get(HIDDEN)):
        return False
    try:
        d = tape.derived(e.parent, remember=True)  # the next error of the path walks back to here
    except CtapeError:
        return False  # a hole in the path: nothing known to answer
    return any(p["call_id"] == cid for p in d["pending"])


def export_records(tape, ref: str, fmt: str, synthesize: Callable[[Any], Optional[Any]], order: Optional[Callable] = None,
                   tally: Optional[dict] = None) -> Iterator[str]:
    """Records of `fmt` back as JSON lines, in source order.

    Entries imported from `fmt` give their record back (once per record); bookkeeping
    entries imported from another format are left out; every other entry (native
    appends, messages imported from another format) is converted by `synthesize`
    (counted in `tally`, see tallied).
    """
    entries = entries_for_export(tape, ref)
    synthesize = tallied(synthesize, tally, tape, entries, fmt)
    for e in order(tape, ref, entries) if order else entries:
        m = e.meta if isinstance(e.meta, dict) else {}
        src = source_format(m)
        if src == fmt:
            if raw_line(m) is not None:
                yield raw_line(m)
            elif fmt in m:
                yield dumps(m[fmt])
        elif src is not None and m.get(HIDDEN):
            continue
        else:
            rec = synthesize(e)
            if rec is not None:
                yield dumps(rec)


def anchor_label(payload: dict) -> str:
    """The text of a milestone anchor (not a compaction) in a format that has no record for
    one: it is written as a status line, which a re-import keeps as bookkeeping."""
    name, summary = payload.get("name"), payload.get("summary")
    label = f"ctape anchor {name}" if isinstance(name, str) else "ctape anchor"
    return f"{label}: {summary}" if isinstance(summary, str) and summary else label


def tool_output(out: Any) -> Any:
    """A tool result's output for a format whose tool output is text: a string as it is, and
    a list of text parts (a Claude Code subagent's answer, a newer Codex output) as their
    text joined by lines, as `context` gives it to the model; anything else as None (the
    caller writes it its own way). It went out as the JSON of the parts, which the model
    read as text after a re-import (found by an audit)."""
    if isinstance(out, str):
        return out
    if isinstance(out, list) and out and all(isinstance(p, dict) and p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str) for p in out):
        return "\n".join(p["text"] for p in out)
    return None


# Claude's thinking blocks: Chat Completions and Codex messages have no part for them (an
# API refuses the message), and Codex's reasoning items carry the model's own encrypted
# state, which a block cannot give: left out there, and counted in the export's note
THOUGHT_PARTS = ("thinking", "redacted_thinking")
THOUGHT = "thinking"  # the tally's kind for them (formats.export_notes)
NO_THOUGHTS = ("openai", "codex")


def thoughts(e) -> int:
    """How many thinking blocks an entry's content holds."""
    content = e.payload.get("content") if isinstance(e.payload, dict) else None
    if not isinstance(content, list):
        return 0
    return sum(1 for part in content if isinstance(part, dict) and part.get("type") in THOUGHT_PARTS)


def only_thoughts(content: Any, parts: Any) -> bool:
    """True when parts_for left nothing of a message's content list but thinking blocks:
    the message is then left out, not written empty."""
    return isinstance(content, list) and bool(content) and parts == []


# the content parts each format has: a part of one of these types is written as it is
NATIVE_PARTS = {
    "openai": {"text", "image_url", "input_audio", "file", "refusal"},
    "codex": {"input_text", "output_text", "input_image", "input_file", "refusal"},
    "claude-code": {"text", "image", "document", "thinking", "redacted_thinking", "tool_use", "tool_result", "server_tool_use",
                    "web_search_tool_result", "search_result"},
}


def parts_for(content: Any, fmt: str, role: str = "user") -> Any:
    """A message's content with each part in `fmt`'s shape (an export to another agent's
    format): a text part of any agent as the format's text part, an image or document of
    any shape (ops/media.py) as the format's media part, or the note that stands for it;
    a thinking block left out where the format has no part for it (NO_THOUGHTS); parts the
    format has, and parts ctape does not know, as they are. A string as it is.
    Claude's image blocks went into Chat Completions and Codex messages as they were, and
    Codex's `input_image` into Claude Code lines (found by an audit): ctape read them
    back, but those agents would not."""
    if not isinstance(content, list):
        return content
    from ..ops import media as media_mod

    native = NATIVE_PARTS[fmt]
    out = []
    for part in content:
        t = part.get("type") if isinstance(part, dict) else None
        if t in THOUGHT_PARTS and fmt in NO_THOUGHTS:
            continue
        if t in native or not isinstance(part, dict):
            out.append(part)
        elif t in TEXT_PARTS and isinstance(part.get("text"), str):
            kind = ("output_text" if role == "assistant" else "input_text") if fmt == "codex" else "text"
            out.append({"type": kind, "text": part["text"]})
        elif (m := media_mod.media_of(part)) is not None:
            if fmt == "openai":
                out.append(media_mod.openai_part(m))
            elif fmt == "claude-code":
                out.append(media_mod.anthropic_part(m, user=role == "user"))
            else:
                url = media_mod.image_url_of(m)
                out.append({"type": "input_image", "image_url": url} if url else {"type": "input_text", "text": media_mod.left_out(m, "Codex")})
        else:
            out.append(part)
    return out


def text_of(content: Any) -> str:
    """The plain text of a content value (a string, or a list of parts with text)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
        return "\n".join(out)
    return "" if content is None else json.dumps(content, ensure_ascii=False)
