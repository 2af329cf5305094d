"""A transcript whose first line is cut or garbage is still a transcript (found by the long
mode of tests/test_watch_model.py, seed 10).

`ctape import FILE` and `ctape watch` tell a file's format from its first lines. A first
line that is no JSON but opens a bracket was taken for one JSON document written over
several lines; when the file was not one, import refused it ("not JSON and not JSON
Lines") and watch called it "not a transcript", although every line after it is a Codex
or Claude Code record, and `ctape import codex FILE` imports it (keeping that line as it
is). Now such a file's lines are judged one by one, as any other's. Watch waits, without
an error, while every line so far is such a line (a record being written); a file of text
named on the command line is still refused at once.
"""

import json

import pytest
from test_watch import CLAUDE, CODEX, session_of
from test_watch_audit import watch

from ctape import Tape

from conftest import run_cli

GARBAGE = b'{"half a record", "never finished\n'


def _entries(tape_dir, session):
    with Tape.open(tape_dir) as t:
        s = t.session(session)
        return [e.hash for e in s.log(s.refs().branches["main"])]


@pytest.mark.parametrize("source,fmt", [(CODEX, "codex"), (CLAUDE, "claude-code")], ids=["codex", "claude-code"])
def test_import_finds_the_format_past_a_garbage_first_line(tmp_path, source, fmt):
    f = tmp_path / "t.jsonl"
    f.write_bytes(GARBAGE + source.read_bytes())
    detected, named = tmp_path / "a", tmp_path / "b"
    for d in (detected, named):
        run_cli("--dir", d, "init", check=True)
    p = run_cli("--dir", detected, "import", f)
    assert p.returncode == 0, p.stderr.decode()
    run_cli("--dir", named, "import", fmt, f, check=True)
    name = session_of(source, fmt)
    got = _entries(detected, name)
    assert got and got == _entries(named, name)  # the same entries as with the format named


@pytest.mark.parametrize("source,fmt", [(CODEX, "codex"), (CLAUDE, "claude-code")], ids=["codex", "claude-code"])
def test_watch_waits_on_a_garbage_first_line_then_imports(tape_dir, tmp_path, source, fmt):
    f = tmp_path / "t.jsonl"
    first = source.read_bytes().split(b"\n", 1)[0]
    f.write_bytes(GARBAGE + first[: len(first) // 2])  # a garbage line, then a record being written
    p = watch(tape_dir, f)
    assert p.returncode == 0 and b"not a transcript" not in p.stderr, p.stderr.decode()
    f.write_bytes(GARBAGE + source.read_bytes())
    p = watch(tape_dir, f)
    assert p.returncode == 0, p.stderr.decode()
    assert _entries(tape_dir, session_of(source, fmt))


@pytest.mark.parametrize("content", [b"hello\nworld\n", b'{"foo": 1}\n', GARBAGE + b"plain text\n"], ids=["text", "json", "garbage-then-text"])
def test_watch_still_refuses_a_named_file_that_is_no_transcript(tape_dir, tmp_path, content):
    f = tmp_path / "notes.txt"
    f.write_bytes(content)
    p = watch(tape_dir, f)
    assert p.returncode == 1 and b"not a transcript ctape knows" in p.stderr, p.stderr.decode()


@pytest.mark.parametrize("content", ["{\"role\": \"user\", \"content\": \"caf\xe9\"}\n".encode("latin-1"), GARBAGE, GARBAGE * 3],
                         ids=["latin-1", "one-garbled-line", "garbled-lines"])
def test_watch_once_refuses_a_named_file_of_complete_lines_that_tell_nothing(tape_dir, tmp_path, content):
    """A few complete lines that are no JSON, nothing being written after them: one pass
    (--once) has all there is, and refuses the file as `ctape import` does (an audit found
    it passed over in silence, exit 0, below the lines that settle a format)."""
    f = tmp_path / "t.jsonl"
    f.write_bytes(content)
    p = watch(tape_dir, f)
    assert p.returncode == 1 and b"not a transcript ctape knows" in p.stderr, p.stderr.decode()
    assert len(p.stderr.decode().strip().splitlines()) == 1


def test_watch_once_refuses_a_named_file_whose_garbled_lines_pass_the_first_mib(tape_dir, tmp_path):
    # the check of "nothing is being written" looked at the end of the first 1 MiB read for
    # the format, not at the file's end: long garbled lines passed over in silence (a review)
    f = tmp_path / "t.jsonl"
    f.write_bytes((b'{"half a record", "' + b"x" * 600_000 + b'\n') * 3)
    p = watch(tape_dir, f)
    assert p.returncode == 1 and b"not a transcript ctape knows" in p.stderr, p.stderr.decode()


def test_import_still_refuses_a_broken_json_document(tmp_path):
    f = tmp_path / "chat.json"
    f.write_bytes(json.dumps([{"role": "user", "content": "hi"}], indent=1).encode()[:-3])
    run_cli("--dir", tmp_path / "t", "init", check=True)
    p = run_cli("--dir", tmp_path / "t", "import", f)
    assert p.returncode == 2 and b"not JSON and not JSON Lines" in p.stderr, p.stderr.decode()
