"""The T syntax of `--since` / `--until` and the DUR syntax of `compact --expire / --grace`.

    T   := RFC 3339 (2026-01-02T03:04:05Z, 2026-01-02)  |  DUR back from now (30m, 2h, 3d, 2w)
    DUR := now  |  N s|m|h|d|w, at most MAX_DURATION (365000d, about 1000 years)

From Python a number is accepted too: seconds for DUR, seconds since the epoch for T.

Every value that breaks these rules, however large or odd, is an InvalidInput saying
what to write instead; nothing else escapes.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone

from .errors import InvalidInput
from .models import format_time, parse_time

_AGO = re.compile(r"(\d+)\s*([smhdw])", re.ASCII)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# Long enough to mean "keep everything", short enough that now minus it is a time
# ctape can write (years 0001-9999).
MAX_DURATION = 365_000 * 86400
_SAY_DUR = "use now, 30m, 12h, 14d or 2w (up to 365000d)"


def parse_duration(text, what: str = "duration") -> float:
    """Seconds in DUR; a number (the Python API) is taken as seconds, 0 to MAX_DURATION, and
    a datetime.timedelta as what it says (it was refused as an "invalid --expire")."""
    if isinstance(text, timedelta):
        text = text.total_seconds()
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if not 0 <= text <= MAX_DURATION:  # also refuses nan
            raise InvalidInput(f"invalid {what} {shown(text)}: give 0 to {MAX_DURATION} seconds, or {_SAY_DUR}")
        return float(text)
    t = text.strip() if isinstance(text, str) else ""
    if t == "now":
        return 0.0
    m = _AGO.fullmatch(t)
    if not m:
        raise InvalidInput(f"invalid {what} {shown(text)}; {_SAY_DUR}")
    digits, unit = m.groups()
    if len(digits.lstrip("0")) > 12 or int(digits) * _UNIT[unit] > MAX_DURATION:
        raise InvalidInput(f"invalid {what} {shown(text)}: longer than 365000d (about 1000 years); {_SAY_DUR}")
    return float(int(digits) * _UNIT[unit])


def parse_when(text, what: str = "--since") -> str:
    """The time T names, as ctape writes times (RFC 3339 UTC with microseconds); from the
    Python API also a number (seconds since the epoch), a datetime (naive ones are UTC, as
    ctape's times) or a timedelta (that long ago)."""
    if isinstance(text, timedelta):
        return _ago(parse_duration(text, what))
    if isinstance(text, datetime):
        try:
            return format_time(text)
        except (OverflowError, ValueError):  # outside years 0001-9999 once in UTC
            raise InvalidInput(f"invalid {what} {shown(text)}: not a time ctape can write (years 0001-9999)") from None
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        try:
            return format_time(datetime.fromtimestamp(text, timezone.utc))
        except (OverflowError, OSError, ValueError):  # nan, inf, outside years 0001-9999
            raise InvalidInput(f"invalid {what} {shown(text)}: not a time ctape can write (years 0001-9999)") from None
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(f"invalid {what}: give an RFC 3339 time or a duration like 2h or 3d")
    text = text.strip()
    if text == "now" or _AGO.fullmatch(text):  # `now` is the DUR 0 (the over-long message offers it)
        return _ago(parse_duration(text, what))
    try:
        datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        raise InvalidInput(f"invalid {what} {shown(text)}; use an RFC 3339 time (2026-01-02T03:04:05Z) or a duration like 2h or 3d") from None
    try:
        return parse_time(text[:-1] + "Z" if text.endswith("z") else text)
    except InvalidInput as e:  # outside years 0001-9999 once in UTC
        raise InvalidInput(f"invalid {what}: {e}") from None


def _ago(seconds: float) -> str:
    """The time `seconds` before now, as ctape writes times."""
    return format_time(datetime.fromtimestamp(time.time() - seconds, timezone.utc))


def shown(text, most: int = 40) -> str:
    """The value as an error message quotes it: one short line (a ref, a time, a duration),
    at most `most` characters."""
    from .models import brief

    return brief(text, most)
