"""An entry is stored once, however often a writer is asked to write it again.

A writer skips the index look-up for the child of an entry it just created (it cannot be
on the tape yet). That holds for the first child only: the same writer may be asked for
the same child again (a watcher that reads a rotated or truncated transcript from its
start lays out the same entries), and another process may have written one meanwhile.
Asked again, the writer used to store the entry a second time, and `ctape watch` counted
records the tape held as "+N records". Real processes, real files; the counts of
`watch` in follow mode are held to those of `watch --once` on the same file states."""

import collections
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from ctape import Tape
from ctape.store import framing

from conftest import following, run_cli

FIXTURE = Path(__file__).parent / "fixtures/transcripts/claude-code/daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"
T = "2026-01-02T03:04:0{}Z"


def stored_entries(tape_dir) -> collections.Counter:
    """How many times each entry is stored in the tape's files."""
    t = Tape.open(str(tape_dir))
    try:
        n = collections.Counter()
        for rel in sorted(str(p.relative_to(tape_dir)) for p in Path(tape_dir).rglob("*") if p.suffix in (".seg", ".pack")):
            for item in t.store.scan_file(rel):
                assert isinstance(item, framing.Record), item
                if item.type == framing.T_OBJECT and item.body[32] == ord("E"):
                    n[item.body[:32].hex()] += 1
        return n
    finally:
        t.close()


def twice(counts: collections.Counter) -> dict:
    return {h: k for h, k in counts.items() if k > 1}


def test_the_same_child_asked_again_is_stored_once(tmp_path):
    t = Tape.init(str(tmp_path / "t"))
    s = t.session("chat")
    a = s.append("user", {"content": "hello"}, time=T.format(1))
    b = s.append("assistant", {"content": "hi"}, time=T.format(2))
    s.checkout(a.hash)
    again = s.append("assistant", {"content": "hi"}, time=T.format(2))  # the same entry
    assert again.hash == b.hash
    c = s.append("user", {"content": "and then"}, time=T.format(3))  # its child is new: written
    s.checkout(a.hash)
    with t.batch():  # in a batch too, and twice in one
        assert s.append("assistant", {"content": "hi"}, time=T.format(2)).hash == b.hash
        s.checkout(a.hash)
        assert s.append("assistant", {"content": "hi"}, time=T.format(2)).hash == b.hash
        assert s.append("user", {"content": "and then"}, time=T.format(3)).hash == c.hash
    t.close()
    counts = stored_entries(tmp_path / "t")
    assert not twice(counts)
    assert set(counts) == {a.hash, b.hash, c.hash}
    t = Tape.open(str(tmp_path / "t"))
    assert [e.hash for e in t.session("chat").log()] == [c.hash, b.hash, a.hash]
    t.close()


def test_a_child_another_process_wrote_is_not_stored_again(tmp_path):
    d = str(tmp_path / "t")
    t = Tape.init(d)
    s = t.session("chat")
    a = s.append("user", {"content": "hello"}, time=T.format(1))  # a's first child is "new" to this writer
    # another process (another writer) appends that very child
    code = ("import sys; from ctape import Tape; t = Tape.open(sys.argv[1]); "
            f"t.session('chat').append('assistant', {{'content': 'hi'}}, time={T.format(2)!r}); t.close()")
    subprocess.run([sys.executable, "-c", code, d], check=True, env={**os.environ, "CTAPE_WRITER": "otherwriter"})
    s.checkout(a.hash)
    b = s.append("assistant", {"content": "hi"}, time=T.format(2))
    t.close()
    assert stored_entries(d)[b.hash] == 1


def watch_steps(tmp_path, lines):
    """The file states of a transcript that grows, is rotated (a new file, the old lines and
    more), truncated, grown again and emptied in place, as log rotation and editors do."""
    def write(path, rows, mode="w"):
        with open(path, mode) as f:
            f.writelines(rows)

    def rotate(path, rows):
        write(str(path) + ".new", rows)
        os.replace(str(path) + ".new", path)

    return [
        lambda p: write(p, lines[:20]),
        lambda p: write(p, lines[20:30], "a"),
        lambda p: rotate(p, lines[:35]),
        lambda p: write(p, lines[:10]),
        lambda p: write(p, lines[10:40], "a"),
        lambda p: (write(p, []), write(p, lines[:45])),
    ]


def counted(out: str) -> list[int]:
    return [int(n) for n in re.findall(r"^watch: \+(\d+) records? from", out, re.M)]


def test_watch_counts_only_records_the_tape_did_not_hold(tmp_path):
    lines = FIXTURE.read_text().splitlines(keepends=True)
    steps = watch_steps(tmp_path, lines)
    # the oracle: one `watch --once` after each state (a new process each time)
    once_dir, src = tmp_path / "once", tmp_path / "src" / "t.jsonl"
    src.parent.mkdir()
    run_cli("--dir", once_dir, "init", check=True)
    expected = []
    for step in steps:
        step(src)
        out = run_cli("--dir", once_dir, "watch", "--once", src, check=True).stderr.decode()
        expected.append(sum(counted(out)))
    assert expected == [20, 10, 5, 0, 5, 5]
    assert not twice(stored_entries(once_dir))
    # one watcher following the same states, each one imported before the next is made
    follow_dir, src = tmp_path / "follow", tmp_path / "src2" / "t.jsonl"
    src.parent.mkdir()
    run_cli("--dir", follow_dir, "init", check=True)
    steps[0](src)
    with following(follow_dir, src) as out:
        for i, step in enumerate(steps):
            if i:
                step(src)
            want = sum(expected[: i + 1])
            deadline = time.monotonic() + 60
            while sum(counted("".join(out))) < want and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.5)  # a state with nothing new prints nothing: give its pass the time
    text = "".join(out)
    # a state seen in two passes (a write caught half way) splits a count, never adds to it
    assert sum(counted(text)) == sum(expected), text
    assert not twice(stored_entries(follow_dir))
