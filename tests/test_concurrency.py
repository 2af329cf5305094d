"""Concurrent writers on one machine serialize (SPEC section 2, invariant 5).

Eight real processes append to the same branch of the same session at once, each
append its own durable append (no batch). The result must be one chain: walking
parents from HEAD visits every entry exactly once, seq 1..N, nothing forked off.
"""

import os
import subprocess
import sys
import time

from ctape import Tape

PROCS = 8
PER_PROC = 500

WRITER = r"""
import sys
from ctape import Tape
path, session, me, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
t = Tape.open(path)
s = t.session(session)
sys.stdin.readline()  # start line: every writer starts at once
out = []
for i in range(n):
    e = s.append("user", {"content": f"w{me}-{i}"}, meta={"w": str(me), "i": str(i)})
    out.append(e.hash)
t.close()
sys.stdout.write("\n".join(out) + "\n")
"""


def test_eight_writers_make_one_chain(tape_dir):
    env = dict(os.environ)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tape_dir), "chat", str(w), str(PER_PROC)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for w in range(PROCS)
    ]
    time.sleep(1.0)  # let every interpreter import ctape before the race starts
    for p in procs:
        p.stdin.write(b"go\n")
        p.stdin.flush()
    returned = {}
    for w, p in enumerate(procs):
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
        hashes = out.decode().split()
        assert len(hashes) == PER_PROC
        returned[w] = hashes

    total = PROCS * PER_PROC
    t = Tape.open(tape_dir)
    try:
        s = t.session("chat")
        assert s.branch_name == "main"
        chain = list(s.log())
        hashes = [e.hash for e in chain]
        assert len(hashes) == total
        assert len(set(hashes)) == total
        assert [e.seq for e in chain] == list(range(total, 0, -1))
        assert chain[-1].parent is None
        for newer, older in zip(chain, chain[1:]):
            assert newer.parent == older.hash
        # every append that returned is on the chain, and in its writer's order
        pos = {h: i for i, h in enumerate(reversed(hashes))}
        for w, hs in returned.items():
            assert set(hs) <= pos.keys()
            order = [pos[h] for h in hs]
            assert order == sorted(order), f"writer {w}'s appends are out of order on the chain"
            assert [t.get(h).payload["content"] for h in hs[:3]] == [f"w{w}-{i}" for i in range(3)]
        # the branch and HEAD point at the tip; no other branch appeared
        assert [b["name"] for b in s.branches()] == ["main"]
        assert s.refs().head_hash == hashes[0]
        report = t.fsck()
        assert report["ok"], report["problems"]
    finally:
        t.close()
