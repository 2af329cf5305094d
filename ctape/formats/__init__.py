"""Importers and exporters, one module per format, behind one small interface.

Each format module provides:

    import_file(tape, path, session) -> list[str]   # human lines about what was imported
    export(tape, ref, session_or_none) -> Iterator[str]  # JSON lines

`import_files` and `export_ref` pick the module by name.
"""

from __future__ import annotations

import importlib
from typing import Iterator, Optional

from ..errors import InvalidInput

MODULES = {"jsonl": "jsonl", "claude-code": "claude_code", "codex": "codex", "openai": "openai"}


def _module(fmt: str):
    if fmt not in MODULES:
        raise InvalidInput(f"unknown format {fmt!r}; use one of: {', '.join(MODULES)}")
    return importlib.import_module(f".{MODULES[fmt]}", __name__)


def import_files(tape, fmt: str, files: list[str], session: Optional[str], progress: bool = False) -> list[str]:
    mod = _module(fmt)
    return mod.import_files(tape, files, session, progress=progress)


def export_ref(tape, ref: str, fmt: str) -> Iterator[str]:
    return _module(fmt).export(tape, ref)
