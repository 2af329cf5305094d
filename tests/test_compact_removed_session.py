"""A session copied from one that is then removed (docs/privacy.md: a session named like a
secret is copied under another name, then removed). The copy refers to entries stored in
the first session's files; `compact` moves what the copy reaches into the copy's own pack,
so the removed session's folder keeps only the record of its removal, and `push -s COPY`
no longer needs (nor names) the removed session. Before, the copy waited with it for good:
`push -s COPY` refused, its files holding what the copy reads."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

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


def test_a_removed_copy_takes_nothing_over(tmp_path):
    # a removed copy's own young records reach the entries too: it was picked when its
    # name sorted first, and kept them under its name (found by a review)
    d = tmp_path / "tape"
    run_cli("--dir", d, "init", check=True)
    for text in ("one", "two"):
        run_cli("--dir", d, "append", "user", "--text", text, "-s", TOKEN, check=True)
    for name in ("draft", "fixed"):
        run_cli("--dir", d, "session", "cp", TOKEN, name, check=True)
    run_cli("--dir", d, "session", "rm", "draft", check=True)
    run_cli("--dir", d, "session", "rm", TOKEN, check=True)
    before = _history(d, "fixed")
    run_cli("--dir", d, "compact", check=True)  # the default --expire: the removals are young
    assert {h for h, _, _ in before} <= _objects_in(d, "fixed")
    assert _objects_in(d, "draft") == set() and _objects_in(d, TOKEN) == set()
    files = _files(d)
    run_cli("--dir", d, "compact", check=True)
    assert _files(d) == files


# `ctape compact`, interrupted by a real SIGINT as SESSION's pack is about to be installed
INTERRUPTED = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # (a shell's background job inherits SIGINT ignored)
from ctape.ops import compact_packs
finish = compact_packs.PackWriter.finish
def interrupted(self, *args, **kwargs):
    if self.session == os.environ["AT"]:
        os.kill(os.getpid(), signal.SIGINT)
    return finish(self, *args, **kwargs)
compact_packs.PackWriter.finish = interrupted
from ctape.__main__ import run
sys.argv[0] = "ctape"
run()
"""


def test_an_interrupted_compaction_keeps_a_pack_it_wrote_again_under_the_same_name(tmp_path):
    # A session already in one pack is packed again when objects move to it; when that pack
    # comes out byte for byte the same, it has the same name, and a compaction interrupted
    # after it took it back: the session's only copy (found by a review). Here the copy
    # "fixed" is one pack after a first compaction, and a copy of the tape from before the
    # `session cp` brings the removed session's first file back (rsync without --delete).
    d, old = tmp_path / "tape", tmp_path / "old"
    run_cli("--dir", d, "init", check=True)
    for text in ("one", "two", "three"):
        run_cli("--dir", d, "append", "user", "--text", text, "-s", TOKEN, check=True)
    shutil.copytree(d, old)
    run_cli("--dir", d, "session", "cp", TOKEN, "fixed", check=True)
    run_cli("--dir", d, "append", "user", "--text", "the copy's own", "-s", "fixed", check=True)
    run_cli("--dir", d, "session", "rm", TOKEN, check=True)
    run_cli("--dir", d, "compact", check=True)
    for text in ("other", "other 2"):
        run_cli("--dir", d, "append", "user", "--text", text, "-s", "zz", check=True)
    shutil.copytree(old, d, dirs_exist_ok=True)
    before = _history(d, "fixed")
    files = _files(d)
    env = dict(os.environ, AT="zz")
    p = subprocess.run([sys.executable, "-c", INTERRUPTED, "--dir", str(d), "compact"], env=env, capture_output=True)
    assert p.returncode == 130, p.stderr.decode()[-500:]
    assert _files(d) == files  # the tape as it was
    assert run_cli("--dir", d, "fsck").returncode == 0
    assert _history(d, "fixed") == before
    assert TOKEN not in run_cli("--dir", d, "sessions", check=True).stdout.decode()
