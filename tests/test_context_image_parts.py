"""Images, documents and audio written by the integrations, through `ctape context`.

Black-box audit C, F2: pydantic-ai stores a user prompt's `ImageUrl` / `BinaryContent` as
its own serialized parts (`{"kind": "image-url", ...}`, `{"kind": "binary", "data": base64,
...}`), and both API views sent each as a text part holding that JSON (a screenshot as
base64 prompt text); LangChain's standard image blocks (`{"type": "image", "source_type":
"base64", ...}`, v1 `{"type": "image", "url": ...}`) came out as "[image: the transcript
keeps no data for it]" although the data is on the tape. Every media part the frameworks
write is now the part its API has for it (openai `image_url` with a data: URL for inline
data, `file` for a PDF, `input_audio` for wav/mp3; anthropic `image` / `document` with a
url, base64 or text source), or a short note saying what was left out: never its JSON or
its base64 as text. The stored entries are the integrations' own, unchanged.

Every view is checked by the validators of test_context.py (the SDKs' request types).
"""

from __future__ import annotations

import base64
import json

import pytest

from ctape import Tape
from conftest import run_cli
from test_context import validate_anthropic, validate_openai

PNG_BYTES = b"\x89PNG\r\n\x1a\n" + b"\0" * 30
PNG = base64.b64encode(PNG_BYTES).decode()
PDF_BYTES = b"%PDF-1.4\n" + b"x" * 40
PDF = base64.b64encode(PDF_BYTES).decode()
WAV_BYTES = b"RIFF" + b"\0" * 40
WAV = base64.b64encode(WAV_BYTES).decode()


def texts(value) -> list[str]:
    """Every string a model reads as text in a view: text parts, string contents, notes."""
    out: list[str] = []
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, list):
        for v in value:
            out += texts(v)
    elif isinstance(value, dict):
        if value.get("type") == "text" and isinstance(value.get("text"), str):
            out.append(value["text"])
        for key in ("content", "messages", "system"):
            if key in value:
                out += texts(value[key])
    return out


def assert_no_data_as_text(view, *datas):
    for t in texts(view):
        assert '"kind": "' not in t, f"a pydantic-ai part as JSON text: {t[:200]}"
        assert '"source_type"' not in t and "keeps no data" not in t, t[:200]
        for d in datas:
            assert d not in t, f"base64 data as text: {t[:200]}"


def cli_context(d, session, fmt):
    p = run_cli("--dir", d, "context", "-s", session, "--format", fmt, check=True)
    out = json.loads(p.stdout)
    (validate_openai if fmt == "openai" else validate_anthropic)(out)
    return out


# -- real frameworks -------------------------------------------------------------------------


def test_pydantic_ai_images_and_files_in_a_user_prompt(tmp_path):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import BinaryContent, DocumentUrl, ImageUrl
    from pydantic_ai.models.test import TestModel

    from ctape.integrations.pydantic_ai import TapeHistory

    d = tmp_path / "t"
    tape = Tape.init(d)
    s = tape.session("pai-img")
    agent = Agent(TestModel(), capabilities=[TapeHistory(s)])
    agent.run_sync([
        "what is in these?",
        ImageUrl("https://example.com/cat.png"),
        BinaryContent(PNG_BYTES, media_type="image/png"),
        BinaryContent(PDF_BYTES, media_type="application/pdf"),
        DocumentUrl("https://example.com/report.pdf"),
        BinaryContent(WAV_BYTES, media_type="audio/wav"),
    ])
    # the tape keeps pydantic-ai's own parts: only the views changed
    user = [e for e in s.log() if e.kind == "user"][0]
    assert [p.get("kind") for p in user.payload["content"][1:]] == ["image-url", "binary", "binary", "document-url", "binary"]
    tape.close()

    oa = cli_context(d, "pai-img", "openai")
    assert oa[0]["content"] == [
        {"type": "text", "text": "what is in these?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "file", "file": {"filename": "document.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}},
        {"type": "text", "text": "[document (application/pdf) at https://example.com/report.pdf: left out, Chat Completions takes no such document]"},
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
    ]
    assert_no_data_as_text(oa, PNG, PDF, WAV)

    an = cli_context(d, "pai-img", "anthropic")
    assert an["messages"][0]["content"] == [
        {"type": "text", "text": "what is in these?"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/report.pdf"}},
        {"type": "text", "text": f"[audio (audio/wav, {len(WAV_BYTES)} bytes): left out, the Messages API takes no such audio]"},
    ]
    assert_no_data_as_text(an, PNG, PDF, WAV)


def test_pydantic_ai_a_tool_that_returns_an_image(tmp_path):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import BinaryContent
    from pydantic_ai.models.test import TestModel

    from ctape.integrations.pydantic_ai import TapeHistory

    d = tmp_path / "t"
    tape = Tape.init(d)
    s = tape.session("pai-tool")
    agent = Agent(TestModel(custom_output_text="a screenshot"), capabilities=[TapeHistory(s)])

    @agent.tool_plain
    def screenshot():
        return BinaryContent(PNG_BYTES, media_type="image/png")

    agent.run_sync("take a screenshot")
    tape.close()
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    oa = cli_context(d, "pai-tool", "openai")
    assert oa[2] == {"role": "tool", "tool_call_id": oa[1]["tool_calls"][0]["id"], "content": "[1 image: in the next user message]"}
    assert image in oa[3]["content"] and oa[3]["role"] == "user"
    assert_no_data_as_text(oa, PNG)
    an = cli_context(d, "pai-tool", "anthropic")
    result = an["messages"][2]["content"][0]
    assert result["type"] == "tool_result"
    assert result["content"] == [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]
    assert_no_data_as_text(an, PNG)


def test_langgraph_standard_image_blocks(tmp_path):
    pytest.importorskip("langgraph")
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from ctape.integrations.langgraph import TapeSaver

    def agent(state):
        return {"messages": [AIMessage("a cat")]}

    b = StateGraph(MessagesState)
    b.add_node("agent", agent)
    b.add_edge(START, "agent")
    d = tmp_path / "t"
    saver = TapeSaver(d)
    g = b.compile(checkpointer=saver)
    g.invoke({"messages": [HumanMessage([
        {"type": "text", "text": "what?"},
        {"type": "image", "source_type": "base64", "mime_type": "image/png", "data": PNG},
        {"type": "image", "source_type": "url", "url": "https://e.com/v0.png"},
        {"type": "image", "url": "https://e.com/v1.png"},
        {"type": "image", "base64": PNG, "mime_type": "image/jpeg"},
        {"type": "file", "base64": PDF, "mime_type": "application/pdf", "extras": {"filename": "r.pdf"}},
    ])]}, {"configurable": {"thread_id": "img"}})
    saver.tape.close()

    oa = cli_context(d, "lg-img", "openai")
    assert oa[0]["content"] == [
        {"type": "text", "text": "what?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://e.com/v0.png"}},
        {"type": "image_url", "image_url": {"url": "https://e.com/v1.png"}},
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{PNG}"}},
        {"type": "file", "file": {"filename": "r.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}},
    ]
    assert oa[1] == {"role": "assistant", "content": "a cat"}
    assert_no_data_as_text(oa, PNG, PDF)

    an = cli_context(d, "lg-img", "anthropic")
    assert an["messages"][0]["content"] == [
        {"type": "text", "text": "what?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://e.com/v0.png"}},
        {"type": "image", "source": {"type": "url", "url": "https://e.com/v1.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": PNG}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}, "title": "r.pdf"},
    ]
    assert_no_data_as_text(an, PNG, PDF)


# -- payload level: one part in a user message, and what each view makes of it -------------------

DATA_PNG = f"data:image/png;base64,{PNG}"
OA_PNG = {"type": "image_url", "image_url": {"url": DATA_PNG}}
AN_PNG = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
OA_URL = {"type": "image_url", "image_url": {"url": "https://e.com/x.png"}}
AN_URL = {"type": "image", "source": {"type": "url", "url": "https://e.com/x.png"}}
OA_PDF = {"type": "file", "file": {"filename": "document.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}}
AN_PDF = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}}

CASES = {
    # pydantic-ai
    "pai image-url": ({"kind": "image-url", "url": "https://e.com/x.png", "media_type": "image/png", "identifier": "a", "force_download": False, "vendor_metadata": None}, OA_URL, AN_URL),
    "pai binary image": ({"kind": "binary", "data": PNG, "media_type": "image/png", "identifier": "b", "vendor_metadata": None}, OA_PNG, AN_PNG),
    "pai binary pdf": ({"kind": "binary", "data": PDF, "media_type": "application/pdf", "identifier": "c", "vendor_metadata": None}, OA_PDF, AN_PDF),
    "pai binary text": (
        {"kind": "binary", "data": base64.b64encode(b"hello notes").decode(), "media_type": "text/plain", "identifier": "d", "vendor_metadata": None},
        {"type": "text", "text": "hello notes"},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hello notes"}},
    ),
    "pai binary wav": (
        {"kind": "binary", "data": WAV, "media_type": "audio/wav", "identifier": "e", "vendor_metadata": None},
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
        {"type": "text", "text": f"[audio (audio/wav, {len(WAV_BYTES)} bytes): left out, the Messages API takes no such audio]"},
    ),
    "pai binary ogg": (
        {"kind": "binary", "data": WAV, "media_type": "audio/ogg", "identifier": "f", "vendor_metadata": None},
        {"type": "text", "text": f"[audio (audio/ogg, {len(WAV_BYTES)} bytes): left out, Chat Completions takes no such audio]"},
        {"type": "text", "text": f"[audio (audio/ogg, {len(WAV_BYTES)} bytes): left out, the Messages API takes no such audio]"},
    ),
    "pai video-url": (
        {"kind": "video-url", "url": "https://e.com/v.mp4", "media_type": "video/mp4", "identifier": "g", "force_download": False, "vendor_metadata": None},
        {"type": "text", "text": "[video (video/mp4) at https://e.com/v.mp4: left out, Chat Completions takes no such video]"},
        {"type": "text", "text": "[video (video/mp4) at https://e.com/v.mp4: left out, the Messages API takes no such video]"},
    ),
    "pai uploaded-file": (
        {"kind": "uploaded-file", "file_id": "file-abc", "provider_name": "openai", "media_type": "application/pdf", "identifier": "h", "vendor_metadata": None},
        {"type": "text", "text": "[document (application/pdf), file id file-abc: left out, a file id names a file at the provider that stored it]"},
        {"type": "text", "text": "[document (application/pdf), file id file-abc: left out, a file id names a file at the provider that stored it]"},
    ),
    # LangChain standard blocks, v0 and v1
    "lc v0 base64": ({"type": "image", "source_type": "base64", "mime_type": "image/png", "data": PNG}, OA_PNG, AN_PNG),
    "lc v0 url": ({"type": "image", "source_type": "url", "url": "https://e.com/x.png"}, OA_URL, AN_URL),
    "lc v1 url": ({"type": "image", "url": "https://e.com/x.png"}, OA_URL, AN_URL),
    "lc v1 base64": ({"type": "image", "base64": PNG, "mime_type": "image/png"}, OA_PNG, AN_PNG),
    "lc v1 data url": ({"type": "image", "url": DATA_PNG}, OA_PNG, AN_PNG),
    "lc v1 file pdf": ({"type": "file", "base64": PDF, "mime_type": "application/pdf"}, OA_PDF, AN_PDF),
    "lc v0 file pdf": ({"type": "file", "source_type": "base64", "data": PDF, "mime_type": "application/pdf"}, OA_PDF, AN_PDF),
    "lc text-plain": (
        {"type": "text-plain", "text": "notes", "mime_type": "text/plain", "title": "n.txt"},
        {"type": "text", "text": "[document n.txt]\nnotes"},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}, "title": "n.txt"},
    ),
    "lc v1 audio": (
        {"type": "audio", "base64": WAV, "mime_type": "audio/mpeg"},
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "mp3"}},
        {"type": "text", "text": f"[audio (audio/mpeg, {len(WAV_BYTES)} bytes): left out, the Messages API takes no such audio]"},
    ),
    "lc v1 image file_id": (
        {"type": "image", "file_id": "file-1"},
        {"type": "text", "text": "[image, file id file-1: left out, a file id names a file at the provider that stored it]"},
        {"type": "text", "text": "[image, file id file-1: left out, a file id names a file at the provider that stored it]"},
    ),
    # the APIs' own document and audio parts, across formats
    "openai file": ({"type": "file", "file": {"filename": "document.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}}, OA_PDF, {**AN_PDF, "title": "document.pdf"}),
    "responses input_file": ({"type": "input_file", "file_data": f"data:application/pdf;base64,{PDF}", "filename": "document.pdf"}, OA_PDF, {**AN_PDF, "title": "document.pdf"}),
    "anthropic document": (AN_PDF, OA_PDF, AN_PDF),
    "openai input_audio": (
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
        {"type": "text", "text": f"[audio (audio/wav, {len(WAV_BYTES)} bytes): left out, the Messages API takes no such audio]"},
    ),
}


def one_message(tmp_path, *entries):
    tape = Tape.init(tmp_path / "t")
    s = tape.session("x")
    for kind, payload in entries:
        s.append(kind, payload)
    return tape, s


@pytest.mark.parametrize("name", list(CASES))
def test_a_media_part_in_a_user_message(tmp_path, name):
    part, want_openai, want_anthropic = CASES[name]
    tape, s = one_message(tmp_path, ("user", {"content": ["look:", part]}))
    stored = next(iter(s.log()))
    oa = s.context(format="openai")
    validate_openai(oa)
    assert oa == [{"role": "user", "content": [{"type": "text", "text": "look:"}, want_openai]}]
    an = s.context(format="anthropic")
    validate_anthropic(an)
    assert an == {"messages": [{"role": "user", "content": [{"type": "text", "text": "look:"}, want_anthropic]}]}
    assert_no_data_as_text(oa, PNG, PDF, WAV)
    assert_no_data_as_text(an, PNG, PDF, WAV)
    assert next(iter(s.log())).hash == stored.hash and stored.payload == {"content": ["look:", part]}
    tape.close()


def test_media_in_a_tool_result_is_an_image_or_a_note(tmp_path):
    """pydantic-ai stores a tool's returned file as one part (not a list): an image is an
    image in both views (moved to a user message in openai), a PDF a note, never base64."""
    pdf = {"kind": "binary", "data": PDF, "media_type": "application/pdf", "identifier": "c", "vendor_metadata": None}
    png = {"kind": "binary", "data": PNG, "media_type": "image/png", "identifier": "b", "vendor_metadata": None}
    tape, s = one_message(
        tmp_path,
        ("user", {"content": "go"}),
        ("tool_call", {"call_id": "a", "name": "shot", "arguments": {}}),
        ("tool_call", {"call_id": "b", "name": "report", "arguments": {}}),
        ("tool_result", {"call_id": "a", "output": png}),
        ("tool_result", {"call_id": "b", "output": ["the report", pdf]}),
    )
    note = f"[document (application/pdf, {len(PDF_BYTES)} bytes): left out, only a user message takes it]"
    oa = s.context(format="openai")
    validate_openai(oa)
    assert oa[2:] == [
        {"role": "tool", "tool_call_id": "a", "content": "[1 image: in the next user message]"},
        {"role": "tool", "tool_call_id": "b", "content": f"the report\n{note}"},
        {"role": "user", "content": [{"type": "text", "text": "[the image of the result of tool call a]"}, OA_PNG]},
    ]
    an = s.context(format="anthropic")
    validate_anthropic(an)
    assert an["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "content": [AN_PNG]},
        {"type": "tool_result", "tool_use_id": "b", "content": f"the report\n{note}"},
    ]
    assert_no_data_as_text(oa, PNG, PDF)
    assert_no_data_as_text(an, PNG, PDF)
    tape.close()


def test_media_in_an_assistant_message(tmp_path):
    """A LangChain v1 image in an assistant message moves to a user message as the other
    image shapes do; a document there is a note (neither API takes one in an assistant turn)."""
    tape, s = one_message(
        tmp_path,
        ("user", {"content": "draw"}),
        ("assistant", {"content": [{"type": "text", "text": "here"}, {"type": "image", "base64": PNG, "mime_type": "image/png"}, {"type": "file", "base64": PDF, "mime_type": "application/pdf"}]}),
    )
    note = f"[document (application/pdf, {len(PDF_BYTES)} bytes): left out, only a user message takes it]"
    oa = s.context(format="openai")
    validate_openai(oa)
    assert oa[1:] == [
        {"role": "assistant", "content": f"here{note}\n[1 image: in the next user message]"},
        {"role": "user", "content": [{"type": "text", "text": "[the image of the assistant message above]"}, OA_PNG]},
    ]
    an = s.context(format="anthropic")
    validate_anthropic(an)
    assert an["messages"][1:] == [
        {"role": "assistant", "content": [{"type": "text", "text": "here"}, {"type": "text", "text": note}, {"type": "text", "text": "[1 image: in the next user message]"}]},
        {"role": "user", "content": [{"type": "text", "text": "[the image of the assistant message above]"}, AN_PNG]},
    ]
    assert_no_data_as_text(oa, PNG, PDF)
    assert_no_data_as_text(an, PNG, PDF)
    tape.close()
