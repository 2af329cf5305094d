"""Whether a zstd stream ends where a frame ends, told from its frame and block headers as
its bytes go by (RFC 8878, section 3.1).

python-zstandard's stream reader ends without an error where a file is cut inside a frame
(a copy stopped half way, a disk that filled, a rollout still being compressed): it gives
what it could decompress and then nothing, as at a true end. `Frames` follows the stream's
structure alone (no decompression: a few integer operations a block), so the readers can
tell a cut file from a whole one and say so (`reading.open_stream`).
"""

from __future__ import annotations

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

_MAGIC, _HEADER, _BLOCK, _SKIPPABLE, _BROKEN = range(5)
_DICT_ID_BYTES = (0, 1, 2, 4)
_CONTENT_SIZE_BYTES = (0, 2, 4, 8)  # (flag 0 with a single segment: 1 byte)


class Frames:
    """Feed it the compressed bytes in order; `whole` says whether they end between frames.
    Bytes that are not zstd make it give up (`whole` stays True): the decompressor says
    what is wrong with those."""

    __slots__ = ("state", "need", "field", "skip", "checksum")

    def __init__(self) -> None:
        self.state, self.need, self.field, self.skip, self.checksum = _MAGIC, 4, bytearray(), 0, False

    @property
    def whole(self) -> bool:
        return self.state == _BROKEN or (self.state == _MAGIC and not self.field and not self.skip)

    def feed(self, data: bytes) -> None:
        i, n = 0, len(data)
        while i < n and self.state != _BROKEN:
            if self.skip:
                k = min(self.skip, n - i)
                self.skip -= k
                i += k
                continue
            k = min(self.need - len(self.field), n - i)
            self.field += data[i : i + k]
            i += k
            if len(self.field) == self.need:
                field = bytes(self.field)
                self.field.clear()
                self._read(field)

    def _read(self, field: bytes) -> None:
        """A whole field of the state's: what comes next."""
        if self.state == _MAGIC:
            if field == ZSTD_MAGIC:
                self.state, self.need = _HEADER, 1
            elif field[1:] == b"\x2a\x4d\x18" and field[0] & 0xF0 == 0x50:  # a skippable frame
                self.state, self.need = _SKIPPABLE, 4
            else:
                self.state = _BROKEN
        elif self.state == _HEADER:
            d = field[0]
            single = bool(d & 0x20)
            self.checksum = bool(d & 0x04)
            size_bytes = _CONTENT_SIZE_BYTES[d >> 6] or (1 if single else 0)
            self.skip = (0 if single else 1) + _DICT_ID_BYTES[d & 3] + size_bytes
            self.state, self.need = _BLOCK, 3
        elif self.state == _BLOCK:
            h = int.from_bytes(field, "little")
            kind, size = (h >> 1) & 3, h >> 3
            if kind == 3:  # reserved: not zstd
                self.state = _BROKEN
                return
            self.skip = 1 if kind == 1 else size  # an RLE block holds one byte
            if h & 1:  # the frame's last block, then its checksum if it has one
                self.skip += 4 if self.checksum else 0
                self.state, self.need = _MAGIC, 4
        else:  # _SKIPPABLE: its size, then that many bytes
            self.skip = int.from_bytes(field, "little")
            self.state, self.need = _MAGIC, 4


class Followed:
    """A source whose bytes `frames` sees as they are read."""

    __slots__ = ("raw", "frames")

    def __init__(self, raw) -> None:
        self.raw, self.frames = raw, Frames()

    def read(self, n: int = -1) -> bytes:
        b = self.raw.read(n)
        self.frames.feed(b)
        return b

    def close(self) -> None:
        pass  # the file under it is closed by its owner
