"""`log --graph` draws in topological order, as `git log --graph` does (issue 24 item 8):
each line of history together (a session of several unrelated runs shows one run after
another, not their entries interleaved by time), HEAD's first, a fork joining back with
`|/`; and the lanes drawn side by side stay few however many branches (issue 25)."""

from __future__ import annotations

import pathlib
import random
import re

from conftest import run_cli
from ctape import Tape
from ctape.history.logview import Filter, start_points
from ctape.ops import render

TRANSCRIPTS = pathlib.Path("/work/shared/fixtures/transcripts/claude-code")


def cli(d, *args, **kw):
    return run_cli("--dir", d, *args, **kw)


def build(tape_dir, spec, branches, head):
    """Entries (name, parent name) in time order, one second apart, then the branches
    {branch: entry name} and HEAD on `head`. Returns {hash: name}."""
    names = {}
    with Tape.open(tape_dir) as t:
        s = t.session("x")
        by_name: dict[str, str] = {}
        for i, (name, parent) in enumerate(spec):
            e = s.put_entry("user", {"content": name}, None, None, f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z", by_name.get(parent))
            by_name[name] = e.hash
            names[e.hash] = name
        s.set_refs("import", {**{b: by_name[n] for b, n in branches.items()}, "HEAD": "@" + head})
    return names


def drawing(tape_dir, names, *args) -> list[str]:
    """`log --graph --oneline` with each entry shown by its name and branch labels."""
    out = cli(tape_dir, "log", "--graph", "--all", "--no-pager", "-s", "x", *args, check=True).stdout.decode().splitlines()
    pat = re.compile(r"([0-9a-f]{12})( \((?P<deco>[^)]*)\))? +user +\S+$")

    def name(line):
        m = pat.search(line)
        if not m:
            return line
        h = next(h for h in names if h.startswith(m.group(1)))
        return line[: m.start()] + names[h] + (f" ({m.group('deco')})" if m.group("deco") else "")

    return [name(line) for line in out]


# three unrelated runs whose entries alternate in time, and a fork in run b
THREE = [("a1", None), ("b1", None), ("a2", "a1"), ("c1", None), ("b2", "b1"), ("c2", "c1"), ("a3", "a2"),
         ("b3", "b2"), ("bx", "b1"), ("c3", "c2"), ("by", "bx"), ("a4", "a3")]


def test_unrelated_runs_are_drawn_one_after_another(tape_dir):
    names = build(tape_dir, THREE, {"main": "a4", "b": "b3", "bfork": "by", "c": "c3"}, "main")
    assert drawing(tape_dir, names) == [
        "* a4 (HEAD -> main)",
        "* a3",
        "* a2",
        "* a1",
        "* by (bfork)",  # the newest line left: by (time 10) before c3 (9) and b3 (7)
        "* bx",
        "| * b3 (b)",
        "| * b2",
        "|/",
        "* b1",
        "* c3 (c)",
        "* c2",
        "* c1",
    ]
    # -n counts entries drawn, and reads no further
    assert drawing(tape_dir, names, "-n", "7") == [
        "* a4 (HEAD -> main)", "* a3", "* a2", "* a1", "* by (bfork)", "* bx", "| * b3 (b)"]


def test_head_line_first_and_forks_join_at_once(tape_dir):
    spec = [("m1", None), ("m2", "m1"), ("f1", "m1"), ("m3", "m2"), ("f2", "m2"), ("m4", "m3"), ("g1", "m3"), ("f3", "f2"), ("m5", "m4")]
    names = build(tape_dir, spec, {"main": "m5", "f": "f1", "ff": "f3", "g": "g1"}, "main")
    assert drawing(tape_dir, names) == [
        "* m5 (HEAD -> main)",
        "* m4",
        "| * g1 (g)",
        "|/",
        "* m3",
        "| * f3 (ff)",
        "| * f2",
        "|/",
        "* m2",
        "| * f1 (f)",
        "|/",
        "* m1",
    ]
    # HEAD on a branch whose tip is older: its line still comes first, down the left
    cli(tape_dir, "checkout", "ff", "-s", "x", check=True)
    assert drawing(tape_dir, names)[:4] == ["* f3 (HEAD -> ff)", "* f2", "| * m5 (main)", "| * m4"]


def test_imported_transcripts_with_several_roots(tape_dir):
    """Three real Claude Code transcripts imported into one session: three roots (branches
    main, main-imported, main-imported-2), each drawn whole, in the first column."""
    files = ["codemie-ai__codemie-code__incremental-subagents_turn-1.jsonl",
             "daaain__claude-code-log__fe869ecb-c176-478f-9734-7e4b8ef12cff.jsonl",
             "codemie-ai__codemie-code__incremental-subagents_turn-2.jsonl"]
    for f in files:
        cli(tape_dir, "import", "claude-code", str(TRANSCRIPTS / f), "-s", "x", check=True)
    with Tape.open(tape_dir) as t:
        st = t.session("x").refs()
        roots = {}
        for b, tip in st.branches.items():
            h, line = tip, []
            while h:
                line.append(h[:12])
                h = t.read_entry(h).parent
            roots[b] = line
    assert len({line[-1] for line in roots.values()}) >= 2  # unrelated runs
    lines = cli(tape_dir, "log", "--graph", "--all", "--no-pager", "--hidden", "-s", "x", check=True).stdout.decode().splitlines()
    drawn = [line[2:14] for line in lines]
    assert all(line.startswith("* ") for line in lines)  # one lane: nothing drawn side by side
    assert len(drawn) == len(set(drawn)) == len({h for line in roots.values() for h in line})
    # each run's entries come together, HEAD's (main's) first
    runs = {}
    for line in roots.values():
        runs.setdefault(line[-1], set()).update(line)
    order = [next(r for r, hs in runs.items() if h in hs) for h in drawn]
    assert [r for i, r in enumerate(order) if i == 0 or order[i - 1] != r] == list(dict.fromkeys(order))
    assert order[0] == roots["main"][-1]


def test_lanes_stay_few_with_many_branches(tape_dir):
    """300 branches off a main line, made in random order: the drawing stays two or three
    lanes wide (drawn by time, every branch would be a lane of its own at once)."""
    rnd = random.Random(7)
    with Tape.open(tape_dir) as t:
        s = t.session("x")
        with t.batch():
            main = [s.append("user", {"content": f"m{i}"}).hash for i in range(300)]
            for i in rnd.sample(range(300), 300):
                a = s.put_entry("assistant", {"content": f"f{i}"}, None, None, None, main[i])
                s.set_refs("branch", {f"b{i}": s.put_entry("user", {"content": f"g{i}"}, None, None, None, a.hash).hash})
        tips = start_points(t, "x", [], every_branch=True)
        lines = list(render.graph(t, "x", tips, None, Filter()))
    rows = [line for line in lines if "*" in line]
    assert len(rows) == 900
    assert max(line.index("*") for line in rows) <= 4


def test_graph_without_all_draws_what_head_reaches_as_log_lists_it(tape_dir):
    """SPEC 5: `log` lists from REF, default HEAD, and every branch only with --all;
    --graph changes the drawing, not the entries (as `git log --graph`). A black-box audit
    found --graph showing every branch, and --graph --json listing first an entry HEAD
    does not reach."""
    import json

    cli(tape_dir, "append", "user", "--text", "one", "-s", "c", check=True)
    cli(tape_dir, "append", "user", "--text", "two", "-s", "c", check=True)
    cli(tape_dir, "checkout", "-b", "alt", "c~1", "-s", "c", check=True)
    cli(tape_dir, "append", "user", "--text", "only on alt", "-s", "c", check=True)
    cli(tape_dir, "checkout", "main", "-s", "c", check=True)
    plain = [json.loads(x)["hash"] for x in cli(tape_dir, "log", "-s", "c", "--json", check=True).stdout.splitlines()]
    graph = [json.loads(x)["hash"] for x in cli(tape_dir, "log", "-s", "c", "--graph", "--json", check=True).stdout.splitlines()]
    assert graph == plain and len(plain) == 2
    drawn = cli(tape_dir, "log", "-s", "c", "--graph", "--no-pager", check=True).stdout.decode()
    assert "only on alt" not in drawn and "two" in drawn
    every = cli(tape_dir, "log", "-s", "c", "--graph", "--all", "--no-pager", check=True).stdout.decode()
    assert "only on alt" in every and "two" in every


def test_a_filter_draws_no_line_of_which_nothing_is_shown(tape_dir):
    """With --grep or --kind, a line none of whose entries is shown drew bars and a `|/` of
    its own, and a join below the last shown entry dangled (audit); a join between shown
    lines is still drawn, before the next shown entry."""
    spec = [("r", None), ("m1", "r"), ("s1", "r"), ("s2", "s1")]
    names = build(tape_dir, spec, {"main": "m1", "side": "s2"}, "side")
    assert drawing(tape_dir, names) == ["* s2 (HEAD -> side)", "* s1", "| * m1 (main)", "|/", "* r"]
    assert drawing(tape_dir, names, "--grep", "s") == ["* s2 (HEAD -> side)", "* s1"]
    assert drawing(tape_dir, names, "--grep", "2") == ["* s2 (HEAD -> side)"]
    assert drawing(tape_dir, names, "--grep", "r") == ["* r"]
    assert drawing(tape_dir, names, "--grep", "1") == ["* s1", "| * m1 (main)"]
    assert drawing(tape_dir, names, "--grep", "m1") == ["  * m1 (main)"]
