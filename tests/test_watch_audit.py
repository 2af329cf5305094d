"""`ctape watch` audit: bytes of a line that is not UTF-8, FIFOs, signals inside a large
file, files named on the command line that are no transcripts. Real processes, real
signals, real FIFOs."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli
from test_watch import CLAUDE, CODEX, expected, exported, session_of
from test_watch_memory import transcript

from ctape import Tape

FIXTURES = Path(__file__).parent / "fixtures"
GEMINI = FIXTURES / "gemini" / "session-2026-03-11T21-02-7a2b9c10.jsonl"
OPENAI = FIXTURES / "transcripts" / "openai-chat" / "All-Hands-AI__OpenHands__multi_swe_bench_examples_output.jsonl"
BAD = b"caf\xe9 \xff\n"  # a line that is neither JSON nor UTF-8


def watch(tape_dir, *args, timeout=60):
    return subprocess.run([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "watch", "--once", *map(str, args)],
                          capture_output=True, timeout=timeout)


def hashes(tape_dir) -> dict:
    out = {}
    with Tape.open(tape_dir) as t:
        for name in t.store.sessions():
            s = t.session(name)
            out[name] = {e.hash for tip in s.refs().branches.values() for e in s.log(tip)}
    return out


# -- 1. a line that is not UTF-8 keeps its bytes, in every format --------------------------------


@pytest.mark.parametrize("fmt,source,name", [
    ("codex", CODEX, "rollout-x.jsonl"),
    ("claude-code", CLAUDE, "x.jsonl"),
    ("gemini", GEMINI, "session-x.jsonl"),
    ("openai", OPENAI, "x.jsonl"),
])
@pytest.mark.parametrize("grow", [False, True])
def test_a_line_that_is_not_utf8_keeps_its_bytes_and_the_hashes_of_import(tmp_path, fmt, source, name, grow):
    lines = source.read_bytes().splitlines(keepends=True)
    head, rest = b"".join(lines[:5]), BAD + b"".join(lines[5:])
    path = tmp_path / "runs" / name
    path.parent.mkdir()
    for d in ("w", "i"):
        run_cli("--dir", tmp_path / d, "init", check=True)
    if grow:  # the line comes in an append, after a first pass
        path.write_bytes(head)
        assert watch(tmp_path / "w", path).returncode == 0
        with path.open("ab") as f:
            f.write(rest)
    else:
        path.write_bytes(head + rest)
    p = watch(tmp_path / "w", "-q", path)
    assert p.returncode == 0, p.stderr
    run_cli("--dir", tmp_path / "i", "import", fmt, path, check=True)
    assert hashes(tmp_path / "w") == hashes(tmp_path / "i")
    if fmt == "codex":
        out = run_cli("--dir", tmp_path / "w", "export", session_of(CODEX, "codex"), "--format", "codex", check=True).stdout
        got = out.splitlines(keepends=True)
        assert got[5] == BAD and len(got) == len(lines) + 1


# -- 2. a FIFO is never opened -------------------------------------------------------------------


@pytest.mark.parametrize("named", [False, True])
def test_a_fifo_is_skipped_with_one_line_and_signals_work(tape_dir, tmp_path, named):
    runs = tmp_path / "runs"
    runs.mkdir()
    fifo = runs / "x.jsonl"
    os.mkfifo(fifo)
    (runs / CODEX.name).write_bytes(CODEX.read_bytes())
    try:
        p = watch(tape_dir, fifo if named else runs, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("watch blocked on a FIFO")
    err = p.stderr.decode()
    assert p.returncode == 1, err
    problems = [ln for ln in err.splitlines() if str(fifo) in ln]
    assert problems == [f"watch: {fifo}: not a regular file (a FIFO); skipped"], err
    assert "Traceback" not in err
    if not named:  # the other files are imported
        with Tape.open(tape_dir) as t:
            assert exported(t, session_of(CODEX, "codex"), "codex") == expected(CODEX.read_bytes())


def test_follow_mode_with_a_fifo_stops_on_sigterm(tape_dir, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    os.mkfifo(runs / "x.jsonl")
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "watch", "--poll", str(runs)], stderr=subprocess.PIPE)
    time.sleep(3)
    p.send_signal(signal.SIGTERM)
    try:
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
    assert "not a regular file (a FIFO)" in p.stderr.read().decode()


# -- 3. SIGTERM inside a large file: the current batch, then exit 0; the rerun completes it ------


def test_sigterm_inside_a_large_claude_file_ends_after_the_batch(tape_dir, tmp_path):
    big = tmp_path / "big" / "s.jsonl"
    big.parent.mkdir()
    # three of the reader's 8 MiB chunks, and 24 of STOPPER's 1 MiB batches: the signal
    # lands inside the file and inside a chunk (150 MB were needed when a fixed delay sent it)
    transcript(big, 24 << 20)
    # STOPPER (below) sends a real SIGTERM when the first batch ends: a fixed delay raced
    # with how fast the machine imports the file
    p = subprocess.run([sys.executable, "-c", STOPPER, str(tape_dir), str(big)], capture_output=True, timeout=300)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert "stopped after a batch" in err and "Traceback" not in err, err
    total = sum(1 for ln in big.read_bytes().splitlines() if ln.strip())
    again = watch(tape_dir, big, timeout=300)
    assert again.returncode == 0, again.stderr
    # the second run writes only what the first did not: it had stopped inside the file;
    # each record is counted by the pass that wrote it
    added = int(again.stderr.decode().split("+")[1].split()[0])
    first = int(p.stdout.decode().split()[-1])
    assert 0 < added < total and first + added == total, (first, added, total)
    assert f"+{first} records, stopped after a batch" in err, err
    sid = session_of(big, "claude-code")
    out = run_cli("--dir", tape_dir, "export", sid, "--format", "claude-code", check=True).stdout
    assert [json.loads(x) for x in out.splitlines()] == expected(big.read_bytes())


STOPPER = r"""
import os, signal, sys
from ctape import Tape
from ctape.watch import engine, watch_once
engine.BATCH_BYTES = 1 << 20  # a batch every 1 MB of source: many inside this file
checkpoint = engine.Watcher._checkpoint
sent = []
def sigterm_at_the_first_batch(self, *a, **k):
    # a real SIGTERM, sent when the first batch ends: no race with how fast the file imports
    if self._batch_bytes >= engine.BATCH_BYTES and not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGTERM)
    return checkpoint(self, *a, **k)
engine.Watcher._checkpoint = sigterm_at_the_first_batch
with Tape.open(sys.argv[1]) as t:
    rep = watch_once(t, [sys.argv[2]], echo=lambda s: print(s, file=sys.stderr), signals=True)
print(rep.records)
"""


def test_sigterm_inside_a_codex_file_keeps_the_position(tape_dir, tmp_path):
    lines = [ln for ln in CODEX.read_bytes().splitlines(keepends=True) if ln.strip()]
    body = [ln for ln in lines[1:] if b'"session_meta"' not in ln]
    path = tmp_path / "rollout-big.jsonl"
    with path.open("wb") as f:
        f.write(lines[0])
        for _ in range(max(1, (24 << 20) // len(b"".join(body)))):  # three 8 MiB chunks
            f.writelines(body)
    p = subprocess.Popen([sys.executable, "-c", STOPPER, str(tape_dir), str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    first = int(out)
    total = sum(1 for ln in path.read_bytes().splitlines() if ln.strip())
    assert 0 < first < total, (first, total)
    again = watch(tape_dir, path, timeout=300)
    assert again.returncode == 0, again.stderr
    added = int(again.stderr.decode().split("+")[1].split()[0])
    assert first + added == total
    with Tape.open(tape_dir) as t:
        assert exported(t, session_of(CODEX, "codex"), "codex") == expected(path.read_bytes())


# -- 4. a file named on the command line that is no transcript -----------------------------------


RANDOM = bytes(random.Random(7).getrandbits(8) for _ in range(3000)) + b'\n{"a": [\n'


@pytest.mark.parametrize("content", [b'{"foo": 1}\n', RANDOM, b"[1,\n2]\n"], ids=["json", "random", "document"])
def test_a_named_file_that_is_no_transcript_is_one_line_and_exit_1(tape_dir, tmp_path, content):
    path = tmp_path / "e" / "other.jsonl"
    path.parent.mkdir()
    path.write_bytes(content)
    p = watch(tape_dir, path)
    err = p.stderr.decode().splitlines()
    assert p.returncode == 1
    assert len(err) == 1 and err[0].startswith(f"watch: {path}: not a transcript ctape knows ("), err
    assert err[0].count(str(path)) == 1 and "ctape import" not in err[0]
    # found by scanning a folder, it is passed over (not named, no error); a folder of no
    # transcript at all gets the one line that says so (a wrong folder: found by an audit)
    p = watch(tape_dir, path.parent)
    assert p.returncode == 0 and str(path).encode() not in p.stderr, p.stderr
    assert p.stderr.startswith(b"watch: no transcript in ") and p.stderr.count(b"\n") == 1, p.stderr


def test_an_empty_named_file_waits_in_silence(tape_dir, tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"")
    p = watch(tape_dir, path)
    assert p.returncode == 0 and p.stderr == b""



# -- found by an audit (2026-12-05) ------------------------------------------------------------------

TRAJ = FIXTURES / "transcripts" / "openai-chat" / "SWE-agent__SWE-agent__function_calling_replace_from_source__marshmallow-1867.traj"


@pytest.mark.parametrize("named", [False, True])
def test_a_json_document_of_one_line_without_a_newline_is_imported(tape_dir, tmp_path, named):
    """`json.dump(obj, f)` writes a document on one line with no newline at its end: watch
    waited for a line's newline to tell the format, so it never imported such a `.traj`
    (every pass exit 0, nothing said), where `ctape import` reads it."""
    runs = tmp_path / "runs"
    runs.mkdir()
    with open(runs / "run.traj", "w") as f:
        json.dump(json.loads(TRAJ.read_text()), f)
    p = watch(tape_dir, runs / "run.traj" if named else runs)
    assert p.returncode == 0, p.stderr
    assert b"imported 1 record from" in p.stderr and b"(43 entries)" in p.stderr, p.stderr
    other = tmp_path / "imported"
    run_cli("--dir", other, "init", check=True)
    run_cli("--dir", other, "import", runs / "run.traj", check=True)
    assert hashes(tape_dir) == hashes(other)


def test_a_whole_file_touched_or_unchanged_is_silent(tape_dir, tmp_path):
    """Formats read whole printed "+1 record" beside the import's own line, also for a file
    only touched ("nothing new ... holds its 3 records" and "+1 record"). Now the import's
    line alone, once, and nothing for a file that brought nothing new."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "output.jsonl").write_bytes(OPENAI.read_bytes())
    p = watch(tape_dir, runs)
    lines = p.stderr.decode().splitlines()
    assert lines[0].startswith("watch: imported 3 records from") and "+" not in p.stderr.decode(), lines
    assert lines[-1] == "watch: imported 1 record from 1 of 1 file", lines
    os.utime(runs / "output.jsonl", (time.time() + 5, time.time() + 5))
    p = watch(tape_dir, runs)
    assert p.returncode == 0 and p.stderr == b"", p.stderr


def test_what_watch_says_it_imported_is_on_the_tape(tape_dir, tmp_path):
    """"+N records ... into session S" was printed when the file was read, and the batch
    that held them written later: a watcher killed in between had said it imported records
    the tape did not hold. Killed the moment the line appears, the tape holds them."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "a-rollout.jsonl").write_bytes(CODEX.read_bytes())
    transcript(runs / "b-big.jsonl", 24 << 20)  # read in the same batch, after the small one
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "watch", "--once", str(runs)],
                         stderr=subprocess.PIPE)
    said = None
    for line in p.stderr:
        if line.startswith(b"watch: +"):
            said = line.decode()
            p.kill()
            break
    p.wait()
    assert said is not None and "into session " in said, said
    session = said.rsplit("into session ", 1)[1].strip()
    with Tape.open(tape_dir) as t:
        assert session in t.store.sessions() and t.session(session).refs().head_hash, said


def test_a_pass_over_many_small_files_writes_its_position_file_a_bounded_number_of_times(tape_dir, tmp_path, monkeypatch):
    """The position file holds every file's position, and a pass wrote it whole at every
    batch (16 sessions): a pass over 5,000 small transcripts was quadratic, 103 s (found by
    an audit of scale). It is written at most every 10 s and at the pass's end: counted
    here, not timed. The next pass still finds nothing new."""
    import json as json_mod

    from ctape.watch import position, watch_once

    src = tmp_path / "many"
    src.mkdir()
    for f in range(160):
        with open(src / f"{f:05d}-aaaa-bbbb.jsonl", "w") as out:
            for i in range(4):
                rec = {"type": "user" if i % 2 == 0 else "assistant", "uuid": f"f{f}-u{i}", "parentUuid": f"f{f}-u{i-1}" if i else None,
                       "sessionId": f"sess-{f}", "timestamp": f"2026-01-01T00:00:{i:02d}.000Z",
                       "message": {"role": "user" if i % 2 == 0 else "assistant", "content": f"file {f} message {i}"}}
                out.write(json_mod.dumps(rec) + "\n")
    writes = []
    save = position.Cache.save
    monkeypatch.setattr(position.Cache, "save", lambda self: (writes.append(self.dirty), save(self))[1])
    with Tape.open(tape_dir) as t:
        rep = watch_once(t, [str(src)])
        assert rep.changed == 160
        assert sum(writes) <= 3, writes  # 10 batches: it was 10 writes, and grew with the files
        assert watch_once(t, [str(src)]).records == 0


def test_a_transcript_whose_file_name_is_not_utf8_is_followed(tape_dir, tmp_path):
    """A ref record holds text only: the position of `notes-\\xff.jsonl` could not be
    written, and every pass failed ("text is not valid Unicode") though its records were
    (found by an audit). The record holds the name's bytes escaped; the file is followed."""
    import shutil

    folder = tmp_path / "p1"
    folder.mkdir()
    name = os.path.join(os.fsencode(str(folder)), b"notes-\xff.jsonl")
    src = sorted((FIXTURES / "transcripts" / "claude-code").glob("*.jsonl"))[0]
    shutil.copyfile(src, name)
    p = watch(tape_dir, folder)
    assert p.returncode == 0 and b"imported" in p.stderr, p.stderr
    with open(name, "ab") as f:
        f.write(b'{"type":"user","uuid":"zz1","parentUuid":null,"sessionId":"x","timestamp":"2026-01-01T00:00:00Z",'
                b'"message":{"role":"user","content":"more"}}\n')
    p = watch(tape_dir, folder)
    assert p.returncode == 0 and b"+1 record" in p.stderr, p.stderr
    p = watch(tape_dir, folder)
    assert p.returncode == 0 and p.stderr == b"", p.stderr


HANGUP = r"""
import os, signal, sys
from ctape.watch import engine
one = engine.Watcher._one
def hangup_after_the_first_file(self, s, rep):
    one(self, s, rep)
    if rep.files == 1:
        os.kill(os.getpid(), signal.SIGHUP)  # a closed terminal
engine.Watcher._one = hangup_after_the_first_file
from ctape.cli import main
main(["--dir", sys.argv[1], "watch", "--once", sys.argv[2]])
"""


def test_sighup_ends_a_pass_after_its_file_and_says_it_stopped(tape_dir, tmp_path):
    # SIGHUP killed watch at once (no cache written); and a pass stopped between files said
    # "imported ... from 1 of 1 file" as if it had read them all (an audit)
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        shutil.copy(CODEX, src / f"rollout-{i}.jsonl")
    p = subprocess.run([sys.executable, "-c", HANGUP, str(tape_dir), str(src)], capture_output=True, timeout=120)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert "watch: stopped after 1 file (" in err and "the next pass imports the rest" in err and " of 1 file" not in err, err
    assert watch(tape_dir, src, timeout=120).returncode == 0


def test_quiet_still_says_a_folder_holds_no_transcript(tape_dir, tmp_path):
    empty = tmp_path / "typo"
    empty.mkdir()
    p = run_cli("--dir", tape_dir, "watch", "--once", "-q", empty)
    assert p.returncode == 0 and b"watch: no transcript in" in p.stderr, p.stderr


def test_watch_reads_again_files_whose_entries_a_replaced_tape_lacks(tmp_path):
    """(audit, 2026-12-07) The tape replaced by an older copy (a backup restored, an rsync
    --delete from a copy that had not imported them): `watch --once` trusted its cached
    positions, passed over the unchanged files in silence (exit 0), and `sessions` lacked
    theirs. A position whose tip the tape lacks is forgotten and the file read again: the
    sessions' loss is then said as `import` says it (exit 1, nothing written), and once
    salvaged, the files are imported again."""
    import shutil

    env = {"CTAPE_CACHE_DIR": str(tmp_path / "cache")}
    a, t = tmp_path / "A", tmp_path / "T"
    run_cli("--dir", a, "init", env=env, check=True)
    run_cli("--dir", a, "append", "user", "--text", "hello", "-s", "chat", env=env, check=True)
    shutil.copytree(a, t)
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "transcripts" / "codex-rollout", src)
    run_cli("--dir", t, "watch", "--once", src, env=env, check=True)
    before = sorted(Tape.open(t).store.sessions())
    assert len(before) == 4
    for child in t.iterdir():  # T's content replaced by A's, in the same folder (as `rsync -a --delete A/ T/` does)
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    shutil.copytree(a, t, dirs_exist_ok=True)
    p = run_cli("--dir", t, "watch", "--once", src, env=env)
    err = p.stderr.decode()
    assert p.returncode == 1 and err.count("lost acknowledged records") == 3, err
    assert sorted(Tape.open(t).store.sessions()) == ["chat"], sorted(str(x.relative_to(t)) for x in t.rglob("*"))
    run_cli("--dir", t, "fsck", "--salvage", env=env, check=True)
    p = run_cli("--dir", t, "watch", "--once", src, env=env, check=True)
    assert "imported 3127 records" in p.stderr.decode() + p.stdout.decode()
    assert sorted(Tape.open(t).store.sessions()) == before
    assert run_cli("--dir", t, "fsck", env=env).returncode == 0
