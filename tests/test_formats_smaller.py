"""Issue 23, item 5: mini-swe-agent's closing `exit` message, files without times, and
`claude-code` export of a session with an extra branch."""

import json
import os
from pathlib import Path

from conftest import run_cli
from ctape.formats import export_ref, import_files
from ctape.ops.context import INTERRUPTED

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
CLAUDE = FIXTURES / "claude-code" / "daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"


def mini_traj(exit_after_call: bool = True) -> dict:
    """A mini-swe-agent trajectory (trajectory_format mini-swe-agent-1.1, tool calling):
    the run ends when the submit command prints the marker, and mini-swe-agent writes
    `{"role": "exit", "content": submission, "extra": {"exit_status", "submission"}}`
    instead of the command's tool message."""
    patch = "diff --git a/x.py b/x.py\n-a\n+b\n"
    msgs = [
        {"role": "system", "content": "You are a helpful assistant that can interact with a computer."},
        {"role": "user", "content": "Fix the bug in x.py"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"cat x.py\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "<returncode>0</returncode>\n<output>a\n</output>"},
    ]
    if exit_after_call:
        msgs.append({"role": "assistant", "content": "Submitting.", "tool_calls": [{"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff\"}"}}]})
    msgs.append({"role": "exit", "content": patch if exit_after_call else "Step limit exceeded.",
                 "extra": {"exit_status": "Submitted" if exit_after_call else "LimitsExceeded", "submission": patch if exit_after_call else ""}})
    return {"info": {"exit_status": msgs[-1]["extra"]["exit_status"], "submission": msgs[-1]["extra"]["submission"], "mini_version": "1.14.0"},
            "messages": msgs, "trajectory_format": "mini-swe-agent-1.1"}


def test_the_exit_message_is_the_result_of_the_last_call(tape, tmp_path):
    path = tmp_path / "x.traj.json"
    traj = mini_traj()
    path.write_text(json.dumps(traj, indent=2))
    import_files(tape, None, [str(path)], "m")
    view = tape.session("m").context(format="openai")
    last = view[-1]
    assert last == {"role": "tool", "tool_call_id": "call_2", "content": traj["info"]["submission"]}, last
    assert INTERRUPTED not in json.dumps(view)
    assert not tape.session("m").status()["pending_tool_calls"]
    result = tape.session("m").context(format="tape")[-1]
    assert result["payload"]["exit_status"] == "Submitted"
    assert [json.loads(x) for x in export_ref(tape, "m", "openai")] == [traj]  # lossless


def test_an_exit_with_no_open_call_is_bookkeeping(tape, tmp_path):
    path = tmp_path / "y.traj.json"
    path.write_text(json.dumps(mini_traj(exit_after_call=False)))
    import_files(tape, None, [str(path)], "m")
    view = tape.session("m").context(format="openai")
    assert view[-1]["role"] == "tool" and "Step limit" not in json.dumps(view)
    closing, last = list(tape.session("m").log(hidden=True))[:2]  # the container's other fields close the run
    assert closing.meta.get("ctape.tail") == "messages" and last.payload["content"] == "exit: LimitsExceeded"


def test_records_without_times_take_the_files_time(tape, tmp_path):
    """SPEC 10: never 1970. The same content imported again from a newer copy adds nothing."""
    path = tmp_path / "a.traj.json"
    path.write_text(json.dumps(mini_traj()))
    os.utime(path, (1785000000.5, 1785000000.5))
    import_files(tape, None, [str(path)], "m")
    times = {e.time for e in tape.session("m").log(hidden=True)}
    assert times == {"2026-07-25T17:20:00.500000Z"}, times
    copy = tmp_path / "b.traj.json"
    copy.write_bytes(path.read_bytes())  # a later mtime
    assert import_files(tape, None, [str(copy)], "m")[0].startswith("nothing new")


def test_claude_code_export_keeps_main_main(tape_dir, tmp_path):
    """A branch made after the import, with an entry appended on it, came back as main."""
    run_cli("--dir", tape_dir, "import", CLAUDE, "-s", "cc", check=True)
    old = [json.loads(x)["hash"] for x in run_cli("--dir", tape_dir, "log", "-s", "cc", "-n", "8", "--json", check=True).stdout.splitlines()][-1]
    run_cli("--dir", tape_dir, "branch", "alt", old, "-s", "cc", check=True)
    run_cli("--dir", tape_dir, "checkout", "alt", "-s", "cc", check=True)
    run_cli("--dir", tape_dir, "append", "user", '{"content": "a question on alt"}', "-s", "cc", check=True)
    run_cli("--dir", tape_dir, "checkout", "main", "-s", "cc", check=True)
    main_said = json.loads(run_cli("--dir", tape_dir, "log", "-s", "cc", "-n", "1", "--json", check=True).stdout)["payload"]
    p = run_cli("--dir", tape_dir, "export", "cc", "--format", "claude-code", check=True)
    assert "not branch names" in p.stderr.decode() and "alt" in p.stderr.decode(), p.stderr
    out = tmp_path / "back.jsonl"
    out.write_bytes(p.stdout)
    other = tmp_path / "other"
    run_cli("init", other, check=True)
    run_cli("--dir", other, "import", "claude-code", out, "-s", "cc", check=True)
    back = json.loads(run_cli("--dir", other, "log", "-s", "cc", "-n", "1", "--json", check=True).stdout)["payload"]
    assert back == main_said
    branches = run_cli("--dir", other, "branch", "-s", "cc", "--json", check=True).stdout.decode()
    alt_tip = [json.loads(x) for x in branches.splitlines() if json.loads(x)["name"] != "main"]
    assert len(alt_tip) == 1
    said = json.loads(run_cli("--dir", other, "log", "-s", "cc", alt_tip[0]["hash"], "-n", "1", "--json", check=True).stdout)["payload"]
    assert said == {"content": "a question on alt"}
