"""LangGraph's `Command(resume={interrupt_id: value})` answers those interrupts on the tape
(docs/integrations.md, "Interrupts"). LangGraph writes no resume of the null task for a
map: each interrupted task writes its own `__resume__` when it takes its value. A
black-box audit found the saver reading only the null task's: an interrupt resumed by id
stayed pending in `ctape status` after the graph had finished, was closed later with a
false "[no answer ...]", and of two parallel interrupts the one answered "A" by id was
recorded as answered by the later plain resume "B". Real LangGraph, real TapeSaver."""

import operator
import random
import time
from typing import Annotated, TypedDict

import pytest

langgraph = pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Command, Send, interrupt  # noqa: E402

from ctape import Tape  # noqa: E402
from ctape.integrations.langgraph import TapeSaver  # noqa: E402


def answers(tape_dir, session) -> dict:
    """call_id -> output of the hidden resume results on the session's path, and the
    pending calls status lists."""
    with Tape.open(tape_dir) as t:
        s = t.session(session)
        out = {e.payload["call_id"]: e.payload["output"] for e in s.log(hidden=True) if e.kind == "tool_result"}
        return out, [c["call_id"] for c in s.status()["pending_tool_calls"]]


class One(TypedDict):
    answer: str


def test_a_single_interrupt_resumed_by_its_id_is_answered(tape_dir):
    def ask(state):
        return {"answer": interrupt("send the mail?")}

    b = StateGraph(One)
    b.add_node("ask", ask)
    b.add_edge(START, "ask")
    b.add_edge("ask", END)
    g = b.compile(checkpointer=TapeSaver(tape_dir))
    c = {"configurable": {"thread_id": "one"}}
    g.invoke({"answer": ""}, c)
    [i] = g.get_state(c).interrupts
    assert answers(tape_dir, "lg-one")[1] == [i.id]
    g.invoke(Command(resume={i.id: "yes"}), c)
    assert g.get_state(c).values == {"answer": "yes"} and g.get_state(c).interrupts == ()
    got, pending = answers(tape_dir, "lg-one")
    assert got == {i.id: "yes"} and pending == []


class Many(TypedDict):
    log: Annotated[list, operator.add]


def _workers(tape_dir):
    def worker(state):
        return {"log": [f"worker {state['w']} -> {interrupt({'worker': state['w']})}"]}

    b = StateGraph(Many)
    b.add_node("worker", worker)
    b.add_conditional_edges(START, lambda s: [Send("worker", {"w": i}) for i in range(2)], ["worker"])
    b.add_edge("worker", END)
    return b.compile(checkpointer=TapeSaver(tape_dir))


class LateSaver(TapeSaver):
    """A TapeSaver whose calls arrive late, as LangGraph's worker threads can deliver them:
    `late(ns, what, channels, task_path)` gives the seconds a call waits before it starts
    (what: the checkpoint's source, "writes", or "resume" for a plain
    Command(resume=...)'s write; channels: what the writes hold)."""

    def __init__(self, tape_dir, late):
        super().__init__(tape_dir)
        self.late = late

    def put(self, config, checkpoint, metadata, new_versions):
        time.sleep(self.late(config["configurable"].get("checkpoint_ns", ""), metadata.get("source"), (), ""))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config, writes, task_id, task_path=""):
        channels = tuple(ch for ch, _ in writes)
        plain = task_id == "00000000-0000-0000-0000-000000000000" and "__resume__" in channels
        time.sleep(self.late(config["configurable"].get("checkpoint_ns", ""), "resume" if plain else "writes", channels, task_path))
        return super().put_writes(config, writes, task_id, task_path)


def _subgraph_resumed_by_id(tape_dir, saver=None):
    inner = StateGraph(One)
    inner.add_node("ask", lambda st: {"answer": interrupt("inside?")})
    inner.add_edge(START, "ask")
    inner.add_edge("ask", END)
    b = StateGraph(One)
    b.add_node("sub", inner.compile())
    b.add_edge(START, "sub")
    b.add_edge("sub", END)
    g = b.compile(checkpointer=saver or TapeSaver(tape_dir))
    c = {"configurable": {"thread_id": "sub"}}
    g.invoke({"answer": ""}, c)
    [i] = g.get_state(c).interrupts
    assert answers(tape_dir, "lg-sub")[1] == [i.id]
    g.invoke(Command(resume={i.id: "inside yes"}), c)
    assert g.get_state(c).values == {"answer": "inside yes"} and g.get_state(c).interrupts == ()
    got, pending = answers(tape_dir, "lg-sub")
    assert got == {i.id: "inside yes"} and pending == []
    with Tape.open(tape_dir) as t:
        assert sorted(t.session("lg-sub").refs().branches) == ["main"]  # one run, one line


def test_an_interrupt_inside_a_subgraph_resumed_by_its_id_is_answered(tape_dir):
    _subgraph_resumed_by_id(tape_dir)


# LangGraph saves from worker threads, so the caller's checkpoint can arrive after what its
# subgraph wrote in the same step. Seen in CI: the caller's late checkpoint closed the
# subgraph's fresh interrupt as "went on past" it (the root's checkpoint of the step was
# late); and a subgraph that wrote before the caller's line existed left its call on a line
# of its own, so the caller's copy of the call (its own task id) was the one waiting, and
# the subgraph's resume did not find it, and main started again without them (kept as a
# `main.was-` branch) when the root's first checkpoint came (it was late).
@pytest.mark.parametrize("late_root", ["input", "loop"])
def test_a_subgraph_interrupt_is_answered_when_its_callers_checkpoint_arrives_late(tape_dir, late_root):
    _subgraph_resumed_by_id(tape_dir, LateSaver(tape_dir, lambda ns, what, *_: 0.3 if not ns and what == late_root else 0.0))


@pytest.mark.parametrize("seed", range(8))
def test_a_subgraph_interrupt_is_answered_whatever_order_the_saves_arrive_in(tape_dir, seed):
    rng = random.Random(seed)
    _subgraph_resumed_by_id(tape_dir, LateSaver(tape_dir, lambda *_: rng.random() * 0.02))


# Parallel workers whose interrupts sit in subgraphs are left out: LangGraph 1.2 itself
# sometimes does not take a resume by id there (the worker asks again under a new id, and
# the old interrupt is neither answered nor listed by get_state): seen in half the runs.
def test_parallel_interrupts_keep_the_answer_each_was_given(tape_dir):
    g = _workers(tape_dir)
    c = {"configurable": {"thread_id": "p"}}
    g.invoke({"log": []}, c)
    ints = g.get_state(c).interrupts
    assert len(ints) == 2
    g.invoke(Command(resume={ints[0].id: "A"}), c)
    left = [i.id for i in g.get_state(c).interrupts]
    got, pending = answers(tape_dir, "lg-p")
    assert got == {ints[0].id: "A"} and pending == left == [ints[1].id]
    g.invoke(Command(resume="B"), c)
    assert sorted(g.get_state(c).values["log"]) == sorted([f"worker {ints[0].value['worker']} -> A", f"worker {ints[1].value['worker']} -> B"])
    got, pending = answers(tape_dir, "lg-p")
    assert got == {ints[0].id: "A", ints[1].id: "B"} and pending == []


@pytest.mark.parametrize("late", ["resume", "writes"])
def test_a_node_that_asks_twice_gets_each_answer_whichever_write_comes_first(tape_dir, late):
    # A plain Command(resume=v) is written first, then the task's own list of the values its
    # interrupt() calls took, from worker threads. When the list came first, the plain write
    # answered the task's next question too ("B", "B"); and LangGraph writes the list again
    # as each call reads it (["B"], then ["B", "C"] in one payload), whose first answered
    # the second question with "B".
    def two(state):
        return {"answer": f"{interrupt('first?')} {interrupt('second?')}"}

    b = StateGraph(One)
    b.add_node("two", two)
    b.add_edge(START, "two")
    b.add_edge("two", END)
    g = b.compile(checkpointer=LateSaver(tape_dir, lambda ns, what, *_: 0.3 if what == late else 0.0))
    c = {"configurable": {"thread_id": "two"}}
    g.invoke({"answer": ""}, c)
    [first] = g.get_state(c).interrupts
    g.invoke(Command(resume="B"), c)
    [second] = g.get_state(c).interrupts
    assert answers(tape_dir, "lg-two") == ({first.id: "B"}, [second.id])
    g.invoke(Command(resume="C"), c)
    assert g.get_state(c).values == {"answer": "B C"}
    assert answers(tape_dir, "lg-two") == ({first.id: "B", second.id: "C"}, [])


def test_a_subgraph_node_that_asks_twice_gets_each_plain_answer(tape_dir):
    # the plain resume's write is the root's, the task's list the subgraph's: a late root
    # write answered the subgraph's next question with the old value (found by a review)
    inner = StateGraph(One)
    inner.add_node("two", lambda st: {"answer": f"{interrupt('first?')} {interrupt('second?')}"})
    inner.add_edge(START, "two")
    inner.add_edge("two", END)
    b = StateGraph(One)
    b.add_node("sub", inner.compile())
    b.add_edge(START, "sub")
    b.add_edge("sub", END)
    g = b.compile(checkpointer=LateSaver(tape_dir, lambda ns, what, *_: 0.3 if what == "resume" else 0.0))
    c = {"configurable": {"thread_id": "st"}}
    g.invoke({"answer": ""}, c)
    [first] = g.get_state(c).interrupts
    g.invoke(Command(resume="B"), c)
    [second] = g.get_state(c).interrupts
    assert answers(tape_dir, "lg-st") == ({first.id: "B"}, [second.id])
    g.invoke(Command(resume="C"), c)
    assert g.get_state(c).values == {"answer": "B C"}
    assert answers(tape_dir, "lg-st") == ({first.id: "B", second.id: "C"}, [])


def test_a_task_whose_caller_wrote_its_interrupt_first_gets_its_own_answer(tape_dir):
    # A functional API @task asks inside an @entrypoint that asks after it: both write the
    # task's interrupt (one id, their own task ids), and the entrypoint's came first, so the
    # task's own call was never written; its resume found no call of its own, and the
    # entrypoint's later answer closed the task's call (found by a review; 1 run in 30
    # without any delay)
    from langgraph.func import entrypoint, task

    @task
    def ask_in_task(x):
        return interrupt("task question?")

    def late(ns, what, channels, path):
        return 0.3 if what == "writes" and channels == ("__interrupt__",) and path.startswith("~__pregel_push") else 0.0

    @entrypoint(checkpointer=LateSaver(tape_dir, late))
    def main(inp):
        return [ask_in_task(1).result(), interrupt("entrypoint question?")]

    c = {"configurable": {"thread_id": "fn"}}
    main.invoke("go", c)
    [t] = main.get_state(c).interrupts
    main.invoke(Command(resume={t.id: "TASK-ANSWER"}), c)
    [e] = main.get_state(c).interrupts
    assert answers(tape_dir, "lg-fn") == ({t.id: "TASK-ANSWER"}, [e.id])
    main.invoke(Command(resume={e.id: "ENTRY-ANSWER"}), c)
    assert main.get_state(c).values == ["TASK-ANSWER", "ENTRY-ANSWER"]
    assert answers(tape_dir, "lg-fn") == ({t.id: "TASK-ANSWER", e.id: "ENTRY-ANSWER"}, [])


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_resume_that_arrives_after_later_steps_is_recorded_after_the_note(tape_dir, durability):
    # The task's resume write for the interrupted checkpoint can arrive after the steps that
    # follow it are saved (quick steps, a slow thread): the saver has closed the call with
    # its "went on past" note by then, and dropped the answer when it came (found by a
    # review). The answer is now written after the note: the last word, nothing pending.
    class Steps(TypedDict):
        answer: str
        n: int

    b = StateGraph(Steps)
    b.add_node("ask", lambda st: {"answer": interrupt("q?")})
    b.add_node("a1", lambda st: {"n": 1})
    b.add_node("a2", lambda st: {"n": 2})
    b.add_edge(START, "ask")
    b.add_edge("ask", "a1")
    b.add_edge("a1", "a2")
    b.add_edge("a2", END)
    g = b.compile(checkpointer=LateSaver(tape_dir, lambda ns, what, channels, _: 0.3 if what == "writes" and "__resume__" in channels else 0.0))
    c = {"configurable": {"thread_id": "lag"}}
    g.invoke({"answer": "", "n": 0}, c, durability=durability)
    [i] = g.get_state(c).interrupts
    g.invoke(Command(resume={i.id: "yes"}), c, durability=durability)
    assert g.get_state(c).values == {"answer": "yes", "n": 2}
    with Tape.open(tape_dir) as t:
        s = t.session("lg-lag")
        said = [e.payload["output"] for e in s.log(hidden=True) if e.kind == "tool_result"]
        assert said[0] == "yes" and s.status()["pending_tool_calls"] == []  # newest first
    saver = TapeSaver(tape_dir)  # a new process reads it the same way
    g2 = b.compile(checkpointer=saver)
    assert g2.get_state(c).values == {"answer": "yes", "n": 2}
    saver.close()
