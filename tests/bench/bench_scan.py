"""ctape scan on a large tape (issue 22: fast enough to run before every push).

Builds a tape of --mb megabytes of agent-like text (tool outputs of source code and logs,
some repeated, a few planted secrets) by batched appends, then times `scan` in this
process: the first scan (every entry read and matched), a second one (the scan cache:
nothing read again), and one after --grow more entries (what a push after a session grew
pays). Prints MB/s against a plain read of the same text with Python's `re` (one pattern,
the floor of any regex scanner in Python) in the same run.

Then the first scan in microseconds an entry, median of --repeat runs (the scan cache
deleted before each), on three tapes: this one, --entries small entries of agent-like
chat (remote_bench.py's tape: what a first push checks) and the real transcripts of
/work/shared/fixtures/transcripts; with --against REV also with ctape/ops/scan.py as it
was at git revision REV (loaded beside this one), and whether both find the same.

Usage: python tests/bench/bench_scan.py [--mb 1000] [--grow 1000] [--entries 50000] [--repeat 3] [--against REV]
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import statistics
import subprocess
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


SIBLINGS = ("detectors", "scan_settings")  # split out of scan.py (78e35a7): loaded from REV too when it has them


def load_at(rev: str):
    """ctape/ops/scan.py as it was at git revision `rev`, as a module beside this one; the
    modules it imports from its own folder that were split out of it (SIBLINGS) are taken
    from `rev` as well, so that a comparison never times today's detectors twice."""
    tag = rev.replace("~", "_").replace("^", "_")
    folder = tempfile.mkdtemp(prefix="ctape-scan-old-")

    def load(name: str):
        r = subprocess.run(["git", "show", f"{rev}:ctape/ops/{name}.py"], cwd=os.path.dirname(os.path.dirname(HERE)), capture_output=True)
        if r.returncode != 0:
            return None  # not at that revision: the code was still in scan.py
        path = os.path.join(folder, f"{name}_old.py")
        with open(path, "wb") as f:
            f.write(r.stdout)
        spec = importlib.util.spec_from_file_location(f"ctape.ops._{name}_at_{tag}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        return mod

    old = {n: m for n in SIBLINGS if (m := load(n)) is not None}
    today = {n: sys.modules.get(f"ctape.ops.{n}") for n in old}
    try:
        for n, m in old.items():  # what `from .detectors import ...` finds while the old scan.py loads
            sys.modules[f"ctape.ops.{n}"] = m
        mod = load("scan")
        if mod is None:
            raise SystemExit(f"{rev} has no ctape/ops/scan.py")
        return mod
    finally:
        for n, m in today.items():
            if m is None:
                sys.modules.pop(f"ctape.ops.{n}", None)
            else:
                sys.modules[f"ctape.ops.{n}"] = m


def first_scans(t: Tape, mod, repeat: int) -> tuple[float, int, list]:
    """(median CPU seconds of a first scan, entries, findings): the scan cache deleted before each."""
    times, r = [], None
    for _ in range(repeat):
        for p in glob.glob(os.path.join(os.environ["CTAPE_CACHE_DIR"], "**", "scan.sqlite*"), recursive=True):
            os.unlink(p)
        c0 = time.process_time()
        r = mod.scan(t)
        times.append(time.process_time() - c0)
    n = sum(1 for name in t.session_names() for _ in t.session(name).log())
    return statistics.median(times), n, sorted((f.hash, f.path, f.kind, f.preview) for f in r["findings"])


def compare(label: str, t: Tape, mods: list, repeat: int) -> None:
    rows = [(name, *first_scans(t, mod, repeat)) for name, mod in mods]
    line = f"{label:34}"
    for name, sec, n, _ in rows:
        line += f"  {name}: {sec / n * 1e6:7.1f} us/entry ({sec:.2f} s)"
    if len(rows) == 2:
        line += f"  {rows[0][1] / rows[1][1]:.1f}x faster; findings {'the same' if rows[0][3] == rows[1][3] else 'DIFFER'} ({len(rows[0][3])})"
    print(line)


def per_entry(a, tmp: str, first_tape: Tape) -> None:
    mods = [("now", scanmod)]
    if a.against:
        mods.insert(0, (a.against, load_at(a.against)))
    print(f"\nfirst scan, CPU per entry, median of {a.repeat}:")
    compare(f"tool outputs ({a.mb} MB)", first_tape, mods, a.repeat)
    sys.path.insert(0, HERE)
    import remote_bench

    remote_bench.build(os.path.join(tmp, "small"), a.entries, 20)
    t = Tape.open(os.path.join(tmp, "small"))
    compare(f"chat, {a.entries:,} small entries", t, mods, a.repeat)
    t.close()
    fx = os.path.join(tmp, "fx")
    Tape.init(fx).close()
    files = sorted(glob.glob("/work/shared/fixtures/transcripts/*/*.jsonl")) + sorted(glob.glob("/work/shared/fixtures/transcripts/*/*.traj"))
    for f in files:
        subprocess.run([sys.executable, "-m", "ctape", "--dir", fx, "import", f], capture_output=True, check=True)
    t = Tape.open(fx)
    compare(f"real transcripts ({len(files)} files)", t, mods, a.repeat)
    t.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=1000)
    ap.add_argument("--grow", type=int, default=1000)
    ap.add_argument("--entries", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--against", metavar="REV", help="also time scan.py as it was at this git revision")
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
        per_entry(a, tmp, t)
        t.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
