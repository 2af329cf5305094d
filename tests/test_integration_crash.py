"""kill -9 of real processes writing through the framework integrations (docs/integrations.md,
"Durability": every framework call is fsync'd before it returns; a crash loses at most the
call that had not returned; the tape opens and `ctape fsck` is clean afterwards).

- LangGraph (`TapeSaver`): a child process invokes a real graph (parallel nodes, a message
  list, a list channel, a big string) on several threads from two Python threads, in every
  `durability` mode, and prints an acknowledgement after each invoke returns. It is killed
  at a random instant; a fresh `TapeSaver` (a fresh `Tape`) then finds every acknowledged
  checkpoint with the values the child saw, one consistent line through `get_state`,
  `get_state_history` and `list`, resumes the killed run and invokes again; `ctape fsck`
  exits 0. The next round is killed on top of that state.
- LangGraph, a kill inside a superstep that has pending writes: one node of the step has
  finished (its writes saved), the other is killed. The resumed run must not lose or
  repeat the finished node: the same as LangGraph's own `SqliteSaver` in the same scenario.
- OpenAI Agents SDK (`TapeSession`): a child adds batches of items of the SDK's shapes
  (messages, function calls and their outputs, reasoning, other item types) and pops
  items on two sessions, acknowledging each call after it returns, and is killed. A fresh
  process finds every acknowledged item in order, the call in flight all there or not at
  all (no partial batch), and pop_item / clear_session / get_items(limit) still work.

Short here (the suite must stay short); `CTAPE_SLOW=1` runs the long soak (many rounds).
`CTAPE_CRASH_SEED` repeats a run, `CTAPE_CRASH_ROUNDS` sets the number of rounds.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
import types
from importlib.util import find_spec

import pytest

SLOW = os.environ.get("CTAPE_SLOW") == "1"

needs_langgraph = pytest.mark.skipif(find_spec("langgraph") is None, reason="needs langgraph")
# `import agents` takes seconds: TapeSession does not need it, and the children do not import it
needs_agents = pytest.mark.skipif(find_spec("agents") is None, reason="needs the OpenAI Agents SDK")


def _seed():
    seed = int(os.environ.get("CTAPE_CRASH_SEED") or random.randrange(1 << 30))
    print(f"CTAPE_CRASH_SEED={seed}")
    return seed


def _rounds(default, slow):
    return int(os.environ.get("CTAPE_CRASH_ROUNDS") or (slow if SLOW else default))


def fsck(tape_dir, why):
    """`python -m ctape --dir DIR fsck` must exit 0 (a torn tail is only a warning)."""
    p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "fsck"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr, f"{why}: fsck exited {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def start(code, args, out_path, env=None):
    """A child running `code`, its stdout to a file (what it printed before the kill stays
    there), returned once it printed its first line (imports done, the tape open), so the
    kill's delay counts from its first write, not from an import that a loaded machine
    makes slow."""
    out = open(out_path, "wb")
    err = open(str(out_path) + ".err", "wb")
    p = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=out, stderr=err,
                         start_new_session=True, env={**os.environ, **(env or {})})
    out.close()
    err.close()
    deadline = time.monotonic() + 120
    while b"\n" not in _read(out_path):
        assert p.poll() is None, f"the child died before it was ready: {_read(str(out_path) + '.err')[-3000:]}"
        assert time.monotonic() < deadline, "the child was never ready"
        time.sleep(0.02)
    return p


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def kill_after(p, delay, out_path):
    """SIGKILL the child `delay` seconds from now. It must still be running and have
    printed no error (a child, or one of its threads, that died of its own error is a
    failure, not a crash)."""
    time.sleep(delay)
    assert p.poll() is None, f"the child exited by itself ({p.returncode}): {_read(str(out_path) + '.err')[-3000:]}"
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL
    err = _read(str(out_path) + ".err").decode(errors="replace")
    assert "Traceback" not in err, err[-3000:]


def printed(out_path):
    """The JSON lines the child printed completely (a line cut by the kill was not printed)."""
    return [json.loads(line) for line in _read(out_path).decode().split("\n")[:-1]]


# -- LangGraph --------------------------------------------------------------------------

# The graph, the same in the children and here: think, then tool_a and tool_b in one
# superstep (two tasks: writes arrive from worker threads, one may be saved while the
# other runs), then reply. `blob` is a ~6 KB string, the same in two turns of three
# (stored once: dedupe) and a longer one of its own in the third.
GRAPH = r'''
import hashlib, operator
from typing import Annotated, TypedDict
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

BIG = "".join(f"line {i} of a file every tool call reads\n" for i in range(150))
DURABILITY = ("sync", "async", "exit")


class State(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    count: int
    log: Annotated[list, operator.add]
    blob: str


def think(state):
    n = state.get("count", 0) + 1
    return {"count": n, "log": [f"think {n}"]}


def tool_a(state):
    n = state["count"]
    return {"log": [f"a {n}"], "blob": BIG if n % 3 else BIG + f"and a line of its own, {n}\n" * 40}


def tool_b(state):
    return {"log": [f"b {state['count']}"]}


def reply(state):
    return {"messages": [AIMessage(f"echo {state['messages'][-1].content} #{state['count']}")]}


def build(saver):
    g = StateGraph(State)
    for f in (think, tool_a, tool_b, reply):
        g.add_node(f.__name__, f)
    g.add_edge(START, "think")
    g.add_edge("think", "tool_a")
    g.add_edge("think", "tool_b")
    g.add_edge(["tool_a", "tool_b"], "reply")
    g.add_edge("reply", END)
    return g.compile(checkpointer=saver)


def summary(values):
    """What an acknowledgement records of a state (and what must read back the same)."""
    msgs = values.get("messages", [])
    return {"count": values.get("count", 0), "msgs": len(msgs), "log": len(values.get("log", [])),
            "last": msgs[-1].content if msgs else None,
            "blob": hashlib.sha1(values.get("blob", "").encode()).hexdigest()[:12]}
'''

# A child: two Python threads share one TapeSaver, each invoking on its own LangGraph
# threads (argv[4]: a JSON list of thread-id lists), a random durability mode each time.
# "start" before an invoke, "ack" (with what get_state then reads) after it returned.
LG_CHILD = GRAPH + r'''
import json, random, sys, threading
from ctape.integrations.langgraph import TapeSaver

tape_dir, tag, seed, groups = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
saver = TapeSaver(tape_dir)
graph = build(saver)
out = threading.Lock()


def say(**kw):
    with out:
        sys.stdout.write(json.dumps(kw) + "\n")
        sys.stdout.flush()


def worker(w, tids):
    rnd = random.Random(seed * 10 + w)
    i = 0
    while True:
        tid, human = rnd.choice(tids), f"{tag}-w{w}-{i}"
        cfg = {"configurable": {"thread_id": tid}}
        say(start=human, tid=tid)
        graph.invoke({"messages": [HumanMessage(human)]}, cfg, durability=rnd.choice(DURABILITY))
        st = graph.get_state(cfg)
        say(ack=human, tid=tid, cid=st.config["configurable"]["checkpoint_id"], **summary(st.values))
        i += 1


workers = [threading.Thread(target=worker, args=(w, tids), daemon=True) for w, tids in enumerate(groups)]
say(ready=True)
for t in workers:
    t.start()
for t in workers:
    t.join()
'''


def graph_module():
    mod = types.ModuleType("crash_graph")
    exec(GRAPH, mod.__dict__)
    return mod


def _cid(config):
    return config["configurable"].get("checkpoint_id") if config else None


def _is_subsequence(short, long):
    it = iter(long)
    return all(x in it for x in short)


def check_thread(g, graph, saver, tid, acks, started, why):
    """One LangGraph thread read by a fresh saver: returns its newest checkpoint's snapshot
    (as saved: by id).

    - get_state, get_state_history and saver.list agree: the same checkpoints, newest
      first, no duplicate, get_state is the newest, and each one's parent is the next
      older one (one line: every run went on from the latest checkpoint); list's `limit`
      and `before` take the checkpoints they name.
    - Every acknowledged invoke's checkpoint is there with the values the child read
      right after the invoke returned (no acknowledged checkpoint lost or changed), and a
      few of them read the same by id (get_tuple).
    - The latest state holds every acknowledged turn in order, each human message answered
      right after it, counts that only grow, a log of no duplicate writes with every
      acknowledged step's three writes, and no message the children did not send.
    """
    cfg = {"configurable": {"thread_id": tid}}
    st = graph.get_state(cfg)
    history = list(graph.get_state_history(cfg))
    listed = list(saver.list(cfg))
    ids = [_cid(h.config) for h in history]
    if not ids:  # a thread no invoke reached (or only one killed before its first checkpoint)
        assert not acks and not listed and st.values == {}, f"{why}: {tid} lost its checkpoints"
        return None
    assert ids == [_cid(t.config) for t in listed], f"{why}: get_state_history and list disagree on {tid}"
    mid = len(ids) // 2
    assert [_cid(t.config) for t in saver.list(cfg, limit=3)] == ids[:3]
    assert [_cid(t.config) for t in saver.list(cfg, before=history[mid].config)] == ids[mid + 1:]
    assert ids == sorted(set(ids), reverse=True), f"{why}: {tid}'s history is not newest first without duplicates"
    # get_state without an id is LangGraph's live view (the finished tasks' writes applied,
    # `next` what is still to run); by id, and in the history, the checkpoint as saved
    assert ids[0] == _cid(st.config), f"{why}: get_state is not the newest checkpoint of {tid}"
    newest = graph.get_state({"configurable": {"thread_id": tid, "checkpoint_id": ids[0]}})
    assert newest.values == history[0].values and newest.next == history[0].next and set(st.next) <= set(newest.next)
    assert [_cid(h.parent_config) for h in history] == ids[1:] + [None], f"{why}: {tid}'s checkpoints are not one line"
    by_id = {_cid(h.config): h for h in history}
    for a in acks:
        assert a["cid"] in by_id, f"{why}: acknowledged checkpoint {a['cid']} ({a['ack']}) of {tid} is lost"
        want = {k: a[k] for k in ("count", "msgs", "log", "last", "blob")}
        assert g.summary(by_id[a["cid"]].values) == want, f"{why}: acknowledged checkpoint {a['cid']} of {tid} reads back different"
    for a in acks[-3:]:
        at = graph.get_state({"configurable": {"thread_id": tid, "checkpoint_id": a["cid"]}})
        assert _cid(at.config) == a["cid"] and at.values == by_id[a["cid"]].values

    v = st.values
    msgs = v["messages"]
    humans = [m.content for m in msgs if m.type == "human"]
    assert set(humans) <= started, f"{why}: {tid} holds messages nobody sent: {set(humans) - started}"
    assert len(set(humans)) == len(humans), f"{why}: a human message of {tid} is there twice"
    assert _is_subsequence([a["ack"] for a in acks], humans), f"{why}: {tid} lost or reordered acknowledged turns"
    replies = []
    for i, m in enumerate(msgs):
        if m.type == "ai":
            assert i > 0 and msgs[i - 1].type == "human" and m.content.startswith(f"echo {msgs[i - 1].content} #"), (why, tid, i)
            replies.append(int(m.content.rsplit("#", 1)[1]))
    assert replies == sorted(set(replies)), f"{why}: {tid}'s steps went back: {replies}"
    index = {m.content: i for i, m in enumerate(msgs)}
    for a in acks:
        i = index[a["ack"]]
        assert i + 1 < len(msgs) and msgs[i + 1].type == "ai", f"{why}: acknowledged turn {a['ack']} lost its answer"
    log = v["log"]
    assert len(set(log)) == len(log), f"{why}: a write of {tid} was applied twice: {[x for x in log if log.count(x) > 1][:5]}"
    for a in acks:
        assert {f"think {a['count']}", f"a {a['count']}", f"b {a['count']}"} <= set(log), (why, tid, a)
        assert v["count"] >= a["count"] and ids[0] >= a["cid"]
    return newest


def resume_thread(g, graph, tid, newest, acks, started, tag):
    """(c): a run killed midway (its newest checkpoint has tasks to run) goes on from there:
    invoke(None) runs what is left, with the writes already saved; then a new turn goes
    on after it. The new turn is acknowledged like the child's (the next rounds check it)."""
    from langchain_core.messages import HumanMessage

    cfg = {"configurable": {"thread_id": tid}}
    st = graph.get_state(cfg)
    midway = newest is not None and bool(newest.next)
    if midway:
        graph.invoke(None, cfg)
        done = graph.get_state(cfg)
        assert done.next == () and done.values.get("count", 0) >= st.values.get("count", 0), f"{tag}: {tid} did not finish its run"
        msgs = done.values["messages"]
        assert msgs[-1].type == "ai" and msgs[-1].content.startswith(f"echo {msgs[-2].content} #"), (tid, st.next)
        st = done
    human = f"{tag}-{tid}"
    started.add(human)
    graph.invoke({"messages": [HumanMessage(human)]}, cfg)
    after = graph.get_state(cfg)
    v, old = after.values, {"count": 0, "messages": [], "log": [], **st.values}
    assert after.next == () and v.get("count") == old["count"] + 1, f"{tag}: {tid} did not go on from its latest checkpoint"
    assert [m.content for m in v["messages"][-2:]] == [human, f"echo {human} #{v['count']}"]
    assert v["messages"][:-2] == old["messages"] and v["log"][: len(old["log"])] == old["log"]
    assert _cid(after.config) > (_cid(st.config) or "")
    acks.append({"ack": human, "tid": tid, "cid": _cid(after.config), **g.summary(v)})
    return midway


def check_langgraph_tape(tape_dir, tids, acks, started, why, resume=(), resume_tag=None):
    """check_thread for each thread, then resume_thread for those in `resume`; returns
    how many of those had a run killed midway."""
    from ctape.integrations.langgraph import TapeSaver

    g = graph_module()
    saver = TapeSaver(tape_dir)  # a fresh Tape: nothing of what this process read before
    midway = 0
    try:
        graph = g.build(saver)
        for tid in tids:
            newest = check_thread(g, graph, saver, tid, acks.setdefault(tid, []), started, why)
            if tid in resume:
                midway += resume_thread(g, graph, tid, newest, acks[tid], started, resume_tag)
    finally:
        saver.close()
    return midway


def langgraph_kill_loop(tape_dir, tmp_path, rounds, seed, monkeypatch):
    """Each round: a child on a few threads (some shared with the rounds before), killed at
    a random instant; fsck on the tape as the kill left it; then every thread it touched
    is checked by a fresh saver, and half of them resumed (the next round is killed on
    top of that: threads resumed and threads as a kill left them). At
    the end, fsck, and every thread checked again by a saver with an empty index cache (a
    new machine: everything read from the tape, not from the rows the killed processes
    and the checks left in the cache)."""
    rnd = random.Random(seed)
    acks: dict[str, list] = {}
    started: set[str] = set()
    total = midway = 0
    for r in range(rounds):
        # threads come and go (the long run keeps each one to a size that reads fast)
        pool = [f"t{(r // 8) * 3 + k}" for k in range(4)]
        groups = [pool[:2], pool[2:]] if rnd.random() < 0.7 else [pool]
        out = tmp_path / f"lg{r}.out"
        p = start(LG_CHILD, [tape_dir, f"r{r}", rnd.randrange(1 << 30), json.dumps(groups)], out)
        kill_after(p, rnd.uniform(0.05, 3.0 if SLOW else 1.2), out)
        lines = printed(out)
        assert lines[0] == {"ready": True}
        why = f"round {r} (CTAPE_CRASH_SEED={seed})"
        for line in lines[1:]:
            if "start" in line:
                started.add(line["start"])
            else:
                acks.setdefault(line["tid"], []).append(line)
                total += 1
        fsck(tape_dir, why)  # the tape as the kill left it (a damage is not hidden by a read or a write after it)
        touched = sorted(set(pool) | {line["tid"] for line in lines[1:]})
        # half of them resumed here; the others are left as the kill left them, for the
        # next child's new input (LangGraph drops a killed run's tasks then)
        resume = {t for t in touched if rnd.random() < 0.5}
        midway += check_langgraph_tape(tape_dir, touched, acks, started, why, resume, f"check{r}")
    assert total >= rounds, f"only {total} invokes acknowledged in {rounds} rounds: the kills came too early to test anything"
    fsck(tape_dir, "at the end")
    monkeypatch.setenv("CTAPE_CACHE_DIR", str(tmp_path / "empty-cache"))
    check_langgraph_tape(tape_dir, sorted(acks), acks, started, "at the end, without the index cache")
    print(f"{rounds} rounds: {total} invokes acknowledged, {midway} runs killed midway resumed here, {len(acks)} threads,"
          f" {sum(len(a) for a in acks.values())} acknowledged turns checked at the end")


@needs_langgraph
def test_langgraph_kill_9_loop(tape_dir, tmp_path, monkeypatch):
    """3 rounds here; 60 with CTAPE_SLOW=1 (below)."""
    langgraph_kill_loop(tape_dir, tmp_path, _rounds(3, 3), _seed(), monkeypatch)


@needs_langgraph
@pytest.mark.skipif(not SLOW, reason="long kill -9 loop: set CTAPE_SLOW=1")
def test_langgraph_kill_9_loop_long(tape_dir, tmp_path, monkeypatch):
    langgraph_kill_loop(tape_dir, tmp_path, _rounds(60, 60), _seed(), monkeypatch)


# -- LangGraph: a kill in a superstep with pending writes ---------------------------------

# prep, then fast and slow in one superstep, then join. Every node run is noted in a file
# (RUNS: across processes). `slow`, in a process started with HANG set, first waits until
# fast's write is saved (the saver's own pending writes show it), then says so (a flag
# file) and hangs there until it is killed.
PENDING = r'''
import json, operator, os, sys, time
from typing import Annotated, TypedDict
from langgraph.graph import END, START, StateGraph


class PState(TypedDict, total=False):
    count: int
    log: Annotated[list, operator.add]


def note(name):
    with open(os.environ["RUNS"], "a") as f:
        f.write(name + "\n")


def prep(state):
    note("prep")
    n = state.get("count", 0) + 1
    return {"count": n, "log": [f"prep {n}"]}


def fast(state):
    note("fast")
    return {"log": [f"fast {state['count']}"]}


def slow(state):
    note("slow")
    if os.environ.get("HANG"):
        while not any(ch == "log" and v == [f"fast {state['count']}"] for _, ch, v in SAVER.get_tuple(CFG).pending_writes):
            time.sleep(0.01)
        open(os.environ["HANG"], "w").close()
        time.sleep(600)
    return {"log": [f"slow {state['count']}"]}


def join(state):
    note("join")
    return {"log": [f"join {state['count']}"]}


def build(saver):
    g = StateGraph(PState)
    for f in (prep, fast, slow, join):
        g.add_node(f.__name__, f)
    g.add_edge(START, "prep")
    g.add_edge("prep", "fast")
    g.add_edge("prep", "slow")
    g.add_edge(["fast", "slow"], "join")
    g.add_edge("join", END)
    return g.compile(checkpointer=saver)


def open_saver(kind, where):
    if kind == "tape":
        from ctape.integrations.langgraph import TapeSaver
        return TapeSaver(where)
    import sqlite3
    from langgraph.checkpoint.sqlite import SqliteSaver
    return SqliteSaver(sqlite3.connect(where, check_same_thread=False))


def close_saver(saver):
    if hasattr(saver, "tape"):
        saver.close()
    else:
        saver.conn.close()


CFG = {"configurable": {"thread_id": "job"}}
'''

# argv: saver kind, where, durability, "new" (a new input) or "resume" (invoke(None))
PENDING_CHILD = PENDING + r'''
SAVER = open_saver(sys.argv[1], sys.argv[2])
graph = build(SAVER)
print(json.dumps({"ready": True}), flush=True)
graph.invoke({"count": 0} if sys.argv[4] == "new" else None, CFG, durability=sys.argv[3])
print(json.dumps({"finished": True}), flush=True)
'''


def killed_in_slow(kind, where, durability, mode, tmp_path, name):
    """A child that runs the job (new input, or resuming it), killed once `slow` hangs
    with fast's write saved."""
    flag = tmp_path / f"{name}.flag"
    out = tmp_path / f"{name}.out"
    p = start(PENDING_CHILD, [kind, where, durability, mode], out, env={"RUNS": str(tmp_path / f"{kind}.runs"), "HANG": str(flag)})
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert p.poll() is None, _read(str(out) + ".err")[-3000:]
        assert time.monotonic() < deadline, f"{kind}: slow never ran with fast's write saved"
        time.sleep(0.01)
    kill_after(p, 0, out)
    assert printed(out) == [{"ready": True}]


def pending_scenario(kind, where, durability, kills, tmp_path):
    """The job killed `kills` times in `slow` (the first run, then each resume), then
    resumed here and a second job run after it. What a fresh saver reads at each point,
    with checkpoint and task ids left out (they differ between runs)."""
    mod = types.ModuleType("pending_graph")
    exec(PENDING, mod.__dict__)
    os.environ["RUNS"] = str(tmp_path / f"{kind}.runs")
    seen = []

    def look(saver, graph, when):
        st = graph.get_state(mod.CFG)
        tup = saver.get_tuple(mod.CFG)
        names = {t.id: t.name for t in st.tasks}
        writes = sorted((names.get(task, "?"), ch, json.dumps(v, default=repr)) for task, ch, v in tup.pending_writes)
        history = [(h.metadata.get("source"), h.metadata.get("step"), h.next, h.values) for h in graph.get_state_history(mod.CFG)]
        seen.append({"when": when, "values": st.values, "next": st.next, "tasks": sorted((t.name, t.error is not None) for t in st.tasks),
                     "pending writes": writes, "history": history})

    for k in range(kills):
        killed_in_slow(kind, where, durability, "new" if k == 0 else "resume", tmp_path, f"{kind}{k}")
        saver = mod.open_saver(kind, where)
        try:
            look(saver, mod.build(saver), f"after kill {k + 1}")
        finally:
            mod.close_saver(saver)
    saver = mod.open_saver(kind, where)
    try:
        graph = mod.build(saver)
        # durability "sync" here: with "async", SqliteSaver's history of a second job shows
        # `join` among the next tasks of its first steps in some runs and not in others
        # (without any crash: 21 runs in 30 here, two plain invokes in a row); TapeSaver's
        # history is the same every time, the one SqliteSaver gives with "sync"
        graph.invoke(None, mod.CFG, durability="sync")
        look(saver, graph, "resumed")
        graph.invoke({"count": 1}, mod.CFG, durability="sync")  # the next job goes on from the resumed one's end
        look(saver, graph, "next job")
    finally:
        mod.close_saver(saver)
        del os.environ["RUNS"]
    runs = _read(tmp_path / f"{kind}.runs").decode().split()
    return seen, {n: runs.count(n) for n in ("prep", "fast", "slow", "join")}


def pending_writes_case(tape_dir, tmp_path, durability, kills):
    """Killed (kills times) while `slow` runs and `fast`, of the same superstep, is done
    and its write saved. Then resumed in a fresh process:
    - the finished write is kept: `fast` ran once, only `slow` ran again (once per
      process), and the log holds each node's write once, in LangGraph's order;
    - what get_state, its tasks, the pending writes and get_state_history show after each
      kill, after the resume and after one more job is the same as on LangGraph's own
      SqliteSaver in the same scenario (InMemorySaver cannot survive a process);
    - `ctape fsck` exits 0."""
    tape_seen, tape_runs = pending_scenario("tape", str(tape_dir), durability, kills, tmp_path)
    fsck(tape_dir, f"pending writes, {durability}")
    assert tape_runs == {"prep": 2, "fast": 2, "slow": kills + 2, "join": 2}, tape_runs
    resumed = next(s for s in tape_seen if s["when"] == "resumed")
    assert resumed["values"] == {"count": 1, "log": ["prep 1", "fast 1", "slow 1", "join 1"]} and resumed["next"] == ()
    # after each kill: fast's writes saved (its log line, its edge to join), none of slow's
    for seen in tape_seen[:kills]:
        assert [w for w in seen["pending writes"] if w[1] == "log"] == [("fast", "log", '["fast 1"]')], seen
        assert {w[0] for w in seen["pending writes"]} == {"fast"} and seen["next"] == ("slow",), seen
    if find_spec("langgraph.checkpoint.sqlite") is None:
        return
    sql_seen, sql_runs = pending_scenario("sqlite", str(tmp_path / "lg.sqlite"), durability, kills, tmp_path)
    assert tape_runs == sql_runs
    for t, s in zip(tape_seen, sql_seen, strict=True):
        for key in t:
            assert t[key] == s[key], f"{t['when']}: {key} differs from SqliteSaver's:\n tape:   {t[key]}\n sqlite: {s[key]}"


@needs_langgraph
@pytest.mark.parametrize("durability, kills", [("sync", 2), ("async", 1)])
def test_langgraph_kill_9_with_pending_writes(tape_dir, tmp_path, durability, kills):
    """Killed twice (sync) or once (async) here, 6 times with CTAPE_SLOW=1."""
    pending_writes_case(tape_dir, tmp_path, durability, kills=_rounds(kills, 6))


# -- OpenAI Agents SDK ----------------------------------------------------------------------

# The items: 1-4 a batch, of the SDK's input item shapes (checked against its own type
# below), some with a large tool output, the same one in most batches (stored once).
AG_ITEMS = r'''
import json

FILE = "".join(f"{i:5d}: a line of the file the tool read\n" for i in range(400))


def item(rnd, mark):
    kind = rnd.randrange(7)
    if kind == 0:
        return {"role": "user", "content": f"question {mark} \u00e9\u00e8 \U0001f600"}
    if kind == 1:
        return {"role": "user", "content": [{"type": "input_text", "text": f"look at {mark}"}]}
    if kind == 2:
        return {"id": f"msg_{mark}", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": f"answer {mark}", "annotations": []}]}
    if kind == 3:
        return {"type": "function_call", "id": f"fc_{mark}", "call_id": f"call_{mark}", "name": "read_file",
                "arguments": json.dumps({"path": f"{mark}.txt", "lines": [1, 2]}), "status": "completed"}
    if kind == 4:
        out = FILE if rnd.random() < 0.7 else FILE + f"and one of its own: {mark}\n" * 100
        return {"type": "function_call_output", "call_id": f"call_{mark}", "output": out}
    if kind == 5:
        return {"type": "reasoning", "id": f"rs_{mark}", "summary": [{"type": "summary_text", "text": f"thinking about {mark}"}]}
    return {"type": "web_search_call", "id": f"ws_{mark}", "status": "completed", "action": {"type": "search", "query": mark}}
'''

# A child: add_items or pop_item (one call in seven) on two sessions, printing the call
# before it and "ack" after it returned (pop_item: with the item it gave).
AG_CHILD = AG_ITEMS + r'''
import asyncio, random, sys
from ctape.integrations.openai_agents import TapeSession

tape_dir, tag, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(seed)


def say(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


async def main():
    sessions = {sid: TapeSession(sid, tape_dir) for sid in ("chat-a", "chat-b")}
    say(ready=True)
    n = 0
    while True:
        sid = rnd.choice(sorted(sessions))
        if rnd.random() < 0.15:
            say(op="pop", sid=sid, n=n)
            got = await sessions[sid].pop_item()
            say(ack=n, popped=got)
        else:
            batch = [item(rnd, f"{tag}-{n}-{k}") for k in range(rnd.randint(1, 4))]
            say(op="add", sid=sid, n=n, items=batch)
            await sessions[sid].add_items(batch)
            say(ack=n)
        n += 1


asyncio.run(main())
'''

# A fresh process: argv[2] a JSON list of (session, action); prints what each action read.
AG_CHECK = r'''
import asyncio, json, sys
from ctape.integrations.openai_agents import TapeSession


async def main():
    out = []
    for sid, action in json.loads(sys.argv[2]):
        s = TapeSession(sid, sys.argv[1])
        r = {"items": await s.get_items()}
        if action == "pop":
            r["popped"] = await s.pop_item()
            r["after"] = await s.get_items()
        elif action == "limit":
            r["after"] = await s.get_items(limit=3)
        elif action == "clear":
            await s.clear_session()
            r["cleared"] = await s.get_items()
            await s.add_items([{"role": "user", "content": f"after the clear of {sid}"}])
            r["after"] = await s.get_items()
        r["again"] = await TapeSession(sid, sys.argv[1]).get_items()  # another TapeSession reads the same
        out.append(r)
    print(json.dumps(out))


asyncio.run(main())
'''


def agents_check(tape_dir, actions):
    p = subprocess.run([sys.executable, "-c", AG_CHECK, str(tape_dir), json.dumps(actions)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def apply_op(items, line):
    return items + line["items"] if line["op"] == "add" else items[:-1]


def agents_kill_loop(tape_dir, tmp_path, rounds, seed):
    """Each round: a child killed at a random instant, then a fresh process reads both
    sessions and the parent replays what the child printed:
    - every acknowledged call is there, in order: get_items is exactly the items of the
      acknowledged adds minus the acknowledged pops (and each pop gave the item on top);
    - the call in flight at the kill is all there or not at all (a batch is one write);
    - then, after the crash: pop_item gives the last item and takes it off (in a fresh
      process, and the next round goes on from there), get_items(limit=3) the last three,
      clear_session an empty session that takes new items; another TapeSession agrees;
    - `ctape fsck` exits 0."""
    rnd = random.Random(seed)
    model = {"chat-a": [], "chat-b": []}
    acked = flight = 0
    for r in range(rounds):
        out = tmp_path / f"ag{r}.out"
        p = start(AG_CHILD, [tape_dir, f"r{r}", rnd.randrange(1 << 30)], out)
        kill_after(p, rnd.uniform(0.05, 2.0 if SLOW else 0.8), out)
        lines = printed(out)
        why = f"round {r} (CTAPE_CRASH_SEED={seed})"
        assert lines[0] == {"ready": True}
        fsck(tape_dir, why)  # the tape as the kill left it
        in_flight = None
        for line in lines[1:]:
            if "op" in line:
                in_flight = line
                continue
            assert in_flight is not None and line["ack"] == in_flight["n"]
            items = model[in_flight["sid"]]
            if in_flight["op"] == "pop":
                assert line["popped"] == (items[-1] if items else None), f"{why}: pop_item gave {line['popped']}"
            model[in_flight["sid"]] = apply_op(items, in_flight)
            acked += 1
            in_flight = None
        # one session gets an action, the sessions take turns (every 4 rounds): each one is
        # cleared every 8 rounds, so the long run's sessions stay a size that reads fast
        action = ("none", "pop", "limit", "clear")[r % 4] if r < rounds - 1 else "clear"
        actions = [(sid, action if sid == ("chat-a", "chat-b")[r // 4 % 2] else "none") for sid in sorted(model)]
        for (sid, act), got in zip(actions, agents_check(tape_dir, actions)):
            have = model[sid]
            ok = [have] + ([apply_op(have, in_flight)] if in_flight and in_flight["sid"] == sid else [])
            assert got["items"] in ok, (
                f"{why}: {sid} holds {len(got['items'])} items, acknowledged: {len(have)}"
                f"{'' if len(ok) == 1 else f' (or {len(ok[1])} with the call in flight)'}")
            flight += len(ok) > 1 and got["items"] == ok[1] != ok[0]
            have = got["items"]
            assert got["again"] == (got["after"] if act in ("pop", "clear") else have), f"{why}: another TapeSession reads {sid} differently"
            if act == "pop":
                assert got["popped"] == (have[-1] if have else None) and got["after"] == have[:-1], why
                have = have[:-1]
            elif act == "limit":
                assert got["after"] == have[-3:], why
            elif act == "clear":
                assert got["cleared"] == [] and got["after"] == [{"role": "user", "content": f"after the clear of {sid}"}], why
                have = got["after"]
            model[sid] = have
    fsck(tape_dir, "at the end")
    assert acked >= rounds, f"only {acked} calls acknowledged in {rounds} rounds: the kills came too early to test anything"
    print(f"{rounds} rounds: {acked} calls acknowledged, {flight} calls in flight at a kill found whole")


@needs_agents
def test_agents_session_kill_9_loop(tape_dir, tmp_path):
    """4 rounds here; 80 with CTAPE_SLOW=1 (below)."""
    agents_kill_loop(tape_dir, tmp_path, _rounds(4, 4), _seed())


@needs_agents
@pytest.mark.skipif(not SLOW, reason="long kill -9 loop: set CTAPE_SLOW=1")
def test_agents_session_kill_9_loop_long(tape_dir, tmp_path):
    agents_kill_loop(tape_dir, tmp_path, _rounds(80, 80), _seed())


@needs_agents
def test_the_loop_drives_what_the_sdk_takes(tape_dir):
    """What the loops above drive is what a Runner drives: a TapeSession is a session by
    the SDK's own runtime check of its Session protocol, and the items the children add
    are valid input items by the SDK's own type (TResponseInputItem), every shape of them."""
    from agents.items import TResponseInputItem
    from agents.memory import Session
    from pydantic import TypeAdapter

    from ctape.integrations.openai_agents import TapeSession

    s = TapeSession("chat", tape_dir)
    assert isinstance(s, Session)
    s.close()
    gen = types.ModuleType("agent_items")
    exec(AG_ITEMS, gen.__dict__)
    rnd = random.Random(7)
    items = [gen.item(rnd, f"x-{i}") for i in range(200)]
    assert len({(i.get("type"), i.get("role"), type(i.get("content")).__name__) for i in items}) == 7
    adapter = TypeAdapter(TResponseInputItem)
    for i in items:
        adapter.validate_python(i)
