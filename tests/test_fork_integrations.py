"""The integrations on both sides of os.fork() (pre-fork servers, multiprocessing's `fork`
start method), as a Tape is (tests/test_fork.py): a child forked while a parent thread was
inside the LangGraph saver or an Agents SDK session's add_items inherited a lock held by a
thread it does not have, and hung at its first call (18 of 20 and 8 of 10 children; found by
an audit). Here a parent thread holds each lock, deterministically, across the fork."""

import asyncio
import os
import signal
import threading

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")

HUNG = 7  # a child's exit code when its call did not return within its alarm


def fork_while_held(lock, in_child) -> int:
    """Fork while another thread of this process holds `lock`; the child runs in_child()
    (0 when it returned, HUNG when it hung for 10 s); the child's exit code."""
    held, go = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            go.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.signal(signal.SIGALRM, lambda *a: os._exit(HUNG))
            signal.alarm(10)
            in_child()
            code = 0
        finally:
            os._exit(code)
    go.set()
    t.join()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_child_forked_while_a_thread_was_inside_the_langgraph_saver_goes_on(tmp_path):
    pytest.importorskip("langgraph")
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    from ctape.integrations.langgraph import TapeSaver

    class State(TypedDict):
        n: int

    g = StateGraph(State)
    g.add_node("step", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "step")
    g.add_edge("step", END)
    with TapeSaver(str(tmp_path / "t")) as saver:
        graph = g.compile(checkpointer=saver)
        graph.invoke({"n": 0}, {"configurable": {"thread_id": "parent"}})

        def in_child():
            out = graph.invoke({"n": 10}, {"configurable": {"thread_id": "child"}})
            assert out["n"] == 11

        assert fork_while_held(saver._lock, in_child) == 0
        graph.invoke({"n": 5}, {"configurable": {"thread_id": "parent"}})  # the parent goes on too
        assert graph.get_state({"configurable": {"thread_id": "child"}}).values == {"n": 11}


def test_a_child_forked_while_a_thread_was_inside_add_items_goes_on(tmp_path):
    pytest.importorskip("agents")
    from ctape import Tape
    from ctape.integrations.openai_agents import TapeSession

    with Tape.init(str(tmp_path / "t")) as tape:
        session = TapeSession("chat", tape)
        asyncio.run(session.add_items([{"role": "user", "content": "before the fork"}]))
        lock = session._path.lock  # (_shared_path: every TapeSession of this tape and session shares it)

        def in_child():
            asyncio.run(session.add_items([{"role": "user", "content": "in the child"}]))

        assert fork_while_held(lock, in_child) == 0
        got = asyncio.run(session.get_items())
        assert [i["content"] for i in got] == ["before the fork", "in the child"]

