"""`ctape watch` never rewinds (issue 23, item 6): a watched file that got shorter, or
another file holding the same session, leaves `main` with the longest history, puts the
file's version on a side branch, and says so in one line, as `ctape import` does
(docs/import.md: "an import never removes, rewinds or replaces a ref").

Real transcripts, real `ctape watch --once` processes.
"""

import json
import os

from conftest import run_cli
from test_watch import CLAUDE, CODEX, expected, session_of, with_forks

from ctape import Tape


def watch(tape_dir, *paths):
    p = run_cli("--dir", tape_dir, "watch", "--once", *paths)
    assert p.returncode == 0, p.stderr.decode()
    assert b"Traceback" not in p.stderr
    return p.stderr.decode()


def said_once(err: str) -> bool:
    """One line says which branch kept what."""
    return sum("branch main" in line for line in err.splitlines()) == 1


def branches(tape_dir, name) -> dict:
    with Tape.open(tape_dir) as t:
        return dict(t.session(name).refs().branches)


def length(tape_dir, name, ref="main") -> int:
    with Tape.open(tape_dir) as t:
        s = t.session(name)
        return len(list(s.log(s.refs().branches[ref])))


def export_of(tape_dir, ref, fmt) -> list:
    p = run_cli("--dir", tape_dir, "export", "--format", fmt, ref, check=True)
    return [json.loads(x) for x in p.stdout.decode().splitlines() if x.strip()]


def replace(path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # as the tools rewrite a file: a new inode in its place


def lines(data: bytes) -> list[bytes]:
    return [x + b"\n" for x in data.split(b"\n") if x.strip()]


def test_a_shorter_codex_file_does_not_rewind_main(tape_dir, tmp_path):
    data = CODEX.read_bytes()
    name = session_of(CODEX, "codex")
    path = tmp_path / CODEX.name
    path.write_bytes(data)
    watch(tape_dir, path)
    full = branches(tape_dir, name)
    n = length(tape_dir, name)
    assert n == len(lines(data))
    replace(path, b"".join(lines(data)[:10]))
    err = watch(tape_dir, path)
    assert branches(tape_dir, name) == full  # main kept its whole history
    assert length(tape_dir, name) == n
    assert "kept branch main" in err and str(path) in err and said_once(err)
    # `ctape import` of the same file agrees: nothing new
    p = run_cli("--dir", tape_dir, "import", "codex", path, check=True)
    assert b"nothing new" in p.stdout + p.stderr
    assert branches(tape_dir, name) == full
    # and a rerun is silent
    assert watch(tape_dir, path) == ""


def test_a_rewritten_codex_file_goes_to_a_side_branch_and_grows_there(tape_dir, tmp_path):
    data = lines(CODEX.read_bytes())
    name = session_of(CODEX, "codex")
    path = tmp_path / CODEX.name
    path.write_bytes(b"".join(data))
    watch(tape_dir, path)
    main = branches(tape_dir, name)["main"]
    n = length(tape_dir, name)
    other = b"".join(data[:10] + data[12:14])  # two lines gone in the middle: another history
    replace(path, other)
    err = watch(tape_dir, path)
    refs = branches(tape_dir, name)
    assert refs["main"] == main and length(tape_dir, name) == n
    assert "main-imported" in refs and "main-imported" in err and said_once(err)
    assert export_of(tape_dir, f"{name}/main-imported", "codex") == expected(other)
    # the file grows: its branch moves forward, main stays
    with open(path, "ab") as f:
        f.write(b"".join(data[14:20]))
    watch(tape_dir, path)
    refs = branches(tape_dir, name)
    assert refs["main"] == main
    assert export_of(tape_dir, f"{name}/main-imported", "codex") == expected(path.read_bytes())


def test_another_claude_file_with_the_same_session_does_not_rewind_main(tape_dir, tmp_path):
    data = with_forks(CLAUDE)
    name = session_of(CLAUDE, "claude-code")
    a = tmp_path / "a" / CLAUDE.name
    a.parent.mkdir()
    a.write_bytes(data)
    watch(tape_dir, a)
    before = branches(tape_dir, name)
    n = length(tape_dir, name)
    assert len(before) >= 3  # forks: branches
    # another file, same session id, a shorter copy that went another way at its end
    recs = lines(data)
    msgs = [i for i, r in enumerate(recs) if json.loads(r).get("type") in ("user", "assistant")]
    cut = recs[: msgs[8]]
    last = json.loads(recs[msgs[8]])
    last["uuid"] = "00000000-aaaa-bbbb-cccc-000000000001"
    last["message"] = {"role": "user", "content": "a different request"}
    last["type"] = "user"
    b_data = b"".join(cut) + json.dumps(last).encode() + b"\n"
    b = tmp_path / "b" / CLAUDE.name
    b.parent.mkdir()
    b.write_bytes(b_data)
    err = watch(tape_dir, b)
    after = branches(tape_dir, name)
    for k, v in before.items():  # no branch removed, rewound or replaced
        assert after[k] == v
    assert length(tape_dir, name) == n
    assert after["main-imported"] != before["main"]
    assert "main-imported" in err and said_once(err)
    # the same as `ctape import` of that file into a tape that had the first one
    other = tmp_path / "other"
    Tape.init(other).close()
    run_cli("--dir", other, "import", "claude-code", a, check=True)
    run_cli("--dir", other, "import", "claude-code", b, check=True)
    assert branches(other, name) == after
    # the first file watched again: nothing moves back
    assert watch(tape_dir, a, b) == ""
    assert branches(tape_dir, name) == after


def test_a_shorter_claude_file_keeps_its_branches(tape_dir, tmp_path):
    data = with_forks(CLAUDE)
    name = session_of(CLAUDE, "claude-code")
    path = tmp_path / CLAUDE.name
    path.write_bytes(data)
    watch(tape_dir, path)
    before = branches(tape_dir, name)
    n = length(tape_dir, name)
    short = b"".join(lines(data)[:70])
    replace(path, short)
    err = watch(tape_dir, path)
    assert branches(tape_dir, name) == before and length(tape_dir, name) == n
    assert "kept branch main" in err and said_once(err)
    with Tape.open(tape_dir) as t:  # what the shorter file holds is all on the tape
        want = Tape.init(tmp_path / "fresh")
        from ctape.formats import import_files

        import_files(want, "claude-code", [str(path)], None)
        for h in want.session(name).refs().branches.values():
            assert t.has_entry(h)
        want.close()


def test_a_same_size_rewrite_in_the_middle_is_seen(tape_dir, tmp_path):
    """Bytes changed between the first 4 KiB and the 4 KiB before the position, the size
    unchanged: the file is read again, and its version goes on a branch of its own."""
    data = lines(CODEX.read_bytes())
    name = session_of(CODEX, "codex")
    path = tmp_path / CODEX.name
    path.write_bytes(b"".join(data))
    watch(tape_dir, path)
    main = branches(tape_dir, name)["main"]
    middle = len(data) // 2
    rec = json.loads(data[middle])
    old = json.dumps(rec["timestamp"])
    rec["timestamp"] = rec["timestamp"].replace("2026", "2027", 1)  # as long as it was
    edited = json.dumps(rec, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    if len(edited) != len(data[middle]):  # keep the bytes as they were but that digit
        edited = data[middle].replace(old.encode(), json.dumps(rec["timestamp"]).encode(), 1)
    assert len(edited) == len(data[middle]) and edited != data[middle]
    changed = data[:middle] + [edited] + data[middle + 1 :]
    with open(path, "r+b") as f:  # in place: same inode, same size
        f.write(b"".join(changed))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    err = watch(tape_dir, path)
    refs = branches(tape_dir, name)
    assert refs["main"] == main and "main-imported" in refs and said_once(err)
    assert export_of(tape_dir, f"{name}/main-imported", "codex") == expected(b"".join(changed))


def test_a_path_reused_by_another_format_is_imported_as_that_format(tape_dir, tmp_path):
    path = tmp_path / "runs" / "transcript.jsonl"
    path.parent.mkdir()
    path.write_bytes(CODEX.read_bytes())
    watch(tape_dir, path)
    replace(path, CLAUDE.read_bytes())  # the same name, now a Claude Code session
    err = watch(tape_dir, path)
    name = session_of(CLAUDE, "claude-code")
    assert f"into session {name}" in err
    assert export_of(tape_dir, name, "claude-code") == expected(CLAUDE.read_bytes())
    assert watch(tape_dir, path) == ""  # and followed from there
