"""Issue 25 (integrations): what a new process's first get_state on a long LangGraph thread
does besides reading it, checked by its effects (never by the clock).

A thread's index is tens of thousands of objects that all stay. Built with the cyclic
collector paused, they used to be left in the young generation, and the first collection
after the pause visited every one of them (30-40 ms of a 1,000-step thread's first read).
They now go to the oldest generation at once; the collector's state is otherwise as the
application left it (enabled or not, and what it froze stays frozen).
"""

import json
import subprocess
import sys

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

from ctape.integrations.langgraph import TapeSaver  # noqa: E402


def chat(saver):
    g = StateGraph(MessagesState)
    g.add_node("agent", lambda s: {"messages": [AIMessage(f"reply {len(s['messages'])}: the build passed, 412 tests.")]})
    g.add_edge(START, "agent")
    return g.compile(checkpointer=saver)


FIRST_READ = """
import gc, json, sys
from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph
from ctape.integrations.langgraph import TapeSaver
mode = sys.argv[2]
keep = [[i] for i in range(1000)]  # the application's own objects
if mode == "frozen":
    gc.freeze()  # as a server does before it forks
if mode == "disabled":
    gc.disable()
frozen = gc.get_freeze_count()
saver = TapeSaver(sys.argv[1])
g = StateGraph(MessagesState)
g.add_node("agent", lambda s: {"messages": [AIMessage("x")]})
g.add_edge(START, "agent")
g = g.compile(checkpointer=saver)
young = []  # how many objects each young-generation pass visited


def visited(phase, info):
    if phase == "start" and info["generation"] < 2:
        young.append(sum(len(gc.get_objects(generation=i)) for i in range(info["generation"] + 1)))


gc.callbacks.append(visited)
n = len(g.get_state({"configurable": {"thread_id": "long"}}).values["messages"])
gc.callbacks.remove(visited)
old = {id(o) for o in gc.get_objects(generation=2)}
everywhere = {id(o) for o in gc.get_objects()}  # the permanent generation (frozen objects) is not listed
print(json.dumps({
    "briefs": len(saver._briefs),
    "briefs_old": sum(id(b) in old for b in saver._briefs.values()),
    "largest_young_pass": max(young, default=0),
    "messages": n,
    "app_objects_frozen": id(keep[0]) not in everywhere,
    "enabled": gc.isenabled(),
    "frozen_before": frozen,
    "frozen_after": gc.get_freeze_count(),
}))
"""


@pytest.fixture(scope="module")
def long_thread(tmp_path_factory):
    path = tmp_path_factory.mktemp("speed") / "tape"
    saver = TapeSaver(str(path))
    g = chat(saver)
    for i in range(300):  # 2,100 entries: an index of ~15,000 objects
        g.invoke({"messages": [HumanMessage(f"step {i}: run the tests again")]}, {"configurable": {"thread_id": "long"}})
    saver.close()
    return str(path)


def first_read(path, mode):
    p = subprocess.run([sys.executable, "-c", FIRST_READ, path, mode], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_thread_index_goes_to_the_oldest_generation_without_a_young_pass(long_thread):
    got = first_read(long_thread, "plain")
    assert got["messages"] == 600
    assert got["briefs_old"] == got["briefs"] == 2100
    assert got["largest_young_pass"] < 12000  # was one pass over the whole index and more (~37,000 objects)
    assert got["enabled"] and got["frozen_after"] == 0


def test_what_the_application_froze_stays_frozen(long_thread):
    got = first_read(long_thread, "frozen")
    assert got["messages"] == 600
    assert got["frozen_before"] > 0 and got["app_objects_frozen"]  # unfreeze would have put them back in the oldest generation


def test_a_disabled_collector_stays_disabled(long_thread):
    got = first_read(long_thread, "disabled")
    assert got["messages"] == 600 and not got["enabled"]



BUDGET = """
import gc, json, sys
from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph
from ctape.integrations import langgraph as lg


def first_read():
    saver = lg.TapeSaver(sys.argv[1])  # a new saver each time, as a server that makes one per request
    g = StateGraph(MessagesState)
    g.add_node("agent", lambda s: {"messages": [AIMessage("x")]})
    g.add_edge(START, "agent")
    g = g.compile(checkpointer=saver)
    young = []
    cb = lambda phase, info: young.append(sum(len(gc.get_objects(generation=k)) for k in range(info["generation"] + 1))) if phase == "start" and info["generation"] < 2 else None
    gc.callbacks.append(cb)
    g.get_state({"configurable": {"thread_id": "long"}})
    gc.callbacks.remove(cb)
    return max(young, default=0)


out = [first_read()]
lg._promoted[0] = lg._PROMOTE_BUDGET  # as after many reads since the last full collection
out.append(first_read())
out.append(first_read())
gc.collect()  # a full collection: the budget starts again
out.append(first_read())
print(json.dumps(out))
"""


def test_at_most_a_budget_of_objects_skips_the_young_generations_between_full_collections(long_thread):
    """Garbage cycles young at that moment wait for a full collection, which CPython starts
    by its own count: so only so many objects go this way until one has run. With the
    budget spent, a first read takes the young pass again; after a full collection it
    skips it again."""
    p = subprocess.run([sys.executable, "-c", BUDGET, long_thread], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    skipped, spent, spent_again, after_full = json.loads(p.stdout)
    assert skipped < 12000 and after_full < 12000, (skipped, after_full)
    assert max(spent, spent_again) > 12000, (spent, spent_again)
