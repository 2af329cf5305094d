"""Read paths of the integrations against the frameworks' own stores, in one run.

- LangGraph: ``get_state_history`` of one thread (all checkpoints) after N chat steps,
  TapeSaver against SqliteSaver (langgraph-checkpoint-sqlite, the ``bench`` extra).
  One step is one ``invoke``: a user message in, an assistant message out, so LangGraph
  writes 3 checkpoints per step.
- OpenAI Agents SDK: ``get_items()`` of a 3,100-item session, TapeSession against the
  SDK's SQLiteSession (both on disk); and ``add_items`` throughput (3,100 items added 31 at
  a time into a new session, the two taking turns, median of the repeats).

Each figure is the median of several calls on the same store in this process ("warm":
the store object already used once), plus the first call of a fresh store object on
the same files in this process, and the first call in a new process. Prints a table and the ratios.

    python tests/bench/bench_integrations.py                 # 250, 500, 1000 steps; 3,100 items
    python tests/bench/bench_integrations.py --steps 100 200 # other step counts
    python tests/bench/bench_integrations.py --quick         # a smoke run (seconds)
    python tests/bench/bench_integrations.py --no-sqlite     # TapeSaver alone (SqliteSaver takes minutes at 1,000 steps)
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


# -- LangGraph -------------------------------------------------------------------------------------


def langgraph_history(steps: list[int], tmp: str, repeat: int, sqlite: bool = True) -> list[dict]:
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
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

    db = os.path.join(tmp, "lg.sqlite")
    tape_dir = os.path.join(tmp, "lg-tape")
    stores = {"SqliteSaver": SqliteSaver(sqlite3.connect(db, check_same_thread=False)), "TapeSaver": TapeSaver(tape_dir)}
    if not sqlite:
        del stores["SqliteSaver"]
    cfg = {"configurable": {"thread_id": "bench"}}
    rows = []
    done = 0
    for n in steps:
        for s in stores.values():
            g = graph(s)
            for i in range(done, n):
                g.invoke({"messages": [HumanMessage(f"step {i}: please run the tests again and tell me what failed this time.")]}, cfg)
        done = n
        row = {"steps": n}
        for name, s in stores.items():
            g = graph(s)
            count = len(list(g.get_state_history(cfg)))  # warm-up, and the count
            # SqliteSaver's history is quadratic: at 1,000 steps one call takes minutes
            reps = repeat if name == "TapeSaver" or n <= 300 else 1
            row[name] = statistics.median(timed(lambda: list(g.get_state_history(cfg)), reps))
            row[name + " list"] = statistics.median(timed(lambda: list(s.list(cfg)), reps))  # the checkpointer's part
            row["checkpoints"] = count
        fresh = TapeSaver(tape_dir)
        row["TapeSaver cold"] = timed(lambda: list(graph(fresh).get_state_history(cfg)), 1)[0]
        # a measure the machine's load cannot blur: entries read to list the thread
        reads = [0]
        read_entry = fresh.tape.read_entry

        def counted(h, _f=read_entry):
            reads[0] += 1
            return _f(h)

        fresh.tape.read_entry = counted
        fresh._values.clear()
        list(fresh.list(cfg))
        row["reads per checkpoint"] = reads[0] / count
        fresh.close()
        rows.append(row)
        sq = f"SqliteSaver {row['SqliteSaver']:8.3f} s (list {row['SqliteSaver list']:.3f})  " if sqlite else ""
        ratio = f"  SqliteSaver/TapeSaver {row['SqliteSaver'] / row['TapeSaver']:7.1f}x" if sqlite else ""
        print(
            f"langgraph get_state_history  steps {n:>5}  checkpoints {row['checkpoints']:>5}  {sq}"
            f"TapeSaver {row['TapeSaver']:7.3f} s (list {row['TapeSaver list']:.3f}, fresh saver {row['TapeSaver cold']:.3f}, "
            f"{row['reads per checkpoint']:.2f} entries read per checkpoint){ratio}",
            flush=True,
        )
    stores["TapeSaver"].close()
    return rows


# -- OpenAI Agents SDK -------------------------------------------------------------------------------


def agents_items(n_items: int, tmp: str, repeat: int) -> dict:
    from agents import SQLiteSession

    from ctape.integrations.openai_agents import TapeSession

    def turn(i: int) -> list[dict]:
        call = f"call_{i}"
        return [
            {"role": "user", "content": f"turn {i}: read the config and run the tests"},
            {"type": "function_call", "call_id": call, "name": "run_tests", "arguments": '{"path": "tests/"}'},
            {"type": "function_call_output", "call_id": call, "output": f"412 passed, 3 skipped in {i % 60}.2s"},
            {"role": "assistant", "content": [{"type": "output_text", "text": f"All tests pass (turn {i}). Next: the flaky one."}]},
        ]

    items = [it for i in range(n_items // 4 + 1) for it in turn(i)][:n_items]
    db = os.path.join(tmp, "agents.sqlite")
    tape_dir = os.path.join(tmp, "agents-tape")
    sq = SQLiteSession("bench", db)
    tp = TapeSession("bench", tape_dir)

    async def fill(s):
        for k in range(0, len(items), 31):  # a run adds a few dozen items at a time
            await s.add_items(items[k : k + 31])

    asyncio.run(fill(sq))
    asyncio.run(fill(tp))
    out = {"items": n_items}
    for name, s in (("SQLiteSession", sq), ("TapeSession", tp)):
        got = asyncio.run(s.get_items())
        assert got == items, name
        out[name] = statistics.median(timed(lambda: asyncio.run(s.get_items()), repeat))
    sq2 = SQLiteSession("bench", db)
    out["SQLiteSession fresh"] = timed(lambda: asyncio.run(sq2.get_items()), 1)[0]
    tp2 = TapeSession("bench", tape_dir)
    out["TapeSession fresh"] = timed(lambda: asyncio.run(tp2.get_items()), 1)[0]
    # the first call in a new process (a TapeSession there reads the whole path once)
    for name, code in (
        ("SQLiteSession new process", f"from agents import SQLiteSession as C; s = C('bench', {db!r})"),
        ("TapeSession new process", f"from ctape.integrations.openai_agents import TapeSession as C; s = C('bench', {tape_dir!r})"),
    ):
        script = code + "; import asyncio, time; t = time.perf_counter(); asyncio.run(s.get_items()); print(time.perf_counter() - t)"
        runs = [float(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout) for _ in range(3)]
        out[name] = statistics.median(runs)
    # the cost of asyncio.run itself, paid equally by both
    out["asyncio.run"] = statistics.median(timed(lambda: asyncio.run(asyncio.sleep(0)), repeat))
    print(
        f"agents get_items  items {n_items}  SQLiteSession {out['SQLiteSession'] * 1000:7.2f} ms (fresh object {out['SQLiteSession fresh'] * 1000:.2f}, new process {out['SQLiteSession new process'] * 1000:.2f})  "
        f"TapeSession {out['TapeSession'] * 1000:7.2f} ms (fresh object {out['TapeSession fresh'] * 1000:.2f}, new process {out['TapeSession new process'] * 1000:.2f})  "
        f"TapeSession/SQLiteSession {out['TapeSession'] / out['SQLiteSession']:.2f}x, new process {out['TapeSession new process'] / out['SQLiteSession new process']:.1f}x",
        flush=True,
    )
    tp.close()
    tp2.close()
    return out


def agents_add(n_items: int, tmp: str, repeat: int) -> dict:
    """add_items throughput: the same items into a new session of each store, taking turns."""
    from agents import SQLiteSession

    from ctape.integrations.openai_agents import TapeSession

    items = [
        it
        for i in range(n_items // 4 + 1)
        for it in (
            {"role": "user", "content": f"turn {i}: read the config and run the tests"},
            {"type": "function_call", "call_id": f"call_{i}", "name": "run_tests", "arguments": '{"path": "tests/"}'},
            {"type": "function_call_output", "call_id": f"call_{i}", "output": f"412 passed, 3 skipped in {i % 60}.2s"},
            {"role": "assistant", "content": [{"type": "output_text", "text": f"All tests pass (turn {i}). Next: the flaky one."}]},
        )
    ][:n_items]

    def fill(s) -> float:
        async def go():
            for k in range(0, len(items), 31):
                await s.add_items(items[k : k + 31])

        t = time.perf_counter()
        asyncio.run(go())
        return time.perf_counter() - t

    times: dict[str, list[float]] = {"SQLiteSession": [], "TapeSession": []}
    for r in range(repeat):
        stores = {"SQLiteSession": SQLiteSession(f"add{r}", os.path.join(tmp, f"add{r}.sqlite")), "TapeSession": TapeSession(f"add{r}", os.path.join(tmp, f"add{r}-tape"))}
        for name in sorted(stores, reverse=r % 2 == 1):
            times[name].append(fill(stores[name]))
        stores["TapeSession"].close()
    out = {name: n_items / statistics.median(t) for name, t in times.items()}
    pairs = sorted(a / b for a, b in zip(times["SQLiteSession"], times["TapeSession"]))
    print(
        f"agents add_items  items {n_items}  SQLiteSession {out['SQLiteSession']:8.0f} items/s  TapeSession {out['TapeSession']:8.0f} items/s  "
        f"TapeSession / SQLiteSession {out['TapeSession'] / out['SQLiteSession']:.2f}x (pairs {pairs[0]:.2f}-{pairs[-1]:.2f}, median {statistics.median(pairs):.2f})",
        flush=True,
    )
    return out


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    steps = [int(a) for a in argv if a.isdigit()] or ([10, 20] if quick else [250, 500, 1000])
    repeat = 3 if quick else 7
    with tempfile.TemporaryDirectory(dir=os.environ.get("CTAPE_BENCH_TMP")) as tmp:
        agents_items(124 if quick else 3100, tmp, repeat)
        agents_add(124 if quick else 3100, tmp, 3 if quick else 9)
        if "--agents-only" not in argv:
            langgraph_history(steps, tmp, 3 if not quick else 2, sqlite="--no-sqlite" not in argv)


if __name__ == "__main__":
    main(sys.argv[1:])
