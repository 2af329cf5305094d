"""Which format a transcript file is in, from its first records (`ctape import FILE`)."""

from __future__ import annotations

import json
from typing import Any

from ..errors import InvalidInput
from ._common import lines_of
from .reading import cannot_read, real_path
from . import openai

LINES = 20  # non-blank lines looked at
ORDER = ("jsonl", "codex", "claude-code", "gemini", "openai")  # ties go to the earlier


def _is_export(v: Any) -> bool:
    return isinstance(v, dict) and (v.get("ctape") in ("export", "refs") or {"hash", "kind", "payload", "time"} <= v.keys())


def _format_of(v: Any) -> str | None:
    from . import claude_code, codex, gemini, openai

    if _is_export(v):
        return "jsonl"
    if codex.is_record(v):
        return "codex"
    if claude_code.is_record(v):
        return "claude-code"
    if gemini.is_record(v):
        return "gemini"
    if openai.is_record(v):
        return "openai"
    return None


class NotJSON(InvalidInput):
    """A file that looks like one JSON document and is not (or not yet: a tool may be writing it)."""


def _document(path: str, f) -> str:
    """The format of a file that is one JSON document: openai when it is (or its list
    holds) chat messages, OpenHands events or a container of them; else refused."""
    from ._common import loads, read_whole

    try:
        doc = loads(read_whole(f))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise NotJSON(f"{path}: not JSON and not JSON Lines; name its format: ctape import FORMAT FILE") from None
    fmt = _document_format(doc)
    if fmt is None:
        raise InvalidInput(f"{path}: cannot tell its format; name it: ctape import FORMAT FILE (jsonl, claude-code, codex, gemini, openai)")
    return fmt


def _document_format(doc: Any) -> str | None:
    """gemini or openai for a whole JSON document in one of them (a session, a list of
    chat messages), else None."""
    from . import gemini, openai

    if gemini.is_session(doc):
        return "gemini"
    if openai.is_record(doc) or isinstance(doc, list) and any(openai.is_record(v) for v in doc):
        return "openai"
    return None


def detect(path: str) -> str:
    """jsonl, codex, claude-code, gemini or openai: the format most of the first records are in.

    A file whose first line is not JSON but opens a bracket may be one JSON document over
    several lines (a chat list, a `.traj`): it is read whole. When it is not one, its
    lines are judged one by one, as any other file's: a transcript whose first line was
    cut or is garbage is still JSON Lines (its importer keeps that line as it is)."""
    try:
        with open(real_path(path), "rb") as f:
            votes, whole = _votes(f, documents=True)
            if whole:
                f.seek(0)
                try:
                    return _document(path, f)
                except NotJSON:
                    f.seek(0)
                    votes, _ = _votes(f, documents=False)
                    if not any(votes.values()):
                        raise
    except OSError as e:
        raise cannot_read(path, e) from None
    best = max(ORDER, key=lambda k: (votes[k], -ORDER.index(k)))
    if votes[best] == 0:
        raise InvalidInput(f"{path}: cannot tell its format; name it: ctape import FORMAT FILE (jsonl, claude-code, codex, gemini, openai)")
    return best


def _votes(f, documents: bool) -> tuple[dict[str, int], bool]:
    """The formats of the first LINES non-blank lines, counted; and whether the first is no
    JSON but opens a bracket (with `documents`: the caller reads the file whole first)."""
    votes = dict.fromkeys(ORDER, 0)
    seen = 0
    for raw in lines_of(f):
        if not raw.strip():
            continue
        seen += 1
        try:
            v = json.loads(raw)
            fmt = _format_of(v)
            if fmt is None and seen == 1 and isinstance(v, (list, dict)):
                fmt = _document_format(v)  # a JSON document on one line (json.dump of a message list)
        except (ValueError, UnicodeDecodeError, RecursionError):  # (nested too deep to read: no record either)
            fmt = None
            if documents and seen == 1 and raw.lstrip()[:1] in (b"[", b"{"):
                return votes, True
        if fmt:
            votes[fmt] += 1
        if seen >= LINES:
            break
    return votes, False
