"""Images in system and assistant messages, and reused tool call ids, through `ctape context`.

SPEC 10: images stay image parts in every format, never base64 text; SPEC 7: each view is
a valid request. Neither API takes an image in every role: Chat Completions system and
assistant content are text, the Messages API's system is text and it refuses an image
block in an assistant turn ("'image' blocks are not permitted within assistant turns").
So such an image moves, as tool-result images already did, to a user message after the
turn, with a note where it was. Both API views give a reused call id the same unique
name (`c1`, `c1_2`); results pair with calls as docs/import.md defines ("Tool calls pair
by position": a result answers the latest open call of its id before it).

Every view here is built by the real CLI and checked by the validators of test_context.py
(the SDKs' request types plus the rules the types cannot express).
"""

from __future__ import annotations

import json

import pytest

from ctape import Tape
from conftest import run_cli
from test_context import validate_anthropic, validate_openai

PNG = "data:image/png;base64,iVBORw0KGgo="
DATA = "iVBORw0KGgo="
URL = "https://x/y.png"

# one image in each shape transcripts hold, and what each view makes of it
SHAPES = {
    "chat-completions": {"type": "image_url", "image_url": {"url": PNG}},
    "responses": {"type": "input_image", "image_url": PNG},
    "anthropic": {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": DATA}},
}
OPENAI_IMAGE = {"type": "image_url", "image_url": {"url": PNG}}
ANTHROPIC_IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": DATA}}


def tape_with(tmp_path, *entries, cli=False):
    """A tape whose session `x` holds these (kind, payload) entries, appended by the CLI
    (cli=True) or in one process (quicker; the views are always built by the CLI)."""
    d = tmp_path / "X"
    if cli:
        run_cli("--dir", d, "init", check=True)
        for kind, payload in entries:
            run_cli("--dir", d, "append", kind, json.dumps(payload), "-s", "x", check=True)
        return d
    t = Tape.init(d)
    s = t.session("x")
    for kind, payload in entries:
        s.append(kind.replace("-", "_"), payload)
    t.close()
    return d


def context(d, fmt, *extra):
    p = run_cli("--dir", d, "context", "-s", "x", "--format", fmt, *extra, check=True)
    out = json.loads(p.stdout)
    (validate_openai if fmt == "openai" else validate_anthropic)(out)
    return out


def images_in(parts):
    return [p for p in parts if isinstance(p, dict) and p.get("type") in ("image_url", "image")]


# -- 1. images of assistant and system messages ----------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_an_assistant_image_moves_to_the_next_user_message(tmp_path, shape):
    d = tape_with(tmp_path, ("user", {"content": "q"}), ("assistant", {"content": [{"type": "text", "text": "see"}, SHAPES[shape]]}), ("user", {"content": "and?"}))
    oa = context(d, "openai")
    assert [m["role"] for m in oa] == ["user", "assistant", "user", "user"]
    assert oa[1] == {"role": "assistant", "content": "see\n[1 image: in the next user message]"}
    assert oa[2]["content"] == [{"type": "text", "text": "[the image of the assistant message above]"}, OPENAI_IMAGE]
    assert oa[3] == {"role": "user", "content": "and?"}

    an = context(d, "anthropic")["messages"]
    assert [m["role"] for m in an] == ["user", "assistant", "user"]
    assert an[1]["content"] == [{"type": "text", "text": "see"}, {"type": "text", "text": "[1 image: in the next user message]"}]
    assert an[2]["content"] == [{"type": "text", "text": "[the image of the assistant message above]"}, ANTHROPIC_IMAGE, {"type": "text", "text": "and?"}]


def test_an_assistant_message_of_only_an_image_is_not_its_json(tmp_path):
    d = tape_with(tmp_path, ("user", {"content": "draw"}), ("assistant", {"content": [SHAPES["anthropic"]]}))
    oa = context(d, "openai")
    assert oa[1] == {"role": "assistant", "content": "[1 image: in the next user message]"}
    assert images_in(oa[2]["content"]) == [OPENAI_IMAGE]
    an = context(d, "anthropic")["messages"]
    assert an[1]["content"] == [{"type": "text", "text": "[1 image: in the next user message]"}]
    assert images_in(an[2]["content"]) == [ANTHROPIC_IMAGE]


def test_a_system_image_moves_to_a_user_message(tmp_path):
    d = tape_with(
        tmp_path,
        ("system", {"content": [{"type": "text", "text": "sys"}, {"type": "image_url", "image_url": {"url": URL}}]}),
        ("user", {"content": "q"}),
    )
    oa = context(d, "openai")
    assert oa[0] == {"role": "system", "content": "sys\n[1 image: in the next user message]"}
    assert oa[1] == {"role": "user", "content": [{"type": "text", "text": "[the image of the system message above]"}, {"type": "image_url", "image_url": {"url": URL}}]}
    assert oa[2] == {"role": "user", "content": "q"}

    an = context(d, "anthropic")
    assert an["system"] == "sys\n[1 image: at the start of the first user message]"
    assert an["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "[the image of the system prompt]"},
        {"type": "image", "source": {"type": "url", "url": URL}},
        {"type": "text", "text": "q"},
    ]}]


def test_the_audits_session(tmp_path):
    """The audit's reproduction: a user message, an assistant image, a system image after them."""
    d = tape_with(
        tmp_path,
        ("user", {"content": "q"}),
        ("assistant", {"content": [{"type": "text", "text": "see"}, SHAPES["chat-completions"]]}),
        ("system", {"content": [{"type": "text", "text": "sys"}, {"type": "image_url", "image_url": {"url": URL}}]}),
        cli=True,
    )
    oa = context(d, "openai")
    assert [m["role"] for m in oa] == ["user", "assistant", "user", "system", "user"]
    assert [images_in(m["content"]) for m in oa if m["role"] == "user" and isinstance(m["content"], list)] == [
        [OPENAI_IMAGE], [{"type": "image_url", "image_url": {"url": URL}}]]
    an = context(d, "anthropic")
    assert an["system"] == "sys\n[1 image: at the start of the first user message]"
    assert [images_in(m["content"]) for m in an["messages"]] == [[{"type": "image", "source": {"type": "url", "url": URL}}], [], [ANTHROPIC_IMAGE]]


def test_an_assistant_image_beside_tool_calls_follows_the_results(tmp_path):
    """Nothing may come between a call and its result: the image waits for the turn's results,
    and goes with the images of those results."""
    d = tape_with(
        tmp_path,
        ("user", {"content": "look"}),
        ("assistant", {"content": [{"type": "text", "text": "before"}, SHAPES["responses"]]}),
        ("tool-call", {"call_id": "c1", "name": "shot", "arguments": {}}),
        ("tool-result", {"call_id": "c1", "output": [{"type": "input_text", "text": "taken"}, {"type": "input_image", "image_url": URL}]}),
    )
    oa = context(d, "openai")
    assert [m["role"] for m in oa] == ["user", "assistant", "tool", "user"]
    assert oa[1]["content"] == "before\n[1 image: in the next user message]" and oa[1]["tool_calls"][0]["id"] == "c1"
    assert oa[3]["content"] == [
        {"type": "text", "text": "[the image of the assistant message above]"}, OPENAI_IMAGE,
        {"type": "text", "text": "[the image of the result of tool call c1]"}, {"type": "image_url", "image_url": {"url": URL}},
    ]
    an = context(d, "anthropic")["messages"]
    assert [b["type"] for b in an[1]["content"]] == ["text", "text", "tool_use"]
    assert [b["type"] for b in an[2]["content"]] == ["tool_result", "text", "image"]
    assert images_in(an[2]["content"]) == [ANTHROPIC_IMAGE]
    assert images_in(an[2]["content"][0]["content"]) == [{"type": "image", "source": {"type": "url", "url": URL}}]


def test_an_image_without_data_stays_a_note_in_place(tmp_path):
    d = tape_with(tmp_path, ("user", {"content": "q"}), ("assistant", {"content": [{"type": "text", "text": "see "}, {"type": "input_image", "image_url": None}]}))
    oa = context(d, "openai")
    assert oa[1:] == [{"role": "assistant", "content": "see [image: the transcript keeps no data for it]"}]
    an = context(d, "anthropic")["messages"]
    assert an[1:] == [{"role": "assistant", "content": [{"type": "text", "text": "see "}, {"type": "text", "text": "[image: the transcript keeps no data for it]"}]}]


def test_a_prefill_after_an_assistant_image_stays_last(tmp_path):
    d = tape_with(
        tmp_path,
        ("user", {"content": "q"}),
        ("assistant", {"content": [SHAPES["chat-completions"]]}),
        ("streaming", {"content": "and then"}),
    )
    for fmt in ("openai", "anthropic"):
        out = context(d, fmt, "--resume", "prefix")
        msgs = out if fmt == "openai" else out["messages"]
        assert msgs[-1]["role"] == "assistant"
        assert "and then" in json.dumps(msgs[-1]) and images_in(msgs[-2]["content"])


# -- 2. reused tool call ids --------------------------------------------------------------------


def calls_and_results(fmt, out):
    """[(call id, arguments)], {call id: result} of a view."""
    if fmt == "openai":
        calls = [(c["id"], json.loads(c["function"]["arguments"])) for m in out if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        return calls, {m["tool_call_id"]: m["content"] for m in out if m["role"] == "tool"}
    blocks = [b for m in out["messages"] for b in m["content"]]
    return [(b["id"], b["input"]) for b in blocks if b["type"] == "tool_use"], {b["tool_use_id"]: b["content"] for b in blocks if b["type"] == "tool_result"}


def test_two_open_calls_with_one_id_get_the_same_unique_ids_in_both_views(tmp_path):
    d = tape_with(
        tmp_path,
        ("user", {"content": "go"}),
        ("tool-call", {"call_id": "c1", "name": "sh", "arguments": {"cmd": "a"}}),
        ("tool-call", {"call_id": "c1", "name": "sh", "arguments": {"cmd": "b"}}),
        ("tool-result", {"call_id": "c1", "output": "ra"}),
        ("tool-result", {"call_id": "c1", "output": "rb"}),
        cli=True,
    )
    views = {fmt: calls_and_results(fmt, context(d, fmt)) for fmt in ("openai", "anthropic")}
    assert views["openai"] == views["anthropic"]
    calls, results = views["openai"]
    assert calls == [("c1", {"cmd": "a"}), ("c1_2", {"cmd": "b"})]
    # docs/import.md: a result answers the latest open call of its id before it (a stack per id)
    assert results == {"c1_2": "ra", "c1": "rb"}


def test_a_reused_id_is_renamed_past_an_id_the_tape_already_holds(tmp_path):
    d = tape_with(
        tmp_path,
        ("user", {"content": "go"}),
        ("tool-call", {"call_id": "t", "name": "sh", "arguments": {"n": 1}}),
        ("tool-result", {"call_id": "t", "output": "r1"}),
        ("tool-call", {"call_id": "t", "name": "sh", "arguments": {"n": 2}}),
        ("tool-result", {"call_id": "t", "output": [{"type": "input_text", "text": "r2"}, {"type": "input_image", "image_url": PNG}]}),
        ("tool-call", {"call_id": "t_2", "name": "sh", "arguments": {"n": 3}}),
    )
    oa, an = context(d, "openai"), context(d, "anthropic")
    # the Messages API wants every tool_use id unique in a request: the reused one is renamed
    # past the ids the tape holds; a Chat Completions request may reuse an answered call's id
    assert [c for c, _ in calls_and_results("anthropic", an)[0]] == ["t", "t_3", "t_2"]
    assert [c for c, _ in calls_and_results("openai", oa)[0]] == ["t", "t", "t_2"]
    # the image of the second result is labelled with the id its call has in the request
    carried = [p["text"] for m in oa if m["role"] == "user" and isinstance(m["content"], list) for p in m["content"] if p["type"] == "text"]
    assert carried == ["[the image of the result of tool call t]"]
    tool_results = [m for m in oa if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_results] == ["t", "t", "t_2"]
    assert tool_results[0]["content"] == "r1" and "interrupted" in tool_results[2]["content"]


def test_views_are_deterministic(tmp_path):
    d = tape_with(
        tmp_path,
        ("system", {"content": [{"type": "text", "text": "sys"}, SHAPES["anthropic"]]}),
        ("user", {"content": "q"}),
        ("assistant", {"content": [SHAPES["responses"], {"type": "text", "text": "x"}]}),
        ("tool-call", {"call_id": "c1", "name": "sh", "arguments": {"cmd": "a"}}),
        ("tool-call", {"call_id": "c1", "name": "sh", "arguments": {"cmd": "b"}}),
        ("tool-result", {"call_id": "c1", "output": "ra"}),
    )
    for fmt in ("openai", "anthropic"):
        runs = [run_cli("--dir", d, "context", "-s", "x", "--format", fmt, check=True).stdout for _ in range(2)]
        assert runs[0] == runs[1]
        context(d, fmt)  # and valid


def test_dedupe_tools_names_the_same_output_by_its_id_in_the_request(tmp_path):
    long = "the same long output " * 4
    d = tape_with(
        tmp_path,
        ("user", {"content": "go"}),
        ("tool-call", {"call_id": "t", "name": "sh", "arguments": {"n": 1}}),
        ("tool-result", {"call_id": "t", "output": long}),
        ("tool-call", {"call_id": "t", "name": "sh", "arguments": {"n": 2}}),
        ("tool-result", {"call_id": "t", "output": long}),
    )
    results = calls_and_results("anthropic", context(d, "anthropic", "--policy", "dedupe-tools"))[1]
    assert results == {"t": "[same output as the result of call t_2, below]", "t_2": long}
    # openai keeps the answered call's id: the note names the call by the id it has there
    tool = [m["content"] for m in context(d, "openai", "--policy", "dedupe-tools") if m["role"] == "tool"]
    assert tool == ["[same output as the result of call t, below]", long]
