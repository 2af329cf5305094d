"""rsync while a writer appends: the cases that lost acknowledged appends (issue 20, item 1-2).

A writer may append to its segment only while no copy of it exists. These tests take the
copy at the worst instants, with the real rsync binary: while a new segment is being made
(the writer held in the middle by strace), in the same clock tick as a write, and on a
file system whose reads do not move access times (a tmpfs mounted noatime).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from ctape import Tape

from conftest import run_cli

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed (.ci/run installs it)")


def rsync(src, dst):
    subprocess.run(["rsync", "-a", f"{src}/", f"{dst}/"], check=True)


def reachable(d) -> set[str]:
    """Every entry any branch or HEAD of any session reaches, read by the CLI."""
    out = set()
    for s in run_cli("--dir", d, "sessions", "--json", check=True).stdout.decode().splitlines():
        name = json.loads(s)["session"]
        p = run_cli("--dir", d, "log", "--all", "-s", name, "--json", check=True)
        out |= {json.loads(line)["hash"] for line in p.stdout.decode().splitlines()}
    return out


def append(d, text, env=None, prefix=()):
    cmd = [*prefix, sys.executable, "-m", "ctape", "--dir", str(d), "append", "user", "--text", text, "-s", "c"]
    p = subprocess.run(cmd, capture_output=True, env={**os.environ, **(env or {})})
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode().split()[0]


def segments(d) -> list[str]:
    return sorted(glob.glob(os.path.join(d, "sessions", "c", "*.seg")))


def check_nothing_lost(a, b, acked):
    rsync(b, a)
    rsync(a, b)
    for d in (a, b):
        assert set(acked) <= reachable(d), f"acknowledged appends lost on {d}"
        assert run_cli("--dir", d, "fsck").returncode == 0


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (.ci/run installs it)")
def test_rsync_while_a_new_segment_is_made(tmp_path):
    """The writer seals its segment (a copy read it) and makes a new one; strace holds it
    at every fsync for a second while rsync copies the folder. The old writer made the new
    file empty, synced the folder, then wrote: rsync copied the empty file, which leaves no
    access-time trace, the next append went into it, and `rsync -a B/ A/` put the empty
    copy back over both appends."""
    a, b = tmp_path / "A", tmp_path / "B"
    Tape.init(a).close()
    acked = [append(a, "one")]
    rsync(a, b)  # reads the segment: the next append seals it
    before = set(segments(a))
    slow = ["strace", "-f", "-qq", "-o", os.devnull, "-e", "inject=fsync,fdatasync:delay_exit=1000000"]
    cmd = [*slow, sys.executable, "-m", "ctape", "--dir", str(a), "append", "user", "--text", "two", "-s", "c"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while set(segments(a)) == before and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    rsync(a, b)  # the new segment, the instant its name appears
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err.decode()
    acked.append(out.decode().split()[0])
    acked.append(append(a, "three"))
    check_nothing_lost(a, b, acked)


def test_a_copy_in_the_same_clock_tick_as_a_write_seals(tmp_path):
    """A read within the tick of the last write can leave the access time equal to the
    modification time; the old check (access time later than modification time) took
    that for "not read". Simulated exactly: read the file, then set its access time to its
    modification time."""
    a, b = tmp_path / "A", tmp_path / "B"
    Tape.init(a).close()
    acked = [append(a, "one")]
    rsync(a, b)
    for seg in segments(a):
        st = os.stat(seg)
        os.utime(seg, ns=(st.st_mtime_ns, st.st_mtime_ns))
    acked.append(append(a, "two"))
    check_nothing_lost(a, b, acked)


def test_a_new_segment_appears_whole_and_unread(tmp_path):
    """What the writer relies on, checked on the files: no segment is ever seen empty, and
    a segment nobody read has the fixed past access time, which a read moves."""
    from ctape.store.files import UNREAD_ATIME_NS

    a = tmp_path / "A"
    Tape.init(a).close()
    append(a, "one")
    (seg,) = segments(a)
    st = os.stat(seg)
    assert st.st_size > 0 and st.st_atime_ns == UNREAD_ATIME_NS
    with open(seg, "rb") as f:
        f.read(1)
    assert os.stat(seg).st_atime_ns != UNREAD_ATIME_NS
    append(a, "two")
    assert len(segments(a)) == 2
    assert os.stat(segments(a)[-1]).st_atime_ns == UNREAD_ATIME_NS
    assert not [n for n in os.listdir(os.path.dirname(seg)) if n.startswith(".tmp")]


@pytest.fixture
def noatime_dir():
    """A tmpfs mounted noatime (needs root and a kernel that lets this sandbox mount)."""
    d = tempfile.mkdtemp(prefix="ctape-noatime-")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "noatime,size=64m", "tmpfs", d], capture_output=True)
    if p.returncode != 0:
        os.rmdir(d)
        pytest.skip(f"cannot mount a noatime tmpfs here: {p.stderr.decode().strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", d])
        os.rmdir(d)


def test_noatime_is_detected_and_rsync_both_ways_still_loses_nothing(noatime_dir, tmp_path):
    a, b = os.path.join(noatime_dir, "A"), tmp_path / "B"
    Tape.init(a).close()
    p = run_cli("--dir", a, "append", "user", "--text", "one", "-s", "c", check=True)
    assert "access times" in p.stderr.decode() and "relatime" in p.stderr.decode()
    acked = [p.stdout.decode().split()[0]]
    rsync(a, b)  # reads every segment, and no access time moves
    acked.append(append(a, "two"))
    acked.append(append(a, "three"))
    check_nothing_lost(a, b, acked)
    # every write went to a file of its own: no file with a name was ever appended to
    assert len(segments(a)) == 3
    status = run_cli("--dir", a, "status", "-s", "c", "--json", check=True)
    assert any("access times" in w for w in json.loads(status.stdout)["warnings"])
    fsck = run_cli("--dir", a, "fsck", "--json")
    assert fsck.returncode == 0
    assert any("access times" in w["problem"] for w in json.loads(fsck.stdout)["warnings"])


def test_an_append_after_rsync_delete_survives_older_records_brought_back(tmp_path):
    """B appends b1-b5 and syncs them to C only; `rsync -a --delete A/ B/` takes B's own
    records away; B appends x1. The old writer numbered x1's record after the records it
    could still see, reusing numbers its b-records (kept on C) already had: once C brought
    them back, B's newest claim looked like b5's and x1 was on no ref. A writer's record
    numbers must grow even across records it has forgotten."""
    a, b, c = (tmp_path / n for n in "ABC")
    Tape.init(a).close()
    acked = [append(a, "a1")]
    rsync(a, b)
    rsync(a, c)
    acked += [append(b, f"b{i}") for i in range(1, 6)]
    rsync(b, c)
    subprocess.run(["rsync", "-a", "--delete", f"{a}/", f"{b}/"], check=True)
    # B's index had read the records that went: B says so and writes nothing
    p = run_cli("--dir", b, "append", "user", "--text", "x1", "-s", "c")
    assert p.returncode == 1 and "lost acknowledged records" in p.stderr.decode(), p.stderr
    # a process that never read them (another cache: a new machine, a dropped cache) appends
    x1 = append(b, "x1", env={"CTAPE_CACHE_DIR": str(tmp_path / "fresh-cache")})
    for _ in range(2):
        for src in (a, b, c):
            for dst in (a, b, c):
                if src != dst:
                    rsync(src, dst)
    for d in (a, b, c):
        assert x1 in reachable(d), f"x1 lost on {d}"
        assert run_cli("--dir", d, "fsck").returncode == 0
