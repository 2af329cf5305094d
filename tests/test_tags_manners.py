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
