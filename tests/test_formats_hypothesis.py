"""Generated records round-trip: import then export in the same format gives them back."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctape import Tape
from ctape.formats import export_ref, import_files

text = st.text(max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
times = st.sampled_from(["2026-01-02T03:04:05.678Z", "2025-12-31T23:59:59Z", "not a time", None])


def codex_record():
    item = st.one_of(
        st.fixed_dictionaries({"type": st.just("message"), "role": st.sampled_from(["user", "assistant", "developer"]),
                               "content": st.lists(st.fixed_dictionaries({"type": st.just("input_text"), "text": text}), max_size=2)}),
        st.fixed_dictionaries({"type": st.just("function_call"), "name": text, "arguments": text, "call_id": st.sampled_from(["c1", "c2"])}),
        st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": st.sampled_from(["c1", "c2"]), "output": json_values}),
        st.dictionaries(text, json_values, max_size=3),
    )
    rtype = st.sampled_from(["response_item", "event_msg", "turn_context", "compacted", "session_meta", "something_new"])
    return st.fixed_dictionaries({"timestamp": times, "type": rtype, "payload": item})


def cc_record():
    uuids = st.sampled_from(["u1", "u2", "u3", "u4", None])
    content = st.one_of(text, st.lists(st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": text}),
        st.fixed_dictionaries({"type": st.just("tool_use"), "id": st.sampled_from(["t1", "t2"]), "name": text, "input": json_values}),
        st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": st.sampled_from(["t1", "t2"]), "content": json_values}),
    ), max_size=3))
    message = st.fixed_dictionaries({"type": st.sampled_from(["user", "assistant"]), "uuid": uuids, "parentUuid": uuids,
                                     "sessionId": st.just("s"), "timestamp": times,
                                     "message": st.fixed_dictionaries({"role": st.just("user"), "content": content})})
    other = st.fixed_dictionaries({"type": st.sampled_from(["summary", "progress", "system", "queue-operation"]), "uuid": uuids,
                                   "parentUuid": uuids}, optional={"extra": json_values})
    return st.one_of(message, other)


def openai_record():
    msg = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": st.one_of(st.none(), text)},
                                optional={"tool_call_id": st.sampled_from(["c1", "c2"]), "tool_calls": st.lists(st.fixed_dictionaries(
                                    {"id": st.sampled_from(["c1", "c2"]), "type": st.just("function"),
                                     "function": st.fixed_dictionaries({"name": text, "arguments": text})}), max_size=2)})
    container = st.fixed_dictionaries({"history": st.lists(msg, max_size=4), "info": json_values})
    return st.one_of(msg, msg, container)


def round_trip(tmp_path_factory, fmt, records):
    d = tmp_path_factory.mktemp("h")
    src = d / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with Tape.init(d / "tape") as tape:
        import_files(tape, fmt, [str(src)], "h")
        back = [json.loads(line) for line in export_ref(tape, "h", fmt)]
    assert back == records


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(st.lists(codex_record(), min_size=1, max_size=8))
def test_codex_records_round_trip(tmp_path_factory, records):
    round_trip(tmp_path_factory, "codex", records)


@SETTINGS
@given(st.lists(cc_record(), min_size=1, max_size=8))
def test_claude_code_records_round_trip(tmp_path_factory, records):
    records[0] = {**records[0], "uuid": "u0", "sessionId": "s"}  # at least one recognisable record
    round_trip(tmp_path_factory, "claude-code", records)


@SETTINGS
@given(st.lists(openai_record(), min_size=1, max_size=6))
def test_openai_records_round_trip(tmp_path_factory, records):
    if not any("role" in r or r.get("history") for r in records):
        records.append({"role": "user", "content": "hi"})
    round_trip(tmp_path_factory, "openai", records)
