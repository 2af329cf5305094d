"""Durable appends as blocks compressed with a dictionary (docs/format.md section 7).

Each durable append is one block record; once a segment has had a few small blocks, the
writer puts a `D` record (a dictionary made of the blocks this process wrote last) into it
and compresses the next small blocks with it (`Z` records, which point back at their `D`
in the same file). These tests check the parts that can go wrong: a `Z` whose dictionary
is elsewhere (another segment, a write that failed, a copy repeated in a new segment),
reading everything back through a fresh index in a real process, compaction, and that the
dictionary actually shrinks the tape.
"""

import errno
import json
import os

import pytest

from conftest import run_cli
from ctape import Tape, framing, packing
import ctape.segment as segment
from ctape.files import open_for_reading


def chatter(i):
    """An agent-like entry: similar from one to the next, never identical."""
    kinds = ["user", "tool_call", "tool_result", "assistant"]
    kind = kinds[i % 4]
    if kind == "tool_call":
        return kind, {"call_id": f"c{i}", "name": "read_file", "arguments": {"path": f"src/module_{i % 7}.py"}}
    if kind == "tool_result":
        body = "\n".join(f"def function_{j}(x):\n    return x * {j} + {i % 5}" for j in range(12))
        return kind, {"call_id": f"c{i - 1}", "output": body}
    return kind, {"content": f"step {i}: looking at module {i % 7} and the failing test test_{i % 11}"}


def append_many(tape, session, n, start=0):
    s = tape.session(session)
    return [s.append(*chatter(i)) for i in range(start, start + n)]


def records(path):
    # read as ctape's readers do (O_NOATIME): a plain read would move the access time,
    # and a writer takes that for a copy and seals the segment
    fd = open_for_reading(str(path))
    with os.fdopen(fd, "rb") as f:
        out = list(framing.scan(f.read()))
    assert all(isinstance(r, framing.Record) for r in out), "damaged records in a freshly written segment"
    return out


def segments(tape_dir, session):
    return sorted((tape_dir / "sessions" / session).glob("*.seg"))


def check_dictionaries_are_local(path):
    """Every Z record points back at a D record of the same file."""
    recs = records(path)
    dicts = {r.offset for r in recs if r.type == framing.T_DICT}
    for r in recs:
        if r.type == framing.T_DICT_BLOCK:
            distance, _ = packing.split_dict_block(r.body)
            assert r.offset - distance in dicts, f"a Z block at {r.offset} of {path.name} points outside its file"
    return recs


@pytest.fixture
def small_dicts(monkeypatch):
    monkeypatch.setattr(segment, "DICT_MIN", 1024)
    monkeypatch.setattr(segment, "DICT_MAX", 4096)


def test_durable_appends_use_a_dictionary_and_read_back_in_another_process(tape_dir, small_dicts, tmp_path):
    with Tape.open(tape_dir) as t:
        entries = append_many(t, "chat", 200)
    (seg,) = segments(tape_dir, "chat")
    recs = check_dictionaries_are_local(seg)
    types = [r.type for r in recs]
    assert types.count(framing.T_DICT) >= 2, "the dictionary was never refreshed"
    assert types.count(framing.T_DICT_BLOCK) > 150
    assert framing.T_OBJECT not in types and framing.T_REF not in types  # everything small is in blocks
    # a real process with an empty index cache reads every entry back exactly
    env = {"CTAPE_CACHE_DIR": str(tmp_path / "fresh-cache")}
    log = run_cli("--dir", tape_dir, "log", "-s", "chat", "--json", env=env, check=True)
    got = [json.loads(line) for line in log.stdout.decode().splitlines()]
    assert [e["hash"] for e in got] == [e.hash for e in reversed(entries)]
    assert [e["payload"] for e in got] == [e.payload for e in reversed(entries)]
    assert run_cli("--dir", tape_dir, "fsck", env=env).returncode == 0


def test_a_new_segment_gets_its_own_dictionary(tape_dir, small_dicts, monkeypatch):
    monkeypatch.setattr(segment, "SEGMENT_LIMIT", 8 << 10)
    with Tape.open(tape_dir) as t:
        entries = append_many(t, "chat", 300)
    segs = segments(tape_dir, "chat")
    assert len(segs) >= 4
    with_z = [p for p in segs if any(r.type == framing.T_DICT_BLOCK for r in check_dictionaries_are_local(p))]
    assert len(with_z) >= 3
    with Tape.open(tape_dir, cache_dir=str(tape_dir.parent / "other-cache")) as t:  # index rebuilt from the files
        assert [e.hash for e in t.session("chat").log()] == [e.hash for e in reversed(entries)]
        assert t.fsck()["ok"]


def test_a_failed_write_leaves_no_block_pointing_at_its_dictionary(tape_dir, small_dicts, monkeypatch):
    """The first write that carries a D record fails (a full disk): the D is cut off with it,
    and the next append must not compress against it."""
    real_write = os.write
    failed = []

    def write(fd, data):
        if not failed and bytes([framing.MAGIC, framing.T_DICT]) in bytes(data):
            failed.append(len(data))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    t = Tape.open(tape_dir)
    s = t.session("chat")
    acked = []
    monkeypatch.setattr(os, "write", write)
    for i in range(60):
        try:
            acked.append(s.append(*chatter(i)))
        except Exception as e:  # noqa: BLE001 - the one refused append
            assert "No space left" in str(e) or "space" in str(e).lower(), e
    monkeypatch.setattr(os, "write", real_write)
    t.close()
    assert failed, "no write carried a dictionary"
    assert len(acked) == 59
    (seg,) = segments(tape_dir, "chat")
    check_dictionaries_are_local(seg)
    with Tape.open(tape_dir, cache_dir=str(tape_dir.parent / "other-cache")) as t2:
        assert [e.hash for e in t2.session("chat").log()] == [e.hash for e in reversed(acked)]
        assert t2.fsck()["ok"]


def test_a_write_read_while_it_happened_is_repeated_without_dictionaries(tape_dir, small_dicts, monkeypatch):
    """A segment read during a write (a copy may lack the write) gets the write again in a
    new segment. Its Z blocks become plain K blocks there: their D may be in the old file."""
    t = Tape.open(tape_dir)
    s = t.session("chat")
    append_many(t, "chat", 40)
    (first,) = segments(tape_dir, "chat")
    assert any(r.type == framing.T_DICT_BLOCK for r in records(first))
    w = t.store._writers["chat"]
    real_atime, real_write_all = segment.SegmentWriter._atime, segment.write_all
    written = []

    def write_all(fd, data):
        real_write_all(fd, data)
        written.append(fd)

    def atime_moved_during_the_write(self):
        value = real_atime(self)
        return value + 1 if len(written) == 1 else value  # as if a copy read the file meanwhile

    monkeypatch.setattr(segment, "write_all", write_all)
    monkeypatch.setattr(segment.SegmentWriter, "_atime", atime_moved_during_the_write)
    e = s.append(*chatter(40))
    monkeypatch.setattr(segment.SegmentWriter, "_atime", real_atime)
    assert len(written) == 2, "the write was not repeated"
    assert records(first)[-1].type == framing.T_DICT_BLOCK  # the first copy used the dictionary
    assert w.rel != os.path.relpath(first, tape_dir), "the write was not repeated in a new segment"
    second = tape_dir / w.rel
    recs = records(second)
    assert [r.type for r in recs if r.type != framing.T_HEADER] == [framing.T_BLOCK]
    inner = t.store.block_items(t.store.index.file_id(w.rel), recs[1].offset, recs[1].body)
    assert e.hash in {r.body[:32].hex() for r in inner if r.type == framing.T_OBJECT}
    assert any(r.type == framing.T_REF and json.loads(r.body)["set"] == {"main": e.hash} for r in inner)
    t.close()
    with Tape.open(tape_dir, cache_dir=str(tape_dir.parent / "other-cache")) as t2:
        assert t2.session("chat").head.hash == e.hash
        assert t2.fsck()["ok"]


def test_compact_turns_dictionary_blocks_into_packs(tape_dir, small_dicts):
    with Tape.open(tape_dir) as t:
        entries = append_many(t, "chat", 150)
        t.compact(expire="90d", grace="now")
    assert not segments(tape_dir, "chat")
    with Tape.open(tape_dir, cache_dir=str(tape_dir.parent / "other-cache")) as t:
        assert [e.hash for e in t.session("chat").log()] == [e.hash for e in reversed(entries)]
        assert t.fsck()["ok"]


def test_the_dictionary_shrinks_a_durable_session(tmp_path, monkeypatch):
    """The same 400 appends with dictionaries and without: the point of them."""
    sizes = {}
    for label, dict_after in (("with", segment.DICT_AFTER), ("without", 10**9)):
        monkeypatch.setattr(segment, "DICT_AFTER", dict_after)
        d = tmp_path / label
        with Tape.init(d) as t:
            append_many(t, "chat", 400)
        sizes[label] = sum(p.stat().st_size for p in segments(d, "chat"))
    assert sizes["with"] < 0.6 * sizes["without"], sizes
