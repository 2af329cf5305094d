"""`show` of a tool call prints its arguments readably: a multi-line string (a command, a
file's new text) as a block of text, as git shows a commit message, not one JSON string
with \\n (issue 24 item 9); `--json` unchanged. And `append --delta` with bad JSON says how
to write a delta (--text is for the payload only)."""

from __future__ import annotations

import json

from conftest import run_cli, snapshot
from ctape import Tape


def cli(d, *args, **kw):
    return run_cli("--dir", d, *args, **kw)


COMMAND = "cd /repo\npytest -q \\\n  tests/\necho done"


def payload_lines(text: str) -> list[str]:
    return text.split("\n\n", 1)[1].splitlines()  # after the header


def test_multi_line_argument_is_a_text_block(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        call = s.append("tool_call", {"call_id": "c1", "name": "bash", "arguments": {"command": COMMAND, "timeout": 60, "description": "Run tests",
                                                                                   "env": {"CI": "1"}}})
        # OpenAI keeps arguments as JSON text: shown as the object it holds
        oa = s.append("tool_call", {"call_id": "c2", "name": "write", "arguments": json.dumps({"path": "a.py", "text": "def f():\n    return 1\n"})})
        odd = s.append("tool_call", {"call_id": "c3", "name": "x", "arguments": "just\ntext"})
    out = cli(tape_dir, "show", call.hash, check=True).stdout.decode()
    assert payload_lines(out) == [
        "    bash  (call c1)",
        "",
        "    command:",
        "        cd /repo",
        "        pytest -q \\",
        "          tests/",
        "        echo done",
        '    description: "Run tests"',  # the keys in the stored (canonical, sorted) order
        '    env: {"CI": "1"}',
        "    timeout: 60",
    ]
    assert payload_lines(cli(tape_dir, "show", oa.hash, check=True).stdout.decode()) == [
        "    write  (call c2)", "", '    path: "a.py"', "    text:", "        def f():", "            return 1"]
    assert payload_lines(cli(tape_dir, "show", odd.hash, check=True).stdout.decode()) == ["    x  (call c3)", "", "    just", "    text"]
    # --json is the entry as stored
    assert json.loads(cli(tape_dir, "show", call.hash, "--json", check=True).stdout)["payload"]["arguments"]["command"] == COMMAND


def test_long_nested_argument_is_indented_json_and_control_characters_are_escaped(tape_dir):
    todos = [{"content": f"task {i}", "status": "pending"} for i in range(5)]
    with Tape.open(tape_dir) as t:
        h = t.session("chat").append("tool_call", {"call_id": "c1", "name": "todo", "arguments": {"todos": todos, "note": "a\x1b[31mred\nb"}}).hash
    lines = payload_lines(cli(tape_dir, "show", h, check=True).stdout.decode())
    assert lines[2:5] == ["    note:", "        a\\x1b[31mred", "        b"]
    assert lines[5:8] == ["    todos:", "        [", "          {"]
    assert "\x1b" not in "".join(lines)


def test_bad_delta_says_how_to_write_one(tape_dir):
    before = snapshot(tape_dir)
    p = cli(tape_dir, "append", "user", "--text", "hi", "--delta", "notjson", "-s", "chat")
    err = p.stderr.decode().strip()
    assert p.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "--delta is not valid JSON" in err and "--text is for the payload only" in err and "--delta '{\"cwd\": \"/repo\"}'" in err
    assert snapshot(tape_dir) == before
    # the payload's own error still points at --text
    p = cli(tape_dir, "append", "user", "notjson", "-s", "chat")
    assert p.returncode == 2 and "use --text for plain text" in p.stderr.decode()
