"""`ctape import` reads what `ctape watch` reads (issue 24, item 5): a `.jsonl.zst` file,
stdin (`-`) and `/dev/stdin`, with or without a FORMAT; stdin is read once, so the format
is detected on what was read. The entries are those of the plain file."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from conftest import run_cli, snapshot

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
CODEX = FIXTURES / "codex-rollout" / "madshn__localpush__rollout-2026-02-23T13-19-38-019c8a70-dda7-7f33-98ea-f30553347322.jsonl"
CLAUDE = FIXTURES / "claude-code" / "daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"


def hashes(tape_dir, session):
    p = run_cli("--dir", tape_dir, "log", "-s", session, "--json", "--hidden", check=True)
    return [json.loads(x)["hash"] for x in p.stdout.splitlines()]


@pytest.fixture
def plain(tmp_path):
    """The entries of the plain files, imported into a tape of their own."""
    d = tmp_path / "plain"
    run_cli("init", d, check=True)
    run_cli("--dir", d, "import", CODEX, "-s", "cx", check=True)
    run_cli("--dir", d, "import", CLAUDE, "-s", "cc", check=True)
    return {"cx": hashes(d, "cx"), "cc": hashes(d, "cc")}


@pytest.mark.parametrize("fmt", [None, "codex"])
def test_a_zst_file_imports_as_the_plain_file(tape_dir, tmp_path, plain, fmt):
    z = tmp_path / (CODEX.name + ".zst")
    z.write_bytes(zstandard.ZstdCompressor().compress(CODEX.read_bytes()))
    p = run_cli("--dir", tape_dir, "import", *([fmt] if fmt else []), z, "-s", "cx")
    assert p.returncode == 0, p.stderr
    assert f"from {z} into session cx" in p.stderr.decode()
    assert hashes(tape_dir, "cx") == plain["cx"]
    assert not [n for n in os.listdir("/tmp") if n.startswith("ctape-import-") and os.path.getmtime("/tmp/" + n) > z.stat().st_mtime]


@pytest.mark.parametrize("fmt", [None, "codex"])
@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_stdin_imports_as_the_plain_file(tape_dir, plain, fmt, name):
    p = run_cli("--dir", tape_dir, "import", *([fmt] if fmt else []), name, "-s", "cx", input=CODEX.read_bytes())
    assert p.returncode == 0, p.stderr
    assert hashes(tape_dir, "cx") == plain["cx"]


def test_a_pipe_is_read_once_and_detected(tape_dir, plain):
    """A real pipe (not a file handed over as stdin): detection must not read it twice."""
    with open(CLAUDE, "rb") as f:
        cat = subprocess.Popen(["cat"], stdin=f, stdout=subprocess.PIPE)
        try:
            p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "import", "-", "-s", "cc"], stdin=cat.stdout, capture_output=True, timeout=60)
        finally:
            cat.stdout.close()  # a reader that stopped early: cat gets EPIPE and ends
            cat.wait(timeout=60)
    assert p.returncode == 0, p.stderr
    assert hashes(tape_dir, "cc") == plain["cc"]


def test_stdin_takes_its_session_name_from_the_records(tape_dir):
    p = run_cli("--dir", tape_dir, "import", "-", input=CODEX.read_bytes())
    assert p.returncode == 0, p.stderr
    assert "from stdin into session 019c8a70-dda7-7f33-98ea-f30553347322" in p.stderr.decode()


def test_bad_input_on_stdin_and_a_bad_zst_change_nothing(tape_dir, tmp_path):
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "import", "-", input=b"hello\n")
    assert p.returncode == 2 and len(p.stderr.decode().splitlines()) == 1 and "Traceback" not in p.stderr.decode(), p.stderr
    bad = tmp_path / "x.jsonl.zst"
    bad.write_bytes(b"not zstd at all\n")
    p = run_cli("--dir", tape_dir, "import", "codex", bad)
    err = p.stderr.decode()
    assert p.returncode == 2 and "not a zstd file" in err and len(err.splitlines()) == 1, err
    assert snapshot(tape_dir) == before


def test_one_record_is_one_record(tape_dir, tmp_path):
    """`imported 1 records` (issue 24, item 9): the counts agree with their nouns."""
    line = json.dumps({"role": "user", "content": "hi"}) + "\n"
    src = tmp_path / "one.jsonl"
    src.write_text(line)
    p = run_cli("--dir", tape_dir, "import", src, "-s", "one", check=True)
    assert "imported 1 record from" in p.stderr.decode() and "(1 entry)" in p.stderr.decode(), p.stderr
    p = run_cli("--dir", tape_dir, "import", src, "-s", "one", check=True)
    assert "already holds its record" in p.stderr.decode(), p.stderr


@pytest.mark.parametrize("fmt", [None, "codex"])
@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_compressed_stdin_imports_as_the_plain_file(tape_dir, plain, fmt, name):
    """SPEC 13: `import` reads `.jsonl.zst` and `-`: a compressed stream on stdin (or a pipe,
    which has no name to end in .zst) is told by zstd's magic number, in two frames here."""
    raw = CODEX.read_bytes()
    half = len(raw) // 2
    z = zstandard.ZstdCompressor().compress(raw[:half]) + zstandard.ZstdCompressor().compress(raw[half:])
    p = run_cli("--dir", tape_dir, "import", *([fmt] if fmt else []), name, "-s", "cx", input=z)
    assert p.returncode == 0, p.stderr
    assert hashes(tape_dir, "cx") == plain["cx"]


def test_damaged_compressed_stdin_is_refused_and_changes_nothing(tape_dir):
    run_cli("--dir", tape_dir, "append", "user", "--text", "hi", "-s", "s", check=True)
    before = snapshot(tape_dir)
    z = zstandard.ZstdCompressor().compress(CODEX.read_bytes())
    p = run_cli("--dir", tape_dir, "import", "codex", "-", "-s", "cx", input=z[:4] + bytes(64) + z[68:])
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and err.startswith("ctape: error: ") and "Traceback" not in err, err
    assert snapshot(tape_dir) == before


def test_a_grown_transcript_says_how_many_entries_are_new(tape_dir, tmp_path):
    """A transcript imported again after it grew said "imported 25 records (25 entries)"
    where 5 were new: the count of what the file holds, read as what the import added. Real
    Claude Code and Codex transcripts, cut and then whole; `ctape export` files too."""
    from ctape import Tape

    transcripts = Path("/work/shared/fixtures/transcripts")
    cases = [("claude-code", sorted((transcripts / "claude-code").glob("*.jsonl"))[0]),
             ("codex", sorted((transcripts / "codex-rollout").glob("*.jsonl"))[0])]
    for name, path in cases:
        lines = path.read_bytes().splitlines(keepends=True)
        src = tmp_path / f"{name}.jsonl"
        src.write_bytes(b"".join(lines[:15]))
        first = run_cli("--dir", tape_dir, "import", src, "-s", name, check=True).stderr.decode()
        assert "new to the tape" not in first, first  # all of it is new
        n = len(list(Tape.open(tape_dir).session(name).log()))
        src.write_bytes(b"".join(lines))
        again = run_cli("--dir", tape_dir, "import", src, "-s", name, check=True).stderr.decode()
        m = len(list(Tape.open(tape_dir).session(name).log()))
        assert f"{m - n} new to the tape)" in again, (again, n, m)
    out = tmp_path / "export.jsonl"
    out.write_bytes(run_cli("--dir", tape_dir, "export", "codex", check=True).stdout)
    p = run_cli("--dir", tape_dir, "import", out, "-s", "copy", check=True)
    assert "(0 new to the tape)" in p.stderr.decode(), p.stderr  # another session's entries: stored once
