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
from ctape import Tape
from ctape.store import framing, packing
import ctape.store.segment as segment
from ctape.store.files import open_for_reading


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


# -- found in review: a file replaced under a reader, and a racy listing ----------------------

WRITER = """
import sys
from ctape import Tape
t = Tape.open(sys.argv[1]); s = t.session("s")
for i in range(int(sys.argv[2])):
    s.append("user", {"content": "step %d: module %d test %d " % (i, i % 7, i % 11) + "x" * 300})
t.close()
"""


def replace_by_rename(src_dir, dst_dir):
    """What rsync does to a file that changed: a temp file with the new content, renamed
    over the old name (a new inode). The source is read without moving its access time."""
    os.makedirs(dst_dir, exist_ok=True)
    for name in os.listdir(src_dir):
        fd = open_for_reading(os.path.join(src_dir, name))
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        tmp = os.path.join(dst_dir, "." + name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.rename(tmp, os.path.join(dst_dir, name))


@pytest.fixture
def two_copies(tmp_path, monkeypatch):
    import shutil
    import subprocess
    import sys

    a, b = tmp_path / "A", tmp_path / "B"
    Tape.init(a).close()
    shutil.copytree(a, b)

    def b_appends(n):
        env = dict(os.environ, CTAPE_WRITER="bbbb", CTAPE_CACHE_DIR=str(tmp_path / "cache-b"))
        subprocess.run([sys.executable, "-c", WRITER, str(b), str(n)], check=True, env=env)

    def sync():
        replace_by_rename(b / "sessions" / "s", a / "sessions" / "s")

    return a, b_appends, sync


def test_a_reader_whose_file_was_replaced_reads_the_new_dictionaries(two_copies):
    """A long-running reader holds a descriptor of the old file; the new, longer copy has
    dictionaries (and Z blocks using them) past the old end. Indexing the new tail must take
    them from the new file: a false "damaged" mark would refuse the session's refs."""
    a, b_appends, sync = two_copies
    b_appends(5)
    sync()
    with Tape.open(a) as reader:
        s = reader.session("s")
        assert s.head.seq == 5  # the reader now has the first copy open
        b_appends(200)
        sync()
        assert s.head.seq == 205
        assert not [p for p, (_, _, _, corrupt) in reader.store.index.file_rows().items() if corrupt]
    assert run_cli("--dir", a, "fsck").returncode == 0
    with Tape.open(a) as again:
        assert again.session("s").head.seq == 205


def test_compact_keeps_what_arrives_during_it_by_a_rename(two_copies, monkeypatch):
    """Appends synced in (file replaced by rename) between compaction's snapshot and its
    freeze must be rescued, their Z blocks decoded with dictionaries from the new file."""
    import ctape.ops.compact as compact

    a, b_appends, sync = two_copies
    b_appends(60)
    sync()
    real = compact._freeze_and_swap

    def sync_meanwhile(*args, **kw):
        b_appends(300)
        sync()
        return real(*args, **kw)

    monkeypatch.setattr(compact, "_freeze_and_swap", sync_meanwhile)
    with Tape.open(a) as t:
        t.compact(expire="90d", grace="now")
    with Tape.open(a, cache_dir=str(a.parent / "fresh-cache")) as t:
        assert t.session("s").head.seq == 360
        assert t.fsck()["ok"]


def test_a_file_added_while_the_view_is_taken_is_noticed(tmp_path, monkeypatch):
    """The session folder changes in the same clock tick as the view is being taken (the
    listing and the read do not happen at once): the writer must not keep a view that
    lacks the new file's claims."""
    import shutil
    import subprocess
    import sys
    import time

    a, b = tmp_path / "A", tmp_path / "B"
    t = Tape.init(a)
    shutil.copytree(a, b)
    s = t.session("s")
    s.append("user", {"content": "hello"})
    env = dict(os.environ, CTAPE_WRITER="bbbb", CTAPE_CACHE_DIR=str(tmp_path / "cache-b"))
    subprocess.run([sys.executable, "-c", "import sys; from ctape import Tape; t = Tape.open(sys.argv[1]); t.session('s').append('user', {'content': 'from b'}); t.close()", str(b)],
                   check=True, env=env)
    (bseg,) = [p for p in (b / "sessions" / "s").iterdir() if p.name.startswith("bbbb")]
    sdir = a / "sessions" / "s"
    w = t.store._writers["s"]
    s.append("user", {"content": "a1"})
    w._seen_dir = None  # the next lock takes the view again
    tick = time.time_ns()
    os.utime(sdir, ns=(tick, tick))
    real_open_segment = segment.SegmentWriter._open_segment

    def file_arrives_meanwhile(self):
        real_open_segment(self)
        if not (sdir / bseg.name).exists():
            shutil.copy2(bseg, sdir / bseg.name)
            os.utime(sdir, ns=(tick, tick))  # the same tick: the folder's mtime does not move

    monkeypatch.setattr(segment.SegmentWriter, "_open_segment", file_arrives_meanwhile)
    s.append("user", {"content": "a2"})
    monkeypatch.setattr(segment.SegmentWriter, "_open_segment", real_open_segment)
    time.sleep(0.1)  # past the racy window
    s.append("user", {"content": "a3"})
    mine = s.refs()
    with Tape.open(a, cache_dir=str(tmp_path / "fresh")) as fresh:
        theirs = fresh.session("s").refs()
    assert mine.seen == theirs.seen and mine.branches == theirs.branches
    t.close()


def test_a_dictionary_holds_only_its_own_session(tape_dir, small_dicts):
    """Dictionaries are stored in the session's files, which may be synced or shared where
    other sessions are not: no other session's text may end up in them."""
    with Tape.open(tape_dir) as t:
        secret, public = t.session("secret"), t.session("public")
        for i in range(60):
            secret.append("user", {"content": f"my api key is sk-SECRET{i:04d} please keep it"})
            public.append("user", {"content": f"public step {i}: looking at module {i % 7}"})
    dicts = [r for p in segments(tape_dir, "public") for r in records(p) if r.type == framing.T_DICT]
    assert dicts
    import zstandard

    for r in dicts:
        assert b"SECRET" not in zstandard.ZstdDecompressor().decompress(r.body)
