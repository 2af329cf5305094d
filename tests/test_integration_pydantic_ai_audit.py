"""save_messages against pydantic-ai's own history (a differential audit, 2026-12-03):
messages that do not share the stored history's first message were all appended after
it, so an older turn saved again, a history whose first message was edited, and
concurrent runs on a new session stored messages twice."""

import asyncio
import json
import warnings
from collections import Counter

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessagesTypeAdapter as TA  # noqa: E402
from pydantic_ai.messages import ModelRequest, SystemPromptPart, UserPromptPart  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402

from ctape import Tape  # noqa: E402
from ctape.integrations.pydantic_ai import TapeHistory, load_messages, save_messages  # noqa: E402


def _prompts(msgs):
    return [p.content for m in msgs if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)]


def _repeats(msgs):
    return sum(c - 1 for c in Counter(TA.dump_json([m]) for m in msgs).values() if c > 1)


def test_an_older_turn_saved_again_stores_nothing(tmp_path):
    s = Tape.init(tmp_path / "t").session("chat")
    agent = Agent(TestModel())
    turns, history = [], None
    for text in ("turn 1", "turn 2", "turn 3"):
        r = agent.run_sync(text, message_history=history)
        history = r.all_messages()
        turns.append(r.new_messages())
        save_messages(s, r.new_messages())
    assert _prompts(load_messages(s)) == ["turn 1", "turn 2", "turn 3"]
    for t in turns + [history, turns[1][:1], turns[0] + turns[1]]:
        assert save_messages(s, t) == []
    assert load_messages(s) == TA.validate_json(TA.dump_json(history))
    # an older turn followed by a different answer: a branch off where they part
    other = list(turns[1][:1]) + list(agent.run_sync("something else").new_messages()[1:])
    save_messages(s, other)
    assert _prompts(load_messages(s)) == ["turn 1", "turn 2"] and len(load_messages(s)) == 4


def test_a_history_whose_first_message_was_edited_is_stored_as_the_edited_one(tmp_path):
    s = Tape.init(tmp_path / "t").session("chat")
    agent = Agent(TestModel(), system_prompt="Be brief.")
    r = agent.run_sync("hi")
    history = agent.run_sync("and again", message_history=r.all_messages()).all_messages()
    save_messages(s, history)
    edited = [ModelRequest(parts=[SystemPromptPart("Be VERY brief."), *history[0].parts[1:]]), *history[1:]]
    save_messages(s, edited)
    assert load_messages(s) == TA.validate_json(TA.dump_json(edited))
    assert [b for b in s.refs().branches if b.startswith("main.was-")]  # the old history keeps a branch
    # an agent without a system prompt: the second message says it is the same history
    s2 = s.tape.session("plain")
    history = Agent(TestModel()).run_sync("first question").all_messages()
    save_messages(s2, history)
    fixed = [ModelRequest(parts=[UserPromptPart("first question, corrected")]), *history[1:]]
    save_messages(s2, fixed)
    assert _prompts(load_messages(s2)) == ["first question, corrected"] and len(load_messages(s2)) == len(fixed)


def test_tape_history_given_an_edited_first_message_keeps_one_history(tmp_path):
    s = Tape.init(tmp_path / "t").session("chat")
    agent = Agent(TestModel(), capabilities=[TapeHistory(s)])
    agent.run_sync("hi")
    agent.run_sync("and again")
    hist = load_messages(s)
    hist[0] = ModelRequest(parts=[SystemPromptPart("New rules."), *hist[0].parts])
    r = agent.run_sync("third", message_history=hist)
    assert load_messages(s) == TA.validate_json(TA.dump_json(r.all_messages()))


def test_concurrent_runs_on_a_new_session_store_each_message_once(tmp_path):
    s = Tape.init(tmp_path / "t").session("chat")
    agent = Agent(TestModel(call_tools=["lookup"]), capabilities=[TapeHistory(s)])

    @agent.tool_plain
    async def lookup(x: int) -> str:
        await asyncio.sleep(0.01)
        return f"r{x}"

    async def main():
        return await asyncio.gather(*(agent.run(f"question {c}") for c in "ABC"))

    results = asyncio.run(main())
    main_line = load_messages(s)
    assert _repeats(main_line) == 0
    assert len(_prompts(main_line)) == 1
    runs = [TA.validate_json(TA.dump_json(r.all_messages())) for r in results]
    assert main_line in runs  # the last run to save is main
    others = [load_messages(s, b) for b in s.refs().branches if b.startswith("main.was-")]
    for run in runs:  # and every run is whole on a branch
        assert run == main_line or run in others


def test_a_rewrite_never_leaves_another_writers_messages_on_no_branch(tmp_path, monkeypatch):
    """save_messages read HEAD, then moved the branch to a rewritten line without looking
    again: messages another writer appended in between were on no branch (compact would
    drop them). The other writer is a second Tape appending inside that window."""
    import ctape.integrations.pydantic_ai as pai
    from pydantic_ai.messages import ModelResponse, TextPart

    t = Tape.init(tmp_path / "t")
    s = t.session("c")
    h = [ModelRequest(parts=[UserPromptPart("q1")]), ModelResponse(parts=[TextPart("a1")]),
         ModelRequest(parts=[UserPromptPart("q2")]), ModelResponse(parts=[TextPart("a2")])]
    save_messages(s, h, whole=True)
    other = Tape.open(tmp_path / "t").session("c")
    orig = pai._history
    done = []

    def window(session, head):
        out = orig(session, head)
        if session is s and head is not None and not done:
            done.append(1)
            save_messages(other, h + [ModelRequest(parts=[UserPromptPart("OTHER q3")]), ModelResponse(parts=[TextPart("OTHER a3")])], whole=True)
        return out

    monkeypatch.setattr(pai, "_history", window)
    edited = h[:2] + [ModelRequest(parts=[UserPromptPart("q2 edited")])]
    save_messages(s, edited, whole=True)
    monkeypatch.undo()
    lines = {b: _prompts(load_messages(s, b)) for b in s.refs().branches}
    assert ["q1", "q2 edited"] in lines.values()
    assert ["q1", "q2", "OTHER q3"] in lines.values()  # the other writer's turn is on a branch


def test_what_is_not_a_message_is_refused_and_the_session_stays_readable(tmp_path):
    from ctape.errors import InvalidInput

    s = Tape.init(tmp_path / "t").session("chat")
    history = Agent(TestModel()).run_sync("hi").all_messages()
    save_messages(s, history)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one error, not pydantic's serializer warnings before it
        with pytest.raises(InvalidInput, match="not pydantic-ai messages"):
            save_messages(s, list(history) + [{"kind": "request"}])
    assert load_messages(s) == TA.validate_json(TA.dump_json(history))


def test_a_value_with_no_json_form_in_a_message_is_refused_in_one_line(tmp_path):
    # pydantic's own PydanticSerializationError came out (found by an audit)
    from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart

    from ctape.errors import InvalidInput

    class Opaque:
        pass

    s = Tape.init(tmp_path / "t").session("chat")
    history = [ModelRequest(parts=[UserPromptPart("hi")]), ModelResponse(parts=[ToolCallPart("f", {}, tool_call_id="c")])]
    save_messages(s, history)
    with pytest.raises(InvalidInput, match="cannot write as JSON .*Opaque") as e:
        save_messages(s, history + [ModelRequest(parts=[ToolReturnPart("f", Opaque(), tool_call_id="c")])])
    assert "\n" not in str(e.value)
    assert len(load_messages(s)) == 2


def test_messages_given_as_json_dicts_are_the_same_messages_and_warn_nothing(tmp_path):
    """Messages read back from a file as JSON (`ModelMessagesTypeAdapter.dump_json`, then
    `json.loads`) are the stored messages: nothing new, and no warning from pydantic."""
    s = Tape.init(tmp_path / "t").session("chat")
    history = Agent(TestModel()).run_sync("hi").all_messages()
    save_messages(s, history)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert save_messages(s, json.loads(TA.dump_json(history))) == []
        more = json.loads(TA.dump_json(history)) + [{"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "and?"}]}]
        assert [e.kind for e in save_messages(s, more)] == ["user"]
    assert load_messages(s)[-1].parts[0].content == "and?"


def test_a_loaded_message_changed_in_place_changes_only_the_callers_copy(tape):
    """(audit, 2026-12-06) load_messages handed out the nested values of the process's
    history cache and of the entries themselves: a caller that changed a loaded tool call's
    args in place (a history processor trimming it) changed what every later load in the
    process returned, even after the Tape was reopened, and the next save of the unchanged
    history plus one message was taken for a rewrite (4 entries and a `main.was-` branch)."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart

    s = tape.session("p")
    msgs = [ModelRequest(parts=[SystemPromptPart("sys"), UserPromptPart("hi")]),
            ModelResponse(parts=[ToolCallPart("f", {"a": {"b": 1}}, tool_call_id="c1")]),
            ModelRequest(parts=[ToolReturnPart("f", {"rows": [1, 2]}, tool_call_id="c1")]),
            ModelResponse(parts=[TextPart("done")])]
    save_messages(s, msgs)
    loaded = load_messages(s)
    loaded[1].parts[0].args["a"]["b"] = 999
    loaded[2].parts[0].content["rows"].append(3)
    again = load_messages(s)
    assert again[1].parts[0].args == {"a": {"b": 1}} and again[2].parts[0].content == {"rows": [1, 2]}
    written = save_messages(s, msgs + [ModelRequest(parts=[UserPromptPart("next")])])
    assert len(written) == 1 and [b["name"] for b in s.branches()] == ["main"]
