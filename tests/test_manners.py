"""Everyday manners, round two (issue 24, item 9): hints where a user was left guessing."""

from ctape import Tape

from conftest import run_cli


def _two(tape_dir):
    with Tape.open(tape_dir) as t:
        for name in ("chat", "other", "third"):
            t.session(name).append("user", {"content": name})


def test_session_rm_of_the_default_says_what_now(tape_dir):
    _two(tape_dir)
    d = ("--dir", tape_dir)
    run_cli(*d, "session", "use", "chat", check=True)
    p = run_cli(*d, "session", "rm", "chat", check=True)
    err = p.stderr.decode()
    assert "chat was this machine's default session" in err and "ctape session use NAME" in err
    p = run_cli(*d, "status")  # two sessions left, none chosen: the usual error
    assert p.returncode == 2 and b"several sessions" in p.stderr
    run_cli(*d, "session", "use", "other", check=True)
    p = run_cli(*d, "session", "rm", "other", check=True)
    assert b"commands now use the only session left, third" in p.stderr
    p = run_cli(*d, "status", check=True)
    assert p.stdout.startswith(b"session third")
    # not the default: no hint; named by $CTAPE_SESSION: said so
    p = run_cli(*d, "session", "rm", "third", env={"CTAPE_SESSION": "third"}, check=True)
    assert b"default session" not in p.stderr and b"$CTAPE_SESSION still names third" in p.stderr
