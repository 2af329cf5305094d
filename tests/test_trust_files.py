"""Files that are not what they say (issue 20, items 6-9): damage, never data."""

from __future__ import annotations

import glob
import json
import os
import shutil

import pytest

from ctape import Tape

from conftest import run_cli, snapshot


def heads(d, session="c"):
    p = run_cli("--dir", d, "branch", "-s", session, "--json", check=True)
    return {b["name"]: b["hash"] for b in map(json.loads, p.stdout.decode().splitlines())}


def make(d, writer, texts, session="c", monkeypatch=None):
    monkeypatch.setenv("CTAPE_WRITER", writer)
    t = Tape.init(d) if not os.path.exists(d) else Tape.open(d)
    s = t.session(session)
    out = [s.append("user", {"content": x}).hash for x in texts]
    t.close()
    monkeypatch.delenv("CTAPE_WRITER")
    return out


@pytest.mark.parametrize("how", ["writer", "session"])
def test_a_planted_segment_whose_header_is_not_its_own_moves_nothing(tmp_path, monkeypatch, how):
    """A segment named for writer `waaaa` of session c whose header (and records) belong to
    another writer, or another session: fsck reports it, no ref moves."""
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    make(a, "waaaa", ["one", "two"], monkeypatch=monkeypatch)
    make(b, "wbbbb", ["planted 1", "planted 2", "planted 3"], session="c" if how == "writer" else "x", monkeypatch=monkeypatch)
    before = heads(a)
    (src,) = glob.glob(f"{b}/sessions/*/*.seg")
    name = os.path.basename(src)
    planted = f"{a}/sessions/c/" + ("waaaa" + name[len("wbbbb"):] if how == "writer" else name)
    shutil.copy(src, planted)
    assert heads(a) == before
    p = run_cli("--dir", a, "fsck")
    assert p.returncode == 1
    assert "header" in p.stdout.decode() + p.stderr.decode()
    assert run_cli("--dir", a, "log", "-s", "c", "--oneline").returncode == 0


def test_a_whole_segment_deleted_from_outside_is_reported_as_loss(tmp_path, monkeypatch):
    a = str(tmp_path / "A")
    make(a, "waaaa", ["one"], monkeypatch=monkeypatch)
    assert run_cli("--dir", a, "fsck").returncode == 0  # this machine reads it
    os.unlink(glob.glob(f"{a}/sessions/c/*.seg")[0])
    p = run_cli("--dir", a, "fsck")
    assert p.returncode == 1 and b"gone" in p.stdout, p.stdout
    p = run_cli("--dir", a, "fsck", "--salvage")
    assert p.returncode == 0, p.stderr
    p = run_cli("--dir", a, "fsck")
    assert p.returncode == 0 and b"gone" in p.stdout + p.stderr


@pytest.mark.parametrize("kind", ["seg", "pack"])
def test_a_data_file_replaced_by_a_folder_is_loss_and_stays_so_after_compact(tmp_path, monkeypatch, kind):
    """A segment (or pack) this machine had read, replaced by a folder of the same name: its
    size (4,096) read as a file that had lost nothing, fsck passed, and a compact then forgot
    the loss for good: the folder removed, fsck still passed and the session had no entries
    (found by an audit). A folder under a data file's name is the file gone."""
    a = str(tmp_path / "A")
    make(a, "waaaa", ["one", "two"], monkeypatch=monkeypatch)
    if kind == "pack":
        run_cli("--dir", a, "compact", "--grace", "now", check=True)
    assert run_cli("--dir", a, "fsck").returncode == 0  # this machine reads it
    (path,) = glob.glob(f"{a}/sessions/c/*.{kind}")
    os.unlink(path)
    os.mkdir(path)
    p = run_cli("--dir", a, "fsck")
    assert p.returncode == 1 and b"lost acknowledged data" in p.stdout, p.stdout
    run_cli("--dir", a, "compact", check=True)
    os.rmdir(path)
    p = run_cli("--dir", a, "fsck")
    assert p.returncode == 1 and b"the file is gone" in p.stdout, p.stdout
    assert run_cli("--dir", a, "log", "-s", "c").returncode == 1

@pytest.mark.parametrize("first", ["context", "fsck"])
def test_a_pack_deleted_from_outside_is_loss_and_the_value_it_shared_reads_as_lost(tmp_path, first):
    """Sessions a and b share a large tool output, stored once, in a's pack. The pack is
    deleted from outside. It was reported as "not synced yet" when the first command to
    meet it read b (a rebuild forgot the file without judging it), salvage found nothing
    to do, and b's context and fsck failed for good (audit). Now the file is lost data
    whichever command meets it first, salvage reports it with the values it held that no
    file holds, b reads the output as lost, and fsck passes with a warning."""
    a = str(tmp_path / "A")
    t = Tape.init(a)
    big = "line of tool output\n" * 300
    for s in ("a", "b"):
        sess = t.session(s)
        sess.append("user", {"content": "run it"})
        sess.append("tool_call", {"call_id": "c1", "name": "bash", "arguments": {}})
        sess.append("tool_result", {"call_id": "c1", "output": big})
    t.close()
    run_cli("--dir", a, "compact", "--grace", "now", check=True)
    assert run_cli("--dir", a, "fsck").returncode == 0  # this machine reads it
    os.unlink(glob.glob(f"{a}/sessions/a/*.pack")[0])
    if first == "context":
        run_cli("--dir", a, "context", "-s", "b")
    p = run_cli("--dir", a, "fsck")
    assert p.returncode == 1 and b"the file is gone" in p.stdout, p.stdout
    p = run_cli("--dir", a, "fsck", "--salvage")
    assert p.returncode == 0 and b"the file is gone" in p.stderr, p.stderr
    p = run_cli("--dir", a, "context", "-s", "b")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)[-1] == {"role": "tool", "tool_call_id": "c1", "content": "[lost: damaged]"}
    p = run_cli("--dir", a, "fsck")
    assert p.returncode == 0 and b"gone" in p.stdout + p.stderr


def test_a_pack_deleted_whose_claims_later_records_superseded_is_still_loss(tmp_path):
    """The pack's own ref claims were superseded by appends written after the compaction,
    but the entries those appends grew from were in it: judged by claims alone, the file's
    going was no loss, and fsck said "not arrived yet" for good (audit). A record left in
    the session that names an object only the gone file held makes it lost data."""
    a = str(tmp_path / "A")
    t = Tape.init(a)
    s = t.session("c")
    early = [s.append("user", {"content": f"early {i}"}).hash for i in range(3)]
    t.close()
    run_cli("--dir", a, "compact", "--grace", "now", check=True)
    t = Tape.open(a)
    t.session("c").checkout("main")  # HEAD claimed again, after the pack's claim
    late = t.session("c").append("user", {"content": "late"}).hash
    t.close()
    assert run_cli("--dir", a, "fsck").returncode == 0  # this machine reads it
    os.unlink(glob.glob(f"{a}/sessions/c/*.pack")[0])
    p = run_cli("--dir", a, "fsck")
    assert p.returncode == 1 and b"the file is gone" in p.stdout, p.stdout
    assert run_cli("--dir", a, "fsck", "--salvage").returncode == 0
    assert run_cli("--dir", a, "fsck").returncode == 0
    p = run_cli("--dir", a, "log", "-s", "c", "--json")
    assert p.returncode == 0 and [json.loads(x)["hash"] for x in p.stdout.decode().splitlines()] == [late]
    assert b"history stops here" in p.stderr and early[-1].encode() in p.stderr


def test_a_segment_gone_because_another_copy_compacted_it_is_not_loss(tmp_path, monkeypatch):
    """compact on A, then the one recipe that uses --delete (docs/sync.md): B's old segments
    go, and every entry in them is in A's pack. Nothing was lost."""
    import subprocess

    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    make(a, "waaaa", ["one", "two"], monkeypatch=monkeypatch)
    subprocess.run(["rsync", "-a", f"{a}/", f"{b}/"], check=True)
    assert run_cli("--dir", b, "fsck").returncode == 0
    run_cli("--dir", a, "compact", "--grace", "now", check=True)
    subprocess.run(["rsync", "-a", "--delete", f"{a}/", f"{b}/"], check=True)
    p = run_cli("--dir", b, "fsck")
    assert p.returncode == 0, p.stdout


@pytest.mark.parametrize("where", ["segment", "folder"])
def test_a_symlink_in_one_session_stops_no_other(tmp_path, monkeypatch, where):
    """compact and fsck --salvage go on for the other sessions; fsck reports the symlink;
    nothing behind it is read or changed."""
    a = str(tmp_path / "A")
    make(a, "waaaa", ["one", "two"], session="good", monkeypatch=monkeypatch)
    make(a, "waaaa", ["x"], session="bad", monkeypatch=monkeypatch)
    outside = tmp_path / "outside"
    outside.mkdir()
    if where == "segment":
        (seg,) = glob.glob(f"{a}/sessions/bad/*.seg")
        shutil.move(seg, outside / "x.seg")
        os.symlink(outside / "x.seg", seg)
    else:
        shutil.move(f"{a}/sessions/bad", outside / "bad")
        os.symlink(outside / "bad", f"{a}/sessions/bad")
    before = snapshot(outside)
    p = run_cli("--dir", a, "compact", "--grace", "now", "--json")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert "bad" in report["skipped_sessions"]
    assert len(glob.glob(f"{a}/sessions/good/*.pack")) == 1  # the other session was compacted
    p = run_cli("--dir", a, "fsck", "--salvage")
    assert b"Traceback" not in p.stderr
    p = run_cli("--dir", a, "fsck")
    assert p.returncode == 1 and b"symlink" in p.stdout
    assert run_cli("--dir", a, "log", "-s", "good", "--oneline").returncode == 0
    p = run_cli("--dir", a, "log", "-s", "bad")
    assert p.returncode != 0 and b"symlink" in p.stderr
    assert snapshot(outside) == before


def test_a_header_damaged_in_place_blocks_appends(tmp_path, monkeypatch):
    """One flipped byte in a segment's header keeps the file's size, so the index never
    looks again; the writer reads the headers when it takes up the session."""
    a = str(tmp_path / "A")
    make(a, "waaaa", ["one", "two", "three"], monkeypatch=monkeypatch)
    (seg,) = glob.glob(f"{a}/sessions/c/*.seg")
    data = bytearray(open(seg, "rb").read())
    data[20] ^= 1
    open(seg, "wb").write(bytes(data))
    before = snapshot(a)
    p = run_cli("--dir", a, "append", "user", "--text", "four", "-s", "c")
    assert p.returncode == 1 and b"damaged" in p.stderr and len(p.stderr.splitlines()) == 1
    assert snapshot(a) == before
    assert run_cli("--dir", a, "fsck").returncode == 1


def test_an_import_with_head_on_a_branch_it_lacks_is_refused(tmp_path):
    a = str(tmp_path / "A")
    Tape.init(a).close()
    run_cli("--dir", a, "append", "user", "--text", "one", "-s", "c", check=True)
    lines = run_cli("--dir", a, "export", "c", check=True).stdout.decode().splitlines()
    refs = json.loads(lines[-1])
    refs["head"] = "@nope"
    f = tmp_path / "x.jsonl"
    f.write_text("\n".join(lines[:-1] + [json.dumps(refs)]) + "\n")
    before = snapshot(a)
    p = run_cli("--dir", a, "import", f, "-s", "d")
    assert p.returncode == 2 and b"nope" in p.stderr and len(p.stderr.splitlines()) == 1
    assert snapshot(a) == before


def test_a_damaged_file_in_the_top_level_packs_folder_gets_advice_that_works(tmp_path, monkeypatch):
    """A damaged `pack-*.pack` in packs/ (read, never written by ctape): fsck, appends and
    reads said "run `ctape fsck --salvage`", and salvage said "nothing to salvage" and the
    same again (found by an audit). The advice is to restore it or move it out, which works."""
    a = str(tmp_path / "A")
    make(a, "waaaa", ["one"], monkeypatch=monkeypatch)
    bad = os.path.join(a, "packs", "pack-" + "0" * 32 + ".pack")
    with open(bad, "w") as f:
        f.write("garbage\n")
    p = run_cli("--dir", a, "fsck")
    out = p.stdout.decode()
    assert p.returncode == 1 and "move it out of the tape directory" in out and "fsck --salvage" not in out, out
    p = run_cli("--dir", a, "append", "user", "--text", "two", "-s", "c")
    assert p.returncode == 1 and b"move it out of the tape directory" in p.stderr and b"salvage`" not in p.stderr, p.stderr
    p = run_cli("--dir", a, "log", "-s", "c")
    assert b"move it out of the tape directory" in p.stderr, p.stderr
    shutil.move(bad, str(tmp_path / "moved.pack"))
    run_cli("--dir", a, "append", "user", "--text", "two", "-s", "c", check=True)
    assert run_cli("--dir", a, "fsck").returncode == 0


def test_a_dir_with_dot_dot_after_a_symlink_is_the_tape_the_system_means(tmp_path):
    """`--dir B/L/../tape`, with `B/L` a symlink to `A/inner`, is `A/tape` for open(2),
    rsync and realpath; ctape took `B/tape` and appended there (found by an audit)."""
    a, b = tmp_path / "A", tmp_path / "B"
    (a / "inner").mkdir(parents=True)
    b.mkdir()
    os.symlink(a / "inner", b / "L")
    run_cli("init", a / "tape", check=True)
    run_cli("init", b / "tape", check=True)
    via = f"{b}/L/../tape"
    run_cli("--dir", via, "append", "user", "--text", "meant for A", "-s", "c", check=True)
    assert heads(str(a / "tape"))
    assert run_cli("--dir", b / "tape", "sessions").stdout == b""
