"""Regressions for problems found in review: each test failed before its fix."""

import errno
import os
import subprocess
import sys

import pytest

from ctape.store.index import index_file
from ctape import Tape
from ctape.store import segment
from ctape.errors import StorageError

from conftest import run_cli, snapshot


def test_a_full_segment_is_synced_before_it_is_left(tape_dir, monkeypatch):
    monkeypatch.setattr(segment, "SEGMENT_LIMIT", 4096)
    synced = set()  # inodes: a new segment is synced before it has a name
    for name in ("fdatasync", "fsync"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda fd, real=real: (synced.add(os.fstat(fd).st_ino), real(fd))[1])
    t = Tape.open(tape_dir)
    # an output of 64 KiB or more is a record of its own, written before the append's block
    t.session("chat").append("tool_result", {"call_id": "c", "output": os.urandom(40000).hex()})
    segments = {os.stat(os.path.join(r, f)).st_ino for r, _, fs in os.walk(tape_dir / "sessions") for f in fs}
    assert len(segments) >= 2 and segments <= synced


def test_a_batch_crossing_a_segment_that_fails_moves_no_ref(tape_dir, monkeypatch):
    monkeypatch.setattr(segment, "SEGMENT_LIMIT", 4096)
    t = Tape.open(tape_dir)
    s = t.session("chat")
    first = s.append("user", {"content": "before"})
    with pytest.raises(RuntimeError):
        with t.batch():
            s.append("user", {"content": "a"})
            s.append("tool_result", {"call_id": "c", "output": os.urandom(6000).hex()})
            s.append("user", {"content": "b"})
            raise RuntimeError("agent crashed")
    t.close()
    assert Tape.open(tape_dir).get("chat").hash == first.hash


def test_a_failed_batch_leaves_no_dangling_reference_or_leftovers(tape_dir, monkeypatch):
    t = Tape.open(tape_dir)
    for name in ("a", "b", "c"):
        t.session(name).append("user", {"content": f"hello {name}"})
    shared = "the same tool output " * 100
    real_write = os.write
    failing = {"on": False}

    def write(fd, data):
        if failing["on"] and "/sessions/a/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    failing["on"] = True
    with pytest.raises(StorageError):
        with t.batch():
            t.session("a").append("tool_result", {"call_id": "x", "output": shared})
            t.session("b").append("tool_result", {"call_id": "y", "output": shared})
            t.session("c").append("user", {"content": "c in the failed batch"})
    failing["on"] = False
    t.session("c").append("user", {"content": "c later"})
    t.close()
    t = Tape.open(tape_dir)
    assert [e.payload["content"] for e in t.session("c").log()] == ["c later", "hello c"]
    b_head = t.get("b")
    if b_head.kind == "tool_result":  # b was written before a failed: its value must be readable
        assert b_head.payload["output"] == shared
    assert t.fsck()["ok"]


def test_a_refused_append_does_not_leave_the_session_locked(tape_dir, tmp_path):
    run_cli("--dir", tape_dir, "append", "user", '{"content": "x"}', "-s", "chat", check=True)
    evil = tape_dir / "sessions" / "chat" / "evil.seg"
    os.symlink(tmp_path, evil)
    code = "import ctape,sys; s=ctape.Tape.open(sys.argv[1]).session('chat')\ntry: s.append('user', {'content': 'y'})\nexcept Exception: pass\nimport time; time.sleep(3)"
    holder = subprocess.Popen([sys.executable, "-c", code, str(tape_dir)])
    try:
        import time

        time.sleep(1.0)
        os.unlink(evil)
        r = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "append", "user", '{"content": "z"}', "-s", "chat"], capture_output=True, timeout=2.5)
        assert r.returncode == 0, r.stderr
    finally:
        holder.kill()
        holder.wait()


def test_writers_with_other_ids_on_one_machine_make_one_chain(tape_dir):
    procs = []
    for i in range(3):
        code = (
            "import ctape, sys\n"
            f"s = ctape.Tape.open({str(tape_dir)!r}).session('chat')\n"
            "for k in range(60): s.append('user', {'content': f'{sys.argv[1]} {k}'})\n"
        )
        procs.append(subprocess.Popen([sys.executable, "-c", code, f"w{i}"], env=dict(os.environ, CTAPE_WRITER=f"writer{i}")))
    for p in procs:
        assert p.wait() == 0
    t = Tape.open(tape_dir)
    s = t.session("chat")
    assert [b["name"] for b in s.branches()] == ["main"]
    chain = list(s.log())
    assert len(chain) == 180 and [e.seq for e in chain] == list(range(180, 0, -1))


def test_changing_a_dict_after_append_changes_nothing(tape):
    s = tape.session("chat")
    msg = {"content": "original"}
    e = s.append("user", msg)
    msg["content"] = "edited after the append"
    assert tape.read_entry(e.hash).payload == {"content": "original"}
    assert next(s.log()).payload == {"content": "original"}


def test_an_expired_record_in_an_already_compact_pack_is_dropped(tape_dir):
    t = Tape.open(tape_dir)
    other = t.session("T")
    other.append("user", {"content": "T root"})
    side = other.put_entry("user", {"content": "only referenced from S"}, parent=other.refs().head_hash)
    s = t.session("S")
    s.append("user", {"content": "S root"})
    s.branch("x", side.hash)
    s.delete_branch("x")
    t.compact(grace="now")
    t.compact(grace="now", expire="now")
    t.close()
    assert Tape.open(tape_dir).fsck()["ok"]


def test_a_rejected_batch_leaves_the_tape_byte_identical(tape_dir):
    t = Tape.open(tape_dir)
    t.session("chat").append("user", {"content": "x"})
    before = snapshot(tape_dir)
    with pytest.raises(ValueError):
        with t.batch():
            t.session("chat").append("user", {"content": "y"})
            t.session("new").append("user", {"content": "z"})
            raise ValueError
    assert snapshot(tape_dir) == before


def test_the_entry_cache_is_bounded_in_bytes(tape, monkeypatch):
    """Entries carry whole tool outputs: a cache bounded only by count held ~3.7 GB after
    reading a 78,000-entry session with large outputs (the long kill -9 loop)."""
    import ctape.history.tape as tape_module

    monkeypatch.setattr(tape_module, "ENTRY_CACHE_BYTES", 1 << 20)
    s = tape.session("big")
    for i in range(30):
        s.append("tool_result", {"call_id": f"c{i}", "output": f"{i} " + "line of output\n" * 14000})
    tape._clear_entries()
    assert len(list(s.log())) == 30
    assert tape._entry_bytes <= 1 << 20 and 1 <= len(tape._entries) <= 6
    assert tape._entry_bytes == sum(size for _, size in tape._entries.values())


def test_a_hand_made_ref_record_with_a_string_counter_still_opens(tape_dir, tmp_path, monkeypatch):
    """Found in review: index rows folded in Python compared an int with a str where SQLite
    used to compare them; a fresh cache could then not open the tape."""
    t = Tape.open(tape_dir)
    e = t.session("chat").append("user", {"content": "hi"})
    with t.store.writing("chat") as w:
        w.put_ref({"s": "chat", "w": t.store.writer, "n": "7", "lc": 9, "t": "2026-01-01T00:00:00.000000Z",
                   "op": "x", "set": {"main": e.hash}, "old": {"main": e.hash}})
    t.close()
    monkeypatch.setenv("CTAPE_CACHE_DIR", str(tmp_path / "fresh-cache"))
    t = Tape.open(tape_dir)
    assert t.session("chat").head.hash == e.hash
    assert [line["op"] for line in t.session("chat").reflog()] == ["append", "append"]  # not the hand-made one
    report = t.fsck()  # which fsck names, as nothing ctape writes looks like it
    assert not report["ok"] and any("`n` is not an integer" in p["problem"] for p in report["problems"]), report["problems"]
    t.close()


def test_now_rfc3339_never_mixes_two_threads_seconds(monkeypatch):
    """Found in review: the cached second was checked and read in two steps, so a thread
    could return another thread's second (seen with a trace function installed, as under
    a debugger or pure-Python coverage, which lets threads switch between the lines)."""
    import sys
    import threading
    import time as real

    from ctape.model import models

    class PerThreadClock:
        strftime, gmtime, local = staticmethod(real.strftime), staticmethod(real.gmtime), threading.local()

        def time_ns(self):
            return self.local.sec * 1_000_000_000 + 123_000

    monkeypatch.setattr(models, "_time", PerThreadClock())
    old_interval = sys.getswitchinterval()
    wrong = []

    def tracer(frame, event, arg):
        return tracer if frame.f_code.co_name == "now_rfc3339" else None

    def worker(sec):
        PerThreadClock.local.sec = sec
        want = real.strftime("%Y-%m-%dT%H:%M:%S", real.gmtime(sec))
        for _ in range(20_000):
            got = models.now_rfc3339()
            if not got.startswith(want):
                wrong.append(got)
                return

    sys.setswitchinterval(1e-6)
    threading.settrace(tracer)
    try:
        threads = [threading.Thread(target=worker, args=(s,)) for s in (1_700_000_000, 1_700_000_001)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        threading.settrace(None)
        sys.setswitchinterval(old_interval)
    assert not wrong, wrong[:2]


def test_reflog_read_while_a_compaction_replaces_the_files(tape_dir, monkeypatch):
    """The ref log is read from the session's files; a compaction that removes them
    between the listing and the reading must not lose lines or fail."""
    from ctape.store.store import Store

    for writer in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):  # two writers: two segment files
        monkeypatch.setenv("CTAPE_WRITER", writer)
        t = Tape.open(tape_dir)
        for i in range(3):
            t.session("chat").append("user", {"content": f"{writer} {i}"})
        t.close()
    monkeypatch.delenv("CTAPE_WRITER")
    t = Tape.open(tape_dir)
    before = t.session("chat").reflog()
    assert len(os.listdir(tape_dir / "sessions" / "chat")) == 2
    real_scan, compacted = Store.scan_file, []

    def scan_then_compact(store, rel, *args):
        if not compacted:  # the first file is open and read; then the files go
            items = list(real_scan(store, rel, *args))
            compacted.append("started")  # the compaction reads files through here too
            other = Tape.open(tape_dir)
            compacted.append(other.compact(grace="now"))
            other.close()
            yield from items
            return
        yield from real_scan(store, rel, *args)

    monkeypatch.setattr(Store, "scan_file", scan_then_compact)
    after = t.session("chat").reflog()
    assert compacted and [f for f in os.listdir(tape_dir / "sessions" / "chat") if f.endswith(".seg")] == []
    assert after == before
    t.close()


def test_a_process_survives_another_ctape_remaking_the_shared_index(tmp_path):
    """Found in review: file ids start over when a ctape of another schema version drops
    and remakes the shared index; a process that kept id -> path read the wrong file and,
    as its rebuild kept the cached paths too, never recovered."""
    import glob
    import sqlite3

    tape_dir, cache = tmp_path / "tape", str(tmp_path / "cache")
    t = Tape.init(tape_dir, cache_dir=str(tmp_path / "setup-cache"))
    for s in ("a", "b"):
        for i in range(3):
            t.session(s).append("user", {"content": f"{s} {i}"})
    t.close()
    t = Tape.open(tape_dir, cache_dir=cache)
    [e.hash for e in t.session("b").log()]  # b's file gets id 1
    a_hashes = [e.hash for e in t.session("a").log()]  # a's, id 2
    # another process finds a schema it does not know, starts over, and indexes a only
    code = (
        "import sqlite3, sys, glob\n"
        f"db = sqlite3.connect(glob.glob({cache!r} + '/*/{index_file()}')[0]); db.execute('DELETE FROM meta'); db.commit(); db.close()\n"
        "from ctape import Tape\n"
        f"t = Tape.open({str(tape_dir)!r}, cache_dir={cache!r}); list(t.session('a').log()); t.close()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    (db,) = glob.glob(cache + "/*/" + index_file())
    assert sqlite3.connect(db).execute("SELECT id FROM files WHERE path LIKE 'sessions/a/%'").fetchone()[0] == 1
    t._clear_entries()
    assert [t.store.get_object(h)[0] for h in a_hashes]  # read after one rebuild, from the right file
    t.close()


def test_an_index_of_another_schema_gives_its_space_back(tmp_path):
    """Found in review: the tables of an index of another schema version were dropped but
    their pages stayed in the file."""
    import glob
    import sqlite3

    t = Tape.init(tmp_path / "tape", cache_dir=str(tmp_path / "cache"))
    with t.batch():
        for i in range(10_000):
            t.session("chat").append("user", {"content": f"message {i}"})
    t.close()
    (db,) = glob.glob(str(tmp_path / "cache" / "*" / index_file()))
    full = os.path.getsize(db)
    c = sqlite3.connect(db)
    c.execute("UPDATE meta SET value='1' WHERE key='schema'")
    c.commit()
    c.close()
    from ctape.store.index import Index

    Index(db).close()
    assert os.path.getsize(db) < full / 2, (os.path.getsize(db), full)
