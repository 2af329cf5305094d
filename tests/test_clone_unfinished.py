"""What a killed command leaves is finished or cleaned by the next one (found by the
crash-point audit, tests/test_crash_points.py, which kills every command at every
file-system call under strace; these tests need no strace).

- `ctape clone` killed (kill -9, a power cut) left a folder that the rerun refused ("a
  folder that is not empty"), and, killed early, an empty tape with the remote's id that
  `fsck` called fine. Now the folder is marked as an unfinished clone until it is whole:
  every command refuses it and says how to finish it, and the same clone run again
  finishes it. A clone run again after it had finished brings the copy up to date.
- `init` (and so `clone`) killed between writing `ctape.json.tmp<pid>-<hex>` and linking it
  left that file for good; the next init removes those of processes that are gone.
- A command killed while it saved a setting in the index cache left `<name>.<hex>.tmp` for
  good; `ctape cache gc` removes those over an hour old.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from ctape import Tape
from ctape.store.store import CLONING, Store

from conftest import run_cli

KILLED_IN_PULL = """
import os, sys
import ctape.sync.pull as p
p.pull = lambda *a, **k: os.kill(os.getpid(), 9)  # the clone dies as its pull starts: the tape made, empty
from ctape.cli import main
sys.argv = ["ctape"] + sys.argv[1:]
main()
"""


@pytest.fixture
def remote(tmp_path):
    src, rem = tmp_path / "src", tmp_path / "remote"
    run_cli("--dir", src, "init", check=True)
    hashes = [run_cli("--dir", src, "append", "user", json.dumps({"content": f"m{i}"}), "-s", "chat", check=True).stdout.decode().strip()
              for i in range(3)]
    rem.mkdir()
    run_cli("--dir", src, "remote", "add", "origin", f"file://{rem}", check=True)
    run_cli("--dir", src, "push", check=True)
    return src, f"file://{rem}", hashes


def _killed_clone(url, target):
    p = subprocess.run([sys.executable, "-c", KILLED_IN_PULL, "clone", url, str(target)], capture_output=True)
    assert p.returncode == -9, p.stderr.decode()


def test_a_killed_clone_is_refused_until_the_same_clone_finishes_it(remote, tmp_path):
    src, url, hashes = remote
    target = tmp_path / "copy"
    _killed_clone(url, target)
    assert (target / CLONING).exists() and (target / "ctape.json").exists()  # killed inside the pull: a tape, empty
    for args in (["fsck"], ["log", "-s", "chat"], ["status"], ["append", "user", '{"content": "x"}', "-s", "chat"]):
        p = run_cli("--dir", target, *args)
        err = p.stderr.decode().strip()
        assert p.returncode != 0 and len(err.splitlines()) == 1, (args, err)
        assert "a clone that did not finish" in err and f"ctape clone {url} {target}" in err, err
    with pytest.raises(Exception, match="did not finish"):
        Tape.open(target)
    assert run_cli("--dir", target, "init").returncode != 0  # never a new identity on it
    other = tmp_path / "other"
    other.mkdir()
    p = run_cli("clone", f"file://{other}", target)
    assert p.returncode == 2 and b"unfinished clone of " + url.encode() in p.stderr, p.stderr
    p = run_cli("clone", url, target)
    assert p.returncode == 0, p.stderr.decode()
    assert not (target / CLONING).exists()
    with Tape.open(target) as t:
        assert [e.hash for e in t.session("chat").log()][::-1] == hashes
        assert t.fsck()["ok"]


def test_a_clone_run_again_after_it_finished_pulls(remote, tmp_path):
    src, url, hashes = remote
    target = tmp_path / "copy"
    run_cli("clone", url, target, check=True)
    more = run_cli("--dir", src, "append", "user", '{"content": "later"}', "-s", "chat", check=True).stdout.decode().strip()
    run_cli("--dir", src, "push", check=True)
    p = run_cli("clone", url, target)
    assert p.returncode == 0, p.stderr.decode()
    assert b"already has " + url.encode() + b" as origin (an earlier clone, or the copy that pushed there); pulled" in p.stdout, p.stdout
    with Tape.open(target) as t:
        assert t.session("chat").head.hash == more
    # a folder that is another tape, or not a clone of this remote, is still refused
    run_cli("--dir", tmp_path / "mine", "init", check=True)
    p = run_cli("clone", url, tmp_path / "mine")
    assert p.returncode == 2 and b"not empty" in p.stderr

    # the copy that pushed there is not called a clone: it has the remote as origin
    p = run_cli("clone", url, src)
    assert p.returncode == 0 and b"is a clone of" not in p.stdout, p.stdout
    assert p.stdout.startswith(str(src).encode() + b" already has " + url.encode() + b" as origin"), p.stdout


def test_a_clone_under_way_is_not_taken_over(remote, tmp_path):
    import fcntl

    src, url, _ = remote
    target = tmp_path / "copy"
    target.mkdir()
    (target / CLONING).write_text(json.dumps({"url": url}))
    fd = os.open(target / CLONING, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a running clone holds it
    try:
        p = run_cli("clone", url, target)
        assert p.returncode == 2 and b"another `ctape clone` is making" in p.stderr, p.stderr
        assert (target / CLONING).exists() and os.listdir(target) == [CLONING]  # nothing of it removed
    finally:
        os.close(fd)


def test_init_removes_the_temporary_identity_of_a_killed_init_only(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    (root / f"ctape.json.tmp{dead}-0a1b2c3d").write_text("{}")
    (root / f"ctape.json.tmp{os.getpid()}-0a1b2c3d").write_text("{}")  # a live process's: another init now
    assert Store.init(str(root))
    assert sorted(os.listdir(root)) == sorted(["ctape.json", "packs", "sessions", f"ctape.json.tmp{os.getpid()}-0a1b2c3d"])


def test_cache_gc_removes_old_temporaries_of_killed_settings_writes(tape_dir, tmp_path):
    cache = os.environ["CTAPE_CACHE_DIR"]
    with Tape.open(tape_dir) as t:
        index = t.store.index.path
    folder = os.path.dirname(index)
    old, young = os.path.join(folder, "remote-origin.json.0a1b2c3d.tmp"), os.path.join(folder, "session.99aa.tmp")
    for path in (old, young):
        with open(path, "w") as f:
            f.write("{}")
    hour_ago = time.time() - 3700
    os.utime(old, (hour_ago, hour_ago))
    p = run_cli("cache", "gc", "--dry-run")
    assert p.returncode == 0 and b"would remove 1 temporary file" in p.stderr and os.path.exists(old), p.stderr
    p = run_cli("cache", "gc")
    assert p.returncode == 0 and b"removed 1 temporary file" in p.stderr, p.stderr
    assert not os.path.exists(old) and os.path.exists(young)
    assert os.path.exists(index) and folder.startswith(cache)
