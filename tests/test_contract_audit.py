"""What an audit of SPEC 5, 9, 12 and 13 found, each held here:

- a read under a low decompression limit (CTAPE_MAX_OBJECT, `max_object`) refused blocks
  as damage in the index cache, for every later process: an intact tape then read as
  damaged (empty history, appends refused) until the cache was deleted;
- the limit took any text (an internal error) and any number (0, negative);
- after `session rm chat`, `-s chat` quietly read `chat2` (a prefix of it);
- the Python API read a removed session as empty instead of failing as unknown, and took
  arguments the command line refuses (`limit="x"`, `max_tokens=0`);
- Gemini sessions had no source; `search` passed bidirectional overrides to the terminal;
- the index and search caches were created readable by everyone (in an owner-only folder).
"""

from __future__ import annotations

import glob
import json
import os
import stat

import pytest

from conftest import run_cli, snapshot
from ctape.store.index import index_file
from ctape import CtapeError, InvalidInput, SessionNotFound, Tape


def cli(d, *args, env=None, **kw):
    return run_cli("--dir", d, *args, env=env, **kw)


def one_line_error(p, code):
    err = p.stderr.decode()
    assert p.returncode == code, (p.returncode, err)
    assert len(err.splitlines()) == 1 and err.startswith("ctape: error: ") and "Traceback" not in err, err
    return err


@pytest.fixture
def chat(tape_dir):
    cli(tape_dir, "append", "user", "--text", "hello there, this is a message", "-s", "chat", check=True)
    cli(tape_dir, "append", "assistant", "--text", "a reply that is long enough", "-s", "chat", check=True)
    return tape_dir


def oneline(d, *args, env=None):
    p = cli(d, "log", "-s", "chat", "--oneline", *args, env=env)
    return p.returncode, p.stdout.decode().splitlines(), p.stderr.decode()


# -- the decompression limit -----------------------------------------------------------


def test_a_read_under_a_low_limit_leaves_no_damage_behind(chat):
    rc, lines, _ = oneline(chat)
    assert rc == 0 and len(lines) == 2
    rc_low, lines_low, _ = oneline(chat, env={"CTAPE_MAX_OBJECT": "100"})
    assert lines_low != lines  # the limit did refuse something (else this test proves nothing)
    # the next process, at the default limit, reads the intact tape whole and writes to it
    assert oneline(chat) == (0, lines, "")
    cli(chat, "append", "user", "--text", "more", "-s", "chat", check=True)
    rc, after, err = oneline(chat)
    assert rc == 0 and len(after) == 3 and err == ""
    assert cli(chat, "fsck").returncode == 0


def test_the_api_limit_is_this_process_only(chat):
    with Tape.open(chat, max_object=50) as t:
        with pytest.raises(CtapeError):
            [e.payload for e in t.session("chat").log()]
    with Tape.open(chat) as t:
        assert [e.payload["content"] for e in t.session("chat").log()] == ["a reply that is long enough", "hello there, this is a message"]
        assert t.session("chat").status()["damaged"] == []


def test_under_the_same_low_limit_the_refusal_stands_and_says_so(chat):
    low = {"CTAPE_MAX_OBJECT": "100"}
    oneline(chat, env=low)
    p = cli(chat, "show", "HEAD", "-s", "chat", env=low)
    assert p.returncode == 1 and "Traceback" not in p.stderr.decode()


@pytest.mark.parametrize("value", ["abc", "-5", "0", "1e9", "12 MB"])
def test_the_limit_is_a_number_of_bytes(chat, value):
    before = snapshot(chat)
    err = one_line_error(cli(chat, "log", "-s", "chat", env={"CTAPE_MAX_OBJECT": value}), 2)
    assert "CTAPE_MAX_OBJECT" in err and "number of bytes" in err
    assert snapshot(chat) == before


@pytest.mark.parametrize("value", ["abc", -5, 0, 1.5, True])
def test_the_api_limit_is_a_number_of_bytes(chat, value):
    with pytest.raises(InvalidInput, match="max_object"):
        Tape.open(chat, max_object=value)


# -- removed sessions ------------------------------------------------------------------------


@pytest.fixture
def removed(tape_dir):
    cli(tape_dir, "append", "user", "--text", "old secret", "-s", "chat", check=True)
    cli(tape_dir, "append", "user", "--text", "another conversation", "-s", "chat2", check=True)
    cli(tape_dir, "session", "rm", "chat", check=True)
    return tape_dir


@pytest.mark.parametrize("command", [["log"], ["status"], ["state"], ["context"], ["branch"]])
def test_a_removed_sessions_name_does_not_read_another_that_starts_with_it(removed, command):
    before = snapshot(removed)
    err = one_line_error(cli(removed, *command, "-s", "chat"), 1)
    assert "no session 'chat'" in err and "chat2" in err  # the near name is offered, not taken
    assert snapshot(removed) == before
    # a prefix still names the one session it starts
    assert b"another conversation" in cli(removed, "log", "-s", "chat2", check=True).stdout


def test_reading_a_removed_session_through_the_api_fails_as_unknown(removed):
    with Tape.open(removed) as t:
        s = t.session("chat")
        for read in (lambda: list(s.log()), s.status, s.state, s.context, s.branches, s.reflog):
            with pytest.raises(SessionNotFound, match="no session 'chat'"):
                read()
        # a session not written yet reads as empty: its first append creates it
        fresh = t.session("new")
        assert list(fresh.log()) == [] and fresh.status()["head"] is None and fresh.context() == []
        # appending to the removed name starts it afresh, and it reads again
        s.append("user", {"content": "a new start"})
        assert [e.payload["content"] for e in s.log()] == ["a new start"]


# -- API arguments the command line refuses ----------------------------------------------------


def test_api_arguments_are_checked_as_the_command_line_checks_them(chat):
    with Tape.open(chat) as t:
        s = t.session("chat")
        for bad in ("x", -1, 1.5):
            with pytest.raises(InvalidInput, match="limit"):
                list(s.log(limit=bad))
        for bad in (0, -5, "x", 2.5):
            with pytest.raises(InvalidInput, match="max_tokens"):
                s.context(max_tokens=bad)
        assert len(list(s.log(limit=0))) == 0 and len(s.context(max_tokens=1)) <= 2


# -- sources, terminals, caches -----------------------------------------------------------------


def test_gemini_sessions_name_their_agent(tape_dir):
    files = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "fixtures", "gemini", "session-*")))
    assert files
    for f in files:
        cli(tape_dir, "import", "gemini", f, check=True)
    rows = [json.loads(line) for line in cli(tape_dir, "sessions", "--json", check=True).stdout.decode().splitlines()]
    assert len(rows) == len(files) and all(r["source"] and r["source"]["agent"] == "gemini" for r in rows), rows


def test_search_never_passes_bidi_overrides_to_the_terminal(tape_dir):
    cli(tape_dir, "append", "user", json.dumps({"content": "abc \u202eRTL \u2066x\u2069 \x1b[31m"}), "-s", "s", check=True)
    out = cli(tape_dir, "search", "abc", check=True).stdout.decode()
    assert "abc" in out and "\\u202e" in out and "\\u2066" in out and "\\x1b" in out
    assert not any(c in out for c in "\u202e\u2066\u2069\x1b")


def test_cache_files_are_their_owners_only(chat, tmp_path):
    cache = tmp_path / "owner-cache"
    cache.mkdir()
    env = {"CTAPE_CACHE_DIR": str(cache)}
    cli(chat, "search", "hello", env=env, check=True)
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert any(p.name == index_file() for p in files) and any(p.name == "search.sqlite" for p in files)
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, (p, oct(p.stat().st_mode))
    # a cache an older version left readable by others is made the owner's only
    index = next(p for p in files if p.name == index_file())
    os.chmod(index, 0o644)
    cli(chat, "log", "-s", "chat", env=env, check=True)
    assert stat.S_IMODE(index.stat().st_mode) == 0o600


def test_a_symlink_in_one_session_leaves_the_others_listed(tape_dir, tmp_path):
    """SPEC 14: damage in one session never stops work on the others. A symlink where a
    segment should be is refused (reading through it could leave the tape), for that
    session only: `sessions` lists the others, and marks it damaged."""
    cli(tape_dir, "append", "user", "--text", "a", "-s", "s1", check=True)
    cli(tape_dir, "append", "user", "--text", "b", "-s", "s2", check=True)
    (seg,) = (tape_dir / "sessions" / "s1").glob("*.seg")
    outside = tmp_path / "elsewhere.seg"
    os.replace(seg, outside)
    os.symlink(outside, seg)
    rows = {json.loads(line)["session"]: json.loads(line) for line in cli(tape_dir, "sessions", "--json", check=True).stdout.decode().splitlines()}
    assert rows["s2"]["entries"] == 1 and not rows["s2"]["damaged"]
    assert rows["s1"]["damaged"] and rows["s1"]["head"] is None
    listing = cli(tape_dir, "sessions", check=True).stdout.decode().splitlines()
    assert any(" s2 " in line and "damaged" not in line for line in listing)
    assert any(" s1 " in line and "[damaged: see ctape fsck]" in line for line in listing), listing
    err = one_line_error(cli(tape_dir, "log", "-s", "s1"), 1)
    assert "symlink" in err
    p = cli(tape_dir, "usage")  # the whole-tape reports go on without it, and say so
    assert p.returncode == 0 and "session 's1' left out of usage" in p.stderr.decode() and "Traceback" not in p.stderr.decode()


@pytest.mark.parametrize("path", [None, 5, ""])
def test_a_tape_is_opened_by_a_folders_path(path):
    """SPEC 9: the API's errors derive from CtapeError (a TypeError was raised)."""
    for call in (Tape.open, Tape.init):
        with pytest.raises(InvalidInput, match="path of its folder"):
            call(path)


@pytest.mark.parametrize("name", ["", "a/b", "has space", "two\nlines", "x" * 200])
def test_an_anchor_gets_a_name_a_ref_can_give_back(tape_dir, name):
    """`ctape anchor NAME`: a name `checkout NAME` and `log NAME` could never read is refused
    (exit 2, nothing written), as branch and tag names are; a long one is shown cut, once quoted."""
    cli(tape_dir, "append", "user", "--text", "hi", "-s", "s", check=True)
    before = snapshot(tape_dir)
    err = one_line_error(cli(tape_dir, "anchor", name, "-s", "s"), 2)
    assert "invalid anchor name" in err and "\"'" not in err
    assert snapshot(tape_dir) == before
    cli(tape_dir, "anchor", "tests-green", "-s", "s", check=True)
    assert json.loads(cli(tape_dir, "show", "tests-green", "-s", "s", "--json", check=True).stdout)["kind"] == "anchor"


@pytest.mark.parametrize("chunk", [b"x", 5, None])
def test_a_stream_takes_text_and_says_so_as_a_ctape_error(tape, chunk):
    s = tape.session("s")
    with pytest.raises(CtapeError, match="stream chunks are str") as ei:
        with s.stream() as w:
            w.write("kept ")
            w.write(chunk)
    assert isinstance(ei.value, TypeError)  # and still what Python code expects of a wrong type
    assert [e.payload["content"] for e in s.log()] == ["kept "]  # what came before is an interrupted stream's entry


def test_text_goes_where_the_kind_keeps_its_text(tape_dir):
    """SPEC 5: `--text` takes raw text as {"content": text}; the kinds whose payload keeps its
    text in another field (SPEC 3) get it there: a tool_result's output (with --meta
    call_id=ID) and an error's message. An error's --text was refused for lacking one."""
    cli(tape_dir, "append", "user", "--text", "hello", "-s", "s", check=True)
    cli(tape_dir, "append", "tool_result", "--text", "3 passed", "-s", "s", "--meta", "call_id=c1", check=True)
    cli(tape_dir, "append", "error", "-", "--text", "-s", "s", input=b"the tool timed out\n", check=True)
    cli(tape_dir, "append", "error", "--text", "boom", "-s", "s", "--meta", "call_id=c2", check=True)
    got = [(e["kind"], e["payload"]) for e in map(json.loads, cli(tape_dir, "log", "-s", "s", "--json", "--reverse", check=True).stdout.splitlines())]
    assert got == [("user", {"content": "hello"}), ("tool_result", {"call_id": "c1", "output": "3 passed"}),
                   ("error", {"message": "the tool timed out\n"}), ("error", {"call_id": "c2", "message": "boom"})]


@pytest.mark.parametrize("args", [["show", "LONG"], ["log", "LONG"], ["checkout", "LONG"], ["state", "LONG"], ["branch", "x", "LONG"],
                                  ["log", "LONG~2"], ["show", "abcd" * 1250], ["log", "--kind", "LONG"], ["append", "LONG", "--text", "x"]])
def test_an_error_quotes_a_long_input_cut_to_one_short_line(tape_dir, args):
    """A 5,000-character ref or kind was repeated whole in its one-line error."""
    cli(tape_dir, "append", "user", "--text", "hi", "-s", "s", check=True)
    before = snapshot(tape_dir)
    p = cli(tape_dir, *[a.replace("LONG", "zq" * 2500) for a in args], "-s", "s")
    err = one_line_error(p, p.returncode)
    assert p.returncode in (1, 2) and len(err) < 300, err
    assert snapshot(tape_dir) == before


def test_a_name_no_session_has_is_unknown_not_a_missing_session(tape_dir):
    """SPEC 13: after `session rm gone`, reading it fails as unknown (exit 1, with the closest
    names, SPEC 5), also as a REF with several sessions and none chosen: that was the "needs a
    session" usage error (exit 2), which stays for names some session does have."""
    for s in ("chat", "chat2", "gone"):
        cli(tape_dir, "append", "user", "--text", f"in {s}", "-s", s, check=True)
    cli(tape_dir, "branch", "alt", "-s", "chat", check=True)
    cli(tape_dir, "session", "rm", "gone", check=True)
    before = snapshot(tape_dir)
    for args in (["show", "gone"], ["log", "gone~1"], ["diff", "gone", "chat"], ["context", "gone"], ["state", "gone"], ["show", "nosuch"]):
        err = one_line_error(cli(tape_dir, *args), 1)
        assert "unknown ref" in err and "chat, chat2" in err, (args, err)
    for args in (["show", "main"], ["show", "alt"], ["show", "HEAD"], ["log", "HEAD@{0}"]):
        assert "needs a session" in one_line_error(cli(tape_dir, *args), 2), args
    assert snapshot(tape_dir) == before


def test_scan_counts_the_sessions_that_hold_findings(tape_dir):
    """`scan` said "2 findings in 2 sessions" with both in one session: it counted the
    sessions it scanned."""
    cli(tape_dir, "append", "user", "--text", "my token ghp_aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5", "-s", "leak", check=True)
    cli(tape_dir, "append", "user", "--text", "again ghp_zB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM7", "-s", "leak", check=True)
    cli(tape_dir, "append", "user", "--text", "nothing here", "-s", "ok", check=True)
    p = cli(tape_dir, "scan")
    assert p.returncode == 1 and p.stderr.decode().startswith("2 findings in 1 of 2 sessions;"), p.stderr
    assert cli(tape_dir, "scan", "-s", "ok").stderr.decode() == "0 findings in 1 session\n"


def test_checkout_session_branch_needs_no_session_option(tmp_path):
    """SPEC 4: checkout attaches HEAD for a branch ref SESSION/BRANCH. With several sessions
    and none chosen it asked for -s, though the ref says which session (found by a contract
    audit). The ref's session is moved; -s or $CTAPE_SESSION naming another still refuses."""
    d = tmp_path / "t"
    run_cli("--dir", d, "init", check=True)
    h = run_cli("--dir", d, "append", "user", '{"content": "x"}', "-s", "chat", check=True).stdout.decode().strip()
    run_cli("--dir", d, "branch", "alt", "-s", "chat", check=True)
    run_cli("--dir", d, "append", "user", '{"content": "y"}', "-s", "other", check=True)
    p = run_cli("--dir", d, "checkout", "chat/alt", check=True)
    assert "HEAD of session chat is now on branch alt" in p.stderr.decode()
    st = json.loads(run_cli("--dir", d, "status", "-s", "chat", "--json", check=True).stdout)
    assert (st["branch"], st["head"]) == ("alt", h)
    p = run_cli("--dir", d, "checkout", "chat/main~0", check=True)  # an entry of chat's: detached there
    st = json.loads(run_cli("--dir", d, "status", "-s", "chat", "--json", check=True).stdout)
    assert (st["branch"], st["head"]) == (None, h)
    before = snapshot(d)
    p = run_cli("--dir", d, "checkout", "chat/alt", env={"CTAPE_SESSION": "other"})
    assert p.returncode == 2 and "-s chat" in p.stderr.decode()
    p = run_cli("--dir", d, "checkout", "nosuch/alt")
    assert p.returncode != 0 and p.stderr.decode().count("\n") == 1
    assert snapshot(d) == before
    other = json.loads(run_cli("--dir", d, "status", "-s", "other", "--json", check=True).stdout)
    assert other["branch"] == "main"
    # a session chosen with `session use` is the command's session, as -s is (found in
    # review): a ref of another session detaches the chosen one there, and -b forks in it
    run_cli("--dir", d, "session", "use", "other", check=True)
    run_cli("--dir", d, "checkout", "-b", "idea", "chat/main~0", check=True)
    other = json.loads(run_cli("--dir", d, "status", "-s", "other", "--json", check=True).stdout)
    assert (other["branch"], other["head"]) == ("idea", h), other
    st = json.loads(run_cli("--dir", d, "status", "-s", "chat", "--json", check=True).stdout)
    assert (st["branch"], st["head"]) == (None, h)  # chat as it was
