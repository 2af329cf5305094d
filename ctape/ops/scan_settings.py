"""The scan settings of a tape on this machine (SPEC section 18, docs/privacy.md): the
user's patterns and the allowed finding ids, kept in `privacy.json` in the tape's cache
folder (never synced): where the file is, reading it (taken over from a moved tape's old
folder), writing it, and the checks of a pattern and a kind. The verbs that change it
under a lock (`scan --allow`, `--add-pattern`) are scan.allow and scan.add_pattern.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import TYPE_CHECKING, Optional

from ..model.models import brief
from ..model.errors import InvalidInput, StorageError
from ..store.localstate import cache_folder

if TYPE_CHECKING:
    from ..history.tape import Tape

SETTINGS = "privacy.json"  # beside index.sqlite: this machine's patterns and allowed ids for the tape


def settings_path(tape: "Tape") -> Optional[str]:
    d = cache_folder(tape.store)
    return None if d is None else os.path.join(d, SETTINGS)


def load_settings(tape: "Tape") -> dict:
    path = settings_path(tape)
    if path is not None and not os.path.exists(path):
        _adopt_settings(tape, path)
    try:
        with open(path or "", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    pats = [p for p in data.get("patterns") or [] if isinstance(p, dict) and isinstance(p.get("regex"), str)]
    allowed = [a for a in data.get("allowed") or [] if isinstance(a, str)]
    return {"patterns": pats, "allowed": allowed}


def _adopt_settings(tape: "Tape", path: str) -> None:
    """A tape moved (or copied: `cp -a`, a restore) gets a new cache folder, and its scan
    settings stayed in the old one: `scan` found nothing of the user's patterns and `push`
    uploaded what they had stopped, silently (found by an audit). They are taken over
    (localstate.adopt), and stderr says from where."""
    from ..store.localstate import adopt

    came_from = adopt(tape.store, SETTINGS)
    if came_from is not None:
        sys.stderr.write(f"ctape: note: this tape's scan patterns and allowed findings were taken from its cache folder for {came_from} "
                         f"(the tape was moved or copied); they are kept in {path}\n")


def save_settings(tape: "Tape", data: dict) -> None:
    path = settings_path(tape)
    if path is None:
        raise StorageError("no writable index cache folder to keep privacy settings in; set CTAPE_CACHE_DIR")
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def check_regex(regex: str) -> re.Pattern:
    try:
        regex.encode("utf-8")
    except UnicodeEncodeError:
        # a byte of the argument that is not UTF-8: kept, it made every later scan, redact
        # and push fail with an internal error (found by an audit)
        raise InvalidInput(f"bad pattern {regex!r}: it is not valid Unicode (a byte of the argument is not UTF-8)") from None
    try:
        rx = re.compile(regex)
    except (re.error, OverflowError, RecursionError) as e:  # `a{99999999999}`: OverflowError
        raise InvalidInput(f"bad pattern {regex!r}: {e}") from None
    if rx.search(""):
        raise InvalidInput(f"bad pattern {regex!r}: it matches empty text")
    return rx


def check_kind(kind: str) -> str:
    """A finding's or a redaction's kind, as its marker shows it (`[redacted: KIND]`)."""
    if not isinstance(kind, str) or not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,39}", kind):
        raise InvalidInput(f"bad kind {brief(kind, 50)}: 1-40 of a-z, 0-9, _ and -, such as manual or api-key")
    return kind
