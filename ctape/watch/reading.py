"""Reading a source in a pass: its complete lines (`complete_lines`, `_Line`), a `.zst`
file unpacked into a temporary file, and the checks that the bytes before a position are
the ones imported (the file's ends, its prefix's digest; `_At`: the file opened there).
"""

from __future__ import annotations

import tempfile

from blake3 import blake3

from ..errors import InvalidInput
from ..formats import _common as c
from . import sources as src_mod
from .position import Position
from .sources import ID_BYTES, Source, digest


class _Line:
    """A complete line read in this pass."""

    __slots__ = ("number", "offset", "raw", "value", "ok", "pre")

    def __init__(self, number: int, offset: int, raw: bytes, pre: bytes = b""):
        self.number, self.offset, self.raw, self.pre = number, offset, raw, pre  # pre: blank lines before it
        try:
            self.value, self.ok = c.loads(raw), True
        except (ValueError, UnicodeDecodeError):
            self.value, self.ok = None, False

    @property
    def body(self) -> bytes:
        """The line without its end, as the importers keep a line that is not JSON (its
        bytes: one that is not UTF-8 either is kept whole, never decoded with losses)."""
        return self.raw.rstrip(b"\r\n")

    @property
    def end(self) -> int:
        return self.offset + len(self.raw)


def complete_lines(stream, offset: int, line: int, limit: int = src_mod.CHUNK, final: bool = False):
    """Lists of the non-blank complete lines after `offset`, about `limit` bytes at a time;
    blank lines are counted but not returned. A line still without its end after
    c.max_record() bytes is refused (InvalidInput): the buffer never holds more than that
    and one read. `final`: the stream is a whole file that no one appends to (a `.zst`
    rollout, compressed once it ended), so a last line without its end is complete, as
    `import` reads it; otherwise it waits for its end (a writer mid-line), and so it does
    in a compressed file cut inside a frame (its `cut`: still being written, or cut short)."""
    most = c.max_record()
    buf = bytearray()
    base, n = offset, line
    pre = b""
    while True:
        chunk = stream.read(limit)
        if not chunk:
            if final and not getattr(stream, "cut", False) and bytes(buf).strip():
                yield [_Line(n + 1, base, bytes(buf), pre)]
            return
        buf += chunk
        out, start = [], 0
        while True:
            i = buf.find(b"\n", start)
            if i < 0:
                break
            n += 1
            raw = bytes(buf[start : i + 1])
            if len(raw) - 1 > most:
                raise too_long(n, most)
            if raw.strip():
                out.append(_Line(n, base + start, raw, pre))
                pre = b""
            else:
                pre += raw
            start = i + 1
        del buf[:start]
        base += start
        if len(buf) > most:
            raise too_long(n + 1, most)
        if out:
            yield out


def too_long(number: int, most: int) -> InvalidInput:
    return InvalidInput(
        f"line {number} is longer than {most:,} bytes, the limit for one record (docs/import.md); "
        "the file is skipped (set CTAPE_MAX_RECORD to allow longer records)"
    )


def _unpacked(s: Source):
    """The decompressed content of a `.zst` source in a temporary file, refused (InvalidInput)
    once it passes reading.max_unpacked(): a zstd bomb fills neither the memory nor the
    disk. Returns (the file, whether the content ended inside a frame: reading.unpack)."""
    from ..formats.reading import unpack

    out = tempfile.TemporaryFile(prefix="ctape-watch-")
    try:
        cut = unpack(s.path, out, "the file is skipped", named=False)
        out.seek(0)
        return out, cut
    except BaseException:
        out.close()
        raise


def _read_exact(f, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        b = f.read(n - len(out))
        if not b:
            break
        out += b
    return bytes(out)


def _tail_of(s: Source, pos: Position) -> bytes:
    """The up to ID_BYTES bytes before pos.off, read from the file."""
    start = max(0, pos.off - ID_BYTES)
    with src_mod.open_stream(s.path) as f:
        if hasattr(f, "seek"):
            f.seek(start)
            return _read_exact(f, pos.off - start)
        return src_mod.skip(f, pos.off, start)


class _At:
    """A source opened at its position: the stream, the digest of the bytes before it, and
    whether those bytes were read and compared now (else only their ends)."""

    __slots__ = ("f", "hasher", "verified")

    def __init__(self, f, hasher, verified: bool):
        self.f, self.hasher, self.verified = f, hasher, verified


def _ends_match(f, pos: Position) -> bool:
    """The file's first `idn` bytes and the 4 KiB before pos.off are those the position saw;
    the stream is left at pos.off."""
    head = _read_exact(f, pos.idn)
    if digest(head) != pos.idh:
        return False
    tail_from = max(0, pos.off - ID_BYTES)
    if hasattr(f, "seek"):
        f.seek(tail_from)
        tail = _read_exact(f, pos.off - tail_from)
    else:
        kept = head[tail_from:] if tail_from < len(head) else b""
        tail = kept + src_mod.skip(f, pos.off - len(head), max(0, tail_from - len(head)))
    return len(tail) == pos.off - tail_from and digest(tail) == pos.th


def _prefix_digest(s: Source, n: int):
    """The digest of the file's first n bytes, read now (a Gemini CLI file is read whole anyway)."""
    h = blake3()
    with src_mod.open_stream(s.path) as f:
        while n > 0:
            b = f.read(min(src_mod.CHUNK, n))
            if not b:
                break
            h.update(b)
            n -= len(b)
    return h
