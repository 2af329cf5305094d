"""`ctape watch` lays out a Codex rollout as `ctape import` does, also where a user or agent
message is written only as its event (newer Codex versions write some requests that way):
the event is the message then, and a watcher that made it a hidden line lost the user's
words from every context view. Whether an event is the only record of its message is
known when its run ends (the other side's next record, codex.Voices), which may be in a
later pass; a watcher keeps the runs between passes, and a new process reads them again
from the file. The oracle is `ctape import` of the final file: every pass, in new
processes (`--once`) or in one running watcher, must give the same entries."""

import json
import time

from ctape import Tape

from conftest import following, run_cli

SID = "019f0a2b-3c4d-7e5f-8a9b-0c1d2e3f4a5b"


def line(i: int, rtype: str, payload: dict) -> str:
    return json.dumps({"timestamp": f"2026-08-20T10:{i // 60:02d}:{i % 60:02d}.000Z", "type": rtype, "payload": payload}) + "\n"


def user_item(text):
    return ("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})


def agent_item(text):
    return ("response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})


def user_event(text):
    return ("event_msg", {"type": "user_message", "message": text, "images": []})


def agent_event(text):
    return ("event_msg", {"type": "agent_message", "message": text})


ROWS = [
    ("session_meta", {"id": SID, "timestamp": "2026-08-20T10:00:00.000Z", "cwd": "/w", "originator": "codex_cli_rs",
                      "cli_version": "0.152.0", "base_instructions": {"text": "You are Codex."}}),
    user_item("first request"),
    user_event("first request"),  # echoes the item before it: not a message of its own
    user_event("said only as an event"),  # the only record of this request
    agent_item("on it"),
    agent_event("on it"),
    ("response_item", {"type": "function_call", "name": "shell", "arguments": "{\"cmd\": \"ls\"}", "call_id": "c1"}),
    ("response_item", {"type": "function_call_output", "call_id": "c1", "output": "a.py"}),
    agent_event("the agent said this only as an event"),
    user_item("third"),
    user_event("third"),
    user_event("last words, only as an event"),
    # Codex replaced its history: the anchor names the instructions entry it keeps, which a
    # pass finds once (walking back in a new process) and carries on
    ("compacted", {"message": "so far: ran ls", "replacement_history": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "first request"}]}]}),
    agent_item("after the compaction"),
    ("compacted", {"message": "again", "replacement_history": []}),
]
TEXT = [line(i, *r) for i, r in enumerate(ROWS)]
# where the file is cut between passes: between an item and the event that echoes it, after
# a user event whose run is still open, after a tool call, and at the end. Not right after an
# agent event with no echo yet: Codex writes an agent event before its echo, so a pass that
# ends there cannot tell, and leaves it out (test_an_agent_event_cut_from_its_echo_...)
CUTS = [2, 3, 4, 5, 6, 8, 10, 11, 12, 13, 14, len(TEXT)]


def entries(tape_dir):
    t = Tape.open(str(tape_dir))
    try:
        return {x["session"]: [(e.hash, e.kind) for e in t.session(x["session"]).log()] for x in t.sessions()}
    finally:
        t.close()


def imported(tmp_path):
    d, src = tmp_path / "imported", tmp_path / "whole.jsonl"
    src.write_text("".join(TEXT))
    run_cli("--dir", d, "init", check=True)
    run_cli("--dir", d, "import", src, check=True)
    got = entries(d)
    kinds = [k for _, k in got[SID]]
    assert kinds.count("user") == 5 and kinds.count("assistant") == 3 and kinds.count("anchor") == 2, kinds  # the oracle sees the events
    return got


def test_watch_once_of_the_whole_file_is_the_import(tmp_path):
    want = imported(tmp_path)
    d, src = watched(tmp_path)
    src.write_text("".join(TEXT))
    run_cli("--dir", d, "watch", "--once", src, check=True)
    assert entries(d) == want


def watched(tmp_path):
    """(an empty tape, the path of the rollout it will watch)."""
    d, src = tmp_path / "watched", tmp_path / "src" / "rollout.jsonl"
    src.parent.mkdir()
    run_cli("--dir", d, "init", check=True)
    return d, src


def test_watch_once_passes_over_a_growing_file_give_the_import(tmp_path):
    want = imported(tmp_path)
    d, src = watched(tmp_path)
    done = 0
    for cut in CUTS:
        with open(src, "a") as f:
            f.write("".join(TEXT[done:cut]))
        done = cut
        run_cli("--dir", d, "watch", "--once", src, check=True)  # a new process: the runs read again
    assert entries(d) == want


def test_a_running_watcher_over_a_growing_file_gives_the_import(tmp_path):
    want = imported(tmp_path)
    d, src = watched(tmp_path)
    with open(src, "a") as f:
        f.write("".join(TEXT[: CUTS[0]]))
    with following(d, src) as out:
        done = CUTS[0]
        for k, cut in enumerate(CUTS):
            if k:
                with open(src, "a") as f:
                    f.write("".join(TEXT[done:cut]))
                done = cut
            # each state is imported before the next is written (the runs cross passes)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                got = entries(d).get(SID, [])
                if len(got) >= cut:
                    break
                time.sleep(0.2)
            assert len(got) >= cut, "".join(out)
    assert entries(d) == want, "".join(out)


def test_an_agent_event_cut_from_its_echo_is_left_out_as_the_import_leaves_it(tmp_path):
    """Codex writes an agent event before the item that echoes it: a pass that ends between
    them takes the event for an echo to come (hidden), as the import of the whole file does."""
    rows = ROWS[:4] + [agent_event("echoed later"), agent_item("echoed later"), user_item("next"), user_event("next")]
    text = [line(i, *r) for i, r in enumerate(rows)]
    want_dir, whole = tmp_path / "imported", tmp_path / "whole.jsonl"
    whole.write_text("".join(text))
    run_cli("--dir", want_dir, "init", check=True)
    run_cli("--dir", want_dir, "import", whole, check=True)
    d, src = watched(tmp_path)
    for part in (text[:5], text[5:]):  # the first pass ends right after the agent event
        with open(src, "a") as f:
            f.write("".join(part))
        run_cli("--dir", d, "watch", "--once", src, check=True)
    assert entries(d) == entries(want_dir)


def test_an_agent_event_that_ends_its_turn_is_the_message(tmp_path):
    """An agent message written only as its event, then the turn's end (`task_complete`):
    a pass that read up to there took the event for an echo to come, though none comes
    after the turn's end, and hid the final answer that `ctape import` shows. Each pass,
    cut anywhere from the turn's end on, gives the import now. (Found by an audit.)"""
    done_event = ("event_msg", {"type": "task_complete", "last_agent_message": "all done, only as an event"})
    rows = ROWS[:8] + [agent_event("all done, only as an event"), done_event, user_item("next turn"), user_event("next turn")]
    text = [line(i, *r) for i, r in enumerate(rows)]
    want_dir, whole = tmp_path / "imported", tmp_path / "whole.jsonl"
    whole.write_text("".join(text))
    run_cli("--dir", want_dir, "init", check=True)
    run_cli("--dir", want_dir, "import", whole, check=True)
    want = entries(want_dir)
    assert [k for _, k in want[SID]].count("assistant") == 2, want  # the oracle shows the answer
    for cut in (10, 11, len(text)):  # right after the turn's end, after the next request, at the end
        d, src = tmp_path / f"w{cut}", tmp_path / f"src{cut}" / "rollout.jsonl"
        src.parent.mkdir()
        run_cli("--dir", d, "init", check=True)
        for part in (text[:cut], text[cut:]):
            with open(src, "a") as f:
                f.write("".join(part))
            run_cli("--dir", d, "watch", "--once", src, check=True)
        assert entries(d) == want, cut
