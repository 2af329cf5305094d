import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager

import pytest

import forkserver

# The whole run's index caches go to a folder of its own, never to the user's
# ~/.cache/ctape: set before any test module, module- or session-scoped fixture, or
# subprocess can open a tape (the per-test fixture below then gives each test its own).
# XDG_CACHE_HOME too, for a subprocess whose environment drops CTAPE_CACHE_DIR.
_RUN_CACHE = tempfile.mkdtemp(prefix="ctape-test-cache-")
os.environ["CTAPE_CACHE_DIR"] = os.path.join(_RUN_CACHE, "ctape")
os.environ["XDG_CACHE_HOME"] = os.path.join(_RUN_CACHE, "xdg")


# The suite runs thousands of `python -m ctape` subprocesses. With PYTHONDONTWRITEBYTECODE
# set (as on these machines) and a fresh clone (no __pycache__), each one compiled every
# module it imported again: 0.4-0.7 s of CPU instead of ~0.15 s. Children write their
# compiled modules into a folder of this run instead (never into the work tree).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(_RUN_CACHE, "pycache")


# Every process the suite starts imports this checkout's ctape, whatever another install
# or an editable install pointing elsewhere (a fresh clone's `pip install -e` re-points it)
# would give a `python script.py` child.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join([_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])


def pytest_configure(config):
    # CTAPE_LANGGRAPH_LATE=SECONDS: every TapeSaver.put / put_writes of this run starts up to
    # that late (seeded by CTAPE_LANGGRAPH_SEED), as LangGraph's worker threads can deliver
    # them: the LangGraph tests then run with their saves in other orders. Opt-in (a run
    # takes twice as long); what it found has tests of its own that force the order.
    late = float(os.environ.get("CTAPE_LANGGRAPH_LATE") or 0)
    if late <= 0:
        return
    import random
    import time

    try:
        from ctape.integrations.langgraph import TapeSaver
    except ImportError:
        return
    rng = random.Random(os.environ.get("CTAPE_LANGGRAPH_SEED", "0"))

    def arriving_late(call):
        def late_call(self, *args, **kwargs):
            time.sleep(rng.random() * late)
            return call(self, *args, **kwargs)

        return late_call

    TapeSaver.put = arriving_late(TapeSaver.put)
    TapeSaver.put_writes = arriving_late(TapeSaver.put_writes)


def pytest_unconfigure(config):
    forkserver.stop()
    shutil.rmtree(_RUN_CACHE, ignore_errors=True)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own index cache, and no CTAPE_* settings from the caller."""
    for var in ("CTAPE_DIR", "CTAPE_SESSION", "CTAPE_WRITER", "CTAPE_DEBUG", "CTAPE_MAX_OBJECT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CTAPE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def tape_dir(tmp_path):
    from ctape import Tape

    d = tmp_path / "tape"
    Tape.init(d).close()
    return d


@pytest.fixture
def tape(tape_dir):
    from ctape import Tape

    t = Tape.open(tape_dir)
    yield t
    t.close()


def examples(n: int) -> int:
    """Hypothesis examples for a property test: a third of `n` in the default run (the suite
    stays within its time), three times `n` with CTAPE_SLOW=1 (the long run)."""
    return n * 3 if os.environ.get("CTAPE_SLOW") == "1" else max(50, n // 3)


def run_cli(*args, input=None, env=None, cwd=None, check=False):
    """Run the real `ctape` command in a process of its own (forked from a server that has
    ctape imported: tests/forkserver.py; CTAPE_TEST_FORK=0 starts a new interpreter each time)."""
    e = dict(os.environ)
    e.update(env or {})
    p = forkserver.run([str(a) for a in args], input, e, cwd, _RUN_CACHE)
    if check and p.returncode != 0:
        raise AssertionError(f"ctape {args} failed ({p.returncode}): {p.stderr.decode()}")
    return p


@contextmanager
def small_tmpfs(mnt, options: str):
    """A real tmpfs mounted at the folder `mnt` with mount OPTIONS (size=4m, ...): a disk to
    fill up. Skips where this machine cannot mount one (needs root and mount(8))."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount(8) for a small tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


@contextmanager
def exfat_disk(folder):
    """A real exFAT file system (FUSE, on a loop device) mounted under `folder`: no hard links
    (link() fails with EPERM), names case-insensitive, chmod ignored, as on a USB stick. Skips
    where this machine cannot make one (needs root, losetup, mkfs.exfat and mount.exfat-fuse:
    .ci/run installs exfatprogs and exfat-fuse)."""
    tools = ("losetup", "mkfs.exfat", "mount.exfat-fuse")
    if os.geteuid() != 0 or not all(shutil.which(t) for t in tools):
        pytest.skip("needs root, losetup, mkfs.exfat and mount.exfat-fuse for an exFAT disk")
    img, mnt = os.path.join(folder, "exfat.img"), os.path.join(folder, "exfat")
    os.makedirs(mnt)
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["mkfs.exfat", img], capture_output=True, check=True)
    loop = subprocess.run(["losetup", "-f", "--show", img], capture_output=True, text=True)
    if loop.returncode != 0:
        pytest.skip(f"cannot attach a loop device here: {loop.stderr.strip()}")
    dev = loop.stdout.strip()
    try:
        r = subprocess.run(["mount.exfat-fuse", dev, mnt], capture_output=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount exFAT here: {r.stderr.decode().strip()}")
        try:
            yield mnt
        finally:
            subprocess.run(["umount", mnt], capture_output=True)
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


@contextmanager
def following(tape_dir, *paths):
    """A real `ctape watch` following `paths` into tape_dir; yields the list its output lines
    go into (read as they come). Stopped with SIGINT at the end (killed if it hangs)."""
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "watch", *map(str, paths)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(p.stdout), daemon=True)
    reader.start()
    try:
        yield out
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        reader.join(timeout=10)


def snapshot(path):
    """Every file under path with its bytes, to prove a command changed nothing."""
    out = {}
    for root, dirs, files in os.walk(path):
        for name in dirs:
            out[os.path.relpath(os.path.join(root, name), path)] = "dir"
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = f.read()
    return out
