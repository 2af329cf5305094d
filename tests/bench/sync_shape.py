"""What one durable write costs on this disk, by the shape of the file it goes to: the
floor under every durable peer of tests/bench/bench.py, with no peer's own work.

    python tests/bench/sync_shape.py [--writes 1000] [--rounds 3] [--dir /tmp]

- append: 600 bytes appended to a file, then fdatasync (JSON Lines + fsync, and
  ctape's segments, which only grow).
- overwrite: 600 bytes written over bytes already in a file, then fdatasync. The
  file's size does not change, so on ext4 and XFS the sync writes the data alone,
  with no journal commit for the new size.
- sqlite: one INSERT of 600 bytes and its COMMIT (WAL, synchronous=FULL), as the
  sqlite peer writes. SQLite's write-ahead log grows until its checkpoint (about
  4 MB: 1,000 pages), then is written again from its start: from there on every
  commit is an overwrite. Shown apart: its first 500 commits, and its last 1,000
  (after the wrap).

The three take turns in each round (the machine is shared: quote the medians).
Prints one JSON line per kind, microseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writes", type=int, default=1000, help="writes per file per round (sqlite: 3 x this many commits)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the files go (the disk to measure)")
    args = ap.parse_args()
    data = b"x" * 600
    times: dict[str, list[float]] = {"append": [], "overwrite": [], "sqlite before its log wraps": [], "sqlite after its log wraps": []}
    folder = tempfile.mkdtemp(prefix="sync-shape-", dir=args.dir)
    try:
        for r in range(args.rounds):
            grow = os.open(os.path.join(folder, f"append-{r}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            same = os.open(os.path.join(folder, f"overwrite-{r}"), os.O_RDWR | os.O_CREAT, 0o600)
            os.write(same, b"\0" * (len(data) * args.writes))
            os.fsync(same)
            for i in range(args.writes):
                os.write(grow, data)
                t = time.perf_counter()
                os.fdatasync(grow)
                times["append"].append(time.perf_counter() - t)
                os.pwrite(same, data, i * len(data))
                t = time.perf_counter()
                os.fdatasync(same)
                times["overwrite"].append(time.perf_counter() - t)
            os.close(grow)
            os.close(same)
            db = sqlite3.connect(os.path.join(folder, f"sqlite-{r}.db"), isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("CREATE TABLE t(x BLOB)")
            commits = []
            for i in range(3 * args.writes):
                t = time.perf_counter()
                db.execute("BEGIN")
                db.execute("INSERT INTO t VALUES(?)", (data + i.to_bytes(4, "little"),))
                db.execute("COMMIT")
                commits.append(time.perf_counter() - t)
            db.close()
            times["sqlite before its log wraps"] += commits[:500]
            times["sqlite after its log wraps"] += commits[-args.writes :]
        for kind, ts in times.items():
            print(json.dumps({"kind": kind, "median_us": round(statistics.median(ts) * 1e6, 1), "n": len(ts)}))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
