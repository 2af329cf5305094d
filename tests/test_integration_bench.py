"""The integrations' read benchmark runs (its figures are in docs/performance.md)."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")  # the `bench` extra
pytest.importorskip("agents")

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench", "bench_integrations.py")


def test_quick_run(tmp_path):
    p = subprocess.run([sys.executable, BENCH, "--quick"], capture_output=True, text=True, timeout=600, env=dict(os.environ, CTAPE_BENCH_TMP=str(tmp_path)))
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    assert any(line.startswith("agents get_items") for line in lines)
    assert sum(line.startswith("langgraph get_state_history") for line in lines) == 2
