"""Issue 13, item 7: a pydantic-ai run persists itself (a capability), and saving is
idempotent (a history whose prefix is on the tape appends only its new tail)."""

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import FunctionModel  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402

from ctape.integrations import pydantic_ai as pai  # noqa: E402
from ctape.integrations.pydantic_ai import load_messages, save_messages  # noqa: E402


def dumped(msgs):
    return ModelMessagesTypeAdapter.dump_python(list(msgs), mode="json")


def users(session):
    return [e.payload["content"] for e in reversed(list(session.log(kinds=["user"])))]


# -- idempotent saves ------------------------------------------------------------------------------


def test_saving_all_messages_after_new_messages_stores_the_history_once(tape):
    agent = Agent(TestModel(custom_output_text="ok"))
    s = tape.session("twice")
    r1 = agent.run_sync("first")
    save_messages(s, r1.new_messages())
    r2 = agent.run_sync("second", message_history=load_messages(s))
    save_messages(s, r2.all_messages())  # the whole history: only the new turn is stored
    assert users(s) == ["first", "second"]
    assert load_messages(s) == r2.all_messages()
    n = len(list(s.log()))
    assert save_messages(s, r2.all_messages()) == []  # the same history again: nothing
    assert save_messages(s, r2.new_messages()) == []  # its tail, already there: nothing
    assert save_messages(s, r1.new_messages()) == []  # a prefix of what is there: nothing
    assert len(list(s.log())) == n


def test_a_rewritten_history_branches_off_and_keeps_the_old_line(tape):
    agent = Agent(TestModel(custom_output_text="ok"))
    s = tape.session("rewrite")
    r1 = agent.run_sync("first")
    r2 = agent.run_sync("second", message_history=r1.all_messages())
    save_messages(s, r2.all_messages())
    old_tip = s.refs().head_hash
    r3 = agent.run_sync("second, asked again", message_history=r1.all_messages())
    save_messages(s, r3.all_messages())
    assert load_messages(s) == r3.all_messages()
    assert users(s) == ["first", "second, asked again"]
    branches = s.refs().branches
    assert branches["main"] == s.refs().head_hash
    kept = [b for b, h in branches.items() if h == old_tip]
    assert kept and kept[0].startswith("main.was-")
    # the first turn is shared, not copied
    first = [e.hash for e in s.log(kinds=["user"])][-1]
    assert first in [e.hash for e in s.log(kept[0], kinds=["user"])]


# -- the capability ----------------------------------------------------------------------------------


def test_an_agent_run_persists_itself(tape):
    s = tape.session("auto")
    agent = Agent(TestModel(custom_output_text="ok"), system_prompt="be brief", capabilities=[pai.TapeHistory(s)])

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"sunny in {city}"

    r1 = agent.run_sync("weather?")
    assert load_messages(s) == r1.all_messages()
    r2 = agent.run_sync("and tomorrow?")  # the history comes from the tape
    assert [m for m in r2.all_messages()[: len(r1.all_messages())]] == r1.all_messages()
    assert load_messages(s) == r2.all_messages()
    assert users(s) == ["weather?", "and tomorrow?"]
    assert dumped(load_messages(s)) == dumped(r2.all_messages())


def test_each_step_is_on_the_tape_before_the_run_ends(tape):
    s = tape.session("steps")
    seen_on_tape = []

    def model(messages, info):
        seen_on_tape.append(len(load_messages(s)))
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {"q": "x"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), capabilities=[pai.TapeHistory(s)])

    @agent.tool_plain
    def lookup(q: str) -> str:
        return "found"

    r = agent.run_sync("go")
    # by the second model call, the first request, the tool call and its result were saved
    assert seen_on_tape[0] == 0 and seen_on_tape[1] >= 2
    assert load_messages(s) == r.all_messages()


def test_the_capability_with_an_explicit_history_does_not_store_it_twice(tape):
    s = tape.session("explicit")
    agent = Agent(TestModel(custom_output_text="ok"), capabilities=[pai.TapeHistory(s)])
    r1 = agent.run_sync("one")
    r2 = agent.run_sync("two", message_history=load_messages(s))
    assert users(s) == ["one", "two"]
    assert load_messages(s) == r2.all_messages()
    assert r1


def test_a_run_reads_and_saves_off_the_event_loop(tape, monkeypatch):
    """TapeHistory read and saved on the event loop: each save an fsync, and a wait for any
    other thread's batch or another process's lock on the session, held every other task of
    the loop (a 3 s stall beside another process's 3 s batch; found by an audit). Its reads
    and saves run in worker threads now, as the other integrations' do. Counted by thread,
    not timed."""
    import asyncio
    import threading

    from ctape.integrations.pydantic_ai import TapeHistory

    s = tape.session("loop")
    on_loop, off_loop = [], []
    loop_thread: list = []
    real_save, real_load = pai.save_messages, pai.load_messages

    def where():
        return on_loop if threading.current_thread() is loop_thread[0] else off_loop

    def save(*a, **k):
        where().append("save")
        return real_save(*a, **k)

    def load(*a, **k):
        where().append("load")
        return real_load(*a, **k)

    monkeypatch.setattr(pai, "save_messages", save)
    monkeypatch.setattr(pai, "load_messages", load)
    agent = Agent(TestModel(custom_output_text="ok"), capabilities=[TapeHistory(s)])

    async def main():
        loop_thread.append(threading.current_thread())
        await agent.run("first")
        await agent.run("second")

    asyncio.run(main())
    assert on_loop == []
    assert "save" in off_loop and "load" in off_loop
    assert users(s) == ["first", "second"]
