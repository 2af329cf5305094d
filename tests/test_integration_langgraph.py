"""TapeSaver against LangGraph itself: the conformance suite and real graphs."""

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from ctape import Tape  # noqa: E402
from ctape.integrations.langgraph import TapeSaver  # noqa: E402

from conftest import run_cli  # noqa: E402

GRAPH = '''
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def agent(state):
    msgs = state["messages"]
    last = msgs[-1]
    if isinstance(last, ToolMessage):
        return {"messages": [AIMessage(f"answer: {last.content}")]}
    if "weather" in last.content:
        call = {"id": f"call-{len(msgs)}", "name": "weather", "args": {"city": "Paris"}}
        return {"messages": [AIMessage("", tool_calls=[call])]}
    return {"messages": [AIMessage(f"echo: {last.content}")]}


def build(checkpointer):
    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([weather]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=checkpointer)


def approve(state):
    answer = interrupt({"question": "send it?", "draft": state["messages"][-1].content})
    return {"messages": [AIMessage(f"approved: {answer}")]}


def build_hitl(checkpointer):
    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("approve", approve)
    g.add_edge(START, "agent")
    g.add_edge("agent", "approve")
    g.add_edge("approve", END)
    return g.compile(checkpointer=checkpointer)
'''

ns: dict = {}
exec(GRAPH, ns)
build, build_hitl = ns["build"], ns["build_hitl"]


def cfg(thread, **extra):
    return {"configurable": {"thread_id": thread, **extra}}


def contents(state):
    return [m.content for m in state.values["messages"]]


@pytest.fixture
def saver(tape_dir):
    s = TapeSaver(tape_dir)
    yield s
    s.close()


# -- the conformance suite --------------------------------------------------------------------------


def test_conformance_all_capabilities(tmp_path):
    from langgraph.checkpoint.conformance import checkpointer_test, validate

    made = []

    @checkpointer_test(name="TapeSaver")
    async def factory():
        s = TapeSaver(tmp_path / f"tape{len(made)}")
        made.append(s)
        yield s
        s.close()

    report = asyncio.run(validate(factory))
    results = {k: (v.passed, v.tests_passed, v.failures) for k, v in report.results.items()}
    assert set(results) == {"put", "put_writes", "get_tuple", "list", "delete_thread", "delete_for_runs", "copy_thread", "prune"}
    failed = {k: v for k, v in results.items() if v[0] is not True}
    assert not failed, failed
    assert report.passed_all()
    assert sum(v[1] for v in results.values()) >= 70


# -- real graphs ---------------------------------------------------------------------------------------


def test_tool_calling_graph_matches_in_memory_saver(saver):
    ref = build(InMemorySaver())
    g = build(saver)
    for text in ["hi", "what is the weather?", "thanks"]:
        a = ref.invoke({"messages": [HumanMessage(text, id=f"u-{text}")]}, cfg("t"))
        b = g.invoke({"messages": [HumanMessage(text, id=f"u-{text}")]}, cfg("t"))
        assert [m.content for m in a["messages"]] == [m.content for m in b["messages"]]
    st = g.get_state(cfg("t"))
    assert contents(st)[-1] == "echo: thanks"
    assert "answer: sunny in Paris" in contents(st)
    msgs = st.values["messages"]
    call = next(m for m in msgs if isinstance(m, AIMessage) and m.tool_calls)
    result = next(m for m in msgs if isinstance(m, ToolMessage))
    assert result.tool_call_id == call.tool_calls[0]["id"]
    # a fresh saver on the same directory reads back equal messages
    again = TapeSaver(saver.tape.path)
    assert build(again).get_state(cfg("t")).values["messages"] == msgs
    assert len(list(again.list(cfg("t")))) == len(list(saver.list(cfg("t"))))
    again.close()


def test_messages_are_stored_once_not_per_checkpoint(saver):
    g = build(saver)
    for i in range(15):
        g.invoke({"messages": [HumanMessage(f"turn {i}")]}, cfg("t"))
    s = saver.tape.session(saver.session_for("t"))
    users = list(s.log(kinds=["user"]))
    assert [e.payload["content"] for e in reversed(users)] == [f"turn {i}" for i in range(15)]
    # every checkpoint entry holds only what changed: no checkpoint carries the message list
    cps = [e for e in s.log(kinds=["system"]) if e.meta.get("langgraph", {}).get("type") == "checkpoint"]
    assert len(cps) >= 30
    assert max(len(json.dumps(e.payload)) for e in cps) < 1500
    assert len(g.get_state(cfg("t")).values["messages"]) == 30


def test_resume_across_process_restart(tape_dir, tmp_path):
    script = tmp_path / "turn.py"
    script.write_text(
        GRAPH
        + textwrap.dedent(
            """
            import sys
            from ctape.integrations.langgraph import TapeSaver
            saver = TapeSaver(sys.argv[1])
            out = build(saver).invoke({"messages": [HumanMessage(sys.argv[2])]}, {"configurable": {"thread_id": "chat"}})
            print(len(out["messages"]))
            """
        )
    )
    for i, text in enumerate(["one", "what is the weather?", "three"]):
        p = subprocess.run([sys.executable, str(script), str(tape_dir), text], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
    s = TapeSaver(tape_dir)
    st = build(s).get_state(cfg("chat"))
    assert contents(st) == ["one", "echo: one", "what is the weather?", "", "sunny in Paris", "answer: sunny in Paris", "three", "echo: three"]
    s.close()


def test_interrupt_and_human_in_the_loop_resume_in_a_new_process(tape_dir, tmp_path):
    from langgraph.types import Command

    s1 = TapeSaver(tape_dir)
    g = build_hitl(s1)
    g.invoke({"messages": [HumanMessage("draft a mail")]}, cfg("h"))
    st = g.get_state(cfg("h"))
    assert st.next == ("approve",)
    assert st.tasks[0].interrupts[0].value["question"] == "send it?"
    s1.close()
    script = tmp_path / "resume.py"
    script.write_text(
        GRAPH
        + textwrap.dedent(
            """
            import sys
            from langgraph.types import Command
            from ctape.integrations.langgraph import TapeSaver
            g = build_hitl(TapeSaver(sys.argv[1]))
            out = g.invoke(Command(resume="yes"), {"configurable": {"thread_id": "h"}})
            print(out["messages"][-1].content)
            """
        )
    )
    p = subprocess.run([sys.executable, str(script), str(tape_dir)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "approved: yes"
    s2 = TapeSaver(tape_dir)
    st = build_hitl(s2).get_state(cfg("h"))
    assert st.next == ()
    assert contents(st) == ["draft a mail", "echo: draft a mail", "approved: yes"]
    assert Command  # imported for the reader: the resume value goes through Command
    s2.close()


def test_time_travel_and_history(saver):
    g = build(saver)
    for text in ["a", "b", "c"]:
        g.invoke({"messages": [HumanMessage(text)]}, cfg("tt"))
    history = list(g.get_state_history(cfg("tt")))
    ids = [h.config["configurable"]["checkpoint_id"] for h in history]
    assert ids == sorted(ids, reverse=True)
    # the checkpoint right after "a" was answered
    after_a = next(h for h in reversed(history) if contents(h) == ["a", "echo: a"])
    out = g.invoke({"messages": [HumanMessage("b2")]}, after_a.config)
    assert [m.content for m in out["messages"]] == ["a", "echo: a", "b2", "echo: b2"]
    assert contents(g.get_state(cfg("tt"))) == ["a", "echo: a", "b2", "echo: b2"]
    # the old line is intact and reachable, and still listed
    assert contents(g.get_state(history[0].config))[-1] == "echo: c"
    assert len(list(g.get_state_history(cfg("tt")))) > len(history)
    branches = {b["name"] for b in saver.tape.session(saver.session_for("tt")).branches()}
    assert "main" in branches and any(b.startswith("main.was-") for b in branches)


def test_update_state_forks_from_an_old_checkpoint(saver):
    g = build(saver)
    g.invoke({"messages": [HumanMessage("x")]}, cfg("u"))
    g.invoke({"messages": [HumanMessage("y")]}, cfg("u"))
    old = next(h for h in g.get_state_history(cfg("u")) if contents(h) == ["x", "echo: x"])
    new_cfg = g.update_state(old.config, {"messages": [AIMessage("edited by a human")]})
    st = g.get_state(new_cfg)
    assert contents(st) == ["x", "echo: x", "edited by a human"]
    assert st.parent_config["configurable"]["checkpoint_id"] == old.config["configurable"]["checkpoint_id"]
    assert contents(g.get_state(cfg("u"))) == ["x", "echo: x", "edited by a human"]
    out = g.invoke({"messages": [HumanMessage("z")]}, cfg("u"))
    assert [m.content for m in out["messages"]][-2:] == ["z", "echo: z"]
    assert "y" not in [m.content for m in out["messages"]]


def test_concurrent_threads_sync_and_async(saver):
    g = build(saver)

    def run(t):
        for i in range(5):
            g.invoke({"messages": [HumanMessage(f"{t}-{i}")]}, cfg(t))
        return t

    with ThreadPoolExecutor(4) as ex:
        assert sorted(ex.map(run, [f"w{k}" for k in range(4)])) == [f"w{k}" for k in range(4)]

    async def arun():
        async def one(t):
            for i in range(3):
                await g.ainvoke({"messages": [HumanMessage(f"{t}-{i}")]}, cfg(t))

        await asyncio.gather(*(one(f"a{k}") for k in range(3)))

    asyncio.run(arun())
    fresh = build(TapeSaver(saver.tape.path))
    for k in range(4):
        assert contents(fresh.get_state(cfg(f"w{k}"))) == [x for i in range(5) for x in (f"w{k}-{i}", f"echo: w{k}-{i}")]
    for k in range(3):
        assert contents(fresh.get_state(cfg(f"a{k}")))[-1] == f"echo: a{k}-2"
    assert threading.active_count() >= 1


def test_copy_thread_is_by_reference_and_delete_only_moves_refs(saver):
    g = build(saver)
    g.invoke({"messages": [HumanMessage("hello")]}, cfg("src"))
    src = saver.tape.session(saver.session_for("src"))
    before = saver.tape.stats()
    saver.copy_thread("src", "dst")
    dst = saver.tape.session(saver.session_for("dst"))
    assert dst.refs().branches == src.refs().branches
    assert saver.tape.stats()["objects"] == before["objects"]
    assert contents(g.get_state(cfg("dst"))) == ["hello", "echo: hello"]
    g.invoke({"messages": [HumanMessage("only in dst")]}, cfg("dst"))
    assert contents(g.get_state(cfg("src"))) == ["hello", "echo: hello"]
    saver.delete_thread("src")
    assert g.get_state(cfg("src")).values == {}
    assert list(saver.list(cfg("src"))) == []
    assert contents(g.get_state(cfg("dst")))[-1] == "echo: only in dst"


def test_odd_thread_ids_map_to_valid_sessions(saver):
    g = build(saver)
    for tid in ["user@example.com/chat 1", "../etc", "x" * 300]:
        g.invoke({"messages": [HumanMessage("hi")]}, cfg(tid))
        assert contents(g.get_state(cfg(tid))) == ["hi", "echo: hi"]
    tids = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
    assert {"user@example.com/chat 1", "../etc", "x" * 300} <= tids


def test_cli_log_status_context_on_a_saver_tape(tape_dir):
    from langgraph.types import Command

    s = TapeSaver(tape_dir)
    g = build(s)
    g.invoke({"messages": [HumanMessage("what is the weather?")]}, cfg("cli"))
    name = s.session_for("cli")
    h = build_hitl(s)
    h.invoke({"messages": [HumanMessage("draft")]}, cfg("cli2"))
    s.close()
    p = run_cli("--dir", tape_dir, "log", "-s", name, "--json", check=True)
    kinds = [json.loads(line)["kind"] for line in p.stdout.decode().splitlines()]
    assert {"user", "tool_call", "tool_result", "assistant"} <= set(kinds)
    p = run_cli("--dir", tape_dir, "status", "-s", name, "--json", check=True)
    st = json.loads(p.stdout)
    assert st["branch"] == "main" and st["pending_tool_calls"] == []
    p = run_cli("--dir", tape_dir, "context", name, "--format", "openai", check=True)
    msgs = json.loads(p.stdout)
    msgs = msgs["messages"] if isinstance(msgs, dict) else msgs
    roles = [m["role"] for m in msgs]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert msgs[1]["tool_calls"][0]["function"]["name"] == "weather"
    assert msgs[-1]["content"] == "answer: sunny in Paris"
    assert run_cli("--dir", tape_dir, "fsck", check=True).returncode == 0
    assert Command


def test_importing_ctape_does_not_import_frameworks():
    code = "import sys, ctape, ctape.integrations; bad = [m for m in ('langgraph', 'agents', 'pydantic_ai', 'langchain_core') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_tape_is_a_plain_tape(saver):
    g = build(saver)
    g.invoke({"messages": [HumanMessage("hi")]}, cfg("plain"))
    t = Tape.open(saver.tape.path)
    assert t.fsck()["ok"]
    assert [x["session"] for x in t.sessions()] == [saver.session_for("plain")]
    t.close()


def test_a_long_lived_saver_keeps_a_bounded_number_of_threads_in_memory(tmp_path, monkeypatch):
    """A server's saver kept every thread it had seen indexed in memory, and every entry's
    brief (1,000 threads: 182 MB and growing, against SqliteSaver's flat 76 MB; found by an
    audit of long-lived processes). It keeps the THREADS_KEPT used last; a thread dropped
    is read again from the index cache, whole and right. Counted, not timed."""
    import ctape.integrations.langgraph.index as lg_index

    monkeypatch.setattr(lg_index, "THREADS_KEPT", 8, raising=False)
    ns: dict = {}
    exec(GRAPH, ns)
    with TapeSaver(str(tmp_path / "t")) as saver:
        graph = ns["build"](saver)
        for i in range(40):
            cfg = {"configurable": {"thread_id": f"user-{i}"}}
            graph.invoke({"messages": [HumanMessage(f"hello {i}")]}, cfg)
            graph.invoke({"messages": [HumanMessage(f"again {i}")]}, cfg)
            assert len(saver._threads) <= 8
        kept = {h for th in saver._threads.values() for h in th.seen}
        assert set(saver._briefs) <= kept  # the briefs of dropped threads went with them
        for i in (0, 17, 39):  # dropped long ago, or kept: the same state either way
            msgs = graph.get_state({"configurable": {"thread_id": f"user-{i}"}}).values["messages"]
            assert [m.content for m in msgs] == [f"hello {i}", f"echo: hello {i}", f"again {i}", f"echo: again {i}"]
        assert len(list(saver.list({"configurable": {"thread_id": "user-3"}}))) == 6  # two invokes, 3 checkpoints each
