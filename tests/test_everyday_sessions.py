"""Sessions easy to find and type (SPEC 13, issue 24 item 1): -s takes a unique prefix,
`sessions`/`status` say what a session is about (title) and where it came from (source),
the CLI and the web list them in one order, a terminal cuts long lines to its width."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import urllib.request

import pytest

from conftest import run_cli, snapshot
from ctape import Tape

FIXTURES = "/work/shared/fixtures/transcripts"
CLAUDE = f"{FIXTURES}/claude-code/daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"
CODEX = f"{FIXTURES}/codex-rollout/codemie-ai__codemie-code__rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl"
LONG = "a-session-with-a-rather-long-name-that-goes-on-and-on-" + "x" * 60


def cli(d, *args, **kw):
    return run_cli("--dir", d, *args, **kw)


def rejected(d, *args, code):
    before = snapshot(d)
    p = cli(d, *args)
    assert p.returncode == code, (args, p.returncode, p.stderr)
    lines = p.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctape: error: ") and "Traceback" not in p.stderr.decode()
    assert snapshot(d) == before
    return lines[0]


@pytest.fixture
def imported(tape_dir):
    for f in (CLAUDE, CODEX):
        cli(tape_dir, "import", f, check=True)
    with Tape.open(tape_dir) as t:
        t.session("chat").append("system", {"content": "be brief"})
        t.session("chat").append("user", {"content": "  plan the\nrelease   notes " + "word " * 30})
        t.session(LONG).append("user", {"content": "hi"})
    return tape_dir


def rows(d):
    return [json.loads(line) for line in cli(d, "sessions", "--json", check=True).stdout.decode().splitlines()]


def test_a_unique_prefix_names_a_session(imported):
    p = cli(imported, "log", "-s", "37f83ec9", "-n", "1", "--json", check=True)
    assert json.loads(p.stdout)["hash"]
    st = json.loads(cli(imported, "status", "-s", "019e16", "--json", check=True).stdout)
    assert st["session"] == "019e1625-789d-76c0-80ab-3724b5ddb799"
    # a full name wins over being a prefix of another
    with Tape.open(imported) as t:
        t.session("chat-2").append("user", {"content": "x"})
    assert json.loads(cli(imported, "status", "-s", "chat", "--json", check=True).stdout)["session"] == "chat"


def test_an_ambiguous_prefix_lists_the_candidates(imported):
    with Tape.open(imported) as t:
        t.session("019e-other").append("user", {"content": "x"})
    line = rejected(imported, "log", "-s", "019e", code=2)
    assert "ambiguous" in line and "019e1625-789d-76c0-80ab-3724b5ddb799" in line and "019e-other" in line
    assert "no session" in rejected(imported, "log", "-s", "zzz", code=1)


def test_a_write_to_a_new_name_that_starts_a_session_says_so(imported):
    """A read takes a unique prefix, a write creates the session it names: `append -s
    37f8` made a session `37f8` beside `37f83ec9-...`, in silence, after the error for a
    missing -s had said a prefix would do. It still does (a write never guesses), and now
    says which session the prefix starts and how to write there. (Found by an audit.)"""
    full = next(r["session"] for r in rows(imported) if r["session"].startswith("37f83ec9"))
    p = cli(imported, "append", "user", "--text", "hi", "-s", "37f8", check=True)
    assert p.stderr.decode() == (f"ctape: warning: new session '37f8' (writes take a session's whole name; "
                                 f"{full} starts with it: -s {full} writes there)\n"), p.stderr
    p = cli(imported, "anchor", "a1", "-s", "37f8", check=True)
    assert p.stderr == b""  # the session exists now: nothing to say
    p = cli(imported, "append", "user", "--text", "x", "-s", "brand-new", check=True)
    assert p.stderr == b""  # a name no session starts with: created, nothing to say
    with Tape.open(imported) as t:
        t.session("a-x").append("user", {"content": "x"})
        t.session("a-y").append("user", {"content": "x"})
    p = cli(imported, "append", "user", "--text", "x", check=False)
    assert b"reads take a unique prefix" in p.stderr, p.stderr


def test_removing_takes_the_whole_name(imported):
    rejected(imported, "session", "rm", "37f83ec9", code=1)
    assert any(r["session"].startswith("37f83ec9") for r in rows(imported))


def test_sessions_and_status_carry_title_and_source(imported):
    by = {r["session"]: r for r in rows(imported)}
    claude = by["37f83ec9-f2ea-42a9-925e-0d5c105cb6e8"]
    assert claude["title"].startswith("Hey Claude, please have a look at the git diff")
    assert claude["source"] == {"agent": "claude-code", "cwd": "/Users/dain/workspace/claude-code-log"}
    codex = by["019e1625-789d-76c0-80ab-3724b5ddb799"]
    assert codex["title"] == "show tools"  # the AGENTS.md and environment messages are not the request
    assert codex["source"]["agent"] == "codex" and codex["source"]["cwd"].endswith("codemie-code")
    chat = by["chat"]
    assert chat["source"] is None
    assert "\n" not in chat["title"] and len(chat["title"]) <= 80 and chat["title"].startswith("plan the release notes word")
    assert chat["title"].endswith("…")
    st = json.loads(cli(imported, "status", "-s", "37f8", "--json", check=True).stdout)
    assert st["title"] == claude["title"] and st["source"] == claude["source"]
    human = cli(imported, "status", "-s", "37f8", check=True).stdout.decode()
    assert "title: Hey Claude" in human and "source: claude-code in /Users/dain/workspace/claude-code-log" in human
    table = cli(imported, "sessions", check=True).stdout.decode()
    assert "claude-code claude-code-log" in table and "show tools" in table


@pytest.mark.parametrize("content,title", [
    ("<div> tags render twice on the home page; fix it", "<div> tags render twice on the home page; fix it"),
    ([{"type": "text", "text": "<ide_opened_file>The user opened calc.py</ide_opened_file>"},
      {"type": "text", "text": "How can I make this installable?"}], "How can I make this installable?"),
    ("<uploaded_files>\n/workspace/repo\n</uploaded_files>\nI've uploaded a repository.", "I've uploaded a repository."),
    ("<command-name>/clear</command-name>\n<command-message>clear</command-message>\n<command-args></command-args>", "then the request"),
    ("<environment_context>\n  <cwd>/w</cwd>\n</environment_context>", "then the request"),
])
def test_the_title_starts_past_the_tags_agents_put_first(tape_dir, content, title):
    """SPEC 13: the title is the first user request. A message that began with `<` gave none
    at all: Claude Code's IDE context parts before the request, OpenHands' <uploaded_files>,
    a request that starts with a tag of its own. Tagged blocks at the start are passed
    over; a message of nothing else is not a request, and the next one gives the title."""
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        s.append("user", {"content": content})
        s.append("user", {"content": "then the request"})
    st = json.loads(run_cli("--dir", tape_dir, "status", "-s", "s", "--json", check=True).stdout)
    assert st["title"] == title


def test_the_title_follows_new_heads_reading_only_new_entries(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("long")
        s.append("system", {"content": "rules"})
        for i in range(300):
            s.append("user" if i == 0 else "assistant", {"content": f"first request {i}" if i == 0 else "ok"})
    from ctape.history.sessions import summary

    with Tape.open(tape_dir) as t:
        head = t.session("long").refs().head_hash
        assert summary(t, head)["title"] == "first request 0"
        t.session("long").append("user", {"content": "a later one"})
        reads = []
        read = t.read_entry
        t.read_entry = lambda h: reads.append(h) or read(h)
        new = t.session("long").refs().head_hash
        assert summary(t, new)["title"] == "first request 0"
        assert reads == [new]  # its parent's summary was kept in the index cache
        reads.clear()
        assert summary(t, new)["title"] == "first request 0" and reads == []


def test_a_long_history_title_comes_from_its_keyframes_not_a_walk_to_the_root(tape_dir):
    """A 300,000-entry import took 35 s for its first `status`: the title walked back to the
    root. Keyframes fold `about` forward, so the walk stops at the nearest one."""
    from ctape.history import derived
    from ctape.history.sessions import summary

    n = 5 * derived.KEY_EVERY + 17
    with Tape.open(tape_dir) as t, t.batch():
        s = t.session("long")
        s.append("user", {"content": "<environment>not a request</environment>"})
        s.append("user", {"content": "the real request"}, meta={"codex": {"cwd": "/w/proj"}})
        for i in range(n - 2):
            s.append("assistant", {"content": f"step {i}"})
    with Tape.open(tape_dir) as t:
        reads = []
        read = t.read_entry
        t.read_entry = lambda h: reads.append(h) or read(h)
        got = summary(t, t.session("long").refs().head_hash)
        assert got == {"title": "the real request", "source": {"agent": "codex", "cwd": "/w/proj"}}
        assert len(reads) <= derived.KEY_EVERY  # back to the nearest keyframe, not to the root


def test_the_title_from_keyframes_is_the_one_a_walk_finds(tape_dir):
    """Oracle: for random paths (titles, hidden messages, agents and working folders at any
    depth, keyframes between them, branches off the middle), `summary` equals a plain read
    of the whole path root -> head."""
    import random

    from ctape.history import derived
    from ctape.history.sessions import summary
    from ctape.model.models import HIDDEN

    def oracle(t, head):
        path, h = [], head
        while h is not None:
            e = t.read_entry(h)
            path.append(e)
            h = e.parent
        title = agent = cwd = None
        for e in reversed(path):
            title = title or derived.title_of(e)
            a, c = derived.source_of(e)
            agent, cwd = agent or a, cwd or c
        return {"title": title, "source": {"agent": agent, **({"cwd": cwd} if cwd else {})} if agent else None}

    rnd = random.Random(5)
    for case in range(6):
        with Tape.open(tape_dir) as t:
            s = t.session(f"c{case}")
            heads = []
            with t.batch():
                for i in range(rnd.randint(1, 3 * derived.KEY_EVERY)):
                    roll = rnd.random()
                    meta = {}
                    if roll < 0.01:
                        meta = {rnd.choice(["claude-code", "openai", "langgraph"]): {"cwd": rnd.choice(["", "/a", "/b"])}}
                    if rnd.random() < 0.003:
                        meta[HIDDEN] = True
                    kind = "user" if rnd.random() < 0.004 else "assistant"
                    s.append(kind, {"content": rnd.choice(["<x>", "", "ask " + str(i)])}, meta=meta)
                    if rnd.random() < 0.01:
                        heads.append(s.refs().head_hash)
            heads.append(s.refs().head_hash)
        with Tape.open(tape_dir) as t:
            for h in heads:
                assert summary(t, h) == oracle(t, h), (case, h)


def test_several_sessions_error_is_short_with_a_hint(imported):
    line = rejected(imported, "log", code=2)
    assert len(line) < 200 and "ctape sessions" in line and "prefix" in line


def test_the_cli_and_the_web_list_sessions_in_one_order(imported):
    names = [r["session"] for r in rows(imported)]
    times = [r["last_time"] or "" for r in rows(imported)]
    assert times == sorted(times, reverse=True)  # most recently active first
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(imported), "serve", "--port", "0"], stdout=-1, stderr=-1)
    try:
        url = p.stdout.readline().decode().strip()
        body = urllib.request.urlopen(url).read().decode()
    finally:
        p.terminate()
        p.wait()
    web = re.findall(r'<tr class="session"><td><a href="/s/([^"]+)"', body)
    assert web == names
    assert "Hey Claude, please have a look" in body and "claude-code claude-code-log" in body


def _in_terminal(args, columns):
    """Run ctape with a real pty of `columns` columns as stdout; its output."""
    pid, fd = pty.fork()
    if pid == 0:
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        os.execvpe(sys.executable, [sys.executable, "-m", "ctape", *map(str, args)], env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_a_terminal_cuts_long_lines_to_its_width(imported):
    shown = _in_terminal(["--dir", imported, "sessions"], 100)
    lines = [line for line in shown.splitlines() if line.strip()]
    assert len(lines) == len(rows(imported))
    assert all(len(line) <= 100 for line in lines), lines
    assert any(line.rstrip().endswith("…") for line in lines)
    assert any(LONG[:30] in line and LONG not in line for line in lines)
    # piped, nothing is cut
    assert LONG in cli(imported, "sessions", check=True).stdout.decode()
