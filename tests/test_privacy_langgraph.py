"""LangGraph values that are not JSON (a dataclass, a set, a message with a datetime in it)
are stored as their serde bytes: once base64, where `ctape scan` could not see a token and
push sent it (a privacy audit, 2026-12-03). They are now text scan reads; redacting one
gives the marker in its place, and `get_state` goes on (it raised on base64 it could not
decode)."""

import dataclasses
import datetime
import subprocess
import sys
import textwrap
from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

from ctape.integrations import langgraph as lgmod  # noqa: E402
from ctape.integrations.langgraph import TapeSaver  # noqa: E402

from conftest import run_cli  # noqa: E402
from test_privacy_audit import _remote_holds  # noqa: E402
from test_privacy_sync import holders  # noqa: E402

TOKEN = "ghp_Zq8Lm3Nv7Rt2Xw9Ys4Bk6Hd1Jf5Gc0Pe2Qa7"
CFG = {"configurable": {"thread_id": "t1"}}


@dataclasses.dataclass
class Creds:
    user: str
    token: str


class St(TypedDict):
    messages: Annotated[list, add_messages]
    creds: Creds
    seen: set


def _graph(saver):
    def node(st):
        return {"messages": [AIMessage("logged in")], "creds": Creds("bot", TOKEN), "seen": {TOKEN, "x"}}

    g = StateGraph(St)
    g.add_node("n", node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    return g.compile(checkpointer=saver)


def _state_in_new_process(tape) -> str:
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(__file__.rsplit('/', 1)[0])!r})
        from test_privacy_langgraph import _graph, CFG
        from ctape.integrations.langgraph import TapeSaver
        v = _graph(TapeSaver({str(tape)!r})).get_state(CFG).values
        print(repr(sorted((k, repr(x)) for k, x in v.items())))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def test_a_token_in_a_value_that_is_not_json_is_found_redacted_and_never_pushed(tmp_path):
    tape, remote = tmp_path / "tape", tmp_path / "remote"
    remote.mkdir()
    saver = TapeSaver(str(tape))
    app = _graph(saver)
    app.invoke({"messages": [HumanMessage("hi", additional_kwargs={"sent": datetime.datetime(2026, 12, 3), "auth": TOKEN})]}, CFG)
    assert app.get_state(CFG).values["creds"] == Creds("bot", TOKEN)
    saver.close()
    run_cli("--dir", tape, "remote", "add", "origin", f"file://{remote}", check=True)

    p = run_cli("--dir", tape, "scan")
    assert p.returncode == 1 and b"creds" in p.stdout and b"seen" in p.stdout and b"langgraph.message" in p.stdout
    assert TOKEN.encode() not in p.stdout + p.stderr
    p = run_cli("--dir", tape, "push", "origin")
    assert p.returncode == 1 and b"redact" in p.stderr

    run_cli("--dir", tape, "redact", "--scan", check=True)
    assert run_cli("--dir", tape, "scan").returncode == 0
    run_cli("--dir", tape, "compact", "--expire", "now", "--grace", "now", check=True)
    assert holders(TOKEN.encode(), tape) == []
    shown = _state_in_new_process(tape)
    assert TOKEN not in shown
    assert "('creds', \"'[redacted: github-token]'\")" in shown and "('seen', \"'[redacted: github-token]'\")" in shown
    assert "HumanMessage(content='hi'" in shown and "AIMessage(content='logged in'" in shown  # the messages stay messages
    assert run_cli("--dir", tape, "push", "origin").returncode == 0
    assert not _remote_holds(TOKEN.encode(), remote)
    # the graph goes on from the redacted state
    again = _graph(TapeSaver(str(tape)))
    again.invoke({"messages": [HumanMessage("more")]}, CFG)
    assert [m.content for m in again.get_state(CFG).values["messages"]][-2:] == ["more", "logged in"]


def test_values_written_as_base64_by_an_earlier_version_are_still_read(tmp_path, monkeypatch):
    import base64

    def old_serde(self, v):
        t, b = self.serde.dumps_typed(v)
        return {"s": [t, base64.b64encode(b).decode("ascii")]}

    monkeypatch.setattr(lgmod._Codec, "_serde", old_serde)
    saver = TapeSaver(str(tmp_path / "tape"))
    _graph(saver).invoke({"messages": [HumanMessage("hi")]}, CFG)
    saver.close()
    monkeypatch.undo()
    v = _graph(TapeSaver(str(tmp_path / "tape"))).get_state(CFG).values
    assert v["creds"] == Creds("bot", TOKEN) and v["seen"] == {TOKEN, "x"}
