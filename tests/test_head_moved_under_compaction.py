"""A reader that starts at HEAD, beside a writer and `compact --grace now` (SPEC 8: meant for
tapes no one writes to, and run beside writers all the same).

Found by a CI run (1 in 5): the reader of test_stale_index_rows' real-process race read the
refs while the writer's HEAD was on a branch it was about to delete; the writer then went
back to main and deleted the branch, a compaction with expire=now, grace=now removed the
branch's entry, and the reader's first read failed with EntryNotFound. The reader now
reads the refs again and starts from where HEAD is (Session.from_head). The moment is
replayed with a hook on the reader's first entry read: real files, three Tapes.
"""

import json

import pytest
from click.testing import CliRunner

from ctape import Tape
from ctape.cli import main
from ctape.errors import EntryNotFound


def _writer_on_a_doomed_branch(d):
    """main: two entries; HEAD on branch side, one entry further (about to go)."""
    w = Tape.init(d)
    s = w.session("chat")
    s.append("system", {"content": "be brief"})
    s.append("user", {"content": "on main"})
    s.branch("side")
    s.checkout("side")
    doomed = s.append("tool_result", {"call_id": "c1", "output": "only on side " * 300}).hash
    return w, s, doomed


def _reader_whose_first_read_comes_late(d, s, doomed):
    """A Tape whose first entry read happens after the writer left side, deleted it, and a
    compaction with grace=now removed side's entry."""
    r = Tape.open(d)
    read, fired = r._read_entry, []

    def late(h, *a, **kw):
        if not fired:
            fired.append(h)
            s.checkout("main")
            s.delete_branch("side")
            with Tape.open(d) as c:
                assert c.compact(expire="now", grace="now")["freed_objects"] >= 1
        return read(h, *a, **kw)

    r._read_entry = late
    return r, fired


READS = {
    "log": lambda s: [e.payload["content"] for e in s.log()],
    "log --grep": lambda s: [e.payload["content"] for e in s.log(grep="on")],
    "log --all": lambda s: [e.payload["content"] for e in s.log(all=True)],
    "head": lambda s: [s.head.payload["content"]],
    "state": lambda s: [s.state()],
    "status": lambda s: [s.status()["incomplete"] is False],
    "context": lambda s: [m["content"] for m in s.context(format="openai")],
    "Tape.get": lambda s: [s.tape.get("chat").payload["content"]],
}


@pytest.mark.parametrize("what", sorted(READS))
def test_a_reader_follows_head_when_its_entry_went_under_a_compaction(tmp_path, what):
    d = str(tmp_path / "t")
    w, s, doomed = _writer_on_a_doomed_branch(d)
    r, fired = _reader_whose_first_read_comes_late(d, s, doomed)
    got = READS[what](r.session("chat"))
    assert fired == [doomed]  # the hook replayed the moment: the reader had HEAD on side's entry
    expected = {
        "log": ["on main", "be brief"], "log --grep": ["on main"], "log --all": ["on main", "be brief"],
        "head": ["on main"], "state": [None], "status": [True], "context": ["be brief", "on main"],
        "Tape.get": ["on main"],
    }[what]
    assert got == expected
    with pytest.raises(EntryNotFound):
        r.read_entry(doomed)  # it is gone indeed: nothing but HEAD's move made the read succeed
    assert r.session("chat").status()["incomplete"] is False
    r.close()
    w.close()


def test_a_reader_whose_head_stayed_still_says_the_entry_is_missing(tmp_path):
    """Only a HEAD that moved is followed: an entry gone while HEAD still names it (a copy
    cut short, a file removed by hand) is reported as before. HEAD's record is written by
    another writer (a segment of its own), then the file holding the entry goes."""
    import os
    import subprocess
    import sys

    d = str(tmp_path / "t")
    w = Tape.init(d)
    first = w.session("chat").append("user", {"content": "on main"}).hash
    w.close()
    (mine,) = [p for p in Tape.open(d).store.list_files("chat") if p.endswith(".seg")]
    code = "import sys, ctape; ctape.Tape.open(sys.argv[1]).session('chat').checkout(sys.argv[2])"
    subprocess.run([sys.executable, "-c", code, d, first], check=True, env={**os.environ, "CTAPE_WRITER": "otherhost"})
    os.remove(os.path.join(d, mine))
    r = Tape.open(d, cache_dir=str(tmp_path / "fresh"))  # a copy that never had the file: not arrived yet
    s = r.session("chat")
    assert s.refs().head_hash == first
    with pytest.raises(EntryNotFound):
        list(s.log())
    with pytest.raises(EntryNotFound):
        s.head
    assert s.status()["incomplete"] is True
    r.close()


def _every_tape_reads_late(monkeypatch, d, s, doomed):
    """As _reader_whose_first_read_comes_late, for the Tape a command opens."""
    from ctape.history import tape as tape_mod

    read, fired = tape_mod.Tape._read_entry, []

    def late(self, h, *a, **kw):
        if not fired and h == doomed:
            fired.append(h)
            s.checkout("main")
            s.delete_branch("side")
            with Tape.open(d) as c:
                c.compact(expire="now", grace="now")
        return read(self, h, *a, **kw)

    monkeypatch.setattr(tape_mod.Tape, "_read_entry", late)
    return fired


def test_ctape_log_beside_a_compaction_that_removed_heads_entry(tmp_path, monkeypatch):
    """The command line starts where the Python API does (logview.start_points)."""
    d = str(tmp_path / "t")
    w, s, doomed = _writer_on_a_doomed_branch(d)
    fired = _every_tape_reads_late(monkeypatch, d, s, doomed)
    out = CliRunner().invoke(main, ["--dir", d, "log", "-s", "chat", "--json"])
    assert out.exit_code == 0, out.output
    assert fired == [doomed]
    assert [json.loads(line)["payload"]["content"] for line in out.output.splitlines()] == ["on main", "be brief"]
    w.close()


def test_ctape_show_beside_a_compaction_that_removed_heads_entry(tmp_path, monkeypatch):
    d = str(tmp_path / "t")
    w, s, doomed = _writer_on_a_doomed_branch(d)
    fired = _every_tape_reads_late(monkeypatch, d, s, doomed)
    out = CliRunner().invoke(main, ["--dir", d, "show", "chat", "--json"])
    assert out.exit_code == 0, out.output
    assert fired == [doomed]
    assert json.loads(out.output)["payload"]["content"] == "on main"
    w.close()
