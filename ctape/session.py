"""ctape.Session: the history's Session (ctape/history/session.py) with the verbs of
ctape/ops that read one session (diff, context), added one layer up as ctape.Tape adds
the tape's."""

from __future__ import annotations

from typing import Any, Iterable, Optional

from .history import session as history


class Session(history.Session):
    """One conversation of a tape: tape.session(name)."""

    def _recorded_text(self, text: str) -> str:
        from .ops.scan import masked

        return masked(self.tape, text)

    def diff(self, ref1: str, ref2: str):
        """Where two histories part (ctape/ops/diff.py); bare names are this session's refs."""
        from .ops.diff import diff

        return diff(self.tape, ref1, ref2, self.name)

    def context(self, ref: Optional[str] = None, policies: Iterable[str] = (), format: str = "openai", resume: str = "drop", max_tokens: Optional[int] = None) -> Any:
        from .ops.context import build_context

        self._not_removed()
        if not isinstance(policies, str) and hasattr(policies, "__iter__"):
            policies = list(policies)  # (a str is one policy, and anything else is refused there)
        return build_context(self, ref, policies, format, resume, max_tokens)
