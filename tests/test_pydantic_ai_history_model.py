"""save_messages / load_messages against a plain list of messages, by stateful property test.

The model is what pydantic-ai itself holds: the conversation as a list. Each sequence
grows it (a turn: a request, tool calls and their returns, a reply), saves it whole
(`all_messages()`) or only the turn (`new_messages()`), rewrites it after a message (a
history processor that drops or edits the tail, then a new turn: a branch), edits a
loaded message in place (which must change nothing stored), saves the same history
again (nothing written), and reloads with this process's history cache dropped. After
every step `load_messages` must give back the model's list, equal message by message,
and the session's branch must be the one it was on (a rewrite keeps the old line on a
`.was-` branch; docs/integrations.md).

Short by default; `CTAPE_SLOW=1` runs many more and longer sequences.
"""

import os

import pytest

pytest.importorskip("pydantic_ai")

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

import ctape.integrations.pydantic_ai as pai  # noqa: E402
from ctape import Tape  # noqa: E402

SLOW = os.environ.get("CTAPE_SLOW") == "1"


def _dumped(msgs):
    return ModelMessagesTypeAdapter.dump_python(list(msgs), mode="json")


class History(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.n = 0
        self.model: list = []

    @initialize(where=st.integers(0, 10**9))
    def start(self, where):
        import tempfile

        self.dir = tempfile.mkdtemp(prefix=f"pai-model-{where}-")
        self.t = Tape.init(os.path.join(self.dir, "tape"))
        self.s = self.t.session("chat")

    def teardown(self):
        import shutil

        if hasattr(self, "t"):
            self.t.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _turn(self, calls: int, args_depth: int) -> list:
        self.n += 1
        i = self.n
        first = [SystemPromptPart("be brief")] if not self.model else []
        out = [ModelRequest(parts=first + [UserPromptPart(f"question {i}")])]
        if calls:
            args = {"q": i}
            for _ in range(args_depth):
                args = {"inner": args, "list": [1, {"k": "v"}]}
            out.append(ModelResponse(parts=[ToolCallPart("lookup", args, tool_call_id=f"c{i}-{k}") for k in range(calls)]))
            out.append(ModelRequest(parts=[ToolReturnPart("lookup", {"rows": [i, k]}, tool_call_id=f"c{i}-{k}") for k in range(calls)]))
        out.append(ModelResponse(parts=[TextPart(f"answer {i}")]))
        return out

    @rule(calls=st.integers(0, 2), depth=st.integers(0, 2), whole=st.booleans())
    def turn(self, calls, depth, whole):
        """A run: all_messages() saved (whole), or new_messages() only."""
        new = self._turn(calls, depth)
        self.model = self.model + new
        pai.save_messages(self.s, self.model if whole else new)

    @precondition(lambda self: len(self.model) >= 2)
    @rule(data=st.data())
    def rewrite(self, data):
        """The history cut after message c (a processor dropped the tail, or edited it),
        then a new turn, saved whole: a branch off message c."""
        branch = self.s.refs().branch
        c = data.draw(st.integers(1, len(self.model) - 1), label="cut after")
        self.model = self.model[:c] + self._turn(1, 0)
        before = {b["name"] for b in self.s.branches()}
        pai.save_messages(self.s, self.model, whole=True)
        assert self.s.refs().branch == branch  # the branch moved to the new line
        assert any(b.startswith(f"{branch}.was-") for b in {b["name"] for b in self.s.branches()} - before)

    @precondition(lambda self: any(isinstance(p, ToolCallPart) for m in self.model for p in m.parts))
    @rule()
    def edit_loaded_in_place(self):
        """A caller changes what it loaded (nested args, a return's content): nothing stored changes."""
        loaded = pai.load_messages(self.s)
        for m in loaded:
            for p in m.parts:
                if isinstance(p, ToolCallPart) and isinstance(p.args, dict):
                    p.args["edited"] = True
                    if isinstance(p.args.get("inner"), dict):
                        p.args["inner"]["edited"] = True
                if isinstance(p, ToolReturnPart) and isinstance(p.content, dict):
                    p.content["rows"].append("edited")

    @precondition(lambda self: self.model)
    @rule(whole=st.booleans())
    def save_again(self, whole):
        """The same history saved again writes nothing."""
        assert pai.save_messages(self.s, self.model, whole=whole) == []

    @rule()
    def drop_cache(self):
        with pai._HISTORIES_LOCK:
            pai._HISTORIES.clear()
        self.t._clear_entries()

    @invariant()
    def loads_the_model(self):
        if hasattr(self, "s"):
            assert _dumped(pai.load_messages(self.s)) == _dumped(self.model)


History.TestCase.settings = settings(
    max_examples=150 if SLOW else 10,
    stateful_step_count=30 if SLOW else 12,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
test_save_and_load_against_a_list = History.TestCase
