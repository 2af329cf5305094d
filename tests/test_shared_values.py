"""Entries that share a large value (identical tool outputs are stored once).

A value (blob) that many entries share is read and decoded once while a Tape keeps it
(Tape._text): a log or an export of every entry that refers to one no longer decompresses
it for each. What is kept never outlives what it was read from: a redaction, a discarded
batch, a value lost to damage. And a log line reads only the start of a long output
(render._squeezed), giving what squeezing the whole output gave."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctape import Tape
from ctape.errors import CorruptObject
from ctape.history import tape as tape_mod
from ctape.model.models import Entry
from ctape.ops import render
from ctape.ops.redact import redact_pattern

OUTPUT = "the same long tool output, hunter2 inside. " * 200  # ~8.6 KB: a blob


def counting(t):
    """Count the values the store reads for t."""
    calls = []
    real = t.store.read_value

    def read_value(h, entry=None):
        calls.append(h)
        return real(h, entry)

    t.store.read_value = read_value
    return calls


@pytest.fixture
def shared(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        with t.batch():
            for i in range(60):
                s.append("tool_result", {"call_id": f"c{i}", "output": OUTPUT if i % 3 == 0 else f"short {i}"})
    return tape_dir


def test_a_value_many_entries_share_is_read_once(shared):
    with Tape.open(shared) as t:
        calls = counting(t)
        entries = list(t.session("s").log())
        assert len(entries) == 60
        assert [e.payload["output"] for e in entries if int(e.payload["call_id"][1:]) % 3 == 0] == [OUTPUT] * 20
        assert len(calls) == 1, calls


def test_a_redaction_reaches_a_kept_value_at_once(shared):
    with Tape.open(shared) as t:
        first = list(t.session("s").log())
        assert "hunter2" in first[-1].payload["output"]
        redact_pattern(t, "hunter2", ["s"])
        for e in t.session("s").log():
            assert "hunter2" not in e.payload["output"], e.payload


def test_a_value_of_a_discarded_batch_is_not_kept(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        with pytest.raises(RuntimeError):
            with t.batch():
                e = s.append("tool_result", {"call_id": "c1", "output": OUTPUT})
                assert t.read_entry(e.hash).payload["output"] == OUTPUT  # read, so kept, inside the batch
                raise RuntimeError("the agent failed: the batch is discarded")
        assert t._texts == {}
        assert s.head is None
        e = s.append("tool_result", {"call_id": "c1", "output": OUTPUT})  # writes the value again
    with Tape.open(tape_dir) as t:
        assert t.read_entry(e.hash).payload["output"] == OUTPUT
        assert t.fsck()["ok"]


def test_a_marker_for_a_lost_value_is_not_kept(shared):
    with Tape.open(shared) as t:
        real = t.store.read_value
        lost = {"once": True}

        def read_value(h, entry=None):
            if lost.pop("once", False):
                return b"[lost: damaged]"  # as the store reads a value lost to damage
            return real(h, entry)

        t.store.read_value = read_value
        outputs = [e.payload["output"] for e in t.session("s").log() if int(e.payload["call_id"][1:]) % 3 == 0]
        # the first entry read got the marker; the next ones read the value again, and got it
        assert outputs == ["[lost: damaged]"] + [OUTPUT] * 19


def test_the_values_kept_are_bounded(shared, monkeypatch):
    monkeypatch.setattr(tape_mod, "TEXTS_KEPT_BYTES", 3 * len(OUTPUT))
    with Tape.open(shared) as t:
        s = t.session("s")
        with t.batch():
            for i in range(10):
                s.append("tool_result", {"call_id": f"d{i}", "output": f"{i} " + OUTPUT})
        t._clear_entries()
        assert all(e.payload for e in s.log())
        assert t._text_bytes <= 3 * len(OUTPUT) and len(t._texts) <= 3
        assert t._text_bytes == sum(map(len, t._texts.values()))


def test_a_value_that_is_not_utf8_is_one_line_of_damage(shared):
    with Tape.open(shared) as t:
        t.store.read_value = lambda h, entry=None: b"\xff\xfe not text" * 200
        with pytest.raises(CorruptObject, match="is not UTF-8 text; run `ctape fsck`"):
            list(t.session("s").log())


def _summary_of_the_whole_text(e: Entry, width: int) -> str:
    """render.summary for a tool result as it was written before: the whole output squeezed."""
    text = render.clean(" ".join(f"[{e.payload['call_id']}] {e.payload['output']}".split()))
    return text if len(text) <= width else text[: width - 1] + "…"


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from([" ", "  ", " " * 40, "\n", "\n" * 25, "\t", "\r\n", "a", "bc", "é", "\x1b", "\u202e", "\x85", "\u3000"]),
                max_size=600).map("".join),
       st.integers(1, 5), st.sampled_from([1, 2, 10, 72, 200]))
def test_a_log_line_of_a_long_output_is_the_line_of_the_whole_output(text, times, width):
    e = Entry(hash="0" * 64, parent=None, seq=1, kind="tool_result", time="2026-12-04T00:00:00Z",
              payload={"call_id": "c1", "output": text * times}, meta={}, delta=None)
    assert render.summary(e, width) == _summary_of_the_whole_text(e, width)
