"""A file in no format ctape reads is refused, never imported as an empty conversation
(issue 23, item 4; SPEC 10): `ctape import FILE` (format detected) and `ctape import
openai FILE` give a one-line error, exit 2, and leave the tape as it was.

(A Gemini CLI session was refused this way until ctape read the format: it is now
imported as `gemini`, tests/test_gemini*.py.) The Gemini CLI session below has the shape gemini-cli writes to
`~/.gemini/tmp/<project>/chats/session-*.json` (packages/core/src/services/
chatRecordingTypes.ts, ConversationRecord: JSON.stringify(record, null, 2)); it is made
here, not captured.
"""

import json

import pytest
from conftest import run_cli, snapshot

GEMINI = {
    "sessionId": "5d1e3a90-2b7c-4f0e-9a51-0c3b8f6d2e47",
    "projectHash": "9f2c4e1a7b3d5c6e8f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e",
    "startTime": "2026-03-11T21:02:50.057Z",
    "lastUpdated": "2026-03-11T21:03:40.750Z",
    "messages": [
        {"id": "a1", "timestamp": "2026-03-11T21:02:50.057Z", "type": "user", "content": [{"text": "list the files in src"}]},
        {
            "id": "a2",
            "timestamp": "2026-03-11T21:02:55.100Z",
            "type": "gemini",
            "content": "",
            "thoughts": [{"subject": "Listing", "description": "I will list src.", "timestamp": "2026-03-11T21:02:54.000Z"}],
            "toolCalls": [
                {
                    "id": "list_directory-1-a",
                    "name": "list_directory",
                    "args": {"path": "src"},
                    "result": [{"functionResponse": {"id": "list_directory-1-a", "name": "list_directory", "response": {"output": "main.py\nutil.py"}}}],
                    "status": "success",
                    "timestamp": "2026-03-11T21:02:55.300Z",
                }
            ],
            "tokens": {"input": 5140, "output": 20, "cached": 0, "thoughts": 12, "tool": 0, "total": 5172},
            "model": "gemini-2.5-pro",
        },
        {"id": "a3", "timestamp": "2026-03-11T21:03:40.750Z", "type": "gemini", "content": "src holds main.py and util.py.", "tokens": {"input": 5200, "output": 9, "cached": 0, "total": 5209}, "model": "gemini-2.5-pro"},
    ],
}


def refused(tape_dir, *args, expect: bytes):
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "import", *args)
    err = p.stderr.decode()
    assert p.returncode == 2, (p.stdout, err)
    assert expect.decode() in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert snapshot(tape_dir) == before
    return err


@pytest.mark.parametrize("layout", ["pretty", "compact"])
def test_a_gemini_cli_session_is_imported_as_gemini(tape_dir, tmp_path, layout):
    """Refused while ctape could not read it; now a format of its own (issue 23, item 4):
    detected, and `import openai` of it says which format it is."""
    path = tmp_path / "session-2026-03-11T21-02-5d1e3a90.json"
    path.write_text(json.dumps(GEMINI, indent=2) if layout == "pretty" else json.dumps(GEMINI) + "\n")
    refused(tape_dir, "openai", path, expect=b"a Gemini CLI session, not an OpenAI-style transcript; import it as one: ctape import gemini FILE")
    p = run_cli("--dir", tape_dir, "import", path)
    assert p.returncode == 0 and f"into session {GEMINI['sessionId']}" in p.stderr.decode(), p.stderr
    p = run_cli("--dir", tape_dir, "context", "-s", GEMINI["sessionId"], "--format", "openai", check=True)
    view = json.loads(p.stdout)
    assert view[0] == {"role": "user", "content": "list the files in src"}
    assert view[-1] == {"role": "assistant", "content": "src holds main.py and util.py."}


def test_a_gemini_session_with_no_message_yet_is_refused(tape_dir, tmp_path):
    path = tmp_path / "session-new.json"
    path.write_text(json.dumps({**GEMINI, "messages": []}, indent=2))
    refused(tape_dir, path, expect=b"holds no message yet")


@pytest.mark.parametrize(
    "doc",
    [
        {"items": [{"type": "user", "text": "hi"}]},  # no list ctape knows
        {"messages": [{"type": "user", "content": "hi"}, {"type": "model", "content": "hello"}]},  # a list of something else
        [{"kind": "note", "text": "hi"}],
    ],
)
def test_an_unknown_json_document_is_refused(tape_dir, tmp_path, doc):
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc, indent=2))
    refused(tape_dir, path, expect=b"cannot tell its format")
    refused(tape_dir, "openai", path, expect=b"no chat message")


def test_openai_documents_still_import(tape_dir, tmp_path):
    """The stricter rule keeps what was read before: a chat list, a container of messages
    (a request body), and an empty history (a run that had not started)."""
    for name, doc in {
        "chat": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        "body": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        "empty": {"instance_id": "x", "history": []},
    }.items():
        for how, text in (("indented", json.dumps(doc, indent=2)), ("one-line", json.dumps(doc))):  # json.dump writes one line
            path = tmp_path / f"{name}-{how}.json"
            path.write_text(text)
            p = run_cli("--dir", tape_dir, "import", path, "-s", f"{name}-{how}")
            assert p.returncode == 0, (how, p.stderr.decode())
            assert b"imported" in p.stdout + p.stderr


def test_watch_imports_a_gemini_file(tape_dir, tmp_path):
    path = tmp_path / "runs" / "session-x.json"
    path.parent.mkdir()
    path.write_text(json.dumps(GEMINI, indent=2))
    p = run_cli("--dir", tape_dir, "watch", "--once", path)
    assert p.returncode == 0 and f"into session {GEMINI['sessionId']}" in p.stderr.decode(), p.stderr


def gemini_jsonl() -> str:
    """The newer layout (chatRecordingService.ts, appendRecord): a metadata line, then one
    message a line (a message recorded again under its id replaces it), `$set` updates."""
    meta = {k: v for k, v in GEMINI.items() if k != "messages"}
    rows = [meta] + GEMINI["messages"] + [{"$set": {"lastUpdated": GEMINI["lastUpdated"]}}]
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_a_gemini_cli_jsonl_session_is_imported_by_import_and_watch(tape_dir, tmp_path):
    path = tmp_path / "chats" / "session-2026-03-11T21-02-5d1e3a90.jsonl"
    path.parent.mkdir()
    path.write_text(gemini_jsonl())
    p = run_cli("--dir", tape_dir, "import", path, "-s", "imported")
    assert p.returncode == 0, p.stderr
    p = run_cli("--dir", tape_dir, "watch", "--once", path.parent)
    assert p.returncode == 0 and f"into session {GEMINI['sessionId']}" in p.stderr.decode(), p.stderr
    views = [json.loads(run_cli("--dir", tape_dir, "context", "-s", s, check=True).stdout) for s in ("imported", GEMINI["sessionId"])]
    assert views[0] == views[1] and len(views[0]) == 4  # the request, the call, its result, the answer
