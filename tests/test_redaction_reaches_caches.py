"""A redaction reaches every value derived from what it removed (SPEC 18: "reads show
[redacted] ... caches and indexes drop it"): the derived values kept as keyframes (state,
a session's title), a writer's own running values, and the integrations' caches (the
Agents SDK's item list, LangGraph's saver, pydantic-ai's histories), whether the redaction
is made in this process, by another process on the same cache, or by one with a cache
of its own (it then arrives through the tape's files).

Each read is checked twice: in the process that held the values, and in a new process.
The cache file is checked for the secret in the rows derived from entries (keyframes,
views), which are plain JSON there."""

import asyncio
import json
import os
import secrets
import string
import sqlite3
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ctape import Tape
from ctape.history.derived import KEY_EVERY
from ctape.ops.redact import redact_pattern

from conftest import run_cli


def _secret() -> str:
    return "AKIA" + "".join(secrets.choice(string.ascii_uppercase + string.digits) for _ in range(16))


PATTERN = "AKIA[A-Z0-9]{16}"


def _derived_rows(t: Tape) -> list[str]:
    """Every keyframe and view body in the tape's index cache (after its pending rows)."""
    idx = t.store.index
    idx.sync()
    rows = [b for (b,) in idx.db.execute("SELECT body FROM keyframes")]
    rows += [idx._unpacked(b) or "" for (b,) in idx.db.execute("SELECT body FROM views")]  # (long ones compressed)
    return rows


def _cli_state(d, session) -> str:
    return run_cli("--dir", str(d), "state", "-s", session, check=True).stdout.decode()


def _redact_elsewhere(d, own_cache=None):
    """`ctape redact --pattern` in another process: on this test's cache, or on one of its own."""
    env = dict(os.environ)
    if own_cache is not None:
        env["CTAPE_CACHE_DIR"] = str(own_cache)
    p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(d), "redact", "--pattern", PATTERN],
                       capture_output=True, env=env)
    assert p.returncode == 0, p.stderr


def _secret_in_state(d, secret: str, first: str, appends: int):
    """A new tape at d whose session "chat" starts with a user entry `first` whose delta
    sets {"creds": secret}, then `appends` assistant entries; (tape, session)."""
    t = Tape.init(d)
    s = t.session("chat")
    s.append("user", {"content": first}, delta={"creds": secret})
    for i in range(appends):
        s.append("assistant", {"content": f"step {i}"})
    return t, s


# -- keyframes and the writer's own values -----------------------------------------------------


@pytest.mark.parametrize("pending", [True, False], ids=["keyframe-not-applied", "keyframe-in-cache"])
def test_a_keyframe_folded_before_the_redaction_is_not_read_after_it(tmp_path, pending):
    d = tmp_path / "t"
    secret = _secret()
    t, s = _secret_in_state(d, secret, f"deploy with {secret}", KEY_EVERY + 44)
    if not pending:
        t.store.index.sync()
    redact_pattern(t, PATTERN)
    assert s.state() == {"creds": "[redacted: pattern]"}
    assert not [r for r in _derived_rows(t) if secret in r]
    t.close()
    assert secret not in _cli_state(d, "chat")
    assert secret not in run_cli("--dir", str(d), "sessions", check=True).stdout.decode()


@pytest.mark.parametrize("where", ["this process", "another process", "another cache"])
def test_appends_after_a_redaction_do_not_write_the_text_back_into_keyframes(tmp_path, where):
    """The writer folded the secret into its running values before the redaction; the
    keyframes it writes after must come from the redacted entries."""
    d = tmp_path / "t"
    secret = _secret()
    t, s = _secret_in_state(d, secret, f"deploy with {secret}", 100)
    if where == "this process":
        redact_pattern(t, PATTERN)
    else:
        _redact_elsewhere(d, tmp_path / "other-cache" if where == "another cache" else None)
    for i in range(2 * KEY_EVERY):
        s.append("assistant", {"content": f"more {i}"})
    assert s.state() == {"creds": "[redacted: pattern]"}
    assert not [r for r in _derived_rows(t) if secret in r]
    t.close()
    assert secret not in _cli_state(d, "chat")
    assert secret not in run_cli("--dir", str(d), "sessions", check=True).stdout.decode()


def test_an_importer_s_kept_values_are_dropped_by_a_redaction(tmp_path):
    """Tape._remember_derived keeps values by entry hash: a redaction makes them stale."""
    d = tmp_path / "t"
    secret = _secret()
    t = Tape.init(d)
    s = t.session("chat")
    e = s.append("user", {"content": "hi"}, delta={"creds": secret})
    t._remember_derived(e.hash, t.derived(e.hash))
    assert t.derived(e.hash)["state"] == {"creds": secret}
    _redact_elsewhere(d)
    assert t.derived(e.hash)["state"] == {"creds": "[redacted: pattern]"}
    t.close()


# -- integrations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["this process", "another process", "another cache"])
def test_agents_session_items_show_a_redaction(tmp_path, where):
    from ctape.integrations.openai_agents import TapeSession

    d = tmp_path / "t"
    secret = _secret()

    async def go():
        s = TapeSession("chat", str(d))
        await s.add_items([{"role": "user", "content": f"my key is {secret}"}, {"role": "assistant", "content": "noted"}])
        assert secret in json.dumps(await s.get_items())
        if where == "this process":
            redact_pattern(s.tape, PATTERN)
        else:
            _redact_elsewhere(d, tmp_path / "other-cache" if where == "another cache" else None)
        got = await s.get_items()
        assert got[0]["content"] == "[redacted: pattern]", got
        assert secret not in json.dumps(await TapeSession("chat", str(d)).get_items())
        await s.add_items([{"role": "user", "content": "and now?"}])
        got = await s.get_items()
        assert secret not in json.dumps(got) and [i["content"] for i in got][1:] == ["noted", "and now?"]
        assert not [r for r in _derived_rows(s.tape) if secret in r]
        s.close()

    asyncio.run(go())
    p = subprocess.run(
        [sys.executable, "-c", f"import asyncio, json; from ctape.integrations.openai_agents import TapeSession; "
         f"print(json.dumps(asyncio.run(TapeSession('chat', {str(d)!r}).get_items())))"],
        capture_output=True, check=True,
    )
    assert secret.encode() not in p.stdout and b"[redacted: pattern]" in p.stdout


def test_langgraph_saver_reads_a_redaction_and_does_not_write_the_secret_back(tmp_path):
    pytest.importorskip("langgraph")
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from ctape.integrations.langgraph import TapeSaver

    def agent(state):
        return {"messages": [AIMessage(f"echo {len(state['messages'])}")]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    d = tmp_path / "t"
    secret = _secret()
    saver = TapeSaver(str(d))
    graph = g.compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "1"}}
    graph.invoke({"messages": [HumanMessage(f"my key is {secret}")]}, cfg)
    assert secret in graph.get_state(cfg).values["messages"][0].content
    _redact_elsewhere(d)
    assert graph.get_state(cfg).values["messages"][0].content == "[redacted: pattern]"
    graph.invoke({"messages": [HumanMessage("go on")]}, cfg)  # the same saver, the same process
    msgs = graph.get_state(cfg).values["messages"]
    assert [m.content for m in msgs] == ["[redacted: pattern]", "echo 1", "go on", "echo 3"]
    assert not [r for r in _derived_rows(saver.tape) if secret in r]
    saver.close()
    # the tape holds the secret nowhere a read reaches: scan finds nothing new to redact
    p = run_cli("--dir", str(d), "scan", "--json")
    assert p.returncode == 0, p.stdout


def test_pydantic_ai_history_reads_a_redaction_and_saving_again_writes_nothing(tmp_path):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from ctape.integrations.pydantic_ai import load_messages, save_messages

    d = tmp_path / "t"
    secret = _secret()
    t = Tape.init(d)
    s = t.session("pai")
    agent = Agent(TestModel(custom_output_text="ok"))
    r1 = agent.run_sync(f"my key is {secret}", message_history=load_messages(s))
    save_messages(s, r1.new_messages())
    assert secret in repr(load_messages(s))
    _redact_elsewhere(d)
    assert secret not in repr(load_messages(s))
    n = len(list(s.log()))
    # the agent still holds the secret in memory: saving its whole history again writes nothing
    assert save_messages(s, r1.all_messages()) == []
    r2 = agent.run_sync("again", message_history=r1.all_messages())
    new = save_messages(s, r2.all_messages())
    assert len(list(s.log())) == n + len(new) and new and all(secret not in json.dumps([e.payload, e.meta]) for e in new)
    assert list(s.refs().branches) == ["main"]
    t.close()
    p = run_cli("--dir", str(d), "scan", "--json")
    assert p.returncode == 0, p.stdout


# -- a sequence of appends, redactions and reads against a model --------------------------------------


class RedactionsReachDerivedValues(RuleBasedStateMachine):
    """Appends (secrets in a title, a delta, a payload; keyframes crossed), redactions in
    this process or another, and reads by this process's tape, a second tape object and a
    new index: no read shows a secret once it is redacted, and no keyframe or view holds one.
    The model: the secrets written, and those redacted."""

    def __init__(self):
        super().__init__()
        import tempfile

        self.tmp = tempfile.mkdtemp(prefix="ctape-redact-model-")
        self.d = os.path.join(self.tmp, "t")
        self.t = Tape.init(self.d)
        self.written: list[str] = []
        self.redacted: set[str] = set()
        self.n = 0

    @initialize()
    def first(self):
        secret = _secret()
        self.written.append(secret)
        self.t.session("s0").append("user", {"content": f"start {secret}"}, delta={"k0": secret})

    @rule(session=st.sampled_from(["s0", "s1"]), count=st.sampled_from([2, KEY_EVERY // 2, KEY_EVERY]), with_secret=st.booleans(),
          batch=st.booleans())
    def append(self, session, count, with_secret, batch):
        s = self.t.session(session)
        secret = _secret() if with_secret else None
        if secret:
            self.written.append(secret)

        def go():
            for i in range(count):
                self.n += 1
                delta = {f"k{self.n}": secret} if secret and i == 0 else None
                s.append("user" if i == 0 else "assistant", {"content": f"m{self.n} {secret if secret and i == 0 else ''}"}, delta=delta)

        if batch:
            with self.t.batch():
                go()
        else:
            go()

    @rule(elsewhere=st.booleans())
    def redact(self, elsewhere):
        if elsewhere:
            _redact_elsewhere(self.d)
        else:
            redact_pattern(self.t, PATTERN)
        self.redacted = set(self.written)

    @rule()
    def apply_index(self):
        self.t.store.index.sync()

    @invariant()
    def no_read_shows_a_redacted_secret(self):
        if not self.redacted:
            return
        other = Tape.open(self.d)
        try:
            for t in (self.t, other):
                for name in ("s0", "s1"):
                    s = t.session(name)
                    if not s.exists():
                        continue
                    shown = json.dumps(s.state()) + json.dumps(t.derived(s.refs().head_hash)["about"])
                    leaked = [x for x in self.redacted if x in shown]
                    assert not leaked, (name, shown)
            rows = _derived_rows(self.t)
            assert not [x for x in self.redacted for r in rows if x in r]
        finally:
            other.close()

    def teardown(self):
        self.t.close()
        import shutil

        shutil.rmtree(self.tmp, ignore_errors=True)


RedactionsReachDerivedValues.TestCase.settings = settings(
    max_examples=int(os.environ.get("CTAPE_REDACT_EXAMPLES", 300 if os.environ.get("CTAPE_SLOW") else 40)),
    stateful_step_count=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_redactions_reach_derived_values = RedactionsReachDerivedValues.TestCase


def test_a_cache_written_before_this_fix_drops_its_derived_rows_once(tmp_path):
    """Keyframes and views an older ctape folded from redacted text are deleted the first
    time the cache is opened; a cache without redactions keeps them."""
    d = tmp_path / "t"
    secret = _secret()
    t, s = _secret_in_state(d, secret, "hi", KEY_EVERY)
    idx = t.store.index
    idx.sync()
    path = idx.path
    assert idx.db.execute("SELECT count(*) FROM keyframes").fetchone()[0] == 1
    t.close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("DELETE FROM meta WHERE key='derived-after-redactions'")  # as an older ctape left it
    db.close()
    t = Tape.open(d)
    assert t.store.index.db.execute("SELECT count(*) FROM keyframes").fetchone()[0] == 1  # no redactions: kept
    redact_pattern(t, PATTERN)
    t.close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("INSERT INTO keyframes VALUES(1, ?)", (json.dumps({"state": {"creds": secret}}),))  # a stale row
    db.execute("DELETE FROM meta WHERE key='derived-after-redactions'")
    db.close()
    t = Tape.open(d)
    assert t.store.index.db.execute("SELECT count(*) FROM keyframes").fetchone()[0] == 0
    t.close()


def test_serve_pages_show_a_redaction_made_while_the_server_runs(tmp_path):
    """`ctape serve` keeps titles and trees between requests: a redaction reaches them."""
    import http.client
    import threading

    from ctape.web import make_server

    d = tmp_path / "t"
    secret = _secret()
    t = Tape.init(d)
    s = t.session("chat")
    s.append("user", {"content": f"use {secret} to deploy"})
    s.append("anchor", {"name": f"key {secret}"})
    s.append("assistant", {"content": "done"})
    httpd = make_server(t, "127.0.0.1", 0)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    port = httpd.server_address[1]

    def page(path):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
        r = c.getresponse()
        body = r.read().decode("utf-8", "replace")
        c.close()
        assert r.status == 200, (path, r.status)
        return body

    try:
        pages = ("/", "/s/chat", "/s/chat/tree")
        before = [page(p) for p in pages]
        assert all(secret in b for b in before[1:]), "the pages show the secret before"
        _redact_elsewhere(d)
        for p in pages:
            assert secret not in page(p), p
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.close()


def test_stats_counts_a_redacted_entry_after_compact_as_an_entry(tmp_path):
    """Found by the sync model's RedactWorld: compact keeps a redacted entry in its withheld
    form, and `stats` counted it as a blob."""
    d = tmp_path / "t"
    t = Tape.init(d)
    s = t.session("chat")
    s.append("user", {"content": f"key {_secret()}"})
    s.append("assistant", {"content": "ok"})
    redact_pattern(t, PATTERN)
    before = t.stats()
    t.compact(expire="now", grace="now")
    after = t.stats()
    t.close()
    assert (before["entries"], before["blobs"]) == (2, 0)
    assert (after["entries"], after["blobs"]) == (2, 0), after


def test_a_keyframe_folded_before_another_process_redacts_is_not_written_after(tmp_path):
    """The race the index guards inside its write transaction: this process folds a keyframe
    holding the text and has not applied it yet; another process redacts (its transaction
    deletes the keyframes there are); this process's apply then must not write its own."""
    d = tmp_path / "t"
    secret = _secret()
    t, s = _secret_in_state(d, secret, "hi", KEY_EVERY)
    idx = t.store.index
    assert idx.pending_keyframes, "the keyframe is still pending"
    _redact_elsewhere(d)
    idx.sync()
    assert not [r for r in _derived_rows(t) if secret in r]
    assert s.state() == {"creds": "[redacted: pattern]"}
    t.close()
    assert secret not in _cli_state(d, "chat")
