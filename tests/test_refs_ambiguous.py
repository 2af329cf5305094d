"""A bare name that is a branch (tag, anchor, session) and a hex prefix of an entry (issue 20, item 9).

SPEC 4 fixes the order: with a session, a bare name is first a branch, so `abcd` names the
branch even when entry abcd1234... exists. That stays; what changes is that the user is
told, as git says "refname is ambiguous": one `ctape: warning:` line on stderr when the
name is used, and one when such a branch is created. Real subprocesses: the warning is
what the command prints.
"""

import pytest

from conftest import run_cli
from ctape import Tape


@pytest.fixture
def chat(tape_dir):
    """A session whose entries include one whose hash starts with a 4-hex name, and a
    branch `main` elsewhere: (tape_dir, that entry's hash, its 4-digit prefix, another entry)."""
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        hashes = [s.append("user", {"content": f"message {i}"}).hash for i in range(40)]
    prefixes = [h[:4] for h in hashes]
    target = next(h for h in hashes if prefixes.count(h[:4]) == 1 and not h[:4].isdigit())
    other = hashes[0] if hashes[0] != target else hashes[1]
    return tape_dir, target, target[:4], other


def ctape(tape_dir, *args):
    p = run_cli("--dir", tape_dir, *args)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_a_branch_named_like_an_entry_prefix_wins_with_a_warning(chat):
    tape_dir, target, name, other = chat
    rc, _, err = ctape(tape_dir, "branch", name, other, "-s", "chat")
    assert rc == 0, err
    assert f"ctape: warning: branch name '{name}' is also the prefix of entry {target[:16]}...: as a ref, {name} now names the branch" in err
    for args in (["show", name, "--json"], ["log", name, "-n", "1", "--json"], ["state", name], ["checkout", name]):
        rc, out, err = ctape(tape_dir, *args, "-s", "chat")
        assert rc == 0, (args, err)
        warning = [ln for ln in err.splitlines() if ln.startswith("ctape: warning:")]
        assert warning == [f"ctape: warning: refname '{name}' is ambiguous: it names branch {name} and is the prefix of "
                           f"entry {target[:16]}...; the branch wins, write the full hash for the entry"], (args, err)
        if args[0] in ("show", "log"):
            assert f'"hash": "{other}"' in out  # the order of SPEC 4 holds: the branch
    rc, out, err = ctape(tape_dir, "show", target[:12], "--json", "-s", "chat")  # more digits: no branch, no warning
    assert rc == 0 and f'"hash": "{target}"' in out and "warning" not in err, err


def test_checkout_b_and_tags_and_sessions_warn_too(chat):
    tape_dir, target, name, other = chat
    rc, _, err = ctape(tape_dir, "checkout", "-b", name.upper(), other, "-s", "chat")
    assert rc == 0 and f"branch name '{name.upper()}' is also the prefix of entry {target[:16]}" in err, err
    rc, _, err = ctape(tape_dir, "log", name.upper(), "-n", "1", "-s", "chat")
    assert rc == 0 and f"refname '{name.upper()}' is ambiguous: it names branch" in err, err
    with Tape.open(tape_dir) as t:
        t.session("chat").tag(target[:6], other)
        t.session(target[:5]).append("user", {"content": "a session named like a prefix"})
    rc, _, err = ctape(tape_dir, "show", target[:6], "-s", "chat")
    assert rc == 0 and f"refname '{target[:6]}' is ambiguous: it names tag {target[:6]}" in err, err
    rc, _, err = ctape(tape_dir, "show", target[:5], "-s", "chat")
    assert rc == 0 and f"refname '{target[:5]}' is ambiguous: it names session {target[:5]}" in err, err


def test_no_warning_without_a_clash(chat):
    tape_dir, target, name, other = chat
    for args in (["branch", "feature", other], ["show", "feature"], ["show", target[:8]], ["log", "-n", "1"], ["branch", "beef0000"]):
        rc, _, err = ctape(tape_dir, *args, "-s", "chat")
        assert rc == 0 and "warning" not in err, (args, err)


def test_a_session_named_by_its_ref_is_its_head_though_it_has_a_branch_of_its_name(tape_dir):
    """SPEC 4: a bare name is first a branch only where the command has a session (-s or
    $CTAPE_SESSION). Without one, `chat` names session chat's HEAD, even when chat has a
    branch named chat: the session the command reads came from the REF itself (found by
    an audit: log, show, context, state and diff read the branch). With -s chat the branch
    comes first, as the SPEC says."""
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        one = s.append("user", {"content": "one"}).hash
        s.branch("chat")
        head = s.append("user", {"content": "two"}).hash
        t.session("other").append("user", {"content": "x"})  # two sessions: none is the default
    import json

    env_free = {"CTAPE_SESSION": ""}
    for args, pick in ((["show", "chat", "--json"], lambda o: json.loads(o)["hash"]),
                       (["log", "chat", "-n", "1", "--json"], lambda o: json.loads(o.splitlines()[0])["hash"]),
                       (["context", "chat", "--format", "tape"], lambda o: json.loads(o)[-1]["hash"])):
        p = run_cli("--dir", tape_dir, *args, env=env_free)
        assert p.returncode == 0, p.stderr
        assert pick(p.stdout.decode()) == head, args
        p = run_cli("--dir", tape_dir, *args, "-s", "chat", env=env_free)
        assert pick(p.stdout.decode()) == one, ["-s chat", *args]
    p = run_cli("--dir", tape_dir, "diff", "chat~1", "chat", "--json", env=env_free)
    d = json.loads(p.stdout)
    assert d["right_ref"] == head and d["left_ref"] == one
    p = run_cli("--dir", tape_dir, "show", "chat/chat", "--json", env=env_free)
    assert json.loads(p.stdout)["hash"] == one
