"""Damage stays local, a cut file is lost data, and salvage brings a session back
(SPEC section 14; issue 12 items 3-5, issue 17 items 2, 3, 9, 10).

Real damage on real files: bytes flipped or cut in a session's segment or pack, a ref
record planted in another session's folder, a stray folder, a killed compaction's
temporary pack, a planted hard link. Commands run as the user runs them (the CLI in a
subprocess), and every refusal leaves the tape byte-identical.
"""

import json
import os
import shutil
import subprocess

import pytest

from ctape import Tape

from conftest import run_cli, snapshot


def _segments(tape_dir, session):
    d = tape_dir / "sessions" / session
    return sorted(p for p in d.iterdir() if p.name.endswith(".seg"))


@pytest.fixture
def two(tape_dir):
    """Session `a` with 30 single appends in one segment, session `b` beside it."""
    t = Tape.open(tape_dir)
    a = [t.session("a").append("user", {"content": f"message {i} " + "x" * 40}).hash for i in range(30)]
    b = [t.session("b").append("user", {"content": f"other {i}"}).hash for i in range(5)]
    t.close()
    return tape_dir, a, b


def _flip_middle(path, n=8):
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    for i in range(mid, mid + n):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _readable(tape_dir, hashes):
    out = []
    for h in hashes:
        r = run_cli("--dir", tape_dir, "show", h, "--json")
        if r.returncode == 0:
            out.append(h)
    return out


def test_damage_in_one_session_does_not_stop_the_others(two):
    tape_dir, a, b = two
    (seg,) = _segments(tape_dir, "a")
    _flip_middle(seg)
    r = run_cli("--dir", tape_dir, "sessions", "--json")
    assert r.returncode == 0, r.stderr
    rows = {json.loads(line)["session"]: json.loads(line) for line in r.stdout.decode().splitlines()}
    assert set(rows) == {"a", "b"} and not rows["b"]["damaged"]
    for cmd in (["log", "-s", "b"], ["status", "-s", "b"], ["context", "-s", "b"]):
        r = run_cli("--dir", tape_dir, *cmd)
        assert r.returncode == 0, (cmd, r.stderr)
        assert b"warning" not in r.stderr
    assert run_cli("--dir", tape_dir, "append", "user", '{"content": "b goes on"}', "-s", "b").returncode == 0
    # the damaged session shows what reads back, with a warning, and exits 1 (SPEC 5: corrupt
    # data is a failure; a script reading `log --json` must not take it for the whole history)
    r = run_cli("--dir", tape_dir, "log", "-s", "a", "--oneline")
    assert r.returncode == 1 and b"damaged" in r.stderr and b"--salvage" in r.stderr
    assert 0 < len(r.stdout.splitlines()) < 30
    # once a read has met the damage, this machine knows it
    r = run_cli("--dir", tape_dir, "sessions", "--json")
    rows = {json.loads(line)["session"]: json.loads(line) for line in r.stdout.decode().splitlines()}
    assert rows["a"]["damaged"] and not rows["b"]["damaged"]
    r = run_cli("--dir", tape_dir, "status", "-s", "a", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["damaged"] and b"--salvage" in r.stderr
    # compact works and leaves the damaged session's files as they are
    before = seg.read_bytes()
    r = run_cli("--dir", tape_dir, "compact", "--expire", "now", "--grace", "now", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["skipped_sessions"] == ["a"]
    assert seg.read_bytes() == before and _segments(tape_dir, "a") == [seg]
    # and says so without --json: a redaction in `a` stays on disk until it is salvaged (it
    # said nothing, found by an audit: `redact` says compact removes the bytes)
    run_cli("--dir", tape_dir, "append", "user", '{"content": "more of b"}', "-s", "b", check=True)
    r = run_cli("--dir", tape_dir, "compact", "--expire", "now", "--grace", "now")
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 0 and len(lines) == 1 and "session 'a' has damaged records" in lines[0] and "--salvage" in lines[0], lines
    assert seg.read_bytes() == before
    assert [p.name.endswith(".pack") for p in (tape_dir / "sessions" / "b").iterdir()] == [True]
    assert run_cli("--dir", tape_dir, "fsck").returncode == 1


def test_a_session_whose_refs_are_all_damaged_fails_its_reads_instead_of_reading_empty(two):
    """Session `a` compacted into one pack, one block holding its entries and every ref
    record; a flipped byte in it leaves no HEAD that reads back. Reads said "no entries
    yet", printed an empty log, an empty prompt and an empty export, exit 0 (audit): now
    each fails in one line naming the file and fsck --salvage (exit 1); `status` says
    HEAD is unknown; the other session reads as before; salvage brings `a` back."""
    tape_dir, a, b = two
    run_cli("--dir", tape_dir, "compact", "--grace", "now", check=True)
    (pack,) = (tape_dir / "sessions" / "a").glob("*.pack")
    _flip_middle(pack, 1)
    run_cli("--dir", tape_dir, "sessions")  # reading learns of the damage, as a user's first command would
    for args in (["log", "-s", "a"], ["log", "-s", "a", "--all"], ["context", "-s", "a"], ["export", "a"], ["export", "a", "--format", "openai"],
                 ["show", "a"], ["state", "-s", "a"], ["diff", "a", "b"]):
        r = run_cli("--dir", tape_dir, *args)
        err = r.stderr.decode()
        assert r.returncode == 1 and r.stdout == b"", (args, r.returncode, r.stdout[:200], err)
        assert "no HEAD that reads back" in err and pack.name in err and "fsck --salvage" in err and "Traceback" not in err, (args, err)
        assert len(err.strip().splitlines()) == 1, (args, err)
    st = run_cli("--dir", tape_dir, "status", "-s", "a").stdout.decode()
    assert "HEAD unknown" in st and "no entries yet" not in st
    assert json.loads(run_cli("--dir", tape_dir, "status", "-s", "a", "--json").stdout)["incomplete_because"] == "damaged"
    assert run_cli("--dir", tape_dir, "log", "-s", "b", "--json", check=True).stdout.decode().count("\n") == len(b)
    assert run_cli("--dir", tape_dir, "fsck", "--salvage").returncode == 0
    assert run_cli("--dir", tape_dir, "log", "-s", "a").returncode == 0


def test_no_write_to_a_damaged_session_until_salvaged(two):
    tape_dir, a, b = two
    (seg,) = _segments(tape_dir, "a")
    _flip_middle(seg)
    before = snapshot(tape_dir)
    r = run_cli("--dir", tape_dir, "append", "user", '{"content": "x"}', "-s", "a")
    assert r.returncode == 1 and b"--salvage" in r.stderr and len(r.stderr.splitlines()) == 1
    assert snapshot(tape_dir) == before


def test_salvage_keeps_every_readable_entry_and_the_session_works_again(two):
    tape_dir, a, b = two
    (seg,) = _segments(tape_dir, "a")
    _flip_middle(seg)
    readable = _readable(tape_dir, a)
    assert 20 <= len(readable) < 30  # one block lost, the rest reads back
    r = run_cli("--dir", tape_dir, "fsck", "--salvage")
    assert r.returncode == 0, r.stderr
    assert b"salvaged sessions/a/" in r.stderr and b"warning" in r.stderr
    # every entry that read back still does; salvage may keep one more: where the flipped
    # bytes cover the end of the block before the damaged one (its checksum, not its body),
    # reads refuse that block, and salvage keeps the entry in it, verified by its hash (a
    # CI run hit this: the layout moves by a byte with each run's timestamps;
    # test_salvage_keeps_an_entry_whose_block_lost_only_its_checksum pins it down)
    kept = _readable(tape_dir, a)
    assert set(readable) <= set(kept) and len(kept) - len(readable) <= 1
    readable = kept
    (q,) = [p for p in (tape_dir / "quarantine" / "a").glob(f"{seg.name}.*") if not p.name.endswith(".json")]
    assert q.exists() and not seg.exists()
    r = run_cli("--dir", tape_dir, "fsck", "--json")
    assert r.returncode == 0
    report = json.loads(r.stdout)
    assert report["ok"] and any("salvaged" in w["problem"] for w in report["warnings"])
    # the lost block leaves a gap: log shows HEAD's side of it and says where it stops; the
    # older side is kept on a branch, so nothing readable is left to compaction
    r = run_cli("--dir", tape_dir, "log", "-s", "a", "--oneline")
    assert r.returncode == 0 and b"damaged" not in r.stderr and b"history stops here" in r.stderr
    r = run_cli("--dir", tape_dir, "branch", "-s", "a", "--json")
    salvaged = [json.loads(line) for line in r.stdout.decode().splitlines() if json.loads(line)["name"].startswith("salvaged-")]
    assert len(salvaged) == 1 and salvaged[0]["hash"] in readable
    run_cli("--dir", tape_dir, "compact", "--expire", "now", "--grace", "now", check=True)
    assert _readable(tape_dir, a) == readable
    assert run_cli("--dir", tape_dir, "append", "user", '{"content": "back"}', "-s", "a").returncode == 0
    # a second salvage finds nothing to do and changes nothing
    before = snapshot(tape_dir)
    r = run_cli("--dir", tape_dir, "fsck", "--salvage")
    assert r.returncode == 0 and b"nothing to salvage" in r.stderr
    assert snapshot(tape_dir) == before


def test_salvage_keeps_an_entry_whose_block_lost_only_its_checksum(two):
    """Eight bytes flipped across the end of one block (its checksum) and the header of the
    next: reads refuse both blocks, but the first one's body is whole, and salvage keeps its
    entry (checked against its hash) and leaves the salvaged branch at it."""
    tape_dir, a, b = two
    (seg,) = _segments(tape_dir, "a")
    from ctape.store import framing
    records = [r for r in framing.scan(seg.read_bytes()) if isinstance(r, framing.Record)]
    data = bytearray(seg.read_bytes())
    start = records[15].end - 3  # records[0] is the file's header: records[15] holds a[14]
    for i in range(start, start + 8):
        data[i] ^= 0xFF
    seg.write_bytes(bytes(data))
    readable = _readable(tape_dir, a)
    assert readable == a[:14] + a[16:]
    r = run_cli("--dir", tape_dir, "fsck", "--salvage")
    assert r.returncode == 0, r.stderr
    assert b"1 of them read from a damaged block" in r.stderr
    assert _readable(tape_dir, a) == a[:15] + a[16:]
    r = run_cli("--dir", tape_dir, "branch", "-s", "a", "--json")
    tips = [json.loads(line)["hash"] for line in r.stdout.decode().splitlines() if json.loads(line)["name"].startswith("salvaged-")]
    assert tips == [a[14]]
    r = run_cli("--dir", tape_dir, "log", "-s", "a", "--oneline")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 14 and b"history stops here" in r.stderr


def test_salvage_of_a_healthy_tape_changes_nothing(two):
    tape_dir, *_ = two
    before = snapshot(tape_dir)
    r = run_cli("--dir", tape_dir, "fsck", "--salvage")
    assert r.returncode == 0 and b"nothing to salvage" in r.stderr
    assert snapshot(tape_dir) == before


def test_salvage_on_a_read_only_tape_is_refused(two, tmp_path):
    tape_dir, *_ = two
    (seg,) = _segments(tape_dir, "a")
    _flip_middle(seg)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount(8) for a read-only bind mount")
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "--bind", "-o", "ro", str(tape_dir), str(ro)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True)
        before = snapshot(tape_dir)
        r = run_cli("--dir", ro, "fsck", "--salvage")
        assert r.returncode == 1 and b"read-only" in r.stderr and len(r.stderr.splitlines()) == 1
        assert snapshot(tape_dir) == before
    finally:
        subprocess.run(["umount", str(ro)], capture_output=True)


def test_a_cut_segment_is_lost_data_not_a_torn_tail(two):
    tape_dir, a, b = two
    (seg,) = _segments(tape_dir, "a")
    run_cli("--dir", tape_dir, "log", "-s", "a", check=True)  # this machine has read the whole file
    with open(seg, "r+b") as f:
        f.truncate(seg.stat().st_size // 2)
    r = run_cli("--dir", tape_dir, "fsck")
    assert r.returncode == 1 and b"lost acknowledged data" in r.stdout
    assert run_cli("--dir", tape_dir, "fsck").returncode == 1  # stays reported
    r = run_cli("--dir", tape_dir, "fsck", "--salvage")
    assert r.returncode == 0 and b"noted the loss" in r.stderr
    r = run_cli("--dir", tape_dir, "fsck", "--json")
    assert r.returncode == 0 and any("lost" in w["problem"] for w in json.loads(r.stdout)["warnings"])
    # said as a sentence (it read "the damaged file is kept in (left in place: ...)")
    (w,) = [w["problem"] for w in json.loads(r.stdout)["warnings"] if "lost" in w["problem"]]
    assert w.endswith("; the file was left in place (what remains is intact)"), w


def test_a_cut_file_restored_from_a_copy_is_whole_again(two, tmp_path):
    tape_dir, a, b = two
    (seg,) = _segments(tape_dir, "a")
    whole = seg.read_bytes()
    run_cli("--dir", tape_dir, "log", "-s", "a", check=True)
    with open(seg, "r+b") as f:
        f.truncate(len(whole) // 2)
    assert run_cli("--dir", tape_dir, "fsck").returncode == 1
    seg.write_bytes(whole)  # as an rsync from a copy that has it would
    assert run_cli("--dir", tape_dir, "fsck").returncode == 0


def _compacted(tape_dir):
    run_cli("--dir", tape_dir, "compact", "--expire", "now", "--grace", "now", check=True)
    (pack,) = (tape_dir / "sessions" / "a").glob("pack-*.pack")
    return pack


@pytest.mark.parametrize("cut", ["bytes", "last-block"])
def test_a_cut_pack_fails_fsck(two, cut):
    tape_dir, a, b = two
    pack = _compacted(tape_dir)
    data = pack.read_bytes()
    if cut == "bytes":
        data = data[:-100]
    else:  # drop the last record whole: every record left is intact, only the name tells
        from ctape.store import framing

        last = [item for item in framing.scan(data) if isinstance(item, framing.Record)][-1]
        data = data[: last.offset]
    pack.write_bytes(data)
    r = run_cli("--dir", tape_dir, "fsck")
    assert r.returncode == 1 and b"does not match its name" in r.stdout


def test_a_ref_record_in_another_sessions_folder_moves_nothing(two):
    tape_dir, a, b = two
    (bseg,) = _segments(tape_dir, "b")
    planted = tape_dir / "sessions" / "a" / ("0000beef-" + bseg.name.split("-", 1)[1])
    shutil.copyfile(bseg, planted)
    t = Tape.open(tape_dir)
    try:
        assert t.session("a").refs().branches == {"main": a[-1]}
        assert t.session("b").refs().branches == {"main": b[-1]}
        report = t.fsck()
        assert not report["ok"] and any("session 'b'" in p["problem"] for p in report["problems"])
    finally:
        t.close()


def test_stray_folders_and_files_are_reported_and_ignored(two):
    tape_dir, a, b = two
    (tape_dir / "sessions" / ".stfolder").mkdir()
    (tape_dir / "sessions" / "a" / "notes.txt").write_text("mine")
    r = run_cli("--dir", tape_dir, "sessions")
    assert r.returncode == 0, r.stderr
    r = run_cli("--dir", tape_dir, "fsck", "--json")
    assert r.returncode == 0
    what = {w["what"] for w in json.loads(r.stdout)["warnings"]}
    assert {"sessions/.stfolder", "sessions/a/notes.txt"} <= what


def test_a_killed_compactions_temp_pack_is_reported_and_removed(two):
    tape_dir, a, b = two
    tmp = tape_dir / "sessions" / "a" / ".tmp-pack-0123456789ab"
    tmp.write_bytes(b"half a pack")
    r = run_cli("--dir", tape_dir, "fsck", "--json")
    assert r.returncode == 0
    assert any(w["what"] == "sessions/a/.tmp-pack-0123456789ab" for w in json.loads(r.stdout)["warnings"])
    run_cli("--dir", tape_dir, "compact", check=True)
    assert not tmp.exists()


def test_an_append_never_writes_through_a_planted_hard_link(two, tmp_path):
    tape_dir, a, b = two
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"")
    os.chmod(outside, 0o644)
    t = Tape.open(tape_dir)
    writer = t.store.writer
    t.close()
    # a file named like this writer's newest segment, linked to a file outside the tape
    planted = tape_dir / "sessions" / "a" / f"{writer}-{'9' * 20}.seg"
    os.link(outside, planted)
    r = run_cli("--dir", tape_dir, "append", "user", '{"content": "secret"}', "-s", "a")
    assert r.returncode == 0, r.stderr
    assert outside.read_bytes() == b""
    t = Tape.open(tape_dir)
    try:
        assert t.session("a").head.payload["content"] == "secret"
        report = t.fsck()
        assert any("hard link" in w["problem"] for w in report["warnings"])
    finally:
        t.close()


def test_a_killed_import_leaves_no_empty_session(tape_dir):
    """A batch killed before its end can leave objects without a ref record (a large
    batch writes full blocks early): no `(detached) 0` session is listed for them."""
    t = Tape.open(tape_dir)
    t.session("real").append("user", {"content": "hi"})
    w = t.session("ghost")
    with t.store.writing("ghost") as sw:  # objects only, as the early blocks of a long batch
        w._put_entry(sw, "user", {"content": "half an import"}, {}, None, None, None)
    t.close()
    r = run_cli("--dir", tape_dir, "sessions", "--json")
    assert r.returncode == 0
    assert [json.loads(line)["session"] for line in r.stdout.decode().splitlines()] == ["real"]


def test_damage_is_not_reported_as_a_sync_under_way(tape_dir):
    """A damaged record on the path to HEAD: status, tag, session cp and search said "not
    synced yet / sync in progress? run rsync again" (search: "no matches" and nothing
    else), before and after `fsck --salvage` recorded the entry as lost. They now say
    damaged, then lost to damage, and point at fsck."""
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        s.append("system", {"content": "sys"})
        s.append("user", {"content": "hello there " + os.urandom(3000).hex()})  # most of the file: its middle
        s.tag("v0")
    (seg,) = _segments(tape_dir, "chat")
    seg.read_bytes()  # a read (a backup) seals it: the next append goes to a new segment
    os.utime(seg)
    run_cli("--dir", tape_dir, "append", "assistant", "--text", "hi", "-s", "chat", check=True)
    _flip_middle(seg)

    def said(*args):
        p = run_cli("--dir", tape_dir, *args)
        assert b"Traceback" not in p.stderr
        return (p.stdout + p.stderr).decode()

    for when, word in (("before salvage", "damaged"), ("after salvage", "lost to damage")):
        out = said("status", "-s", "chat")
        assert "sync in progress" not in out and word in out and "fsck" in out, (when, out)
        out = said("tag", "-s", "chat")
        assert "not synced" not in out and word in out, (when, out)
        out = said("session", "cp", "chat", f"copy-{word.split()[0]}")
        assert "sync in progress" not in out and word.split()[0] in out and "tag v0" in out, (when, out)
        if when == "before salvage":
            out = said("search", "hello")
            assert "damaged records in sessions/chat/" in out, out
            run_cli("--dir", tape_dir, "fsck", "--salvage")


def test_the_first_log_after_damage_at_head_shows_what_reads_back_as_the_next_does(tape_dir):
    """A black-box audit: the index cache still named as HEAD an entry whose record a flip
    had damaged, so the first `log` failed (exit 1, one line) and the second, the damage
    learnt, showed the readable history. The first one now reads the refs again."""
    for i in range(3):
        run_cli("--dir", tape_dir, "append", "user", json.dumps({"content": f"m{i}"}), "-s", "d", check=True)
    (seg,) = _segments(tape_dir, "d")
    data = bytearray(seg.read_bytes())
    data[len(data) - 20] ^= 1  # in the last write: the third entry and the record that moved HEAD there
    seg.write_bytes(bytes(data))
    first = run_cli("--dir", tape_dir, "log", "-s", "d", "--oneline", "--no-pager")
    second = run_cli("--dir", tape_dir, "log", "-s", "d", "--oneline", "--no-pager")
    assert (first.returncode, first.stdout) == (second.returncode, second.stdout) == (0, second.stdout)
    assert len(first.stdout.splitlines()) == 2 and b"showing what is readable" in first.stderr
