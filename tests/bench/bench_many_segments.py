"""Many sealed segments in one session (issue 25, a hostile shape): the cost of an append as
a session's file count grows, against the peers in the same run.

    python tests/bench/bench_many_segments.py                  # 3,000 appends, fifths
    python tests/bench/bench_many_segments.py --appends 6000
    python tests/bench/bench_many_segments.py --against /tmp/old   # also another checkout's ctape
    python tests/bench/bench_many_segments.py --reads 7 --against /tmp/old   # status and log on the shape

`push --follow` reads a live segment as any copy does; the writer then seals it and its
next append starts a new one, so until a `compact` a session holds a file per push. Here
every append is followed by a read of the newest segment (the worst case: a push between
any two appends, which also makes a repeat of what the read may lack), so a session of
N appends holds ~1.5 N files. The peers store the same entries and are read the same way
after each append: JSON Lines in one file (write + fdatasync), and SQLite (WAL,
synchronous=FULL, one commit per entry). Printed: ms of CPU per append for each fifth of
the run (flat is linear in all; growing is a cost per file of the session), each fifth's
file count for ctape, and the last fifth's ratio to the first. Only the appends are timed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Optional

from fifths import ROOT, run_beside


PAYLOAD = {"content": "Fix the failing test in src/core/session.py and run the suite again."}


def worker(peer: str, n: int, d: str, src: str) -> list[tuple[float, float, int]]:
    """(cpu s, wall s, files) per append, by fifth of n appends."""
    sys.path.insert(0, src)
    if peer == "ctape":
        from ctape import Tape

        tape = Tape.init(os.path.join(d, "tape"), cache_dir=os.path.join(d, "cache"))
        s = tape.session("s")
        folder = os.path.join(d, "tape", "sessions", "s")

        def one(i):
            s.append("user", {**PAYLOAD, "n": i})

        def read():
            newest = max(x for x in os.listdir(folder) if x.endswith(".seg"))
            with open(os.path.join(folder, newest), "rb") as f:
                f.read()

        def files():
            return len(os.listdir(folder))
    elif peer == "jsonl-fsync":
        path = os.path.join(d, "s.jsonl")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

        def one(i):
            os.write(fd, (json.dumps({"session": "s", "kind": "user", "payload": {**PAYLOAD, "n": i}}) + "\n").encode())
            os.fdatasync(fd)

        def read():
            with open(path, "rb") as f:
                f.read()

        def files():
            return 1
    else:
        db = sqlite3.connect(os.path.join(d, "h.sqlite"), isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE entries(id INTEGER PRIMARY KEY, session TEXT, kind TEXT, payload TEXT)")

        def one(i):
            db.execute("INSERT INTO entries(session, kind, payload) VALUES(?,?,?)", ("s", "user", json.dumps({**PAYLOAD, "n": i})))

        def read():
            db.execute("SELECT max(id) FROM entries").fetchone()

        def files():
            return 1
    fifths, step, cpu, wall = [], max(1, n // 5), 0.0, 0.0
    for i in range(n):
        c, w = time.process_time(), time.perf_counter()
        one(i)
        cpu += time.process_time() - c
        wall += time.perf_counter() - w
        read()
        if (i + 1) % step == 0 and len(fifths) < 5:
            fifths.append((cpu / step, wall / step, files()))
            cpu = wall = 0.0
    return fifths


def _build(src: str, d: str, n: int, read: str) -> None:
    """A session of n appends, after each a read: `newest` reads the newest segment (so the
    repeats a writer makes are never read: the worst case), `push` every file that is new
    or grew since the last read, as a push does (`ctape push --follow` after every append);
    `none` reads nothing (one segment)."""
    code = ("import os, sys; sys.path.insert(0, %r); from ctape import Tape\n"
            "t = Tape.init(%r, cache_dir=%r); s = t.session('s'); f = os.path.join(%r, 'sessions', 's'); seen = {}\n"
            "for i in range(%d):\n"
            "    s.append('user', {'content': 'Fix the failing test', 'n': i})\n"
            "    if %r == 'newest':\n"
            "        open(os.path.join(f, max(x for x in os.listdir(f) if x.endswith('.seg'))), 'rb').read()\n"
            "    elif %r == 'push':\n"
            "        for x in os.listdir(f):\n"
            "            size = os.path.getsize(os.path.join(f, x))\n"
            "            if seen.get(x) != size:\n"
            "                open(os.path.join(f, x), 'rb').read(); seen[x] = size\n"
            "t.close()\n") % (src, os.path.join(d, "tape"), os.path.join(d, "cache"), os.path.join(d, "tape"), n, read, read)
    subprocess.run([sys.executable, "-c", code], check=True)


def reads(n: int, against: Optional[str], repeats: int) -> None:
    """`status` and `log -n 20` as commands on a session of n appends in ~1.5 n sealed
    segments (read as push does, or only the newest), against the same session in one
    segment; each checkout in turn, medians."""
    checkouts = [("ctape", ROOT)] + ([(f"ctape ({against})", against)] if against else [])
    shapes = {"push": "sealed, push reads", "newest": "sealed, newest read", "none": "one segment"}
    tapes = {shape: tempfile.mkdtemp(prefix="ctape-segs-") for shape in shapes}
    try:
        for shape, d in tapes.items():
            _build(ROOT, d, n, shape)
        files = {shape: len(os.listdir(os.path.join(d, "tape", "sessions", "s"))) for shape, d in tapes.items()}
        times: dict[tuple, list[float]] = {}
        for _ in range(repeats):
            for shape, d in tapes.items():
                for label, src in checkouts:
                    for cmd in (["status"], ["log", "-n", "20"]):
                        env = {**os.environ, "PYTHONPATH": src, "CTAPE_CACHE_DIR": os.path.join(d, "cache"),
                               "PYTHONPYCACHEPREFIX": os.path.join(tapes["none"], "pycache")}  # not compiled each time
                        env.pop("PYTHONDONTWRITEBYTECODE", None)
                        t0 = time.perf_counter()
                        subprocess.run([sys.executable, "-m", "ctape", "--dir", os.path.join(d, "tape"), *cmd], env=env,
                                       cwd=d, check=True, stdout=subprocess.DEVNULL)  # cwd: not this checkout's ctape
                        times.setdefault((label, shape, " ".join(cmd)), []).append(time.perf_counter() - t0)
        print(f"commands on a session of {n:,} appends; seconds, median of {repeats}; files: "
              + ", ".join(f"{files[k]:,} {v}" for k, v in shapes.items()))
        print(f"{'':<28}{'':<12}" + "".join(f"{v:>22}" for v in shapes.values()) + f"{'cost of the shape':>22}")
        for label, _ in checkouts:
            for cmd in ("status", "log -n 20"):
                m = {shape: statistics.median(times[(label, shape, cmd)]) for shape in shapes}
                costs = " / ".join(f"{m[k] - m['none']:+.3f}" for k in ("push", "newest"))
                print(f"{label:<28}{cmd:<12}" + "".join(f"{m[k]:>22.3f}" for k in shapes) + f"{costs:>22}")
    finally:
        for d in tapes.values():
            shutil.rmtree(d, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--appends", type=int, default=3000)
    ap.add_argument("--against", help="another checkout of ctape, run beside this one")
    ap.add_argument("--reads", type=int, metavar="REPEATS", help="time `status` and `log -n 20` on the shape instead")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.reads:
        reads(a.appends, a.against, a.reads)
        return 0
    if a.worker:
        peer, n, d, src = a.worker
        print(json.dumps(worker(peer, int(n), d, src)))
        return 0
    print(f"{a.appends:,} appends to one session, each followed by a read; ms per append by fifth of the run")
    run_beside(__file__, a.appends, a.against, "ctape-segs-", 32, lambda f: f"{f[0] * 1e3:.2f} cpu {f[1] * 1e3:.2f} wall ({f[2]:,} f)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
