"""What the pages ask of a tape beyond the library's own operations: where a session
came from, and a text search. (Token usage and diffs are the library's: ops/usage.py and
ops/diff.py, the figures of `ctape usage` and the answer of `ctape diff`.)

`search` uses the library's indexed `Tape.search` when this ctape has it and a plain scan
otherwise.
"""

from __future__ import annotations

import json
from typing import Optional

from ..errors import EntryNotFound
from ..model.models import HIDDEN, Entry

# meta keys that say where an entry came from: an imported format or an integration
_SOURCES = (
    ("claude-code", "import: claude-code"),
    ("codex", "import: codex"),
    ("openai", "import: openai"),
    ("ctape.format", "import"),
    ("langgraph", "integration: langgraph"),
    ("openai_agents.item", "integration: openai-agents"),
    ("pydantic_ai.message", "integration: pydantic-ai"),
)


def source(e: Optional[Entry]) -> str:
    """Where the session holding entry e was written from (its head entry is enough)."""
    meta = e.meta if e is not None and isinstance(e.meta, dict) else {}
    for key, label in _SOURCES:
        if key in meta:
            return label
    return "ctape"


def text_of(e: Entry) -> str:
    """The searchable text of an entry: its payload as JSON (tool outputs included)."""
    return json.dumps(e.payload, ensure_ascii=False)


def is_hidden(e: Entry) -> bool:
    return isinstance(e.meta, dict) and bool(e.meta.get(HIDDEN))


def search(tape, query: str, limit: int = 50, scan_limit: int = 50_000) -> tuple[list[dict], bool]:
    """Entries matching QUERY on every branch of every session, as dicts {session, hash, kind,
    time, snippet}, and whether the answer stopped early. Uses the library's indexed
    `Tape.search` where this ctape has it (SPEC section 13), else a plain scan."""
    indexed = getattr(tape, "search", None)
    if indexed is not None:
        hits = indexed(query, limit=limit)
        return [{"session": h.session, "hash": h.hash, "kind": h.kind, "time": h.time, "snippet": h.snippet} for h in hits], False
    return scan(tape, query, limit, scan_limit)


def scan(tape, query: str, limit: int = 50, scan_limit: int = 50_000) -> tuple[list[dict], bool]:
    """The plain scan: payloads holding every word of QUERY (case-insensitive), newest first,
    at most `scan_limit` entries read (the flag says it stopped there)."""
    words = [w.lower() for w in query.split() if w]
    if not words:
        return [], False
    found: list[dict] = []
    seen: set[str] = set()
    scanned = 0
    for s in tape.sessions():
        sess = tape.session(s["session"])
        tips = [b["hash"] for b in sess.branches()]
        if s["head"] and s["head"] not in tips:
            tips.append(s["head"])
        for tip in tips:
            h = tip
            while h is not None and h not in seen:
                if scanned >= scan_limit:
                    return found, True
                seen.add(h)
                scanned += 1
                try:
                    e = tape.read_entry(h)
                except EntryNotFound:
                    break  # not synced yet
                text = text_of(e)
                low = text.lower()
                if all(w in low for w in words):
                    found.append({"session": s["session"], "hash": e.hash, "kind": e.kind, "time": e.time, "snippet": _snippet(text, low.find(words[0]))})
                    if len(found) >= limit:
                        return found, False
                h = e.parent
    return found, False


def _snippet(text: str, at: int, width: int = 160) -> str:
    start = max(0, at - width // 3)
    out = " ".join(text[start : start + width].split())
    return ("…" if start else "") + out + ("…" if start + width < len(text) else "")
