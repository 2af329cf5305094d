"""Tags and anchor names as refs; diff of two refs."""

import json
import shutil
import subprocess

import pytest

from ctape import Tape
from ctape.history.derived import KEY_EVERY
from ctape.errors import InvalidInput, InvalidName, RefNotFound

from conftest import run_cli, snapshot


def _chat(t, n=4):
    s = t.session("chat")
    hs = [s.append("user", {"content": f"message {i}"}).hash for i in range(n)]
    return s, hs


def test_tag_names_an_entry_and_never_moves(tape):
    s, hs = _chat(tape)
    r = s.tag("v1")
    assert r["hash"] == hs[-1] and r["old"] is None
    s.append("user", {"content": "later"})
    assert s.tags() == [{"name": "v1", "hash": hs[-1], "shadowed_by_branch": False}]
    assert tape.resolve("v1", "chat") == hs[-1]
    assert tape.resolve("chat/v1") == hs[-1]
    assert tape.resolve("v1~2", "chat") == hs[1]
    assert [b["name"] for b in s.branches()] == ["main"]  # tags are not branches
    assert s.status()["branch"] == "main"
    s.tag("old", "chat~3")
    assert tape.resolve("old", "chat") == hs[1]


def test_existing_tag_needs_force(tape):
    s, hs = _chat(tape)
    s.tag("v1", "chat~1")
    with pytest.raises(InvalidInput, match="already exists"):
        s.tag("v1")
    r = s.tag("v1", force=True)
    assert r["old"] == hs[-2] and r["hash"] == hs[-1]
    assert tape.resolve("v1", "chat") == hs[-1]
    with pytest.raises(InvalidInput, match="already exists"):
        s.tag("v1")  # even where it is: like git, only -f
    assert s.tag("v1", force=True)["unchanged"]


def test_delete_and_unknown(tape):
    s, hs = _chat(tape)
    s.tag("v1")
    assert s.delete_tag("v1") == hs[-1]
    assert s.tags() == []
    with pytest.raises(RefNotFound, match="no tag 'v1'"):
        s.delete_tag("v1")
    with pytest.raises(RefNotFound):
        tape.resolve("v1", "chat")
    with pytest.raises(InvalidName):
        s.tag("../x")
    assert tape.has_entry(hs[-1])


def test_branch_wins_over_tag(tape):
    s, hs = _chat(tape)
    s.branch("alt", "chat~2")
    r = s.tag("alt")
    assert r["shadowed_by_branch"]
    assert tape.resolve("alt", "chat") == hs[1]  # the branch
    assert tape.resolve("tag:alt", "chat") == hs[-1]  # the tag, named explicitly
    assert tape.resolve("chat/tag:alt") == hs[-1]


def test_anchor_names_resolve_to_the_newest_on_the_path(tape):
    s = tape.session("chat")
    s.append("user", {"content": "a"})
    first = s.append("anchor", {"name": "plan"}).hash
    s.append("user", {"content": "b"})
    second = s.append("anchor", {"name": "plan"}).hash
    s.append("user", {"content": "c"})
    assert tape.resolve("plan", "chat") == second
    assert tape.resolve("plan~1", "chat") == tape.read_entry(second).parent
    s.checkout(first)  # HEAD before the second anchor: the first is the newest on its path
    assert tape.resolve("plan", "chat") == first
    s.tag("plan", second)
    assert tape.resolve("plan", "chat") == second  # a tag comes before an anchor


def test_anchor_far_back_is_found_through_keyframes(tape):
    s = tape.session("deep")
    with tape.batch():
        s.append("user", {"content": "start"})
        a = s.append("anchor", {"name": "milestone"}).hash
        for i in range(3 * KEY_EVERY):
            s.append("user", {"content": f"m{i}"})
    assert tape.resolve("milestone", "deep") == a
    t2 = Tape.open(tape.path)  # another process: keyframes from the cache
    assert t2.resolve("milestone", "deep") == a
    with pytest.raises(RefNotFound):
        t2.resolve("nothing-called-this", "deep")
    t2.close()


def test_tags_keep_entries_through_compaction(tape):
    s, hs = _chat(tape)
    s.checkout("chat", new_branch="tmp")
    kept = s.append("user", {"content": "only a tag reaches this"}).hash
    s.tag("keep")
    s.checkout("main")
    s.delete_branch("tmp")
    tape.compact(expire="now", grace="now")
    assert tape.read_entry(kept).payload["content"] == "only a tag reaches this"
    assert tape.fsck()["ok"]
    s.delete_tag("keep")
    tape.compact(expire="now", grace="now")
    assert not tape.has_entry(kept)


@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed")
def test_tags_sync(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    with Tape.init(a) as t:
        _, hs = _chat(t)
    subprocess.run(["rsync", "-a", f"{a}/", f"{b}/"], check=True)
    with Tape.open(a) as t:
        t.session("chat").tag("v1", "chat~1")
    with Tape.open(b) as t:
        t.session("chat").tag("v1", "chat~3")  # the same name, elsewhere, on the other copy
    subprocess.run(["rsync", "-a", f"{a}/", f"{b}/"], check=True)
    subprocess.run(["rsync", "-a", f"{b}/", f"{a}/"], check=True)
    with Tape.open(a) as ta, Tape.open(b) as tb:
        va, vb = ta.resolve("v1", "chat"), tb.resolve("v1", "chat")
        assert va == vb and va in (hs[2], hs[0])  # one winner on every copy
        assert [x["name"] for x in ta.session("chat").branches()] == ["main"]  # no conflict branch for a tag


# -- the command ----------------------------------------------------------------------------


def test_tag_command(tape_dir):
    with Tape.open(tape_dir) as t:
        _, hs = _chat(t)
    d = ("--dir", tape_dir)
    p = run_cli(*d, "tag", "v1", "chat~1", "-s", "chat", check=True)
    assert p.stdout == b"" and b"tagged" in p.stderr
    p = run_cli(*d, "tag", "-s", "chat", "--json", check=True)
    assert [json.loads(x) for x in p.stdout.decode().splitlines()] == [{"name": "v1", "hash": hs[-2], "shadowed_by_branch": False}]
    p = run_cli(*d, "show", "v1", "-s", "chat", "--json", check=True)
    assert json.loads(p.stdout)["hash"] == hs[-2]
    p = run_cli(*d, "tag", "main", "-s", "chat", check=True)
    assert b"wins" in p.stderr and b"tag:main" in p.stderr  # a tag that shadows a branch: said so
    p = run_cli(*d, "tag", "-f", "v1", "-s", "chat", check=True)
    assert b"moved tag v1" in p.stderr


@pytest.mark.parametrize("args, code, words", [
    (["tag", "v1", "-s", "chat"], 2, "already exists"),  # without -f
    (["tag", "-d", "nosuch", "-s", "chat"], 1, "no tag"),
    (["tag", "bad/name", "-s", "chat"], 2, "invalid tag name"),
    (["tag", "x" * 200, "-s", "chat"], 2, "invalid tag name"),
    (["tag", "-d", "", "-s", "chat"], 2, "invalid tag name"),
    (["tag", "t", "nosuchref", "-s", "chat"], 1, "unknown ref"),
    (["show", "nosuchtag", "-s", "chat"], 1, "unknown ref"),
    (["tag", "t", "-s", "nosession"], 1, "no session"),
    (["diff", "chat", "nosuchref", "-s", "chat"], 1, "unknown ref"),
])
def test_bad_tag_input_is_one_line_and_changes_nothing(tape_dir, args, code, words):
    with Tape.open(tape_dir) as t:
        _chat(t)
        t.session("chat").tag("v1")
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, *args)
    err = p.stderr.decode()
    assert p.returncode == code, err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err
    assert snapshot(tape_dir) == before


# -- diff -------------------------------------------------------------------------------------


def test_diff_of_two_branches(tape):
    s, hs = _chat(tape, 3)
    s.checkout("chat~1", new_branch="alt")
    a1 = s.append("user", {"content": "alt one"}).hash
    a2 = s.append("user", {"content": "alt two\nsecond line"}).hash
    d = s.diff("main", "alt")
    assert d.to_json()["base"] == hs[1]
    assert d.left == [hs[2]] and d.right == [a1, a2]
    assert tape.diff("alt", "main", "chat").left == [a1, a2]
    same = tape.diff("main", "main", "chat")
    assert (same.base, same.left, same.right) == (hs[2], [], [])
    up = tape.diff("chat/main~2", "chat/main")
    assert (up.base, up.left, up.right) == (hs[0], [], [hs[1], hs[2]])


def test_diff_without_common_base(tape):
    _, hs = _chat(tape, 2)
    o = tape.session("other")
    o1 = o.append("user", {"content": "x"}).hash
    d = tape.diff("chat", "other")
    assert d.base is None and d.left == hs and d.right == [o1]


def test_diff_walks_only_to_the_base(tape):
    s = tape.session("deep")
    with tape.batch():
        for i in range(2000):
            s.append("user", {"content": f"m{i}"})
    s.checkout("deep~1", new_branch="alt")
    s.append("user", {"content": "fork"})
    t2 = Tape.open(tape.path)
    t2.diff("deep/main", "deep/alt")
    assert t2.store.io["records_read"] < 50  # not the 2,000 entries below the base
    t2.close()


def test_diff_command(tape_dir):
    with Tape.open(tape_dir) as t:
        s, hs = _chat(t, 3)
        s.checkout("chat~1", new_branch="alt")
        a1 = s.append("user", {"content": "alternative"}).hash
    p = run_cli("--dir", tape_dir, "diff", "main", "alt", "-s", "chat", "--json", check=True)
    got = json.loads(p.stdout)
    assert {k: got[k] for k in ("base", "left", "right")} == {"base": hs[1], "left": [hs[2]], "right": [a1]}
    p = run_cli("--dir", tape_dir, "diff", "main", "alt", "-s", "chat", check=True)
    out = p.stdout.decode()
    assert f"base {hs[1][:12]}" in out and "-content: message 2" in out and "+content: alternative" in out


def test_session_rm_drops_tags_so_compact_frees_their_entries(tape):
    s, hs = _chat(tape)
    s.checkout("chat~2", new_branch="side")
    side = s.append("user", {"content": "only side and a tag reach this"}).hash
    s.tag("keep")
    tape.remove_session("chat")
    tape.compact(expire="now", grace="now")
    assert not tape.has_entry(side) and not tape.has_entry(hs[-1])


def test_head_is_a_ref_of_the_session_and_log_shows_tags(tape, tape_dir):
    """As in git: `HEAD~2` with a session, `SESSION/HEAD`, and tags in `log`'s decorations."""
    s, hs = _chat(tape)
    assert tape.resolve("HEAD", "chat") == hs[-1]
    assert tape.resolve("HEAD~2", "chat") == hs[1]
    assert tape.resolve("chat/HEAD^") == hs[-2]
    s.checkout(hs[0])  # detached: HEAD is where it is, not a branch
    assert tape.resolve("HEAD", "chat") == hs[0]
    with pytest.raises(RefNotFound):
        tape.resolve("HEAD~1", "chat")  # the root has no parent
    with pytest.raises(RefNotFound):
        tape.resolve("HEAD")  # no session given: not a ref
    s.checkout("main")
    s.tag("v1", hs[1])
    tape.close()
    out = run_cli("--dir", tape_dir, "log", "-s", "chat", "--oneline", check=True).stdout.decode().splitlines()
    assert out[0].startswith(hs[-1][:12] + " (HEAD -> main)")
    assert out[2].startswith(hs[1][:12] + " (tag: v1)")
    p = run_cli("--dir", tape_dir, "checkout", "-b", "alt", "HEAD~1", "-s", "chat")
    assert p.returncode == 0 and tape.__class__.open(tape_dir).session("chat").refs().branches["alt"] == hs[-2]


def test_jsonl_export_carries_tags_and_import_never_moves_one(tape, tape_dir, tmp_path):
    s, hs = _chat(tape)
    s.tag("v1", hs[1])
    tape.close()
    dump = tmp_path / "chat.jsonl"
    dump.write_bytes(run_cli("--dir", tape_dir, "export", "chat", check=True).stdout)
    other = tmp_path / "other"
    run_cli("init", other, check=True)
    run_cli("--dir", other, "import", dump, check=True)
    t = Tape.open(other)
    assert t.session("chat").refs().tags == {"v1": hs[1]}
    t.session("chat").tag("v1", hs[3], force=True)  # moved here: an import leaves it
    t.close()
    p = run_cli("--dir", other, "import", dump, check=True)
    assert "tag v1-imported" in p.stderr.decode()  # the report goes to stderr
    assert Tape.open(other).session("chat").refs().tags == {"v1": hs[3], "v1-imported": hs[1]}
    # a bad tag in the refs line is a one-line error before anything is written
    lines = dump.read_text().splitlines()
    refs = json.loads(lines[-1])
    refs["tags"] = {"bad/name": hs[0]}
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:-1] + [json.dumps(refs)]) + "\n")
    before = snapshot(other)
    p = run_cli("--dir", other, "import", bad)
    assert p.returncode != 0 and "invalid tag name" in p.stderr.decode() and len(p.stderr.decode().splitlines()) == 1
    assert snapshot(other) == before
