"""`ctape demo`: it works where the README runs it, every command it prints works as
typed, and a demo that cannot finish leaves nothing half-done (issue 24, item 3)."""

import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ctape

REPO = str(Path(ctape.__file__).resolve().parent.parent)

# ctape installed as `pip install -e .` installs it: a finder at the end of sys.meta_path,
# so that a folder named ctape in the current directory (the clone, next to which the
# README's commands run) is found first, as a namespace package
EDITABLE = textwrap.dedent(f"""\
    import importlib.machinery, importlib.util, sys

    class _Editable:
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name == "ctape":
                return importlib.util.spec_from_file_location(name, {REPO!r} + "/ctape/__init__.py",
                                                              submodule_search_locations=[{REPO!r} + "/ctape"])
            if name.startswith("ctape."):  # ctape.__main__ under a namespace ctape (python -m ctape)
                return importlib.machinery.PathFinder.find_spec(name, [{REPO!r} + "/" + name.rpartition(".")[0].replace(".", "/")])
            return None

    # right after the finder of sys.path, as setuptools' own (and before any other ctape)
    sys.meta_path.insert(sys.meta_path.index(importlib.machinery.PathFinder) + 1, _Editable)
    """)


@pytest.fixture
def shell(tmp_path):
    """A folder holding a clone named ctape/ (the current directory), and an environment
    where ctape is installed editable and `ctape` is on PATH."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(EDITABLE)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    script = bin_ / "ctape"
    script.write_text(f"#!{sys.executable}\nfrom ctape.cli import main\nmain()\n")  # as pip writes it
    script.chmod(0o755)
    here = tmp_path / "work"
    (here / "ctape" / "ctape").mkdir(parents=True)  # the clone: its package one level down
    (here / "ctape" / "pyproject.toml").write_text("[project]\nname = 'ctape'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTAPE_") or k == "CTAPE_CACHE_DIR"}
    env["PYTHONPATH"] = str(site)
    env["PATH"] = f"{bin_}{os.pathsep}{env.get('PATH', '')}"
    return here, env


def _printed_commands(stderr: str) -> list[str]:
    out = []
    for line in stderr.splitlines():
        if line.startswith("$ "):
            out.append(line[2:])
        elif line.startswith("# more to try: "):
            out.append(line[len("# more to try: "):])
    return out


@pytest.mark.parametrize("how", ["ctape", "python -m ctape"])
def test_demo_next_to_a_clone_and_its_commands_work_as_typed(shell, tmp_path, how):
    here, env = shell
    tape = tmp_path / "demo tape"  # a space: the printed commands quote it
    cmd = ["ctape"] if how == "ctape" else [sys.executable, "-m", "ctape"]
    p = subprocess.run([*cmd, "--dir", str(tape), "demo"], cwd=here, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and "error" not in p.stderr
    assert "interrupted stream holds" in p.stderr
    commands = _printed_commands(p.stderr)
    assert len(commands) == 5 and all(c.split()[0] in ("ctape", "python", "python3", sys.executable) for c in commands)
    for c in commands:
        assert shlex.quote(str(tape)) in c and "-s" in c.split() or " stats" in c
        r = subprocess.run(["bash", "-c", c], cwd=here, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (c, r.stderr)
        assert r.stdout.strip(), c
    # run again: a second session beside the first, and its commands name it
    p = subprocess.run([*cmd, "--dir", str(tape), "demo", "--no-crash"], cwd=here, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "-s demo-2" in p.stderr


def test_a_demo_that_cannot_finish_leaves_nothing(shell, tmp_path):
    here, env = shell
    tape = tmp_path / "new-tape"
    # objects over 1000 bytes read back as too large: the demo fails after it started writing
    env = dict(env, CTAPE_MAX_OBJECT="1000")
    p = subprocess.run(["ctape", "--dir", str(tape), "demo"], cwd=here, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("ctape: error: the demo stopped") and f"removed {tape}" in last
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr
    assert not tape.exists()  # it made the folder, and took it back


def test_ctrl_c_during_a_demo_leaves_nothing_half_done(tmp_path):
    """Ctrl-C goes to the whole process group (the demo and its streaming writer), often
    twice (a second press; `timeout` sends one to the process and one to its group): the
    demo either finished, or took back all it wrote, in a new folder and in a tape that
    had sessions already. Before, 15 of 40 runs left a folder without ctape.json (its
    clean-up stopped by the second SIGINT) or a half-recorded session."""
    import random
    import signal
    import time

    rng = random.Random(5)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTAPE_")}
    env["CTAPE_CACHE_DIR"] = str(tmp_path / "cache")
    existing = tmp_path / "existing"
    with ctape.Tape.init(existing) as t:
        t.session("keep").append("user", {"content": "mine"})
    outcomes = set()
    for i in range(40 if os.environ.get("CTAPE_SLOW") else 6):
        target = tmp_path / f"new{i}" if i % 2 == 0 else existing
        # as from a terminal: SIGINT at its default in the demo (a test run started with `&`
        # from a script ignores it, and children inherit that: Python then never raises
        # KeyboardInterrupt, and every demo here ran to its end)
        p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(target), "demo"], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(rng.uniform(0.3, 1.4))
        for _ in range(2):
            try:
                os.killpg(p.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            time.sleep(0.005)
        err = p.communicate(timeout=60)[1]
        assert "Traceback" not in err
        outcomes.add(p.returncode)
        if target != existing:  # gone, or whole (an interrupt after the recording ends lands in the showing)
            assert target.exists() or p.returncode != 0, (i, p.returncode, err)
            if target.exists():
                with ctape.Tape.open(target) as t:
                    assert [x["session"] for x in t.sessions()] == ["demo"]
                    st = t.session("demo").status()
                    assert st["interrupted_stream"] is None and len(t.session("demo").branches()) == 2, (i, st)
        else:
            with ctape.Tape.open(existing) as t:
                names = {x["session"] for x in t.sessions()}
                assert "keep" in names
                for n in names - {"keep"}:  # a demo session is there only if it finished
                    st = t.session(n).status()
                    assert st["interrupted_stream"] is None and len(t.session(n).branches()) == 2, (i, n, st)
    assert outcomes & {130, -signal.SIGINT}  # the interrupts did land mid-way


def test_a_ctrl_c_lost_in_a_finalizer_prints_no_traceback():
    """The Ctrl-C test above once failed (1 in ~40 runs on a loaded machine): the second
    SIGINT landed in `subprocess.Popen.__del__` while the collector ran, and Python printed
    "Exception ignored in ... Traceback ... KeyboardInterrupt". The CLI now drops such
    reports of a KeyboardInterrupt (it is lost either way) and shows any other."""
    code = (
        "import atexit, gc\n"
        "from ctape.cli import main\n"
        "class Finalized:\n"
        "    def __init__(self, exc): self.exc, self.me = exc, self\n"
        "    def __del__(self): raise self.exc\n"
        "def later():\n"
        "    Finalized(KeyboardInterrupt()); Finalized(ValueError('shown')); gc.collect()\n"
        "atexit.register(later)\n"
        "main(['--version'])\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "KeyboardInterrupt" not in p.stderr, p.stderr
    assert "ValueError: shown" in p.stderr, p.stderr  # the rest is shown as Python shows it
