"""Entries as a chat: messages, tool calls folded together with their results, errors and
interrupted streams marked, images shown, hidden entries folded away, and what came before
an agent's compaction folded behind its boundary.

Everything stored is text to this module: it goes through `esc` or the escaping-first
markdown renderer, and only data: URLs of raster images become <img> sources.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable, Optional

from ..model.models import Entry
from ..ops.context import is_compaction
from .markdown import esc, render
from .queries import is_hidden

CLIP_CHARS = 3000  # tool output and raw JSON longer than this is clipped ("show all")
CLIP_LINES = 60
_IMAGE_URL = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]+\Z")


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)


def clipped(text: str, full_url: str) -> str:
    """A <pre> of text, clipped when long, with a "show all" control that fetches the rest."""
    lines = text.split("\n")
    if len(text) <= CLIP_CHARS and len(lines) <= CLIP_LINES:
        return f'<pre class="out">{esc(text)}</pre>'
    head = "\n".join(lines[:CLIP_LINES])[:CLIP_CHARS]
    return (
        f'<pre class="out clipped">{esc(head)}</pre>'
        f'<a class="show-all" href="{esc(full_url)}" data-src="{esc(full_url)}">show all ({len(text):,} chars, {len(lines):,} lines)</a>'
    )


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


def content_html(content: Any, full_url: str) -> str:
    """A message's content: markdown text, or a list of parts (text, images, anything else as JSON)."""
    if isinstance(content, str):
        return render(content)
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(render(part))
            elif isinstance(part, dict) and isinstance(part.get("text"), str) and part.get("type") in (None, "text", "input_text", "output_text"):
                out.append(render(part["text"]))
            elif isinstance(part, dict) and part.get("type") in ("image_url", "input_image", "image"):
                url = _image(part)
                out.append(f'<img class="part" alt="image" src="{esc(url)}">' if url else '<p class="muted">[image not shown: not an inline raster image]</p>')
            else:
                out.append(clipped(_as_text(part), full_url))
        return "\n".join(out)
    if content is None:
        return ""
    return clipped(_as_text(content), full_url)


class Renderer:
    """Renders entries of one session; `link(hash)` is an entry's page, `text_url(hash)` its full text."""

    def __init__(self, session: str, link: Callable[[str], str], text_url: Callable[[str], str], pending: Iterable[str] = ()):
        self.session = session
        self.link = link
        self.text_url = text_url
        self.pending = set(pending)  # call ids still pending at HEAD

    def _head(self, e: Entry, label: str, extra: str = "") -> str:
        return (
            f'<div class="meta"><span class="role">{esc(label)}</span>{extra}'
            f'<time>{esc(e.time[:19].replace("T", " "))}</time>'
            f'<a class="hash" href="{esc(self.link(e.hash))}" title="entry {e.hash}">{e.hash[:10]}</a></div>'
        )

    def entries(self, entries: list[Entry]) -> str:
        """Entries oldest first as HTML: results go inside their calls, hidden runs fold."""
        results: dict[str, Entry] = {}
        calls = {e.call_id for e in entries if e.kind == "tool_call" and e.call_id}
        for e in entries:
            if e.kind in ("tool_result", "error") and e.call_id in calls and e.call_id not in results:
                results[e.call_id] = e
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
        p = e.payload if isinstance(e.payload, dict) else {"content": e.payload}
        attrs = f'id="h-{e.hash[:16]}" data-hash="{e.hash}" data-kind="{esc(e.kind)}"'
        if e.kind == "tool_call":
            return self._tool(e, p, results.get(e.call_id or ""), attrs)
        if e.kind in ("tool_result", "error"):
            return f'<div class="msg {"error" if self._is_error(e) else "tool-result"} orphan" {attrs} data-call-id="{esc(p.get("call_id") or "")}">{self._result(e, p)}</div>'
        if e.kind == "anchor":
            summary = p.get("summary")
            extra = f'<div class="summary">{render(summary)}</div>' if isinstance(summary, str) else ""
            label = "⚓ compaction boundary: the agent's history was replaced here" if is_compaction(e) else "⚓ anchor " + str(p.get("name"))
            return f'<div class="msg anchor{" compaction" if is_compaction(e) else ""}" {attrs}>{self._head(e, label)}{extra}</div>'
        if e.kind == "system":
            return f'<details class="msg system" {attrs}><summary>{self._head(e, "system")}</summary>{content_html(p.get("content"), self.text_url(e.hash))}</details>'
        badge = '<span class="badge warn">interrupted stream</span>' if e.kind == "streaming" else ""
        return f'<div class="msg {esc(e.kind)}" {attrs}>{self._head(e, "assistant" if e.kind == "streaming" else e.kind, badge)}<div class="body">{content_html(p.get("content"), self.text_url(e.hash))}</div></div>'

    @staticmethod
    def _is_error(e: Entry) -> bool:
        return e.kind == "error" or (isinstance(e.payload, dict) and e.payload.get("is_error") is True)

    def _result(self, e: Entry, p: dict) -> str:
        if e.kind == "error":
            head = self._head(e, "error", '<span class="badge err">error</span>')
            extra = {k: v for k, v in p.items() if k not in ("message", "call_id")}
            body = f'<pre class="out">{esc(p.get("message"))}</pre>' + (clipped(_as_text(extra), self.text_url(e.hash)) if extra else "")
            return head + body
        badge = '<span class="badge err">error</span>' if self._is_error(e) else ""
        out = p.get("output")
        if isinstance(out, list) and any(isinstance(x, dict) and x.get("type") in ("image", "image_url", "input_image") for x in out):
            body = content_html(out, self.text_url(e.hash))
        else:
            body = clipped(_as_text(out), self.text_url(e.hash))
        return self._head(e, "result", badge) + body

    def _tool(self, e: Entry, p: dict, result: Optional[Entry], attrs: str) -> str:
        args = p.get("arguments")
        brief = " ".join(_as_text(args).split()) if args is not None else ""
        if result is None:
            state = '<span class="badge warn">pending</span>' if e.call_id in self.pending else ""
        elif self._is_error(result):
            state = '<span class="badge err">error</span>'
        else:
            state = '<span class="badge ok">done</span>'
        res = ""
        if result is not None:
            rp = result.payload if isinstance(result.payload, dict) else {}
            res = f'<div class="result {"error" if self._is_error(result) else ""}" id="h-{result.hash[:16]}" data-hash="{result.hash}">{self._result(result, rp)}</div>'
        return (
            f'<details class="msg tool" {attrs} data-call-id="{esc(e.call_id or "")}">'
            f'<summary><span class="tool-name">{esc(p.get("name"))}</span><code class="args">{esc(brief[:120])}</code>{state}'
            f'<a class="hash" href="{esc(self.link(e.hash))}">{e.hash[:10]}</a></summary>'
            f'{clipped(_as_text(args), self.text_url(e.hash))}{res}</details>'
        )
