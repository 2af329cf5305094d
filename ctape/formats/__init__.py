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
            return _import_files(tape, fmt, readable, session, progress)
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


def export_ref(tape, ref: str, fmt: str) -> Iterator[str]:
    return _module(fmt).export(tape, ref)


def export_notes(tape, ref: str, fmt: str) -> list[str]:
    """What the format cannot carry of REF (branch names...), one line each, for stderr."""
    notes = getattr(_module(fmt), "notes", None)
    return notes(tape, ref) if notes else []
