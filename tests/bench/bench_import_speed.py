"""Import speed of Claude Code and Codex transcripts, against reading and parsing them (issue 25).

    python tests/bench/bench_import_speed.py                  # 100 MB of each format, 3 runs
    python tests/bench/bench_import_speed.py --mb 30 --repeat 5
    python tests/bench/bench_import_speed.py --against /tmp/old-checkout   # the same files, another checkout

The transcripts replay the real fixtures' records (tests/fixtures/transcripts: their mix of
record types and sizes) as one long session per format, each round of the fixtures with
fresh ids and times and its own large strings (so no round finds them stored already),
written compact as the tools write them. The madshn Codex fixtures are sanitised: their
free text is `[REDACTED_* len=N ...]`, which made their lines 383 bytes where the real
file's are 2.3 KB (without its base64 images); the replay gives each placeholder N
characters of real text from the other fixtures, so Codex lines are ~2.3 KB, Claude Code
~3.5 KB. `--sanitised` replays the records as they are stored (as this bench did before:
0.6 KB Codex lines); `--images` also restores the redacted images (43 MB of the 50 MB
real file). For each checkout, in a process of its own per run:

- import:   `import_files` of the file into a new tape (CPU seconds of the process);
- again:    the same import once more, nothing new (CPU and wall);
- read:     reading the file's bytes (the floor of "again");
- parse:    `json.loads` of every line (the floor of any importer).

Printed: medians of the runs, MB/s, import as a fraction of the parse speed, and "again"
as a multiple of the read. CPU seconds are what a loaded machine distorts least.
Target (SPEC 11, issue 25): import of either format >= 25 MB/s; "again" close to a read.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "transcripts")


BLOB_MIN = 1024  # characters: a string this long is stored as a blob (ctape.model.canonical)
PLACEHOLDER = re.compile(r"\[REDACTED_([A-Z_]+) len=(\d+) sha=([0-9a-f]+)\]")
IMAGES = ("IMAGE_URL", "IMAGES")


def _corpus() -> str:
    """Real text to stand in for what a sanitised fixture redacted: the tool outputs,
    messages and instructions of the fixtures that are not sanitised."""
    parts: list[str] = []

    def walk(v):
        if isinstance(v, str):
            if len(v) >= 64 and v.count(" ") + v.count("\n") > len(v) // 50 and not PLACEHOLDER.search(v):
                parts.append(v)  # prose, code, tool output: not base64 (signatures, encrypted reasoning)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for d in ("codex-rollout", "claude-code"):
        for name in sorted(os.listdir(os.path.join(FIXTURES, d))):
            if name.endswith(".jsonl"):
                with open(os.path.join(FIXTURES, d, name), "rb") as f:
                    for line in f:
                        if line.strip():
                            walk(json.loads(line))
    return "\n".join(dict.fromkeys(parts))


def _time(ts: str, shift: datetime.timedelta) -> str:
    t = datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")) + shift
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


class _Fresh:
    """Cycle k's copy of a template's strings, as a real session would hold them: each
    placeholder of a sanitised fixture (`[REDACTED_X len=N sha=...]`) becomes N characters of
    real text from the corpus (encrypted content: base64; arguments: a JSON object), the
    same for the same placeholder within a cycle, other in another cycle; and every string
    long enough to be a blob differs from the other cycles' (its last characters carry the
    cycle), so no cycle finds its large strings stored already. Base64 images stay
    redacted: a transcript made mostly of images would import faster per MB (see --images)."""

    def __init__(self, corpus: str, k: int, images: bool):
        self.corpus, self.k, self.images = corpus, k, images
        self.made: dict = {}

    def value(self, v):
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, dict):
            return {key: self.value(x) for key, x in v.items()}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        return v

    def text(self, s: str) -> str:
        m = PLACEHOLDER.fullmatch(s) if s[:10] == "[REDACTED_" else None
        if m is not None and (m.group(1) not in IMAGES or self.images):
            key = (m.group(2), m.group(3))
            if key not in self.made:
                self.made[key] = self._fill(m.group(1), int(m.group(2)), f"{m.group(3)}:{self.k}")
            return self.made[key]
        if len(s) >= BLOB_MIN and s[:1] not in "{[":
            mark = f"~{self.k:07d}"
            return s[: len(s) - len(mark)] + mark
        return s

    def _fill(self, what: str, n: int, seed: str) -> str:
        rng = random.Random(seed)
        if what in IMAGES:
            return "data:image/png;base64," + base64.b64encode(rng.randbytes(n * 3 // 4)).decode()[: max(n - 22, 0)]
        if what == "ENCRYPTED_CONTENT":
            return base64.b64encode(rng.randbytes(n * 3 // 4 + 3)).decode()[:n]
        c = self.corpus
        start = rng.randrange(len(c))
        pieces, have = [], 0
        while have < n:
            pieces.append(c[start : start + n - have])
            have += len(pieces[-1])
            start = 0
        text = "".join(pieces)
        if what == "ARGUMENTS":  # a JSON object, as Codex writes arguments
            return json.dumps({"cmd": text[: max(n - 11, 0)]}, ensure_ascii=False)
        return text


def replay(path: str, fmt: str, mb: float, seed: int = 1, sanitised: bool = False, images: bool = False) -> None:
    """One session of `fmt` of about `mb` MB: the fixtures' records again and again, each
    round with fresh ids and times (later than the last round's) and fresh large strings;
    the sanitised Codex fixture's redacted text at its real length (_Fresh). `sanitised`:
    the records as the fixtures hold them (placeholders, the same times and large strings
    every round), as this bench replayed them before."""
    rng = random.Random(seed)
    d = os.path.join(FIXTURES, "claude-code" if fmt == "claude-code" else "codex-rollout")
    templates = []
    for name in sorted(os.listdir(d)):
        if name.endswith(".jsonl") and "agent" not in name:
            with open(os.path.join(d, name), "rb") as f:
                templates.append([json.loads(x) for x in f if x.strip()])
    corpus = _corpus()
    spans = []
    for records in templates:
        times = [datetime.datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00")) for r in records if isinstance(r.get("timestamp"), str)]
        spans.append((min(times), max(times)))
    clock = spans[0][0]  # where the next round's first record is
    sid = str(uuid.UUID(int=rng.getrandbits(128)))
    total, last, k = 0, None, 0
    with open(path, "w") as f:
        while total < mb * 1e6:
            k += 1
            ids: dict = {}
            n = k % len(templates)
            fresh = None if sanitised else _Fresh(corpus, k, images)
            shift = clock - spans[n][0]
            clock += spans[n][1] - spans[n][0] + datetime.timedelta(minutes=1)
            for r in templates[n]:
                if fmt != "claude-code" and r.get("type") == "session_meta" and total:
                    continue
                r = json.loads(json.dumps(r)) if sanitised else fresh.value(r)
                if not sanitised and isinstance(r.get("timestamp"), str):
                    r["timestamp"] = _time(r["timestamp"], shift)
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
                else:
                    if r.get("type") == "session_meta":
                        r["payload"]["id"] = sid
                    if not sanitised and isinstance(r.get("payload"), dict):
                        p = r["payload"]
                        for key in ("call_id", "id", "turn_id"):
                            if isinstance(p.get(key), str) and r.get("type") != "session_meta":
                                p[key] = ids.setdefault(p[key], str(uuid.UUID(int=rng.getrandbits(128))))
                # compact, as Codex and Claude Code write their lines (the sanitised replay: as before)
                line = json.dumps(r, ensure_ascii=False, separators=(", ", ": ") if sanitised else (",", ":")) + "\n"
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
    ap.add_argument("--sanitised", action="store_true", help="replay the fixtures' records as they are (redacted text, the same times and large strings every round)")
    ap.add_argument("--images", action="store_true", help="give the redacted base64 images their real size too (most of the bytes then)")
    a = ap.parse_args()
    checkouts = [("this", ROOT)] + ([("against", os.path.abspath(a.against))] if a.against else [])
    tmp = tempfile.mkdtemp(prefix="bench_import_speed_")
    try:
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        for fmt in a.formats.split(","):
            path = os.path.join(tmp, f"{fmt}.jsonl")
            replay(path, fmt, a.mb, sanitised=a.sanitised, images=a.images)
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
