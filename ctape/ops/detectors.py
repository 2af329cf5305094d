"""The detectors of `ctape scan` (SPEC section 18, docs/privacy.md): what a likely secret
looks like, and where in a text it is.

detect-secrets' regex plugins (imported only when a Detectors is made), ctape's own short
list, the user's patterns, and the high-entropy token check; the gates that tell, without
running a pattern, which strings it cannot match in (Gate); the finds merged and the
masked preview of one. Nothing here reads a tape: scan.py walks the tape and keeps the
scan cache, scan_settings.py keeps the user's patterns and allowed ids.
"""

from __future__ import annotations

import bisect
import math
import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

from blake3 import blake3


ENTROPY_LIMIT = 4.5  # bits per character, detect-secrets' default for base64 strings
# a run of 24-4,096 base64 characters that is not part of a longer token: nothing of the
# alphabet, "." or "=" right before it, except the "=" of NAME=VALUE (an env dump, a .env
# file); nothing of it right after, nor a "." that goes on (a dotted name), but the "." that
# ends a sentence. Up to 100 before: an AWS session token (400-1,000 characters) was no
# finding, and pushed (found by an audit); detect-secrets' entropy plugin sets no length
# limit. Base64 data is skipped by its key (NO_ENTROPY_KEYS) and after "base64,"
# an SSH public key's base64 (an authorized_keys line, `ssh-keygen -y`): public, no secret
_PUBLIC_KEYS = "".join(f"(?<!{t} )" for t in ("ssh-rsa", "ssh-dss", "ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521"))
_TOKEN = re.compile(r"(?<![A-Za-z0-9+/_.-])(?<![^A-Za-z0-9_]=)(?<!^=)(?<!base64,)" + _PUBLIC_KEYS + r"[A-Za-z0-9+/_-]{24,4096}={0,2}(?![A-Za-z0-9+/=_-])(?!\.[A-Za-z0-9+/_-])")
_HEX = re.compile(r"[0-9a-fA-F]+")
OWN = (("anthropic-key", r"sk-ant-[A-Za-z0-9_-]{32,}"),)
# detect-secrets plugins left out: provider key=value forms that cost about a second per
# 6 MB each in Python's re (lookbehinds before every character); the entropy check and
# user patterns cover such values
SLOW_PLUGINS = frozenset({"IBM Cloud IAM Key", "IBM COS HMAC Credentials", "Cloudant Credentials",
                          "SoftLayer Credentials", "Artifactory Credentials", "Public IP (ipv4)"})
NO_ENTROPY_KEYS = frozenset({"signature", "encrypted_content", "data", "image_url", "url"})  # base64 payloads, not secrets
PREVIEW_CONTEXT = 24


def _id_key(key: Optional[str]) -> bool:
    """Values whose randomness is by design (ids, signatures, base64 data): no entropy check."""
    if key is None:
        return False
    k = key.lower()
    return (k in NO_ENTROPY_KEYS or k.endswith("id") or k.endswith("_ids") or k.endswith("uuid") or k.endswith("hash")
            or k.endswith("signature"))  # (Gemini's thoughtSignature: a finding once tokens could be long; review)


MIN_GROUP = 8  # a capturing group shorter than this is a prefix or a quote, not the secret


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "secret"


def detect_secrets_patterns() -> Optional[list[tuple[str, re.Pattern]]]:
    """(kind, regex) of every regex plugin of detect-secrets, or None when not installed."""
    import warnings

    shown = warnings.showwarning
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.base import RegexBasedDetector
    except ImportError:
        return None
    finally:
        # its import sends warnings to logging (logging.captureWarnings): ctape's own (a
        # branch named like an entry's prefix, at `checkout -b` since checkout masks what it
        # records) were then never printed (found by CI, 2026-12-07)
        warnings.showwarning = shown
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


# Tokens random by design that an entropy check takes for secrets (a privacy audit found 53
# findings in the shipped transcripts, all of them these, and a lockfile one per package):
# - the value of an id-like key in JSON text inside a string (a tool's output that is an API
#   response: `"id":"msg_01..."`, `"tool_use_id"`, `"signature"`): _id_key as for JSON values;
_ID_BEFORE = re.compile(r'\\?"([A-Za-z0-9_]{1,40})\\?"\s*:\s*\\?"$')
# - a digest named by its algorithm, of that digest's base64 length: SRI (`sha512-...`,
#   npm's `integrity`), go.sum's `h1:`, `sha256:` (a token of another length after such a
#   label is judged as any other: `login h1:<secret>`);
_DIGEST_LEN = {"sha1": 28, "sha224": 40, "sha256": 44, "sha384": 64, "sha512": 88, "md5": 24, "h1": 44}
_DIGEST = re.compile(r"(sha(?:1|224|256|384|512)|md5)-", re.I)
_DIGEST_BEFORE = re.compile(r"\b(sha(?:1|224|256|384|512)|md5|h1):$", re.I)
# - public PEM and PGP blocks (certificates, public keys, signatures), their body armour
#   headers (`Version: ...`) then base64 only: a block that does not end so is none (a
#   cut certificate before a `.env` dump kept the dump's secrets out; and a body of any
#   text made the search quadratic; both found in review);
_PUBLIC_BLOCK = re.compile(r"-----BEGIN (CERTIFICATE|PUBLIC KEY|X509 CRL|CERTIFICATE REQUEST|NEW CERTIFICATE REQUEST|"
                           r"PGP SIGNATURE|PGP PUBLIC KEY BLOCK|SSH2 PUBLIC KEY)-----[ \t]*\r?\n"
                           r"(?:[A-Za-z][A-Za-z-]*: [^\n]*\r?\n)*[A-Za-z0-9+/=\s]*-----END \1-----")
# - a path under a folder every system has (`/var/folders/4n/2f7p.../T/tmpk_ntrtq3`,
#   macOS's temporary folders; `/Users/...`, `/home/...`) is judged a part at a time; any
#   other token that starts with "/" whole (a base64 secret may start with one).
_PATH_ROOTS = frozenset({"Users", "home", "var", "tmp", "private", "opt", "usr", "etc", "mnt", "srv", "root", "Library",
                         "Volumes", "Applications", "System", "nix", "proc", "dev", "run", "snap", "media", "workspace",
                         "workspaces", "cygdrive"})


def _public_blocks(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _PUBLIC_BLOCK.finditer(text)] if "-----BEGIN " in text else []


def _random_by_design(text: str, start: int, tok: str, blocks: list[tuple[int, int]]) -> bool:
    before = text[max(0, start - 48):start]
    if before.endswith('"'):
        m = _ID_BEFORE.search(before)
        if m and _id_key(m.group(1)):
            return True
    m = _DIGEST.match(tok)
    if m and len(tok) - len(m.group(0)) == _DIGEST_LEN[m.group(1).lower()]:
        return True
    m = _DIGEST_BEFORE.search(before) if before.endswith(":") else None
    if m and len(tok) == _DIGEST_LEN[m.group(1).lower()]:
        return True
    return any(a <= start < b for a, b in blocks)


def _secret_like(tok: str) -> bool:
    # a token is ASCII (see _TOKEN): these sets are str.isdigit/islower/isupper on it
    if _DIGITS.isdisjoint(tok) or _LOWER.isdisjoint(tok) or _UPPER.isdisjoint(tok) or _HEX.fullmatch(tok):
        return False  # hashes and ids are hex; words and paths lack the mix
    return _entropy(tok) >= ENTROPY_LIMIT


def _high_entropy(text: str) -> Iterator[tuple[int, int]]:
    blocks: Optional[list] = None
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if tok[0] == "/" and tok.count("/") >= 3 and tok[1:].split("/", 1)[0] in _PATH_ROOTS:  # a path: each part alone
            at = m.start()
            for part in tok.split("/"):
                if len(part) >= 24 and _secret_like(part):
                    yield at, at + len(part)
                at += len(part) + 1
            continue
        if not _secret_like(tok):
            continue
        if blocks is None:
            blocks = _public_blocks(text)
        if not _random_by_design(text, m.start(), tok, blocks):
            yield m.span()


# -- gates: what text a pattern cannot match in, found without running it -----------------------
#
# Python's re runs a pattern that starts with a character class (a token of 24-4,096
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
        # per find, where it is (Finding.at), not one per value and kind; "decoded-text": values
        # kept escaped, as base64 or as msgpack are matched as the text they stand for
        parts = [ds, str(self.entropy), str(ENTROPY_LIMIT), str(MIN_GROUP), str(PREVIEW_CONTEXT), _TOKEN.pattern, "strings-alone", "keys", "places", "raw-b64", "decoded-text", "whole-tokens", "random-by-design"]
        parts += [f"{k}\0{rx.pattern}\0{rx.flags}" for k, rx in self.patterns]
        return blake3("\n".join(parts).encode("utf-8", "surrogatepass")).hexdigest()  # (a pattern kept by a version that took any)

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
        elif end > start:
            start, end = _whole_token(text, start, end)
        if end > start:
            out.append((start, end, kind))


_TAIL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/")


def _whole_token(text: str, start: int, end: int) -> tuple[int, int]:
    """A find widened to the end of the token it cuts: a pattern that takes a fixed number
    of characters (Stripe's 24 after `sk_live_`), or ends lazily (detect-secrets' JSON web
    token stops before the signature), matched a part of a longer secret, and the preview
    printed the rest beside the mask (found by an audit). The token goes on through base64
    and the dots between its parts (`header.payload.signature`) to its padding. Not to the
    left: a match starts where its pattern's prefix does (`ghp_`, `key=`), and what comes
    before it (`deploy-` of a tag, `KEY=`) stays readable."""
    n = len(text)
    if text[end - 1] in _TAIL_CHARS or text[end - 1] in ".=":  # (the JWT pattern may end at a dot)
        while end < n:
            c = text[end]
            if c in _TAIL_CHARS or (c == "." and end + 1 < n and text[end + 1] in _TAIL_CHARS):
                end += 1
            else:
                break
        while end < n and text[end] == "=":
            end += 1
    return start, end


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
