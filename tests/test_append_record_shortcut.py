"""An append that follows a plain append of the same writer on the same branch copies that
record instead of building its own (Session._follow_last); inside a batch, that moves the
record held for the batch's end. The shortcut must write exactly the records, and leave
exactly the refs, that the full path (`_write_ref`) gives, whatever happens in a batch and
around it: checkouts, new and deleted branches, a detached HEAD, tags, given times, appends
outside batches, and another writer's claims on the same branches (which give the records
their `seen`, and make the writer read the refs again).

The same random run is made twice on fresh tapes, once with the shortcut and once with
it turned off; the clocks (n, lc) differ between runs, so they are compared by rank."""

from __future__ import annotations

import os
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctape import Tape
from ctape.history.session import Session
from ctape.history import reflog

S = "s"
OTHER = "w2w2w2w2"


@st.composite
def runs(draw):
    """Steps of writer A (mostly batches of appends, with moves of HEAD between) and of
    writer B (appends and branch changes on the same session, outside A's batches)."""
    steps = []
    for _ in range(draw(st.integers(1, 12))):
        who = draw(st.sampled_from(["a", "a", "a", "a1", "b"]))
        if who == "a1":  # writer A outside a batch: each step durable on its own
            steps.append(("a", draw(st.sampled_from(["append"] * 4 + ["checkout main", "branch dev", "detach"]))))
        elif who == "a":
            inner = []
            for _ in range(draw(st.integers(1, 8))):
                inner.append(draw(st.sampled_from(
                    ["append"] * 6 + ["checkout main", "checkout dev", "branch dev", "detach", "tag", "delete dev"])))
            steps.append(("batch", tuple(inner)))
        else:
            steps.append(("b", draw(st.sampled_from(["append main", "append dev", "branch dev", "delete dev"]))))
    return steps


def _do(s: Session, op: str, k: int) -> None:
    """One step of a writer; refusals (a branch that is there already, or not) are part of the run."""
    t = f"2026-01-01T00:00:{k // 1000:02d}.{k % 1000:03d}000Z"
    try:
        if op.startswith("append"):
            if op != "append":  # B appends to the branch it names
                s.checkout(op.split()[1])
            s.append("user", {"content": f"m{k}"}, time=t)
        elif op.startswith("checkout"):
            s.checkout(op.split()[1])
        elif op == "branch dev":
            s.branch("dev")
        elif op == "delete dev":
            s.delete_branch("dev")
        elif op == "detach":
            s.checkout("HEAD~1" if k % 2 else "HEAD")
        elif op == "tag":
            s.tag(f"t{k}", force=True)
    except Exception as e:  # noqa: BLE001 - the run records what each step did
        return type(e).__name__
    return None


def play(root: str, steps, shortcut: bool, monkeypatch) -> tuple:
    if not shortcut:
        monkeypatch.setattr(Session, "_follow_last", lambda *a: False)
    t0 = time.time_ns() // 1000
    a = Tape.init(root)
    monkeypatch.setenv("CTAPE_WRITER", OTHER)
    b = Tape.open(root)
    monkeypatch.delenv("CTAPE_WRITER")
    sa, sb = a.session(S), b.session(S)
    sa.append("user", {"content": "root"}, time="2026-01-01T00:00:00Z")
    outcomes, k = [], 1
    for what, ops in steps:
        if what == "batch":
            with a.batch():
                for op in ops:
                    outcomes.append(_do(sa, op, k))
                    k += 1
        else:
            outcomes.append(_do(sa if what == "a" else sb, ops, k))
            k += 1
    records = reflog.records(sa)
    # n is a hybrid logical clock: never less than the time it was written, in µs
    assert all(r["n"] >= t0 for r in records), "a record's clock fell behind the time"
    refs = sa.refs()
    a.close()
    b.close()
    clocks = sorted({v for r in records for v in _clocks(r)})
    rank = {v: i for i, v in enumerate(clocks)}
    norm = []
    for r in records:
        r = dict(r)
        r.pop("t")
        r["n"], r["lc"] = rank[r["n"]], rank[r["lc"]]
        r["w"] = "b" if r["w"] == OTHER else "a"
        r["seen"] = {("b" if w == OTHER else "a"): rank[n] for w, n in (r.get("seen") or {}).items()}
        if "gap" in r:  # a clock too (docs/format.md section 6)
            r["gap"] = rank[r["gap"]]
        if "cut" in r:
            r["cut"] = {("b" if w == OTHER else "a"): [rank[n] for n in ns] for w, ns in r["cut"].items()}
        norm.append(r)
    return outcomes, norm, (refs.head, refs.branches, refs.tags)


def _clocks(r: dict):
    yield r["n"]
    yield r["lc"]
    yield from (r.get("seen") or {}).values()
    if "gap" in r:
        yield r["gap"]
    for ns in (r.get("cut") or {}).values():
        yield from ns


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs())
def test_the_copied_record_is_the_one_the_full_path_writes(tmp_path_factory, monkeypatch, steps):
    with monkeypatch.context() as m:
        fast = play(str(tmp_path_factory.mktemp("fast") / "tape"), steps, True, m)
    with monkeypatch.context() as m:
        full = play(str(tmp_path_factory.mktemp("full") / "tape"), steps, False, m)
    assert fast[0] == full[0], "the steps did not do the same"
    assert fast[2] == full[2], "the refs differ"
    assert fast[1] == full[1], "the ref records differ"


def test_the_shortcut_is_taken_and_keeps_the_last_time(tape):
    """Appends without a time: the one record of the batch carries the last entry's time,
    and its clock is at least the time of the last append; outside a batch each append
    takes the shortcut too."""
    s = tape.session("b")
    s.append("user", {"content": "first"})
    calls = []
    real = Session._follow_last

    def counted(self, *a):
        calls.append(real(self, *a))
        return calls[-1]

    Session._follow_last = counted
    try:
        with tape.batch():
            es = [s.append("user", {"content": f"m{i}"}) for i in range(19)]
            t_last = time.time_ns() // 1000
            es.append(s.append("user", {"content": "m19"}))
    finally:
        Session._follow_last = real
    # the session's first append wrote two records (main, then HEAD on it): the next append
    # builds its own; from there on each one follows the last
    assert calls == [False] + [True] * 19
    last = reflog.records(s)[-1]
    assert last["set"] == {"main": es[-1].hash} and last["t"] == es[-1].time
    assert last["n"] >= t_last, "the clock of the moved record is the time of the last append, at least"
    Session._follow_last = counted
    try:
        more = [s.append("user", {"content": f"d{i}"}) for i in range(3)]
    finally:
        Session._follow_last = real
    assert calls[20:] == [True] * 3
    recs = reflog.records(s)[-3:]
    assert [r["set"] for r in recs] == [{"main": e.hash} for e in more]
    assert os.environ.get("CTAPE_WRITER") is None
