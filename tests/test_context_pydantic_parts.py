"""pydantic-ai's own content parts in `context`: `TextContent` (a file's text handed to the
model) is text, `CachePoint` (where a provider's prompt cache may end) is left out. Both
went to the prompt as JSON text (a black-box audit's finding, left open a session). Written
through the real pydantic-ai integration, read back in both views."""

import json

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai.messages import (  # noqa: E402
    CachePoint,
    ModelRequest,
    ModelResponse,
    TextContent,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ctape import Tape  # noqa: E402
from ctape.integrations.pydantic_ai import load_messages, save_messages  # noqa: E402


def _session(tmp_path):
    t = Tape.init(str(tmp_path / "t"))
    s = t.session("chat")
    save_messages(s, [
        ModelRequest(parts=[UserPromptPart(content=["hi", CachePoint(), TextContent(content="from a file", metadata={"a": 1})])]),
        ModelResponse(parts=[ToolCallPart(tool_name="read", args={"p": 1}, tool_call_id="c1")]),
        ModelRequest(parts=[ToolReturnPart(tool_name="read", content=[TextContent(content="file text"), CachePoint()], tool_call_id="c1")]),
        ModelResponse(parts=[TextPart(content="done")]),
    ])
    return t, s


def test_text_content_is_text_and_a_cache_point_is_left_out(tmp_path):
    t, s = _session(tmp_path)
    o = s.context(format="openai")
    assert o[0] == {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "from a file"}]}
    assert o[2] == {"role": "tool", "tool_call_id": "c1", "content": "file text"}
    a = s.context(format="anthropic")["messages"]
    assert a[0]["content"] == [{"type": "text", "text": "hi"}, {"type": "text", "text": "from a file"}]
    assert a[2]["content"][0]["content"] == "file text"
    for view in (o, a):
        text = json.dumps(view)
        assert "cache-point" not in text and "text-content" not in text and "metadata" not in text
    t.close()


def test_the_stored_messages_keep_both_parts(tmp_path):
    """Only the views change: pydantic-ai gets its parts back as it gave them."""
    t, s = _session(tmp_path)
    back = load_messages(s)
    content = back[0].parts[0].content
    assert isinstance(content[1], CachePoint) and isinstance(content[2], TextContent)
    assert content[2].metadata == {"a": 1}
    t.close()


def test_a_part_with_a_type_of_its_own_is_not_taken_for_pydantic_ais(tmp_path):
    """A part that has `type` is another writer's: its `kind` field means nothing here."""
    t = Tape.init(str(tmp_path / "t"))
    s = t.session("chat")
    part = {"type": "custom", "kind": "cache-point", "x": 1}
    s.append("user", {"content": ["hi", part]})
    assert s.context(format="openai")[0]["content"][1] == {"type": "text", "text": json.dumps(part, sort_keys=True)}
    t.close()
