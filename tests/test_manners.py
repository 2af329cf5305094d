"""Everyday manners, round two (issue 24, item 9): hints where a user was left guessing."""

import json

import pytest

from ctape import InvalidInput, Tape

from conftest import run_cli, snapshot


def _two(tape_dir):
    with Tape.open(tape_dir) as t:
        for name in ("chat", "other", "third"):
            t.session(name).append("user", {"content": name})


def test_session_rm_of_the_default_says_what_now(tape_dir):
    _two(tape_dir)
    d = ("--dir", tape_dir)
    run_cli(*d, "session", "use", "chat", check=True)
    p = run_cli(*d, "session", "rm", "chat", check=True)
    err = p.stderr.decode()
    assert "chat was this machine's default session" in err and "ctape session use NAME" in err
    p = run_cli(*d, "status")  # two sessions left, none chosen: the usual error
    assert p.returncode == 2 and b"several sessions" in p.stderr
    run_cli(*d, "session", "use", "other", check=True)
    p = run_cli(*d, "session", "rm", "other", check=True)
    assert b"commands now use the only session left, third" in p.stderr
    p = run_cli(*d, "status", check=True)
    assert p.stdout.startswith(b"session third")
    # not the default: no hint; named by $CTAPE_SESSION: said so
    p = run_cli(*d, "session", "rm", "third", env={"CTAPE_SESSION": "third"}, check=True)
    assert b"default session" not in p.stderr and b"$CTAPE_SESSION still names third" in p.stderr


def test_help_lists_whole_one_line_summaries():
    from ctape.cli import main

    firsts = {name: " ".join(cmd.help.split("\n\n")[0].split()) for name, cmd in main.commands.items()}
    for cols in ("80", "60", "200"):
        p = run_cli("--help", env={"COLUMNS": cols}, check=True)
        listing = p.stdout.decode().split("\nCommands:\n")[1]
        rows: dict[str, str] = {}
        for line in listing.splitlines():
            if line.startswith("  ") and not line.startswith("   "):
                name, _, text = line.strip().partition(" ")
                rows[name] = text.strip()
            elif line.strip():
                rows[name] += " " + line.strip()  # a long summary wraps; it is never cut
        assert set(rows) == set(firsts)
        for name, text in rows.items():
            assert not text.endswith("..."), (cols, name, text)
            assert firsts[name].startswith(text) and text.endswith("."), (cols, name, text)


def test_message_payloads_need_content(tape_dir):
    d = ("--dir", tape_dir)
    run_cli(*d, "append", "user", "--text", "hi", "-s", "chat", check=True)
    before = snapshot(tape_dir)
    for kind, payload in (("assistant", '{"content": 5}'), ("assistant", "{}"), ("user", '{"content": null}'),
                          ("system", '{"content": {"text": "x"}}'), ("streaming", '{"content": ["a"]}')):
        p = run_cli(*d, "append", kind, payload, "-s", "chat")
        err = p.stderr.decode()
        assert p.returncode == 2 and err.startswith(f"ctape: error: a{'n' if kind[0] == 'a' else ''} {kind} payload needs \"content\""), err
        assert err.count("\n") == 1
    assert snapshot(tape_dir) == before
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        with pytest.raises(InvalidInput):
            s.append("assistant", {"content": 5})
        # what is allowed: text, a list of parts, extra fields
        s.append("assistant", {"content": [{"type": "text", "text": "parts"}], "model": "m"})
        s.append("streaming", {"content": "partial"})
        msgs = s.context(format="openai")
    assert msgs[-1]["role"] == "assistant" and msgs[-1]["content"]
    assert all(isinstance(m["content"], (str, list)) and m["content"] for m in msgs)


def test_head_reflog_uses_the_current_session(tape_dir):
    d = ("--dir", tape_dir)
    h1 = run_cli(*d, "append", "user", "--text", "one", "-s", "chat", check=True).stdout.decode().strip()
    h2 = run_cli(*d, "append", "user", "--text", "two", "-s", "chat", check=True).stdout.decode().strip()

    def shown(*args, **kw):
        p = run_cli(*d, "show", *args, "--json", **kw)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["hash"]

    # the only session is the current one, as for every other ref
    assert shown("HEAD@{1}") == h1 and shown("HEAD@{0}") == h2 and shown("HEAD@{1}~0") == h1
    assert shown("chat/HEAD@{1}") == h1 == shown("chat@{1}")
    run_cli(*d, "append", "user", "--text", "x", "-s", "other", check=True)
    p = run_cli(*d, "show", "HEAD@{1}")  # two sessions, none chosen: says how to name one
    assert p.returncode != 0 and b"-s" in p.stderr and p.stderr.count(b"\n") == 1
    assert shown("HEAD@{1}", "-s", "chat") == h1
    assert shown("HEAD@{1}", env={"CTAPE_SESSION": "chat"}) == h1
    run_cli(*d, "session", "use", "chat", check=True)
    assert shown("HEAD@{1}") == h1
    p = run_cli(*d, "checkout", "HEAD@{1}", check=True)
    assert f"detached at {h1[:12]}".encode() in p.stderr
