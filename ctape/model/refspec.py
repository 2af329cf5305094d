"""The REF syntax of the command line, parsed without touching the tape.

    REF    := BASE [ "@{" N "}" ] { "~" [N] | "^" }
    BASE   := full hash | SESSION | SESSION/BRANCH | SESSION/HEAD | hex prefix (4+)
            | HEAD, a branch, a tag or an anchor name of the current session
    N      := 0 .. MAX_COUNT (no history is longer; a larger count is a bad ref, not a walk)

@{N} follows a SESSION, SESSION/HEAD or HEAD (the current session's): where that HEAD
was N moves ago.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .errors import InvalidInput
from .timespec import shown

_SUFFIX = re.compile(r"(~[0-9]*|\^)", re.ASCII)
MAX_COUNT = 10**12 - 1  # ~N, @{N} and all the ~ and ^ of one ref together


class SessionOfRef(str):
    """A session a command reads because a REF names it by its first part (`chat~2`), not
    because -s or $CTAPE_SESSION gave it. Only a given session makes a bare name a branch
    first (SPEC 4): the REF `chat` is then session chat's HEAD, though chat has a branch
    named chat (write `chat/chat` for that one)."""

    __slots__ = ()


@dataclass(frozen=True)
class RefSpec:
    base: str
    reflog: Optional[int] = None  # @{N}
    back: int = 0  # how many parents to walk


def parse_ref(text: str) -> RefSpec:
    if not isinstance(text, str):  # (it said "empty ref" for 5 or b"c": found by an audit)
        raise InvalidInput(f"a REF is a string (a hash, SESSION, SESSION/BRANCH or a hex prefix), not {shown(text)}")
    if not text:
        raise InvalidInput("empty ref; give a hash, SESSION, SESSION/BRANCH or a hex prefix")
    # find where the suffixes start: the first ~ or ^, or @{ ... }
    m = re.search(r"[~^]|@\{", text)
    base = text if m is None else text[: m.start()]
    rest = "" if m is None else text[m.start() :]
    if not base:
        what = "@{" if rest.startswith("@{") else rest[0]
        also = ("; ^REF (git's \"not REF\") is not read here: `ctape diff A B` compares two refs" if what == "^" else
                f"; did you mean HEAD{rest}?" if what == "@{" else "")
        raise InvalidInput(f"invalid ref {shown(text)}: nothing before {what!r}{also}")
    reflog = None
    if rest.startswith("@{"):
        close = rest.find("}")
        num = rest[2:close] if close > 0 else ""
        if not re.fullmatch(r"[0-9]+", num, re.ASCII):
            raise InvalidInput(f"invalid ref {shown(text)}: use SESSION@{{N}} with N a number")
        reflog = _count(num, text, "@{N}")
        rest = rest[close + 1 :]
    back = 0
    pos = 0
    while pos < len(rest):
        m2 = _SUFFIX.match(rest, pos)
        if m2 is None:
            raise InvalidInput(f"invalid ref {shown(text)}: unexpected {shown(rest[pos:])}; use ~N or ^")
        tok = m2.group(0)
        back += 1 if tok in ("~", "^") else _count(tok[1:], text, "~N")
        if back > MAX_COUNT:
            raise InvalidInput(f"invalid ref {shown(text)}: its ~ and ^ go back more than {MAX_COUNT:,} entries; no history is that long")
        pos = m2.end()
    return RefSpec(base, reflog, back)


def _count(digits: str, text: str, what: str) -> int:
    """N of ~N or @{N}, refused (a bad ref) past MAX_COUNT before int() sees its digits."""
    if len(digits.lstrip("0")) > len(str(MAX_COUNT)) or int(digits) > MAX_COUNT:
        raise InvalidInput(f"invalid ref {shown(text)}: {what} is at most {MAX_COUNT:,}; no history is that long")
    return int(digits)
