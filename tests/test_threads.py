"""One Tape shared by threads (docs/python-api.md: "A Tape may be used from several threads"):
its operations take turns (ctape/history/turns.py). Before, a thread's read could decode a
block through the zstd context another thread was using ("corrupt (zstd data)"), which made
it rebuild the index, and the other threads, reading through the same SQLite connection in
the middle of that rebuild, found their sessions empty (CI failed on it once in ~30 runs of
test_many_sessions.py). Here the index is rebuilt again and again under the readers: another
Tape compacts the tape, which replaces every file."""

import asyncio
import random
import threading
import time

import pytest

import ctape.store.store as store_mod
from ctape import Tape

SESSIONS = 8


def build(tmp_path):
    tape = Tape.init(str(tmp_path / "t"), cache_dir=str(tmp_path / "c"))
    want = {}
    for i in range(SESSIONS):
        s = tape.session(f"r{i}")
        for j in range(12):
            # large values are blobs; enough entries in a file for dictionary blocks
            s.append("assistant" if j % 3 else "user", {"content": f"{i}-{j} " + "word " * (j * 150)})
        want[s.name] = [e.hash for e in s.log()]
    tape.close()
    return want


def run_threads(targets, timeout: float = 120) -> list[str]:
    errors: list[str] = []

    def guarded(fn, *args):
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"{fn.__name__}: {e!r}")

    threads = [threading.Thread(target=guarded, args=t, daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), "a thread hung (a lock taken in the wrong order?)"
    return errors


@pytest.mark.parametrize("seed", range(3))
def test_reads_appends_and_rebuilds_in_threads_of_one_tape(tmp_path, monkeypatch, seed):
    monkeypatch.setattr(store_mod, "READ_FDS_MAX", 3)  # descriptors closed under the readers too
    want = build(tmp_path)
    tape = Tape.open(str(tmp_path / "t"), cache_dir=str(tmp_path / "c"))
    done = threading.Event()
    written: list[str] = []

    def reader(k):
        rnd = random.Random(seed * 100 + k)
        while not done.is_set():
            name = rnd.choice(sorted(want))
            s = tape.session(name)
            got = list(s.log())
            assert [e.hash for e in got] == want[name], f"{name}: {len(got)} entries read, {len(want[name])} written"
            assert got[-1].payload["content"].startswith(name[1:] + "-0 ")
            assert tape.resolve(f"{name}/main~3") == want[name][3]
            assert s.refs().head_hash == want[name][0]
            if rnd.random() < 0.2:  # the verbs of ctape.Tape take their turn too
                d = tape.diff(f"{name}/main~3", f"{name}/main")
                assert d.base == want[name][3] and d.right == want[name][2::-1] and d.left == []
                hits = tape.search(f'"{name[1:]}-0"', session=name, limit=5)
                assert [h.hash for h in hits] == [want[name][-1]]

    def writer():
        s = tape.session("w")
        for j in range(60):
            if j % 4 == 0:
                with tape.batch():
                    written.append(s.append("user", {"content": f"w-{j} " + "x " * 500}).hash)
            else:
                written.append(s.append("assistant", {"content": f"w-{j}"}).hash)
        done.set()

    def compactor():
        # another Tape of the same directory (its own index): every file is replaced, so the
        # shared Tape finds its files gone and rebuilds its index under the readers
        other = Tape.open(str(tmp_path / "t"), cache_dir=str(tmp_path / "c2"))
        try:
            while not done.is_set():
                other.compact(expire="0s", grace="0s")
        finally:
            other.close()

    errors = run_threads([(reader, k) for k in range(4)] + [(writer,), (compactor,)])
    assert not errors, errors[:3]
    assert [e.hash for e in tape.session("w").log()] == written[::-1]
    tape.close()
    fresh = Tape.open(str(tmp_path / "t"), cache_dir=str(tmp_path / "c3"))
    assert [e.hash for e in fresh.session("w").log()] == written[::-1]
    for name, hashes in want.items():
        assert [e.hash for e in fresh.session(name).log()] == hashes
    fresh.close()


def test_an_iterator_takes_its_turn_per_step(tmp_path):
    """A log walked slowly in one thread does not hold the other threads up between entries,
    and a walk left unfinished releases the lock."""
    build(tmp_path)
    tape = Tape.open(str(tmp_path / "t"), cache_dir=str(tmp_path / "c"))
    walk = tape.session("r0").log()
    next(walk)
    appended = []
    t = threading.Thread(target=lambda: appended.append(tape.session("other").append("user", {"content": "hi"})))
    t.start()
    t.join(timeout=10)
    assert appended, "an append waited for a log walk that was between two entries"
    del walk  # an abandoned walk closes under the lock, and leaves it free
    t = threading.Thread(target=lambda: appended.append(tape.session("other").append("user", {"content": "again"})))
    t.start()
    t.join(timeout=10)
    assert len(appended) == 2
    tape.close()


# -- integrations: their own state and the Tape's, under one lock ----------------------------
# A thread in `tape.batch()` (which holds the Tape's lock) that asks the LangGraph saver for
# a checkpoint, and a thread reading a graph's state: the reader took the saver's lock and
# then waited for the Tape's, while the batch held the Tape's and waited for the saver's.
# Both hung for good. The saver now guards its state with the Tape's own lock.


def test_langgraph_saver_read_in_a_batch_while_another_thread_reads(tmp_path):
    pytest.importorskip("langgraph")
    from langgraph.graph import START, MessagesState, StateGraph

    from ctape.integrations.langgraph import TapeSaver

    tape = Tape.init(str(tmp_path / "t"), cache_dir=str(tmp_path / "c"))
    saver = TapeSaver(tape)
    g = StateGraph(MessagesState)
    g.add_node("bot", lambda state: {"messages": [("ai", f"reply {len(state['messages'])}")]})
    g.add_edge(START, "bot")
    graph = g.compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "t1"}}
    graph.invoke({"messages": [("user", "hi")]}, cfg)
    in_batch = threading.Event()
    read = []

    def in_a_batch():
        with tape.batch():
            tape.session("notes").append("user", {"content": "a note, in the same batch"})
            in_batch.set()
            time.sleep(0.5)  # the other thread asks for the graph's state meanwhile
            read.append(saver.get_tuple(cfg))

    def reader():
        in_batch.wait()
        read.append(graph.get_state(cfg))

    errors = run_threads([(in_a_batch,), (reader,)], timeout=30)
    assert not errors, errors
    assert len(read) == 2
    assert len(read[0].checkpoint["channel_values"]["messages"]) == 2
    assert len(read[1].values["messages"]) == 2
    tape.close()


def test_a_stream_inside_a_batch_ends(tmp_path):
    """The stream's flush thread waited for the Tape (held by the batch) while holding the
    stream's lock, so the writer's next chunk waited for it, and the batch for the writer:
    hung for good. Inside a batch the stream now persists at its end, with the batch."""
    tape = Tape.init(str(tmp_path / "t"), cache_dir=str(tmp_path / "c"))
    s = tape.session("chat")
    done = []

    def turn():
        with tape.batch():
            s.append("user", {"content": "hi"})
            with s.stream(flush_interval=0.02) as w:
                for i in range(20):
                    w.write(f"tok{i} ")
                    time.sleep(0.01)
            s.append("tool_call", {"name": "f", "arguments": {}, "call_id": "c1"})
        done.append(True)

    errors = run_threads([(turn,)], timeout=30)
    assert not errors and done, errors
    kinds = [(e.kind, e.payload.get("content")) for e in s.log()]
    assert kinds[1] == ("assistant", "".join(f"tok{i} " for i in range(20)))
    assert [k for k, _ in kinds] == ["tool_call", "assistant", "user"]
    assert s.recover() == []  # nothing left behind as an interrupted stream
    tape.close()
