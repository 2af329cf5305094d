"""What `ctape import` already did with a file: importing it again with nothing new costs
a read of the file, not a second import.

Before a Claude Code or Codex file is imported, one pass reads it whole (`prepass`): it
refuses a line longer than the record limit before anything is parsed or written, and
takes the digest of the bytes (blake3, about as fast as reading them). After the import,
the digest, the file's size, mtime and inode, and what the import made of it (the
session, the refs it asked for, the number of records) go to a cache file beside the
tape's index cache (`imports.json`).

The next import of the same path, with the same options, whose size, mtime, inode and
digest are those, into a tape that still holds every tip it asked for and whose refs
already hold them (`safe_refs` finds nothing to move), is "nothing new" without being
parsed: the import would find every entry there and move no ref. Anything else imports
as usual. The cache only saves work: losing it costs one full import, and it is never
trusted for what the tape says (the tips are looked up, the refs compared).
"""

from __future__ import annotations

import json
import os
from typing import Optional

from blake3 import blake3

from . import _common as c
from ..store.files import open_private
from .reading import real_path, too_long

VERSION = 1
MOST = 4096  # files remembered per tape (the oldest are forgotten first)
STEP = 8 << 20


class Read:
    """What the pre-pass found: the digest of the file's bytes and their number, and the
    file's identity when the pass began and ended (a file written to meanwhile is not
    remembered)."""

    def __init__(self, digest: str, size: int, stat: Optional[tuple]):
        self.digest, self.size, self.stat = digest, size, stat


def _stat(f) -> tuple:
    st = os.fstat(f.fileno())
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def prepass(path: str) -> Read:
    """Read the file once: its digest, and InvalidInput for a line longer than
    c.max_record() (as the line readers say it, before anything is parsed or written)."""
    limit = c.max_record()
    h = blake3()
    size = 0
    line, run = 1, 0  # the current line's number and its length so far
    with c.open_source(path) as f:
        before = _stat(f)
        while True:
            b = f.read(STEP)
            if not b:
                break
            h.update(b)
            size += len(b)
            start = 0
            while True:
                i = b.find(b"\n", start)
                if i < 0:
                    run += len(b) - start
                    if run > limit:
                        raise too_long(f, line, limit)
                    break
                if run + i - start > limit:
                    raise too_long(f, line, limit)
                line, run, start = line + 1, 0, i + 1
        after = _stat(f)
    return Read(h.hexdigest(), size, after if after == before and after[2] == size else None)


def _path(tape) -> Optional[str]:
    idx = getattr(tape.store.index, "path", ":memory:")
    return None if idx == ":memory:" else os.path.join(os.path.dirname(idx), "imports.json")


_known: dict[str, tuple[int, dict]] = {}  # cache file -> (its mtime when read, its files)
_updates: dict[str, dict] = {}  # cache file -> what this process remembered since it last wrote


def _entry(tape, key: str) -> Optional[dict]:
    """What is remembered for `key` in this tape's cache: this process's own, not written
    yet, else the cache file's (read again only when it changed)."""
    p = _path(tape)
    if p is None:
        return None
    mine = _updates.get(p, {}).get(key)
    if mine is not None:
        return mine
    try:
        mtime = os.stat(p).st_mtime_ns
    except OSError:
        return None
    known = _known.get(p)
    if known is None or known[0] != mtime:
        known = _known[p] = (mtime, _load_path(p))
    return known[1].get(key)


def _key(path: str, fmt: str, options: dict) -> str:
    return json.dumps([os.path.abspath(real_path(path)), fmt, options], sort_keys=True)


def lookup(tape, path: str, fmt: str, options: dict, read: Read) -> Optional[dict]:
    """What the last import of this file with these options made of it, when the file is
    the same bytes, the tape holds every tip it asked for and the refs already hold them
    (the import would change nothing); else None."""
    if read.stat is None:
        return None
    got = _entry(tape, _key(path, fmt, options))
    if not isinstance(got, dict) or got.get("digest") != read.digest or got.get("stat") != list(read.stat):
        return None
    name, refs = got.get("session"), got.get("refs")
    if not isinstance(name, str) or not isinstance(refs, dict) or not refs:
        return None
    if not all(isinstance(h, str) and tape.has_entry(h) for h in refs.values()):
        return None  # a tape restored from an older copy, or another tape with this cache
    s = tape.session(name)
    if not s.exists():
        return None
    changes, _ = c.safe_refs(tape, s, refs)
    return None if changes else got


def remember(tape, path: str, fmt: str, options: dict, read: Read, **made) -> None:
    """Keep what the import made of the file (made: session, refs, records, and what the
    format wants back), for `lookup`; written by `flush`. A file that changed while it was
    read is not kept."""
    p = _path(tape)
    if p is None or read.stat is None:
        return
    _updates.setdefault(p, {})[_key(path, fmt, options)] = {"digest": read.digest, "stat": list(read.stat), **made}


def flush() -> None:
    """Write what was remembered (once per `ctape import` command, not once per file): the
    cache file as it is now, with this process's entries over it, the oldest forgotten
    beyond MOST. Another process writing at the same time may lose its entries: a cache."""
    for p, mine in list(_updates.items()):
        _known.pop(p, None)
        files = {k: v for k, v in _load_path(p).items() if k not in mine}
        files.update(mine)
        while len(files) > MOST:
            files.pop(next(iter(files)))
        tmp = f"{p}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open_private(tmp) as f:
                json.dump({"version": VERSION, "files": files}, f)
            os.replace(tmp, p)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        _updates.pop(p, None)


def _load_path(p: str) -> dict:
    try:
        with open(p, "rb") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data["files"] if isinstance(data, dict) and data.get("version") == VERSION and isinstance(data.get("files"), dict) else {}
