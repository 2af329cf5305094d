"""Importers and exporters, one module per format, behind one small interface.

Each format module provides:

    import_file(tape, path, session) -> list[str]   # human lines about what was imported
    export(tape, ref, session_or_none) -> Iterator[str]  # JSON lines

`import_files` and `export_ref` pick the module by name (import_files detects it when
none is given).
"""

from __future__ import annotations

import importlib
import itertools
from typing import Iterator, Optional

from ..errors import InvalidInput

CUT = "the compressed file ends inside a zstd frame (cut short, or still being written)"
MODULES = {"jsonl": "jsonl", "claude-code": "claude_code", "codex": "codex", "openai": "openai", "gemini": "gemini"}


def _module(fmt: str):
    if fmt not in MODULES:
        raise InvalidInput(f"unknown format {fmt!r}; use one of: {', '.join(MODULES)}")
    return importlib.import_module(f".{MODULES[fmt]}", __name__)


def import_files(tape, fmt: Optional[str], files: list[str], session: Optional[str], progress: bool = False) -> list[str]:
    """Import files of format `fmt`; None detects each file's format (formats/detect.py).
    A FILE may be `-` (stdin), a pipe or a `.zst` file: each is read once (reading.spooled)."""
    from . import seen
    from .reading import spooled

    try:
        with spooled(files) as readable:
            out = _import_files(tape, fmt, readable, session, progress)
            return out + [f"{p}: {CUT}; imported what it holds before the cut" for p in readable if getattr(p, "cut", False)]
    finally:
        seen.flush()  # what the imports made of the files, for the next import of the same ones


def _import_files(tape, fmt: Optional[str], files: list[str], session: Optional[str], progress: bool) -> list[str]:
    if fmt is None:
        from .detect import detect

        out: list[str] = []
        found = [(detect(path), path) for path in files]  # all first: an unknown file imports nothing
        for name, group in itertools.groupby(found, key=lambda x: x[0]):
            out += _module(name).import_files(tape, [p for _, p in group], session, progress=progress)
        return out
    mod = _module(fmt)
    return mod.import_files(tape, files, session, progress=progress)


def export_ref(tape, ref: str, fmt: str, tally: Optional[dict] = None) -> Iterator[str]:
    """The JSON lines of REF in `fmt`; `tally`, if given, counts what became of the
    entries the format has no record of their own for (_common.tallied), for export_notes."""
    return _module(fmt).export(tape, ref, tally)


def export_notes(tape, ref: str, fmt: str, tally: Optional[dict] = None) -> list[str]:
    """What the format cannot carry of REF (branch names, system prompts, anchors...), one
    line each, for stderr; `tally` is export_ref's, once the export is done."""
    mod = _module(fmt)
    notes = getattr(mod, "notes", None)
    out = notes(tape, ref) if notes else []
    demotes = getattr(mod, "DEMOTES", {})
    tally = dict(tally or {})
    keeps = "export --format jsonl keeps every entry as it is"
    out += _answers_and_streams(fmt, getattr(mod, "ANSWERS", None), tally, keeps)
    counted = sorted(tally.items(), key=lambda kv: _order(kv[0][0]))  # (kind, written) -> entries
    dropped = {kind: n for (kind, written), n in counted if not written}
    demoted = {kind: n for (kind, written), n in counted if written and kind in demotes}
    if demoted:
        ways: dict[str, list[str]] = {}
        for kind, n in demoted.items():
            ways.setdefault(demotes[kind], []).append(_count(n, kind))
        went = "; ".join(f"{' and '.join(counts)} went out as {how}" for how, counts in ways.items())
        out.append(f"{fmt} has no record for {' or '.join(_plural(k) for k in demoted)}: {went}, "
                   f"which an import reads back as hidden bookkeeping ({keeps})")
    if dropped:
        out.append(f"{fmt} has no record for {' or '.join(_plural(k) for k in dropped)}: "
                   f"{' and '.join(_count(n, k) for k, n in dropped.items())} left out ({keeps})")
    return out


def _answers_and_streams(fmt: str, answers: Optional[tuple[str, str]], tally: dict, keeps: str) -> list[str]:
    """The notes for what _common.tallied wrote otherwise than by its kind (it takes their
    counts out of `tally`): errors that answer a tool call, written as the format's failed
    tool result (`answers`: how they went out, what an import reads back), and interrupted
    streams."""
    from ._common import ANSWER

    out = []
    n = tally.pop((ANSWER, True), 0)
    if n:
        went, back = answers or ("a tool result", "a tool_result entry")
        out.append(f"{fmt} has no record for an error that answers a tool call: {_count(n, 'error')} went out as "
                   f"{'a failed tool result' if n == 1 else 'failed tool results'} ({went}), which an import reads back as "
                   f"{back}: the call stays answered ({keeps})")
    left, went = tally.pop(("streaming", False), 0), tally.pop(("streaming", True), 0)
    if left or went:
        how = []
        if left:
            how.append(f"{_count(left, 'streaming')} at the end of a branch left out, as context leaves it out by default")
        if went:
            how.append(f"{_count(went, 'streaming')} the agent went on from went out as "
                       f"{'an assistant message' if went == 1 else 'assistant messages'}, as context shows it, which an import reads back as finished")
        out.append(f"{fmt} has no record for interrupted streams: {'; '.join(how)} ({keeps})")
    return out


_NOUNS = {"system": "system message", "streaming": "interrupted stream", "anchor": "anchor", "error": "error",
          "thinking": "thinking block"}


def _order(kind: str) -> tuple:
    return (list(_NOUNS).index(kind) if kind in _NOUNS else len(_NOUNS), kind)


def _plural(kind: str) -> str:
    noun = _NOUNS.get(kind, f"{kind} entry")
    return noun[:-5] + "entries" if noun.endswith(" entry") else noun + "s"


def _count(n: int, kind: str) -> str:
    return f"1 {_NOUNS.get(kind, f'{kind} entry')}" if n == 1 else f"{n} {_plural(kind)}"
