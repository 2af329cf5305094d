"""ctape.Tape: the history's Tape (ctape/history/tape.py) with the verbs of ctape/ops.

The history layer knows sessions, entries and refs and must not import the operations
above it; this class, one layer up, adds them, so that users have one object:
`Tape.open(path).compact()`. Its sessions are ctape.Session (ctape/session.py).
"""

from __future__ import annotations

from typing import Optional

from .errors import InvalidInput
from .model.models import brief
from .history import tape as history
from .session import Session


class Tape(history.Tape):
    """A tape directory. Open with Tape.open(path) (or Tape(path)), create with Tape.init(path)."""

    def __init__(self, store):
        super().__init__(store)
        self._search = None  # the search cache (ctape/ops/search.py), opened on first use

    @property
    def _session_class(self) -> type[Session]:
        return Session

    def close(self) -> None:
        if self._search is not None:
            self._search.close()
            self._search = None
        super().close()

    def stats(self) -> dict:
        from .ops.maintenance import stats

        return stats(self)

    def fsck(self) -> dict:
        from .ops.maintenance import fsck

        return fsck(self)

    def salvage(self) -> dict:
        """Rewrite the intact records of damaged files into new packs and move the damaged
        files into quarantine/ (see ctape/ops/salvage.py); a tape with no damage is left as it is."""
        from .ops.salvage import salvage

        return salvage(self)

    def compact(self, expire: str | float = "90d", grace: str | float = "14d", dry_run: bool = False, progress=None) -> dict:
        from .ops.compact import compact

        if progress is not None and not callable(progress):
            raise InvalidInput(f"progress is a function that takes what compact did so far, not {brief(progress, 40)}")
        return compact(self, expire=expire, grace=grace, dry_run=dry_run, progress=progress)

    # -- finding and comparing (ctape/ops/search.py, diff.py, usage.py) ----------------------------

    def search(self, query: str, session: Optional[str] = None, kinds=(), since: Optional[str] = None,
               until: Optional[str] = None, limit: Optional[int] = 20, hidden: bool = False, progress=None) -> list:
        """Full-text search of every entry's payload, best match first: a list of search.Hit
        (session, hash, kind, time, snippet). Words are ANDed; "a phrase" in quotes."""
        from .ops.search import search

        return search(self, query, session, kinds, since, until, limit, hidden, progress)

    def _search_index(self):
        if self._search is None:
            from .ops.search import SearchIndex

            self._search = SearchIndex(self)
        return self._search

    def diff(self, ref1: str, ref2: str, session: Optional[str] = None):
        """Where two histories part: a diff.Diff with base, left and right (oldest first)."""
        from .ops.diff import diff

        return diff(self, ref1, ref2, session)

    def usage(self, by: str = "session", since: Optional[str] = None, prices: Optional[str] = None) -> list[dict]:
        """Tokens (and estimated cost where the model is known) that importers and
        integrations recorded, grouped by session, model or day."""
        from .ops.usage import usage

        return usage(self, by=by, since=since, prices=prices)
