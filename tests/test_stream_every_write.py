"""SPEC 6: a stream a killed writer left "becomes one `streaming` entry ... no later than
the next write to the session". Appends did this first; an import, a checkout, a new
branch or a tag went ahead of it, so the stream was recorded later, on a side branch
(`stream-...`) instead of the branch it began on, or not at all by the import."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_cli

CLAUDE = Path(__file__).parent / "fixtures" / "transcripts" / "claude-code" / "daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"

KILLED_STREAM = textwrap.dedent(
    """
    import os, signal, sys
    import ctape
    s = ctape.Tape.open(sys.argv[1]).session("chat")
    w = s.stream(flush_interval=60)
    w.__enter__()
    w.write("half an answer")
    w.flush()  # on disk: what a kill -9 must not lose
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def cli(d, *args, **kw):
    p = run_cli("--dir", d, *args, **kw)
    assert p.returncode == 0, (args, p.stderr.decode())
    return p


def killed_stream(d) -> str:
    """A session `chat` whose stream was killed after its text reached the disk; its base."""
    cli(d, "append", "user", "--text", "question", "-s", "chat")
    base = json.loads(cli(d, "status", "-s", "chat", "--json").stdout)["head"]
    p = subprocess.run([sys.executable, "-c", KILLED_STREAM, str(d)], capture_output=True)
    assert p.returncode == -signal.SIGKILL, p.stderr.decode()
    st = json.loads(cli(d, "status", "-s", "chat", "--json").stdout)
    assert st["interrupted_stream"]["content"] == "half an answer" and not st["interrupted_stream"].get("recorded")
    return base


WRITES = {
    "checkout -b": ["checkout", "-b", "alt", "-s", "chat"],
    "branch": ["branch", "alt", "-s", "chat"],
    "tag": ["tag", "v1", "-s", "chat"],
    "import": ["import", "claude-code", str(CLAUDE), "-s", "chat"],
}


@pytest.mark.parametrize("write", WRITES)
def test_the_next_write_records_a_killed_stream_on_its_branch_first(tape_dir, write):
    base = killed_stream(tape_dir)
    cli(tape_dir, *WRITES[write])
    st = json.loads(cli(tape_dir, "status", "-s", "chat", "--json").stdout)
    assert st["interrupted_stream"] is None or st["interrupted_stream"].get("recorded"), st
    tip = json.loads(cli(tape_dir, "show", "chat/main", "--json").stdout)
    assert tip["kind"] == "streaming" and tip["payload"] == {"content": "half an answer"} and tip["parent"] == base
    branches = [json.loads(x)["name"] for x in cli(tape_dir, "branch", "-s", "chat", "--json").stdout.splitlines()]
    assert not [b for b in branches if b.startswith("stream-")], branches
    assert cli(tape_dir, "recover", "-s", "chat").stdout == b""
    streaming = [json.loads(x) for x in cli(tape_dir, "log", "--all", "-s", "chat", "--json", "--kind", "streaming").stdout.splitlines()]
    assert len(streaming) == 1
    # a new ref made at HEAD is made at the recorded stream, HEAD after the recording (an
    # audit found `checkout -b` forking at the entry before it, from a look before the write)
    made = {"checkout -b": "chat/alt", "branch": "chat/alt", "tag": "chat/v1"}.get(write)
    if made:
        assert json.loads(cli(tape_dir, "show", made, "--json").stdout)["hash"] == tip["hash"], write


@pytest.mark.parametrize("write", ["checkout -b", "branch", "tag"])
def test_a_session_holding_only_a_killed_stream_forks_at_it(tape_dir, write):
    """The stream is the session's first entry: recorded by the write, it is what HEAD
    names, so `checkout -b` forks there as `branch` does (it said "no entries to fork from")."""
    p = subprocess.run([sys.executable, "-c", KILLED_STREAM, str(tape_dir)], capture_output=True)
    assert p.returncode == -signal.SIGKILL, p.stderr.decode()
    cli(tape_dir, *WRITES[write])
    made = {"checkout -b": "chat/alt", "branch": "chat/alt", "tag": "chat/v1"}[write]
    e = json.loads(cli(tape_dir, "show", made, "--json").stdout)
    assert e["kind"] == "streaming" and e["payload"] == {"content": "half an answer"} and e["parent"] is None


def test_a_refused_write_leaves_the_killed_stream_as_it_was(tape_dir):
    """SPEC 2: a refused command changes nothing, the stream's recording included."""
    from conftest import snapshot

    killed_stream(tape_dir)
    before = snapshot(tape_dir)
    for args in (["branch", "main", "-s", "chat"], ["checkout", "nosuch", "-s", "chat"], ["tag", "v1", "nosuch", "-s", "chat"]):
        assert run_cli("--dir", tape_dir, *args).returncode != 0, args
        assert snapshot(tape_dir) == before, args
    st = json.loads(cli(tape_dir, "status", "-s", "chat", "--json").stdout)
    assert st["interrupted_stream"]["content"] == "half an answer" and not st["interrupted_stream"].get("recorded")


@pytest.mark.parametrize("write", ["checkout HEAD", "tag", "append"])
def test_a_write_that_records_a_killed_stream_first_says_so(tape_dir, write):
    """The stream moves HEAD before the command reads it, where `log` had shown HEAD at the
    entry before: `checkout HEAD~1` then lands on that entry, and `tag v1` on the stream.
    Nothing said so (audit, 2026-12-06); a note on stderr now does, once the write is done.
    A write with no stream to record says nothing of it."""
    killed_stream(tape_dir)
    args = {"checkout HEAD": ["checkout", "HEAD~1", "-s", "chat"], "tag": ["tag", "v1", "-s", "chat"],
            "append": ["append", "user", "--text", "again", "-s", "chat"]}[write]
    err = cli(tape_dir, *args).stderr.decode()
    streaming = json.loads(cli(tape_dir, "show", "chat/main~1" if write == "append" else "chat/main", "--json").stdout)
    assert streaming["kind"] == "streaming"
    assert f"recorded the interrupted stream of session chat (its writer had died) as entry {streaming['hash'][:12]}" in err, err
    again = cli(tape_dir, *(args if write == "append" else ["tag", "v2", "-s", "chat"])).stderr.decode()
    assert "interrupted stream" not in again, again
