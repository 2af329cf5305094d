"""TapeSession against the SDK's own SQLiteSession as the model, by stateful property test.

Each sequence runs the same calls on both: add_items (items of the shapes agents write,
their keys in the order given, a large output that becomes a blob), get_items with and
without a limit, pop_item, clear_session, and "reopen" (a new TapeSession on the same
path; or this process's path cache dropped, as a new process on this machine starts:
it then reads the index cache's rows). Every answer must be the model's to the byte: the
same items, in the same order, each item's keys in the order given (a provider's prompt
cache keys on the exact bytes; docs/integrations.md, "Key order").

The default run is short; `CTAPE_SLOW=1` runs many more and longer sequences. Found by
a random sequence like these (2026-12-06): a pop gave its item, and the items left,
with their keys sorted.
"""

import asyncio
import json
import os

import pytest

pytest.importorskip("agents")

from agents import SQLiteSession  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule  # noqa: E402

import ctape.integrations.openai_agents as oa  # noqa: E402

SLOW = os.environ.get("CTAPE_SLOW") == "1"


def _item(shape: int, i: int) -> dict:
    """An item of a shape agents write; the keys in the order the SDK gives them (unsorted)."""
    return [
        lambda: {"role": "user", "content": f"question {i}"},
        lambda: {"type": "message", "role": "assistant", "id": f"msg_{i}", "status": "completed",
                 "content": [{"type": "output_text", "text": f"answer {i}", "annotations": []}]},
        lambda: {"type": "function_call", "call_id": f"call_{i}", "name": "lookup", "arguments": json.dumps({"q": i}), "id": f"fc_{i}"},
        lambda: {"type": "function_call_output", "call_id": f"call_{i}", "output": f"result {i}"},
        lambda: {"type": "function_call_output", "call_id": f"call_{i}", "output": f"{i} " + "log line\n" * 300},  # a blob
        lambda: {"type": "reasoning", "id": f"rs_{i}", "summary": [{"type": "summary_text", "text": f"thinking {i}"}]},
        lambda: {"role": "system", "content": f"sys {i}", "zeta": {"z": 1, "a": [1.5, None, True]}},
    ][shape]()


class AgentsSession(RuleBasedStateMachine):
    """One session on a tape and the same calls on SQLiteSession; compared after each."""

    def __init__(self):
        super().__init__()
        self.n = 0

    @initialize(where=st.integers(0, 10**9))
    def start(self, where):
        import tempfile

        self.dir = tempfile.mkdtemp(prefix=f"agents-model-{where}-")
        self.path = os.path.join(self.dir, "tape")
        self.tape = oa.TapeSession("s", self.path)
        self.model = SQLiteSession("s", os.path.join(self.dir, "model.db"))

    def teardown(self):
        import shutil

        if hasattr(self, "dir"):
            self.model.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def both(self, call):
        return asyncio.run(call(self.tape)), asyncio.run(call(self.model))

    @rule(shapes=st.lists(st.integers(0, 6), min_size=1, max_size=3))
    def add(self, shapes):
        items = []
        for s in shapes:
            self.n += 1
            items.append(_item(s, self.n))
        self.both(lambda x: x.add_items([dict(i) for i in items]))

    @rule(limit=st.sampled_from([None, 0, 1, 2, 5]))
    def get(self, limit):
        got, want = self.both(lambda x: x.get_items(limit))
        assert json.dumps(got) == json.dumps(want), (limit, got, want)

    @rule()
    def pop(self):
        got, want = self.both(lambda x: x.pop_item())
        assert json.dumps(got) == json.dumps(want), (got, want)

    @rule()
    def clear(self):
        self.both(lambda x: x.clear_session())

    @rule(drop_cache=st.booleans())
    def reopen(self, drop_cache):
        """A new TapeSession object (apps make one per request); with drop_cache, as a new
        process on this machine: its items come from the index cache's rows."""
        if drop_cache:
            with oa._PATHS_LOCK:
                oa._PATHS.clear()
        self.tape = oa.TapeSession("s", self.path)

    @invariant()
    def same_items(self):
        if hasattr(self, "tape"):
            got, want = self.both(lambda x: x.get_items())
            assert json.dumps(got) == json.dumps(want), (got, want)


AgentsSession.TestCase.settings = settings(
    max_examples=200 if SLOW else 12,
    stateful_step_count=40 if SLOW else 15,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
test_agents_session_against_sqlite_session = AgentsSession.TestCase
