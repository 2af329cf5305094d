"""The index cache is a cache: when its disk is full, reads still answer from the tape
(issue 17 item 6). A real small tmpfs holds the cache; it is filled to the last byte."""

import os

import pytest

from ctape import Tape

from conftest import run_cli, small_tmpfs


@pytest.fixture
def full_cache(tmp_path):
    mnt = tmp_path / "cache"
    mnt.mkdir()
    with small_tmpfs(mnt, "size=4m"):
        yield mnt


def _fill(path):
    fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def test_reads_answer_when_the_cache_disk_is_full(tape_dir, full_cache):
    env = {"CTAPE_CACHE_DIR": str(full_cache)}
    first = [run_cli("--dir", tape_dir, "append", "user", f'{{"content": "m{i}"}}', "-s", "chat", env=env, check=True).stdout.strip() for i in range(3)]
    _fill(full_cache)
    # written elsewhere (another cache): this cache must index new bytes, and cannot
    t = Tape.open(tape_dir, cache_dir=str(full_cache.parent / "other"))
    more = [t.session("chat").append("tool_result", {"call_id": f"c{i}", "output": f"output {i} " * 400}).hash for i in range(40)]
    t.close()
    r = run_cli("--dir", tape_dir, "log", "-s", "chat", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 43
    assert r.stderr.count(b"cannot be written") == 1 and b"Traceback" not in r.stderr
    for cmd in (["status", "-s", "chat"], ["show", more[-1].decode() if isinstance(more[-1], bytes) else more[-1]], ["sessions"], ["fsck"]):
        r = run_cli("--dir", tape_dir, *cmd, env=env)
        assert r.returncode == 0, (cmd, r.stderr)
        assert r.stderr.count(b"cannot be written") <= 1
    # and an append: acknowledged, on the tape, readable by a healthy cache
    r = run_cli("--dir", tape_dir, "append", "user", '{"content": "still works"}', "-s", "chat", env=env)
    assert r.returncode == 0, r.stderr
    t = Tape.open(tape_dir, cache_dir=str(full_cache.parent / "fresh"))
    assert t.session("chat").head.payload == {"content": "still works"}
    assert t.session("chat").head.seq == 44 and first
    t.close()
