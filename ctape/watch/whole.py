"""Files read whole whenever they change: `_Whole`, the part of `Watcher` (engine.py) that
imports a Gemini CLI session file, laid out as `ctape import` lays it out (its refs move
as a Claude Code file's do: claude.py), and a file in any other format, imported whole.
"""

from __future__ import annotations

import os
from typing import Optional

from ..formats import _common as c
from .position import Position
from .reading import _At, _prefix_digest
from .sources import Source
from .state import Live


class _Whole:
    """Whole files, a part of `Watcher` (engine.py): it uses the watcher's tape, `echo` and
    batches (`_commit`, `_begin`, `_batch_bytes`), `_claude_changes` (claude.py), `_note`,
    and positions (`_done`, `_seal`: state.py)."""

    # -- gemini cli: the whole file whenever it changes, laid out as import lays it out ------------

    def _gemini(self, s: Source, st: os.stat_result, pos: Optional[Position], at: Optional["_At"]) -> tuple[int, int]:
        """A Gemini CLI session file: read whole at each change (a JSON document is written
        again whole; a JSON Lines file is short). The importer continues the thread the
        file's earlier version left (by content: formats/gemini.py), so what is new is
        appended and nothing is rewound. A JSON Lines file that only grew (its bytes up to
        the position unchanged) moves the branches it set, as its layout says (a rewind in
        the file makes a new thread `main`, the old one a branch); anything else moves refs
        as `ctape import` does."""
        from ..formats import gemini
        from ..formats.reading import spooled
        from .position import latest_in_tape

        grew = at is not None
        with spooled([s.path]) as (path,):
            try:
                lay = gemini.layout(self.tape, path, None, after_line=pos.line if grew else 0)
            except (gemini.Incomplete, gemini.Empty):
                return 0, 0  # a document being written again, or no message yet: read at the next change
            session = self.tape.session(lay.name)
            old = pos if pos is not None and pos.session == lay.name else None
            if old is None:
                # no position of this process (a lost cache): the tape's newest for the file,
                # which a JSON Lines file grew from when it still begins with what that one
                # imported (as claude.py's); its layout again, for what is new since (counts)
                old = latest_in_tape(session, s.key)
                if not lay.document and self._grew_from(s, st, old):
                    grew = True
                    lay = gemini.layout(self.tape, path, None, after_line=old.line)
        new = Position(key=s.key, path=s.path, fmt="gemini", session=lay.name, dev=st.st_dev, ino=st.st_ino, off=lay.end, line=lay.line)
        mine, had = (old.refs, list(old.branches)) if old is not None else (None, [])
        changes, notes, now = self._claude_changes(session, lay.refs, grew, mine, had, key=s.key)
        new.branches = sorted(lay.refs)
        new.refs = {b: h for b, h in lay.refs.items() if now.get(b) == h}
        new.tip = lay.refs.get("main")
        new.time = self.tape.read_entry(new.tip).time if new.tip else None
        self._seal(s, new, b"", _prefix_digest(s, lay.end))
        self._batch_bytes += lay.end
        wrote = bool(changes) or old is None or old.record() != new.record()
        if wrote:
            session.set_refs("import", changes, source="gemini", watch=new.record())
        self._note(new, notes + [n for n in lay.notes if n])
        self._done(new, st, Live(new))
        return (lay.new_records if wrote else 0), lay.end

    # -- other formats: the whole file whenever it changes ---------------------------------------

    def _whole(self, s: Source, st: os.stat_result, fmt: str) -> tuple[int, int]:
        from ..formats import import_files

        # in a batch of its own: a file refused half way (an edited export) writes nothing,
        # as `ctape import` of it, where the pass's batch would keep what came before the refusal
        self._commit()
        written = self.tape.store.entries_written
        try:
            with self.tape.batch():
                lines = import_files(self.tape, fmt, [s.path], None)
        finally:
            self._begin()
        for line in lines:
            if not line.startswith(c.NOTHING_NEW):  # a file touched, or written again as it was: silent
                self.echo(f"watch: {line}")
        pos = Position(key=s.key, path=s.path, fmt=fmt, off=st.st_size)
        self._batch_bytes += st.st_size
        self._done(pos, st, None)
        return int(self.tape.store.entries_written > written), st.st_size  # the file, when it brought anything new
