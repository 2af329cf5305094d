"""Disk use of TapeSaver against LangGraph's SqliteSaver on the same chat graph.

One step is one graph invocation: a user message in, an assistant message out (about
80 characters each), on one thread, so the message list grows by two per step. Both
savers see exactly the same calls. Prints bytes on disk and the ratio.

    python tests/bench/bench_langgraph.py            # 100 and 1,000 steps
    python tests/bench/bench_langgraph.py --big      # also 5,000 steps (minutes, ~GBs for SQLite)
    python tests/bench/bench_langgraph.py 50 200     # any step counts
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from ctape.integrations.langgraph import TapeSaver


def agent(state):
    n = len(state["messages"])
    return {"messages": [AIMessage(f"reply {n}: the build passed, 412 tests, 3 skipped; next I will look at the flaky one.")]}


def graph(saver):
    g = StateGraph(MessagesState)
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


def run(saver, steps: int) -> float:
    g = graph(saver)
    cfg = {"configurable": {"thread_id": "bench"}}
    t = time.perf_counter()
    for i in range(steps):
        g.invoke({"messages": [HumanMessage(f"step {i}: please run the tests again and tell me what failed this time.")]}, cfg)
    return time.perf_counter() - t


def bench(steps: int, tmp: str) -> dict:
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = os.path.join(tmp, f"lg-{steps}.sqlite")
    conn = sqlite3.connect(db, check_same_thread=False)
    sq = SqliteSaver(conn)
    sq_time = run(sq, steps)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    tape_dir = os.path.join(tmp, f"tape-{steps}")
    ts = TapeSaver(tape_dir)
    tape_time = run(ts, steps)
    msgs = len(graph(ts).get_state({"configurable": {"thread_id": "bench"}}).values["messages"])
    ts.close()
    assert msgs == 2 * steps
    return {"steps": steps, "sqlite": du(db) + du(db + "-wal"), "tape": du(tape_dir), "sqlite_s": sq_time, "tape_s": tape_time}


def main(argv: list[str]) -> None:
    big = "--big" in argv
    counts = [int(a) for a in argv if a.isdigit()] or ([100, 1000, 5000] if big else [100, 1000])
    print(f"{'steps':>6} {'SqliteSaver':>14} {'TapeSaver':>12} {'tape/sqlite':>12} {'sqlite s':>9} {'tape s':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            r = bench(n, tmp)
            print(f"{n:>6} {r['sqlite']:>14,} {r['tape']:>12,} {r['tape'] / r['sqlite']:>12.4f} {r['sqlite_s']:>9.1f} {r['tape_s']:>8.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
