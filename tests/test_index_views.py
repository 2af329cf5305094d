"""The index cache's `views` rows (ctape/store/index.py): what the integrations keep there
comes back as it went in, and the cache stays smaller than the peer's own database."""

from __future__ import annotations

import asyncio
import os

import pytest
from blake3 import blake3

from ctape import Tape


def test_view_bodies_come_back_as_they_went_in(tmp_path):
    t = Tape.init(tmp_path / "t")
    idx = t.store.index
    bodies = ["", "short", "x" * 257, "a\ud800b" * 200, "é漢\n" * 500, None]
    hashes = [blake3(bytes([i])).hexdigest() for i in range(len(bodies))]
    rows = [(h, hashes[i - 1] if i else None, b) for i, (h, b) in enumerate(zip(hashes, bodies))]
    idx.put_views("test.view", rows)
    idx.sync()
    got = idx.view_path("test.view", rows[-1][0], 100)
    assert [b for _, _, b in reversed(got)] == bodies
    stored = dict(idx.db.execute("SELECT hash, body FROM views WHERE name='test.view'").fetchall())
    assert isinstance(stored[rows[2][0]], bytes) and stored[rows[1][0]] == "short"  # long ones compressed
    t.close()


def test_the_agents_cache_is_smaller_than_sqlite_session(tmp_path, monkeypatch):
    """3,200 items of an agent's turns: the index cache of a TapeSession (whose `views`
    rows hold each item's JSON, so that a new process reads a path with one query) was
    1.56 x SQLiteSession's database (uncompressed JSON in rows that spilled into overflow
    pages), 14 x the tape; now 0.57 x (compressed bodies in a rowid table)."""
    pytest.importorskip("agents")
    from agents import SQLiteSession

    from ctape.integrations.openai_agents import TapeSession

    monkeypatch.setenv("CTAPE_CACHE_DIR", str(tmp_path / "cache"))

    def turn(i: int) -> list[dict]:
        call = f"call_{i}"
        return [
            {"role": "user", "content": f"turn {i}: read the config and run the tests"},
            {"type": "function_call", "call_id": call, "name": "run_tests", "arguments": '{"path": "tests/"}'},
            {"type": "function_call_output", "call_id": call, "output": f"412 passed in {i % 60}.2s\n" + "log line\n" * (i % 40)},
            {"role": "assistant", "content": [{"type": "output_text", "text": f"All tests pass (turn {i}). Next: the flaky one."}]},
        ]

    items = [it for i in range(800) for it in turn(i)]
    tp = TapeSession("bench", str(tmp_path / "tape"))
    sq = SQLiteSession("bench", str(tmp_path / "sq.sqlite"))

    async def fill():
        for k in range(0, len(items), 31):
            await tp.add_items(items[k : k + 31])
            await sq.add_items(items[k : k + 31])

    asyncio.run(fill())
    tp.close()
    sq.close()

    def size(folder, prefix=""):  # (a database's -wal and -shm too)
        return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(folder) for f in fs if f.startswith(prefix))

    cache, peer = size(tmp_path / "cache"), size(tmp_path, "sq.sqlite")
    assert cache < 0.7 * peer, (cache, peer)
    assert asyncio.run(TapeSession("bench", str(tmp_path / "tape")).get_items()) == items
