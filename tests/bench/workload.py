"""Agent workloads for the benchmark: generated (deterministic from a seed) and real.

An entry here is a plain tuple (kind, payload, meta, delta) in ctape's payload
conventions (SPEC section 3); every peer in bench.py stores exactly these values.

The generated workload imitates a coding agent working on one repository:

- every session starts with the same system prompt (about 11 KB; shared by all sessions);
- a turn is a user message, an assistant message, 1-6 tool calls each with its result,
  and a closing assistant message (about 9 entries per turn);
- tools (shares calibrated on the fixtures): read_file (the whole file, again and again: most reads return a file seen
  before, some files are edited between reads), edit_file (changes a few lines of a
  file, so later reads differ from earlier ones by a few lines), run_tests (a few KB of
  test output, repeated: identical while nothing changed, with a varying timing
  line), grep/list_dir (small outputs);
- occasionally a tool fails (an `error` entry or a tool_result with is_error) or an
  assistant stream is cut off (a `streaming` entry);
- meta carries token counts and the model name like real agent logs; delta carries
  the working state (cwd, edited files) on some entries.

Sizes are calibrated on the real transcripts in tests/fixtures/transcripts (see
`calibration()`): tool results median ~100 B but a long tail of whole files and
test logs (p90 ~2.5 KB, max ~65 KB), tool calls ~150 B, assistant text ~50-800 B,
user prompts ~60-300 B. The generated mix is a little heavier than the fixtures'
payloads (whole-file reads are common in coding agents): about 1.3 KB per entry as
JSON Lines (the raw Claude Code files are ~3.6 KB per record, most of it envelope;
SPEC section 11 quotes 4.7 KB per entry).
"""

from __future__ import annotations

import glob
import json
import os
import random
from typing import Iterator, Optional

Entry = tuple  # (kind, payload, meta, delta)

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.normpath(os.path.join(HERE, "..", "fixtures", "transcripts"))

_WORDS = (
    "the file test build function value error config module import return class self "
    "session tape entry append branch commit parse render token model request response "
    "cache index object hash stream buffer offset length record writer reader lock path "
    "check fix update change result output input schema retry timeout client server"
).split()

_CODE_TEMPLATES = (
    "def {a}_{b}(self, {c}: int, {d}: str | None = None) -> dict:",
    "    {a} = self.{b}.get({c!r}, {n})",
    "    if {a} is None or {b} > {n}:",
    "        raise ValueError(f\"{a} {b}: {{{c}}}\")",
    "    for {a} in sorted(self.{b}_{c}):",
    "        {a}.append({b}_{c}({d}, {n}))",
    "    return {{\"{a}\": {b}, \"{c}\": {d}}}",
    "class {A}{B}({C}Base):",
    "    \"\"\"{A} {b} for the {c} {d}, see {e}.\"\"\"",
    "import {a}.{b} as {c}",
    "from {a} import {b}, {c}_{d}",
    "# {A} {b} {c} {d} {e}: keep this in sync with {f}",
    "    assert {a}_{b}({n}) == {m}, \"{c} {d}\"",
    "",
)


def _line(rng: random.Random) -> str:
    w = [rng.choice(_WORDS) for _ in range(6)]
    t = rng.choice(_CODE_TEMPLATES)
    return t.format(a=w[0], b=w[1], c=w[2], d=w[3], e=w[4], f=w[5], A=w[0].title(), B=w[1].title(), C=w[2].title(),
                    n=rng.randrange(1000), m=rng.randrange(1000))


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def _text(rng: random.Random, chars: int) -> str:
    out, n = [], 0
    while n < chars:
        s = _sentence(rng, rng.randrange(5, 16))
        out.append(s)
        n += len(s) + 1
    return " ".join(out)[:max(chars, 1)]


def system_prompt(seed: int = 0) -> str:
    """The one system prompt every session starts with (~11 KB, like a coding agent's)."""
    rng = random.Random(f"system-{seed}")
    parts = ["You are a coding agent working in a git repository. Follow these rules."]
    for i in range(60):
        parts.append(f"{i + 1}. {_text(rng, rng.randrange(80, 280))}")
    return "\n".join(parts)


class Repo:
    """Files of one repository; sessions read them and edit them."""

    def __init__(self, seed: int, files: int = 40):
        rng = random.Random(f"repo-{seed}")
        self.files: dict[str, list[str]] = {}
        for i in range(files):
            d = rng.choice(["src", "src/core", "src/cli", "tests", "docs"])
            name = f"{d}/{rng.choice(_WORDS)}_{rng.choice(_WORDS)}_{i}.py"
            # file sizes: log-uniform 0.6-12 KB, ~40 chars a line
            size = int(600 * 20 ** rng.random())
            self.files[name] = [_line(rng) for _ in range(max(size // 40, 5))]
        self.paths = sorted(self.files)
        self.tests = [f"tests/test_{rng.choice(_WORDS)}_{rng.choice(_WORDS)}.py::test_{rng.choice(_WORDS)}_{i}" for i in range(60)]

    def copy(self) -> "Repo":
        r = object.__new__(Repo)
        r.files = {k: list(v) for k, v in self.files.items()}
        r.paths, r.tests = self.paths, self.tests
        return r


def generate_session(n: int, seed: int = 0, session: int = 0, repo: Optional[Repo] = None) -> list[Entry]:
    """n entries of one agent session; the same (n, seed, session) always gives the same entries."""
    return list(iter_session(n, seed, session, repo))


def iter_session(n: int, seed: int = 0, session: int = 0, repo: Optional[Repo] = None) -> Iterator[Entry]:
    rng = random.Random(f"session-{seed}-{session}")
    repo = (repo or Repo(seed)).copy()
    model = "claude-sonnet-4-5"
    count = 0
    call = 0
    failing: set[int] = set(rng.sample(range(len(repo.tests)), 3))
    edited: set[str] = set()
    hot = rng.sample(repo.paths, 8)  # files this session keeps coming back to

    def emit(kind, payload, tokens=None, delta=None):
        nonlocal count
        count += 1
        meta = {"model": model, "tokens": tokens if tokens is not None else max(1, len(json.dumps(payload)) // 4)}
        return (kind, payload, meta, delta)

    yield emit("system", {"content": system_prompt(seed)})
    while count < n:
        yield emit("user", {"content": _text(rng, int(40 * 10 ** rng.random()))}, delta={"turn": count})
        if count >= n:
            break
        yield emit("assistant", {"content": _text(rng, int(50 * 15 ** rng.random()))})
        for _ in range(rng.choice((1, 2, 2, 3, 3, 4, 6))):
            if count >= n:
                break
            call += 1
            cid = f"call_{session}_{call}"
            r = rng.random()
            if r < 0.30:
                path = rng.choice(hot) if rng.random() < 0.8 else rng.choice(repo.paths)
                yield emit("tool_call", {"call_id": cid, "name": "read_file", "arguments": {"path": path}})
                if count >= n:
                    break
                yield emit("tool_result", {"call_id": cid, "output": "\n".join(repo.files[path])})
            elif r < 0.45:
                path = rng.choice(hot)
                lines = repo.files[path]
                i = rng.randrange(len(lines))
                old = lines[i]
                new = [_line(rng) for _ in range(rng.randrange(1, 4))]
                lines[i:i + 1] = new
                edited.add(path)
                yield emit("tool_call", {"call_id": cid, "name": "edit_file", "arguments": {"path": path, "old": old, "new": "\n".join(new)}})
                if count >= n:
                    break
                yield emit("tool_result", {"call_id": cid, "output": f"edited {path}: 1 hunk"}, delta={"edited": sorted(edited)[-20:]})
                if rng.random() < 0.3:  # the edit fixed or broke a test
                    t = rng.randrange(len(repo.tests))
                    failing.symmetric_difference_update({t})
            elif r < 0.60:
                yield emit("tool_call", {"call_id": cid, "name": "run_tests", "arguments": {"cmd": "pytest -q"}})
                if count >= n:
                    break
                out = []
                for j, t in enumerate(repo.tests):
                    out.append(f"{t} {'FAILED' if j in failing else 'PASSED'}")
                for j in sorted(failing):
                    out.append(f"____ {repo.tests[j]} ____\nAssertionError: expected {j} got {j + 1}\n" + "\n".join(repo.files[repo.paths[j % len(repo.paths)]][:12]))
                timing = f"{len(repo.tests) - len(failing)} passed, {len(failing)} failed"
                # identical output while nothing changed, unless the timing line differs
                if rng.random() < 0.5:
                    timing += f" in {rng.randrange(200, 900) / 100:.2f}s"
                out.append(timing)
                yield emit("tool_result", {"call_id": cid, "output": "\n".join(out), "is_error": bool(failing)})
            elif r < 0.97:
                pat = rng.choice(_WORDS)
                yield emit("tool_call", {"call_id": cid, "name": "grep", "arguments": {"pattern": pat, "path": "src"}})
                if count >= n:
                    break
                hits = [f"{p}:{k + 1}:{repo.files[p][k]}" for p in rng.sample(repo.paths, rng.randrange(0, 4)) for k in range(0, min(rng.randrange(1, 4), len(repo.files[p])))]
                yield emit("tool_result", {"call_id": cid, "output": "\n".join(hits)})
            else:  # a failing tool
                yield emit("tool_call", {"call_id": cid, "name": "web_fetch", "arguments": {"url": f"https://example.com/{rng.choice(_WORDS)}"}})
                if count >= n:
                    break
                if rng.random() < 0.5:
                    yield emit("error", {"message": "Request failed with status code 403", "call_id": cid})
                else:
                    yield emit("tool_result", {"call_id": cid, "output": "Error: Exit code 127 command not found", "is_error": True})
        if count >= n:
            break
        if rng.random() < 0.02:  # the stream was cut off, then the turn goes on
            yield emit("streaming", {"content": _text(rng, rng.randrange(20, 400))})
            if count >= n:
                break
        yield emit("assistant", {"content": _text(rng, int(60 * 20 ** rng.random()))})


def generate(sessions: int, n: int, seed: int = 0) -> dict[str, list[Entry]]:
    """`sessions` sessions of n entries each, sharing one repository and system prompt."""
    repo = Repo(seed)
    return {f"s{i:03d}": generate_session(n, seed, i, repo) for i in range(sessions)}


# -- the real transcripts ------------------------------------------------------------


def _records(path: str) -> list:
    from ctape.formats import _common as c
    from ctape.formats import openai

    with open(path, "rb") as f:
        recs, _ = openai._records(f, path)
        out = []
        for _, line, value in recs:
            out.append(c.read_at(f, line) if line is not None else value)
        return out


def real_transcripts() -> dict[str, list[Entry]]:
    """The Claude Code and Codex fixture files as sessions of entries, mapped the way
    `ctape import` maps them (one session per file). OpenAI-chat fixtures are whole
    conversations in one record each, so they are left out of the per-entry workload
    (import_files() below covers every file)."""
    from ctape.formats import claude_code, codex
    from ctape.model.models import HIDDEN

    out: dict[str, list[Entry]] = {}
    for fmt, mod in (("claude-code", claude_code), ("codex-rollout", codex)):
        for i, path in enumerate(sorted(glob.glob(os.path.join(FIXTURES, fmt, "*.jsonl")))):
            entries = []
            for v in _records(path):
                mapped = mod.map_record(v)
                for kind, payload, hidden in [mapped] if isinstance(mapped, tuple) else mapped:
                    entries.append((kind, payload, {HIDDEN: True} if hidden else {}, None))
            out[f"{fmt[:6]}-{i}"] = entries
    return out


def fixture_files() -> list[tuple[str, str]]:
    """(ctape import format, path) of every real transcript."""
    out = []
    for fmt, d in (("claude-code", "claude-code"), ("codex", "codex-rollout"), ("openai", "openai-chat")):
        out += [(fmt, p) for p in sorted(glob.glob(os.path.join(FIXTURES, d, "*"))) if not p.endswith(".md")]
    return out


def calibration(workload: dict[str, list[Entry]]) -> dict:
    """Payload sizes by kind (median, p90, max, count) as JSON bytes."""
    sizes: dict[str, list[int]] = {}
    for entries in workload.values():
        for kind, payload, _, _ in entries:
            sizes.setdefault(kind, []).append(len(json.dumps(payload)))
    out = {}
    for k, v in sorted(sizes.items()):
        v.sort()
        out[k] = {"n": len(v), "median": v[len(v) // 2], "p90": v[int(len(v) * 0.9)], "max": v[-1]}
    return out


if __name__ == "__main__":
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    gen = generate(2, n)
    total = sum(len(json.dumps({"kind": k, "payload": p, "meta": m, "delta": d})) + 1 for es in gen.values() for k, p, m, d in es)
    print(f"generated: {sum(map(len, gen.values()))} entries, {total / sum(map(len, gen.values())):.0f} B/entry as JSON Lines")
    print(json.dumps(calibration(gen), indent=1))
    print("real:", json.dumps(calibration(real_transcripts()), indent=1))
