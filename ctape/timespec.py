"""The T syntax of `--since` / `--until`: an RFC 3339 time, or a duration back from now.

    T := RFC 3339 (2026-01-02T03:04:05Z, 2026-01-02)  |  N s|m|h|d|w  (30m, 2h, 3d, 2w)
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone

from .errors import InvalidInput
from .models import format_time

_AGO = re.compile(r"(\d+)\s*([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_when(text: str, what: str = "--since") -> str:
    """The time T names, as ctape writes times (RFC 3339 UTC with microseconds)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(f"invalid {what}: give an RFC 3339 time or a duration like 2h or 3d")
    text = text.strip()
    m = _AGO.fullmatch(text)
    if m:
        ago = int(m.group(1)) * _UNIT[m.group(2)]
        return format_time(datetime.fromtimestamp(time.time() - ago, timezone.utc))
    try:
        dt = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        raise InvalidInput(f"invalid {what} {text!r}; use an RFC 3339 time (2026-01-02T03:04:05Z) or a duration like 2h or 3d") from None
    return format_time(dt)
