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
from typing import Iterable, Iterator, Optional

from . import framing
from ..model.canonical import object_hash
from ..model.errors import CorruptObject

T_OBJ = framing.T_BLOCK_OBJECT  # type byte, codec byte, data
T_REF = framing.T_BLOCK_REF  # codec byte, data
PLAIN, POSITIONAL = 0, 3

_HASH = re.compile(rb'"([0-9a-f]{64})"|\\u0000b([0-9a-f]{64})')
_POS = re.compile(rb'"#(\d+)"|\\u0000#(\d+);')
_KIND = {ord("E"): b"entry", ord("B"): b"blob"}
_ENTRY = ord("E")
_OBJ_START, _REF_START = bytes((T_OBJ,)), bytes((T_REF,))
_TAGS = {(kind, codec): bytes((kind, codec)) for kind in _KIND for codec in (PLAIN, POSITIONAL)}  # an object's type and codec bytes


def _encode(body: bytes, names: list[str], positions: dict[str, int], refs: Optional[Iterable[str]] = None, start: int = 0) -> tuple[int, bytes]:
    """body[start:] with references to earlier objects of the block as distances.

    `refs`, when the caller knows them, are the hashes the body refers to (an entry's
    parent and blobs, the entries a ref record names): their places are then found
    with a plain search (see _encode_known). Otherwise every quoted hash is looked
    up, and the result is kept only if it decodes back to exactly the body. The
    record's bytes before `start` (an object record's name and type) are not part of
    it; a body stored as it is comes back as a view of them, not a copy."""
    if not positions or body.find(b'"#', start) >= 0 or body.find(b"\\u0000#", start) >= 0:
        return PLAIN, memoryview(body)[start:]
    if refs is not None:
        out = _encode_known(body, start, refs, len(names), positions)
        if out is not None:
            return (PLAIN, memoryview(body)[start:]) if out is body else (POSITIONAL, out)
    here = len(names)
    body = body[start:]

    def sub(m: re.Match) -> bytes:
        h = (m.group(1) or m.group(2)).decode()
        p = positions.get(h)
        if p is None:
            return m.group(0)
        d = str(here - p).encode()
        return b'"#' + d + b'"' if m.group(1) else b"\\u0000#" + d + b";"

    out = _HASH.sub(sub, body)
    if out == body or _resolve(out, names, _never) != body:
        return PLAIN, body
    return POSITIONAL, out


def _encode_known(body: bytes, start: int, refs: Iterable[str], here: int, positions: dict[str, int]) -> Optional[bytes]:
    """body[start:] with the first place where each known reference to an earlier object
    of the block stands -- `"<hash>"` or `\\u0000b<hash>` -- replaced by its distance;
    None when two of them overlap (the caller then takes the general way), `body`
    itself when none is there. One search per reference: for its 64 hex digits, then a
    look at the bytes around them.

    Decoding gives back exactly the body, without checking: the body holds no `"#` and
    no `\\u0000#` (the caller made sure), so after the replacement the only places
    where the decoder finds a reference start are the replaced ones. A replacement
    starts with `"` or `\\` where the original had the same byte; what follows it
    is the original's next byte, and a `"` followed by `#` would have been a `"#` in
    the body already; and a replaced span never shares bytes with another."""
    spans = []
    for h in set(refs):
        p = positions.get(h)
        if p is None:
            continue
        hx = h.encode()
        i = body.find(hx, start)
        while i >= 0:
            if i > start and body[i - 1] == 0x22 and body[i + 64 : i + 65] == b'"':
                spans.append((i - 1, i + 65, b'"#%d"' % (here - p)))
                break
            if i - 7 >= start and body[i - 7 : i] == b"\\u0000b":
                spans.append((i - 7, i + 64, b"\\u0000#%d;" % (here - p)))
                break
            i = body.find(hx, i + 1)
    if not spans:
        return body
    spans.sort()
    out, pos = [], start
    for begin, end, short in spans:
        if begin < pos:
            return None
        out += (body[pos:begin], short)
        pos = end
    out.append(body[pos:])
    return b"".join(out)


def _resolve(data: bytes, names: list[str], bad) -> bytes:
    """Positional references back to hashes; `names` are the block's objects so far."""

    def sub(m: re.Match) -> bytes:
        d = int(m.group(1) or m.group(2))
        if not 0 < d <= len(names):
            raise bad("a reference points outside the block")
        h = names[-d].encode()
        return b'"' + h + b'"' if m.group(1) else b"\\u0000b" + h

    return _POS.sub(sub, data)


def _never(why: str) -> Exception:
    return AssertionError(why)  # encoding only writes distances that exist


def encode_block(items: Iterable[tuple]) -> bytes:
    """Frame (record type, canonical record body[, hashes it refers to]) items for a block;
    objects come as full object record bodies (hash, type, codec 0, canonical data), or as
    (name, type, canonical data) tuples (the writer's form: no bytes joined to be split)."""
    out: list = []  # pieces joined once at the end (a blob's bytes are not copied before)
    names: list[str] = []
    positions: dict[str, int] = {}
    for item in items:
        type_, body, refs = item if len(item) == 3 else (*item, None)
        if type_ == framing.T_OBJECT:
            if type(body) is tuple:
                h, kind, body = body
                start = 0
            else:
                h, kind, start = body[:32].hex(), body[32], 34
            if kind == _ENTRY:
                codec, data = _encode(body, names, positions, refs, start=start)
            else:
                codec, data = PLAIN, memoryview(body)[start:]
            out += (_OBJ_START, _varint(len(data) + 2), _TAGS[kind, codec] if kind in _KIND else bytes((kind, codec)), data)
            positions[h] = len(names)
            names.append(h)
        elif type_ == framing.T_REF:
            codec, data = _encode(body, names, positions, refs)
            out += (_REF_START, _varint(len(data) + 1), bytes((codec,)), data)
        else:
            out.append(_inner(type_, body))
    return b"".join(out)


def _varint(n: int) -> bytes:
    """LEB128: seven bits a byte, low bits first, the high bit set on all but the last."""
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(raw: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it), or (-1, pos) when the bytes end first or it runs too long."""
    n = shift = 0
    size = len(raw)
    while True:
        if pos >= size or shift > 35:
            return -1, pos
        byte = raw[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, pos


def _inner(type_: int, body: bytes) -> bytes:
    return bytes((type_,)) + _varint(len(body)) + body


def _inner_records(raw: bytes, bad) -> Iterator[tuple[int, int, bytes]]:
    pos, size = 0, len(raw)
    while pos < size:
        start, type_ = pos, raw[pos]
        n, pos = _read_varint(raw, pos + 1)
        if n < 0 or pos + n > size:
            raise bad("a record inside the block is cut short")
        yield start, type_, raw[pos : pos + n]
        pos += n


# -- blocks compressed with a dictionary ------------------------------------------------------
#
# A durable append is one small block, and a small block compressed alone keeps most of
# its size. So a writer puts a dictionary record (`D`: a zstd frame of recent raw block
# bytes) into its segment now and then, and compresses the small blocks after it with
# that dictionary (`Z`). The `Z` body starts with the distance back, in bytes, from the
# start of the `Z` record to the start of its `D` record, which is always in the same file.


def dict_block_body(distance: int, frame: bytes) -> bytes:
    return _varint(distance) + frame


def split_dict_block(body: bytes) -> tuple[int, bytes]:
    """(distance back to the dictionary record, the zstd frame); distance -1 if unreadable."""
    distance, pos = _read_varint(body, 0)
    return distance, body[pos:]


def decode_block(raw: bytes, where: str, refs: bool = True) -> list[framing.Record]:
    """The records of a block as ordinary records: objects with their names, canonical refs
    (left out with `refs=False`: a reader of objects need not rewrite an import's ref
    record of 300,000 branches)."""
    out: list[framing.Record] = []
    _decode_into(out, raw, where, refs)
    return out


def objects_before_damage(raw: bytes) -> list[framing.Record]:
    """The objects of a damaged block's decompressed bytes, up to the first record that
    does not decode: salvage's candidates (docs/format.md section 15). Names are computed
    from the bytes, not stored, so an object the damage changed comes out under a name
    of its own; the caller keeps only those whose names something intact vouches for."""
    out: list[framing.Record] = []
    try:
        _decode_into(out, raw, "damaged block", refs=False)
    except CorruptObject:
        pass
    return [rec for rec in out if rec.type == framing.T_OBJECT]


def _decode_into(out: list, raw: bytes, where: str, refs: bool) -> None:
    """decode_block's work, each record added to `out` as it is decoded."""
    names: list[str] = []

    def bad(why: str) -> CorruptObject:
        return CorruptObject(f"damaged {where}: {why}; run `ctape fsck`")

    for offset, type_, body in _inner_records(raw, bad):
        if type_ == T_OBJ:
            if len(body) < 2:
                raise bad("an object record is too short")
            kind, codec, data = body[0], body[1], body[2:]
            if kind not in _KIND or codec not in (PLAIN, POSITIONAL):
                raise bad("unknown object type or codec")
            if codec == POSITIONAL:
                data = _resolve(data, names, bad)
            h = object_hash(_KIND[kind], data)
            names.append(h)
            out.append(framing.Record(offset, framing.T_OBJECT, bytes.fromhex(h) + bytes((kind, 0)) + data))
        elif type_ == T_REF:
            if not refs:
                continue
            if not body:
                raise bad("a ref record is empty")
            codec, data = body[0], body[1:]
            out.append(framing.Record(offset, framing.T_REF, _resolve(data, names, bad) if codec == POSITIONAL else data))
        elif type_ == framing.T_PARTIAL:
            out.append(framing.Record(offset, type_, body))
        else:
            raise bad(f"unknown record type {type_}")
