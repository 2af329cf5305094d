"""Session.extend: many entries at HEAD with one ref record (issue 25: the per-append
bookkeeping once per call), the same tape a batch of appends would write."""

from __future__ import annotations

import pytest

from ctape import Tape
from ctape.errors import InvalidInput

from conftest import snapshot


def test_extend_writes_what_a_batch_of_appends_writes(tmp_path):
    items = [("system", {"content": "be brief"}), ("user", {"content": "list files"}, {"cwd": "/repo"}),
             ("tool_call", {"call_id": "c1", "name": "ls", "arguments": {}}),
             {"kind": "tool_result", "payload": {"call_id": "c1", "output": "a.py"}, "delta": {"files": 1}},
             ("assistant", {"content": "one file"})]
    a = Tape.init(tmp_path / "a")
    got = a.session("s").extend(items)
    b = Tape.init(tmp_path / "b")
    with b.batch():
        for it in items:
            if isinstance(it, dict):
                b.session("s").append(it["kind"], it["payload"], delta=it["delta"])
            else:
                b.session("s").append(*it)
    sa, sb = a.session("s"), b.session("s")
    assert [(e.kind, e.payload, e.meta, e.delta, e.seq) for e in sa.log()] == [(e.kind, e.payload, e.meta, e.delta, e.seq) for e in sb.log()]
    assert [e.hash for e in got] == [e.hash for e in reversed(list(sa.log()))]
    assert sa.refs().branches == {"main": got[-1].hash} and sa.refs().head == "@main"
    assert [e.parent for e in got[1:]] == [e.hash for e in got[:-1]]
    assert sa.state() == sb.state() == {"files": 1}
    # one move of main (a batch of appends moves it by the first append, then once more)
    assert [r["new"] for r in sa.reflog() if r["ref"] == "s/main"] == [got[-1].hash], sa.reflog()
    more = sa.extend([("user", {"content": f"q{i}"}) for i in range(600)])  # across keyframes (every 256)
    assert more[0].parent == got[-1].hash and more[-1].seq == 605
    assert sa.status()["pending_tool_calls"] == [] and sa.head.hash == more[-1].hash
    a.close()
    b.close()


@pytest.mark.parametrize("bad", [[("user", {"content": "ok"}), ("nope", {})], [("user", {"content": 5})], [("user",)], ["user"],
                                 [("user", {"content": "x"}, "not a dict")]])
def test_a_bad_item_writes_nothing(tmp_path, bad):
    d = tmp_path / "t"
    t = Tape.init(d)
    t.session("s").append("user", {"content": "before"})
    t.close()
    before = snapshot(d)
    t = Tape.open(d)
    with pytest.raises(InvalidInput):
        t.session("s").extend(bad)
    t.close()
    assert snapshot(d) == before


def test_extend_on_a_branch_and_detached(tmp_path):
    t = Tape.init(tmp_path / "t")
    s = t.session("s")
    first = s.append("user", {"content": "root"})
    s.branch("side")
    s.checkout("side")
    on_side = s.extend([("assistant", {"content": "a"}), ("user", {"content": "b"})])
    assert s.refs().branches["side"] == on_side[-1].hash and s.refs().branches["main"] == first.hash
    s.checkout(first.hash)
    detached = s.extend([("assistant", {"content": "c"})])
    assert s.refs().head == detached[0].hash and s.refs().branches["side"] == on_side[-1].hash
    assert s.extend([]) == []
    t.close()
