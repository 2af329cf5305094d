"""Hostile shapes for the reading commands (issue 25; SPEC section 11), each against an
ordinary session of the same size in the same run.

    python tests/bench/bench_hostile_log.py                 # 3,000 / 30,000 (roots); 200 / 2,000 (branches)
    python tests/bench/bench_hostile_log.py --scale 10      # 30,000 / 300,000; 2,000 / 20,000 (the issue's sizes)
    python tests/bench/bench_hostile_log.py --against /tmp/old   # also time another checkout's commands
    python tests/bench/bench_hostile_log.py --profile status:roots
    (the commands run from this checkout, or --against's; tapes are built by this one)

Shapes:

    chain     an ordinary session: a Claude Code transcript whose lines each name the line
              before as parentUuid (tests/bench/bench_import_shapes.py "chain"); the peer
    roots     the same lines with "parentUuid": null on every one: N roots, each a branch
    star      every line's parent is line 1 (bench_import_shapes.py "star"): N - 1 forks
    forks     built with the Python API: a main line of N entries and, off every entry, a
              branch of 2 entries (N branches, 3N entries)

Each command (`status`, `log -n 20`, `log --graph`) runs as its own `ctape` process, as
a user runs it, a few times: the first run after the import (with the index cache the
import left) is shown apart as "cold", then the median of --repeat more as "warm". For each shape the table
gives seconds at the small and the large size and their ratio per 10x input: linear is
about 10x (SPEC: 10x input <= 12x time), and the `status`/`log -n 20` target is < 1 s
whatever the shape.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
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

from bench_import_shapes import SHAPES, line  # noqa: E402

from ctape import Tape  # noqa: E402
from ctape.formats import import_files  # noqa: E402

IMPORTED = {
    "chain": SHAPES["chain"],
    "roots": lambda n: [line(i, None) for i in range(n)],
    "star": SHAPES["star"],
}
COMMANDS = {
    "status": ["status", "-s", "s"],
    "log-n20": ["log", "-n", "20", "-s", "s"],
    "graph": ["log", "--graph", "--no-pager", "-s", "s"],
}
SIZES = {"chain": 3000, "roots": 3000, "star": 200, "forks": 200}


def build(shape: str, n: int, path: str) -> None:
    tape = Tape.init(path)
    try:
        if shape == "forks":
            s = tape.session("s")
            with tape.batch():
                for i in range(n):
                    h = s.append("user", {"content": f"main {i}"}).hash
                    s.checkout(h, new_branch=f"b{i}")
                    s.append("assistant", {"content": f"fork {i} a"})
                    s.append("user", {"content": f"fork {i} b"})
                    s.checkout("main")
            return
        src = path + ".jsonl"
        with open(src, "w") as f:
            f.write("\n".join(IMPORTED[shape](n)) + "\n")
        import_files(tape, "claude-code", [src], "s")
        os.unlink(src)
    finally:
        tape.close()


def run_cli(path: str, cmd: list[str], code: str = ROOT) -> float:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [code, os.environ.get("PYTHONPATH")])))
    t = time.perf_counter()
    # cwd: not a checkout (`python -m` puts the working directory before PYTHONPATH)
    subprocess.run([sys.executable, "-m", "ctape", "--dir", path, *cmd], check=True, stdout=subprocess.DEVNULL, env=env, cwd=os.path.dirname(path))
    return time.perf_counter() - t


def measure(path: str, repeat: int, code: str = ROOT) -> dict[str, tuple[float, float]]:
    """command -> (first run, median of the next `repeat`)."""
    out = {}
    for name, cmd in COMMANDS.items():
        first = run_cli(path, cmd, code)
        out[name] = (first, statistics.median(run_cli(path, cmd, code) for _ in range(repeat)))
    return out


def profile(path: str, cmd: list[str]) -> None:
    from ctape.cli import main

    pr = cProfile.Profile()
    pr.enable()
    try:
        main.main(["--dir", path, *cmd], standalone_mode=False)
    finally:
        pr.disable()
    pstats.Stats(pr, stream=sys.stderr).sort_stats("cumulative").print_stats(35)


def growth(small: float, large: float, floor: float) -> str:
    """large / small once the start-up both pay is taken off (a guess below the noise: '-')."""
    a, b = small - floor, large - floor
    return f"{b / a:.1f}" if a > 0.005 and b > 0 else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=int, default=1, help="multiply the sizes (10: the issue's 300,000 roots and 20,000 branches)")
    ap.add_argument("--shapes", default="chain,roots,star,forks")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", metavar="COMMAND:SHAPE", help="profile one command on the large size of one shape instead")
    ap.add_argument("--against", metavar="CHECKOUT", help="also run the commands from this checkout (e.g. a git worktree of an older commit)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("CTAPE_CACHE_DIR", os.path.join(tmp, "cache"))
        if args.profile:
            cmd, shape = args.profile.split(":")
            path = os.path.join(tmp, shape)
            build(shape, SIZES[shape] * args.scale * 10, path)
            profile(path, COMMANDS[cmd])
            return
        codes = {"this": ROOT, **({"against": os.path.abspath(args.against)} if args.against else {})}
        base = os.path.join(tmp, "one")
        build("chain", 1, base)  # with the default cache: each checkout's first floor run warms its own
        rows = {}
        for shape in args.shapes.split(","):
            for n in (SIZES[shape] * args.scale, SIZES[shape] * args.scale * 10):
                path = os.path.join(tmp, f"{shape}-{n}")
                built = os.path.join(tmp, f"cache-{shape}-{n}")
                os.environ["CTAPE_CACHE_DIR"] = built
                t = time.perf_counter()
                build(shape, n, path)
                print(f"built {shape} n={n} in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
                for who, code in codes.items():
                    # each checkout reads with a copy of the index cache the import left: its
                    # first run is the first command after the import, for each alike
                    os.environ["CTAPE_CACHE_DIR"] = os.path.join(tmp, "cache-" + who)
                    shutil.rmtree(os.environ["CTAPE_CACHE_DIR"], ignore_errors=True)
                    shutil.copytree(built, os.environ["CTAPE_CACHE_DIR"])
                    rows[who, shape, n] = measure(path, args.repeat, code)
                shutil.rmtree(built)
        for who, code in codes.items():
            os.environ["CTAPE_CACHE_DIR"] = os.path.join(tmp, "cache-" + who)
            floor = measure(base, args.repeat, code)  # what a command costs on a 1-entry session: start-up
            print(f"\n{who}: {code}")
            print(f"{'shape':6s} {'command':8s} {'n':>8s} {'cold s':>8s} {'warm s':>8s} {'n':>8s} {'cold s':>8s} {'warm s':>8s} {'x per 10x':>9s}")
            for shape in args.shapes.split(","):
                small, large = SIZES[shape] * args.scale, SIZES[shape] * args.scale * 10
                for cmd in COMMANDS:
                    (c1, w1), (c2, w2) = rows[who, shape, small][cmd], rows[who, shape, large][cmd]
                    print(f"{shape:6s} {cmd:8s} {small:8d} {c1:8.3f} {w1:8.3f} {large:8d} {c2:8.3f} {w2:8.3f} {growth(w1, w2, floor[cmd][1]):>8s}x")
            print("(x per 10x: warm times less the same command on a 1-entry session, " + ", ".join(f"{c} {floor[c][1]:.3f} s" for c in COMMANDS) + ")")


if __name__ == "__main__":
    main()
