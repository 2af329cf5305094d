"""A stream still being written on one copy, recorded as interrupted by another copy.

Copy B got copy A's first partial records by rsync and wrote to the session: it cannot see
A's stream lock (another machine, or another cache), so it recorded the stream as a
`streaming` entry, as SPEC 6 asks of a dead writer's. That record came back to A, and a
stream is closed for good once a record names it: what A flushed after that was read by
nothing, and a kill -9 of A lost it on every copy (found by an audit). Now A's writer sees
the record at its next flush and goes on as a new stream from the first character, so the
whole text survives the kill. Real processes, real rsync.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import run_cli

RSYNC = shutil.which("rsync")
pytestmark = pytest.mark.skipif(RSYNC is None, reason="needs rsync (.ci/run installs it)")

STREAMER = textwrap.dedent(
    """
    import os, sys, time
    import ctape
    d, flags = sys.argv[1], sys.argv[2]
    s = ctape.Tape.open(d).session("c")
    with s.stream(flush_interval=0.2) as w:
        w.write("part1 ")
        time.sleep(1.0)
        open(os.path.join(flags, "flushed1"), "w").close()
        while not os.path.exists(os.path.join(flags, "go2")):
            time.sleep(0.05)
        w.write("part2 ")
        time.sleep(1.5)  # flushed, 1 s and more before the kill
        open(os.path.join(flags, "flushed2"), "w").close()
        time.sleep(600)
    """
)


def wait_for(path, timeout=60):
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < end, f"{path} never came"
        time.sleep(0.05)


def test_a_stream_recorded_by_another_copy_keeps_what_it_flushed_after(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    env = {"A": {"CTAPE_CACHE_DIR": str(tmp_path / "cacheA")}, "B": {"CTAPE_CACHE_DIR": str(tmp_path / "cacheB")}}

    def ct(copy, *args):
        p = run_cli("--dir", tmp_path / copy, *args, env=env[copy])
        assert p.returncode == 0, (copy, args, p.stderr.decode())
        return p.stdout.decode()

    def rsync(src, dst):
        subprocess.run([RSYNC, "-a", f"{src}/", f"{dst}/"], check=True)

    ct("A", "init")
    ct("A", "append", "user", "--text", "question", "-s", "c")
    rsync(a, b)
    script = tmp_path / "s.py"
    script.write_text(STREAMER)
    p = subprocess.Popen([sys.executable, str(script), str(a), str(tmp_path)], env={**os.environ, **env["A"]})
    try:
        wait_for(tmp_path / "flushed1")
        rsync(a, b)
        assert json.loads(ct("B", "status", "-s", "c", "--json"))["interrupted_stream"]["content"] == "part1 "
        ct("B", "append", "user", "--text", "reply from B", "-s", "c")  # records A's stream first
        rsync(b, a)
        (tmp_path / "go2").touch()
        wait_for(tmp_path / "flushed2")
    finally:
        p.kill()
        p.wait()
    ct("A", "recover", "-s", "c")
    for _ in range(2):
        rsync(a, b)
        rsync(b, a)
    for copy in ("A", "B"):
        rows = [json.loads(x) for x in ct(copy, "log", "--all", "--hidden", "--json", "-s", "c").splitlines()]
        texts = [r["payload"].get("content") for r in rows if r["kind"] in ("streaming", "assistant")]
        assert "part1 part2 " in texts, (copy, texts)
        assert json.loads(ct(copy, "status", "-s", "c", "--json"))["interrupted_stream"] is None
        ct(copy, "fsck")
