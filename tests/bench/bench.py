"""ctape against the peers users would otherwise pick, side by side in one run.

    python tests/bench/bench.py --smoke          # ~20 s: small lengths, one repeat (CI)
    python tests/bench/bench.py                  # 100 / 1,000 / 10,000 entries per session, 3 repeats
    python tests/bench/bench.py --full           # also the scale runs (1,000,000-entry tape); or CTAPE_BENCH_FULL=1
    python tests/bench/bench.py --out DIR        # where results.jsonl, table.txt, profile.txt go

Peers (each writes the same entries from tests/bench/workload.py):

    ctape-durable   Session.append, one call per entry: one write + one fdatasync each
    ctape-batched   the same appends inside `with tape.batch():` (1,000 per batch), then compact
    ctape-extend    Session.extend, the bulk call: 1,000 entries a call (one ref record, one fsync)
    jsonl-fsync     one JSON line per entry, os.write + os.fdatasync (Codex, Claude Code)
    jsonl           the same lines, buffered, no fsync
    sqlite          one INSERT + COMMIT per entry (WAL, synchronous=FULL: durable commits)
    langgraph       LangGraph SqliteSaver, StateGraph over an add_messages channel, one
                    invoke per entry (one session of 100 and 300 entries only: it stores
                    the whole message list at every step)
    floor-batched   not a peer: the least any writer of ctape's format must do per entry
                    (FloorWriter below), batched; `paired-durable` also runs it durably
                    as floor-durable. What ctape spends above it is bookkeeping.

Every measurement runs in a fresh subprocess (`--worker`), so its peak memory
(getrusage ru_maxrss) is its own. Peers run in rotating order inside each repeat,
so disturbance from other load hits all of them alike; the table shows medians.
Results: one JSON object per line on stdout and in OUT/results.jsonl; a human table
on stderr and in OUT/table.txt; the chart in docs/performance.png (OUT/performance.png
in --smoke mode).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import workload  # noqa: E402

PEERS = ["ctape-durable", "ctape-batched", "ctape-extend", "jsonl-fsync", "jsonl", "sqlite", "langgraph", "floor-batched"]
LANGGRAPH_MAX = int(os.environ.get("CTAPE_BENCH_LANGGRAPH_MAX", 300))  # entries in its one session: SqliteSaver
# stores the whole message list at every step, so its disk use and time grow with the square
# of the history (300 entries: ~160 MB, ~10 s; 1,000 would be ~1.7 GB and minutes per repeat)
BATCH = 1000


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def du(path: str) -> int:
    """Apparent bytes of a file or of every file under a folder."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return total


def nfiles(path: str) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def zstd3(paths: list[str]) -> int:
    """Bytes of the files concatenated and compressed with `zstd -3` (python-zstandard level 3 without the CLI)."""
    if shutil.which("zstd"):
        cat = subprocess.Popen(["cat", *paths], stdout=subprocess.PIPE)
        z = subprocess.run(["zstd", "-3", "-q", "-c"], stdin=cat.stdout, stdout=subprocess.PIPE, check=True)
        cat.wait()
        return len(z.stdout)
    import zstandard

    data = b"".join(open(p, "rb").read() for p in paths)
    return len(zstandard.ZstdCompressor(level=3).compress(data))


# -- the workloads a worker builds -----------------------------------------------------------------


def load_workload(spec: dict) -> dict[str, list]:
    if spec["workload"] == "real":
        return workload.real_transcripts()
    return workload.generate(spec["sessions"], spec["n"], spec.get("seed", 0))


def jsonl_line(session: str, seq: int, e) -> bytes:
    kind, payload, meta, delta = e
    return (json.dumps({"session": session, "seq": seq, "kind": kind, "time": now(), "payload": payload, "meta": meta, "delta": delta}, ensure_ascii=False) + "\n").encode()


# -- peers: each returns (seconds, facts) -----------------------------------------------------------


def run_ctape(spec, wl, d, batched: bool, extend: bool = False):
    from ctape import Tape

    tape_dir, cache = os.path.join(d, "tape"), os.path.join(d, "cache")
    tape = Tape.init(tape_dir, cache_dir=cache)
    t = time.perf_counter()
    for name, entries in wl.items():
        s = tape.session(name)
        if extend:
            for i in range(0, len(entries), BATCH):
                s.extend(entries[i:i + BATCH])
        elif batched:
            for i in range(0, len(entries), BATCH):
                with tape.batch():
                    for kind, payload, meta, delta in entries[i:i + BATCH]:
                        s.append(kind, payload, meta=meta, delta=delta)
        else:
            for kind, payload, meta, delta in entries:
                s.append(kind, payload, meta=meta, delta=delta)
    secs = time.perf_counter() - t
    tape.store.index.sync()
    # the index cache while the writer is open (SQLite's write-ahead log included, which
    # SQLite folds in every 1,000 pages) and once it is closed
    facts = {"bytes": du(tape_dir), "files": nfiles(tape_dir), "index_bytes_open": du(cache), "rss_append_mb": maxrss_mb()}
    tape.close()
    facts["index_bytes"] = du(cache)
    if batched:  # compact: the after-compact size, its time and memory
        tape = Tape.open(tape_dir, cache_dir=cache)
        t = time.perf_counter()
        rep = tape.compact(expire="90d", grace="now")
        facts["compact_s"] = time.perf_counter() - t
        tape.close()
        facts.update(bytes_compact=du(tape_dir), files_compact=nfiles(tape_dir), index_bytes_compact=du(cache))
        facts["compact_report"] = {k: v for k, v in rep.items() if isinstance(v, (int, float))}
    return secs, facts


def run_jsonl(spec, wl, d, fsync: bool):
    paths = []
    t = time.perf_counter()
    for name, entries in wl.items():
        path = os.path.join(d, f"{name}.jsonl")
        paths.append(path)
        if fsync:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            for seq, e in enumerate(entries, 1):
                os.write(fd, jsonl_line(name, seq, e))
                os.fdatasync(fd)
            os.close(fd)
        else:
            with open(path, "ab") as f:
                for seq, e in enumerate(entries, 1):
                    f.write(jsonl_line(name, seq, e))
    secs = time.perf_counter() - t
    facts = {"bytes": sum(map(du, paths)), "files": len(paths), "rss_append_mb": maxrss_mb()}
    if not fsync:
        facts["zstd3_bytes"] = zstd3(paths)
        facts["zstd3_per_file_bytes"] = sum(zstd3([p]) for p in paths)
    return secs, facts


def run_sqlite(spec, wl, d):
    import sqlite3

    path = os.path.join(d, "history.sqlite")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE entries(id INTEGER PRIMARY KEY, session TEXT, seq INTEGER, kind TEXT, time TEXT, payload TEXT, meta TEXT, delta TEXT)")
    db.execute("CREATE INDEX entries_session ON entries(session, seq)")
    t = time.perf_counter()
    for name, entries in wl.items():
        for seq, (kind, payload, meta, delta) in enumerate(entries, 1):
            db.execute("BEGIN")
            db.execute("INSERT INTO entries(session, seq, kind, time, payload, meta, delta) VALUES(?,?,?,?,?,?,?)",
                       (name, seq, kind, now(), json.dumps(payload), json.dumps(meta), json.dumps(delta)))
            db.execute("COMMIT")
    secs = time.perf_counter() - t
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return secs, {"bytes": du(path) + du(path + "-wal"), "files": 1, "rss_append_mb": maxrss_mb()}


def to_message(e):
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    kind, payload, meta, _ = e
    text = lambda v: v if isinstance(v, str) else json.dumps(v)  # noqa: E731
    if kind == "system":
        return SystemMessage(text(payload.get("content")))
    if kind == "user":
        return HumanMessage(text(payload.get("content")))
    if kind == "tool_call":
        args = payload.get("arguments")
        return AIMessage("", tool_calls=[{"name": payload["name"], "args": args if isinstance(args, dict) else {"input": args}, "id": payload["call_id"]}])
    if kind == "tool_result":
        return ToolMessage(text(payload.get("output")), tool_call_id=payload["call_id"], status="error" if payload.get("is_error") else "success")
    if kind == "error":
        return ToolMessage(payload["message"], tool_call_id=payload.get("call_id") or "none", status="error")
    return AIMessage(text(payload.get("content")), response_metadata=meta)


def run_langgraph(spec, wl, d):
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph

    path = os.path.join(d, "langgraph.sqlite")
    conn = sqlite3.connect(path, check_same_thread=False)
    g = StateGraph(MessagesState)
    g.add_node("record", lambda state: {})
    g.add_edge(START, "record")
    graph = g.compile(checkpointer=SqliteSaver(conn))
    msgs = {name: [to_message(e) for e in entries] for name, entries in wl.items()}
    t = time.perf_counter()
    for name, ms in msgs.items():
        cfg = {"configurable": {"thread_id": name}}
        for m in ms:
            graph.invoke({"messages": [m]}, cfg)
    secs = time.perf_counter() - t
    n = sum(len(graph.get_state({"configurable": {"thread_id": name}}).values["messages"]) for name in msgs)
    assert n == sum(map(len, msgs.values())), n
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return secs, {"bytes": du(path) + du(path + "-wal"), "files": 1, "rss_append_mb": maxrss_mb()}


def run_import(spec, d):
    """`ctape import` of every real transcript file, against copying their records as JSON Lines."""
    from ctape import Tape
    from ctape.formats import import_files

    files = workload.fixture_files()
    if spec["peer"] == "ctape-import":
        tape_dir, cache = os.path.join(d, "tape"), os.path.join(d, "cache")
        tape = Tape.init(tape_dir, cache_dir=cache)
        t = time.perf_counter()
        for fmt, path in files:
            import_files(tape, fmt, [path], None)
        secs = time.perf_counter() - t
        entries = sum(len(list(tape.session(s["session"]).log())) for s in tape.sessions())
        tape.close()
        facts = {"bytes": du(tape_dir), "index_bytes": du(cache), "entries": entries}
        tape = Tape.open(tape_dir, cache_dir=cache)
        t = time.perf_counter()
        tape.compact(expire="90d", grace="now")
        facts.update(compact_s=time.perf_counter() - t, bytes_compact=du(tape_dir))
        tape.close()
        return secs, facts
    # jsonl: read each record and write it as one line (what a JSON Lines store of them costs)
    from workload import _records

    recs = [(os.path.basename(p), _records(p)) for _, p in files]
    out = os.path.join(d, "copy.jsonl")
    t = time.perf_counter()
    with open(out, "ab") as f:
        for _, rs in recs:
            for r in rs:
                f.write((json.dumps(r, ensure_ascii=False) + "\n").encode())
    secs = time.perf_counter() - t
    src = [p for _, p in files]
    return secs, {"bytes": du(out), "source_bytes": sum(map(du, src)), "zstd3_bytes": zstd3(src), "entries": sum(len(rs) for _, rs in recs)}


class FloorWriter:
    """The least that any writer of ctape's format must do per entry, with none of ctape's
    bookkeeping (no lock, no refs, no index, no checks): canonical JSON of the entry with
    its parent's hash, seq and time; blake3 of it; the ref record's canonical JSON (one per
    append when durable, one per BATCH entries when batched, as ctape writes them); zstd
    (with a dictionary of the session's recent bytes when durable, as ctape does; in 1 MiB
    blocks when batched); a CRC; one write (and one fdatasync).
    What ctape spends above this is its own; what this spends is the format's price."""

    def __init__(self, path: str, durable: bool):
        import blake3
        import zstandard
        import zlib

        self.blake3, self.zstd, self.crc32 = blake3.blake3, zstandard, zlib.crc32
        self.encode = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.durable, self.parent, self.n = durable, None, 0
        self.plain = zstandard.ZstdCompressor(level=3, write_content_size=True, write_checksum=True)
        self.cctx, self.recent, self.block = None, bytearray(), bytearray()

    def append(self, session: str, kind, payload, meta, delta) -> None:
        from ctape.model.models import now_rfc3339

        self.n += 1
        t = now_rfc3339()
        body = self.encode({"delta": delta, "kind": kind, "meta": meta, "parent": self.parent, "payload": payload, "seq": self.n, "time": t}).encode()
        h = self.blake3(b"entry\0" + body).hexdigest()
        self.parent = h
        if not self.durable:  # one ref record per batch, as ctape writes
            self.block += body
            if self.n % BATCH == 0:
                self.block += self.ref(session, t)
            if len(self.block) >= 1 << 20:
                self.flush()
            return
        ref = self.ref(session, t)
        raw = body + ref
        if self.cctx is None and len(self.recent) >= 16 << 10:
            d = self.zstd.ZstdCompressionDict(bytes(self.recent[-(64 << 10):]), dict_type=self.zstd.DICT_TYPE_RAWCONTENT)
            d.precompute_compress(level=3)
            self.cctx = self.zstd.ZstdCompressor(level=3, dict_data=d, write_content_size=True, write_checksum=True)
        self.recent += raw
        frame = (self.cctx or self.plain).compress(raw)
        os.write(self.fd, self.crc32(frame).to_bytes(4, "little") + frame)
        os.fdatasync(self.fd)

    def ref(self, session: str, t: str) -> bytes:
        return self.encode({"lc": self.n, "n": self.n, "op": "append", "s": session, "set": {"main": self.parent}, "t": t, "w": "0123456789ab"}).encode()

    def flush(self) -> None:
        if self.block:
            frame = self.plain.compress(bytes(self.block))
            os.write(self.fd, self.crc32(frame).to_bytes(4, "little") + frame)
            self.block = bytearray()

    def close(self) -> None:
        self.flush()
        os.close(self.fd)


def run_floor(spec, wl, d):
    """The batched floor: FloorWriter without syncs, one file per session."""
    t = time.perf_counter()
    paths = []
    for name, entries in wl.items():
        paths.append(os.path.join(d, f"{name}.floor"))
        w = FloorWriter(paths[-1], durable=False)
        for kind, payload, meta, delta in entries:
            w.append(name, kind, payload, meta, delta)
        w.close()
    return time.perf_counter() - t, {"bytes": sum(map(du, paths)), "files": len(paths), "rss_append_mb": maxrss_mb()}


def run_paired(spec, wl, d, chunk: int = 25):
    """The durable peers in one process, taking turns every `chunk` entries, so that they
    see the same disk: on a shared machine fsync latency drifts by 4x within a minute."""
    import sqlite3

    from ctape import Tape

    tape = Tape.init(os.path.join(d, "tape"), cache_dir=os.path.join(d, "cache"))
    db = sqlite3.connect(os.path.join(d, "h.sqlite"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE entries(id INTEGER PRIMARY KEY, session TEXT, seq INTEGER, kind TEXT, time TEXT, payload TEXT, meta TEXT, delta TEXT)")
    spent = {"ctape-durable": 0.0, "jsonl-fsync": 0.0, "sqlite": 0.0, "floor-durable": 0.0}
    for name, entries in wl.items():
        s = tape.session(name)
        fd = os.open(os.path.join(d, f"{name}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        floor = FloorWriter(os.path.join(d, f"{name}.floor"), durable=True)
        for i in range(0, len(entries), chunk):
            part = list(enumerate(entries[i:i + chunk], i + 1))
            t = time.perf_counter()
            for seq, (kind, payload, meta, delta) in part:
                s.append(kind, payload, meta=meta, delta=delta)
            t2 = time.perf_counter()
            for seq, e in part:
                os.write(fd, jsonl_line(name, seq, e))
                os.fdatasync(fd)
            t3 = time.perf_counter()
            for seq, (kind, payload, meta, delta) in part:
                db.execute("BEGIN")
                db.execute("INSERT INTO entries(session, seq, kind, time, payload, meta, delta) VALUES(?,?,?,?,?,?,?)",
                           (name, seq, kind, now(), json.dumps(payload), json.dumps(meta), json.dumps(delta)))
                db.execute("COMMIT")
            t4 = time.perf_counter()
            for seq, (kind, payload, meta, delta) in part:
                floor.append(name, kind, payload, meta, delta)
            t5 = time.perf_counter()
            spent["ctape-durable"] += t2 - t
            spent["jsonl-fsync"] += t3 - t2
            spent["sqlite"] += t4 - t3
            spent["floor-durable"] += t5 - t4
        os.close(fd)
        floor.close()
    tape.close()
    db.close()
    n = sum(map(len, wl.values()))
    return spent["ctape-durable"], {f"rate_{k}": n / v for k, v in spent.items()}


def worker(spec: dict) -> dict:
    d = spec["dir"]
    os.makedirs(d, exist_ok=True)
    if spec["peer"] in ("ctape-import", "jsonl-import"):
        rss0 = maxrss_mb()
        secs, facts = run_import(spec, d)
        entries = facts.pop("entries")
    else:
        wl = load_workload(spec)
        import ctape.session  # noqa: F401 - imports outside the timed part, for every peer alike
        import ctape.store.store  # noqa: F401

        if spec["peer"] == "langgraph":
            import langgraph.checkpoint.sqlite  # noqa: F401
            import langgraph.graph  # noqa: F401
        rss0 = maxrss_mb()
        entries = sum(map(len, wl.values()))
        fn = {
            "ctape-durable": lambda: run_ctape(spec, wl, d, False),
            "ctape-batched": lambda: run_ctape(spec, wl, d, True),
            "ctape-extend": lambda: run_ctape(spec, wl, d, False, extend=True),
            "jsonl-fsync": lambda: run_jsonl(spec, wl, d, True),
            "jsonl": lambda: run_jsonl(spec, wl, d, False),
            "sqlite": lambda: run_sqlite(spec, wl, d),
            "langgraph": lambda: run_langgraph(spec, wl, d),
            "paired-durable": lambda: run_paired(spec, wl, d),
            "floor-batched": lambda: run_floor(spec, wl, d),
        }[spec["peer"]]
        secs, facts = fn()
    out = {k: v for k, v in spec.items() if k != "dir"}
    out.update(entries=entries, seconds=secs, rate=entries / secs, rss_base_mb=rss0, rss_peak_mb=maxrss_mb(), **facts)
    shutil.rmtree(d, ignore_errors=True)
    return out


def spawn(spec: dict, timeout: float = 1800) -> dict:
    p = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"worker {spec['peer']} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# -- the profile of the durable append path --------------------------------------------------------


def profile_append(tmp: str, n: int = 2000) -> tuple[dict, str]:
    """Time per durable append: total, inside fdatasync, and the rest (cProfile for the rest)."""
    from ctape import Tape

    entries = workload.generate_session(n, seed=7, session=0)
    d = os.path.join(tmp, "profile")
    tape = Tape.init(os.path.join(d, "tape"), cache_dir=os.path.join(d, "cache"))
    s = tape.session("p")
    for kind, payload, meta, delta in entries[:50]:  # warm up: imports, first segment
        s.append(kind, payload, meta=meta, delta=delta)
    entries = entries[50:]
    real = os.fdatasync
    spent = {"sync_s": 0.0, "syncs": 0}

    def timed(fd):
        t = time.perf_counter()
        real(fd)
        spent["sync_s"] += time.perf_counter() - t
        spent["syncs"] += 1

    os.fdatasync = timed
    try:
        t = time.perf_counter()
        for kind, payload, meta, delta in entries:
            s.append(kind, payload, meta=meta, delta=delta)
        total = time.perf_counter() - t
        sync_plain = dict(spent)
        prof = cProfile.Profile()
        s2 = tape.session("q")
        prof.enable()
        for kind, payload, meta, delta in entries:
            s2.append(kind, payload, meta=meta, delta=delta)
        prof.disable()
    finally:
        os.fdatasync = real
    tape.close()
    shutil.rmtree(d, ignore_errors=True)
    m = len(entries)
    res = {
        "kind": "profile",
        "appends": m,
        "us_per_append": 1e6 * total / m,
        "us_fdatasync_per_append": 1e6 * sync_plain["sync_s"] / m,
        "us_other_per_append": 1e6 * (total - sync_plain["sync_s"]) / m,
        "fdatasync_per_append": sync_plain["syncs"] / m,
    }
    buf = io.StringIO()
    st = pstats.Stats(prof, stream=buf)
    st.sort_stats("tottime").print_stats(22)
    st.sort_stats("cumulative").print_stats(30)
    return res, buf.getvalue()


# -- scale --------------------------------------------------------------------------------------------


def cli(tape_dir: str, cache: str, *args: str, input: bytes | None = None) -> tuple[float, subprocess.CompletedProcess]:
    env = dict(os.environ, CTAPE_DIR=tape_dir, CTAPE_CACHE_DIR=cache)
    env.pop("CTAPE_SESSION", None)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ctape", *args], env=env, capture_output=True, input=input)
    secs = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"ctape {' '.join(args)} failed: {p.stderr.decode()[-2000:]}")
    return secs, p


def cli_measured(tape_dir: str, cache: str, *args: str) -> tuple[float, float, subprocess.Popen]:
    """(seconds, peak RSS MB) of one CLI run, from wait4."""
    env = dict(os.environ, CTAPE_DIR=tape_dir, CTAPE_CACHE_DIR=cache)
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "ctape", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    secs = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"ctape {' '.join(args)} exited {p.returncode}")
    p.out = out
    return secs, ru.ru_maxrss / 1024, p


def build_tape(tape_dir: str, cache: str, sessions: int, n: int, templates: int, budget_s: float) -> dict:
    """A tape of sessions x n entries with batched appends. Sessions reuse `templates`
    generated histories (generation costs more than appending); their entries still
    differ (parents, times), their large values dedupe. Stops at budget_s and says so."""
    from ctape import Tape

    t0 = time.perf_counter()
    repo = workload.Repo(0)
    tmpl = [workload.generate_session(n, 0, i, repo) for i in range(templates)]
    gen_s = time.perf_counter() - t0
    tape = Tape.init(tape_dir, cache_dir=cache)
    t = time.perf_counter()
    done = 0
    built = 0
    for i in range(sessions):
        s = tape.session(f"s{i:03d}")
        entries = tmpl[i % templates]
        for j in range(0, n, 5000):
            with tape.batch():
                for kind, payload, meta, delta in entries[j:j + 5000]:
                    s.append(kind, payload, meta=meta, delta=delta)
            done += len(entries[j:j + 5000])
        built += 1
        el = time.perf_counter() - t
        print(f"  built {built}/{sessions} sessions, {done:,} entries, {done / el:,.0f}/s", file=sys.stderr, flush=True)
        if el > budget_s and built < sessions:
            break
    secs = time.perf_counter() - t
    tape.store.index.sync()
    tape.close()
    return {"sessions": built, "entries": done, "seconds": secs, "rate": done / secs, "generate_s": gen_s,
            "complete": built == sessions, "extrapolated_s": secs * sessions / built}


def scale(tmp: str, quick: bool = False) -> list[dict]:
    out = []
    reps = 5
    big_n, big_s = (10_000, 100) if not quick else (1000, 20)
    deep_n = 100_000 if not quick else 5000
    budget = float(os.environ.get("CTAPE_BENCH_BUILD_BUDGET", 420))

    def emit(rec):
        rec = dict(kind="scale", **rec)
        print(json.dumps(rec), flush=True)
        out.append(rec)

    # Measure the command as an installed package runs: pip writes bytecode at install
    # time, but a source checkout run with PYTHONDONTWRITEBYTECODE=1 (as on the machines
    # this was written on) compiles every module at every start, ~30-40 ms.
    import compileall

    import ctape

    compileall.compile_dir(os.path.dirname(ctape.__file__), quiet=1)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        ts.append(time.perf_counter() - t)
    emit({"tape": "-", "op": "python -c pass (interpreter start)", "median_s": statistics.median(ts), "min_s": min(ts)})

    def timings(tape_dir, cache, label, cmds):
        for name, args in cmds:
            first, _ = cli(tape_dir, cache, *args)
            ts = [cli(tape_dir, cache, *args)[0] for _ in range(reps)]
            emit({"tape": label, "op": name, "first_s": first, "median_s": statistics.median(ts), "min_s": min(ts)})

    small_dir, small_cache = os.path.join(tmp, "small", "tape"), os.path.join(tmp, "small", "cache")
    big_dir, big_cache = os.path.join(tmp, "big", "tape"), os.path.join(tmp, "big", "cache")
    info_small = build_tape(small_dir, small_cache, 1, 1000, 1, budget)
    emit({"tape": "1k", "op": "build", **info_small, "bytes": du(small_dir), "index_bytes": du(small_cache)})
    info_big = build_tape(big_dir, big_cache, big_s, big_n, 10 if not quick else 2, budget)
    emit({"tape": "1M", "op": "build", **info_big, "bytes": du(big_dir), "index_bytes": du(big_cache)})

    def ops(tape_dir, cache, session):
        _, p = cli(tape_dir, cache, "log", "-s", session, "-n", "6", "--json")
        h = json.loads(p.stdout.decode().splitlines()[-1])["hash"]
        return [
            ("--help", ["--help"]),
            ("log -n 20", ["log", "-s", session, "-n", "20", "--no-pager"]),
            ("status", ["status", "-s", session]),
            ("show", ["show", h, "--no-pager"]),
            ("context --max-tokens 8000", ["context", "-s", session, "--max-tokens", "8000"]),
        ]

    timings(small_dir, small_cache, "1k", ops(small_dir, small_cache, "s000"))
    mid = f"s{info_big['sessions'] // 2:03d}"
    timings(big_dir, big_cache, "1M", ops(big_dir, big_cache, mid))

    # in-process: what one question reads (bytes and records) on each tape
    from ctape import Tape

    for label, d, c, sname in (("1k", small_dir, small_cache, "s000"), ("1M", big_dir, big_cache, mid)):
        tape = Tape.open(d, cache_dir=c)
        s = tape.session(sname)
        for op, fn in (("log -n 20", lambda: list(s.log(limit=20))), ("status", s.status), ("context --max-tokens 8000", lambda: s.context(max_tokens=8000))):
            before = dict(tape.store.io)
            fn()
            emit({"tape": label, "op": f"io {op}", **{k: tape.store.io[k] - before[k] for k in before}})
            tape._entries.clear()
        tape.close()

    # depth 100,000: state and checkout
    deep_dir, deep_cache = os.path.join(tmp, "deep", "tape"), os.path.join(tmp, "deep", "cache")
    info = build_tape(deep_dir, deep_cache, 1, deep_n, 1, budget)
    emit({"tape": "deep", "op": "build", **info, "bytes": du(deep_dir)})
    _, p = cli(deep_dir, deep_cache, "log", "-s", "s000", "-n", "1", "--json")
    head = json.loads(p.stdout.decode().splitlines()[0])["hash"]
    timings(deep_dir, deep_cache, f"depth {deep_n:,}", [("state", ["state", "-s", "s000"]), ("state HEAD~1", ["state", "s000~1"])])
    ts = []
    first = None
    for i in range(reps + 1):
        a, _ = cli(deep_dir, deep_cache, "checkout", head, "-s", "s000")
        b, _ = cli(deep_dir, deep_cache, "checkout", "main", "-s", "s000")
        if first is None:
            first = a
        else:
            ts += [a, b]
    emit({"tape": f"depth {deep_n:,}", "op": "checkout", "first_s": first, "median_s": statistics.median(ts), "min_s": min(ts)})
    tape = Tape.open(deep_dir, cache_dir=deep_cache)
    s = tape.session("s000")
    t = time.perf_counter()
    s.state()
    emit({"tape": f"depth {deep_n:,}", "op": "api state (warm index)", "median_s": time.perf_counter() - t})
    tape.close()
    shutil.rmtree(os.path.join(tmp, "deep"), ignore_errors=True)

    # compact of the big tape: time and peak memory of the real command
    before = du(big_dir)
    secs, rss, p = cli_measured(big_dir, big_cache, "compact", "--grace", "now", "--json")
    emit({"tape": "1M", "op": "compact", "seconds": secs, "rss_peak_mb": rss, "entries": info_big["entries"],
          "bytes_before": before, "bytes_after": du(big_dir), "files_after": nfiles(big_dir), "index_bytes_after": du(big_cache),
          "report": json.loads(p.out.decode() or "{}")})
    timings(big_dir, big_cache, "1M compacted", ops(big_dir, big_cache, mid)[1:])
    return out


def scale_table(recs: list[dict]) -> str:
    lines = []
    for r in recs:
        if r["op"] == "build":
            lines.append(f"build {r['tape']}: {r['entries']:,} entries in {r['sessions']} sessions, {r['seconds']:.1f} s ({r['rate']:,.0f}/s batched"
                         f"{'' if r['complete'] else ', STOPPED at the time budget; all would take ~%.0f s' % r['extrapolated_s']}),"
                         f" tape {r.get('bytes', 0) / 1e6:.1f} MB, index {r.get('index_bytes', 0) / 1e6:.1f} MB")
    lines.append(f"\n{'operation (real CLI subprocess)':<32}{'tape':<16}{'first s':>9}{'median s':>10}{'min s':>8}")
    for r in recs:
        if "median_s" in r and "first_s" in r:
            lines.append(f"{r['op']:<32}{r['tape']:<16}{r['first_s']:>9.3f}{r['median_s']:>10.3f}{r['min_s']:>8.3f}")
        elif "median_s" in r:
            lines.append(f"{r['op']:<32}{r['tape']:<16}{'':>9}{r['median_s']:>10.3f}")
    lines.append(f"\n{'in-process reads':<32}{'tape':<16}{'bytes':>10}{'records':>9}{'files indexed':>15}")
    for r in recs:
        if r["op"].startswith("io "):
            lines.append(f"{r['op'][3:]:<32}{r['tape']:<16}{r['bytes_read']:>10,}{r['records_read']:>9}{r['files_indexed']:>15}")
    for r in recs:
        if r["op"] == "compact":
            lines.append(f"\ncompact of {r['entries']:,} entries: {r['seconds']:.1f} s, peak RSS {r['rss_peak_mb']:.0f} MB,"
                         f" {r['bytes_before'] / 1e6:.0f} MB -> {r['bytes_after'] / 1e6:.0f} MB in {r['files_after']} files")
    return "\n".join(lines)


# -- the report -------------------------------------------------------------------------------------


def median_rows(rows: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["group"], r["n"], r["peer"]), []).append(r)
    out = []
    for _, rs in groups.items():
        m = dict(rs[0])
        for k, v in rs[0].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("n", "sessions", "seed", "repeat"):
                m[k] = statistics.median(r[k] for r in rs if k in r)
        m["repeats"] = len(rs)
        m["rates"] = [round(r["rate"], 1) for r in rs]
        out.append(m)
    return out


def table(med: list[dict]) -> str:
    lines = []
    order = {"main": 0, "langgraph": 1, "real": 2}
    for grp, n in sorted({(r["group"], r["n"]) for r in med}, key=lambda k: (order.get(k[0], 3), k[1])):
        rs = {r["peer"]: r for r in med if r["group"] == grp and r["n"] == n}
        wl = next(iter(rs.values()))["workload"]
        jf, jn = rs.get("jsonl-fsync"), rs.get("jsonl")
        any_r = next(iter(rs.values()))
        lines.append(f"\n{wl} workload, {n:,} entries per session x {any_r['sessions']} sessions = {any_r['entries']:,} entries" if wl == "generated"
                     else f"\nreal transcripts: {any_r['entries']:,} entries in {any_r['sessions']} sessions")
        lines.append(f"{'peer':<15}{'entries/s':>11}{'÷jsonl+fsync':>14}{'÷jsonl':>8}{'disk MB':>10}{'÷jsonl size':>12}{'peak MB':>9}  repeats (entries/s)")
        for peer in PEERS:
            r = rs.get(peer)
            if not r:
                continue
            ratio_f = f"{r['rate'] / jf['rate']:.2f}" if jf else "-"
            ratio_n = f"{r['rate'] / jn['rate']:.3f}" if jn else "-"
            size = f"{r['bytes'] / jn['bytes']:.3f}" if jn else "-"
            lines.append(f"{peer:<15}{r['rate']:>11,.0f}{ratio_f:>14}{ratio_n:>8}{r['bytes'] / 1e6:>10.2f}{size:>12}{r['rss_peak_mb']:>9.0f}  {r['rates']}")
        b = rs.get("ctape-batched")
        if b and jn and "bytes_compact" in b:
            lines.append(f"{'ctape compact':<15}{'':>11}{'':>14}{'':>8}{b['bytes_compact'] / 1e6:>10.2f}{b['bytes_compact'] / jn['bytes']:>12.3f}"
                         f"  ({b['compact_s']:.2f} s; ÷ zstd -3 of the JSON Lines: {b['bytes_compact'] / jn['zstd3_bytes']:.2f})")
            lines.append(f"{'jsonl zstd -3':<15}{'':>11}{'':>14}{'':>8}{jn['zstd3_bytes'] / 1e6:>10.2f}{jn['zstd3_bytes'] / jn['bytes']:>12.3f}"
                         f"  (one file per session: {jn['zstd3_per_file_bytes'] / jn['bytes']:.3f})")
        for peer in ("ctape-durable", "ctape-batched"):
            c = rs.get(peer)
            if c and jn and "index_bytes" in c:
                lines.append(f"{'index ' + peer[6:]:<15}{'':>11}{'':>14}{'':>8}{c['index_bytes'] / 1e6:>10.2f}{c['index_bytes'] / jn['bytes']:>12.3f}"
                             f"  (cache outside the tape, rebuildable; {c['index_bytes_open'] / 1e6:.2f} MB while open, with SQLite's log"
                             + (f"; {c['index_bytes_compact'] / 1e6:.2f} MB after compact)" if "index_bytes_compact" in c else ")"))
    return "\n".join(lines)


def chart(med: list[dict], path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no chart (pip install matplotlib)", file=sys.stderr)
        return False
    gen = [r for r in med if r["group"] == "main" or (r["group"] == "langgraph" and r["peer"] == "langgraph")]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    styles = {"ctape-durable": "C0-o", "ctape-batched": "C0--s", "ctape-extend": "C0:^", "jsonl-fsync": "C1-o", "jsonl": "C1--s", "sqlite": "C2-o", "langgraph": "C3-o", "floor-batched": "C7:x"}
    for peer in PEERS:
        rs = sorted((r for r in gen if r["peer"] == peer), key=lambda r: r["n"])
        if not rs:
            continue
        xs = [r["n"] for r in rs]
        if not peer.startswith("floor"):  # the floor measures time; it keeps no hash index, no dedupe
            ax1.plot(xs, [r["bytes"] / r["entries"] for r in rs], styles[peer], label=peer)
        ax2.plot(xs, [r["rate"] for r in rs], styles[peer], label=peer)
    rs = sorted((r for r in gen if r["peer"] == "ctape-batched" and "bytes_compact" in r), key=lambda r: r["n"])
    if rs:
        ax1.plot([r["n"] for r in rs], [r["bytes_compact"] / r["entries"] for r in rs], "C0:^", label="ctape after compact")
    rs = sorted((r for r in gen if r["peer"] == "jsonl" and "zstd3_bytes" in r), key=lambda r: r["n"])
    if rs:
        ax1.plot([r["n"] for r in rs], [r["zstd3_bytes"] / r["entries"] for r in rs], "C1:^", label="jsonl | zstd -3")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("history length (entries per session)")
        ax.grid(True, which="both", alpha=0.3)
    ax1.set_ylabel("bytes on disk per entry")
    ax1.set_title("Disk use (lower is better)")
    ax2.set_ylabel("entries appended per second")
    ax2.set_title("Append rate (higher is better)")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    fig.suptitle("ctape vs peers on a generated coding-agent workload (medians)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return True


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="small and quick (CI)")
    ap.add_argument("--full", action="store_true", help="also the scale runs (1,000,000-entry tape)")
    ap.add_argument("--out", help="folder for results.jsonl, table.txt, profile.txt")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--lengths", help="comma-separated entries per session, e.g. 100,1000")
    ap.add_argument("--chart", help="PNG path (default docs/performance.png; OUT/performance.png with --smoke)")
    ap.add_argument("--peers", help="comma-separated subset of " + ",".join(PEERS))
    ap.add_argument("--no-real", action="store_true", help="skip the real-transcript workload")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--scale-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker))))
        return 0
    full = a.full or os.environ.get("CTAPE_BENCH_FULL") == "1"
    out_dir = a.out or tempfile.mkdtemp(prefix="ctape-bench-")
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="ctape-bench-data-", dir=os.environ.get("CTAPE_BENCH_TMP"))
    lengths = [int(x) for x in a.lengths.split(",")] if a.lengths else ([50, 200] if a.smoke else [100, 1000, 10_000])
    repeats = a.repeats or (1 if a.smoke else 3)
    lg_lengths = [30] if a.smoke else [n for n in (100, 300, 1000) if n <= LANGGRAPH_MAX]
    peers = a.peers.split(",") if a.peers else list(PEERS)
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError:
        if "langgraph" in peers:
            print("langgraph-checkpoint-sqlite is not installed: LangGraph left out", file=sys.stderr)
            peers.remove("langgraph")
    results_path = os.path.join(out_dir, "results.jsonl")
    results = open(results_path, "w")

    def record(rec):
        line = json.dumps(rec)
        print(line, flush=True)
        results.write(line + "\n")
        results.flush()

    rows = []
    try:
        if not a.scale_only:
            jobs = []
            for n in lengths:
                sessions = 2 if a.smoke else 10 if n <= 100 else 3 if n <= 1000 else 1
                jobs += [dict(workload="generated", n=n, sessions=sessions, peer=p, group="main") for p in peers if p != "langgraph"]
            for n in lengths[:2]:  # the durable peers taking turns in one process (see run_paired)
                jobs.append(dict(workload="generated", n=n, sessions=2 if a.smoke else 10 if n <= 100 else 3, peer="paired-durable", group="paired"))
            if not a.smoke and not a.no_real:
                jobs.append(dict(workload="real", n=0, sessions=len(workload.real_transcripts()), peer="paired-durable", group="paired"))
            if "langgraph" in peers:  # one session, with its JSON Lines and ctape peers on the same entries
                for n in lg_lengths:
                    jobs += [dict(workload="generated", n=n, sessions=1, peer=p, group="langgraph")
                             for p in ("ctape-durable", "jsonl-fsync", "jsonl", "langgraph")]
            if not a.no_real and not a.smoke:
                real_sessions = len(workload.real_transcripts())
                jobs += [dict(workload="real", n=0, sessions=real_sessions, peer=p, group="real") for p in peers if p != "langgraph"]
                jobs += [dict(workload="import", n=0, sessions=0, peer=p, group="import") for p in ("ctape-import", "jsonl-import")]
            for rep in range(repeats):
                order = jobs[rep % len(jobs):] + jobs[:rep % len(jobs)] if rep else jobs
                for k, job in enumerate(order):
                    spec = dict(job, seed=0, repeat=rep, dir=os.path.join(tmp, f"w{rep}-{k}"))
                    print(f"[{rep + 1}/{repeats}] {job['workload']} n={job['n']} {job['peer']}", file=sys.stderr, flush=True)
                    r = spawn(spec)
                    r["kind"] = "append"
                    record(r)
                    rows.append(r)
            med = median_rows([r for r in rows if r["workload"] != "import"])
            for m in med:
                record(dict(m, kind="median"))
            imp = median_rows([r for r in rows if r["workload"] == "import"])
            text = table([m for m in med if m["group"] != "paired"])
            paired = [m for m in med if m["group"] == "paired"]
            if paired:
                text += "\n\ndurable peers taking turns every 25 entries in one process (medians; entries/s and ratio to jsonl-fsync):"
                for m in sorted(paired, key=lambda m: (m["workload"], m["n"])):
                    what = f"{m['workload']} n={m['n']} x {m['sessions']}" if m["workload"] == "generated" else f"real transcripts ({m['entries']:,})"
                    text += (f"\n  {what:<30} ctape-durable {m['rate_ctape-durable']:>7,.0f} ({m['rate_ctape-durable'] / m['rate_jsonl-fsync']:.2f})"
                             f"  jsonl-fsync {m['rate_jsonl-fsync']:>7,.0f}  sqlite {m['rate_sqlite']:>7,.0f} ({m['rate_sqlite'] / m['rate_jsonl-fsync']:.2f})"
                             f"  floor-durable {m['rate_floor-durable']:>7,.0f} ({m['rate_floor-durable'] / m['rate_jsonl-fsync']:.2f})"
                             f"  per repeat: {[round(r['rate_ctape-durable'] / r['rate_jsonl-fsync'], 2) for r in rows if r['group'] == 'paired' and r['n'] == m['n'] and r['workload'] == m['workload']]}")
            ci = {r["peer"]: r for r in imp}
            if "ctape-import" in ci:
                c, j = ci["ctape-import"], ci["jsonl-import"]
                text += (f"\n\nimport of every fixture file ({j['entries']:,} source records -> {c['entries']:,} entries, {j['source_bytes'] / 1e6:.1f} MB):"
                         f"\n  ctape import {c['seconds']:.2f} s ({j['source_bytes'] / c['seconds'] / 1e6:.1f} MB/s), writing the records as JSON Lines {j['seconds']:.2f} s"
                         f" ({j['source_bytes'] / j['seconds'] / 1e6:.1f} MB/s): ratio {j['seconds'] / c['seconds']:.3f}"
                         f"\n  disk: tape {c['bytes'] / 1e6:.2f} MB ({c['bytes'] / j['source_bytes']:.3f} x the files), after compact {c['bytes_compact'] / 1e6:.2f} MB"
                         f" ({c['bytes_compact'] / j['zstd3_bytes']:.2f} x the files | zstd -3 = {j['zstd3_bytes'] / 1e6:.2f} MB); index {c['index_bytes'] / 1e6:.2f} MB")
                for m in imp:
                    record(dict(m, kind="median"))
            prof, prof_text = profile_append(tmp, 200 if a.smoke else 2000)
            record(prof)
            text += (f"\n\ndurable append profile ({prof['appends']} appends): {prof['us_per_append']:.0f} us per append = "
                     f"{prof['us_fdatasync_per_append']:.0f} us in fdatasync ({prof['fdatasync_per_append']:.2f} per append) + {prof['us_other_per_append']:.0f} us of Python")
            with open(os.path.join(out_dir, "profile.txt"), "w") as f:
                f.write(prof_text)
            print(text, file=sys.stderr)
            with open(os.path.join(out_dir, "table.txt"), "w") as f:
                f.write(text.lstrip("\n") + "\n")
            png = a.chart or (os.path.join(out_dir, "performance.png") if a.smoke else os.path.join(ROOT, "docs", "performance.png"))
            if chart(med, png):
                print(f"chart: {png}", file=sys.stderr)
        if full or a.scale_only:
            recs = scale(tmp, quick=a.smoke)
            for rec in recs:
                results.write(json.dumps(rec) + "\n")
            results.flush()
            text = scale_table(recs)
            print(text, file=sys.stderr)
            with open(os.path.join(out_dir, "scale.txt"), "w") as f:
                f.write(text + "\n")
        print(f"results: {results_path}", file=sys.stderr)
    finally:
        results.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
