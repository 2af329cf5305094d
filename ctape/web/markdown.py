"""A small markdown renderer that escapes first: stored text never reaches the page as markup.

Transcripts hold hostile strings (HTML, scripts, terminal escapes). Every piece of
text is escaped by `esc` before it is wrapped in the few tags this module emits:
fenced code blocks (coloured by highlight.py), headings, bullet and numbered lists, paragraphs, inline code,
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
_BULLET = re.compile(r"^\s{0,3}[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^\s{0,3}\d{1,9}[.)]\s+(.*)$")


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


def _blocks(text: str) -> list[str]:
    """Paragraphs, headings and lists of a stretch of text without code fences."""
    out: list[str] = []
    para: list[str] = []
    items: list[str] = []
    list_tag = ""

    def flush_para():
        if para:
            out.append("<p>" + "<br>".join(inline(x) for x in para) + "</p>")
            para.clear()

    def flush_list():
        nonlocal list_tag
        if items:
            out.append(f"<{list_tag}>" + "".join(f"<li>{inline(x)}</li>" for x in items) + f"</{list_tag}>")
            items.clear()
        list_tag = ""

    for line in text.split("\n"):
        if not line.strip():
            flush_para()
            flush_list()
            continue
        h = _HEADING.match(line)
        b = _BULLET.match(line)
        n = None if b else _NUMBERED.match(line)
        if h:
            flush_para()
            flush_list()
            level = min(len(h.group(1)) + 2, 6)  # inside a message: h3..h6
            out.append(f"<h{level}>{inline(h.group(2))}</h{level}>")
        elif b or n:
            flush_para()
            tag = "ul" if b else "ol"
            if list_tag and list_tag != tag:
                flush_list()
            list_tag = tag
            items.append((b or n).group(1))
        elif items and line.startswith((" ", "\t")):
            items[-1] += " " + line.strip()  # a continuation line of the last item
        else:
            flush_list()
            para.append(line)
    flush_para()
    flush_list()
    return out


def render(text: str) -> str:
    """Markdown text as safe HTML."""
    out: list[str] = []
    pos = 0
    for m in _FENCE.finditer(text):
        out += _blocks(text[pos : m.start()])
        lang = m.group(2)
        cls = f' class="lang-{esc(lang)}"' if lang else ""
        code = m.group(3).rstrip("\n")
        known = language(lang) if lang else None
        body = highlight(code, known) if known else esc(code)
        out.append(f'<pre class="code"><code{cls}>{body}</code></pre>')
        pos = m.end()
    out += _blocks(text[pos:])
    return "\n".join(out)
