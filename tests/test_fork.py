"""A Tape used on both sides of os.fork() (multiprocessing's default start method on
Linux, servers that fork workers): after the fork the child shares the parent's
descriptors, so the session lock's open file description too, and a flock no longer
keeps the two apart. Each side must still append in turn, lose nothing it acknowledged,
and never write what the other had queued (found by an audit of the Python API: 9 of
51 acknowledged appends were on no branch, the rest failed as damaged, fsck said ok)."""

import json
import os
import subprocess
import sys

import pytest

from ctape import Tape

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")


def child(tape, out, work):
    """In a forked child: run work(), close the Tape, write what work() returned to `out`,
    and leave with os._exit (no pytest machinery past the fork), 0 only if all went well."""
    code = 1
    try:
        acked = work()
        tape.close()
        with open(out, "w") as f:
            json.dump(acked, f)
        code = 0
    finally:
        os._exit(code)


def fork_and_append(tape, session, who_appends, n, out):
    """Fork; parent and child each append n entries to `session` through the same Tape
    object. Returns (the parent's hashes, the child's hashes)."""
    pid = os.fork()
    if pid == 0:
        child(tape, out, lambda: who_appends(tape, session, "child", n))
    acked = who_appends(tape, session, "parent", n)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child failed"
    with open(out) as f:
        return acked, json.load(f)


def appends(tape, session, who, n):
    return [tape.session(session).append("user", {"content": f"{who} {k}"}).hash for k in range(n)]


def chain(path, session):
    with Tape.open(path) as t:
        return [e.hash for e in t.session(session).log()]


def fsck_ok(path):
    p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(path), "fsck"], capture_output=True, text=True)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and out.startswith("ok:") and len(out.splitlines()) == 1, out


def test_parent_and_child_append_to_a_session_written_before_the_fork(tmp_path):
    path = tmp_path / "tape"
    tape = Tape.init(path)
    first = tape.session("chat").append("user", {"content": "before the fork"}).hash  # the writer holds its descriptors
    parent, child = fork_and_append(tape, "chat", appends, 120, tmp_path / "child.json")
    tape.close()
    assert len(parent) == len(child) == 120
    got = chain(path, "chat")
    # one chain: every acknowledged append on it, once, each side's in its own order
    assert sorted(got) == sorted([first, *parent, *child])
    assert got[-1] == first
    assert [h for h in reversed(got) if h in set(parent)] == parent
    assert [h for h in reversed(got) if h in set(child)] == child
    fsck_ok(path)


def test_a_child_forked_inside_a_batch_never_writes_what_the_parent_queued(tmp_path):
    """Both leave the batch: each writes what it queued itself, nothing of the other's."""
    path = tmp_path / "tape"
    tape = Tape.init(path)
    s = tape.session("chat")
    s.append("user", {"content": "before"})
    out = tmp_path / "child.json"
    pid, code = -1, 1
    try:
        with tape.batch():
            queued = [s.append("assistant", {"content": f"queued {k}"}).hash for k in range(5)]
            pid = os.fork()
            if pid == 0:
                # the parent's batch holds the lock of "chat": the child's append there waits
                # for it; the one to "other" does not
                mine = [tape.session("other").append("user", {"content": "from the child"}).hash,
                        tape.session("chat").append("user", {"content": "from the child"}).hash]
            else:
                queued.append(s.append("assistant", {"content": "queued after the fork"}).hash)
        if pid == 0:
            tape.close()
            with open(out, "w") as f:
                json.dump(mine, f)
            code = 0
    finally:
        if pid == 0:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    other, child = json.loads(out.read_text())
    tape.close()
    got = chain(path, "chat")
    assert got[0] == child and got[1:7] == queued[::-1]  # the child's went on after the parent's batch
    assert len(got) == len(set(got)) == 8
    assert chain(path, "other") == [other]
    fsck_ok(path)


def test_several_children_of_one_tape(tmp_path):
    path = tmp_path / "tape"
    tape = Tape.init(path)
    tape.session("chat").append("user", {"content": "start"})
    tape.session("other").append("user", {"content": "start"})
    pids, outs = [], []
    for i in range(3):
        out = tmp_path / f"c{i}.json"
        outs.append(out)
        pid = os.fork()
        if pid == 0:
            child(tape, out, lambda: appends(tape, "chat" if i % 2 == 0 else "other", f"child{i}", 40) + appends(tape, "chat", f"child{i}", 10))
        pids.append(pid)
    mine = appends(tape, "chat", "parent", 40)
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    tape.close()
    acked = set(mine)
    for out in outs:
        acked |= set(json.loads(out.read_text()))
    got = set(chain(path, "chat")) | set(chain(path, "other"))
    assert acked <= got and len(acked) == 40 + 3 * 50
    fsck_ok(path)
