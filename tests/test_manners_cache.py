"""The test suite never writes into the user's own index cache (~/.cache/ctape).

tests/conftest.py points CTAPE_CACHE_DIR (and XDG_CACHE_HOME) at a folder of the run's
own before any test module is imported. This proves it with a real pytest run under a
HOME of its own, on a probe that opens tapes where the per-test fixture cannot reach: a
module-scoped fixture, and a CLI subprocess started from it.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import ctape

PROBE = '''
import os, subprocess, sys
import pytest
from ctape import Tape


@pytest.fixture(scope="module")
def early_tape(tmp_path_factory):
    d = tmp_path_factory.mktemp("probe") / "tape"
    with Tape.init(d) as t:
        t.session("chat").append("user", {"content": "hi"})
    subprocess.run([sys.executable, "-m", "ctape", "--dir", str(d), "log", "-s", "chat"], check=True, capture_output=True)
    return d


def test_reads(early_tape):
    with Tape.open(early_tape) as t:
        assert t.session("chat").head is not None
'''


def _run_probe(tmp_path: Path, with_conftest: bool) -> Path:
    root = tmp_path / ("with" if with_conftest else "without")
    home = root / "home"
    home.mkdir(parents=True)
    (root / "test_probe.py").write_text(PROBE)
    if with_conftest:
        for name in ("conftest.py", "forkserver.py"):  # the conftest and the module it imports
            shutil.copy(Path(__file__).with_name(name), root / name)
    env = {k: v for k, v in os.environ.items() if k not in ("CTAPE_CACHE_DIR", "XDG_CACHE_HOME")}
    env["HOME"] = str(home)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the installed plugins cost seconds and are not needed here
    repo = str(Path(ctape.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = repo + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "test_probe.py")],
                       cwd=root, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return home / ".cache" / "ctape"


def test_suite_leaves_the_home_cache_alone(tmp_path):
    # the probe does write a cache where nothing redirects it (so the check below can fail)
    assert _run_probe(tmp_path, with_conftest=False).is_dir()
    # under the suite's conftest, nothing lands in HOME's cache
    assert not _run_probe(tmp_path, with_conftest=True).exists()
