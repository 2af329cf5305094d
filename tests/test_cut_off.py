"""A writer's own records that it could not read when it wrote again are cut off, not
replaced (docs/format.md section 12, "Gaps").

The case (found by the sixteenth session's sync audit): A appends x1, x2 and a third copy
C takes them; `rsync --delete` from a copy B that never had them takes them off A; A goes
on (after `fsck --salvage`, or in a process whose index cache is new and so never knew
them) and appends y1. Its new record has a larger n than x2's, and a writer's later record
used to replace its earlier ones on every copy: once C's files came back, no branch of any
copy reached x1 or x2, and fsck said nothing. Now the first record a writer writes through
a cache that cannot vouch for its own history carries `gap`, and what it cut off stands
beside it as a conflict branch, on every copy, through more appends, other writers,
settling and compaction. Real processes, real rsync.
"""

from __future__ import annotations

import copy
import json
import random
import subprocess

from hypothesis import given, settings
from hypothesis import strategies as st

from ctape import Tape
from ctape.model.refs import HEAD, RefState
from ctape.ops.compact import Rec, _claims, _resolve
from ctape.store.index import Index, IndexBatch
from ctape.history import reflog

from conftest import examples, run_cli


def rsync(src, dst, *flags):
    subprocess.run(["rsync", "-a", *flags, f"{src}/", f"{dst}/"], check=True)


def ap(d, text, env=None):
    run_cli("--dir", d, "append", "-s", "chat", "user", "--text", text, env=env, check=True)


def reached(d) -> set[str]:
    """The texts of every entry a branch or HEAD of session chat reaches."""
    with Tape.open(d) as t:
        st = t.session("chat").refs()
        out, hashes = set(), set()
        for h in list(st.branches.values()) + [st.head_hash]:
            while h is not None and h not in hashes:
                hashes.add(h)
                e = t.read_entry(h)
                out.add(e.payload["content"])
                h = e.parent
        return out


def records(d) -> list[dict]:
    with Tape.open(d) as t:
        return reflog.records(t.session("chat"))


def fsck_ok(d) -> None:
    p = run_cli("--dir", d, "fsck", "--json")
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()


def lose_and_go_on(tmp_path, how: str):
    """Copies A, B, C; x1 and x2 on A and C only; `rsync --delete B/ A/` takes them off A,
    which goes on the way `how` says and appends y1. Returns (A, B, C, env of A's writes)."""
    a, b, c = tmp_path / "A", tmp_path / "B", tmp_path / "C"
    run_cli("--dir", a, "init", check=True)
    ap(a, "a0")
    rsync(a, b)
    rsync(a, c)
    ap(a, "x1")
    ap(a, "x2")
    rsync(a, c)
    rsync(b, a, "--delete")
    env = None
    if how == "salvage":
        p = run_cli("--dir", a, "append", "-s", "chat", "user", "--text", "refused")
        assert p.returncode != 0 and b"lost acknowledged records" in p.stderr  # this cache noticed
        run_cli("--dir", a, "fsck", "--salvage")
    else:  # a process whose cache never read x1, x2: nothing on A says they were there
        env = {"CTAPE_CACHE_DIR": str(tmp_path / "another-cache")}
    ap(a, "y1", env)
    assert "x2" not in reached(a)
    return a, b, c, env


def sync_all(a, b, c):
    for src, dst in ((c, a), (a, c), (a, b), (b, c), (c, b)):
        rsync(src, dst)


def test_records_lost_to_an_rsync_delete_come_back_beside_the_writers_new_ones(tmp_path):
    for how in ("salvage", "fresh-cache"):
        a, b, c, _ = lose_and_go_on(tmp_path / how, how)
        sync_all(a, b, c)
        for d in (a, b, c):
            assert {"a0", "x1", "x2", "y1"} <= reached(d), (how, d)
            with Tape.open(d) as t:
                st = t.session("chat").refs()
                assert t.read_entry(st.branches["main"]).payload["content"] == "y1"  # the later tip wins
                assert [t.read_entry(h).payload["content"] for b_, h in st.branches.items() if b_ in st.conflicts] == ["x2"]
            fsck_ok(d)


def test_more_appends_before_the_old_records_come_back_cut_off_nothing_more(tmp_path):
    """The writer's records after the gap carry nothing of it: the gap is read from the
    record that has it, so y2 and y3 (which read y1) replace y1 and no more."""
    a, b, c, env = lose_and_go_on(tmp_path, "fresh-cache")
    ap(a, "y2", env)
    ap(a, "y3", env)
    gaps = [r for r in records(a) if r.get("gap")]  # besides the first record of all (gap 0)
    assert len(gaps) == 1 and gaps[0]["n"] == min(r["n"] for r in records(a) if r["n"] > gaps[0]["gap"])
    sync_all(a, b, c)
    for d in (a, b, c):
        assert {"a0", "x1", "x2", "y1", "y2", "y3"} <= reached(d)
        fsck_ok(d)


def test_another_writer_that_read_only_the_new_records_does_not_replace_the_old(tmp_path):
    """B reads y1 (its `seen` reaches past x2's n) and appends: x2 was not among what it
    read, so it still stands when C brings it."""
    a, b, c, env = lose_and_go_on(tmp_path, "salvage")
    rsync(a, b)
    ap(b, "b1")
    rsync(b, a)
    sync_all(a, b, c)
    for d in (a, b, c):
        assert {"a0", "x1", "x2", "y1", "b1"} <= reached(d)
        fsck_ok(d)


def test_a_compaction_that_drops_the_record_with_the_gap_keeps_the_gap_in_its_pack(tmp_path):
    """y2 replaces y1, so `compact --expire now` drops y1's record (the one with `gap`):
    the pack's header keeps the gap, and x2 still comes back as a conflict branch; then a
    compaction of a copy that holds everything frees none of x1, x2."""
    a, b, c, env = lose_and_go_on(tmp_path, "fresh-cache")
    ap(a, "y2", env)
    run_cli("--dir", a, "compact", "--expire", "now", "--grace", "now", env=env, check=True)
    assert not any("gap" in r for r in records(a))  # the record went
    packs = list((a / "sessions" / "chat").glob("*.pack"))
    assert len(packs) == 1
    header = json.loads(packs[0].read_bytes()[10:10 + int.from_bytes(packs[0].read_bytes()[2:6], "little")])
    assert header["gaps"]  # ... its gap did not
    sync_all(a, b, c)
    for d in (a, b, c):
        assert {"a0", "x1", "x2", "y1", "y2"} <= reached(d)
    run_cli("--dir", c, "compact", "--expire", "now", "--grace", "now", check=True)
    rsync(c, a, "--delete")  # C holds everything: the safe use of --delete
    for d in (a, c):
        assert {"a0", "x1", "x2", "y1", "y2"} <= reached(d)
        fsck_ok(d)


def test_the_conflict_is_settled_once_and_gone_when_its_branch_is_deleted(tmp_path):
    a, b, c, env = lose_and_go_on(tmp_path, "salvage")
    sync_all(a, b, c)
    ap(a, "z1")
    settles = [r for r in records(a) if r["op"] == "settle"]
    assert len(settles) == 1  # the conflict branch; main moves by the append, which names x2 as read:
    z1 = max((r for r in records(a) if r["op"] == "append"), key=lambda r: r["n"])
    assert list(z1["cut"]) == [z1["w"]]
    ap(a, "z2")
    assert [r for r in records(a) if r["op"] == "settle"] == settles  # nothing more to settle
    with Tape.open(a) as t:
        (name,) = t.session("chat").refs().conflicts
    run_cli("--dir", a, "branch", "-s", "chat", "-D", name, check=True)
    sync_all(a, b, c)
    for d in (a, b, c):
        with Tape.open(d) as t:
            assert not t.session("chat").refs().conflicts
        assert "x2" not in reached(d) and "z2" in reached(d)


def test_a_writer_with_its_cache_declares_one_gap_and_names_nothing(tmp_path):
    """The price in the ordinary case: one record with `gap` per session per cache (its
    first), no `cut` at all; appends in a batch keep it (they share one record)."""
    d = tmp_path / "T"
    run_cli("--dir", d, "init", check=True)
    for i in range(4):
        ap(d, f"m{i}")
    recs = records(d)
    assert [("gap" in r) for r in sorted(recs, key=lambda r: r["n"])] == [True] + [False] * (len(recs) - 1)
    assert recs and not any("cut" in r for r in recs)
    t2 = tmp_path / "U"
    t = Tape.init(t2)
    with t.batch():
        for i in range(5):
            t.session("chat").append("user", {"content": f"b{i}"})
    t.close()
    recs = records(t2)
    assert sum("gap" in r for r in recs) == 1 and reached(t2) == {f"b{i}" for i in range(5)}


def test_a_gap_read_after_a_newer_claim_of_its_writer_makes_the_cache_start_over(tmp_path):
    """The index keeps a writer's newest claim per ref: a claim a gap cuts off, replaced by
    a newer claim before the gap was read, would be gone from it. It notices and rebuilds."""
    idx = Index(None)
    w = "aaaaaaaaaaaa"

    def rec(n, value, **more):
        b = IndexBatch()
        b.add_ref({"s": "chat", "w": w, "n": n, "lc": n, "set": {"main": value}, **more})
        idx.apply(b)

    rec(3, "x2" * 32)
    assert not idx.stale
    rec(5, "y2" * 32)  # read before the record with the gap (y1): x2 is replaced
    rec(4, "y1" * 32, gap=1)
    assert idx.stale
    idx2 = Index(None)  # what a rebuild gets: every gap first
    b = IndexBatch()
    for n, v, more in ((3, "x2", {}), (5, "y2", {}), (4, "y1", {"gap": 1})):
        b.add_ref({"s": "chat", "w": w, "n": n, "lc": n, "set": {"main": v * 32}, **more})
    idx2.apply_many([b])
    assert sorted((k, n) for _, k, n, *_ in idx2.claims("chat")) == [(w, 5), (f"{w} 3", 3)]


# -- order does not matter ------------------------------------------------------------------------

WRITERS = ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]
TIPS = [ch * 64 for ch in "0123456789"]


@st.composite
def histories(draw):
    """Records of three writers on main and a side branch, some with a `gap` that cuts off
    earlier records of its writer (which may still arrive later), with `seen` and `cut` as a
    writer that read some of the others would write them."""
    state = RefState()
    out = []
    for _ in range(draw(st.integers(1, 25))):
        w = draw(st.sampled_from(WRITERS))
        ref = draw(st.sampled_from(["main", "main", "side"]))
        n = max(state.seen.get(w, 0), state.lc) + draw(st.integers(1, 3))
        rec = {"s": "chat", "w": w, "n": n, "lc": n, "t": "2026-12-05T00:00:00Z", "op": "append", "set": {ref: draw(st.sampled_from(TIPS))}}
        # what it read: all of the state, or (a lost file) the state without its own newest records
        view = state
        if draw(st.integers(0, 4)) == 0:
            mine = sorted(r["n"] for r in out if r["w"] == w)
            if mine:
                keep = draw(st.integers(0, len(mine)))
                view = RefState()
                for r in out:
                    if r["w"] != w or r["n"] in mine[:keep]:
                        view.apply(copy.deepcopy(r))
                rec["gap"] = max(mine[:keep], default=0)
        seen = view.seen_for([ref], w)
        cut = view.cut_for([ref])
        if seen:
            rec["seen"] = seen
        if cut:
            rec["cut"] = cut
        out.append(rec)
        state.apply(copy.deepcopy(rec))
    return out


def outcome(st: RefState) -> tuple:
    return st.branches, st.head, dict(st.conflicts)


def gap_first(recs, rng):
    """A shuffled order in which each record with a gap comes before its writer's later
    records (the index's guarantee: a gap read late makes it start over, gaps first)."""
    recs = recs[:]
    rng.shuffle(recs)
    gaps = [r for r in recs if "gap" in r]
    rest = [r for r in recs if "gap" not in r]
    out = []
    for r in rest:
        out += [g for g in gaps if g["w"] == r["w"] and g["n"] < r["n"] and g not in out]
        out.append(r)
    return out + [g for g in gaps if g not in out]


@settings(max_examples=examples(300), deadline=None)
@given(histories(), st.randoms(use_true_random=False))
def test_any_order_of_arrival_and_compaction_show_the_same_refs(recs, rng):
    first = RefState()
    for r in recs:
        first.apply(copy.deepcopy(r))
    again = RefState()
    for r in gap_first(recs, rng):
        again.apply(copy.deepcopy(r))
    assert outcome(again) == outcome(first)
    gaps: dict = {}
    for r in recs:
        if "gap" in r:
            gaps.setdefault(r["w"], []).append((r["gap"], r["n"]))
    assert outcome(_resolve(_claims([Rec.of(r) for r in recs], gaps))) == outcome(first)
    idx = Index(None)
    batch = IndexBatch()
    for r in gap_first(recs, rng):
        b = IndexBatch()
        b.add_ref(r)
        batch.extend(b)
    idx.apply_many([batch])
    from ctape.model.refs import from_rows

    lc, seen = idx.max_lc_and_seen("chat")
    assert outcome(from_rows(idx.claims("chat"), lc, seen, idx.gaps("chat"))) == outcome(first)


def test_every_record_a_writer_lost_stays_on_a_ref_or_was_seen():
    """The invariant behind it, on generated histories: a record that no other record
    read (directly or through what it read) and that a lost file took from its writer
    is never replaced: its tip stays on a branch."""
    rng = random.Random(7)
    for _ in range(examples(200)):
        w = WRITERS[0]
        old = [{"s": "chat", "w": w, "n": n, "lc": n, "t": "2026-12-05T00:00:00Z", "op": "append", "set": {"main": TIPS[n]}}
               for n in (1, 2, 3)]
        new_n = 4 + rng.randint(0, 3)
        new = [{"s": "chat", "w": w, "n": new_n, "lc": new_n, "t": "2026-12-05T00:00:00Z", "op": "append", "set": {"main": TIPS[9]},
                "gap": 1}]
        if rng.random() < 0.5:
            new.append({"s": "chat", "w": w, "n": new_n + 1, "lc": new_n + 1, "t": "2026-12-05T00:00:00Z", "op": "append",
                        "set": {"main": TIPS[8]}})
        st_ = RefState()
        for r in gap_first(old + new, rng):
            st_.apply(copy.deepcopy(r))
        assert TIPS[3] in st_.branches.values(), st_.branches


def test_a_machine_restored_from_a_snapshot_keeps_what_it_wrote_after_it(tmp_path, monkeypatch):
    """Found by an audit of clocks: a VM restored from a disk snapshot (the tape and its index
    cache, which agree with each other) appended again before it synced. Its cache vouched
    for its own history, so its new record replaced the ones it had written after the
    snapshot: once a sync brought those back, no branch reached them, and fsck said
    nothing. A cache vouches within one boot now: the restored machine, started again,
    declares a gap, and what it wrote after the snapshot stands on a conflict branch."""
    import shutil

    import ctape.store.index_batch as index_batch

    boot = ["first"]
    monkeypatch.setattr(index_batch, "boot_id", lambda: boot[0])
    monkeypatch.setenv("CTAPE_WRITER", "vmbox")
    vm, cache, server = tmp_path / "vm", tmp_path / "vm-cache", tmp_path / "server"
    with Tape.init(vm, cache_dir=str(cache)) as t:
        t.session("chat").append("user", {"content": "one"})
    shutil.copytree(vm, tmp_path / "snap-tape", symlinks=True)
    shutil.copytree(cache, tmp_path / "snap-cache")
    with Tape.open(vm, cache_dir=str(cache)) as t:
        for text in ("two", "three"):
            t.session("chat").append("user", {"content": text})
    server.mkdir()
    rsync(vm, server)
    # the snapshot restored in place, as a disk restore does: the folders keep their inodes
    # (the cache's folder is named by the tape folder's), every file its bytes of then
    rsync(tmp_path / "snap-tape", vm, "--delete", "--ignore-times")
    rsync(tmp_path / "snap-cache", cache, "--delete", "--ignore-times")
    boot[0] = "after the restore"
    with Tape.open(vm, cache_dir=str(cache)) as t:
        t.session("chat").append("user", {"content": "four"})
    rsync(vm, server)
    rsync(server, vm)
    for d in (vm, server):
        assert reached(d) == {"one", "two", "three", "four"}, d
