"""What the transcript importers and exporters share: reading lines, times, meta keys, export order.

Every imported record keeps its original JSON value in the entry's meta under the
format's name (`meta["claude-code"]`, `meta["codex"]`, `meta["openai"]`), together
with its 1-based line number (`meta["ctape.line"]`). Export in the same format
writes those values back in line order. A record that becomes several entries (a
user line holding two tool results, an assistant message with three tool calls)
keeps the record on its first entry; the others carry `ctape.part`. A line that is
not JSON is kept verbatim as `ctape.raw` on a hidden entry and written back as is.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Callable, Iterable, Iterator, Optional

from ..errors import InvalidInput, RefNotFound
from ..models import HIDDEN, NAME_RE, check_name, parse_time

LINE = "ctape.line"  # 1-based line of the source file the record came from
PART = "ctape.part"  # 1, 2, ... for the extra entries made from one record
ITEM = "ctape.item"  # position of a message inside a container record (openai)
RAW = "ctape.raw"  # the text of a line that is not JSON, kept verbatim
FORMAT = "ctape.format"  # the format a RAW line came from
EPOCH = "1970-01-01T00:00:00Z"  # time of leading records when the file has no time at all


# -- reading ----------------------------------------------------------------------------


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def loads(text) -> Any:
    """json.loads that refuses what ctape cannot store as JSON: NaN, Infinity, and a lone
    surrogate escape such as "\\ud800" (such a line is then kept verbatim, as text)."""
    value = json.loads(text, parse_constant=_no_constant)
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    if _SURROGATE.search(raw):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a lone surrogate escape") from None
    return value


class Line:
    """One non-blank line of a JSON Lines file: where it is and what it holds."""

    __slots__ = ("number", "offset", "length", "value", "ok")

    def __init__(self, number: int, offset: int, length: int, value: Any, ok: bool):
        self.number, self.offset, self.length, self.value, self.ok = number, offset, length, value, ok


def tool_arguments(text: Any) -> Any:
    """Tool-call arguments that arrive as a JSON string, parsed when they are JSON."""
    if isinstance(text, str):
        try:
            return loads(text)
        except ValueError:
            return text
    return text


def open_source(path: str):
    try:
        return open(path, "rb")
    except OSError as e:
        raise InvalidInput(f"cannot read {path}: {e.strerror}") from None


def scan_lines(f) -> Iterator[Line]:
    """Every non-blank line with its parsed value (value None and ok False when not JSON)."""
    offset = 0
    for number, raw in enumerate(f, 1):
        length = len(raw)
        if raw.strip():
            try:
                yield Line(number, offset, length, loads(raw), True)
            except (ValueError, UnicodeDecodeError):
                yield Line(number, offset, length, None, False)
        offset += length


def read_at(f, line: Line) -> Any:
    """The value of a line found by scan_lines, read again (keeps memory bounded)."""
    f.seek(line.offset)
    raw = f.read(line.length)
    return loads(raw) if line.ok else raw.decode("utf-8", "replace").rstrip("\r\n")


def raw_text(f, line: Line) -> str:
    f.seek(line.offset)
    return f.read(line.length).decode("utf-8", "replace").rstrip("\r\n")


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
                self.last = parse_time(value)
            except InvalidInput:
                pass
        return self.last


def valid_time(value: Any) -> Optional[str]:
    if isinstance(value, str) and value:
        try:
            return parse_time(value)
        except InvalidInput:
            return None
    return None


# -- names ------------------------------------------------------------------------------


def session_name(candidate: Any, path: str) -> str:
    """A valid session name from a record's id, else from the file name."""
    for text in (candidate, os.path.splitext(os.path.basename(path))[0]):
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
    while out in taken:
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


def raw_line_meta(fmt: str, text: str, line: int) -> dict:
    return hidden({RAW: text, FORMAT: fmt, LINE: line})


def part_meta(fmt: str, line: int, part: int, is_hidden: bool = False) -> dict:
    meta = {FORMAT: fmt, LINE: line, PART: part}
    return hidden(meta) if is_hidden else meta


class Progress:
    """A one-line progress report on stderr, by bytes read; silent when off."""

    def __init__(self, path: str, on: bool):
        self.on = on
        self.path = path
        self.total = os.path.getsize(path) if on else 0
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


def set_import_refs(s, changes: dict, **extra: Any) -> bool:
    """Write an import's ref record, leaving out every branch the session already has at
    that entry or past it, and HEAD unless the session has none: re-importing a file moves
    nothing. False when nothing was left to write."""
    from ..derived import ancestor
    from ..refs import HEAD

    tape = s.tape
    st = s.refs() if s.exists() else None
    todo = {}
    for ref, h in changes.items():
        if ref == HEAD:
            continue
        cur = st.branches.get(ref) if st is not None else None
        if cur is not None and h is not None and cur != h:
            ce, he = tape.read_entry(cur), tape.read_entry(h)
            if ce.seq > he.seq and ancestor(cur, ce.seq - he.seq, tape.read_entry, tape.store.index.keyframe) == h:
                cur = h  # the branch has moved on from the imported tip
        if cur != h:
            todo[ref] = h
    if not todo:
        return False
    if HEAD in changes and (st is None or st.head is None):
        todo[HEAD] = changes[HEAD]
    s.set_refs("import", todo, **extra)
    return True


def summary_line(path: str, name: str, records: int, entries: int, branches: int, notes: Iterable[str], new: bool = True) -> str:
    if not new:
        return f"nothing new in {path}: session {name} already holds its {records} records"
    text = f"imported {records} records from {path} into session {name} ({entries} entries"
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
        st = tape.session(ref).refs()
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


FORMATS = ("claude-code", "codex", "openai")


def source_format(meta: dict) -> Optional[str]:
    if isinstance(meta.get(FORMAT), str):
        return meta[FORMAT]
    return next((k for k in FORMATS if k in meta), None)


def export_records(tape, ref: str, fmt: str, synthesize: Callable[[Any], Optional[Any]]) -> Iterator[str]:
    """Records of `fmt` back as JSON lines, in source order.

    Entries imported from `fmt` give their record back (once per record); bookkeeping
    entries imported from another format are left out; every other entry (native
    appends, messages imported from another format) is converted by `synthesize`.
    """
    for e in entries_for_export(tape, ref):
        m = e.meta if isinstance(e.meta, dict) else {}
        src = source_format(m)
        if src == fmt:
            if RAW in m:
                yield m[RAW]
            elif fmt in m:
                yield dumps(m[fmt])
        elif src is not None and m.get(HIDDEN):
            continue
        else:
            rec = synthesize(e)
            if rec is not None:
                yield dumps(rec)


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
