"""A small markdown renderer that escapes first: stored text never reaches the page as markup.

Transcripts hold hostile strings (HTML, scripts, terminal escapes). Every piece of
text is escaped by `esc` before it is wrapped in the few tags this module emits:
fenced code blocks (coloured by highlight.py), headings, bullet and numbered lists (nested by
indentation), block quotes, tables (GFM's pipes), rules, paragraphs, inline code,
**strong**, *emphasis* and [links](url) whose scheme is http, https or mailto.
Anything else (raw HTML, images by URL, javascript: links) comes out as text.
"""

from __future__ import annotations

import re

from .escape import esc
from .highlight import highlight, language

__all__ = ["esc", "inline", "render", "safe_url"]

_SAFE_SCHEMES = ("http://", "https://", "mailto:")


def safe_url(url: str) -> str | None:
    """The URL if its scheme is allowed, else None (javascript:, data:, relative...)."""
    u = url.strip()
    return u if u.lower().startswith(_SAFE_SCHEMES) and not any(c in u for c in "\"'<>\x00 \t\n") else None


# Possessive quantifiers (*+, {m,n}+) where giving characters back can never help: an
# unclosed fence with a long info string, or a line of 8,000 `[`, made the plain forms
# backtrack in time quadratic in the line (70 ms a message, seconds a page, with every
# other request of `serve` waiting: found by an audit). A link's text holds no `[` and its
# URL no `]` (as an autolink's), so a run of them fails at once instead of scanning on.
_FENCE = re.compile(r"^(```|~~~)[ \t]*+([\w+#.-]*+)[^\n]*+\n(.*?)(?:^\1[ \t]*$|\Z)", re.M | re.S)
_TICKS = re.compile(r"`+")
_INLINE = re.compile(
    r"\[(?P<ltext>[^\[\]\n]{1,500}+)\]\((?P<url>[^)\]\s\ue000]{1,2000}+)\)"
    r"|\*\*(?P<strong>[^*\n]+?)\*\*"
    r"|(?<![\w*])\*(?P<em>[^*\s][^*\n]*?)\*(?![\w*])"
    r"|(?<!\w)_(?P<em2>[^_\s][^_\n]*?)_(?!\w)"
    r"|(?P<auto>https?://[^\s<>\"')\]\ue000]+)"
)
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_ITEM = re.compile(r"^([ \t]*+)(?:([-*+])|(\d{1,9})[.)])[ \t]++(.*)$")
_QUOTE = re.compile(r"^ {0,3}> ?(.*)$")
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*+\1){2,}+[ \t]*+$")
_TABLE_RULE = re.compile(r"^[ \t]*+\|?[ \t]*+:?-+:?[ \t]*+(?:\|[ \t]*+:?-+:?[ \t]*+)*+\|?[ \t]*+$")
DEPTH = 8  # lists and quotes nested deeper than this continue at this depth
TABLE_COLUMNS = 64  # a table wider than this is left as text

def _code_spans(text: str) -> list[tuple[int, int, int, int]]:
    """The code spans of a line as (start, text start, text end, end): a run of n
    backticks up to the next run of exactly n. One pass over the runs, each length's
    next closer found by a pointer that only moves on: linear, where the regex
    `(`+)(.+?)\1` took cubic time on a line of 8,000 backticks (7 s holding the
    interpreter, every other request of `serve` waiting; found by an audit)."""
    runs = [(m.start(), m.end()) for m in _TICKS.finditer(text)]
    by_length: dict[int, list[int]] = {}
    for i, (a, b) in enumerate(runs):
        by_length.setdefault(b - a, []).append(i)
    next_of = dict.fromkeys(by_length, 0)
    spans, i = [], 0
    while i < len(runs):
        a, b = runs[i]
        same, k = by_length[b - a], next_of[b - a]
        while k < len(same) and same[k] <= i:
            k += 1
        next_of[b - a] = k
        if k == len(same):
            i += 1  # no closer: the backticks are text
            continue
        ca, cb = runs[same[k]]
        spans.append((a, b, ca, cb))
        i = same[k] + 1
    return spans


_HOLD = "\ue000"  # where a code span waits while the rest is formatted (a private-use character)
_HELD = re.compile(_HOLD + r"(\d+)" + _HOLD)


def inline(text: str) -> str:
    """One line of markdown text as escaped HTML with inline code, emphasis and links.
    Code spans are found first (they bind tighter than emphasis, and their text is not
    formatted) and wait as placeholders while the rest is formatted around them."""
    spans = _code_spans(text) if "`" in text else []
    if not spans:
        return _inline_text(text)
    codes, parts, pos = [], [], 0
    for a, b, ca, cb in spans:
        parts.append(text[pos:a])
        if _HOLD in text:  # (the placeholder's character in the text itself: spans split it)
            parts[-1] = _inline_text(parts[-1]) + f"<code>{esc(text[b:ca])}</code>"
        else:
            parts.append(f"{_HOLD}{len(codes)}{_HOLD}")
            codes.append(text[b:ca])
        pos = cb
    if _HOLD in text:
        return "".join(parts) + _inline_text(text[pos:])
    parts.append(text[pos:])
    return _HELD.sub(lambda m: f"<code>{esc(codes[int(m.group(1))])}</code>", _inline_text("".join(parts)))


def _inline_text(text: str) -> str:
    """Emphasis and links of text with no code span in it."""
    out: list[str] = []
    pos = 0
    for m in _INLINE.finditer(text):
        out.append(esc(text[pos : m.start()]))
        pos = m.end()
        if m.group("ltext") is not None:
            url = safe_url(m.group("url"))
            label = inline(m.group("ltext"))
            out.append(f'<a href="{esc(url)}" rel="noopener noreferrer nofollow">{label}</a>' if url else esc(m.group(0)))
        elif m.group("strong") is not None:
            out.append(f"<strong>{inline(m.group('strong'))}</strong>")
        elif m.group("em") is not None or m.group("em2") is not None:
            out.append(f"<em>{inline(m.group('em') or m.group('em2'))}</em>")
        else:
            url = safe_url(m.group("auto"))
            out.append(f'<a href="{esc(url)}" rel="noopener noreferrer nofollow">{esc(url)}</a>' if url else esc(m.group(0)))
    out.append(esc(text[pos:]))
    return "".join(out)


def _indent(ws: str) -> int:
    return len(ws.expandtabs(4))


class _List:
    """A list being read: its items, each [text, the lists nested in it]."""

    def __init__(self, indent: int, tag: str, start: int):
        self.indent, self.tag, self.start = indent, tag, start
        self.items: list[list] = []

    def html(self) -> str:
        start = f' start="{self.start}"' if self.tag == "ol" and self.start != 1 else ""
        inner = "".join("<li>" + inline(text) + "".join(sub.html() for sub in subs) + "</li>" for text, subs in self.items)
        return f"<{self.tag}{start}>{inner}</{self.tag}>"


def _cells(line: str) -> list[str]:
    """A table row's cells: split at `|` (not at an escaped `\\|`), the outer pipes dropped."""
    row = line.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row)]


def _table(lines: list[str]) -> str:
    """A GFM table: a header row, the rule (its colons align the columns), the body rows."""
    head = _cells(lines[0])
    align = []
    for c in _cells(lines[1]):
        align.append(' class="al-c"' if c.startswith(":") and c.endswith(":") else ' class="al-r"' if c.endswith(":") else "")
    align += [""] * (len(head) - len(align))

    def row(cells: list[str], tag: str) -> str:
        cells = (cells + [""] * len(head))[: len(head)]
        return "<tr>" + "".join(f"<{tag}{a}>{inline(c)}</{tag}>" for c, a in zip(cells, align)) + "</tr>"

    body = "".join(row(_cells(x), "td") for x in lines[2:])
    return f'<div class="table"><table><thead>{row(head, "th")}</thead><tbody>{body}</tbody></table></div>'


def _blocks(text: str, depth: int = 0) -> list[str]:
    """Paragraphs, headings, lists (nested by indentation), block quotes and tables of a
    stretch of text without code fences. Every line is looked at a bounded number of times:
    a quote's lines are read again once for each level it is nested (at most DEPTH)."""
    out: list[str] = []
    para: list[str] = []
    lists: list[_List] = []  # the open lists, outermost first
    lines = text.split("\n")

    def flush_para():
        if para:
            out.append("<p>" + "<br>".join(inline(x) for x in para) + "</p>")
            para.clear()

    def flush_list():
        if lists:
            out.append(lists[0].html())
            lists.clear()

    def add_item(indent: int, tag: str, start: int, text: str) -> None:
        while len(lists) > 1 and indent < lists[-1].indent:
            lists.pop()
        top = lists[-1] if lists else None
        if top is not None and indent > top.indent and top.items and len(lists) < DEPTH:
            sub = _List(indent, tag, start)  # nested in the item before it
            top.items[-1][1].append(sub)
            lists.append(sub)
        elif top is not None and tag != top.tag:
            if len(lists) == 1:
                flush_list()  # another kind of list after this one
                lists.append(_List(indent, tag, start))
            else:
                lists.pop()  # a sibling list of the other kind, in the same item
                sub = _List(indent, tag, start)
                lists[-1].items[-1][1].append(sub)
                lists.append(sub)
        elif top is None:
            lists.append(_List(indent, tag, start))
        lists[-1].items.append([text, []])

    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip():
            flush_para()
            if lists and i < len(lines) and lines[i][:1] in (" ", "\t") and lines[i].strip():
                continue  # a blank line inside a list whose item goes on, indented
            flush_list()
            continue
        q = _QUOTE.match(line) if depth < DEPTH else None
        if q:
            flush_para()
            flush_list()
            quoted = [q.group(1)]
            while i < len(lines) and (m := _QUOTE.match(lines[i])):
                quoted.append(m.group(1))
                i += 1
            out.append("<blockquote>" + "\n".join(_render("\n".join(quoted), depth + 1)) + "</blockquote>")
            continue
        if "|" in line and i < len(lines) and _TABLE_RULE.match(lines[i]) and len(_cells(line)) == len(_cells(lines[i])) <= TABLE_COLUMNS:
            flush_para()
            flush_list()
            rows = [line, lines[i]]
            i += 1
            while i < len(lines) and lines[i].strip() and "|" in lines[i]:
                rows.append(lines[i])
                i += 1
            out.append(_table(rows))
            continue
        if _RULE.match(line):
            flush_para()
            flush_list()
            out.append("<hr>")
            continue
        h = _HEADING.match(line)
        item = _ITEM.match(line)
        if item and (lists or _indent(item.group(1)) <= 3):
            flush_para()
            add_item(_indent(item.group(1)), "ul" if item.group(2) else "ol", int(item.group(3) or 1), item.group(4))
        elif h:
            flush_para()
            flush_list()
            level = min(len(h.group(1)) + 2, 6)  # inside a message: h3..h6
            out.append(f"<h{level}>{inline(h.group(2))}</h{level}>")
        elif lists and line[:1] in (" ", "\t"):
            lists[-1].items[-1][0] += " " + line.strip()  # a continuation line of the last item
        else:
            flush_list()
            para.append(line)
    flush_para()
    flush_list()
    return out


def render(text: str) -> str:
    """Markdown text as safe HTML."""
    return "\n".join(_render(text, 0))


def _render(text: str, depth: int) -> list[str]:
    out: list[str] = []
    pos = 0
    for m in _FENCE.finditer(text):
        out += _blocks(text[pos : m.start()], depth)
        lang = m.group(2)
        cls = f' class="lang-{esc(lang)}"' if lang else ""
        code = m.group(3).rstrip("\n")
        known = language(lang) if lang else None
        body = highlight(code, known) if known else esc(code)
        out.append(f'<pre class="code"><code{cls}>{body}</code></pre>')
        pos = m.end()
    out += _blocks(text[pos:], depth)
    return out
