"""What search sees: the query language, the text of an entry, and snippets. Pure
functions, no I/O (ctape/ops/search.py keeps the cache and answers queries).

Text: every string of the payload (tool outputs and large values included), without
call ids, content-block types, signatures, encrypted blobs, and runs of base64 or other
binary-looking characters; at most MAX_TEXT characters an entry.

Query: words and "quoted phrases", ANDed. Nothing the user types reaches FTS5 as syntax:
each term becomes an FTS5 string. FTS5 splits words at every punctuation mark, so it
finds candidates; `Matcher` then checks each candidate's text literally: a quoted phrase
must occur as typed, identifier punctuation (- _ . /) included (case and accents aside),
and candidates where every term occurs exactly as typed rank first, then those where
it occurs with another case or accents, then the rest (the same words, other
punctuation between them).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Callable, NamedTuple, Optional

from blake3 import blake3

from ..model.errors import InvalidInput
from ..store.index import hash_key

SKIP_KEYS = frozenset({"call_id", "id", "type", "tool_use_id", "signature", "encrypted_content"})
MAX_TEXT = 2 << 20  # characters of one entry's text that are indexed
BINARY_RUN = re.compile(r"[A-Za-z0-9+/=_\-]{200,}")  # base64, hex dumps, keys: not words


# -- the query language ------------------------------------------------------------------------


class Term(NamedTuple):
    text: str
    quoted: bool  # "a phrase": it must occur literally, identifier punctuation included


# FTS5 takes time quadratic in the terms it ANDs (a query of the same word 30,000 times, a
# 60 KB URL of `serve`, took 112 s holding a turn of the server: found by an audit); a
# phrase costs time about linear in its words. Real queries are far below both limits.
MAX_TERMS = 64
MAX_QUERY_CHARS = 16_384


def parse_terms(text: str) -> list[Term]:
    """Words and "quoted phrases" of a query, in order, each once (they are ANDed)."""
    if not isinstance(text, str):
        raise InvalidInput("the search query must be text")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no text can hold it, and SQLite's encoder raised
        raise InvalidInput("the search query is not valid Unicode (a lone surrogate); send UTF-8 text") from None
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidInput(f"the search query is {len(text):,} characters long; at most {MAX_QUERY_CHARS:,} are searched: quote a shorter, telling part of it")
    text = re.sub(r"[\x00-\x1f\x7f]", " ", text)  # control characters part terms (a NUL ended SQLite's string: an error)
    terms = {}  # (a dict: in order, each once)
    for m in re.finditer(r'"([^"]*)"?|([^\s"]+)', text):
        quoted = m.group(1) is not None
        term = Term(" ".join((m.group(1) if quoted else m.group(2)).split()), quoted)
        if re.search(r"\w", term.text):  # no letter or digit: no token to match; a repeat: ANDed already
            terms[term] = None
    if not terms:
        raise InvalidInput('empty search query: give one or more words, or "a phrase" in quotes')
    if len(terms) > MAX_TERMS:
        raise InvalidInput(f'the search query has {len(terms):,} different words and phrases; at most {MAX_TERMS} are searched: put a passage in quotes to search it as "one phrase"')
    return list(terms)


def parse_query(text: str) -> list[str]:
    """Words and "quoted phrases" of a query, in order. Nothing the user types reaches
    FTS5 as syntax: each term is quoted when the query is built."""
    return [t.text for t in parse_terms(text)]


def fts_expression(terms: list[str]) -> str:
    """Every term as an FTS5 string (a phrase), ANDed."""
    return " AND ".join('"' + t.replace('"', '""') + '"' for t in terms)


# -- literal matches ----------------------------------------------------------------------------

IDENT_PUNCT = "-_./"  # kept inside a term's pieces: `combined-transcript-link`, `a/b.py`
_SEPARATOR = r"[^\w\-./]+"  # what stands between a term's pieces: spaces, other punctuation
_COMBINING = re.compile(r"[\u0300-\u036f]+")

EXACT, LITERAL, WORDS = 0, 1, 2  # how well a text matches, best first
MATCH_NAMES = ("exact", "literal", "words")


def strip_accents(s: str) -> str:
    return s if s.isascii() else _COMBINING.sub("", unicodedata.normalize("NFD", s))


def literal_pattern(term: str) -> str:
    """A term as a regular expression of its literal form: its pieces (words with their
    identifier punctuation) in order, any run of spaces or other punctuation between."""
    pieces = [p for p in re.split(_SEPARATOR, term) if p]
    return _SEPARATOR.join(re.escape(p) for p in pieces)


class Matcher:
    """How a text matches the terms of a query: EXACT (every term occurs as typed), LITERAL
    (with another case or accents), WORDS (the words, with other punctuation between), or
    None when a quoted phrase does not occur literally."""

    def __init__(self, terms: list[Term]):
        self.terms = terms
        self.quoted = any(t.quoted for t in terms)
        pats = [literal_pattern(t.text) for t in terms]
        self.exact = [re.compile(p) for p in pats]
        self.anycase = [re.compile(p, re.IGNORECASE) for p in pats]
        self.folded = [re.compile(literal_pattern(strip_accents(t.text)), re.IGNORECASE) for t in terms]

    def grade(self, text: str) -> Optional[int]:
        if all(p.search(text) for p in self.exact):
            return EXACT
        plain = strip_accents(text)
        found = [p.search(plain) is not None for p in self.folded]
        if any(t.quoted and not f for t, f in zip(self.terms, found)):
            return None
        return LITERAL if all(found) else WORDS

    def first(self, text: str) -> Optional[int]:
        """Where the best match of any term begins: an exact one, else one in another case."""
        for pats in (self.exact, self.anycase):
            at = [m.start() for m in (p.search(text) for p in pats) if m]
            if at:
                return min(at)
        return None


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
        # cut to what may still be indexed before it is decoded and cleaned: clean's split of
        # a whole 100 MB value took 12.8 times its size in memory (found by an audit of scale)
        s = get_blob(p[2:])[: 4 * (MAX_TEXT - size)].decode("utf-8", "replace") if _is_blob_ref(p) else p
        s = clean(s[: MAX_TEXT - size])
        if s:
            out.append(s)
            size += len(s)
            if size >= MAX_TEXT:
                break
    return "\n".join(out)


def payload_text(payload) -> str:
    """The searchable text of a payload as read back (large values already internalized)."""
    return "\n".join(s for s in (clean(p[:MAX_TEXT]) for p in payload_parts(payload, [])) if s)


def _term_pattern(term: str) -> Optional[str]:
    words = re.findall(r"\w+", term)
    return r"\W+".join(re.escape(w) for w in words) if words else None


def has_match(text: str, terms: list[str]) -> bool:
    pats = [p for p in map(_term_pattern, terms) if p]
    return bool(text) and any(re.search(p, text, re.IGNORECASE) for p in pats)


def snippet(text: str, terms: list[str], width: int = 160, matcher: Optional[Matcher] = None) -> str:
    """One line around the first place a term occurs (whitespace folded); with a matcher,
    the first literal occurrence when there is one."""
    best = matcher.first(text) if matcher is not None else None
    for t in terms if best is None else ():
        words = re.findall(r"\w+", t)
        if not words:
            continue
        m = re.search(r"\W+".join(re.escape(w) for w in words), text, re.IGNORECASE)
        if m and (best is None or m.start() < best):
            best = m.start()
    if best is None:
        best = 0
    start = max(0, best - width // 3)
    if start <= 20 or (len(text) <= 2 * width and len(" ".join(text.split())) <= width):
        start = 0  # near the start, or all of it fits: from the start
    else:  # begin at a word
        space = text.find(" ", start, best)
        start = space + 1 if space >= 0 else start
    end = start + width * 3
    folded = " ".join(text[start:end].split())
    more = len(folded) > width or end < len(text.rstrip())
    return ("…" if start > 0 and text[:start].strip() else "") + folded[:width] + ("…" if more else "")
