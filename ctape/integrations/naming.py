"""What every integration needs from ctape: a tape from a path or a Tape, and session names.

Framework ids (thread ids, session ids) are arbitrary strings; session names are
``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``. An id that already fits (with the prefix, and
without a dot) is used as is, so ``ctape log -s lg-chat-42`` finds it; any other id
becomes a readable prefix plus a short blake3 hash, which keeps names distinct.
"""

from __future__ import annotations

import os
import re
from typing import Optional, Union

from blake3 import blake3

from ..errors import NotATape
from ..tape import Tape

_PLAIN = re.compile(r"[A-Za-z0-9_-]{1,100}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def open_tape(tape: Union[str, os.PathLike, Tape]) -> tuple[Tape, bool]:
    """The Tape for a path (created when missing) or a Tape; and whether we opened it."""
    if isinstance(tape, Tape):
        return tape, False
    try:
        return Tape.open(tape), True
    except NotATape:
        return Tape.init(tape), True


def short_hash(text: str, n: int = 16) -> str:
    return blake3(text.encode("utf-8")).hexdigest()[:n]


def session_name(prefix: str, framework_id: str) -> str:
    """A valid, deterministic session name for a framework id."""
    if not isinstance(framework_id, str) or not framework_id:
        raise ValueError(f"expected a non-empty string id, got {framework_id!r}")
    if _PLAIN.fullmatch(framework_id) and (prefix or framework_id[0].isalnum()):
        return prefix + framework_id
    readable = _UNSAFE.sub("-", framework_id).strip("-")[:40]
    name = f"{prefix}{readable}.{short_hash(framework_id)}" if readable else f"{prefix}{short_hash(framework_id)}"
    if not name[0].isalnum():
        name = "x" + name
    return name


def plain_id(prefix: str, name: str) -> Optional[str]:
    """The framework id back from a session name made by session_name, when it was used as is."""
    if not name.startswith(prefix):
        return None
    rest = name[len(prefix):]
    return rest if _PLAIN.fullmatch(rest) else None
