"""What `ctape watch` notices about a file it followed (issue 23, item 6, the rest):

- a rewrite in the middle that keeps the size, seen by a new process that has only the
  tape's position (no cache: no size or mtime to compare), or followed by an append;
- a path reused, in place (the same inode), by a transcript of another format;
- after a restart, "+N records" counts only what the tape did not hold.

Real transcripts, real `ctape watch --once` processes.
"""

import json
import re
import shutil

from conftest import run_cli
from test_watch import CLAUDE, CLAUDE_FORKS, CODEX, expected, session_of, with_forks
from test_watch_rewind import branches, export_of, lines, said_once

from ctape import Tape


def watch(tape_dir, *paths, env=None):
    p = run_cli("--dir", tape_dir, "watch", "--once", *paths, env=env)
    assert p.returncode == 0, p.stderr.decode()
    assert b"Traceback" not in p.stderr
    return p.stderr.decode()


def plus(err: str) -> list[int]:
    """The N of every `watch: +N records from` line."""
    return [int(x.split("+")[1].split()[0]) for x in err.splitlines() if x.startswith("watch: +")]


def same_size_edit(data: list[bytes], at: int) -> list[bytes]:
    """Line `at` with the year of its time changed: another record, the same length."""
    edited = re.sub(rb'("timestamp": ?"20[0-9])([0-9])', lambda m: m[1] + (b"8" if m[2] != b"8" else b"9"), data[at], count=1)
    assert len(edited) == len(data[at]) and edited != data[at]
    return data[:at] + [edited] + data[at + 1 :]


def test_a_same_size_rewrite_in_the_middle_is_seen_without_the_cache(tape_dir, tmp_path):
    """No size or mtime to compare (the cache is gone: the position comes from the tape):
    the bytes between the first 4 KiB and the 4 KiB before the position changed."""
    data = lines(CODEX.read_bytes())
    name = session_of(CODEX, "codex")
    path = tmp_path / CODEX.name
    path.write_bytes(b"".join(data))
    cache = tmp_path / "cache"
    watch(tape_dir, path, env={"CTAPE_CACHE_DIR": str(cache)})
    main = branches(tape_dir, name)["main"]
    changed = same_size_edit(data, len(data) // 2)
    with open(path, "r+b") as f:  # in place: the same inode and size
        f.write(b"".join(changed))
    shutil.rmtree(cache)
    err = watch(tape_dir, path, env={"CTAPE_CACHE_DIR": str(cache)})
    refs = branches(tape_dir, name)
    assert refs["main"] == main and "main-imported" in refs and said_once(err)
    assert export_of(tape_dir, f"{name}/main-imported", "codex") == expected(b"".join(changed))
    # what is new is the records from the edited one on, not the whole file
    assert plus(err) == [len(data) - len(data) // 2]


def test_a_rewrite_in_the_middle_then_an_append_is_seen(tape_dir, tmp_path):
    """The file grew, so it looks appended to; its middle changed too."""
    data = lines(CODEX.read_bytes())
    name = session_of(CODEX, "codex")
    path = tmp_path / CODEX.name
    path.write_bytes(b"".join(data[:-5]))
    watch(tape_dir, path)
    main = branches(tape_dir, name)["main"]
    changed = same_size_edit(data, len(data) // 2)
    with open(path, "r+b") as f:
        f.write(b"".join(changed))  # the edit, and the last five lines after it
    err = watch(tape_dir, path)
    refs = branches(tape_dir, name)
    assert refs["main"] == main and "main-imported" in refs and said_once(err)
    assert export_of(tape_dir, f"{name}/main-imported", "codex") == expected(b"".join(changed))


def test_a_claude_file_rewritten_in_the_middle_without_the_cache(tape_dir, tmp_path):
    data = lines(with_forks(CLAUDE))
    name = session_of(CLAUDE, "claude-code")
    path = tmp_path / CLAUDE.name
    path.write_bytes(b"".join(data))
    cache = tmp_path / "cache"
    watch(tape_dir, path, env={"CTAPE_CACHE_DIR": str(cache)})
    before = branches(tape_dir, name)
    at = next(i for i in range(len(data) // 2, len(data)) if json.loads(data[i]).get("type") == "user" and json.loads(data[i]).get("timestamp"))
    changed = same_size_edit(data, at)
    with open(path, "r+b") as f:
        f.write(b"".join(changed))
    shutil.rmtree(cache)
    err = watch(tape_dir, path, env={"CTAPE_CACHE_DIR": str(cache)})
    after = branches(tape_dir, name)
    assert all(after[b] == h for b, h in before.items())  # nothing rewound
    assert "main-imported" in after and said_once(err)
    assert 0 < plus(err)[0] < len(data)
    other = tmp_path / "other"  # the file's version is on the tape: what `ctape import` of it gives
    Tape.init(other).close()
    run_cli("--dir", other, "import", "claude-code", path, check=True)
    with Tape.open(other) as o, Tape.open(tape_dir) as t:
        assert all(t.has_entry(h) for h in o.session(name).refs().branches.values())


def test_a_path_reused_in_place_by_another_format(tape_dir, tmp_path):
    """The same inode, truncated and written again, longer, with a Claude Code session."""
    path = tmp_path / "runs" / "transcript.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"".join(lines(CODEX.read_bytes())[:5]))
    watch(tape_dir, path)
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(CLAUDE.read_bytes())
    err = watch(tape_dir, path)
    name = session_of(CLAUDE, "claude-code")
    assert f"into session {name}" in err
    assert export_of(tape_dir, name, "claude-code") == expected(CLAUDE.read_bytes())
    assert watch(tape_dir, path) == ""
    # and the other way: a Codex rollout in place of the Claude Code session
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(CODEX.read_bytes())
    err = watch(tape_dir, path)
    codex = session_of(CODEX, "codex")
    assert f"into session {codex}" in err
    assert export_of(tape_dir, codex, "codex") == expected(CODEX.read_bytes())


def test_after_a_restart_only_new_records_are_counted(tape_dir, tmp_path):
    """A new process without the cache (a lost cache, a crash before the layouts were
    saved): the file is read again, and only what was appended is counted."""
    for src, fmt in ((CLAUDE_FORKS, "claude-code"), (CODEX, "codex")):
        data = lines(src.read_bytes())
        path = tmp_path / src.name
        path.write_bytes(b"".join(data[:-3]))
        cache = tmp_path / f"cache-{fmt}"
        assert plus(watch(tape_dir, path, env={"CTAPE_CACHE_DIR": str(cache)})) == [len(data) - 3]
        with open(path, "ab") as f:
            f.write(b"".join(data[-3:]))
        shutil.rmtree(cache)
        err = watch(tape_dir, path, env={"CTAPE_CACHE_DIR": str(cache)})
        assert plus(err) == [3], (fmt, err)
        assert export_of(tape_dir, session_of(src, fmt), fmt) == expected(b"".join(data))
        # the same file under another name (a copy): nothing is new
        copy = tmp_path / "copy" / src.name
        copy.parent.mkdir(exist_ok=True)
        copy.write_bytes(b"".join(data))
        assert plus(watch(tape_dir, copy)) == []


def test_a_running_watcher_checks_a_large_prefix_whole_once_a_while(tmp_path, monkeypatch):
    """Follow mode on a file whose prefix is over VERIFY_ALL (here: any) compares only its
    ends until VERIFY_EVERY has passed since the last full comparison; then an edit made in
    between is found, and the file's version goes beside main (nothing is rewound)."""
    from ctape.watch import engine
    from ctape.watch.engine import Watcher

    monkeypatch.setattr(engine, "VERIFY_ALL", 0)
    monkeypatch.setattr(engine, "VERIFY_EVERY", 3600.0)
    data = lines(CODEX.read_bytes())
    name = session_of(CODEX, "codex")
    path = tmp_path / CODEX.name
    path.write_bytes(b"".join(data[:-6]))
    with Tape.init(tmp_path / "tape") as tape:
        w = Watcher(tape, [str(path)])
        w.run_pass()
        main = tape.session(name).refs().branches["main"]
        changed = same_size_edit(data, len(data) // 2)
        with open(path, "r+b") as f:
            f.write(b"".join(changed[:-3]))  # the edit, and three more lines
        assert w.run_pass().records == 3  # the ends match: the three lines go on from main
        refs = tape.session(name).refs().branches
        assert "main-imported" not in refs and tape.session(name).refs().branches["main"] != main
        monkeypatch.setattr(engine, "VERIFY_EVERY", 0.0)  # time for a full comparison
        with open(path, "ab") as f:
            f.write(b"".join(changed[-3:]))
        w.run_pass()
        refs = tape.session(name).refs().branches
        assert "main-imported" in refs
        from ctape.formats import export_ref

        assert [json.loads(x) for x in export_ref(tape, f"{name}/main-imported", "codex")] == expected(b"".join(changed))
        # a new process always compares the whole prefix: nothing more to find
        assert Watcher(tape, [str(path)]).run_pass().records == 0
