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
