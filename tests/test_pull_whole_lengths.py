"""A pull leaves another writer's segment only at a length a push read it at (docs/remotes.md,
"What push and pull do"): never cut inside a piece by a kill, nor between two pieces of one
push. Such a prefix, rsynced back over the writer's own copy by a plain `rsync -a`, took the
acknowledged appends after the cut from it (found by an audit): the writer had sealed the
segment at the push's length and repeated nothing, as no copy of a shorter length could exist.

A segment of ~36 MB goes up in three pieces (push.PIECE_MAX, 16 MiB), so a pull has lengths
between them to stop at; the old pull published the first piece and appended the others."""

import base64
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from ctape import Tape
from ctape.sync.push import PIECE_MAX

from conftest import run_cli


def cli(d, *args, check=True):
    return run_cli("--dir", d, *args, check=check)


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    """Tape A with session s1: a first segment (cloned as B's starting point), then a
    segment of three pieces with four acknowledged entries, pushed to a folder remote."""
    root = tmp_path_factory.mktemp("whole")
    a, remote = root / "A", root / "R"
    remote.mkdir()
    t = Tape.init(str(a))
    t.session("s1").append("user", {"content": "x0"})
    t.close()
    cli(a, "remote", "add", "origin", f"file://{remote}")
    cli(a, "push")
    b0 = root / "B0"
    run_cli("clone", f"file://{remote}", b0, check=True)
    before = set(os.listdir(a / "sessions" / "s1"))
    t = Tape.open(str(a))
    s = t.session("s1")
    acked = [s.append("user", {"content": base64.b64encode(os.urandom(12_000_000)).decode()}).hash for _ in range(3)]
    acked.append(s.append("user", {"content": "last"}).hash)
    t.close()
    cli(a, "push")
    (seg,) = set(os.listdir(a / "sessions" / "s1")) - before
    full = (a / "sessions" / "s1" / seg).stat().st_size
    assert full > 2 * PIECE_MAX, "the segment must go up in three pieces"
    return {"root": root, "a": a, "remote": remote, "b0": b0, "seg": seg, "full": full, "acked": acked}


def _copy_of_b(pushed, name, remote=None):
    """A copy of the clone B0 as it was before A's second push, with `remote` (default: A's)
    as origin (the remotes of a copy are kept outside it, by its path)."""
    b = pushed["root"] / name
    shutil.copytree(pushed["b0"], b, symlinks=True)
    cli(b, "remote", "add", "origin", f"file://{remote or pushed['remote']}")
    return b


def test_a_pull_killed_while_it_writes_leaves_no_length_no_push_had(pushed):
    """Watch the segment's size on B while a pull writes it; kill the pull at the first
    length that is neither absent nor the pushed one (as the audit's kill did). Then a
    plain rsync of B back over A keeps every acknowledged entry on A."""
    b = _copy_of_b(pushed, "B1")
    path = b / "sessions" / "s1" / pushed["seg"]
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(b), "pull"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen = set()
    try:
        while p.poll() is None:
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            seen.add(size)
            if size != pushed["full"]:
                p.send_signal(signal.SIGKILL)
                break
            time.sleep(0.0005)
    finally:
        if p.poll() is None:
            p.wait(timeout=120)
    killed = p.returncode == -signal.SIGKILL
    assert killed or p.returncode == 0
    if path.exists():
        seen.add(path.stat().st_size)
    assert seen <= {pushed["full"]}, f"B held A's segment at {sorted(seen)} bytes; a push read it at {pushed['full']}"
    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed (.ci/run installs it)")
    a2 = pushed["root"] / "A-copy1"
    shutil.copytree(pushed["a"], a2, symlinks=True)
    subprocess.run(["rsync", "-a", f"{b}/", f"{a2}/"], check=True)
    assert (a2 / "sessions" / "s1" / pushed["seg"]).stat().st_size == pushed["full"]
    assert cli(a2, "fsck", check=False).returncode == 0
    for h in pushed["acked"]:
        assert cli(a2, "show", h, "--json", check=False).returncode == 0
    if killed:  # the rerun completes it
        cli(b, "pull")
    assert path.stat().st_size == pushed["full"]


def test_a_piece_missing_on_the_remote_leaves_the_file_at_the_last_push_end(pushed):
    """The third piece gone from the remote: the first two end inside the push, so the pull
    writes none of them (it used to write 32 MiB of the 36 MB); the file comes whole once
    the piece is back."""
    remote = pushed["root"] / "R-missing"
    shutil.copytree(pushed["remote"], remote)
    pieces = remote / "f" / "s1" / pushed["seg"]
    (last,) = [q for q in pieces.iterdir() if q.name.endswith(f"-{pushed['full']}")]
    kept = pushed["root"] / "last-piece"
    shutil.move(str(last), str(kept))
    b = _copy_of_b(pushed, "B2", remote)
    r = cli(b, "pull", check=False)
    assert r.returncode in (0, 1) and b"Traceback" not in r.stderr
    assert b"lacks" in r.stderr
    path = b / "sessions" / "s1" / pushed["seg"]
    assert not path.exists(), f"B holds {path.stat().st_size} bytes of a segment pushed at {pushed['full']}"
    shutil.move(str(kept), str(last))
    cli(b, "pull")
    assert path.stat().st_size == pushed["full"]
    assert cli(b, "fsck", check=False).returncode == 0
    for h in pushed["acked"]:
        assert cli(b, "show", h, "--json", check=False).returncode == 0
