"""Entries as a chat: messages, tool calls folded together with their results, errors and
interrupted streams marked, images shown, hidden entries folded away, and what came before
an agent's compaction folded behind its boundary.

Everything stored is text to this module: it goes through `esc` or the escaping-first
markdown renderer, and only data: URLs of raster images become <img> sources.

Each entry is bounded in size however large what it holds: a message shows at most
MESSAGE_CHARS characters of text (all its parts together) and PARTS parts; tool output,
arguments and JSON CLIP_CHARS characters or CLIP_LINES lines; an image inline only up to
IMAGE_INLINE characters and IMAGES_INLINE a page (the others are their own request,
/e/HASH/image?part=N). What is cut is a "show more" away: the page fetches CHUNK
characters at a time (/e/HASH/text).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Callable, Iterable, Optional, Union

from ..errors import EntryNotFound
from ..model.models import Entry, plural
from ..ops.context import is_compaction
from .markdown import esc, render
from .queries import is_hidden

CLIP_CHARS = 3000  # tool output and raw JSON longer than this is clipped ("show all")
CLIP_LINES = 60
MESSAGE_CHARS = 8000  # characters of a message's text shown (all its parts together)
MESSAGE_LINES = 200
PARTS = 50  # parts of a message shown; the rest is a link
IMAGE_INLINE = 48 * 1024  # a data: URL longer than this is served on its own (/e/HASH/image?part=N)
IMAGES_INLINE = 8  # images inline per page (per Renderer); the others are served on their own too
CHUNK = 500_000  # characters one "show more" fetches
SUMMARY_CHARS = 2000  # of an anchor's summary
ARGS_BRIEF = 120  # characters of a call's arguments on its folded line
_IMAGE_URL = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]+\Z")

Part = Union[int, str, None]  # which text of an entry a "show more" fetches (see part_of)
TextUrl = Callable[[Part], str]


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)


def cut_at(text: str, chars: int, lines: int) -> int:
    """Where to cut `text` to keep at most `chars` characters and `lines` lines (len(text):
    nothing to cut). Never splits the whole text into lines: it can be 100 MB."""
    end = min(len(text), chars)
    pos = -1
    for _ in range(lines):
        pos = text.find("\n", pos + 1, end)
        if pos < 0:
            return end
    return pos


def more(full_url: str, shown: int, total: int, lines: Optional[int] = None) -> str:
    """The control under a clipped block: fetches the rest from `full_url`, CHUNK
    characters at a time from character `shown` on (static/app.js); without script, a
    plain link to the whole text."""
    if total - shown <= CHUNK:
        label = f"show all ({total:,} chars" + (f", {lines:,} {plural(lines, 'line', 'lines')})" if lines is not None else ")")
    else:
        label = f"show more ({shown:,} of {total:,} chars shown)"
    return f'<a class="show-all" href="{esc(full_url)}" data-src="{esc(full_url)}" data-shown="{shown}" data-total="{total}">{label}</a>'


def clipped(text: str, full_url: str, chars: int = CLIP_CHARS, lines: int = CLIP_LINES) -> str:
    """A <pre> of text, clipped when long, with a "show all" control that fetches the rest."""
    cut = cut_at(text, chars, lines)
    if cut >= len(text):
        return f'<pre class="out">{esc(text)}</pre>'
    return f'<pre class="out clipped">{esc(text[:cut])}</pre>' + more(full_url, cut, len(text), text.count("\n") + 1)


def markdown_clipped(text: str, full_url: str, chars: int = MESSAGE_CHARS, lines: int = MESSAGE_LINES) -> str:
    """Markdown text rendered, clipped when long: the rest comes as plain text on demand."""
    cut = cut_at(text, chars, lines)
    if cut >= len(text):
        return render(text)
    return f'<div class="clipped-md">{render(text[:cut])}</div>' + more(full_url, cut, len(text))


def _image(part: dict) -> Optional[str]:
    """A data: URL for an image part (OpenAI image_url or Anthropic base64 source), if safe."""
    url = None
    if part.get("type") in ("image_url", "input_image"):
        iu = part.get("image_url")
        url = iu.get("url") if isinstance(iu, dict) else iu
    elif part.get("type") == "image" and isinstance(part.get("source"), dict):
        src = part["source"]
        if src.get("type") == "base64" and isinstance(src.get("data"), str):
            url = f"data:{src.get('media_type')};base64,{src['data']}"
    if isinstance(url, str) and _IMAGE_URL.match(url):
        return url
    return None


def image_bytes(part: Any) -> Optional[tuple[str, bytes]]:
    """(content type, bytes) of an image part that _image accepts, else None."""
    import base64
    import binascii

    url = _image(part) if isinstance(part, dict) else None
    if url is None:
        return None
    head, _, data = url.partition(",")
    try:
        return head[5:].split(";")[0], base64.b64decode("".join(data.split()))
    except (binascii.Error, ValueError):
        return None


def content_html(content: Any, text_url: TextUrl, image_url: Optional[Callable[[int], str]] = None, inline: Optional[list[int]] = None) -> str:
    """A message's content: markdown text, or a list of parts (text, images, anything else
    as JSON), together at most MESSAGE_CHARS characters and PARTS parts. `inline` counts
    down the images the page may still inline (one item; None: IMAGES_INLINE)."""
    if isinstance(content, str):
        return markdown_clipped(content, text_url(None))
    if isinstance(content, list):
        out = []
        budget = MESSAGE_CHARS
        inline = inline if inline is not None else [IMAGES_INLINE]
        for i, part in enumerate(content):
            if i >= PARTS or budget <= 0:
                rest = len(content) - i
                out.append(f'<p class="muted">{rest:,} more part{"s" if rest != 1 else ""} not shown: '
                           f'<a href="{esc(text_url(None))}">the whole content</a></p>')
                break
            text = part if isinstance(part, str) else None
            if isinstance(part, dict) and isinstance(part.get("text"), str) and part.get("type") in (None, "text", "input_text", "output_text"):
                text = part["text"]
            thought = _thinking(part)
            if text is not None:
                out.append(markdown_clipped(text, text_url(i), chars=budget))
                budget -= min(len(text), budget)
            elif thought is not None:
                # the model's thinking, folded as text; its signature (opaque base64 the
                # provider checks) is on the entry's page
                out.append(f'<details class="thinking"><summary>thinking</summary>{markdown_clipped(thought, text_url(i), chars=budget)}</details>')
                budget -= min(len(thought), budget)
            elif isinstance(part, dict) and part.get("type") == "redacted_thinking":
                out.append('<p class="muted">[thinking the provider keeps encrypted]</p>')
            elif isinstance(part, dict) and part.get("type") in ("image_url", "input_image", "image"):
                url = _image(part)
                if url is None:
                    out.append('<p class="muted">[image not shown: not an inline raster image]</p>')
                elif len(url) <= IMAGE_INLINE and inline[0] > 0:
                    out.append(f'<img class="part" alt="image (part {i + 1} of the message)" src="{esc(url)}">')
                    inline[0] -= 1
                elif image_url is not None:
                    out.append(f'<img class="part" alt="image (part {i + 1} of the message)" loading="lazy" src="{esc(image_url(i))}">')
                else:
                    out.append('<p class="muted">[a large image: see the entry]</p>')
            else:
                text = _as_text(part)
                out.append(clipped(text, text_url(i), chars=min(CLIP_CHARS, budget)))
                budget -= min(len(text), CLIP_CHARS, budget)
        return "\n".join(out)
    if content is None:
        return ""
    return clipped(_as_text(content), text_url(None))


def _thinking(part: Any) -> Optional[str]:
    """The text of a thinking part (Anthropic's `{"type": "thinking", "thinking": ...}`), else None."""
    if isinstance(part, dict) and part.get("type") == "thinking" and isinstance(part.get("thinking"), str):
        return part["thinking"]
    return None


def main_value(e: Entry) -> Any:
    """What the conversation shows of entry e, whole: a message's content, a call's
    arguments, a result's output; of an error, its fields but the message."""
    p = e.payload if isinstance(e.payload, dict) else {"content": e.payload}
    if e.kind == "error":
        return {k: v for k, v in p.items() if k not in ("message", "call_id")}
    if e.kind == "anchor":
        return p.get("summary")
    return p.get({"tool_call": "arguments", "tool_result": "output"}.get(e.kind, "content"))


def part_of(e: Entry, part: Part) -> Any:
    """The text a clipped block of entry e shows, whole: None: main_value; N: its Nth part
    (a text part's text); "message": an error's message. EntryNotFound when there is none."""
    if part is None:
        return main_value(e)
    if part == "message" and e.kind == "error" and isinstance(e.payload, dict):
        return e.payload.get("message")
    value = main_value(e)
    if isinstance(part, int) and isinstance(value, list) and 0 <= part < len(value):
        x = value[part]
        thought = _thinking(x)
        if thought is not None:
            return thought
        return x["text"] if isinstance(x, dict) and isinstance(x.get("text"), str) else x
    raise EntryNotFound(f"entry {e.hash[:12]} has no part {part!r:.40}")


def _short(value: Any, n: int = 200) -> str:
    """A name or id as stored, cut to n characters (a hostile one can be megabytes)."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= n else text[: n - 1] + "…"


def pair_results(entries: list[Entry]) -> dict[str, Entry]:
    """Each call's result on this run of entries (oldest first): call hash -> result. A
    result answers the nearest call before it with its id that no result answered yet, as
    `status` counts pending calls (history/derived.py): agents reuse ids (SWE-agent gives
    one id to several calls), and taking the first result of an id for every call with it
    showed a later call with an earlier call's output, and a pending one as done."""
    waiting: dict[str, list[str]] = {}  # call id -> the calls not answered yet, oldest first
    out: dict[str, Entry] = {}
    for e in entries:
        if not e.call_id:
            continue
        if e.kind == "tool_call":
            waiting.setdefault(e.call_id, []).append(e.hash)
        elif e.kind in ("tool_result", "error") and waiting.get(e.call_id):
            out[waiting[e.call_id].pop()] = e
    return out


def call_key(call_id: Optional[str]) -> str:
    """A call id as the page's script matches a result to its call: the id itself, or a
    digest of a long one (cut, two long ids that begin alike would match)."""
    text = call_id if isinstance(call_id, str) else ""
    return text if len(text) <= 200 else "blake2b:" + hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


NAMES_SHOWN = 20  # names listed in one place (an entry's branches, a badge): the rest counted


def some(names: list, limit: int = NAMES_SHOWN) -> tuple[list, int]:
    """The first `limit` names and how many more there are: a page lists a bounded number
    of names however many there are (10,000 branches on one entry made a page of 7.6 MB;
    found by an audit)."""
    return names[:limit], max(0, len(names) - limit)


def listed(names: list, limit: int = NAMES_SHOWN) -> str:
    """Names joined by commas, at most `limit` of them, then how many more."""
    shown, more = some(names, limit)
    return ", ".join(shown) + (f" and {more:,} more" if more else "")


class Renderer:
    """Renders entries of one session; `link(hash)` is an entry's page, `text_url(hash,
    part)` the whole text of a clipped block (see part_of), `image_url(hash, part)` an
    image too large to inline. `refs` names entries (hash -> branch names and `tag:NAME`s),
    shown on them as `git log --decorate` does."""

    def __init__(self, session: str, link: Callable[[str], str], text_url: Callable[[str, Part], str], pending: Iterable[str] = (),
                 image_url: Optional[Callable[[str, int], str]] = None, refs: Optional[dict[str, list[str]]] = None):
        self.session = session
        self.link = link
        self.text_url = text_url
        self.image_url = image_url
        self.pending = set(pending)  # the hashes of the calls still pending at HEAD
        self.refs = refs or {}
        self.inline = [IMAGES_INLINE]  # images this page may still inline

    def _urls(self, e: Entry) -> tuple[TextUrl, Optional[Callable[[int], str]]]:
        image = (lambda i: self.image_url(e.hash, i)) if self.image_url else None
        return (lambda part: self.text_url(e.hash, part)), image

    def decorations(self, h: str) -> str:
        shown, more = some(list(self.refs.get(h, ())))
        return "".join(
            f'<span class="ref tag">tag: {esc(name[4:])}</span>' if name.startswith("tag:") else f'<span class="ref branch">{esc(name)}</span>'
            for name in shown
        ) + (f'<span class="ref more">and {more:,} more</span>' if more else "")

    def _head(self, e: Entry, label: str, extra: str = "") -> str:
        return (
            f'<div class="meta"><span class="role">{esc(label)}</span>{extra}{self.decorations(e.hash)}'
            f'<time>{esc(e.time[:19].replace("T", " "))}</time>'
            f'<a class="hash" href="{esc(self.link(e.hash))}" title="entry {e.hash}">{e.hash[:10]}</a></div>'
        )

    def entries(self, entries: list[Entry]) -> str:
        """Entries oldest first as HTML: results go inside their calls, hidden runs fold."""
        results = pair_results(entries)
        placed = {r.hash for r in results.values()}
        out: list[str] = []
        hidden: list[Entry] = []

        def flush_hidden():
            if hidden:
                inner = "".join(self.entry(h, results) for h in hidden)
                n = len(hidden)
                out.append(f'<details class="hidden-run"><summary>{n} hidden entr{"y" if n == 1 else "ies"} (bookkeeping)</summary>{inner}</details>')
                hidden.clear()

        def render_run(run: list[Entry]) -> None:
            for e in run:
                if e.hash in placed:
                    continue
                if is_hidden(e):
                    hidden.append(e)
                    continue
                flush_hidden()
                out.append(self.entry(e, results))
            flush_hidden()

        # where the agent compacted its history, what came before is folded: the agent's
        # next prompt starts at the boundary (as `ctape context` does)
        cut = max((i for i, e in enumerate(entries) if is_compaction(e)), default=None)
        if cut:
            render_run(entries[:cut])
            n = sum(1 for e in entries[:cut] if e.hash not in placed)
            inner = "\n".join(out)
            out.clear()
            out.append(
                f'<details class="hidden-run compacted-run"><summary>{n} entr{"y" if n == 1 else "ies"} before the agent compacted its history '
                f'(not in its next prompt; <code>ctape context --policy whole-tape</code> shows them)</summary>{inner}</details>'
            )
        render_run(entries[cut or 0:])
        return "\n".join(out)

    def entry(self, e: Entry, results: dict[str, Entry]) -> str:
        """One entry as HTML; `results` maps a call's hash to the result it got (pair_results)."""
        p = e.payload if isinstance(e.payload, dict) else {"content": e.payload}
        attrs = f'id="h-{e.hash[:16]}" data-hash="{e.hash}" data-kind="{esc(e.kind)}"'
        text_url, image_url = self._urls(e)
        if e.kind == "tool_call":
            return self._tool(e, p, results.get(e.hash), attrs)
        if e.kind in ("tool_result", "error"):
            return f'<div class="msg {"error" if self._is_error(e) else "tool-result"} orphan" {attrs} data-call-id="{esc(call_key(e.call_id))}">{self._result(e, p)}</div>'
        if e.kind == "anchor":
            summary = p.get("summary")
            extra = f'<div class="summary">{markdown_clipped(summary, text_url(None), SUMMARY_CHARS)}</div>' if isinstance(summary, str) else ""
            label = "⚓ compaction boundary: the agent's history was replaced here" if is_compaction(e) else "⚓ anchor " + _short(p.get("name"))
            return f'<div class="msg anchor{" compaction" if is_compaction(e) else ""}" {attrs}>{self._head(e, label)}{extra}</div>'
        if e.kind == "system":
            return f'<details class="msg system" {attrs}><summary>{self._head(e, "system")}</summary>{content_html(p.get("content"), text_url, image_url, self.inline)}</details>'
        badge = '<span class="badge warn">interrupted stream</span>' if e.kind == "streaming" else ""
        return f'<div class="msg {esc(e.kind)}" {attrs}>{self._head(e, "assistant" if e.kind == "streaming" else e.kind, badge)}<div class="body">{content_html(p.get("content"), text_url, image_url, self.inline)}</div></div>'

    @staticmethod
    def _is_error(e: Entry) -> bool:
        return e.kind == "error" or (isinstance(e.payload, dict) and e.payload.get("is_error") is True)

    def _result(self, e: Entry, p: dict) -> str:
        text_url, image_url = self._urls(e)
        if e.kind == "error":
            head = self._head(e, "error", '<span class="badge err">error</span>')
            extra = main_value(e)
            message = p.get("message")
            body = clipped(message if isinstance(message, str) else str(message), text_url("message"), MESSAGE_CHARS, MESSAGE_LINES)
            return head + body + (clipped(_as_text(extra), text_url(None)) if extra else "")
        badge = '<span class="badge err">error</span>' if self._is_error(e) else ""
        out = p.get("output")
        if isinstance(out, list) and any(isinstance(x, dict) and x.get("type") in ("image", "image_url", "input_image") for x in out):
            body = content_html(out, text_url, image_url, self.inline)
        else:
            body = clipped(_as_text(out), text_url(None))
        return self._head(e, "result", badge) + body

    def _tool(self, e: Entry, p: dict, result: Optional[Entry], attrs: str) -> str:
        args = p.get("arguments")
        text = _as_text(args) if args is not None else ""
        brief = " ".join(text[: ARGS_BRIEF * 8].split())
        if result is None:
            state = '<span class="badge warn">pending</span>' if e.hash in self.pending else ""
        elif self._is_error(result):
            state = '<span class="badge err">error</span>'
        else:
            state = '<span class="badge ok">done</span>'
        res = ""
        if result is not None:
            rp = result.payload if isinstance(result.payload, dict) else {}
            res = f'<div class="result {"error" if self._is_error(result) else ""}" id="h-{result.hash[:16]}" data-hash="{result.hash}">{self._result(result, rp)}</div>'
        return (
            f'<details class="msg tool" {attrs} data-call-id="{esc(call_key(e.call_id))}">'
            f'<summary><span class="tool-name">{esc(_short(p.get("name")))}</span><code class="args">{esc(brief[:ARGS_BRIEF])}</code>{state}'
            f'{self.decorations(e.hash)}{self.decorations(result.hash) if result is not None else ""}'
            f'<a class="hash" href="{esc(self.link(e.hash))}">{e.hash[:10]}</a></summary>'
            f'{clipped(text, self.text_url(e.hash, None))}{res}</details>'
        )
