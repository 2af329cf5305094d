"""Colours for fenced code blocks: a small tokenizer that escapes every token it emits.

Keywords, strings, comments and numbers of a few languages agents write most (Python,
JavaScript/TypeScript, shell, JSON); any other language is shown plain.
"""

from __future__ import annotations

import re
from typing import Optional

from .escape import esc

_KEYWORDS = {
    "python": "False None True and as assert async await break class continue def del elif else except finally for from "
    "global if import in is lambda match case nonlocal not or pass raise return try while with yield self",
    "js": "async await break case catch class const continue default delete do else export extends false finally for "
    "function if import in instanceof interface let new null of return static super switch this throw true try type "
    "typeof undefined var void while yield",
    "bash": "case do done elif else esac export fi for function if in local return set then unset until while",
    "json": "true false null",
}
_ALIASES = {
    "py": "python", "python3": "python", "javascript": "js", "ts": "js", "typescript": "js", "jsx": "js", "tsx": "js",
    "sh": "bash", "shell": "bash", "zsh": "bash", "console": "bash", "jsonl": "json",
}
# A string or comment that is not closed runs to the end of its line (or of the code, for
# those that span lines) and is shown as one: a pattern that had to find its closing quote
# failed at every opening quote after a scan to the end, time quadratic in the code (an
# entry of 8,000 characters of `"\` took 0.35 s, a page of them 20 s, with every other
# page of the server waiting: the scan holds the interpreter)
_COMMENT = {"python": r"#[^\n]*", "bash": r"(?<![\w$])#[^\n]*", "js": r"//[^\n]*|/\*.*?(?:\*/|\Z)", "json": r"(?!)"}
_STRING = {
    "python": r"(?:[rbfu]{0,2})(?:'''.*?(?:'''|\Z)|\"\"\".*?(?:\"\"\"|\Z)|'(?:\\.|[^'\\\n])*'?|\"(?:\\.|[^\"\\\n])*\"?)",
    "js": r"'(?:\\.|[^'\\\n])*'?|\"(?:\\.|[^\"\\\n])*\"?|`(?:\\.|[^`\\])*`?",
    "bash": r"'[^']*'?|\"(?:\\.|[^\"\\])*\"?",
    "json": r"\"(?:\\.|[^\"\\\n])*\"?",
}
_PATTERNS: dict[str, re.Pattern] = {}


def _pattern(lang: str) -> re.Pattern:
    if lang not in _PATTERNS:
        _PATTERNS[lang] = re.compile(
            rf"(?P<c>{_COMMENT[lang]})|(?P<s>{_STRING[lang]})|(?P<n>\b\d[\d_.xXa-fA-FeE]*\b)|(?P<w>[A-Za-z_$][\w$]*)", re.S
        )
    return _PATTERNS[lang]


def language(name: str) -> Optional[str]:
    name = name.lower()
    name = _ALIASES.get(name, name)
    return name if name in _KEYWORDS else None


def highlight(code: str, lang: str) -> str:
    """Code as escaped HTML with <span class="tok-X"> around keywords, strings, comments, numbers."""
    keywords = set(_KEYWORDS[lang].split())
    out: list[str] = []
    pos = 0
    for m in _pattern(lang).finditer(code):
        kind = m.lastgroup
        if kind == "w" and m.group(0) not in keywords:
            continue  # a plain name: left in the plain run
        out.append(esc(code[pos : m.start()]))
        out.append(f'<span class="tok-{"k" if kind == "w" else kind}">{esc(m.group(0))}</span>')
        pos = m.end()
    out.append(esc(code[pos:]))
    return "".join(out)
