"""Human-readable text for the CLI: log lines, the branch graph, status, one entry.

Text from the tape (payloads, names in records, times) is passed through `clean`
before it reaches a terminal: control characters (BEL, ESC, ...) and bidirectional
overrides are shown escaped, never sent as they are.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Iterable, Iterator, Optional

from ..model.models import Entry

# C0 controls but tab and newline, DEL, C1 controls, and the bidi embeddings, overrides
# and isolates that can reorder what a terminal shows
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# on stderr also the carriage return of progress lines is kept
_CONTROL_STDERR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

# meta keys holding an importer's raw source record: shown by `show` only with --meta
SOURCE_KEYS = ("claude-code", "codex", "openai", "ctape.raw")


def _escape(m: re.Match) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def clean(text: Any, keep_newlines: bool = False) -> str:
    """`text` safe for a terminal: control characters written as \\xNN escapes."""
    return (_CONTROL if keep_newlines else _CONTROL_LINE).sub(_escape, str(text))


def clean_stderr(text: str) -> str:
    """A line for stderr (cli.base.escape_stderr): control characters escaped but tab,
    newline and carriage return."""
    return _CONTROL_STDERR.sub(_escape, text)


def fit(text: str, width: Optional[int]) -> str:
    """`text` cut to `width` characters, the last one an ellipsis when something was cut."""
    if width is None or len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + "…"


def _color(text: str, code: str) -> str:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb" or not sys.stdout.isatty():
        return text  # (a dumb terminal shows escape codes as text, as git knows)
    return f"\033[{code}m{text}\033[0m"


def summary(e: Entry, width: int = 72) -> str:
    p = e.payload if isinstance(e.payload, dict) else {}
    if e.kind == "tool_call":
        args = json.dumps(p.get("arguments"), ensure_ascii=False, sort_keys=True)
        text = f"{p.get('name')}({args}) [{p.get('call_id')}]"
    elif e.kind == "tool_result":
        out = p.get("output")
        out = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)
        err = " ERROR" if p.get("is_error") else ""
        text = f"[{p.get('call_id')}]{err} {out}"
    elif e.kind == "anchor":
        text = str(p.get("name"))
    elif e.kind == "error":
        text = str(p.get("message"))
    else:
        c = p.get("content")
        if isinstance(c, list):  # text parts, and a refusal's text (the Responses API's part)
            c = " ".join(str(part.get("text", part.get("refusal", ""))) if isinstance(part, dict) else str(part) for part in c)
        text = c if isinstance(c, str) else json.dumps(e.payload, ensure_ascii=False)
    text = clean(_squeezed(str(text), width))
    return text if len(text) <= width else text[: width - 1] + "…"


def _squeezed(text: str, width: int) -> str:
    """`" ".join(text.split())`, or a prefix of it longer than `width` characters: what a
    line of that width shows, read from the start of the text only, so that the summary of
    a 200 KB tool output costs what a short one's does. (Squeezing a prefix of the text
    gives a prefix of the squeezed text: its last word may be cut, never changed.)"""
    n = 2 * width + 64
    while n < len(text):
        head = " ".join(text[:n].split())
        if len(head) > width:
            return head
        n *= 4
    return " ".join(text.split())


def decorations(tape, session: Optional[str], only: Optional[Iterable[str]] = None) -> dict[str, list[str]]:
    """Entry hash -> its labels (branches, tags, HEAD), as git's --decorate; `only`: the
    labels of these entries alone (a few: the refs at them are looked up, not all)."""
    if not session or not tape._session_exists(session):
        return {}
    st = tape.session(session).refs() if only is None else tape.session(session).view(values=only)
    deco: dict[str, list[str]] = {}
    for b, h in sorted(st.branches.items()):
        label = f"HEAD -> {b}" if st.branch == b else b
        deco.setdefault(h, []).append(label)
    for t, h in sorted(st.tags.items()):  # after the branches, as git's --decorate
        deco.setdefault(h, []).append(f"tag: {t}")
    if st.branch is None and st.head_hash:
        deco.setdefault(st.head_hash, []).insert(0, "HEAD")
    return deco


def carry_labels(entries: Iterable[Entry], deco: dict, above: dict) -> Iterator[Entry]:
    """The entries as they come, each given the labels of the hidden entries above it that
    the walk left out (history.logview.walk's `above`): HEAD two hidden entries up reads
    `HEAD -> main +2 hidden` on the newest entry shown below it, as `log --hidden` would
    show it two lines higher."""
    for e in entries:
        over = above.pop(e.hash, None)
        extra = [f"{label} +{seq - e.seq} hidden" for h, seq in over or () for label in deco.get(h, ())]
        if extra:
            deco[e.hash] = extra + deco.get(e.hash, [])
        yield e


def _deco(e: Entry, deco: dict) -> str:
    names = deco.get(e.hash)
    return " " + _color("(" + clean(", ".join(names)) + ")", "36") if names else ""


def _hidden_mark(e: Entry) -> str:
    return " [hidden]" if isinstance(e.meta, dict) and e.meta.get("ctape.hidden") else ""


def oneline(e: Entry, deco: dict) -> str:
    return f"{_color(e.hash[:12], '33')}{_deco(e, deco)} {clean(e.kind):<11} {summary(e)}{_hidden_mark(e)}"


def _meta_line(meta: dict, with_source: bool) -> Optional[str]:
    shown = {k: v for k, v in meta.items() if with_source or k not in SOURCE_KEYS}
    if not shown:
        return None
    return "Meta:   " + clean(json.dumps(shown, ensure_ascii=False, sort_keys=True))


def full(e: Entry, deco: dict) -> str:
    lines = [
        _color(f"entry {e.hash}", "33") + _deco(e, deco) + _hidden_mark(e),
        f"Kind:   {clean(e.kind)}",
        f"Seq:    {e.seq}",
        f"Date:   {clean(e.time)}",
    ]
    lines += ["", "    " + summary(e, 200), ""]
    return "\n".join(lines)


def _json_block(value: Any) -> list[str]:
    return clean(json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False), keep_newlines=True).splitlines()


def _text_block(value: Any) -> list[str]:
    """A content or output value as text: a string as is, parts' text in order, else JSON."""
    if isinstance(value, str):
        return clean(value, keep_newlines=True).splitlines() or [""]
    if isinstance(value, list) and all(isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("text"), str)) for p in value):
        out: list[str] = []
        for p in value:
            out += _text_block(p if isinstance(p, str) else p["text"])
        return out
    if isinstance(value, list):
        out = []
        for p in value:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                out += _text_block(p["text"])
            elif isinstance(p, str):
                out += _text_block(p)
            else:
                out += [f"[{clean(p.get('type', 'part'))}]" if isinstance(p, dict) else ""] + _json_block(p)
        return out
    return _json_block(value)


ARG_LINE = 100  # an argument value shown as one line of JSON up to this many characters


def _arguments(args: Any) -> list[str]:
    """A tool call's arguments as a person reads them: one `name: value` line each (values
    as JSON, so a string "60" and a number 60 differ), a string of several lines as a block
    of text below its name, as git shows a commit message (a command, a file's new text),
    a long object or list as indented JSON. Arguments given as JSON text (OpenAI's) are
    read as the object they hold; anything else is shown as text or JSON."""
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            return _text_block(args)
        args = parsed
    if not isinstance(args, dict) or not args:
        return _json_block(args)
    out: list[str] = []
    for k, v in args.items():
        name = clean(k)
        if isinstance(v, str) and ("\n" in v or "\r" in v):
            out += [f"{name}:", *("    " + line if line else "" for line in _text_block(v))]
            continue
        one = json.dumps(v, ensure_ascii=False)
        if len(one) <= ARG_LINE or not isinstance(v, (dict, list)):
            out.append(f"{name}: {clean(one)}")
        else:
            out += [f"{name}:", *("    " + line for line in _json_block(v))]
    return out


def payload_lines(e: Entry) -> list[str]:
    """The payload as a person reads it: text as text, tool calls as name and arguments."""
    p = e.payload if isinstance(e.payload, dict) else None
    if p is None:
        return _json_block(e.payload)
    used: set = set()
    out: list[str] = []
    if e.kind == "tool_call":
        out.append(f"{clean(p.get('name'))}  (call {clean(p.get('call_id'))})")
        out += ["", *_arguments(p.get("arguments"))]
        used = {"name", "call_id", "arguments"}
    elif e.kind == "tool_result":
        err = "  ERROR" if p.get("is_error") else ""
        out.append(f"result of call {clean(p.get('call_id'))}{err}")
        out += ["", *_text_block(p.get("output"))]
        used = {"call_id", "output", "is_error"}
    elif e.kind == "anchor":
        out.append(f"anchor {clean(p.get('name'))}")
        used = {"name"}
    elif e.kind == "error":
        out += _text_block(p.get("message"))
        used = {"message"}
    elif "content" in p:
        out += _text_block(p.get("content"))
        used = {"content"}
    rest = {k: v for k, v in p.items() if k not in used}
    if rest:
        out += ["", "Other fields:", *_json_block(rest)]
    return out


def show(e: Entry, meta: bool = False, hidden: bool = False) -> list[str]:
    """One entry: a short header, the payload, then delta and meta (the importer's raw
    source record only with `meta`; the hidden mark only with `hidden`, as SPEC 13 has it)."""
    out = [
        _color(f"entry {e.hash}", "33") + (_hidden_mark(e) if hidden else ""),
        f"Kind:   {clean(e.kind)}",
        f"Seq:    {e.seq}",
        f"Date:   {clean(e.time)}",
        f"Parent: {e.parent or '(root)'}",
        "",
    ]
    out += ["    " + line if line else "" for line in payload_lines(e)]
    tail = []
    if e.delta is not None:
        tail.append("Delta:  " + clean(json.dumps(e.delta, ensure_ascii=False, sort_keys=True)))
    m = _meta_line(e.meta, meta) if isinstance(e.meta, dict) else None
    if m:
        tail.append(m)
    if not meta and isinstance(e.meta, dict) and any(k in e.meta for k in SOURCE_KEYS):
        tail.append("(the importer's source record: ctape show --meta)")
    return out + ([""] + tail if tail else [])


def graph(tape, session: Optional[str], tips: list[str], limit: Optional[int], flt) -> Iterator[str]:
    """The history reachable from `tips` as an ASCII graph, as `git log --graph` draws it:
    in topological order (history.logview.graph_order: a line of history drawn together,
    HEAD's first), one lane per line being drawn. A line that reaches an entry another
    lane already waits for joins that lane at once (`|/`), so lanes stay as few as the
    lines open at one time, however many branches. Reading stops with the last line
    drawn (`limit`)."""
    from ..history.logview import graph_order, is_hidden

    deco = decorations(tape, session)
    lanes: list[Optional[str]] = []  # lane -> the entry it leads down to (None: free)
    lane_of: dict[str, int] = {}
    # with a filter (--kind, --grep...), a lane is drawn from its first shown entry on, and
    # a join waits for the next shown row: a line none of whose entries is shown drew bars
    # and a `|/` of its own, and a join below the last shown entry dangled (audit)
    visible: set[int] = set()
    joins: list[str] = []
    drawn: set[str] = set()
    over: dict[str, list] = {}  # entry -> labels of hidden entries left out above it, with their seqs
    shown = 0
    entries = graph_order(tape, tips)
    while limit is None or shown < limit:
        e = next(entries, None)
        if e is None:
            return
        col = lane_of.pop(e.hash, None)
        if col is None:  # a line of its own starts here: a lane right of the others
            lanes.append(e.hash)
            col = len(lanes) - 1
            visible.discard(col)
        carried = over.pop(e.hash, [])
        if flt is None or flt.match(e):
            visible.add(col)
            yield from joins
            joins.clear()
            row = "".join("* " if i == col else ("| " if x is not None and i in visible else "  ") for i, x in enumerate(lanes))
            labels = [f"{label} +{seq - e.seq} hidden" for label, seq in carried] + deco.get(e.hash, [])
            yield f"{row.rstrip()} {oneline(e, {e.hash: labels})}"  # (no blank lanes before the text)
            shown += 1
        elif flt is not None and not flt.hidden and is_hidden(e) and e.parent is not None:
            over.setdefault(e.parent, []).extend(carried + [(label, e.seq) for label in deco.get(e.hash, ())])
        drawn.add(e.hash)
        p = e.parent
        if p is None or p in drawn:
            lanes[col] = None
            visible.discard(col)
        elif p in lane_of:  # another lane leads to p: the two become one, on the left
            left, right = sorted((lane_of[p], col))
            if right in visible:
                joins.append(_join(lanes, left, right, visible))
                visible.add(left)
            lanes[left], lanes[right] = p, None
            visible.discard(right)
            lane_of[p] = left
        else:
            lanes[col] = p
            lane_of[p] = col
        while lanes and lanes[-1] is None:
            lanes.pop()


def _join(lanes: list[Optional[str]], left: int, right: int, visible: set) -> str:
    """The row where lane `right` bends into lane `left`: `|/`, or `|_|/` across lanes."""
    row = [" "] * (2 * len(lanes))
    for i, x in enumerate(lanes):
        if x is not None and i != right and (i in visible or i == left):
            row[2 * i] = "|"
    row[2 * right - 1] = "/"
    for i in range(2 * left + 1, 2 * right - 1):
        if row[i] == " ":
            row[i] = "_"
    return "".join(row).rstrip()


INCOMPLETE = {  # why part of the history up to HEAD cannot be read (status's incomplete_because)
    None: "part of the history up to HEAD has not arrived yet (sync in progress?): run rsync again",
    "damaged": "part of the history up to HEAD cannot be read: damaged records; see `ctape fsck` (`ctape fsck --salvage` keeps what is intact)",
    "lost": "part of the history up to HEAD was lost to damage (salvaged: `ctape fsck` names it); a copy that holds it can bring it back by rsync",
}


def status(st: dict) -> list[str]:
    return [clean(line) for line in _status(st)]


def _status(st: dict) -> list[str]:
    out = [f"session {st['session']}"]
    if st["head"] is None and st.get("incomplete") and st.get("incomplete_because") == "damaged":
        where = st["damaged"][0] if st.get("damaged") else "a file of the session"
        out.append(f"HEAD unknown: the session's ref records are in damaged records of {where}; run `ctape fsck --salvage` to keep what is intact")
    elif st["head"] is None and st.get("incomplete"):
        out.append("HEAD's record has not arrived yet, though branches have (sync in progress?): run rsync again, or check out a branch")
    elif st["head"] is None:
        out.append("no entries yet")
    else:
        seq = "" if st.get("incomplete") else f" (seq {st['seq']})"  # unknown until the entry is read
        at = f"On branch {st['branch']}" if st["branch"] else "HEAD detached"
        out.append(f"{at} at {st['head'][:12]}{seq}")
    if st.get("incomplete") and st["head"] is not None:
        # the entry itself, a value it refers to, or an entry before it
        out.append(INCOMPLETE[st.get("incomplete_because")])
    if st.get("title"):
        out.append(f"title: {st['title']}")
    if st.get("source"):
        src = st["source"]
        out.append(f"source: {src['agent']}" + (f" in {src['cwd']}" if src.get("cwd") else ""))
    if st["last_entry"]:
        le = st["last_entry"]
        out.append(f"last entry: {le['kind']} at {le['time']}")
    if st["pending_tool_calls"]:
        out.append(f"pending tool calls ({len(st['pending_tool_calls'])}):")
        for c in st["pending_tool_calls"]:
            out.append(f"  {c['call_id']}  {c['name']}  (entry {c['hash'][:12]})")
    if st["interrupted_stream"]:
        s = st["interrupted_stream"]
        if s.get("live"):  # its writer still runs on this machine: not interrupted, and nothing to recover
            out.append(f"stream being written ({len(s['content'] or '')} chars so far; its writer still runs): {summary_text(s['content'])}")
        else:
            how = "recorded as a streaming entry" if s.get("recorded") else "not yet recorded: run `ctape recover`"
            out.append(f"interrupted stream ({len(s['content'] or '')} chars, {how}): {summary_text(s['content'])}")
    if st["last_error"]:
        le = st["last_error"]
        from ..history.recovery import error_text  # (lazily: `--help` loads no storage module)

        out.append(f"last error: {summary_text(error_text(le.get('message')))} (entry {le['hash'][:12]})")
    for w in st.get("warnings", []):
        out.append(f"warning: {w}")
    for c in st.get("conflicts", []):
        out.append(f"conflict: branch {c} holds the other side of a sync; keep it, check it out or delete it")
    return out


def summary_text(text: Optional[str], width: int = 60) -> str:
    t = _squeezed(text or "", width)
    return t if len(t) <= width else t[: width - 1] + "…"


def reflog_line(r: dict, session: str) -> str:
    old = (r["old"] or "-")[:12]
    new = (r["new"] or "(deleted)")[:12]
    at = f"{session}@{{{r['at']}}}" if r["at"] is not None else ""
    gone = f"  ({' and '.join(r['gone'])} not on this tape)" if r.get("gone") else ""
    n = "" if r["index"] is None else r["index"]
    return clean(f"{n:>4} {at:<14} {r['ref']:<24} {str(r['op']):<9} {old:>12} -> {new:<12} {r['time']}{gone}")
