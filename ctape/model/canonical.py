"""Canonical bytes and content hashes: the contract that names every object.

An object's name is blake3(TYPE + b"\\0" + BODY) as 64 lowercase hex digits, where
TYPE is b"entry" or b"blob". An entry's BODY is canonical JSON: keys sorted,
separators "," and ":", UTF-8 without escaping non-ASCII, no NaN or Infinity.
A blob's BODY is the UTF-8 bytes of one large string.

Strings of BLOB_MIN characters or more anywhere inside an entry's payload,
meta or delta are stored as blobs of their own (so identical tool outputs, file
contents and images are stored once) and replaced in the entry body by a
reference string "\\0b" + hash. A short string that starts with "\\0" is escaped
by one more leading "\\0". docs/format.md has a worked example; tests pin it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from datetime import datetime
from typing import Any, Callable, Optional

from blake3 import blake3

from .errors import CorruptObject, InvalidInput
from .models import parse_time

ENTRY = b"entry"
BLOB = b"blob"
BLOB_MIN = 1024  # characters

# Limits on what an entry holds (docs/format.md, "Limits"), refused with InvalidInput when
# an entry is written. Every reader that recurses through a value (externalize,
# internalize, derived.merge_patch with copy.deepcopy, json's C coder) stays far below
# Python's recursion limit of 1000 at this depth; entries read from disk are held to it too
# (schema.entry_body_problem).
MAX_DEPTH = 100  # levels of lists and objects in one of payload, meta, delta (a scalar is 0, {} is 1)

# The longest record (a line of JSON Lines, or a whole JSON document) an importer or a stream reads.
# Real transcripts stay far below it (a line with a large tool output or a base64 image
# is tens of MB); a longer one, or a file with no line end at all (/dev/zero), is refused
# before it fills the memory (docs/import.md). $CTAPE_MAX_RECORD overrides it.
MAX_RECORD = 256 << 20


_times: dict[str, str] = {}


def normal_time(text: Any) -> str:
    """models.parse_time, remembered for a few thousand times: importers give the same
    times again (each entry of a record, and the normal form a Clock took already)."""
    if type(text) is not str:
        return parse_time(text)
    t = _times.get(text)
    if t is None:
        t = _utc_time(text) or parse_time(text)
        if len(_times) >= 4096:
            _times.clear()
        _times[text] = _times[t] = t  # the normal form is its own
    return t


_UTC = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?Z", re.ASCII)


def _utc_time(text: str) -> Optional[str]:
    """parse_time of the usual form, a UTC time with a Z, without the datetime round
    trip; None for any other form (or a date that does not exist: parse_time says so)."""
    m = _UTC.fullmatch(text)
    if m is None:
        return None
    try:
        datetime.fromisoformat(m.group(1))
    except ValueError:
        return None
    return f"{m.group(1)}.{(m.group(2) or '').ljust(6, '0')}Z"


def max_record() -> int:
    """The largest record an import reads and a stream keeps: MAX_RECORD, or
    $CTAPE_MAX_RECORD, a positive whole number of bytes."""
    raw = os.environ.get("CTAPE_MAX_RECORD")
    if not raw:
        return MAX_RECORD
    try:
        n = int(raw.strip().replace("_", ""))
    except ValueError:
        n = 0
    if n <= 0:
        raise InvalidInput(f"CTAPE_MAX_RECORD must be a positive whole number of bytes, not {raw!r}; "
                           f"unset it for the default ({MAX_RECORD:,})")
    return n
MAX_ITEMS = 1_000_000  # values (scalars, lists, objects) in payload, meta and delta together
MAX_BODY = 64 << 20  # bytes of an entry's canonical body, once large strings are blobs

_encoder = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def _c_encode() -> Callable[[Any], str]:
    """_encoder.encode without its cost per call (a new C encoder each time, and a table
    of the containers being written, to refuse a value that holds itself: such a value
    now runs into the recursion limit instead, which callers catch)."""
    from json.encoder import c_make_encoder, encode_basestring

    if c_make_encoder is None:  # no C accelerator (another Python): the plain way
        return _encoder.encode
    encode = c_make_encoder(None, _encoder.default, encode_basestring, None, ":", ",", True, False, False)
    return lambda value: "".join(encode(value, 0))


_encode = _c_encode()


def _fast_encoder() -> Optional[Callable[[Any], bytes]]:
    """orjson's dumps with sorted keys, where the optional `fast` extra is installed and
    $CTAPE_PURE_JSON is not set; otherwise None. For values of plain types only (str, int
    within 64 bits, bool, None, dict with str keys, list: no float) it writes exactly
    canonical_json's bytes, about 8 x faster; callers check that (_scan), and fall back
    to the standard encoder for anything else or when it refuses (a larger int, a lone
    surrogate, nesting past its limit). Floats are left to the standard encoder because
    the two write some differently (1e-05 against 0.00001) and orjson writes NaN as null.
    tests/test_canonical_fast.py holds the two equal."""
    if os.environ.get("CTAPE_PURE_JSON"):
        return None
    try:
        import orjson
    except ImportError:
        return None
    dumps, option = orjson.dumps, orjson.OPT_SORT_KEYS
    if dumps(_PROBE, option=option) != _encode(_PROBE).encode("utf-8"):
        return None  # another orjson writes these differently: names must not depend on it

    def encode(value: Any) -> bytes:
        out = dumps(value, option=option)
        # orjson's bytes keep the room of its buffer (~8 KB for a 1 KB text, 4 KB for 100
        # bytes): bodies that wait in a batch would hold 3-30 x their size. A copy holds
        # the text alone; above 64 KB the room left is a few percent.
        return memoryview(out).tobytes() if len(out) < 65536 else out

    return encode


# what a version of orjson must write as Python does before it is used (once a process):
# escapes (controls, quote, backslash; not DEL, U+2028 or non-ASCII), key order by code
# point across the planes, the 64-bit edges, the constants
_PROBE = {
    "é": [None, True, False, 0, -1, -(2**63), 2**64 - 1, [], {}],
    "a": "\x00\x01\x08\t\n\x0c\r\x1f \"\\/\x7f\x80\u2028\u2029\ud7ff\ue000\ufeff\uffff\U00010000\U0001f600\U0010ffff",
    "\U0001f600": {"": "", "Z": "z", "\x7f": 1, "\ufb01": 2},
    "\x1f": "<>&'",
}

_fast: Optional[Callable[[Any], bytes]] = None
_fast_known = False


def fast_encoder() -> Optional[Callable[[Any], bytes]]:
    """_fast_encoder(), looked up once (orjson is imported on the first write, not when
    ctape is imported: `ctape --help` does not pay for it)."""
    global _fast, _fast_known
    if not _fast_known:
        _fast, _fast_known = _fast_encoder(), True
    return _fast


MAX_INT_DIGITS = 4300  # Python's default int_max_str_digits: every ctape process reads such an integer back


def parse_json(text: str | bytes) -> Any:
    """JSON text as a value that canonical_json can write and every reader can read back.

    ValueError (json.JSONDecodeError for text that is not JSON) says what is wrong
    otherwise: NaN or Infinity, a number that overflows a float (1e400), an integer of
    more than MAX_INT_DIGITS digits, or nesting too deep for the parser. -0 reads as 0,
    and 1e-400 as 0.0, as in json."""
    return _parse(text, _decoder)


def parse_record(text: str | bytes) -> Any:
    """parse_json for the records of transcripts, many and each read once: the same
    values, and the same refusals, but an integer too long is refused by Python's own
    limit when it is MAX_INT_DIGITS (the usual case: no call per integer), in its words."""
    return _parse(text, _record_decoder if sys.get_int_max_str_digits() == MAX_INT_DIGITS else _decoder)


def _parse(text: str | bytes, decoder: json.JSONDecoder) -> Any:
    """json.loads(text) with `decoder` (kept, not made again for each text)."""
    try:
        if isinstance(text, str):
            if text.startswith("\ufeff"):
                raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        elif text[:1] == b"{" and text[1:2] != b"\0":  # a line of JSON Lines: UTF-8 (json.detect_encoding)
            text = text.decode("utf-8", "surrogatepass")
        else:
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        # decoder.decode(text) without its two Python frames (a record is a few KB)
        try:
            value, end = decoder.scan_once(text, _space(text, 0).end())
        except StopIteration as err:
            raise json.JSONDecodeError("Expecting value", text, err.value) from None
        end = _space(text, end).end()
        if end != len(text):
            raise json.JSONDecodeError("Extra data", text, end)
        return value
    except RecursionError:
        raise ValueError(f"it is nested too deeply (ctape stores up to {MAX_DEPTH} levels)") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number; write it as a string")


def _finite_float(text: str) -> float:
    f = float(text)
    if f - f != 0:  # inf
        raise ValueError(f"the number {_clip(text)} is too large for a float (over 1.8e308); write it as a string")
    return f


def _short_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS and len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer has {len(text.lstrip('-'))} digits, over the limit of {MAX_INT_DIGITS}; write it as a string")
    return int(text)


_decoder = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float, parse_int=_short_int)
_space = json.decoder.WHITESPACE.match
_record_decoder = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def _clip(text: str) -> str:
    return text if len(text) <= 24 else text[:20] + "..."


def canonical_json(value: Any) -> bytes:
    """The one byte form used for hashing and storing JSON values."""
    fast = fast_encoder()
    if fast is not None:
        try:
            plain = not _scan((value,)) & (_ODD | _SLOW)
        except RecursionError:
            plain = False
        if plain:
            try:
                return fast(value)
            except TypeError:  # orjson's refusals (a larger int, a lone surrogate, its depth): the standard encoder says what is wrong
                pass
    try:
        return _encode(value).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput("text is not valid Unicode (lone surrogate); send UTF-8") from None
    except (ValueError, TypeError) as e:
        raise InvalidInput(f"value is not plain JSON ({e}); use strings, numbers, lists and objects") from None
    except RecursionError:
        raise InvalidInput(f"a value is nested too deeply, or holds itself; ctape stores up to {MAX_DEPTH} levels (docs/format.md, Limits)") from None


def nesting_problem(value: Any, what: str = "value", max_depth: int = MAX_DEPTH) -> Optional[str]:
    """Why `value` is nested deeper than max_depth levels, or None (iterative: any depth)."""
    stack = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        d += 1
        if d > max_depth:
            return f"{what} is nested more than {max_depth} levels deep"
        stack.extend((x, d) for x in v if isinstance(x, (dict, list)))
    return None


def value_problem(payload: Any, meta: Any, delta: Any) -> Optional[str]:
    """Why an entry's values break the limits on depth and number, or None."""
    items = 0
    for what, value in (("payload", payload), ("meta", meta), ("delta", delta)):
        stack = [(value, 0)]
        while stack:
            v, d = stack.pop()
            items += 1
            if isinstance(v, dict):
                v = v.values()
            elif not isinstance(v, list):
                continue
            d += 1
            if d > MAX_DEPTH:
                return f"{what} is nested more than {MAX_DEPTH} levels deep"
            if items + len(stack) + len(v) > MAX_ITEMS:
                return f"the entry holds more than {MAX_ITEMS:,} values"
            stack.extend((x, d) for x in v)
    return None


def _check_values(payload: Any, meta: Any, delta: Any) -> None:
    why = value_problem(payload, meta, delta)
    if why is not None:
        raise InvalidInput(f"{why}; ctape stores up to {MAX_DEPTH} levels and {MAX_ITEMS:,} values per entry (docs/format.md, Limits)")


def entry_body(
    kind: str, payload: Any, meta: Any, delta: Any, parent: Optional[str], seq: int, time: str, put_blob: Callable[[bytes], str]
) -> bytes:
    """The canonical bytes of an entry: `canonical_json` of the body with its values
    externalized (docs/format.md, "The entry body"), within the limits (MAX_DEPTH,
    MAX_ITEMS, MAX_BODY; InvalidInput otherwise).

    A look at the values (_look) tells whether any string is a blob or starts with NUL
    from their lengths, without encoding them, and counts their containers and values.
    Most entries hold no such string: their body is encoded once, as it is. The others
    are externalized first, so their large strings are never encoded as JSON. Values
    with no more containers than MAX_DEPTH and fewer than MAX_ITEMS values cannot
    break the limits and are not walked again for them."""
    values = (payload, meta, delta)
    try:
        seen = _scan(values)
    except RecursionError:  # refused for its depth further on
        seen = _ODD
    if seen & _ODD:
        check_keys(values)
    body = {"delta": delta, "kind": kind, "meta": meta, "parent": parent, "payload": payload, "seq": seq, "time": time}
    out = None if seen & _LARGE else _encoded_plain(body, seen)
    if out is not None and len(out) < BLOB_MIN:
        return out
    special, containers, items = _look((payload, meta, delta))
    if containers > MAX_DEPTH + 1 or items >= MAX_ITEMS:
        _check_values(payload, meta, delta)
    if out is not None and not special and len(out) <= MAX_BODY:
        return out  # canonical_json(body), encoded once
    if special:
        body["delta"] = _externalized(delta, put_blob)
        body["meta"] = _externalized(meta, put_blob)
        body["payload"] = _externalized(payload, put_blob)
    out = canonical_json(body)
    if len(out) > MAX_BODY:
        raise InvalidInput(f"the entry is {len(out):,} bytes once its large strings are blobs, over the limit of {MAX_BODY:,} (docs/format.md, Limits); split it")
    return out


_LARGE, _ODD, _SLOW = 1, 2, 4


def _scan(values: Any, depth: int = 0) -> int:
    """What a walk over the values finds: _LARGE, a string of BLOB_MIN characters or more
    (so no need to try encoding the body as it is: it has blobs); _ODD, an object key that
    is not a string, or a container of another type (a tuple, a subclass), which the
    caller looks at closely (_odd_key); _SLOW, a float or a scalar of another type than
    str, int, bool and None (a subclass, a datetime), which only the standard encoder
    writes canonically or refuses (fast_encoder). Lists and objects nested more than
    MAX_DEPTH levels are _ODD, and not walked further. Python's encoder turns int, float, bool and None
    keys into strings but sorts them as they were: {9: .., 10: ..} would be written "9"
    before "10", not canonical JSON, and would hash differently once read back and written
    again (an export imported). So such keys are refused rather than converted, as keys of
    mixed types, which the encoder cannot sort, always were. (~0.9 µs an entry of the
    bench workload, most of it Python's cost per call; it replaced a look at the payload's
    top for large strings.)"""
    seen = 0
    for x in values:
        t = type(x)
        if t is str:
            if len(x) >= BLOB_MIN:
                seen |= _LARGE
        elif t is dict:
            for k in x:
                if type(k) is not str:
                    return _ODD
            if depth >= MAX_DEPTH:
                return seen | _ODD
            seen |= _scan(x.values(), depth + 1)
            if seen & _ODD:
                return seen
        elif t is list:
            if depth >= MAX_DEPTH:
                return seen | _ODD
            seen |= _scan(x, depth + 1)
            if seen & _ODD:
                return seen
        elif t is float:
            seen |= _SLOW
        elif t not in _SCALARS:
            if isinstance(x, (dict, list, tuple)):
                return seen | _ODD
            seen |= _SLOW
    return seen


def _odd_key(values: Any) -> Any:
    """A key of the values' objects that is not a string (subclasses of str are strings),
    or _NONE (None is a key that can be found). It gives up past MAX_ITEMS containers (a
    value that holds itself): the limits refuse such a value further on."""
    stack = [values]
    for _ in range(MAX_ITEMS):
        if not stack:
            break
        v = stack.pop()
        if isinstance(v, dict):
            for k in v:
                if not isinstance(k, str):
                    return k
            v = v.values()
        stack.extend(x for x in v if isinstance(x, (dict, list, tuple)))
    return _NONE


_NONE = object()


def check_keys(values: Any) -> None:
    """InvalidInput when an object in `values` has a key that is not a string (_scan)."""
    key = _odd_key(values)
    if key is not _NONE:
        from .models import brief  # (models imports this module)

        raise InvalidInput(f"the keys of a JSON object are strings, not {type(key).__name__} ({brief(key, 40)}); convert them (str(key)) first")


def _encoded_plain(body: dict, seen: int) -> Optional[bytes]:
    """canonical_json(body) when the body may well need no externalizing, to spare the
    look at every value: most entries are short (under BLOB_MIN bytes in all, so none of
    their strings is a blob) and one C call tells (the caller does not ask when _scan
    found a large string: none is encoded for nothing). None when it cannot be written
    as it is (a NUL string, nesting deeper than MAX_DEPTH might be
    there, no JSON, bad Unicode): the full path then looks, and says what is wrong.
    A body of BLOB_MIN bytes or more is only used once _look finds nothing special.
    `seen` is what _scan found: with nothing _ODD or _SLOW, the values are of plain types
    only, which the fast encoder writes as the standard one does, and nested no deeper
    than MAX_DEPTH."""
    fast = None if seen & (_ODD | _SLOW) else fast_encoder()
    if fast is not None:
        try:
            out = fast(body)
        except TypeError:
            pass
        else:
            return None if b'"\\u0000' in out else out  # a string starting with NUL (below)
    try:
        text = _encode(body)
    except (ValueError, TypeError, RecursionError):
        return None
    # a string starting with NUL is written "\u0000...; every list and object opens with a
    # bracket (brackets inside strings only make this count larger: the full path checks),
    # which tells of nesting inside what _scan does not walk (_ODD: tuples, subclasses)
    if '"\\u0000' in text or (seen & _ODD and len(text) < BLOB_MIN and text.count("[") + text.count("{") > MAX_DEPTH + 1):
        return None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None


def _look(values: tuple) -> tuple[bool, int, int]:
    """(whether a string of `values` is BLOB_MIN characters long or starts with NUL,
    the number of lists and objects, the number of values in them), without recursion.
    It stops past MAX_ITEMS values (a value that holds itself never ends)."""
    special = False
    containers = items = 0
    stack = [values]
    pop, push = stack.pop, stack.append
    while stack:
        c = pop()
        containers += 1
        items += len(c)
        if items > MAX_ITEMS:
            break
        for x in c:
            t = type(x)
            if t is str:
                if len(x) >= BLOB_MIN or x[:1] == "\0":
                    special = True
            elif t is dict:
                push(x.values())
            elif t is list:
                push(x)
            elif t not in _SCALARS:  # subclasses: as externalize and the encoder see them
                if isinstance(x, str):
                    special = special or len(x) >= BLOB_MIN or x[:1] == "\0"
                elif isinstance(x, dict):
                    push(x.values())
                elif isinstance(x, (list, tuple)):
                    push(x)
    return special, containers, items


_SCALARS = frozenset((int, float, bool, type(None)))


def object_hash(type_: bytes, body: bytes) -> str:
    if len(body) < 65536:
        # one call on one buffer: blake3's constructor hashes 2-64 KiB 10-25% faster than
        # three updates do, and the copy is cheap at this size (above it, the copy is not)
        return blake3(type_ + b"\0" + body).hexdigest()
    h = blake3(type_)
    h.update(b"\0")
    h.update(body)
    return h.hexdigest()


_HASH = re.compile(r"[0-9a-f]{64}")


def is_hash(s: Any) -> bool:
    return type(s) is str and _HASH.fullmatch(s) is not None


def externalize(value: Any, put_blob: Callable[[bytes], str]) -> Any:
    """Replace large strings by blob references; put_blob stores the bytes and returns the hash.
    Recursive: the caller keeps values within MAX_DEPTH (entry_body checks first)."""
    if isinstance(value, str):
        if len(value) >= BLOB_MIN:
            return "\0b" + put_blob(_utf8(value))
        if value[:1] == "\0":
            return "\0" + value
        return value
    if isinstance(value, dict):
        return {k: externalize(v, put_blob) for k, v in value.items()}
    if isinstance(value, list):
        return [externalize(v, put_blob) for v in value]
    return value


def _externalized(value: Any, put_blob: Callable[[bytes], str]) -> Any:
    """externalize(value, put_blob), the same value and the same calls to put_blob in the
    same order, but the lists and objects that do not change are not copied (they are
    shared with `value`). Recursive, as externalize."""
    if isinstance(value, dict):
        out = None
        for k, v in value.items():
            t = type(v)
            w = _string(v, put_blob) if t is str else v if t in _SCALARS else _externalized(v, put_blob)
            if w is not v:
                if out is None:
                    out = dict(value)
                out[k] = w
        return value if out is None else out
    if isinstance(value, list):
        out = None
        for i, v in enumerate(value):
            t = type(v)
            w = _string(v, put_blob) if t is str else v if t in _SCALARS else _externalized(v, put_blob)
            if w is not v:
                if out is None:
                    out = list(value)
                out[i] = w
        return value if out is None else out
    if isinstance(value, str):
        return _string(value, put_blob)
    return value


def _string(s: str, put_blob: Callable[[bytes], str]) -> str:
    if len(s) >= BLOB_MIN:
        return "\0b" + put_blob(_utf8(s))
    if s[:1] == "\0":
        return "\0" + s
    return s


def internalize(value: Any, get_text: Callable[[str], str]) -> Any:
    """The inverse of externalize: blob references back into strings (get_text: the text of
    a blob by its hash, CorruptObject when it is not UTF-8). Recursive: entries read from
    disk are held to MAX_DEPTH first (schema.entry_body_problem)."""
    if isinstance(value, str):
        if value[:1] == "\0":
            if value[1:2] == "b" and len(value) == 66:
                h = value[2:]
                if _HASH.fullmatch(h) is None:
                    raise CorruptObject(f"a blob reference {h[:16]!r}... is not a hash; run `ctape fsck`")
                return get_text(h)
            return value[1:]
        return value
    if isinstance(value, dict):
        return {k: internalize(v, get_text) for k, v in value.items()}
    if isinstance(value, list):
        return [internalize(v, get_text) for v in value]
    return value


def blob_refs(value: Any, out: list[str]) -> list[str]:
    """Collect the blob hashes an externalized value refers to (iterative: any depth)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if v[:2] == "\0b" and len(v) == 66:
                out.append(v[2:])
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))
    return out


def _utf8(s: str) -> bytes:
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput("text is not valid Unicode (lone surrogate); send UTF-8") from None
