"""What search sees: the query language, the text of an entry, and snippets. Pure
functions, no I/O (ctape/ops/search.py keeps the cache and answers queries).

Text: every string of the payload (tool outputs and large values included), without
call ids, content-block types, signatures, encrypted blobs, and runs of base64 or other
binary-looking characters; at most MAX_TEXT characters an entry.

Query: words and "quoted phrases", ANDed. Nothing the user types reaches FTS5 as syntax:
each term becomes an FTS5 string.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

from blake3 import blake3

from ..model.errors import InvalidInput
from ..store.index import hash_key

SKIP_KEYS = frozenset({"call_id", "id", "type", "tool_use_id", "signature", "encrypted_content"})
MAX_TEXT = 2 << 20  # characters of one entry's text that are indexed
BINARY_RUN = re.compile(r"[A-Za-z0-9+/=_\-]{200,}")  # base64, hex dumps, keys: not words


# -- the query language ------------------------------------------------------------------------


def parse_query(text: str) -> list[str]:
    """Words and "quoted phrases" of a query, in order. Nothing the user types reaches
    FTS5 as syntax: each term is quoted when the query is built."""
    if not isinstance(text, str):
        raise InvalidInput("the search query must be text")
    terms = []
    for m in re.finditer(r'"([^"]*)"?|([^\s"]+)', text):
        term = m.group(1) if m.group(1) is not None else m.group(2)
        term = " ".join(term.split())
        if re.search(r"\w", term):  # a term with no letter or digit has no token to match
            terms.append(term)
    if not terms:
        raise InvalidInput('empty search query: give one or more words, or "a phrase" in quotes')
    return terms


def fts_expression(terms: list[str]) -> str:
    """Every term as an FTS5 string (a phrase), ANDed."""
    return " AND ".join('"' + t.replace('"', '""') + '"' for t in terms)


# -- text of an entry -------------------------------------------------------------------------------


def payload_parts(value, out: list, key: Optional[str] = None) -> list:
    """The strings of a stored (externalized) payload, in order; large values stay as
    their blob references ("\\0b" + hash)."""
    if isinstance(value, str):
        if key not in SKIP_KEYS:
            out.append(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in SKIP_KEYS:
                payload_parts(v, out, k)
    elif isinstance(value, list):
        for v in value:
            payload_parts(v, out, key)
    return out


def _is_blob_ref(s: str) -> bool:
    return s[:2] == "\0b" and len(s) == 66


def clean(s: str) -> str:
    """A string as it is indexed: runs of binary-looking characters left out."""
    if s[:1] == "\0":
        s = s[1:]
    if len(s) >= 200:
        if s.startswith("data:") and ";base64," in s[:100]:
            return ""
        if max(map(len, s.split()), default=0) >= 200:  # the regex only where a long run may be
            s = BINARY_RUN.sub(" ", s)
    return s


def text_key(parts: list[str]) -> int:
    h = blake3()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\0\1")
    return hash_key(h.hexdigest()[:16])


def entry_text(parts: list[str], get_blob: Callable[[str], bytes]) -> str:
    """The indexed text of an entry, its large values fetched."""
    out, size = [], 0
    for p in parts:
        s = get_blob(p[2:]).decode("utf-8", "replace") if _is_blob_ref(p) else p
        s = clean(s)
        if s:
            out.append(s[: MAX_TEXT - size])
            size += len(out[-1])
            if size >= MAX_TEXT:
                break
    return "\n".join(out)


def payload_text(payload) -> str:
    """The searchable text of a payload as read back (large values already internalized)."""
    return "\n".join(s for s in (clean(p) for p in payload_parts(payload, [])) if s)


def _term_pattern(term: str) -> Optional[str]:
    words = re.findall(r"\w+", term)
    return r"\W+".join(re.escape(w) for w in words) if words else None


def has_match(text: str, terms: list[str]) -> bool:
    pats = [p for p in map(_term_pattern, terms) if p]
    return bool(text) and any(re.search(p, text, re.IGNORECASE) for p in pats)


def snippet(text: str, terms: list[str], width: int = 160) -> str:
    """One line around the first place a term occurs (whitespace folded)."""
    best = None
    for t in terms:
        words = re.findall(r"\w+", t)
        if not words:
            continue
        m = re.search(r"\W+".join(re.escape(w) for w in words), text, re.IGNORECASE)
        if m and (best is None or m.start() < best):
            best = m.start()
    if best is None:
        best = 0
    start = max(0, best - width // 3)
    if start <= 20:
        start = 0
    else:  # begin at a word
        space = text.find(" ", start, best)
        start = space + 1 if space >= 0 else start
    end = start + width * 3
    folded = " ".join(text[start:end].split())
    more = len(folded) > width or end < len(text.rstrip())
    return ("…" if start > 0 and text[:start].strip() else "") + folded[:width] + ("…" if more else "")
