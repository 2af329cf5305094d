"""What the import speed work of issue 25 relies on: the bracket count that bounds a record's
nesting (_common._brackets, memchr-based) agrees with bytes.count, and the import bench's
Codex replay is as large a line as the real file (the madshn fixture is sanitised: its
text is `[REDACTED_* len=N ...]`, which made the bench replay 0.4 KB lines of a file whose
real lines are 2.3 KB, and so report a third of the real import speed)."""

import importlib.util
import json
import os
import re

import pytest

from ctape.formats import _common as c

HERE = os.path.dirname(os.path.abspath(__file__))
MADSHN = os.path.join(HERE, "fixtures", "transcripts", "codex-rollout", "madshn__localpush__rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl")


def bench():
    spec = importlib.util.spec_from_file_location("bench_import_speed", os.path.join(HERE, "bench", "bench_import_speed.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("raw", [b"", b"[", b"{}", b'{"a":[1,{"b":"[{"}]}\n', b"x" * 5000 + b"[{" * 60, b"[" * (c._STEP + 10) + b"{"], ids=["empty", "one", "pair", "strings", "many", "past-a-read"])
def test_brackets_counts_what_bytes_count_counts(raw):
    assert c._brackets(raw) == raw.count(b"[") + raw.count(b"{")


def test_a_codex_line_nested_past_the_import_depth_is_kept_as_text(tmp_path):
    from ctape import Tape
    from ctape.formats import import_files

    def nested(n):
        v = "x"
        for _ in range(n):
            v = [v]
        return v

    ok = {"timestamp": "2026-02-23T11:54:52.353Z", "type": "event_msg", "payload": {"type": "token_count", "deep": nested(c.IMPORT_DEPTH - 2)}}
    deep = {"timestamp": "2026-02-23T11:54:53.353Z", "type": "event_msg", "payload": {"type": "token_count", "deep": nested(c.IMPORT_DEPTH)}}
    end = {"timestamp": "2026-02-23T11:54:54.353Z", "type": "event_msg", "payload": {"type": "token_count"}}
    src = tmp_path / "rollout.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in (ok, deep, end)))  # (a last line that is not JSON is one being written)
    with Tape.init(tmp_path / "tape") as t:
        import_files(t, "codex", [str(src)], "s")
        last = t.session("s").head
        middle = t.read_entry(last.parent)
        first = t.read_entry(middle.parent)
        assert first.meta["codex"] == ok and last.meta["codex"] == end
        assert "codex" not in middle.meta and json.loads(middle.meta[c.RAW]) == deep


def test_the_bench_replays_codex_lines_at_their_real_size(tmp_path):
    b = bench()
    with open(MADSHN, "rb") as f:
        data = f.read()
    hidden = sum(int(n) for kind, n in re.findall(rb"\[REDACTED_([A-Z_]+) len=(\d+)", data) if kind not in (b"IMAGE_URL", b"IMAGES"))
    real = (len(data) + hidden) / data.count(b"\n")  # bytes a line of the real file, images aside
    out = tmp_path / "codex.jsonl"
    b.replay(str(out), "codex", 1)  # the first round is the madshn file
    lines = out.read_bytes().splitlines()
    records = [json.loads(x) for x in lines]
    assert len(records) == data.count(b"\n")
    assert 0.9 * real < sum(map(len, lines)) / len(lines) < 1.1 * real
    assert b"[REDACTED_TEXT" not in out.read_bytes() and b"[REDACTED_IMAGE" in out.read_bytes()
    times = [r["timestamp"] for r in records]
    assert times == sorted(times)


def test_each_round_of_the_replay_has_its_own_large_strings_and_one_text_per_placeholder():
    b = bench()
    rec = {"payload": {"text": "[REDACTED_TEXT len=3000 sha=abc]", "same": "[REDACTED_MESSAGE len=3000 sha=abc]", "out": "y" * 2000, "short": "z"}}
    one, two = b._Fresh("corpus text " * 50, 1, False), b._Fresh("corpus text " * 50, 2, False)
    a, c1 = one.value(rec)["payload"], two.value(rec)["payload"]
    assert len(a["text"]) == 3000 and a["text"] == a["same"]  # the two records of one message stay equal
    assert a["text"] != c1["text"] and a["out"] != c1["out"] and len(a["out"]) == 2000
    assert a["short"] == c1["short"] == "z"
