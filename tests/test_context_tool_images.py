"""SPEC 10: images stay image parts. A tool result whose output holds an image (Codex's
`exec` and `view_image` return lists of parts) goes to the model as an image, never as
its base64 inside JSON text: an image block inside the tool_result (Anthropic), and a
user message right after the turn's tool messages (Chat Completions, whose tool messages
take text only, and between whose call and results nothing may come)."""

from __future__ import annotations

import base64
import json

from ctape import Tape

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4).decode()
DATA = PNG.split(",", 1)[1]


def _session(tmp_path):
    t = Tape.init(tmp_path / "t")
    s = t.session("s")
    s.append("user", {"content": "Take a screenshot and list the files."})
    s.append("tool_call", {"call_id": "c1", "name": "screenshot", "arguments": {}})
    s.append("tool_call", {"call_id": "c2", "name": "ls", "arguments": {"path": "."}})
    s.append("tool_result", {"call_id": "c1", "output": [{"type": "input_text", "text": "screenshot taken"}, {"type": "input_image", "image_url": PNG}]})
    s.append("tool_result", {"call_id": "c2", "output": "a.py\nb.py"})
    s.append("assistant", {"content": "The page shows a login form; two files."})
    return t, s


def test_openai_view_puts_the_image_after_the_turns_tool_messages(tmp_path):
    t, s = _session(tmp_path)
    msgs = s.context(format="openai")
    t.close()
    roles = [m["role"] for m in msgs]
    assert roles == ["user", "assistant", "tool", "tool", "user", "assistant"], roles
    tool1, tool2, images = msgs[2], msgs[3], msgs[4]
    assert tool1["tool_call_id"] == "c1" and DATA not in json.dumps(tool1) and "screenshot taken" in tool1["content"]
    assert tool2 == {"role": "tool", "tool_call_id": "c2", "content": "a.py\nb.py"}
    parts = images["content"]
    assert any(p.get("type") == "image_url" and p["image_url"]["url"] == PNG for p in parts), parts
    assert "c1" in parts[0]["text"]


def test_anthropic_view_keeps_an_image_block_in_the_tool_result(tmp_path):
    t, s = _session(tmp_path)
    req = s.context(format="anthropic")
    t.close()
    results = [b for turn in req["messages"] for b in turn["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    first = results[0]["content"]
    assert isinstance(first, list), first
    assert {"type": "text", "text": "screenshot taken"} in first
    images = [b for b in first if b["type"] == "image"]
    assert images and images[0]["source"] == {"type": "base64", "media_type": "image/png", "data": DATA}
    assert results[1]["content"] == "a.py\nb.py"
    text = json.dumps([b for turn in req["messages"] for b in turn["content"] if b.get("type") == "text"])
    assert DATA not in text
