"""docs/tutorial.md, and README.md's short session, must show what ctape really prints: their
commands are run here, in order, and their output compared with the text (hashes, times, byte counts and the temporary
directory masked), the way tests/test_cli_docs.py keeps docs/cli.md in step.

How the tutorial is read:
- every ```console block; `$ COMMAND` lines are run with bash (stdout and stderr together,
  as a terminal shows them), the lines after one up to the next `$` are its output;
- chapters (`## ` headings) share one working directory, except a chapter whose heading
  is followed by `<!-- tutorial-test: fresh directory -->`, which gets its own;
- a block right after `<!-- tutorial-test: output varies ... -->` is run, not compared
  (the partial text of a stream killed mid-way depends on timing);
- `$ cat FILE` of a file the tutorial has not written yet writes the text shown first;
- a hash (or prefix) in a command that an earlier output showed is replaced by the hash
  this run printed in its place.

After changing what a command prints, regenerate the outputs and read the diff:

    PYTHONPATH=. python tests/test_tutorial.py --update ["CHAPTER"]
    PYTHONPATH=. python tests/test_tutorial.py --update-readme

(with a chapter heading, only the blocks from that chapter on are rewritten).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tempfile

import pytest

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "tutorial.md"
README = DOC.parent.parent / "README.md"
FRESH = "<!-- tutorial-test: fresh directory -->"
VARIES = "<!-- tutorial-test: output varies"

_MASKS = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<time>"),
    (re.compile(r"\b[0-9a-f]{7,64}\b"), "<hash>"),
    (re.compile(r"\b\d+ bytes\b"), "<n> bytes"),
    (re.compile(r"^((?:logical|unique|stored)_bytes|dedupe_saving|compression_ratio)\s+[0-9.]+$", re.M), r"\1 <n>"),
    (re.compile(r"\(\d+ chars"), "(<n> chars"),
    (re.compile(r"[ \t]+$", re.M), ""),
]


_HEX = re.compile(r"\b[0-9a-f]{7,64}\b")


def learn(hashes: dict[str, str], expected: str, actual: str) -> None:
    """Pair the hashes an output showed in the text with those this run printed."""
    shown, printed = _HEX.findall(expected), _HEX.findall(actual)
    if len(shown) == len(printed):
        for a, b in zip(shown, printed):
            hashes.setdefault(a, b)


def translate(cmd: str, hashes: dict[str, str]) -> str:
    """A command with the hashes the text shows replaced by this run's."""

    def sub(m: re.Match) -> str:
        h = m.group(0)
        for shown, real in hashes.items():
            if shown.startswith(h) and len(h) <= len(real):
                return real[: len(h)]
        return h

    return _HEX.sub(sub, cmd)


def mask(text: str, workdirs: dict[str, str]) -> str:
    for real, shown in workdirs.items():
        text = text.replace(real, shown)
    for rx, repl in _MASKS:
        text = rx.sub(repl, text)
    # padding after a masked value depends on the value's width: compare words, per line
    return "\n".join(" ".join(line.split()) for line in text.strip("\n").splitlines())


class Block:
    def __init__(self, chapter: str, start: int, end: int, steps: list[tuple[str, str]], compare: bool):
        self.chapter, self.start, self.end, self.steps, self.compare = chapter, start, end, steps, compare


def parse(lines: list[str]) -> tuple[list[Block], set[str]]:
    blocks: list[Block] = []
    fresh: set[str] = set()
    chapter = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            chapter = line[3:].strip()
            nxt = next((x for x in lines[i + 1 :] if x.strip()), "")
            if nxt.strip() == FRESH:
                fresh.add(chapter)
        if line.strip() == "```console":
            prev = next((x for x in reversed(lines[:i]) if x.strip()), "")
            j = i + 1
            steps: list[tuple[str, str]] = []
            while lines[j].strip() != "```":
                if lines[j].startswith("$ "):
                    steps.append((lines[j][2:], ""))
                elif steps:
                    steps[-1] = (steps[-1][0], steps[-1][1] + lines[j] + "\n")
                j += 1
            blocks.append(Block(chapter, i, j, steps, not prev.strip().startswith(VARIES)))
            i = j
        i += 1
    return blocks, fresh


def _env(bin_dir: str, cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTAPE_")}
    env.update(
        PATH=bin_dir + os.pathsep + env.get("PATH", ""),
        CTAPE_CACHE_DIR=cache,
        PYTHONUNBUFFERED="1",
        NO_COLOR="1",
        COLUMNS="100",
        PYTHONPATH=os.pathsep.join([str(DOC.parent.parent), *filter(None, [env.get("PYTHONPATH")])]),
    )
    return env


def _groups_of(blocks: list[Block], fresh: set[str]) -> dict[str, str]:
    """Chapter -> the part of the text it runs in: "" for the chapters that share the first
    working directory and the fresh ones between them (the index cache is shared, and a
    later chapter's `ctape cache gc` counts the tapes the earlier ones made), the chapter
    itself for a fresh one after them."""
    chapters = list(dict.fromkeys(b.chapter for b in blocks))
    last_shared = max((i for i, c in enumerate(chapters) if c not in fresh), default=-1)
    return {c: c if c in fresh and i > last_shared else "" for i, c in enumerate(chapters)}


def groups(doc: pathlib.Path = DOC) -> list[str]:
    """The parts of `doc` that run apart (`_groups_of`), in order."""
    blocks, fresh = parse(doc.read_text(encoding="utf-8").splitlines())
    return list(dict.fromkeys(_groups_of(blocks, fresh).values()))


def run_tutorial(root: str, hashes: dict[str, str] | None = None, doc: pathlib.Path = DOC, group: str | None = None):
    """Run every block of `doc` (of one of its `groups` only, when given); yield (block,
    [(command, expected, actual)], work directories). `hashes` collects the hashes the text
    shows -> the ones this run printed."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    blocks, fresh = parse(lines)
    if group is not None:
        part = _groups_of(blocks, fresh)
        blocks = [b for b in blocks if part[b.chapter] == group]
    bin_dir = os.path.join(root, "bin")
    os.makedirs(bin_dir)
    with open(os.path.join(bin_dir, "ctape"), "w") as f:
        f.write(f'#!/bin/sh\nexec "{sys.executable}" -m ctape "$@"\n')
    os.chmod(os.path.join(bin_dir, "ctape"), 0o755)
    os.symlink(sys.executable, os.path.join(bin_dir, "python"))
    env = _env(bin_dir, os.path.join(root, "cache"))
    dirs: dict[str, str] = {"<cache>": os.path.join(root, "cache")}
    hashes = {} if hashes is None else hashes
    for b in blocks:
        key = b.chapter if b.chapter in fresh else ""
        if key not in dirs:
            dirs[key] = os.path.join(root, f"work{len(dirs)}")
            os.makedirs(dirs[key])
        cwd = dirs[key]
        results = []
        for cmd, expected in b.steps:
            cmd = translate(cmd, hashes)
            m = re.fullmatch(r"cat (\S+)", cmd)
            if m and not os.path.exists(os.path.join(cwd, m.group(1))):
                with open(os.path.join(cwd, m.group(1)), "w") as f:
                    f.write(expected.rstrip("\n") + "\n")
            p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
            actual = p.stdout.decode("utf-8", "replace")
            learn(hashes, expected, actual)
            results.append((cmd, expected, actual))
        yield b, results, dirs


def _shown_dirs(dirs: dict[str, str]) -> dict[str, str]:
    """Real paths -> the paths the text shows (the index cache first: it is not a work dir)."""
    return {dirs["<cache>"]: "/home/you/.cache/ctape", **{d: "/tmp/tut" for k, d in dirs.items() if k != "<cache>"}}


# the tutorial's parts run as tests of their own, side by side (one test took ~2 minutes alone)
PARTS = [(DOC, g) for g in groups(DOC)] + [(README, None)]


def _part_id(doc: pathlib.Path, group: str | None) -> str:
    if doc != DOC:
        return "readme"
    return "tutorial-" + ("-".join(re.findall(r"[a-z]+", (group or "shared").lower())[:3]))


@pytest.mark.parametrize("doc, group", PARTS, ids=[_part_id(d, g) for d, g in PARTS])
def test_tutorial_output_matches(tmp_path, doc, group):
    failures = []
    for b, results, dirs in run_tutorial(str(tmp_path), doc=doc, group=group):
        if not b.compare:
            continue
        shown = _shown_dirs(dirs)
        for cmd, expected, actual in results:
            if mask(expected, shown) != mask(actual, shown):
                failures.append(f"{doc.name} line {b.start + 1}: $ {cmd}\n--- shown\n{expected}--- printed\n{actual}")
    how = "--update" if doc == DOC else "--update-readme"
    assert not failures, f"{len(failures)} outputs of {doc.name} differ (regenerate: python tests/test_tutorial.py {how}):\n\n" + "\n\n".join(failures[:5])


def update(first_chapter: str | None = None, doc: pathlib.Path = DOC) -> None:
    """Rewrite the outputs in `doc` with what the commands print now (from
    `first_chapter` on, when given)."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    out = list(lines)
    hashes: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as root:
        replaced = []
        started = first_chapter is None
        for b, results, dirs in run_tutorial(root, hashes, doc):
            started = started or b.chapter == first_chapter
            if not started:
                continue
            body = []
            for k, (cmd, _, actual) in enumerate(results):
                if k:
                    body.append("")
                body.append(f"$ {cmd}")
                text = actual.rstrip("\n")
                for real, shown in _shown_dirs(dirs).items():
                    text = text.replace(real, shown)
                body += text.splitlines() if text else []
            replaced.append((b.start, b.end, body))
    inside = set()
    for start, end, _ in replaced:
        inside.update(range(start, end + 1))
    first = replaced[0][0] if replaced else len(out)
    for i, line in enumerate(out):  # hashes named in the prose
        if i not in inside and i > first:
            out[i] = translate(line, hashes)
    for start, end, body in reversed(replaced):
        out[start + 1 : end] = body
    doc.write_text("\n".join(out) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--update"] and len(sys.argv) <= 3:
        update(sys.argv[2] if len(sys.argv) == 3 else None)
    elif sys.argv[1:] == ["--update-readme"]:
        update(None, README)
    else:
        sys.exit('usage: python tests/test_tutorial.py --update ["CHAPTER"] | --update-readme')
