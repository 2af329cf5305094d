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
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional

from blake3 import blake3

from ..model import redaction
from ..model.errors import InvalidInput, StorageError
from ..model.schema import decode_entry
from ..store.localstate import cache_folder

if TYPE_CHECKING:
    from ..history.tape import Tape

SETTINGS = "privacy.json"  # beside index.sqlite: this machine's patterns and allowed ids for the tape
ENTROPY_LIMIT = 4.5  # bits per character, detect-secrets' default for base64 strings
_TOKEN = re.compile(r"(?<![A-Za-z0-9+/=_.-])[A-Za-z0-9+/_-]{24,100}={0,2}(?![A-Za-z0-9+/=_.-])")
_HEX = re.compile(r"[0-9a-fA-F]+")
OWN = (("anthropic-key", r"sk-ant-[A-Za-z0-9_-]{32,}"),)
# detect-secrets plugins left out: provider key=value forms that cost about a second per
# 6 MB each in Python's re (lookbehinds before every character); the entropy check and
# user patterns cover such values
SLOW_PLUGINS = frozenset({"IBM Cloud IAM Key", "IBM COS HMAC Credentials", "Cloudant Credentials",
                          "SoftLayer Credentials", "Artifactory Credentials", "Public IP (ipv4)"})
NO_ENTROPY_KEYS = frozenset({"signature", "encrypted_content", "data", "image_url", "url"})  # base64 payloads, not secrets
PREVIEW_CONTEXT = 24
SEP = "\n\n"  # between an entry's strings when the patterns run over them at once


def _id_key(key: Optional[str]) -> bool:
    """Values whose randomness is by design (ids, signatures, base64 data): no entropy check."""
    if key is None:
        return False
    k = key.lower()
    return k in NO_ENTROPY_KEYS or k.endswith("id") or k.endswith("_ids") or k.endswith("uuid") or k.endswith("hash")


@dataclass(frozen=True)
class Finding:
    session: str
    hash: str
    path: str
    kind: str
    preview: str

    @property
    def id(self) -> str:
        """Stable across runs and copies; names no byte of the secret."""
        return blake3(f"{self.hash}|{self.path}|{self.kind}".encode()).hexdigest()[:16]

    def to_json(self) -> dict:
        return {"id": self.id, "session": self.session, "hash": self.hash, "path": self.path, "kind": self.kind, "preview": self.preview}


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


def _high_entropy(text: str) -> Iterator[tuple[int, int]]:
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if _HEX.fullmatch(tok) or not (any(c.isdigit() for c in tok) and any(c.islower() for c in tok) and any(c.isupper() for c in tok)):
            continue  # hashes and ids are hex; words and paths lack the mix
        if _entropy(tok) >= ENTROPY_LIMIT:
            yield m.span()


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

    def fingerprint(self) -> str:
        """What the findings depend on: the patterns, the entropy check, the masking rules."""
        try:
            from importlib.metadata import version

            ds = version("detect-secrets") if self.have_detect_secrets else ""
        except Exception:  # noqa: BLE001 - no version known: the patterns still say enough
            ds = ""
        parts = [ds, str(self.entropy), str(ENTROPY_LIMIT), str(MIN_GROUP), str(PREVIEW_CONTEXT), _TOKEN.pattern]
        parts += [f"{k}\0{rx.pattern}\0{rx.flags}" for k, rx in self.patterns]
        return blake3("\n".join(parts).encode()).hexdigest()

    def pattern_spans(self, text: str) -> list[tuple[int, int, str]]:
        out = []
        for kind, rx in self.patterns:
            for m in rx.finditer(text):
                # a pattern's group is the secret when it is long enough to be one (a value
                # after `key =`); a short one is a prefix (`(ghp|gho)_...`): then the whole
                # match is the secret, never only its prefix
                groups = [i for i in range(1, (rx.groups or 0) + 1) if m.group(i) and len(m.group(i)) >= MIN_GROUP]
                start, end = m.span(groups[-1]) if groups else m.span()
                if end > start:
                    out.append((start, end, kind))
        return out

    def spans(self, text: str, key: Optional[str] = None, found: Optional[list] = None) -> list[tuple[int, int, str]]:
        """(start, end, kind) of every likely secret in `text`; overlapping finds merged.
        `found`: the pattern finds, when the caller ran the patterns over more text at once."""
        out = list(found) if found is not None else self.pattern_spans(text)
        if self.entropy and not _id_key(key):
            out += [(a, b, "high-entropy-string") for a, b in _high_entropy(text)]
        out.sort()
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
    except re.error as e:
        raise InvalidInput(f"bad pattern {regex!r}: {e}") from None
    if rx.search(""):
        raise InvalidInput(f"bad pattern {regex!r}: it matches empty text")
    return rx


def add_pattern(tape: "Tape", regex: str, kind: str = "pattern") -> dict:
    check_regex(regex)
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,39}", kind):
        raise InvalidInput(f"bad kind {kind!r}: 1-40 of a-z, 0-9, _ and -")
    data = load_settings(tape)
    item = {"kind": kind, "regex": regex}
    if item not in data["patterns"]:
        data["patterns"].append(item)
        save_settings(tape, data)
    return item


def allow(tape: "Tape", finding_id: str) -> None:
    if not re.fullmatch(r"[0-9a-f]{16}", finding_id or ""):
        raise InvalidInput(f"bad finding id {finding_id!r}: 16 hex digits, as `ctape scan` prints them")
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


class Scanner:
    def __init__(self, tape: "Tape", detectors: Detectors, pattern_only: bool = False):
        self.tape = tape
        self.detectors = detectors
        self._blob_spans: dict[str, tuple[str, list]] = {}
        self.bytes = 0

    def entry(self, session: str, h: str, raw: Optional[dict] = None) -> Iterator[Finding]:
        """The findings of one entry. `self.blob_of` then maps each finding's path to the
        large value it was found in (None: inline), for the scan cache."""
        if raw is None:
            _, body = self.tape.store.get_object(h)
            raw = decode_entry(h, body)
        red = self.tape.redactions()
        self.blob_of: dict[str, Optional[str]] = {}
        if h in red:
            raw = redaction.apply(raw, red[h])
        inline, blobs = [], []
        for root in redaction.ROOTS:
            for item in _strings(raw[root], [root], None):
                (blobs if item[2][:2] == "\0b" and len(item[2]) == 66 else inline).append(item)
        # the patterns run once over the entry's short strings joined (one call per pattern,
        # not one per string and pattern); each find goes to the string it starts in
        texts = [s[1:] if s[:1] == "\0" else s for _, _, s in inline]
        joined = SEP.join(texts)
        self.bytes += len(joined)
        starts, pos = [], 0
        for t in texts:
            starts.append(pos)
            pos += len(t) + len(SEP)
        found: list[list] = [[] for _ in texts]
        for a, b, kind in self.detectors.pattern_spans(joined):
            i = bisect.bisect_right(starts, a) - 1
            lo = starts[i]
            if a - lo < len(texts[i]):
                found[i].append((a - lo, min(b - lo, len(texts[i])), kind))
        work = [(steps, texts[i], self.detectors.spans(texts[i], key, found[i]), None) for i, (steps, key, _) in enumerate(inline)]
        for steps, key, s in blobs:
            text, spans = self._blob(s[2:], key, red)
            if text is not None:
                work.append((steps, text, spans, s[2:]))
        for steps, text, spans, blob in work:
            if not spans:
                continue
            path = redaction.format_path(steps)
            self.blob_of[path] = blob
            kinds = set()
            for span in spans:
                if span[2] not in kinds:  # one finding per value and kind: redaction takes the whole value
                    kinds.add(span[2])
                    yield Finding(session, h, path, span[2], preview(text, spans, span))

    def findings(self, session: str, h: str, cache: Optional["ScanCache"], red: dict) -> tuple[Optional[list[Finding]], Optional[str], bool]:
        """(the entry's findings, its parent, whether they came from the cache): from the
        scan cache when it holds the entry (not read, not matched), else read once and
        scanned, and kept in the cache; (None, None, False) when the tape lacks the entry
        (not synced yet)."""
        got = cache.get(h) if cache is not None and h not in red else None
        if got is not None:
            parent, row = got
            return [Finding(session, h, path, kind, prev) for path, kind, prev, blob in row if blob not in red], parent, True
        if not self.tape.store.has_object(h):
            return None, None, False
        _, body = self.tape.store.get_object(h)
        raw = decode_entry(h, body)
        found = list(self.entry(session, h, raw))
        if cache is not None and h not in red:
            cache.put(h, raw["parent"], [(f.path, f.kind, f.preview, self.blob_of.get(f.path)) for f in found])
        return found, raw["parent"], False

    def _blob(self, b: str, key: Optional[str], red: dict) -> tuple[Optional[str], list]:
        """A large value's text and finds, looked at once per run (None when redacted)."""
        if b in red:
            return None, []
        cached = self._blob_spans.get(b)
        if cached is None:
            text = self.tape.store.get_object(b)[1].decode("utf-8", "replace")
            self.bytes += len(text)
            cached = (text, self.detectors.spans(text, key))
            self._blob_spans[b] = cached if cached[1] else ("", [])  # keep no text that holds nothing
        return cached


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
    red = tape.redactions()
    findings, skipped, cached = [], 0, 0
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
                found, parent, hit = sc.findings(name, h, cache, red)
                if found is None:
                    continue
                cached += hit
                for f in found:
                    if f.id in allowed and not include_allowed:
                        skipped += 1
                    else:
                        findings.append(f)
                if parent:
                    stack.append(parent)
    finally:
        if cache is not None:
            cache.close()
    return {"findings": findings, "allowed": skipped, "bytes": sc.bytes, "detect_secrets": detectors.have_detect_secrets, "cached": cached}


def scan_entries(tape: "Tape", items: Iterable[tuple[str, str]]) -> list[Finding]:
    """The unresolved findings (neither redacted nor allowed) of these (session, entry hash)
    pairs, with the tape's detectors and the scan cache: what `push` checks, the entries of
    the files it is about to upload."""
    settings = load_settings(tape)
    detectors = Detectors(settings["patterns"])
    allowed = set(settings["allowed"])
    sc = Scanner(tape, detectors)
    cache = ScanCache.open(tape, detectors)
    red = tape.redactions()
    out: list[Finding] = []
    try:
        for name, h in items:
            found, _, _ = sc.findings(name, h, cache, red)
            out += [f for f in found or () if f.id not in allowed]
    finally:
        if cache is not None:
            cache.close()
    return out


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
            db.executemany("DELETE FROM scanned WHERE hash=?", [(h,) for h in red])
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
    A lost cache costs one full scan."""

    def __init__(self, db, fingerprint: str):
        self.db = db
        self.pending: list[tuple] = []
        row = db.execute("SELECT value FROM meta WHERE key='detectors'").fetchone()
        if row is None or row[0] != fingerprint:
            db.execute("DELETE FROM scanned")
            db.execute("INSERT OR REPLACE INTO meta VALUES('detectors', ?)", (fingerprint,))

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
        row = self.db.execute("SELECT parent, findings FROM scanned WHERE hash=?", (h,)).fetchone()
        return (row[0], json.loads(row[1])) if row else None

    def put(self, h: str, parent: Optional[str], found: list[tuple]) -> None:
        self.pending.append((h, parent, json.dumps(found)))
        if len(self.pending) >= 4096:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.db.executemany("INSERT OR REPLACE INTO scanned VALUES(?, ?, ?)", self.pending)
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
