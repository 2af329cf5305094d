"""The hashing contract of docs/format.md, pinned with fixed bytes and hashes.

The worked example's values are written both here and in docs/format.md; the tests
check the code against them and check that the doc still says the same. If one of
these fails, the canonical form or the object naming changed: every existing tape's
hashes would change with it. Do not "fix" the expected values; fix the code.
"""

import re
from pathlib import Path

import pytest
from blake3 import blake3

import ctape
from ctape.model.canonical import BLOB_MIN, canonical_json, externalize, internalize, object_hash

DOC = Path(__file__).resolve().parent.parent / "docs" / "format.md"

ENTRY1_BYTES = (
    b'{"delta":null,"kind":"user","meta":{},"parent":null,"payload":{"content":"Hello, ctape!"},'
    b'"seq":1,"time":"2026-01-02T03:04:05.000000Z"}'
)
ENTRY1 = "94d347d2cf21c02e5e94b22aa7a7e0f4ee4924be725b7ef30afb69f4ab17d58b"
BLOB_TEXT = "ok\n" * 400
BLOB = "6118cd1d5f6a1a0d9faeb879231f7b9c5b46331627bde4a375229ba320f0f489"
ENTRY2_BYTES = (
    '{"delta":{"cwd":"/repo"},"kind":"tool_result","meta":{"host":"café","raw":"\\u0000\\u0000x"},'
    '"parent":"94d347d2cf21c02e5e94b22aa7a7e0f4ee4924be725b7ef30afb69f4ab17d58b",'
    '"payload":{"call_id":"c1","output":"\\u0000b6118cd1d5f6a1a0d9faeb879231f7b9c5b46331627bde4a375229ba320f0f489"},'
    '"seq":2,"time":"2026-01-02T03:04:06.000000Z"}'
).encode("utf-8")
ENTRY2 = "f72df75d0e59ed3da1ac4cba34cbe6dff066a604ea35a7c518bfcf65d1055060"


def doc_block(label: str) -> str:
    """The fenced block that follows `<!-- contract: label -->` in docs/format.md."""
    text = DOC.read_text(encoding="utf-8")
    m = re.search(r"<!-- contract: " + re.escape(label) + r" -->\n```\n(.*?)\n```", text, re.S)
    assert m, f"docs/format.md lost its contract block {label!r}"
    return m.group(1)


@pytest.fixture
def example(tmp_path, monkeypatch):
    monkeypatch.setenv("CTAPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CTAPE_WRITER", raising=False)  # the header test expects a derived 12-hex id
    tape = ctape.Tape.init(tmp_path / "t")
    s = tape.session("demo")
    e1 = s.append("user", {"content": "Hello, ctape!"}, time="2026-01-02T03:04:05Z")
    e2 = s.append(
        "tool_result",
        {"call_id": "c1", "output": BLOB_TEXT},
        meta={"host": "café", "raw": "\0x"},
        delta={"cwd": "/repo"},
        time="2026-01-02T03:04:06Z",
    )
    yield tape, e1, e2
    tape.close()


# -- the worked example, as the doc states it ------------------------------------------


def test_doc_states_the_pinned_values():
    assert doc_block("entry1") == ENTRY1
    assert doc_block("blob") == BLOB
    assert doc_block("entry2") == ENTRY2
    assert doc_block("entry2-bytes").encode("utf-8") == ENTRY2_BYTES
    text = DOC.read_text(encoding="utf-8")
    assert ENTRY1_BYTES.decode() in text


def test_worked_example_hashes_by_hand():
    assert blake3(b"entry\0" + ENTRY1_BYTES).hexdigest() == ENTRY1
    assert blake3(b"blob\0" + BLOB_TEXT.encode()).hexdigest() == BLOB
    assert blake3(b"entry\0" + ENTRY2_BYTES).hexdigest() == ENTRY2
    assert object_hash(b"entry", ENTRY2_BYTES) == ENTRY2


def test_worked_example_through_the_real_append_path(example):
    tape, e1, e2 = example
    assert (e1.hash, e2.hash) == (ENTRY1, ENTRY2)
    assert e2.parent == ENTRY1 and (e1.seq, e2.seq) == (1, 2)
    # what is stored is exactly the documented canonical bytes, under the documented names
    assert tape.store.get_object(ENTRY1)[1] == ENTRY1_BYTES
    assert tape.store.get_object(ENTRY2)[1] == ENTRY2_BYTES
    assert tape.store.get_object(BLOB)[1] == BLOB_TEXT.encode()
    # and reads back as the original values (blob fetched, escape removed)
    tape._clear_entries()
    back = tape.get(ENTRY2)
    assert back.payload == {"call_id": "c1", "output": BLOB_TEXT}
    assert back.meta == {"host": "café", "raw": "\0x"}
    assert back.time == "2026-01-02T03:04:06.000000Z"


def test_worked_example_survives_reopen(example, tmp_path):
    tape, _, _ = example
    tape.close()
    again = ctape.Tape.open(tmp_path / "t", cache_dir=str(tmp_path / "other-cache"))  # index rebuilt from the files
    assert again.get("demo").hash == ENTRY2
    assert again.get("demo~1").hash == ENTRY1
    again.close()


def test_segment_starts_with_the_documented_header(example, tmp_path):
    (seg,) = list((tmp_path / "t" / "sessions" / "demo").glob("*.seg"))
    data = seg.read_bytes()
    # magic, 'H', length 79 (the header JSON with this 12-hex writer id), header CRC
    assert data[:10].hex(" ") == "ce 48 4f 00 00 00 84 85 d4 31"
    assert re.fullmatch(r"[0-9a-f]{12}-[0-9]{20}\.seg", seg.name)
    assert oct(seg.stat().st_mode & 0o777) == "0o600"
    assert oct(seg.parent.stat().st_mode & 0o777) == "0o700"


# -- fixed hashes that catch drift in each building block ------------------------------


def test_canonical_json_fixed_bytes():
    value = {"b": [1, 2.5, True, None], "a": "é\n\u0000", "A": {"z": 1e100, "y": -0.0}}
    assert canonical_json(value) == b'{"A":{"y":-0.0,"z":1e+100},"a":"\xc3\xa9\\n\\u0000","b":[1,2.5,true,null]}'
    assert canonical_json({"é": 1, "z": 2, "Z": 3}) == '{"Z":3,"z":2,"é":1}'.encode()
    assert canonical_json(2**70) == b"1180591620717411303424"
    with pytest.raises(ctape.InvalidInput):
        canonical_json(float("nan"))


def test_object_hash_fixed():
    assert object_hash(b"blob", b"hello") == "19bbd26828d9cf40267ce3d6ca95f62d0609d7be72f5bff2a4e50af993013d9e"
    assert object_hash(b"entry", b"{}") == "46c80998d03954f5740e2d706b87721bd0279337bd47bd377cb808229aaf0b44"
    # the type prefix separates entries from blobs with equal bodies (values from the doc)
    assert object_hash(b"blob", b"Hello, ctape!") == "7871b89fc8d17d5b658260aa27b59ac3fed07b054b7429db34bccae2376d5798"
    assert object_hash(b"entry", b"Hello, ctape!") == "ffb8d0fa1a5103bfcf04c8dab6617b1380d9dab0ade00980e3d3f00e9eb6cc61"
    text = DOC.read_text(encoding="utf-8")
    assert "7871b89fc8d17d5b658260aa27b59ac3fed07b054b7429db34bccae2376d5798" in text
    assert "ffb8d0fa1a5103bfcf04c8dab6617b1380d9dab0ade00980e3d3f00e9eb6cc61" in text


def test_externalize_fixed():
    assert BLOB_MIN == 1024
    stored = {}

    def put(data: bytes) -> str:
        h = object_hash(b"blob", data)
        stored[h] = data
        return h

    big = "é" * 1024  # 1024 characters (2048 bytes): the threshold counts characters
    value = {"k": big, "s": "\0b" + "0" * 64, "short": "x" * 1023, "n": [big, 7, None]}
    out = externalize(value, put)
    ref = "\0bb0a0808cb87452d0fbfeac62f9df2c4eda5af2a0ca97536e3c75b52d28fe319c"
    assert out == {"k": ref, "s": "\0\0b" + "0" * 64, "short": "x" * 1023, "n": [ref, 7, None]}
    assert list(stored) == ["b0a0808cb87452d0fbfeac62f9df2c4eda5af2a0ca97536e3c75b52d28fe319c"]
    assert internalize(out, lambda h: stored[h].decode()) == value
    # keys are never externalized or escaped
    assert externalize({"\0k" + "y" * 2000: 1}, put) == {"\0k" + "y" * 2000: 1}


def test_entry_hashes_fixed_through_append(tmp_path, monkeypatch):
    monkeypatch.setenv("CTAPE_CACHE_DIR", str(tmp_path / "cache"))
    tape = ctape.Tape.init(tmp_path / "t")
    s = tape.session("fixed")
    t = "2026-03-04T05:06:07.123456Z"
    hashes = [
        s.append("system", {"content": "You are terse."}, time=t).hash,
        s.append("tool-call", {"call_id": "c1", "name": "ls", "arguments": {"path": "."}}, meta={"n": 1}, time=t).hash,
        s.append("tool_result", {"call_id": "c1", "output": "x" * 5000}, delta={"files": ["a"]}, time=t).hash,
        s.append(ctape.EntryKind.ANCHOR, {"name": "done", "note": "\0"}, time="2026-03-04T06:06:07+01:00").hash,
    ]
    assert hashes == [
        "0221b5978cf9d633ed96f6811c04a6b70b51caf875d229f988bbe166f638785c",
        "69fc8e4676e9a71a5b372957bceecdd38a4be22f58c8e71c9e2fdec356db5284",
        "7d21742d389663fd988acffc30475b01ec32b5d3a2b47aa4bf8a36304f43ef8c",
        "eeed929509c55c19d6a2e9dfb0542bd2d8d1edbfbad6f4bab9978d6529df4045",
    ]
    # times are normalised to UTC with six fraction digits before hashing
    assert tape.get(hashes[-1]).time == "2026-03-04T05:06:07.000000Z"
    tape.close()
