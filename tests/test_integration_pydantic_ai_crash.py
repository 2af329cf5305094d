"""Issue 23, item 7: a pydantic-ai run killed (kill -9) while a tool runs.

The model's response with the tool call is on the tape; its result never came. The next
prompt failed with pydantic-ai's "unprocessed tool calls" until `run_sync()` was called
without one. Now a run with a new prompt closes the calls the crash left unanswered (with
pydantic-ai's own repair: an `interrupted` tool return, saved on the tape), and a run
without a prompt still resumes them. Calls a run deferred on purpose
(`DeferredToolRequests`) are left for `deferred_tool_results`, as pydantic-ai leaves them.
Real processes, killed for real.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults  # noqa: E402
from pydantic_ai.exceptions import UserError  # noqa: E402
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402

from ctape import Tape  # noqa: E402
from ctape.integrations.pydantic_ai import TapeHistory, load_messages  # noqa: E402

from conftest import run_cli  # noqa: E402

CHILD = r"""
import pathlib, sys, time
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel
from ctape import Tape
from ctape.integrations.pydantic_ai import TapeHistory

tape = Tape.open(sys.argv[1])
agent = Agent(TestModel(call_tools=["deploy"]), capabilities=[TapeHistory(tape.session("pai"))])

@agent.tool_plain
def deploy(target: str) -> str:
    pathlib.Path(sys.argv[2]).write_text("deploying")
    time.sleep(120)
    return "deployed"

agent.run_sync("deploy the site")
"""


def agent_for(tape_dir, model=None):
    tape = Tape.open(tape_dir)
    s = tape.session("pai")
    agent = Agent(model or TestModel(call_tools=[]), capabilities=[TapeHistory(s)])

    @agent.tool_plain
    def deploy(target: str) -> str:
        return "deployed"

    return tape, s, agent


def killed_in_a_tool(tape_dir, tmp_path):
    Tape.init(tape_dir).close()
    flag = tmp_path / "in-the-tool"
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(tape_dir), str(flag)], stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while not flag.exists():
        assert p.poll() is None, p.stderr.read().decode()[-2000:]
        assert time.time() < deadline, "the child never reached the tool"
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    p.stderr.close()


def test_a_new_prompt_after_a_kill_in_a_tool_closes_the_call(tape_dir, tmp_path):
    killed_in_a_tool(tape_dir, tmp_path)
    tape, s, agent = agent_for(tape_dir)
    before = load_messages(s)
    assert isinstance(before[-1], ModelResponse) and before[-1].tool_calls  # the call, no result
    assert "deploy" in run_cli("--dir", tape_dir, "status", "-s", "pai", check=True).stdout.decode()  # pending
    result = agent.run_sync("what happened?")
    msgs = result.all_messages()
    assert msgs[: len(before)] == before
    closing = msgs[len(before)]
    assert isinstance(closing, ModelRequest)
    ret = [p for p in closing.parts if isinstance(p, ToolReturnPart)]
    assert [r.tool_call_id for r in ret] == [before[-1].tool_calls[0].tool_call_id]
    assert ret[0].outcome == "interrupted"
    # the closing is on the tape: the call is no longer pending, the next run reads on
    assert load_messages(s) == msgs
    assert "pending tool calls" not in run_cli("--dir", tape_dir, "status", "-s", "pai", check=True).stdout.decode()
    assert agent.run_sync("and now?").output
    assert run_cli("--dir", tape_dir, "fsck").returncode == 0
    tape.close()


def test_a_run_without_a_prompt_after_a_kill_still_runs_the_call(tape_dir, tmp_path):
    killed_in_a_tool(tape_dir, tmp_path)
    tape, s, agent = agent_for(tape_dir)
    result = agent.run_sync()
    returns = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [(r.content, r.outcome) for r in returns] == [("deployed", "success")]
    assert load_messages(s) == result.all_messages()
    tape.close()


def test_deferred_calls_are_left_for_their_results(tape_dir):
    """A run that ended in DeferredToolRequests is not a crash: its calls wait for
    deferred_tool_results, and a new prompt is refused as pydantic-ai refuses it."""
    tape = Tape.init(tape_dir)
    s = tape.session("pai")
    agent = Agent(TestModel(), output_type=[str, DeferredToolRequests], capabilities=[TapeHistory(s)])

    @agent.tool_plain(requires_approval=True)
    def send_mail(to: str) -> str:
        return f"sent to {to}"

    r = agent.run_sync("mail bob")
    assert isinstance(r.output, DeferredToolRequests)
    with pytest.raises(UserError, match="unprocessed tool calls"):
        agent.run_sync("something else")
    call = r.output.approvals[0]
    done = agent.run_sync(deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: True}))
    returns = [p for m in done.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [p.outcome for p in returns] == ["success"]
    assert load_messages(s) == done.all_messages()
    assert isinstance(load_messages(s)[1].parts[0], ToolCallPart)
    tape.close()
