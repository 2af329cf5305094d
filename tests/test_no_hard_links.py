"""A tape, a folder remote and a clone on a file system without hard links: a real exFAT
(FUSE, on a loop device), as on a USB stick. link() fails there with EPERM, which `init`
reported as "the tape directory is read-only", a folder remote there could not be pushed
to, and the salvage of a pack that keeps its own name left an empty quarantine/ and a
session refused for writes for good (found by an audit). Each now takes the file
system's other way: a rename after a look, or a copy of the bytes (store/files.py,
place_new and second_name)."""

from __future__ import annotations

import glob
import json
import os
import shutil

import pytest

from conftest import exfat_disk, run_cli


@pytest.fixture
def disk(tmp_path):
    with exfat_disk(str(tmp_path)) as mnt:
        yield mnt


def hashes(tape, session="chat"):
    p = run_cli("--dir", tape, "log", "-s", session, "--json", check=True)
    return [json.loads(line)["hash"] for line in p.stdout.decode().splitlines()]


def test_init_append_push_clone_and_pull_without_hard_links(disk, tmp_path):
    tape = os.path.join(disk, "tape")
    assert not os.path.exists(os.path.join(disk, "probe"))
    p = run_cli("init", tape)
    assert p.returncode == 0, p.stderr
    for i in range(3):
        run_cli("--dir", tape, "append", "user", "--text", f"on the stick {i}", "-s", "chat", check=True)
    # a folder remote on the stick, pushed to from a tape elsewhere, cloned and pulled from
    home = str(tmp_path / "home")
    run_cli("init", home, check=True)
    run_cli("--dir", home, "append", "user", "--text", "from home", "-s", "chat", check=True)
    remote = os.path.join(disk, "remote")
    os.mkdir(remote)
    run_cli("--dir", home, "remote", "add", "usb", f"file://{remote}", check=True)
    p = run_cli("--dir", home, "push", "usb")
    assert p.returncode == 0, p.stderr
    clone = os.path.join(disk, "clone")
    p = run_cli("clone", f"file://{remote}", clone)
    assert p.returncode == 0, p.stderr
    assert hashes(clone) == hashes(home)
    run_cli("--dir", home, "append", "user", "--text", "more from home", "-s", "chat", check=True)
    run_cli("--dir", home, "push", "usb", check=True)
    p = run_cli("--dir", clone, "pull")
    assert p.returncode == 0, p.stderr
    assert hashes(clone) == hashes(home)
    assert run_cli("--dir", clone, "fsck").returncode == 0
    assert len(hashes(tape)) == 3 and run_cli("--dir", tape, "fsck").returncode == 0
    assert not glob.glob(f"{disk}/**/*.tmp*", recursive=True) and not glob.glob(f"{disk}/**/.tmp*", recursive=True)


def test_salvage_of_a_pack_that_keeps_its_name_without_hard_links(disk, tmp_path):
    """A pack whose records all read back, with bytes added after them: salvage writes it
    again under its own name, so the damaged file goes to quarantine first, as a second
    name. Without hard links that is a copy of its bytes. (The tape is made elsewhere and
    copied to the stick, as people do.)"""
    made = str(tmp_path / "made")
    run_cli("init", made, check=True)
    for i in range(5):
        run_cli("--dir", made, "append", "user", "--text", f"m{i}", "-s", "chat", check=True)
    run_cli("--dir", made, "compact", "--grace", "now", check=True)
    tape = os.path.join(disk, "tape")
    shutil.copytree(made, tape)
    before = hashes(tape)
    (pack,) = glob.glob(f"{tape}/sessions/chat/pack-*.pack")
    with open(pack, "ab") as f:
        f.write(b"GARBAGEGARBAGE")
    with open(pack, "rb") as f:
        damaged = f.read()
    p = run_cli("--dir", tape, "fsck", "--salvage")
    assert p.returncode == 0, p.stdout + p.stderr
    (kept,) = [q for q in glob.glob(f"{tape}/quarantine/chat/pack-*") if not q.endswith(".json")]
    with open(kept, "rb") as f:
        assert f.read() == damaged
    assert hashes(tape) == before
    p = run_cli("--dir", tape, "append", "user", "--text", "after", "-s", "chat")
    assert p.returncode == 0, p.stderr
    assert run_cli("--dir", tape, "fsck").returncode == 0


def test_a_session_whose_name_differs_only_in_case_is_refused_where_case_is_ignored(disk):
    """exFAT (as macOS and Windows by default) ignores case: `append -s Chat` beside session
    `chat` wrote into chat's folder, and both read as damage; salvage then folded one into
    the other (found by an audit). Refused in one line, the tape as it was."""
    from conftest import snapshot

    tape = os.path.join(disk, "tape")
    run_cli("init", tape, check=True)
    run_cli("--dir", tape, "append", "user", "--text", "lower", "-s", "chat", check=True)
    before = snapshot(tape)
    p = run_cli("--dir", tape, "append", "user", "--text", "upper", "-s", "Chat")
    err = p.stderr.decode()
    assert p.returncode == 2 and err.count("\n") == 1 and "ignores case" in err and "'chat'" in err, err
    assert snapshot(tape) == before
    run_cli("--dir", tape, "append", "user", "--text", "lower again", "-s", "chat", check=True)
    assert run_cli("--dir", tape, "fsck").returncode == 0 and len(hashes(tape)) == 2
