"""`reflog` is numbered for `@{N}` (SPEC 5): a line's `index` is the N for which
`SESSION@{N}` is HEAD's position that line left it at, and a line that did not move HEAD
(a branch or tag made elsewhere, a branch moved HEAD is not on) has none. A black-box
audit found `index` counting every line, so after one `branch` the numbers of the later
lines named other positions than `@{N}`."""

import json

from conftest import run_cli


def cli(d, *args):
    p = run_cli("--dir", d, *args)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


def test_every_numbered_line_is_the_position_its_number_names(tape_dir):
    for i in range(3):
        cli(tape_dir, "append", "user", json.dumps({"content": f"m{i}"}), "-s", "s")
    cli(tape_dir, "branch", "side", "s~2", "-s", "s")  # moves no HEAD
    cli(tape_dir, "tag", "v1", "s~1", "-s", "s")
    cli(tape_dir, "append", "user", '{"content": "m3"}', "-s", "s")
    cli(tape_dir, "checkout", "s~2", "-s", "s")  # detached
    cli(tape_dir, "append", "user", '{"content": "on a detached HEAD"}', "-s", "s")
    cli(tape_dir, "checkout", "side", "-s", "s")
    cli(tape_dir, "append", "user", '{"content": "on side"}', "-s", "s")
    lines = [json.loads(x) for x in cli(tape_dir, "reflog", "s", "--json").splitlines()]
    numbered = [ln for ln in lines if ln["index"] is not None]
    assert [ln["index"] for ln in numbered] == list(range(len(numbered)))  # newest first, 0 is now
    assert any(ln["index"] is None for ln in lines) and len(numbered) >= 6
    for ln in numbered:
        shown = json.loads(cli(tape_dir, "show", f"s@{{{ln['index']}}}", "--json"))
        assert shown["hash"] == ln["head"], ln
    assert [ln["line"] for ln in lines] == list(range(len(lines)))
    # the human listing shows the same numbers
    human = cli(tape_dir, "reflog", "s").splitlines()
    assert [h.split()[0] for h in human if h[:4].strip()] == [str(ln["index"]) for ln in numbered]


def test_head_back_where_it_was_after_a_session_rm_is_a_position_of_its_own(tape_dir):
    """(audit, 2026-12-06) `session rm` and the same import again put HEAD back on the entry
    it had before the rm: the new lines got no @{N}, and `s@{0}` named the first import's
    line. Every move to an entry, from nowhere too, is a position, as git counts every
    checkout; and checking out an unborn branch and back is two moves."""
    import os

    src = os.path.join(os.path.dirname(__file__), "fixtures", "transcripts", "claude-code")
    f = os.path.join(src, sorted(x for x in os.listdir(src) if x.endswith(".jsonl"))[0])
    cli(tape_dir, "import", "claude-code", f, "-s", "s")
    cli(tape_dir, "session", "rm", "s")
    cli(tape_dir, "import", "claude-code", f, "-s", "s")
    lines = [json.loads(x) for x in cli(tape_dir, "reflog", "s", "--json").splitlines()]
    assert lines[0]["ref"] == "HEAD" and lines[0]["op"] == "import" and lines[0]["index"] == 0, lines[0]
    assert [ln["index"] for ln in lines if ln["index"] is not None] == [0, 1]
    assert lines[0]["time"] > [ln for ln in lines if ln["index"] == 1][0]["time"]
    head = json.loads(cli(tape_dir, "show", "s@{0}", "--json"))["hash"]
    assert json.loads(cli(tape_dir, "show", "s@{1}", "--json"))["hash"] == head  # the same entry, two positions
