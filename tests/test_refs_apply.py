"""RefState.apply has a shortcut for the common record (a writer moves a branch only it
claims); it must leave exactly the state that resolving every ref gives, whatever came
before: other writers' claims, conflicts, deletions, HEAD detached or on a deleted branch."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from ctape.model.refs import CONFLICT, HEAD, TAG, RefState, conflict_name

from conftest import examples

WRITERS = ["w1" * 8, "w2" * 8, "w3" * 8]
TIPS = [c * 64 for c in "abcdef"]
REFS = ["main", "dev", HEAD, TAG + "v1", conflict_name("main", WRITERS[1], TIPS[0])]


@st.composite
def records(draw):
    """A run of records: mostly one writer appending to one branch (the shortcut's case),
    with other writers' moves, deletions, HEAD moves, tags and conflict branches between.
    Causal, as real records are: a writer's n only grows, and a record has seen only
    records written before it."""
    clock = {w: 0 for w in WRITERS}
    out = []
    for _ in range(draw(st.integers(1, 40))):
        w = draw(st.sampled_from(WRITERS))
        if draw(st.booleans()):
            w = WRITERS[0]
        ref = draw(st.sampled_from(REFS + ["main"] * 4))
        if ref == HEAD:
            value = draw(st.sampled_from(["@main", "@dev", None] + TIPS))
        else:
            value = draw(st.sampled_from(TIPS + [None]))
        clock[w] += draw(st.sampled_from([1, 1, 1, 2, 5]))
        n = clock[w]
        seen = {o: draw(st.integers(0, clock[o])) for o in draw(st.sets(st.sampled_from(WRITERS), max_size=2)) if o != w and clock[o]}
        rec = {"w": w, "n": n, "lc": n + draw(st.integers(0, 2)), "set": {ref: value}}
        if seen:
            rec["seen"] = seen
        if ref == HEAD and value and value.startswith("@") and draw(st.booleans()):
            rec["at"] = draw(st.sampled_from(TIPS))
        out.append(rec)
    return out


@settings(max_examples=examples(400), deadline=None)
@given(records())
def test_the_shortcut_leaves_what_resolving_leaves(recs):
    fast, full = RefState(), RefState()
    for rec in recs:
        fast.apply(copy.deepcopy(rec))
        full._apply_resolving(copy.deepcopy(rec))
        assert fast == full, rec


def test_the_shortcut_is_taken_for_a_plain_append():
    st_ = RefState()
    st_.apply({"w": WRITERS[0], "n": 1, "lc": 1, "set": {"main": TIPS[0]}})
    st_.apply({"w": WRITERS[0], "n": 2, "lc": 2, "set": {HEAD: "@main"}})
    assert st_._moved_own_branch({"w": WRITERS[0], "n": 3, "lc": 3, "set": {"main": TIPS[1]}})
    assert st_.branches == {"main": TIPS[1]} and st_.head == "@main"
    # another writer's claim on the branch: resolved the long way
    assert not st_._moved_own_branch({"w": WRITERS[1], "n": 1, "lc": 4, "set": {"main": TIPS[2]}})
    assert CONFLICT not in "main"
