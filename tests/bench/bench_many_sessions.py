"""Many sessions written by one process (issue 25, a hostile shape): the cost of one more
session as the tape grows, against the peers in the same run, and under a low descriptor
limit.

    python tests/bench/bench_many_sessions.py                  # 3,000 sessions, fifths
    python tests/bench/bench_many_sessions.py --sessions 10000
    python tests/bench/bench_many_sessions.py --against /tmp/old   # also another checkout's ctape

One process opens a tape and writes one new session after another: a batch of one entry
each (two appends to every tenth), as an agent server, `ctape import` of a folder of
transcripts or `ctape watch` of every Claude Code session do. The peers store the same
entries: JSON Lines with one file per session (write + fdatasync), and SQLite (one table,
one commit per entry, WAL, synchronous=FULL). Printed: milliseconds of CPU per session
for each fifth of the run (flat is linear; growing is quadratic in all), and each fifth's
ratio to the first. The syncs are real, so wall time is shown too; CPU is what the
shape changes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import sys
import time

from fifths import run_beside


ENTRY = ("user", {"content": "Fix the failing test in src/core/session.py and run the suite again."}, {"model": "m", "tokens": 31}, None)


def worker(peer: str, n: int, d: str, src: str) -> list[tuple[float, float]]:
    """(cpu s, wall s) per fifth of n sessions."""
    sys.path.insert(0, src)
    fifths, step = [], max(1, n // 5)
    if peer == "ctape":
        from ctape import Tape

        tape = Tape.init(os.path.join(d, "tape"), cache_dir=os.path.join(d, "cache"))

        def one(i):
            s = tape.session(f"s{i:06d}")
            with tape.batch():
                s.append(*ENTRY)
                if i % 10 == 0:
                    s.append(*ENTRY)
    elif peer == "jsonl-fsync":
        def one(i):
            fd = os.open(os.path.join(d, f"s{i:06d}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            for _ in range(2 if i % 10 == 0 else 1):
                kind, payload, meta, delta = ENTRY
                os.write(fd, (json.dumps({"session": f"s{i:06d}", "kind": kind, "payload": payload, "meta": meta, "delta": delta}) + "\n").encode())
            os.fdatasync(fd)
            os.close(fd)
    else:
        db = sqlite3.connect(os.path.join(d, "h.sqlite"), isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE entries(id INTEGER PRIMARY KEY, session TEXT, kind TEXT, payload TEXT, meta TEXT)")
        db.execute("CREATE INDEX by_session ON entries(session)")

        def one(i):
            kind, payload, meta, _ = ENTRY
            db.execute("BEGIN")
            for _ in range(2 if i % 10 == 0 else 1):
                db.execute("INSERT INTO entries(session, kind, payload, meta) VALUES(?,?,?,?)", (f"s{i:06d}", kind, json.dumps(payload), json.dumps(meta)))
            db.execute("COMMIT")
    c, w = time.process_time(), time.perf_counter()
    for i in range(n):
        one(i)
        if (i + 1) % step == 0 and len(fifths) < 5:
            fifths.append(((time.process_time() - c) / step, (time.perf_counter() - w) / step))
            c, w = time.process_time(), time.perf_counter()
    return fifths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=3000)
    ap.add_argument("--against", help="another checkout of ctape, run beside this one")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        peer, n, d, src = a.worker
        print(json.dumps(worker(peer, int(n), d, src)))
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"{a.sessions:,} sessions, one batch each; ms per session by fifth of the run (ulimit -n {soft})")
    run_beside(__file__, a.sessions, a.against, "ctape-many-", 20, lambda f: f"{f[0] * 1e3:.2f} cpu {f[1] * 1e3:.2f} wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
