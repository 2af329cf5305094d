"""`ctape diff` of two long histories (issue 25; SPEC section 11: hostile shapes, linear).

    python tests/bench/bench_hostile_diff.py                       # N = 1,000, 10,000, 100,000
    python tests/bench/bench_hostile_diff.py --sizes 1000,10000    # quicker
    python tests/bench/bench_hostile_diff.py --keep /tmp/hd        # keep the tapes; reuse them next time
    (run from a checkout with PYTHONPATH=. to measure that checkout)

The shape, for each N: one session whose `main` and `alt` branches share a prefix of 100
entries, then each gets N entries of its own, written by durable appends (one block and
one fdatasync per entry, as an agent writes them) with the generated coding-agent
workload (tests/bench/workload.py). Then, each as its own `ctape` process (as a user runs
it; the median of --repeats runs):

    diff           the default human form: the base, each side's count and its first 10
                   entries, the first diverging pair as a text diff
    diff --json    every entry of both sides, with their kinds (the contract's lists)
    diff --stat    each side's entries by kind and its bytes (reads every entry, and the
                   size of every large value)

and, in process (no interpreter start), the library call for the default form and for
the full lists, and with --before the walk ctape used before issue 25 (every entry of
both sides rebuilt with read_entry; at most 10,000 per side: it is the slow one).

Printed per size: seconds, and per 10x input the ratio of times (linear: about 10x; SPEC:
10x input <= 12x time).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import workload  # noqa: E402

from ctape import Tape  # noqa: E402
from ctape.ops.diff import diff  # noqa: E402

PREFIX = 100  # entries both branches share
TEMPLATE = 2000  # generated entries, cycled (generating costs more than appending)
COMMANDS = {
    "diff": ["diff", "main", "alt", "-s", "h"],
    "diff --json": ["diff", "main", "alt", "-s", "h", "--json"],
    "diff --stat": ["diff", "main", "alt", "-s", "h", "--stat"],
}


def build(d: str, n: int) -> None:
    """The shape of size n in d (tape/ and cache/), unless a finished one is there."""
    done = os.path.join(d, "built")
    if os.path.exists(done):
        return
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    entries = workload.generate_session(TEMPLATE, seed=7)
    t0 = time.perf_counter()
    tape = Tape.init(os.path.join(d, "tape"), cache_dir=os.path.join(d, "cache"))
    s = tape.session("h")
    for kind, payload, meta, delta in entries[:PREFIX]:
        s.append(kind, payload, meta=meta, delta=delta)
    s.checkout("main", new_branch="alt")
    for branch, offset in (("main", 0), ("alt", TEMPLATE // 2)):
        s.checkout(branch)
        for i in range(n):
            kind, payload, meta, delta = entries[(offset + i) % TEMPLATE]
            s.append(kind, payload, meta=meta, delta=delta)  # durable: one fdatasync each
            if (i + 1) % 20000 == 0:
                print(f"  {branch}: {i + 1:,} of {n:,} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    tape.close()
    print(f"  built N={n:,}: {2 * n + PREFIX:,} durable appends in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    open(done, "w").close()


def cli(d: str, args: list[str]) -> float:
    env = dict(os.environ, CTAPE_DIR=os.path.join(d, "tape"), CTAPE_CACHE_DIR=os.path.join(d, "cache"))
    env.pop("CTAPE_SESSION", None)
    # compiled modules kept (outside the checkout), as an installed ctape has them: the
    # time is the command's, not that of compiling ctape again in every process
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(os.path.dirname(d), "pycache")
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ctape", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    secs = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"ctape {' '.join(args)} failed: {p.stderr.decode()[-500:]}")
    return secs


def before(tape, h1: str, h2: str) -> tuple:
    """The walk of ctape before issue 25 (ops/diff.py at 5afe78f): every entry read whole."""
    left, right = [], []
    a, b = tape.read_entry(h1), tape.read_entry(h2)
    while a is not None and b is not None and a.seq > b.seq:
        left.append(a.hash)
        a = tape.read_entry(a.parent) if a.parent else None
    while a is not None and b is not None and b.seq > a.seq:
        right.append(b.hash)
        b = tape.read_entry(b.parent) if b.parent else None
    while a is not None and b is not None and a.hash != b.hash:
        left.append(a.hash)
        right.append(b.hash)
        a = tape.read_entry(a.parent) if a.parent else None
        b = tape.read_entry(b.parent) if b.parent else None
    return (a.hash if a is not None else None), left[::-1], right[::-1]


def in_process(d: str, what: str) -> tuple[float, int]:
    """(seconds, entries read) of one library call on a newly opened tape."""
    with Tape.open(os.path.join(d, "tape"), cache_dir=os.path.join(d, "cache")) as tape:
        t = time.perf_counter()
        if what == "library, default":
            r = diff(tape, "h/main", "h/alt", limit=10)
            n = r.entries_read
        elif what == "library, full lists":
            r = diff(tape, "h/main", "h/alt")
            n = r.entries_read
        else:
            _, left, right = before(tape, tape.resolve("h/main"), tape.resolve("h/alt"))
            n = len(left) + len(right) + 1
        return time.perf_counter() - t, n


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="entries per side, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR", help="build the tapes here and keep them (reused when already built)")
    ap.add_argument("--before", action="store_true", help="also time the walk of ctape before issue 25 (sizes <= 10,000)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    root = args.keep or tempfile.mkdtemp(prefix="ctape-bench-diff-")
    rows: dict[str, dict[int, float]] = {}
    reads: dict[str, dict[int, int]] = {}
    try:
        for n in sizes:
            d = os.path.join(root, f"n{n}")
            build(d, n)
            for name, cmd in COMMANDS.items():
                rows.setdefault(name, {})[n] = statistics.median(cli(d, cmd) for _ in range(args.repeats))
                print(f"  N={n:,} {name}: {rows[name][n]:.3f} s", file=sys.stderr, flush=True)
            kinds = ["library, default", "library, full lists"] + (["before (read_entry walk)"] if args.before and n <= 10000 else [])
            for what in kinds:
                runs = [in_process(d, what) for _ in range(args.repeats)]
                rows.setdefault(what, {})[n] = statistics.median(r[0] for r in runs)
                reads.setdefault(what, {})[n] = runs[0][1]
                print(f"  N={n:,} {what}: {rows[what][n]:.3f} s, {runs[0][1]:,} entries read", file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(table(rows, reads, sizes))
    return 0


def table(rows: dict, reads: dict, sizes: list[int]) -> str:
    head = ["N per side"] + [f"{n:,}" for n in sizes] + [f"x per 10x ({a:,}->{b:,})" for a, b in zip(sizes, sizes[1:]) if b == 10 * a]
    out = ["| " + " | ".join(["measure"] + head[1:]) + " |", "|" + "---|" * len(head)]
    for name, by in rows.items():
        cells = [f"{by[n]:.3f} s" if n in by else "-" for n in sizes]
        ratios = [f"{by[b] / by[a]:.1f}x" if a in by and b in by else "-" for a, b in zip(sizes, sizes[1:]) if b == 10 * a]
        out.append("| " + " | ".join([name] + cells + ratios) + " |")
    for name, by in reads.items():
        out.append("| " + " | ".join([f"{name}: entries read"] + [f"{by[n]:,}" if n in by else "-" for n in sizes] + ["" for a, b in zip(sizes, sizes[1:]) if b == 10 * a]) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
