"""`ctape watch` (issue 16): incremental, idempotent capture of growing transcripts.

The model every test checks: after a pass, exporting the session in the source's format
gives the source's complete lines so far (a line not JSON yet at the end is still being
written and is left out; one followed by valid lines comes back as it was).
"""

import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Optional

import pytest
from conftest import run_cli, snapshot

from ctape import Tape
from ctape.formats import export_ref, import_files
from ctape.watch import watch_once
from ctape.watch.engine import Watcher

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
CODEX = FIXTURES / "codex-rollout" / "codemie-ai__codemie-code__rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl"
CODEX_BIG = FIXTURES / "codex-rollout" / "madshn__localpush__rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl"
CLAUDE = FIXTURES / "claude-code" / "daaain__claude-code-log__fe869ecb-c176-478f-9734-7e4b8ef12cff.jsonl"
CLAUDE_FORKS = FIXTURES / "claude-code" / "daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"
SUBAGENT = FIXTURES / "claude-code" / "codemie-ai__codemie-code__incremental-subagents_turn-2_subagents_agent-a485154.jsonl"


def with_forks(source: Path) -> bytes:
    """A Claude Code transcript with two rewinds (a message whose parent is an older one),
    as after editing an earlier prompt: its threads become branches."""
    recs = [json.loads(x) for x in source.read_bytes().split(b"\n") if x.strip()]
    msgs = [r for r in recs if r.get("type") in ("user", "assistant") and r.get("uuid")]
    out = list(recs)
    for k, at in enumerate((len(msgs) // 3, len(msgs) // 2)):
        parent = msgs[at]["uuid"]
        for j in range(3):
            r = json.loads(json.dumps(msgs[at + 1 + j]))
            r["uuid"] = f"fork{k}-{j}-0000-0000-000000000000"
            r["parentUuid"] = parent
            parent = r["uuid"]
            out.append(r)
        out += recs[len(recs) // 2 : len(recs) // 2 + 5]  # the conversation goes on on main
    return b"".join(json.dumps(r).encode() + b"\n" for r in out)


def expected(data: bytes) -> list:
    """The source as export should give it back: complete non-blank lines, without the
    trailing ones that are not JSON (still being written)."""
    out = []
    for raw in data.split(b"\n")[:-1]:
        if not raw.strip():
            continue
        try:
            out.append(json.loads(raw))
        except ValueError:
            out.append(raw.decode("utf-8", "replace").rstrip("\r"))
    while out and isinstance(out[-1], str):
        out.pop()
    return out


def exported(tape, session: str, fmt: str) -> list:
    if not tape.session(session).exists():
        return []
    out = []
    for line in export_ref(tape, session, fmt):
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append(line)
    return out


def session_of(path: Path, fmt: str) -> str:
    for line in path.read_bytes().split(b"\n"):
        v = json.loads(line)
        if fmt == "codex" and v.get("type") == "session_meta":
            return v["payload"]["id"]
        if fmt == "claude-code" and v.get("sessionId"):
            return v["sessionId"]
    raise AssertionError(path)


def entry_hashes(tape, session: str) -> set:
    out = set()
    s = tape.session(session)
    for tip in s.refs().branches.values():
        out.update(e.hash for e in s.log(tip))
    return out


def refs_of(tape, session: str) -> dict:
    return dict(tape.session(session).refs().branches)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """Empty default roots, so a test never reads the real ~/.claude or ~/.codex."""
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    return tmp_path


# -- one pass ----------------------------------------------------------------------------------


def test_once_gives_the_same_entries_as_import(tape, tmp_path, home):
    src = tmp_path / "src"
    src.mkdir()
    for p in (CODEX, CODEX_BIG, CLAUDE, CLAUDE_FORKS, SUBAGENT):
        shutil.copy(p, src / p.name)
    rep = watch_once(tape, [str(src)])
    assert rep.changed == 5 and not rep.errors
    other = Tape.init(tmp_path / "imported")
    import_files(other, "codex", [str(src / CODEX.name), str(src / CODEX_BIG.name)], None)
    for p in (CLAUDE, CLAUDE_FORKS, SUBAGENT):
        import_files(other, "claude-code", [str(src / p.name)], None)
    assert sorted(tape.store.sessions()) == sorted(other.store.sessions())
    for name in other.store.sessions():
        assert entry_hashes(tape, name) == entry_hashes(other, name), name
        assert refs_of(tape, name) == refs_of(other, name), name
    for p, fmt in ((CODEX, "codex"), (CODEX_BIG, "codex"), (CLAUDE, "claude-code"), (CLAUDE_FORKS, "claude-code")):
        assert exported(tape, session_of(p, fmt), fmt) == expected(p.read_bytes())
    # a second pass finds nothing new and writes nothing
    before = snapshot(tape.path)
    rep = watch_once(tape, [str(src)])
    assert rep.records == 0 and snapshot(tape.path) == before


def test_records_two_files_of_a_session_share_are_counted_once(tape, tmp_path, home):
    """A copy of a transcript and a longer copy of it, in one pass (one batch): "+N records"
    counts what the tape did not hold, so the records the first file brought are not new
    again in the second (an audit saw +25 and +50, "imported 75 records", for 50)."""
    turn1 = FIXTURES / "claude-code" / "codemie-ai__codemie-code__incremental-subagents_turn-1.jsonl"
    turn2 = FIXTURES / "claude-code" / "codemie-ai__codemie-code__incremental-subagents_turn-2.jsonl"
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(turn1, src / "s1.jsonl")
    shutil.copy(turn2, src / "s2.jsonl")
    said: list[str] = []
    rep = watch_once(tape, [str(src)], echo=said.append)
    n2 = sum(1 for x in turn2.read_bytes().split(b"\n") if x.strip())
    n1 = sum(1 for x in turn1.read_bytes().split(b"\n") if x.strip())
    assert rep.records == n2, (rep.records, said)
    assert [x.split(" records")[0].rsplit("+", 1)[1] for x in said if "+" in x] == [str(n1), str(n2 - n1)], said


@pytest.mark.parametrize("source", [CODEX, CLAUDE], ids=["codex", "claude-code"])
def test_kept_ahead_is_said_for_a_shorter_file_only(tape_dir, tmp_path, home, source):
    """"kept branch main: it is ahead of the imported one" says a file got shorter. A file
    that only grew, read on from this watcher's position while another copy of it (or
    another watcher) had moved main further, said it too (found by an audit); a file
    written again shorter still says it, once."""
    lines = [x + b"\n" for x in source.read_bytes().split(b"\n") if x.strip()]
    watched, other = tmp_path / "w" / source.name, tmp_path / "o" / source.name
    watched.parent.mkdir()
    other.parent.mkdir()
    watched.write_bytes(b"".join(lines[:20]))
    cache = {"CTAPE_CACHE_DIR": str(tmp_path / "cache-a")}
    run_cli("--dir", tape_dir, "watch", "--once", watched, env=cache, check=True)
    other.write_bytes(b"".join(lines))  # the whole file elsewhere moves main to its end
    run_cli("--dir", tape_dir, "import", other, env={"CTAPE_CACHE_DIR": str(tmp_path / "cache-b")}, check=True)
    watched.write_bytes(b"".join(lines[:40]))  # grew: read on from the position
    p = run_cli("--dir", tape_dir, "watch", "--once", watched, env=cache, check=True)
    assert "ahead" not in p.stderr.decode(), p.stderr.decode()
    watched.write_bytes(b"".join(lines[:30]))  # written again, shorter
    p = run_cli("--dir", tape_dir, "watch", "--once", watched, env=cache, check=True)
    said = [x for x in p.stderr.decode().splitlines() if "ahead" in x]
    assert len(said) == 1 and said[0].endswith("kept branch main: it is ahead of the imported one"), p.stderr.decode()


def test_a_compressed_transcript_without_a_last_line_end_is_read_whole(tape, tmp_path, home):
    """(audit, 2026-12-06) A `.jsonl.zst` whose last line is complete JSON without a line
    end: `watch` waited for the end of that line on every pass, as it waits for a writer
    mid-line in a `.jsonl`, so the record never came (import reads it). No one appends to a
    compressed file: its last line is complete, and `watch` gives what `import` gives."""
    import zstandard

    src = tmp_path / "src"
    src.mkdir()
    for p in (CODEX, CLAUDE):
        (src / (p.name + ".zst")).write_bytes(zstandard.ZstdCompressor().compress(p.read_bytes().rstrip(b"\n")))
    for _ in range(2):
        rep = watch_once(tape, [str(src)])
        assert not rep.errors
    other = Tape.init(tmp_path / "imported")
    import_files(other, "codex", [str(src / (CODEX.name + ".zst"))], None)
    import_files(other, "claude-code", [str(src / (CLAUDE.name + ".zst"))], None)
    for p, fmt in ((CODEX, "codex"), (CLAUDE, "claude-code")):
        name = session_of(p, fmt)
        assert entry_hashes(tape, name) == entry_hashes(other, name), name
        assert exported(tape, name, fmt) == expected(p.read_bytes()), name


def _cut_mid_line(data: bytes) -> tuple[bytes, bytes]:
    """`data` compressed (one frame, many blocks), and that frame cut where what it
    decompresses to ends inside a line: (whole, cut)."""
    import zstandard

    z = zstandard.ZstdCompressor(level=3).compress(data)
    for cut in range(len(z) // 2, len(z)):
        got = zstandard.ZstdDecompressor().stream_reader(z[:cut], read_across_frames=True).read()
        if got and not got.endswith(b"\n"):
            return z, z[:cut]
    raise AssertionError("no cut inside a line")


@pytest.mark.parametrize("source,fmt", [(CODEX_BIG, "codex"), (CLAUDE, "claude-code")])
def test_a_compressed_transcript_cut_inside_a_frame_waits_for_the_rest(tape, tmp_path, home, source, fmt):
    """(2026-12-07) A `.zst` cut inside a frame (a copy stopped half way, a rollout still
    being compressed): python-zstandard's reader ends there as at a true end, so `watch`
    took the cut last line for a whole one (a `.zst` is written whole) and kept it as a
    hidden raw entry; once the file was whole, the rest of that line became a second raw
    entry. Now the cut is told from the frame's headers: the last line waits, as a
    writer's half line does, one line says so, and the whole file gives what `import`
    gives."""
    src = tmp_path / "src"
    src.mkdir()
    whole, cut = _cut_mid_line(source.read_bytes())
    path = src / (source.name + ".zst")
    path.write_bytes(cut)
    warned: list[str] = []
    for _ in range(2):
        assert not watch_once(tape, [str(path)], warn=warned.append).errors
    name = session_of(source, fmt)
    said = [w for w in warned if "inside a zstd frame" in w]
    assert len(said) == 1 and said[0].startswith(f"watch: {path}: the compressed file ends inside a zstd frame"), warned
    assert not any("not JSON" in w for w in warned), warned
    path.write_bytes(whole)
    assert not watch_once(tape, [str(path)], warn=warned.append).errors
    other = Tape.init(tmp_path / "imported")
    import_files(other, fmt, [str(path)], None)
    assert entry_hashes(tape, name) == entry_hashes(other, name)
    assert exported(tape, name, fmt) == expected(source.read_bytes())


def test_import_says_a_compressed_transcript_is_cut(tape_dir, tmp_path):
    """`import` of a `.zst` cut inside a frame imports what it holds and says so (it said
    nothing when the cut fell between two lines, and only "the incomplete last line"
    otherwise); a whole one says nothing of the kind."""
    whole, cut = _cut_mid_line(CODEX_BIG.read_bytes())
    (tmp_path / "cut.jsonl.zst").write_bytes(cut)
    (tmp_path / "whole.jsonl.zst").write_bytes(whole)
    p = run_cli("--dir", tape_dir, "import", "codex", tmp_path / "cut.jsonl.zst", check=True)
    out = (p.stdout + p.stderr).decode()
    assert f"{tmp_path / 'cut.jsonl.zst'}: the compressed file ends inside a zstd frame (cut short, or still being written); imported what it holds before the cut" in out, out
    p = run_cli("--dir", tape_dir, "import", "codex", "-", input=cut, check=True)
    assert "stdin: the compressed file ends inside a zstd frame" in (p.stdout + p.stderr).decode()
    p = run_cli("--dir", tape_dir, "import", "codex", tmp_path / "whole.jsonl.zst", check=True)
    assert b"zstd frame" not in p.stdout + p.stderr


def test_a_rewritten_rollout_whose_first_line_is_damaged_stays_in_its_session(tape, tmp_path, home):
    """(audit, 2026-12-06) A watched rollout rewritten with its first line (session_meta,
    which names the session) damaged was imported again into a new session named after
    the file, and its new records were found only there. docs/watch.md: a rewritten file
    "is imported again into the same session"; the session it went to before is kept."""
    src = tmp_path / "src"
    src.mkdir()
    lines = CODEX_BIG.read_bytes().splitlines(True)
    f = src / CODEX_BIG.name
    f.write_bytes(b"".join(lines[: len(lines) // 2]))
    assert not watch_once(tape, [str(src)]).errors
    (name,) = tape.store.sessions()
    damaged = bytearray(b"".join(lines))
    damaged[0:8] = b"XXXXXXXX"
    f.write_bytes(bytes(damaged))
    assert not watch_once(tape, [str(src)]).errors
    assert tape.store.sessions() == [name]
    branches = refs_of(tape, name)
    assert "main-imported" in branches, branches  # the rewrite's line, beside the one imported before


def test_a_large_pass_split_over_two_processes(tape, tmp_path, home, monkeypatch):
    from ctape.watch import parallel

    monkeypatch.setattr(parallel, "MIN_BYTES", 0)  # the workers import it again: the size does not matter there
    src = tmp_path / "src"
    src.mkdir()
    for p in (CODEX, CODEX_BIG, CLAUDE, CLAUDE_FORKS):
        shutil.copy(p, src / p.name)
    lines = []
    rep = watch_once(tape, [str(src)], jobs=2, echo=lines.append)
    assert rep.changed == 4 and not rep.errors and len(lines) == 4
    other = Tape.init(tmp_path / "imported")
    import_files(other, "codex", [str(src / CODEX.name), str(src / CODEX_BIG.name)], None)
    import_files(other, "claude-code", [str(src / CLAUDE.name), str(src / CLAUDE_FORKS.name)], None)
    for name in other.store.sessions():
        assert entry_hashes(tape, name) == entry_hashes(other, name), name
    from ctape.watch.position import Cache

    assert len(Cache(tape).positions) == 4  # the workers' positions came back to the cache
    before = snapshot(tape.path)
    assert watch_once(tape, [str(src)], jobs=2).records == 0
    assert snapshot(tape.path) == before


def test_a_split_pass_refuses_a_named_file_as_one_process_does(tape, tmp_path, home, monkeypatch):
    # the workers of a split pass took every file for one found in a folder: a named file
    # that is no transcript was passed over in silence (found by a review)
    from ctape.watch import parallel

    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    shutil.copy(CODEX, tmp_path / CODEX.name)
    junk = tmp_path / "notes.jsonl"
    junk.write_bytes(b"hello\nworld\n")
    rep = watch_once(tape, [str(tmp_path / CODEX.name), str(junk)], jobs=2)
    assert any("not a transcript ctape knows" in e for e in rep.errors), rep.errors


def test_default_roots_and_subagents(tape, home):
    sid = session_of(CLAUDE, "claude-code")
    proj = home / "claude" / "projects" / "-home-u-repo"
    (proj / sid / "subagents").mkdir(parents=True)
    shutil.copy(CLAUDE, proj / f"{sid}.jsonl")
    shutil.copy(SUBAGENT, proj / sid / "subagents" / "agent-a485154.jsonl")
    day = home / "codex" / "sessions" / "2026" / "05" / "11"
    day.mkdir(parents=True)
    shutil.copy(CODEX, day / ("rollout-" + CODEX.name.split("rollout-")[1]))
    (day / "notes.jsonl").write_text('{"not": "a rollout"}\n')  # not rollout-*: ignored
    rep = watch_once(tape)
    assert rep.files == 3 and not rep.errors
    names = set(tape.store.sessions())
    assert sid in names and session_of(CODEX, "codex") in names
    sub_sid = session_of(SUBAGENT, "claude-code")
    assert f"{sub_sid}-agent-a485154" in names


def test_a_session_file_brings_its_subagents(tape, tmp_path, home):
    sid = session_of(CLAUDE, "claude-code")
    main = tmp_path / f"{sid}.jsonl"
    shutil.copy(CLAUDE, main)
    (tmp_path / sid / "subagents").mkdir(parents=True)
    shutil.copy(SUBAGENT, tmp_path / sid / "subagents" / "agent-a485154.jsonl")
    rep = watch_once(tape, [str(main)])  # what a Stop hook passes: the main transcript
    assert rep.files == 2 and f"{session_of(SUBAGENT, 'claude-code')}-agent-a485154" in tape.store.sessions()


def test_progress_line_for_a_large_pass(tape, tmp_path, home, monkeypatch, capsys):
    from ctape.watch import engine

    monkeypatch.setattr(engine, "PROGRESS_BYTES", 0)  # "large": anything here
    shutil.copy(CODEX, tmp_path / CODEX.name)
    shutil.copy(CLAUDE, tmp_path / CLAUDE.name)
    watch_once(tape, [str(tmp_path / CODEX.name), str(tmp_path / CLAUDE.name)], progress=True)
    err = capsys.readouterr().err
    assert "\rwatch: 1/2 files" in err and "\rwatch: 2/2 files" in err and err.endswith("\r")
    watch_once(tape, [str(tmp_path / CODEX.name)], progress=False)
    assert capsys.readouterr().err == ""


def test_missing_path_is_refused_and_changes_nothing(tape_dir, tmp_path):
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "watch", "--once", tmp_path / "nope.jsonl")
    assert p.returncode == 2 and b"no file or folder" in p.stderr and b"Traceback" not in p.stderr
    assert snapshot(tape_dir) == before
    # follow mode refuses it before it says it follows (it said "following" first; an audit)
    p = run_cli("--dir", tape_dir, "watch", tmp_path / "nope")
    assert p.returncode == 2 and p.stderr.decode().splitlines() == [f"ctape: error: no file or folder {tmp_path / 'nope'}; "
                                                                    "give transcript files or folders that exist"]
    # an empty name is shown as one (the message named nothing)
    p = run_cli("--dir", tape_dir, "watch", "--once", "")
    assert p.returncode == 2 and b"no file or folder ''" in p.stderr
    assert snapshot(tape_dir) == before


def test_help_has_examples():
    p = run_cli("watch", "--help")
    assert p.returncode == 0 and b"Examples:" in p.stdout and b"--once" in p.stdout


# -- growing files -----------------------------------------------------------------------------


def grow(tape, tmp_path, source: Path, fmt: str, seed: int, mode: str, steps: int = 12, data: Optional[bytes] = None):
    """Write the source in random pieces (cut anywhere, mid-line too); a pass after each."""
    rng = random.Random(seed)
    data = data or source.read_bytes()
    cuts = sorted(rng.sample(range(1, len(data)), steps - 1)) + [len(data)]
    path = tmp_path / "live" / source.name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"")
    name = session_of(source, fmt) + ("-agent-a485154" if source == SUBAGENT else "")
    w = Watcher(tape, [str(path)])
    for cut in cuts:
        with open(path, "ab") as f:
            f.write(data[path.stat().st_size : cut])
        if mode == "fresh":  # a new process every pass (cron, hooks): cache and tape positions
            w = Watcher(tape, [str(path)])
        elif mode == "nocache":  # the cache lost every time: positions from the tape only
            for c in Path(os.environ["CTAPE_CACHE_DIR"]).rglob("watch.json"):
                c.unlink()
            w = Watcher(tape, [str(path)])
        rep = w.run_pass()
        assert not rep.errors
        assert exported(tape, name, fmt) == expected(data[:cut]), cut
    return name


@pytest.mark.parametrize("mode", ["live", "fresh", "nocache"])
@pytest.mark.parametrize("source,fmt,forks", [(CODEX, "codex", 0), (CLAUDE_FORKS, "claude-code", 0), (SUBAGENT, "claude-code", 0), (CLAUDE, "claude-code", 1)])
def test_growing_file_matches_the_source_after_every_pass(tape, tmp_path, home, source, fmt, forks, mode):
    data = with_forks(source) if forks else source.read_bytes()
    name = grow(tape, tmp_path, source, fmt, seed=len(mode) * 7 + len(source.name), mode=mode, data=data)
    other = Tape.init(tmp_path / "imported")
    whole = tmp_path / "whole" / source.name
    whole.parent.mkdir()
    whole.write_bytes(data)
    import_files(other, fmt, [str(whole)], None)
    if forks:
        assert len(refs_of(other, name)) >= 3
    assert refs_of(tape, name) == refs_of(other, name)  # the same layout as one import


def test_codex_pass_reads_only_what_was_appended(tape, tmp_path, home):
    data = CODEX_BIG.read_bytes()
    half = data.rfind(b"\n", 0, len(data) // 2) + 1
    path = tmp_path / CODEX_BIG.name
    path.write_bytes(data[:half])
    watch_once(tape, [str(path)])
    with open(path, "ab") as f:
        f.write(data[half:])
    for c in Path(os.environ["CTAPE_CACHE_DIR"]).rglob("watch.json"):
        c.unlink()  # even without the cache: the position comes from the tape
    rep = watch_once(tape, [str(path)])
    assert rep.bytes == len(data) - half
    assert rep.records == len(expected(data)) - len(expected(data[:half]))


def test_claude_pass_in_a_new_process_reads_only_what_was_appended(tape, tmp_path, home):
    data = with_forks(CLAUDE)
    half = data.rfind(b"\n", 0, len(data) // 2) + 1
    path = tmp_path / CLAUDE.name
    path.write_bytes(data[:half])
    watch_once(tape, [str(path)])
    with open(path, "ab") as f:
        f.write(data[half:])
    rep = watch_once(tape, [str(path)])  # a new Watcher: the layout comes from the cache
    assert rep.bytes == len(data) - half
    name = session_of(CLAUDE, "claude-code")
    assert exported(tape, name, "claude-code") == expected(data)
    other = Tape.init(tmp_path / "imported")
    import_files(other, "claude-code", [str(path)], None)
    assert refs_of(tape, name) == refs_of(other, name)


def test_a_layout_that_is_not_ours_is_not_loaded(tape, tmp_path, home):
    import pickle

    data = CLAUDE.read_bytes()
    half = data.rfind(b"\n", 0, len(data) // 2) + 1
    path = tmp_path / CLAUDE.name
    path.write_bytes(data[:half])
    watch_once(tape, [str(path)])
    [layout] = Path(os.environ["CTAPE_CACHE_DIR"]).rglob("watch-layouts/*")
    marker = tmp_path / "pwned"
    layout.write_bytes(pickle.dumps(Evil(str(marker))))
    with open(path, "ab") as f:
        f.write(data[half:])
    rep = watch_once(tape, [str(path)])
    assert not marker.exists() and rep.bytes == len(data)  # ignored: the whole file again
    assert exported(tape, session_of(CLAUDE, "claude-code"), "claude-code") == expected(data)


class Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_half_written_and_corrupt_lines(tape, tmp_path, home):
    lines = CODEX.read_bytes().split(b"\n")
    path = tmp_path / "rollout-x.jsonl"
    name = session_of(CODEX, "codex")
    path.write_bytes(b"\n".join(lines[:5]) + b"\n" + lines[5][:40])  # the 6th line half-written
    warnings = []
    w = Watcher(tape, [str(path)], warn=warnings.append)
    w.run_pass()
    assert exported(tape, name, "codex") == expected(path.read_bytes())
    assert len(exported(tape, name, "codex")) == 5
    with open(path, "ab") as f:
        f.write(lines[5][40:] + b"\n" + b'{"timestamp": "2026-05-11T11:30:00Z", "type": broken\n')
    w.run_pass()  # the broken line may still be being written: not imported yet
    assert len(exported(tape, name, "codex")) == 6 and not warnings
    w.run_pass()
    with open(path, "ab") as f:
        f.write(lines[6] + b"\n")
    w.run_pass()  # the file moved on: the broken line is kept as it is, reported once
    out = exported(tape, name, "codex")
    assert out == expected(path.read_bytes()) and out[6] == '{"timestamp": "2026-05-11T11:30:00Z", "type": broken'
    assert len(warnings) == 1 and "line 7 is not JSON" in warnings[0]
    w.run_pass()
    w.save_cache()  # as a follower does when it stops
    Watcher(tape, [str(path)], warn=warnings.append).run_pass()
    assert len(warnings) == 1


# -- replaced, renamed, rewritten ----------------------------------------------------------------


def test_zst_rollout_and_rename_to_zst(tape, tmp_path, home):
    import zstandard

    day = home / "codex" / "sessions" / "2026" / "05" / "11"
    day.mkdir(parents=True)
    plain = day / ("rollout-" + CODEX.name.split("rollout-")[1])
    shutil.copy(CODEX, plain)
    name = session_of(CODEX, "codex")
    watch_once(tape)
    hashes = entry_hashes(tape, name)
    tips = refs_of(tape, name)
    # Codex compresses an idle rollout and deletes the .jsonl: the same source
    zpath = Path(str(plain) + ".zst")
    zpath.write_bytes(zstandard.ZstdCompressor(level=3).compress(plain.read_bytes()))
    plain.unlink()
    rep = watch_once(tape)
    assert not rep.errors and set(tape.store.sessions()) == {name}
    assert entry_hashes(tape, name) == hashes and refs_of(tape, name) == tips
    assert exported(tape, name, "codex") == expected(CODEX.read_bytes())
    assert watch_once(tape).records == 0
    # a .zst seen first (a fresh tape) imports the same entries
    other = Tape.init(tmp_path / "other")
    watch_once(other)
    assert entry_hashes(other, name) == hashes
    # resumed: Codex decompresses it again and appends
    extra = b'{"timestamp":"2026-05-12T09:00:00.000Z","type":"event_msg","payload":{"type":"user_message","message":"resumed"}}\n'
    plain.write_bytes(CODEX.read_bytes() + extra)
    zpath.unlink()
    watch_once(tape)
    assert exported(tape, name, "codex") == expected(CODEX.read_bytes() + extra)


def holds_import_of(tape, path: Path, fmt: str, name: str, tmp: Path) -> dict:
    """Every branch tip `ctape import` of the file gives in a new tape is an entry of `tape`
    (content addressing: the same hashes); those tips."""
    other = Tape.init(tmp)
    import_files(other, fmt, [str(path)], None)
    tips = refs_of(other, name)
    other.close()
    assert tips and all(tape.has_entry(h) for h in tips.values())
    return tips


def test_shortened_and_rewritten_files_are_imported_again_never_rewound(tape, tmp_path, home):
    """Issue 23 item 6: as `ctape import`, the file's version is kept and main keeps the
    longest history (tests/test_watch_rewind.py checks the CLI's lines)."""
    data = with_forks(CLAUDE)
    name = session_of(CLAUDE, "claude-code")
    path = tmp_path / CLAUDE.name
    path.write_bytes(data)
    w = Watcher(tape, [str(path)])
    w.run_pass()
    full = refs_of(tape, name)
    assert len(full) >= 3  # it has forks: branches
    # shortened (a new inode: the tool rewrote it): nothing moves, all of it is there
    lines = data.split(b"\n")
    short = b"\n".join(lines[:70]) + b"\n"
    tmp = tmp_path / "tmp"
    tmp.write_bytes(short)
    os.replace(tmp, path)
    w.run_pass()
    assert refs_of(tape, name) == full
    holds_import_of(tape, path, "claude-code", name, tmp_path / "i1")
    # rewritten in place, one record changed in the middle: its version on a branch of its own
    recs = [json.loads(x) for x in short.split(b"\n") if x.strip()]
    at = [i for i, r in enumerate(recs) if r.get("type") == "user"][len(recs) // 20]
    recs[at]["message"] = {"role": "user", "content": "an edited request"}
    edited = b"".join(json.dumps(r).encode() + b"\n" for r in recs)
    path.write_bytes(edited)
    os.utime(path, ns=(1, 1))
    Watcher(tape, [str(path)]).run_pass()
    refs = refs_of(tape, name)
    assert all(refs[b] == h for b, h in full.items())
    tips = holds_import_of(tape, path, "claude-code", name, tmp_path / "i2")
    assert refs["main-imported"] == tips["main"]
    # truncated in place (same inode) and grown again with other content
    codex_name = session_of(CODEX, "codex")
    cpath = tmp_path / "rollout-y.jsonl"
    cdata = CODEX.read_bytes()
    cpath.write_bytes(cdata)
    w = Watcher(tape, [str(cpath)])
    w.run_pass()
    cmain = refs_of(tape, codex_name)["main"]
    clines = cdata.split(b"\n")
    changed = b"\n".join(clines[:10]) + b"\n" + clines[12] + b"\n"
    with open(cpath, "r+b") as f:
        f.truncate(0)
        f.write(changed)
    w.run_pass()
    assert refs_of(tape, codex_name)["main"] == cmain
    assert [json.loads(x) for x in export_ref(tape, f"{codex_name}/main-imported", "codex")] == expected(changed)


# -- processes: kill -9, signals, rsync -------------------------------------------------------------

WRITER = r"""
import os, random, sys, time
src, dst, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
data = open(src, "rb").read()
pos = 0
with open(dst, "ab") as f:
    while pos < len(data):
        n = rng.choice([1, 7, 300, 4000, 20000])
        f.write(data[pos:pos + n]); f.flush()
        pos += n
        time.sleep(rng.choice([0, 0.001, 0.01, 0.03]))
"""


def _cache_files():
    return list(Path(os.environ["CTAPE_CACHE_DIR"]).rglob("watch.json"))


def test_kill9_at_random_instants_then_rerun(tape_dir, tmp_path, home):
    slow = os.environ.get("CTAPE_SLOW") == "1"
    seed = int(os.environ.get("CTAPE_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    live = tmp_path / "live"
    live.mkdir()
    pairs = [(CODEX_BIG, live / CODEX_BIG.name, "codex"), (CLAUDE_FORKS, live / CLAUDE_FORKS.name, "claude-code")]
    writers = [subprocess.Popen([os.sys.executable, "-c", WRITER, str(s), str(d), str(seed + i)]) for i, (s, d, _) in enumerate(pairs)]
    kills = 0
    try:
        while any(wr.poll() is None for wr in writers) or kills < 3:
            p = subprocess.Popen([os.sys.executable, "-m", "ctape", "--dir", str(tape_dir), "watch", "-q", str(live)], stderr=subprocess.PIPE)
            import time

            time.sleep(rng.uniform(0.05, 1.5 if slow else 0.8))
            p.kill()
            p.wait()
            kills += 1
            if rng.random() < 0.25:
                for c in _cache_files():
                    c.unlink()  # lost cache: positions from the tape
            if kills > (60 if slow else 25):
                break
    finally:
        for wr in writers:
            wr.wait()
    run_cli("--dir", tape_dir, "watch", "--once", "-q", live, check=True)
    with Tape.open(tape_dir) as t:
        for src, dst, fmt in pairs:
            assert exported(t, session_of(src, fmt), fmt) == expected(dst.read_bytes()), f"seed {seed}"
    assert run_cli("--dir", tape_dir, "fsck").returncode == 0


@pytest.mark.parametrize("sig,poll", [("SIGTERM", False), ("SIGINT", False), ("SIGTERM", True)])
def test_signal_finishes_and_exits_zero(tape_dir, tmp_path, home, sig, poll):
    import signal
    import time

    path = tmp_path / CODEX_BIG.name
    shutil.copy(CODEX_BIG, path)
    p = subprocess.Popen([os.sys.executable, "-m", "ctape", "--dir", str(tape_dir), "watch", *(["--poll"] if poll else []), str(path)], stderr=subprocess.PIPE)
    name = session_of(CODEX_BIG, "codex")
    for _ in range(200):
        time.sleep(0.1)
        with Tape.open(tape_dir) as t:
            if len(exported(t, name, "codex")) == len(expected(CODEX_BIG.read_bytes())):
                break
    with open(path, "ab") as f:  # follow mode notices an append
        f.write(b'{"timestamp":"2026-03-01T00:00:00.000Z","type":"event_msg","payload":{"type":"agent_message","message":"later"}}\n')
    for _ in range(100):
        time.sleep(0.1)
        with Tape.open(tape_dir) as t:
            if exported(t, name, "codex") == expected(path.read_bytes()):
                break
    else:
        pytest.fail("follow mode did not import the appended line")
    p.send_signal(getattr(signal, sig))
    assert p.wait(timeout=30) == 0, p.stderr.read()


def test_rsync_of_the_tape_keeps_the_position(tape_dir, tmp_path, home, monkeypatch):
    if not shutil.which("rsync"):
        pytest.skip("rsync not installed")
    data = CODEX_BIG.read_bytes()
    half = data.rfind(b"\n", 0, len(data) // 2) + 1
    path = tmp_path / CODEX_BIG.name
    path.write_bytes(data[:half])
    run_cli("--dir", tape_dir, "watch", "--once", "-q", path, check=True)
    copy = tmp_path / "copy"
    subprocess.run(["rsync", "-a", f"{tape_dir}/", f"{copy}/"], check=True)
    with open(path, "ab") as f:
        f.write(data[half:])
    cache = tmp_path / "other-cache"  # another machine: no cache, another writer
    monkeypatch.setenv("CTAPE_CACHE_DIR", str(cache))
    with Tape.open(copy) as t:
        rep = watch_once(t, [str(path)])
        assert rep.bytes == len(data) - half  # continued from the position in the copied tape
        assert exported(t, session_of(CODEX_BIG, "codex"), "codex") == expected(data)


def test_a_transcript_deleted_takes_its_layout_with_its_position(tape, tmp_path, home):
    """watch kept the Claude Code layout of every transcript it had ever seen under
    watch-layouts/, after the transcript was gone and its position forgotten (600 for 60
    live transcripts after 200 passes; found by an audit of long-lived processes)."""
    folder = tmp_path / "projects"
    folder.mkdir()
    data = CLAUDE.read_bytes()
    for i in range(3):
        (folder / f"t{i}-{CLAUDE.name}").write_bytes(data)
    watch_once(tape, [str(folder)])

    def layouts():
        return list(Path(os.environ["CTAPE_CACHE_DIR"]).rglob("watch-layouts/*"))

    assert len(layouts()) == 3
    (folder / f"t1-{CLAUDE.name}").unlink()
    watch_once(tape, [str(folder)])
    assert len(layouts()) == 2
