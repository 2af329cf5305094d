"""State: every delta root -> REF applied in order as a JSON merge patch (RFC 7386).

The expected values come from a naive fold written here from the RFC, never
from ctape's own code, so a drift in either shows up.
"""

import json
import random
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctape import Tape
from conftest import run_cli

S = "chat"


def rfc7386(target, patch):
    """RFC 7386 section 2, as written there."""
    if isinstance(patch, dict):
        if not isinstance(target, dict):
            target = {}
        target = dict(target)
        for name, value in patch.items():
            if value is None:
                target.pop(name, None)
            else:
                target[name] = rfc7386(target.get(name), value)
        return target
    return patch


def fold(deltas):
    state = None
    for d in deltas:
        if d is not None:
            state = rfc7386(state, d)
    return state


def cli_state(tape_dir, *args, env=None):
    p = run_cli("--dir", tape_dir, "state", *args, env=env, check=True)
    return json.loads(p.stdout)


# -- merge-patch semantics -----------------------------------------------------------------------

STEPS = [
    {"cwd": "/repo", "env": {"A": "1", "B": "2"}, "files": ["a.py"]},
    {"env": {"B": None, "C": "3"}},                 # nested delete and add
    {"files": ["a.py", "b.py"], "todo": {"x": {"done": False}}},  # arrays are replaced whole
    None,                                            # no change
    {"todo": {"x": {"done": True, "note": "ok"}}},  # deep merge
    {"cwd": None},                                   # top-level delete
    {"list": [1, None, {"k": None}]},               # nulls inside arrays are kept as values
    {"todo": None, "env": {"A": {"nested": 1}}},    # delete a subtree; a string becomes an object
]


def test_merge_patch_semantics_at_every_depth(tape_dir):
    t = Tape.open(tape_dir)
    s = t.session(S)
    hashes = [s.append("user", {"content": f"step {i}"}, delta=d).hash for i, d in enumerate(STEPS)]
    assert s.state() == {
        "env": {"A": {"nested": 1}, "C": "3"},
        "files": ["a.py", "b.py"],
        "list": [1, None, {"k": None}],
    }
    assert s.state(hashes[1]) == {"cwd": "/repo", "env": {"A": "1", "C": "3"}, "files": ["a.py"]}
    assert s.state(hashes[3]) == s.state(hashes[2]), "a null delta changes nothing"
    assert s.state(hashes[4])["todo"] == {"x": {"done": True, "note": "ok"}}
    assert "cwd" not in s.state(hashes[5])
    for i, h in enumerate(hashes):
        assert s.state(h) == fold(STEPS[: i + 1]), i
    t.close()
    # the CLI, by hash, by SESSION~N and by -s
    assert cli_state(tape_dir, hashes[1]) == fold(STEPS[:2])
    assert cli_state(tape_dir, f"{S}~2") == fold(STEPS[:-2])
    assert cli_state(tape_dir, "-s", S) == fold(STEPS)


def test_non_object_deltas_replace_the_state(tape):
    s = tape.session(S)
    s.append("user", {"content": "a"}, delta={"a": 1})
    e = s.append("user", {"content": "b"}, delta=[1, 2, 3])
    assert s.state() == [1, 2, 3]
    s.append("user", {"content": "c"}, delta="just a string")
    assert s.state() == "just a string"
    s.append("user", {"content": "d"}, delta=42)
    assert s.state() == 42
    s.append("user", {"content": "e"}, delta={"back": {"to": "object"}, "gone": None})
    assert s.state() == {"back": {"to": "object"}}
    s.append("user", {"content": "f"}, delta=False)
    assert s.state() is False
    assert s.state(e.hash) == [1, 2, 3]


def test_state_does_not_leak_between_calls(tape):
    """Values returned are not shared with the tape's caches."""
    s = tape.session(S)
    s.append("user", {"content": "a"}, delta={"d": {"x": 1}})
    got = s.state()
    got["d"]["x"] = 999
    got["new"] = True
    assert s.state() == {"d": {"x": 1}}


def test_state_across_branches(tape_dir):
    t = Tape.open(tape_dir)
    s = t.session(S)
    base = s.append("user", {"content": "start"}, delta={"plan": "A", "n": 0})
    s.append("assistant", {"content": "main 1"}, delta={"n": 1, "main_only": True})
    s.append("assistant", {"content": "main 2"}, delta={"n": 2})
    s.checkout(base.hash, new_branch="alt")
    s.append("assistant", {"content": "alt 1"}, delta={"plan": "B", "n": None})
    assert s.state() == {"plan": "B"}
    assert s.state("chat/main") == {"plan": "A", "n": 2, "main_only": True}
    assert s.state("chat/alt") == {"plan": "B"}
    assert s.state(base.hash) == {"plan": "A", "n": 0}
    s.checkout("main")
    assert s.state() == {"plan": "A", "n": 2, "main_only": True}
    t.close()
    assert cli_state(tape_dir, "chat/alt") == {"plan": "B"}
    assert cli_state(tape_dir, "chat/main") == {"plan": "A", "n": 2, "main_only": True}


def test_state_across_sessions_is_independent(tape):
    a, b = tape.session("a"), tape.session("b")
    a.append("user", {"content": "same"}, delta={"who": "a"})
    b.append("user", {"content": "same"}, delta={"who": "b"})
    assert a.state() == {"who": "a"} and b.state() == {"who": "b"}


# -- deep tapes: keyframes -----------------------------------------------------------------------


def random_delta(rng, i):
    r = rng.random()
    if r < 0.35:
        return None
    if r < 0.4:
        return {f"k{rng.randrange(20)}": None}
    if r < 0.42:
        return [i]  # replaces the whole state
    d = {f"k{rng.randrange(20)}": {"i": i, f"sub{rng.randrange(4)}": rng.choice([i, None, "s", [i, None]])}}
    if rng.random() < 0.3:
        d[f"k{rng.randrange(20)}"] = None
    if rng.random() < 0.2:
        d["counter"] = i
    return d


def test_state_and_checkout_at_depth_3000(tape_dir, tmp_path):
    rng = random.Random(3000)
    t = Tape.open(tape_dir)
    s = t.session(S)
    deltas, hashes = [], []
    with t.batch():
        for i in range(3000):
            d = random_delta(rng, i)
            deltas.append(d)
            hashes.append(s.append("user" if i % 2 else "assistant", {"content": f"m{i}"}, delta=d).hash)
    # deep first (fills keyframes), then shallower, then around keyframe boundaries
    depths = [3000, 1000, 1, 2, 255, 256, 257, 511, 512, 513, 1024, 2047, 2048, 2049, 2999]
    depths += [rng.randrange(1, 3001) for _ in range(10)]
    for n in depths:
        assert s.state(hashes[n - 1]) == fold(deltas[:n]), f"depth {n}"
    # checkout far back, then forward: HEAD's state follows
    s.checkout(hashes[2700 - 1])
    assert s.state() == fold(deltas[:2700])
    # fork there and diverge
    s.checkout(hashes[2700 - 1], new_branch="deep-fork")
    fork = []
    for i in range(300):
        d = {"fork": i, f"k{i % 20}": None} if i % 3 else None
        fork.append(d)
        s.append("assistant", {"content": f"f{i}"}, delta=d)
    assert s.state() == fold(deltas[:2700] + fork)
    assert s.state("chat/main") == fold(deltas)
    t.close()

    # a cold index cache (no keyframes at all) gives the same answers, through the CLI
    cold = {"CTAPE_CACHE_DIR": str(tmp_path / "cold-cache")}
    assert cli_state(tape_dir, "chat/main", env=cold) == fold(deltas)
    assert cli_state(tape_dir, hashes[1500 - 1], env=cold) == fold(deltas[:1500])
    assert cli_state(tape_dir, "chat/deep-fork~150", env=cold) == fold(deltas[:2700] + fork[:150])
    p = run_cli("--dir", tape_dir, "checkout", hashes[2999 - 1], "-s", S, env=cold, check=True)
    assert cli_state(tape_dir, "-s", S, env=cold) == fold(deltas[:2999])


def test_status_pending_calls_deep_in_a_tape(tape):
    """Pending calls ride the same keyframes as state."""
    s = tape.session(S)
    with tape.batch():
        s.append("tool_call", {"call_id": "first", "name": "read", "arguments": {}})
        for i in range(700):
            s.append("user", {"content": str(i)}, delta={"i": i})
        s.append("tool_call", {"call_id": "late", "name": "bash", "arguments": {}})
        for i in range(100):
            s.append("user", {"content": str(i)})
    assert sorted(c["call_id"] for c in s.status()["pending_tool_calls"]) == ["first", "late"]
    assert s.state() == {"i": 699}


# -- random delta sequences -------------------------------------------------------------------------

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from(["", "x", "y"]))
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)),
    max_leaves=8,
)
delta_st = st.one_of(st.none(), st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), json_value, max_size=4), json_value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deltas=st.lists(delta_st, min_size=1, max_size=12), fork_at=st.integers(0, 11), fork=st.lists(delta_st, max_size=4))
def test_random_deltas_match_rfc7386(deltas, fork_at, fork):
    d = tempfile.mkdtemp()
    try:
        t = Tape.init(Path(d) / "tape")
        s = t.session(S)
        hashes = [s.append("user", {"content": str(i)}, delta=x).hash for i, x in enumerate(deltas)]
        for i, h in enumerate(hashes):
            assert s.state(h) == fold(deltas[: i + 1])
        at = fork_at % len(hashes)
        s.checkout(hashes[at], new_branch="f")
        for i, x in enumerate(fork):
            s.append("user", {"content": f"f{i}"}, delta=x)
        assert s.state() == fold(deltas[: at + 1] + fork)
        assert s.state("chat/main") == fold(deltas)
        t.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
