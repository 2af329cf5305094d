"""log's flags (REF..., --grep, --since, --until, --reverse, --all, --hidden, --graph), a
readable `show`, and terminal control characters never reaching the terminal."""

from __future__ import annotations

import json
import pathlib

import pytest

from conftest import run_cli, snapshot
from ctape import Tape

TRANSCRIPTS = pathlib.Path("/work/shared/fixtures/transcripts")


def cli(d, *args, **kw):
    return run_cli("--dir", d, *args, **kw)


def hashes(p) -> list[str]:
    return [json.loads(line)["hash"] for line in p.stdout.decode().splitlines()]


@pytest.fixture
def hist(tape_dir):
    """main: u0 a1 u2 a3 (HEAD on main); alt forks at a1 with x; a hidden entry on main."""
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        e = [
            s.append("user", {"content": "Run the Tests please"}, time="2026-01-01T10:00:00Z"),
            s.append("assistant", {"content": "running pytest now"}, time="2026-01-01T11:00:00Z"),
            s.append("user", {"content": "thanks"}, time="2026-01-02T10:00:00Z"),
            s.append("system", {"content": "snapshot"}, meta={"ctape.hidden": True}, time="2026-01-02T11:00:00Z"),
            s.append("assistant", {"content": "done"}, time="2026-01-03T10:00:00Z"),
        ]
        s.branch("alt", e[1].hash)
        s.checkout("alt")
        x = s.append("user", {"content": "a side question"}, time="2026-01-02T12:00:00Z")
        s.checkout("main")
    return tape_dir, [h.hash for h in e], x.hash


def test_hidden_entries_are_left_out_unless_asked(hist):
    d, e, _ = hist
    assert hashes(cli(d, "log", "--json", check=True)) == [e[4], e[2], e[1], e[0]]
    assert hashes(cli(d, "log", "--json", "--hidden", check=True)) == e[::-1]
    assert "[hidden]" in cli(d, "log", "--oneline", "--hidden", check=True).stdout.decode()


def test_show_marks_a_hidden_entry_only_with_hidden(hist):
    """SPEC 13: `log`, `status`, `show` mark hidden entries only with --hidden."""
    d, e, _ = hist
    assert "[hidden]" not in cli(d, "show", e[3], check=True).stdout.decode()
    assert "[hidden]" in cli(d, "show", e[3], "--hidden", check=True).stdout.decode().splitlines()[0]
    assert "[hidden]" not in cli(d, "show", e[2], "--hidden", check=True).stdout.decode()


def test_grep_is_a_case_insensitive_substring(hist):
    d, e, _ = hist
    assert hashes(cli(d, "log", "--json", "--grep", "TESTS", check=True)) == [e[0]]
    assert hashes(cli(d, "log", "--json", "--grep", "pytest", check=True)) == [e[1]]
    assert hashes(cli(d, "log", "--json", "--grep", "no such text", check=True)) == []
    p = cli(d, "log", "--grep", "")
    assert p.returncode == 2


def test_since_and_until(hist):
    d, e, _ = hist
    assert hashes(cli(d, "log", "--json", "--since", "2026-01-02T00:00:00Z", check=True)) == [e[4], e[2]]
    assert hashes(cli(d, "log", "--json", "--until", "2026-01-01T10:30:00Z", check=True)) == [e[0]]
    assert hashes(cli(d, "log", "--json", "--since", "3650d", check=True)) == [e[4], e[2], e[1], e[0]]
    assert hashes(cli(d, "log", "--json", "--since", "1h", check=True)) == []
    before = snapshot(d)
    for bad in ("yesterday", "2h30", "-1d"):
        p = cli(d, "log", "--since", bad)
        assert p.returncode == 2 and "RFC 3339" in p.stderr.decode(), p.stderr
    assert snapshot(d) == before


def test_reverse_and_n(hist):
    d, e, _ = hist
    assert hashes(cli(d, "log", "--json", "-n", "2", check=True)) == [e[4], e[2]]
    assert hashes(cli(d, "log", "--json", "-n", "2", "--reverse", check=True)) == [e[2], e[4]]
    assert hashes(cli(d, "log", "--json", "--reverse", check=True)) == [e[0], e[1], e[2], e[4]]
    assert cli(d, "log", "-n", "-1").returncode == 2
    assert cli(d, "log", "--graph", "--reverse").returncode == 2


def test_several_refs_and_all(hist):
    d, e, x = hist
    both = [e[4], x, e[2], e[1], e[0]]  # newest first by time, each once
    assert hashes(cli(d, "log", "--json", "chat/main", "chat/alt", check=True)) == both
    assert hashes(cli(d, "log", "--json", "--all", check=True)) == both
    assert hashes(cli(d, "log", "--json", "alt", check=True)) == [x, e[1], e[0]]  # a branch of the default session


def test_graph_draws_heads_line_first(hist):
    d, e, x = hist
    # put HEAD on alt, whose tip is older and shorter than main's
    cli(d, "checkout", "alt", check=True)
    lines = cli(d, "log", "--graph", "--all", check=True).stdout.decode().splitlines()
    assert lines[0].startswith("* " + x[:12]) and "HEAD -> alt" in lines[0]
    # HEAD's line stays in the first column all the way down
    for h in (x, e[1], e[0]):
        line = next(line for line in lines if h[:12] in line)
        assert line.startswith("* "), line


def test_graph_reads_in_proportion_to_what_it_draws(tape_dir):
    """`log --graph -n 5` of a long session with many branches reads a few entries per
    line drawn and per branch tip, not the history."""
    from ctape.ops import render
    from ctape.history.logview import Filter

    with Tape.open(tape_dir) as t:
        s = t.session("long")
        with t.batch():
            for i in range(2000):
                h = s.append("user", {"content": f"m{i}"}).hash
                if i % 200 == 100:
                    s.branch(f"b{i}", h)
        st = s.refs()
        reads = []
        real = t.read_entry
        t.read_entry = lambda h: (reads.append(h), real(h))[1]
        lines = list(render.graph(t, "long", [st.head_hash, *st.branches.values()], 5, Filter()))
        assert len(lines) == 5
        assert len(reads) <= 5 + 2 * (len(st.branches) + 1), len(reads)


def test_show_is_readable(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        call = s.append("tool_call", {"call_id": "c1", "name": "bash", "arguments": {"cmd": "pytest -q"}})
        res = s.append("tool_result", {"call_id": "c1", "output": "line one\nline two"}, meta={"codex": {"raw": "R" * 5000}, "tokens": "12"})
    text = cli(tape_dir, "show", call.hash, check=True).stdout.decode()
    assert "bash  (call c1)" in text and 'cmd: "pytest -q"' in text
    text = cli(tape_dir, "show", res.hash, check=True).stdout.decode()
    lines = text.splitlines()
    assert "    line one" in lines and "    line two" in lines  # the output as text
    assert "RRRR" not in text and '"tokens": "12"' in text and "--meta" in text
    assert text.index("line one") < text.index("tokens")  # payload first
    assert "R" * 5000 in cli(tape_dir, "show", res.hash, "--meta", check=True).stdout.decode()
    assert json.loads(cli(tape_dir, "show", res.hash, "--json", check=True).stdout)["meta"]["codex"]["raw"] == "R" * 5000


CONTROL = "bell\a esc\x1b[31m red\x1b]0;title\x07 del\x7f c1\x9b bidi\u202e"


def test_control_characters_are_escaped_everywhere(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        s.append("user", {"content": CONTROL})
        s.append("error", {"message": CONTROL})
    outputs = [
        cli(tape_dir, *cmd, check=True).stdout.decode()
        for cmd in (["log"], ["log", "--oneline"], ["log", "--graph"], ["show", "chat"], ["show", "chat~1"], ["status"], ["sessions"], ["branch"], ["reflog"])
    ]
    for text in outputs:
        assert not any(c in text for c in "\a\x1b\x7f\x9b\u202e"), repr(text)
    assert "\\x07" in outputs[1] and "\\x1b[31m" in outputs[1]
    assert "\\x07" in outputs[5]  # status: the last error's message


def test_status_skips_a_hidden_head(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        s.append("user", {"content": "real"})
        s.append("system", {"content": "file-history-snapshot"}, meta={"ctape.hidden": True})
    text = cli(tape_dir, "status", check=True).stdout.decode()
    assert "last entry: user" in text
    assert "last entry: system" in cli(tape_dir, "status", "--hidden", check=True).stdout.decode()


def test_claude_code_import_hides_its_bookkeeping_in_log(tape_dir):
    src = TRANSCRIPTS / "claude-code" / "codemie-ai__codemie-code__incremental-subagents_turn-1.jsonl"
    cli(tape_dir, "import", src, "-s", "cc", check=True)
    shown = cli(tape_dir, "log", "--oneline", check=True).stdout.decode()
    everything = cli(tape_dir, "log", "--oneline", "--hidden", check=True).stdout.decode()
    assert len(shown.splitlines()) < len(everything.splitlines())
    assert "[hidden]" not in shown
