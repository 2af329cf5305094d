"""The core round trip through the Python API and the CLI."""

import json

from click.testing import CliRunner

import pytest

from ctape import CtapeError, Tape
from ctape.cli import main
from ctape.history import reflog


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


def test_a_tape_opens_by_its_path_alone(tape_dir, tmp_path):
    with Tape.open(tape_dir) as t:
        e = t.session("a").append("user", {"content": "x"})
    with Tape(tape_dir) as t:  # as Tape.open(tape_dir)
        assert t.get("a").hash == e.hash
    with Tape(str(tape_dir)) as t:
        assert t.session("a").head.hash == e.hash
    for bad in (tmp_path / "none", 42):
        with pytest.raises(CtapeError):
            Tape(bad)


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


def test_refs_are_read_once_until_something_changes(tape_dir, monkeypatch):
    """Session.refs keeps what it read with the index's version: a command asking several
    times resolves a session of many branches once. A write of this process or another
    process's append (SQLite's data_version) is seen; a RefState a caller holds never changes."""
    import subprocess
    import sys

    from ctape.session import Session

    t = Tape.open(tape_dir)
    s = t.session("c")
    first = s.append("user", {"content": "a"}).hash
    t.close()
    t = Tape.open(tape_dir)
    s = t.session("c")
    loads = []
    real = Session._load_refs
    monkeypatch.setattr(Session, "_load_refs", lambda self: loads.append(1) or real(self))
    held = s.refs()
    assert s.refs() is held and s.refs().head_hash == first and len(loads) == 1
    code = "import ctape, sys; ctape.Tape.open(sys.argv[1]).session('c').append('user', {'content': 'b'})"
    subprocess.run([sys.executable, "-c", code, str(tape_dir)], check=True)
    other = s.refs()
    assert other.head_hash != first and len(loads) == 2  # another process's append is seen
    mine = s.append("user", {"content": "c"}).hash
    assert s.refs().head_hash == mine
    assert held.head_hash == first and held.branches == {"main": first}  # what the caller held is as it was
    t.close()


def test_appends_in_a_batch_share_one_ref_record(tape):
    """Inside a batch, appends moving one branch write one ref record at the end (the last
    position; the ref log replays the entries). A refactor once passed each append's time
    as an extra, which kept them apart: one record per entry, 15% more disk for batched
    imports and a slower batch."""
    s = tape.session("b")
    s.append("user", {"content": "first"})
    before = len(reflog.records(s))
    with tape.batch():
        hs = [s.append("user", {"content": f"m{i}"}).hash for i in range(50)]
    assert len(reflog.records(s)) - before == 1
    assert s.refs().head_hash == hs[-1]
    assert [e.hash for e in s.log(limit=50)] == hs[::-1]
    # a record with extras (a stream id, an import's source) stays one of its own
    with tape.batch():
        s.append("user", {"content": "x"}, record_extra={"source": "a"})
        s.append("user", {"content": "y"}, record_extra={"source": "a"})
    assert len(reflog.records(s)) - before == 3
