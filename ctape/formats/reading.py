"""Reading a transcript wherever it is: a plain file, a `.zst` file, a pipe or stdin.

`ctape import` and `ctape watch` read through these, so both take the same inputs:

- `open_stream(path)`: the (decompressed) content as a binary stream, read front to back;
- `spooled(path)`: a name the importers can open and seek: the path itself for a
  regular file, else a private temporary copy of the content (a `.zst` file
  decompressed; `-`, `/dev/stdin`, a pipe read once). The copy is refused once it
  passes `max_unpacked()` bytes, so a zstd bomb or an endless pipe fills neither the
  memory nor the disk. Stdin can be read only once: the format is detected on the copy.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from contextlib import contextmanager
from typing import Iterator, Optional

from ..errors import InvalidInput
from ..model.canonical import max_record
from .frames import ZSTD_MAGIC, Followed  # (ZSTD_MAGIC: the first bytes of a zstd frame)


def cannot_read(path: str, e: OSError) -> InvalidInput:
    """The one line for a transcript that cannot be opened or read: what is wrong with the
    path, and what to do."""
    shown = repr(path) if not path or path != path.strip() else path
    hint = {errno.ENOENT: "no such file; check the path", errno.EACCES: "permission denied; check its permissions",
            errno.EISDIR: "it is a folder; give the transcript files in it", errno.ENOTDIR: "a part of the path is not a folder; check the path",
            errno.ELOOP: "too many symlinks; check the path"}.get(e.errno, e.strerror or str(e))
    return InvalidInput(f"cannot read {shown}: {hint}")

ZST = ".zst"
STDIN = "-"
CHUNK = 8 << 20  # bytes read at a time


def max_unpacked() -> int:
    """The most a compressed or piped transcript may hold: 4 x max_record() (1 GiB by
    default), the size of transcript import and watch promise to read in under 1 GB of
    memory (SPEC 11)."""
    return 4 * max_record()


class SourceName(str):
    """The name of a transcript as the user gave it (messages and session names use it),
    with `.real`: the file that holds its content (a temporary copy, for a pipe or a
    `.zst` file) and `.cut`: the content was compressed and ended inside a frame."""

    real: str
    cut: bool

    def __new__(cls, shown: str, real: str, cut: bool = False):
        self = super().__new__(cls, shown)
        self.real, self.cut = real, cut
        return self


def is_stdin(path: str) -> bool:
    """True for the name spooled gives stdin (`-`, `/dev/stdin`): it names no file, so no
    session can be named after it (a file called `stdin` is a plain str, not this)."""
    return isinstance(path, SourceName) and str(path) in ("stdin", "/dev/stdin")


def real_path(path: str) -> str:
    """The file to open for a name: its temporary copy when it has one."""
    return getattr(path, "real", path)


def display_stem(path: str) -> str:
    """The file name without its directory, `.zst` and last extension (a session name's source)."""
    base = os.path.basename(str(path))
    if base.endswith(ZST):
        base = base[: -len(ZST)]
    return os.path.splitext(base)[0]


def open_stream(path: str):
    """A binary stream of the file's (decompressed) content; `-` is stdin. Stdin and pipes
    are decompressed when they start with zstd's magic number (`ctape import - <
    rollout.jsonl.zst`): no transcript starts so, as those bytes are not UTF-8."""
    if path == STDIN:
        return _sniffed(sys.stdin.buffer, None)
    f = open(real_path(path), "rb")
    if hasattr(path, "real"):
        return f
    if str(path).endswith(ZST):
        return _Closing(_zstd_reader(f), f)
    try:
        regular = stat.S_ISREG(os.fstat(f.fileno()).st_mode)
    except OSError:
        regular = True
    return f if regular else _sniffed(f, f)


def _zstd_reader(source) -> "_Unzstd":
    return _Unzstd(source)


class _Unzstd:
    """The decompressed content of a zstd stream, read front to back. Once it is read to
    its end, `cut` says whether the stream ended inside a frame (frames.Frames): the
    decompressor ends there as at a true end, with what it could decompress."""

    def __init__(self, source):
        import zstandard

        self.source = Followed(source)
        self.reader = zstandard.ZstdDecompressor().stream_reader(self.source, read_across_frames=True)

    @property
    def cut(self) -> bool:
        return not self.source.frames.whole

    def read(self, n: int = -1) -> bytes:
        return self.reader.read(n)

    def close(self) -> None:
        self.reader.close()


def _sniffed(raw, f) -> "_Closing":
    """`raw` read front to back, decompressed if it starts with zstd's magic number."""
    head = raw.read(len(ZSTD_MAGIC))
    source = _Prefixed(head, raw, ended=len(head) < len(ZSTD_MAGIC))
    return _Closing(_zstd_reader(source) if head == ZSTD_MAGIC else source, f)


class _Prefixed:
    """The bytes already read from a stream, then the rest of it, up to its first end: a
    terminal gives an end for each Ctrl-D, and a read after one waits for another (`import
    -` took three Ctrl-D where its prompt says one; found by an audit)."""

    def __init__(self, head: bytes, rest, ended: bool = False):
        self.head, self.rest, self.ended = head, rest, ended
        try:
            self.tty = rest.isatty()  # (its reads end at a line, or at a Ctrl-D: one read each)
        except (AttributeError, ValueError, OSError):
            self.tty = False

    def read(self, n: int = -1) -> bytes:
        if self.head:
            out = self.head if n < 0 or n >= len(self.head) else self.head[:n]
            self.head = self.head[len(out):]
            return out
        if self.ended or n == 0:
            return b""
        out = self.rest.read1(n if n > 0 else CHUNK) if self.tty else self.rest.read(n)
        self.ended = not out
        return out

    def close(self) -> None:
        pass  # the file under it is closed by its owner (_Closing)


class _Closing:
    """A read-only stream that closes its file too; `cut`: a compressed one read to its
    end ended inside a frame (_Unzstd)."""

    def __init__(self, reader, f):
        self.reader, self.f = reader, f

    @property
    def cut(self) -> bool:
        return getattr(self.reader, "cut", False)

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            out = bytearray()
            while True:
                b = self.reader.read(CHUNK)
                if not b:
                    return bytes(out)
                out += b
        return self.reader.read(n)

    def close(self) -> None:
        if self.f is not None:
            self.reader.close()
            self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def needs_copy(path: str) -> bool:
    """True for what cannot be read twice or at an offset: stdin, a pipe, a device, a `.zst` file."""
    if path == STDIN or str(path).endswith(ZST):
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False  # opening it says what is wrong


def unpack(path: str, out, then: str = "nothing was imported", named: bool = True) -> bool:
    """Copy the content of `path` into the binary file `out`; refused (InvalidInput) once
    it passes max_unpacked() (the message ends with `then`; `named`: it starts with the
    path). Returns whether the content was compressed and cut inside a frame (_Unzstd)."""
    most = max_unpacked()
    lines = _LineCheck(path)
    size = 0
    try:
        stream = open_stream(path)
    except OSError as e:
        raise cannot_read(path, e) from None
    with stream as z:
        while True:
            try:
                b = z.read(CHUNK)
            except OSError as e:
                raise cannot_read(path, e) from None
            except Exception as e:  # zstandard.ZstdError: not zstd, or damaged
                raise InvalidInput(f"cannot read {path}: not a zstd file ({e}); give the file as it is, not compressed") from None
            if not b:
                return getattr(z, "cut", False)
            lines.feed(b)
            size += len(b)
            if size > most:
                what = "decompresses to" if str(path).endswith(ZST) else "holds"
                raise InvalidInput(
                    (f"{path}: " if named else "") + f"{what} more than {most:,} bytes, the limit for a compressed "
                    f"transcript (4 x CTAPE_MAX_RECORD, docs/import.md); {then}"
                )
            out.write(b)


class _LineCheck:
    """Refuses a line longer than max_record() while a copy is made, as the importers do
    when they read a file (an endless line on stdin stops there, not at the copy's limit)."""

    def __init__(self, path: str):
        self.path, self.limit = "stdin" if path == STDIN else path, max_record()  # named as the importers name it
        self.number, self.run = 1, 0

    def feed(self, b: bytes) -> None:
        start = 0
        while True:
            i = b.find(b"\n", start)
            if i < 0:
                self.run += len(b) - start
                if self.run > self.limit:
                    self._refuse()
                return
            if self.run + i - start > self.limit:
                self._refuse()
            self.run = 0
            self.number += 1
            start = i + 1

    def _refuse(self):
        class _Named:
            name = self.path

        raise too_long(_Named, self.number, self.limit)


def too_long(f, line: Optional[int], limit: int) -> InvalidInput:
    """The error for a record (a line of file `f`, or its whole content) past `limit` bytes."""
    where = f"{getattr(f, 'name', 'input')}" + (f": line {line}" if line else "")
    return InvalidInput(
        f"{where} is longer than {limit:,} bytes, the limit for one record (docs/import.md); "
        "is this a transcript? Set CTAPE_MAX_RECORD to allow longer records"
    )


@contextmanager
def spooled(paths: list[str]) -> Iterator[list[str]]:
    """The paths, each readable and seekable: stdin, pipes and `.zst` files are copied
    once into private temporary files (removed at the end); the names stay as given."""
    tmp = None
    out: list[str] = []
    try:
        for p in paths:
            if not needs_copy(p):
                out.append(p)
                continue
            if tmp is None:
                tmp = tempfile.mkdtemp(prefix="ctape-import-")
            real = os.path.join(tmp, str(len(out)))
            with open(real, "wb") as f:
                os.chmod(real, 0o600)  # transcripts hold secrets
                cut = unpack(p, f)
            out.append(SourceName("stdin" if p == STDIN else p, real, cut))
        yield out
    finally:
        if tmp is not None:
            for name in os.listdir(tmp):
                os.unlink(os.path.join(tmp, name))
            os.rmdir(tmp)
