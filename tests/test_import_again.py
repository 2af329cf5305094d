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


TRAJ = os.path.join(os.path.dirname(__file__), "fixtures", "transcripts", "openai-chat",
                    "SWE-agent__SWE-agent__function_calling_replace_from_source__marshmallow-1867.traj")


def traj_steps(path, steps: int) -> dict:
    """The .traj as SWE-agent writes it again after `steps` steps: history longer, info changed."""
    d = json.load(open(TRAJ))
    d["history"] = d["history"][:steps]
    d["info"] = {**d.get("info", {}), "steps_so_far": steps}
    d["trajectory"] = d.get("trajectory", [])[: steps // 2]
    with open(path, "w") as f:
        json.dump(d, f, indent=2)
    return d


def export_value(tape_dir, name) -> dict:
    out = run_cli("--dir", tape_dir, "export", name, "--format", "openai", check=True).stdout.decode().splitlines()
    assert len(out) == 1
    return json.loads(out[0])


def test_a_traj_written_again_as_it_grows_moves_main_forward(tape_dir, tmp_path):
    """SWE-agent writes its .traj again after every step. Each import of a longer version
    made a conversation of its own beside `main` (`main-imported`, `-2`, ...), none of the
    shorter one's entries reused, and `main` (log, context) stayed on the first: the
    container's first entry held its other fields (`info`, `trajectory`), which change at
    every step. Now they close the run, and an import of the grown file moves `main` on;
    a shorter version (a file cut back) still goes beside it. (Found by an audit.)"""
    path = tmp_path / "run.traj"
    seen: set = set()
    for steps in (10, 20, 28):
        want = traj_steps(path, steps)
        imp(tape_dir, path, "-s", "run")
        assert set(branches(tape_dir, "run")) == {"main"}, branches(tape_dir, "run")
        assert export_value(tape_dir, "run") == want
        with Tape.open(tape_dir) as t:
            chain = [e.hash for e in t.session("run").log()]
        kept = [h for h in seen if h in chain]
        assert len(kept) == len(seen) - 1 or not seen, (len(kept), len(seen))  # all but the old closing entry
        seen = set(chain)
    traj_steps(path, 15)  # cut back: never rewinds main
    err = imp(tape_dir, path, "-s", "run")
    assert "main-imported" in err and set(branches(tape_dir, "run")) == {"main", "main-imported"}
    assert len(export_value(tape_dir, "run")["history"]) == 28


def test_a_traj_of_the_older_layout_exports_as_it_was(tape_dir):
    """Tapes imported before 2026-12-05 keep a container's other fields on its first entry:
    export still rebuilds the file from them."""
    d = json.load(open(TRAJ))
    rest = {k: v for k, v in d.items() if k != "history"}
    with Tape.open(tape_dir) as t:
        s = t.session("old")
        meta = {"openai": rest, "ctape.line": 1, "ctape.container": "history", "ctape.hidden": True}
        tip = s.put_entry("system", {"content": f"openai container (history: {len(d['history'])} items)"}, meta, None,
                          "2023-11-14T22:13:20.000000Z", None).hash
        for i, item in enumerate(d["history"][:3]):
            tip = s.put_entry("user", {"content": "x"}, {"openai": item, "ctape.line": 1, "ctape.item": i}, None,
                              "2023-11-14T22:13:20.000000Z", tip).hash
        s.set_refs("import", {"main": tip, "HEAD": "@main"})
    assert export_value(tape_dir, "old") == {**rest, "history": d["history"][:3]}
