"""Runs a growth benchmark (bench_many_segments.py, bench_many_sessions.py) for ctape, another
checkout of ctape and the peers, each in a process of its own, and prints one row per run:
a cell for each fifth of the work, and the last fifth's CPU per step against the first's
(flat is linear; growing is a cost that rises with the shape)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Callable, Optional

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def run_beside(script: str, n: int, against: Optional[str], prefix: str, width: int, cell: Callable[[list], str]) -> None:
    """`script --worker PEER N DIR SRC` prints the fifths as JSON (each a list whose first
    item is the CPU seconds per step); `cell` formats one fifth in `width` characters."""
    runs = [("ctape", ROOT)] + ([(f"ctape ({against})", against)] if against else []) + [("jsonl-fsync", ROOT), ("sqlite", ROOT)]
    print(f"{'peer':<28}" + "".join(f"{f'fifth {k + 1}':>{width}}" for k in range(5)) + f"{'last / first (cpu)':>20}")
    for label, src in runs:
        d = tempfile.mkdtemp(prefix=prefix)
        try:
            p = subprocess.run([sys.executable, script, "--worker", label.split(" ")[0], str(n), d, src],
                               capture_output=True, text=True)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        if p.returncode != 0:
            print(f"{label:<28}failed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
            continue
        fifths = json.loads(p.stdout)
        print(f"{label:<28}" + "".join(f"{cell(f):>{width}}" for f in fifths) + f"{fifths[-1][0] / fifths[0][0]:>19.2f}x")
