"""Import fidelity audit: a complete last line is kept, milestone anchors are no
compactions in other formats, and a tampered `seq` in an `import jsonl` file is refused.
Every test runs the real CLI."""

import json
from pathlib import Path

import pytest
from conftest import run_cli, snapshot

GEMINI = Path(__file__).parent / "fixtures" / "gemini" / "session-2026-03-11T21-02-7a2b9c10.jsonl"

CC = {"type": "user", "message": {"role": "user", "content": "hi"}, "uuid": "u1", "parentUuid": None, "sessionId": "s1", "timestamp": "2025-01-01T00:00:00Z"}
CODEX = [
    {"timestamp": "2025-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": "s1"}},
    {"timestamp": "2025-01-01T00:00:01Z", "type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}},
]
OPENAI = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]

# JSON text ctape cannot store as parsed: a number that overflows a float, and nesting
# deeper than a record may be (300 levels)
UNSTORABLE = {
    "1e400": lambda rec: json.dumps(rec)[:-1] + ', "n": 1e400}',
    "deep": lambda rec: json.dumps(rec)[:-1] + ', "n": ' + "[" * 300 + "]" * 300 + "}",
}


def records(fmt):
    """Two good records of the format, and one to make the unstorable line from."""
    if fmt == "claude-code":
        return [CC, dict(CC, uuid="u2", parentUuid="u1")], dict(CC, uuid="u3", parentUuid="u2")
    if fmt == "codex":
        return CODEX, CODEX[1]
    if fmt == "gemini":
        lines = [json.loads(x) for x in GEMINI.read_text().splitlines() if x.strip()]
        return lines, {"id": "m-extra", "timestamp": "2026-03-11T21:10:00.000Z", "type": "user", "content": [{"text": "more"}]}
    return OPENAI, OPENAI[0]


def exported(tape_dir, session, fmt):
    p = run_cli("--dir", tape_dir, "export", session, "--format", fmt, check=True)
    return p.stdout.decode().splitlines()


def import_text(tape_dir, tmp_path, fmt, text, name="t.jsonl"):
    src = tmp_path / name
    src.write_text(text)
    p = run_cli("--dir", tape_dir, "import", fmt, src, "-s", "s", check=True)
    return p.stdout.decode() + p.stderr.decode()


# -- 1. a newline-terminated last line is complete: kept verbatim ------------------------------


@pytest.mark.parametrize("bad", sorted(UNSTORABLE))
@pytest.mark.parametrize("fmt", ["claude-code", "codex", "openai", "gemini"])
def test_complete_last_line_ctape_cannot_store_is_kept_verbatim(tape_dir, tmp_path, fmt, bad):
    good, base = records(fmt)
    line = UNSTORABLE[bad](base)
    head = "".join(json.dumps(r) + "\n" for r in good)
    said = import_text(tape_dir, tmp_path, fmt, head + line + "\n")
    assert "incomplete" not in said and "kept 1 line that is not JSON as it is" in said
    out = exported(tape_dir, "s", fmt)
    assert len(out) == len(good) + 1
    assert out[-1] == line  # verbatim
    assert [json.loads(x) for x in out[:-1]] == good


@pytest.mark.parametrize("fmt", ["claude-code", "codex", "openai", "gemini"])
def test_last_line_is_kept_as_the_same_line_in_the_middle(tape_dir, tmp_path, fmt):
    good, base = records(fmt)
    line = UNSTORABLE["1e400"](base)
    at_end = "".join(json.dumps(r) + "\n" for r in good) + line + "\n"
    in_middle = "".join(json.dumps(r) + "\n" for r in good[:1]) + line + "\n" + "".join(json.dumps(r) + "\n" for r in good[1:])
    import_text(tape_dir, tmp_path, fmt, at_end, "end.jsonl")
    end = exported(tape_dir, "s", fmt)
    other = tmp_path / "other"
    run_cli("init", other, check=True)
    import_text(other, tmp_path, fmt, in_middle, "middle.jsonl")
    middle = exported(other, "s", fmt)
    assert sorted(end) == sorted(middle) and line in end


@pytest.mark.parametrize("fmt", ["claude-code", "codex", "openai", "gemini"])
def test_last_line_without_its_end_that_is_not_json_is_skipped(tape_dir, tmp_path, fmt):
    good, base = records(fmt)
    cut = json.dumps(base)[:25]
    said = import_text(tape_dir, tmp_path, fmt, "".join(json.dumps(r) + "\n" for r in good) + cut)
    assert f"skipped the incomplete last line {len(good) + 1}" in said
    assert [json.loads(x) for x in exported(tape_dir, "s", fmt)] == good


def test_complete_json_without_its_line_end_is_kept(tape_dir, tmp_path):
    """Complete JSON text is no line being written, even without its newline: kept as text."""
    good, base = records("claude-code")
    line = UNSTORABLE["1e400"](base)
    said = import_text(tape_dir, tmp_path, "claude-code", "".join(json.dumps(r) + "\n" for r in good) + line)
    assert "incomplete" not in said
    assert exported(tape_dir, "s", "claude-code")[-1] == line


def test_watch_waits_for_a_line_without_its_end(tape_dir, tmp_path):
    good, base = records("gemini")
    src = tmp_path / "session-w.jsonl"
    head = "".join(json.dumps(r) + "\n" for r in good)
    src.write_text(head + json.dumps(base)[:30])
    run_cli("--dir", tape_dir, "watch", "--once", "-q", src, check=True)
    sid = good[0]["sessionId"]
    assert [json.loads(x) for x in exported(tape_dir, sid, "gemini")] == good
    src.write_text(head + json.dumps(base) + "\n")
    run_cli("--dir", tape_dir, "watch", "--once", "-q", src, check=True)
    assert [json.loads(x) for x in exported(tape_dir, sid, "gemini")] == good + [base]


# -- 2. a milestone anchor is no compaction in another format ---------------------------------


def milestone_session(tape_dir, anchor_payload=None):
    for kind in ("system", "user"):
        run_cli("--dir", tape_dir, "append", kind, json.dumps({"content": kind}), "-s", "s", check=True)
    if anchor_payload is None:
        run_cli("--dir", tape_dir, "anchor", "tests-green", "-s", "s", check=True)
    else:
        run_cli("--dir", tape_dir, "append", "anchor", json.dumps(anchor_payload), "-s", "s", check=True)
    run_cli("--dir", tape_dir, "append", "assistant", '{"content": "done"}', "-s", "s", check=True)


def reimported_context(tape_dir, tmp_path, fmt):
    f = tmp_path / f"x.{fmt}.jsonl"
    f.write_bytes(run_cli("--dir", tape_dir, "export", "s", "--format", fmt, check=True).stdout)
    back = tmp_path / "back"
    run_cli("init", back, check=True)
    run_cli("--dir", back, "import", fmt, f, "-s", "back", check=True)
    ctx = json.loads(run_cli("--dir", back, "context", "-s", "back", check=True).stdout)
    return f.read_text(), [m["content"] for m in ctx]


@pytest.mark.parametrize("fmt,kept", [
    # Claude Code files hold no system prompt: a native system entry comes back as a status line
    ("claude-code", ["user", "done"]),
    ("codex", ["system", "user", "done"]),
    ("openai", ["system", "user", "done"]),
    ("gemini", ["user", "done"]),
])
def test_milestone_anchor_exports_as_no_compaction(tape_dir, tmp_path, fmt, kept):
    milestone_session(tape_dir)
    text, ctx = reimported_context(tape_dir, tmp_path, fmt)
    assert "compact_boundary" not in text and '"compacted"' not in text
    assert ctx == kept
    if fmt in ("claude-code", "codex"):
        assert "tests-green" in text  # written as a status line / background event, not lost


@pytest.mark.parametrize("fmt,marker", [("claude-code", '"subtype":"compact_boundary"'), ("codex", '"type":"compacted"')])
def test_compaction_anchor_still_exports_as_compaction(tape_dir, tmp_path, fmt, marker):
    milestone_session(tape_dir, {"name": "compacted", "summary": "the story so far", "compaction": True})
    text, ctx = reimported_context(tape_dir, tmp_path, fmt)
    assert marker in text
    assert "user" not in ctx and ctx[-1] == "done"


# -- 3. import jsonl refuses a tampered seq (exit 2, tape unchanged) ----------------------------


def export_lines(tape_dir):
    for text in ("a", "b"):
        run_cli("--dir", tape_dir, "append", "user", json.dumps({"content": text}), "-s", "s", check=True)
    out = run_cli("--dir", tape_dir, "export", "s", check=True).stdout.decode()
    return [json.loads(x) for x in out.splitlines()]


def refused(tmp_path, lines):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(x) + "\n" for x in lines))
    target = tmp_path / "u"
    run_cli("init", target, check=True)
    before = snapshot(target)
    p = run_cli("--dir", target, "import", "jsonl", bad)
    err = p.stderr.decode()
    assert p.returncode == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err
    assert snapshot(target) == before
    return err


@pytest.mark.parametrize("line,value,says", [
    (2, 99, "bad.jsonl:3: seq 99 does not follow its parent's (1)"),
    (1, 99, "bad.jsonl:2: seq 99 is not 1"),
    (1, 0, "bad.jsonl:2: seq 0 is not 1"),
    (2, "x", "bad.jsonl:3: seq \"x\" does not follow its parent's (1)"),
    (2, True, "bad.jsonl:3: seq true does not follow"),
    (2, None, "bad.jsonl:3: seq null does not follow"),
])
def test_tampered_seq_is_refused(tape_dir, tmp_path, line, value, says):
    lines = export_lines(tape_dir)
    assert "seq" in lines[line]
    lines[line]["seq"] = value
    assert says in refused(tmp_path, lines)


def test_tampered_links_are_refused(tape_dir, tmp_path):
    lines = export_lines(tape_dir)
    for i, key, value, says in [
        (2, "hash", 5, "bad.jsonl:3: hash 5 is not a full entry hash"),
        (2, "parent", 5, "bad.jsonl:3: parent 5 is not a full entry hash"),
        (1, "parent", lines[2]["hash"], "bad.jsonl:2: entry " + lines[1]["hash"][:12] + " is its own ancestor"),
        (2, "parent", "ab" * 32, "needs parent abababababab, which is neither in the file nor in the tape"),
    ]:
        edited = [dict(x) for x in lines]
        edited[i][key] = value
        assert says in refused(tmp_path, edited)


def test_untampered_export_and_one_without_seq_import(tape_dir, tmp_path):
    lines = export_lines(tape_dir)
    for strip in (False, True):
        f = tmp_path / f"e{strip}.jsonl"
        f.write_text("".join(json.dumps({k: v for k, v in x.items() if not (strip and k == "seq")}) + "\n" for x in lines))
        target = tmp_path / f"u{strip}"
        run_cli("init", target, check=True)
        run_cli("--dir", target, "import", "jsonl", f, check=True)
        out = [json.loads(x) for x in run_cli("--dir", target, "export", "s", check=True).stdout.decode().splitlines()]
        assert out == lines
