"""`ctape watch` against a plain model: after every pass, export == the source so far.

A seeded random walk grows a real transcript (Codex and Claude Code, with forks) by whole
lines, half lines, lines that are not JSON, blank lines, rewrites to a shorter prefix
(a new file in its place), and passes by a watcher that is kept, new (cache), or new
with the cache lost. After a rewrite to a shorter prefix, watch keeps the longer history
(issue 23, item 6): the pass after it leaves main as long as it was, and from then on
the model is that every tip `ctape import` of the file gives is on the session (a file
that grows may still make another thread its main, as Claude Code does after a rewind). CTAPE_SLOW=1 walks many more seeds and steps; CTAPE_MODEL_SEED
repeats one walk.
"""

import json
import os
import random
import shutil
from pathlib import Path

import pytest
from test_watch import CLAUDE, CODEX, entry_hashes, expected, exported, session_of, with_forks

from ctape import Tape
from ctape.formats import export_ref, import_files
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


def complete(written: bytes) -> bytes:
    """The file as watch has imported it: its complete lines, without the trailing ones
    that are not JSON (still being written)."""
    rows = written.split(b"\n")[:-1]
    while rows and not _json(rows[-1]):
        rows.pop()
    return b"".join(r + b"\n" for r in rows)


def _json(raw: bytes) -> bool:
    try:
        json.loads(raw)
        return True
    except ValueError:
        return False


def export_of(tape, ref: str, fmt: str) -> list:
    return [json.loads(x) if _json(x.encode()) else x for x in export_ref(tape, ref, fmt)]


def check(tape, tmp_path: Path, fmt: str, name: str, written: bytes, shortened: bool, longest: int, where: str) -> int:
    """The model after a pass; returns main's length. `longest`: main's length before a
    shorter rewrite (0 when the file has only grown since the last pass)."""
    if not shortened:
        assert exported(tape, name, fmt) == model(written, fmt), where
    s = tape.session(name)
    if not s.exists():
        assert model(written, fmt) == [], where
        return 0
    n = len(list(s.log(s.refs().branches["main"])))
    assert n >= longest, where  # a shorter file does not rewind main
    if shortened and fmt == "codex":  # a chain: one branch is the file, record for record
        want = model(written, fmt)
        # a branch holds the file: it ends there, or goes on (the file is a prefix of it)
        assert not want or any(export_of(tape, h, fmt)[: len(want)] == want for h in s.refs().branches.values()), where
    elif shortened and model(written, fmt):
        src = tmp_path / "now.jsonl"
        src.write_bytes(complete(written))
        fresh = tmp_path / "fresh"
        shutil.rmtree(fresh, ignore_errors=True)
        with Tape.init(fresh) as other:
            import_files(other, fmt, [str(src)], name)
            tips = set(other.session(name).refs().branches.values())
        assert tips <= entry_hashes(tape, name), where
    return n


def walk(tape, tmp_path: Path, fmt: str, source_lines: list[bytes], name: str, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / f"rollout-{seed}.jsonl"
    path.write_bytes(b"")
    written = b""  # the model: the file's bytes
    nxt = 0  # next source line to write
    partial = b""  # the rest of a half-written line
    w = Watcher(tape, [str(path)])
    shortened, longest = False, 0
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
            shortened = True
            s = tape.session(name)
            longest = len(list(s.log(s.refs().branches["main"]))) if s.exists() else 0
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
            check(tape, tmp_path, fmt, name, written, shortened, longest, f"seed {seed} step {step} ({how})")
            longest = 0
            continue
        with open(path, "ab") as f:
            f.write(chunk)
        written += chunk
    w.run_pass()
    check(tape, tmp_path, fmt, name, written, shortened, longest, f"seed {seed} end")


@pytest.mark.parametrize("seed", SEEDS)
def test_codex_walk(tmp_path, seed):
    with Tape.init(tmp_path / "tape") as tape:
        walk(tape, tmp_path, "codex", lines_of(CODEX.read_bytes()), session_of(CODEX, "codex"), seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_claude_walk(tmp_path, seed):
    with Tape.init(tmp_path / "tape") as tape:
        walk(tape, tmp_path, "claude-code", lines_of(with_forks(CLAUDE)), session_of(CLAUDE, "claude-code"), seed)
