"""`ctape watch` against a plain model: after every pass, export == the source so far.

A seeded random walk grows a real transcript (Codex and Claude Code, with forks) by whole
lines, half lines, lines that are not JSON, blank lines, rewrites to a shorter prefix
(a new file in its place), and passes by a watcher that is kept, new (cache), or new
with the cache lost. CTAPE_SLOW=1 walks many more seeds and steps; CTAPE_MODEL_SEED
repeats one walk.
"""

import os
import random
from pathlib import Path

import pytest
from test_watch import CLAUDE, CODEX, expected, exported, session_of, with_forks

from ctape import Tape
from ctape.watch.engine import Watcher

SLOW = os.environ.get("CTAPE_SLOW") == "1"
SEEDS = [int(os.environ["CTAPE_MODEL_SEED"])] if os.environ.get("CTAPE_MODEL_SEED") else list(range(12 if SLOW else 3))
STEPS = 160 if SLOW else 40


def model(written: bytes, fmt: str) -> list:
    """What export should give: the source so far; a Claude Code file is imported from its
    first message on (that names the session), so before it: nothing."""
    out = expected(written)
    if fmt == "claude-code" and not any(isinstance(v, dict) and v.get("type") in ("user", "assistant") and v.get("uuid") for v in out):
        return []
    return out


def lines_of(data: bytes) -> list[bytes]:
    return [x + b"\n" for x in data.split(b"\n") if x.strip()]


def walk(tape, tmp_path: Path, fmt: str, source_lines: list[bytes], name: str, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / f"rollout-{seed}.jsonl"
    path.write_bytes(b"")
    written = b""  # the model: the file's bytes
    nxt = 0  # next source line to write
    partial = b""  # the rest of a half-written line
    w = Watcher(tape, [str(path)])
    for step in range(STEPS):
        op = rng.choices(["lines", "half", "finish", "garbage", "blank", "shorten", "pass"], [30, 8, 8, 3, 2, 2, 30])[0]
        if op == "lines" and not partial and nxt < len(source_lines):
            k = rng.randint(1, 8)
            chunk = b"".join(source_lines[nxt : nxt + k])
            nxt += k
        elif op == "half" and not partial and nxt < len(source_lines):
            line = source_lines[nxt]
            nxt += 1
            cut = rng.randint(1, len(line) - 1)
            chunk, partial = line[:cut], line[cut:]
        elif op == "finish" and partial:
            chunk, partial = partial, b""
        elif op == "garbage" and not partial:
            chunk = b'{"half a record", "never finished\n'
        elif op == "blank" and not partial:
            chunk = b"\n"
        elif op == "shorten" and not partial and written:
            keep = lines_of(written)[: rng.randint(1, max(1, written.count(b"\n")))]
            written = b"".join(keep)
            tmp = tmp_path / "rewrite.tmp"
            tmp.write_bytes(written)
            os.replace(tmp, path)  # a new file in its place, shorter
            continue
        else:
            how = rng.choice(["kept", "kept", "new", "lost"])
            if how == "new":
                w = Watcher(tape, [str(path)])
            elif how == "lost":
                for c in Path(os.environ["CTAPE_CACHE_DIR"]).rglob("watch*"):
                    if c.is_file():
                        c.unlink()
                w = Watcher(tape, [str(path)])
            rep = w.run_pass()
            w.save_layouts()
            assert not rep.errors, rep.errors
            assert exported(tape, name, fmt) == model(written, fmt), f"seed {seed} step {step} ({how})"
            continue
        with open(path, "ab") as f:
            f.write(chunk)
        written += chunk
    w.run_pass()
    assert exported(tape, name, fmt) == model(written, fmt), f"seed {seed} end"


@pytest.mark.parametrize("seed", SEEDS)
def test_codex_walk(tmp_path, seed):
    with Tape.init(tmp_path / "tape") as tape:
        walk(tape, tmp_path, "codex", lines_of(CODEX.read_bytes()), session_of(CODEX, "codex"), seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_claude_walk(tmp_path, seed):
    with Tape.init(tmp_path / "tape") as tape:
        walk(tape, tmp_path, "claude-code", lines_of(with_forks(CLAUDE)), session_of(CLAUDE, "claude-code"), seed)
