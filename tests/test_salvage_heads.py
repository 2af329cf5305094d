"""After `fsck --salvage`, HEAD and every branch stay on the intact history (SPEC section
14; issue 20 item 3), and every folder ctape makes is 0700 (issue 20 item 5).

Real damage: one byte flipped in a real segment, commands run as the user runs them.
"""

import json
import os
import stat

from ctape.store import framing

from conftest import run_cli


def _append(tape_dir, n, session="s"):
    return [run_cli("--dir", tape_dir, "append", "user", json.dumps({"content": f"message {i}"}), "-s", session, check=True).stdout.decode().strip()
            for i in range(1, n + 1)]


def _flip_record(tape_dir, session, index):
    """Flip one byte inside the index-th record after the header of the session's segment."""
    (seg,) = (tape_dir / "sessions" / session).glob("*.seg")
    data = bytearray(seg.read_bytes())
    records = [item for item in framing.scan(bytes(data)) if isinstance(item, framing.Record)]
    assert records[0].type == framing.T_HEADER
    target = records[index]
    data[target.offset + 20] ^= 0x01
    seg.write_bytes(bytes(data))


def test_salvage_of_the_first_block_keeps_head_on_the_history(tape_dir):
    hashes = _append(tape_dir, 10)
    _flip_record(tape_dir, "s", 1)  # entry 1, `main` and `HEAD=@main`
    r = run_cli("--dir", tape_dir, "fsck", "--salvage")
    assert r.returncode == 0, r.stderr
    st = json.loads(run_cli("--dir", tape_dir, "status", "-s", "s", "--json", check=True).stdout)
    assert st["branch"] == "main" and st["head"] == hashes[-1], st
    new = run_cli("--dir", tape_dir, "append", "user", '{"content": "goes on"}', "-s", "s", check=True).stdout.decode().strip()
    shown = json.loads(run_cli("--dir", tape_dir, "show", new, "--json", check=True).stdout)
    assert shown["parent"] == hashes[-1] and shown["seq"] == 11
    run_cli("--dir", tape_dir, "compact", "--expire", "now", "--grace", "now", check=True)
    for h in hashes[1:]:
        assert run_cli("--dir", tape_dir, "show", h, "--json").returncode == 0, h
    assert run_cli("--dir", tape_dir, "fsck").returncode == 0


def test_salvage_keeps_a_branch_on_entries_no_ref_reaches_and_head_attached(tape_dir):
    """A middle block lost: the older side of the gap gets `salvaged-<hash8>`; HEAD stays
    on `main`; a second session's HEAD on another branch is not touched."""
    hashes = _append(tape_dir, 10)
    _flip_record(tape_dir, "s", 5)
    r = run_cli("--dir", tape_dir, "fsck", "--salvage")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in run_cli("--dir", tape_dir, "branch", "-s", "s", "--json", check=True).stdout.decode().splitlines()]
    branches = {row["name"]: row["hash"] for row in rows}
    assert branches == {"main": hashes[-1], f"salvaged-{hashes[3][:8]}": hashes[3]}
    assert [row["name"] for row in rows if row["current"]] == ["main"]
    run_cli("--dir", tape_dir, "compact", "--expire", "now", "--grace", "now", check=True)
    lost = hashes[4]
    for h in hashes:
        if h != lost:
            assert run_cli("--dir", tape_dir, "show", h, "--json").returncode == 0, h


def test_every_folder_ctape_makes_is_0700(tape_dir):
    os.chmod(tape_dir.parent, 0o755)
    old = os.umask(0o022)
    try:
        _append(tape_dir, 10)
        _append(tape_dir, 3, session="other")
        run_cli("--dir", tape_dir, "compact", "--grace", "now", check=True)
        _append(tape_dir, 3)
        (seg,) = (tape_dir / "sessions" / "s").glob("*.seg")
        data = bytearray(seg.read_bytes())
        data[len(data) // 2] ^= 0x01
        seg.write_bytes(bytes(data))
        run_cli("--dir", tape_dir, "fsck", "--salvage", check=True)
    finally:
        os.umask(old)
    assert (tape_dir / "quarantine" / "s").is_dir()
    for dirpath, dirnames, _ in os.walk(tape_dir):
        for d in [dirpath, *(os.path.join(dirpath, n) for n in dirnames)]:
            assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700, d


def test_the_report_of_a_large_salvage_is_read_whole(tape_dir):
    """A salvage of a long segment writes a report of more than 1 MiB (it lists the kept
    entries); fsck read reports up to 1 MiB only, called it unreadable and named every
    value it lists as lost as a missing object (exit 1)."""
    from ctape import Tape

    t = Tape.open(tape_dir)
    s = t.session("long")
    for k in range(10):
        s.extend([("user", {"content": f"message {k}.{i}"}) for i in range(1000)])
    t.close()
    (seg,) = (tape_dir / "sessions" / "long").glob("*.seg")
    data = bytearray(seg.read_bytes())
    records = [item for item in framing.scan(bytes(data)) if isinstance(item, framing.Record)]
    data[records[len(records) // 2].offset + 20] ^= 0x01  # a block in the middle: its entries go
    seg.write_bytes(bytes(data))
    run_cli("--dir", tape_dir, "fsck", "--salvage", check=True)
    (report,) = (tape_dir / "quarantine" / "long").glob("*.salvage.json")
    assert report.stat().st_size > 1 << 20 and json.loads(report.read_bytes())["missing"]
    r = run_cli("--dir", tape_dir, "fsck", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["ok"], out["problems"][:3]
    assert not [w for w in out["warnings"] if "unreadable" in w["problem"]], out["warnings"]


def test_a_branch_whose_tip_this_copy_lost_stays_for_the_copies_that_hold_it(tmp_path):
    """Branch `keep` points at an entry whose block copy A lost; copy B (rsync) holds it
    intact. A's salvage removed `keep`, and its ref record travels: after rsync both ways
    neither copy had `keep`, the entry was on no ref, and compact on B freed it (an
    acknowledged entry lost on a copy that never had damage; invariant 6). From a black-box
    audit. Now the branch stays; on A its history stops at the loss until the entry comes
    back, on B nothing changes."""
    import shutil
    import subprocess

    from ctape import Tape

    a, b = tmp_path / "A", tmp_path / "B"
    t = Tape.init(a)
    s = t.session("s")
    main = [s.append("user", {"content": f"m{i}"}).hash for i in range(4)]
    s.checkout(main[1])
    d1 = s.append("assistant", {"content": "the answer kept on a side branch"}).hash
    s.branch("keep", d1)
    s.checkout("main")
    s.append("user", {"content": "m4"})
    where = t.store.index.find_object(d1)
    seg = a / t.store.index.path_of(where[0])
    t.close()
    run_cli("--dir", a, "log", "-s", "s", "keep", check=True)
    shutil.copytree(a, b)  # as rsync -a
    data = bytearray(seg.read_bytes())
    data[where[1] + 40] ^= 0x01  # d1's block, on A only
    seg.write_bytes(bytes(data))

    r = run_cli("--dir", a, "fsck", "--salvage")
    assert r.returncode == 0, r.stderr
    assert b"keep removed" not in r.stderr, r.stderr
    status = json.loads(run_cli("--dir", a, "status", "-s", "s", "--json", check=True).stdout)
    assert status["branch"] == "main", status  # HEAD on intact history
    for src, dst in ((a, b), (b, a)):
        subprocess.run(["rsync", "-a", f"{src}/", f"{dst}/"], check=True)
    for d in (a, b):
        assert run_cli("--dir", d, "log", "-s", "s", "keep", "--oneline", check=True).stdout.count(b"\n") == 3, d
        assert run_cli("--dir", d, "fsck").returncode == 0, d
    run_cli("--dir", b, "compact", "--expire", "now", "--grace", "now", check=True)
    shown = json.loads(run_cli("--dir", b, "show", d1, "--json", check=True).stdout)
    assert shown["payload"]["content"] == "the answer kept on a side branch"


def test_two_copies_that_salvage_the_same_file_keep_both_reports(tmp_path):
    """Copies A and B of one tape each find different damage in the same segment and each
    salvage it: both wrote quarantine/s/<name>.salvage.json, and rsync put A's over B's (a
    black-box audit): B's report of what B lost was gone from both copies. Reports and
    damaged files now carry the salvaging copy's writer id."""
    import shutil
    import subprocess

    from ctape import Tape

    a, b = tmp_path / "A", tmp_path / "B"
    Tape.init(a).close()
    _append(a, 10)
    shutil.copytree(a, b)
    _flip_record(a, "s", 3)
    _flip_record(b, "s", 7)
    for d in (a, b):
        assert run_cli("--dir", d, "fsck", "--salvage").returncode == 0
    for src, dst in ((a, b), (b, a)):
        subprocess.run(["rsync", "-a", f"{src}/", f"{dst}/"], check=True)
    for d in (a, b):
        reports = list((d / "quarantine" / "s").glob("*.salvage.json"))
        files = [p for p in (d / "quarantine" / "s").iterdir() if not p.name.endswith(".json")]
        assert len(reports) == 2 and len(files) == 2, (d, reports, files)
        out = json.loads(run_cli("--dir", d, "fsck", "--json").stdout)
        assert out["ok"], out["problems"][:3]
        assert len([w for w in out["warnings"] if "salvaged on" in w["problem"]]) == 2, out["warnings"]


def test_a_report_edited_by_hand_is_no_traceback(tape_dir):
    """`missing_keys` (or `missing`) that is not a list, as a report of another version or
    one edited by hand may hold: fsck read it with a TypeError (an internal error)."""
    _append(tape_dir, 6)
    _flip_record(tape_dir, "s", 2)
    assert run_cli("--dir", tape_dir, "fsck", "--salvage").returncode == 0
    (report,) = (tape_dir / "quarantine" / "s").glob("*.salvage.json")
    body = json.loads(report.read_text())
    body["missing_keys"], body["missing"] = 5, "x"
    report.write_text(json.dumps(body))
    for cmd in (["fsck"], ["log", "-s", "s"], ["status", "-s", "s"]):
        r = run_cli("--dir", tape_dir, *cmd)
        assert b"Traceback" not in r.stderr and b"internal error" not in r.stderr, (cmd, r.stderr)


def test_salvage_branches_what_the_loss_cut_off_not_what_was_left_on_purpose(tape_dir):
    """The first entries of a segment lost: the older side sits in an intact pack, and
    nothing reached it any more (salvage orphaned it). It gets a `salvaged-*` branch. An
    entry an undo left behind (a ref moved back to its parent, as `pop_item` does) and a
    deleted branch's tip were on no ref before the damage either: they get none."""
    from ctape import Tape

    t = Tape.init(tape_dir)
    s = t.session("s")
    with t.batch():
        e = [s.append("user", {"content": f"old {i}"}).hash for i in range(50)]
    s.checkout(e[9], new_branch="idea")
    idea = [s.append("user", {"content": f"idea {i}"}).hash for i in range(3)]
    s.checkout("main")
    s.delete_branch("idea")
    s.set_refs("pop-item", {"main": e[-2]})  # the last entry undone
    t.close()
    run_cli("--dir", tape_dir, "compact", "--grace", "now", check=True)  # one pack holds all of that
    new = _append(tape_dir, 5)  # a new segment, its first entry the child of e[-2]
    run_cli("--dir", tape_dir, "log", "-s", "s", "--oneline", check=True)
    _flip_record(tape_dir, "s", 1)  # the new segment's first entry
    r = run_cli("--dir", tape_dir, "fsck", "--salvage")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in run_cli("--dir", tape_dir, "branch", "-s", "s", "--json", check=True).stdout.decode().splitlines()]
    assert {row["name"]: row["hash"] for row in rows} == {"main": new[-1], f"salvaged-{e[-2][:8]}": e[-2]}
    assert e[-1] not in {row["hash"] for row in rows} and idea[-1] not in {row["hash"] for row in rows}
