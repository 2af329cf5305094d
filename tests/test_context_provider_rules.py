"""The context views against the rules the provider APIs enforce (SPEC sections 6 and 7).

`context` promises a prompt the APIs take. Besides the request types (tests/test_context.py
checks them with the SDKs), the APIs refuse, with a 400:

- Messages API (anthropic view): a `tool_use.id` / `tool_result.tool_use_id` outside
  `^[a-zA-Z0-9_-]+$` (`functions.ls:0`, `call 2`, ``), two tool_use blocks with one id, a
  tool_use not answered by a tool_result at the start of the next (user) message, roles
  that do not alternate or do not start with user, a text block that is empty or only
  white space, a tool_result that is empty (with is_error) or only white space, and a final
  assistant turn (a prefill) whose text ends in white space;
- Chat Completions (openai view): an empty content array (and, as ctape promises, an empty
  or white-space text) on a system / user message or an assistant message without tool
  calls, a tool call not answered by a tool message before the next other message, a tool
  message answering no call, and an empty call id.

`--max-tokens` never leaves a prompt with no message when the path has one.

The validator below states those rules; crafted sessions (the audit's findings F1-F3 and
the max-tokens note) and a hypothesis property over random sessions (odd and reused ids,
empty and white-space contents, pending calls, errors answering calls, interrupted
streams, bookkeeping and anchors) check every format x policy x resume combination.
"""

import itertools
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctape import Tape

S = "chat"
ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")
POLICIES = ("last-turn", "exclude-errors", "dedupe-tools")
POLICY_SETS = [list(c) for n in range(4) for c in itertools.combinations(POLICIES, n)] + [["whole-tape"]]
HIDDEN = {"ctape.hidden": True}


# -- the validator ------------------------------------------------------------------------------


def blank(text):
    return not isinstance(text, str) or not text.strip()


def anthropic_problems(out):
    """The rules of the Messages API the anthropic view breaks, as a list of sentences."""
    bad = []
    if not isinstance(out, dict) or not isinstance(out.get("messages"), list) or set(out) - {"system", "messages"}:
        return [f"not a {{system, messages}} request: {out!r:.200}"]
    if "system" in out and blank(out["system"]):
        bad.append("an empty or white-space system prompt")
    msgs = out["messages"]
    if msgs and msgs[0].get("role") != "user":
        bad.append("the first message is not a user message")
    ids = []
    for i, m in enumerate(msgs):
        role, blocks = m.get("role"), m.get("content")
        if role not in ("user", "assistant"):
            bad.append(f"message {i}: role {role!r}")
        if i and role == msgs[i - 1].get("role"):
            bad.append(f"message {i}: roles do not alternate")
        if not isinstance(blocks, list) or not blocks:
            bad.append(f"message {i}: no content blocks")
            continue
        results = [j for j, b in enumerate(blocks) if b.get("type") == "tool_result"]
        if results != list(range(len(results))):
            bad.append(f"message {i}: a block before a tool_result")
        for b in blocks:
            t = b.get("type")
            if t == "text" and blank(b.get("text")):
                bad.append(f"message {i}: a text block without non-white-space text: {b.get('text')!r}")
            elif t == "tool_use":
                ids.append(b.get("id"))
                if role != "assistant":
                    bad.append(f"message {i}: tool_use in a {role} message")
                if not isinstance(b.get("id"), str) or not ANTHROPIC_ID.fullmatch(b["id"]):
                    bad.append(f"message {i}: tool_use.id {b.get('id')!r} does not match ^[a-zA-Z0-9_-]+$")
                if not isinstance(b.get("input"), dict):
                    bad.append(f"message {i}: tool_use.input is not an object")
            elif t == "tool_result":
                if role != "user":
                    bad.append(f"message {i}: tool_result in a {role} message")
                if not isinstance(b.get("tool_use_id"), str) or not ANTHROPIC_ID.fullmatch(b["tool_use_id"]):
                    bad.append(f"message {i}: tool_use_id {b.get('tool_use_id')!r} does not match ^[a-zA-Z0-9_-]+$")
                c = b.get("content")
                if isinstance(c, str) and not c.strip() or isinstance(c, list) and not c:
                    bad.append(f"message {i}: an empty or white-space tool_result {c!r}")
                for p in c if isinstance(c, list) else []:
                    if p.get("type") == "text" and blank(p.get("text")):
                        bad.append(f"message {i}: a white-space text block in a tool_result")
            elif t == "image" and role != "user":
                bad.append(f"message {i}: an image in an assistant turn")
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        answered = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        before = [b["id"] for b in msgs[i - 1]["content"] if b.get("type") == "tool_use"] if i and isinstance(msgs[i - 1].get("content"), list) else []
        if answered and sorted(answered) != sorted(before):
            bad.append(f"message {i}: tool_results {answered} for the tool_use blocks {before}")
        if uses and i + 1 == len(msgs):
            bad.append(f"message {i}: tool_use blocks {uses} nobody answers")
    if len(ids) != len(set(ids)):
        bad.append(f"tool_use ids are not unique: {ids}")
    if msgs and msgs[-1].get("role") == "assistant" and isinstance(msgs[-1].get("content"), list) and msgs[-1]["content"]:
        last = msgs[-1]["content"][-1]
        if last.get("type") == "text" and last.get("text", "") != last.get("text", "").rstrip():
            bad.append("the final assistant turn (a prefill) ends in white space")
    return bad


def openai_problems(msgs):
    """The rules of Chat Completions the openai view breaks, as a list of sentences."""
    if not isinstance(msgs, list):
        return [f"not a message list: {msgs!r:.200}"]
    bad = []
    open_ids: list = []  # the calls of the last assistant message still unanswered
    for i, m in enumerate(msgs):
        role, c = m.get("role"), m.get("content")
        if role != "tool" and open_ids:
            bad.append(f"message {i}: calls {open_ids} unanswered before a {role} message")
            open_ids = []
        if role in ("system", "user") or role == "assistant" and not m.get("tool_calls"):
            if isinstance(c, list):
                if not c:
                    bad.append(f"message {i}: an empty content array ({role})")
                for p in c:
                    if p.get("type") == "text" and blank(p.get("text")):
                        bad.append(f"message {i}: an empty or white-space text part ({role})")
            elif blank(c):
                bad.append(f"message {i}: empty or white-space content {c!r} ({role})")
        if role == "assistant":
            calls = m.get("tool_calls") or []
            if "tool_calls" in m and not calls:
                bad.append(f"message {i}: an empty tool_calls array")
            if c is not None and not isinstance(c, str):
                bad.append(f"message {i}: assistant content is not text")
            cids = [x.get("id") for x in calls]
            for cid in cids:
                if not isinstance(cid, str) or not cid.strip():
                    bad.append(f"message {i}: an empty tool call id {cid!r}")
            if len(cids) != len(set(cids)):
                bad.append(f"message {i}: two calls with one id {cids}")
            open_ids = list(cids)
        elif role == "tool":
            cid = m.get("tool_call_id")
            if cid not in open_ids:
                bad.append(f"message {i}: a tool message for {cid!r}, which no open call of the message before has")
            else:
                open_ids.remove(cid)
            if not isinstance(c, str):
                bad.append(f"message {i}: tool content is not text")
        elif role not in ("system", "user"):
            bad.append(f"message {i}: role {role!r}")
    if open_ids:
        bad.append(f"calls {open_ids} unanswered at the end")
    return bad


def problems(fmt, out):
    return anthropic_problems(out) if fmt == "anthropic" else openai_problems(out)


def has_messages(fmt, out):
    """Does the prompt hold a message that is not a system message?"""
    return bool(out["messages"]) if fmt == "anthropic" else any(m["role"] != "system" for m in out)


def check(s, fmt, **kw):
    out = s.context(format=fmt, **kw)
    bad = problems(fmt, out)
    assert not bad, f"{fmt} {kw}: {bad}\n{json.dumps(out, indent=1)[:3000]}"
    return out


def test_the_validator_finds_what_the_apis_refuse():
    """Each rule, shown a prompt that breaks it (so the tests below can fail)."""
    use = {"type": "tool_use", "id": "a", "name": "ls", "input": {}}
    res = {"type": "tool_result", "tool_use_id": "a", "content": "r"}
    ok = {"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]},
                       {"role": "assistant", "content": [use]}, {"role": "user", "content": [res]}]}
    assert anthropic_problems(ok) == []
    for broken in (
        {"messages": [ok["messages"][0], {"role": "assistant", "content": [{**use, "id": "functions.ls:0"}]},
                      {"role": "user", "content": [{**res, "tool_use_id": "functions.ls:0"}]}]},
        {"messages": [ok["messages"][0], {"role": "assistant", "content": [{**use, "id": ""}]}, {"role": "user", "content": [{**res, "tool_use_id": ""}]}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": " \n"}]}]},
        {"messages": ok["messages"][:2]},
        {"messages": ok["messages"] + [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
        {"messages": [ok["messages"][0], {"role": "assistant", "content": [{"type": "text", "text": "a "}]}]},
        {"messages": ok["messages"][:2] + [{"role": "user", "content": [{**res, "content": " "}]}]},
        {"messages": ok["messages"] + [{"role": "assistant", "content": [use]}, {"role": "user", "content": [res]}]},
    ):
        assert anthropic_problems(broken), broken
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}
    ok = [{"role": "user", "content": "q"}, call, {"role": "tool", "tool_call_id": "a", "content": ""}]
    assert openai_problems(ok) == []
    for broken in (
        [{"role": "user", "content": []}],
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": ""}],
        [{"role": "system", "content": " "}],
        [{"role": "user", "content": [{"type": "text", "text": ""}]}],
        ok[:2],
        ok + [{"role": "tool", "tool_call_id": "a", "content": "again"}],
        [ok[0], {**call, "tool_calls": [{**call["tool_calls"][0], "id": ""}]}, {"role": "tool", "tool_call_id": "", "content": ""}],
    ):
        assert openai_problems(broken), broken


# -- crafted sessions ---------------------------------------------------------------------------


def tool_uses(out):
    return [b for m in out["messages"] for b in m["content"] if b["type"] == "tool_use"]


def tool_results(out):
    return {b["tool_use_id"]: b for m in out["messages"] for b in m["content"] if b["type"] == "tool_result"}


def test_anthropic_ids_outside_the_pattern_get_valid_ids_shared_by_call_and_result(tape):
    """F1: Kimi's `functions.ls:0`, an id with a space, an empty one, one that is not ASCII;
    and a valid id equal to what the first would become, which keeps its own id."""
    s = tape.session(S)
    s.append("user", {"content": "q"})
    odd = ["functions.ls:0", "call 2", "", "naïve", "functions_ls_0", "a/b"]
    for n, cid in enumerate(odd):
        s.append("tool_call", {"call_id": cid, "name": "ls", "arguments": {"n": n}})
    for n, cid in enumerate(odd[:-1]):
        s.append("tool_result", {"call_id": cid, "output": f"out {n}"})
    # an odd id used again once answered, and an error answering a call
    s.append("tool_call", {"call_id": "functions.ls:0", "name": "ls", "arguments": {"n": 9}})
    s.append("error", {"message": "boom", "call_id": "functions.ls:0"})
    for policies in POLICY_SETS:
        out = check(s, "anthropic", policies=policies)
        uses, results = tool_uses(out), tool_results(out)
        for b in uses:
            n = b["input"]["n"]
            r = results[b["id"]]
            # the result with the call's id is that call's own
            if n == 9:
                assert "boom" in r["content"]
            elif n == 5:
                assert r["content"].startswith("[interrupted")
            else:
                assert r["content"] == f"out {n}"
    out = check(s, "anthropic")
    by_n = {b["input"]["n"]: b["id"] for b in tool_uses(out)}
    assert by_n[4] == "functions_ls_0", "a valid id stays as it is"
    assert by_n[0] not in ("functions_ls_0", "functions.ls:0") and by_n[0].startswith("functions_ls_0")
    assert by_n[1] == "call_2" and by_n[3] == "na_ve" and by_n[5] == "a_b"
    assert by_n[2] and by_n[9] != by_n[0]
    assert out == s.context(format="anthropic"), "deterministic"
    # the tape view keeps the ids as they are
    assert [e["payload"]["call_id"] for e in s.context(format="tape") if e["kind"] == "tool_call"] == odd + ["functions.ls:0"]


def test_openai_keeps_the_agents_ids_but_gives_an_empty_one_an_id(tape):
    s = tape.session(S)
    s.append("user", {"content": "q"})
    s.append("tool_call", {"call_id": "functions.ls:0", "name": "ls", "arguments": {}})
    s.append("tool_call", {"call_id": "", "name": "cat", "arguments": {}})
    s.append("tool_call", {"call_id": "call", "name": "pwd", "arguments": {}})
    s.append("tool_result", {"call_id": "", "output": "empty id's output"})
    s.append("tool_result", {"call_id": "functions.ls:0", "output": "ls output"})
    for policies in POLICY_SETS:
        check(s, "openai", policies=policies)
    out = check(s, "openai")
    calls = {c["function"]["name"]: c["id"] for c in out[1]["tool_calls"]}
    assert calls["ls"] == "functions.ls:0", "Chat Completions takes this id: the view keeps it"
    assert calls["pwd"] == "call" and calls["cat"] not in ("", "call")
    tools = {m["tool_call_id"]: m["content"] for m in out if m["role"] == "tool"}
    assert tools[calls["cat"]] == "empty id's output" and tools["functions.ls:0"] == "ls output"


def test_anthropic_leaves_out_white_space_text(tape):
    """F2: a white-space user message (also after tool results, in the same user turn), a
    white-space part in a list, a system prompt and a tool output of white space only."""
    s = tape.session(S)
    s.append("system", {"content": "  "})
    s.append("system", {"content": "be brief"})
    s.append("user", {"content": "  \n"})
    s.append("assistant", {"content": "hello"})
    s.append("user", {"content": [{"type": "text", "text": " "}, {"type": "text", "text": "list files"}, "\t"]})
    s.append("tool_call", {"call_id": "c1", "name": "ls", "arguments": {}})
    s.append("tool_result", {"call_id": "c1", "output": " \n "})
    s.append("user", {"content": "  \n"})
    s.append("tool_call", {"call_id": "c2", "name": "cat", "arguments": {}})
    s.append("tool_result", {"call_id": "c2", "output": "", "is_error": True})
    s.append("user", {"content": [{"type": "text", "text": "\n"}]})
    s.append("assistant", {"content": [{"type": "text", "text": "  "}]})
    s.append("user", {"content": "go on"})
    s.append("assistant", {"content": "Sure: \n"})
    for policies in POLICY_SETS:
        for resume in ("drop", "prefix"):
            out = check(s, "anthropic", policies=policies, resume=resume)
    out = check(s, "anthropic")
    assert out["system"] == "be brief"
    assert out["messages"][0]["content"] == [{"type": "text", "text": "(conversation start)"}]
    assert out["messages"][-1]["content"][-1]["text"] == "Sure:"
    results = tool_results(out)
    assert results["c1"]["content"].strip() and results["c2"]["content"].strip()


def test_openai_leaves_out_empty_messages(tape):
    """F3: `{"content": []}`, `""` and white space on system / user / assistant messages
    (append takes them: imports carry such messages)."""
    s = tape.session(S)
    s.append("system", {"content": ""})
    s.append("user", {"content": []})
    s.append("assistant", {"content": ""})
    s.append("user", {"content": [{"type": "text", "text": ""}, {"type": "text", "text": " "}]})
    s.append("assistant", {"content": " \n"})
    s.append("user", {"content": "q"})
    s.append("assistant", {"content": "  "})
    s.append("tool_call", {"call_id": "c1", "name": "ls", "arguments": {}})
    s.append("tool_result", {"call_id": "c1", "output": ""})
    s.append("user", {"content": [{"type": "text", "text": ""}, {"type": "text", "text": "next"}]})
    for policies in POLICY_SETS:
        for resume in ("drop", "prefix"):
            check(s, "openai", policies=policies, resume=resume)
    out = check(s, "openai")
    assert out[0] == {"role": "user", "content": "q"}
    assert out[1]["content"] is None and out[1]["tool_calls"][0]["id"] == "c1"
    assert out[2] == {"role": "tool", "tool_call_id": "c1", "content": ""}, "an empty tool output is fine in Chat Completions"
    assert out[3] == {"role": "user", "content": [{"type": "text", "text": "next"}]}


def test_a_session_of_empty_messages_gives_no_message_in_either_view(tape):
    s = tape.session(S)
    s.append("system", {"content": "sys"})
    s.append("user", {"content": []})
    s.append("assistant", {"content": " "})
    assert check(s, "openai") == [{"role": "system", "content": "sys"}]
    assert check(s, "anthropic") == {"system": "sys", "messages": []}


def test_a_user_message_of_thinking_alone_is_left_out_in_both_views(tape):
    """The random sessions found a user message holding only a `thinking` part: the
    anthropic view left it out, the openai view sent the part's JSON as text (and the
    window of --max-tokens then disagreed with the view about what shows)."""
    s = tape.session(S)
    s.append("user", {"content": [{"type": "thinking", "thinking": "hmm"}]})
    s.append("user", {"content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "q"}]})
    assert check(s, "openai") == [{"role": "user", "content": [{"type": "text", "text": "q"}]}]
    assert check(s, "openai", max_tokens=1) == check(s, "openai")
    assert check(s, "anthropic")["messages"] == [{"role": "user", "content": [{"type": "text", "text": "q"}]}]


def test_max_tokens_never_leaves_only_system_messages(tape):
    """An anchor's summary, bookkeeping and an interrupted stream at REF are bigger than the
    budget: the newest message stays (past the budget), as with a message that big."""
    s = tape.session(S)
    s.append("system", {"content": "sys"})
    s.append("user", {"content": "the question"})
    s.append("assistant", {"content": "the answer"})
    s.append("system", {"content": "x" * 4000}, meta=HIDDEN)
    s.append("anchor", {"name": "done", "summary": "y" * 4000})
    s.append("user", {"content": ""})
    s.append("streaming", {"content": "z" * 4000})
    for fmt in ("openai", "anthropic"):
        for policies in POLICY_SETS:
            for resume in ("drop", "prefix"):
                # last-turn starts after the anchor: nothing there but the stream
                expected = "last-turn" not in policies or resume == "prefix"
                assert has_messages(fmt, s.context(format=fmt, policies=policies, resume=resume)) == expected
                for n in (1, 10, 100):
                    out = s.context(format=fmt, policies=policies, resume=resume, max_tokens=n)
                    assert has_messages(fmt, out) == expected, (fmt, policies, resume, n, out)
                    check(s, fmt, policies=policies, resume=resume, max_tokens=n)
    out = check(s, "openai", max_tokens=10)
    assert out == [{"role": "system", "content": "sys"}, {"role": "assistant", "content": "the answer"}]
    out = check(s, "anthropic", max_tokens=10, resume="prefix")
    assert [m["role"] for m in out["messages"]] == ["user", "assistant"]


# -- random sessions ----------------------------------------------------------------------------

ODD_IDS = ["c1", "c2", "functions.ls:0", "functions_ls_0", "call 2", "call_2", "", " ", "call", "naïve", "a/b", "x" * 70]
blank_text = st.sampled_from(["", " ", "\n", " \t\n "])
some_text = st.one_of(blank_text, st.sampled_from(["hi", " hi ", "done\n", "same output " * 8]), st.text(max_size=12))
part = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, some_text),
    st.builds(lambda t: {"type": "input_text", "text": t}, blank_text),
    st.just({"type": "thinking", "thinking": "hmm", "signature": "s"}),
    st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}),
    blank_text,
)
content = st.one_of(some_text, st.lists(part, max_size=3))
big = st.sampled_from(["", "w" * 600])

op = st.one_of(
    st.tuples(st.sampled_from(["system", "user", "assistant"]), content),
    st.tuples(st.just("call"), st.sampled_from(ODD_IDS), st.sampled_from(["read", "bash"]), st.sampled_from([{}, {"p": 1}, "not json"])),
    st.tuples(st.just("result"), st.integers(0, 30), st.one_of(some_text, st.none(), st.lists(part, max_size=2)), st.booleans()),
    st.tuples(st.just("result_of"), st.sampled_from(ODD_IDS), some_text),
    st.tuples(st.just("error"), st.integers(-1, 30), some_text),
    st.tuples(st.just("streaming"), some_text),
    st.tuples(st.just("anchor"), big),
    st.tuples(st.just("hidden"), big),
)


def play(s, ops):
    calls = []
    for o in ops:
        k = o[0]
        if k in ("system", "user", "assistant", "streaming"):
            c = o[1] if k != "streaming" or isinstance(o[1], str) else ""
            s.append(k, {"content": c})
        elif k == "call":
            calls.append(o[1])
            s.append("tool_call", {"call_id": o[1], "name": o[2], "arguments": o[3]})
        elif k == "result":
            p = {"call_id": calls[o[1] % len(calls)] if calls else "orphan", "output": o[2]}
            if o[3]:
                p["is_error"] = True
            s.append("tool_result", p)
        elif k == "result_of":  # a result by id: maybe of no open call, maybe of a reused id
            s.append("tool_result", {"call_id": o[1], "output": o[2]})
        elif k == "error":
            p = {"message": o[2] or "failed"}
            if o[1] >= 0 and calls:
                p["call_id"] = calls[o[1] % len(calls)]
            s.append("error", p)
        elif k == "anchor":
            s.append("anchor", {"name": "m", "summary": o[1]})
        else:
            s.append("system", {"content": o[1] or " "}, meta=HIDDEN)


def interrupt_a_stream(s, text):
    """A writer that dies mid-stream: the text stays unrecorded, an open stream of the session."""
    try:
        with s.stream() as w:
            w.write(text)
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass


@settings(max_examples=int(os.environ.get("CTAPE_HYPOTHESIS_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=20), stream=st.one_of(st.none(), some_text), budget=st.sampled_from([1, 30, 200]))
def test_random_sessions_give_prompts_the_apis_take(ops, stream, budget):
    d = tempfile.mkdtemp()
    try:
        t = Tape.init(Path(d) / "tape")
        s = t.session(S)
        play(s, ops)
        if stream is not None:
            interrupt_a_stream(s, stream)
        for fmt in ("openai", "anthropic"):
            for policies in POLICY_SETS:
                for resume in ("drop", "prefix"):
                    whole = check(s, fmt, policies=policies, resume=resume)
                    fitted = check(s, fmt, policies=policies, resume=resume, max_tokens=budget)
                    assert has_messages(fmt, fitted) == has_messages(fmt, whole), (
                        f"{fmt} {policies} {resume} --max-tokens {budget} left no message:\n{json.dumps(fitted)[:2000]}")
        t.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_last_turn_starts_at_the_newest_user_message_that_says_something(tape):
    """An empty user message is left out of the prompt, so it starts no turn either."""
    s = tape.session(S)
    s.append("user", {"content": "old"})
    s.append("assistant", {"content": "old answer"})
    s.append("user", {"content": "q"})
    s.append("assistant", {"content": "a"})
    s.append("user", {"content": [" "]})
    assert check(s, "openai", policies=["last-turn"]) == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert [m["role"] for m in check(s, "anthropic", policies=["last-turn"])["messages"]] == ["user", "assistant"]


def test_a_refusal_is_its_text_and_a_tool_output_list_its_text_in_both_views(tape):
    """A black-box audit of the Agents SDK session: a refusal part (`{"type": "refusal",
    "refusal": ...}`) went out as JSON text and `log` showed an empty line; a tool output
    given as a list of text parts was its text in the openai view but JSON text in the
    anthropic tool_result."""
    s = tape.session(S)
    s.append("user", {"content": "hi"})
    s.append("assistant", {"content": [{"type": "refusal", "refusal": "no way"}]})
    s.append("user", {"content": "tool?"})
    s.append("tool_call", {"call_id": "c", "name": "f", "arguments": {}})
    s.append("tool_result", {"call_id": "c", "output": [{"type": "input_text", "text": "list output"}]})
    oa = check(s, "openai")
    assert oa[1] == {"role": "assistant", "content": "no way"} and oa[-1]["content"] == "list output"
    an = check(s, "anthropic")["messages"]
    assert an[1]["content"] == [{"type": "text", "text": "no way"}]
    assert an[-1]["content"][0]["content"] == "list output"
    from ctape.ops import render

    refusal = [e for e in s.log() if e.kind == "assistant"][0]
    assert "no way" in render.summary(refusal)
