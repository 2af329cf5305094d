"""A full disk under the tape: every writing command says so in one line, exits 1, and
leaves the tape as it was (no temporary file, no half pack, no torn tail); once space is
freed, the same commands work and give what they give on a roomy disk.

The disk is real: a small tmpfs (needs root and mount(8), as tests/test_cache_full.py),
filled to its last block by a file, or to a chosen margin for writes that fail part way.
The index cache lives elsewhere (its own full disk is tests/test_cache_full.py's).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from ctape import Tape

from conftest import small_tmpfs

CC = "/work/shared/fixtures/transcripts/claude-code/daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"


@pytest.fixture
def disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    with small_tmpfs(mnt, "size=6m"):
        yield mnt


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("CTAPE_")}
    e["CTAPE_CACHE_DIR"] = str(tmp_path / "cache")
    return e


def ctape(env, *args, input=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "ctape", *map(str, args)], env=env, capture_output=True, input=input, cwd=cwd)


def fill(mnt, leave_kib: int = 0) -> None:
    """Fill the disk, leaving about `leave_kib` KiB free."""
    filler = mnt / "filler"
    filler.unlink(missing_ok=True)
    want = max(shutil.disk_usage(mnt).free - leave_kib * 1024, 0)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        chunk = os.urandom(4096)
        while leave_kib == 0 or os.fstat(fd).st_size + len(chunk) <= want:
            os.write(fd, chunk)
    except OSError:
        pass
    finally:
        os.close(fd)


def free(mnt) -> None:
    (mnt / "filler").unlink(missing_ok=True)


def snapshot(d) -> dict[str, str]:
    """Every file of the tape and its content (lock files aside: they hold nothing), and
    every folder (a failed first write to a new session left its folder: an audit)."""
    out = {}
    for root, dirs, files in os.walk(d):
        out.update({os.path.relpath(os.path.join(root, x), d) + "/": "folder" for x in dirs})
        for name in files:
            if not name.endswith(".lock"):
                p = os.path.join(root, name)
                out[os.path.relpath(p, d)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def refused(p, what) -> None:
    err = p.stderr.decode()
    assert p.returncode == 1, (what, p.returncode, err)
    assert "Traceback" not in err, (what, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctape: error: "), (what, err)
    assert "no space left on the device" in lines[0] and "free space and retry" in lines[0], (what, err)


def entries(env, d, session, *more) -> list[dict]:
    p = ctape(env, "--dir", d, "log", "-s", session, "--hidden", "--json", *more)
    assert p.returncode == 0, p.stderr
    return [json.loads(x) for x in p.stdout.decode().splitlines()]


def fsck_ok(env, d) -> None:
    p = ctape(env, "--dir", d, "fsck")
    assert p.returncode == 0 and b"warning" not in p.stdout + p.stderr, p.stdout + p.stderr


def test_every_writing_command_on_a_full_disk(disk, env, tmp_path):
    t = disk / "t"
    with Tape.init(t) as tape:
        s = tape.session("c")
        for i in range(5):
            s.append("user", {"content": f"hello {i}"})
        s.append("tool_call", {"call_id": "x", "name": "run", "arguments": {}})
        s.branch("side")
    # another copy of the same tape, further on, pushed to a folder remote
    other, remote = tmp_path / "other", tmp_path / "remote"
    shutil.copytree(t, other)
    remote.mkdir()
    assert ctape(env, "--dir", other, "append", "user", "--text", "from the other copy", "-s", "c").returncode == 0
    assert ctape(env, "--dir", other, "remote", "add", "origin", f"file://{remote}").returncode == 0
    assert ctape(env, "--dir", other, "push").returncode == 0
    assert ctape(env, "--dir", t, "remote", "add", "origin", f"file://{remote}").returncode == 0
    before = snapshot(t)
    fill(disk)
    commands = [
        ["append", "user", "--text", "more", "-s", "c"],
        ["append", "user", "--text", "more", "-s", "new"],
        ["anchor", "milestone", "-s", "c"],
        ["branch", "b2", "-s", "c"],
        ["tag", "v1", "-s", "c"],
        ["checkout", "side", "-s", "c"],
        ["branch", "-d", "side", "-s", "c"],
        ["session", "cp", "c", "c2"],
        ["session", "rm", "c"],
        ["stream", "-s", "c"],
        ["import", CC, "-s", "cc"],
        ["compact", "--grace", "now"],
        ["redact", "--pattern", "hello", "-s", "c"],
        ["pull"],
    ]
    for args in commands:
        p = ctape(env, "--dir", t, *args, input=b"streamed text\n")
        refused(p, args)
        assert snapshot(t) == before, args
    for args in (["clone", f"file://{remote}", disk / "cl"], ["init", disk / "new"], ["--dir", disk / "demo", "demo"]):
        p = ctape(env, *args)
        assert p.returncode == 1 and "no space left on the device" in p.stderr.decode() and b"Traceback" not in p.stderr, (args, p.stderr)
        assert sorted(os.listdir(disk)) == ["filler", "t"], args  # nothing half made is left
    fsck_ok(env, t)

    free(disk)
    assert ctape(env, "--dir", t, "session", "cp", "c", "new").returncode == 0  # (it was "already exists")
    for args in (["append", "user", "--text", "more", "-s", "c"], ["compact", "--grace", "now"], ["pull"], ["import", CC, "-s", "cc"]):
        p = ctape(env, "--dir", t, *args)
        assert p.returncode == 0, (args, p.stderr)
    fsck_ok(env, t)
    assert "from the other copy" in json.dumps(entries(env, t, "c", "--all"))  # on a conflict branch beside "more"


def test_writes_that_run_out_of_space_part_way(disk, env, tmp_path):
    # import: fails with the disk nearly full, then, with space, gives what a roomy disk gives
    roomy = tmp_path / "roomy"
    assert ctape(env, "init", roomy).returncode == 0
    assert ctape(env, "--dir", roomy, "import", CC, "-s", "cc").returncode == 0
    t = disk / "t"
    Tape.init(t).close()
    fill(disk, 60)
    before = snapshot(t)
    refused(ctape(env, "--dir", t, "import", CC, "-s", "cc"), "import")
    assert snapshot(t) == before
    free(disk)
    assert ctape(env, "--dir", t, "import", CC, "-s", "cc").returncode == 0
    assert [e["hash"] for e in entries(env, t, "cc")] == [e["hash"] for e in entries(env, roomy, "cc")]

    # compact: its pack does not fit; nothing written stays, nothing is removed
    for w in ("wone", "wtwo", "wthree", "wfour"):  # a file per writer: four for compaction to pack into one
        os.environ["CTAPE_WRITER"] = w
        try:
            with Tape.open(t) as tape:
                s = tape.session("rand")
                for i in range(40):
                    s.append("user", {"content": os.urandom(3000).hex()})
        finally:
            del os.environ["CTAPE_WRITER"]
    fill(disk, 200)
    before = snapshot(t)
    assert sum(k.startswith("sessions/rand/") for k in before) >= 4
    refused(ctape(env, "--dir", t, "compact", "--grace", "now"), "compact")
    assert snapshot(t) == before
    fsck_ok(env, t)
    free(disk)
    assert ctape(env, "--dir", t, "compact", "--grace", "now").returncode == 0
    fsck_ok(env, t)

    # pull and clone of a remote larger than the space left
    big, remote = tmp_path / "big", tmp_path / "remote"
    shutil.copytree(t, big)
    remote.mkdir()
    with Tape.open(big) as tape:
        s = tape.session("more")
        with tape.batch():
            for i in range(300):
                s.append("user", {"content": os.urandom(3000).hex()})
    assert ctape(env, "--dir", big, "remote", "add", "origin", f"file://{remote}").returncode == 0
    assert ctape(env, "--dir", big, "push", "--allow-secrets").returncode == 0
    want = [e["hash"] for e in entries(env, big, "more")]
    assert ctape(env, "--dir", t, "remote", "add", "origin", f"file://{remote}").returncode == 0
    fill(disk, 500)
    p = ctape(env, "--dir", t, "pull")
    refused(p, "pull")
    assert "pull again for the rest" in p.stderr.decode()
    fsck_ok(env, t)  # what arrived is whole: no torn tail
    p = ctape(env, "clone", f"file://{remote}", disk / "cl")
    refused(p, "clone")
    assert not (disk / "cl").exists()
    (disk / "empty").mkdir()
    refused(ctape(env, "clone", f"file://{remote}", disk / "empty"), "clone into an empty folder")
    assert os.listdir(disk / "empty") == []
    free(disk)
    assert ctape(env, "--dir", t, "pull").returncode == 0
    assert [e["hash"] for e in entries(env, t, "more")] == want
    fsck_ok(env, t)
    assert ctape(env, "clone", f"file://{remote}", disk / "cl").returncode == 0
    assert [e["hash"] for e in entries(env, disk / "cl", "more")] == want


def test_a_piece_appended_by_pull_lands_whole_or_not_at_all(disk):
    """pull grows a file it holds a start of (a remote file pushed in pieces) by a new file
    renamed over it; the disk filling up in the middle of that write leaves the file as it
    was, and no temporary file behind."""
    from ctape.sync.pull import _extend_whole

    folder = disk / "s"
    folder.mkdir()
    (folder / "f.seg").write_bytes(b"x" * 1000)
    fill(disk, 64)
    with pytest.raises(OSError):
        _extend_whole(str(folder), "f.seg", 1000, os.urandom(256 * 1024))
    assert (folder / "f.seg").read_bytes() == b"x" * 1000
    assert os.listdir(folder) == ["f.seg"]
