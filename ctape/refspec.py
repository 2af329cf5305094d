"""The REF syntax of the command line, parsed without touching the tape.

    REF    := BASE [ "@{" N "}" ] { "~" [N] | "^" }
    BASE   := full hash | SESSION | SESSION/BRANCH | SESSION/HEAD | hex prefix (4+)
            | HEAD, a branch, a tag or an anchor name of the current session
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .errors import InvalidInput

_SUFFIX = re.compile(r"(~[0-9]*|\^)")


@dataclass(frozen=True)
class RefSpec:
    base: str
    reflog: Optional[int] = None  # @{N}
    back: int = 0  # how many parents to walk


def parse_ref(text: str) -> RefSpec:
    if not isinstance(text, str) or not text:
        raise InvalidInput("empty ref; give a hash, SESSION, SESSION/BRANCH or a hex prefix")
    i = len(text)
    # find where the suffixes start: the first ~ or ^, or @{ ... }
    m = re.search(r"[~^]|@\{", text)
    base = text if m is None else text[: m.start()]
    rest = "" if m is None else text[m.start() :]
    if not base:
        raise InvalidInput(f"invalid ref {text!r}: nothing before {rest[:2]!r}")
    reflog = None
    if rest.startswith("@{"):
        close = rest.find("}")
        num = rest[2:close] if close > 0 else ""
        if not re.fullmatch(r"[0-9]+", num):
            raise InvalidInput(f"invalid ref {text!r}: use SESSION@{{N}} with N a number")
        reflog = int(num)
        rest = rest[close + 1 :]
    back = 0
    pos = 0
    while pos < len(rest):
        m2 = _SUFFIX.match(rest, pos)
        if m2 is None:
            raise InvalidInput(f"invalid ref {text!r}: unexpected {rest[pos:]!r}; use ~N or ^")
        tok = m2.group(0)
        back += 1 if tok in ("~", "^") else int(tok[1:])
        pos = m2.end()
    del i
    return RefSpec(base, reflog, back)
