"""Labels (HEAD, branches, tags) on hidden entries, when `log` leaves hidden entries out.

An integration's HEAD usually sits on a hidden entry (a LangGraph checkpoint, a deferred
call's record), so plain `log` once showed no HEAD at all. The label is now shown on the
newest entry shown below it, with how many hidden entries up it is: `HEAD -> main +3
hidden`. The oracle reads the same histories independently (`log --hidden --json` and
`branch`/`tag` listings, walking parents itself) and says where each label belongs.
"""

from __future__ import annotations

import json
import random
import re

from click.testing import CliRunner

from ctape import Tape
from ctape.cli import main

HIDDEN = {"ctape.hidden": True}


def cli(d, *args) -> str:
    r = CliRunner().invoke(main, ["--dir", str(d), *args])
    assert r.exit_code == 0, r.output
    return r.stdout


def build(d, seed: int) -> None:
    """A random history: runs of hidden entries between visible ones, branches and tags on
    random entries, forks from hidden and visible entries, HEAD left on any line."""
    rng = random.Random(seed)
    with Tape.open(d) as t:
        s = t.session("s")
        made = []
        for i in range(rng.randint(6, 40)):
            if made and rng.random() < 0.15:
                s.checkout(rng.choice(made))  # detached: appends fork from here
                if rng.random() < 0.5:
                    name = f"b{i}"
                    s.branch(name)
                    s.checkout(name)
            hidden = rng.random() < 0.6
            made.append(s.append("system" if hidden else "user", {"content": f"e{i}"}, meta=HIDDEN if hidden else None).hash)
            if rng.random() < 0.1:
                s.branch(f"x{i}", rng.choice(made))
            if rng.random() < 0.1:
                s.tag(f"t{i}", rng.choice(made))
        if rng.random() < 0.5:
            s.checkout(rng.choice(made))


def expected(d, every: bool) -> dict[str, list[tuple[str, int]]]:
    """Shown entry -> [(label, hidden entries up)] by the oracle: each label at its entry,
    or, on a hidden one, on its newest visible ancestor (if any), for every label whose
    entry the log reaches (HEAD's line; with `every`, every branch's too)."""
    entries = {json.loads(x)["hash"]: json.loads(x) for x in cli(d, "log", "--all", "--hidden", "--json").splitlines()}
    st = json.loads(cli(d, "status", "--json"))
    branches = [json.loads(x) for x in cli(d, "branch", "--json").splitlines()]
    tags = [json.loads(x) for x in cli(d, "tag", "--json").splitlines()]
    labels: list[tuple[str, str]] = []  # (label, entry)
    head_branch = st.get("branch")
    for b in branches:
        labels.append((f"HEAD -> {b['name']}" if b["name"] == head_branch else b["name"], b["hash"]))
    for tg in tags:
        labels.append((f"tag: {tg['name']}", tg["hash"]))
    if head_branch is None and st.get("head"):
        labels.append(("HEAD", st["head"]))

    def line(h):
        while h is not None:
            yield h
            h = entries[h]["parent"]

    reach = set()
    for tip in [st["head"]] + ([b["hash"] for b in branches] if every else []):
        reach.update(line(tip))
    out: dict[str, list[tuple[str, int]]] = {}
    for label, h in labels:
        if h not in reach:
            continue
        for v in line(h):
            if not (entries[v].get("meta") or {}).get("ctape.hidden"):
                out.setdefault(v, []).append((label, entries[h]["seq"] - entries[v]["seq"]))
                break
    return out


LINE = re.compile(r"^[*|/\\ _]*([0-9a-f]{12})(?: \((.*?)\))? ")


def shown(text: str) -> dict[str, list[tuple[str, int]]]:
    out: dict[str, list[tuple[str, int]]] = {}
    for row in text.splitlines():
        m = LINE.match(row)
        if not m:
            continue
        assert "[hidden]" not in row
        for label in (m.group(2) or "").split(", ") if m.group(2) else ():
            up = re.fullmatch(r"(.*) \+(\d+) hidden", label)
            out.setdefault(m.group(1), []).append((up.group(1), int(up.group(2))) if up else (label, 0))
    return out


def short(d: dict) -> dict:
    return {h[:12]: sorted(v) for h, v in d.items()}


def test_labels_on_hidden_entries_show_on_the_next_entry_shown(tmp_path):
    carried = 0
    for seed in range(40):
        d = tmp_path / f"t{seed}"
        Tape.init(d).close()
        build(d, seed)
        want, want_all = short(expected(d, False)), short(expected(d, True))
        carried += sum(n > 0 for v in want_all.values() for _, n in v)
        for args in (["log", "--oneline"], ["log", "--oneline", "-n", "1000"], ["log", "--oneline", "--reverse"], ["log", "--graph"]):
            got = {h: sorted(v) for h, v in shown(cli(d, *args)).items()}
            assert got == want, (seed, args)
        for args in (["log", "--oneline", "--all"], ["log", "--graph", "--all"], ["log", "--oneline", "--all", "-n", "1000"]):
            got = {h: sorted(v) for h, v in shown(cli(d, *args)).items()}
            assert got == want_all, (seed, args)
    assert carried > 40  # the histories do put labels on hidden entries


def test_the_langgraph_shape_reads_head_on_the_last_message(tmp_path):
    """Messages with checkpoints after each (hidden), HEAD on the newest checkpoint."""
    d = tmp_path / "t"
    with Tape.init(d) as t:
        s = t.session("lg")
        s.append("user", {"content": "hi"})
        s.append("system", {"content": "checkpoint 1"}, meta=HIDDEN)
        s.append("assistant", {"content": "hello"})
        s.append("system", {"content": "checkpoint 2"}, meta=HIDDEN)
        s.append("system", {"content": "writes"}, meta=HIDDEN)
    text = cli(d, "log", "--oneline")
    assert text.splitlines()[0].split(" ", 1)[1].startswith("(HEAD -> main +2 hidden) assistant")
    assert "(" not in text.splitlines()[1]
    assert "(HEAD -> main +2 hidden)" in cli(d, "log", "-n", "1")
    assert "(HEAD -> main) system" in cli(d, "log", "--oneline", "--hidden")
    with Tape.open(d) as t:  # a long run of hidden entries: the labels nearest the tip are kept
        s = t.session("lg")
        with t.batch():
            for i in range(1100):
                s.append("system", {"content": f"subgraph step {i}"}, meta=HIDDEN)
    assert "(HEAD -> main +1102 hidden) assistant" in cli(d, "log", "--oneline", "-n", "1")
    # a --kind filter that leaves out a visible entry does not carry labels past it (as git)
    assert "HEAD" not in cli(d, "log", "--oneline", "--kind", "user")
