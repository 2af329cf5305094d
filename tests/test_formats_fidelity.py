"""What the importers hand to `context`, and what they do to existing refs (issues 13 and 17)."""

import json
from pathlib import Path

import pytest
from conftest import run_cli, snapshot

from ctape import Tape
from ctape.errors import CtapeError
from ctape.formats import export_ref, import_files

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
OPENHANDS = FIXTURES / "openai-chat" / "All-Hands-AI__OpenHands__multi_swe_bench_examples_output.jsonl"
CC_MAIN = FIXTURES / "claude-code" / "codemie-ai__codemie-code__incremental-subagents_turn-2.jsonl"


def write_lines(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# -- 13.3: bookkeeping never reaches the prompt ------------------------------------------------


def test_openhands_bookkeeping_is_hidden(tape, tmp_path):
    events = [
        {"id": 0, "source": "agent", "action": "system", "args": {"content": "You are OpenHands."}, "message": "sys"},
        {"id": 1, "source": "user", "action": "message", "args": {"content": "Fix the bug."}, "message": "Fix the bug."},
        {"id": 2, "source": "user", "action": "recall", "args": {"recall_type": "workspace_context", "query": "Fix the bug."}, "message": "Retrieving content"},
        {"id": 3, "source": "environment", "observation": "recall", "content": "Added workspace context", "cause": 2, "extras": {}, "message": "Added"},
        {"id": 4, "source": "environment", "observation": "agent_state_changed", "content": "", "extras": {"agent_state": "running"}, "message": ""},
        {"id": 5, "source": "agent", "action": "change_agent_state", "args": {"agent_state": "awaiting_user_input"}, "message": ""},
        {"id": 6, "source": "agent", "action": "finish", "args": {"final_thought": "Done."}, "message": "Done."},
    ]
    f = tmp_path / "events.json"
    f.write_text(json.dumps(events))
    import_files(tape, "openai", [str(f)], "oh")
    out = tape.session("oh").context(format="openai")
    assert out == [
        {"role": "system", "content": "You are OpenHands."},
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "Done."},
    ]


@pytest.mark.parametrize("fmt,path", [("openai", OPENHANDS), ("claude-code", CC_MAIN)] + [("codex", p) for p in sorted((FIXTURES / "codex-rollout").glob("*.jsonl"))], ids=lambda v: str(v)[-30:])
def test_no_bookkeeping_label_in_any_prompt(tape, fmt, path):
    import_files(tape, fmt, [str(path)], "s")
    for msg in tape.session("s").context(format="openai"):
        text = msg.get("content") if isinstance(msg.get("content"), str) else ""
        assert not text.startswith(("openhands ", "codex ", "claude-code ", "openai ")), msg


# -- 17.10: a line that is not JSON comes back byte for byte -------------------------------------


CC_LINE = {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s", "timestamp": "2026-01-01T00:00:00.000Z", "message": {"role": "user", "content": "hi"}}
CODEX_LINE = {"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": "x"}}
OPENAI_LINE = {"role": "user", "content": "hi"}


@pytest.mark.parametrize("fmt,record", [("claude-code", CC_LINE), ("codex", CODEX_LINE), ("openai", OPENAI_LINE)])
def test_invalid_utf8_line_exports_as_its_bytes(tape, tmp_path, fmt, record):
    bad = b"not json \xff\xfe and \xc3( here"
    f = tmp_path / "t.jsonl"
    f.write_bytes(json.dumps(record).encode() + b"\n" + bad + b"\n" + json.dumps(record).encode() + b"\n")
    import_files(tape, fmt, [str(f)], "s")
    lines = [line.encode("utf-8", "surrogateescape") for line in export_ref(tape, "s", fmt)]
    assert lines[1] == bad
    assert [json.loads(x) for x in (lines[0], lines[2])] == [record, record]


def test_cli_export_writes_invalid_utf8_back(tape_dir, tmp_path):
    bad = b"not json \xff here"
    f = tmp_path / "t.jsonl"
    # not the last line: an invalid last line is taken for one still being written
    f.write_bytes(json.dumps(OPENAI_LINE).encode() + b"\n" + bad + b"\n" + json.dumps(OPENAI_LINE).encode() + b"\n")
    run_cli("--dir", tape_dir, "import", "openai", f, "-s", "s", check=True)
    p = run_cli("--dir", tape_dir, "export", "s", "--format", "openai")
    assert p.returncode == 0 and p.stdout.splitlines()[1] == bad


# -- 17.5: an import never removes, rewinds or corrupts an existing ref ----------------------------


def _chat(tape, name="chat", n=3):
    s = tape.session(name)
    for i in range(n):
        s.append("user", {"content": f"m{i}"})
    return s


def test_jsonl_refs_line_with_null_does_not_delete_a_branch(tape, tape_dir, tmp_path):
    s = _chat(tape)
    tip = s.refs().branches["main"]
    f = write_lines(tmp_path / "x.jsonl", [{"ctape": "refs", "session": "chat", "branches": {"main": None}, "head": "@main"}])
    run_cli("--dir", tape_dir, "import", "jsonl", f)
    t2 = Tape.open(tape_dir)
    try:
        assert t2.session("chat").refs().branches == {"main": tip}
    finally:
        t2.close()


@pytest.mark.parametrize("refs", [{"branches": {"main": "zz"}}, {"branches": {"main": "ab" * 32}}, {"branches": {}, "head": "zz"}, {"branches": {}, "head": "@bad name"}])
def test_jsonl_refs_line_with_a_bad_value_is_a_one_line_error(tape, tape_dir, tmp_path, refs):
    _chat(tape)
    tape.close()
    f = write_lines(tmp_path / "x.jsonl", [{"ctape": "refs", "session": "chat", **refs}])
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "import", "jsonl", f)
    assert p.returncode != 0 and len(p.stderr.decode().strip().splitlines()) == 1, p.stderr
    assert b"Traceback" not in p.stderr
    assert snapshot(tape_dir) == before
    for cmd in (["sessions"], ["log", "-s", "chat"], ["status", "-s", "chat"]):
        assert run_cli("--dir", tape_dir, *cmd).returncode == 0


@pytest.mark.parametrize("changes", [{"main": "zz"}, {"main": "ab" * 32}, {"HEAD": "zz"}, {"HEAD": "@bad name"}, {"bad name": None}])
def test_set_refs_refuses_what_is_not_a_ref(tape, tape_dir, changes):
    s = _chat(tape)
    before = s.refs().branches
    with pytest.raises(CtapeError):
        s.set_refs("import", changes)
    assert s.refs().branches == before
    s.status()


def test_claude_code_file_with_the_id_of_another_session_keeps_its_main(tape):
    name = next(r["sessionId"] for r in map(json.loads, CC_MAIN.read_text().splitlines()) if r.get("sessionId"))
    s = _chat(tape, name)
    mine = s.refs().branches["main"]
    import_files(tape, "claude-code", [str(CC_MAIN)], None)
    st = tape.session(name).refs()
    assert st.branches["main"] == mine
    imported = [h for b, h in st.branches.items() if b != "main"]
    assert imported, "the imported history is on a branch of its own"
    assert any(tape.get(h).meta.get("claude-code") is not None or tape.get(h).meta.get("ctape.format") == "claude-code" for h in imported)


def test_reimporting_a_shorter_file_does_not_rewind_main(tape):
    turn1 = FIXTURES / "claude-code" / "codemie-ai__codemie-code__incremental-subagents_turn-1.jsonl"
    import_files(tape, "claude-code", [str(CC_MAIN)], "cc")
    full = tape.session("cc").refs().branches["main"]
    import_files(tape, "claude-code", [str(turn1)], "cc")
    assert tape.session("cc").refs().branches["main"] == full
    # and the grown file after the short one moves main forward
    import_files(tape, "claude-code", [str(turn1)], "cc2")
    import_files(tape, "claude-code", [str(CC_MAIN)], "cc2")
    assert tape.session("cc2").refs().branches["main"] == full


def test_jsonl_import_of_a_divergent_export_keeps_both_tips(tape, tmp_path):
    s = _chat(tape, "chat", 2)
    dump = tmp_path / "chat.jsonl"
    dump.write_text("\n".join(export_ref(tape, "chat", "jsonl")) + "\n")
    s.append("user", {"content": "here"})
    here = s.refs().branches["main"]
    # the same session elsewhere went another way
    t2 = Tape.init(tmp_path / "other")
    import_files(t2, "jsonl", [str(dump)], None)
    t2.session("chat").append("user", {"content": "there"})
    there_dump = tmp_path / "there.jsonl"
    there_dump.write_text("\n".join(export_ref(t2, "chat", "jsonl")) + "\n")
    there = t2.session("chat").refs().branches["main"]
    t2.close()
    import_files(tape, "jsonl", [str(there_dump)], None)
    st = tape.session("chat").refs()
    assert st.branches["main"] == here
    assert there in st.branches.values()


# -- 17.7: shapes that must not blow up ---------------------------------------------------------


def _cc(i, parent="-", **extra):
    rec = {"type": "user", "uuid": f"u{i}", "sessionId": "s", "timestamp": "2026-01-01T00:00:00.000Z", "message": {"role": "user", "content": f"m{i}"}, **extra}
    if parent != "-":
        rec["parentUuid"] = parent
    return rec


def test_claude_code_lines_without_a_parent_key_are_one_chain(tape, tmp_path):
    f = write_lines(tmp_path / "x.jsonl", [_cc(i) for i in range(50)])
    import_files(tape, "claude-code", [str(f)], "s")
    st = tape.session("s").refs()
    assert list(st.branches) == ["main"]
    assert [e.payload["content"] for e in tape.session("s").log()][::-1] == [f"m{i}" for i in range(50)]


def test_claude_code_explicit_roots_still_start_threads(tape, tmp_path):
    f = write_lines(tmp_path / "x.jsonl", [_cc(0, None), _cc(1, "u0"), _cc(2, None), _cc(3, "u2")])
    import_files(tape, "claude-code", [str(f)], "s")
    assert len(tape.session("s").refs().branches) == 2


def test_claude_code_two_cycles_are_broken_at_their_first_line(tape, tmp_path):
    recs = [_cc(i, f"u{i + 1}" if i % 2 == 0 else f"u{i - 1}") for i in range(6)]
    f = write_lines(tmp_path / "x.jsonl", recs)
    import_files(tape, "claude-code", [str(f)], "s")
    for tip in tape.session("s").refs().branches.values():
        path = [e.payload["content"] for e in tape.session("s").log(tip)][::-1]
        assert len(path) == 2 and int(path[0][1:]) % 2 == 0 and int(path[1][1:]) == int(path[0][1:]) + 1


# -- 13.4: exported appends link to their parents' real ids ----------------------------------------


def test_claude_code_export_of_appended_entries_links_real_uuids(tape, tmp_path):
    import_files(tape, "claude-code", [str(CC_MAIN)], "cc")
    before = dict(tape.session("cc").refs().branches)
    last_uuid = [r for r in map(json.loads, CC_MAIN.read_text().splitlines()) if r.get("uuid")]
    s = tape.session("cc")
    parent_record = s.head.meta.get("claude-code") or {}
    s.append("user", {"content": "and now?"})
    s.append("assistant", {"content": "Let me check."})
    s.append("tool_call", {"call_id": "toolu_x", "name": "Bash", "arguments": {"command": "ls"}})
    s.append("tool_result", {"call_id": "toolu_x", "output": "a.py"})
    lines = [json.loads(x) for x in export_ref(tape, "cc", "claude-code")]
    new = lines[-4:]
    uuids = {r["uuid"] for r in lines[:-4] if r.get("uuid")}
    assert new[0]["parentUuid"] in uuids, "the first appended line names a real record of the file"
    for prev, rec in zip(new, new[1:]):
        assert rec["parentUuid"] == prev["uuid"]
    assert all(r.get("sessionId") == parent_record.get("sessionId", r.get("sessionId")) for r in new)
    out = tmp_path / "back.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in lines))
    import_files(tape, "claude-code", [str(out)], "cc2")
    after = tape.session("cc2").refs().branches
    assert sorted(after) == sorted(before), "no fork-* branch for the original history"
    got = [e.payload.get("content") or e.payload.get("output") for e in tape.session("cc2").log(limit=4)][::-1]
    assert got[0] == "and now?" and got[-1] == "a.py"
    assert last_uuid


# -- 13.2: Codex user turns from whichever records the version carries ------------------------------


def _rollout(tmp_path, both: bool, finished: bool = True):
    T = "2026-08-01T00:00:0{}Z"
    recs = [
        {"timestamp": T.format(0), "type": "session_meta", "payload": {"id": "r1", "cli_version": "0.146.0", "base_instructions": {"text": "You are Codex."}}},
        {"timestamp": T.format(1), "type": "turn_context", "payload": {"turn_id": "t1", "model": "gpt-5.5"}},
        {"timestamp": T.format(2), "type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>cwd</environment_context>"}]}},
    ]
    if both:
        recs.append({"timestamp": T.format(3), "type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the test"}]}})
    recs += [
        {"timestamp": T.format(3), "type": "event_msg", "payload": {"type": "user_message", "message": "fix the test", "images": []}},
        {"timestamp": T.format(4), "type": "event_msg", "payload": {"type": "agent_message", "message": "On it."}},
        {"timestamp": T.format(4), "type": "response_item", "payload": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "On it."}]}},
        {"timestamp": T.format(5), "type": "response_item", "payload": {"type": "function_call", "name": "exec_command", "arguments": "{\"cmd\": \"pytest\"}", "call_id": "c1"}},
        {"timestamp": T.format(6), "type": "response_item", "payload": {"type": "function_call_output", "call_id": "c1", "output": "1 passed"}},
        {"timestamp": T.format(7), "type": "event_msg", "payload": {"type": "user_message", "message": "thanks"}},
        {"timestamp": T.format(8), "type": "event_msg", "payload": {"type": "agent_message", "message": "Done."}},
    ]
    if finished:
        recs.append({"timestamp": T.format(9), "type": "event_msg", "payload": {"type": "task_complete", "turn_id": "t1"}})
    return write_lines(tmp_path / "rollout.jsonl", recs)


@pytest.mark.parametrize("both", [False, True], ids=["event-only", "both-records"])
def test_codex_user_turns_from_event_or_response_item(tape, tmp_path, both):
    import_files(tape, "codex", [str(_rollout(tmp_path, both))], "cx")
    out = tape.session("cx").context(format="openai")
    assert [(m["role"], m.get("content")) for m in out] == [
        ("system", "You are Codex."),
        ("user", "<environment_context>cwd</environment_context>"),
        ("user", "fix the test"),
        ("assistant", "On it."),
        ("tool", "1 passed"),
        ("user", "thanks"),
        ("assistant", "Done."),
    ]


def test_codex_agent_event_at_the_end_of_an_unfinished_turn_waits_for_its_echo(tape, tmp_path):
    """A file that ends on an agent's event, its turn not over, is read between the event
    and its `response_item` (Codex writes the event first): the event is taken for an echo
    to come, as `watch` takes it, so that importing the grown file goes on from the same
    entries (tests/test_import_growing.py). Kept, hidden, and exported as it was."""
    import_files(tape, "codex", [str(_rollout(tmp_path, False, finished=False))], "cx")
    s = tape.session("cx")
    out = s.context(format="openai")
    assert [(m["role"], m.get("content")) for m in out][-2:] == [("tool", "1 passed"), ("user", "thanks")]
    last = next(iter(s.log(limit=1)))
    assert last.meta.get("ctape.hidden") is True and last.meta["codex"]["payload"]["message"] == "Done."
    # its turn's end, written later, makes it the message
    path = _rollout(tmp_path, False, finished=True)
    import_files(tape, "codex", [str(path)], "cx2")
    assert tape.session("cx2").context(format="openai")[-1] == {"role": "assistant", "content": "Done."}


def test_claude_code_api_error_line_is_in_status_not_in_the_prompt(tape, tmp_path):
    err = {**_cc(1, "u0"), "type": "assistant", "isApiErrorMessage": True, "error": "overloaded",
           "message": {"role": "assistant", "model": "<synthetic>", "content": [{"type": "text", "text": "API Error: 529 overloaded"}]}}
    f = write_lines(tmp_path / "x.jsonl", [_cc(0, None), err])
    import_files(tape, "claude-code", [str(f)], "s")
    s = tape.session("s")
    assert s.status()["last_error"]["message"] == "API Error: 529 overloaded"
    assert s.context(format="openai") == [{"role": "user", "content": "m0"}]
