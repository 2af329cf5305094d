"""Where transcripts are, what format each one is, and reading a file from an offset.

Default sources: Claude Code's `$CLAUDE_CONFIG_DIR/projects/**/*.jsonl` (else
`~/.claude`), subagent files included, Codex's `$CODEX_HOME/sessions/**/rollout-*.jsonl`
and `.jsonl.zst` (else `~/.codex`), and Gemini CLI's
`$GEMINI_CLI_HOME/.gemini/tmp/*/chats/session-*.json` and `.jsonl` (else `~`), subagent
files `chats/<session>/*.jsonl` included. A PATH given on the command line is a file (any name; a
Claude Code session file `X.jsonl` brings its subagents `X/subagents/*.jsonl`) or a folder (its `*.jsonl`, `*.jsonl.zst`, `*.traj` and `session-*.json` files, recursively); its format is
detected from its first records.

A source is known by its *key*: its absolute path without a trailing `.zst`, so a rollout
that Codex compresses (`x.jsonl` -> `x.jsonl.zst`) stays the same source.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from typing import Iterator, Optional

from blake3 import blake3

from ..errors import InvalidInput
from ..formats.reading import CHUNK, ZST, _Closing, _zstd_reader

ID_BYTES = 4096  # how many bytes at the start (and before the position) identify a file's content


@dataclass(frozen=True)
class Source:
    path: str  # absolute
    fmt: Optional[str]  # "claude-code", "codex", "gemini", or None: detect from the content
    named: bool = False  # given on the command line (not found in a folder)

    @property
    def key(self) -> str:
        return source_key(self.path)

    @property
    def zst(self) -> bool:
        return self.path.endswith(ZST)


def source_key(path: str) -> str:
    path = os.path.abspath(path)
    return path[: -len(ZST)] if path.endswith(ZST) else path


def claude_root() -> str:
    base = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")
    return os.path.join(base, "projects")


def codex_root() -> str:
    base = os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")
    return os.path.join(base, "sessions")


def gemini_root() -> str:
    from ..formats.gemini import chats_root

    return chats_root()


def default_roots() -> list[tuple[str, str]]:
    """(folder, format) of the agents' own history folders."""
    return [(claude_root(), "claude-code"), (codex_root(), "codex"), (gemini_root(), "gemini")]


def _gemini_session(root: str, name: str) -> bool:
    """A Gemini CLI chat file: `<project>/chats/session-*.json` or `.jsonl`, or a subagent's
    `<project>/chats/<parent session>/<id>.jsonl`."""
    parent = os.path.basename(root)
    if parent == "chats":
        return name.startswith("session-") and (name.endswith(".json") or name.endswith(".jsonl"))
    return os.path.basename(os.path.dirname(root)) == "chats" and name.endswith(".jsonl")


def _wanted(root: str, name: str, fmt: Optional[str]) -> bool:
    if fmt == "codex":
        return name.startswith("rollout-") and (name.endswith(".jsonl") or name.endswith(".jsonl" + ZST))
    if fmt == "claude-code":
        return name.endswith(".jsonl")
    if fmt == "gemini":
        return _gemini_session(root, name)
    return name.endswith(".jsonl") or name.endswith(".jsonl" + ZST) or name.endswith(".traj") or (name.startswith("session-") and name.endswith(".json"))


def walk(folder: str, fmt: Optional[str]) -> Iterator[Source]:
    """Transcript files under a folder (symlinked folders are not followed)."""
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            if _wanted(root, name, fmt):
                yield Source(os.path.join(root, name), fmt)


def discover(paths: list[str], roots: Optional[list[tuple[str, str]]] = None) -> list[Source]:
    """Every source to watch: the PATHs given (files or folders), else the default roots.
    When both `x.jsonl` and `x.jsonl.zst` exist (Codex is compressing it), the plain one counts."""
    found: dict[str, Source] = {}
    if paths:
        todo = []
        for p in paths:
            p = os.path.abspath(p)
            if os.path.isdir(p):
                todo.extend(walk(p, None))
            else:
                todo.append(Source(p, None, named=True))
                # a Claude Code session file brings its subagents (2.1.x layout), as import does
                sub = os.path.join(os.path.splitext(p)[0], "subagents")
                if p.endswith(".jsonl") and os.path.isdir(sub):
                    todo.extend(walk(sub, "claude-code"))
    else:
        todo = [s for root, fmt in (roots or default_roots()) if os.path.isdir(root) for s in walk(os.path.abspath(root), fmt)]
    for s in todo:
        old = found.get(s.key)
        if old is None or (old.zst and not s.zst):
            found[s.key] = s
    return list(found.values())


def check_paths(paths: list[str]) -> None:
    """Refuse a PATH that does not exist (before anything is written)."""
    from ..errors import InvalidInput

    for p in paths:
        if not os.path.exists(p):
            raise InvalidInput(f"no file or folder {p if p.strip() == p and p else repr(p)}; give transcript files or folders that exist")


def detect(first_lines: list[bytes], path: Optional[str] = None) -> Optional[str]:
    """The format of a file from its first complete lines (the rule of `ctape import FILE`,
    formats/detect.py, applied to the first record that tells); None while none does yet.
    A JSON document over several lines is read whole to tell (a Gemini CLI session, a
    `.traj`, a list of messages), as import does; when the file is not one (yet), its lines
    are judged one by one, so a transcript whose first line is cut or garbage is found by
    the lines after it."""
    from ..formats.detect import _format_of

    for raw in first_lines:
        if not raw.strip():
            continue
        try:
            v = json.loads(raw)
        except (ValueError, RecursionError):
            if raw.lstrip()[:1] in (b"{", b"["):
                if path is not None:
                    from ..formats.detect import NotJSON, detect as detect_file

                    try:
                        return detect_file(path)
                    except NotJSON:
                        return None  # not whole JSON (yet): a tool may be writing it again
                return "openai"  # a JSON document over several lines (.traj, a list of messages)
            continue
        fmt = _format_of(v)
        if fmt is not None:
            return fmt
    return None


def ends_a_line(path: str) -> bool:
    """Whether the file's last byte ends a line (nothing is being written after its
    lines), or it is compressed (a `.zst` is written whole)."""
    if path.endswith(ZST):
        return True
    from ..formats._common import ends_with_newline

    try:
        with open_regular(path) as f:  # (never a FIFO: a writer would be waited for)
            return ends_with_newline(f)
    except OSError:
        return False


def judged(first_lines: list[bytes]) -> bool:
    """Whether lines that `detect` found no format in say the file is no transcript, rather
    than that it cannot tell yet: it cannot while every line so far opens a bracket but is
    no JSON (a JSON document being written, or a record cut or garbled at the start of a
    transcript: the lines after it tell), and there are fewer than `ctape import` looks at."""
    from ..formats.detect import LINES

    text = [raw for raw in first_lines if raw.strip()]
    if len(text) >= LINES:
        return True
    for raw in text:
        if raw.lstrip()[:1] not in (b"{", b"["):
            return True
        try:
            json.loads(raw)
            return True
        except RecursionError:
            return True  # JSON nested past what can be read: no transcript record
        except ValueError:
            continue
    return False


# -- reading ----------------------------------------------------------------------------------


class NotRegular(InvalidInput):
    """A source that is no regular file: a FIFO (opening one waits for a writer, forever),
    a socket, a device or a folder. It is skipped, never opened for reading."""


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISDIR, "a folder"))


def check_regular(st: os.stat_result) -> None:
    """Refuse (NotRegular) what is not a regular file."""
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "a special file")
        raise NotRegular(f"not a regular file ({kind}); skipped")


def open_regular(path: str):
    """The file opened for reading, refused (NotRegular) unless it is a regular file. The
    check is made on the open file (fstat), not on the name, so a FIFO put in its place
    meanwhile is refused too; and the open itself does not wait (O_NONBLOCK), where a
    FIFO without a writer would block it, signals included."""
    check_regular(os.stat(path))  # a device is refused before it is even opened
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        check_regular(os.fstat(fd))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_stream(path: str):
    """A binary stream of a regular file's (decompressed) content (NotRegular otherwise)."""
    f = open_regular(path)
    if not path.endswith(ZST):
        return f
    return _Closing(_zstd_reader(f), f)


def skip(stream, offset: int, keep_from: int = -1) -> bytes:
    """Read the stream up to `offset`; returns the bytes from `keep_from` on (for the tail check)."""
    kept = bytearray()
    pos = 0
    if hasattr(stream, "seek"):
        start = max(0, keep_from) if keep_from >= 0 else offset
        stream.seek(start)
        pos = start
    while pos < offset:
        b = stream.read(min(CHUNK, offset - pos))
        if not b:
            break
        if keep_from >= 0 and pos + len(b) > keep_from:
            kept += b[max(0, keep_from - pos):]
        pos += len(b)
    return bytes(kept)


def digest(data: bytes) -> str:
    return blake3(data).hexdigest()[:32]


def first_line_longer_than(path: str, most: int) -> bool:
    """Whether the (decompressed) file holds more than `most` bytes before its first line end."""
    seen = 0
    with open_stream(path) as s:
        while seen <= most:
            b = s.read(min(CHUNK, most + 1 - seen))
            if not b:
                return False
            i = b.find(b"\n")
            if i >= 0:
                return seen + i > most
            seen += len(b)
    return True


def head_of(path: str, n: int) -> bytes:
    with open_stream(path) as s:
        out = bytearray()
        while len(out) < n:
            b = s.read(n - len(out))
            if not b:
                break
            out += b
        return bytes(out)
