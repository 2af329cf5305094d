"""Claude Code transcripts: `_Claude`, the part of `Watcher` (engine.py) that lays out a
file's threads with the importer's Builder, going on with the layout kept since the last
pass (in memory, else in the cache) or laying out the whole file again, and moves the
session's refs as the layout says (`_claude_changes`, which Gemini CLI files use too:
whole.py); `_Scan`, the lines of a pass as the Builder's Infos.
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from typing import Optional

from blake3 import blake3

from ..formats import _common as c
from ..model.refs import HEAD
from . import sources as src_mod
from .position import Position, latest_in_tape, load_layout
from .reading import _At, _Line, _unpacked, complete_lines
from .sources import ID_BYTES, Source
from .state import Live


class _Claude:
    """Claude Code, a part of `Watcher` (engine.py): it uses the watcher's tape, cache and
    `live`, its batches (`_checkpoints`), `_report_raw` and `_note`, and positions (`_done`,
    `_verified`, `_seal`: state.py)."""

    def _claude(self, s: Source, st: os.stat_result, pos: Optional[Position], at: Optional["_At"]) -> tuple[int, int]:
        from ..formats import claude_code

        live = self.live.get(s.key)
        grew = at is not None  # the file holds what the position imported, and more
        if grew and (live is None or live.pos is not pos or live.builder is None) and pos.session:
            got = load_layout(self.cache, pos, self.tape.session(pos.session))
            live = Live(pos, *got, verified=self._verified(s.key)) if got is not None else None
        if not grew or live is None or live.builder is None or not hasattr(at.f, "seek"):
            # a compressed file (the Builder reads lines again by offset), or no layout to continue
            return self._claude_full(s, st, pos, grew)
        live.hasher = at.hasher
        if at.verified:
            live.verified = time.monotonic()
        scan = _Scan(at.hasher)
        for chunk in complete_lines(at.f, pos.off, pos.line):
            scan.add(chunk)
        infos = scan.infos()
        if not infos:
            self._done(pos, st, live)
            return 0, 0
        if live.agent and any(i.message and not i.sidechain for i in infos):
            return self._claude_full(s, st, pos, grew)  # not a subagent file after all
        fresh = live.builder.fresh
        self.tape.session(pos.session).check_refs_intact()
        with self._checkpoints(live.builder, pos.off):
            if not claude_code.extend(live.builder, at.f, infos, live.orphans):
                return self._claude_full(s, st, pos, grew)
        for ln in scan.raw:
            self._report_raw(s, ln)
        read = scan.end - pos.off
        pos.off, pos.line = scan.end, scan.line
        self._seal(s, pos, scan.recent, at.hasher)
        self._set_claude_refs(live, pos, full=False, grew=True, mine=pos.refs, had=list(pos.branches))
        self._done(pos, st, live)
        return live.builder.fresh - fresh, read

    def _claude_full(self, s: Source, st: os.stat_result, old: Optional[Position], grew: bool = False) -> tuple[int, int]:
        """Import the whole file (again): a fresh layout, as `ctape import` makes it."""
        self.live.pop(s.key, None)
        # a compressed file is decompressed once, into a temporary file (bounded): its lines
        # are read from there, and the Builder reads them again there by offset
        data, cut = _unpacked(s) if s.zst else (None, False)
        if cut:
            self._report_cut(s)
        try:
            return self._claude_layout(s, st, old, data, grew, final=s.zst and not cut)
        finally:
            if data is not None:
                data.close()

    def _claude_layout(self, s: Source, st: os.stat_result, old: Optional[Position], data, grew: bool,
                       final: bool = False) -> tuple[int, int]:
        """`final`: the file is a whole `.zst` (complete_lines)."""
        from ..formats import claude_code

        scan = _Scan(blake3())
        with (src_mod.open_stream(s.path) if data is None else nullcontext(data)) as f:
            for chunk in complete_lines(f, 0, 0, final=final):
                scan.add(chunk)
        infos = scan.infos()
        if not any(i.message for i in infos):
            return 0, 0  # wait for the first message: it names the session
        agent = claude_code.is_subagent(infos)
        base = c.session_name(scan.sid, s.key)
        name = c.check_target(c.session_name(f"{base}-agent-{agent}", s.key) if agent else base)
        session = self.tape.session(name)
        session.check_refs_intact()  # a session that lost acknowledged records gets nothing, not even entries
        if old is None or old.session != name:
            # no position of this process for this session (a lost cache, or the file went to
            # another session): the tape's newest for the file, which it grew from when the
            # file still begins with what that one imported
            old = latest_in_tape(session, s.key) or (old if old and old.session == name else None)
            grew = self._grew_from(s, st, old)
        pos = Position(key=s.key, path=s.path, fmt="claude-code", session=name, dev=st.st_dev, ino=st.st_ino)
        live = Live(pos, claude_code.start_builder(session, scan.first_time or c.undated_time(self.tape, session, s.path)), set(), agent,
                    hasher=scan.hasher, verified=time.monotonic())
        fr = data if data is not None else src_mod.open_regular(s.path)
        with fr, self._checkpoints(live.builder, 0):
            claude_code.extend(live.builder, fr, infos, live.orphans)
        for ln in scan.raw:
            self._report_raw(s, ln)
        pos.off, pos.line = scan.end, scan.line
        self._seal(s, pos, scan.recent, scan.hasher)
        mine, had = (old.refs, list(old.branches)) if old is not None else (None, [])
        self._set_claude_refs(live, pos, full=True, old=old, grew=grew, mine=mine, had=had)
        self._done(pos, st, live if not s.zst else None)
        return live.builder.fresh, pos.off

    def _set_claude_refs(self, live: Live, pos: Position, full: bool, grew: bool, mine: Optional[dict], had: list,
                         old: Optional[Position] = None) -> bool:
        """Move the session's refs to the file's layout, with the position; False when a whole
        import found everything as it was (no record written)."""
        refs = live.builder.refs()
        session = self.tape.session(pos.session)
        changes, notes, now = self._claude_changes(session, refs, grew, mine, had, key=pos.key)
        pos.branches = sorted(refs)
        pos.refs = {b: h for b, h in refs.items() if now.get(b) == h}
        pos.tip = live.builder.last.tip
        if full and not changes and old is not None and old.record() == pos.record():
            return False  # imported again, found as it was: no record to write
        session.set_refs("import", changes, source="claude-code", watch=pos.record())
        self._note(pos, notes)
        return True

    def _claude_changes(self, session, wanted: dict, grew: bool, mine: Optional[dict], had: list,
                        key: Optional[str] = None) -> tuple[dict, list, dict]:
        """(ref changes, notes, the branches after them). A file that grew moves the branches
        it set last time and nobody moved since as its layout says, deleting those its
        layout has no more (a thread that became main); every other branch moves as an
        import moves it (c.safe_refs): never removed or rewound. "Last time" is the file's
        newest position on the tape (`key`) when branches moved since the one this process
        holds: a cache one batch behind the tape (a watcher killed between a batch's sync
        and its cache's), or another watcher of the same file, set them."""
        st = session.refs() if session.exists() else None
        current = dict(st.branches) if st else {}
        if grew and key is not None and mine is not None and any(current.get(b) != h for b, h in mine.items()):
            newest = latest_in_tape(session, key)
            if newest is not None and newest.refs is not None:
                mine, had = newest.refs, list(newest.branches)
        if grew:
            # positions written before they kept refs (None): the branches the file's layout had
            ours = {b for b in had if b in current} if mine is None else {b for b, h in mine.items() if current.get(b) == h}
        else:
            ours = set()
        changes: dict = {}
        rest = {}
        for b, h in wanted.items():
            if b in ours or (grew and b not in current):
                if current.get(b) != h:
                    changes[b] = h
            else:
                rest[b] = h
        for b in ours - wanted.keys():
            changes[b] = None
        # (a file that grew is not shorter: a branch ahead of it was moved on by another
        # process following the same file, or another copy of it, and says nothing)
        more, notes = c.safe_refs(self.tape, session, rest, say_ahead=not grew) if rest else ({}, [])
        changes.update(more)
        if st is None or st.head is None:
            changes[HEAD] = "@main"
        now = {**current, **changes}
        return changes, notes, now


class _Scan:
    """The lines of a Claude Code file read in this pass, as the Builder's Infos (their values
    are dropped: the Builder reads each line again by offset, so memory holds one chunk of
    values at a time, not the file). Lines that are not JSON after the last valid one may
    still be being written: they are left for later (not consumed, not in the digest)."""

    def __init__(self, hasher):
        from ..formats import claude_code

        self.Info = claude_code.Info
        self.hasher = hasher
        self.done: list = []
        self.held: list[_Line] = []
        self.raw: list[_Line] = []  # lines kept as they are (not JSON), to report
        self.sid: Optional[str] = None
        self.first_time: Optional[str] = None
        self.recent = b""
        self.end = self.line = 0

    def add(self, chunk: list[_Line]) -> None:
        for ln in chunk:
            if not ln.ok:
                self.held.append(ln)
                continue
            for bad in self.held:
                self._take(bad)
                self.raw.append(bad)
            self.held = []
            v = ln.value
            if isinstance(v, dict):
                if self.sid is None and isinstance(v.get("sessionId"), str):
                    self.sid = v["sessionId"]
                if self.first_time is None:
                    self.first_time = c.valid_time(v.get("timestamp"))
            self._take(ln)

    def _take(self, ln: _Line) -> None:
        self.done.append(self.Info(c.Line(ln.number, ln.offset, len(ln.raw), None, ln.ok), ln.value))
        self.hasher.update(ln.pre)
        self.hasher.update(ln.raw)
        self.recent = (self.recent + ln.pre + ln.raw)[-ID_BYTES:]
        self.end, self.line = ln.end, ln.number

    def infos(self) -> list:
        return self.done
