"""Importers and exporters for Claude Code, Codex and OpenAI-style transcripts (issue 5)."""

import collections
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import run_cli, snapshot

from ctape import Tape
from ctape.formats import export_ref, import_files

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
CASES = [
    ("claude-code", p) for p in sorted((FIXTURES / "claude-code").glob("*.jsonl"))
] + [("codex", p) for p in sorted((FIXTURES / "codex-rollout").glob("*.jsonl"))] + [
    ("openai", p) for p in sorted((FIXTURES / "openai-chat").iterdir())
]
DANGLING = FIXTURES / "codex-rollout" / "madshn__localpush__rollout-2026-02-23T13-19-38-019c8a70-dda7-7f33-98ea-f30553347322.jsonl"
SUBAGENT = FIXTURES / "claude-code" / "codemie-ai__codemie-code__incremental-subagents_turn-2_subagents_agent-a485154.jsonl"
CC_MAIN = FIXTURES / "claude-code" / "codemie-ai__codemie-code__incremental-subagents_turn-2.jsonl"


def source_records(path: Path) -> list:
    text = path.read_text(encoding="utf-8")
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError:
        doc = json.loads(text)
        return doc if isinstance(doc, list) else [doc]


def entry_hashes(tape, session: str) -> set:
    out = set()
    for name, tip in tape.session(session).refs().branches.items():
        out.update(e.hash for e in tape.session(session).log(tip))
    return out


def exported(tape, ref: str, fmt: str) -> list:
    return [json.loads(line) for line in export_ref(tape, ref, fmt)]


def dir_size(path) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


@pytest.mark.parametrize("fmt,path", CASES, ids=[p.name[:60] for _, p in CASES])
def test_fixture_round_trips(tape, fmt, path):
    import_files(tape, fmt, [str(path)], "s")
    assert exported(tape, "s", fmt) == source_records(path)
    assert tape.fsck()["ok"]


@pytest.mark.parametrize("fmt,path", CASES, ids=[p.name[:60] for _, p in CASES])
def test_import_is_deterministic(tmp_path, fmt, path):
    hashes = []
    for name in ("a", "b"):
        with Tape.init(tmp_path / name) as t:
            import_files(t, fmt, [str(path)], "s")
            import_files(t, fmt, [str(path)], "s")  # twice into the same session: nothing new
            hashes.append((entry_hashes(t, "s"), t.session("s").refs().branches))
    assert hashes[0] == hashes[1]


FRESH_BUG = "core: Session._put_entry adds a dedupe hit to SegmentWriter.fresh, so its children skip the look-up and are written again"


@pytest.mark.parametrize("fmt,path", [CASES[3], CASES[8], CASES[-1]], ids=["claude-code", "codex", "openai"])
def test_second_session_adds_little(tape, tape_dir, fmt, path):
    import_files(tape, fmt, [str(path)], "one")
    before = dir_size(tape_dir)
    import_files(tape, fmt, [str(path)], "two")
    assert dir_size(tape_dir) - before < 0.1 * before
    assert exported(tape, "two", fmt) == source_records(path)


def test_claude_code_default_session_and_subagent(tape):
    lines = import_files(tape, "claude-code", [str(CC_MAIN), str(SUBAGENT)], None)
    sid = "e9fb405b-169f-40eb-9396-7e75076f045d"
    names = {s["session"] for s in tape.sessions()}
    assert names == {sid, f"{sid}-agent-a485154"}
    assert "subagent a485154" in lines[1]
    # parallel tool results are spliced in: every call on main has its result
    assert tape.session(sid).status()["pending_tool_calls"] == []
    assert tape.session(f"{sid}-agent-a485154").status()["pending_tool_calls"] == []


@pytest.mark.parametrize("layout", ["subagents-dir", "beside"])
def test_claude_code_finds_subagent_files(tape, tmp_path, layout):
    sid = "e9fb405b-169f-40eb-9396-7e75076f045d"
    main = tmp_path / f"{sid}.jsonl"
    shutil.copy(CC_MAIN, main)
    sub = tmp_path / sid / "subagents" / "agent-a485154.jsonl" if layout == "subagents-dir" else tmp_path / "agent-a485154.jsonl"
    sub.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(SUBAGENT, sub)
    lines = import_files(tape, "claude-code", [str(main)], None)
    assert len(lines) == 2
    assert exported(tape, f"{sid}-agent-a485154", "claude-code") == source_records(SUBAGENT)


def cc(uuid, parent, text, kind="user", **extra):
    msg = {"role": kind, "content": text if kind == "user" else [{"type": "text", "text": text}]}
    return {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "sess", "timestamp": f"2026-01-01T00:00:{len(uuid):02d}Z", "message": msg, **extra}


def write_jsonl(path, records, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail, encoding="utf-8")
    return str(path)


def test_claude_code_tree_forks_forward_links_and_records_without_uuid(tape, tmp_path):
    records = [
        {"type": "summary", "summary": "earlier", "leafUuid": "elsewhere"},
        cc("a", None, "hi"),
        cc("c", "b", "forward: my parent is the next line", "assistant"),
        cc("b", "a", "second", "assistant"),
        {"type": "queue-operation", "operation": "enqueue", "sessionId": "sess"},
        cc("d", "a", "an edited prompt: a fork"),
        cc("e", "d", "answer on the fork", "assistant"),
        {"type": "summary", "summary": "earlier", "leafUuid": "elsewhere"},  # byte-identical to line 1
    ]
    path = write_jsonl(tmp_path / "s.jsonl", records)
    import_files(tape, "claude-code", [path], None)
    s = tape.session("sess")
    branches = s.refs().branches
    assert set(branches) == {"main", "fork-a"}
    main = [e.payload["content"] for e in s.log("sess/main")][::-1]
    assert main[1:] == ["hi", "an edited prompt: a fork", "answer on the fork", "earlier"]
    fork = [e.meta["claude-code"].get("uuid") for e in s.log("sess/fork-a")][::-1]
    assert fork == [None, "a", "b", "c", None]  # the queue line stays where it was written
    assert exported(tape, "sess", "claude-code") == records
    assert len(exported(tape, "sess/fork-a", "claude-code")) == 5


def test_claude_code_tool_calls_and_errors(tape, tmp_path):
    use = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
    use2 = {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"file_path": "x"}}
    res = [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a b", "is_error": False},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such file", "is_error": True},
    ]
    records = [
        cc("u1", None, "list"),
        {**cc("a1", "u1", "", "assistant"), "message": {"role": "assistant", "content": [use]}},
        {**cc("a2", "a1", "", "assistant"), "message": {"role": "assistant", "content": [use2]}},
        {**cc("r1", "a2", "", "user"), "message": {"role": "user", "content": res}},
    ]
    import_files(tape, "claude-code", [write_jsonl(tmp_path / "t.jsonl", records)], "t")
    s = tape.session("t")
    assert [e.kind for e in s.log()][::-1] == ["user", "tool_call", "tool_call", "tool_result", "tool_result"]
    st = s.status()
    assert st["pending_tool_calls"] == [] and st["last_error"]["call_id"] == "toolu_2"
    assert exported(tape, "t", "claude-code") == records
    p = run_cli("--dir", tape.path, "log", "-s", "t", "--kind", "tool_call", "--json", check=True)
    assert [json.loads(x)["payload"]["name"] for x in p.stdout.decode().splitlines()] == ["Read", "Bash"]


def test_codex_dangling_call_is_pending(tape_dir):
    run_cli("--dir", tape_dir, "import", "codex", DANGLING, check=True)
    sid = "019c8a70-dda7-7f33-98ea-f30553347322"
    st = json.loads(run_cli("--dir", tape_dir, "status", "-s", sid, "--json", check=True).stdout)
    assert [(c["call_id"], c["name"]) for c in st["pending_tool_calls"]] == [("call_UtYwHmwWekzvq83m8Rb9K8jJ", "exec_command")]
    log = run_cli("--dir", tape_dir, "log", "-s", sid, "--kind", "tool_call", "--json", check=True).stdout.decode().splitlines()
    assert len(log) == 1


def test_codex_compaction_is_an_anchor(tape):
    path = FIXTURES / "codex-rollout" / "madshn__localpush__rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl"
    import_files(tape, "codex", [str(path)], "c")
    anchors = list(tape.session("c").log(kinds=["anchor"]))
    assert [a.payload["name"] for a in anchors] == ["compacted"]
    assert tape.session("c").status()["pending_tool_calls"] == []


@pytest.mark.parametrize("fmt,path", [CASES[3], CASES[8], CASES[-1]], ids=["claude-code", "codex", "openai"])
def test_truncated_last_line(tape, tmp_path, fmt, path):
    recs = source_records(path)[:6] if not path.name.endswith(".traj") else None
    if recs is None:
        recs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    cut = json.dumps(recs[-1])[:40]
    src = write_jsonl(tmp_path / "part.jsonl", recs[:-1], tail=cut)
    (line,) = import_files(tape, fmt, [src], "p")
    assert "incomplete last line 6" in line or "incomplete last line 2" in line
    assert exported(tape, "p", fmt) == recs[:-1]


@pytest.mark.parametrize("fmt", ["claude-code", "codex", "openai"])
@pytest.mark.parametrize("content", ["", "\n\n", "not json\n", "{\"a\": 1}\n[1, 2]\n", "{\"trunc"])
def test_no_valid_record_is_a_one_line_error(tape_dir, tmp_path, fmt, content):
    src = tmp_path / "bad.jsonl"
    src.write_text(content)
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "import", fmt, src)
    assert p.returncode == 2
    err = p.stderr.decode()
    assert err.count("\n") == 1 and "Traceback" not in err and "ctape: error:" in err
    assert snapshot(tape_dir) == before


def test_a_bad_line_in_the_middle_is_kept_verbatim(tape, tmp_path):
    recs = source_records(DANGLING)[:3]
    src = tmp_path / "mid.jsonl"
    src.write_text(json.dumps(recs[0]) + "\n{oops not json\n" + json.dumps(recs[1]) + "\n" + json.dumps(recs[2]) + "\n")
    (line,) = import_files(tape, "codex", [str(src)], "m")
    assert "not JSON" in line
    assert list(export_ref(tape, "m", "codex"))[1] == "{oops not json"


def test_openai_shapes(tape, tmp_path):
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{\"x\": \"2+2\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "calc", "arguments": "{\"x\": \"2*2\"}"}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
    ]
    (tmp_path / "list.json").write_text(json.dumps(msgs, indent=2))
    write_jsonl(tmp_path / "lines.jsonl", msgs)
    (tmp_path / "req.json").write_text(json.dumps({"model": "m", "messages": msgs}))
    for name in ("list.json", "lines.jsonl"):  # no times: the file's time (SPEC 10), the same for both here
        os.utime(tmp_path / name, (1767225600.25, 1767225600.25))
    for name in ("list.json", "lines.jsonl"):
        import_files(tape, "openai", [str(tmp_path / name)], name.split(".")[0])
        assert exported(tape, name.split(".")[0], "openai") == msgs
    assert entry_hashes(tape, "list") == entry_hashes(tape, "lines")  # same messages, same time, same entries
    assert {e.time for e in tape.session("list").log()} == {"2026-01-01T00:00:00.250000Z"}
    pending = tape.session("lines").status()["pending_tool_calls"]
    assert [c["call_id"] for c in pending] == ["c2"]
    import_files(tape, "openai", [str(tmp_path / "req.json")], "req")
    assert exported(tape, "req", "openai") == [{"model": "m", "messages": msgs}]


def test_openhands_runs_become_branches(tape):
    path = FIXTURES / "openai-chat" / "All-Hands-AI__OpenHands__multi_swe_bench_examples_output.jsonl"
    import_files(tape, "openai", [str(path)], "oh")
    branches = tape.session("oh").refs().branches
    assert len(branches) == 3 and "main" in branches
    run = [b for b in branches if b != "main"][0]
    assert len(exported(tape, f"oh/{run}", "openai")) == 1
    kinds = {e.kind for e in tape.session("oh").log()}
    assert {"tool_call", "tool_result", "user", "system"} <= kinds


def test_export_converts_between_formats(tape, tmp_path):
    import_files(tape, "codex", [str(DANGLING)], "x")
    msgs = exported(tape, "x", "openai")
    assert msgs and all("role" in m for m in msgs)
    assert msgs[-1]["tool_calls"][0]["id"] == "call_UtYwHmwWekzvq83m8Rb9K8jJ"
    cc_lines = exported(tape, "x", "claude-code")
    assert cc_lines[-1]["message"]["content"][0]["type"] == "tool_use"
    src = write_jsonl(tmp_path / "conv.jsonl", cc_lines)
    import_files(tape, "claude-code", [src], "y")
    assert tape.session("y").status()["pending_tool_calls"][0]["call_id"] == "call_UtYwHmwWekzvq83m8Rb9K8jJ"


def test_identical_entry_chain_in_a_second_session_writes_no_objects(tape, tape_dir):
    """The core bug behind test_second_session_adds_little, without any importer."""
    for name in ("one", "two"):
        s = tape.session(name)
        with tape.batch():
            parent = None
            for i in range(50):
                parent = s.put_entry("user", {"content": f"message {i} " * 30}, {}, None, "2026-01-01T00:00:00Z", parent).hash
            s.set_refs("import", {"main": parent, "HEAD": "@main"})
        if name == "one":
            before = dir_size(tape_dir)
    assert dir_size(tape_dir) - before < 2000


def test_failure_midway_changes_nothing(tape, tape_dir, monkeypatch):
    from ctape.session import Session

    real, calls = Session.put_entry, []

    def failing(self, *a, **kw):
        calls.append(1)
        if len(calls) == 20:
            raise RuntimeError("disk on fire")
        return real(self, *a, **kw)

    monkeypatch.setattr(Session, "put_entry", failing)
    before = snapshot(tape_dir)
    with pytest.raises(RuntimeError):
        import_files(tape, "codex", [str(CASES[8][1])], "f")
    assert "f" not in {s["session"] for s in tape.sessions() if s["head"]}  # nothing visible: refs never set
    assert snapshot(tape_dir) == before


def test_a_line_with_a_lone_surrogate_is_kept_verbatim(tmp_path, tape_dir):
    src = tmp_path / "cc.jsonl"
    good = {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s1", "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "user", "content": "hello"}}
    bad = '{"type": "user", "uuid": "u2", "parentUuid": "u1", "message": {"role": "user", "content": "\\ud800 broken"}}'
    after = dict(good, uuid="u3", parentUuid="u1", message={"role": "user", "content": "after"})
    src.write_text(json.dumps(good) + "\n" + bad + "\n" + json.dumps(after) + "\n")
    r = run_cli("--dir", tape_dir, "import", "claude-code", src, "-s", "sur")
    assert r.returncode == 0, r.stderr
    out = run_cli("--dir", tape_dir, "export", "sur", "--format", "claude-code", check=True).stdout.decode().splitlines()
    assert [json.loads(out[0]), out[1], json.loads(out[2])] == [good, bad, after]


@pytest.mark.parametrize("to", ["claude-code", "codex", "openai", "gemini"])
@pytest.mark.parametrize("fmt,path", CASES, ids=[p.name[:40] for _, p in CASES])
def test_every_fixture_exported_to_every_format_keeps_its_user_messages(tape, tmp_path, fmt, path, to):
    """Exported to another agent's format and imported back, a real transcript keeps every
    user message with text (a SWE-agent .traj went to gemini as an empty
    document: the openai importer marks its containers with the key gemini took for its own;
    found by an audit)."""
    import_files(tape, fmt, [str(path)], "src")

    def said(session):
        """The texts of the user messages on every branch (an agent's compaction, which the
        prompt starts at, and which branch is HEAD, are what some formats cannot carry)."""
        out = collections.Counter()
        for e in tape.session(session).log(all=True, hidden=False):
            content = e.payload.get("content") if e.kind == "user" and isinstance(e.payload, dict) else None
            if isinstance(content, str) and content.strip():
                out[content] += 1
        return out

    want = said("src")
    assert want, "the fixture has user messages"
    out = tmp_path / f"out.{to}"
    out.write_text("\n".join(export_ref(tape, "src", to)) + "\n", encoding="utf-8")
    import_files(tape, to, [str(out)], "back")
    assert said("back") == want


@pytest.mark.parametrize("to", ["claude-code", "codex", "openai", "gemini"])
@pytest.mark.parametrize("fmt,path", CASES, ids=[p.name[:40] for _, p in CASES])
def test_every_fixture_exported_to_every_format_keeps_its_tool_results_text(tape, tmp_path, fmt, path, to):
    """The text of each tool result (by call id) survives an export to another format and a
    re-import: a Claude Code result that is a list of text blocks went to openai and codex
    as the JSON of the blocks, which the model then read as text (audit). Text parts count
    as their text joined by lines, as the model reads them; results with media are left
    to the tests of images."""
    import_files(tape, fmt, [str(path)], "src")

    def text(out):
        if isinstance(out, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in out):
            return "\n".join(p["text"] for p in out)
        return out if isinstance(out, str) else None

    def results(session):
        out = collections.Counter()
        for e in tape.session(session).log(all=True, hidden=False):
            if e.kind == "tool_result" and text(e.payload.get("output")) is not None:
                out[(e.payload.get("call_id"), text(e.payload["output"]))] += 1
        return out

    want = results("src")  # (empty for a fixture without tool results: none may appear)
    out = tmp_path / f"out.{to}"
    out.write_text("\n".join(export_ref(tape, "src", to)) + "\n", encoding="utf-8")
    import_files(tape, to, [str(out)], "back")
    assert results("back") == want


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
IMAGES = {  # an image part as each agent writes it
    "claude-code": {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    "codex": {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
    "openai": {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
}
FOREIGN = {"openai": ('"input_image"', '"source"'), "codex": ('"image_url": {', '"source"'), "claude-code": ('"input_image"', '"image_url"')}


@pytest.mark.parametrize("to", ["claude-code", "codex", "openai"])
@pytest.mark.parametrize("shape", sorted(IMAGES))
def test_an_image_of_any_agent_goes_out_in_the_formats_own_shape(tape, tmp_path, shape, to):
    """Claude's image blocks went into Chat Completions and Codex exports as they were, and
    Codex's input_image into Claude Code lines (audit): ctape read them back, other agents
    would not. Each goes out as the format's own image part, and comes back an image."""
    s = tape.session("src")
    s.append("user", {"content": [{"type": "input_text" if shape == "codex" else "text", "text": "what is this?"}, IMAGES[shape]]})
    s.append("assistant", {"content": "a dot"})
    text = "\n".join(export_ref(tape, "src", to)) + "\n"
    assert not any(f in text for f in FOREIGN[to]), text
    out = tmp_path / f"out.{to}"
    out.write_text(text, encoding="utf-8")
    import_files(tape, to, [str(out)], "back")
    user = [m for m in tape.session("back").context() if m["role"] == "user"][0]
    assert {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}} in user["content"]
    assert {"type": "text", "text": "what is this?"} in user["content"]


THINKING = [p for _, p in CASES if _ == "claude-code" and '"thinking"' in p.read_text(encoding="utf-8")]


@pytest.mark.parametrize("to", ["openai", "codex"])
@pytest.mark.parametrize("path", THINKING, ids=[p.name[:40] for p in THINKING])
def test_thinking_blocks_are_left_out_where_the_format_has_no_part_and_counted(tape, tmp_path, path, to):
    """Chat Completions and Codex messages have no part for a Claude thinking block: they
    went out as they were, and those APIs refuse such a message. They are left out, a
    message of nothing else with them, and the export's note counts them; the assistant's
    text stays (real Claude Code transcripts that hold thinking blocks)."""
    from ctape.formats import export_notes
    from ctape.formats._common import NATIVE_PARTS

    import_files(tape, "claude-code", [str(path)], "src")
    blocks = sum(1 for e in tape.session("src").log(all=True, hidden=False) if isinstance(e.payload, dict)
                 and isinstance(e.payload.get("content"), list)
                 for part in e.payload["content"] if isinstance(part, dict) and part.get("type") in ("thinking", "redacted_thinking"))
    assert blocks, "the fixture has thinking blocks on a branch"
    tally: dict = {}
    lines = list(export_ref(tape, "src", to, tally=tally))
    parts = []
    for line in lines:
        rec = json.loads(line)
        msg = rec if to == "openai" else rec.get("payload", {})
        if isinstance(msg.get("content"), list):
            assert msg["content"], line  # no message written empty
            parts += [p.get("type") for p in msg["content"] if isinstance(p, dict)]
    assert set(parts) <= NATIVE_PARTS[to]
    assert not any('"type":"thinking"' in line.replace(" ", "") or '"type":"redacted_thinking"' in line.replace(" ", "") for line in lines)
    notes = export_notes(tape, "src", to, tally)
    assert any(f"{blocks} thinking blocks left out" in n for n in notes), notes
    said = [rec for rec in map(json.loads, lines) if (rec if to == "openai" else rec.get("payload", {})).get("role") == "assistant"
            and (rec if to == "openai" else rec.get("payload", {})).get("content")]
    assert said, "the assistant's text went out"
