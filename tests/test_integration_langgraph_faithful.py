"""Issue 13, item 5: a LangGraph thread on the tape reads as the graph has it.

A linear run is one branch; replaced and removed messages show in `log` / `context` as
the graph's messages channel has them (the tape keeps everything); checkpoint
bookkeeping is hidden; an interrupt waits for input in `status`, its payload JSON.
"""

import json
import os

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from ctape.integrations import langgraph as lg  # noqa: E402
from ctape.integrations.langgraph import TapeSaver  # noqa: E402
from ctape.model.models import HIDDEN  # noqa: E402

from conftest import run_cli  # noqa: E402

WAITING = getattr(lg, "WAITING", "waiting_for_input")  # the name of the call an interrupt makes


def cfg(thread):
    return {"configurable": {"thread_id": thread}}


def echo(state):
    return {"messages": [AIMessage(f"echo {len(state['messages'])}: {state['messages'][-1].content}")]}


def chat(saver):
    g = StateGraph(MessagesState)
    g.add_node("agent", echo)
    g.add_edge(START, "agent")
    return g.compile(checkpointer=saver)


def edit_agent(state):
    """Answers, then edits its history as real graphs do: a message replaced by id
    ("fix ..."), a message removed with RemoveMessage ("forget ...")."""
    msgs = state["messages"]
    text = msgs[-1].content
    if text.startswith("fix "):
        old = next(m for m in msgs if isinstance(m, AIMessage))
        return {"messages": [AIMessage(f"corrected: {text[4:]}", id=old.id), AIMessage("fixed it")]}
    if text.startswith("forget "):
        gone = next(m for m in msgs if m.content == text[7:])
        return {"messages": [RemoveMessage(id=gone.id), AIMessage("forgotten")]}
    if text == "trim":
        return {"messages": [RemoveMessage(id=m.id) for m in msgs[:-2]] + [AIMessage("trimmed")]}
    return {"messages": [AIMessage(f"echo: {text}")]}


def editor(saver):
    g = StateGraph(MessagesState)
    g.add_node("agent", edit_agent)
    g.add_edge(START, "agent")
    return g.compile(checkpointer=saver)


def visible(session):
    """The conversation `log` shows by default: the entries not marked hidden, oldest first."""
    return [e for e in reversed(list(session.log())) if not e.meta.get(HIDDEN)]


def texts(state):
    return [m.content for m in state.values["messages"]]


def context_texts(session):
    return [m.get("content") for m in session.context(format="openai")]


# -- one branch for a linear run -------------------------------------------------------------------


@pytest.mark.parametrize("durability", [None, "sync", "async", "exit"])
def test_a_linear_run_is_one_branch(tape_dir, durability):
    n = 1000 if os.environ.get("CTAPE_SLOW") else 120
    saver = TapeSaver(tape_dir)
    g = chat(saver)
    kw = {"durability": durability} if durability else {}
    for i in range(n):
        g.invoke({"messages": [HumanMessage(f"hi {i}")]}, cfg("lin"), **kw)
    s = saver.tape.session(saver.session_for("lin"))
    assert sorted(s.refs().branches) == ["main"]
    assert len(texts(g.get_state(cfg("lin")))) == 2 * n
    # every checkpoint's pending writes are still found (they are on main's path)
    hist = list(g.get_state_history(cfg("lin")))
    assert len(hist) == (n if durability == "exit" else 3 * n)
    saver.close()
    again = TapeSaver(tape_dir)
    assert [h.config for h in chat(again).get_state_history(cfg("lin"))] == [h.config for h in hist]
    assert [len(h.tasks) for h in chat(again).get_state_history(cfg("lin"))] == [len(h.tasks) for h in hist]
    again.close()


# -- the view follows the state ------------------------------------------------------------------


def test_a_replaced_message_shows_as_the_graph_has_it(saver_dir_pair):
    saver, g = saver_dir_pair
    g.invoke({"messages": [HumanMessage("hello")]}, cfg("ed"))
    g.invoke({"messages": [HumanMessage("more")]}, cfg("ed"))
    g.invoke({"messages": [HumanMessage("fix hello there")]}, cfg("ed"))
    state = texts(g.get_state(cfg("ed")))
    assert state == ["hello", "corrected: hello there", "more", "echo: more", "fix hello there", "fixed it"]
    s = saver.tape.session(saver.session_for("ed"))
    assert [e.payload["content"] for e in visible(s)] == state
    assert context_texts(s) == state
    # the tape keeps the replaced answer, hidden, on main's path
    old = [e for e in s.log() if e.payload.get("content") == "echo: hello"]
    assert old and all(e.meta.get(HIDDEN) for e in old)
    assert sorted(s.refs().branches) == ["main"]


def test_a_removed_message_leaves_the_view_and_history_still_reads(saver_dir_pair):
    saver, g = saver_dir_pair
    for text in ["keep me", "secret", "after"]:
        g.invoke({"messages": [HumanMessage(text)]}, cfg("rm"))
    before = [h.values["messages"] for h in g.get_state_history(cfg("rm"))]
    g.invoke({"messages": [HumanMessage("forget secret")]}, cfg("rm"))
    state = texts(g.get_state(cfg("rm")))
    assert "secret" not in state and state[-1] == "forgotten"
    s = saver.tape.session(saver.session_for("rm"))
    assert [e.payload["content"] for e in visible(s)] == state
    assert context_texts(s) == state
    # get_state_history still gives every earlier state exactly, removed message included
    after = [h.values["messages"] for h in g.get_state_history(cfg("rm"))]
    assert after[-len(before):] == before
    assert sorted(s.refs().branches) == ["main"]
    # and a fresh saver reads the same
    again = TapeSaver(saver.tape.path)
    assert [h.values["messages"] for h in editor(again).get_state_history(cfg("rm"))] == after
    again.close()
    p = run_cli("--dir", saver.tape.path, "fsck", check=True)
    assert p.returncode == 0


def test_trimming_every_turn_keeps_one_branch_and_a_short_view(saver_dir_pair):
    saver, g = saver_dir_pair
    for i in range(12):
        g.invoke({"messages": [HumanMessage(f"q{i}")]}, cfg("trim"))
        g.invoke({"messages": [HumanMessage("trim")]}, cfg("trim"))
    state = texts(g.get_state(cfg("trim")))
    assert state == ["echo: q11", "trim", "trimmed"]
    s = saver.tape.session(saver.session_for("trim"))
    assert [e.payload["content"] for e in visible(s)] == state
    assert sorted(s.refs().branches) == ["main"]
    # the tape holds a bounded number of copies: rewriting copies only what came after the
    # first changed message, so the tape grows linearly with the turns
    n = sum(1 for _ in s.log())
    assert n < 12 * 40


def test_history_reads_after_a_rewrite_and_a_compact(saver_dir_pair):
    """A rewrite copies the parent checkpoint; the new checkpoint must point at the copy
    (on main), not at the line left behind, which compact drops once the ref log expires."""
    saver, g = saver_dir_pair
    for text in ["one", "two", "three", "forget one", "four", "fix it", "five"]:
        g.invoke({"messages": [HumanMessage(text)]}, cfg("rc"))
    want = [(h.config, texts(h), h.next) for h in g.get_state_history(cfg("rc"))]
    assert run_cli("--dir", saver.tape.path, "compact", "--expire", "now", "--grace", "now").returncode == 0
    again = TapeSaver(saver.tape.path)
    assert [(h.config, texts(h), h.next) for h in editor(again).get_state_history(cfg("rc"))] == want
    again.close()


def test_a_fork_from_any_checkpoint_shows_its_state_after_rewrites(tape_dir):
    """Time travel across rewrites: a fork (an invoke from an older checkpoint's config)
    from any checkpoint of a thread whose messages were replaced and removed shows in
    `log` and `context` what the fork's state holds, as InMemorySaver has it running the
    same steps. A rewrite copies the line before its checkpoint with the replaced
    messages hidden, and the older checkpoints point at those copies: before 2026-12-04 a
    fork from one of them showed only the messages it added."""
    from langgraph.checkpoint.memory import InMemorySaver

    steps = ["one", "two", "forget one", "three", "fix it", "four", "trim", "five"]
    saver, oracle = TapeSaver(tape_dir), InMemorySaver()
    g, o = editor(saver), editor(oracle)
    for text in steps:
        g.invoke({"messages": [HumanMessage(text)]}, cfg("tt"))
        o.invoke({"messages": [HumanMessage(text)]}, cfg("tt"))
    ours, theirs = list(g.get_state_history(cfg("tt"))), list(o.get_state_history(cfg("tt")))
    assert [texts(h) for h in ours] == [texts(h) for h in theirs]
    s = saver.tape.session(saver.session_for("tt"))
    for k in range(len(ours) - 1, -1, -3):  # oldest first, every third checkpoint
        g.invoke({"messages": [HumanMessage(f"fork {k}")]}, ours[k].config)
        o.invoke({"messages": [HumanMessage(f"fork {k}")]}, theirs[k].config)
        state = texts(g.get_state(cfg("tt")))
        assert state == texts(o.get_state(cfg("tt")))
        assert [e.payload["content"] for e in visible(s)] == state, f"fork from checkpoint {k}"
        assert context_texts(s) == state
    want = [texts(h) for h in g.get_state_history(cfg("tt"))]
    assert want == [texts(h) for h in o.get_state_history(cfg("tt"))]
    saver.close()
    again = TapeSaver(tape_dir)
    assert [texts(h) for h in editor(again).get_state_history(cfg("tt"))] == want
    again.close()
    assert run_cli("--dir", tape_dir, "fsck").returncode == 0


@pytest.mark.parametrize("fresh", [False, True])
def test_a_step_that_writes_the_messages_unchanged_does_not_freeze_the_view(tape_dir, fresh):
    """Issue 23, item 7: a trim node that returns {"messages": []} (the channel written,
    its value unchanged) left every later RemoveMessage out of `context` for good."""

    def trim(state):
        return {"messages": []}

    g = StateGraph(MessagesState)
    g.add_node("trim", trim)
    g.add_node("agent", edit_agent)
    g.add_edge(START, "trim")
    g.add_edge("trim", "agent")
    saver = TapeSaver(tape_dir)
    app = g.compile(checkpointer=saver)
    for text in ["hello", "forget hello", "more", "fix the first answer"]:
        if fresh:  # a new saver each turn reads the records the previous ones wrote
            saver.close()
            saver = TapeSaver(tape_dir)
            app = g.compile(checkpointer=saver)
        app.invoke({"messages": [HumanMessage(text)]}, cfg("t"))
    state = texts(app.get_state(cfg("t")))
    assert "hello" not in state and "forgotten" in state and "corrected: the first answer" in state
    s = saver.tape.session(saver.session_for("t"))
    assert context_texts(s) == state
    assert [e.payload["content"] for e in visible(s)] == state
    assert sorted(s.refs().branches) == ["main"]
    saver.close()


@pytest.fixture
def saver_dir_pair(tape_dir):
    s = TapeSaver(tape_dir)
    yield s, editor(s)
    s.close()


# -- bookkeeping and interrupts --------------------------------------------------------------------


def test_checkpoint_bookkeeping_is_hidden_and_readable(tape_dir):
    saver = TapeSaver(tape_dir)
    g = chat(saver)
    for t in ["a", "b", "c"]:
        g.invoke({"messages": [HumanMessage(t)]}, cfg("bk"))
    s = saver.tape.session(saver.session_for("bk"))
    shown = visible(s)
    assert [e.kind for e in shown] == ["user", "assistant"] * 3
    for e in s.log():
        if e.meta.get(HIDDEN):
            # log --hidden shows a line of text, not a base64 blob
            assert isinstance(e.payload.get("content"), str) and e.payload["content"]
            assert "checkpoint" in e.payload["content"] or "writes" in e.payload["content"]
    saver.close()


def approver(saver):
    def draft(state):
        return {"messages": [AIMessage(f"draft: {state['messages'][-1].content}")]}

    def approve(state):
        answer = interrupt({"question": "send it?", "draft": state["messages"][-1].content})
        return {"messages": [AIMessage(f"sent ({answer})")]}

    g = StateGraph(MessagesState)
    g.add_node("draft", draft)
    g.add_node("approve", approve)
    g.add_edge(START, "draft")
    g.add_edge("draft", "approve")
    g.add_edge("approve", END)
    return g.compile(checkpointer=saver)


def test_an_interrupt_waits_for_input_in_status_with_a_json_payload(tape_dir):
    saver = TapeSaver(tape_dir)
    g = approver(saver)
    g.invoke({"messages": [HumanMessage("mail bob")]}, cfg("hitl"))
    name = saver.session_for("hitl")
    s = saver.tape.session(name)
    st = s.status()
    assert [c["name"] for c in st["pending_tool_calls"]] == [WAITING]
    call = saver.tape.get(st["pending_tool_calls"][0]["hash"])
    assert call.payload["arguments"] == {"question": "send it?", "draft": "draft: mail bob"}
    assert call.meta.get(HIDDEN)  # not a call the model made: the prompt leaves it out
    assert [m["role"] for m in s.context(format="openai")] == ["user", "assistant"]
    p = run_cli("--dir", tape_dir, "status", "-s", name, check=True)
    assert WAITING in p.stdout.decode()
    saver.close()
    again = TapeSaver(tape_dir)
    out = approver(again).invoke(Command(resume="yes"), cfg("hitl"))
    assert out["messages"][-1].content == "sent (yes)"
    s = again.tape.session(name)
    assert s.status()["pending_tool_calls"] == []
    answer = [e for e in s.log(kinds=["tool_result"]) if e.call_id == call.payload["call_id"]]
    assert answer and answer[0].payload["output"] == "yes"
    assert sorted(s.refs().branches) == ["main"]
    again.close()


def test_new_input_instead_of_a_resume_closes_the_interrupt(tape_dir):
    saver = TapeSaver(tape_dir)
    g = approver(saver)
    g.invoke({"messages": [HumanMessage("mail bob")]}, cfg("ab"))
    g.invoke({"messages": [HumanMessage("never mind, mail alice")]}, cfg("ab"))
    s = saver.tape.session(saver.session_for("ab"))
    assert [c["name"] for c in s.status()["pending_tool_calls"]] == [WAITING]  # the new run waits again
    assert len([e for e in s.log(kinds=["tool_call"]) if e.payload.get("name") == WAITING]) == 2
    saver.close()


@pytest.mark.parametrize("durability", ["exit", "async", "sync"])
def test_an_answered_interrupt_stops_waiting_in_every_durability_mode(tape_dir, durability):
    # durability="exit" saves no resume write (nor new input's checkpoint): the step saved
    # after the interrupt answers it with a note, as LangGraph lists it no more (found by an
    # audit: three rounds left three calls waiting for good). A resume value saved (async,
    # sync) is the answer, as before.
    saver = TapeSaver(tape_dir)
    g = approver(saver)
    c = cfg(f"d-{durability}")
    name = None
    for i in range(3):
        g.invoke({"messages": [HumanMessage(f"mail {i}")]}, c, durability=durability)
        name = name or saver.session_for(f"d-{durability}")
        s = saver.tape.session(name)
        assert [p["name"] for p in s.status()["pending_tool_calls"]] == [WAITING]
        assert len(g.get_state(c).interrupts) == 1
        g.invoke(Command(resume=f"yes {i}"), c, durability=durability)
        assert g.get_state(c).interrupts == ()
        assert s.status()["pending_tool_calls"] == [], f"round {i}"
    answers = [e.payload["output"] for e in s.log(kinds=["tool_result"])][::-1]
    if durability == "exit":
        assert answers == [lg.interrupts.NOT_SAVED] * 3
    else:
        assert answers == ["yes 0", "yes 1", "yes 2"]
    saver.close()


@pytest.mark.parametrize("durability", ["exit", "sync"])
def test_an_interrupt_stays_waiting_across_update_state_and_its_resume_answers_it(tape_dir, durability):
    # update_state on an interrupted thread forks a checkpoint where LangGraph's task still
    # waits (next is the interrupted node): the call stays pending, and the resume answers it
    saver = TapeSaver(tape_dir)
    g = approver(saver)
    c = cfg("upd")
    g.invoke({"messages": [HumanMessage("mail bob")]}, c, durability=durability)
    g.update_state(c, {"messages": [HumanMessage("and cc carol")]})
    s = saver.tape.session(saver.session_for("upd"))
    assert [p["name"] for p in s.status()["pending_tool_calls"]] == [WAITING]
    out = g.invoke(Command(resume="yes"), c, durability=durability)
    assert out["messages"][-1].content == "sent (yes)"
    assert s.status()["pending_tool_calls"] == []
    saver.close()


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_node_that_asks_twice_waits_for_each_answer(tape_dir, durability):
    # the task's first answer and its next question come in one payload of writes: the
    # question was written first, then answered at once with the first answer ("B" for
    # both, status waiting for nothing while LangGraph waited: found by a review)
    def two(state):
        a = interrupt("first?")
        b = interrupt("second?")
        return {"messages": [AIMessage(f"got {a} {b}")]}

    g = StateGraph(MessagesState)
    g.add_node("two", two)
    g.add_edge(START, "two")
    saver = TapeSaver(tape_dir)
    graph = g.compile(checkpointer=saver)
    c = cfg(f"two-{durability}")
    graph.invoke({"messages": [HumanMessage("go")]}, c, durability=durability)
    s = saver.tape.session(saver.session_for(f"two-{durability}"))

    def waiting():
        return [saver.tape.get(p["hash"]).payload["arguments"] for p in s.status()["pending_tool_calls"]]

    assert waiting() == ["first?"]
    graph.invoke(Command(resume="B"), c, durability=durability)
    assert [i.value for i in graph.get_state(c).interrupts] == ["second?"]
    assert waiting() == ["second?"]
    out = graph.invoke(Command(resume="C"), c, durability=durability)
    assert out["messages"][-1].content == "got B C" and waiting() == []
    answers = [e.payload["output"] for e in s.log(kinds=["tool_result"])][::-1]
    if durability != "exit":
        assert answers == ["B", "C"], answers
    saver.close()


def test_log_json_of_a_thread_shows_the_conversation(tape_dir):
    saver = TapeSaver(tape_dir)
    chat(saver).invoke({"messages": [HumanMessage("hi")]}, cfg("lj"))
    name = saver.session_for("lj")
    saver.close()
    p = run_cli("--dir", tape_dir, "log", "-s", name, "--json", check=True)
    lines = [json.loads(x) for x in p.stdout.decode().splitlines()]
    shown = [x for x in lines if not x["meta"].get(HIDDEN)]
    assert [x["kind"] for x in shown] == ["assistant", "user"]


# -- reading history is linear ------------------------------------------------------------------------


def test_get_state_history_reads_each_checkpoint_once(tape_dir):
    """Counted, not timed: entries read and messages decoded to list a thread grow with
    the number of checkpoints, not with checkpoints x messages."""
    saver = TapeSaver(tape_dir)
    g = chat(saver)
    counts = {}
    done = 0
    for n in (40, 80):
        for i in range(done, n):
            g.invoke({"messages": [HumanMessage(f"hi {i}")]}, cfg("read"))
        done = n
        fresh = TapeSaver(tape_dir)
        reads = {"entries": 0, "messages": 0}
        read_entry, dec_message = fresh.tape.read_entry, fresh.codec.dec_message

        def counted_read(h, _f=read_entry):
            reads["entries"] += 1
            return _f(h)

        def counted_dec(d, _f=dec_message):
            reads["messages"] += 1
            return _f(d)

        fresh.tape.read_entry, fresh.codec.dec_message = counted_read, counted_dec
        hist = list(chat(fresh).get_state_history(cfg("read")))
        assert len(hist) == 3 * n
        assert [len(h.values["messages"]) for h in hist[:3]] == [2 * n, 2 * n - 1, 2 * n - 2]
        counts[n] = dict(reads)
        fresh.close()
    saver.close()
    for k in ("entries", "messages"):
        assert counts[80][k] <= 2.3 * counts[40][k], counts


def test_a_new_saver_learns_a_thread_from_the_index_cache(tape_dir, tmp_path, monkeypatch):
    """Issue 25: the first get_state in a new process read every entry of the thread back
    to the root (6,000 entries for 1,000 steps). What the saver needs of each entry is kept
    in the index cache (views, by entry hash), so a new saver reads a few entries; with
    no cache (a new machine) it reads them all once, and writes the rows for the next."""
    saver = TapeSaver(tape_dir)
    g = chat(saver)
    for i in range(30):
        g.invoke({"messages": [HumanMessage(f"hi {i}")]}, cfg("cold"))
    g.invoke({"messages": [HumanMessage("x" * 5000)]}, cfg("cold"))  # an input too big to keep in the cache
    want = g.get_state(cfg("cold"))
    hist_want = [(h.config, h.values, h.next, h.metadata) for h in g.get_state_history(cfg("cold"))]

    def first_read(saver_dir):
        fresh = TapeSaver(saver_dir)
        reads = [0]
        real = fresh.tape.read_entry

        def counted(h, _f=real):
            reads[0] += 1
            return _f(h)

        fresh.tape.read_entry = counted
        got = chat(fresh).get_state(cfg("cold"))
        n = reads[0]
        hist = [(h.config, h.values, h.next, h.metadata) for h in chat(fresh).get_state_history(cfg("cold"))]
        fresh.close()
        return got, n, hist

    got, reads, hist = first_read(tape_dir)
    assert got.values == want.values and got.config == want.config and got.next == want.next
    assert hist == hist_want
    assert reads <= 6, reads  # the checkpoint's own record, its writes, a value kept on the tape only
    # another writer's steps: a new saver reads their rows, and the entries of none
    other = TapeSaver(tape_dir)
    chat(other).invoke({"messages": [HumanMessage("from another writer")]}, cfg("cold"))
    other.close()
    got, reads, _ = first_read(tape_dir)
    assert got.values["messages"][-2].content == "from another writer" and reads <= 6
    # no cache at all: every entry is read once, then kept
    monkeypatch.setenv("CTAPE_CACHE_DIR", str(tmp_path / "fresh-cache"))
    got, reads, _ = first_read(tape_dir)
    assert got.values["messages"][-2].content == "from another writer" and reads > 100
    got, reads, _ = first_read(tape_dir)
    assert len(got.values["messages"]) == 64 and reads <= 6
    saver.close()


def test_a_new_saver_reads_a_long_thread_in_chunks(tape_dir):
    """Issue 25: the index cache keeps a thread's briefs 64 entries a row (by depth, so every
    path agrees), so a new saver reads a long thread in a few rows, not one row an entry."""
    saver = TapeSaver(tape_dir)
    g = chat(saver)
    for i in range(60):
        g.invoke({"messages": [HumanMessage(f"hi {i}")]}, cfg("long"))
    want = g.get_state(cfg("long")).values
    saver.close()
    fresh = TapeSaver(tape_dir)
    index = fresh.tape.store.index
    got_rows = {lg.VIEW: 0, lg.CHUNKS: 0, lg.OLD_CHUNKS: 0}
    real = index.view_path

    def counted(name, head, limit, _f=real):
        rows = _f(name, head, limit)
        got_rows[name] += len(rows)
        return rows

    index.view_path = counted
    assert chat(fresh).get_state(cfg("long")).values == want
    entries = sum(1 for _ in fresh.tape.session(fresh.session_for("long")).log())
    assert entries > 6 * lg.CHUNK
    assert got_rows[lg.VIEW] <= lg.CHUNK  # one query for the newest entries, as far as the last whole chunk
    assert got_rows[lg.CHUNKS] == entries // lg.CHUNK and got_rows[lg.OLD_CHUNKS] == 0
    fresh.close()


def _as_old_chunk_rows(index, keep_newest: int = 0):
    """Turn the index cache's CHUNKS rows into rows of the first format (OLD_CHUNKS: a line
    per entry, its hash then its brief's JSON), as an earlier version wrote them; the
    newest keep_newest rows stay as they are."""
    rows = [(h, p, index._unpacked(b)) for h, p, b in index.db.execute("SELECT hash, parent, body FROM views WHERE name=?", (lg.CHUNKS,))]
    rows.sort(key=lambda r: json.loads(r[2])["q"])
    old = rows[: len(rows) - keep_newest]
    lines = []
    for h, parent, body in old:
        d = json.loads(body)
        text = "\n".join(x + json.dumps({"q": d["q"] + i, "lg": d["lg"][i], "p": d["p"][i]}, ensure_ascii=False, separators=(",", ":")) for i, x in enumerate(d["h"]))
        lines.append((h, parent, text))
        index.db.execute("DELETE FROM views WHERE name=? AND hash=?", (lg.CHUNKS, h))
    index.put_views(lg.OLD_CHUNKS, lines)
    return len(old)


@pytest.mark.parametrize("keep_newest", [0, 2])
def test_chunk_rows_of_the_first_format_are_still_read(tape_dir, keep_newest):
    """Issue 25: chunk rows are one JSON object now (no split and join of every line);
    rows an earlier version wrote, a line per entry, are still read: alone, or older
    than rows of the new format on the same path (a thread an upgraded saver went on with)."""
    saver = TapeSaver(tape_dir)
    g = chat(saver)
    for i in range(60):
        g.invoke({"messages": [HumanMessage(f"hi {i}")]}, cfg("old-rows"))
    want = g.get_state(cfg("old-rows"))
    hist_want = [(h.config, h.values, h.next, h.metadata) for h in g.get_state_history(cfg("old-rows"))]
    saver.close()
    probe = TapeSaver(tape_dir)
    converted = _as_old_chunk_rows(probe.tape.store.index, keep_newest)
    probe.close()
    assert converted >= 4
    fresh = TapeSaver(tape_dir)
    index = fresh.tape.store.index
    got_rows = {lg.VIEW: 0, lg.CHUNKS: 0, lg.OLD_CHUNKS: 0}
    real_view_path, real_read = index.view_path, fresh.tape.read_entry
    reads = [0]

    def counted(name, head, limit, _f=real_view_path):
        rows = _f(name, head, limit)
        got_rows[name] += len(rows)
        return rows

    def counted_read(h, _f=real_read):
        reads[0] += 1
        return _f(h)

    index.view_path, fresh.tape.read_entry = counted, counted_read
    got = chat(fresh).get_state(cfg("old-rows"))
    assert got.values == want.values and got.config == want.config and got.next == want.next
    assert reads[0] <= 6
    assert got_rows[lg.OLD_CHUNKS] == converted and got_rows[lg.CHUNKS] == keep_newest
    index.view_path, fresh.tape.read_entry = real_view_path, real_read
    assert [(h.config, h.values, h.next, h.metadata) for h in chat(fresh).get_state_history(cfg("old-rows"))] == hist_want
    chat(fresh).invoke({"messages": [HumanMessage("after the upgrade")]}, cfg("old-rows"))
    assert [m.content for m in chat(fresh).get_state(cfg("old-rows")).values["messages"][-2:]] == ["after the upgrade", "echo 121: after the upgrade"]
    fresh.close()


def test_integers_beyond_64_bits_read_back_exactly_in_a_new_process(tape_dir):
    """Issue 25: CHUNKS rows are parsed by orjson when it is there, which reads an integer
    beyond 64 bits as a float: a chunk that holds one gets no CHUNKS row (its entries are
    read from their own rows), so a new process reads the integers exactly."""
    from typing import Annotated, TypedDict

    from langgraph.graph.message import add_messages

    class State(TypedDict):
        messages: Annotated[list, add_messages]
        n: int
        small: int

    def count(state):
        k = len(state["messages"])
        return {"messages": [AIMessage(f"n {k}")], "n": 10**30 + k, "small": k}

    def graph(saver):
        g = StateGraph(State)
        g.add_node("count", count)
        g.add_edge(START, "count")
        return g.compile(checkpointer=saver)

    saver = TapeSaver(tape_dir)
    for i in range(40):
        graph(saver).invoke({"messages": [HumanMessage(f"hi {i}")]}, cfg("big-ints"))
    want = graph(saver).get_state(cfg("big-ints")).values
    saver.close()
    assert want["n"] == 10**30 + 79 and type(want["n"]) is int
    for _ in range(2):  # the first new process finds no CHUNKS rows for those chunks, nor does the next
        fresh = TapeSaver(tape_dir)
        got = graph(fresh).get_state(cfg("big-ints")).values
        assert got == want and type(got["n"]) is int
        ns = [h.values.get("n") for h in graph(fresh).get_state_history(cfg("big-ints"))]
        assert all(type(n) is int for n in ns if n is not None) and ns[0] == 10**30 + 79
        fresh.close()


def test_the_fast_json_reader_falls_back_to_json():
    """What orjson refuses, json reads: the same values either way."""
    assert lg._loads('{"a":[1,2.5,"x",null,true]}') == {"a": [1, 2.5, "x", None, True]}
    v = lg._loads("[NaN]")[0]
    assert v != v
    assert lg._loads('["\\ud800"]') == ["\ud800"]
    assert lg._LONG_INT.search(json.dumps({"n": 10**30}, separators=(",", ":")))
    assert lg._LONG_INT.search(json.dumps([-(2**63) - 1], separators=(",", ":")))
    assert not lg._LONG_INT.search(json.dumps({"n": 10**17, "v": "00000000000000000000000000000851.0.5"}, separators=(",", ":")))
