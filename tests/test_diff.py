"""diff: where two histories part (issue 24 item 6, issue 25): the base found with keyframe
jumps, each side's entries with their kinds, the first diverging pair, --stat."""

import json

import pytest

from ctape import Tape
from ctape.ops.diff import diff

from conftest import run_cli, snapshot


def _naive(tape, h1, h2):
    """The base and both sides, by walking every parent (what diff must agree with)."""
    def path(h):
        out = []
        while h is not None:
            out.append(h)
            h = tape.read_entry(h).parent
        return out[::-1]  # root first

    p1, p2 = path(h1), path(h2)
    n = 0
    while n < min(len(p1), len(p2)) and p1[n] == p2[n]:
        n += 1
    return (p1[n - 1] if n else None), p1[n:], p2[n:]


@pytest.fixture(scope="module")
def forked(tmp_path_factory):
    """One session: main of 1,100 entries, and branches parting from it at seqs around the
    keyframes (every 256th entry), each 300 entries long, and `long` (1,300 entries from
seq 5); plus a session of its own."""
    d = tmp_path_factory.mktemp("forked")
    t = Tape.init(d / "tape", cache_dir=d / "cache")  # the keyframes are in this cache
    s = t.session("s")
    kinds = ["user", "assistant", "system", "user"]
    with t.batch():
        main = [s.append(kinds[i % 4], {"content": f"main {i}"}).hash for i in range(1100)]
    forks = {"f1": 1, "f255": 255, "f256": 256, "f257": 257, "f512": 512, "f513": 513, "f1000": 1000}
    for name, at in forks.items():
        s.checkout(main[at - 1], new_branch=name)
        with t.batch():
            for i in range(300):
                s.append("assistant" if i % 3 else "user", {"content": f"{name} {i}"})
    s.checkout(main[4], new_branch="long")
    with t.batch():
        for i in range(1300):
            s.append("assistant", {"content": f"long {i}"})
    t.session("lone").append("user", {"content": "unrelated"})
    t.close()
    return lambda: Tape.open(d / "tape", cache_dir=d / "cache")


def test_base_and_sides_agree_with_a_walk_of_every_parent(forked):
    t = forked()
    refs = ["s/main", "s/long", "s/f1", "s/f255", "s/f256", "s/f257", "s/f512", "s/f513", "s/f1000", "s/main~700", "s/f513~299", "lone"]
    for a in refs:
        for b in refs:
            d = diff(t, a, b)
            base, left, right = _naive(t, t.resolve(a), t.resolve(b))
            assert (d.base, d.left, d.right) == (base, left, right), (a, b)
            assert (d.left_count, d.right_count) == (len(left), len(right))
            assert d.left_kinds == [t.read_entry(h).kind for h in left]
            assert d.base_seq == (t.read_entry(base).seq if base else 0)
    t.close()


def test_the_base_is_found_by_keyframe_jumps_and_a_limit_reads_few_entries(forked):
    """main and long part at seq 5: 1,095 and 1,300 entries. The base costs about
    distance/256 + 3x256 reads; with a limit, the sides are not walked."""
    t = forked()
    full = diff(t, "s/main", "s/long")
    assert (full.left_count, full.right_count, full.base_seq) == (1095, 1300, 5)
    assert full.entries_read >= 1095 + 1300
    few = diff(t, "s/main", "s/long", limit=5)
    assert (few.base, few.left_count, few.right_count) == (full.base, 1095, 1300)
    assert few.left == full.left[:5] and few.right == full.right[:5] and not few.complete
    assert few.first_pair == (full.left[0], full.right[0])
    assert few.entries_read < 1000, few.entries_read  # not the 2,395 entries of the two sides
    t.close()


def test_without_keyframes_diff_walks_the_sides_and_agrees(forked, tmp_path):
    """A fresh index cache (a tape that arrived by rsync) has no keyframes yet: the walk
    steps one parent at a time, with the same answer."""
    t = forked()
    want = diff(t, "s/main", "s/long", limit=5)
    t.close()
    with Tape.open(t.store.root, cache_dir=tmp_path / "fresh") as cold:
        got = diff(cold, "s/main", "s/long", limit=5)
    assert (got.base, got.left, got.right, got.left_count, got.right_count) == (want.base, want.left, want.right, 1095, 1300)


def test_stat_counts_kinds_and_bytes_large_values_included(tape):
    s = tape.session("c")
    s.append("user", {"content": "start"})
    s.checkout("c", new_branch="alt")
    s.checkout("main")
    s.append("user", {"content": "left"})
    s.append("tool_result", {"call_id": "c1", "output": "x" * 100_000})  # a large value (a blob)
    s.checkout("alt")
    s.append("assistant", {"content": "right"})
    d = diff(tape, "main", "alt", "c", stat=True)
    assert d.left_stat["entries"] == 2 and d.left_stat["kinds"] == {"tool_result": 1, "user": 1}
    assert d.left_stat["bytes"] > 100_000 > d.right_stat["bytes"] > 0
    assert d.right_stat == {"entries": 1, "kinds": {"assistant": 1}, "bytes": d.right_stat["bytes"]}
    assert d.to_json()["stat"] == {"left": d.left_stat, "right": d.right_stat}
    assert "stat" not in diff(tape, "main", "alt", "c").to_json()


# -- the command --------------------------------------------------------------------------


def _fork(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        base = [s.append("user", {"content": f"question {i}"}).hash for i in range(2)][-1]
        left = [
            s.append("assistant", {"content": "The tokenizer only accepts ASCII letters."}).hash,
            s.append("user", {"content": "a short reply"}).hash,
        ]
        s.checkout(base, new_branch="retry")
        right = [
            s.append("assistant", {"content": "Allow any Unicode letter."}).hash,
            s.append("tool_call", {"name": "Bash", "arguments": {"command": "pytest"}, "call_id": "t1"}).hash,
            s.append("tool_result", {"call_id": "t1", "output": "1 passed"}).hash,
        ]
        t.session("other").append("user", {"content": "unrelated"})
    return base, left, right


def test_diff_shows_the_first_diverging_pair_and_kinds(tape_dir):
    base, left, right = _fork(tape_dir)
    p = run_cli("--dir", tape_dir, "diff", "main", "retry", "-s", "chat", check=True)
    out = p.stdout.decode()
    assert out.splitlines()[0].startswith(f"common base {base[:12]} (seq 2)  user  question 1")
    assert "main: 2 entries after the base" in out and "retry: 3 entries after the base" in out
    assert f"  {left[1][:12]}  user         a short reply" in out
    assert f"  {right[1][:12]}  tool_call    Bash(" in out
    # the text diff is of the first entries after the base, not of the two tips
    assert f"first diverging pair: {left[0][:12]} (main) and {right[0][:12]} (retry)" in out
    assert f"--- main {left[0][:12]}" in out and f"+++ retry {right[0][:12]}" in out
    assert "-content: The tokenizer only accepts ASCII letters." in out and "+content: Allow any Unicode letter." in out
    text_diff = out.split("first diverging pair")[1]
    assert "a short reply" not in text_diff and "1 passed" not in text_diff


def test_diff_without_a_common_base_says_so_and_compares_nothing(tape_dir):
    _fork(tape_dir)
    out = run_cli("--dir", tape_dir, "diff", "chat", "other", check=True).stdout.decode()
    assert out.startswith("no common base: the two histories share no entry\n")
    assert "after the base" not in out and "---" not in out
    assert "chat: 5 entries (its whole history: no common base)" in out  # HEAD is on retry
    assert "other: 1 entry (its whole history: no common base)" in out


def test_diff_n_limits_each_side_and_says_how_many_more(tape_dir):
    base, left, right = _fork(tape_dir)
    out = run_cli("--dir", tape_dir, "diff", "main", "retry", "-s", "chat", "-n", "1", check=True).stdout.decode()
    assert f"  ... 1 more, up to {left[1][:12]} (-n 0 lists them all)" in out
    assert f"  ... 2 more, up to {right[2][:12]}" in out
    assert right[1][:12] not in out
    out = run_cli("--dir", tape_dir, "diff", "main", "retry", "-s", "chat", "-n", "0", check=True).stdout.decode()
    assert "more, up to" not in out and right[2][:12] in out


def test_diff_stat_like_git(tape_dir):
    _fork(tape_dir)
    out = run_cli("--dir", tape_dir, "diff", "main", "retry", "-s", "chat", "--stat", check=True).stdout.decode()
    lines = out.splitlines()
    assert lines[0].startswith("common base ")
    assert lines[1].startswith(" main  | 2 entries ") and lines[1].endswith(" bytes  (assistant 1, user 1)")
    assert lines[2].startswith(" retry | 3 entries ") and lines[2].endswith(" bytes  (assistant 1, tool_call 1, tool_result 1)")
    assert lines[3].startswith(" 2 sides, 5 entries, ") and lines[3].endswith(" bytes after the base")
    assert len(lines) == 4  # no listing, no text diff (as git diff --stat)
    got = json.loads(run_cli("--dir", tape_dir, "diff", "main", "retry", "-s", "chat", "--stat", "--json", check=True).stdout)
    assert got["stat"]["left"]["kinds"] == {"assistant": 1, "user": 1} and got["stat"]["right"]["entries"] == 3
    assert f"{got['stat']['left']['bytes']:,} bytes" in lines[1]


def test_diff_json_keeps_its_fields_and_adds_kinds(tape_dir):
    base, left, right = _fork(tape_dir)
    got = json.loads(run_cli("--dir", tape_dir, "diff", "main", "retry", "-s", "chat", "--json", "-n", "1", check=True).stdout)
    assert {k: got[k] for k in ("base", "left", "right", "left_ref", "right_ref")} == {
        "base": base, "left": left, "right": right, "left_ref": left[-1], "right_ref": right[-1]
    }  # -n does not cut --json: it lists every entry
    assert got["left_kinds"] == ["assistant", "user"] and got["right_kinds"] == ["assistant", "tool_call", "tool_result"]
    assert (got["left_count"], got["right_count"]) == (2, 3) and "stat" not in got
    got = json.loads(run_cli("--dir", tape_dir, "diff", "chat", "other", "--json", check=True).stdout)
    assert got["base"] is None and len(got["left"]) == 5 and got["right_kinds"] == ["user"]


def test_diff_of_an_unknown_ref_is_one_line_and_changes_nothing(tape_dir):
    _fork(tape_dir)
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "diff", "main", "nosuch", "-s", "chat")
    err = p.stderr.decode()
    assert p.returncode != 0 and err.count("\n") == 1 and "Traceback" not in err and "nosuch" in err
    assert snapshot(tape_dir) == before


def test_newest_lists_the_last_entries_of_each_side_and_keeps_the_first_pair(forked):
    """What the web view shows: the newest entries of each side, and where they part."""
    t = forked()
    full = diff(t, "s/main", "s/long")
    d = diff(t, "s/main", "s/long", limit=3, newest=True)
    assert d.left == full.left[-3:] and d.right == full.right[-3:] and d.left_kinds == full.left_kinds[-3:]
    assert d.first_pair == full.first_pair == (full.left[0], full.right[0])
    assert (d.left_count, d.right_count) == (1095, 1300) and d.entries_read < 1000
    t.close()
