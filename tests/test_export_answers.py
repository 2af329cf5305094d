"""What an export to another agent's format makes of an `error` that answers a tool call
and of an interrupted stream, checked by importing the file back (a black-box audit, F4
and F5), and `ctape import -` of records without a session id (F8).

- An error that answers a call went out as an API error line / an error event without its
  call id: after the round trip the call was pending, and `context` answered it with the
  fixed "interrupted" result instead of the error. Now it is the format's failed tool
  result, which an import reads back as a `tool_result` (with `is_error` where the format
  has the flag): the call stays answered and the error's text reaches the prompt.
- An interrupted stream at the end of a branch went out as a finished assistant message,
  so the re-imported `context` (--resume drop) held the partial text as a real answer.
  No format has a record for one (a Claude Code `stop_reason: null` is on nearly every
  line of a real file), so it is left out, as `context` leaves it out, and a note says so.
- `ctape import -` of such records made a session named `stdin`; it needs `-s`.
"""

from __future__ import annotations

import json

import pytest

from ctape import Tape
from ctape.errors import InvalidInput
from ctape.formats import export_notes, export_ref, import_files

from conftest import run_cli

FORMATS = ["claude-code", "codex", "openai", "gemini"]


def round_trip(tape, tmp_path, ref: str, fmt: str, name: str) -> list[str]:
    """Export REF in `fmt`, import the file into session `name`; the export's notes."""
    tally: dict = {}
    text = "\n".join(export_ref(tape, ref, fmt, tally)) + "\n"
    notes = export_notes(tape, ref, fmt, tally)
    path = tmp_path / f"{name}.{fmt}.jsonl"
    path.write_text(text)
    import_files(tape, fmt, [str(path)], name)
    return notes


def tool_messages(view: list) -> list:
    return [m for m in view if m.get("role") == "tool"]


@pytest.fixture
def answered_by_error(tmp_path):
    t = Tape.init(tmp_path / "t")
    s = t.session("c")
    s.append("user", {"content": "show x"})
    s.append("tool_call", {"call_id": "b", "name": "cat", "arguments": {"f": "x"}})
    s.append("error", {"message": "cat failed", "call_id": "b"})
    s.append("user", {"content": "next"})
    yield t
    t.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_call_answered_by_an_error_stays_answered(answered_by_error, tmp_path, fmt):
    t = answered_by_error
    assert t.session("c").status()["pending_tool_calls"] == []
    notes = round_trip(t, tmp_path, "c", fmt, "back")
    back = t.session("back")
    assert back.status()["pending_tool_calls"] == []  # was: call b pending
    before, after = t.session("c").context(), back.context()
    assert [m["role"] for m in after] == [m["role"] for m in before]
    (result,) = tool_messages(after)
    assert result["tool_call_id"] == "b" and "cat failed" in result["content"]  # was: the "interrupted" result
    assert "interrupted" not in json.dumps(after)
    # what came back, and the note that says it
    (entry,) = [e for e in back.log() if e.kind in ("tool_result", "error")]
    assert entry.kind == "tool_result" and entry.payload["call_id"] == "b" and entry.payload["output"] == "cat failed"
    flagged = fmt in ("claude-code", "gemini")  # Codex outputs and OpenAI tool messages carry no error flag
    assert (entry.payload.get("is_error") is True) == flagged
    (note,) = [n for n in notes if "answers a tool call" in n]
    assert "1 error" in note and "reads back as a tool_result entry" in note and ("with is_error" in note) == flagged
    # the anthropic view marks it as failed when the format kept the flag
    blocks = [b for m in back.context(format="anthropic")["messages"] for b in m["content"] if b.get("type") == "tool_result"]
    assert [b.get("is_error") is True for b in blocks] == [flagged]


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_error_that_answers_no_call_is_not_made_a_result(tmp_path, fmt):
    """A guard (it passed before, but for openai, which wrote a tool message for no call):
    only an error that answers a call on its path becomes a result."""
    with Tape.init(tmp_path / "t") as t:
        s = t.session("c")
        s.append("user", {"content": "q"})
        s.append("error", {"message": "rate limited"})  # no call id
        s.append("error", {"message": "stray", "call_id": "nope"})  # names no call on its path
        s.append("assistant", {"content": "a"})
        notes = round_trip(t, tmp_path, "c", fmt, "back")
        back = list(t.session("back").log(hidden=True))
        assert not any(e.kind == "tool_result" for e in back)
        assert not any("answers a tool call" in n for n in notes)
        assert tool_messages(t.session("back").context()) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_error_of_a_call_imported_from_the_format(tmp_path, fmt):
    """A call that came from the format itself, answered by an error appended later (openai
    handled it before: a guard there)."""
    with Tape.init(tmp_path / "t") as t:
        s = t.session("c")
        s.append("user", {"content": "show x"})
        s.append("tool_call", {"call_id": "b", "name": "cat", "arguments": {"f": "x"}})
        round_trip(t, tmp_path, "c", fmt, "once")
        once = t.session("once")
        assert [c["call_id"] for c in once.status()["pending_tool_calls"]] == ["b"]
        once.append("error", {"message": "cat failed", "call_id": "b"})
        assert once.status()["pending_tool_calls"] == []
        round_trip(t, tmp_path, "once", fmt, "twice")
        twice = t.session("twice")
        assert twice.status()["pending_tool_calls"] == []
        (result,) = tool_messages(twice.context())
        assert "cat failed" in result["content"]


def interrupted(tmp_path, then: bool = False):
    t = Tape.init(tmp_path / "t")
    s = t.session("p")
    s.append("user", {"content": "q"})
    try:
        with s.stream() as w:
            w.write("partial answer ")
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    if then:  # the agent went on: the stream is no longer at HEAD
        s.append("user", {"content": "go on"})
    else:
        s.recover()
    kinds = [e.kind for e in s.log()]  # newest first
    assert kinds[1 if then else 0] == "streaming"
    return t


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_interrupted_stream_is_not_a_finished_answer_after_a_round_trip(tmp_path, fmt):
    with interrupted(tmp_path) as t:
        s = t.session("p")
        assert s.status()["interrupted_stream"] is not None
        before = s.context()
        assert before == [{"role": "user", "content": "q"}]
        notes = round_trip(t, tmp_path, "p", fmt, "p2")
        back = t.session("p2")
        assert back.context() == before  # was: the partial text as an assistant answer
        assert "partial answer" not in json.dumps([e.payload for e in back.log(hidden=True)])
        (note,) = [n for n in notes if "interrupted stream" in n]
        assert note.startswith(f"{fmt} has no record for interrupted streams: 1 interrupted stream") and "left out" in note


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_interrupted_stream_the_agent_went_on_from(tmp_path, fmt):
    """Followed by more, the stream is an assistant message in `context`: it goes out as one,
    and the note says that an import reads it back as a finished one."""
    with interrupted(tmp_path, then=True) as t:
        s = t.session("p")
        before = s.context()
        assert before[1] == {"role": "assistant", "content": "partial answer "}
        notes = round_trip(t, tmp_path, "p", fmt, "p2")
        assert t.session("p2").context() == before
        (note,) = [n for n in notes if "interrupted stream" in n]
        assert "went out as an assistant message" in note and "finished" in note


def test_a_ref_export_leaves_out_only_the_stream_at_its_end(tmp_path):
    with interrupted(tmp_path) as t:
        tally: dict = {}
        lines = list(export_ref(t, "p/main", "openai", tally))
        assert [json.loads(x)["content"] for x in lines] == ["q"]
        assert any("interrupted stream" in n for n in export_notes(t, "p/main", "openai", tally))


def test_jsonl_keeps_both(answered_by_error, tmp_path):
    """A guard: ctape's own format needs no note and keeps the kinds."""
    t = answered_by_error
    notes = round_trip(t, tmp_path, "c", "jsonl", "copy")
    assert notes == []
    assert [e.kind for e in t.session("copy").log()] == [e.kind for e in t.session("c").log()]


# -- F8: stdin without a session id -----------------------------------------------------

NO_SESSION_ID = {
    "claude-code": '{"type":"user","uuid":"u1","parentUuid":null,"timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"hi"}}\n',
    "codex": '{"timestamp":"2026-01-01T00:00:00Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}\n',
    "openai": '[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]\n',
    "gemini": '{"type":"user","id":"m1","timestamp":"2026-01-01T00:00:00Z","content":[{"text":"hi"}]}\n',
}


def jsonl_without_session(tmp_path) -> str:
    """A ctape export whose header and refs line name no session."""
    with Tape.init(tmp_path / "src") as t:
        t.session("x").append("user", {"content": "hi"})
        lines = [json.loads(x) for x in export_ref(t, "x", "jsonl")]
    for line in lines:
        line.pop("session", None)
    return "".join(json.dumps(x) + "\n" for x in lines)


def files_of(d) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("fmt", list(NO_SESSION_ID) + ["jsonl"])
@pytest.mark.parametrize("named", [True, False])
def test_stdin_without_a_session_id_needs_s(tmp_path, fmt, named):
    """(jsonl refused it before too: a guard there.)"""
    d = tmp_path / "t"
    Tape.init(d).close()
    text = jsonl_without_session(tmp_path) if fmt == "jsonl" else NO_SESSION_ID[fmt]
    args = ["import"] + ([fmt] if named else []) + ["-"]
    before = files_of(d)
    p = run_cli("--dir", d, *args, input=text.encode())
    err = p.stderr.decode()
    assert p.returncode == 2 and len(err.strip().splitlines()) == 1 and "-s NAME" in err, err  # was: session `stdin`
    assert files_of(d) == before  # nothing written
    # with -s it is imported
    p = run_cli("--dir", d, *args, "-s", "named", input=text.encode())
    assert p.returncode == 0, p.stderr
    with Tape.open(d) as t:
        assert [x["session"] for x in t.sessions()] == ["named"]


def test_stdin_api_refuses_too(tmp_path, monkeypatch):
    import io
    import sys

    with Tape.init(tmp_path / "t") as t:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(NO_SESSION_ID["openai"].encode())))
        with pytest.raises(InvalidInput, match="-s NAME"):
            import_files(t, "openai", ["-"], None)
        assert t.sessions() == []


def test_stdin_with_a_session_id_names_the_session(tmp_path):
    """A guard: records that carry a session id name it, stdin or not."""
    d = tmp_path / "t"
    Tape.init(d).close()
    line = json.loads(NO_SESSION_ID["claude-code"])
    line["sessionId"] = "abc-123"
    p = run_cli("--dir", d, "import", "-", input=(json.dumps(line) + "\n").encode())
    assert p.returncode == 0, p.stderr
    assert "into session abc-123" in p.stderr.decode()


def test_a_file_named_stdin_still_names_its_session(tmp_path):
    """A guard: only stdin itself has no name to give."""
    d = tmp_path / "t"
    Tape.init(d).close()
    (tmp_path / "stdin.json").write_text(NO_SESSION_ID["openai"])
    p = run_cli("--dir", d, "import", "openai", tmp_path / "stdin.json")
    assert p.returncode == 0, p.stderr
    assert "into session stdin" in p.stderr.decode()
