"""Issue 23, item 7: subgraphs on the tape.

LangGraph gives every run of a subgraph a namespace of its own (``node:<task id>``). A
branch per namespace left one branch per turn (300 turns, 301 branches), and each run
copied the caller's whole conversation, so a turn cost more the longer the thread. Now
every namespace joins the root line (``main``) as hidden entries and a subgraph run
refers to its caller's state instead of copying it. Checked against LangGraph's own
InMemorySaver on the same graph, by what is written per turn (counted, not timed), and
with a subgraph that stops at an interrupt.
"""

import json

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from ctape.integrations.langgraph import WAITING, TapeSaver  # noqa: E402
from ctape.model.models import HIDDEN  # noqa: E402

from conftest import run_cli  # noqa: E402


def cfg(thread):
    return {"configurable": {"thread_id": thread}}


def inner(state):
    text = state["messages"][-1].content
    if text.startswith("forget "):  # a subgraph that edits its own copy of the messages
        gone = next(m for m in state["messages"] if m.content == text[7:])
        return {"messages": [RemoveMessage(id=gone.id), AIMessage(f"inner forgot {text[7:]}")]}
    return {"messages": [AIMessage(f"inner {len(state['messages'])}: {text}")]}


def wrap(state):
    text = state["messages"][-2].content
    if text.startswith("drop "):  # the parent removes a message: its line is written again
        gone = next(m for m in state["messages"] if m.content == text[5:])
        return {"messages": [RemoveMessage(id=gone.id), AIMessage(f"dropped {text[5:]}")]}
    return {"messages": [AIMessage(f"wrapped {len(state['messages'])}")]}


def outer_graph(saver):
    """A chat whose answer comes from a subgraph (shared messages channel), then a node of
    the parent's own: the usual shape of an agent that delegates."""
    sg = StateGraph(MessagesState)
    sg.add_node("inner", inner)
    sg.add_edge(START, "inner")
    g = StateGraph(MessagesState)
    g.add_node("delegate", sg.compile())
    g.add_node("wrap", wrap)
    g.add_edge(START, "delegate")
    g.add_edge("delegate", "wrap")
    return g.compile(checkpointer=saver)


def contents(msgs):
    return [m.content for m in msgs]


def history(app, thread):
    """get_state_history as plain data (ids and times differ between savers)."""
    return [(contents(h.values["messages"]), h.next, h.metadata["source"], h.metadata["step"]) for h in app.get_state_history(cfg(thread))]


def test_subgraph_runs_leave_one_branch_and_read_like_langgraphs_own_saver(tape_dir, tmp_path, monkeypatch):
    saver = TapeSaver(tape_dir)
    app, ref = outer_graph(saver), outer_graph(InMemorySaver())
    s = saver.tape.session(saver.session_for("t"))
    sizes = []
    for i in range(30):
        before = s.refs().branches.get("main")
        n0 = len(list(s.log())) if before else 0
        for g in (app, ref):
            g.invoke({"messages": [HumanMessage(f"q{i}")]}, cfg("t"))
        new = list(s.log())[: len(list(s.log())) - n0]
        sizes.append((len(new), sum(len(json.dumps(e.payload)) for e in new)))
    # one branch, however many subgraph runs
    assert sorted(s.refs().branches) == ["main"]
    # the thread reads as LangGraph's own saver has it: state, history, subgraph namespaces
    assert contents(app.get_state(cfg("t")).values["messages"]) == contents(ref.get_state(cfg("t")).values["messages"])
    assert history(app, "t") == history(ref, "t")
    ns_tape = sorted({c.config["configurable"]["checkpoint_ns"].split(":")[0] for c in saver.list(cfg("t"))})
    ns_ref = sorted({c.config["configurable"]["checkpoint_ns"].split(":")[0] for c in ref.checkpointer.list(cfg("t"))})
    assert ns_tape == ns_ref == ["", "delegate"]
    # what a turn writes does not grow with the thread: the same entries, about the same bytes
    # (a run refers to its caller's messages; it does not copy them). LangGraph's writes
    # arrive in an order that varies from run to run (a subgraph can start before its
    # caller's checkpoint has the new input: one entry more), so early and late turns are
    # compared by their largest
    early, late = sizes[3:10], sizes[-7:]
    assert max(n for n, _ in late) <= max(n for n, _ in early) + 1, sizes
    assert max(b for _, b in late) < 1.3 * max(b for _, b in early), sizes
    # the conversation is the root graph's: the subgraph's own copies are hidden
    state = contents(app.get_state(cfg("t")).values["messages"])
    assert [m.get("content") for m in s.context(format="openai")] == state
    assert all(e.meta.get(HIDDEN) for e in s.log() if e.meta.get("langgraph", {}).get("checkpoint_ns"))
    want = [(c.config, c.parent_config, len(c.pending_writes)) for c in saver.list(cfg("t"))]
    saver.close()
    # a new saver (the index cache) and one without it (every entry read) read the same
    for cache in ("kept", "none"):
        if cache == "none":
            monkeypatch.setenv("CTAPE_CACHE_DIR", str(tmp_path / "no-cache"))
        again = TapeSaver(tape_dir)
        app2 = outer_graph(again)
        assert history(app2, "t") == history(ref, "t")
        assert [(c.config, c.parent_config, len(c.pending_writes)) for c in again.list(cfg("t"))] == want
        again.close()
    assert run_cli("--dir", tape_dir, "fsck").returncode == 0


def test_a_subgraph_that_edits_its_messages_leaves_the_roots_view_alone(tape_dir):
    """A RemoveMessage inside a subgraph rewrites the subgraph's own (hidden) copies only."""
    saver = TapeSaver(tape_dir)
    app, ref = outer_graph(saver), outer_graph(InMemorySaver())
    for text in ["hello", "more", "forget hello", "after"]:
        for g in (app, ref):
            g.invoke({"messages": [HumanMessage(text)]}, cfg("ed"))
    assert history(app, "ed") == history(ref, "ed")
    s = saver.tape.session(saver.session_for("ed"))
    assert [m.get("content") for m in s.context(format="openai")] == contents(app.get_state(cfg("ed")).values["messages"])
    assert sorted(s.refs().branches) == ["main"]
    saver.close()


def asker_graph(saver):
    """A subgraph that drafts an answer and asks before sending it (interrupt inside)."""

    def draft(state):
        return {"messages": [AIMessage(f"draft: {state['messages'][-1].content}")]}

    def ask(state):
        answer = interrupt({"question": "send it?", "draft": state["messages"][-1].content})
        return {"messages": [AIMessage(f"sent ({answer})")]}

    sg = StateGraph(MessagesState)
    sg.add_node("draft", draft)
    sg.add_node("ask", ask)
    sg.add_edge(START, "draft")
    sg.add_edge("draft", "ask")
    g = StateGraph(MessagesState)
    g.add_node("mail", sg.compile())
    g.add_edge(START, "mail")
    return g.compile(checkpointer=saver)


def test_an_interrupt_inside_a_subgraph_waits_in_status_and_resumes(tape_dir):
    saver = TapeSaver(tape_dir)
    app, ref = asker_graph(saver), asker_graph(InMemorySaver())
    for turn in range(3):
        for g in (app, ref):
            g.invoke({"messages": [HumanMessage(f"mail {turn}")]}, cfg("ask"))
        # the run stops inside the subgraph: the thread waits for input, on main
        st = app.get_state(cfg("ask"), subgraphs=True)
        assert st.next == ("mail",) and st.tasks[0].state.next == ("ask",)
        assert st.tasks[0].interrupts[0].value == {"question": "send it?", "draft": f"draft: mail {turn}"}
        p = run_cli("--dir", tape_dir, "status", "-s", saver.session_for("ask"), check=True)
        assert p.stdout.decode().count(WAITING) == 1  # the subgraph and its caller write it: one call waits
        for g in (app, ref):
            g.invoke(Command(resume=f"yes {turn}"), cfg("ask"))
        p = run_cli("--dir", tape_dir, "status", "-s", saver.session_for("ask"), check=True)
        assert WAITING not in p.stdout.decode()
        assert contents(app.get_state(cfg("ask")).values["messages"])[-1] == f"sent (yes {turn})"
    assert history(app, "ask") == history(ref, "ask")
    s = saver.tape.session(saver.session_for("ask"))
    assert sorted(s.refs().branches) == ["main"]
    saver.close()
    again = TapeSaver(tape_dir)
    assert history(asker_graph(again), "ask") == history(ref, "ask")
    again.close()


def test_subgraph_records_survive_a_rewrite_of_the_root_and_compact(tape_dir):
    """A subgraph run refers to its caller's checkpoint; those references stay on main's
    path, so a RemoveMessage in the parent (which writes the line again) and a compact that
    keeps only what the refs reach leave every checkpoint readable."""
    saver = TapeSaver(tape_dir)
    app, ref = outer_graph(saver), outer_graph(InMemorySaver())
    for text in ["one", "two", "three", "drop one", "four", "drop three", "five"]:
        for g in (app, ref):
            g.invoke({"messages": [HumanMessage(text)]}, cfg("rw"))
    assert history(app, "rw") == history(ref, "rw")
    s = saver.tape.session(saver.session_for("rw"))
    assert [m.get("content") for m in s.context(format="openai")] == contents(ref.get_state(cfg("rw")).values["messages"])
    saver.close()
    assert run_cli("--dir", tape_dir, "compact", "--expire", "now", "--grace", "now").returncode == 0
    assert run_cli("--dir", tape_dir, "fsck").returncode == 0
    again = TapeSaver(tape_dir)
    app2 = outer_graph(again)
    assert history(app2, "rw") == history(ref, "rw")
    # newest first over the root's and the subgraph's checkpoints (SqliteSaver's order;
    # InMemorySaver lists one namespace after the other, so its list is put in that order)
    newest = lambda tuples: sorted(tuples, key=lambda c: c.config["configurable"]["checkpoint_id"], reverse=True)
    assert [len(c.pending_writes) for c in again.list(cfg("rw"))] == [len(c.pending_writes) for c in newest(ref.checkpointer.list(cfg("rw")))]
    again.close()
