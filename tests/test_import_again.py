"""Importing a file again with nothing new costs a read of it (issue 25; docs/import.md,
"Importing the same file again"), and is never fooled: the answer is the one a full
import gives. Real transcripts, real `ctape import` processes.
"""

import json
import os
import shutil

from conftest import run_cli, snapshot
from test_watch import CLAUDE, CODEX, session_of, with_forks

from ctape import Tape


def imp(tape_dir, *args, env=None):
    p = run_cli("--dir", tape_dir, "import", *args, env=env)
    assert p.returncode == 0 and b"Traceback" not in p.stderr, p.stderr.decode()
    return p.stderr.decode()


def branches(tape_dir, name) -> dict:
    with Tape.open(tape_dir) as t:
        return dict(t.session(name).refs().branches)


def test_again_with_nothing_new_says_so_and_writes_nothing(tape_dir, tmp_path):
    for src, fmt in ((CLAUDE, "claude-code"), (CODEX, "codex")):
        path = tmp_path / src.name
        shutil.copy(src, path)
        first = imp(tape_dir, fmt, path)
        assert first.startswith("imported")
        before = snapshot(tape_dir)
        again = imp(tape_dir, fmt, path)
        n = len([x for x in src.read_bytes().splitlines() if x.strip()])
        assert again == f"nothing new in {path}: session {session_of(src, fmt)} already holds its {n} records\n"
        assert snapshot(tape_dir) == before
        cache = os.path.join(os.environ["CTAPE_CACHE_DIR"])
        assert any("imports.json" in names for _, _, names in os.walk(cache))  # remembered there


def test_a_same_size_edit_with_the_old_mtime_is_imported(tape_dir, tmp_path):
    """Size, mtime and inode as they were: the digest of the bytes tells."""
    path = tmp_path / CODEX.name
    shutil.copy(CODEX, path)
    imp(tape_dir, "codex", path)
    name = session_of(CODEX, "codex")
    main = branches(tape_dir, name)["main"]
    st = path.stat()
    data = path.read_bytes()
    i = data.index(b'"timestamp":"2026') + len(b'"timestamp":"2026')
    with open(path, "r+b") as f:
        f.seek(i - 1)
        f.write(b"7")  # 2026 -> 2027, in place
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    err = imp(tape_dir, "codex", path)
    assert "nothing new" not in err and "main-imported" in err
    refs = branches(tape_dir, name)
    assert refs["main"] == main and refs["main-imported"] != main


def test_a_deleted_branch_comes_back_as_a_full_import_brings_it(tape_dir, tmp_path):
    path = tmp_path / CLAUDE.name
    path.write_bytes(with_forks(CLAUDE))
    name = session_of(CLAUDE, "claude-code")
    imp(tape_dir, "claude-code", path)
    full = branches(tape_dir, name)
    fork = next(b for b in full if b.startswith("fork-"))
    run_cli("--dir", tape_dir, "branch", "-s", name, "-d", fork, check=True)
    err = imp(tape_dir, "claude-code", path)
    assert "nothing new" not in err
    assert branches(tape_dir, name) == full


def test_a_removed_session_is_imported_again(tape_dir, tmp_path):
    """The cache says the file was imported; the tape no longer has its session."""
    path = tmp_path / CODEX.name
    shutil.copy(CODEX, path)
    imp(tape_dir, "codex", path)
    name = session_of(CODEX, "codex")
    run_cli("--dir", tape_dir, "session", "rm", name, check=True)
    err = imp(tape_dir, "codex", path)
    assert err.startswith("imported") and f"into session {name}" in err
    n = len([x for x in CODEX.read_bytes().splitlines() if x.strip()])
    with Tape.open(tape_dir) as t:
        assert len(list(t.session(name).log(t.session(name).refs().branches["main"]))) == n


def test_another_session_name_is_another_import(tape_dir, tmp_path):
    path = tmp_path / CODEX.name
    shutil.copy(CODEX, path)
    imp(tape_dir, "codex", path, "-s", "a")
    err = imp(tape_dir, "codex", path, "-s", "b")
    assert err.startswith("imported") and "into session b" in err
    assert branches(tape_dir, "a") == branches(tape_dir, "b")


def test_a_grown_file_adds_its_new_records(tape_dir, tmp_path):
    lines = [x + b"\n" for x in CLAUDE.read_bytes().split(b"\n") if x.strip()]
    path = tmp_path / CLAUDE.name
    path.write_bytes(b"".join(lines[:-4]))
    imp(tape_dir, "claude-code", path)
    with open(path, "ab") as f:
        f.write(b"".join(lines[-4:]))
    err = imp(tape_dir, "claude-code", path)
    assert err.startswith("imported")
    p = run_cli("--dir", tape_dir, "export", "--format", "claude-code", session_of(CLAUDE, "claude-code"), check=True)
    assert [json.loads(x) for x in p.stdout.splitlines()] == [json.loads(x) for x in lines]


def test_several_files_in_one_command_are_all_remembered(tape_dir, tmp_path):
    from test_watch import CLAUDE_FORKS, CODEX_BIG

    paths = []
    for src in (CLAUDE, CLAUDE_FORKS):
        paths.append(tmp_path / src.name)
        shutil.copy(src, paths[-1])
    imp(tape_dir, "claude-code", *paths)
    again = imp(tape_dir, "claude-code", *paths)
    assert again.count("nothing new") == 2, again
    cx = [tmp_path / CODEX.name, tmp_path / CODEX_BIG.name]
    for src, dst in zip((CODEX, CODEX_BIG), cx):
        shutil.copy(src, dst)
    imp(tape_dir, *cx)  # detected: the same cache
    assert imp(tape_dir, "codex", *cx).count("nothing new") == 2
    assert imp(tape_dir, "claude-code", *paths).count("nothing new") == 2  # the codex import kept them
