"""A cancelled call that changes a TapeSession finishes before the cancellation reaches
the caller, as SQLiteSession's do (a differential audit, 2026-12-03): add_items ran on in
its thread after the cancel returned, and landed after the caller's next call."""

import asyncio
import os

import pytest

pytest.importorskip("agents")

from agents import SQLiteSession  # noqa: E402

from ctape.integrations.openai_agents import TapeSession  # noqa: E402


async def _cancelled_add_then_clear(s):
    await s.add_items([{"role": "user", "content": "old conversation"}])
    big = [{"role": "user", "content": f"{i}" + "q" * 20000} for i in range(200)]
    task = asyncio.create_task(s.add_items(big))
    await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    after_cancel = len(await s.get_items())  # the write finished: all of it or none
    await s.clear_session()
    now = len(await s.get_items())
    await asyncio.sleep(1.5)  # a write still running would land meanwhile
    return after_cancel, now, len(await s.get_items())


def test_a_cancelled_add_items_is_done_before_the_next_call(tmp_path):
    async def main():
        ref = await _cancelled_add_then_clear(SQLiteSession("s", os.path.join(tmp_path, "ref.db")))
        got = await _cancelled_add_then_clear(TapeSession("s", str(tmp_path / "tape")))
        return ref, got

    ref, got = asyncio.run(main())
    assert got[1:] == ref[1:] == (0, 0)
    assert got[0] in (1, 201)


def test_a_cancelled_pop_item_is_done_and_the_item_gone(tmp_path):
    async def main():
        s = TapeSession("s", str(tmp_path / "tape"))
        await s.add_items([{"role": "user", "content": str(i)} for i in range(3)])
        task = asyncio.create_task(s.pop_item())
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return [i["content"] for i in await s.get_items()]

    left = asyncio.run(main())
    assert left in (["0", "1"], ["0", "1", "2"])


def test_limits_and_settings_read_as_sqlite_session_reads_them(tmp_path):
    """A negative limit is no limit (SQLite's LIMIT -1, kept on purpose by the SDK), 0 is
    none, and session_settings may be a dict (the SDK turns it into SessionSettings)."""
    async def main(s):
        await s.add_items([{"role": "user", "content": str(i)} for i in range(3)])
        return [len(await s.get_items(limit=k)) for k in (-1, 0, 2, 9)] + [len(await s.get_items())]

    ref = asyncio.run(main(SQLiteSession("s", os.path.join(tmp_path, "ref.db"), session_settings={"limit": 1})))
    got = asyncio.run(main(TapeSession("s", str(tmp_path / "tape"), session_settings={"limit": 1})))
    assert got == ref == [3, 0, 2, 3, 1]
