"""A tape written with the earlier record layout still reads, grows and compacts.

Until durable appends wrote blocks, each append was one `O` record per object and a raw
`R` ref record (docs/format.md sections 5-6). `tests/fixtures/tapes/v1-records` is such
a tape, written by that code (`make_v1_records.py` beside it says how); readers must
handle both layouts, and a tape may hold both once the new code appends to it.
"""

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from ctape import Tape
from ctape.store import framing

FIXTURE = Path(__file__).parent / "fixtures" / "tapes" / "v1-records"
HEAD = "56f493c80887fa3c0370e61d95dc18dc62b50878fd542841bcf8ea58f44611b4"
BEFORE_FIX = "2d75dc73fd62"  # the branch made before the fix


@pytest.fixture
def old_tape(tmp_path):
    d = tmp_path / "old"
    shutil.copytree(FIXTURE, d)
    (d / "packs").mkdir(exist_ok=True)  # git keeps no empty folders
    for root, dirs, files in os.walk(d):
        os.chmod(root, 0o700)
        for f in files:
            os.chmod(os.path.join(root, f), 0o600)
    return d


def types(path):
    return [chr(r.type) for r in framing.scan(path.read_bytes())]


def cli_json(d, *args):
    p = run_cli("--dir", d, *args, "--json", check=True)
    return [json.loads(line) for line in p.stdout.decode().splitlines()]


def test_the_fixture_has_the_old_layout():
    (seg,) = (FIXTURE / "sessions" / "chat").glob("*.seg")
    t = types(seg)
    assert "R" in t and "O" in t and "K" not in t and "Z" not in t


def test_old_records_read_in_a_real_process(old_tape):
    log = cli_json(old_tape, "log", "-s", "chat")
    assert log[0]["hash"] == HEAD and len(log) == 6
    assert [e["kind"] for e in log] == ["tool_call", "assistant", "tool_result", "tool_call", "user", "system"]
    assert log[2]["payload"]["output"] == "def f():\n    return 1\n" * 80  # a blob
    (status,) = cli_json(old_tape, "status", "-s", "chat")
    assert status["head"] == HEAD and status["branch"] == "main"
    assert [c["call_id"] for c in status["pending_tool_calls"]] == ["c2"]
    branches = {b["name"]: b for b in cli_json(old_tape, "branch", "-s", "chat")}
    assert set(branches) == {"main", "before-fix"}
    assert cli_json(old_tape, "log", "chat/before-fix")[0]["hash"].startswith(BEFORE_FIX)
    assert [e["payload"]["content"] for e in cli_json(old_tape, "log", "-s", "other")] == ["hi", "hello"]
    assert run_cli("--dir", old_tape, "fsck").returncode == 0


def test_new_appends_join_old_records_and_compact(old_tape):
    with Tape.open(old_tape) as t:
        s = t.session("chat")
        # enough appends that a version-2 tape would have had its dictionary long ago
        new = [s.append("tool_result", {"call_id": "c2", "output": f"{i} passed " * 300}) for i in range(40)]
        assert new[0].parent == HEAD
    # this machine is another writer than the one that wrote the fixture: its own segment
    old_seg, new_seg = sorted((old_tape / "sessions" / "chat").glob("*.seg"), key=lambda p: p.name.startswith("oldformat"), reverse=True)
    assert "R" in types(old_seg) and "R" not in types(new_seg) and "K" in types(new_seg)
    # a version-1 tape gets no dictionaries: a ctape that predates them may write to it
    # too (another machine), and would take them for damage
    assert "D" not in types(new_seg) and "Z" not in types(new_seg)
    assert json.loads((old_tape / "ctape.json").read_text())["version"] == 1
    log = cli_json(old_tape, "log", "-s", "chat")
    assert [e["hash"] for e in log[:41]] == [e.hash for e in reversed(new)] + [HEAD]
    assert run_cli("--dir", old_tape, "fsck").returncode == 0
    run_cli("--dir", old_tape, "compact", "--grace", "now", check=True)
    assert not list((old_tape / "sessions" / "chat").glob("*.seg"))
    assert cli_json(old_tape, "log", "-s", "chat") == log
    assert run_cli("--dir", old_tape, "fsck").returncode == 0


def test_a_new_tape_is_version_2_and_uses_dictionaries(tmp_path):
    with Tape.init(tmp_path / "t") as t:
        s = t.session("chat")
        for i in range(40):
            s.append("tool_result", {"call_id": "c2", "output": f"{i} passed " * 300})
    assert json.loads((tmp_path / "t" / "ctape.json").read_text())["version"] == 2
    (seg,) = (tmp_path / "t" / "sessions" / "chat").glob("*.seg")
    assert "D" in types(seg) and "Z" in types(seg)


def test_a_newer_version_is_refused(old_tape):
    meta = json.loads((old_tape / "ctape.json").read_text())
    (old_tape / "ctape.json").write_text(json.dumps(dict(meta, version=3)) + "\n")
    p = run_cli("--dir", old_tape, "log", "-s", "chat")
    assert p.returncode != 0 and b"upgrade ctape" in p.stderr and len(p.stderr.splitlines()) == 1
