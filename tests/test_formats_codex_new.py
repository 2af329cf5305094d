"""The newest Codex rollout layout (issue 23, item 3): `ordinal` on every line, `world_state`
lines, `response_item` lines with a `metadata` beside the payload, `event_msg`
`item_completed`, a `custom_tool_call` named `exec` whose output is a list of content items,
`tool_search_call` / `tool_search_output` (a search the server ran names no call_id), an
`agent_message` item. No real rollout of this version was found; the lines follow the
writer's types in openai/codex (codex-rs/history/src/rollout_payload.rs RolloutItemWire,
codex-rs/protocol/src/models.rs ResponseItem, FunctionCallOutputPayload: a string or a
list of `input_text` / `input_image` items)."""

import json

from ctape.formats import export_ref, import_files
from ctape.ops.context import INTERRUPTED

SID = "019f0a2b-3c4d-7e5f-8a9b-0c1d2e3f4a5b"
IMG = "data:image/png;base64,iVBORw0KGgo="


def rollout() -> list[dict]:
    lines = [
        ("session_meta", {"id": SID, "timestamp": "2026-08-20T10:00:00.000Z", "cwd": "/w", "originator": "codex_cli_rs", "cli_version": "0.152.0",
                          "base_instructions": {"text": "You are Codex."}}),
        ("world_state", {"full": True, "state": {"cwd": "/w", "shell": "zsh"}}),
        ("turn_context", {"turn_id": "t1", "cwd": "/w", "model": "gpt-5.5"}),
        ("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "find the calendar tool and run the script"}]}),
        ("event_msg", {"type": "user_message", "message": "find the calendar tool and run the script", "images": []}),
        ("response_item", {"type": "tool_search_call", "id": "tsc_1", "call_id": None, "status": "completed", "execution": "server", "arguments": {"query": "calendar"}}),
        ("response_item", {"type": "tool_search_output", "id": "tso_1", "call_id": None, "status": "completed", "execution": "server", "tools": [{"name": "calendar_create"}]}),
        ("response_item", {"type": "tool_search_call", "id": "tsc_2", "call_id": "call_s2", "execution": "client", "arguments": {"query": "mail", "limit": 1}}),
        ("response_item", {"type": "tool_search_output", "call_id": "call_s2", "status": "completed", "execution": "client", "tools": []}),
        ("response_item", {"type": "custom_tool_call", "id": "ctc_1", "status": "completed", "call_id": "call_x1", "name": "exec", "input": "const r = await shell('ls'); r"}),
        ("event_msg", {"type": "item_completed", "thread_id": SID, "turn_id": "t1", "item": {"type": "CommandExecution", "id": "call_x1"}}),
        ("response_item", {"type": "custom_tool_call_output", "call_id": "call_x1", "name": "exec",
                           "output": [{"type": "input_text", "text": "a.py\n"}, {"type": "input_text", "text": "b.py\n"}]}),
        ("response_item", {"type": "function_call", "name": "view_image", "arguments": "{\"path\": \"shot.png\"}", "call_id": "call_v1"}),
        ("response_item", {"type": "function_call_output", "call_id": "call_v1", "output": [{"type": "input_text", "text": "shot.png:"}, {"type": "input_image", "image_url": IMG}]}),
        ("world_state", {"full": False, "state": {"cwd": "/w/src"}}),
        ("response_item", {"type": "agent_message", "author": "/root/worker", "recipient": "/root", "content": [{"type": "input_text", "text": "worker: done"}]}),
        ("response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Ran it: a.py and b.py."}], "phase": "final_answer"}),
        ("event_msg", {"type": "agent_message", "message": "Ran it: a.py and b.py.", "phase": "final_answer"}),
    ]
    out = []
    for n, (t, p) in enumerate(lines, 1):
        rec = {"timestamp": f"2026-08-20T10:00:{n:02d}.000Z", "ordinal": n, "type": t, "payload": p}
        if t == "response_item":
            rec["metadata"] = {"user_input_order": 1}
        out.append(rec)
    return out


def test_calls_pair_with_their_outputs_and_parts_stay_parts(tape, tmp_path):
    path = tmp_path / f"rollout-2026-08-20T10-00-00-{SID}.jsonl"
    recs = rollout()
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    import_files(tape, None, [str(path)], "s")
    view = tape.session("s").context(format="openai")
    calls = {c["id"]: c["function"]["name"] for m in view for c in m.get("tool_calls") or []}
    results = {m["tool_call_id"]: m["content"] for m in view if m["role"] == "tool"}
    assert calls == {"tsc_1": "tool_search", "call_s2": "tool_search", "call_x1": "exec", "call_v1": "view_image"}
    assert set(results) == set(calls) and INTERRUPTED not in json.dumps(results)
    assert results["call_x1"] == "a.py\nb.py\n"  # a list of text items is the text
    assert results["tsc_1"] == json.dumps([{"name": "calendar_create"}]) or "calendar_create" in json.dumps(results["tsc_1"])
    out = next(e for e in tape.session("s").context(format="tape") if e["kind"] == "tool_result" and e["payload"]["call_id"] == "call_v1")
    assert out["payload"]["output"] == [{"type": "text", "text": "shot.png:"}, {"type": "image_url", "image_url": {"url": IMG}}]
    assert not tape.session("s").status()["pending_tool_calls"]
    # the view_image result's image follows the turn's tool messages as a user message
    # (Chat Completions takes no image in a tool message; tests/test_context_tool_images.py)
    shown = [m for m in view if m["role"] == "user" and isinstance(m["content"], list)]
    assert len(shown) == 1 and {"type": "image_url", "image_url": {"url": IMG}} in shown[0]["content"]
    said = [(m["role"], m["content"]) for m in view if m["role"] in ("user", "assistant") and isinstance(m.get("content"), str) and m["content"]]
    assert said == [("user", "find the calendar tool and run the script"), ("assistant", "worker: done"), ("assistant", "Ran it: a.py and b.py.")]
    # lossless: every line comes back
    assert [json.loads(x) for x in export_ref(tape, "s", "codex")] == recs
