"""Tags travel with their session: `session cp` copies them, and a sync that finds two
values for one tag says so, as it does for branches (issue 24, item 9)."""

import json
import shutil
import subprocess

import pytest

from ctape import Tape

from conftest import run_cli


def _chat(t):
    s = t.session("chat")
    hs = [s.append("user", {"content": f"m{i}"}).hash for i in range(4)]
    return s, hs


def test_session_cp_copies_tags(tape):
    s, hs = _chat(tape)
    s.tag("start", hs[0])
    s.tag("late", hs[3])
    s.checkout(hs[1], new_branch="alt")
    side = s.append("user", {"content": "side"}).hash
    s.tag("side", side)
    tape.copy_session("chat", "whole")
    assert tape.session("whole").refs().tags == {"start": hs[0], "late": hs[3], "side": side}
    # a branch copy takes the tags on its own history only
    r = tape.copy_session("chat/alt", "alt-only")
    assert tape.session("alt-only").refs().tags == {"start": hs[0], "side": side} == r["tags"]
    tape.copy_session("chat/main~1", "early")
    assert tape.session("early").refs().tags == {"start": hs[0]}
    tape.copy_session(hs[2], "by-hash")  # no session named: no tags to take
    assert tape.session("by-hash").refs().tags == {}
    # the source keeps its own, and removing the copy leaves them alone
    tape.remove_session("whole")
    assert len(tape.session("chat").refs().tags) == 3


def test_session_cp_command_says_tags(tape_dir):
    with Tape.open(tape_dir) as t:
        s, hs = _chat(t)
        s.tag("v1", hs[1])
    p = run_cli("--dir", tape_dir, "session", "cp", "chat", "copy", check=True)
    assert b"1 branch, 1 tag" in p.stderr
    p = run_cli("--dir", tape_dir, "tag", "-s", "copy", "--json", check=True)
    assert json.loads(p.stdout)["hash"] == hs[1]


def _rsync(src, dst):
    subprocess.run(["rsync", "-a", f"{src}/", f"{dst}/"], check=True)


def _tags(d):
    p = run_cli("--dir", d, "tag", "-s", "chat", "--json", check=True)
    return [json.loads(x) for x in p.stdout.decode().splitlines()]


@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed")
def test_a_tag_conflict_after_sync_is_shown_until_deleted(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    with Tape.init(a) as t:
        _, hs = _chat(t)
    _rsync(a, b)
    with Tape.open(a) as t:
        t.session("chat").tag("v1", hs[1])
    with Tape.open(b) as t:
        t.session("chat").tag("v1", hs[3])  # the same name, elsewhere, on the other copy
    _rsync(a, b)
    _rsync(b, a)
    ta, tb = _tags(a), _tags(b)
    assert ta == tb and len(ta) == 2
    win, other = ta
    assert win["name"] == "v1" and "conflict_of" not in win
    assert other["name"].startswith("v1.conflict-") and other["conflict_of"] == "v1"
    assert {win["hash"], other["hash"]} == {hs[1], hs[3]}  # neither value is lost
    p = run_cli("--dir", a, "tag", "-s", "chat", check=True)
    assert "(conflict: the other value of tag v1 after a sync)" in p.stdout.decode()
    p = run_cli("--dir", a, "status", "-s", "chat", check=True)
    assert f"conflict: tag {other['name']} holds the other value of tag v1 after a sync" in p.stdout.decode()
    p = run_cli("--dir", b, "status", "-s", "chat", "--json", check=True)
    assert json.loads(p.stdout)["tag_conflicts"] == [{"name": other["name"], "conflict_of": "v1"}]
    assert [x["name"] for x in Tape.open(a).session("chat").branches()] == ["main"]  # tags stay tags
    # the next write settles the conflict; the conflict tag stays, on both copies, until deleted
    run_cli("--dir", a, "append", "user", "--text", "more", "-s", "chat", check=True)
    _rsync(a, b)
    assert [x["name"] for x in _tags(b)] == ["v1", other["name"]]
    run_cli("--dir", b, "tag", "-d", other["name"], "-s", "chat", check=True)
    _rsync(b, a)
    assert _tags(a) == [win]
    p = run_cli("--dir", a, "status", "-s", "chat", check=True)
    assert b"conflict" not in p.stdout


def test_create_and_delete_with_json_print_one_object(tape_dir):
    """SPEC 5: single-object commands print one JSON object with --json. `tag NAME` did;
    branch creation and deletion and `tag -d` printed nothing on stdout."""
    with Tape.open(tape_dir) as t:
        h = t.session("c").append("user", {"content": "x"}).hash
    got = []
    for args in (["branch", "b1"], ["branch", "-d", "b1"], ["tag", "v1"], ["tag", "-d", "v1"]):
        p = run_cli("--dir", tape_dir, *args, "-s", "c", "--json", check=True)
        (line,) = p.stdout.decode().splitlines()
        got.append(json.loads(line))
    assert got == [{"name": "b1", "hash": h, "old": None}, {"name": "b1", "hash": None, "old": h},
                   {"name": "v1", "hash": h, "old": None}, {"name": "v1", "hash": None, "old": h}]


@pytest.mark.parametrize("name", ["HEAD", "a" * 64])
def test_a_tag_may_not_read_as_head_or_an_entry(tape_dir, name):
    """`branch HEAD` was refused and `tag HEAD` taken: the tag then showed as `tag: HEAD` on an
    entry that was not HEAD, and could be reached only as tag:HEAD."""
    with Tape.open(tape_dir) as t:
        t.session("c").append("user", {"content": "x"})
    p = run_cli("--dir", tape_dir, "tag", name, "-s", "c")
    assert p.returncode == 2 and b"invalid tag name" in p.stderr and p.stdout == b""
    assert run_cli("--dir", tape_dir, "tag", "-s", "c", check=True).stdout == b""
