"""Every reader of outside input is bounded (issue 20, item 11).

`ctape import /dev/zero` once grew to 8 GB in 10 s: a line is read whole before it is
looked at. Now a record (a line, or a whole JSON document) longer than the limit
(256 MiB, docs/import.md; $CTAPE_MAX_RECORD lowers it here) is refused with one line,
exit 2, once that much is read, and nothing is written. Each run is a real subprocess
with a cap on its address space, so a reader that is not bounded fails the test
instead of the machine.
"""

import json
import os
import resource
import subprocess
import sys

import pytest

from conftest import run_cli, snapshot

LIMIT = 64 << 10  # CTAPE_MAX_RECORD in the fast tests
CAP = 2 << 30  # address space of the child: an unbounded reader dies here (MemoryError)
FORMATS = [None, "jsonl", "claude-code", "codex", "openai"]

def run_bounded(args, env=None, stdin=None, timeout=60):
    """Run ctape in a child with its address space capped; (returncode, stderr, peak RSS in MB)."""
    code = (
        "import resource, subprocess, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({CAP}, {CAP}))\n"
        "stdin = open(sys.argv[1], 'rb') if sys.argv[1] else None\n"
        "p = subprocess.run([sys.executable, '-m', 'ctape', *sys.argv[2:]], stdin=stdin, stderr=subprocess.PIPE)\n"
        "sys.stderr.buffer.write(p.stderr)\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    e = {**os.environ, **(env or {})}
    p = subprocess.run([sys.executable, "-c", code, stdin or "", *map(str, args)], capture_output=True, env=e, timeout=timeout)
    rc, kb = p.stdout.split()
    return int(rc), p.stderr.decode("utf-8", "replace"), int(kb) // 1024


def check_refused(tape_dir, args, env=None, stdin=None, timeout=60):
    before = snapshot(tape_dir)
    rc, err, peak = run_bounded(["--dir", tape_dir, *args], env, stdin, timeout)
    assert "Traceback" not in err and "internal error" not in err, err
    assert rc == 2, (rc, err)
    assert len(err.splitlines()) == 1 and err.startswith("ctape: error: "), err
    assert "longer than" in err or "more than" in err, err
    assert snapshot(tape_dir) == before, "a refused import changed the tape"
    return err, peak


def fmt_args(fmt, path):
    return ["import", *([fmt] if fmt else []), str(path), "-s", "big"]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f or "detected")
def test_dev_zero_is_refused(tape_dir, fmt):
    err, peak = check_refused(tape_dir, fmt_args(fmt, "/dev/zero"), env={"CTAPE_MAX_RECORD": str(LIMIT)})
    assert "/dev/zero: line 1 is longer than 65,536 bytes" in err
    assert peak < 200, f"peak memory {peak} MB"


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f or "detected")
def test_endless_stdin_is_refused_naming_stdin(tape_dir, fmt):
    # docs/import.md: messages name the input as given, `stdin` for `-` (this one said `-:`)
    err, _ = check_refused(tape_dir, fmt_args(fmt, "-"), env={"CTAPE_MAX_RECORD": str(LIMIT)}, stdin="/dev/zero")
    assert "ctape: error: stdin: line 1 is longer than 65,536 bytes" in err, err


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f or "detected")
def test_a_file_without_line_ends_is_refused(tape_dir, tmp_path, fmt):
    src = tmp_path / "one-line.json"
    src.write_bytes(b'{"role": "user", "content": "' + b"a" * (4 * LIMIT))  # no line end, never closed
    err, _ = check_refused(tape_dir, fmt_args(fmt, src), env={"CTAPE_MAX_RECORD": str(LIMIT)})
    assert "one-line.json" in err


def transcript(fmt, big: str) -> list:
    """Three records of `fmt`, the third holding the string `big`."""
    if fmt == "codex":
        rec = lambda i, text: {"timestamp": f"2026-01-01T00:00:0{i}Z", "type": "response_item",  # noqa: E731
                               "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}
    elif fmt in ("claude-code", None):
        rec = lambda i, text: {"type": "user", "uuid": f"u{i}", "parentUuid": f"u{i - 1}" if i > 1 else None, "sessionId": "s",  # noqa: E731
                               "timestamp": f"2026-01-01T00:00:0{i}Z", "message": {"role": "user", "content": text}}
    else:
        rec = lambda i, text: {"role": "user", "content": text}  # noqa: E731
    return [rec(1, "hi"), rec(2, "there"), rec(3, big)]


@pytest.mark.parametrize("fmt", [None, "claude-code", "codex", "openai"], ids=lambda f: f or "detected")
def test_a_long_line_in_the_middle_refuses_the_whole_file(tape_dir, tmp_path, fmt):
    env = {"CTAPE_MAX_RECORD": str(LIMIT)}
    at_limit = tmp_path / "ok.jsonl"  # a record of just under LIMIT bytes imports
    at_limit.write_text("".join(json.dumps(r) + "\n" for r in transcript(fmt, "y" * (LIMIT - 300))))
    assert LIMIT - 400 < max(len(line) for line in at_limit.read_bytes().splitlines()) <= LIMIT
    rc, err, _ = run_bounded(["--dir", tape_dir, *fmt_args(fmt, at_limit)], env=env)
    assert rc == 0, err

    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in transcript(fmt, "x" * (2 * LIMIT)) + transcript(fmt, "after")))
    err, _ = check_refused(tape_dir, [*fmt_args(fmt, src)[:-1], "other"], env=env)
    assert "line 3 is longer than" in err


def test_a_json_document_over_the_limit_is_refused(tape_dir, tmp_path):
    src = tmp_path / "chat.json"  # one document over many lines, each short
    src.write_text(json.dumps([{"role": "user", "content": f"message {i}"} for i in range(LIMIT // 20)], indent=2))
    err, _ = check_refused(tape_dir, fmt_args("openai", src), env={"CTAPE_MAX_RECORD": str(LIMIT)})
    assert "chat.json is longer than" in err


def test_append_from_stdin_is_bounded(tape_dir):
    err, peak = check_refused(tape_dir, ["append", "user", "-", "-s", "s"], env={"CTAPE_MAX_RECORD": str(LIMIT)}, stdin="/dev/zero")
    assert "stdin holds more than 65,536 bytes" in err and peak < 200


def test_dev_zero_with_the_real_limit_stops_by_itself(tape_dir):
    """The real limit (256 MiB): stops within seconds, memory well under 1 GB."""
    env = {"CTAPE_MAX_RECORD": ""}
    err, peak = check_refused(tape_dir, ["import", "/dev/zero", "-s", "z"], env=env, timeout=60)
    assert "longer than 268,435,456 bytes" in err
    assert peak < 600, f"peak memory {peak} MB"
    err, peak = check_refused(tape_dir, ["append", "user", "-", "-s", "s"], env=env, stdin="/dev/zero", timeout=60)
    assert "more than 268,435,456 bytes" in err
    assert peak < 600, f"peak memory {peak} MB"


# -- ctape watch (item 11, its readers) --------------------------------------------------------


def claude_line(i: int, text: str) -> bytes:
    rec = {"type": "user", "uuid": f"u{i}", "parentUuid": f"u{i - 1}" if i > 1 else None, "sessionId": f"sess{i // 1000}",
           "timestamp": "2026-01-01T00:00:01Z", "message": {"role": "user", "content": text}}
    return (json.dumps(rec) + "\n").encode()


def watch_bounded(tape_dir, folder, env):
    home = {"CLAUDE_CONFIG_DIR": str(folder / "no-claude"), "CODEX_HOME": str(folder / "no-codex")}
    return run_bounded(["--dir", tape_dir, "watch", "--once", "-j", "1", folder], env={**home, **env}, timeout=120)


def test_watch_skips_a_file_whose_line_never_ends(tape_dir, tmp_path):
    """`complete_lines` kept a line with no newline in memory however long it grew (a 1 GB
    file with no newline was held whole). Now that file is one error line and is skipped;
    the others are imported."""
    folder = tmp_path / "runs"
    folder.mkdir()
    good = folder / "good.jsonl"
    good.write_bytes(claude_line(1, "hello") + claude_line(2, "again"))
    endless = folder / "endless.jsonl"
    with open(endless, "wb") as f:
        f.write(claude_line(1001, "first"))
        f.truncate(1 << 30)  # then 1 GB of zeros with no line end (sparse: no disk used)
    rc, err, peak = watch_bounded(tape_dir, folder, {"CTAPE_MAX_RECORD": str(LIMIT)})
    assert "Traceback" not in err and "internal error" not in err, err
    assert rc == 1, (rc, err)
    bad = [ln for ln in err.splitlines() if "endless.jsonl" in ln]
    assert bad == [f"watch: {endless}: line 2 is longer than 65,536 bytes, the limit for one record (docs/import.md); "
                   "the file is skipped (set CTAPE_MAX_RECORD to allow longer records)"], err
    assert peak < 200, f"peak memory {peak} MB"
    from ctape import Tape

    with Tape.open(tape_dir) as t:
        assert "sess0" in t.session_names()
        assert [e.payload for e in t.session("sess0").log()][0]["content"] == "again"


def test_watch_refuses_a_long_line_that_ends(tape_dir, tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "long.jsonl").write_bytes(claude_line(1, "hi") + claude_line(2, "x" * (2 * LIMIT)) + claude_line(3, "after"))
    rc, err, _ = watch_bounded(tape_dir, folder, {"CTAPE_MAX_RECORD": str(LIMIT)})
    assert rc == 1 and "long.jsonl: line 2 is longer than 65,536 bytes" in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("ends", [True, False])
def test_watch_reports_a_first_line_over_the_limit_in_a_folder(tape_dir, tmp_path, ends):
    """(audit, 2026-12-06) A first line over the limit and longer than what watch reads to
    tell a file's format (1 MiB) was "not a transcript ctape knows" for a file named on
    the command line, and passed over in silence in a folder (exit 0, never imported).
    It is the limit's error line, as for any later line, complete or still being written."""
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "good.jsonl").write_bytes(claude_line(1, "hello"))
    big = folder / "big.jsonl"
    line = claude_line(1001, "x" * (2 << 20))
    big.write_bytes(line + claude_line(1002, "after") if ends else line[:-100])
    rc, err, _ = watch_bounded(tape_dir, folder, {"CTAPE_MAX_RECORD": str(LIMIT)})
    assert rc == 1 and [ln for ln in err.splitlines() if "big.jsonl" in ln] == [
        f"watch: {big}: line 1 is longer than 65,536 bytes, the limit for one record (docs/import.md); "
        "the file is skipped (set CTAPE_MAX_RECORD to allow longer records)"], err
    rc, err, _ = run_bounded(["--dir", tape_dir, "watch", "--once", big], env={"CTAPE_MAX_RECORD": str(LIMIT)})
    assert rc == 1 and "line 1 is longer than" in err and "not a transcript" not in err, err


def test_watch_bounds_what_a_zst_decompresses_to(tape_dir, tmp_path):
    """`_claude_full` read a whole `.jsonl.zst` into memory (z.read()): a small file that
    decompresses to gigabytes (a zstd bomb) filled it. Now it is decompressed as a stream
    into a temporary file and refused past 4 x CTAPE_MAX_RECORD."""
    import zstandard

    folder = tmp_path / "runs"
    folder.mkdir()
    lines = b"".join(claude_line(i, f"message {i}") for i in range(1, 201))
    (folder / "small.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines))
    bomb = claude_line(1001, "hi") + claude_line(1002, "y" * (LIMIT // 2)) * (16 * (4 * LIMIT) // (LIMIT // 2))
    (folder / "bomb.jsonl.zst").write_bytes(zstandard.ZstdCompressor(level=19).compress(bomb))
    assert len(bomb) > 16 * (4 * LIMIT) and (folder / "bomb.jsonl.zst").stat().st_size < len(bomb) // 100
    rc, err, peak = watch_bounded(tape_dir, folder, {"CTAPE_MAX_RECORD": str(LIMIT)})
    assert rc == 1, err
    assert [ln for ln in err.splitlines() if "bomb" in ln] == [
        f"watch: {folder / 'bomb.jsonl.zst'}: decompresses to more than 262,144 bytes, the limit for a compressed "
        "transcript (4 x CTAPE_MAX_RECORD, docs/import.md); the file is skipped"], err
    from ctape import Tape

    with Tape.open(tape_dir) as t:  # the small one, under the limit, is imported
        assert len(list(t.session("sess0").log())) == 200


# -- ctape stream ---------------------------------------------------------------------------------


def test_stream_stops_at_the_limit_and_keeps_what_came(tape_dir, tmp_path):
    """`cat /dev/zero | ctape stream -s x` wrote partial records until the disk was full. A
    stream now holds at most one record's bytes: past it, one line (exit 2), and the text up
    to the limit is one `streaming` entry, as after an interrupt (SPEC 6)."""
    from ctape import Tape

    src = tmp_path / "long.txt"
    src.write_bytes(("x" * (LIMIT - 1) + "é" + "y" * 3 * LIMIT).encode())  # the limit falls inside the é
    env = {"CTAPE_MAX_RECORD": str(LIMIT)}
    rc, err, peak = run_bounded(["--dir", tape_dir, "stream", "-s", "s"], env=env, stdin=src)
    assert rc == 2, (rc, err)
    assert err == ("ctape: error: the stream passed 65,536 bytes, the limit for one message; the text up to it "
                   "(65,535 characters) was kept as a streaming entry (set CTAPE_MAX_RECORD to allow more)\n"), err
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        [e] = list(s.log())
        assert e.kind == "streaming" and src.read_bytes().decode().startswith(e.payload["content"])
        assert e.payload["content"] == "x" * (LIMIT - 1)
        shown = s.status()["interrupted_stream"]  # reported, and recorded already
        assert shown["recorded"] is True and shown["content"] == e.payload["content"]
    p = run_cli("--dir", tape_dir, "stream", "-s", "s", env={"CTAPE_MAX_RECORD": str(8 * LIMIT)}, input=src.read_bytes())
    assert p.returncode == 0, p.stderr  # under the limit: one assistant entry, as ever
    with Tape.open(tape_dir) as t:
        assert [e.kind for e in t.session("s").log()] == ["assistant", "streaming"]


def test_stream_from_dev_zero_with_the_real_limit_stops_by_itself(tape_dir):
    env = {"CTAPE_MAX_RECORD": ""}
    before = sum(f.stat().st_size for f in tape_dir.rglob("*") if f.is_file())
    rc, err, peak = run_bounded(["--dir", tape_dir, "stream", "-s", "z"], env=env, stdin="/dev/zero", timeout=300)
    assert rc == 2 and "the stream passed 268,435,456 bytes" in err and len(err.splitlines()) == 1, err
    grew = sum(f.stat().st_size for f in tape_dir.rglob("*") if f.is_file()) - before
    assert grew < 2 * (256 << 20), f"the tape grew by {grew >> 20} MB"  # the partial records (until compact) and the entry
    assert peak < 1024, f"peak memory {peak} MB"
