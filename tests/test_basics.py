"""The core round trip through the Python API and the CLI."""

import json

from click.testing import CliRunner

from ctape import Tape
from ctape.cli import main


def test_append_log_status_roundtrip(tape):
    s = tape.session("chat")
    e1 = s.append("user", {"content": "hi"}, meta={"tokens": 3}, delta={"cwd": "/repo"})
    e2 = s.append("tool_call", {"call_id": "c1", "name": "read", "arguments": {"path": "a"}})
    assert e1.seq == 1 and e2.seq == 2 and e2.parent == e1.hash
    assert [e.hash for e in s.log()] == [e2.hash, e1.hash]
    st = s.status()
    assert st["head"] == e2.hash and st["branch"] == "main"
    assert [c["call_id"] for c in st["pending_tool_calls"]] == ["c1"]
    s.append("tool_result", {"call_id": "c1", "output": "x"})
    assert s.status()["pending_tool_calls"] == []
    assert s.state() == {"cwd": "/repo"}


def test_reopen_reads_back(tape_dir):
    t = Tape.open(tape_dir)
    e = t.session("a").append("user", {"content": "x" * 5000})
    t.close()
    t2 = Tape.open(tape_dir)
    assert t2.get("a").payload == {"content": "x" * 5000}
    assert t2.get(e.hash).hash == e.hash


def test_checkout_fork_and_branches(tape):
    s = tape.session("chat")
    a = s.append("user", {"content": "a"})
    b = s.append("assistant", {"content": "b"})
    s.checkout(a.hash, new_branch="alt")
    c = s.append("assistant", {"content": "c"})
    assert c.parent == a.hash
    assert {b_["name"]: b_["hash"] for b_ in s.branches()} == {"main": b.hash, "alt": c.hash}
    s.checkout("main")
    assert s.head.hash == b.hash
    assert tape.get("chat/alt").hash == c.hash
    assert tape.get("chat@{1}").hash == c.hash


def test_cli_append_and_log_json(tape_dir):
    r = CliRunner()
    out = r.invoke(main, ["--dir", str(tape_dir), "append", "user", '{"content": "hi"}', "-s", "chat"])
    assert out.exit_code == 0, out.output
    h = out.stdout.strip()
    out = r.invoke(main, ["--dir", str(tape_dir), "log", "-s", "chat", "--json"])
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert rows[0]["hash"] == h and rows[0]["seq"] == 1 and rows[0]["kind"] == "user"
    assert set(rows[0]) == {"hash", "parent", "seq", "kind", "time", "payload", "meta", "delta"}
