"""`status`: pending tool calls, last error, detached HEAD, interrupted stream (SPEC 3, 5, 6)."""

import json

from click.testing import CliRunner

from ctape.cli import main
from conftest import run_cli, snapshot

S = "chat"


def call(s, cid, name="read", args=None):
    return s.append("tool_call", {"call_id": cid, "name": name, "arguments": args if args is not None else {"path": cid}})


def result(s, cid, output="ok", **extra):
    return s.append("tool_result", {"call_id": cid, "output": output, **extra})


def pending_ids(s):
    return sorted(c["call_id"] for c in s.status()["pending_tool_calls"])


def status_json(tape_dir, *args):
    r = CliRunner().invoke(main, ["--dir", str(tape_dir), "status", *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


# -- pending tool calls ----------------------------------------------------------------------


def test_pending_call_and_its_result(tape):
    s = tape.session(S)
    s.append("user", {"content": "read a and b"})
    a = call(s, "a", "read_file", {"path": "a.py"})
    b = call(s, "b", "grep", {"q": "x"})
    pend = s.status()["pending_tool_calls"]
    assert sorted(pend, key=lambda c: c["call_id"]) == [
        {"hash": a.hash, "call_id": "a", "name": "read_file"},
        {"hash": b.hash, "call_id": "b", "name": "grep"},
    ]
    result(s, "b")
    assert pending_ids(s) == ["a"]
    s.append("error", {"message": "read_file timed out", "call_id": "a"})
    assert pending_ids(s) == []


def test_result_must_come_later_and_match_call_id(tape):
    s = tape.session(S)
    result(s, "x")  # a result before its call does not answer it
    call(s, "x")
    result(s, "y")  # another call id
    s.append("error", {"message": "no call id"})  # an error without call_id answers nothing
    s.append("tool_result", {"call_id": "X", "output": "case matters"})
    assert pending_ids(s) == ["x"]


def test_reused_call_id_is_pending_again(tape):
    s = tape.session(S)
    call(s, "c1")
    result(s, "c1")
    again = call(s, "c1", "write")
    assert s.status()["pending_tool_calls"] == [{"hash": again.hash, "call_id": "c1", "name": "write"}]


def test_result_on_another_branch_does_not_count(tape):
    s = tape.session(S)
    s.append("user", {"content": "go"})
    c = call(s, "c1")
    s.checkout(c.hash, new_branch="alt")
    result(s, "c1")
    assert pending_ids(s) == []
    s.checkout("main")
    assert s.status()["head"] == c.hash
    assert pending_ids(s) == ["c1"]
    s.append("assistant", {"content": "still waiting"})
    assert pending_ids(s) == ["c1"]


def test_pending_follows_head_back_in_time(tape):
    s = tape.session(S)
    c = call(s, "c1")
    r = result(s, "c1")
    assert pending_ids(s) == []
    s.checkout(c.hash)  # detached before the result
    assert pending_ids(s) == ["c1"]
    s.checkout(r.hash)
    assert pending_ids(s) == []


def test_pending_calls_with_many_entries_between(tape):
    """The path is long enough to cross derived-value keyframes (every 256 entries)."""
    s = tape.session(S)
    with tape.batch():
        first = call(s, "early")
        for i in range(600):
            s.append("user", {"content": f"m{i}"})
        call(s, "late")
    assert pending_ids(s) == ["early", "late"]
    assert {c["hash"] for c in s.status()["pending_tool_calls"]} >= {first.hash}
    result(s, "early")
    assert pending_ids(s) == ["late"]


# -- last error ----------------------------------------------------------------------------------


def test_last_error(tape):
    s = tape.session(S)
    s.append("user", {"content": "hi"})
    assert s.status()["last_error"] is None
    e1 = s.append("error", {"message": "rate limited"})
    s.append("assistant", {"content": "retrying"})
    st = s.status()
    assert st["last_error"]["hash"] == e1.hash
    assert st["last_error"]["message"] == "rate limited"
    c = call(s, "c1")
    e2 = s.append("error", {"message": "tool crashed", "call_id": "c1"})
    st = s.status()
    assert st["last_error"]["hash"] == e2.hash and st["last_error"]["message"] == "tool crashed"
    assert st["pending_tool_calls"] == []
    # back before the errors: none
    s.checkout(c.parent)
    assert s.status()["last_error"]["hash"] == e1.hash
    s.checkout(e1.parent)
    assert s.status()["last_error"] is None


def test_error_tool_result_is_last_error(tape):
    s = tape.session(S)
    call(s, "c1")
    r = result(s, "c1", "FileNotFoundError: a.py", is_error=True)
    st = s.status()
    assert st["last_error"] is not None and st["last_error"]["hash"] == r.hash
    call(s, "c2")
    result(s, "c2", "fine")
    assert s.status()["last_error"]["hash"] == r.hash, "later non-error entries keep the last error"


def test_a_last_error_of_text_parts_is_shown_as_its_text(tape, tape_dir):
    """A tool result with `is_error` whose output is a list of parts (as Claude Code writes
    it): `status` and serve's badge showed the Python form of the list (`[{'text': ...`;
    found by an audit). Their texts, joined."""
    from conftest import run_cli

    s = tape.session(S)
    call(s, "c1")
    s.append("tool_result", {"call_id": "c1", "output": [{"type": "text", "text": "Exit code 1"}, {"type": "text", "text": "no such file"}],
                             "is_error": True})
    out = run_cli("--dir", tape_dir, "status", "-s", S, check=True).stdout.decode()
    assert "last error: Exit code 1 no such file" in out and "{'" not in out, out


def test_last_error_is_per_branch(tape):
    s = tape.session(S)
    root = s.append("user", {"content": "hi"})
    s.append("error", {"message": "boom"})
    s.checkout(root.hash, new_branch="clean")
    s.append("assistant", {"content": "fine"})
    assert s.status()["last_error"] is None
    s.checkout("main")
    assert s.status()["last_error"]["message"] == "boom"


# -- HEAD, branch, detached -----------------------------------------------------------------------


def test_detached_head(tape_dir, tape):
    s = tape.session(S)
    a = s.append("user", {"content": "a"})
    s.append("assistant", {"content": "b"})
    s.checkout(a.hash)
    st = status_json(tape_dir, "-s", S)
    assert st["head"] == a.hash
    assert st["branch"] is None
    s.checkout("main")
    st = status_json(tape_dir, "-s", S)
    assert st["branch"] == "main" and st["head"] != a.hash


def test_deleting_current_branch_detaches_at_tip(tape_dir, tape):
    s = tape.session(S)
    a = s.append("user", {"content": "a"})
    s.checkout(a.hash, new_branch="tmp")
    b = s.append("assistant", {"content": "b"})
    s.delete_branch("tmp")
    st = status_json(tape_dir, "-s", S)
    assert st["head"] == b.hash and st["branch"] is None


# -- JSON shape (SPEC section 5) -----------------------------------------------------------------


def test_json_keys_and_shapes_through_cli(tape_dir):
    p = run_cli("--dir", tape_dir, "append", "user", '{"content": "hi"}', "-s", S, check=True)
    p = run_cli("--dir", tape_dir, "append", "tool-call", '{"call_id": "c7", "name": "bash", "arguments": {"cmd": "ls"}}', "-s", S, check=True)
    call_hash = p.stdout.decode().strip()
    p = run_cli("--dir", tape_dir, "append", "error", '{"message": "disk full"}', "-s", S, check=True)
    err_hash = p.stdout.decode().strip()
    p = run_cli("--dir", tape_dir, "status", "-s", S, "--json", check=True)
    assert p.stdout.decode().count("\n") == 1, "one JSON object on one line"
    st = json.loads(p.stdout)
    assert {"session", "head", "branch", "pending_tool_calls", "interrupted_stream", "last_error"} <= set(st)
    assert st["session"] == S
    assert st["head"] == err_hash
    assert st["branch"] == "main"
    assert isinstance(st["pending_tool_calls"], list)
    assert [{k: c[k] for k in ("hash", "call_id", "name")} for c in st["pending_tool_calls"]] == [
        {"hash": call_hash, "call_id": "c7", "name": "bash"}
    ]
    assert st["interrupted_stream"] is None
    assert st["last_error"] is not None and st["last_error"]["hash"] == err_hash

    # human output names the pending call and the error
    p = run_cli("--dir", tape_dir, "status", "-s", S, check=True)
    text = p.stdout.decode()
    assert "c7" in text and "bash" in text and "disk full" in text

    # $CTAPE_SESSION works like -s
    p = run_cli("--dir", tape_dir, "status", "--json", env={"CTAPE_SESSION": S}, check=True)
    assert json.loads(p.stdout)["head"] == err_hash


def test_json_detached_branch_is_null_not_missing(tape_dir, tape):
    s = tape.session(S)
    a = s.append("user", {"content": "a"})
    s.append("user", {"content": "b"})
    run_cli("--dir", tape_dir, "checkout", a.hash[:10], "-s", S, check=True)
    p = run_cli("--dir", tape_dir, "status", "-s", S, "--json", check=True)
    st = json.loads(p.stdout)
    assert "branch" in st and st["branch"] is None
    assert st["head"] == a.hash


def test_interrupted_stream_from_streaming_head(tape):
    s = tape.session(S)
    s.append("user", {"content": "q"})
    st_entry = s.append("streaming", {"content": "The answer is"})
    st = s.status()
    assert st["interrupted_stream"] is not None
    assert st["interrupted_stream"]["content"] == "The answer is"
    s.append("user", {"content": "go on"})
    assert s.status()["interrupted_stream"] is None
    s.checkout(st_entry.hash)
    assert s.status()["interrupted_stream"]["content"] == "The answer is"


def test_status_of_unknown_session_changes_nothing(tape_dir):
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "status", "-s", "nobody", "--json")
    assert p.returncode in (0, 1)
    if p.returncode == 0:
        st = json.loads(p.stdout)
        assert st["head"] is None and st["pending_tool_calls"] == [] and st["interrupted_stream"] is None
    else:
        assert p.stderr.decode().count("\n") == 1 and b"Traceback" not in p.stderr
    assert snapshot(tape_dir) == before


def test_status_bad_session_name_is_usage_error(tape_dir):
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "status", "-s", "../x", "--json")
    assert p.returncode == 2
    assert b"Traceback" not in p.stderr
    assert snapshot(tape_dir) == before
