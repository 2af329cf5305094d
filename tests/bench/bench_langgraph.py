"""Disk use, time per step and the first read in a new process: TapeSaver against
LangGraph's SqliteSaver on the same chat graph.

One step is one graph invocation: a user message in, an assistant message out (about
80 characters each), on one thread, so the message list grows by two per step. Both
savers see exactly the same calls. Prints bytes on disk and the ratio, the time per step
over each tenth of the run (is it flat as the thread grows?), and the first `get_state`
in a new process (median of 5, the two savers taking turns), with the ratios.

    python tests/bench/bench_langgraph.py            # 100 and 1,000 steps
    python tests/bench/bench_langgraph.py --big      # also 5,000 steps (minutes, ~GBs for SQLite)
    python tests/bench/bench_langgraph.py 50 200     # any step counts
    python tests/bench/bench_langgraph.py --subgraph 300   # the answer comes from a subgraph

Time per step is printed as wall time and as CPU time of the process (all its threads): on
a loaded machine the wall time of a tenth moves with the load, the CPU time much less.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from ctape.integrations.langgraph import TapeSaver


def agent(state):
    n = len(state["messages"])
    return {"messages": [AIMessage(f"reply {n}: the build passed, 412 tests, 3 skipped; next I will look at the flaky one.")]}


SUBGRAPH = "--subgraph" in sys.argv


def graph(saver):
    g = StateGraph(MessagesState)
    if SUBGRAPH:  # the agent runs as a subgraph: a new checkpoint namespace every step
        sg = StateGraph(MessagesState)
        sg.add_node("agent", agent)
        sg.add_edge(START, "agent")
        g.add_node("agent", sg.compile())
    else:
        g.add_node("agent", agent)
    g.add_edge(START, "agent")
    return g.compile(checkpointer=saver)


def du(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def run(saver, steps: int, windows: list, cpu: list) -> float:
    """All the steps; appends to windows (and cpu) the wall (and CPU) ms per step of each tenth of the run."""
    g = graph(saver)
    cfg = {"configurable": {"thread_id": "bench"}}
    t = last = time.perf_counter()
    last_cpu = time.process_time()
    size = max(1, steps // 10)
    for i in range(steps):
        g.invoke({"messages": [HumanMessage(f"step {i}: please run the tests again and tell me what failed this time.")]}, cfg)
        if (i + 1) % size == 0:
            now, now_cpu = time.perf_counter(), time.process_time()
            windows.append((now - last) * 1000 / size)
            cpu.append((now_cpu - last_cpu) * 1000 / size)
            last, last_cpu = now, now_cpu
    return time.perf_counter() - t


FIRST_READ = """
import sys, time
kind, path = sys.argv[1], sys.argv[2]
from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph
if kind == "sqlite":
    import sqlite3
    from langgraph.checkpoint.sqlite import SqliteSaver
    saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
else:
    from ctape.integrations.langgraph import TapeSaver
    saver = TapeSaver(path)
g = StateGraph(MessagesState)
g.add_node("agent", lambda s: {"messages": [AIMessage("x")]})
g.add_edge(START, "agent")
g = g.compile(checkpointer=saver)
t = time.perf_counter()
n = len(g.get_state({"configurable": {"thread_id": "bench"}}).values["messages"])
print(time.perf_counter() - t, n)
"""


def first_read(db: str, tape_dir: str, repeat: int = 5) -> tuple[float, float]:
    """The first get_state in a new process (imports not counted), medians, taking turns."""
    out: dict[str, list[float]] = {"sqlite": [], "tape": []}
    for r in range(repeat):
        for kind in (("sqlite", "tape") if r % 2 == 0 else ("tape", "sqlite")):
            p = subprocess.run([sys.executable, "-c", FIRST_READ, kind, db if kind == "sqlite" else tape_dir], capture_output=True, text=True, check=True)
            out[kind].append(float(p.stdout.split()[0]))
    return statistics.median(out["sqlite"]), statistics.median(out["tape"])


def ts_branches(tape_dir: str) -> list:
    from ctape import Tape

    t = Tape.open(tape_dir)
    try:
        return sorted(t.session("lg-bench").refs().branches)
    finally:
        t.close()


def bench(steps: int, tmp: str) -> dict:
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = os.path.join(tmp, f"lg-{steps}.sqlite")
    conn = sqlite3.connect(db, check_same_thread=False)
    sq = SqliteSaver(conn)
    sq_win: list = []
    sq_cpu: list = []
    sq_time = run(sq, steps, sq_win, sq_cpu)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    tape_dir = os.path.join(tmp, f"tape-{steps}")
    ts = TapeSaver(tape_dir)
    tape_win: list = []
    tape_cpu: list = []
    tape_time = run(ts, steps, tape_win, tape_cpu)
    msgs = len(graph(ts).get_state({"configurable": {"thread_id": "bench"}}).values["messages"])
    ts.close()
    assert msgs == 2 * steps
    if SUBGRAPH:
        print(f"       branches of the thread: {len(ts_branches(tape_dir))}", flush=True)
    sq_first, tape_first = first_read(db, tape_dir)
    return {"steps": steps, "sqlite": du(db) + du(db + "-wal"), "tape": du(tape_dir), "sqlite_s": sq_time, "tape_s": tape_time,
            "sqlite_win": sq_win, "tape_win": tape_win, "sqlite_cpu": sq_cpu, "tape_cpu": tape_cpu, "sqlite_first": sq_first, "tape_first": tape_first}


def main(argv: list[str]) -> None:
    big = "--big" in argv
    counts = [int(a) for a in argv if a.isdigit()] or ([100, 1000, 5000] if big else [100, 1000])
    print(f"{'steps':>6} {'SqliteSaver':>14} {'TapeSaver':>12} {'tape/sqlite':>12} {'sqlite s':>9} {'tape s':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            r = bench(n, tmp)
            print(f"{n:>6} {r['sqlite']:>14,} {r['tape']:>12,} {r['tape'] / r['sqlite']:>12.4f} {r['sqlite_s']:>9.1f} {r['tape_s']:>8.1f}", flush=True)
            for name in ("sqlite", "tape"):
                for what in ("win", "cpu"):
                    w = r[f"{name}_{what}"]
                    label = "wall" if what == "win" else "CPU "
                    print(f"       {label} ms per step, each tenth of the run, {name:>6}: {' '.join(f'{x:.1f}' for x in w)}  (last / first tenth {w[-1] / w[0]:.2f})", flush=True)
            print(f"       first get_state in a new process (median of 5): SqliteSaver {r['sqlite_first']:.3f} s, TapeSaver {r['tape_first']:.3f} s, "
                  f"TapeSaver / SqliteSaver {r['tape_first'] / r['sqlite_first']:.2f}x", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
