"""TapeSaver against LangGraph's own SqliteSaver on what a differential audit found
(2026-12-03): values that are equal but of other types, state changed in place by a node,
and the order of list(). Each graph runs on both savers; a new process reads the tape."""

import json
import math
import os
import sqlite3
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402

from ctape.integrations.langgraph import TapeSaver  # noqa: E402

CFG = {"configurable": {"thread_id": "t"}}


class Lists(TypedDict, total=False):
    nums: list
    flags: list


class Counter(TypedDict, total=False):
    data: dict
    items: list


class Scores(TypedDict, total=False):
    scores: list
    other: int


def _graph(state, saver, **nodes):
    """A graph whose nodes all start at START (one node, or siblings in one superstep)."""
    g = StateGraph(state)
    for name, fn in nodes.items():
        g.add_node(name, fn)
        g.add_edge(START, name)
    return g.compile(checkpointer=saver)


def _lists_graph(saver):
    return _graph(Lists, saver, n=lambda s: {})


def _in_place(state):
    d = state["data"]
    d["n"] += 1  # the channel's own object, changed in place: a common style
    state["items"].append(d["n"])
    return {"data": d, "items": state["items"]}


def _counter_graph(saver):
    return _graph(Counter, saver, step=_in_place)


def _savers(tmp_path):
    sq = SqliteSaver(sqlite3.connect(str(tmp_path / "cp.sqlite"), check_same_thread=False))
    return sq, TapeSaver(str(tmp_path / "tape"))


def _read_in_new_process(tape, script):
    code = textwrap.dedent(f"""
        import json, sys
        from typing_extensions import TypedDict
        from langgraph.graph import START, StateGraph
        from ctape.integrations.langgraph import TapeSaver
        saver = TapeSaver({str(tape)!r})
        cfg = {{"configurable": {{"thread_id": "t"}}}}
    """) + textwrap.dedent(script)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def _typed(v):
    """A value with the type of every atom spelled out (True, 1 and 1.0 are == in Python)."""
    if isinstance(v, dict):
        return {k: _typed(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_typed(x) for x in v]
    return [type(v).__name__, v]


def test_list_items_equal_but_of_other_types_come_back_as_written(tmp_path):
    """[True, False, 7] after [1, 0] was stored as "the parent's items + [7]" (1 == True),
    and a new process read [1, 0, 7]."""
    steps = [{"nums": [1, 0], "flags": [{"ok": 1}]},
             {"nums": [True, False, 7], "flags": [{"ok": True}, {"ok": False}]},
             {"nums": [1.0, 0.0, 7, 2.5, -0.0], "flags": [{"ok": True}, {"ok": False}]},
             {"nums": [1.0, 0.0, 7, 2.5, 0.0, 8], "flags": [{"ok": True}, {"ok": False}, {"ok": 1}]}]
    sq, tp = _savers(tmp_path)
    got = {}
    for name, saver in (("sqlite", sq), ("tape", tp)):
        app = _lists_graph(saver)
        hist = []
        for values in steps:
            app.update_state(CFG, values)
            hist.append(_typed(app.get_state(CFG).values))
        got[name] = hist
    assert got["tape"] == got["sqlite"]
    assert got["sqlite"][-1]["nums"][4] == ["float", 0.0]
    later = _read_in_new_process(tmp_path / "tape", """
        def typed(v):
            if isinstance(v, dict): return {k: typed(x) for k, x in v.items()}
            if isinstance(v, list): return [typed(x) for x in v]
            return [type(v).__name__, v]
        out = []
        for st in saver.list(cfg):
            out.append(typed(st.checkpoint["channel_values"]))
        print(json.dumps(out))
    """)
    newest_first = [h for h in later if "nums" in h]
    assert newest_first[0]["nums"] == got["sqlite"][-1]["nums"]
    assert [h["nums"] for h in reversed(newest_first)] == [h["nums"] for h in got["sqlite"]]
    assert [h["flags"] for h in reversed(newest_first)] == [h["flags"] for h in got["sqlite"]]
    assert math.copysign(1, newest_first[1]["nums"][4][1]) == -1  # -0.0 kept, then 0.0 written over it


def _scores_graph(saver, fail):
    def good(state):
        return {"scores": [float(x) for x in state["scores"]] + [0.5]}  # ints become floats

    def bad(state):
        if fail:
            raise RuntimeError("boom")
        return {"other": 1}

    return _graph(Scores, saver, good=good, bad=bad)


def test_a_pending_write_equal_but_of_other_types_is_replayed_as_written(tmp_path):
    """The sibling that succeeded wrote floats for ints; its write, kept while the other
    node failed, was stored as "the channel's value + [0.5]" and replayed with the ints."""
    sq, tp = _savers(tmp_path)
    for saver in (sq, tp):
        with pytest.raises(RuntimeError):
            _scores_graph(saver, fail=True).invoke({"scores": [1, 2, 3]}, CFG)
    want = _typed(_scores_graph(sq, fail=False).invoke(None, CFG))
    pending = _read_in_new_process(tmp_path / "tape", """
        print(json.dumps([[type(x).__name__ for x in v] for _, c, v in saver.get_tuple(cfg).pending_writes if c == "scores"]))
    """)
    assert pending == [["float", "float", "float", "float"]]
    tp2 = TapeSaver(str(tmp_path / "tape"))  # a new saver: reads the tape, not this process's cache
    assert _typed(_scores_graph(tp2, fail=False).invoke(None, CFG)) == want


def test_a_node_that_changes_its_state_in_place_does_not_change_saved_checkpoints(tmp_path):
    """The saver cached the objects the graph handed to put(): a node changing its state
    dict in place changed every earlier checkpoint read in this process, and time travel
    from step 0 ran on the latest values."""
    sq, tp = _savers(tmp_path)
    got = {}
    for name, saver in (("sqlite", sq), ("tape", tp)):
        app = _counter_graph(saver)
        for i in range(3):
            app.invoke({"data": {"n": 0}, "items": [0]} if i == 0 else {}, CFG, durability="sync")
        hist = [(h.metadata["step"], h.values) for h in app.get_state_history(CFG)]
        first = [h for h in app.get_state_history(CFG) if h.metadata["step"] == 0][0]
        replay = app.invoke(None, first.config, durability="sync")
        got[name] = (hist, replay)
    assert got["tape"] == got["sqlite"]
    assert got["sqlite"][1] == {"data": {"n": 1}, "items": [0, 1]}
    # what a caller does with the values it got does not reach the saver either
    st = tp.get_tuple(CFG)
    st.checkpoint["channel_values"]["data"]["n"] = 99
    st.checkpoint["channel_values"]["items"].append(99)
    again = tp.get_tuple(CFG).checkpoint["channel_values"]
    assert again["data"]["n"] != 99 and 99 not in again["items"]


def test_list_is_newest_first_across_threads_and_namespaces(tmp_path):
    """SqliteSaver orders list() by checkpoint id over all it matches; TapeSaver went
    thread by thread, so list(None, limit=4) gave other checkpoints."""
    def agent(state):
        return {"messages": [AIMessage("echo")]}

    got = {}
    for name, saver in zip(("sqlite", "tape"), _savers(tmp_path)):
        app = _graph(MessagesState, saver, agent=agent)
        for t in ("b-thread", "a-thread", "b-thread", "c-thread"):
            app.invoke({"messages": [HumanMessage(t)]}, {"configurable": {"thread_id": t}})
        got[name] = [[(c.config["configurable"]["thread_id"], c.metadata["step"]) for c in saver.list(None, limit=k)] for k in (1, 4, 9)]
    assert got["tape"] == got["sqlite"]
    assert got["sqlite"][1][0] == ("c-thread", 1)


def test_sets_of_equal_items_of_other_types_come_back_as_written(tmp_path):
    """(A review of the fixes.) {1} and {True} are equal sets: a list holding one then the
    other was stored as "+[...]" and came back with the old one from a new process."""
    steps = [{"nums": [{1}, frozenset({0})]}, {"nums": [{True}, frozenset({False}), 7]}]
    sq, tp = _savers(tmp_path)
    got = {}
    for name, saver in (("sqlite", sq), ("tape", tp)):
        app = _lists_graph(saver)
        for values in steps:
            app.update_state(CFG, values)
        got[name] = repr(app.get_state(CFG).values["nums"])
    again = repr(_lists_graph(TapeSaver(str(tmp_path / "tape"))).get_state(CFG).values["nums"])
    assert got["tape"] == got["sqlite"] == again == "[{True}, frozenset({False}), 7]"


# -- a lone surrogate, and a write that fails (an audit of 2026-12-04) -------------------------


class Texts(TypedDict, total=False):
    messages: list
    s: str
    d: dict


def _cut_reply(state):
    """A model's reply cut inside an emoji: a lone surrogate, in a message, its tool call, a
    plain string channel and a dict's value (a key with one fails in LangGraph's own serde)."""
    m = AIMessage("reply cut \ud83d", tool_calls=[{"id": "c\ud83d", "name": "look", "args": {"q": "x\ud83d"}}])
    return {"messages": [m], "s": "cut \ud83d", "d": {"k": "v\ud83d"}}


def _texts_graph(saver):
    from langgraph.graph.message import add_messages
    from typing import Annotated

    class State(TypedDict, total=False):
        messages: Annotated[list, add_messages]
        s: str
        d: dict

    return _graph(State, saver, n=_cut_reply)


def test_a_lone_surrogate_is_stored_as_langgraphs_savers_store_it(tmp_path):
    """The run failed with "not valid Unicode" where SqliteSaver stores "?" for the
    surrogate, and every later call on the thread in that process failed with "not in this
    tape" (the thread was bricked). Now the run goes through and a new process reads what
    SqliteSaver reads."""
    sq, tape = _savers(tmp_path)
    got = {}
    for name, saver in (("sqlite", sq), ("tape", tape)):
        g = _texts_graph(saver)
        g.invoke({"messages": [HumanMessage("hi", id="h1")]}, CFG)
        g.invoke({"messages": [HumanMessage("again", id="h2")]}, CFG)
        st = g.get_state(CFG).values
        got[name] = [m.content for m in st["messages"]]
    assert len(got["tape"]) == len(got["sqlite"]) == 4, got
    fresh = _read_in_new_process(tmp_path / "tape", """
        from typing import Annotated
        from langgraph.graph.message import add_messages
        class State(TypedDict, total=False):
            messages: Annotated[list, add_messages]
            s: str
            d: dict
        g = StateGraph(State); g.add_node("n", lambda s: {}); g.add_edge(START, "n")
        v = g.compile(checkpointer=saver).get_state(cfg).values
        m = v["messages"][1]
        print(json.dumps({"contents": [x.content for x in v["messages"]], "s": v["s"], "d": v["d"], "call": m.tool_calls[0]}))
    """)
    sq_state = _texts_graph(sq).get_state(CFG).values
    assert fresh["contents"] == [m.content for m in sq_state["messages"]] == ["hi", "reply cut ?", "again", "reply cut ?"], fresh
    assert fresh["s"] == sq_state["s"] == "cut ?" and fresh["d"] == sq_state["d"] == {"k": "v?"}, fresh
    assert fresh["call"]["args"] == sq_state["messages"][1].tool_calls[0]["args"], fresh
    from conftest import run_cli

    log = run_cli("--dir", tmp_path / "tape", "log", "--oneline", check=True).stdout.decode()
    assert "reply cut ?" in log, log


def test_a_write_that_fails_leaves_the_thread_usable(tmp_path, monkeypatch):
    """A value the tape refuses, met in the middle of a checkpoint's batch (after the
    checkpoint's entry was noted in the saver's memory, before the batch was written),
    fails that call and leaves nothing half there: the next calls in the same process work
    (they failed with "not in this tape": the memory named an entry never written), and
    agree with a new process."""
    from langgraph.graph.message import add_messages
    from typing import Annotated

    import ctape.history.session as session_mod
    from ctape.errors import InvalidInput

    class State(TypedDict, total=False):
        messages: Annotated[list, add_messages]

    tape = TapeSaver(str(tmp_path / "tape"))
    g = _graph(State, tape, n=lambda s: {"messages": [AIMessage(f"echo: {s['messages'][-1].content}")]})
    g.invoke({"messages": [HumanMessage("one")]}, CFG)
    real = session_mod.entry_body

    def refuses_poison(kind, payload, *a, **kw):
        if "echo: poison" in json.dumps(payload):  # the node's write, or its message's entry
            raise InvalidInput("refused (as a value the tape cannot hold)")
        return real(kind, payload, *a, **kw)

    monkeypatch.setattr(session_mod, "entry_body", refuses_poison)
    with pytest.raises(InvalidInput):
        g.invoke({"messages": [HumanMessage("poison")]}, CFG)
    monkeypatch.setattr(session_mod, "entry_body", real)
    here = [m.content for m in g.get_state(CFG).values["messages"]]
    g.invoke({"messages": [HumanMessage("two")]}, CFG)
    here = [m.content for m in g.get_state(CFG).values["messages"]]
    fresh = _read_in_new_process(tmp_path / "tape", """
        from typing import Annotated
        from langgraph.graph.message import add_messages
        class State(TypedDict, total=False):
            messages: Annotated[list, add_messages]
        g = StateGraph(State); g.add_node("n", lambda s: {}); g.add_edge(START, "n")
        print(json.dumps([m.content for m in g.compile(checkpointer=saver).get_state(cfg).values["messages"]]))
    """)
    assert fresh == here and here[:2] == ["one", "echo: one"] and here[-2:] == ["two", "echo: two"], (fresh, here)


def test_a_tuple_comes_back_as_a_serializing_saver_gives_it(tmp_path):
    """In the process that wrote it, a tuple in the state came back as a tuple, where
    SqliteSaver (and TapeSaver in a new process) give a list: `state["pair"] + (3,)`
    worked until a restart. An audit of 2026-12-04."""

    class Pair(TypedDict, total=False):
        pair: object
        nested: dict

    sq, tape = _savers(tmp_path)
    got = {}
    for name, saver in (("sqlite", sq), ("tape", tape)):
        g = _graph(Pair, saver, n=lambda s: {"pair": (1, 2), "nested": {"t": ("a", ("b",))}})
        g.invoke({"pair": None}, CFG)
        v = g.get_state(CFG).values
        got[name] = (_typed(v["pair"]), _typed(v["nested"]))
    assert got["tape"] == got["sqlite"], got


def test_list_content_with_a_lone_surrogate_shows_as_text_not_a_repr(tmp_path):
    """Content as a list of parts with a lone surrogate in one: the conversation entry
    held the list's Python repr (a review of 2026-12-04); now the parts, the surrogate as
    "?"."""
    from langgraph.graph.message import add_messages
    from typing import Annotated

    class State(TypedDict, total=False):
        messages: Annotated[list, add_messages]

    tape = TapeSaver(str(tmp_path / "tape"))
    g = _graph(State, tape, n=lambda s: {"messages": [AIMessage([{"type": "text", "text": "cut \ud83d"}])]})
    g.invoke({"messages": [HumanMessage("hi")]}, CFG)
    from conftest import run_cli

    shown = run_cli("--dir", tmp_path / "tape", "log", "--json", check=True).stdout.decode()
    contents = [json.loads(x)["payload"].get("content") for x in shown.splitlines()]
    assert [{"type": "text", "text": "cut ?"}] in contents or "cut ?" in contents, contents
    assert not any(isinstance(c, str) and "'type'" in c for c in contents), contents


class Anything(TypedDict, total=False):
    v: Any


def test_values_the_serde_writes_read_back_in_this_process_as_in_a_new_one(tmp_path):
    # a lone surrogate in a plain state string and a bytearray: the process that wrote them
    # read its own objects back ("x\ud800y", a bytearray) where SqliteSaver and a new
    # process read "x?y" and bytes (found by an audit); also as items a list channel gains
    def node(state):
        return {"v": state["v"]}

    def run(saver):
        b = StateGraph(Anything)
        b.add_node("n", node)
        b.add_edge(START, "n")
        g = b.compile(checkpointer=saver)
        g.invoke({"v": {"s": "x\ud800y", "ba": bytearray(b"ab"), "ok": "plain"}}, CFG)
        return g.get_state(CFG).values["v"]

    peer = run(SqliteSaver(sqlite3.connect(str(tmp_path / "cp.db"), check_same_thread=False)))
    saver = TapeSaver(str(tmp_path / "tape"))
    mine = run(saver)
    assert peer == {"s": "x?y", "ba": b"ab", "ok": "plain"} and type(peer["ba"]) is bytes
    assert mine == peer and type(mine["ba"]) is bytes
    saver.close()


class OneMessage(TypedDict, total=False):
    last: Any


def test_a_lone_message_the_serde_writes_reads_back_as_a_new_process_reads_it(tmp_path):
    # a channel holding one message with a lone surrogate: stored through the serde inside
    # the message form ({"m1": {"b": ...}}), which the first fix did not look into (a review)
    def node(state):
        return {"last": AIMessage("x\ud800y", id="m1")}

    def run(saver):
        b = StateGraph(OneMessage)
        b.add_node("n", node)
        b.add_edge(START, "n")
        g = b.compile(checkpointer=saver)
        g.invoke({"last": None}, CFG)
        return g.get_state(CFG).values["last"].content

    assert run(SqliteSaver(sqlite3.connect(str(tmp_path / "cp.db"), check_same_thread=False))) == "x?y"
    saver = TapeSaver(str(tmp_path / "tape"))
    assert run(saver) == "x?y"
    saver.close()
