"""Import speed of Claude Code and Codex transcripts, against reading and parsing them (issue 25).

    python tests/bench/bench_import_speed.py                  # 100 MB of each format, 3 runs
    python tests/bench/bench_import_speed.py --mb 30 --repeat 5
    python tests/bench/bench_import_speed.py --against /tmp/old-checkout   # the same files, another checkout

The transcripts replay the real fixtures' records (tests/fixtures/transcripts: their mix of
record types and sizes, about 3.5 KB a line for Claude Code, 0.4-2 KB for Codex) with fresh
ids, as one long session per format. For each checkout, in a process of its own per run:

- import:   `import_files` of the file into a new tape (CPU seconds of the process);
- again:    the same import once more, nothing new (CPU and wall);
- read:     reading the file's bytes (the floor of "again");
- parse:    `json.loads` of every line (the floor of any importer).

Printed: medians of the runs, MB/s, import as a fraction of the parse speed, and "again"
as a multiple of the read. CPU seconds are what a loaded machine distorts least.
Target (SPEC 11, issue 25): Claude Code import >= 25 MB/s; "again" close to a read.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "transcripts")


def replay(path: str, fmt: str, mb: float, seed: int = 1) -> None:
    """One session of `fmt` of about `mb` MB: the fixtures' records again and again."""
    rng = random.Random(seed)
    d = os.path.join(FIXTURES, "claude-code" if fmt == "claude-code" else "codex-rollout")
    templates = []
    for name in sorted(os.listdir(d)):
        if name.endswith(".jsonl") and "agent" not in name:
            with open(os.path.join(d, name), "rb") as f:
                templates.append([json.loads(x) for x in f if x.strip()])
    sid = str(uuid.UUID(int=rng.getrandbits(128)))
    total, last, k = 0, None, 0
    with open(path, "w") as f:
        while total < mb * 1e6:
            k += 1
            ids: dict = {}
            for r in templates[k % len(templates)]:
                r = dict(r)
                if fmt == "claude-code":
                    for key in ("uuid", "parentUuid", "leafUuid", "logicalParentUuid"):
                        if isinstance(r.get(key), str):
                            r[key] = ids.setdefault(r[key], str(uuid.UUID(int=rng.getrandbits(128))))
                    if "parentUuid" in r and r["parentUuid"] is None and last and r.get("type") in ("user", "assistant"):
                        r["parentUuid"] = last
                    if "sessionId" in r:
                        r["sessionId"] = sid
                    if isinstance(r.get("uuid"), str):
                        last = r["uuid"]
                elif r.get("type") == "session_meta":
                    if total:
                        continue
                    r = json.loads(json.dumps(r))
                    r["payload"]["id"] = sid
                line = json.dumps(r, ensure_ascii=False) + "\n"
                f.write(line)
                total += len(line.encode())


RUN = r"""
import json, os, sys, time
from ctape import Tape
from ctape.formats import import_files
fmt, path, work = sys.argv[1:4]
out = {}
t = Tape.init(os.path.join(work, "tape"))
c0 = time.process_time()
import_files(t, fmt, [path], "s")
out["import"] = time.process_time() - c0
c0, w0 = time.process_time(), time.perf_counter()
lines = import_files(t, fmt, [path], "s")
out["again"], out["again_wall"] = time.process_time() - c0, time.perf_counter() - w0
assert "nothing new" in lines[0], lines
t.close()
c0, w0 = time.process_time(), time.perf_counter()
with open(path, "rb") as f:
    while f.read(8 << 20):
        pass
out["read"], out["read_wall"] = time.process_time() - c0, time.perf_counter() - w0
c0 = time.process_time()
with open(path, "rb") as f:
    for line in f:
        json.loads(line)
out["parse"] = time.process_time() - c0
print(json.dumps(out))
"""


def measure(checkout: str, fmt: str, path: str, work: str) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, PYTHONPATH=checkout, CTAPE_CACHE_DIR=os.path.join(work, "cache"))
    p = subprocess.run([sys.executable, "-c", RUN, fmt, path, work], env=env, capture_output=True, text=True, cwd=work)
    if p.returncode != 0:
        raise SystemExit(f"{checkout}: {fmt}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=100, help="size of each transcript (default 100)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per checkout and format; medians are shown")
    ap.add_argument("--against", help="another checkout to measure on the same files, in the same run")
    ap.add_argument("--formats", default="claude-code,codex")
    a = ap.parse_args()
    checkouts = [("this", ROOT)] + ([("against", os.path.abspath(a.against))] if a.against else [])
    tmp = tempfile.mkdtemp(prefix="bench_import_speed_")
    try:
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        for fmt in a.formats.split(","):
            path = os.path.join(tmp, f"{fmt}.jsonl")
            replay(path, fmt, a.mb)
            mb = os.path.getsize(path) / 1e6
            with open(path, "rb") as f:
                n = sum(1 for _ in f)
            runs: dict = {name: [] for name, _ in checkouts}
            for r in range(a.repeat):  # the checkouts take turns
                for name, checkout in (checkouts if r % 2 == 0 else checkouts[::-1]):
                    runs[name].append(measure(checkout, fmt, path, os.path.join(tmp, "work")))
            print(f"\n{fmt}: {mb:.1f} MB, {n:,} lines ({mb * 1e6 / n:,.0f} bytes a line), medians of {a.repeat}")
            for name, checkout in checkouts:
                m = {k: statistics.median(x[k] for x in runs[name]) for k in runs[name][0]}
                print(f"  {name:8s} import {mb / m['import']:5.1f} MB/s CPU ({m['import']:.2f} s; {m['parse'] / m['import']:.2f} x the speed of json.loads "
                      f"of every line, {mb / m['parse']:.0f} MB/s)")
                print(f"  {name:8s} again  {m['again']:.3f} s CPU, {m['again_wall']:.3f} s wall, nothing new "
                      f"({m['again'] / max(m['read'], 1e-6):.1f} x the CPU of reading the file, {m['read']:.3f} s; "
                      f"{mb / m['again']:.0f} MB/s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
