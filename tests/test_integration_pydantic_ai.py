"""pydantic-ai message history on a tape, with TestModel / FunctionModel (no network)."""

import json

import pytest

pytest.importorskip("pydantic_ai")

from conftest import run_cli  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse, TextPart, ThinkingPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import FunctionModel  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402

from ctape.integrations.pydantic_ai import load_messages, save_messages  # noqa: E402


def dumped(msgs):
    return ModelMessagesTypeAdapter.dump_python(list(msgs), mode="json")


def test_test_model_run_round_trips(tape):
    agent = Agent(TestModel(), system_prompt="be brief")

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"sunny in {city}"

    s = tape.session("pai")
    r1 = agent.run_sync("weather?", message_history=load_messages(s))
    save_messages(s, r1.new_messages())
    r2 = agent.run_sync("again", message_history=load_messages(s))
    save_messages(s, r2.new_messages())
    loaded = load_messages(s)
    assert loaded == r2.all_messages()
    assert dumped(loaded) == dumped(r2.all_messages())
    kinds = [e.kind for e in reversed(list(s.log()))]
    assert kinds[:5] == ["system", "user", "tool_call", "tool_result", "assistant"]
    assert kinds.count("user") == 2


def test_function_model_retries_and_thinking_are_mapped(tape_dir):
    from ctape import Tape

    calls = {"n": 0}

    def model(messages, info):
        calls["n"] += 1
        if calls["n"] == 1:
            return ModelResponse(parts=[ToolCallPart("divide", {"a": 1, "b": 0}, tool_call_id="c1")])
        if calls["n"] == 2:
            return ModelResponse(parts=[ToolCallPart("divide", {"a": 4, "b": 2}, tool_call_id="c2")])
        return ModelResponse(parts=[ThinkingPart("4 over 2"), TextPart("the answer is 2")])

    agent = Agent(FunctionModel(model))

    @agent.tool_plain(retries=2)
    def divide(a: int, b: int) -> float:
        from pydantic_ai import ModelRetry

        if b == 0:
            raise ModelRetry("b must not be zero")
        return a / b

    t = Tape.open(tape_dir)
    s = t.session("retry")
    r = agent.run_sync("4/2?")
    save_messages(s, r.all_messages())
    assert load_messages(s) == r.all_messages()
    kinds = [e.kind for e in reversed(list(s.log()))]
    assert kinds == ["user", "tool_call", "error", "tool_call", "tool_result", "assistant", "assistant"]
    thinking = list(s.log())[1]
    assert thinking.meta.get("ctape.hidden") is True and thinking.payload["content"] == "4 over 2"
    err = next(e for e in s.log() if e.kind == "error")
    assert err.payload["call_id"] == "c1" and "zero" in err.payload["message"]
    t.close()
    p = run_cli("--dir", tape_dir, "context", "retry", "--format", "openai", check=True)
    msgs = json.loads(p.stdout)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    p = run_cli("--dir", tape_dir, "context", "retry", "--policy", "exclude-errors", "--format", "openai", check=True)
    assert [m["role"] for m in json.loads(p.stdout)] == ["user", "assistant", "tool", "assistant"]
    p = run_cli("--dir", tape_dir, "status", "-s", "retry", "--json", check=True)
    assert json.loads(p.stdout)["pending_tool_calls"] == []


def test_load_at_an_old_ref_and_fork(tape):
    agent = Agent(TestModel(custom_output_text="ok"))
    s = tape.session("fork")
    save_messages(s, agent.run_sync("first").new_messages())
    mid = s.refs().head_hash
    save_messages(s, agent.run_sync("second", message_history=load_messages(s)).new_messages())
    assert len(load_messages(s)) == 4
    assert len(load_messages(s, mid)) == 2
    s.checkout(mid, new_branch="alt")
    save_messages(s, agent.run_sync("other", message_history=load_messages(s)).new_messages())
    texts = [p.content for m in load_messages(s) for p in m.parts if hasattr(p, "content")]
    assert texts == ["first", "ok", "other", "ok"]
    assert len(load_messages(s, "fork/main")) == 4


def test_empty_session_loads_nothing(tape):
    assert load_messages(tape.session("none")) == []
