"""Everyday use (SPEC 5 and 13): the default session, unknown sessions, tape discovery,
checkout -b at HEAD, branch -d / -D, session use / rm / cp, bare `ctape` and click errors."""

from __future__ import annotations

import json
import os

import pytest

from conftest import run_cli, snapshot
from ctape import Tape
from ctape.history import reflog


def cli(d, *args, **kw):
    return run_cli("--dir", d, *args, **kw)


def out(p) -> str:
    return p.stdout.decode()


def err(p) -> str:
    return p.stderr.decode()


def rejected(d, *args, code, env=None):
    """Run a command that must fail: exit `code`, one line on stderr, tape unchanged."""
    before = snapshot(d)
    p = run_cli("--dir", d, *args, env=env)
    assert p.returncode == code, (args, p.returncode, err(p))
    lines = err(p).splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctape: error: "), err(p)
    assert "Traceback" not in err(p)
    assert snapshot(d) == before
    return lines[0]


@pytest.fixture
def one(tape_dir):
    t = Tape.open(tape_dir)
    s = t.session("chat")
    hs = [s.append("user", {"content": f"m{i}"}).hash for i in range(3)]
    t.close()
    return tape_dir, hs


@pytest.fixture
def two(one):
    d, hs = one
    with Tape.open(d) as t:
        t.session("other").append("user", {"content": "o"})
    return d, hs


# -- the default session ----------------------------------------------------------------------


def test_the_only_session_is_the_default(one):
    d, hs = one
    p = cli(d, "log", "--oneline", check=True)
    assert [line.split()[0] for line in out(p).splitlines()] == [h[:12] for h in reversed(hs)]
    assert json.loads(out(cli(d, "status", "--json", check=True)))["session"] == "chat"
    assert out(cli(d, "append", "user", "--text", "more", check=True)).strip()
    assert len(out(cli(d, "log", "--oneline", check=True)).splitlines()) == 4


def test_several_sessions_and_no_choice_is_an_error_listing_them(two):
    d, _ = two
    for cmd in (["log"], ["status"], ["append", "user", "--text", "x"], ["branch"], ["reflog"]):
        line = rejected(d, *cmd, code=2)
        assert "chat" in line and "other" in line and "session use" in line


@pytest.mark.parametrize("n", [4, 8, 12])
def test_many_sessions_and_no_choice_lists_them_too(tape_dir, n):
    """The spec: with several sessions and none chosen, the error lists them. It once
    said only "4 of them" from four on; now the first eight by name, then how many."""
    names = [f"s{i:02d}" for i in range(n)]
    with Tape.open(tape_dir) as t:
        for name in names:
            t.session(name).append("user", {"content": "x"})
    line = rejected(tape_dir, "status", code=2)
    assert all(name in line for name in names[:8])
    assert (f"{n} in all" in line) == (n > 8)


def test_an_unknown_session_names_the_nearest_even_when_none_is_alike(two, tape_dir):
    d, _ = two
    line = rejected(d, "log", "-s", "zzz", code=1)
    assert "chat" in line and "other" in line
    with Tape.open(d) as t:
        for i in range(5):
            t.session(f"extra{i}").append("user", {"content": "x"})
    line = rejected(d, "log", "-s", "zzz", code=1)
    assert "the nearest of its 7 sessions" in line and len(line.split(": ", 2)[-1].split(", ")) >= 3


def test_ctape_session_env_and_s_win(two):
    d, hs = two
    p = cli(d, "status", "--json", env={"CTAPE_SESSION": "other"}, check=True)
    assert json.loads(out(p))["session"] == "other"
    p = cli(d, "status", "--json", "-s", "chat", env={"CTAPE_SESSION": "other"}, check=True)
    assert json.loads(out(p))["session"] == "chat"


def test_session_use_picks_the_default_on_this_machine_only(two):
    d, hs = two
    before = snapshot(d)
    cli(d, "session", "use", "other", check=True)
    assert snapshot(d) == before  # kept outside the tape: rsync never carries it
    rows = [json.loads(line) for line in out(cli(d, "sessions", "--json", check=True)).splitlines()]
    assert {r["session"]: r["current"] for r in rows} == {"chat": False, "other": True}
    assert json.loads(out(cli(d, "status", "--json", check=True)))["session"] == "other"
    marked = [line for line in out(cli(d, "sessions", check=True)).splitlines() if line.startswith("*")]
    assert len(marked) == 1 and marked[0].startswith("* other")
    # another cache (another machine) has no choice
    rejected(d, "status", code=2, env={"CTAPE_CACHE_DIR": str(d) + "-othercache"})
    cli(d, "session", "use", "--clear", check=True)
    rejected(d, "status", code=2)


def test_session_use_of_a_missing_session(two):
    d, _ = two
    cli(d, "session", "use", "chat", check=True)
    line = rejected(d, "session", "use", "chta", code=1)
    assert "did you mean chat" in line
    assert json.loads(out(cli(d, "status", "--json", check=True)))["session"] == "chat"  # choice unchanged
    rejected(d, "session", "use", "../x", code=2)
    rejected(d, "session", "use", code=2)


def test_python_api_default_session(two):
    d, _ = two
    with Tape.open(d) as t:
        assert t.current_session() is None
        with pytest.raises(Exception, match="several sessions"):
            t.default_session()
        t.use_session("other")
        assert t.current_session() == "other" and t.default_session() == "other"
        assert t.session_names() == ["chat", "other"]
        t.use_session(None)
        assert t.current_session() is None


# -- unknown sessions -------------------------------------------------------------------------

READERS = [
    ["log", "-s", "{}"],
    ["log", "--oneline", "-s", "{}"],
    ["status", "-s", "{}"],
    ["branch", "-s", "{}"],
    ["branch", "x", "-s", "{}"],
    ["checkout", "main", "-s", "{}"],
    ["reflog", "{}"],
    ["context", "-s", "{}"],
    ["state", "-s", "{}"],
    ["recover", "-s", "{}"],
    ["show", "main", "-s", "{}"],
    ["session", "rm", "{}"],
    ["session", "cp", "{}", "copy"],
]


@pytest.mark.parametrize("cmd", READERS, ids=lambda c: "-".join(c[:2]))
def test_a_mistyped_session_fails_with_the_closest_names(two, cmd):
    d, _ = two
    line = rejected(d, *[a.replace("{}", "chta") for a in cmd], code=1)
    assert "chta" in line and "did you mean chat" in line


def test_unknown_session_in_the_environment(two):
    d, _ = two
    line = rejected(d, "log", code=1, env={"CTAPE_SESSION": "nope"})
    assert "no session 'nope'" in line


def test_writers_still_create_sessions(one):
    d, _ = one
    cli(d, "append", "user", "--text", "x", "-s", "fresh", check=True)
    cli(d, "anchor", "m", "-s", "fresh2", check=True)
    names = [json.loads(line)["session"] for line in out(cli(d, "sessions", "--json")).splitlines()]
    assert names == ["fresh2", "fresh", "chat"]  # most recently active first


# -- finding the tape --------------------------------------------------------------------------


def test_cd_into_a_tape_made_by_init_path(tmp_path):
    t = tmp_path / "x" / "t"
    run_cli("init", t, check=True)
    run_cli("append", "user", "--text", "hi", "-s", "chat", cwd=t, check=True)
    p = run_cli("sessions", cwd=t, check=True)
    assert out(p).split()[0] == "chat"
    sub = t / "sessions"
    assert run_cli("sessions", cwd=sub, check=True).returncode == 0  # from inside it too


def test_ctape_dir_naming_the_folder_that_holds_dot_ctape(tmp_path):
    run_cli("init", tmp_path / "proj" / ".ctape", check=True)
    run_cli("append", "user", "--text", "hi", "-s", "chat", env={"CTAPE_DIR": str(tmp_path / "proj")}, check=True)
    assert (tmp_path / "proj" / ".ctape" / "sessions" / "chat").is_dir()
    p = run_cli("--dir", tmp_path / "proj", "sessions", check=True)
    assert out(p).split()[0] == "chat"


# -- checkout -b and branch -d / -D ------------------------------------------------------------


def test_checkout_b_without_ref_starts_at_head(one):
    d, hs = one
    p = cli(d, "checkout", "-b", "alt", check=True)
    assert f"branch alt at {hs[-1][:12]}" in err(p)
    rows = [json.loads(line) for line in out(cli(d, "branch", "--json", check=True)).splitlines()]
    assert {r["name"]: (r["hash"], r["current"]) for r in rows} == {"alt": (hs[-1], True), "main": (hs[-1], False)}
    rejected(d, "checkout", code=2)  # neither REF nor -b
    rejected(d, "checkout", "-b", "alt", code=2)  # taken


def test_branch_d_refuses_the_checked_out_branch(one):
    d, hs = one
    line = rejected(d, "branch", "-d", "main", code=1)
    assert "checked out" in line and "-D" in line
    p = cli(d, "branch", "-D", "main", check=True)
    assert "Deleted branch main" in err(p)
    st = json.loads(out(cli(d, "status", "--json", check=True)))
    assert st["branch"] is None and st["head"] == hs[-1]  # detached at its tip: nothing lost
    rejected(d, "branch", "-d", "x", "-D", "y", code=2)


def test_branch_d_of_another_branch(one):
    d, _ = one
    cli(d, "branch", "side", check=True)
    cli(d, "branch", "-d", "side", check=True)
    assert [json.loads(x)["name"] for x in out(cli(d, "branch", "--json")).splitlines()] == ["main"]


def test_branch_f_takes_back_appends_and_moves_back(one):
    """Taking back a wrong append, as `git branch -f` / `git reset` do: an existing branch
    moves only with -f (found by an audit: no doc showed a way, and three commands were
    needed); the old tip stays in the ref log, and the message says how to move it back."""
    d, hs = one
    line = rejected(d, "branch", "main", "HEAD~1", code=2)
    assert "branch -f main REF" in line
    p = cli(d, "branch", "-f", "main", "main~1", "--json", check=True)
    assert json.loads(out(p)) == {"name": "main", "hash": hs[1], "old": hs[2]}
    assert f"Moved branch main from {hs[2][:12]} to {hs[1][:12]}; HEAD is on it" in err(p)
    assert f"branch -f main {hs[2][:12]}` moves it back" in err(p)
    new = out(cli(d, "append", "user", '{"content": "right"}', check=True)).strip()
    assert [json.loads(x)["hash"] for x in out(cli(d, "log", "--json")).splitlines()] == [new, hs[1], hs[0]]
    assert json.loads(out(cli(d, "show", "HEAD@{2}", "--json", check=True)))["hash"] == hs[2]  # the ref log keeps it
    cli(d, "branch", "-f", "main", hs[2][:12], check=True)
    assert json.loads(out(cli(d, "status", "--json")))["head"] == hs[2]
    before = snapshot(d)
    p = cli(d, "branch", "-f", "main", hs[2], check=True)  # already there: nothing written
    assert "nothing moved" in err(p) and snapshot(d) == before
    rejected(d, "branch", "-f", code=2)
    rejected(d, "branch", "-f", "-d", "main", code=2)
    with Tape.open(d) as t:
        with pytest.raises(Exception, match="already exists"):
            t.session("chat").branch("main", hs[0])
        assert t.session("chat").branch("main", hs[0], force=True) == hs[0]


def test_a_hex_prefix_of_a_session_id_as_a_ref_names_the_session(tape_dir):
    """Claude Code and Codex name sessions by hex ids, which `sessions` shows cut short: as
    a REF such a prefix is read as an entry hash's, and the error sent the user to `ctape
    log` (found by an audit). It now names the session; `-s` takes the prefix."""
    sid = "cb2e607c-c758-415a-8b45-c49e4631906a"
    with Tape.open(tape_dir) as t:
        t.session(sid).append("user", {"content": "hi"})
        t.session("cb2e607d-0000").append("user", {"content": "other"})
    line = rejected(tape_dir, "export", "cb2e607c", code=1)
    assert f"session {sid} starts with it" in line and "whole name" in line
    line = rejected(tape_dir, "show", "cb2e607", code=1)
    assert "sessions cb2e607c-c758-415a-8b45-c49e4631906a, cb2e607d-0000 start with it" in line
    assert "`ctape log` shows the entries" in rejected(tape_dir, "show", "abcd", code=1)
    assert json.loads(out(cli(tape_dir, "log", "-s", "cb2e607c", "--json", check=True)))["payload"] == {"content": "hi"}


def test_log_since_finds_entries_below_one_whose_time_went_back(tape_dir):
    """`log --since` stopped at the first entry older than the bound, taking times along a
    history to grow; a clock stepped back, `--time`, an imported record stamped 1970 or a
    rollout whose times decrease broke that, and entries in range went missing (found by
    an audit: a Codex rollout showed none of its 10). `search --since` was right."""
    with Tape.open(tape_dir) as t:
        s = t.session("c")
        a = s.append("user", {"content": "in range, below"}, time="2026-06-01T09:00:00Z").hash
        s.append("user", {"content": "the clock went back"}, time="1970-01-01T00:00:00Z")
        b = s.append("user", {"content": "in range, top"}, time="2026-06-01T10:00:00Z").hash
        d = t.session("d")  # times that only decrease
        down = [d.append("user", {"content": f"d{i}"}, time=f"2026-06-{20 - i:02d}T00:00:00Z").hash for i in range(10)]
    shown = [json.loads(x)["hash"] for x in out(cli(tape_dir, "log", "-s", "c", "--since", "2026-05-01T00:00:00Z", "--json", check=True)).splitlines()]
    assert shown == [b, a]
    shown = [json.loads(x)["hash"] for x in out(cli(tape_dir, "log", "-s", "d", "--since", "2026-05-01T00:00:00Z", "--json", check=True)).splitlines()]
    assert sorted(shown) == sorted(down)


def test_python_delete_branch_force(one):
    d, hs = one
    with Tape.open(d) as t:
        from ctape import BranchCheckedOut

        with pytest.raises(BranchCheckedOut):
            t.session("chat").delete_branch("main", force=False)
        assert t.session("chat").delete_branch("main") == hs[-1]


# -- session rm ---------------------------------------------------------------------------------


def test_session_rm(two):
    d, hs = two
    p = cli(d, "session", "rm", "chat", check=True)
    assert "Removed session chat" in err(p)
    assert [json.loads(x)["session"] for x in out(cli(d, "sessions", "--json")).splitlines()] == ["other"]
    rejected(d, "log", "-s", "chat", code=1)
    rejected(d, "show", "chat", code=1)
    rejected(d, "session", "rm", "chat", code=1)  # gone already
    # the entries stay readable by hash until compact
    assert json.loads(out(cli(d, "show", hs[0], "--json", check=True)))["payload"] == {"content": "m0"}
    # the record is a ref record with op session-rm that nulls every ref
    with Tape.open(d) as t:
        recs = reflog.records(t.session("chat"))
        assert recs[-1]["op"] == "session-rm" and set(recs[-1]["set"].values()) == {None}
    # with one session left, it is the default
    assert json.loads(out(cli(d, "status", "--json", check=True)))["session"] == "other"
    # appending to the name starts it again
    cli(d, "append", "user", "--text", "again", "-s", "chat", check=True)
    assert len(out(cli(d, "log", "-s", "chat", "--oneline", check=True)).splitlines()) == 1


def test_session_rm_takes_its_interrupted_stream_with_it(tape_dir):
    """A writer killed mid-stream leaves a partial stream, which the next write records.
    After `session rm`, a new session of the same name starts afresh: the stream of the
    removed one is not recorded into it (it brought the removed history back on a
    `stream-*` branch, under HEAD, and the demo's next run failed on `checkout main`)."""
    import subprocess
    import sys
    import textwrap
    import time

    with Tape.open(tape_dir) as t:
        t.session("chat").append("user", {"content": "old"})
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time, ctape
        s = ctape.Tape.open({str(tape_dir)!r}).session("chat")
        with s.stream(flush_interval=0.05) as w:
            w.write("partial text"); time.sleep(0.3); print("ready", flush=True); time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline() == "ready\n"
    time.sleep(0.1)
    writer.kill()
    writer.wait()
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        assert s.status()["interrupted_stream"]["content"] == "partial text"
        t.remove_session("chat")
        e = s.append("user", {"content": "new"})
        assert e.parent is None and e.seq == 1
        assert [b["name"] for b in s.branches()] == ["main"]
        assert s.status()["interrupted_stream"] is None
    assert cli(tape_dir, "fsck", check=True).returncode == 0


def test_session_rm_of_the_chosen_session_forgets_the_choice(two):
    d, _ = two
    cli(d, "session", "use", "chat", check=True)
    cli(d, "session", "rm", "chat", check=True)
    assert json.loads(out(cli(d, "status", "--json", check=True)))["session"] == "other"


def test_session_rm_bad_input(two):
    d, _ = two
    rejected(d, "session", "rm", "nope", code=1)
    rejected(d, "session", "rm", "../x", code=2)
    rejected(d, "session", "rm", code=2)


def test_compact_frees_a_removed_session_after_expiry(two):
    d, hs = two
    cli(d, "session", "rm", "chat", check=True)
    cli(d, "compact", "--grace", "now", "--expire", "now", check=True)
    assert cli(d, "fsck").returncode == 0
    assert cli(d, "show", hs[0]).returncode == 1


# -- session cp ---------------------------------------------------------------------------------


def test_session_cp_whole_session(one):
    d, hs = one
    cli(d, "branch", "side", hs[0], "-s", "chat", check=True)
    before_files = set(snapshot(d))
    cli(d, "session", "cp", "chat", "copy", check=True)
    new_files = set(snapshot(d)) - before_files
    assert all(f.startswith(os.path.join("sessions", "copy")) for f in new_files)
    rows = {json.loads(x)["name"]: json.loads(x)["hash"] for x in out(cli(d, "branch", "-s", "copy", "--json")).splitlines()}
    assert rows == {"main": hs[-1], "side": hs[0]}
    # nothing copied: the new session's files hold a ref record only (no entry objects)
    size = sum(len(snapshot(d)[f]) for f in new_files if f.endswith(".seg"))
    assert size < 1000
    # the copy grows on its own
    cli(d, "append", "user", "--text", "only in copy", "-s", "copy", check=True)
    assert len(out(cli(d, "log", "-s", "chat", "--oneline")).splitlines()) == 3
    assert len(out(cli(d, "log", "-s", "copy", "--oneline")).splitlines()) == 4


def test_session_cp_survives_removing_and_compacting_the_source(one):
    d, hs = one
    cli(d, "session", "cp", "chat", "copy", check=True)
    cli(d, "session", "rm", "chat", check=True)
    cli(d, "compact", "--grace", "now", "--expire", "now", check=True)
    assert cli(d, "fsck").returncode == 0
    p = cli(d, "log", "-s", "copy", "--json", check=True)
    assert [json.loads(x)["hash"] for x in out(p).splitlines()] == list(reversed(hs))


def test_session_cp_one_branch_or_an_entry(one):
    d, hs = one
    cli(d, "branch", "side", hs[0], "-s", "chat", check=True)
    cli(d, "session", "cp", "chat/side", "only-side", check=True)
    rows = [json.loads(x) for x in out(cli(d, "branch", "-s", "only-side", "--json")).splitlines()]
    assert rows == [{"name": "side", "hash": hs[0], "current": True}]
    cli(d, "session", "cp", "chat~1", "at-entry", check=True)
    rows = [json.loads(x) for x in out(cli(d, "branch", "-s", "at-entry", "--json")).splitlines()]
    assert rows == [{"name": "main", "hash": hs[1], "current": True}]


def test_session_cp_bad_input(two):
    d, _ = two
    line = rejected(d, "session", "cp", "chat", "other", code=2)
    assert "already exists" in line
    rejected(d, "session", "cp", "nope", "x", code=1)
    rejected(d, "session", "cp", "chat/nobranch", "x", code=1)
    rejected(d, "session", "cp", "chat", "../x", code=2)
    rejected(d, "session", "cp", "ffffffff", "x", code=1)


def test_python_api_remove_and_copy(one):
    d, hs = one
    with Tape.open(d) as t:
        r = t.copy_session("chat", "copy")
        assert r["branches"] == {"main": hs[-1]}
        t.remove_session("chat")
        assert t.session_names() == ["copy"]
        assert [e.hash for e in t.session("copy").log()] == list(reversed(hs))


# -- the shell's manners ----------------------------------------------------------------------


def test_bare_ctape_prints_the_help():
    p = run_cli()
    assert p.returncode == 0
    assert len(out(p).splitlines()) > 10 and "Commands:" in out(p)
    assert err(p) == ""
    p = run_cli("session")
    assert p.returncode == 0 and "use" in out(p)
    # with only options before the command: the help too (it was "Missing command", exit 2)
    p = run_cli("--dir", "/nonexistent/tape")
    assert p.returncode == 0 and "Commands:" in out(p) and err(p) == "", err(p)


@pytest.mark.parametrize("args", [["bogus"], ["log", "--bogus"], ["log", "-n", "x"]])
def test_click_errors_read_as_one_sentence(args):
    p = run_cli(*args)
    assert p.returncode == 2
    line = err(p).strip()
    assert ".;" not in line and line.count("\n") == 0 and "see `" in line


def test_sessions_columns_line_up(tape_dir):
    with Tape.open(tape_dir) as t:
        t.session("a").append("user", {"content": "x"})
        t.session("a-much-longer-session-name-than-24-chars").append("user", {"content": "x"})
        with t.batch():
            for i in range(12):
                t.session("b").append("user", {"content": "x"})
        t.session("b").checkout(t.session("b").head.hash)  # detached
    lines = out(cli(tape_dir, "sessions", check=True)).splitlines()
    heads = [line.index(h) for line, h in zip(lines, [line.split()[1] for line in lines])]
    assert len(set(heads)) == 1
    ends = [line.index(line.split()[-1]) for line in lines]  # the times (the last column) start in one column
    assert len(set(ends)) == 1


# -- anchor names as refs -----------------------------------------------------------------------


def test_anchor_names_are_refs(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        s.append("user", {"content": "a"})
        old = s.append("anchor", {"name": "green"}).hash
        s.append("user", {"content": "b"})
        new = s.append("anchor", {"name": "green"}).hash
        hexy = s.append("anchor", {"name": "cafe"}).hash
        s.append("user", {"content": "c"})
        s.branch("side", old)
        s.append("anchor", {"name": "side"})  # a branch of that name wins
        assert t.resolve("green", "chat") == new  # the newest on the path to HEAD
        assert t.resolve("green~1", "chat") == t.read_entry(new).parent
        assert t.resolve("cafe", "chat") == hexy  # no entry starts with cafe... or one might
        assert t.resolve("side", "chat") == old
    p = cli(tape_dir, "checkout", "green", check=True)
    assert f"detached at {new[:12]}" in err(p)
    # from the detached HEAD at the newer anchor, the path still holds the older one only below it
    line = rejected(tape_dir, "show", "nosuch", code=1)
    assert "anchor" in line


def test_anchor_of_another_branch_is_not_on_the_path(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        root = s.append("user", {"content": "a"}).hash
        s.append("anchor", {"name": "later"})
        s.checkout(root, new_branch="alt")
        with pytest.raises(Exception, match="unknown ref"):
            t.resolve("later", "chat")
