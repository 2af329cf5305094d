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
from typing import Any, Callable, Optional

from blake3 import blake3

from .errors import InvalidInput

ENTRY = b"entry"
BLOB = b"blob"
BLOB_MIN = 1024  # characters

_encoder = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> bytes:
    """The one byte form used for hashing and storing JSON values."""
    try:
        return _encoder.encode(value).encode("utf-8")
    except (ValueError, TypeError) as e:
        raise InvalidInput(f"value is not plain JSON ({e}); use strings, numbers, lists and objects") from None
    except UnicodeEncodeError:
        raise InvalidInput("text is not valid Unicode (lone surrogate); send UTF-8") from None


def entry_body(
    kind: str, payload: Any, meta: Any, delta: Any, parent: Optional[str], seq: int, time: str, put_blob: Callable[[bytes], str]
) -> bytes:
    """The canonical bytes of an entry: `canonical_json` of the body with its values
    externalized (docs/format.md, "The entry body").

    Most entries need no change: text shorter than a blob cannot hold a blob-sized
    string, and text without `\\u0000` holds no string that starts with NUL. Those are
    encoded once, without walking the values; the others (and payloads that plainly
    hold a large string) are walked first."""
    body = {"delta": delta, "kind": kind, "meta": meta, "parent": parent, "payload": payload, "seq": seq, "time": time}
    if not (isinstance(payload, dict) and any(isinstance(v, str) and len(v) >= BLOB_MIN for v in payload.values())):
        try:
            text = _encoder.encode(body)
        except (ValueError, TypeError) as e:
            raise InvalidInput(f"value is not plain JSON ({e}); use strings, numbers, lists and objects") from None
        if len(text) < BLOB_MIN + 2 and "\\u0000" not in text:
            return _utf8(text)
        del text  # it may be large
    body["delta"] = externalize(delta, put_blob)
    body["meta"] = externalize(meta, put_blob)
    body["payload"] = externalize(payload, put_blob)
    return canonical_json(body)


def object_hash(type_: bytes, body: bytes) -> str:
    h = blake3(type_)
    h.update(b"\0")
    h.update(body)
    return h.hexdigest()


def is_hash(s: str) -> bool:
    return len(s) == 64 and all(c in "0123456789abcdef" for c in s)


def externalize(value: Any, put_blob: Callable[[bytes], str]) -> Any:
    """Replace large strings by blob references; put_blob stores the bytes and returns the hash."""
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


def internalize(value: Any, get_blob: Callable[[str], bytes]) -> Any:
    """The inverse of externalize: fetch blob references back into strings."""
    if isinstance(value, str):
        if value[:1] == "\0":
            if value[1:2] == "b" and len(value) == 66:
                return get_blob(value[2:]).decode("utf-8")
            return value[1:]
        return value
    if isinstance(value, dict):
        return {k: internalize(v, get_blob) for k, v in value.items()}
    if isinstance(value, list):
        return [internalize(v, get_blob) for v in value]
    return value


def blob_refs(value: Any, out: list[str]) -> list[str]:
    """Collect the blob hashes an externalized value refers to."""
    if isinstance(value, str):
        if value[:2] == "\0b" and len(value) == 66:
            out.append(value[2:])
    elif isinstance(value, dict):
        for v in value.values():
            blob_refs(v, out)
    elif isinstance(value, list):
        for v in value:
            blob_refs(v, out)
    return out


def _utf8(s: str) -> bytes:
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput("text is not valid Unicode (lone surrogate); send UTF-8") from None
