"""Payloads of the wrong shape for their kind, the hidden marker from --meta, and `now`
for --since/--until (an audit: findings F4, F7, F5).

SPEC section 3 gives each kind its payload; a field that is there must have its type
(`is_error` a boolean, an error's `call_id` a string, an anchor's `name` not blank). A refused append exits 2 with one line on stderr
and leaves the tape byte-identical, from the command line and from Python alike. Two
absences stay accepted, as they always were: a tool_call with no `arguments` and a
tool_result with no `output` (tapes hold them; their exports must import again), and a
message's parts of any JSON type (the contract does not say what a part is, and imports
carry whatever their format holds: refusing `[1, 2]` refused such a transcript whole).
"""

import json
from pathlib import Path

import pytest

from conftest import run_cli, snapshot
from ctape import Tape
from ctape.errors import InvalidInput

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"

# (kind, payload, a word the one-line error must hold)
REFUSED = [
    ("tool_result", {"call_id": "c1", "output": "x", "is_error": "yes"}, "is_error"),
    ("tool_result", {"call_id": "c1", "output": "x", "is_error": 1}, "is_error"),
    ("tool_result", {"call_id": "c1", "output": "x", "is_error": None}, "is_error"),
    ("error", {"message": "m", "call_id": 5}, "call_id"),
    ("error", {"message": "m", "call_id": None}, "call_id"),
    ("error", {"message": "m", "call_id": {"id": "c1"}}, "call_id"),
    ("anchor", {"name": ""}, "name"),
    ("anchor", {"name": "  "}, "name"),
]
IDS = [f"{k}-{json.dumps(p, separators=(',', ':'))}" for k, p, _ in REFUSED]


@pytest.fixture
def chat(tape_dir):
    t = Tape.open(tape_dir)
    t.session("chat").append("user", {"content": "one"})
    t.close()
    return tape_dir


def one_line_refusal(p, word: str) -> str:
    err = p.stderr.decode()
    assert p.returncode == 2, (p.returncode, err, p.stdout)
    assert p.stdout == b"", p.stdout
    assert len(err.splitlines()) == 1 and err.startswith("ctape: error: "), err
    assert word in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("kind, payload, word", REFUSED, ids=IDS)
def test_a_payload_of_the_wrong_shape_is_refused_by_append(chat, kind, payload, word):
    before = snapshot(chat)
    p = run_cli("--dir", chat, "append", kind, json.dumps(payload), "-s", "chat")
    one_line_refusal(p, word)
    assert snapshot(chat) == before
    p = run_cli("--dir", chat, "append", kind, "-s", "chat", input=json.dumps(payload).encode())  # stdin alike
    one_line_refusal(p, word)
    assert snapshot(chat) == before


@pytest.mark.parametrize("kind, payload, word", REFUSED, ids=IDS)
def test_a_payload_of_the_wrong_shape_is_refused_by_the_python_api(chat, kind, payload, word):
    before = snapshot(chat)
    t = Tape.open(chat)
    s = t.session("chat")
    head = s.status()["head"]
    for write in (lambda: s.append(kind, payload),
                  lambda: s.extend([("user", {"content": "first, refused with the rest"}), (kind, payload)]),
                  lambda: s.put_entry(kind, payload, {}, None, "2026-01-02T03:04:05Z")):  # importers' way in
        with pytest.raises(InvalidInput) as e:
            write()
        assert word in str(e.value) and "\n" not in str(e.value)
    assert [x.payload for x in s.log()] == [{"content": "one"}] and s.status()["head"] == head
    t.close()
    assert snapshot(chat) == before


def test_the_shapes_the_contract_allows_are_kept_as_given(tape_dir):
    """Beside the refusals: what SPEC section 3 allows still appends, and reads back as
    given (a missing `output` or `arguments` too: kept, shown as null, and an export of
    them imports again)."""
    ok = [
        ("tool_call", {"call_id": "c1", "name": "ls", "arguments": {"path": "."}}),
        ("tool_call", {"call_id": "c2", "name": "ls"}),  # no arguments: kept
        ("tool_result", {"call_id": "c1", "output": "a.py", "is_error": False}),
        ("tool_result", {"call_id": "c2", "output": None, "is_error": True}),
        ("tool_result", {"call_id": "c3"}),  # no output: kept
        ("error", {"message": "timed out", "call_id": "c1"}),
        ("error", {"message": "rate limited"}),
        ("user", {"content": ["text part", {"type": "image_url", "image_url": {"url": "data:,"}}]}),
        ("assistant", {"content": []}),
        ("user", {"content": [1, 2]}),  # parts of any type: kept (the docstring says why)
        ("anchor", {"name": "tests green", "summary": "any text names an anchor appended as JSON"}),
    ]
    hashes = []
    for kind, payload in ok:
        p = run_cli("--dir", tape_dir, "append", kind, json.dumps(payload), "-s", "chat")
        assert p.returncode == 0, p.stderr.decode()
        hashes.append(p.stdout.decode().strip())
    for h, (kind, payload) in zip(hashes, ok):
        e = json.loads(run_cli("--dir", tape_dir, "show", h, "--json", check=True).stdout)
        assert (e["kind"], e["payload"]) == (kind, payload)
    export = run_cli("--dir", tape_dir, "export", "chat", check=True).stdout
    other = tape_dir.parent / "other"
    run_cli("--dir", other, "init", check=True)
    (tape_dir.parent / "chat.jsonl").write_bytes(export)
    run_cli("--dir", other, "import", tape_dir.parent / "chat.jsonl", check=True)
    got = [json.loads(x)["hash"] for x in run_cli("--dir", other, "log", "-s", "chat", "--json", "--reverse", check=True).stdout.splitlines()]
    assert got == hashes


@pytest.mark.parametrize("value", ["false", "0", "no", "", "True", "1"])
def test_meta_ctape_hidden_other_than_true_is_refused(chat, value):
    """--meta ctape.hidden=false hid the entry (a non-empty string counted as true) and
    dropped it from context: now only `true` is taken, as the JSON true importers write."""
    before = snapshot(chat)
    p = run_cli("--dir", chat, "append", "user", "--text", "meant to be shown", "-s", "chat", "--meta", f"ctape.hidden={value}")
    err = one_line_refusal(p, "ctape.hidden")
    assert "true" in err
    assert snapshot(chat) == before


@pytest.mark.parametrize("value", ["false", "0", 1, None, {"x": 1}])
def test_meta_ctape_hidden_other_than_a_boolean_is_refused_by_the_python_api(chat, value):
    """The readers take any value but false and empty ones for the marker: from Python,
    meta={"ctape.hidden": "false"} hid the entry as the command line's did. Only true and
    false are taken, in append and extend alike, and nothing is written."""
    before = snapshot(chat)
    with Tape.open(chat) as t:
        s = t.session("chat")
        for call in (lambda: s.append("user", {"content": "x"}, meta={"ctape.hidden": value}),
                     lambda: s.extend([("user", {"content": "x"}, {"ctape.hidden": value})])):
            with pytest.raises(InvalidInput, match="ctape.hidden"):
                call()
        s.append("user", {"content": "shown"}, meta={"ctape.hidden": False})
        assert [m["content"] for m in s.context()][-1] == "shown"
    assert snapshot(chat) != before  # the last append only


def test_meta_ctape_hidden_true_is_the_json_true_marker(chat):
    h = run_cli("--dir", chat, "append", "user", "--text", "bookkeeping", "-s", "chat",
                "--meta", "ctape.hidden=true", "--meta", "note=false", check=True).stdout.decode().strip()
    e = json.loads(run_cli("--dir", chat, "show", h, "--json", check=True).stdout)
    assert e["meta"] == {"ctape.hidden": True, "note": "false"}  # other keys stay strings
    shown = run_cli("--dir", chat, "log", "-s", "chat", "--json", check=True).stdout.decode()
    assert h not in shown and json.loads(shown.splitlines()[0])["payload"] == {"content": "one"}
    prompt = json.loads(run_cli("--dir", chat, "context", "-s", "chat", check=True).stdout)
    assert "bookkeeping" not in json.dumps(prompt)


@pytest.mark.parametrize("key", ["ctape.line", "ctape.format", "ctape.raw", "ctape."])
def test_other_ctape_meta_keys_are_refused(chat, key):
    before = snapshot(chat)
    p = run_cli("--dir", chat, "append", "user", "--text", "x", "-s", "chat", "--meta", f"{key}=1")
    err = one_line_refusal(p, "ctape.")
    assert "another key" in err
    assert snapshot(chat) == before


def test_since_and_until_take_now_as_the_over_long_message_offers_it(chat):
    p = run_cli("--dir", chat, "log", "-s", "chat", "--since", "99999999999d")
    assert p.returncode == 2 and "now" in p.stderr.decode()  # the message that offers `now`
    p = run_cli("--dir", chat, "log", "-s", "chat", "--since", "now", "--json")
    assert p.returncode == 0 and p.stdout == b"", p.stderr.decode()  # nothing written from now on
    p = run_cli("--dir", chat, "log", "-s", "chat", "--until", "now", "--json")
    assert p.returncode == 0, p.stderr.decode()
    assert [json.loads(x)["payload"] for x in p.stdout.splitlines()] == [{"content": "one"}]
    t = Tape.open(chat)
    s = t.session("chat")
    assert list(s.log(since="now")) == [] and len(list(s.log(until=" now "))) == 1
    t.close()


def test_every_real_transcript_still_imports(tmp_path):
    """The refusals reach importers too (put_entry checks the payload): none of the real
    transcripts writes a refused shape."""
    files = sorted(p for p in FIXTURES.glob("*/*") if p.suffix != ".md")
    assert files
    for f in files:
        d = tmp_path / f.name
        run_cli("--dir", d, "init", check=True)
        p = run_cli("--dir", d, "import", f)
        assert p.returncode == 0, (f.name, p.stderr.decode())
