"""Secrets kept in another form than their text are found as their text (an audit,
2026-12-06). scan matched some values as the tape keeps them, not as what they stand
for, so a pattern missed, `redact --scan` called the tape clean, and `push` sent it:

- an Agents SDK item the tape cannot hold as a value (NaN), kept as ASCII-escaped JSON
  (`openai_agents.item_json`): `Pässwört` is `P\\u00e4ssw\\u00f6rt` there;
- an imported line kept verbatim (`ctape.raw`): a pattern across a line break met `\\n`;
- a LangGraph value that is no JSON (a dataclass), kept as msgpack bytes read as Latin-1:
  `ä` is two characters there;
- a text file attached as base64: pydantic-ai's BinaryContent (`data` beside a text
  `media_type`) and a `data:text/plain;base64,` URL (the Agents SDK's `input_file`), which
  `ctape context` decodes and hands the model.

Each is now matched as the text it stands for; the finding names the stored value, which
a redaction takes whole, and after `compact` no file holds the secret.
"""

import asyncio
import base64
import json
import math
import os

import pytest

from conftest import run_cli
from ctape import Tape


def cli(d, *args, check=True):
    return run_cli("--dir", d, *args, check=check)


def holders(root, needles: list[bytes]) -> list[str]:
    """Files under root that hold any of the needles (raw bytes, or inside a zstd frame)."""
    import zstandard

    out = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            data = open(os.path.join(dirpath, f), "rb").read()
            texts = [data]
            at = data.find(b"\x28\xb5\x2f\xfd")
            while at != -1:
                try:
                    texts.append(zstandard.ZstdDecompressor().decompressobj().decompress(data[at:]))
                except zstandard.ZstdError:
                    pass
                at = data.find(b"\x28\xb5\x2f\xfd", at + 1)
            if any(n in t for n in needles for t in texts):
                out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return out


def findings(d, *args):
    p = cli(d, "scan", "--json", *args, check=False)
    return [json.loads(line) for line in p.stdout.splitlines()]


@pytest.fixture
def tape(tmp_path, monkeypatch):
    d = tmp_path / "tape"
    monkeypatch.setenv("CTAPE_CACHE_DIR", str(tmp_path / "cache"))
    Tape.init(d).close()
    return d


def test_an_agents_item_kept_as_escaped_json_is_matched_as_its_text(tape, tmp_path):
    pytest.importorskip("agents")
    from ctape.integrations.openai_agents import TapeSession

    secret = "Pässwört-918273"
    asyncio.run(TapeSession("ag", str(tape)).add_items([{"role": "user", "content": "my password is " + secret, "score": math.nan}]))
    cli(tape, "scan", "--add-pattern", "Pässwört-[0-9]{6}", "--kind", "pw")
    paths = sorted(f["path"] for f in findings(tape))
    assert paths == ['$.meta["openai_agents.item_json"]', "$.payload.content"], paths
    cli(tape, "redact", "--scan")
    assert findings(tape) == []
    cli(tape, "compact", "--expire", "now", "--grace", "now")
    items = asyncio.run(TapeSession("ag", str(tape)).get_items())
    assert secret not in json.dumps(items, ensure_ascii=False)
    needles = [secret.encode(), json.dumps(secret).strip('"').encode()]  # as UTF-8, and as escaped JSON
    assert holders(tape, needles) == [] and holders(tmp_path / "cache", needles) == []


def test_a_verbatim_line_is_matched_across_its_escaped_line_breaks(tape, tmp_path):
    src = os.path.join(os.path.dirname(__file__), "fixtures", "transcripts", "claude-code")
    name = sorted(f for f in os.listdir(src) if f.endswith(".jsonl"))[0]
    lines, done = [], False
    for line in open(os.path.join(src, name), encoding="utf-8").read().splitlines():
        o = json.loads(line)
        if not done and o.get("type") == "user" and isinstance(o.get("message", {}).get("content"), str):
            o["message"]["content"] = "my db config:\npasswort:\n  zorro-44556677\n"
            o["costUSD"] = 1e308
            line = json.dumps(o, ensure_ascii=False).replace("1e+308", "1e400")  # no float: kept verbatim
            done = True
        lines.append(line)
    assert done
    (tmp_path / "cc.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cli(tape, "import", "claude-code", str(tmp_path / "cc.jsonl"), "-s", "cc")
    cli(tape, "scan", "--add-pattern", r"passwort:\s+zorro-[0-9]{8}", "--kind", "pw")
    assert [f["path"] for f in findings(tape)] == ['$.meta["ctape.raw"]']
    cli(tape, "redact", "--scan")
    cli(tape, "compact", "--expire", "now", "--grace", "now")
    assert b"zorro-44556677" not in cli(tape, "export", "cc").stdout
    assert holders(tape, [b"zorro-44556677"]) == []


def test_a_langgraph_value_kept_as_msgpack_is_matched_as_its_strings(tape):
    pytest.importorskip("langgraph")
    import dataclasses
    from typing import TypedDict

    from langgraph.graph import START, StateGraph

    from ctape.integrations.langgraph import TapeSaver

    @dataclasses.dataclass
    class Creds:
        password: str

    class St(TypedDict):
        creds: Creds

    secret = "Pässwört-564738"
    g = StateGraph(St)
    g.add_node("n", lambda s: {"creds": Creds("pw " + secret)})
    g.add_edge(START, "n")
    cfg = {"configurable": {"thread_id": "th"}}
    with Tape.open(tape) as t:
        g.compile(checkpointer=TapeSaver(t)).invoke({"creds": Creds("none")}, cfg)
    cli(tape, "scan", "--add-pattern", "Pässwört-[0-9]{6}", "--kind", "pw")
    assert findings(tape), "the dataclass's msgpack bytes were matched as Latin-1 characters"
    cli(tape, "redact", "--scan")
    cli(tape, "compact", "--expire", "now", "--grace", "now")
    with Tape.open(tape) as t:
        values = g.compile(checkpointer=TapeSaver(t)).get_state(cfg).values
    assert secret not in repr(values)
    assert holders(tape, [secret.encode()]) == []


def test_text_files_attached_as_base64_are_matched_and_images_are_not_decoded(tape):
    """pydantic-ai's BinaryContent of a text file, and a data: URL of one (the Agents SDK's
    input_file): `ctape context` gives the model their text, so scan reads it; the base64
    of an image is not text and is matched as it is (no false finds from its bytes)."""
    key1, key2 = "AKIAZQ7AUDP3QWERTYUP", "AKIAZQ7AUDF1QWERTYUP"
    env1 = base64.b64encode(f"AWS_ACCESS_KEY_ID={key1}\n".encode()).decode()
    env2 = base64.b64encode(f"AWS_ACCESS_KEY_ID={key2}\n".encode()).decode()
    png = base64.b64encode(bytes(range(256)) * 4).decode()
    with Tape.open(tape) as t:
        s = t.session("files")
        s.append("user", {"content": [{"kind": "binary", "data": env1, "media_type": "text/plain", "identifier": "a"},
                                      {"kind": "binary", "data": png, "media_type": "image/png", "identifier": "b"}]})
        s.append("user", {"content": [{"type": "input_file", "filename": ".env", "file_data": "data:text/plain;base64," + env2},
                                      {"type": "input_image", "image_url": "data:image/png;base64," + png}]})
    found = findings(tape)
    kinds = {(f["path"], f["kind"]) for f in found}
    assert ("$.payload.content[0].data", "aws-access-key") in kinds and ("$.payload.content[0].file_data", "aws-access-key") in kinds, kinds
    assert not [f for f in found if f["path"].endswith("content[1].data") or "image_url" in f["path"]], found
    assert key1 not in json.dumps(found) and key2 not in json.dumps(found)  # masked in the previews
    cli(tape, "redact", "--scan")
    assert findings(tape) == []
    ctx = cli(tape, "context", "-s", "files").stdout.decode()
    assert key1 not in ctx and key2 not in ctx
    cli(tape, "compact", "--expire", "now", "--grace", "now")
    assert holders(tape, [env1.encode(), env2.encode()]) == []

