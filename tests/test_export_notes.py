"""`ctape export --format F` says on stderr what F cannot carry: a system prompt or a
milestone that goes out as a notice line, an entry left out. It said nothing, so a system
prompt exported to Claude Code came back from an import as hidden bookkeeping, unnoticed.
Each note's claim is checked against what an import of the exported file gives back."""

from __future__ import annotations

import json

import pytest

from ctape import Tape

from conftest import run_cli

FORMATS = ["claude-code", "codex", "openai", "gemini"]
NOTE = {  # what each format's note says, and the kinds it names
    "claude-code": ("went out as system notice lines", ["system", "anchor"]),
    "codex": ("went out as background events", ["anchor"]),
    "openai": ("left out", ["anchor", "error"]),
    "gemini": ("went out as info lines", ["system", "anchor"]),
}


def cli(d, *args, check=True):
    return run_cli("--dir", d, *args, check=check)


@pytest.fixture
def every_kind(tmp_path):
    d = tmp_path / "t"
    with Tape.init(d) as t:
        s = t.session("chat")
        s.append("system", {"content": "You are careful."})
        s.append("user", {"content": "hi"})
        s.append("anchor", {"name": "milestone"})
        s.append("assistant", {"content": "hello"})
        s.append("error", {"message": "boom"})
    return d


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_note_for_what_the_format_cannot_carry_and_an_import_agrees(every_kind, fmt, tmp_path):
    p = cli(every_kind, "export", "chat", "--format", fmt)
    notes = p.stderr.decode().splitlines()
    how, kinds = NOTE[fmt]
    assert len(notes) == 1 and notes[0].startswith(f"note: {fmt} has no record for") and how in notes[0], notes
    assert "export --format jsonl keeps every entry" in notes[0]
    for kind in ("system message", "anchor", "error"):
        named = {"system message": "system", "anchor": "anchor", "error": "error"}[kind]
        assert (f"1 {kind}" in notes[0]) == (named in kinds), (kind, notes)
    # the oracle: import the file and look at what came back
    src = tmp_path / f"chat.{fmt}.jsonl"
    src.write_bytes(p.stdout)
    cli(every_kind, "import", fmt, src, "-s", "back")
    with Tape.open(every_kind) as t:
        back = list(t.session("back").log(hidden=True))
        visible = [e for e in back if not (isinstance(e.meta, dict) and e.meta.get("ctape.hidden"))]
        texts = [json.dumps(e.payload) for e in visible]
    assert any("hello" in x for x in texts) and any("hi" in x for x in texts)
    assert any("You are careful." in x for x in texts) == ("system" not in kinds)  # demoted: hidden
    assert not any(e.kind == "anchor" for e in back)  # no format has anchors
    if how == "left out":
        assert not any("milestone" in json.dumps(e.payload) for e in back)


@pytest.mark.parametrize("fmt", FORMATS + ["jsonl"])
def test_no_note_when_everything_is_carried(tmp_path, fmt):
    d = tmp_path / "t"
    with Tape.init(d) as t:
        s = t.session("chat")
        s.append("user", {"content": "weather in Paris?"})
        s.append("tool_call", {"name": "weather", "arguments": {"city": "Paris"}, "call_id": "c1"})
        s.append("tool_result", {"call_id": "c1", "output": "sunny"})
        s.append("assistant", {"content": "Sunny."})
    assert cli(d, "export", "chat", "--format", fmt).stderr == b""


def test_the_count_covers_the_path_exported(every_kind):
    """A REF exports root -> REF: only what is on it is counted."""
    err = cli(every_kind, "export", "chat/main~2", "--format", "openai").stderr.decode()
    assert err.splitlines() == ["note: openai has no record for anchors: 1 anchor left out (export --format jsonl keeps every entry as it is)"]
