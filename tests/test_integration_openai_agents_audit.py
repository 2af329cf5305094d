"""TapeSession against the SDK's SQLiteSession on what a differential audit found
(2026-12-03): a cancelled add_items ran on in its thread after the cancel returned and
landed after the caller's next call; limits and settings read differently; items
SQLiteSession stores (a lone surrogate, NaN, deep nesting) were refused."""

import asyncio
import json
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


def _deep(n):
    v = "bottom"
    for _ in range(n):
        v = [v]
    return v


def test_items_the_tape_cannot_hold_as_values_are_kept_exactly(tmp_path):
    """SQLiteSession stores what json.dumps writes: a lone surrogate (a model output cut
    inside an emoji), NaN, nesting past the tape's 100 levels. TapeSession refused them,
    and a Runner.run failed after the model had answered, leaving half a turn."""
    import json
    import math
    import subprocess
    import sys

    items = [{"role": "user", "content": "hi"},
             {"role": "assistant", "content": "here is a smile \ud83d", "type": "message"},
             {"type": "function_call_output", "call_id": "c1", "output": json.dumps({"x": 1}), "score": math.nan},
             {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}", "deep": _deep(150)},
             {"role": "user", "content": "after"}]

    async def main(s):
        await s.add_items(items)
        return await s.get_items()

    ref = asyncio.run(main(SQLiteSession("s", os.path.join(tmp_path, "ref.db"))))
    got = asyncio.run(main(TapeSession("s", str(tmp_path / "tape"))))
    dump = lambda v: json.dumps(v, ensure_ascii=True)  # NaN == NaN as text
    assert dump(got) == dump(ref) == dump(items)
    code = ("import asyncio, json, sys; from ctape.integrations.openai_agents import TapeSession; "
            "print(json.dumps(asyncio.run(TapeSession('s', sys.argv[1]).get_items()), ensure_ascii=True, sort_keys=True))")
    for env in ({}, {"CTAPE_CACHE_DIR": str(tmp_path / "other-cache")}):  # the index cache's rows, and the entries
        # (without the cache's rows, items come back with their keys sorted: docs/integrations.md)
        p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "tape")], capture_output=True, text=True, env={**os.environ, **env})
        assert p.returncode == 0 and p.stdout.strip() == json.dumps(items, ensure_ascii=True, sort_keys=True), p.stderr[-2000:]
    shown = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(tmp_path / "tape"), "log", "-s", "s"], capture_output=True, text=True)
    assert shown.returncode == 0 and "here is a smile" in shown.stdout and "after" in shown.stdout
    p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(tmp_path / "tape"), "fsck"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr

    async def pop():
        s = TapeSession("s", str(tmp_path / "tape"))
        return [await s.pop_item() for _ in range(2)]

    sdump = lambda v: json.dumps(v, ensure_ascii=True, sort_keys=True)
    assert sdump(asyncio.run(pop())) == sdump([items[4], items[3]])


def test_an_item_kept_as_text_with_a_secret_is_redacted_and_still_read(tmp_path):
    import subprocess
    import sys

    token = "ghp_" + "Zq8Lm3Nv7Rt2Xw9Ys4Bk6Hd1Jf5Gc0Pe2Qa7"
    items = [{"role": "user", "content": "hi"},
             {"role": "assistant", "content": f"the token is {token} \ud83d", "type": "message"},
             {"role": "user", "content": "thanks"}]

    async def add():
        s = TapeSession("s", str(tmp_path / "tape"))
        await s.add_items(items)
        return s

    s = asyncio.run(add())
    run = lambda *a: subprocess.run([sys.executable, "-m", "ctape", "--dir", str(tmp_path / "tape"), *a], capture_output=True, text=True)
    assert run("scan").returncode == 1
    assert run("redact", "--scan").returncode == 0 and run("scan").returncode == 0
    got = asyncio.run(s.get_items())  # the same session object: it reads the path again
    assert [i.get("role") for i in got] == ["user", "assistant", "user"]
    assert token not in json.dumps(got) and "[redacted: " in json.dumps(got)
    code = ("import asyncio, json, sys; from ctape.integrations.openai_agents import TapeSession; "
            "print(json.dumps(asyncio.run(TapeSession('s', sys.argv[1]).get_items())))")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "tape")], capture_output=True, text=True)
    assert p.returncode == 0 and token not in p.stdout and len(json.loads(p.stdout)) == 3, p.stderr[-2000:]


def test_session_settings_are_refused_as_sqlite_session_refuses_them(tmp_path):
    for bad in ({"bogus": 1}, 5):
        for make in (lambda b: SQLiteSession("s", os.path.join(tmp_path, "ref.db"), session_settings=b),
                     lambda b: TapeSession("s", str(tmp_path / "tape"), session_settings=b)):
            with pytest.raises(TypeError):
                make(bad)


def test_items_sqlite_session_takes_with_content_no_message_has_are_kept(tmp_path):
    """A chat-style assistant turn with tool calls has `"content": null`; SQLiteSession
    also keeps content that is a number or an object, no content, and an item that is no
    object. TapeSession refused the first ones (InvalidInput) and raised AttributeError on
    the last (an audit of 2026-12-04). Now each is kept as it was given, shown as its text."""
    import subprocess
    import sys

    items = [{"role": "user", "content": "hi"},
             {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
             {"role": "user", "content": 5}, {"role": "user", "content": {"text": "x"}}, {"role": "user"},
             "not an object", ["a", "list"],
             {"role": "user", "content": "after"}]

    async def main(s):
        await s.add_items(items)
        got = await s.get_items()
        popped = await s.pop_item()
        return got, popped, await s.get_items()

    ref = asyncio.run(main(SQLiteSession("s", os.path.join(tmp_path, "ref.db"))))
    got = asyncio.run(main(TapeSession("s", str(tmp_path / "tape"))))
    sdump = lambda v: json.dumps(v, sort_keys=True)  # (key order: see the test above)
    assert sdump(got) == sdump(ref), (got, ref)
    assert got[0] == items
    for cmd in (["log", "-s", "s"], ["context", "-s", "s"], ["fsck"]):
        p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(tmp_path / "tape"), *cmd], capture_output=True, text=True)
        assert p.returncode == 0 and "Traceback" not in p.stderr, (cmd, p.stderr)


_TWO_PROCESSES = r"""
import asyncio, json, sys
from ctape.integrations.openai_agents import TapeSession
path, role, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
async def main():
    s, popped = TapeSession("shared", path), []
    for i in range(n):
        if role == "adder":
            await s.add_items([{"role": "user", "content": f"item-{i}"}])
        else:
            p = await s.pop_item()
            if p is not None:
                popped.append(p["content"])
            await s.add_items([{"role": "user", "content": f"p-{i}"}])
    print(json.dumps(popped))
asyncio.run(main())
"""


def test_pop_item_in_one_process_keeps_what_another_adds_meanwhile(tmp_path):
    """(audit, 2026-12-06) pop_item() read HEAD before it took the session's lock, then
    moved the branch back to that HEAD's parent: items another process added in between
    fell off the branch (58 and 64 of 260 in the audit's runs), and two pops could return
    one item. SQLiteSession's pop is one DELETE and loses none. Now every item is either
    in the session or returned by exactly one pop."""
    import subprocess
    import sys

    path = str(tmp_path / "tape")
    seeds = [{"role": "user", "content": f"seed-{i}"} for i in range(20)]
    asyncio.run(TapeSession("shared", path).add_items(seeds))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, "-c", _TWO_PROCESSES, path, role, str(n)], stdout=subprocess.PIPE, text=True, env=env)
             for role, n in (("adder", 80), ("popper", 50))]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    popped = [x for out in outs for x in json.loads(out)]
    left = [i["content"] for i in asyncio.run(TapeSession("shared", path).get_items())]
    added = [s["content"] for s in seeds] + [f"item-{i}" for i in range(80)] + [f"p-{i}" for i in range(50)]
    assert len(popped) == len(set(popped)) == 50  # each pop returned an item of its own
    assert sorted(left + popped) == sorted(added), sorted(set(added) - set(left) - set(popped))


def test_items_keep_their_keys_order_after_a_pop_in_this_process_and_the_next(tmp_path):
    """(audit, 2026-12-06) After pop_item(), the popped item and the items before it came
    back with their keys sorted (read from the entries, which store canonical JSON), in
    the same process: 12 of 30 random sequences differed from SQLiteSession, and a
    provider's prompt cache keys on the exact bytes. Now a pop returns the item as given
    and leaves a row of the index cache at the new tip, which a new process reads too."""
    import subprocess
    import sys

    a = {"type": "function_call_output", "call_id": "call_1", "output": "r1"}
    b = {"role": "user", "content": "hello"}
    c = {"type": "function_call", "call_id": "call_2", "name": "f", "arguments": "{}"}
    path = str(tmp_path / "tape")

    async def main():
        s = TapeSession("s", path)
        await s.add_items([dict(a), dict(b)])
        popped = await s.pop_item()
        await s.add_items([dict(c)])
        return popped, await s.get_items()

    popped, items = asyncio.run(main())
    assert json.dumps(popped) == json.dumps(b)
    assert json.dumps(items) == json.dumps([a, c])
    code = ("import asyncio, json, sys; from ctape.integrations.openai_agents import TapeSession; "
            "print(json.dumps(asyncio.run(TapeSession('s', sys.argv[1]).get_items())))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == json.dumps([a, c])


def test_an_int_session_id_is_taken_as_sqlite_session_takes_it(tmp_path):
    """SQLiteSession(5, path) works (its TEXT column stores '5'); TapeSession(5, path)
    raised a bare ValueError, so swapping one for the other broke apps with numeric ids."""
    path = str(tmp_path / "tape")

    async def main():
        await TapeSession(5, path).add_items([{"role": "user", "content": "five"}])
        return await TapeSession("5", path).get_items()

    assert asyncio.run(main()) == [{"role": "user", "content": "five"}]
