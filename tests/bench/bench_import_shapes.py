"""Hostile shapes for the importers (issue 17.7), each against a plain peer in the same run.

    python tests/bench/bench_import_shapes.py            # 16,000 lines per shape
    python tests/bench/bench_import_shapes.py -n 64000   # larger
    (run from a checkout with PYTHONPATH=. to measure that checkout)

Shapes (Claude Code lines, one user message each):

    chain        line i's parentUuid is line i-1's uuid: the peer every other shape is compared to
    two-cycles   lines 2k and 2k+1 name each other as parent (no root: every pair is a cycle)
    reversed     line i's parent is line i+1 (every parent comes later in the file)
    no-parent    no parentUuid key at all (a linear file that does not say so)
    star         every line's parent is line 1 (forks of one message: each is a branch, as the source says)

It prints, for each shape: seconds, seconds / chain seconds, and the branches made.
Ratios near 1 (and growing no faster than n when n grows) mean the import is linear.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from ctape import Tape
from ctape.formats import import_files


def line(i: int, parent, with_key: bool = True) -> str:
    rec = {"type": "user", "uuid": f"u{i}", "sessionId": "s", "timestamp": "2026-01-01T00:00:00.000Z", "message": {"role": "user", "content": f"m{i}"}}
    if with_key:
        rec["parentUuid"] = parent
    return json.dumps(rec)


SHAPES = {
    "chain": lambda n: [line(i, f"u{i - 1}" if i else None) for i in range(n)],
    "two-cycles": lambda n: [line(i, f"u{i + 1}" if i % 2 == 0 else f"u{i - 1}") for i in range(n)],
    "reversed": lambda n: [line(i, f"u{i + 1}" if i + 1 < n else None) for i in range(n)],
    "no-parent": lambda n: [line(i, None, with_key=False) for i in range(n)],
    "star": lambda n: [line(i, "u0" if i else None) for i in range(n)],
}


def run(shape: str, n: int, tmp: str, rep: int) -> tuple[float, int]:
    path = os.path.join(tmp, f"{shape}.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(SHAPES[shape](n)) + "\n")
    tape = Tape.init(os.path.join(tmp, f"tape-{shape}-{rep}"))
    try:
        t = time.perf_counter()
        import_files(tape, "claude-code", [path], "s")
        took = time.perf_counter() - t
        return took, len(tape.session("s").refs().branches)
    finally:
        tape.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=16000)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--repeat", type=int, default=3, help="runs per shape, in rotating order; the best is shown")
    args = ap.parse_args()
    shapes = args.shapes.split(",")
    best: dict[str, tuple[float, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            for s in shapes[r % len(shapes):] + shapes[: r % len(shapes)]:
                took, branches = run(s, args.n, tmp, r)
                if s not in best or took < best[s][0]:
                    best[s] = (took, branches)
    results = {s: best[s] for s in shapes}
    base = results.get("chain", (None,))[0]
    for s, (took, branches) in results.items():
        ratio = f"{took / base:5.2f}x chain" if base else ""
        print(f"{s:12s} n={args.n:<8d} {took:8.2f} s  {ratio}  branches={branches}")


if __name__ == "__main__":
    main()
