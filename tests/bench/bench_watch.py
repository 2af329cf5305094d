"""Benchmark of `ctape watch` on a generated history of realistic shape.

    PYTHONPATH=. python tests/bench/bench_watch.py --mb 1024 [--keep DIR]

The history is made from the real transcripts in tests/fixtures/transcripts: each
generated session replays the records of one real file (so the mix of record types is
theirs) with fresh ids, and with the things that make real histories large:

- repeated file reads: tool outputs are drawn from a pool of files, so the same content
  comes back in many sessions (and its structured copy in Claude Code's toolUseResult);
- /compact: Codex sessions get `compacted` records whose replacement_history re-appends
  the conversation so far; Claude Code sessions get a compact_boundary and a summary;
- base64 screenshots (incompressible), some sent again later in the session.

About a fifth of the Codex rollouts are compressed to `.jsonl.zst`, as Codex does with
idle sessions. Printed: source size, `zstd -3` of each file, the first `--once` pass
(throughput), tape size, a `--once` pass with nothing new at this size and at a tenth of
it with the same number of files (it should cost about the same), and a pass after one
line was appended to every file. Everything runs in subprocesses (`python -m ctape`).

    PYTHONPATH=. python tests/bench/bench_watch.py --one 1000 [--against CHECKOUT] [--repeat 3]

measures one large Claude Code transcript instead (issue 25: 1 GB peaked at 4.4 GB): peak
RSS of `watch --once` of it (resource.getrusage of a child process), its CPU and MB/s,
beside `ctape import` of the same file, against reading and JSON-parsing the file in the
same run; with --against, another checkout on the same file (the checkouts take turns;
medians of --repeat runs).
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "transcripts")
WORDS = ("def return self import class for in if else while with open read write value key item list dict "
         "error test assert path file line data json parse token model tool call result output input "
         "session entry hash parent branch commit tape store index segment block record").split()


def load(fmt_dir: str) -> list[list[dict]]:
    out = []
    d = os.path.join(FIXTURES, fmt_dir)
    for name in sorted(os.listdir(d)):
        if name.endswith(".jsonl"):
            with open(os.path.join(d, name), "rb") as f:
                recs = [json.loads(line) for line in f if line.strip()]
            if len(recs) > 15:
                out.append(recs)
    return out


def source_file(rng: random.Random, i: int) -> str:
    lines = []
    for n in range(rng.randint(40, 900)):
        indent = "    " * rng.randint(0, 3)
        lines.append(indent + " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12))) + f"  # {i}.{n}")
    return "\n".join(lines)


def screenshot(rng: random.Random) -> str:
    return base64.b64encode(rng.randbytes(rng.randint(60_000, 300_000))).decode()


class Gen:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.files = [source_file(self.rng, i) for i in range(300)]
        self.shots = [screenshot(self.rng) for i in range(40)]
        self.cc = load("claude-code")
        self.cx = load("codex-rollout")

    def file(self) -> str:
        # a few files are read very often (a Zipf-like pick)
        return self.files[min(len(self.files) - 1, int(self.rng.paretovariate(1.2)) - 1)]

    def new_shot(self) -> str:
        if self.rng.random() < 0.3:
            return self.rng.choice(self.shots)
        return screenshot(self.rng)

    # -- claude code ---------------------------------------------------------------------

    def claude(self, sid: str) -> list[dict]:
        rng = self.rng
        tmpl = rng.choice(self.cc)
        ids: dict[str, str] = {}

        def new(u):
            if not isinstance(u, str):
                return u
            if u not in ids:
                ids[u] = str(uuid.UUID(int=rng.getrandbits(128)))
            return ids[u]

        out, last_uuid, shots = [], None, []
        for rec in tmpl:
            r = copy.deepcopy(rec)
            for k in ("uuid", "parentUuid", "leafUuid", "messageId", "sourceToolAssistantUUID"):
                if k in r:
                    r[k] = new(r[k])
            if "sessionId" in r:
                r["sessionId"] = sid
            msg = r.get("message") if isinstance(r.get("message"), dict) else None
            content = msg.get("content") if msg else None
            if isinstance(content, list):
                for b in content:
                    if isinstance(b, dict) and b.get("type") == "tool_result" and rng.random() < 0.6:
                        text = self.file()
                        b["content"] = text
                        if isinstance(r.get("toolUseResult"), dict):
                            r["toolUseResult"] = {"type": "text", "file": {"filePath": f"/src/{hash(text) % 997}.py", "content": text, "numLines": text.count("\n") + 1, "startLine": 1, "totalLines": text.count("\n") + 1}}
                    if isinstance(b, dict) and b.get("type") == "tool_result" and rng.random() < 0.04:
                        shot = rng.choice(shots) if shots and rng.random() < 0.3 else self.new_shot()
                        shots.append(shot)
                        b["content"] = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": shot}}]
            out.append(r)
            if isinstance(r.get("uuid"), str):
                last_uuid = r["uuid"]
            if r.get("type") == "assistant" and rng.random() < 0.01 and last_uuid:
                # /compact: a boundary and a summary that restates the conversation
                summary = "\n".join(json.dumps(x.get("message", {}).get("content"))[:2000] for x in out[-30:] if x.get("type") in ("user", "assistant"))
                b = {"type": "system", "subtype": "compact_boundary", "uuid": new(f"cb{len(out)}"), "parentUuid": None, "logicalParentUuid": last_uuid,
                     "sessionId": sid, "timestamp": r.get("timestamp"), "content": "Conversation compacted", "compactMetadata": {"trigger": "manual", "preTokens": 120000}, "isSidechain": False}
                u = {"type": "user", "uuid": new(f"cs{len(out)}"), "parentUuid": b["uuid"], "sessionId": sid, "timestamp": r.get("timestamp"), "isCompactSummary": True,
                     "isSidechain": False, "message": {"role": "user", "content": "This session is being continued from a previous conversation.\n" + summary}}
                out += [b, u]
                last_uuid = u["uuid"]
        return out

    # -- codex ---------------------------------------------------------------------------

    def codex(self, sid: str) -> list[dict]:
        rng = self.rng
        tmpl = rng.choice(self.cx)
        out, history = [], []
        for rec in tmpl:
            r = copy.deepcopy(rec)
            p = r.get("payload") if isinstance(r.get("payload"), dict) else {}
            if r.get("type") == "session_meta":
                p["id"] = sid
            if isinstance(p.get("call_id"), str):
                p["call_id"] = p["call_id"] + sid[-8:]
            if p.get("type") in ("function_call_output", "custom_tool_call_output") and rng.random() < 0.6:
                p["output"] = "Chunk ID: 1\nProcess exited with code 0\nOutput:\n" + self.file()
            if p.get("type") == "message" and p.get("role") == "user" and rng.random() < 0.05:
                p["content"] = list(p.get("content") or []) + [{"type": "input_image", "image_url": "data:image/png;base64," + self.new_shot()}]
            out.append(r)
            if r.get("type") == "response_item" and p.get("type") in ("message", "function_call", "function_call_output"):
                history.append(p)
            if r.get("type") == "response_item" and rng.random() < 0.01 and history:
                out.append({"timestamp": r.get("timestamp"), "type": "compacted", "payload": {"message": "summary of the conversation so far", "replacement_history": copy.deepcopy(history[-60:])}})
        return out


def write_jsonl(path: str, recs: list[dict]) -> int:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs).encode()
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def generate(home: str, mb: float, seed: int = 7) -> dict:
    """A Claude Code and a Codex history of about `mb` MB under home/claude and home/codex."""
    import zstandard

    g = Gen(seed)
    total, n, files = 0, 0, []
    zst3 = zstandard.ZstdCompressor(level=3)
    zsize = 0
    while total < mb * 1e6:
        n += 1
        sid = str(uuid.UUID(int=g.rng.getrandbits(128)))
        if n % 3:  # two Claude Code sessions for one Codex rollout
            path = os.path.join(home, "claude", "projects", f"-home-u-proj{n % 40}", f"{sid}.jsonl")
            size = write_jsonl(path, g.claude(sid))
        else:
            path = os.path.join(home, "codex", "sessions", "2026", "05", f"{1 + n % 28:02d}", f"rollout-2026-05-01T00-00-00-{sid}.jsonl")
            size = write_jsonl(path, g.codex(sid))
        with open(path, "rb") as f:
            raw = f.read()
        z = zst3.compress(raw)
        zsize += len(z)
        if path.endswith(".jsonl") and "codex" in path and n % 5 == 0:
            with open(path + ".zst", "wb") as f:
                f.write(z)
            os.unlink(path)
            path += ".zst"
        files.append(path)
        total += size
    return {"files": files, "bytes": total, "zstd3": zsize}


def du(path: str) -> int:
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            total += os.path.getsize(os.path.join(root, name))
    return total


CPU: dict = {}  # args -> CPU seconds (user + sys) of the last run


def ctape(env: dict, *args) -> float:
    """Wall seconds of one `python -m ctape` run; its CPU seconds go to CPU[args]."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ctape", *args], env=env, capture_output=True)
    took = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["last"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU["rss"] = after.ru_maxrss
    if p.returncode != 0:
        raise SystemExit(f"ctape {' '.join(args)} failed: {p.stderr.decode()[-2000:]}")
    return took


def run(mb: float, keep: str | None, reuse: bool = False) -> None:
    work = keep or tempfile.mkdtemp(prefix="bench_watch_")
    home, tape = os.path.join(work, "home"), os.path.join(work, "tape")
    manifest = os.path.join(work, "manifest.json")
    if not (reuse and os.path.exists(manifest)):
        shutil.rmtree(home, ignore_errors=True)
    for d in (tape, os.path.join(work, "cache")):
        shutil.rmtree(d, ignore_errors=True)
    env = dict(os.environ, CLAUDE_CONFIG_DIR=os.path.join(home, "claude"), CODEX_HOME=os.path.join(home, "codex"), CTAPE_CACHE_DIR=os.path.join(work, "cache"))
    t = time.perf_counter()
    if reuse and os.path.exists(manifest):
        with open(manifest) as f:
            g = json.load(f)
    else:
        g = generate(home, mb)
        with open(manifest, "w") as f:
            json.dump(g, f)
    print(f"generated {len(g['files'])} files, {g['bytes'] / 1e6:.1f} MB in {time.perf_counter() - t:.0f} s (decompressed size; {sum(p.endswith('.zst') for p in g['files'])} of them .jsonl.zst)")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall times suffer from it; CPU times less)", flush=True)
    src_disk = du(home)
    ctape(env, "--dir", tape, "init")
    first = ctape(env, "--dir", tape, "watch", "--once", "-q")
    first_cpu, first_rss = CPU["last"], CPU["rss"]
    print(f"first pass done: {first:.0f} s wall, {first_cpu:.0f} s CPU", flush=True)
    tape_size = du(tape)
    # peers on a fifth of the plain files: `ctape import` of the same files (the same work
    # without positions), and the floor of reading them (json.loads of every line)
    sample = [p for p in g["files"] if not p.endswith(".zst")][::5]
    sample_mb = sum(os.path.getsize(p) for p in sample) / 1e6
    peer_tape = os.path.join(work, "tape-import")
    shutil.rmtree(peer_tape, ignore_errors=True)
    ctape(env, "--dir", peer_tape, "init")
    import_cpu = 0.0
    for fmt in ("claude-code", "codex"):
        part = [p for p in sample if ("/claude/" in p) == (fmt == "claude-code")]
        for i in range(0, len(part), 50):
            ctape(env, "--dir", peer_tape, "import", fmt, *part[i : i + 50])
            import_cpu += CPU["last"]
    walls = {}
    for jobs in ("1", "2"):
        watch_peer = os.path.join(work, "tape-watch-sample")
        shutil.rmtree(watch_peer, ignore_errors=True)
        shutil.rmtree(os.path.join(work, "cache-sample"), ignore_errors=True)
        ctape(env, "--dir", watch_peer, "init")
        walls[jobs] = ctape(dict(env, CTAPE_CACHE_DIR=os.path.join(work, "cache-sample")), "--dir", watch_peer, "watch", "--once", "-q", "-j", jobs, *sample)
        if jobs == "1":
            watch_sample_cpu = CPU["last"]
    t0 = time.process_time()
    for p in sample:
        with open(p, "rb") as f:
            for line in f:
                json.loads(line)
    parse_cpu = time.process_time() - t0
    idle = ctape(env, "--dir", tape, "watch", "--once", "-q")
    # one more line in every plain file
    plain = [p for p in g["files"] if not p.endswith(".zst")]
    for p in plain:
        with open(p, "rb") as f:
            last = f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
        rec = json.loads(last)
        if "uuid" in rec:
            rec["parentUuid"], rec["uuid"] = rec["uuid"], str(uuid.uuid4())
        with open(p, "ab") as f:
            f.write(json.dumps(rec).encode() + b"\n")
    appended = ctape(env, "--dir", tape, "watch", "--once", "-q")
    appended_cpu = CPU["last"]
    idle2 = ctape(env, "--dir", tape, "watch", "--once", "-q")
    idle2_cpu = CPU["last"]
    # the same number of files at a tenth of the size: an idle pass should cost the same
    small_home = os.path.join(work, "small")
    shutil.rmtree(small_home, ignore_errors=True)
    for p in g["files"]:
        rel = os.path.relpath(p, home)
        q = os.path.join(small_home, rel)
        os.makedirs(os.path.dirname(q), exist_ok=True)
        with open(p, "rb") as f:
            data = f.read()
        if p.endswith(".zst"):
            import zstandard

            data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
            lines = data.split(b"\n")
            data = zstandard.ZstdCompressor(level=3).compress(b"\n".join(lines[: max(2, len(lines) // 10)]) + b"\n")
        else:
            lines = data.split(b"\n")
            data = b"\n".join(lines[: max(2, len(lines) // 10)]) + b"\n"
        with open(q, "wb") as f:
            f.write(data)
    small_env = dict(env, CLAUDE_CONFIG_DIR=os.path.join(small_home, "claude"), CODEX_HOME=os.path.join(small_home, "codex"))
    small_tape = os.path.join(work, "tape-small")
    shutil.rmtree(small_tape, ignore_errors=True)
    ctape(small_env, "--dir", small_tape, "init")
    ctape(small_env, "--dir", small_tape, "watch", "--once", "-q")
    small_idle = ctape(small_env, "--dir", small_tape, "watch", "--once", "-q")
    small_idle_cpu = CPU["last"]
    ctape(env, "--dir", tape, "--version")
    startup_cpu = CPU["last"]
    mbs = g["bytes"] / 1e6
    print(f"source: {mbs:.1f} MB in {len(g['files'])} files ({src_disk / 1e6:.1f} MB on disk)")
    print(f"first pass (watch --once): {first:.1f} s wall = {mbs / first:.1f} MB of source/s; {first_cpu:.1f} s CPU = {mbs / first_cpu:.1f} MB/s per core (target >= 25); peak RSS {first_rss / 1024:.0f} MB")
    print(f"same run, a fifth of the plain files ({sample_mb:.0f} MB): watch --once {sample_mb / watch_sample_cpu:.1f} MB/s CPU, ctape import {sample_mb / import_cpu:.1f} MB/s CPU (watch / import = {import_cpu / watch_sample_cpu:.2f} x the speed), json.loads of every line alone {sample_mb / parse_cpu:.0f} MB/s")
    print(f"same sample, wall: watch -j 1 {walls['1']:.1f} s, -j 2 {walls['2']:.1f} s ({walls['1'] / walls['2']:.2f} x faster with two processes)")
    print(f"tape: {tape_size / 1e6:.1f} MB = {tape_size / g['bytes']:.3f} x source, {tape_size / g['zstd3']:.2f} x zstd -3 of each file ({g['zstd3'] / 1e6:.1f} MB = {g['zstd3'] / g['bytes']:.3f} x source)")
    print(f"pass with nothing new: {idle:.2f} s, again {idle2:.2f} s wall, {idle2_cpu:.2f} s CPU ({len(g['files'])} files; {1000 * (idle2_cpu - startup_cpu) / len(g['files']):.2f} ms CPU a file beyond start-up {startup_cpu:.2f} s CPU)")
    print(f"same files at a tenth of the size, nothing new: {small_idle:.2f} s wall, {small_idle_cpu:.2f} s CPU (CPU ratio to full size {small_idle_cpu / idle2_cpu:.2f})")
    print(f"pass after one line appended to each of {len(plain)} plain files: {appended:.2f} s wall, {appended_cpu:.2f} s CPU ({1000 * (appended_cpu - startup_cpu) / len(plain):.1f} ms CPU a file)")
    if not keep:
        shutil.rmtree(work, ignore_errors=True)


PEAK = r"""
import json, resource, subprocess, sys
p = subprocess.run(sys.argv[1:], capture_output=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rss": r.ru_maxrss * (1 if sys.platform == "darwin" else 1024), "cpu": r.ru_utime + r.ru_stime, "rc": p.returncode, "err": p.stderr.decode()[-500:]}))
"""


def one_run(checkout: str, work: str, *args) -> dict:
    """Peak RSS (bytes) and CPU seconds of one `python -m ctape` child run with `checkout` first on the path."""
    env = dict(os.environ, PYTHONPATH=checkout, CTAPE_CACHE_DIR=os.path.join(work, "cache"))
    # cwd: `python -m` puts the current folder first on the path, before PYTHONPATH
    p = subprocess.run([sys.executable, "-c", PEAK, sys.executable, "-m", "ctape", *args], env=env, capture_output=True, text=True, cwd=work)
    out = json.loads(p.stdout)
    if out["rc"] != 0:
        raise SystemExit(f"{checkout}: ctape {' '.join(args)}: {out['err']}")
    return out


def one(mb: float, against: str | None, repeat: int) -> None:
    """One Claude Code transcript of `mb` MB: peak memory and speed of watch --once and import."""
    import statistics

    root = os.path.abspath(os.path.join(HERE, "..", ".."))
    checkouts = [("this", root)] + ([("against", os.path.abspath(against))] if against else [])
    tmp = tempfile.mkdtemp(prefix="bench_watch_one_")
    try:
        g = Gen(7)
        sid = str(uuid.UUID(int=g.rng.getrandbits(128)))
        path = os.path.join(tmp, "src", f"{sid}.jsonl")
        os.makedirs(os.path.dirname(path))
        total, last = 0, None
        with open(path, "w") as f:
            while total < mb * 1e6:  # sessions of real shape, one after the other: one conversation
                for r in g.claude(sid):
                    if r.get("parentUuid") is None and "parentUuid" in r and last and r.get("type") in ("user", "assistant"):
                        r["parentUuid"] = last
                    if isinstance(r.get("uuid"), str):
                        last = r["uuid"]
                    line = json.dumps(r, ensure_ascii=False) + "\n"
                    f.write(line)
                    total += len(line.encode())
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            n = sum(1 for _ in f)
        t0 = time.process_time()
        with open(path, "rb") as f:
            while f.read(8 << 20):
                pass
        read_cpu = time.process_time() - t0
        t0 = time.process_time()
        with open(path, "rb") as f:
            for line in f:
                json.loads(line)
        parse_cpu = time.process_time() - t0
        print(f"one Claude Code transcript: {size / 1e6:.0f} MB, {n:,} lines; reading it {read_cpu:.2f} s CPU, json.loads of every line {parse_cpu:.1f} s CPU ({size / 1e6 / parse_cpu:.0f} MB/s)")
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; medians of {repeat}", flush=True)
        runs: dict = {(name, what): [] for name, _ in checkouts for what in ("watch", "import")}
        for r in range(repeat):
            for name, checkout in (checkouts if r % 2 == 0 else checkouts[::-1]):
                for what in ("watch", "import"):
                    work = os.path.join(tmp, "work")
                    shutil.rmtree(work, ignore_errors=True)
                    os.makedirs(work)
                    tape = os.path.join(work, "tape")
                    one_run(checkout, work, "--dir", tape, "init")
                    args = ("watch", "--once", "-q", path) if what == "watch" else ("import", "claude-code", path)
                    runs[(name, what)].append(one_run(checkout, work, "--dir", tape, *args))
        for name, _ in checkouts:
            for what in ("watch", "import"):
                xs = runs[(name, what)]
                rss = statistics.median(x["rss"] for x in xs)
                cpu = statistics.median(x["cpu"] for x in xs)
                print(f"  {name:8s} {what:6s} peak RSS {rss / 1e6:6.0f} MB = {rss / size:.2f} x the transcript; {cpu:6.1f} s CPU = {size / 1e6 / cpu:4.1f} MB/s "
                      f"({parse_cpu / cpu:.2f} x the speed of json.loads)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=50, help="size of the generated history in MB (default 50; the issue asks for 1024)")
    ap.add_argument("--keep", help="work in this folder and keep it")
    ap.add_argument("--reuse", action="store_true", help="with --keep: reuse the history generated there before")
    ap.add_argument("--one", type=float, help="instead: one Claude Code transcript of this many MB (peak memory of watch and import)")
    ap.add_argument("--against", help="with --one: another checkout, measured on the same file in the same run")
    ap.add_argument("--repeat", type=int, default=1, help="with --one: runs per checkout (medians)")
    a = ap.parse_args()
    if a.one:
        one(a.one, a.against, a.repeat)
    else:
        run(a.mb, a.keep, a.reuse)
