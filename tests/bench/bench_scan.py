"""ctape scan on a large tape (issue 22: fast enough to run before every push).

Builds a tape of --mb megabytes of agent-like text (tool outputs of source code and logs,
some repeated, a few planted secrets) by batched appends, then times `scan` in this
process: the first scan (every entry read and matched), a second one (the scan cache:
nothing read again), and one after --grow more entries (what a push after a session grew
pays). Prints MB/s against a plain read of the same text with Python's `re` (one pattern,
the floor of any regex scanner in Python) in the same run.

Usage: python tests/bench/bench_scan.py [--mb 1000] [--grow 1000]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from ctape import Tape  # noqa: E402
from ctape.ops import scan as scanmod  # noqa: E402

WORDS = "def class return import self value config token error request response path file line test assert".split()


def text(rnd: random.Random, n: int) -> str:
    lines = []
    while sum(map(len, lines)) < n:
        lines.append("    " * rnd.randint(0, 3) + " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 12))))
    return "\n".join(lines)


def build(path: str, mb: int, seed: int = 3) -> tuple[Tape, int]:
    rnd = random.Random(seed)
    pool = [text(rnd, rnd.randint(2_000, 40_000)) for _ in range(300)]
    t = Tape.init(path)
    total, n, i = 0, 0, 0
    while total < mb * 1_000_000:
        s = t.session(f"s{i % 20}")
        with t.batch():
            for _ in range(200):
                out = rnd.choice(pool) if rnd.random() < 0.7 else text(rnd, rnd.randint(500, 8_000))
                if rnd.random() < 0.001:
                    out += f"\nGITHUB_TOKEN=ghp_{''.join(rnd.choice('abcdefghijklmnopqrstuvwxyz0123456789') for _ in range(36))}"
                s.append("tool_call", {"call_id": f"c{n}", "name": "bash", "arguments": {"command": "cat src/app.py"}})
                s.append("tool_result", {"call_id": f"c{n}", "output": out})
                total += len(out)
                n += 2
        i += 1
    return t, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=1000)
    ap.add_argument("--grow", type=int, default=1000)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ctape-scan-bench-")
    os.environ["CTAPE_CACHE_DIR"] = os.path.join(tmp, "cache")
    try:
        t0 = time.perf_counter()
        t, n = build(os.path.join(tmp, "t"), a.mb)
        print(f"tape: {n:,} entries, {a.mb} MB of text, built in {time.perf_counter() - t0:.0f} s")
        c0 = time.process_time()
        r = scanmod.scan(t)
        first = time.process_time() - c0
        print(f"first scan: {first:.1f} s CPU, {r['bytes'] / 1e6:.0f} MB looked at, {r['bytes'] / 1e6 / first:.1f} MB/s, {len(r['findings'])} findings")
        c0 = time.process_time()
        r = scanmod.scan(t)
        second = time.process_time() - c0
        print(f"second scan (cache): {second:.2f} s CPU, {r['cached']:,} entries from the cache ({second / max(1, r['cached']) * 1e6:.1f} us each)")
        s = t.session("s0")
        with t.batch():
            for k in range(a.grow):
                s.append("user", {"content": f"more work {k}: " + " ".join(WORDS)})
        c0 = time.process_time()
        r = scanmod.scan(t, ["s0"])
        grown = time.process_time() - c0
        print(f"after {a.grow} new entries in one session, scan of that session: {grown:.2f} s CPU ({r['cached']:,} cached)")
        sample = "\n".join(text(random.Random(9), 50_000) for _ in range(200)).encode()
        rx = re.compile(rb"ghp_[A-Za-z0-9]{36}")
        c0 = time.process_time()
        rx.findall(sample)
        floor = len(sample) / 1e6 / (time.process_time() - c0)
        print(f"floor: one regex over bytes in Python: {floor:.0f} MB/s; scan's first pass is {r and first and (a.mb / first) / floor:.3f} x that")
        t.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
