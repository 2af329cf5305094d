"""`ctape diff` of two long histories (issue 25; SPEC section 11: hostile shapes, linear).

    python tests/bench/bench_hostile_diff.py                       # N = 1,000, 10,000, 100,000
    python tests/bench/bench_hostile_diff.py --sizes 1000,10000    # quicker
    python tests/bench/bench_hostile_diff.py --keep /tmp/hd        # keep the tapes; reuse them next time
    python tests/bench/bench_hostile_diff.py --old /tmp/old        # and the commands of another checkout
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

Printed per size: wall and CPU seconds (medians), and per 10x input the ratio of CPU
times (linear: about 10x; SPEC: 10x input <= 12x time). CPU is shown because a loaded
machine distorts wall time most; a command's CPU includes starting the interpreter.
"""

from __future__ import annotations

import argparse
import os
import resource
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


def cli(d: str, args: list[str], checkout: str | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `ctape` process (of another checkout's ctape when given)."""
    env = dict(os.environ, CTAPE_DIR=os.path.join(d, "tape"), CTAPE_CACHE_DIR=os.path.join(d, "cache"))
    if checkout:
        env["PYTHONPATH"] = checkout
    env.pop("CTAPE_SESSION", None)
    # compiled modules kept (outside the checkout), as an installed ctape has them: the
    # time is the command's, not that of compiling ctape again in every process
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(os.path.dirname(d), "pycache")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ctape", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=checkout or None)
    secs = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"ctape {' '.join(args)} failed: {p.stderr.decode()[-500:]}")
    return secs, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


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


def in_process(d: str, what: str) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, entries read) of one library call on a newly opened tape."""
    with Tape.open(os.path.join(d, "tape"), cache_dir=os.path.join(d, "cache")) as tape:
        t, c = time.perf_counter(), time.process_time()
        if what == "library, default":
            r = diff(tape, "h/main", "h/alt", limit=10)
            n = r.entries_read
        elif what == "library, full lists":
            r = diff(tape, "h/main", "h/alt")
            n = r.entries_read
        else:
            _, left, right = before(tape, tape.resolve("h/main"), tape.resolve("h/alt"))
            n = len(left) + len(right) + 1
        return time.perf_counter() - t, time.process_time() - c, n


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="entries per side, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR", help="build the tapes here and keep them (reused when already built)")
    ap.add_argument("--old", metavar="CHECKOUT", help="also run `diff` and `diff --json` of the ctape in this checkout (e.g. a git worktree of 5afe78f), once each")
    ap.add_argument("--before", action="store_true", help="also time the walk of ctape before issue 25 (once at 100,000 and more: it is slow)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    root = args.keep or tempfile.mkdtemp(prefix="ctape-bench-diff-")
    rows: dict[str, dict[int, tuple[float, float]]] = {}  # measure -> N -> (wall, CPU)
    reads: dict[str, dict[int, int]] = {}
    try:
        for n in sizes:
            d = os.path.join(root, f"n{n}")
            build(d, n)
            for name, cmd in COMMANDS.items():
                runs = [cli(d, cmd) for _ in range(args.repeats)]
                rows.setdefault(name, {})[n] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
                print(f"  N={n:,} {name}: {rows[name][n][0]:.3f} s wall, {rows[name][n][1]:.3f} s CPU", file=sys.stderr, flush=True)
            for name in ("diff", "diff --json") if args.old else ():
                label = f"{name} (old checkout)"
                rows.setdefault(label, {})[n] = cli(d, COMMANDS[name], args.old)
                print(f"  N={n:,} {label}: {rows[label][n][0]:.3f} s wall, {rows[label][n][1]:.3f} s CPU", file=sys.stderr, flush=True)
            kinds = ["library, default", "library, full lists"] + (["before (read_entry walk)"] if args.before else [])
            for what in kinds:
                runs = [in_process(d, what) for _ in range(1 if what.startswith("before") and n >= 100000 else args.repeats)]
                rows.setdefault(what, {})[n] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
                reads.setdefault(what, {})[n] = runs[0][2]
                print(f"  N={n:,} {what}: {rows[what][n][0]:.3f} s wall, {rows[what][n][1]:.3f} s CPU, {runs[0][2]:,} entries read", file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(table(rows, reads, sizes))
    return 0


def table(rows: dict, reads: dict, sizes: list[int]) -> str:
    """Wall and CPU seconds per size (CPU: what a busy machine distorts least; a command's
    CPU includes the interpreter's start), and the CPU ratio per 10x input."""
    tens = [(a, b) for a, b in zip(sizes, sizes[1:]) if b == 10 * a]
    head = ["N per side"] + [f"{n:,}" for n in sizes] + [f"CPU x per 10x ({a:,}->{b:,})" for a, b in tens]
    out = ["| " + " | ".join(["measure (wall / CPU)"] + head[1:]) + " |", "|" + "---|" * len(head)]
    for name, by in rows.items():
        cells = [f"{by[n][0]:.3f} / {by[n][1]:.3f} s" if n in by else "-" for n in sizes]
        ratios = [f"{by[b][1] / by[a][1]:.1f}x" if a in by and b in by else "-" for a, b in tens]
        out.append("| " + " | ".join([name] + cells + ratios) + " |")
    for name, by in reads.items():
        out.append("| " + " | ".join([f"{name}: entries read"] + [f"{by[n]:,}" if n in by else "-" for n in sizes] + ["" for _ in tens]) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
