"""`fsck --salvage` killed at any instant can be rerun to completion (SPEC section 14;
issue 20 item 5).

A real `ctape fsck --salvage` runs under strace, which kills it with SIGKILL at the N-th
call of one file-system system call, for every N that the salvage makes; then salvage is
rerun without strace. Each time: it finishes (fsck exit 0), every entry readable before
is readable, and HEAD is on `main` at the tip. The quick run covers the calls that change
what is on disk for good (rename, mkdir, fsync, fdatasync: the points between steps);
`CTAPE_SLOW=1` adds every write, unlink, ftruncate and openat.
"""

import collections
import json
import os
import shutil
import subprocess
import sys

import pytest

from ctape import Tape
from ctape.store import framing

from conftest import run_cli

STRACE = shutil.which("strace") or ("/usr/bin/strace" if os.path.exists("/usr/bin/strace") else None)
pytestmark = pytest.mark.skipif(STRACE is None, reason="needs strace (.ci/run installs it with apt-get)")

QUICK = ("rename", "renameat", "renameat2", "link", "linkat", "mkdir", "mkdirat", "fsync", "fdatasync")
SLOW = QUICK + ("write", "unlink", "unlinkat", "ftruncate", "openat")


@pytest.fixture
def damaged(tape_dir, tmp_path):
    """Session `s` of 10 entries whose first record block (entry 1, `main`, HEAD) is
    damaged, and a healthy session `b` beside it. Returns (template, readable hashes)."""
    hashes = [run_cli("--dir", tape_dir, "append", "user", json.dumps({"content": f"m {i}"}), "-s", "s", check=True).stdout.decode().strip()
              for i in range(10)]
    run_cli("--dir", tape_dir, "append", "user", '{"content": "other"}', "-s", "b", check=True)
    (seg,) = (tape_dir / "sessions" / "s").glob("*.seg")
    data = bytearray(seg.read_bytes())
    first = [item for item in framing.scan(bytes(data)) if isinstance(item, framing.Record)][1]
    data[first.offset + 20] ^= 0x01
    seg.write_bytes(bytes(data))
    return tape_dir, hashes[1:]


def _salvage(tape, cache, strace=()):
    env = dict(os.environ, CTAPE_CACHE_DIR=str(cache))
    return subprocess.run([*strace, sys.executable, "-m", "ctape", "--dir", str(tape), "fsck", "--salvage"], capture_output=True, env=env)


def _calls(tape, cache, log, names):
    """How many times a salvage makes each of these system calls."""
    _salvage(tape, cache, [STRACE, "-f", "-qq", "-o", str(log), "-e", "trace=" + ",".join(names)])
    return _counted(log, names)


def _counted(log, names):
    counts = collections.Counter()
    for line in log.read_text().splitlines():
        name = line.split(None, 1)[1].split("(", 1)[0] if " " in line else ""
        if name in names and "resumed>" not in line:
            counts[name] += 1
    return counts


def _check(tape, readable, kind=".seg"):
    t = Tape.open(tape)
    try:
        refs = t.session("s").refs()
        assert refs.head == "@main" and refs.branches["main"] == readable[-1], (refs.head, refs.branches)
        for h in readable:
            t.read_entry(h)
        assert t.session("b").head is not None
        report = t.fsck()
        assert report["ok"], report["problems"]
        # the damaged file (its name and the copy's writer id) and its final report: nothing
        # temporary or pending
        names = os.listdir(tape / "quarantine" / "s")
        assert not [n for n in names if n.startswith(".") or n.endswith(".salvage.pending") or kind not in n], names
    finally:
        t.close()


@pytest.fixture
def damaged_pack(tape_dir):
    """Session `s` compacted into one pack with a byte added after its records: salvage
    writes the same pack again, under the damaged file's own name (linked to quarantine
    first). Returns (template, readable hashes): all of them."""
    hashes = [run_cli("--dir", tape_dir, "append", "user", json.dumps({"content": f"m {i}"}), "-s", "s", check=True).stdout.decode().strip()
              for i in range(10)]
    run_cli("--dir", tape_dir, "append", "user", '{"content": "other"}', "-s", "b", check=True)
    run_cli("--dir", tape_dir, "compact", "--grace", "now", check=True)
    (pack,) = (tape_dir / "sessions" / "s").glob("*.pack")
    pack.write_bytes(pack.read_bytes() + b"\0")
    return tape_dir, hashes


@pytest.mark.parametrize("which", ["segment", "pack"])
def test_salvage_killed_at_every_point_is_finished_by_a_rerun(which, tmp_path, request):
    template, readable = request.getfixturevalue("damaged" if which == "segment" else "damaged_pack")
    kind = ".seg" if which == "segment" else ".pack"
    names = SLOW if os.environ.get("CTAPE_SLOW") == "1" else QUICK
    counts = _calls(shutil.copytree(template, tmp_path / "count"), tmp_path / "count-cache", tmp_path / "strace.log", names)
    assert counts["rename"] + counts["renameat"] + counts["renameat2"] >= 2, counts  # at least the pack and the move
    points = [(name, n) for name, total in sorted(counts.items()) for n in range(1, total + 1)]
    # How many calls a salvage makes moves a little with timing (the counting run traces
    # every name at once and runs slower; a loaded machine moves it too), so a run may end
    # before its N-th call: that point does not exist in that run. Every run that reached
    # its N-th call must have been killed there.
    killed, beyond = 0, []
    for i, (name, n) in enumerate(points):
        tape, cache, log = tmp_path / f"t{i}", tmp_path / f"c{i}", tmp_path / f"strace{i}.log"
        shutil.copytree(template, tape)
        r = _salvage(tape, cache, [STRACE, "-f", "-qq", "-o", str(log), "-e", f"trace={name}", "-e", f"inject={name}:signal=SIGKILL:when={n}"])
        if r.returncode in (-9, 137):
            killed += 1
        else:
            made = _counted(log, [name])[name]
            assert made < n, (name, n, made, r.returncode, "reached the call but was not killed")
            beyond.append((name, n, made))
        r = _salvage(tape, cache)
        assert r.returncode == 0, (name, n, r.stdout.decode(), r.stderr.decode())
        _check(tape, readable, kind)
        shutil.rmtree(tape)
        shutil.rmtree(cache, ignore_errors=True)
    # not vacuous: most points are kills, and every name's first call is reached and killed
    assert killed >= len(points) // 2 and not [b for b in beyond if b[1] == 1], (killed, len(points), beyond)
