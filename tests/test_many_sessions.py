"""A process that writes or reads many sessions keeps few descriptors open (store.READ_FDS_MAX,
store.WRITERS_MAX): under the usual `ulimit -n` of 1,024, and 256 on macOS, it writes and
reads hundreds of sessions (it failed with "Too many open files" at ~120 sessions written or
~400 read under 256, ~500 written under 1,024). Writers closed while idle are reopened by the
next write, which goes on from HEAD."""

import json
import os
import random
import resource
import subprocess
import sys
import textwrap
import threading

import ctape.store.store as store_mod
from ctape import Tape

N = 300
LIMIT = 256  # the default on macOS


def run_limited(code: str, *args: str) -> subprocess.CompletedProcess:
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, preexec_fn=limit, timeout=300)


def ctape_limited(tape_dir: str, cache: str, *args: str) -> subprocess.CompletedProcess:
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    env = dict(os.environ, CTAPE_CACHE_DIR=cache)
    return subprocess.run([sys.executable, "-m", "ctape", "--dir", tape_dir, *args], capture_output=True, text=True, preexec_fn=limit, env=env, timeout=300)


WRITE = f"""
    import json, sys
    from ctape import Tape
    tape = Tape.init(sys.argv[1], cache_dir=sys.argv[2])
    heads = {{}}
    for rnd in range(2):  # every session's writer has been closed before its second append
        for i in range({N}):
            s = tape.session(f"s{{i:03d}}")
            if i % 3 == 0:
                with tape.batch():
                    e = s.append("user", {{"content": f"round {{rnd}} of s{{i}} zebra"}})
            else:
                e = s.append("user", {{"content": f"round {{rnd}} of s{{i}} zebra"}})
            heads[s.name] = e.hash
    # read back in the same process: every session's head, through its own files
    back = {{name: tape.session(name).head.hash for name in heads}}
    assert back == heads
    tape.close()
    print(json.dumps(heads))
"""


def test_hundreds_of_sessions_under_a_low_descriptor_limit(tmp_path):
    tape_dir, cache = str(tmp_path / "t"), str(tmp_path / "c")
    p = run_limited(WRITE, tape_dir, cache)
    assert p.returncode == 0, p.stderr[-2000:]
    heads = json.loads(p.stdout)
    assert len(heads) == N
    tape = Tape.open(tape_dir, cache_dir=str(tmp_path / "c2"))  # a fresh index: from the files alone
    for name, h in heads.items():
        entries = list(tape.session(name).log())
        assert [e.hash for e in entries][0] == h
        assert [e.payload["content"] for e in reversed(entries)] == [f"round 0 of s{int(name[1:])} zebra", f"round 1 of s{int(name[1:])} zebra"]
    tape.close()
    for args in (["sessions"], ["usage"], ["search", "zebra", "-n", "0"], ["fsck"]):
        r = ctape_limited(tape_dir, cache, *args)
        assert r.returncode == 0, (args, r.stderr[-2000:])
    assert len(ctape_limited(tape_dir, cache, "sessions").stdout.splitlines()) >= N
    assert ctape_limited(tape_dir, cache, "search", "zebra", "-n", "0").stdout.count("zebra") == 2 * N


def test_threads_reading_while_descriptors_are_closed(tmp_path, monkeypatch):
    """Descriptors are closed beyond READ_FDS_MAX while other threads read: a read never
    goes through a descriptor another thread closed (or one reused for another file)."""
    monkeypatch.setattr(store_mod, "READ_FDS_MAX", 3)
    tape = Tape.init(str(tmp_path / "t"), cache_dir=str(tmp_path / "c"))
    want = {}
    for i in range(40):
        s = tape.session(f"r{i}")
        for j in range(3):
            s.append("assistant", {"content": f"{i}-{j} " + "x" * (j * 700)})
        want[s.name] = [e.hash for e in s.log()]
    tape.close()
    tape = Tape.open(str(tmp_path / "t"), cache_dir=str(tmp_path / "c"))
    errors = []

    def reader(seed):
        rnd = random.Random(seed)
        try:
            for _ in range(150):
                name = rnd.choice(list(want))
                got = [e for e in tape.session(name).log()]
                assert [e.hash for e in got] == want[name]
                assert got[-1].payload["content"].startswith(name[1:] + "-0")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert len(tape.store._fds) <= 3
    tape.close()


def test_watch_first_pass_over_hundreds_of_transcripts(tmp_path):
    """`ctape watch --once` of a folder of 300 small Claude Code transcripts (a first pass over
    ~/.claude/projects) under a limit of 256: each batch holds the lock and descriptors of
    every session it writes until it ends, so a batch ends every watch.BATCH_SESSIONS
    sessions (it ran out of descriptors at the ~120th file)."""
    src = os.path.join(os.path.dirname(__file__), "fixtures", "transcripts", "claude-code",
                       "daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl")
    records = [json.loads(line) for line in open(src).read().splitlines()[:20] if line.strip()]
    folder = tmp_path / "projects"
    folder.mkdir()
    for i in range(N):
        sid = f"00000000-0000-4000-8000-{i:012d}"
        lines = [json.dumps(dict(r, sessionId=sid) if "sessionId" in r else r) for r in records]
        (folder / f"{sid}.jsonl").write_text("\n".join(lines) + "\n")
    tape_dir, cache = str(tmp_path / "t"), str(tmp_path / "c")
    Tape.init(tape_dir, cache_dir=cache).close()
    r = ctape_limited(tape_dir, cache, "watch", "--once", "-q", str(folder))
    assert r.returncode == 0, r.stderr[-2000:]
    tape = Tape.open(tape_dir, cache_dir=cache)
    assert len(tape.sessions()) == N
    tape.close()


def test_a_listing_reads_the_tape_once_and_no_entry_twice(tmp_path):
    """`sessions` (and the web's list) cost 0.4-1 ms a session: each session's refs were read
    after its own refresh (two folder listings and a dozen index queries), and its HEAD entry
    was read back for its seq and time every time (found by an audit of scale). Now the
    whole tape is refreshed once, and a HEAD's seq and time are kept in the index cache.
    Counted, not timed: folder listings and entry reads in a listing of 40 sessions."""
    cache = str(tmp_path / "cache")
    tape = Tape.init(str(tmp_path / "t"), cache_dir=cache)
    with tape.batch():
        for i in range(40):
            tape.session(f"s{i:02d}").extend([("user", {"content": f"hello {i}"}), ("assistant", {"content": "hi"})])
    tape.session("s07").append("user", {"content": "one more"})
    first = {r["session"]: (r["entries"], r["last_time"]) for r in tape.sessions()}
    tape.close()

    calls = {"list_dir": 0, "read_entry": 0}
    real_list, real_read = store_mod.Store._list_dir, Tape._read_entry

    def list_dir(self, d):
        calls["list_dir"] += 1
        return real_list(self, d)

    def read_entry(self, h):
        calls["read_entry"] += 1
        return real_read(self, h)

    store_mod.Store._list_dir, Tape._read_entry = list_dir, read_entry
    try:
        with Tape.open(str(tmp_path / "t"), cache_dir=cache) as again:
            rows = again.sessions()
    finally:
        store_mod.Store._list_dir, Tape._read_entry = real_list, real_read
    assert len(rows) == 40
    assert {r["session"]: (r["entries"], r["last_time"]) for r in rows} == first
    assert first["s07"][0] == 3 and first["s00"][0] == 2
    assert calls["read_entry"] == 0, calls  # each HEAD's seq and time came from the cache
    assert calls["list_dir"] <= 40 + 2, calls  # each session's folder once, and packs/

    # a HEAD that moved is read once, and shows its own seq and time
    with Tape.open(str(tmp_path / "t"), cache_dir=cache) as again:
        e = again.session("s03").append("user", {"content": "later"})
        row = next(r for r in again.sessions() if r["session"] == "s03")
    assert (row["head"], row["entries"], row["last_time"]) == (e.hash, 3, e.time)


def test_a_tape_keeps_a_bounded_memory_of_the_sessions_it_met(tmp_path, monkeypatch):
    """One Tape kept, for every session it ever met, that session's listing and the paths of
    its files: 0.65 KB a session, never dropped (a server's Tape: 47 MB at 20,000 sessions
    and growing; found by an audit of long-lived processes). Those are kept for the last
    KEPT_SESSIONS sessions and KEPT_PATHS files now; one dropped is looked at again."""
    import ctape.store.index as index_mod

    monkeypatch.setattr(store_mod, "KEPT_SESSIONS", 16, raising=False)
    monkeypatch.setattr(index_mod, "KEPT_PATHS", 32, raising=False)
    with Tape.init(str(tmp_path / "t"), cache_dir=str(tmp_path / "c")) as tape:
        heads = {}
        for i in range(60):
            s = tape.session(f"c{i:02d}")
            s.append("user", {"content": f"hello {i}"})
            heads[s.name] = s.append("assistant", {"content": "hi"}).hash
            assert len(tape.store._known) <= 16 and len(tape.store.index._paths) <= 32
        # every session still reads back right, the first ones too
        assert {n: tape.session(n).head.hash for n in heads} == heads
        assert [e.payload["content"] for e in tape.session("c00").log()] == ["hi", "hello 0"]
