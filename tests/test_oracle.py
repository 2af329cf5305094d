"""The oracle (issue 13): for every real transcript in tests/fixtures/transcripts, a small
reader written here, independently of ctape's importers, says what the conversation is:
the user's requests, the assistant's texts, the tool calls and their results, in order.
`context --format openai` of the imported session must hold exactly those, and nothing
else (no bookkeeping). A new format version is added as a fixture, never by loosening
this reader.

What the readers take as conversation, per format (docs/import.md says the same):

- Claude Code: the `user`/`assistant` records on the `parentUuid` path from the file's
  last non-sidechain message to its root (a subagent file: its last message), or to the
  newest `compact_boundary` on it (Claude Code sends the summary after it, not what came
  before), the other
  lines of the API responses on it (same `message.id`: parallel calls are chained, and
  the turn goes on from one of their results), and the records holding the results of
  those tool calls (each result names its own call's line as parent). Text blocks are said; `thinking` is not text; `tool_use` is
  a call, `tool_result` a result. Everything else (summaries, snapshots, hooks, progress,
  attachments, queue operations) is bookkeeping.
- Codex: `session_meta.base_instructions` and `developer` messages are system messages;
  a `compacted` record replaces all before it but the instructions by its
  `replacement_history`;
  `response_item` user/assistant messages, calls with a `call_id` and their outputs; an
  `event_msg` user_message / agent_message only when no response_item of its role with
  the same text is next to it (newer versions write some messages only as events).
  Reasoning, token counts, turn contexts, other events and web searches (no call_id) are
  bookkeeping.
- OpenAI-style: the messages of each container's list (SWE-agent `.traj`: `history`);
  OpenHands events: message/system actions, the model's text of each response, each
  action with tool-call metadata is a call (the name and arguments the model wrote, from
  the raw response) and its observation the result, `finish` is the last word (once:
  not again when the response's text says it already), an `error` observation without a call an error; recall, state changes
  and the rest are bookkeeping. Each container is a run of its own (a branch).
"""

import json
import re
from pathlib import Path

import pytest

from ctape.ops.context import INTERRUPTED
from ctape.formats import import_files

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
SHARED = Path("/work/shared/fixtures/transcripts")


def _files(folder: str) -> list[Path]:
    return sorted(p for p in (FIXTURES / folder).iterdir() if p.is_file())


CASES = [("claude-code", p) for p in _files("claude-code")] + [("codex", p) for p in _files("codex-rollout")] + [("openai", p) for p in _files("openai-chat")]


def test_every_shared_transcript_is_a_fixture():
    if not SHARED.is_dir():
        pytest.skip("no shared fixture folder on this machine")
    for p in SHARED.rglob("*"):
        if p.is_file() and p.suffix in (".jsonl", ".traj", ".json"):
            mine = FIXTURES / p.relative_to(SHARED)
            assert mine.is_file() and mine.read_bytes() == p.read_bytes(), f"copy {p} into tests/fixtures/transcripts"


# -- what the view holds -------------------------------------------------------------------------


def _parts_text(content) -> str:
    if isinstance(content, str):
        return content
    out = []
    for p in content or []:
        if isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text"):
            out.append(p.get("text") or "")
        elif isinstance(p, dict) and p.get("type") in ("image", "image_url", "input_image"):
            out.append("[image]")
        else:
            out.append(json.dumps(p, sort_keys=True, ensure_ascii=False))
    return "".join(out)


def _args(a):
    if isinstance(a, str):
        try:
            return json.loads(a)
        except ValueError:
            return a
    return a


def view_items(msgs: list) -> tuple[list, list]:
    """(items without results, [result text for each call in order]) of an openai-format prompt."""
    items, calls, results = [], [], []
    open_calls: dict[str, list[int]] = {}
    for m in msgs:
        role = m["role"]
        if role == "tool":
            stack = open_calls.get(m["tool_call_id"]) or []
            assert stack, f"a result for no open call: {m}"
            results[stack.pop()] = m["content"]
        elif role == "assistant":
            if m.get("content"):
                items.append(("assistant", m["content"]))
            for c in m.get("tool_calls") or []:
                items.append(("call", c["id"], c["function"]["name"], _args(c["function"]["arguments"])))
                open_calls.setdefault(c["id"], []).append(len(calls))
                calls.append(c["id"])
                results.append(None)
        else:
            text = _parts_text(m["content"])
            if role == "user" and text.startswith("[error] "):
                items.append(("error", text[len("[error] "):]))
            else:
                items.append((role, text))
    return items, results


def expected_items(seq: list) -> tuple[list, list]:
    """The same split for a reader's sequence, pairing each result with the latest open
    call of its id before it, and a call without a result with the interrupted text."""
    items, results = [], []
    open_calls: dict[str, list[int]] = {}
    for it in seq:
        if it[0] == "result":
            stack = open_calls.get(it[1]) or []
            if stack:
                results[stack.pop()] = it[2]
        else:
            items.append(it)
            if it[0] == "call":
                open_calls.setdefault(it[1], []).append(len(results))
                results.append(INTERRUPTED)
    return items, results


def _result_text(out) -> str:
    if isinstance(out, str):
        return out
    if isinstance(out, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in out):
        return "\n".join(p.get("text") or "" for p in out)
    return json.dumps(out, ensure_ascii=False, sort_keys=True)


# -- Claude Code -----------------------------------------------------------------------------------


def claude_code(path: Path) -> list:
    recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    by_uuid = {r["uuid"]: r for r in recs if isinstance(r.get("uuid"), str)}
    msgs = [r for r in recs if r.get("type") in ("user", "assistant") and isinstance(r.get("uuid"), str) and isinstance(r.get("message"), dict)]
    main = [r for r in msgs if not r.get("isSidechain")] or msgs
    on_path, u = set(), main[-1]["uuid"]
    while u in by_uuid and u not in on_path:
        on_path.add(u)
        if by_uuid[u].get("subtype") == "compact_boundary":
            break  # Claude Code compacted here: what it sends next starts with the summary
        u = by_uuid[u].get("parentUuid") or by_uuid[u].get("logicalParentUuid")

    def blocks(r):
        c = r["message"].get("content")
        return c if isinstance(c, list) else [{"type": "text", "text": c}]

    # one API response is written as several lines (one block each, same message.id), and
    # the line a turn continues from is only one of them: the others are on the path too
    responses = {r["message"].get("id") for r in msgs if r["uuid"] in on_path and r["type"] == "assistant"} - {None}
    keep = {r["uuid"] for r in msgs if r["uuid"] in on_path or (r["type"] == "assistant" and r["message"].get("id") in responses)}
    path_calls = {b.get("id") for r in msgs if r["uuid"] in keep for b in blocks(r) if b.get("type") == "tool_use"}
    seq = []
    for r in msgs:
        answers = any(b.get("type") == "tool_result" and b.get("tool_use_id") in path_calls for b in blocks(r))
        if r["uuid"] not in keep and not answers:
            continue
        said: list = []  # a run of user text/images is one message
        for b in blocks(r):
            t = b.get("type")
            if r["type"] == "assistant":
                if t == "text" and b.get("text"):
                    seq.append(("assistant", b["text"]))
                elif t == "tool_use":
                    seq.append(("call", b["id"], b["name"], b.get("input")))
            elif t == "tool_result":
                _flush(said, seq)
                seq.append(("result", b["tool_use_id"], _result_text(b.get("content"))))
            elif t == "text":
                said.append(b.get("text") or "")
            elif t == "image":
                said.append("[image]")
        _flush(said, seq)
    return seq


def _flush(said: list, seq: list) -> None:
    if said:
        seq.append(("user", "".join(said)))
        said.clear()


# -- Codex -----------------------------------------------------------------------------------------

_REDACTED = re.compile(r"\[REDACTED_[A-Z_]+ (len=\d+ sha=[0-9a-f]+)\]")


def _same(a: str, b: str) -> bool:
    norm = lambda s: _REDACTED.sub(r"<\1>", s).strip()  # noqa: E731
    return norm(a) == norm(b)


def codex(path: Path) -> list:
    recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def message(r):
        p = r.get("payload") or {}
        if r.get("type") == "response_item" and p.get("type") == "message":
            return p.get("role"), p.get("content") or []
        return None, None

    def echoed(i, role, text):
        """A response_item message of `role` with this text next to event i (before the
        other side speaks or calls a tool)."""
        for step in (-1, 1):
            j = i + step
            while 0 <= j < len(recs):
                r, p = recs[j], recs[j].get("payload") or {}
                who, content = message(r)
                if who == role:
                    texts = [_parts_text(content)] + [c.get("text") for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)][:1]
                    if any(_same(t, text) for t in texts):
                        return True
                elif who in ("user", "assistant") or (r.get("type") == "response_item" and str(p.get("type", "")).endswith(("_call", "_call_output"))):
                    break
                elif r.get("type") == "event_msg" and p.get("type") in ("user_message", "agent_message") and (p.get("type") == "agent_message") != (role == "assistant"):
                    break
                j += step
        return False

    def item(p):
        pt = p.get("type")
        if pt == "message":
            role = {"developer": "system"}.get(p.get("role"), p.get("role"))
            seq.append((role, _parts_text(p.get("content"))))
        elif pt == "function_call":
            seq.append(("call", p["call_id"], p["name"], _args(p.get("arguments"))))
        elif pt == "custom_tool_call":
            seq.append(("call", p["call_id"], p["name"], p.get("input")))
        elif pt == "tool_search_call" and p.get("call_id"):
            seq.append(("call", p["call_id"], "tool_search", p.get("arguments")))
        elif pt in ("function_call_output", "custom_tool_call_output", "tool_search_output"):
            out = p.get("output", p.get("tools"))
            seq.append(("result", p["call_id"], _result_text(out)))

    seq: list = []
    instructions = None
    for i, r in enumerate(recs):
        t, p = r.get("type"), r.get("payload") or {}
        if t == "session_meta":
            text = (p.get("base_instructions") or {}).get("text")
            if text:
                instructions = ("system", text)
                seq.append(instructions)
        elif t == "compacted" and isinstance(p.get("replacement_history"), list):
            # Codex sends its instructions, then the replacement history, from here on
            seq = [instructions] if instructions else []
            for it in p["replacement_history"]:
                item(it)
        elif t == "response_item":
            item(p)
        elif t == "event_msg" and p.get("type") in ("user_message", "agent_message"):
            role = "user" if p["type"] == "user_message" else "assistant"
            if not echoed(i, role, p.get("message") or ""):
                seq.append((role, p.get("message") or ""))
    return seq


# -- OpenAI-style ----------------------------------------------------------------------------------


def chat_messages(history: list) -> list:
    seq = []
    for m in history:
        role = m.get("role")
        if role in ("system", "developer", "user"):
            seq.append(("system" if role != "user" else "user", _parts_text(m.get("content"))))
        elif role == "assistant":
            if m.get("content"):
                seq.append(("assistant", _parts_text(m["content"])))
            for c in m.get("tool_calls") or []:
                seq.append(("call", c["id"], c["function"]["name"], _args(c["function"]["arguments"])))
        elif role == "tool":
            ids = m.get("tool_call_ids") or [m.get("tool_call_id")]
            for i in ids:
                seq.append(("result", i, _parts_text(m.get("content"))))
    return seq


def openhands(events: list) -> list:
    seq, said = [], set()
    for ev in events:
        args = ev.get("args") or {}
        tcm = ev.get("tool_call_metadata") or {}
        action, obs = ev.get("action"), ev.get("observation")
        if action == "message":
            seq.append(("user" if ev.get("source") == "user" else "assistant", args.get("content") or ev.get("message") or ""))
        elif action == "system":
            seq.append(("system", args.get("content") or ev.get("message") or ""))
        elif action is not None and tcm:
            response = tcm.get("model_response") or {}
            message = (response.get("choices") or [{}])[0].get("message") or {}
            text = message.get("content")
            if text and response.get("id") not in said:
                seq.append(("assistant", text))
            said.add(response.get("id"))
            # the call as the model wrote it (the action's args are the runtime's)
            mine = [c["function"] for c in message.get("tool_calls") or [] if c.get("id") == tcm["tool_call_id"]]
            if action == "finish":
                final = (_args(mine[0]["arguments"]) if mine else {}).get("message") or args.get("final_thought") or ev.get("message")
                if not (seq and seq[-1] == ("assistant", final)) and (final or "").strip() != (text or "").strip():
                    seq.append(("assistant", final))  # one answer is one message
            else:
                seq.append(("call", tcm["tool_call_id"], mine[0]["name"], _args(mine[0]["arguments"])) if mine else ("call", tcm["tool_call_id"], tcm["function_name"], args))
        elif obs is not None and tcm:
            seq.append(("result", tcm["tool_call_id"], ev.get("content")))
        elif obs == "error":
            seq.append(("error", ev.get("content") or ev.get("message")))
    return seq


def openai_runs(path: Path) -> list:
    """[(instance id or None, conversation)] for each container of the file, in order."""
    text = path.read_text(encoding="utf-8")
    try:
        docs = [json.loads(text)]
    except ValueError:
        docs = [json.loads(line) for line in text.splitlines() if line.strip()]
    runs = []
    for d in docs:
        items = d["history"]
        if items and "role" in items[0]:
            runs.append((d.get("instance_id"), chat_messages(items)))
        else:
            runs.append((d.get("instance_id"), openhands(items)))
    return runs


# -- the check -------------------------------------------------------------------------------------


def check(tape, session: str, ref, seq: list) -> None:
    got_items, got_results = view_items(tape.session(session).context(ref, format="openai"))
    want_items, want_results = expected_items(seq)
    for i, (g, w) in enumerate(zip(got_items, want_items)):
        assert g == w, f"item {i}: the view has {str(g)[:300]}, the transcript says {str(w)[:300]}"
    assert len(got_items) == len(want_items), f"the view has {len(got_items)} items, the transcript {len(want_items)}: {got_items[len(want_items):][:3] or want_items[len(got_items):][:3]}"
    for i, (g, w) in enumerate(zip(got_results, want_results)):
        assert g == w, f"result of call {i}: the view has {str(g)[:300]}, the transcript says {str(w)[:300]}"
    # the tape view holds the same conversation as entries, and no bookkeeping either
    tape_view = tape.session(session).context(ref, format="tape")
    assert not [e for e in tape_view if (e.get("meta") or {}).get("ctape.hidden")]
    calls = [e["payload"]["call_id"] for e in tape_view if e["kind"] == "tool_call"]
    assert calls == [it[1] for it in want_items if it[0] == "call"]


@pytest.mark.parametrize("fmt,path", CASES, ids=[p.name[:70] for _, p in CASES])
def test_context_holds_exactly_the_conversation(tape, fmt, path):
    import_files(tape, fmt, [str(path)], "s")
    if fmt == "claude-code":
        check(tape, "s", None, claude_code(path))
    elif fmt == "codex":
        check(tape, "s", None, codex(path))
    else:
        runs = openai_runs(path)
        branches = tape.session("s").refs().branches
        for n, (instance, seq) in enumerate(runs):
            ref = None if n == len(runs) - 1 else "s/" + next(b for b in branches if b == f"run-{instance}" or (instance is None and b.startswith("run-line")))
            check(tape, "s", ref, seq)


# -- compaction --------------------------------------------------------------------------------------


def compacted_copy(src: Path, dst: Path, at: int = 2) -> tuple[str, int]:
    """A copy of a real Claude Code file in which Claude Code compacted before the `at`-th
    typed prompt of the main path, written as Claude Code 2.x writes it: a `system`
    `compact_boundary` line (no parent, `logicalParentUuid` to the last line before it,
    `compactMetadata`), then the `isCompactSummary` user line, from which the turn goes
    on. Returns (the summary text, the line number of the boundary)."""
    lines = src.read_text(encoding="utf-8").splitlines()
    recs = [json.loads(x) for x in lines]
    prompts = [i for i, r in enumerate(recs) if r.get("type") == "user" and not r.get("isSidechain") and not r.get("isMeta")
               and isinstance((r.get("message") or {}).get("content"), str) and not r["message"]["content"].startswith("<") and r.get("parentUuid")]
    i = prompts[at]
    r = recs[i]
    common = {k: r[k] for k in ("sessionId", "cwd", "version", "userType", "isSidechain") if k in r}
    summary = "This session is being continued from a previous conversation that ran out of context. Summary: the oracle's test."
    boundary = {"parentUuid": None, "logicalParentUuid": r["parentUuid"], **common, "type": "system", "subtype": "compact_boundary",
                "content": "Conversation compacted", "isMeta": False, "timestamp": r["timestamp"], "uuid": "0c0c0c0c-0000-4000-8000-000000000001",
                "level": "info", "compactMetadata": {"trigger": "auto", "preTokens": 167094}}
    summ = {"parentUuid": boundary["uuid"], **common, "type": "user", "message": {"role": "user", "content": summary},
            "isVisibleInTranscriptOnly": True, "isCompactSummary": True, "uuid": "0c0c0c0c-0000-4000-8000-000000000002", "timestamp": r["timestamp"]}
    r["parentUuid"] = summ["uuid"]
    out = lines[:i] + [json.dumps(boundary), json.dumps(summ), json.dumps(r)] + lines[i + 1:]
    dst.write_text("\n".join(out) + "\n", encoding="utf-8")
    return summary, i + 1


def test_claude_code_context_starts_at_the_compaction(tape, tmp_path):
    path = tmp_path / "compacted.jsonl"
    summary, _ = compacted_copy(FIXTURES / "claude-code" / "daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl", path)
    import_files(tape, "claude-code", [str(path)], "s")
    seq = claude_code(path)
    assert seq[0] == ("user", summary)
    check(tape, "s", None, seq)
    s = tape.session("s")
    view = s.context(format="openai")
    whole = s.context(format="openai", policies=["whole-tape"])
    calls = lambda msgs: sum(len(m.get("tool_calls") or []) for m in msgs)  # noqa: E731
    assert calls(whole) > calls(view) > 0
    assert view[0] == {"role": "user", "content": summary}
    assert s.context(format="anthropic")["messages"][0]["content"][0]["text"] == summary
    # last-turn after the compaction, and the tape view names the boundary nowhere
    assert all(m.get("content") != "Conversation compacted" for m in view)


def test_codex_context_starts_at_the_replacement_history(tape):
    path = FIXTURES / "codex-rollout" / "madshn__localpush__rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl"
    recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    compacted = [r for r in recs if r["type"] == "compacted"][-1]["payload"]["replacement_history"]
    import_files(tape, "codex", [str(path)], "s")
    s = tape.session("s")
    view = s.context(format="openai")
    # the instructions, then the replacement history, as Codex sends it
    assert view[0]["role"] == "system" and view[0]["content"] == recs[0]["payload"]["base_instructions"]["text"]
    said = [m for m in compacted if m.get("type") == "message"]
    assert [m["role"] for m in view[1:1 + len(said)]] == [{"developer": "system"}.get(m["role"], m["role"]) for m in said]
    whole = s.context(format="openai", policies=["whole-tape"])
    assert len(whole) > len(view) + 400
    assert tape.session("s").context(format="tape", policies=["whole-tape"])[0]["kind"] == "system"


def test_openhands_calls_are_the_models_and_usage_counts_each_response_once(tape):
    from ctape.ops.usage import usage

    path = FIXTURES / "openai-chat" / "All-Hands-AI__OpenHands__multi_swe_bench_examples_output.jsonl"
    runs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    import_files(tape, "openai", [str(path)], "oh")
    responses = {}
    for r in runs:
        for ev in r["history"]:
            resp = (ev.get("tool_call_metadata") or {}).get("model_response")
            if resp and resp.get("usage"):
                responses[resp["id"]] = resp["usage"]
    want_in = sum(u["prompt_tokens"] for u in responses.values())
    want_out = sum(u["completion_tokens"] for u in responses.values())
    rows = usage(tape)
    row = next(r for r in rows if r.get("session") == "oh")
    assert (row["input"] + row.get("cached", 0), row["output"]) == (want_in, want_out), row
    # the last call of the last run: the model's own arguments, not the runtime's
    view = tape.session("oh").context(format="openai")
    last = [c for m in view for c in m.get("tool_calls") or []][-1]
    assert "is_input" not in json.loads(last["function"]["arguments"])
