"""Issue 13, item 6: TapeSession reads reasoning, keeps get_items cheap and current, and
offers what the SDK's AdvancedSQLiteSession offers, by reference (branches, usage)."""

import asyncio

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, set_tracing_disabled  # noqa: E402
from agents.testing import ScriptedModel, assistant_message  # noqa: E402
from agents.usage import Usage  # noqa: E402

from ctape.integrations.openai_agents import TapeSession  # noqa: E402
from ctape.model.models import HIDDEN  # noqa: E402

from conftest import run_cli  # noqa: E402

set_tracing_disabled(True)


def run(coro):
    return asyncio.run(coro)


def user(text):
    return {"role": "user", "content": text}


def said(text):
    return {"role": "assistant", "content": [{"type": "output_text", "text": text}]}


def test_a_reasoning_item_reads_in_log(tape_dir):
    s = TapeSession("r", tape_dir)
    item = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "The user wants a **short** answer."}]}
    run(s.add_items([user("hi"), item, said("hello")]))
    e = [x for x in s.session.log() if x.meta.get("openai_agents.item", {}).get("type") == "reasoning"][0]
    assert e.kind == "assistant" and e.meta.get(HIDDEN) is True  # kept out of the prompt
    assert e.payload["content"] == "The user wants a **short** answer."
    # hidden from the prompt, so from the default log too (issue 14); `--hidden` shows it readably
    p = run_cli("--dir", tape_dir, "log", "-s", s.name, "--oneline", "--hidden", check=True)
    assert "The user wants a **short** answer." in p.stdout.decode()
    # an encrypted reasoning item without a summary still says what it is
    run(s.add_items([{"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAAA" * 10}]))
    e = list(s.session.log(limit=1))[0]
    assert e.payload["content"] == "[reasoning: 50 characters, encrypted]"
    assert [m["role"] for m in s.session.context(format="openai")] == ["user", "assistant"]


def test_get_items_follows_other_writers_pops_and_branch_switches(tape_dir):
    a = TapeSession("shared", tape_dir)
    b = TapeSession("shared", tape_dir)
    run(a.add_items([user("one"), said("1")]))
    assert run(b.get_items()) == [user("one"), said("1")]
    run(b.add_items([user("two")]))
    assert run(a.get_items()) == [user("one"), said("1"), user("two")]
    assert run(a.pop_item()) == user("two")
    assert run(b.get_items()) == [user("one"), said("1")]
    items = run(a.get_items())
    items[0]["content"] = "changed by the caller"
    assert run(a.get_items())[0] == user("one")  # the caller's copy
    run(a.clear_session())
    assert run(b.get_items()) == []
    assert run(a.get_items(limit=1)) == []


def turns_session(tape_dir, name="adv"):
    s = TapeSession(name, tape_dir)
    for i in range(1, 4):
        run(s.add_items([user(f"question {i}"), said(f"answer {i}")]))
    return s


def test_branch_from_a_turn_is_by_reference(tape_dir):
    s = turns_session(tape_dir)
    turns = run(s.get_conversation_turns())
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert turns[1]["content"] == "question 2"
    name = run(s.create_branch_from_turn(2, "retry"))
    assert name == "retry"
    # the branch holds the turns before turn 2, and the session is on it
    assert run(s.get_items()) == [user("question 1"), said("answer 1")]
    run(s.add_items([user("question 2, asked better"), said("better answer")]))
    branches = {b["branch_id"]: b for b in run(s.list_branches())}
    assert set(branches) == {"main", "retry"}
    assert branches["retry"]["is_current"] and not branches["main"]["is_current"]
    assert branches["main"]["message_count"] == 6 and branches["main"]["user_turns"] == 3
    assert branches["retry"]["message_count"] == 4 and branches["retry"]["user_turns"] == 2
    assert branches["main"]["created_at"] < branches["retry"]["created_at"]
    # nothing was copied: the branch's first entries are main's own
    main_path = [e.hash for e in s.session.log("main")]
    retry_path = [e.hash for e in s.session.log("retry")]
    assert retry_path[-2:] == main_path[-2:]
    run(s.switch_to_branch("main"))
    assert run(s.get_items())[-1] == said("answer 3")
    with pytest.raises(ValueError):
        run(s.switch_to_branch("nope"))
    with pytest.raises(ValueError):
        run(s.create_branch_from_turn(9))
    with pytest.raises(ValueError):
        run(s.create_branch_from_turn(1, "retry"))  # a used name
    found = run(s.find_turns_by_content("question 3"))
    assert [t["turn"] for t in found] == [3]
    auto = run(s.create_branch_from_content("question 3"))
    assert auto in {b["branch_id"] for b in run(s.list_branches())}
    with pytest.raises(ValueError):
        run(s.delete_branch(auto))  # the current branch needs force
    run(s.delete_branch(auto, force=True))
    assert s.session.refs().branch == "main"
    with pytest.raises(ValueError):
        run(s.delete_branch("main"))


def test_branch_from_the_first_turn_starts_empty(tape_dir):
    s = turns_session(tape_dir, "first")
    run(s.create_branch_from_turn(1, "fresh"))
    assert run(s.get_items()) == []
    run(s.add_items([user("start over")]))
    assert run(s.get_items()) == [user("start over")]
    assert {b["branch_id"] for b in run(s.list_branches())} == {"main", "fresh"}


def test_usage_per_run_and_per_session(tape_dir):
    model = ScriptedModel(
        [[assistant_message("hi!")], [assistant_message("still here")], [assistant_message("on a branch")]],
        default_usage=Usage(requests=1, input_tokens=100, output_tokens=20, total_tokens=120),
    )
    agent = Agent(name="a", instructions="be brief", model=model)
    s = TapeSession("usage", tape_dir)
    assert run(s.get_session_usage()) is None
    r = run(Runner.run(agent, "hello", session=s))
    run(s.store_run_usage(r))
    r = run(Runner.run(agent, "again", session=s))
    run(s.store_run_usage(r))
    assert run(s.get_session_usage()) == {"requests": 2, "input_tokens": 200, "output_tokens": 40, "total_tokens": 240, "total_turns": 2}
    turns = run(s.get_turn_usage())
    assert [t["user_turn_number"] for t in turns] == [1, 2]
    assert run(s.get_turn_usage(2))["input_tokens"] == 100
    # the usage record does not enter the items or the prompt
    assert [i.get("role") for i in run(s.get_items())] == ["user", "assistant", "user", "assistant"]
    assert [m["role"] for m in s.session.context(format="openai")] == ["user", "assistant", "user", "assistant"]
    run(s.create_branch_from_turn(2, "alt"))
    r = run(Runner.run(agent, "other", session=s))
    run(s.store_run_usage(r))
    assert run(s.get_session_usage(branch_id="alt"))["requests"] == 1  # its own run: a branch inherits no usage
    assert run(s.get_session_usage(branch_id="main"))["requests"] == 2
    assert run(s.get_session_usage())["requests"] == 3  # every run once


def usage_scenario(s):
    """The same calls on AdvancedSQLiteSession and on TapeSession; what each usage read gives."""

    async def go():
        model = ScriptedModel([[assistant_message(f"answer {i}")] for i in range(12)], default_usage=Usage(requests=1, input_tokens=100, output_tokens=20, total_tokens=120))
        agent = Agent(name="a", instructions="be brief", model=model)
        out = []

        async def read(label):
            out.append((label, "turns", await s.get_turn_usage()))
            out.append((label, "turn 2", await s.get_turn_usage(2)))
            out.append((label, "session", await s.get_session_usage()))
            out.append((label, "session on main", await s.get_session_usage(branch_id="main")))
            out.append((label, "turns on main", await s.get_turn_usage(branch_id="main")))

        out.append(("empty", "turns", await s.get_turn_usage()))
        out.append(("empty", "session", await s.get_session_usage()))
        for q in ["hello", "again", "third"]:
            r = await Runner.run(agent, q, session=s)
            await s.store_run_usage(r)
        r = await Runner.run(agent, "third, once more", session=s)  # a second run in turn 4
        await s.store_run_usage(r)
        await read("three turns")
        await s.create_branch_from_turn(2, "alt")
        await read("new branch")
        for q in ["other", "and more"]:
            r = await Runner.run(agent, q, session=s)
            await s.store_run_usage(r)
        await read("branch with two turns")
        out.append(("branch", "on alt", await s.get_turn_usage(branch_id="alt")))
        out.append(("branch", "unknown branch", await s.get_turn_usage(branch_id="nope")))
        out.append(("branch", "unknown branch session", await s.get_session_usage(branch_id="nope")))
        await s.pop_item()  # the turn keeps its user message: its usage stays
        await read("popped an answer")
        await s.pop_item()  # the turn is empty now: its usage goes
        await read("popped a turn")
        await s.switch_to_branch("main")
        await read("back on main")
        return out

    return run(go())


def test_usage_reads_as_advanced_sqlite_session(tape_dir, tmp_path):
    """Issue 23, item 7: get_turn_usage (and get_session_usage) give what the SDK's
    AdvancedSQLiteSession gives after the same runs, branches and pops."""
    from agents.extensions.memory.advanced_sqlite_session import AdvancedSQLiteSession

    want = usage_scenario(AdvancedSQLiteSession(session_id="u", db_path=str(tmp_path / "adv.db"), create_tables=True))
    got = usage_scenario(TapeSession("u", tape_dir))
    assert [w[:2] for w in want] == [g[:2] for g in got]
    for w, g in zip(want, got):
        assert g == w
        if isinstance(w[2], (list, dict)):  # the same keys in the same order (details: sorted on the tape)
            rows = w[2] if isinstance(w[2], list) else [w[2]]
            rows_g = g[2] if isinstance(g[2], list) else [g[2]]
            assert [list(r) for r in rows_g] == [list(r) for r in rows], w[:2]


def test_get_items_sees_another_process_appends(tape_dir):
    import subprocess
    import sys

    s = TapeSession("proc", tape_dir)
    run(s.add_items([user("one")]))
    assert run(s.get_items()) == [user("one")]
    code = (
        "import asyncio, sys; from ctape.integrations.openai_agents import TapeSession; "
        "s = TapeSession('proc', sys.argv[1]); asyncio.run(s.add_items([{'role': 'user', 'content': 'two'}])); "
        "asyncio.run(s.pop_item()); asyncio.run(s.pop_item()); asyncio.run(s.add_items([{'role': 'user', 'content': 'three'}]))"
    )
    p = subprocess.run([sys.executable, "-c", code, str(tape_dir)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert run(s.get_items()) == [user("three")]
    assert run(TapeSession("proc", tape_dir).get_items()) == [user("three")]


READS_IN_A_NEW_PROCESS = (
    "import asyncio, json, sys; from ctape.integrations.openai_agents import TapeSession; from ctape.tape import Tape\n"
    "reads = []; real = Tape.read_entry\n"
    "def counted(self, h): reads.append(h); return real(self, h)\n"
    "Tape.read_entry = counted\n"
    "s = TapeSession(sys.argv[2], sys.argv[1])\n"
    "print(json.dumps({'items': asyncio.run(s.get_items()), 'reads': len(reads)}))\n"
)


def items_in_a_new_process(tape_dir, name, cache=None):
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, **({"CTAPE_CACHE_DIR": str(cache)} if cache else {}))
    p = subprocess.run([sys.executable, "-c", READS_IN_A_NEW_PROCESS, str(tape_dir), name], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_first_get_items_in_a_new_process_reads_the_path_from_the_index_cache(tape_dir, tmp_path):
    """Issue 13, item 6: the first call in a new process was 7-9x SQLiteSession (it read
    every entry of the path). The items of each entry, with its parent, are kept in the
    index cache, so a new process reads the path in one query and reads one entry."""
    s = TapeSession("cold", tape_dir)
    expected = []
    for i in range(40):
        batch = [user(f"question {i}"), {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                 {"type": "function_call_output", "call_id": "c", "output": f"out {i}"}, said(f"answer {i}")]
        run(s.add_items(batch))
        expected += batch
    got = items_in_a_new_process(tape_dir, "cold")
    assert got["items"] == expected and got["reads"] <= 1
    # another writer's appends, a pop and a branch from a turn: the cache follows the path
    other = TapeSession("cold", tape_dir)
    run(other.add_items([user("from another writer")]))
    assert run(other.pop_item()) == user("from another writer")
    run(other.create_branch_from_turn(30, "retry"))
    run(other.add_items([user("question 30, again")]))
    expected_retry = expected[: 29 * 4] + [user("question 30, again")]
    got = items_in_a_new_process(tape_dir, "cold")
    assert got["items"] == expected_retry and got["reads"] <= 1
    # no cache at all (a new machine, `ctape cache gc`): every entry is read once, then cached
    fresh = tmp_path / "fresh-cache"
    got = items_in_a_new_process(tape_dir, "cold", fresh)
    assert got["items"] == expected_retry and got["reads"] >= len(expected_retry)
    got = items_in_a_new_process(tape_dir, "cold", fresh)
    assert got["items"] == expected_retry and got["reads"] <= 1


def test_cached_rows_that_do_not_link_to_the_path_are_not_used(tape_dir):
    """A row is named by the first 64 bits of a hash: a row found under the head's key that
    is another entry's (or whose chain does not link) is never taken for the path."""
    from ctape.store.index import hash_key
    from ctape.integrations.openai_agents import VIEW, _PATHS

    s = TapeSession("links", tape_dir)
    run(s.add_items([user("one"), said("1"), user("two")]))
    head = s.session.refs().head_hash
    idx = s.tape.store.index
    idx.db.execute("UPDATE views SET hash=? WHERE name=? AND key=?", ("f" * 64, VIEW, hash_key(head)))
    assert idx.view_path(VIEW, head, 10) == []
    _PATHS.clear()  # as in a new process
    assert run(TapeSession("links", tape_dir).get_items()) == [user("one"), said("1"), user("two")]


def test_a_path_cut_inside_a_cached_run_reads_back_to_the_run_start(tape_dir):
    """Issue 25: items added together are one row of the index cache (named by the last
    entry). A pop inside such a run leaves a head with no row of its own: a new process
    reads the entries from there back to the run's start, then the rest in one query."""
    from ctape.integrations.openai_agents import RUN

    s = TapeSession("runs", tape_dir)
    first = [user(f"q{i}") if i % 2 == 0 else said(f"a{i}") for i in range(10)]
    second = [user(f"r{i}") if i % 2 == 0 else said(f"b{i}") for i in range(10)]
    run(s.add_items(first))
    run(s.add_items(second))
    for _ in range(3):
        run(s.pop_item())
    got = items_in_a_new_process(tape_dir, "runs")
    assert got["items"] == first + second[:7]
    assert got["reads"] <= 1 + 7  # the head's seq, then the cut run's 7 entries
    run(s.add_items([user("after the pop")] * (RUN + 5)))  # longer than a row: two rows
    got = items_in_a_new_process(tape_dir, "runs")
    assert got["items"] == first + second[:7] + [user("after the pop")] * (RUN + 5) and got["reads"] <= 1
