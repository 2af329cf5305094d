"""Oracle tests for the formats and shapes issue 23 added (items 3-5), in the manner of
tests/test_oracle.py (which covers every shared Claude Code, Codex and OpenAI-style
fixture): a reader written here, independently of ctape's importers, says what the agent
would send next, from the raw file: the requests the user typed, the assistant's text, each
tool call with its result. `context --format openai` must hold exactly that.

- Gemini CLI (every file in tests/fixtures/gemini): gemini-cli's own loader
  (loadConversationRecord: a message written again replaces it in place, `$rewindTo` drops
  that message and the later ones, `$set.messages` replaces them all) and its
  convertSessionToClientHistory (info/warning/error and slash commands are not sent; a
  model turn is its text and calls, then a turn of the calls' results; a user turn of
  function responses repeats results already given).
- Codex, newest layout (tests/test_formats_codex_new.py's rollout): response items only;
  a tool_search_output without call_id answers the open search; outputs that are lists
  of content items are their text.
- mini-swe-agent: its `exit` message is the result of the calls still open.
"""

import json
from pathlib import Path

import pytest

from ctape.formats import import_files
from ctape.ops.context import INTERRUPTED

from test_oracle import expected_items

GEMINI = sorted(p for p in (Path(__file__).parent / "fixtures" / "gemini").iterdir() if p.suffix in (".json", ".jsonl"))


# -- comparing ---------------------------------------------------------------------------------


def _args(a):
    if isinstance(a, str):
        try:
            return json.loads(a)
        except ValueError:
            return a
    return a


def view_items(msgs: list) -> tuple[list, list]:
    items, results, open_calls = [], [], {}
    for m in msgs:
        if m["role"] == "tool":
            stack = open_calls.get(m["tool_call_id"]) or []
            assert stack, f"a result for no open call: {m}"
            results[stack.pop()] = m["content"]
        elif m["role"] == "user" and isinstance(m["content"], list) and str(m["content"][0].get("text", "")).startswith("[the image"):
            continue  # the images of the tool results just before (tests/test_context_tool_images.py)
        elif m["role"] == "assistant":
            if m.get("content"):
                items.append(("assistant", m["content"]))
            for c in m.get("tool_calls") or []:
                items.append(("call", c["id"], c["function"]["name"], _args(c["function"]["arguments"])))
                open_calls.setdefault(c["id"], []).append(len(results))
                results.append(None)
        else:
            items.append((m["role"], m["content"]))
    return items, results


def check(tape, session: str, seq: list) -> None:
    got = view_items(tape.session(session).context(format="openai"))
    want = expected_items(seq)
    assert got[0] == want[0]
    assert got[1] == want[1]
    assert INTERRUPTED not in json.dumps(got[1]), "a call with its result in the file shows as interrupted"


# -- Gemini CLI ------------------------------------------------------------------------------


def gemini_loaded(path: Path) -> list:
    """The messages gemini-cli's loadConversationRecord gives, in order."""
    text = path.read_text(encoding="utf-8")
    try:
        records = [json.loads(text)]
    except ValueError:
        records = [json.loads(x) for x in text.splitlines() if x.strip()]
    msgs: dict = {}
    for r in records:
        if isinstance(r.get("$rewindTo"), str):
            ids = list(msgs)
            if r["$rewindTo"] in ids:
                for i in ids[ids.index(r["$rewindTo"]):]:
                    del msgs[i]
            else:
                msgs.clear()
        elif isinstance(r.get("id"), str):
            msgs[r["id"]] = r  # a dict keeps the first position of a key, as a JS Map does
        elif isinstance(r.get("$set"), dict):
            if isinstance(r["$set"].get("messages"), list):
                msgs = {m["id"]: m for m in r["$set"]["messages"]}
        elif "sessionId" in r and isinstance(r.get("messages"), list):
            for m in r["messages"]:
                msgs[m["id"]] = m
    return list(msgs.values())


def _parts(content) -> list:
    if content is None:
        return []
    items = content if isinstance(content, list) else [content]
    return [{"text": p} if isinstance(p, str) else p for p in items]


def _text(parts) -> str:
    return "".join(p.get("text", "") for p in parts if not p.get("thought") and "functionCall" not in p and "functionResponse" not in p)


def _response(r) -> str:
    if isinstance(r, dict) and set(r) in ({"output"}, {"error"}):
        return next(iter(r.values()))
    return json.dumps(r, ensure_ascii=False, sort_keys=True)


def gemini(path: Path) -> list:
    """convertSessionToClientHistory over the loaded messages, as (kind, ...) items."""
    seq = []
    for m in gemini_loaded(path):
        parts = _parts(m.get("content"))
        if m["type"] == "user":
            shown = "".join(p.get("text", "") if "text" in p else f"[{next(iter(p))}]" for p in parts).strip()
            if not shown or shown.startswith(("/", "?", "<session_context>", "<hook_context>")):
                continue
            for p in parts:
                if "functionResponse" in p:
                    seq.append(("result", p["functionResponse"]["id"], _response(p["functionResponse"].get("response"))))
            if _text(parts):
                seq.append(("user", _text(parts)))
        elif m["type"] == "gemini":
            if _text(parts):
                seq.append(("assistant", _text(parts)))
            for tc in m.get("toolCalls") or []:
                seq.append(("call", tc["id"], tc["name"], tc.get("args")))
            for tc in m.get("toolCalls") or []:
                if tc.get("result") is not None:
                    fr = [p["functionResponse"] for p in _parts(tc["result"]) if "functionResponse" in p]
                    seq.append(("result", tc["id"], _response(fr[0].get("response")) if fr else json.dumps(tc["result"])))
    return seq


@pytest.mark.parametrize("path", GEMINI, ids=lambda p: p.name)
def test_gemini_context_is_what_gemini_cli_sends(tape, path):
    import_files(tape, "gemini", [str(path)], "s")
    seq = gemini(path)
    assert [it for it in seq if it[0] == "user"], "the reader found no request"
    check(tape, "s", seq)


def test_gemini_oracle_on_every_step_of_a_growing_file(tmp_path):
    """The document written again at each turn, each version imported into its own tape
    and into one that follows it: the context is the loader's every time."""
    import gemini_cli_writer as writer
    from ctape import Tape

    with Tape.init(tmp_path / "follow") as follow:
        for steps in range(1, 9):
            folder = tmp_path / f"s{steps}"
            folder.mkdir()
            for layout in ("json", "jsonl"):
                r = writer.session(str(folder), layout, session_id=("5d1e3a90" if layout == "json" else "7a2b9c10") + "-2b7c-4f0e-9a51-0c3b8f6d2e47", steps=steps)
                with Tape.init(folder / f"t-{layout}") as t:
                    import_files(t, "gemini", [r.path], "s")
                    check(t, "s", gemini(Path(r.path)))
                import_files(follow, "gemini", [r.path], layout)
                check(follow, layout, gemini(Path(r.path)))


# -- Codex, newest layout ----------------------------------------------------------------------------


def _codex_output(out) -> str:
    if isinstance(out, list) and all(isinstance(p, dict) and p.get("type") in ("input_text", "output_text") for p in out):
        return "".join(p["text"] for p in out)
    return out if isinstance(out, str) else json.dumps(out, ensure_ascii=False, sort_keys=True)


def codex_newest(records: list) -> list:
    seq, searches = [], []
    for n, r in enumerate(records, 1):
        p = r.get("payload") or {}
        if r["type"] == "session_meta":
            seq.append(("system", p["base_instructions"]["text"]))
        if r["type"] != "response_item":
            continue  # events echo the items in this file; world_state, turn_context: bookkeeping
        t = p["type"]
        if t == "message":
            seq.append(({"developer": "system"}.get(p["role"], p["role"]), "".join(c["text"] for c in p["content"])))
        elif t == "agent_message":
            seq.append(("assistant", "\n".join(c["text"] for c in p["content"])))
        elif t in ("function_call", "custom_tool_call"):
            seq.append(("call", p["call_id"], p["name"], _args(p["arguments"]) if t == "function_call" else p["input"]))
        elif t == "tool_search_call":
            cid = p.get("call_id") or p.get("id")
            searches.append(cid)
            seq.append(("call", cid, "tool_search", p["arguments"]))
        elif t == "tool_search_output":
            cid = p.get("call_id") or searches[-1]
            seq.append(("result", cid, json.dumps(p["tools"], ensure_ascii=False, sort_keys=True)))
        elif t.endswith("_output"):
            seq.append(("result", p["call_id"], _codex_output(p["output"])))
    return seq


def test_codex_newest_layout_context(tape, tmp_path):
    from test_formats_codex_new import SID, rollout

    recs = rollout()
    path = tmp_path / f"rollout-2026-08-20T10-00-00-{SID}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    import_files(tape, "codex", [str(path)], "s")
    seq = codex_newest(recs)
    got = view_items(tape.session("s").context(format="openai"))
    want = expected_items(seq)
    assert got[0] == want[0]
    # the last output holds an image: parts on the tape (test_formats_codex_new.py); the
    # openai view gives its text to the tool message and the image to a user message after
    # it (tests/test_context_tool_images.py), so it is left out here
    assert got[1][:-1] == want[1][:-1]
    assert INTERRUPTED not in json.dumps(got[1])


# -- mini-swe-agent -----------------------------------------------------------------------------------


def mini(traj: dict) -> list:
    seq, open_calls = [], []
    for m in traj["messages"]:
        if m["role"] == "exit":
            seq += [("result", c, m["content"]) for c in open_calls]
            open_calls = []
        elif m["role"] == "assistant":
            if m.get("content"):
                seq.append(("assistant", m["content"]))
            for c in m.get("tool_calls") or []:
                seq.append(("call", c["id"], c["function"]["name"], _args(c["function"]["arguments"])))
                open_calls.append(c["id"])
        elif m["role"] == "tool":
            seq.append(("result", m["tool_call_id"], m["content"]))
            open_calls.remove(m["tool_call_id"])
        else:
            seq.append((m["role"], m["content"]))
    return seq


@pytest.mark.parametrize("submitted", [True, False])
def test_mini_swe_agent_context(tape, tmp_path, submitted):
    from test_formats_smaller import mini_traj

    traj = mini_traj(submitted)
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps(traj))
    import_files(tape, None, [str(path)], "m")
    check(tape, "m", mini(traj))
