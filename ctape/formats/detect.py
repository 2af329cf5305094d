"""Which format a transcript file is in, from its first records (`ctape import FILE`)."""

from __future__ import annotations

import json
from typing import Any

from ..errors import InvalidInput
from ._common import lines_of

LINES = 20  # non-blank lines looked at
ORDER = ("jsonl", "codex", "claude-code", "openai")  # ties go to the earlier


def _is_export(v: Any) -> bool:
    return isinstance(v, dict) and (v.get("ctape") in ("export", "refs") or {"hash", "kind", "payload", "time"} <= v.keys())


def _format_of(v: Any) -> str | None:
    from . import claude_code, codex, openai

    if _is_export(v):
        return "jsonl"
    if codex.is_record(v):
        return "codex"
    if claude_code.is_record(v):
        return "claude-code"
    if openai.is_record(v):
        return "openai"
    return None


def detect(path: str) -> str:
    """jsonl, codex, claude-code or openai: the format most of the first records are in."""
    votes = dict.fromkeys(ORDER, 0)
    seen = 0
    try:
        with open(path, "rb") as f:
            for raw in lines_of(f):
                if not raw.strip():
                    continue
                seen += 1
                try:
                    fmt = _format_of(json.loads(raw))
                except (ValueError, UnicodeDecodeError):
                    fmt = None
                    if seen == 1 and raw.lstrip()[:1] in (b"[", b"{"):
                        return "openai"  # a JSON document spread over lines (a chat list, a .traj)
                if fmt:
                    votes[fmt] += 1
                if seen >= LINES:
                    break
    except OSError as e:
        raise InvalidInput(f"cannot read {path}: {e.strerror}") from None
    best = max(ORDER, key=lambda k: (votes[k], -ORDER.index(k)))
    if votes[best] == 0:
        raise InvalidInput(f"{path}: cannot tell its format; name it: ctape import FORMAT FILE (jsonl, claude-code, codex, openai)")
    return best
