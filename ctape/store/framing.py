"""Record framing for growing files (segments) and packs.

A record is a 10-byte header, a body and a 4-byte trailer:

    magic 0xCE | type (1 byte) | body length (u32 LE) | crc32 of the first 6 bytes (u32 LE)
    body
    crc32 of the body (u32 LE)

The header has its own checksum so that a flipped length byte reads as corruption,
not as a torn tail. Scanning tells three outcomes apart:

- a good record;
- a torn tail: the file ends inside a record, or the header is all zeros to the end of
  the file, or the last record ends in a run of at least 8 zero bytes (what a crash
  during a write leaves, when the file's size was updated before its data);
- corruption: a complete record whose checksum fails.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Iterator, Optional

MAGIC = 0xCE
HEADER = struct.Struct("<BBI")  # magic, type, length
HEADER_SIZE = HEADER.size + 4
TRAILER_SIZE = 4
_crc = struct.Struct("<I")

T_HEADER = ord("H")  # file header: JSON, first record of every file
T_OBJECT = ord("O")  # object: 32-byte hash, codec byte, data
T_REF = ord("R")  # ref record: canonical JSON
T_PARTIAL = ord("P")  # partial stream text: canonical JSON
T_BLOCK = ord("K")  # a zstd frame holding many records, compressed together (see packing.py)
T_DICT = ord("D")  # a compression dictionary for later blocks of the same file: a zstd frame
T_DICT_BLOCK = ord("Z")  # a block compressed with a dictionary earlier in the same file
T_BLOCK_OBJECT = ord("o")  # inside blocks only: an object stored without its name (see packing.py)
T_BLOCK_REF = ord("r")  # inside blocks only: a ref record with positional references
RECORD_TYPES = {T_HEADER, T_OBJECT, T_REF, T_PARTIAL, T_BLOCK, T_DICT, T_DICT_BLOCK, T_BLOCK_OBJECT, T_BLOCK_REF}
BLOCK_TYPES = (T_BLOCK, T_DICT_BLOCK)


def frame(type_: int, body: bytes) -> bytes:
    head = HEADER.pack(MAGIC, type_, len(body))
    return b"".join((head, _crc.pack(zlib.crc32(head)), body, _crc.pack(zlib.crc32(body))))


@dataclass
class Record:
    offset: int
    type: int
    body: bytes

    @property
    def end(self) -> int:
        return self.offset + HEADER_SIZE + len(self.body) + TRAILER_SIZE


@dataclass
class Damage:
    offset: int
    torn: bool  # True: an unfinished write at the end; False: corruption
    reason: str


def parse_header(buf: bytes) -> Optional[tuple[int, int]]:
    """(type, length) if the 10 bytes are a valid header, else None."""
    magic, type_, length = HEADER.unpack_from(buf, 0)
    if magic != MAGIC or _crc.unpack_from(buf, 6)[0] != zlib.crc32(buf[:6]) or type_ not in RECORD_TYPES:
        return None
    return type_, length


def scan(data: bytes, start: int = 0) -> Iterator[Record | Damage]:
    """Yield every record from `start`, and Damage where the bytes are not a record.

    After corruption the scan looks for the next valid header and goes on, so one
    bad record never hides the good ones after it.
    """
    pos, size = start, len(data)
    while pos < size:
        if size - pos < HEADER_SIZE:
            yield Damage(pos, True, "file ends inside a record header")
            return
        parsed = parse_header(data[pos : pos + HEADER_SIZE])
        if parsed is None:
            if not any(data[pos:]):
                yield Damage(pos, True, "zero-filled tail")
                return
            nxt = _resync(data, pos + 1)
            yield Damage(pos, False, "bad record header")
            if nxt is None:
                return
            pos = nxt
            continue
        type_, length = parsed
        end = pos + HEADER_SIZE + length + TRAILER_SIZE
        if end > size:
            yield Damage(pos, True, "file ends inside a record")
            return
        body = data[pos + HEADER_SIZE : pos + HEADER_SIZE + length]
        if _crc.unpack_from(data, end - TRAILER_SIZE)[0] != zlib.crc32(body):
            if end == size and _zero_tail(data, pos + HEADER_SIZE, end):
                yield Damage(pos, True, "record cut short (zero-filled)")
                return
            yield Damage(pos, False, "record checksum mismatch")
            pos = end
            continue
        yield Record(pos, type_, body)
        pos = end


def _zero_tail(data: bytes, start: int, end: int) -> bool:
    """True when the record's bytes end in a run of zeros reaching the end of the file."""
    tail = data[start:end]
    stripped = tail.rstrip(b"\0")
    return len(tail) - len(stripped) >= 8


def _resync(data: bytes, pos: int) -> Optional[int]:
    magic = bytes([MAGIC])
    while True:
        pos = data.find(magic, pos)
        if pos < 0 or len(data) - pos < HEADER_SIZE:
            return None
        if parse_header(data[pos : pos + HEADER_SIZE]) is not None:
            return pos
        pos += 1
