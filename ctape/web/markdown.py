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


_FENCE = re.compile(r"^(```|~~~)[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^\1[ \t]*$|\Z)", re.M | re.S)
_INLINE = re.compile(
    r"(?P<code>`+)(?P<ctext>.+?)(?P=code)"
    r"|\[(?P<ltext>[^\]\n]{1,500})\]\((?P<url>[^)\s]{1,2000})\)"
    r"|\*\*(?P<strong>[^*\n]+?)\*\*"
    r"|(?<![\w*])\*(?P<em>[^*\s][^*\n]*?)\*(?![\w*])"
    r"|(?<!\w)_(?P<em2>[^_\s][^_\n]*?)_(?!\w)"
    r"|(?P<auto>https?://[^\s<>\"')\]]+)"
)
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_BULLET = re.compile(r"^\s{0,3}[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^\s{0,3}\d{1,9}[.)]\s+(.*)$")


def inline(text: str) -> str:
    """One line of markdown text as escaped HTML with inline code, emphasis and links."""
    out: list[str] = []
    pos = 0
    for m in _INLINE.finditer(text):
        out.append(esc(text[pos : m.start()]))
        pos = m.end()
        if m.group("code"):
            out.append(f"<code>{esc(m.group('ctext'))}</code>")
        elif m.group("ltext") is not None:
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
