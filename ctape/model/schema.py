"""One schema for every record read from disk.

A checksum only proves that bytes are the ones written; it says nothing about who wrote
them. A record made by hand (or by a buggy tool) can pass every CRC and still hold a
string where a counter belongs, a counter of 2**70, or an entry without `seq`. Every
reader decodes a record once and asks the function of its kind here; a record that
fails is damage (fsck reports it, readers leave it out), never an exception deeper in.

Each `*_problem` function returns None for a valid record, else a short reason (one
line, no trailing period). `loads` is the JSON decoder for record bodies: it refuses
what ctape never writes (NaN, Infinity, numbers that overflow a float, invalid UTF-8,
nesting deeper than the limits) with ValueError.

Plain Python rather than pydantic models: these run on every record read (every ref
record of a session's log, every entry decoded). tests/bench/bench_schema.py measures
both on the same records: pydantic v2 models of a subset of these rules (no ref-key or
seq/parent rules, no nesting check, which would need Python validators) cost 1.1-1.5x
the plain checks, and a failing record would also pay for building a ValidationError
and turning it into one line. Both cost less than json.loads of the same bytes.

The limits on values (docs/format.md, "Limits") live in canonical.py, which enforces
them when entries are written; here they bound what is accepted when entries are read.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from .canonical import MAX_DEPTH, nesting_problem
from .errors import CorruptObject
from .models import KINDS

U63 = 1 << 63  # counters (n, lc, seen, seq, off) are below this: SQLite's INTEGER is 64-bit signed
HEAD = "HEAD"

_HASH = re.compile(r"[0-9a-f]{64}")
_WRITER = re.compile(r"[a-z0-9]{4,32}")  # 12 hex derived, or CTAPE_WRITER (store.py)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # models.NAME_RE
_STREAM = re.compile(r"[A-Za-z0-9._-]{1,64}")  # 16 hex from StreamWriter
# a stored time: UTC, microseconds, Z; years before 1000 were written with fewer digits
# by ctape versions before the Limits section of docs/format.md (still read)
_TIME = re.compile(r"[0-9]{1,4}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]\.[0-9]{6}Z")
ENTRY_KEYS = frozenset(("delta", "kind", "meta", "parent", "payload", "seq", "time"))
_KIND_VALUES = frozenset(v for k, v in KINDS.items() if k == v)
HEADER_FORMATS = {"ctape-segment": 1, "ctape-pack": 1}  # format -> newest version this ctape reads


# -- decoding ---------------------------------------------------------------------------------


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _float(text: str) -> float:
    f = float(text)
    if f in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:20]} overflows a float")
    return f


def loads(body: bytes | str) -> Any:
    """Decode a record body as ctape writes it; ValueError (with a short reason) otherwise."""
    try:
        return json.loads(body, parse_constant=_no_constant, parse_float=_float)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    except ValueError as e:
        raise ValueError(str(e).split(":")[0][:80]) from None


def _decode(body: bytes, what: str) -> tuple[Any, Optional[str]]:
    try:
        return loads(body), None
    except ValueError as e:
        return None, f"{what} is not valid JSON ({e})"


def _counter(value: Any, low: int = 0) -> bool:
    return type(value) is int and low <= value < U63


def _refs_problem(refs: Any, field: str) -> Optional[str]:
    """Why the `set` or `old` of a ref record is not refs -> values, or None. A ref is HEAD,
    a branch name or `tag:` + a tag name; a value is an entry hash, null, or (HEAD only)
    "@BRANCH"."""
    if type(refs) is not dict:
        return f"`{field}` is not an object"
    for ref, value in refs.items():
        if ref == HEAD:
            if value is None or (type(value) is str and (_HASH.fullmatch(value) if value[:1] != "@" else _NAME.fullmatch(value, 1))):
                continue
        else:
            # a branch, or a tag (`tag:` + a name: never a valid branch name, ctape/history/tags.py)
            if not _name_ok(ref[4:] if type(ref) is str and ref.startswith("tag:") else ref):
                return f"`{field}` names an invalid ref {ref[:40]!r}"
            if value is None or (type(value) is str and _HASH.fullmatch(value)):
                continue
        return f"`{field}` gives {ref[:40]} the value {str(value)[:40]!r}: want an entry hash, null, or @BRANCH for HEAD"
    return None


# -- ref records --------------------------------------------------------------------------------


_known: set = set()  # session names and writer ids already checked (they repeat in every record)


def _name_ok(s: Any) -> bool:
    if type(s) is not str:
        return False
    if s in _known:
        return True
    if _NAME.fullmatch(s) is None:
        return False
    if len(_known) < 4096:
        _known.add(s)
    return True


def ref_record_problem(rec: Any, session: Optional[str] = None) -> Optional[str]:
    """None when `rec` is a ref record as ctape writes it (docs/format.md section 6), of
    session `session` when given; else why not. Unknown extra keys are allowed."""
    if type(rec) is not dict:
        return "ref record is not a JSON object"
    s = rec.get("s")
    if not _name_ok(s):
        return "ref record has no valid session name `s`"
    if session is not None and s != session:
        return f"ref record of session {s!r} in the files of session {session!r}"
    w = rec.get("w")
    if type(w) is not str or _WRITER.fullmatch(w) is None:
        return "ref record has no valid writer `w`"
    n = rec.get("n")
    if type(n) is not int or not 0 <= n < U63:
        return "ref record's `n` is not an integer from 0 to 2**63-1"
    lc = rec.get("lc")
    if type(lc) is not int or not 0 <= lc < U63:
        return "ref record's `lc` is not an integer from 0 to 2**63-1"
    t = rec.get("t")
    if type(t) is not str or _TIME.fullmatch(t) is None:
        return "ref record's time `t` is not a ctape time"
    if type(rec.get("op")) is not str:
        return "ref record has no `op` string"
    if "set" not in rec:
        return "ref record has no `set`"
    why = _refs_problem(rec["set"], "set")
    if why is None and rec.get("old") is not None:
        why = _refs_problem(rec["old"], "old")
    if why is not None:
        return "ref record's " + why
    seen = rec.get("seen")
    if seen is not None:
        if type(seen) is not dict:
            return "ref record's `seen` is not an object"
        for k, v in seen.items():
            if type(v) is not int or not 0 <= v < U63 or _WRITER.fullmatch(k) is None:
                return "ref record's `seen` holds something other than writer: n"
    gap = rec.get("gap")
    if gap is not None and (type(gap) is not int or not 0 <= gap < n):
        return "ref record's `gap` is not an integer below its `n`"
    cut = rec.get("cut")
    if cut is not None:
        if type(cut) is not dict:
            return "ref record's `cut` is not an object"
        for k, v in cut.items():
            if (_WRITER.fullmatch(k) is None or type(v) is not list or not v
                    or any(type(x) is not int or not 0 <= x < U63 for x in v)):
                return "ref record's `cut` holds something other than writer: [n, ...]"
    stream = rec.get("stream")
    if stream is not None and (type(stream) is not str or _STREAM.fullmatch(stream) is None):
        return "ref record's `stream` is not a stream id"
    for key in ("ref", "source"):
        if key in rec and type(rec[key]) is not str:
            return f"ref record's `{key}` is not a string"
    if rec["op"] == "redact":
        return _redact_problem(rec.get("redact"))
    return None


_KIND_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")


def _redact_problem(items: Any) -> Optional[str]:
    """A redaction record's places (docs/format.md section 16): a list of
    {"object": hash, "path": "$...", "kind": name}."""
    if type(items) is not list or not items:
        return "redaction record has no `redact` list"
    for item in items:
        if (type(item) is not dict or type(item.get("object")) is not str or _HASH.fullmatch(item["object"]) is None
                or type(item.get("path")) is not str or not item["path"].startswith("$") or len(item["path"]) > 4096
                or type(item.get("kind")) is not str or _KIND_NAME.fullmatch(item["kind"]) is None):
            return "redaction record's `redact` holds something other than {object, path, kind}"
    return None


def read_ref_record(body: bytes, session: Optional[str] = None) -> tuple[Optional[dict], Optional[str]]:
    """(record, None) for a valid ref record body, else (None, reason)."""
    rec, why = _decode(body, "ref record")
    if why is None:
        why = ref_record_problem(rec, session)
    return (None, why) if why else (rec, None)


# -- partial stream records ---------------------------------------------------------------------------


def partial_record_problem(rec: Any, session: Optional[str] = None) -> Optional[str]:
    """None when `rec` is a partial stream record (docs/format.md section 7)."""
    if type(rec) is not dict:
        return "partial record is not a JSON object"
    s = rec.get("s")
    if type(s) is not str or _NAME.fullmatch(s) is None:
        return "partial record has no valid session name `s`"
    if session is not None and s != session:
        return f"partial record of session {s!r} in the files of session {session!r}"
    stream = rec.get("stream")
    if type(stream) is not str or _STREAM.fullmatch(stream) is None:
        return "partial record has no valid `stream` id"
    if not _counter(rec.get("off")):
        return "partial record's `off` is not an integer from 0 to 2**63-1"
    if type(rec.get("text")) is not str:
        return "partial record's `text` is not a string"
    base = rec.get("base")
    if base is not None and (type(base) is not str or _HASH.fullmatch(base) is None):
        return "partial record's `base` is not an entry hash or null"
    t = rec.get("t")
    if t is not None and (type(t) is not str or _TIME.fullmatch(t) is None):
        return "partial record's time `t` is not a ctape time"
    return None


def read_partial_record(body: bytes, session: Optional[str] = None) -> tuple[Optional[dict], Optional[str]]:
    rec, why = _decode(body, "partial record")
    if why is None:
        why = partial_record_problem(rec, session)
    return (None, why) if why else (rec, None)


# -- file headers ----------------------------------------------------------------------------------


def header_problem(rec: Any, fmt: Optional[str] = None, session: Optional[str] = None, writer: Optional[str] = None) -> Optional[str]:
    """None when `rec` is a file header (docs/format.md section 4): `fmt` is "ctape-segment"
    or "ctape-pack" when the file name says which; `session` and `writer`, when given,
    must be the ones the header names. A version newer than this ctape reads is a problem
    too (the reason says so)."""
    if type(rec) is not dict:
        return "file header is not a JSON object"
    f = rec.get("format")
    if type(f) is not str or f not in HEADER_FORMATS:
        return f"file header has an unknown format {str(f)[:40]!r}"
    if fmt is not None and f != fmt:
        return f"file header says {f}, the file name says {fmt}"
    v = rec.get("version")
    if type(v) is not int or v < 1:
        return "file header has no valid `version`"
    if v > HEADER_FORMATS[f]:
        return f"file header has version {v}, newer than this ctape reads (upgrade ctape)"
    s = rec.get("session")
    if type(s) is not str or _NAME.fullmatch(s) is None:
        return "file header has no valid `session`"
    if session is not None and s != session:
        return f"file header names session {s!r}, the file is in session {session!r}"
    if f == "ctape-segment":
        w = rec.get("writer")
        if type(w) is not str or _WRITER.fullmatch(w) is None:
            return "segment header has no valid `writer`"
        if writer is not None and w != writer:
            return f"segment header names writer {w!r}, the file name says {writer!r}"
    return None


def header_gaps(rec: dict) -> list[tuple[str, int, int]]:
    """A pack header's `gaps` ({writer: [[lo, hi], ...]}: the gaps of the records compaction
    read, docs/format.md section 13) as (writer, lo, hi); what is not such a pair is left out."""
    gaps = rec.get("gaps")
    out = []
    if type(gaps) is dict:
        for w, pairs in gaps.items():
            if type(w) is str and _WRITER.fullmatch(w) and type(pairs) is list:
                out += [(w, p[0], p[1]) for p in pairs if type(p) is list and len(p) == 2
                        and type(p[0]) is int and type(p[1]) is int and 0 <= p[0] < p[1] < U63]
    return out


def read_header(body: bytes, fmt: Optional[str] = None, session: Optional[str] = None, writer: Optional[str] = None) -> tuple[Optional[dict], Optional[str]]:
    rec, why = _decode(body, "file header")
    if why is None:
        why = header_problem(rec, fmt, session, writer)
    return (None, why) if why else (rec, None)


# -- object records ----------------------------------------------------------------------------------


def object_record_problem(body: bytes) -> Optional[str]:
    """None when an `O` record body (or one rebuilt from a block) has its fixed part: a
    32-byte hash, type `E` or `B`, codec 0 (raw) or 1 (zstd) (docs/format.md section 5).
    Whether the data hashes to the name is the reader's check (store.decode_object)."""
    if len(body) < 34:
        return f"object record is {len(body)} bytes, shorter than its 34-byte head"
    if body[32] not in (0x45, 0x42, 0x57):  # entry, blob, withheld entry (section 16)
        return f"object record has an unknown type byte {body[32]}"
    if body[33] not in (0, 1):
        return f"object record has an unknown codec {body[33]}"
    return None


# -- entry bodies ----------------------------------------------------------------------------------


def entry_body_problem(raw: Any, body: Optional[bytes] = None) -> Optional[str]:
    """None when `raw` (an entry body as decoded) has the seven keys with valid values
    (docs/format.md, "The entry body"); `body`, the bytes it was decoded from, lets the
    nesting check be skipped when the bytes cannot hold that many levels."""
    if type(raw) is not dict:
        return "entry body is not a JSON object"
    if len(raw) != 7 or raw.keys() != ENTRY_KEYS:
        missing = sorted(ENTRY_KEYS - raw.keys())
        if missing:
            return f"entry body has no {', '.join(missing)}"
        return f"entry body has unknown keys {', '.join(sorted(raw.keys() - ENTRY_KEYS))[:60]}"
    kind = raw["kind"]
    if type(kind) is not str or kind not in _KIND_VALUES:
        return f"entry has an unknown kind {str(kind)[:40]!r}"
    seq = raw["seq"]
    if not _counter(seq, 1):
        return "entry's seq is not an integer from 1 to 2**63-1"
    parent = raw["parent"]
    if seq == 1:
        if parent is not None:
            return "entry has seq 1 and a parent"
    elif type(parent) is not str or _HASH.fullmatch(parent) is None:
        return f"entry has seq {seq} but no parent hash"
    t = raw["time"]
    if type(t) is not str or _TIME.fullmatch(t) is None:
        return "entry's time is not a ctape time (YYYY-MM-DDTHH:MM:SS.ffffffZ)"
    if type(raw["meta"]) is not dict:
        return "entry's meta is not an object"
    if body is None or body.count(b"[") + body.count(b"{") > MAX_DEPTH:
        for key in ("payload", "meta", "delta"):
            why = nesting_problem(raw[key], key)
            if why is not None:
                return "entry's " + why
    if body is None or b"\\u0000b" in body:
        bad = _bad_blob_ref((raw["payload"], raw["meta"], raw["delta"]))
        if bad is not None:
            return f"entry holds a blob reference that is not a hash ({bad[:16]!r}...)"
    return None


def _bad_blob_ref(value: Any) -> Optional[str]:
    """The first string shaped like a blob reference (NUL, b, 64 characters) whose 64
    characters are not a hash: reading it would ask for an object that cannot exist."""
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is str:
            if v[:2] == "\0b" and len(v) == 66 and _HASH.fullmatch(v, 2) is None:
                return v[2:]
        elif type(v) is dict:
            stack.extend(v.values())
        elif type(v) in (list, tuple):
            stack.extend(v)
    return None


def decode_entry(h: str, body: bytes) -> dict:
    """The decoded body of entry h, checked; CorruptObject naming the entry otherwise."""
    raw, why = _decode(body, "entry body")
    if why is None:
        why = entry_body_problem(raw, body)
    if why is not None:
        raise CorruptObject(f"entry {h} is damaged: {why}; run `ctape fsck`")
    return raw


def check_entry_body(h: str, raw: Any, body: Optional[bytes] = None) -> dict:
    """`raw` when it is a valid entry body, else CorruptObject naming entry h."""
    why = entry_body_problem(raw, body)
    if why is not None:
        raise CorruptObject(f"entry {h} is damaged: {why}; run `ctape fsck`")
    return raw
