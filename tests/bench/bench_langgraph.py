"""Disk use, time per step and the first read in a new process: TapeSaver against
LangGraph's SqliteSaver on the same chat graph.

One step is one graph invocation: a user message in, an assistant message out (about
80 characters each), on one thread, so the message list grows by two per step. Both
savers see exactly the same calls. Prints bytes on disk and the ratio, the time per step
over each tenth of the run (is it flat as the thread grows?), and the first `get_state`
in a new process (median of 5, the two savers taking turns: wall time, the same with the
saver's import, and get_state's CPU time), with the ratios.

    python tests/bench/bench_langgraph.py            # 100 and 1,000 steps
    python tests/bench/bench_langgraph.py --big      # also 5,000 steps (minutes, ~GBs for SQLite)
    python tests/bench/bench_langgraph.py 50 200     # any step counts
    python tests/bench/bench_langgraph.py --subgraph 300   # the answer comes from a subgraph

Time per step is printed as wall time and as CPU time of the process (all its threads): on
a loaded machine the wall time of a tenth moves with the load, the CPU time much less.

    python tests/bench/bench_langgraph.py 1000 --repeat 5   # per-step CPU: medians of 5 runs

With --repeat N, TapeSaver's run is repeated N times (a new tape each time), and so is a
run with a saver that keeps only the latest checkpoint, by reference ("LangGraph
alone": what LangGraph itself spends per step on a growing message list, which every
saver pays); each tenth's CPU ms per step is the median over the runs. SqliteSaver runs
once (it takes minutes at 1,000 steps). The first read in a new process is also timed
with the saver's import counted (from the import of the saver's module, LangGraph already
imported, to the end of get_state).
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


class LatestOnly:
    """A checkpointer that keeps only the latest checkpoint, by reference: LangGraph's own cost per step."""

    def __new__(cls):
        from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

        class _Latest(BaseCheckpointSaver):
            def __init__(self):
                super().__init__()
                self.latest = None

            def get_tuple(self, config):
                return self.latest

            def put(self, config, checkpoint, metadata, new_versions):
                cfg = {"configurable": {"thread_id": config["configurable"]["thread_id"], "checkpoint_ns": "", "checkpoint_id": checkpoint["id"]}}
                self.latest = CheckpointTuple(cfg, checkpoint, metadata, config, [])
                return cfg

            def put_writes(self, config, writes, task_id, task_path=""):
                pass

        return _Latest()


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
t_import = time.perf_counter()
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
t, cpu = time.perf_counter(), time.thread_time()
n = len(g.get_state({"configurable": {"thread_id": "bench"}}).values["messages"])
print(time.perf_counter() - t, n, time.perf_counter() - t_import, time.thread_time() - cpu)
"""


def first_read(db: str, tape_dir: str, repeat: int = 5) -> tuple[float, ...]:
    """The first get_state in a new process, medians, taking turns: without imports, and
    with the saver's import (LangGraph itself imported before either); and the CPU time of
    get_state alone (its thread's: on a loaded machine wall times move, CPU times less). Modules are imported
    from compiled bytecode, as in an installed package: the children write it to a folder
    of their own (PYTHONDONTWRITEBYTECODE, set where sources are being edited, would make
    every import of a changed module compile it again), filled by an untimed run of each."""
    out: dict[str, list[float]] = {"sqlite": [], "tape": [], "sqlite+import": [], "tape+import": [], "sqlite cpu": [], "tape cpu": []}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(os.path.dirname(tape_dir), "pycache")
    for kind in ("sqlite", "tape"):
        subprocess.run([sys.executable, "-c", FIRST_READ, kind, db if kind == "sqlite" else tape_dir], capture_output=True, text=True, check=True, env=env)
    for r in range(repeat):
        for kind in (("sqlite", "tape") if r % 2 == 0 else ("tape", "sqlite")):
            p = subprocess.run([sys.executable, "-c", FIRST_READ, kind, db if kind == "sqlite" else tape_dir], capture_output=True, text=True, check=True, env=env)
            read, _, with_import, cpu = p.stdout.split()
            out[kind].append(float(read))
            out[kind + "+import"].append(float(with_import))
            out[kind + " cpu"].append(float(cpu))
    return tuple(statistics.median(out[k]) for k in ("sqlite", "tape", "sqlite+import", "tape+import", "sqlite cpu", "tape cpu"))


def ts_branches(tape_dir: str) -> list:
    from ctape import Tape

    t = Tape.open(tape_dir)
    try:
        return sorted(t.session("lg-bench").refs().branches)
    finally:
        t.close()


def medians(runs: list[list[float]]) -> list[float]:
    return [statistics.median(r[i] for r in runs) for i in range(len(runs[0]))]


def bench(steps: int, tmp: str, repeat: int = 1) -> dict:
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = os.path.join(tmp, f"lg-{steps}.sqlite")
    conn = sqlite3.connect(db, check_same_thread=False)
    sq = SqliteSaver(conn)
    sq_win: list = []
    sq_cpu: list = []
    sq_time = run(sq, steps, sq_win, sq_cpu)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    wins: dict[str, list] = {"tape": [], "alone": []}
    cpus: dict[str, list] = {"tape": [], "alone": []}
    times = []
    for r in range(repeat):  # the last tape is the one measured below
        tape_dir = os.path.join(tmp, f"tape-{steps}-{r}")
        ts = TapeSaver(tape_dir)
        for name, saver in (("tape", ts), ("alone", LatestOnly())) if r % 2 == 0 else (("alone", LatestOnly()), ("tape", ts)):
            if name == "alone" and repeat == 1:
                continue
            w: list = []
            c: list = []
            t = run(saver, steps, w, c)
            wins[name].append(w)
            cpus[name].append(c)
            if name == "tape":
                times.append(t)
        msgs = len(graph(ts).get_state({"configurable": {"thread_id": "bench"}}).values["messages"])
        ts.close()
        assert msgs == 2 * steps
    if SUBGRAPH:
        print(f"       branches of the thread: {len(ts_branches(tape_dir))}", flush=True)
    sq_first, tape_first, sq_first_imp, tape_first_imp, sq_first_cpu, tape_first_cpu = first_read(db, tape_dir)
    out = {"steps": steps, "sqlite": du(db) + du(db + "-wal"), "tape": du(tape_dir), "sqlite_s": sq_time, "tape_s": statistics.median(times),
           "sqlite_win": sq_win, "tape_win": medians(wins["tape"]), "sqlite_cpu": sq_cpu, "tape_cpu": medians(cpus["tape"]),
           "sqlite_first": sq_first, "tape_first": tape_first, "sqlite_first_import": sq_first_imp, "tape_first_import": tape_first_imp,
           "sqlite_first_cpu": sq_first_cpu, "tape_first_cpu": tape_first_cpu}
    if repeat > 1:
        out["alone_win"], out["alone_cpu"] = medians(wins["alone"]), medians(cpus["alone"])
    return out


def main(argv: list[str]) -> None:
    big = "--big" in argv
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 1
    counts = [int(a) for i, a in enumerate(argv) if a.isdigit() and (i == 0 or argv[i - 1] != "--repeat")] or ([100, 1000, 5000] if big else [100, 1000])
    print(f"{'steps':>6} {'SqliteSaver':>14} {'TapeSaver':>12} {'tape/sqlite':>12} {'sqlite s':>9} {'tape s':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            r = bench(n, tmp, repeat)
            print(f"{n:>6} {r['sqlite']:>14,} {r['tape']:>12,} {r['tape'] / r['sqlite']:>12.4f} {r['sqlite_s']:>9.1f} {r['tape_s']:>8.1f}", flush=True)
            for name in ("sqlite", "tape", "alone"):
                for what in ("win", "cpu"):
                    w = r.get(f"{name}_{what}")
                    if w is None:
                        continue
                    label = "wall" if what == "win" else "CPU "
                    runs = f"median of {repeat}" if name != "sqlite" and repeat > 1 else "one run"
                    print(f"       {label} ms per step, each tenth of the run, {name:>6} ({runs}): {' '.join(f'{x:.1f}' for x in w)}  (last / first tenth {w[-1] / w[0]:.2f})", flush=True)
            print(f"       first get_state in a new process (median of 5): SqliteSaver {1000 * r['sqlite_first']:.1f} ms, TapeSaver {1000 * r['tape_first']:.1f} ms, "
                  f"TapeSaver / SqliteSaver {r['tape_first'] / r['sqlite_first']:.2f}x; with the saver's import: SqliteSaver {1000 * r['sqlite_first_import']:.1f} ms, "
                  f"TapeSaver {1000 * r['tape_first_import']:.1f} ms, {r['tape_first_import'] / r['sqlite_first_import']:.2f}x; "
                  f"CPU of get_state: SqliteSaver {1000 * r['sqlite_first_cpu']:.1f} ms, TapeSaver {1000 * r['tape_first_cpu']:.1f} ms, "
                  f"{r['tape_first_cpu'] / r['sqlite_first_cpu']:.2f}x", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
