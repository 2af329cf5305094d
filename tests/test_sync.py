"""Two copies of a tape directory, synced with the real rsync binary."""

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from ctape import Tape
from ctape.history import reflog

from conftest import run_cli, snapshot

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed (.ci/run installs it)")


def rsync(src, dst, *flags):
    subprocess.run(["rsync", "-a", *flags, f"{src}/", f"{dst}/"], check=True)


def cli_json(d, *args):
    p = run_cli("--dir", d, *args, "--json", check=True)
    return [json.loads(line) for line in p.stdout.decode().splitlines()]


def every_entry(d, session):
    """Hashes of every entry reachable from any branch of the session."""
    out = set()
    for b in cli_json(d, "branch", "-s", session):
        out |= {e["hash"] for e in cli_json(d, "log", f"{session}/{b['name']}")}
    return out


@pytest.fixture
def pair(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    t = Tape.init(a)
    s = t.session("chat")
    s.append("system", {"content": "shared prompt " * 100})
    s.append("user", {"content": "start"})
    t.close()
    rsync(a, b)
    return a, b


def test_both_sides_append_then_rsync_both_ways(pair):
    a, b = pair
    ta, tb = Tape.open(a), Tape.open(b)
    a_new = [ta.session("chat").append("assistant", {"content": f"from A {i}"}).hash for i in range(2)]
    b_new = [tb.session("chat").append("assistant", {"content": "from B"}).hash]
    assert ta.store.writer != tb.store.writer
    ta.close(), tb.close()
    rsync(a, b)
    rsync(b, a)
    assert snapshot(a) == snapshot(b)
    for d in (a, b):
        entries = every_entry(d, "chat")
        assert set(a_new) | set(b_new) <= entries
    # the outcome is deterministic: the same on both copies
    sa, sb = cli_json(a, "status", "-s", "chat")[0], cli_json(b, "status", "-s", "chat")[0]
    assert sa["head"] == sb["head"] and sa["conflicts"] == sb["conflicts"]
    assert len(sa["conflicts"]) == 1
    branches = {x["name"]: x["hash"] for x in cli_json(a, "branch", "-s", "chat")}
    assert branches == {x["name"]: x["hash"] for x in cli_json(b, "branch", "-s", "chat")}
    assert {branches["main"], branches[sa["conflicts"][0]]} == {a_new[-1], b_new[-1]}
    # the conflict shows in the graph and in the human status
    graph = run_cli("--dir", a, "log", "-s", "chat", "--graph", "--all", check=True).stdout.decode()
    assert sa["conflicts"][0] in graph and "main" in graph
    assert "conflict" in run_cli("--dir", a, "status", "-s", "chat", check=True).stdout.decode()


def test_conflict_resolution_syncs(pair):
    a, b = pair
    Tape.open(a).session("chat").append("assistant", {"content": "A"})
    Tape.open(b).session("chat").append("assistant", {"content": "B"})
    rsync(a, b), rsync(b, a)
    conflict = cli_json(a, "status", "-s", "chat")[0]["conflicts"][0]
    # resolving on A: delete the conflict branch; the next write settles it for good
    run_cli("--dir", a, "branch", "-d", conflict, "-s", "chat", check=True)
    assert cli_json(a, "status", "-s", "chat")[0]["conflicts"] == []
    rsync(a, b), rsync(b, a)
    for d in (a, b):
        st = cli_json(d, "status", "-s", "chat")[0]
        assert st["conflicts"] == []
        assert conflict not in {x["name"] for x in cli_json(d, "branch", "-s", "chat")}
    assert snapshot(a) == snapshot(b)


def test_a_new_name_that_reads_as_a_conflict_is_refused(pair):
    """A user's own `x.conflict-...` would be listed by `status` and `branch` as the other
    side of a sync; creating one is refused (exit 2, tape unchanged). A conflict branch a
    sync made stays usable: checked out, moved, forked from, deleted."""
    a, b = pair
    before = snapshot(a)
    for args in (["branch", "mine.conflict-abc"], ["checkout", "-b", "mine.conflict-abc", "main"], ["tag", "v1.conflict-2"]):
        p = run_cli("--dir", a, *args, "-s", "chat")
        err = p.stderr.decode()
        assert p.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, (args, p.returncode, err)
        assert "'.conflict-' marks the other side of a sync conflict" in err
    assert snapshot(a) == before
    assert cli_json(a, "status", "-s", "chat")[0]["conflicts"] == []
    run_cli("--dir", a, "branch", "mine.conflict", "-s", "chat", check=True)  # the word alone is a name like any
    Tape.open(a).session("chat").append("assistant", {"content": "A"})
    Tape.open(b).session("chat").append("assistant", {"content": "B"})
    rsync(a, b), rsync(b, a)
    conflict = cli_json(a, "status", "-s", "chat")[0]["conflicts"][0]
    run_cli("--dir", a, "checkout", "-b", "kept", conflict, "-s", "chat", check=True)
    refused = run_cli("--dir", a, "branch", conflict, "main", "-s", "chat")  # it exists: moved only with -f, as any branch
    assert refused.returncode == 2 and "branch -f" in refused.stderr.decode(), refused.stderr.decode()
    run_cli("--dir", a, "branch", "-f", conflict, "main", "-s", "chat", check=True)
    assert {x["name"]: x["hash"] for x in cli_json(a, "branch", "-s", "chat")}[conflict] == cli_json(a, "log", "chat/main", "-n", "1")[0]["hash"]
    run_cli("--dir", a, "checkout", conflict, "-s", "chat", check=True)
    run_cli("--dir", a, "checkout", "kept", "-s", "chat", check=True)
    run_cli("--dir", a, "branch", "-d", conflict, "-s", "chat", check=True)
    assert cli_json(a, "status", "-s", "chat")[0]["conflicts"] == []


def test_continuing_on_a_conflicted_branch_keeps_the_other_tip(pair):
    a, b = pair
    Tape.open(a).session("chat").append("assistant", {"content": "A"})
    hb = Tape.open(b).session("chat").append("assistant", {"content": "B"}).hash
    rsync(a, b), rsync(b, a)
    run_cli("--dir", b, "append", "user", '{"content": "go on"}', "-s", "chat", check=True)
    rsync(b, a)
    for d in (a, b):
        assert hb in every_entry(d, "chat")
    branches = {x["name"] for x in cli_json(a, "branch", "-s", "chat")}
    assert any(".conflict-" in n for n in branches)


def test_copy_taken_while_appending_opens(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    Tape.init(a).close()
    code = (
        "import ctape, sys\n"
        f"s = ctape.Tape.open({str(a)!r}).session('live')\n"
        "for i in range(100000):\n"
        "    s.append('user', {'content': 'x' * (i % 300) + str(i)})\n"
    )
    p = subprocess.Popen([os.sys.executable, "-c", code])
    try:
        time.sleep(1.0)
        for _ in range(3):
            rsync(a, b)
            time.sleep(0.2)
    finally:
        p.kill()
        p.wait()
    r = run_cli("--dir", b, "log", "-s", "live", "-n", "5", "--json")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 5
    f = run_cli("--dir", b, "fsck")
    assert f.returncode == 0, f.stdout + f.stderr
    rsync(a, b)
    assert run_cli("--dir", b, "fsck").returncode == 0


def test_interrupted_rsync_reports_not_synced_then_completes(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    t = Tape.init(a)
    big = os.urandom(300_000).hex()  # incompressible, so the transfer takes a while
    t.session("first").append("tool_result", {"call_id": "c1", "output": big})
    t.session("second").append("tool_result", {"call_id": "c9", "output": big})  # deduped: stored in `first`
    t.session("second").append("user", {"content": "after"})
    t.close()
    # an rsync that only got some files across: `second` without `first`
    os.makedirs(b)
    rsync(a, b, "--exclude=sessions/first/")
    r = run_cli("--dir", b, "fsck", "--json")
    report = json.loads(r.stdout)
    assert r.returncode == 1
    assert report["problems"] and all(p["severity"] == "not-synced" for p in report["problems"]), report
    assert not any(p["severity"] == "corrupt" for p in report["problems"])
    shown = run_cli("--dir", b, "log", "-s", "second", "-n", "1", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["payload"] == {"content": "after"}
    full = run_cli("--dir", b, "show", "second~1")
    assert full.returncode == 1 and len(full.stderr.decode().strip().splitlines()) == 1
    assert b"not" in full.stderr and b"Traceback" not in full.stderr
    rsync(a, b)
    assert run_cli("--dir", b, "fsck").returncode == 0
    assert json.loads(run_cli("--dir", b, "show", "second~1", "--json").stdout)["payload"]["output"] == big


def test_real_rsync_killed_midway(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    t = Tape.init(a)
    for n in range(6):
        s = t.session(f"s{n}")
        with t.batch():
            for i in range(40):
                s.append("tool_result", {"call_id": f"c{i}", "output": os.urandom(4000).hex()})
    t.close()
    p = subprocess.Popen(["rsync", "-a", "--bwlimit=800", f"{a}/", f"{b}/"])
    time.sleep(1.0)
    p.send_signal(signal.SIGKILL)
    p.wait()
    if os.path.isdir(b / "sessions") and os.path.exists(b / "ctape.json"):
        r = run_cli("--dir", b, "fsck", "--json")
        report = json.loads(r.stdout)
        assert not any(x["severity"] == "corrupt" for x in report["problems"]), report
        assert run_cli("--dir", b, "sessions").returncode == 0
    rsync(a, b)
    assert run_cli("--dir", b, "fsck").returncode == 0
    assert snapshot(a).keys() <= snapshot(b).keys()


def test_compact_then_rsync_without_delete(pair):
    a, b = pair
    tb = Tape.open(b)
    hb = tb.session("chat").append("assistant", {"content": "B side"}).hash
    tb.close()
    rsync(b, a)
    ta = Tape.open(a)
    ha = ta.session("chat").append("assistant", {"content": "A side"}).hash
    ta.compact(grace="now", expire="now")
    ta.close()
    before = set(snapshot(a))
    rsync(b, a)  # no --delete: the old segment files come back
    assert set(snapshot(a)) > before
    r = run_cli("--dir", a, "fsck", "--json")
    assert r.returncode == 0, r.stdout
    entries = every_entry(a, "chat")
    assert {ha, hb} <= entries
    Tape.open(a).compact(grace="now", expire="now")
    assert run_cli("--dir", a, "fsck").returncode == 0
    assert {ha, hb} <= every_entry(a, "chat")
    rsync(a, b)
    assert {ha, hb} <= every_entry(b, "chat")
    assert run_cli("--dir", b, "fsck").returncode == 0


def test_many_rounds_of_plain_rsync_lose_no_acknowledged_append(tmp_path):
    """The copy of a growing segment on the other side must never come back over newer appends."""
    a, b = tmp_path / "A", tmp_path / "B"
    t = Tape.init(a)
    t.session("chat").append("user", {"content": "start"})
    t.close()
    rsync(a, b)
    live_a = Tape.open(a)  # a long-lived writer on A, keeping its view between rounds
    acked = set()
    for r in range(4):
        for i in range(2):
            acked.add(live_a.session("chat").append("user", {"content": f"A {r} {i}"}).hash)
            p = run_cli("--dir", b, "append", "user", json.dumps({"content": f"B {r} {i}"}), "-s", "chat", check=True)
            acked.add(p.stdout.decode().strip())
        rsync(a, b)
        rsync(b, a)
    # closing repeats, in a new segment, the writes made just before a copy read their
    # segment (store/repeats.py, "copies that come back"): one more round carries that file over
    live_a.close()
    rsync(a, b)
    rsync(b, a)
    assert snapshot(a) == snapshot(b)
    for d in (a, b):
        t = Tape.open(d)
        s = t.session("chat")
        reached = set()
        for line in s.reflog():
            for v in (line["new"], line["old"]):
                if v and not v.startswith("@") and t.has_entry(v):
                    reached |= {e.hash for e in s.log(v)}
        assert acked <= reached, f"{d.name} lost {len(acked - reached)} acknowledged appends"
        assert t.fsck()["ok"]


def test_reading_does_not_seal_the_segment(tape_dir):
    t = Tape.open(tape_dir)
    t.session("chat").append("user", {"content": "one"})
    for args in (["log", "-s", "chat"], ["status", "-s", "chat"], ["fsck"], ["stats"]):
        run_cli("--dir", tape_dir, *args, check=True)
    t.session("chat").append("user", {"content": "two"})
    run_cli("--dir", tape_dir, "append", "user", '{"content": "three"}', "-s", "chat", check=True)
    assert len(os.listdir(tape_dir / "sessions" / "chat")) == 1


def test_a_copy_seals_the_segment(tape_dir, tmp_path):
    t = Tape.open(tape_dir)
    t.session("chat").append("user", {"content": "one"})
    rsync(tape_dir, tmp_path / "copy")
    t.session("chat").append("user", {"content": "two"})
    # a new segment for "two"; beside it, "one" repeated in one of its own: the copy read
    # the segment just after "one" was written (store/repeats.py, "copies that come back")
    files = os.listdir(tape_dir / "sessions" / "chat")
    repeats = [f for f in files if b'"repeats"' in (tape_dir / "sessions" / "chat" / f).read_bytes()[:200]]
    assert len(files) == 3 and len(repeats) == 1, files


def test_a_copy_taken_during_a_batch_seals_the_segment_before_the_batch_writes(tape_dir, tmp_path):
    """Found in review: the lock's stat, taken at the batch's first append, was reused when
    the batch wrote, so a copy made during the batch went unseen until after the write."""
    t = Tape.open(tape_dir)
    s = t.session("chat")
    s.append("user", {"content": "one"})
    time.sleep(0.1)  # past the new folder's racy-mtime window, so the lock trusts the segment's stat
    s.append("user", {"content": "one more"})
    folder, copied = tape_dir / "sessions" / "chat", tmp_path / "copy" / "sessions" / "chat"
    with t.batch():
        s.append("user", {"content": "two"})  # takes the lock; written when the batch ends
        rsync(tape_dir, tmp_path / "copy")
        s.append("user", {"content": "three"})
    (seg,) = os.listdir(copied)
    assert (folder / seg).stat().st_size == (copied / seg).stat().st_size  # the copied segment never grew
    # the batch wrote to a new segment; beside it, the writes made just before the copy read
    # the segment are repeated in one of their own (store/repeats.py, "copies that come back")
    others = sorted(set(os.listdir(folder)) - {seg})
    repeats = [f for f in others if b'"repeats"' in (folder / f).read_bytes()[:200]]
    assert len(others) == 2 and len(repeats) == 1, others
    t.close()
    assert [e.payload["content"] for e in Tape.open(tape_dir).session("chat").log()] == ["three", "two", "one more", "one"]


def test_status_while_a_value_has_not_arrived(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    t = Tape.init(a)
    big = "shared tool output " * 200
    t.session("first").append("tool_result", {"call_id": "c1", "output": big})
    t.session("second").append("tool_result", {"call_id": "c2", "output": big})  # its value lives in `first`
    t.close()
    os.makedirs(b)
    rsync(a, b, "--exclude=sessions/first/")
    r = run_cli("--dir", b, "status", "-s", "second", "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["incomplete"] is True and st["head"]
    # the entry is here, its value is not: said as it is, and no seq that was never read
    assert run_cli("--dir", b, "status", "-s", "second").stdout.decode().splitlines() == [
        "session second",
        f"On branch main at {st['head'][:12]}",
        "part of the history up to HEAD has not arrived yet (sync in progress?): run rsync again",
    ]
    rsync(a, b)
    assert json.loads(run_cli("--dir", b, "status", "-s", "second", "--json").stdout)["incomplete"] is False


def reached_by_refs(d):
    """Every entry any branch or HEAD of any session of the copy reaches."""
    t = Tape.open(d)
    try:
        out = set()
        for name in t.store.sessions():
            st = t.session(name).refs()
            for h in list(st.branches.values()) + [st.head_hash]:
                while h is not None and h not in out:
                    out.add(h)
                    h = t.read_entry(h).parent
        return out
    finally:
        t.close()


def test_every_round_of_conflicts_keeps_its_own_branch(pair):
    """Issue 12, item 1: from the second round on, the losing tip got no branch (the
    conflict branch of round 1 had taken its name), so it sat on no branch of either copy."""
    a, b = pair
    acked = set()
    for r in range(3):
        acked.add(run_cli("--dir", a, "append", "user", "--text", f"a{r}", "-s", "chat", check=True).stdout.decode().strip())
        acked.add(run_cli("--dir", b, "append", "user", "--text", f"b{r}", "-s", "chat", check=True).stdout.decode().strip())
        rsync(a, b)
        rsync(b, a)
    assert snapshot(a) == snapshot(b)
    for d in (a, b):
        assert acked <= reached_by_refs(d), f"{d.name}: {len(acked - reached_by_refs(d))} appends on no branch"
    st = cli_json(a, "status", "-s", "chat")[0]
    assert st == cli_json(b, "status", "-s", "chat")[0]
    assert len(st["conflicts"]) >= 2 and all(c.startswith("main.conflict-") for c in st["conflicts"])
    graph = run_cli("--dir", a, "log", "-s", "chat", "--graph", "--all", "--oneline", check=True).stdout.decode()
    human = run_cli("--dir", a, "status", "-s", "chat", check=True).stdout.decode()
    for c in st["conflicts"]:
        assert c in graph and c in human
        # named by the losing writer and its tip: valid, readable as SESSION/NAME
        assert len(c) <= 128
        tip = cli_json(a, "show", f"chat/{c}")[0]["hash"]
        assert c.endswith(tip[:8])


def test_three_copies_conflicting_in_every_direction(tmp_path):
    """Three copies, each appending to the same branch, synced pairwise in a fixed
    scramble of directions: every append stays on a branch of every copy."""
    dirs = [tmp_path / n for n in "ABC"]
    t = Tape.init(dirs[0])
    t.session("chat").append("user", {"content": "start"})
    t.close()
    for d in dirs[1:]:
        rsync(dirs[0], d)
    acked = set()
    order = [(0, 1), (2, 0), (1, 2), (0, 2), (2, 1), (1, 0)]
    for r in range(4):
        for i, d in enumerate(dirs):
            with Tape.open(d) as t:
                acked.add(t.session("chat").append("user", {"content": f"{i}-{r}"}).hash)
        for x, y in order[r:] + order[:r]:
            rsync(dirs[x], dirs[y])
    for _ in range(2):
        for x in range(3):
            for y in range(3):
                if x != y:
                    rsync(dirs[x], dirs[y])
    branches = [{x["name"]: x["hash"] for x in cli_json(d, "branch", "-s", "chat")} for d in dirs]
    assert branches[0] == branches[1] == branches[2]
    for d in dirs:
        assert acked <= reached_by_refs(d)
        assert run_cli("--dir", d, "fsck").returncode == 0


def test_a_deletion_on_a_copy_frees_the_data(tmp_path):
    """Issue 12, item 2: the original writer's claims pinned the data forever, although
    the deleting writer had seen them."""
    a, b = tmp_path / "A", tmp_path / "B"
    t = Tape.init(a)
    s = t.session("chat")
    s.append("user", {"content": "start"})
    s.checkout("chat", new_branch="draft")
    for i in range(5):
        s.append("tool_result", {"call_id": f"c{i}", "output": f"output {i} " * 500})
    s.checkout("chat/main")
    t.close()
    subprocess.run(["cp", "-a", str(a), str(b)], check=True)
    run_cli("--dir", b, "branch", "-d", "draft", "-s", "chat", check=True)
    r = json.loads(run_cli("--dir", b, "compact", "--expire", "now", "--grace", "now", "--json", check=True).stdout)
    assert r["freed_objects"] >= 10, r  # five entries and their outputs
    assert run_cli("--dir", b, "fsck").returncode == 0
    assert json.loads(run_cli("--dir", b, "stats", "--json", check=True).stdout)["entries"] == 1  # main's
    # the original's files come back with the next sync: its claims no longer pin anything
    rsync(a, b)
    assert [x["name"] for x in cli_json(b, "branch", "-s", "chat")] == ["main"]
    r = json.loads(run_cli("--dir", b, "compact", "--expire", "now", "--grace", "now", "--json", check=True).stdout)
    assert r["freed_objects"] >= 10, r
    assert run_cli("--dir", b, "fsck").returncode == 0
    # and the deletion syncs: the original frees them too
    rsync(b, a)
    assert [x["name"] for x in cli_json(a, "branch", "-s", "chat")] == ["main"]
    r = json.loads(run_cli("--dir", a, "compact", "--expire", "now", "--grace", "now", "--json", check=True).stdout)
    assert r["freed_objects"] >= 10, r
    assert json.loads(run_cli("--dir", a, "stats", "--json", check=True).stdout)["entries"] == 1


def test_a_session_rm_on_a_copy_frees_the_data_and_a_concurrent_append_survives(tmp_path):
    """A `session rm` (a record setting every branch and HEAD to null) supersedes what
    its writer had seen; an append it had not seen comes back with its history."""
    a, b = tmp_path / "A", tmp_path / "B"
    t = Tape.init(a)
    s = t.session("chat")
    old = [s.append("user", {"content": f"old {i} " * 300}).hash for i in range(4)]
    s.checkout("chat", new_branch="side")
    s.append("user", {"content": "on side"})
    t.close()
    rsync(a, b)
    tb = Tape.open(b)
    sb = tb.session("chat")
    sb.set_refs("session-rm", {**{x: None for x in sb.refs().branches}, "HEAD": None})
    assert sb.refs().branches == {} and sb.refs().head is None
    tb.close()
    with Tape.open(a) as ta:  # meanwhile on A, unseen by the deletion
        late = ta.session("chat").append("user", {"content": "late on side"}).hash
    rsync(a, b)
    rsync(b, a)
    for d in (a, b):
        with Tape.open(d) as t:
            st = t.session("chat").refs()
            assert st.branches == {"side": late}  # main stays deleted: the deletion had seen it
            assert st.head == "@side"
            assert set(old) <= reached_by_refs(d)  # `side` grew from main's tip
    # with nothing appended meanwhile, the deletion frees everything on either copy
    c = tmp_path / "C"
    t = Tape.init(c)
    t.session("gone").append("user", {"content": "bulky " * 2000})
    t.close()
    d = tmp_path / "D"
    rsync(c, d)
    with Tape.open(d) as t:
        s = t.session("gone")
        s.set_refs("session-rm", {"main": None, "HEAD": None})
        assert t.compact(expire="now", grace="now")["freed_objects"] >= 1
    rsync(d, c)
    with Tape.open(c) as t:
        assert t.session("gone").refs().branches == {}
        assert t.compact(expire="now", grace="now")["freed_objects"] >= 1
        assert t.stats()["entries"] == 0 and t.fsck()["ok"]


def test_langgraph_delete_thread_on_a_copy_frees_the_thread(tmp_path):
    pytest.importorskip("langgraph")
    from ctape.integrations.langgraph import TapeSaver

    a, b = tmp_path / "A", tmp_path / "B"
    saver = TapeSaver(a)
    config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    for i in range(3):
        cp = {"v": 1, "id": f"1ef{i:05d}-0000-6000-8000-000000000000", "ts": f"2026-01-0{i + 1}T00:00:00+00:00",
              "channel_values": {"messages": [f"message {i} " * 300]}, "channel_versions": {"messages": str(i + 1)},
              "versions_seen": {}, "pending_sends": []}
        config = saver.put(config, cp, {"source": "loop", "step": i}, {"messages": str(i + 1)})
    saver.close()
    subprocess.run(["cp", "-a", str(a), str(b)], check=True)
    copy = TapeSaver(b)
    copy.delete_thread("t1")
    assert copy.get_tuple({"configurable": {"thread_id": "t1"}}) is None
    report = copy.tape.compact(expire="now", grace="now")
    assert report["freed_objects"] >= 3, report
    assert copy.tape.fsck()["ok"]
    copy.close()


def open_as(d, writer, monkeypatch):
    monkeypatch.setenv("CTAPE_WRITER", writer)
    return Tape.open(d)


def test_a_claim_superseded_before_a_compaction_stays_superseded_when_an_old_copy_brings_it_back(pair, monkeypatch):
    """Compaction on A drops B's superseded claim; A then moves main again. rsync never
    deletes, so B's old records come back to A: the new claim must still supersede them
    (it carries what A's earlier claim had seen), or the old tip shows as a conflict again."""
    a, b = pair
    with open_as(b, "wbbbbbbb", monkeypatch) as tb:
        tb.session("chat").append("assistant", {"content": "B"})
    rsync(b, a)
    with open_as(a, "waaaaaaa", monkeypatch) as ta:
        s = ta.session("chat")
        s.append("assistant", {"content": "A, having read B"})  # supersedes B's claim on main
        ta.compact(grace="now", expire="now")  # B's record goes: nothing reaches it any more
        assert not any(r["w"] == "wbbbbbbb" and "main" in r.get("set", {}) for r in reflog.records(s))
        tip = s.append("assistant", {"content": "A again"}).hash
    rsync(b, a)  # B's old segment comes back
    rsync(a, b)
    for d in (a, b):
        with open_as(d, "wcccccccc", monkeypatch) as t:
            st = t.session("chat").refs()
            assert st.branches == {"main": tip}, st.branches
            assert not st.conflicts


def test_compact_keeps_the_record_that_gave_a_conflict_branch_its_name(pair, monkeypatch):
    """A conflict branch whose plain name a deleted branch had used is named BRANCH.conflict-W-TIP-N;
    compact --expire now must not drop the deletion that decided it (the branch would be renamed)."""
    a, b = pair
    with open_as(b, "waaaaaaa", monkeypatch) as tb:
        x = tb.session("chat").append("assistant", {"content": "B 1"}).hash
    with open_as(a, "wbbbbbbb", monkeypatch) as ta:  # later: its claim on main wins (larger clock)
        ta.session("chat").append("assistant", {"content": "A 1"})
    rsync(a, b), rsync(b, a)
    with open_as(a, "wbbbbbbb", monkeypatch) as ta:
        s = ta.session("chat")
        name = s.refs().conflicts and next(iter(s.refs().conflicts))
        assert name == f"main.conflict-waaaaaaa-{x[:8]}"
        s.append("assistant", {"content": "A 2"})  # settles: writes the conflict branch, then main
        s.delete_branch(name)
    with open_as(b, "waaaaaaa", monkeypatch) as tb:  # B, not synced: main back at x, a new claim
        tb.session("chat").set_refs("reset", {"main": x})
    with open_as(a, "wbbbbbbb", monkeypatch) as ta:  # A moves main again: its claim wins (larger clock)
        for i in range(3):
            ta.session("chat").append("assistant", {"content": f"A more {i}"})
    rsync(a, b), rsync(b, a)
    with open_as(a, "wbbbbbbb", monkeypatch) as ta:
        before = ta.session("chat").refs()
        assert before.branches.get(name) is None  # the deleted name stays deleted
        renamed = [c for c in before.conflicts if c.startswith(name + "-")]
        assert len(renamed) == 1 and before.branches[renamed[0]] == x
        ta.compact(grace="now", expire="now")
        after = ta.session("chat").refs()
        assert (after.branches, after.head) == (before.branches, before.head)
        assert ta.fsck()["ok"]


def _sets_value(t: Tape, rel: str, h: str) -> bool:
    """Does the file hold a ref record that sets a ref to h?"""
    from ctape.store import framing
    from ctape.model import schema

    for item in t.store.scan_file(rel):
        if isinstance(item, framing.Record) and item.type == framing.T_REF:
            rec, why = schema.read_ref_record(item.body, "chat")
            if why is None and h in rec["set"].values():
                return True
    return False


def test_a_deletion_of_two_branches_supersedes_only_what_was_read_on_each(tmp_path, monkeypatch):
    """A copy that holds B's newer record on `main` but not its newer record on `side` (a
    cut-off sync) deletes both: the deletion must not supersede B's unread claim on `side`
    because it read a larger n on `main` (a record's `seen` is one n per writer)."""
    a, b = tmp_path / "A", tmp_path / "B"
    monkeypatch.setenv("CTAPE_WRITER", "waaaaaaa")
    with Tape.init(a) as t:
        s = t.session("chat")
        s.append("user", {"content": "start"})
        s.checkout("chat", new_branch="side")
        s.checkout("main")
    rsync(a, b)
    sess = b / "sessions" / "chat"
    files = []
    with open_as(b, "wbbbbbbb", monkeypatch) as tb:
        sb = tb.session("chat")
        for branch in ("side", "side", "main"):  # each in a segment file of its own
            before = set(os.listdir(sess))
            sb.checkout(branch)
            e = sb.append("user", {"content": f"B on {branch}"}).hash
            files.append((e, sorted(set(os.listdir(sess)) - before)))
            rsync(b, tmp_path / "scratch")  # a copy seals the segment: the next append starts another
    unread_side = files[1][0]
    # the cut-off sync: every file but those that hold the second append's ref record (its
    # own segment, and the repeat of it that the third append wrote, the copy having read it;
    # a writer may go on appending to a repeat's file, so files are told by what they hold)
    with open_as(b, "wbbbbbbb", monkeypatch) as tb:
        holds = {name for name in os.listdir(sess) if _sets_value(tb, f"sessions/chat/{name}", unread_side)}
    assert holds
    for name in os.listdir(sess):
        if name not in holds:
            shutil.copy2(sess / name, a / "sessions" / "chat" / name)
    with open_as(a, "waaaaaaa", monkeypatch) as ta:
        sa = ta.session("chat")
        assert sa.refs().branches["main"] == files[2][0] and sa.refs().branches["side"] == files[0][0]
        sa.set_refs("session-rm", {"main": None, "side": None, "HEAD": None})
    rsync(b, a), rsync(a, b)
    for d in (a, b):
        with open_as(d, "wcccccccc", monkeypatch) as t:
            st = t.session("chat").refs()
            assert st.branches == {"side": unread_side}  # the append the deletion had not read survives


def test_a_checkout_of_a_branch_another_copy_deleted_keeps_its_tip(pair, monkeypatch):
    """B checks out `main` while A, not synced, deletes it (A's HEAD was detached at its
    tip, so nothing was lost there). After the sync HEAD was attached to a branch that no
    longer existed: main's tip was on no ref, and the next append on B started a new root.
    HEAD now stays, detached, at the tip the deletion records; compact keeps it."""
    a, b = pair
    with open_as(a, "waaaaaaa", monkeypatch) as ta:
        tip = ta.session("chat").refs().branches["main"]
        ta.session("chat").checkout(tip)  # detached at main's tip
    rsync(a, b)
    with open_as(b, "wbbbbbbb", monkeypatch) as tb:
        tb.session("chat").checkout("main")  # B had read A's checkout: its claim wins
    with open_as(a, "waaaaaaa", monkeypatch) as ta:
        ta.session("chat").delete_branch("main")
    rsync(a, b), rsync(b, a)
    for d in (a, b):
        with open_as(d, "wcccccccc", monkeypatch) as t:
            st = t.session("chat").refs()
            assert st.branches == {} and st.head == tip and st.head_hash == tip
    with open_as(b, "wbbbbbbb", monkeypatch) as tb:
        s = tb.session("chat")
        e = s.append("user", {"content": "after the sync"})
        assert e.parent == tip and s.refs().head == e.hash
        tb.compact(grace="now", expire="now")
        assert s.refs().head == e.hash and tb.has_entry(tip) and tb.fsck()["ok"]
    with open_as(a, "waaaaaaa", monkeypatch) as ta:  # without the append: compact keeps the tip too
        ta.compact(grace="now", expire="now")
        assert ta.session("chat").refs().head_hash == tip and ta.has_entry(tip)


def test_a_head_its_own_writer_left_on_a_deleted_branch_stays_unborn(tape_dir):
    """`pop_item` of a session's first item, or a branch from turn 1: HEAD on a branch
    this writer deleted is an unborn branch, not a way back to its old tip."""
    with Tape.open(tape_dir) as t:
        s = t.session("u")
        s.append("user", {"content": "first"})
        s.set_refs("pop", {"main": None, "HEAD": "@main"})
        st = s.refs()
        assert st.head == "@main" and st.head_hash is None and st.branches == {}
        assert s.append("user", {"content": "again"}).parent is None


def test_head_on_a_branch_deleted_elsewhere_stays_at_the_tip_its_writer_saw(pair, monkeypatch):
    """A moves main on and removes the session, then compacts (its new tip is gone for
    good); B, not synced, checks out main at the tip it has. HEAD stays at B's tip (the
    record's `at`), never at the newer tip only the deleter had: that one is gone."""
    a, b = pair
    with open_as(a, "waaaaaaa", monkeypatch) as ta:
        s = ta.session("chat")
        mine = s.refs().branches["main"]
        newer = s.append("user", {"content": "only A had this"}).hash
        s.set_refs("session-rm", {"main": None, "HEAD": None})
        ta.compact(grace="now", expire="now")
        assert not ta.has_entry(newer)
    with open_as(b, "wbbbbbbb", monkeypatch) as tb:
        s = tb.session("chat")
        s.checkout(mine)
        s.checkout("main")  # HEAD on main again, at `mine`, which A's removal had not seen
    rsync(a, b), rsync(b, a)
    for d in (a, b):
        with open_as(d, "wcccccccc", monkeypatch) as t:
            st = t.session("chat").refs()
            assert st.branches == {} and st.head == mine and t.has_entry(mine)
            t.compact(grace="now", expire="now")
            assert t.session("chat").refs().head_hash == mine and t.has_entry(mine) and t.fsck()["ok"]


def test_head_on_a_deleted_branch_follows_only_standing_claims():
    """Rule 7 takes the tip from the HEAD claim that stands, never from one a later record
    superseded (found by the long model run, seed 7865: compact dropped the superseded
    claim, and HEAD moved to another tip)."""
    from ctape.model.refs import RefState

    x1, x2 = "1" * 64, "2" * 64

    def rec(w, n, sets, seen=None, at=None):
        r = {"s": "s", "w": w, "n": n, "lc": n, "t": "2026-12-01T00:00:00Z", "op": "x", "set": sets}
        if seen:
            r["seen"] = seen
        if at:
            r["at"] = at
        return r

    records = [
        rec("waaaaaaa", 1, {"main": x1}), rec("waaaaaaa", 2, {"HEAD": "@main"}, at=x1),
        rec("wbbbbbbb", 1, {"main": x2}), rec("wbbbbbbb", 2, {"HEAD": "@main"}, at=x2),
        # C had read B's HEAD claim, not A's, and removed the session
        rec("wccccccc", 3, {"HEAD": None}, seen={"wbbbbbbb": 2}),
        rec("wccccccc", 4, {"main": None}, seen={"waaaaaaa": 1, "wbbbbbbb": 1}),
    ]
    for order in (records, records[::-1]):
        st = RefState()
        for r in order:
            st.apply(r)
        assert st.branches == {} and st.head == x1 and st.head_from == "main"
    kept = RefState()  # what compaction keeps: B's superseded HEAD claim goes
    for r in records[:3] + records[4:]:
        kept.apply(r)
    assert kept.head == x1
