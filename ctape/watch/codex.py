"""Codex rollouts: `_Codex`, the part of `Watcher` (engine.py) that imports what a rollout
appended as a chain in file order, going on from the position (with `codex.Voices`, the
runs that tell which user and agent events are the only record of their message).
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Optional

from blake3 import blake3

from ..formats import _common as c
from . import sources as src_mod
from .position import Position, latest_in_tape
from .reading import _At, complete_lines
from .sources import ID_BYTES, Source
from .state import Live

QUEUE_MAX = 16 << 20  # codex: bytes of lines held at most while an event's run is open


class _Codex:
    """Codex, a part of `Watcher` (engine.py): it uses the watcher's tape, `live` and
    `_batch_bytes`, its passes and batches (`_resume`, `_is_new`, `_checkpoint`,
    `_report_raw`, `_note`), and positions (`_done`, `_verified`, `_seal`: state.py)."""

    def _codex(self, s: Source, st: os.stat_result, pos: Optional[Position], at: Optional["_At"]) -> tuple[int, int]:
        from ..formats import codex

        if at is None:
            # no position this process can continue from: the tape's newest one for this source
            name = pos.session if pos is not None and pos.session else self._codex_session(s)
            found = latest_in_tape(self.tape.session(name), s.key) if name else None
            if found is not None:
                at = self._resume(s, st, found)
                if at is not None:
                    pos = found
        if at is not None and (pos.time in (None, c.EPOCH) or (pos.off and not pos.tip)):
            at.f.close()
            at = None
        full = at is None
        known = pos.session if pos is not None else None  # the session this file went to before
        if full:
            f, h, verified = src_mod.open_stream(s.path), blake3(), True
            pos = Position(key=s.key, path=s.path, fmt="codex", dev=st.st_dev, ino=st.st_ino)
        else:
            f, h, verified = at.f, at.hasher, at.verified
        # which user and agent events are the only record of their message (codex.Voices):
        # the runs as they stand at the position, kept by a running watcher, else read again
        live = self.live.get(s.key)
        instructions = None  # the entry of Codex's instructions so far (a compacted line keeps it)
        if full:
            voices = codex.Voices()
        elif live is not None and live.pos is pos and live.voices is not None:
            voices, instructions = live.voices, live.instructions
        else:
            voices, instructions = self._codex_voices(s, pos), codex.UNKNOWN
        quiet = [0, 0] if full else pos.quiet  # where no message run was open, at the last look
        count = read = 0
        with f:
            parent, clock, session = pos.tip, c.Clock(pos.time), None
            recent, pending, queue, queued = b"", [], deque(), 0

            def put(ln, spoken: bool) -> None:
                nonlocal parent, count, read, recent, pending, instructions
                if not ln.ok:
                    pending.append(ln)
                    return
                put_pending()
                parent, instructions = codex.put_line(session, ln.number, ln.value, True, parent, clock, spoken, instructions)
                count += self._is_new(parent)
                h.update(ln.pre + ln.raw)
                read += ln.end - pos.off
                self._batch_bytes += ln.end - pos.off
                recent = (recent + ln.pre + ln.raw)[-ID_BYTES:]
                pos.off, pos.line = ln.end, ln.number

            def put_pending() -> None:
                """The lines that are no JSON before a valid one, kept as they are."""
                nonlocal parent, count, read, recent, pending, instructions
                for bad in pending:
                    parent, instructions = codex.put_line(session, bad.number, bad.body, False, parent, clock, instructions=instructions)
                    count += self._is_new(parent)
                    h.update(bad.pre + bad.raw)
                    self._report_raw(s, bad)
                    if not s.zst:
                        continue
                    # (a `.zst` ends here: its last lines wait for no valid line after them)
                    read += bad.end - pos.off
                    self._batch_bytes += bad.end - pos.off
                    recent = (recent + bad.pre + bad.raw)[-ID_BYTES:]
                    pos.off, pos.line = bad.end, bad.number
                pending = []

            def put_waiting() -> None:
                """The lines held for open runs, their events decided with what is known
                (codex.Voices.voiced_so_far)."""
                so_far = voices.voiced_so_far()
                while queue:
                    ln = queue.popleft()
                    put(ln, ln.number in voices.voiced or ln.number in so_far)

            for chunk in complete_lines(f, pos.off, pos.line, final=s.zst):
                if session is None:
                    if full:
                        pos.session = self._codex_session(s, chunk, known)
                        if pos.session is None:
                            return 0, 0  # no Codex record yet
                        first = next((t for t in (codex.record_time(ln.value) for ln in chunk if ln.ok) if t), None)
                        clock = c.Clock(first or c.undated_time(self.tape, self.tape.session(pos.session), s.path))
                    session = self.tape.session(pos.session)
                    session.check_refs_intact()  # a session that lost acknowledged records gets nothing, not even entries
                for ln in chunk:
                    if ln.ok:
                        cls = codex.classify(ln.value)
                        voices.add(ln.number, cls)
                        if cls is not None and cls[0] == "X":  # ends the runs of both sides
                            quiet = [ln.end, ln.number]
                    queue.append(ln)
                    queued += ln.end - ln.offset
                    # a line waits while an event before it (or itself) has an open run: its
                    # run's end (the other side's next record) tells whether it is voiced
                    while queue and queue[0].number not in voices.open:
                        ln = queue.popleft()
                        queued -= ln.end - ln.offset
                        put(ln, ln.number in voices.voiced)
                if queued > QUEUE_MAX:
                    # a run that does not end (no message or tool call for QUEUE_MAX bytes of
                    # other records): its events are decided with what is known, as at the end
                    put_waiting()
                    queued = 0
                if not queue:
                    pos.quiet = quiet
                    self._codex_moved(s, pos, session, parent, clock, recent, h, say_ahead=False)
                    if self._checkpoint(pos):
                        return count, read  # stopped: the next pass goes on from pos
            # the end of what the file holds now; the runs go on in the next pass
            put_waiting()
            cut = getattr(f, "cut", False)
            if cut:
                self._report_cut(s)
            if s.zst and not cut and pending and session is not None:
                put_pending()  # a `.zst` is written whole: its last lines that are no JSON are kept, as import keeps them
            if session is not None:
                pos.quiet = quiet
                self._codex_moved(s, pos, session, parent, clock, recent, h, say_ahead=full)
        voices.voiced = {n for n in voices.voiced if n > pos.line}  # those still to import
        voices.open -= {n for n in voices.open if n <= pos.line}  # decided, and imported
        if read or not full:
            self._done(pos, st, Live(pos, hasher=h.copy(), verified=time.monotonic() if verified else self._verified(s.key), voices=voices,
                                     instructions=instructions))
        return count, read

    def _codex_moved(self, s: Source, pos: Position, session, parent: Optional[str], clock, recent: bytes, h, say_ahead: bool) -> None:
        """The file's lines are on the tape up to pos: move `main` there, with the position.
        `say_ahead`: a `main` ahead of them is said (one line) only once a file read again
        from its start ends behind it: it got shorter. A file read on from a position grew,
        and one read again is behind `main` until its end: a `main` ahead there was moved on
        by another watcher of the same file (an audit saw the line for a file that only grew)."""
        if parent != pos.tip:
            pos.tip, pos.time = parent, clock.last
            self._seal(s, pos, recent, h)
            changes, notes = c.safe_refs(self.tape, session, {"main": pos.tip}, say_ahead=say_ahead)
            session.set_refs("import", changes, source="codex", watch=pos.record())
        elif say_ahead and pos.tip is not None:
            notes = c.safe_refs(self.tape, session, {"main": pos.tip})[1]  # (moved at the last chunk)
        else:
            return
        self._note(pos, notes)

    def _codex_voices(self, s: Source, pos: Position):
        """codex.Voices fed with the lines before pos (read again: a new process), from the
        last point before it where no run was open (pos.quiet; else the file's start)."""
        from ..formats import codex

        voices = codex.Voices()
        off, line = pos.quiet or (0, 0)
        with src_mod.open_stream(s.path) as f:
            src_mod.skip(f, off)
            lines = (ln for chunk in complete_lines(f, off, line, final=s.zst) for ln in chunk)
            for ln in lines:
                if ln.end > pos.off:
                    break
                if ln.ok:
                    voices.add(ln.number, codex.classify(ln.value))
        voices.voiced.clear()
        voices.open.clear()  # imported already: only the runs matter from here
        return voices

    def _codex_session(self, s: Source, chunk: Optional[list] = None, known: Optional[str] = None) -> Optional[str]:
        """The session a rollout goes to: its session_meta id (else the file name), as import
        names it; a file rewritten without an id it can read (its first line damaged) goes
        on in the session it went to before (`known`), not in a new one named after it."""
        from ..formats import codex

        if chunk is None:
            with src_mod.open_stream(s.path) as f:
                chunk = next(complete_lines(f, 0, 0, 1 << 20, final=s.zst), [])
        if not any(ln.ok and codex.is_record(ln.value) for ln in chunk):
            return None
        sid = next((codex.session_id(ln.value) for ln in chunk if ln.ok and codex.session_id(ln.value)), None)
        if sid is None and known:
            return known
        return c.check_target(c.session_name(sid, s.key))
