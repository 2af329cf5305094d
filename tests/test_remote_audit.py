"""Remote and privacy gaps an audit found (SPEC sections 14, 17, 18): each test fails on
the code before its fix. Real folder remotes, and SeaweedFS where the remote tests use it."""

from __future__ import annotations

import json
import os

from ctape import Tape
from ctape.history.stream import StreamWriter

from conftest import run_cli, snapshot

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def holding(needle: str, root) -> list[str]:
    """Files under root whose bytes, or any zstd frame inside them, hold needle."""
    import zstandard

    n, out = needle.encode(), []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                data = f.read()
            hit, i = n in data, data.find(ZSTD_MAGIC)
            while i >= 0 and not hit:
                try:
                    hit = n in zstandard.ZstdDecompressor().decompressobj().decompress(data[i:])
                except zstandard.ZstdError:
                    pass
                i = data.find(ZSTD_MAGIC, i + 1)
            if hit:
                out.append(os.path.relpath(path, root))
    return out


def cli(d, *args, check=True, env=None):
    return run_cli("--dir", d, *args, check=check, env=env)


def interrupted_stream(d, session: str, pieces: list[str]) -> None:
    """A stream that received `pieces` (each persisted by a flush of its own, as a slow
    model's text arrives) and then died: partial records, no entry."""
    t = Tape.open(d)
    try:
        s = t.session(session)
        w = StreamWriter(s, flush_interval=3600)
        w.__enter__()
        for p in pieces:
            w.write(p)
            w.flush()
        w._stop.set()  # the process dies here: no __exit__, nothing recorded
        w._thread.join()
    finally:
        t.close()


# -- 1. an interrupted stream's text is checked before it leaves ---------------------------------


def test_push_refuses_a_secret_in_an_interrupted_stream_until_recovered_redacted_and_compacted(tmp_path):
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    t.session("chat").append("user", {"content": "hello"})
    t.close()
    key = "AKIASTREAMPARTIAL123"
    interrupted_stream(a, "chat", ["here is the key ", key, " and more"])
    cli(a, "remote", "add", "origin", f"file://{remote}")

    p = cli(a, "scan", check=False)
    assert p.returncode == 1 and b"(interrupted stream)" in p.stdout and b"aws-access-key" in p.stdout
    assert key.encode() not in p.stdout + p.stderr and b"ctape recover -s chat" in p.stderr
    (row,) = [json.loads(line) for line in cli(a, "scan", "--json", check=False).stdout.splitlines()]
    assert row["hash"] is None and row["stream"] and row["kind"] == "aws-access-key"

    tape_before = snapshot(a)
    p = cli(a, "push", check=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and len(err.splitlines()) == 1, err
    assert "interrupted stream" in err and "ctape recover -s chat" in err and key not in err
    assert snapshot(remote) == {} and snapshot(a) == tape_before

    # the way out the refusal names: recover (an entry), redact it, compact (drops the partials)
    cli(a, "recover", "-s", "chat")
    cli(a, "redact", "--scan", "-s", "chat")
    assert cli(a, "push", check=False).returncode == 1  # bytes still in the segment
    cli(a, "compact")
    cli(a, "push")
    assert holding(key, remote) == [] and holding(key, a) == []
    assert cli(a, "scan", check=False).returncode == 0


def test_a_secret_cut_by_a_flush_is_found_whole(tmp_path):
    """The text of a stream is checked as one string, not record by record."""
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    Tape.init(a).close()
    interrupted_stream(a, "chat", ["the key is AKIASTREAM", "CUTINTWO77 ok"])
    cli(a, "remote", "add", "origin", f"file://{remote}")
    assert b"aws-access-key" in cli(a, "scan", check=False).stdout
    p = cli(a, "push", check=False)
    assert p.returncode == 1 and b"interrupted stream" in p.stderr
    # allowed by its id, it goes
    (row,) = [json.loads(line) for line in cli(a, "scan", "--json", check=False).stdout.splitlines()]
    cli(a, "scan", "--allow", row["id"])
    cli(a, "push")
    assert holding("AKIASTREAMCUTINTWO77"[:10], remote)


def test_push_follow_style_second_push_sees_the_stream_whole(tmp_path):
    """A push between two flushes sends the first half (no finding yet); the next push
    sends the second half and must still see the key whole."""
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    s = t.session("chat")
    w = StreamWriter(s, flush_interval=3600)
    w.__enter__()
    w.write("key: AKIAFOLLOW")
    w.flush()
    run_cli("--dir", a, "remote", "add", "origin", f"file://{remote}", check=True)
    assert cli(a, "push", check=False).returncode == 0
    w.write("PUSHHALF12 done")
    w.flush()
    w._stop.set()
    w._thread.join()
    t.close()
    p = cli(a, "push", check=False)
    assert p.returncode == 1 and b"interrupted stream" in p.stderr, p.stderr


# -- 2. temp files a killed push left on a folder remote ------------------------------------------


KILL_AT_LINK = """
import os, sys
real = os.link
def link(src, dst, *a, **k):
    if "/f/" in dst:
        os.kill(os.getpid(), 9)  # killed between writing the temp file and linking it
    return real(src, dst, *a, **k)
os.link = link
sys.argv = ["ctape", "--dir", sys.argv[1], "push", "--allow-secrets"]
from ctape.cli import main
main()
"""


def test_compact_remote_removes_temp_files_a_killed_push_left_once_past_the_grace(tmp_path):
    import subprocess
    import sys

    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    t.session("chat").append("user", {"content": "hello"})
    t.close()
    cli(a, "remote", "add", "origin", f"file://{remote}")
    cli(a, "push")
    secret = "zebrafishcrown77"
    cli(a, "append", "user", "--text", f"db password: {secret}", "-s", "chat")
    p = subprocess.run([sys.executable, "-c", KILL_AT_LINK, str(a)], capture_output=True)
    assert p.returncode == -9
    temps = [f for f in holding(secret, remote) if os.path.basename(f).startswith(".tmp-")]
    assert temps  # the killed write's bytes, under a name no listing shows

    cli(a, "push", "--allow-secrets")
    cli(a, "redact", "-s", "chat", "--pattern", secret)
    # young: a live push could still be writing it, so a run with a grace leaves it
    out = json.loads(cli(a, "compact", "--remote", "origin", "--grace", "1h", "--json").stdout)
    assert out["deleted"]["leftovers"] == 0 and os.path.exists(remote / temps[0])
    # past the grace (here: now), it goes with the rest
    out = json.loads(cli(a, "compact", "--remote", "origin", "--grace", "now", "--expire", "now", "--json").stdout)
    assert out["deleted"]["leftovers"] == len(temps)
    assert holding(secret, remote) == []
    b = tmp_path / "B"
    run_cli("clone", f"file://{remote}", b, check=True)
    assert cli(b, "fsck", check=False).returncode == 0
