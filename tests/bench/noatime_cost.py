"""What the no-atime mode costs: durable appends where reads move access times (every
append goes to the open segment) against the mode ctape takes where they do not (every
write goes to a new segment, docs/sync.md "Access times"), on the same disk, in one run.

    PYTHONPATH=. python tests/bench/noatime_cost.py [-n 500] [--runs 5] [--dir /tmp]

The no-atime mode is forced on the tape this script writes to (the Tape's store answers
False to `atimes_work`), so both modes run on the same file system; the probe itself is
left out. Each run appends N entries to a new tape through the Python API, one durable
append each: a tool call (~100 B) every fourth entry, otherwise a tool result of 2-20 KB
of code-like text (distinct per entry, seeded, so nothing dedupes; it compresses as
text does). The two modes take turns, the first mode alternating between runs (the
machine is shared: quote the medians and the ratio). After the appends, untimed by
them: a read of the whole history by a process with a new index cache (it indexes every
file), `compact(grace="now")` (files and bytes after it), and N/10 more appends in the
same mode, timed (the session is one pack again).

Prints one JSON line per run (with the time per append in each quarter of the run: in
the no-atime mode a session gains a file per append, and a writer's work per append
grows with the session's files), then one per mode with the medians, then the ratios
(noatime / normal).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time

from ctape import Tape

WORDS = ("def return self if else for in import from None True False value path name result "
         "assert raise with open read write data list dict str int len range print error test").split()


def payloads(n: int, seed: int) -> list[tuple[str, dict]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 4 == 0:
            out.append(("tool_call", {"call_id": f"c{i}", "name": "read_file", "arguments": {"path": f"/src/m{i % 40}.py"}}))
            continue
        size = rng.randint(2_000, 20_000)
        lines, total = [], 0
        while total < size:
            indent = " " * (4 * rng.randint(0, 3))
            line = indent + " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 10))) + f"  # {rng.getrandbits(32):08x}"
            lines.append(line)
            total += len(line) + 1
        out.append(("tool_result", {"call_id": f"c{i}", "output": "\n".join(lines)[:size]}))
    return out


def tape_files(root: str) -> tuple[int, int]:
    """Data files and their bytes."""
    files = size = 0
    for d, _, names in os.walk(os.path.join(root, "sessions")):
        for name in names:
            if name.endswith((".seg", ".pack")):
                files += 1
                size += os.path.getsize(os.path.join(d, name))
    return files, size


def one_run(base: str, mode: str, entries: list[tuple[str, dict]], run: int) -> dict:
    root = os.path.join(base, f"{mode}-{run}")
    os.environ["CTAPE_CACHE_DIR"] = os.path.join(base, f"cache-{mode}-{run}")
    tape = Tape.init(root)
    if mode == "noatime":
        tape.store.atimes_work = lambda warn=True: False
    s = tape.session("bench")
    quarters = []  # ms per append in each quarter of the run: does it grow with the files?
    q = max(1, len(entries) // 4)
    t0 = tq = time.perf_counter()
    for i, (kind, payload) in enumerate(entries, 1):
        s.append(kind, payload)
        if i % q == 0 and len(quarters) < 4:
            now = time.perf_counter()
            quarters.append(round((now - tq) / q * 1000, 3))
            tq = now
    took = time.perf_counter() - t0
    tape.close()
    files, size = tape_files(root)
    # a new index cache reads every file once: what a new machine or a dropped cache pays
    os.environ["CTAPE_CACHE_DIR"] = os.path.join(base, f"cache-{mode}-{run}-cold")
    t0 = time.perf_counter()
    tape = Tape.open(root)
    n_read = sum(1 for _ in tape.session("bench").log())
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = tape.compact(grace="now")
    compact_s = time.perf_counter() - t0
    files_after, size_after = tape_files(root)
    # appends go on after the compaction (the session is one pack again): N/10 more
    if mode == "noatime":
        tape.store.atimes_work = lambda warn=True: False
    s = tape.session("bench")
    more = payloads(max(1, len(entries) // 10), seed=len(entries) + run + 1000)
    t0 = time.perf_counter()
    for kind, payload in more:
        s.append(kind, payload)
    after = (time.perf_counter() - t0) / len(more) * 1000
    tape.close()
    shutil.rmtree(root)
    return {
        "mode": mode, "run": run, "entries": len(entries), "seconds": round(took, 4),
        "appends_per_s": round(len(entries) / took, 1), "ms_per_append": round(took / len(entries) * 1000, 3),
        "ms_per_append_by_quarter": quarters,
        "files": files, "bytes": size, "cold_read_s": round(cold, 4), "entries_read": n_read,
        "compact_s": round(compact_s, 4), "files_after_compact": files_after, "bytes_after_compact": size_after,
        "ms_per_append_after_compact": round(after, 3),
        "compact_report": {k: report.get(k) for k in ("files_before", "files_after")},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=500, help="durable appends per run")
    ap.add_argument("--runs", type=int, default=5, help="runs of each mode")
    ap.add_argument("--dir", default="/tmp", help="where the tapes go (the file system measured)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    entries = payloads(args.n, args.seed)
    base = tempfile.mkdtemp(prefix="ctape-noatime-bench-", dir=args.dir)
    results: dict[str, list[dict]] = {"normal": [], "noatime": []}
    try:
        for run in range(args.runs):
            order = ("normal", "noatime") if run % 2 == 0 else ("noatime", "normal")
            for mode in order:
                r = one_run(base, mode, entries, run)
                results[mode].append(r)
                print(json.dumps(r), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med = {}
    for mode, rs in results.items():
        med[mode] = {k: round(statistics.median(r[k] for r in rs), 4)
                     for k in ("ms_per_append", "appends_per_s", "files", "bytes", "cold_read_s", "compact_s",
                               "files_after_compact", "bytes_after_compact", "ms_per_append_after_compact")}
        by_quarter = [round(statistics.median(r["ms_per_append_by_quarter"][k] for r in rs), 3) for k in range(len(rs[0]["ms_per_append_by_quarter"]))]
        print(json.dumps({"mode": mode, "median_of": len(rs), **med[mode], "ms_per_append_by_quarter": by_quarter}))
    a, b = med["normal"], med["noatime"]
    print(json.dumps({
        "ratio": "noatime / normal",
        "ms_per_append": round(b["ms_per_append"] / a["ms_per_append"], 2),
        "files": round(b["files"] / a["files"], 1),
        "bytes": round(b["bytes"] / a["bytes"], 2),
        "cold_read_s": round(b["cold_read_s"] / a["cold_read_s"], 2),
        "bytes_after_compact": round(b["bytes_after_compact"] / a["bytes_after_compact"], 2),
        "per_run_ms_per_append": [round(y["ms_per_append"] / x["ms_per_append"], 2) for x, y in zip(results["normal"], results["noatime"])],
    }))


if __name__ == "__main__":
    main()
