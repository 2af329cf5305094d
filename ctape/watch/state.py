"""What a running watcher knows of each source: `Live`, what it keeps of one between
passes beyond its position, and `_Positions`, the part of `Watcher` (engine.py) that
finds, forgets, checks, records and seals a source's position.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Optional

from . import sources as src_mod
from .position import Position
from .reading import _tail_of
from .sources import ID_BYTES, Source, digest


@dataclass
class Live:
    """What a running watcher keeps of a source between passes (beyond its position)."""

    pos: Position
    builder: object = None  # claude-code: the thread layout so far
    orphans: set = field(default_factory=set)
    agent: Optional[str] = None
    used: float = 0.0  # time.monotonic() of the last pass that imported from it
    hasher: object = None  # the digest of the bytes before pos.off, to go on with (blake3)
    verified: float = 0.0  # time.monotonic() when the file's bytes before pos.off were last read and compared
    voices: object = None  # codex: the runs of messages as they stand at pos (codex.Voices)
    instructions: Optional[str] = None  # codex: the entry of the instructions before pos (codex.put_line)


class _Positions:
    """Positions, a part of `Watcher` (engine.py): it uses the watcher's tape, cache and
    `live`, and the batch's `_touched` and `_layouts`."""

    def _known(self, key: str) -> Optional[Position]:
        live = self.live.get(key)
        return live.pos if live else self.cache.get(key)

    def _forget(self, key: str) -> None:
        self.live.pop(key, None)
        self.cache.drop(key)

    def _grew_from(self, s, st: os.stat_result, pos: Optional[Position]) -> bool:
        """Does the file begin with what pos (a position read from the tape) imported? Then
        it only grew since (engine._resume: the same file, its prefix's digest)."""
        if pos is None or pos.path != s.path:
            return False
        at = self._resume(s, st, pos)
        if at is None:
            return False
        at.f.close()
        return True

    def _intact(self, pos: Position) -> bool:
        """The tape still holds the last entry this position imported (it is not an older
        copy of the tape, from before that import)."""
        if pos.session is None:
            return True
        if pos.tip is None:
            return False
        if self.tape.has_entry(pos.tip):
            return True
        self.tape.store.refresh(pos.session)  # the index may not have read the session's files yet
        return self.tape.has_entry(pos.tip)

    def _done(self, pos: Position, st: os.stat_result, live: Optional[Live]) -> None:
        pos.dev, pos.ino, pos.size, pos.mtime = st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
        if live is not None:
            live.used = time.monotonic()
            self.live[pos.key] = live
            if live.builder is not None:
                self._layouts[pos.key] = live
        self._touched.append(pos)

    def _verified(self, key: str) -> float:
        live = self.live.get(key)
        return live.verified if live is not None else 0.0

    def _seal(self, s: Source, pos: Position, recent: bytes, prefix) -> None:
        """The identity digests of a position that has just moved (`prefix`: the digest of
        every byte before it, kept as they were read)."""
        if pos.idn < ID_BYTES:
            pos.idn = min(ID_BYTES, pos.off)
            pos.idh = digest(src_mod.head_of(s.path, pos.idn))
        want = min(ID_BYTES, pos.off)
        pos.th = digest(recent[-want:] if len(recent) >= want else _tail_of(s, pos))
        pos.ph = prefix.hexdigest()[:32]
