"""TapeSession against the real openai-agents package, with a scripted model (no network)."""

import asyncio
import json

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.memory import Session  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402
from conftest import run_cli  # noqa: E402

from ctape.integrations.openai_agents import TapeSession  # noqa: E402

set_tracing_disabled(True)  # no network, no trace export


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def run(coro):
    return asyncio.run(coro)


def test_is_an_sdk_session(tape_dir):
    assert isinstance(TapeSession("s", tape_dir), Session)


def test_agent_run_with_tools_round_trips_items(tape_dir):
    model = ScriptedModel(
        [
            [function_call("get_weather", {"city": "Paris"}, call_id="call-1")],
            [assistant_message("It is sunny in Paris.")],
            [assistant_message("You asked about Paris.")],
        ]
    )
    agent = Agent(name="a", instructions="be brief", model=model, tools=[get_weather])
    s = TapeSession("user@example.com chat", tape_dir)
    r1 = run(Runner.run(agent, "weather in Paris?", session=s))
    assert r1.final_output == "It is sunny in Paris."
    r2 = run(Runner.run(agent, "what did I ask?", session=s))
    assert r2.final_output == "You asked about Paris."
    # the second model call saw the first turn, read back from the tape
    second_input = model.calls[2].input
    assert any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in second_input)
    items = run(s.get_items())
    assert [i.get("type") or "message" for i in items] == ["message", "function_call", "function_call_output", "message", "message", "message"]
    # a new session object on the same tape reads equal items
    again = TapeSession("user@example.com chat", tape_dir)
    assert run(again.get_items()) == items
    assert run(again.get_items(limit=2)) == items[-2:]
    kinds = [e.kind for e in reversed(list(s.session.log()))]
    assert kinds == ["user", "tool_call", "tool_result", "assistant", "user", "assistant"]
    p = run_cli("--dir", tape_dir, "context", s.name, "--format", "openai", check=True)
    roles = [m["role"] for m in json.loads(p.stdout)]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    p = run_cli("--dir", tape_dir, "status", "-s", s.name, "--json", check=True)
    assert json.loads(p.stdout)["pending_tool_calls"] == []


def test_pop_item_moves_head_back_and_keeps_the_item(tape_dir):
    s = TapeSession("pop", tape_dir)
    run(s.add_items([{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]))
    tip = s.session.refs().head_hash
    assert run(s.pop_item()) == {"role": "user", "content": "two"}
    assert run(s.get_items()) == [{"role": "user", "content": "one"}]
    assert s.tape.read_entry(tip).payload == {"content": "two"}  # still on the tape
    assert s.session.refs().branch == "main"
    assert run(s.pop_item()) == {"role": "user", "content": "one"}
    assert run(s.pop_item()) is None
    assert run(s.get_items()) == []
    run(s.add_items([{"role": "user", "content": "three"}]))
    assert run(s.get_items()) == [{"role": "user", "content": "three"}]


def test_clear_session_starts_a_new_branch(tape_dir):
    s = TapeSession("clr", tape_dir)
    run(s.add_items([{"role": "user", "content": "old"}]))
    old_tip = s.session.refs().head_hash
    run(s.clear_session())
    assert run(s.get_items()) == []
    run(s.add_items([{"role": "user", "content": "new"}]))
    assert run(s.get_items()) == [{"role": "user", "content": "new"}]
    st = s.session.refs()
    assert st.branch == "main-2"
    assert st.branches["main"] == old_tip
    run(s.clear_session())
    assert s.session.refs().head == "@main-3"


def test_unknown_item_types_are_kept_hidden(tape_dir):
    s = TapeSession("r", tape_dir)
    item = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "x" * 2000}]}
    run(s.add_items([item, {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]))
    assert run(s.get_items())[0] == item
    e = list(s.session.log())[-1]
    assert e.meta.get("ctape.hidden") is True
