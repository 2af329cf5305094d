"""The inside of a pack block: many records compressed together, without hashes.

Content addressing puts 32 bytes of pure entropy into every entry (its parent's
hash) and every object record (its own name), and compression can do nothing
with them: on agent data they would be most of a compacted tape. Inside a pack
block they are not stored:

- an object is stored without its name (type 'o'); the name is its hash,
  computed again when the block is read;
- a reference to an object earlier in the same block -- an entry's parent, a
  blob reference, a hash in a ref record -- is written as its distance back, in
  objects: `"<64 hex>"` becomes `"#<d>"` and the blob reference `\\u0000b<64 hex>`
  becomes `\\u0000#<d>;` (codec POSITIONAL; the `;` ends the number, since what
  follows the hash may be a digit). A body that already holds `"#` or
  `\\u0000#` anywhere is stored as it is (codec PLAIN), so decoding is exact.

Reading a block rebuilds every record's canonical bytes in order, hashing each
object as it goes; callers see ordinary object records (with names) and ref
records. A reference to something outside the block keeps its full hash.

Records inside a block are framed lightly -- a type byte, the body length as a
LEB128 varint, the body -- with no checksums of their own: the block's frame
carries a CRC of the compressed bytes, the zstd frame a checksum of the content,
and every object is verified against its hash when read.
"""

from __future__ import annotations

import re
from typing import Iterable

from . import framing
from .canonical import object_hash
from .errors import CorruptObject

T_OBJ = framing.T_BLOCK_OBJECT  # type byte, codec byte, data
T_REF = framing.T_BLOCK_REF  # codec byte, data
PLAIN, POSITIONAL = 0, 3

_HASH = re.compile(rb'"([0-9a-f]{64})"|\\u0000b([0-9a-f]{64})')
_POS = re.compile(rb'"#(\d+)"|\\u0000#(\d+);')
_KIND = {ord("E"): b"entry", ord("B"): b"blob"}


def _encode(body: bytes, positions: dict[str, int], here: int) -> tuple[int, bytes]:
    if b'"#' in body or b"\\u0000#" in body:
        return PLAIN, body

    def sub(m: re.Match) -> bytes:
        h = (m.group(1) or m.group(2)).decode()
        p = positions.get(h)
        if p is None:
            return m.group(0)
        d = str(here - p).encode()
        return b'"#' + d + b'"' if m.group(1) else b"\\u0000#" + d + b";"

    out = _HASH.sub(sub, body)
    return (POSITIONAL, out) if out != body else (PLAIN, body)


def encode_block(items: list[tuple[int, bytes]]) -> bytes:
    """Frame (record type, canonical record body) items for a block; objects come as full
    object record bodies (hash, type, codec 0, canonical data).

    The result is decoded again and compared with the items before it is returned; if
    that ever differs, the block is stored without positional references."""
    raw = _encode_block(items, positional=True)
    if [(r.type, r.body) for r in decode_block(raw, "new block")] != list(items):
        raw = _encode_block(items, positional=False)
    return raw


def _encode_block(items: Iterable[tuple[int, bytes]], positional: bool) -> bytes:
    out: list[bytes] = []
    positions: dict[str, int] = {}
    n = 0
    for type_, body in items:
        if type_ == framing.T_OBJECT:
            h, kind, data = body[:32].hex(), body[32], body[34:]
            codec, data = _encode(data, positions, n) if kind == ord("E") and positional else (PLAIN, data)
            out.append(_inner(T_OBJ, bytes((kind, codec)) + data))
            positions[h] = n
            n += 1
        elif type_ == framing.T_REF:
            codec, data = _encode(body, positions, n) if positional else (PLAIN, body)
            out.append(_inner(T_REF, bytes((codec,)) + data))
        else:
            out.append(_inner(type_, body))
    return b"".join(out)


def _inner(type_: int, body: bytes) -> bytes:
    n, head = len(body), bytearray((type_,))
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            head.append(byte | 0x80)
        else:
            head.append(byte)
            return bytes(head) + body


def _inner_records(raw: bytes, bad) -> list[tuple[int, int, bytes]]:
    out, pos, size = [], 0, len(raw)
    while pos < size:
        start, type_ = pos, raw[pos]
        pos += 1
        n = shift = 0
        while True:
            if pos >= size or shift > 35:
                raise bad("a record inside the block is cut short")
            byte = raw[pos]
            pos += 1
            n |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if pos + n > size:
            raise bad("a record inside the block is cut short")
        out.append((start, type_, raw[pos : pos + n]))
        pos += n
    return out


def decode_block(raw: bytes, where: str) -> list[framing.Record]:
    """The records of a block as ordinary records: objects with their names, canonical refs."""
    names: list[str] = []
    out: list[framing.Record] = []

    def bad(why: str) -> CorruptObject:
        return CorruptObject(f"damaged {where}: {why}; run `ctape fsck`")

    def resolve(data: bytes) -> bytes:
        def sub(m: re.Match) -> bytes:
            d = int(m.group(1) or m.group(2))
            if not 0 < d <= len(names):
                raise bad("a reference points outside the block")
            h = names[-d].encode()
            return b'"' + h + b'"' if m.group(1) else b"\\u0000b" + h

        return _POS.sub(sub, data)

    for offset, type_, body in _inner_records(raw, bad):
        if type_ == T_OBJ:
            if len(body) < 2:
                raise bad("an object record is too short")
            kind, codec, data = body[0], body[1], body[2:]
            if kind not in _KIND or codec not in (PLAIN, POSITIONAL):
                raise bad("unknown object type or codec")
            if codec == POSITIONAL:
                data = resolve(data)
            h = object_hash(_KIND[kind], data)
            names.append(h)
            out.append(framing.Record(offset, framing.T_OBJECT, bytes.fromhex(h) + bytes((kind, 0)) + data))
        elif type_ == T_REF:
            if not body:
                raise bad("a ref record is empty")
            codec, data = body[0], body[1:]
            out.append(framing.Record(offset, framing.T_REF, resolve(data) if codec == POSITIONAL else data))
        elif type_ in (framing.T_PARTIAL, framing.T_OBJECT):
            out.append(framing.Record(offset, type_, body))
        else:
            raise bad(f"unknown record type {type_}")
    return out
