"""Hostile names, times and values (issue 17, items 4 and 8), through the real command.

Each refusal: exit 2, one line on stderr, no traceback, tape directory byte-identical.
Each value at a limit: stored, and every command that reads it afterwards works.
"""

import json
import os

import pytest

from conftest import run_cli, snapshot
from ctape import Tape
from ctape.model.canonical import MAX_DEPTH, MAX_ITEMS
from ctape.errors import InvalidInput, InvalidName


def rejected(p, code=2):
    err = p.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err + p.stdout.decode("utf-8", "replace"), err
    assert p.returncode == code, (p.returncode, err)
    assert len(err.splitlines()) == 1, err
    return err


@pytest.fixture
def chat(tape_dir):
    t = Tape.open(tape_dir)
    s = t.session("chat")
    s.append("user", {"content": "one"})
    s.append("assistant", {"content": "two"})
    t.close()
    return tape_dir


def nested(depth, leaf="x"):
    """A value of `depth` levels: depth 1 is {"k": leaf}."""
    v = leaf
    for i in range(depth):
        v = {"k": v} if i % 2 else [v]
    return v


# -- item 4: HEAD as a branch name ---------------------------------------------------------------


def test_checkout_b_head_is_refused(chat):
    before = snapshot(chat)
    err = rejected(run_cli("--dir", chat, "checkout", "-b", "HEAD", "chat~1", "-s", "chat"))
    assert "HEAD" in err
    assert snapshot(chat) == before
    st = json.loads(run_cli("--dir", chat, "status", "-s", "chat", "--json", check=True).stdout)
    assert st["branch"] == "main"


def test_branch_head_is_refused(chat):
    before = snapshot(chat)
    rejected(run_cli("--dir", chat, "branch", "HEAD", "chat", "-s", "chat"))
    assert snapshot(chat) == before


def test_branch_named_like_a_full_hash_is_refused(tape):
    s = tape.session("chat")
    s.append("user", {"content": "x"})
    with pytest.raises(InvalidName):
        s.branch("a" * 64)
    with pytest.raises(InvalidName):
        s.checkout("chat", new_branch="HEAD")
    s.branch("head")  # only the exact ref word is reserved
    assert "head" in s.refs().branches


def test_importer_never_makes_a_branch_named_head():
    from ctape.formats._common import branch_name

    taken = set()
    assert branch_name("HEAD", taken) != "HEAD"


# -- item 8: times --------------------------------------------------------------------------------


def test_time_that_leaves_year_one_is_refused(chat):
    before = snapshot(chat)
    err = rejected(run_cli("--dir", chat, "append", "user", '{"content": "x"}', "-s", "chat", "--time", "0001-01-01T00:00:00+00:30"))
    assert "0001-9999" in err
    rejected(run_cli("--dir", chat, "append", "user", '{"content": "x"}', "-s", "chat", "--time", "9999-12-31T23:59:59-00:01"))
    assert snapshot(chat) == before


def test_year_999_is_stored_with_four_digits_and_its_export_imports(chat, tmp_path):
    h = run_cli("--dir", chat, "append", "user", '{"content": "old"}', "-s", "chat", "--time", "0999-05-06T07:08:09Z", check=True).stdout.decode().strip()
    e = Tape.open(chat).read_entry(h)
    assert e.time == "0999-05-06T07:08:09.000000Z"
    dump = tmp_path / "chat.jsonl"
    dump.write_bytes(run_cli("--dir", chat, "export", "chat", check=True).stdout)
    other = tmp_path / "other"
    run_cli("init", other, check=True)
    run_cli("--dir", other, "import", "jsonl", dump, "-s", "copy", check=True)
    assert Tape.open(other).read_entry(h).time == e.time


def test_time_range_edges():
    from ctape.model.models import parse_time

    assert parse_time("0001-01-01T00:30:00+00:30") == "0001-01-01T00:00:00.000000Z"
    assert parse_time("9999-12-31T23:59:59.999999Z") == "9999-12-31T23:59:59.999999Z"
    assert parse_time("0042-01-01T00:00:00") == "0042-01-01T00:00:00.000000Z"
    for bad in ("0001-01-01T00:00:00+23:59", "9999-12-31T23:00:00-01:00", "2026-01-01T00:00:00+24:00", "", 5, None):
        with pytest.raises(InvalidInput):
            parse_time(bad)


# -- item 8: depth, number and size of values ------------------------------------------------------


def test_value_at_the_depth_limit_works_everywhere(chat, tmp_path):
    """MAX_DEPTH levels in payload, meta and delta: stored, and log, show, state, status,
    context, export, fsck, compact all read it (state folded through merge_patch)."""
    deep = nested(MAX_DEPTH)
    t = Tape.open(chat)
    s = t.session("chat")
    s.append("user", {"content": "deep", "x": nested(MAX_DEPTH - 1)}, meta={"m": nested(MAX_DEPTH - 1)}, delta={"d": nested(MAX_DEPTH - 1)})
    s.append("user", {"content": "deeper"}, delta=deep if isinstance(deep, dict) else {"d": nested(MAX_DEPTH - 1)})
    t.close()
    for cmd in (["log", "-s", "chat"], ["show", "chat"], ["state", "chat"], ["status", "-s", "chat"],
                ["context", "chat"], ["export", "chat"], ["fsck"], ["compact", "--grace", "now"], ["log", "-s", "chat"]):
        p = run_cli("--dir", chat, *cmd)
        assert p.returncode == 0, (cmd, p.stderr.decode()[-500:])


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 492, 500, 5000, 100_000])
def test_value_over_the_depth_limit_is_refused_at_append(chat, depth):
    before = snapshot(chat)
    payload = json.dumps({"content": "x", "v": nested(depth - 1)}) if depth < 900 else '{"content": "x", "v": ' + "[" * depth + "]" * depth + "}"
    err = rejected(run_cli("--dir", chat, "append", "user", "-", "-s", "chat", input=payload.encode()))
    assert "nested" in err
    before_delta = snapshot(chat)
    assert before_delta == before
    if depth < 900:
        rejected(run_cli("--dir", chat, "append", "user", '{"content": "x"}', "-s", "chat", "--delta", json.dumps({"d": nested(depth - 1)})))
        assert snapshot(chat) == before
    run_cli("--dir", chat, "state", "chat", check=True)


def test_depth_limit_through_the_api(tape):
    s = tape.session("chat")
    s.append("user", {"content": "x"}, delta={"a": nested(MAX_DEPTH - 1)})
    for kw in ({"delta": {"a": nested(MAX_DEPTH)}}, {"meta": {"a": nested(MAX_DEPTH)}}, {"payload": {"content": "x", "a": nested(MAX_DEPTH)}}):
        args = {"payload": {"content": "x"}, **kw}
        with pytest.raises(InvalidInput, match="nested"):
            s.append("user", **args)
    # a large string takes the path that walks the values first: the same rule
    with pytest.raises(InvalidInput, match="nested"):
        s.append("user", {"content": "y" * 5000, "a": nested(MAX_DEPTH)})
    assert s.state() == {"a": nested(MAX_DEPTH - 1)}


def test_number_of_values_is_limited(tape):
    s = tape.session("chat")
    with pytest.raises(InvalidInput, match="values"):
        s.append("user", {"content": "x", "v": [0] * MAX_ITEMS})
    s.append("user", {"content": "x", "v": [0] * (MAX_ITEMS - 10)})


def test_entry_body_size_is_limited(tape, monkeypatch):
    from ctape.model import canonical

    monkeypatch.setattr(canonical, "MAX_BODY", 4096)
    s = tape.session("chat")
    with pytest.raises(InvalidInput, match="over the limit"):
        s.append("user", {"content": "x", "v": ["abc" * 100] * 20})
    s.append("user", {"content": "x", "big": "y" * 100_000})  # large strings are blobs: not counted


# -- item 8: hostile lines in imports ------------------------------------------------------------


def _claude_line(i, parent, text, ts="2026-03-01T10:00:00.000Z"):
    return {"type": "user", "uuid": f"u{i}", "parentUuid": parent, "sessionId": "s1", "timestamp": ts,
            "message": {"role": "user", "content": text}}


@pytest.mark.parametrize("hostile", [
    '{"type": "user", "uuid": "h", "parentUuid": "u1", "sessionId": "s1", "timestamp": "2026-03-01T10:00:00Z", "message": {"role": "user", "content": "x"}, "deep": ' + "[" * 500 + "]" * 500 + "}",
    '{"type": "user", "uuid": "h", "parentUuid": "u1", "sessionId": "s1", "timestamp": "2026-03-01T10:00:00Z", "message": {"role": "user", "content": "x"}, "deep": ' + "[" * 5000 + "]" * 5000 + "}",
    '{"type": "user", "uuid": "h", "parentUuid": "u1", "sessionId": "s1", "timestamp": "2026-03-01T10:00:00Z", "message": {"role": "user", "content": "x"}, "cost": 1e400}',
    '{"type": "user", "uuid": "h", "parentUuid": "u1", "sessionId": "s1", "timestamp": "0001-01-01T00:00:00+00:30", "message": {"role": "user", "content": "x"}}',
    '{"type": "user", "uuid": "h", "parentUuid": "u1", "sessionId": "s1", "timestamp": "9999-12-31T23:59:59-23:59", "message": {"role": "user", "content": "x"}}',
], ids=["depth500", "depth5000", "1e400", "year0", "year10000"])
def test_one_hostile_line_does_not_abort_a_claude_code_import(tape_dir, tmp_path, hostile):
    lines = [json.dumps(_claude_line(1, None, "first")), hostile, json.dumps(_claude_line(2, "u1", "last", "2026-03-01T10:00:02Z"))]
    src = tmp_path / "s1.jsonl"
    src.write_text("\n".join(lines) + "\n")
    p = run_cli("--dir", tape_dir, "import", "claude-code", src, "-s", "imp")
    assert p.returncode == 0, p.stderr.decode()[-800:]
    for cmd in (["log", "-s", "imp"], ["state", "imp"], ["context", "imp"], ["status", "-s", "imp"], ["fsck"]):
        q = run_cli("--dir", tape_dir, *cmd)
        assert q.returncode == 0, (cmd, q.stderr.decode()[-500:])
    texts = [json.loads(x)["payload"] for x in run_cli("--dir", tape_dir, "log", "-s", "imp", "--json", check=True).stdout.splitlines()]
    assert {"role": "user", "content": "last"} in texts or any("last" in json.dumps(t) for t in texts)
    # the export gives the lines back (a refused value as the text it was)
    out = run_cli("--dir", tape_dir, "export", "imp", "--format", "claude-code", check=True).stdout.decode().splitlines()
    assert len(out) == 3


def test_import_line_at_the_import_depth_is_kept_as_a_record(tape_dir, tmp_path):
    from ctape.formats._common import IMPORT_DEPTH

    rec = _claude_line(1, None, "first")
    rec["deep"] = nested(IMPORT_DEPTH - 1)
    src = tmp_path / "s1.jsonl"
    src.write_text(json.dumps(rec) + "\n")
    run_cli("--dir", tape_dir, "import", "claude-code", src, "-s", "imp", check=True)
    t = Tape.open(tape_dir)
    e = t.session("imp").head
    assert e.meta["claude-code"]["deep"] == nested(IMPORT_DEPTH - 1)
