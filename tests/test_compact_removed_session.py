"""A session copied from one that is then removed (docs/privacy.md: a session named like a
secret is copied under another name, then removed). The copy refers to entries stored in
the first session's files; `compact` moves what the copy reaches into the copy's own pack,
so the removed session's folder keeps only the record of its removal, and `push -s COPY`
no longer needs (nor names) the removed session. Before, the copy waited with it for good:
`push -s COPY` refused, its files holding what the copy reads."""

from __future__ import annotations

import os

from conftest import run_cli

from ctape import Tape
from ctape.store import framing

TOKEN = "ghp_Jb8Xw3Lp9Rt2Vb7Nm4Kc1Jh6Gf5Dd0Ss3Aa7"
BIG = "line of a large tool output\n" * 4000  # past 64 KiB: an object record of its own


def _objects_in(d, session: str) -> set[str]:
    t = Tape.open(d)
    try:
        return {r.body[:32].hex() for rel in t.store.list_files(session) for r in t.store.scan_file(rel)
                if isinstance(r, framing.Record) and r.type == framing.T_OBJECT}
    finally:
        t.close()


def _files(d) -> dict[str, bytes]:
    out = {}
    for root, _, names in os.walk(d):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = f.read()
    return out


def _history(d, session: str) -> list:
    t = Tape.open(d)
    try:
        return [(e.hash, e.kind, e.payload) for e in t.session(session).log(hidden=True)]
    finally:
        t.close()


def test_compact_moves_what_a_copy_reaches_out_of_a_removed_session(tmp_path):
    d, remote = tmp_path / "tape", tmp_path / "remote"
    run_cli("--dir", d, "init", check=True)
    for text in ("one", "two", BIG, "three"):
        run_cli("--dir", d, "append", "user", "--text", text, "-s", TOKEN, check=True)
    run_cli("--dir", d, "session", "cp", TOKEN, "fixed", check=True)
    run_cli("--dir", d, "append", "user", "--text", "after the copy", "-s", TOKEN, check=True)  # only the removed one reached it
    run_cli("--dir", d, "append", "user", "--text", "the copy's own", "-s", "fixed", check=True)
    run_cli("--dir", d, "session", "rm", TOKEN, check=True)
    before = _history(d, "fixed")
    assert len(before) == 5
    remote.mkdir()
    run_cli("--dir", d, "remote", "add", "origin", f"file://{remote}", check=True)
    p = run_cli("--dir", d, "push", "origin", "-s", "fixed")  # the removed session's files hold what it reads
    assert p.returncode == 1 and "`ctape compact`" in p.stderr.decode() and TOKEN not in p.stderr.decode()

    p = run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", check=True)
    assert "freed 1 object" in p.stdout.decode()  # "after the copy": nothing reaches it
    assert _history(d, "fixed") == before
    assert _objects_in(d, TOKEN) == set()  # the removed session's folder: its records only
    assert {h for h, _, _ in before} <= _objects_in(d, "fixed")
    assert run_cli("--dir", d, "fsck").returncode == 0
    files = _files(d)
    run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", check=True)
    assert _files(d) == files  # nothing more to move: the second run writes nothing

    p = run_cli("--dir", d, "push", "origin", "-s", "fixed")
    assert p.returncode == 0, p.stderr.decode()
    assert not any(TOKEN in rel for rel in _files(remote))
    assert all(TOKEN.encode() not in body for body in _files(remote).values())
    run_cli("clone", f"file://{remote}", tmp_path / "clone", check=True)
    assert _history(tmp_path / "clone", "fixed") == before


def test_what_two_copies_reach_goes_to_one_of_them_and_both_read_it(tmp_path):
    d = tmp_path / "tape"
    run_cli("--dir", d, "init", check=True)
    for text in ("one", "two"):
        run_cli("--dir", d, "append", "user", "--text", text, "-s", TOKEN, check=True)
    run_cli("--dir", d, "session", "cp", TOKEN, "b-copy", check=True)
    run_cli("--dir", d, "session", "cp", TOKEN, "a-copy", check=True)
    run_cli("--dir", d, "session", "rm", TOKEN, check=True)
    a, b = _history(d, "a-copy"), _history(d, "b-copy")
    run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", check=True)
    assert _history(d, "a-copy") == a and _history(d, "b-copy") == b
    assert {h for h, _, _ in a} <= _objects_in(d, "a-copy")  # the first by name
    assert _objects_in(d, TOKEN) == set()
    assert run_cli("--dir", d, "fsck").returncode == 0


def test_a_session_not_removed_keeps_what_its_copy_reaches(tmp_path):
    # only a removed session gives its objects away: a live one still reads them itself
    d = tmp_path / "tape"
    run_cli("--dir", d, "init", check=True)
    for text in ("one", "two"):
        run_cli("--dir", d, "append", "user", "--text", text, "-s", "first", check=True)
    run_cli("--dir", d, "session", "cp", "first", "second", check=True)
    held = _objects_in(d, "first")
    run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", check=True)
    assert _objects_in(d, "first") == held and _objects_in(d, "second") == set()
