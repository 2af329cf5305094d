"""The `ctape` command: parse arguments, call one operation, format its output.

`main` (the root group, in base.py) is the entry point. Each module named in GROUPS
defines its commands with `@main.command()`; importing it registers them. To add a
group of commands, write ctape/cli/NAME.py and add "NAME" to GROUPS, one per line.
"""

from __future__ import annotations

import importlib

from .base import main

GROUPS = (
    "history",
    "refs",
    "sessions",
    "maintenance",
    "io",
    "demo",
    "search",
    "serve",
    "watch",
    "remote",
    "privacy",
)

for _group in GROUPS:
    importlib.import_module(f"{__name__}.{_group}")

__all__ = ["GROUPS", "main"]
