"""Where `ctape watch` is in each source file, and where that is kept.

The truth is in the tape: every watch import ends with a ref record (written in the same
block as its entries, so in the same write and fsync) whose `watch` field holds the
source's position and identity:

    {"op": "import", "set": {"main": ..., "HEAD": "@main"}, "source": "codex",
     "watch": {"key": "/home/u/.codex/sessions/.../rollout-X.jsonl", "path": ..., "fmt": "codex",
               "off": 123456, "line": 240, "dev": 2049, "ino": 1234, "idn": 4096, "idh": "...",
               "th": "...", "ph": "...", "time": "2026-...Z", "branches": ["main"]}}

A copy of the latest position of each source is kept in a cache file beside the tape's
index cache (never in the tape), with the file's size and mtime and the
last entry imported. The cache is only trusted while the tape holds that entry (a tape
restored from an older copy does not); otherwise the position is read again from the
tape's ref records.
docs/watch.md explains why this is safe against kill -9 and rsync.
"""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass, field
from typing import Optional

from blake3 import blake3

from ..history import reflog
from ..store.files import open_private

RECORD_FIELDS = ("key", "path", "fmt", "off", "line", "dev", "ino", "idn", "idh", "th", "ph", "time", "tip", "branches", "refs")
OPTIONAL_FIELDS = ("quiet",)  # in a record only when set
CACHE_VERSION = 1


@dataclass
class Position:
    key: str
    path: str
    fmt: str
    session: Optional[str] = None
    off: int = 0  # bytes of the (decompressed) file imported: always just after a newline
    line: int = 0  # number of the last line imported (1-based; blank lines count)
    dev: int = 0
    ino: int = 0
    idn: int = 0  # how many bytes at the start `idh` covers
    idh: str = ""  # digest of the first idn bytes
    th: str = ""  # digest of the up to ID_BYTES bytes before off
    ph: str = ""  # digest of all the bytes before off (the prefix imported): "" in positions older than it
    time: Optional[str] = None  # the last entry's time (the clock to continue with)
    tip: Optional[str] = None  # the entry of the last line imported
    branches: list = field(default_factory=list)  # branches of the file's layout
    refs: Optional[dict] = None  # those that hold the file's tips, and their values (None: not known)
    quiet: Optional[list] = None  # codex: [offset, line] just after the last tool call or output before off (no message run open there)
    # cache only: the file's size and mtime when this was written
    size: int = -1
    mtime: int = -1

    def record(self) -> dict:
        rec = {k: getattr(self, k) for k in RECORD_FIELDS}
        rec["key"], rec["path"] = as_text(rec["key"]), as_text(rec["path"])
        for k in OPTIONAL_FIELDS:
            if getattr(self, k) is not None:
                rec[k] = getattr(self, k)
        return rec

    @classmethod
    def from_record(cls, rec: dict, session: str) -> Optional["Position"]:
        w = rec.get("watch")
        if not isinstance(w, dict) or not all(k in w for k in ("key", "path", "fmt", "off", "line")):
            return None
        try:
            p = cls(session=session, **{k: w[k] for k in RECORD_FIELDS + OPTIONAL_FIELDS if k in w})
        except TypeError:
            return None
        if not isinstance(p.off, int) or not isinstance(p.line, int) or p.off < 0:
            return None
        q = p.quiet
        if q is not None and not (type(q) is list and len(q) == 2 and all(type(x) is int for x in q) and 0 <= q[0] <= p.off and 0 <= q[1] <= p.line):
            p.quiet = None  # not ours: the runs are read again from the file's start
        if p.refs is not None and not isinstance(p.refs, dict) or p.refs and not all(isinstance(k, str) and isinstance(v, str) for k, v in p.refs.items()):
            p.refs = None
        return p

    def matches_stat(self, st: os.stat_result) -> bool:
        return (self.dev, self.ino, self.size, self.mtime) == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def as_text(path: str) -> str:
    """A path as a ref record may hold it: a file name that is not UTF-8 (its bytes are
    surrogates in Python) has them written as \\xNN. A record holds text only, and such a
    name failed every pass of `watch` ("text is not valid Unicode") though its records were
    written (found by an audit); the cache beside the index keeps the path itself."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")


def latest_in_tape(session, key: str) -> Optional[Position]:
    """The newest position of source `key` in the session's ref records (None if none)."""
    if not session.exists():
        return None
    found = None
    keys = (key, as_text(key))
    for rec in reflog.records(session):  # oldest first: the last one wins
        w = rec.get("watch")
        if isinstance(w, dict) and w.get("key") in keys:
            p = Position.from_record(rec, session.name)
            if p is not None:
                found = p
    return found


class Cache:
    """The cache file: {key: position} of this tape, beside its index cache. Losing it costs
    a re-read of positions from the tape, never data."""

    def __init__(self, tape):
        idx = getattr(tape.store.index, "path", ":memory:")
        self.path = None if idx == ":memory:" else os.path.join(os.path.dirname(idx), "watch.json")
        self.positions: dict[str, Position] = {}
        self.dirty = False
        if self.path:
            try:
                with open(self.path, "rb") as f:
                    data = json.load(f)
                if data.get("version") == CACHE_VERSION:
                    for k, v in data.get("sources", {}).items():
                        self.positions[k] = Position(**v)
            except (OSError, ValueError, TypeError, AttributeError):
                self.positions = {}

    def get(self, key: str) -> Optional[Position]:
        return self.positions.get(key)

    def put(self, p: Position) -> None:
        self.positions[p.key] = p
        self.dirty = True

    def drop(self, key: str) -> None:
        """Forget a source's position, and its Claude Code layout: one file per transcript
        ever seen piled up under watch-layouts/ (600 for 60 live transcripts after 200
        passes, each ~8% of its transcript's size; found by an audit)."""
        if self.positions.pop(key, None) is not None:
            self.dirty = True
        path = _layout_path(self, key)
        if path is not None:
            try:
                os.remove(path)
            except OSError:
                pass

    def save(self) -> None:
        if not self.path or not self.dirty:
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open_private(tmp) as f:
                # (vars, not asdict: asdict deep-copies every field, 3 M calls for 2,000 files)
                json.dump({"version": CACHE_VERSION, "sources": {k: vars(p) for k, p in self.positions.items()}}, f)
            os.replace(tmp, self.path)
            self.dirty = False
        except OSError:
            pass  # a cache: the tape holds the truth


# -- Claude Code layouts ----------------------------------------------------------------------
#
# Continuing a Claude Code file needs the importer's layout of the lines so far (which
# uuid is which entry, the threads and their tips). A running watcher keeps it in memory;
# a new process (`--once` from a hook, a restart) reads it from this cache, so that it too
# reads only what was appended. It is checked against the position (offset, last entry)
# before use; when missing or stale, the whole file is imported again (free in writes).

_ALLOWED = {
    ("ctape.formats.claude_code", "Builder"),
    ("ctape.formats.claude_code", "Info"),
    ("ctape.formats.claude_code", "Thread"),
    ("ctape.formats._common", "Line"),
    ("ctape.formats._common", "Clock"),
    ("ctape.formats._common", "Progress"),
    ("collections", "defaultdict"),
    ("builtins", "set"),
    ("builtins", "list"),
    ("builtins", "dict"),
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a layout")
        return super().find_class(module, name)


def _layout_path(cache: "Cache", key: str) -> Optional[str]:
    if not cache.path:
        return None
    return os.path.join(os.path.dirname(cache.path), "watch-layouts", blake3(os.fsencode(key)).hexdigest()[:24])


def save_layout(cache: "Cache", pos: Position, builder, orphans: set, agent) -> None:
    path = _layout_path(cache, pos.key)
    if path is None:
        return
    keep = (builder.s, builder.f, builder.bar, builder.is_new)
    builder.s = builder.f = builder.bar = builder.is_new = None
    try:
        data = pickle.dumps({"key": pos.key, "off": pos.off, "tip": pos.tip, "builder": builder, "orphans": orphans, "agent": agent}, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        builder.s, builder.f, builder.bar, builder.is_new = keep
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open_private(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass


def load_layout(cache: "Cache", pos: Position, session):
    """(builder, orphans, agent) saved for exactly this position, else None."""
    path = _layout_path(cache, pos.key)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            d = _Unpickler(f).load()
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError, IndexError):
        return None
    if not isinstance(d, dict) or (d.get("key"), d.get("off"), d.get("tip")) != (pos.key, pos.off, pos.tip):
        return None
    b = d["builder"]
    from ..formats import _common as c

    b.s, b.f, b.bar = session, None, c.Progress("", False)
    b.is_new = None
    b.fresh = getattr(b, "fresh", 0)
    return b, d["orphans"], d["agent"]
