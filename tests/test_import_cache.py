"""`import` detects the format and adds nothing the tape holds already; `cache gc` removes
the cache folders of tapes that are gone."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest

from conftest import run_cli, snapshot
from ctape import Tape

TRANSCRIPTS = pathlib.Path("/work/shared/fixtures/transcripts")
CC = TRANSCRIPTS / "claude-code" / "daaain__claude-code-log__fe869ecb-c176-478f-9734-7e4b8ef12cff.jsonl"
CODEX = sorted((TRANSCRIPTS / "codex-rollout").glob("*.jsonl"))[0]


def cli(d, *args, **kw):
    return run_cli("--dir", d, *args, **kw)


FILES = {
    "claude-code": sorted((TRANSCRIPTS / "claude-code").glob("*.jsonl")),
    "codex": sorted((TRANSCRIPTS / "codex-rollout").glob("*.jsonl")),
    "openai": sorted((TRANSCRIPTS / "openai-chat").glob("*")),
}


@pytest.mark.parametrize("fmt,path", [(f, p) for f, ps in FILES.items() for p in ps], ids=lambda x: getattr(x, "name", x)[:40])
def test_detect_every_fixture(fmt, path):
    from ctape.formats.detect import detect

    assert detect(str(path)) == fmt


def test_import_without_a_format_equals_import_with_it(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        Tape.init(d).close()
    cli(a, "import", CODEX, "-s", "x", check=True)
    cli(b, "import", "codex", CODEX, "-s", "x", check=True)
    ha = [json.loads(x)["hash"] for x in cli(a, "log", "--json", "--hidden").stdout.splitlines()]
    hb = [json.loads(x)["hash"] for x in cli(b, "log", "--json", "--hidden").stdout.splitlines()]
    assert ha == hb and ha


def test_a_ctape_export_is_detected(tape_dir, tmp_path):
    with Tape.open(tape_dir) as t:
        t.session("chat").append("user", {"content": "hi"})
    exp = tmp_path / "chat.jsonl"
    exp.write_bytes(cli(tape_dir, "export", "chat", check=True).stdout)
    other = tmp_path / "other"
    Tape.init(other).close()
    p = cli(other, "import", exp, check=True)
    assert "imported 1 entry into session chat" in p.stderr.decode()


def test_an_unknown_format_imports_nothing(tape_dir, tmp_path):
    junk = tmp_path / "notes.jsonl"
    junk.write_text('{"hello": 1}\n')
    before = snapshot(tape_dir)
    for args in ([CC, junk], [junk], ["claude-code"], [tmp_path]):
        p = cli(tape_dir, "import", *args)
        assert p.returncode == 2, p.stderr
        assert len(p.stderr.decode().splitlines()) == 1
    assert snapshot(tape_dir) == before  # CC was not imported before junk was refused


def test_reimport_adds_nothing_and_moves_no_head(tape_dir):
    p = cli(tape_dir, "import", CC, "-s", "cc", check=True)
    assert "imported 111 records" in p.stderr.decode()
    cli(tape_dir, "checkout", "-b", "mine", check=True)
    cli(tape_dir, "append", "user", "--text", "my own turn", check=True)
    before = snapshot(tape_dir)
    p = cli(tape_dir, "import", "claude-code", CC, "-s", "cc", check=True)
    assert "nothing new" in p.stderr.decode() and "imported" not in p.stderr.decode()
    assert snapshot(tape_dir) == before  # no ref record, no object
    st = json.loads(cli(tape_dir, "status", "--json", check=True).stdout)
    assert st["branch"] == "mine"


def test_reimport_of_a_grown_file_moves_its_branch_only(tape_dir, tmp_path):
    lines = CODEX.read_bytes().splitlines(keepends=True)
    part = tmp_path / "rollout.jsonl"
    part.write_bytes(b"".join(lines[: len(lines) // 2]))
    cli(tape_dir, "import", part, "-s", "cx", check=True)
    cli(tape_dir, "branch", "mark", check=True)
    cli(tape_dir, "checkout", "mark", check=True)
    part.write_bytes(b"".join(lines))
    p = cli(tape_dir, "import", part, "-s", "cx", check=True)
    assert "imported" in p.stderr.decode()
    st = json.loads(cli(tape_dir, "status", "--json", check=True).stdout)
    assert st["branch"] == "mark"  # HEAD stays where the user put it
    main = {json.loads(x)["name"]: json.loads(x)["hash"] for x in cli(tape_dir, "branch", "--json").stdout.splitlines()}["main"]
    assert json.loads(cli(tape_dir, "show", main, "--json").stdout)["seq"] == len([x for x in lines if x.strip()])


# -- cache gc ---------------------------------------------------------------------------------


def folders(cache) -> list[str]:
    return sorted(n for n in os.listdir(cache) if len(n) == 20)


def test_cache_gc_removes_the_folders_of_gone_tapes(tmp_path):
    cache = tmp_path / "cache"
    env = {"CTAPE_CACHE_DIR": str(cache)}
    keep, gone, moved = tmp_path / "keep", tmp_path / "gone", tmp_path / "moved"
    for d in (keep, gone, moved):
        run_cli("init", d, env=env, check=True)
        run_cli("--dir", d, "append", "user", "--text", "x", "-s", "s", env=env, check=True)
    assert len(folders(cache)) == 3
    marker = json.loads((cache / folders(cache)[0] / "tape.json").read_text())
    assert set(marker) == {"tape", "tape_id"}
    shutil.rmtree(gone)
    os.rename(moved, tmp_path / "moved2")
    (cache / "notes").mkdir()  # not a cache folder: never touched
    (cache / ("a" * 20)).mkdir()  # a cache folder with no marker (an older ctape)
    before = snapshot(cache)
    p = run_cli("cache", "gc", "--dry-run", "--json", env=env, check=True)
    rows = [json.loads(x) for x in p.stdout.splitlines()]
    assert sorted(r["state"] for r in rows) == ["gone", "gone", "live", "unknown"]
    assert snapshot(cache) == before
    p = run_cli("cache", "gc", env=env, check=True)
    assert p.stdout.decode().count("removed ") == 2
    left = folders(cache)
    assert len(left) == 2 and "a" * 20 in left and (cache / "notes").is_dir()
    assert run_cli("--dir", keep, "log", "--oneline", env=env, check=True).stdout
    run_cli("cache", "gc", "--unknown", env=env, check=True)
    assert len(folders(cache)) == 1
    # the live tape's folder still works (and was not rebuilt)
    assert run_cli("--dir", keep, "sessions", env=env, check=True).stdout


def test_cache_gc_on_a_missing_cache_root(tmp_path):
    p = run_cli("cache", "gc", "--json", env={"CTAPE_CACHE_DIR": str(tmp_path / "none")}, check=True)
    assert p.stdout == b""
