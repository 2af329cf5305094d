"""`ctape scan`: likely secrets in a tape's entries (SPEC section 18, docs/privacy.md).

Every string of every entry a session's refs reach is looked at: payload, meta and
delta, large values (blobs) included, each blob once per run. Detectors:

- detect-secrets' regex plugins (AWS, GitHub, GitLab, Slack, Stripe, OpenAI, private
  keys, JWTs, npm, PyPI, SendGrid, Twilio, ...), when the optional package is installed
  (`pip install 'ctape[scan]'`); without it scan says so once and uses the rest;
- a high-entropy token check with detect-secrets' Shannon entropy limit (4.5 bits per
  character for base64-like tokens of 24-4,096 characters that mix cases and digits);
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

The detectors are in detectors.py and the settings file in scan_settings.py (their
names are read from here too); this module walks the tape and keeps the scan cache.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional

from blake3 import blake3

from ..model import redaction
from ..model.errors import CorruptObject, EntryNotFound, InvalidInput
from ..model.schema import decode_entry
from ..store.files import CODEC_RAW, TYPE_ENTRY
from ..store.localstate import cache_folder, editing
from .detectors import Detectors, _finds, _high_entropy, _id_key, _mask_json, _merge, preview  # noqa: F401 - _finds, _merge and _high_entropy are read from here too
from .scan_settings import SETTINGS, check_kind, check_regex, load_settings, save_settings

if TYPE_CHECKING:
    from ..history.tape import Tape

SEP = "\n\n"  # counted between an entry's strings in the "bytes" a scan reports (what it looked at)


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


def stream_advice(tape: "Tape", streams: list[Finding]) -> str:
    """What makes the text of these streams' finds an entry that `redact` reaches: `recover`
    for a dead writer's stream; for one whose writer still runs on this machine (`recover`
    leaves it alone), its end."""
    from ..history.stream import is_live

    s = streams[0].session
    if all(is_live(tape.store, f.hash) for f in streams):
        return f"the stream of session {s} is still being written: its text becomes an entry when its writer ends"
    return f"an interrupted stream's text becomes an entry once `ctape recover -s {s}` records it"


def open_stream_pieces(tape: "Tape", session: str) -> dict[tuple[str, str], list[tuple[int, str]]]:
    """The partial records of the session's interrupted streams (not recorded as an entry
    yet: `ctape recover` does that), as the index holds them: {(session, id): [(off, text)]}."""
    out: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for p in tape.store.index.open_partials(session):
        if isinstance(p.get("text"), str) and isinstance(p.get("off"), int):
            out.setdefault((session, p["stream"]), []).append((p["off"], p["text"]))
    return out


# -- settings (this machine's, never synced) ----------------------------------------------------
# (the file is read and written by scan_settings.py; its verbs stay here, where
# load_settings is looked up: tests/test_local_settings.py pauses it)


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


def check_finding_id(finding_id: str) -> None:
    if not re.fullmatch(r"[0-9a-f]{16}", finding_id or ""):
        raise InvalidInput(f"bad finding id {finding_id!r}: 16 hex digits, as `ctape scan` prints them")


def allow(tape: "Tape", finding_id: str) -> None:
    check_finding_id(finding_id)
    with editing(cache_folder(tape.store), SETTINGS):
        data = load_settings(tape)
        if finding_id not in data["allowed"]:
            data["allowed"].append(finding_id)
            save_settings(tape, data)


# -- walking a session ----------------------------------------------------------------------------


def masked(tape: "Tape", text: str) -> str:
    """`text` with what the patterns find in it masked (`[github-token: 40 chars]`): how a
    name or a typed REF that looks like a secret is shown, and recorded where no redaction
    reaches (a checkout's REF, the session a copy came from: `Session._recorded_text`).
    Patterns only (no entropy rule: names with a hash in them are common); without patterns
    of the user's, text shorter than any built-in pattern's find, or a hash, is returned at
    once (the detectors cost ~0.1 s to load)."""
    patterns = load_settings(tape)["patterns"]
    if not patterns and (len(text) < 12 or re.fullmatch(r"[0-9a-fA-F]+(?:[~^][0-9]*)*", text)):
        return text  # shorter than any built-in pattern's find, or a hash (none finds one all of hex digits)
    found = Detectors(patterns, entropy=False).pattern_spans(text)
    return preview(text, found, found[0]) if found else text


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
RAW = "ctape.raw"  # an imported line kept verbatim: JSON text, its strings escaped (formats/_common.py)
ITEM_JSON = "openai_agents.item_json"  # an Agents SDK item kept as its JSON text (ASCII-escaped)
_MSGPACK = "\0msgpack"  # (key contexts of _collect) a LangGraph value its serde wrote: msgpack bytes as Latin-1
_BASE64_TEXT = "\0base64-text"  # base64 of a file whose media type says it is text


def _b64_text(value: str) -> str:
    """What an imported line kept as base64 says: its bytes, undecodable ones replaced."""
    try:
        return base64.b64decode(value, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return value


def _b64_file_text(value: str) -> str:
    """A text file's base64 (a media part of a text type) as its text; a value that is no
    base64 of UTF-8 text (plain text under a text media type, which happens to read as
    base64) as it is: read as garbage, a key in it was missed (found in review)."""
    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return value


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _json_text(value: str) -> str:
    """JSON text with each string written as the text it stands for: a pattern with
    letters outside ASCII (written \\u00e4 there) or a line break (\\n) matches as it
    does in the value itself. Structure and anything that is no JSON string stay."""
    if "\\" not in value:
        return value  # no escape: the text is what it says

    def one(m: re.Match) -> str:
        try:
            return '"' + json.loads(m.group()) + '"'
        except ValueError:
            return m.group()

    return _JSON_STRING.sub(one, value).encode("utf-8", "replace").decode("utf-8")  # (a lone surrogate: ?)


def _msgpack_text(value: str) -> str:
    """The strings inside msgpack bytes kept as Latin-1 characters, as UTF-8 text (the
    bytes of the framing between them become U+FFFD)."""
    try:
        return value.encode("latin-1").decode("utf-8", "replace")
    except UnicodeEncodeError:
        return value


TEXT_MEDIA = ("text/", "application/json", "application/xml", "application/yaml", "application/x-yaml",
              "application/toml", "application/javascript", "application/x-sh", "application/x-www-form-urlencoded")


def _textual(media_type: object) -> bool:
    return isinstance(media_type, str) and media_type.lower().startswith(TEXT_MEDIA)


def _data_url_text(value: str) -> str:
    """A `data:` URL of a text file (base64), as that text; any other value as it is."""
    head, sep, data = value.partition(",")
    if not sep or not head.endswith(";base64"):
        return value
    media_type = head[5:].split(";")[0]
    return _b64_text(data) if _textual(media_type or "text/plain") else value


_DECODERS: dict[str, Callable[[str], str]] = {RAW_B64: _b64_text, RAW: _json_text, ITEM_JSON: _json_text,
                                             _MSGPACK: _msgpack_text, _BASE64_TEXT: _b64_file_text}


def _decoded(key: Optional[str], text: str) -> str:
    """The text a value stands for, where the tape keeps it in another form that a pattern
    would not match as written (found by an audit: a secret was scanned as its escapes,
    its base64 or its msgpack bytes, missed, and pushed): what scan matches. A finding
    still names the value, which a redaction takes whole."""
    dec = _DECODERS.get(key)  # type: ignore[arg-type]
    if dec is not None:
        return dec(text)
    if text[:5] == "data:":
        return _data_url_text(text)
    return text


def _contexts(value: dict) -> Optional[dict]:
    """Key contexts for the children of a dict that keeps text in another form: a media
    part whose media type is text (pydantic-ai's BinaryContent, Anthropic's base64 source,
    LangChain's blocks: its `data` / `base64`), or LangGraph's {"b": [type, msgpack as Latin-1]}."""
    if "b" in value and len(value) == 1:
        return {"b": _MSGPACK}
    if any(_textual(value.get(k)) for k in MEDIA_TYPE_KEYS):
        return {"data": _BASE64_TEXT, "base64": _BASE64_TEXT}
    return None


# the keys that name a media part's type: snake case (Anthropic, pydantic-ai, LangChain) and
# camel case (Gemini's inlineData, kept as it came in the entry's meta: a text file's base64
# there was left unscanned, and pushed, after its copy in the payload was redacted; an audit)
MEDIA_TYPE_KEYS = ("media_type", "mime_type", "mimeType", "mediaType")


# bytes of an entry's JSON that may hold text kept in another form (_decoded, _contexts):
# the byte prefilter judges strings as they are written, so `https:\\/\\/user:pw@` in a
# line kept verbatim passed it unmatched, and was pushed (found by an audit). Such entries
# are always decoded and matched. (A false alarm costs a decode, never a finding.)
_DECODED_MARKS = tuple(f'"{k}":'.encode() for k in (RAW, RAW_B64, ITEM_JSON, "b", *MEDIA_TYPE_KEYS)) + (b'"data:',)

KEY_CONTEXT = "id"  # object keys are matched with the patterns only, as ids are (no entropy rule)


def _collect(value, where, key: Optional[str], out: list, clean_keys: frozenset | set = frozenset()) -> None:
    """(where, key, string) of every string in `value`, and of every object key, like
    _strings, but without a generator per level or a path per value: `where` is (parent's
    where, step), turned into a path (_steps) only for a string something was found in. The
    step of an object key itself is the 1-tuple (key,) (a KeyStep once in a path). Keys in
    `clean_keys` (matched before with nothing found: keys repeat from entry to entry) are
    left out."""
    if type(value) is dict:
        ctx = _contexts(value) if "b" in value or any(k in value for k in MEDIA_TYPE_KEYS) else None
        for k, v in value.items():
            if k not in clean_keys:
                out.append(((where, (k,)), KEY_CONTEXT, k))
            t = type(v)
            if t is str:
                out.append(((where, k), ctx.get(k, k) if ctx else k, v))
            elif t is dict or t is list:
                _collect(v, (where, k), ctx.get(k, k) if ctx else k, out, clean_keys)
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
        self._blob_spans: dict[tuple[str, bool, Optional[str]], tuple[str, list]] = {}
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
                    how = key if key in _DECODERS else None  # (a data: URL is told by the text)
                    got = self._blob_spans.get((b, flag, how))
                    if got is not None:
                        blobs.append((steps, got, b))
                        continue
                    i = new_blobs.get((b, flag, how))
                    if i is None:
                        rec = self.records.get(b)
                        store = self.tape.store
                        # a value lost to damage and salvaged reads as the marker, as everywhere
                        raw_b = store.decode_object(b, rec)[1] if rec is not None else store.read_value(b, h)
                        text = _decoded(how, raw_b.decode("utf-8", "replace"))
                        self.bytes += len(text)
                        chars += len(text)
                        i = new_blobs[(b, flag, how)] = len(texts)
                        texts.append(text)
                        entropy.append(flag)
                    blobs.append((steps, i, b))
                else:
                    t = _decoded(key, s[1:] if s and s[0] == "\0" else s)
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
        for blob_key, i in new_blobs.items():
            self._blob_spans[blob_key] = (texts[i], spans[i]) if spans[i] else ("", [])  # keep no text that holds nothing
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
        on_missing("detect-secrets is not installed: only ctape's own patterns, high-entropy strings and yours were used; pip install 'detect-secrets>=1.5' (ctape's scan extra)")
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
            if any(m in rec for m in _DECODED_MARKS):
                continue  # text kept in another form (_decoded): only its decoded form can be judged
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
