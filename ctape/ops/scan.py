"""`ctape scan`: likely secrets in a tape's entries (SPEC section 18, docs/privacy.md).

Every string of every entry a session's refs reach is looked at: payload, meta and
delta, large values (blobs) included, each blob once per run. Detectors:

- detect-secrets' regex plugins (AWS, GitHub, GitLab, Slack, Stripe, OpenAI, private
  keys, JWTs, npm, PyPI, SendGrid, Twilio, ...), when the optional package is installed
  (`pip install 'ctape[scan]'`); without it scan says so once and uses the rest;
- a high-entropy token check with detect-secrets' Shannon entropy limit (4.5 bits per
  character for base64-like tokens of 24-100 characters that mix cases and digits);
- ctape's own short list for keys detect-secrets does not know yet (Anthropic);
- the user's patterns, kept with the allowed finding ids in this machine's settings for
  the tape (`privacy.json` in its cache folder, never synced).

A finding names the session, the entry hash, the JSON path of the value and the kind;
its preview shows the text around it with every secret found there masked. A value
already redacted shows its marker and is never a finding.

Each string is matched alone. For speed, entries are taken some hundreds at a time, and
each pattern runs only on the strings of the batch that hold what every match of it
needs (a literal, a run of token characters: see Gate), which most strings lack; the
findings are those of running everything on every string (tests/test_scan_oracle.py).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import math
import os
import re
import string
import sys
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional

from blake3 import blake3

from ..model import redaction
from ..model.models import brief
from ..model.errors import CorruptObject, EntryNotFound, InvalidInput, StorageError
from ..model.schema import decode_entry
from ..store.files import CODEC_RAW, TYPE_ENTRY
from ..store.localstate import cache_folder, editing

if TYPE_CHECKING:
    from ..history.tape import Tape

SETTINGS = "privacy.json"  # beside index.sqlite: this machine's patterns and allowed ids for the tape
ENTROPY_LIMIT = 4.5  # bits per character, detect-secrets' default for base64 strings
# a run of 24-100 base64 characters that is not part of a longer token: nothing of the
# alphabet, "." or "=" right before it, except the "=" of NAME=VALUE (an env dump, a .env
# file); nothing of it right after, nor a "." that goes on (a dotted name), but the "." that
# ends a sentence
_TOKEN = re.compile(r"(?<![A-Za-z0-9+/_.-])(?<![^A-Za-z0-9_]=)(?<!^=)[A-Za-z0-9+/_-]{24,100}={0,2}(?![A-Za-z0-9+/=_-])(?!\.[A-Za-z0-9+/_-])")
_HEX = re.compile(r"[0-9a-fA-F]+")
OWN = (("anthropic-key", r"sk-ant-[A-Za-z0-9_-]{32,}"),)
# detect-secrets plugins left out: provider key=value forms that cost about a second per
# 6 MB each in Python's re (lookbehinds before every character); the entropy check and
# user patterns cover such values
SLOW_PLUGINS = frozenset({"IBM Cloud IAM Key", "IBM COS HMAC Credentials", "Cloudant Credentials",
                          "SoftLayer Credentials", "Artifactory Credentials", "Public IP (ipv4)"})
NO_ENTROPY_KEYS = frozenset({"signature", "encrypted_content", "data", "image_url", "url"})  # base64 payloads, not secrets
PREVIEW_CONTEXT = 24
SEP = "\n\n"  # counted between an entry's strings in the "bytes" a scan reports (what it looked at)


def _id_key(key: Optional[str]) -> bool:
    """Values whose randomness is by design (ids, signatures, base64 data): no entropy check."""
    if key is None:
        return False
    k = key.lower()
    return k in NO_ENTROPY_KEYS or k.endswith("id") or k.endswith("_ids") or k.endswith("uuid") or k.endswith("hash")


@dataclass(frozen=True)
class Finding:
    session: str
    hash: str  # the entry's hash; for a find in an interrupted stream, the stream's id
    path: str
    kind: str
    preview: str
    stream: bool = False  # in the text of an interrupted stream (partial records), not in an entry
    at: str = ""  # where the find is in its value: "" for the first of its kind there, else its offset

    @property
    def id(self) -> str:
        """Stable across runs and copies; names no byte of the secret. A finding is one
        find: allowing the one that is shown does not allow a second of its kind in the same
        value, nor one that a stream's text brings later."""
        at = f"|{self.at}" if self.at else ""
        return blake3(f"{self.hash}|{self.path}|{self.kind}{at}".encode()).hexdigest()[:16]

    def to_json(self) -> dict:
        if self.stream:
            return {"id": self.id, "session": self.session, "hash": None, "stream": self.hash, "path": self.path, "kind": self.kind, "preview": self.preview}
        return {"id": self.id, "session": self.session, "hash": self.hash, "path": self.path, "kind": self.kind, "preview": self.preview}


STREAM_PATH = "$.stream"  # where a find in an interrupted stream's text is said to be


def stream_runs(pieces: Iterable[tuple[int, str]]) -> list[str]:
    """The text of a stream's partial records ((offset, text) pieces, in any order, some
    possibly repeated) put together: each run of pieces that join or overlap is one string,
    so a secret cut by a flush is seen whole, and text past a gap is seen too."""
    runs: list[list] = []
    for off, text in sorted(pieces):
        if runs and off <= runs[-1][0] + len(runs[-1][1]):
            start, have = runs[-1]
            if off + len(text) > start + len(have):
                runs[-1][1] = have[: off - start] + text
        else:
            runs.append([off, text])
    return [t for _, t in runs if t]


def scan_streams(streams: dict[tuple[str, str], list[tuple[int, str]]], detectors: Detectors) -> list[Finding]:
    """Findings in the text of streams: {(session, stream id): [(offset, text)]}, one per
    find, named by where it is in the stream's text (which grows: a later find is another
    finding); the preview masks every find, as for entries."""
    keys, texts = [], []
    for key, pieces in sorted(streams.items()):
        for text in stream_runs(pieces):
            keys.append(key)
            texts.append(text)
    found: dict[tuple, list] = {}  # (session, stream, kind) -> [(run, span, text, spans)]
    runs: dict[tuple, int] = {}
    for (session, sid), text, sp in zip(keys, texts, detectors.spans_many(texts, [True] * len(texts))):
        run = runs[(session, sid)] = runs.get((session, sid), -1) + 1
        for span in sp:
            found.setdefault((session, sid, span[2]), []).append((run, span, text, sp))
    return [Finding(session, sid, STREAM_PATH, kind, preview(text, sp, span), stream=True, at=f"{run}:{span[0]}")
            for (session, sid, kind), finds in found.items() for run, span, text, sp in finds]


def open_stream_pieces(tape: "Tape", session: str) -> dict[tuple[str, str], list[tuple[int, str]]]:
    """The partial records of the session's interrupted streams (not recorded as an entry
    yet: `ctape recover` does that), as the index holds them: {(session, id): [(off, text)]}."""
    out: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for p in tape.store.index.open_partials(session):
        if isinstance(p.get("text"), str) and isinstance(p.get("off"), int):
            out.setdefault((session, p["stream"]), []).append((p["off"], p["text"]))
    return out


# -- detectors ----------------------------------------------------------------------------------


MIN_GROUP = 8  # a capturing group shorter than this is a prefix or a quote, not the secret


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "secret"


def detect_secrets_patterns() -> Optional[list[tuple[str, re.Pattern]]]:
    """(kind, regex) of every regex plugin of detect-secrets, or None when not installed."""
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.base import RegexBasedDetector
    except ImportError:
        return None
    out = []
    for name, cls in sorted(get_mapping_from_secret_type_to_class().items()):
        if not issubclass(cls, RegexBasedDetector) or name in SLOW_PLUGINS:
            continue  # keyword and entropy plugins work by line; see SLOW_PLUGINS
        for rx in cls().denylist:
            out.append((_slug(name), rx))
    return out


def _entropy(s: str) -> float:
    counts = Counter(s)
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


_DIGITS, _LOWER, _UPPER = frozenset(string.digits), frozenset(string.ascii_lowercase), frozenset(string.ascii_uppercase)


def _high_entropy(text: str) -> Iterator[tuple[int, int]]:
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        # a token is ASCII (see _TOKEN): these sets are str.isdigit/islower/isupper on it
        if _DIGITS.isdisjoint(tok) or _LOWER.isdisjoint(tok) or _UPPER.isdisjoint(tok) or _HEX.fullmatch(tok):
            continue  # hashes and ids are hex; words and paths lack the mix
        if _entropy(tok) >= ENTROPY_LIMIT:
            yield m.span()


# -- gates: what text a pattern cannot match in, found without running it -----------------------
#
# Python's re runs a pattern that starts with a character class (a token of 24-100
# characters, a Telegram or Discord token, a Mailchimp key) at about 100 MB/s or less, and
# scan runs some forty of them: most of a first scan's time. Nearly every string holds
# nothing any of them can match, and that is cheap to know from what each pattern needs:
# a literal (`ghp_`, `-us`, `BEGIN RSA`) one of which every match holds, found with
# str.find at memory speed, and a run of N token characters (letters, digits, + / = _ -
# and anything not ASCII), found in the strings' bytes mapped to two values. A pattern
# runs, alone and whole, on exactly the strings that hold what it needs: its finds there
# are the finds of running it on every string, never fewer.

_KCHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-")
_KTABLE = bytes(97 if (chr(i) in _KCHARS or i >= 0x80) else 32 for i in range(256))  # token byte -> "a", else " "
_BSEP = b"\n"  # between strings' bytes: no token byte, so no run crosses it
RUN_LEVELS = (16, 24, 32, 48)  # the run lengths looked for (a pattern's is rounded down to one)
_KTABLE_JSON = bytes(97 if (chr(i) in _KCHARS or i >= 0x80 or i == 0x5C) else 32 for i in range(256))  # and "\\" of JSON escapes
_HEX64 = re.compile(rb"[0-9a-f]{64}")


def _k_char(c: int) -> bool:
    return c >= 0x80 or chr(c) in _KCHARS


def _k_item(op, av) -> bool:
    """Whether one character item matches only token characters (under any case rule:
    the case variants of ASCII letters are letters or not ASCII)."""
    from re import _constants as C

    if op is C.LITERAL:
        return _k_char(av)
    if op is not C.IN:
        return False
    for iop, iav in av:
        if iop is C.LITERAL:
            ok = _k_char(iav)
        elif iop is C.RANGE:
            lo, hi = iav
            ok = all(_k_char(c) for c in range(lo, min(hi, 0x7F) + 1))
        elif iop is C.CATEGORY:
            ok = iav in (C.CATEGORY_DIGIT, C.CATEGORY_WORD, C.CATEGORY_UNI_DIGIT, C.CATEGORY_UNI_WORD)
        else:
            ok = False  # NEGATE, or something new
        if not ok:
            return False
    return True


def _better(a: Optional[frozenset], b: Optional[frozenset]) -> Optional[frozenset]:
    """The stronger of two literal requirements: the longer shortest literal, then fewer."""
    if not a:
        return b or None
    if not b:
        return a
    return max(a, b, key=lambda s: (min(map(len, s)), -len(s)))


def _need(items, icase: bool) -> tuple[Optional[frozenset], int]:
    """(literals one of which every match holds, or None; a length N such that every match
    holds N token characters in a row) of a parsed pattern's items in sequence."""
    from re import _constants as C

    lits, run_best, lit, run = None, 0, "", 0

    def end_lit():
        nonlocal lits, lit
        if lit:
            lits = _better(lits, frozenset({lit}))
        lit = ""

    for op, av in items:
        if op in (C.AT, C.ASSERT, C.ASSERT_NOT):
            continue  # zero-width: what is around it is adjacent in the text
        if op is C.LITERAL and not (icase and av >= 0x80):
            lit += chr(av).lower() if icase else chr(av)
        else:
            end_lit()
        if _k_item(op, av):
            run += 1
            continue
        if op in (C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", C.MAX_REPEAT)):
            lo, _, sub = av
            if len(sub) == 1 and _k_item(*sub[0]):
                run += lo  # token characters, perhaps none: the run goes on either way
                continue
            if lo >= 1:
                sl, sr = _need(sub, icase)
                lits, run_best = _better(lits, sl), max(run_best, sr)
        elif op is C.SUBPATTERN or op is getattr(C, "ATOMIC_GROUP", None):
            sub = av[-1] if op is C.SUBPATTERN else av
            sl, sr = _need(sub, icase)
            if op is C.SUBPATTERN and (av[1] | av[2]) & re.IGNORECASE:
                sl = None  # its literals follow another case rule
            lits, run_best = _better(lits, sl), max(run_best, sr)
        elif op is C.BRANCH:
            got = [_need(alt, icase) for alt in av[1]]
            if all(g[0] for g in got):
                lits = _better(lits, frozenset().union(*(g[0] for g in got)))
            run_best = max(run_best, min(g[1] for g in got))
        elif op is C.LITERAL:
            pass  # a character that is no token character, or not ASCII under a case rule
        run_best, run = max(run_best, run), 0
    end_lit()
    return lits, max(run_best, run)


@dataclass(frozen=True)
class Gate:
    """What every match of a pattern needs: one of `lits` (None: no literal is known;
    lower case when `icase`) and `run` token characters in a row (0: none known)."""
    lits: Optional[tuple[str, ...]]
    icase: bool
    run: int


def gate(rx: re.Pattern) -> Gate:
    try:
        from re import _parser

        parsed = _parser.parse(rx.pattern, rx.flags)
        icase = bool(parsed.state.flags & re.IGNORECASE)
        lits, run = _need(parsed.data, icase)
    except Exception:  # noqa: BLE001 - a pattern this cannot read runs on every string
        return Gate(None, False, 0)
    if lits and icase and not all(x.isascii() for x in lits):
        lits = None
    return Gate(tuple(sorted(lits)) if lits else None, icase, run)


def _holding(hay, needle, starts: list[int], ends: list[int], among: Optional[set] = None) -> set[int]:
    """The strings (by index) that hold `needle`, in their concatenation `hay`."""
    out: set[int] = set()
    n, pos = len(starts), hay.find(needle)
    while pos >= 0:
        i = bisect.bisect_right(starts, pos) - 1
        if pos + len(needle) <= ends[i]:
            out.add(i)
            if i + 1 >= n:
                break
            pos = hay.find(needle, starts[i + 1])
        else:
            pos = hay.find(needle, pos + 1)
    return out


def _mask_json(body: bytes) -> tuple[bytes, list[str]]:
    """An entry's canonical JSON with the values no detector could find anything in
    blanked (of the same length), and the large values it refers to. Blanked: every whole
    string value of 64 hex digits after a key "parent" (no literal a gate can use is all
    hex, and the entropy check skips hex), and every whole string value that is a large
    value's reference (`"\\u0000b` + 64 hex + `"`: that value's own bytes are judged
    instead). Whole values only: a quote right after `:`, `,` or `[` and one right after
    a hex digit are never escaped, so such bytes are a JSON string from end to end."""
    refs: list[str] = []
    out = bytearray(body)
    i = body.find(b'"parent":"')
    while i >= 0:
        j = i + 10
        if body[j + 64:j + 65] == b'"' and _HEX64.fullmatch(body, j, j + 64):
            out[j:j + 64] = b" " * 64
        i = body.find(b'"parent":"', j)
    i = body.find(b'"\\u0000b')
    while i >= 0:
        j = i + 8  # the hex digits
        if i and body[i - 1] in b":,[" and body[j + 64:j + 65] == b'"' and _HEX64.fullmatch(body, j, j + 64):
            refs.append(body[j:j + 64].decode())
            out[i + 1:j + 64] = b" " * (j + 63 - i)
        i = body.find(b'"\\u0000b', i + 1)
    return bytes(out), refs


class Detectors:
    """Everything `scan` looks for, compiled once."""

    def __init__(self, user_patterns: Iterable[dict] = (), entropy: bool = True, builtin: bool = True):
        found = detect_secrets_patterns() if builtin else []
        self.have_detect_secrets = found is not None
        self.patterns: list[tuple[str, re.Pattern]] = list(found or [])
        self.patterns += [(kind, re.compile(rx)) for kind, rx in OWN] if builtin else []
        for p in user_patterns:
            self.patterns.append((p.get("kind") or "pattern", re.compile(p["regex"])))
        self.entropy = entropy
        self.gates = [gate(rx) for _, rx in self.patterns]
        self.token_gate = gate(_TOKEN)

    def fingerprint(self) -> str:
        """What the findings depend on: the patterns, the entropy check, the masking rules."""
        try:
            from importlib.metadata import version

            ds = version("detect-secrets") if self.have_detect_secrets else ""
        except Exception:  # noqa: BLE001 - no version known: the patterns still say enough
            ds = ""
        # "strings-alone": each string is matched alone (before, an entry's strings were
        # joined, so a match could run on from one string into the next): caches made
        # before are scanned again once
        # "keys": object keys are matched too (before, only values were); "places": a finding
        # per find, where it is (Finding.at), not one per value and kind
        parts = [ds, str(self.entropy), str(ENTROPY_LIMIT), str(MIN_GROUP), str(PREVIEW_CONTEXT), _TOKEN.pattern, "strings-alone", "keys", "places", "raw-b64"]
        parts += [f"{k}\0{rx.pattern}\0{rx.flags}" for k, rx in self.patterns]
        return blake3("\n".join(parts).encode()).hexdigest()

    def can_prefilter(self) -> bool:
        """Whether clean_many can judge bytes: every pattern needs a literal that JSON
        writes as it is (printable ASCII, no quote or backslash) and that is not all hex
        digits (a 64-hex value, such as an entry's parent, is masked)."""
        for g in self.gates:
            if g.lits is None or not all(x.isascii() and x.isprintable() and '"' not in x and "\\" not in x
                                         and not all(c in "0123456789abcdef" for c in x) for x in g.lits):
                return False
        return True

    def clean_many(self, bodies: list[bytes]) -> list[bool]:
        """For each body (an entry's canonical JSON as _mask_json leaves it, or a large
        value's UTF-8 bytes): True when no pattern and no entropy check can find anything
        in any string it holds (only when can_prefilter()). A JSON string is in the body as
        it is, but for its escapes: a quote, a backslash or a control character, none of
        them in a gate's literal; a backslash counts as a token character."""
        n = len(bodies)
        masked = bodies
        starts, ends, pos = [], [], 0
        for b in masked:
            starts.append(pos)
            ends.append(pos + len(b))
            pos += len(b) + 1
        joined = b"\n".join(masked)  # no raw newline in canonical JSON, and none is a token byte
        tokens = joined.translate(_KTABLE_JSON)
        runs: dict[int, set[int]] = {}

        def with_run(r: int) -> Optional[set[int]]:
            r = max((x for x in RUN_LEVELS if x <= r), default=0)
            if not r:
                return None
            if r not in runs:
                runs[r] = _holding(tokens, b"a" * r, starts, ends)
            return runs[r]

        lowered = b""
        not_ascii: set[int] = set()
        maybe: set[int] = set()
        if self.entropy:  # first: a body it keeps needs no other look
            maybe |= with_run(self.token_gate.run) or set()
        for g in self.gates:
            among = with_run(g.run)
            if among is not None:
                among = among - maybe
                if not among:
                    continue
            if g.icase and not lowered:
                lowered = joined.lower()  # ASCII letters only, as on ASCII text
                not_ascii = {i for i, b in enumerate(masked) if not b.isascii()}
            hay = lowered if g.icase else joined
            lits = [x.encode() for x in g.lits]
            if among is None:
                for x in lits:
                    maybe |= _holding(hay, x, starts, ends)
                if g.icase:
                    maybe |= not_ascii
                continue
            for i in among:  # only the bodies with the run it needs, each alone
                if g.icase and i in not_ascii or any(hay.find(x, starts[i], ends[i]) >= 0 for x in lits):
                    maybe.add(i)
        return [i not in maybe for i in range(n)]

    def pattern_spans(self, text: str) -> list[tuple[int, int, str]]:
        out: list[tuple[int, int, str]] = []
        for kind, rx in self.patterns:
            _finds(kind, rx, text, out)
        return out

    def spans_many(self, texts: list[str], entropy: list[bool]) -> list[list[tuple[int, int, str]]]:
        """`spans(texts[i])` of every string (with the entropy check where entropy[i]), the
        same as one call per string gives, found by running each pattern only on the
        strings that hold what it needs (see Gate)."""
        n = len(texts)
        finds: list[list[tuple[int, int, str]]] = [[] for _ in range(n)]
        if not n:
            return finds
        starts, ends, pos = [], [], 0
        for t in texts:
            starts.append(pos)
            ends.append(pos + len(t))
            pos += len(t) + 1
        joined = "\0".join(texts)
        lowered: Optional[str] = None
        low: dict[int, str] = {}  # strings in lower case, each made once
        not_ascii: Optional[set[int]] = None
        runs: dict[int, set[int]] = {}
        bstarts: list[int] = []
        bends: list[int] = []
        tokens = b""

        def with_run(r: int) -> Optional[set[int]]:
            """The strings with `r` token characters in a row, or more (None: all)."""
            nonlocal tokens
            r = max((x for x in RUN_LEVELS if x <= r), default=0)  # a few levels: each costs a pass
            if not r:
                return None  # a short run is in nearly every string: worth no pass
            if r not in runs:
                if not bstarts and joined.isascii():  # one encoding, the same offsets
                    bstarts.extend(starts)
                    bends.extend(ends)
                    tokens = joined.encode("ascii").translate(_KTABLE)
                elif not bstarts:
                    raw = [t.encode("utf-8", "surrogatepass") for t in texts]
                    p = 0
                    for b in raw:
                        bstarts.append(p)
                        bends.append(p + len(b))
                        p += len(b) + 1
                    tokens = _BSEP.join(raw).translate(_KTABLE)
                below = [x for x in runs if x < r]
                if below:  # only the strings with a shorter run can have this one
                    needle = b"a" * r
                    runs[r] = {i for i in runs[max(below)] if tokens.find(needle, bstarts[i], bends[i]) >= 0}
                else:
                    runs[r] = _holding(tokens, b"a" * r, bstarts, bends)
            return runs[r]

        for (kind, rx), g in zip(self.patterns, self.gates):
            among = with_run(g.run)
            if g.lits is not None and (among is None or among):
                hold: set[int] = set()
                if g.icase and not_ascii is None:
                    # a string not in ASCII may match an ASCII letter under a case rule in
                    # ways lower() does not show (the long s, the Kelvin sign): it always runs
                    not_ascii = set() if joined.isascii() else {i for i, t in enumerate(texts) if not t.isascii()}
                if among is not None:  # few strings, or fewer bytes than the whole: each alone
                    for i in among:
                        if g.icase:
                            if i in not_ascii:
                                hold.add(i)
                                continue
                            t = low.get(i)
                            if t is None:
                                t = low[i] = texts[i].lower()
                        else:
                            t = texts[i]
                        for x in g.lits:
                            if x in t:
                                hold.add(i)
                                break
                else:
                    if g.icase and lowered is None:
                        lowered = joined.lower() if not not_ascii else "\0".join("\0" * len(t) if i in not_ascii else t.lower() for i, t in enumerate(texts))
                    for x in g.lits:
                        hold |= _holding(lowered if g.icase else joined, x, starts, ends)
                    if g.icase:
                        hold |= not_ascii
                among = hold if among is None else among & hold
            for i in (range(n) if among is None else sorted(among)):
                _finds(kind, rx, texts[i], finds[i])
        if self.entropy:
            want = {i for i in range(n) if entropy[i]}
            have = with_run(self.token_gate.run)
            if have is not None:
                want &= have
            for i in sorted(want):
                finds[i] += [(a, b, "high-entropy-string") for a, b in _high_entropy(texts[i])]
        return [_merge(f) if f else f for f in finds]

    def spans(self, text: str, key: Optional[str] = None, found: Optional[list] = None) -> list[tuple[int, int, str]]:
        """(start, end, kind) of every likely secret in `text`; overlapping finds merged.
        `found`: the pattern finds, when the caller ran the patterns over more text at once."""
        out = list(found) if found is not None else self.pattern_spans(text)
        if self.entropy and not _id_key(key):
            out += [(a, b, "high-entropy-string") for a, b in _high_entropy(text)]
        return _merge(out)


def _finds(kind: str, rx: re.Pattern, text: str, out: list) -> None:
    for m in rx.finditer(text):
        # a pattern's group is the secret when it is long enough to be one (a value
        # after `key =`); a short one is a prefix (`(ghp|gho)_...`): then the whole
        # match is the secret, never only its prefix
        groups = [i for i in range(1, (rx.groups or 0) + 1) if m.group(i) and len(m.group(i)) >= MIN_GROUP]
        start, end = m.span(groups[-1]) if groups else m.span()
        if kind == PRIVATE_KEY:
            # detect-secrets' pattern finds the BEGIN line only: the find is the whole
            # block, to its END line (or the text's end), so that no preview shows a byte
            # of the key (a black-box audit found a PEM's short last lines, below the
            # entropy rule, printed beside the finds)
            last = _PEM_END.search(text, end)
            end = last.end() if last else len(text)
        if end > start:
            out.append((start, end, kind))


PRIVATE_KEY = "private-key"  # detect-secrets' "Private Key", as _slug names it
_PEM_END = re.compile(r"-----END[ A-Z0-9]*-----")


def _merge(out: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Finds in order, overlapping ones merged (the first's kind names the merged one; of
    finds that start together, a pattern's before the entropy rule's: `KEY=sk_live_...`
    is a Stripe key that is also a random token)."""
    out.sort(key=lambda f: (f[0], f[2] == "high-entropy-string", -f[1], f[2]))
    merged: list[tuple[int, int, str]] = []
    for s, e, k in out:
        if merged and s < merged[-1][1]:
            ps, pe, pk = merged[-1]
            merged[-1] = (ps, max(pe, e), pk)
        else:
            merged.append((s, e, k))
    return merged


def preview(text: str, spans: list[tuple[int, int, str]], at: tuple[int, int, str]) -> str:
    """The text around one find, every find in the window masked: never a secret's bytes."""
    start, end, kind = at
    lo, hi = max(0, start - PREVIEW_CONTEXT), min(len(text), end + PREVIEW_CONTEXT)
    out, pos = [], lo
    for s, e, k in spans:
        if e <= lo or s >= hi:
            continue
        out.append(text[pos:max(pos, s)])
        out.append(f"[{k}: {e - s} chars]")
        pos = max(pos, e)
    out.append(text[pos:hi] if pos < hi else "")
    body = "".join(out).replace("\n", "\\n").replace("\r", "\\r")
    return ("…" if lo else "") + body + ("…" if hi < len(text) else "")


# -- settings (this machine's, never synced) ----------------------------------------------------


def settings_path(tape: "Tape") -> Optional[str]:
    d = cache_folder(tape.store)
    return None if d is None else os.path.join(d, SETTINGS)


def load_settings(tape: "Tape") -> dict:
    path = settings_path(tape)
    if path is not None and not os.path.exists(path):
        _adopt_settings(tape, path)
    try:
        with open(path or "", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    pats = [p for p in data.get("patterns") or [] if isinstance(p, dict) and isinstance(p.get("regex"), str)]
    allowed = [a for a in data.get("allowed") or [] if isinstance(a, str)]
    return {"patterns": pats, "allowed": allowed}


def _adopt_settings(tape: "Tape", path: str) -> None:
    """A tape moved (or copied: `cp -a`, a restore) gets a new cache folder, and its scan
    settings stayed in the old one: `scan` found nothing of the user's patterns and `push`
    uploaded what they had stopped, silently (found by an audit). They are taken over
    (localstate.adopt), and stderr says from where."""
    from ..store.localstate import adopt

    came_from = adopt(tape.store, SETTINGS)
    if came_from is not None:
        sys.stderr.write(f"ctape: note: this tape's scan patterns and allowed findings were taken from its cache folder for {came_from} "
                         f"(the tape was moved or copied); they are kept in {path}\n")


def save_settings(tape: "Tape", data: dict) -> None:
    path = settings_path(tape)
    if path is None:
        raise StorageError("no writable index cache folder to keep privacy settings in; set CTAPE_CACHE_DIR")
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def check_regex(regex: str) -> re.Pattern:
    try:
        rx = re.compile(regex)
    except (re.error, OverflowError, RecursionError) as e:  # `a{99999999999}`: OverflowError
        raise InvalidInput(f"bad pattern {regex!r}: {e}") from None
    if rx.search(""):
        raise InvalidInput(f"bad pattern {regex!r}: it matches empty text")
    return rx


def check_kind(kind: str) -> str:
    """A finding's or a redaction's kind, as its marker shows it (`[redacted: KIND]`)."""
    if not isinstance(kind, str) or not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,39}", kind):
        raise InvalidInput(f"bad kind {brief(kind, 50)}: 1-40 of a-z, 0-9, _ and -, such as manual or api-key")
    return kind


def add_pattern(tape: "Tape", regex: str, kind: str = "pattern") -> dict:
    check_regex(regex)
    check_kind(kind)
    item = {"kind": kind, "regex": regex}
    with editing(cache_folder(tape.store), SETTINGS):
        data = load_settings(tape)
        if item not in data["patterns"]:
            data["patterns"].append(item)
            save_settings(tape, data)
    return item


def allow(tape: "Tape", finding_id: str) -> None:
    if not re.fullmatch(r"[0-9a-f]{16}", finding_id or ""):
        raise InvalidInput(f"bad finding id {finding_id!r}: 16 hex digits, as `ctape scan` prints them")
    with editing(cache_folder(tape.store), SETTINGS):
        data = load_settings(tape)
        if finding_id not in data["allowed"]:
            data["allowed"].append(finding_id)
            save_settings(tape, data)


# -- walking a session ----------------------------------------------------------------------------


def _strings(value, steps: list, key: Optional[str]) -> Iterator[tuple[list, Optional[str], str]]:
    if type(value) is str:
        yield steps, key, value
    elif type(value) is dict:
        for k, v in value.items():
            yield from _strings(v, steps + [k], k)
    elif type(value) is list:
        for i, v in enumerate(value):
            yield from _strings(v, steps + [i], key)


RAW_B64 = "ctape.raw.b64"  # an imported line that is neither JSON nor UTF-8, as base64 (formats/_common.py)


def _b64_text(value: str) -> str:
    """What an imported line kept as base64 says: its bytes, undecodable ones replaced."""
    try:
        return base64.b64decode(value, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return value


KEY_CONTEXT = "id"  # object keys are matched with the patterns only, as ids are (no entropy rule)


def _collect(value, where, key: Optional[str], out: list, clean_keys: frozenset | set = frozenset()) -> None:
    """(where, key, string) of every string in `value`, and of every object key, like
    _strings, but without a generator per level or a path per value: `where` is (parent's
    where, step), turned into a path (_steps) only for a string something was found in. The
    step of an object key itself is the 1-tuple (key,) (a KeyStep once in a path). Keys in
    `clean_keys` (matched before with nothing found: keys repeat from entry to entry) are
    left out."""
    if type(value) is dict:
        for k, v in value.items():
            if k not in clean_keys:
                out.append(((where, (k,)), KEY_CONTEXT, k))
            t = type(v)
            if t is str:
                out.append(((where, k), k, v))
            elif t is dict or t is list:
                _collect(v, (where, k), k, out, clean_keys)
    elif type(value) is list:
        for i, v in enumerate(value):
            t = type(v)
            if t is str:
                out.append(((where, i), key, v))
            elif t is dict or t is list:
                _collect(v, (where, i), key, out, clean_keys)
    elif type(value) is str:
        out.append((where, key, value))


def _steps(where) -> list:
    steps = []
    while where is not None:
        where, step = where
        steps.append(step)
    return steps[::-1]


def _path_steps(where, secret_keys: set) -> list:
    """_steps, with an object key itself, and any key found to be a secret, as a KeyStep."""
    out = []
    for step in _steps(where):
        if type(step) is tuple:
            step = redaction.KeyStep.of(step[0], itself=True)
        elif type(step) is str and step in secret_keys:
            step = redaction.KeyStep.of(step)
        out.append(step)
    return out


_ID_KEYS: dict[Optional[str], bool] = {}


def _id_key_cached(key: Optional[str]) -> bool:
    got = _ID_KEYS.get(key)
    if got is None:
        if len(_ID_KEYS) > 50_000:
            _ID_KEYS.clear()
        got = _ID_KEYS[key] = _id_key(key)
    return got


class Scanner:
    """Finds secrets in entries, many at a time: the patterns run over a batch's strings
    together (Detectors.spans_many), which is what makes a first scan of a big tape fast."""

    BATCH_ENTRIES = 512  # entries matched together (their blobs are read while their blocks are cached)
    BATCH_CHARS = 16_000_000

    def __init__(self, tape: "Tape", detectors: Detectors, red: Optional[dict] = None):
        self.tape = tape
        self.detectors = detectors
        self.red = tape.redactions() if red is None else red
        self._blob_spans: dict[tuple[str, bool], tuple[str, list]] = {}
        self.bytes = 0
        self.records: dict[str, bytes] = {}  # object records of large values a caller read already
        self._clean_keys: set[str] = set()  # object keys matched with nothing found (_collect)

    def read(self, h: str, record: Optional[bytes] = None) -> Optional[dict]:
        """An entry as stored (None: the tape lacks it, not synced yet); from `record`, its
        object record as a file holds it, when the caller has read that already."""
        store = self.tape.store
        if record is not None:
            return decode_entry(h, store.decode_object(h, record)[1])
        try:
            _, body = store.get_object(h)
        except (EntryNotFound, CorruptObject):
            if not store.has_object(h):
                return None
            raise
        return decode_entry(h, body)

    def entries(self, batch: list[tuple[str, str, dict]]) -> list[tuple[list[Finding], dict[str, Optional[str]]]]:
        """The findings of each (session, hash, entry) and the large value each finding's
        path was found in (None: inline), for the scan cache. Each string is looked at
        alone: a find belongs to the string it is in. A large value is matched once per
        run (per entropy rule: an id's value gets none)."""
        out: list[tuple[list[Finding], dict[str, Optional[str]]]] = []
        det, red = self.detectors, self.red
        texts: list[str] = []
        entropy: list[bool] = []
        seen_e: dict[str, int] = {}  # a string met again in a round is matched once (with the entropy check, without)
        seen_n: dict[str, int] = {}
        new_blobs: dict[tuple[str, bool], int] = {}
        keys: list[int] = []  # the texts that are object keys
        plans: list = []
        chars = 0
        for session, h, raw in batch:
            if h in red:
                raw = redaction.apply(raw, red[h])
            inline, blobs, strings = [], [], []
            for root in redaction.ROOTS:
                _collect(raw[root], (None, root), None, strings, self._clean_keys)
            for steps, key, s in strings:
                flag = det.entropy and not _id_key_cached(key)
                if len(s) == 66 and s[0] == "\0" and s[1] == "b" and type(steps[1]) is not tuple:  # a blob (a key is never one)
                    b = s[2:]
                    if b in red:
                        continue
                    got = self._blob_spans.get((b, flag))
                    if got is not None:
                        blobs.append((steps, got, b))
                        continue
                    i = new_blobs.get((b, flag))
                    if i is None:
                        rec = self.records.get(b)
                        store = self.tape.store
                        # a value lost to damage and salvaged reads as the marker, as everywhere
                        raw_b = store.decode_object(b, rec)[1] if rec is not None else store.read_value(b, h)
                        text = raw_b.decode("utf-8", "replace")
                        self.bytes += len(text)
                        chars += len(text)
                        i = new_blobs[(b, flag)] = len(texts)
                        texts.append(text)
                        entropy.append(flag)
                    blobs.append((steps, i, b))
                else:
                    t = s[1:] if s and s[0] == "\0" else s
                    if key == RAW_B64:
                        t = _b64_text(t)
                    known = seen_e if flag else seen_n
                    i = known.get(t)
                    if i is None:
                        i = known[t] = len(texts)
                        texts.append(t)
                        entropy.append(flag)
                        if type(steps[1]) is tuple and t is s:
                            keys.append(i)
                    inline.append((steps, i))
            if inline:
                n = sum(len(texts[i]) for _, i in inline) + len(SEP) * (len(inline) - 1)
                self.bytes += n
                chars += n
            plans.append((session, h, inline, blobs))
            if chars >= self.BATCH_CHARS or len(plans) >= self.BATCH_ENTRIES:
                # the text held at once stays bounded: the rest goes in another round
                out += self._match(plans, texts, entropy, new_blobs, keys)
                texts, entropy, seen_e, seen_n, new_blobs, plans, chars, keys = [], [], {}, {}, {}, [], 0, []
        return out + self._match(plans, texts, entropy, new_blobs, keys) if plans else out

    def _match(self, plans, texts, entropy, new_blobs, keys=()) -> list[tuple[list[Finding], dict[str, Optional[str]]]]:
        spans = self.detectors.spans_many(texts, entropy)
        clean = self._clean_keys
        if len(clean) > 100_000:
            clean.clear()
        clean.update(texts[i] for i in keys if not spans[i])
        for (b, flag), i in new_blobs.items():
            self._blob_spans[(b, flag)] = (texts[i], spans[i]) if spans[i] else ("", [])  # keep no text that holds nothing
        out = []
        for session, h, inline, blobs in plans:
            work = [(steps, texts[i], spans[i], None) for steps, i in inline if spans[i]]
            for steps, got, b in blobs:
                text, sp = (texts[got], spans[got]) if isinstance(got, int) else got
                if sp:
                    work.append((steps, text, sp, b))
            if not work:
                out.append(([], {}))
                continue
            found: list[Finding] = []
            blob_of: dict[str, Optional[str]] = {}
            # a key found to be a secret is named by its key_id in every path of the entry
            # (its own, and those of the values under it), never spelled out
            secret_keys = {steps[1][0] for steps, _, _, _ in work if type(steps[1]) is tuple}
            for steps, text, sp, blob in work:
                if not sp:
                    continue
                path = redaction.format_path(_path_steps(steps, secret_keys))
                blob_of[path] = blob
                kinds: dict[str, list] = {}
                for span in sp:
                    kinds.setdefault(span[2], []).append(span)
                for kind, finds in kinds.items():  # a finding per find (redaction takes the whole value once)
                    for i, span in enumerate(finds):
                        found.append(Finding(session, h, path, kind, preview(text, sp, span), at=str(span[0]) if i else ""))
            out.append((found, blob_of))
        return out

    def entry(self, session: str, h: str, raw: Optional[dict] = None) -> list[Finding]:
        """The findings of one entry (read when not given)."""
        raw = raw if raw is not None else self.read(h)
        return [] if raw is None else self.entries([(session, h, raw)])[0][0]


def _cached(session: str, h: str, row: list) -> Finding:
    """A finding from a scan cache row: (path, kind, preview, blob, at)."""
    return Finding(session, h, row[0], row[1], row[2], at=row[4] if len(row) > 4 else "")


class _Walk:
    """Findings of entries in the order they are asked for: from the scan cache when it
    holds an entry (neither read nor matched), else read, matched in batches, and kept in
    the cache."""

    def __init__(self, sc: Scanner, cache: Optional["ScanCache"]):
        self.sc, self.cache = sc, cache
        self.slots: list[Optional[list[Finding]]] = []
        self.pending: list[tuple[int, str, str, dict]] = []
        self.cached = 0

    def add(self, session: str, h: str) -> tuple[bool, Optional[str]]:
        """(whether the tape has the entry, its parent)."""
        red = self.sc.red
        got = self.cache.get(h) if self.cache is not None and h not in red else None
        if got is not None:
            parent, row = got
            self.cached += 1
            self.slots.append([_cached(session, h, r) for r in row if r[3] not in red])
            return True, parent
        raw = self.sc.read(h)
        if raw is None:
            return False, None
        self.pending.append((len(self.slots), session, h, raw))
        self.slots.append(None)
        if len(self.pending) >= Scanner.BATCH_ENTRIES:
            self.flush()
        return True, raw["parent"]

    def flush(self) -> None:
        if not self.pending:
            return
        results = self.sc.entries([(s, h, raw) for _, s, h, raw in self.pending])
        for (slot, _, h, raw), (found, blob_of) in zip(self.pending, results):
            self.slots[slot] = found
            if self.cache is not None and h not in self.sc.red:
                self.cache.put(h, raw["parent"], [(f.path, f.kind, f.preview, blob_of.get(f.path), f.at) for f in found])
        self.pending = []

    def findings(self) -> Iterator[Finding]:
        self.flush()
        for found in self.slots:
            yield from found or ()


def scan(tape: "Tape", sessions: Optional[Iterable[str]] = None, *, include_allowed: bool = False,
         detectors: Optional[Detectors] = None, on_missing: Optional[Callable[[str], None]] = None) -> dict:
    """{"findings": [Finding], "allowed": n, "bytes": n, "detect_secrets": bool, "cached": n}.
    Entries scanned before with the same detectors come from the scan cache (ScanCache):
    neither read nor matched again."""
    settings = load_settings(tape)
    own = detectors is None  # the cache is the tape's detectors' (a one-off pattern's scan keeps none)
    detectors = detectors or Detectors(settings["patterns"])
    if not detectors.have_detect_secrets and on_missing:
        on_missing("detect-secrets is not installed: only ctape's own patterns, high-entropy strings and yours were used; pip install 'ctape[scan]'")
    allowed = set(settings["allowed"])
    tape.store.refresh()
    names = list(sessions) if sessions is not None else tape.session_names()
    sc = Scanner(tape, detectors)
    cache = ScanCache.open(tape, detectors) if own else None
    walk = _Walk(sc, cache)
    findings, skipped = [], 0
    try:
        for name in names:
            # every entry the session's branches, tags and HEAD reach, each once; a cached
            # entry gives its parent without being read
            st = tape.session(name).refs()
            stack = [t for t in list(st.branches.values()) + list(st.tags.values()) + [st.head_hash] if t]
            seen: set[str] = set()
            while stack:
                h = stack.pop()
                if h in seen:
                    continue
                seen.add(h)
                _, parent = walk.add(name, h)
                if parent:
                    stack.append(parent)
        for f in walk.findings():
            if f.id in allowed and not include_allowed:
                skipped += 1
            else:
                findings.append(f)
        # the text of interrupted streams: in the session's files, and uploaded by push,
        # but in no entry until `ctape recover` records it as one (which redact can reach)
        pieces: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for name in names:
            pieces.update(open_stream_pieces(tape, name))
        streams = []
        for f in scan_streams(pieces, detectors):
            if f.id in allowed and not include_allowed:
                skipped += 1
            else:
                streams.append(f)
    finally:
        if cache is not None:
            cache.close()
    return {"findings": findings, "streams": streams, "allowed": skipped, "bytes": sc.bytes,
            "detect_secrets": detectors.have_detect_secrets, "cached": walk.cached}


def scan_entries(tape: "Tape", items: Iterable[tuple], records: Optional[dict[str, bytes]] = None) -> list[Finding]:
    """The unresolved findings (neither redacted nor allowed) of these (session, entry hash)
    pairs, with the tape's detectors and the scan cache: what `push` checks, the entries of
    the files it is about to upload. An item may carry a third value, the entry's object
    record as read from its file (then it is not looked up and read again); items are
    taken some hundreds at a time, one cache query for each lot. `records`: object
    records of large values read on the way, by hash (the caller adds, each lot empties)."""
    settings = load_settings(tape)
    detectors = Detectors(settings["patterns"])
    allowed = set(settings["allowed"])
    sc = Scanner(tape, detectors)
    sc.records = records if records is not None else {}
    cache = ScanCache.open(tape, detectors)
    red = sc.red
    out: list[Finding] = []

    prefilter = detectors.can_prefilter()

    def clean(lot: list[tuple]) -> set[str]:
        """The entries of the lot (given with their records) whose bytes, and their large
        values' bytes, hold nothing any detector could find (Detectors.clean_many): they
        need no decoding. Anything else (a redacted entry, a compressed record, a large
        value not read on the way) is not judged here."""
        bodies: list[bytes] = []
        parts: list[tuple[str, int, int]] = []
        for it in lot:
            rec = it[2] if len(it) > 2 else None
            if rec is None or it[1] in red or len(rec) < 34 or rec[32] != TYPE_ENTRY or rec[33] != CODEC_RAW:
                continue
            first = len(bodies)
            body, refs = _mask_json(rec[34:])
            bodies.append(body)
            for b in refs:
                blob = sc.records.get(b)
                if blob is None or b in red or len(blob) < 34 or blob[33] != CODEC_RAW:
                    del bodies[first:]
                    break
                bodies.append(blob[34:])
            else:
                parts.append((it[1], first, len(bodies)))
        if not bodies:
            return set()
        ok = detectors.clean_many(bodies)
        return {h for h, a, b in parts if all(ok[a:b])}

    def run(lot: list[tuple]) -> None:
        rows = cache.get_many([it[1] for it in lot]) if cache is not None else {}
        slots: list = []
        todo: list[tuple[str, str, dict]] = []
        nothing = clean([it for it in lot if it[1] not in rows]) if prefilter else set()
        for it in lot:
            name, h = it[0], it[1]
            row = rows.get(h) if h not in red else None
            if row is not None:
                slots.append([_cached(name, h, r) for r in row[1] if r[3] not in red])
                continue
            if h in nothing:
                continue
            raw = sc.read(h, it[2] if len(it) > 2 else None)
            if raw is None:
                continue
            slots.append(len(todo))
            todo.append((name, h, raw))
        results = sc.entries(todo)
        sc.records.clear()
        for (name, h, raw), (found, blob_of) in zip(todo, results):
            if cache is not None and h not in red:
                cache.put(h, raw["parent"], [(f.path, f.kind, f.preview, blob_of.get(f.path), f.at) for f in found])
        for slot in slots:
            for f in results[slot][0] if isinstance(slot, int) else slot:
                if f.id not in allowed:
                    out.append(f)

    try:
        lot: list[tuple] = []
        for it in items:
            lot.append(it)
            if len(lot) >= Scanner.BATCH_ENTRIES:
                run(lot)
                lot = []
        if lot:
            run(lot)
        return out
    finally:
        if cache is not None:
            cache.close()


def forget_redacted(tape: "Tape") -> None:
    """The scan cache keeps no text of a redacted entry: its rows go (a preview shows the
    text around a find, which may hold a value redacted by pattern or path), and the file
    is rewritten so that no freed page keeps them (called by `compact`)."""
    import sqlite3

    d = cache_folder(tape.store)
    path = os.path.join(d, "scan.sqlite") if d else None
    if not path or not os.path.exists(path):
        return
    red = list(tape.redactions())
    try:
        from ..store.index import connect_cache

        db = connect_cache(path)
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("DELETE FROM scanned WHERE hash=?", [(h,) for h in red])
            # a scan under way read the tape before these redactions: its rows are void
            db.execute("INSERT OR REPLACE INTO meta VALUES('scrubbed', ?)", (os.urandom(8).hex(),))
            db.execute("COMMIT")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            db.close()
    except sqlite3.Error:
        for suffix in ("", "-wal", "-shm"):  # a cache that cannot be cleaned goes whole
            try:
                os.unlink(path + suffix)
            except FileNotFoundError:
                pass


class ScanCache:
    """What scan found in each entry, by entry hash, in this machine's cache folder
    (`scan.sqlite`, never synced). An entry never changes, so its findings change only
    with the detectors: the cache is emptied when their fingerprint (patterns, entropy
    limit, detect-secrets' version) differs. Redactions and allowed ids apply when read.
    A lost cache costs one full scan.

    Several processes scan at once (a push's check beside a `ctape scan`). A scan's rows
    are written only while the cache is as the scan found it when it opened it: the same
    detectors (another process with other settings emptied it and relabelled it since) and
    no scrub since (`forget_redacted`, run by `compact`: the scan read the tape before
    those redactions, and its previews may hold their text). Otherwise this scan's rows
    are dropped, and it goes on without the cache."""

    def __init__(self, db, fingerprint: str):
        self.db = db
        self.pending: list[tuple] = []
        db.execute("BEGIN IMMEDIATE")
        try:
            if self._meta("detectors") != fingerprint:
                db.execute("DELETE FROM scanned")
                db.execute("INSERT OR REPLACE INTO meta VALUES('detectors', ?)", (fingerprint,))
            self.state = (fingerprint, self._meta("scrubbed"))
            # empty at the start (a first scan): nothing to look up; what this run adds it
            # does not ask for again (each entry is looked at once a run)
            self.empty = db.execute("SELECT 1 FROM scanned LIMIT 1").fetchone() is None
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.writing = True

    def _meta(self, key: str) -> Optional[str]:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    @classmethod
    def open(cls, tape: "Tape", detectors: Detectors) -> Optional["ScanCache"]:
        import sqlite3

        from ..store.index import connect_cache

        d = cache_folder(tape.store)
        if d is None:
            return None
        try:
            db = connect_cache(os.path.join(d, "scan.sqlite"))
            db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)")
            db.execute("CREATE TABLE IF NOT EXISTS scanned(hash TEXT PRIMARY KEY, parent TEXT, findings TEXT NOT NULL) WITHOUT ROWID")
            return cls(db, detectors.fingerprint())
        except (sqlite3.Error, OSError):
            return None  # a cache that cannot be used is no cache: scan reads everything

    def get(self, h: str) -> Optional[tuple[Optional[str], list]]:
        if self.empty:
            return None
        row = self.db.execute("SELECT parent, findings FROM scanned WHERE hash=?", (h,)).fetchone()
        return (row[0], json.loads(row[1])) if row else None

    def get_many(self, hashes: list[str]) -> dict[str, tuple[Optional[str], list]]:
        out: dict[str, tuple[Optional[str], list]] = {}
        if self.empty:
            return out
        for i in range(0, len(hashes), 500):
            part = hashes[i:i + 500]
            q = f"SELECT hash, parent, findings FROM scanned WHERE hash IN ({','.join('?' * len(part))})"
            for h, parent, found in self.db.execute(q, part):
                out[h] = (parent, json.loads(found))
        return out

    def put(self, h: str, parent: Optional[str], found: list[tuple]) -> None:
        if not self.writing:
            return
        self.pending.append((h, parent, json.dumps(found)))
        if len(self.pending) >= 4096:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.db.execute("BEGIN IMMEDIATE")  # one transaction, not one per row
            try:
                if (self._meta("detectors"), self._meta("scrubbed")) == self.state:
                    self.db.executemany("INSERT OR REPLACE INTO scanned VALUES(?, ?, ?)", self.pending)
                else:
                    self.writing = False
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.pending = []

    def close(self) -> None:
        import sqlite3

        try:
            self.flush()
        except sqlite3.Error:
            pass
        self.db.close()


def unresolved(tape: "Tape", sessions: Iterable[str]) -> list[Finding]:
    """The findings of these sessions that are neither redacted nor allowed (for `push`)."""
    return scan(tape, sessions)["findings"]
