"""Reading entries that share one large value (issue 25: no super-linear shapes).

Identical tool outputs are stored once. Here a quarter of a session's entries share one
large output; the peer is a session of the same entries with short outputs. `ctape log`
prints a line an entry, so it should cost about the same on both; `export` writes the
shared output out in full for each entry that has it, so it pays for those bytes.

    python tests/bench/bench_shared_values.py                    # 20,000 entries, outputs of 20 KB and 200 KB
    python tests/bench/bench_shared_values.py --against /tmp/old # also time another checkout's commands

Each command runs as its own `ctape` process, --repeat times; medians of CPU seconds
(user + system of the child), and each shape's ratio to the short outputs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench_hostile_diff import cli  # noqa: E402 - one `ctape` process of a checkout, its compiled modules kept

from ctape import Tape  # noqa: E402

COMMANDS = {"log": ["log", "--no-pager", "-s", "s"], "export": ["export", "s"]}
# each shape's tape is FOLDER/tape, its index cache FOLDER/cache (as bench_hostile_diff.cli runs them)


def build(path: str, n: int, size: int) -> None:
    """n entries: a call and its result in turns; every 4th result is the same `size`-character output."""
    shared = ("x" * 63 + "\n") * (size // 64) if size else None
    with Tape.init(path) as t:
        s = t.session("s")
        with t.batch():
            for i in range(n):
                if i % 2 == 0:
                    s.append("tool_call", {"call_id": f"c{i}", "name": "bash", "arguments": {"cmd": f"cat log.{i}"}})
                else:
                    out = shared if shared and i % 4 == 1 else f"line {i} of the log"
                    s.append("tool_result", {"call_id": f"c{i - 1}", "output": out})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20000, help="entries per session")
    ap.add_argument("--sizes", default="0,20000,200000", help="shared output sizes in characters (0: short outputs, the peer)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--against", help="another checkout whose commands run on the same tapes")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    checkouts = {"this": ROOT, **({"against": os.path.abspath(a.against)} if a.against else {})}
    tmp = tempfile.mkdtemp(prefix="ctape-bench-shared-")
    try:
        tapes = {}
        for size in sizes:
            tapes[size] = os.path.join(tmp, f"t{size}")
            build(os.path.join(tapes[size], "tape"), a.n, size)
        results = {}
        for _ in range(a.repeat):  # the checkouts and shapes take turns
            for name, checkout in checkouts.items():
                for size, tape in tapes.items():
                    for cmd, args in COMMANDS.items():
                        results.setdefault((name, size, cmd), []).append(cli(tape, args, checkout)[1])
        print(f"{a.n:,} entries, a quarter sharing one output; CPU seconds, median of {a.repeat} (ratio to short outputs)")
        for name in checkouts:
            for cmd in COMMANDS:
                base = statistics.median(results[(name, sizes[0], cmd)])
                cells = []
                for size in sizes:
                    m = statistics.median(results[(name, size, cmd)])
                    cells.append(f"{size or 'short':>7}: {m:6.2f} s ({m / base:4.1f} x)")
                print(f"  {name:<8} {cmd:<7} " + "  ".join(cells))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
