"""Entries that share a large value (identical tool outputs are stored once).

A value (blob) read a second time is one entries share: a Tape keeps it (Tape._text), so a
log or an export of every entry that refers to one no longer decompresses it for each; a
process that reads each value once (an import checking what it holds) keeps none. What is kept never outlives what it was read from: a redaction, a discarded
batch, a value lost to damage. And a log line reads only the start of a long output
(render._squeezed), giving what squeezing the whole output gave."""

import sys

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


def test_a_value_many_entries_share_is_read_twice(shared):
    with Tape.open(shared) as t:
        calls = counting(t)
        entries = list(t.session("s").log())
        assert len(entries) == 60
        assert [e.payload["output"] for e in entries if int(e.payload["call_id"][1:]) % 3 == 0] == [OUTPUT] * 20
        assert len(calls) == 2, calls  # (the second read keeps it)


def test_values_read_once_are_not_kept(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("s")
        hashes = [s.append("tool_result", {"call_id": f"c{i}", "output": f"{i} " + OUTPUT}).hash for i in range(20)]
    with Tape.open(tape_dir) as t:
        for h in hashes:
            assert t.read_entry(h).payload["output"].endswith(OUTPUT)
        assert t._texts == {} and t._text_bytes == 0


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
                e2 = s.append("tool_result", {"call_id": "c2", "output": OUTPUT})
                for h in (e.hash, e2.hash):  # read twice, so kept, inside the batch
                    assert t.read_entry(h).payload["output"] == OUTPUT
                assert t._texts
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
    monkeypatch.setattr(tape_mod, "TEXTS_KEPT_BYTES", 8 * len(OUTPUT))  # 11 values read: 8 at most kept
    with Tape.open(shared) as t:
        s = t.session("s")
        with t.batch():
            for i in range(10):
                s.append("tool_result", {"call_id": f"d{i}", "output": f"{i} " + OUTPUT})
        for _ in range(2):  # (read twice: kept)
            t._clear_entries()
            assert all(e.payload for e in s.log())
        assert 1 <= len(t._texts) < 8 and t._text_bytes <= 8 * len(OUTPUT)
        assert t._text_bytes == sum(sys.getsizeof(text) for text, _ in t._texts.values())


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


def test_a_salvage_drops_the_values_kept(tmp_path):
    """A value kept, then its file damaged and salvaged: it reads as lost from then on, in
    this Tape as in a new one (the copy in another session's file went with the damage too)."""
    import os

    d = tmp_path / "t"
    out = os.urandom(50_000).hex()  # incompressible: a flip in the middle of the file hits it
    with Tape.init(d) as t:
        t.session("a").append("tool_result", {"call_id": "x", "output": out})
        b = [t.session("b").append("tool_result", {"call_id": f"y{i}", "output": out}).hash for i in range(3)]
    (seg,) = (d / "sessions" / "a").glob("*.seg")
    with Tape.open(d) as t:
        for h in b[:2]:  # read twice, so kept
            assert t.read_entry(h).payload["output"] == out
        assert t._texts
        data = bytearray(seg.read_bytes())
        data[len(data) // 2] ^= 1
        seg.write_bytes(bytes(data))
        t.salvage()
        assert t.read_entry(b[2]).payload["output"] == "[lost: damaged]"
    with Tape.open(d) as t:
        assert t.read_entry(b[2]).payload["output"] == "[lost: damaged]"


def test_the_bound_counts_the_memory_of_wide_characters(shared, monkeypatch):
    monkeypatch.setattr(tape_mod, "TEXTS_KEPT_BYTES", 80_000)
    wide = "\U0001f600 " * 2000  # 4,000 characters, 4 bytes each in memory
    with Tape.open(shared) as t:
        s = t.session("s")
        for i in range(6):
            s.append("tool_result", {"call_id": f"w{i}", "output": f"{i}{wide}"})
        for _ in range(2):  # (read twice: kept)
            t._clear_entries()
            assert all(e.payload for e in s.log())
        assert t._text_bytes == sum(sys.getsizeof(text) for text, _ in t._texts.values()) <= 80_000
        assert 1 <= len([text for text, _ in t._texts.values() if "\U0001f600" in text]) <= 4  # 16 KB each
