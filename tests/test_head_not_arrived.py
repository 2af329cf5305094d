"""A copy that has a session's branch but not the record that set its HEAD: an rsync cut
off between the session's files (or one given a subset, or `--max-size`) brought the new
segment (the appends and the record moving `main`) without the older pack (the first
entry and the record attaching HEAD to `main`). HEAD is unknown there, not unborn: an
append used to start a new root and move `main` to it, so every entry `main` held became
unreachable on that copy (and `compact` would have removed them). Found by the long
RemoteWorld run, seed 54307 (tests/test_sync_model.py). Now an append refuses with a
one-line error, `status` says what is missing, and a sync or a checkout makes the copy
whole."""

from __future__ import annotations

import glob
import os
import shutil

import pytest

from conftest import run_cli, snapshot
from ctape import Tape
from ctape.errors import RefNotFound


def _cut_off_copy(tmp_path) -> tuple[str, str, list[str]]:
    """c0: one entry, compacted into a pack, then two more in a segment; c1: c0's
    ctape.json and the segment only. Returns the two folders and c0's entries, oldest first."""
    c0, c1 = str(tmp_path / "c0"), str(tmp_path / "c1")
    with Tape.init(c0) as t:
        s = t.session("s")
        hashes = [s.append("user", {"content": "one"}).hash]
        t.compact(grace="now", expire="90d")
        hashes += [s.append("user", {"content": w}).hash for w in ("two", "three")]
    os.makedirs(os.path.join(c1, "sessions", "s"))
    shutil.copy2(os.path.join(c0, "ctape.json"), c1)
    segments = glob.glob(os.path.join(c0, "sessions", "s", "*.seg"))
    assert segments and glob.glob(os.path.join(c0, "sessions", "s", "pack-*"))
    for f in segments:
        shutil.copy2(f, os.path.join(c1, "sessions", "s"))
    return c0, c1, hashes


def test_an_append_refuses_and_leaves_the_copy_as_it_was(tmp_path):
    _, c1, hashes = _cut_off_copy(tmp_path)
    before = snapshot(c1)
    with Tape.open(c1) as t:
        s = t.session("s")
        st = s.refs()
        assert st.head is None and st.branches == {"main": hashes[-1]} and st.head_missing
        with pytest.raises(RefNotFound, match="HEAD's record has not arrived"):
            s.append("user", {"content": "new"})
        with pytest.raises(RefNotFound, match="HEAD's record has not arrived"):
            s.extend([("user", {"content": "a"}), ("user", {"content": "b"})])
        with pytest.raises(RefNotFound), t.batch():
            s.append("user", {"content": "in a batch"})
        for make in (lambda: s.checkout(None, new_branch="b"), lambda: s.branch("b")):  # from HEAD
            with pytest.raises(RefNotFound, match="HEAD's record has not arrived"):
                make()
        assert s.refs().branches == {"main": hashes[-1]}
    assert snapshot(c1) == before


def test_the_command_line_says_what_is_missing(tmp_path):
    _, c1, hashes = _cut_off_copy(tmp_path)
    before = snapshot(c1)
    p = run_cli("--dir", c1, "append", "user", '{"content": "new"}', "-s", "s")
    err = p.stderr.decode()
    assert p.returncode == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert "HEAD's record has not arrived" in err and "ctape checkout main -s s" in err
    status = run_cli("--dir", c1, "status", "-s", "s", check=True).stdout.decode()
    assert "HEAD's record has not arrived" in status and "no entries yet" not in status
    assert snapshot(c1) == before


def test_a_sync_or_a_checkout_makes_the_copy_whole(tmp_path):
    c0, c1, hashes = _cut_off_copy(tmp_path)
    c2 = str(tmp_path / "c2")
    shutil.copytree(c1, c2)
    # the rest of the files arrive: HEAD is main again, and an append goes on from its tip
    for f in glob.glob(os.path.join(c0, "sessions", "s", "pack-*")):
        shutil.copy2(f, os.path.join(c1, "sessions", "s"))
    with Tape.open(c1) as t:
        e = t.session("s").append("user", {"content": "four"})
        assert e.parent == hashes[-1] and t.session("s").refs().branches == {"main": e.hash}
    # or the user attaches HEAD to the branch the message names
    run_cli("--dir", c2, "checkout", "main", "-s", "s", check=True)
    with Tape.open(c2) as t:
        e = t.session("s").append("user", {"content": "four"})
        assert e.parent == hashes[-1]
        # (the first entry is still only on c0: the log stops before it)
        assert [x.hash for x in t.session("s").log(limit=3)] == [e.hash, hashes[2], hashes[1]]


def test_a_new_session_and_a_removed_one_still_start_on_main(tmp_path):
    """What is not refused: HEAD with no claim and no branch (a new session), and HEAD
    deleted with every branch (`session rm`, then an append starts it again)."""
    with Tape.init(str(tmp_path / "t")) as t:
        s = t.session("fresh")
        assert not s.exists() or not s.refs().head_missing
        first = s.append("user", {"content": "hi"})
        assert first.parent is None and s.refs().branch == "main"
        st = s.refs()
        s.set_refs("session-rm", {**{b: None for b in st.branches}, "HEAD": None})
        again = s.append("user", {"content": "again"})
        assert again.parent is None and s.refs().branches == {"main": again.hash}


def test_readers_refuse_where_head_has_not_arrived_rather_than_answer_empty(tmp_path):
    """`log`, `context`, `state`, `show HEAD` and a session's name as a ref used to answer
    as if the session had no entries (an empty log, an empty prompt `[]`, exit 0): an agent
    resuming from such a copy got a valid-looking empty conversation. They refuse with the
    same one line as an append; `log --all` and a named branch still read what arrived, and
    `status` still says what is missing (audit, 2026-12-06)."""
    _, c1, hashes = _cut_off_copy(tmp_path)
    before = snapshot(c1)
    for args in (["log", "-s", "s"], ["context", "-s", "s"], ["state", "-s", "s"], ["show", "HEAD", "-s", "s"], ["show", "s"],
                 ["log", "-s", "s", "HEAD~1"]):
        p = run_cli("--dir", c1, *args)
        err = p.stderr.decode()
        assert p.returncode == 1 and p.stdout == b"" and err.count("\n") == 1, (args, p.stdout, err)
        assert "HEAD's record has not arrived" in err and "ctape checkout main -s s" in err, (args, err)
    with Tape.open(c1) as t:
        s = t.session("s")
        for read in (lambda: s.head, s.state, lambda: list(s.log(limit=5))):
            with pytest.raises(RefNotFound, match="HEAD's record has not arrived"):
                read()
    for args in (["log", "--oneline", "-s", "s", "main"], ["log", "--oneline", "--all", "-s", "s"]):
        out = run_cli("--dir", c1, *args).stdout.decode()
        assert hashes[2][:12] in out and hashes[1][:12] in out, (args, out)
    assert "HEAD's record has not arrived" in run_cli("--dir", c1, "status", "-s", "s", check=True).stdout.decode()
    assert snapshot(c1) == before


def test_the_web_view_says_what_is_missing_not_no_entries(tmp_path):
    """`ctape serve`'s session page said "no entries yet · 0 entries on HEAD" on such a copy,
    where `status` says HEAD's record has not arrived; it says that now (audit follow-up)."""
    import threading

    from ctape.web import make_server
    from test_serve import get

    _, c1, hashes = _cut_off_copy(tmp_path)
    t = Tape.open(c1)
    httpd = make_server(t, "127.0.0.1", 0)
    th = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    th.start()
    try:
        code, _, body = get(httpd.server_address[1], "/s/s")
        assert code == 200
        assert "record has not arrived yet" in body and "no entries yet" not in body and "0 entries on HEAD" not in body, body[:3000]
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.close()
