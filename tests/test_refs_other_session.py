"""Refs into another session, and names that would read as something else (a black-box
audit of refs and everyday commands, 2026-12-06).

- `checkout OTHER/X -s S` was refused as "a branch of another session" whatever X was:
  OTHER's HEAD, a tag or an anchor detach HEAD at their entry, as any REF that is not a
  branch of S does; a name OTHER lacks is an unknown ref (exit 1), not bad usage.
- `session cp OTHER/X NEW` took X for a branch: OTHER/HEAD failed with an internal
  message, a tag became a branch named after it. A branch is copied as that branch, any
  other entry as a branch `main`.
- A new session named HEAD, or 64 hex digits (an entry hash), could never be named as a
  REF (`export`, `show` failed); a 64-hex branch name in upper case slipped past the check
  that refuses it in lower case. Both refused, exit 2, the tape unchanged.
"""

import json

import pytest

from conftest import run_cli, snapshot


def cli(d, *args):
    return run_cli("--dir", d, *args)


@pytest.fixture
def two(tape_dir):
    cli(tape_dir, "append", "user", '{"content": "c"}', "-s", "chat")
    first = cli(tape_dir, "append", "user", '{"content": "o1"}', "-s", "other").stdout.decode().strip()
    cli(tape_dir, "tag", "v1", "-s", "other")
    head = cli(tape_dir, "anchor", "ms", "-s", "other").stdout.decode().strip()
    cli(tape_dir, "branch", "side", first, "-s", "other")
    return tape_dir, first, head


@pytest.mark.parametrize("ref,at", [("other/HEAD", "head"), ("other/v1", "first"), ("other/tag:v1", "first"), ("other/ms", "head")])
def test_checkout_of_another_sessions_entry_detaches_head_there(two, ref, at):
    tape_dir, first, head = two
    r = cli(tape_dir, "checkout", ref, "-s", "chat")
    assert r.returncode == 0, r.stderr.decode()
    st = json.loads(cli(tape_dir, "status", "-s", "chat", "--json").stdout)
    assert st["detached"] and st["head"] == {"first": first, "head": head}[at]


def test_checkout_of_another_sessions_branch_or_unknown_name(two):
    tape_dir, _, _ = two
    before = snapshot(tape_dir)
    r = cli(tape_dir, "checkout", "other/side", "-s", "chat")
    assert r.returncode == 2 and b"branch of another session" in r.stderr
    r = cli(tape_dir, "checkout", "other/nosuch", "-s", "chat")
    assert r.returncode == 1 and b"no branch, tag or anchor 'nosuch'" in r.stderr
    assert snapshot(tape_dir) == before


@pytest.mark.parametrize("src,branch,at", [("other/HEAD", "main", "head"), ("other/v1", "main", "first"), ("other/tag:v1", "main", "first"),
                                           ("other/ms", "main", "head"), ("other/side", "side", "first")])
def test_session_cp_of_another_sessions_ref(two, src, branch, at):
    tape_dir, first, head = two
    r = cli(tape_dir, "session", "cp", src, "copy")
    assert r.returncode == 0, r.stderr.decode()
    branches = {json.loads(line)["name"]: json.loads(line)["hash"] for line in cli(tape_dir, "branch", "-s", "copy", "--json").stdout.decode().splitlines()}
    assert branches == {branch: {"first": first, "head": head}[at]}


@pytest.mark.parametrize("name", ["HEAD", "a" * 64, "ABCDEF0123" * 6 + "abcd"])
def test_a_new_session_named_as_a_ref_reads_is_refused(tape_dir, name):
    cli(tape_dir, "append", "user", '{"content": "c"}', "-s", "chat")
    before = snapshot(tape_dir)
    for args in (["append", "user", '{"content": "x"}', "-s", name], ["session", "cp", "chat", name]):
        r = cli(tape_dir, *args)
        assert r.returncode == 2 and b"invalid session name" in r.stderr, (args, r.stderr)
    assert snapshot(tape_dir) == before


def test_an_upper_case_64_hex_branch_name_is_refused(tape_dir):
    cli(tape_dir, "append", "user", '{"content": "c"}', "-s", "chat")
    before = snapshot(tape_dir)
    r = cli(tape_dir, "branch", "ABCDEF0123" * 6 + "ABCD", "-s", "chat")
    assert r.returncode == 2 and b"reads as an entry hash" in r.stderr
    assert snapshot(tape_dir) == before


def test_a_hash_prefix_of_fewer_than_4_digits_is_said_to_be_too_short(tape_dir):
    h = cli(tape_dir, "append", "user", '{"content": "c"}', "-s", "chat").stdout.decode().strip()
    r = cli(tape_dir, "show", h[:3], "-s", "chat")
    assert r.returncode == 1 and b"at least 4 hex digits" in r.stderr and len(r.stderr.splitlines()) == 1
    assert cli(tape_dir, "show", h[:4], "-s", "chat").returncode == 0
