"""The benchmark's smoke mode, and the performance properties that can be checked
without a clock: what a one-session question reads, fsyncs per append, lazy imports.

Timings live in tests/bench/bench.py (a script, not a test); here everything is
counted, so these tests fail on a regression and never on a slow machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "bench", "bench.py")
sys.path.insert(0, os.path.join(HERE, "bench"))

import workload  # noqa: E402

from ctape.store.index import index_file
from ctape import Tape  # noqa: E402
from ctape.store import store as store_mod  # noqa: E402
from ctape.cli import main as cli_main  # noqa: E402

HEAVY_FOR_HELP = ("zstandard", "blake3", "sqlite3", "langgraph", "langchain_core", "pydantic")


# -- the smoke run ---------------------------------------------------------------------------------


def test_smoke_run(tmp_path):
    """bench.py --smoke runs every peer it can, and its counted results hold."""
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, BENCH, "--smoke", "--out", str(out), "--chart", str(tmp_path / "chart.png")],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, CTAPE_BENCH_TMP=str(tmp_path)),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    med = {(r["group"], r["n"], r["peer"]): r for r in rows if r["kind"] == "median"}
    peers = {peer for (grp, _, peer) in med if grp == "main"}
    assert {"ctape-durable", "ctape-batched", "jsonl-fsync", "jsonl", "sqlite"} <= peers
    for (grp, n, peer), r in med.items():
        assert r["entries"] > 0 and r["rate"] > 0, r
        if grp == "paired":  # the durable peers taking turns: all of them ran
            assert {"rate_ctape-durable", "rate_jsonl-fsync", "rate_sqlite", "rate_floor-durable"} <= set(r)
            continue
        assert r["bytes"] > 0, r
        if grp == "main":
            assert r["entries"] == n * r["sessions"]
    for (grp, n, peer), r in med.items():
        if peer == "ctape-batched":
            assert r["bytes_compact"] < r["bytes"]  # compact packs and compresses
            jl = med[(grp, n, "jsonl")]
            assert r["bytes"] < jl["bytes"]  # dedupe + compression before compact
            assert jl["zstd3_bytes"] < jl["bytes"]
    # durable appends are compressed against the session's earlier blocks (dictionary
    # blocks): 0.36 x the JSON Lines at 200 entries per session, 0.59 x before them
    durable, jl = med[("main", 200, "ctape-durable")], med[("main", 200, "jsonl")]
    assert durable["bytes"] <= 0.45 * jl["bytes"], (durable["bytes"], jl["bytes"])
    prof = next(r for r in rows if r["kind"] == "profile")
    assert prof["fdatasync_per_append"] == 1.0
    lg = importlib.util.find_spec("langgraph") is not None and importlib.util.find_spec("langgraph.checkpoint.sqlite") is not None
    assert any(peer == "langgraph" for (_, _, peer) in med) == lg
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "chart.png").stat().st_size > 1000
    assert "ctape-durable" in (out / "table.txt").read_text()


# -- bounded reads ------------------------------------------------------------------------------------


def build(tape_dir, sessions: dict[str, int], seed: int = 0) -> None:
    """Append generated sessions (name -> entries) in batches."""
    repo = workload.Repo(seed)
    tape = Tape.open(tape_dir) if os.path.exists(tape_dir) else Tape.init(tape_dir)
    for i, (name, n) in enumerate(sessions.items()):
        s = tape.session(name)
        have = s.head.seq if s.exists() and s.head else 0
        entries = workload.generate_session(have + n, seed, sum(map(ord, name)) % 1000, repo)[have:]
        with tape.batch():
            for kind, payload, meta, delta in entries:
                s.append(kind, payload, meta=meta, delta=delta)
    tape.close()


def compact(tape_dir) -> None:
    tape = Tape.open(tape_dir)
    tape.compact(grace="now")
    tape.close()


class IO:
    """What every Store opened while running CLI commands read."""

    def __init__(self, monkeypatch):
        self.stores = []
        real = store_mod.Store.__init__
        spy = self

        def init(self, *a, **kw):
            real(self, *a, **kw)
            spy.stores.append(self)

        monkeypatch.setattr(store_mod.Store, "__init__", init)

    def run(self, tape_dir, *args) -> dict:
        self.stores.clear()
        r = CliRunner().invoke(cli_main, ["--dir", str(tape_dir), *args], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        total = {"bytes_read": 0, "records_read": 0, "files_indexed": 0}
        for st in self.stores:
            for k in total:
                total[k] += st.io[k]
        return total


def questions(io: IO, tape_dir, session: str) -> dict[str, dict]:
    log = io.run(tape_dir, "log", "-s", session, "-n", "20", "--json")
    head = CliRunner().invoke(cli_main, ["--dir", str(tape_dir), "log", "-s", session, "-n", "3", "--json"]).stdout.splitlines()[-1]
    h = json.loads(head)["hash"]
    out = {"log": log}
    io.run(tape_dir, "status", "-s", session)  # the first status may fold up to the nearest keyframe
    out["status"] = io.run(tape_dir, "status", "-s", session)
    out["show"] = io.run(tape_dir, "show", h, "--json")
    out["context"] = io.run(tape_dir, "context", "-s", session, "--max-tokens", "8000")
    return out


def test_one_session_reads_do_not_grow_with_the_tape(tmp_path, monkeypatch):
    """log -n 20, status, show, context --max-tokens on one session read the same
    bytes and records when the tape gets 10x more sessions or 10x longer other sessions."""
    io = IO(monkeypatch)
    d = tmp_path / "tape"
    build(d, {"a": 300, "b": 300, "c": 300})
    small = questions(io, d, "a")
    build(d, {f"x{i:02d}": 300 for i in range(27)})  # 10x the sessions
    build(d, {"b": 2700})  # 10x longer other sessions
    big = questions(io, d, "a")
    for q in small:
        assert big[q]["records_read"] == small[q]["records_read"], (q, small[q], big[q])
        assert big[q]["bytes_read"] == small[q]["bytes_read"], (q, small[q], big[q])
        assert big[q]["files_indexed"] == 0, (q, big[q])
    assert small["log"]["records_read"] <= 20 + 10  # 20 entries and their blobs, not the session


def test_reads_do_not_grow_with_the_session_itself(tmp_path, monkeypatch):
    """On a 10x longer session, log -n 20 and show read the same; a warm status folds at
    most one keyframe interval; context --max-tokens reads what fits the budget."""
    from ctape.history.derived import KEY_EVERY

    io = IO(monkeypatch)
    d = tmp_path / "tape"
    build(d, {"a": 300})
    short = questions(io, d, "a")
    build(d, {"a": 2700})
    long = questions(io, d, "a")
    build(d, {"a": 8100})
    longer = questions(io, d, "a")
    assert long["log"]["records_read"] <= short["log"]["records_read"] + 10
    assert long["show"]["records_read"] <= short["show"]["records_read"] + 5
    assert long["status"]["records_read"] <= 2 * KEY_EVERY + 20
    # batched entries sit in blocks: what a budget reaches spans a few blocks, however long
    # the session (the 300-entry session is a single block, so it is no baseline here)
    for q in ("log", "show", "status", "context"):
        assert longer[q]["records_read"] <= long[q]["records_read"] + 2, (q, long[q], longer[q])
        # one more block than `long` when the newest entries straddle a block boundary (where
        # the boundary falls depends on the bytes of every record before: a batch's blocks
        # hold up to 1 MiB raw, about 100 KB compressed here)
        assert longer[q]["bytes_read"] <= 1.5 * long[q]["bytes_read"] + 128 * 1024, (q, long[q], longer[q])


def test_cold_index_reads_only_the_session(tmp_path, monkeypatch):
    """With the index cache deleted, a question about one session indexes that session's
    files (and packs), never the other sessions' segments."""
    io = IO(monkeypatch)
    d = tmp_path / "tape"
    build(d, {"a": 200, **{f"x{i:02d}": 2000 for i in range(9)}})
    a_bytes = sum(f.stat().st_size for f in (d / "sessions" / "a").iterdir())
    tape_bytes = sum(f.stat().st_size for f in (d / "sessions").rglob("*.seg"))
    shutil.rmtree(os.environ["CTAPE_CACHE_DIR"])
    os.makedirs(os.environ["CTAPE_CACHE_DIR"])
    r = io.run(d, "log", "-s", "a", "-n", "20")
    assert r["files_indexed"] == len(list((d / "sessions" / "a").iterdir()))
    assert r["bytes_read"] <= a_bytes + 64 * 1024
    assert r["bytes_read"] < tape_bytes / 5


# -- fsyncs per append ------------------------------------------------------------------------------


def test_durable_append_costs_one_fdatasync(tmp_path, monkeypatch):
    calls = {"fdatasync": 0, "fsync": 0}
    real_fdatasync, real_fsync = os.fdatasync, os.fsync

    def fdatasync(fd):
        calls["fdatasync"] += 1
        real_fdatasync(fd)

    def fsync(fd):
        calls["fsync"] += 1
        real_fsync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "fsync", fsync)
    tape = Tape.init(tmp_path / "tape")
    s = tape.session("chat")
    entries = workload.generate_session(120, seed=3)
    s.append(*entries[0][:2], meta=entries[0][2])  # creates the session folder and segment
    calls.update(fdatasync=0, fsync=0)
    for kind, payload, meta, delta in entries[1:101]:
        s.append(kind, payload, meta=meta, delta=delta)
    assert calls == {"fdatasync": 100, "fsync": 0}
    calls.update(fdatasync=0, fsync=0)
    with tape.batch():
        for kind, payload, meta, delta in entries[101:]:
            s.append(kind, payload, meta=meta, delta=delta)
    assert calls == {"fdatasync": 1, "fsync": 0}
    tape.close()


def test_the_index_keeps_no_copy_of_durable_appends(tmp_path):
    """Counted, not timed: the index cache outside the tape grows by an object row per
    append, not by a copy of every ref record (it used to: ~350 bytes an append, as much
    as the tape itself for short sessions), and not by keyframes that repeat the history."""
    import glob
    import sqlite3

    tape = Tape.init(tmp_path / "tape", cache_dir=str(tmp_path / "cache"))
    s = tape.session("chat")
    entries = workload.generate_session(1000, seed=5)
    for i, (kind, payload, meta, delta) in enumerate(entries):
        s.append("system" if i % 2 else kind, payload if i % 2 == 0 else {"content": f"turn {i}"}, meta=meta, delta=delta)
    tape.close()
    (db,) = glob.glob(str(tmp_path / "cache" / "*" / index_file()))
    assert not os.path.exists(db + "-wal")  # closing folds the write-ahead log in
    per_append = os.path.getsize(db) / len(entries)
    assert per_append < 200, per_append  # 135 now; 440 with a row per ref record and whole-list keyframes
    tables = {name for (name,) in sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "records" not in tables
    tape = Tape.open(tmp_path / "tape", cache_dir=str(tmp_path / "cache"))
    assert len(tape.session("chat").reflog()) == len(entries) + 1  # HEAD attached once, then a line per append
    tape.close()


# -- lazy imports --------------------------------------------------------------------------------------


def loaded_after(code: str) -> set[str]:
    """Top-level modules loaded by `code` in a fresh interpreter (also when it calls sys.exit)."""
    prog = (
        "import atexit, sys, json\n"
        "atexit.register(lambda: sys.__stderr__.write('MODULES=' + json.dumps(sorted({m.split('.')[0] for m in sys.modules})) + '\\n'))\n"
        + code
    )
    p = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60)
    line = next(x for x in p.stderr.splitlines() if x.startswith("MODULES="))
    return set(json.loads(line[len("MODULES="):]))


def test_import_ctape_is_light():
    mods = loaded_after("import ctape")
    assert not mods & {"zstandard", "blake3", "sqlite3", "click", "langgraph", "langchain_core", "pydantic", "matplotlib"}


def test_tape_api_does_not_load_frameworks_or_zstd():
    mods = loaded_after("from ctape import Tape, Session")
    assert not mods & {"zstandard", "langgraph", "langchain_core", "matplotlib", "click"}


def test_help_does_not_load_storage_modules():
    mods = loaded_after("sys.argv = ['ctape', '--help']\nfrom ctape.cli import main\nmain()")
    assert "click" in mods  # it did run
    assert not mods & set(HEAVY_FOR_HELP)


@pytest.mark.parametrize("cmd", [["log", "--help"], ["status", "--help"], ["--version"]])
def test_subcommand_help_is_light(cmd):
    mods = loaded_after(f"sys.argv = ['ctape', *{cmd!r}]\nfrom ctape.cli import main\nmain()")
    assert not mods & set(HEAVY_FOR_HELP)


def test_packed_session_reads_do_not_grow_with_the_tape(tmp_path, monkeypatch):
    """After compact (one pack per session), one-session questions still read a number of
    records that does not depend on the other sessions."""
    io = IO(monkeypatch)
    d = tmp_path / "tape"
    build(d, {"a": 300, "b": 300})
    compact(d)
    small = questions(io, d, "a")
    build(d, {f"x{i:02d}": 300 for i in range(18)})
    compact(d)
    big = questions(io, d, "a")
    for q in small:
        assert big[q]["records_read"] == small[q]["records_read"], (q, small[q], big[q])


def test_packed_log_reads_less_than_the_session_pack(tmp_path, monkeypatch):
    io = IO(monkeypatch)
    d = tmp_path / "tape"
    build(d, {"a": 1000})
    compact(d)
    pack = sum(f.stat().st_size for f in (d / "sessions" / "a").iterdir())
    r = io.run(d, "log", "-s", "a", "-n", "20")
    assert r["bytes_read"] <= pack
