"""What an audit of the command line's manners found (2026-12-07, a second round): a
pattern that is not valid Unicode accepted and then breaking every scan, redact and push,
and more below. Each test fails on the code before."""

from __future__ import annotations

from ctape import Tape

from conftest import run_cli, snapshot


def test_a_pattern_that_is_not_unicode_is_refused_and_breaks_nothing(tmp_path):
    d = tmp_path / "t"
    with Tape.init(d) as t:
        t.session("chat").append("user", {"content": "hi"})
    before = snapshot(d)
    for args in (("scan", "--add-pattern", "ab\udcffcd"), ("redact", "--pattern", "ab\udcffcd", "-s", "chat")):
        p = run_cli("--dir", d, *args)
        err = p.stderr.decode()
        assert p.returncode == 2 and "not valid Unicode" in err and len(err.strip().splitlines()) == 1, (args, err)
    assert snapshot(d) == before
    p = run_cli("--dir", d, "scan")
    assert p.returncode == 0 and b"internal error" not in p.stderr, p.stderr


def test_import_from_a_terminal_ends_at_one_ctrl_d(tape_dir):
    """`import -` at a terminal says "end with Ctrl-D"; it took three: each read after the
    end of input waited for another."""
    import os
    import shlex
    import shutil
    import sys
    import time

    import pytest

    if not shutil.which("tmux"):
        pytest.skip("needs tmux")
    from test_pager import Terminal

    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    env["CTAPE_DIR"] = str(tape_dir)
    term = Terminal(env)
    try:
        ctape = f"{shlex.quote(sys.executable)} -m ctape"
        term.type(f"{ctape} import - -s x; echo DONE-rc=$?")
        term.wait_for("Ctrl-D")
        time.sleep(0.5)
        term.key("C-d")
        s = term.wait_for("DONE-rc=2", timeout=10)  # (the line typed holds "DONE-rc=$?")
        assert "DONE-rc=2" in s and "cannot tell its format" in s and "Traceback" not in s, s[-400:]
        term.type("clear")
        line = '{"role": "user", "content": "hello from a terminal"}'
        term.type(f"{ctape} import openai - -s y; echo DONE-rc=$?")
        term.wait_for("Ctrl-D")
        time.sleep(0.5)
        term.type(line)
        time.sleep(0.3)
        term.key("C-d")
        s = term.wait_for("DONE-rc=0", timeout=10)
        assert "DONE-rc=0" in s, s[-400:]
    finally:
        term.close()


def test_long_output_is_written_as_it_is_made(monkeypatch):
    """`log` of 200,000 entries showed nothing for 10-15 s (`log | head -1` waited for all
    of it) and held all its text at once: the lines were joined before the first write."""
    import click
    import pytest

    from ctape.cli import base

    made = []

    def lines():
        for i in range(10**6):
            made.append(i)
            yield f"entry {i:064x} (HEAD -> main)"

    class Enough(Exception):
        pass

    def first_write(text, *a, **kw):
        raise Enough(len(made))

    monkeypatch.setattr(click, "echo", first_write)
    for use_pager in (False, True):  # (stdout is no terminal here: no pager either way)
        made.clear()
        with pytest.raises(Enough) as e:
            base.echo_lines(lines(), use_pager)
        assert e.value.args[0] < 5000, e.value.args  # the first lines, not the million


def test_an_option_that_takes_one_name_refuses_a_second(tmp_path):
    """`branch -d nosuch -d retry` deleted retry alone and exited 0 (click keeps the last
    value of an option given twice)."""
    d = tmp_path / "t"
    with Tape.init(d) as t:
        s = t.session("s")
        s.append("user", {"content": "hi"})
        s.branch("retry")
        t.session("s").tag("v1")
    before = snapshot(d)
    for args in (("branch", "-d", "nosuch", "-d", "retry"), ("branch", "-D", "a", "-D", "retry"), ("tag", "-d", "x", "-d", "v1"),
                 ("checkout", "-b", "x", "-b", "y")):
        p = run_cli("--dir", d, *args, "-s", "s")
        err = p.stderr.decode()
        assert p.returncode == 2 and "given 2 times" in err and len(err.strip().splitlines()) == 1, (args, err)
    assert snapshot(d) == before


def test_init_in_a_folder_that_holds_other_files_says_so(tmp_path):
    """`ctape init .` in a project made the project folder the tape without a word."""
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "README").write_text("hi")
    p = run_cli("init", ".", cwd=proj)
    err = p.stderr.decode()
    assert p.returncode == 0 and "warning" in err and "README, src" in err and "./.ctape" in err, err
    empty = tmp_path / "empty"
    empty.mkdir()
    p = run_cli("init", empty)
    assert p.returncode == 0 and "warning" not in p.stderr.decode(), p.stderr


def test_an_option_in_the_wrong_place_says_where_it_goes(tmp_path):
    d = tmp_path / "t"
    with Tape.init(d) as t:
        t.session("s").append("user", {"content": "hi"})
    p = run_cli("--dir", d, "-s", "s", "log")
    assert p.returncode == 2 and "-s goes after it" in p.stderr.decode(), p.stderr
    p = run_cli("log", "--dir", d)
    assert p.returncode == 2 and "--dir goes before the command (ctape --dir DIR log" in p.stderr.decode(), p.stderr
    p = run_cli("--dir", d, "show", "@{1}", "-s", "s")
    assert p.returncode == 2 and "did you mean HEAD@{1}?" in p.stderr.decode(), p.stderr


def test_append_with_no_payload_says_so(tmp_path):
    d = tmp_path / "t"
    with Tape.init(d) as t:
        t.session("s").append("user", {"content": "hi"})
    before = snapshot(d)
    for args, stdin in ((("append", "user", "-s", "s"), b""), (("append", "user", "", "-s", "s"), None)):
        p = run_cli("--dir", d, *args, input=stdin)
        assert p.returncode == 2 and "no payload given" in p.stderr.decode(), p.stderr
    assert snapshot(d) == before


def test_the_misplaced_option_hint_names_the_whole_command(tmp_path):
    p = run_cli("remote", "add", "--dir", tmp_path, "origin", "file:///x")
    assert p.returncode == 2 and "(ctape --dir DIR remote add ...)" in p.stderr.decode(), p.stderr


def test_checkout_b_starts_a_branch_at_another_sessions_branch(tape_dir):
    """(audit, 2026-12-07) `checkout -b y other/main -s chat` was refused with "is a branch
    of another session; check it out with -s other", where `branch y other/main -s chat`
    and `checkout -b y other -s chat` work: with -b, REF is only where the branch starts.
    A plain `checkout other/main -s chat` is still refused so (HEAD would attach to a
    branch of another session)."""
    run_cli("--dir", tape_dir, "append", "user", "--text", "a", "-s", "chat", check=True)
    run_cli("--dir", tape_dir, "append", "user", "--text", "b", "-s", "other", check=True)
    tip = run_cli("--dir", tape_dir, "log", "-n", "1", "--oneline", "-s", "other", check=True).stdout.split()[0]
    run_cli("--dir", tape_dir, "checkout", "-b", "y", "other/main", "-s", "chat", check=True)
    out = run_cli("--dir", tape_dir, "log", "-n", "1", "--oneline", "-s", "chat", check=True).stdout
    assert out.startswith(tip) and b"HEAD -> y" in out, out
    p = run_cli("--dir", tape_dir, "checkout", "other/main", "-s", "chat")
    assert p.returncode == 2 and b"is a branch of another session" in p.stderr
