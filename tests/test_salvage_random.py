"""Random damage, then `fsck --salvage`: nothing made up, nothing orphaned, every loss named.

A tape of two sessions is built from a seed: batches and durable appends, forks, undos
(a ref moved back, as `pop_item` does), deleted branches, compactions between them (so a session's history spans packs and segments of several
kinds, blocks of 1-2 MiB and one-entry blocks with dictionaries), values shared by both
sessions, and values large enough to be records of their own. This machine's index reads
all of it; then one to three random bits flip anywhere in the session files, and salvage
runs as the user runs it. Checked against the plain model of what was written:

- `fsck` passes after salvage, and both sessions take appends again;
- every entry any branch reaches is one that was written, with its text (or the marker
  of a value lost to the damage): salvage keeps objects read from damaged blocks only when
  something intact vouches for their names, and a damaged block can decode to other bytes;
- every entry that a ref reached before the damage and that the tape still holds is
  reached by some ref (salvage orphaned the older side of a chain whose next entry was
  lost when that side sat in an intact file: `main` stopped at the loss and nothing
  reached the rest, for `compact` to free); entries an undo or a deleted branch left on
  no ref may stay there;
- every entry the tape no longer holds is named by a salvage report (`missing`, or
  `missing_keys` by its index key);
- a `compact --grace now` after salvage keeps all of that.

Four seeds by default; `CTAPE_SLOW=1` runs CTAPE_SALVAGE_SEEDS (default 150) from
CTAPE_SALVAGE_FIRST_SEED (default 1000).
"""

import json
import os
import random

import pytest

from ctape import Tape
from ctape.errors import EntryNotFound, LostToDamage
from ctape.store import framing
from ctape.store.index import hash_key

from conftest import run_cli

SLOW = os.environ.get("CTAPE_SLOW") == "1"
FIRST = int(os.environ.get("CTAPE_SALVAGE_FIRST_SEED", "1000"))
SEEDS = list(range(FIRST, FIRST + (int(os.environ.get("CTAPE_SALVAGE_SEEDS", "150")) if SLOW else 4)))
LOST = "[lost: damaged]"
WORDS = ["tape", "entry", "agent", "tool", "result", "branch", "stream", "value", "shell", "file", "grep", "diff"]


def _content(rng: random.Random, session: str, i: int) -> str:
    roll = rng.random()
    if roll < 0.1:
        return f"shared output {rng.randrange(5)}: " + "the same tool output in both sessions " * 20
    if roll < 0.13:
        return f"large {session} {i}: " + " ".join(rng.choice(WORDS) + str(rng.randrange(10**6)) for _ in range(12000))
    return f"{session} {i}: " + " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(rng.randrange(3, 200)))


def _build(tape_dir, rng: random.Random) -> dict[str, dict[str, str]]:
    """session -> {entry hash: its text} of everything appended."""
    tape = Tape.init(tape_dir)
    written: dict[str, dict[str, str]] = {"a": {}, "b": {}}
    count = 0
    for _ in range(rng.randint(2, 5)):
        name = rng.choice(["a", "b"])
        s = tape.session(name)
        batched = rng.random() < 0.5
        n = rng.randint(20, 600) if batched else rng.randint(1, 40)

        def append_all():
            nonlocal count
            for _ in range(n):
                count += 1
                text = _content(rng, name, count)
                written[name][s.append(rng.choice(["user", "assistant"]), {"content": text}).hash] = text

        if batched:
            with tape.batch():
                append_all()
        else:
            append_all()
        if written[name] and rng.random() < 0.3:  # a fork at an earlier entry, continued later
            s.checkout(rng.choice(sorted(written[name])), new_branch=f"fork{count}")
        st = s.refs()
        if st.branch is not None and st.head_hash is not None and rng.random() < 0.3:
            # an undo, as the Agents SDK's pop_item makes it: the entry is left on no ref
            parent = tape.read_entry(st.head_hash).parent
            if parent is not None:
                s.set_refs("pop-item", {st.branch: parent})
        forks = [b for b in s.refs().branches if b.startswith("fork") and b != s.refs().branch]
        if forks and rng.random() < 0.3:
            s.delete_branch(rng.choice(forks))  # a branch given up: its entries on no ref
        if rng.random() < 0.4:
            tape.compact(grace="now")
    tape.close()
    return written


def _reached(tape: Tape, session: str) -> dict[str, str]:
    s = tape.session(session)
    st = s.refs()
    seen: dict[str, str] = {}
    for start in [*st.branches.values(), st.head_hash]:
        try:
            for e in s.log(start):
                if e.hash in seen:
                    break
                seen[e.hash] = e.payload["content"]
        except (LostToDamage, EntryNotFound):
            pass  # the history stops at the loss (a branch whose tip was lost stays, for copies that hold it)
    return seen


def _flip(tape_dir, rng: random.Random) -> list[str]:
    files = sorted(p for p in (tape_dir / "sessions").glob("*/*") if p.suffix in (".seg", ".pack"))
    flipped = []
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(files)
        data = bytearray(path.read_bytes())
        at = rng.randrange(len(data))
        records = [r for r in framing.scan(bytes(data)) if isinstance(r, framing.Record)]
        if len(records) > 1 and rng.random() < 0.4:
            # the first record after the file's header: the start of a file's history, whose
            # older side sits in another file (the case where salvage orphaned it)
            at = rng.randrange(records[1].offset, records[1].end)
        data[at] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        flipped.append(f"{path.name}@{at}")
    return flipped


def _reports(tape_dir) -> tuple[set[str], set[int]]:
    missing, keys = set(), set()
    for path in (tape_dir / "quarantine").glob("*/*.salvage.json"):
        report = json.loads(path.read_text())
        missing |= set(report.get("missing", []))
        keys |= set(report.get("missing_keys", []))
    return missing, keys


@pytest.mark.parametrize("seed", SEEDS)
def test_random_damage_then_salvage(tmp_path, seed):
    rng = random.Random(seed)
    tape_dir = tmp_path / "tape"
    written = _build(tape_dir, rng)
    tape = Tape.open(tape_dir)
    before = {name: _reached(tape, name) for name in written}  # the index reads every file whole
    tape.close()
    # (the model holds before damage; undone entries and given-up branches are on no ref)
    assert all(written[name].get(h) == text for name in written for h, text in before[name].items())
    flipped = _flip(tape_dir, rng)

    r = run_cli("--dir", tape_dir, "fsck", "--salvage")
    assert r.returncode == 0, (flipped, r.stderr)
    r = run_cli("--dir", tape_dir, "fsck")
    assert r.returncode == 0, (flipped, r.stdout, r.stderr)
    missing, missing_keys = _reports(tape_dir)

    def check(label):
        tape = Tape.open(tape_dir)
        try:
            for name, entries in written.items():
                reached = _reached(tape, name)
                made_up = {h: text for h, text in reached.items() if h not in entries and h not in extra[name]}
                assert not made_up, (label, flipped, name, list(made_up.items())[:2])
                wrong = [h for h, text in reached.items() if h in entries and text not in (entries[h], LOST)]
                assert not wrong, (label, flipped, name, wrong[:3])
                held = {h for h in entries if tape.has_entry(h)}
                orphaned = (held & set(before[name])) - set(reached)
                assert not orphaned, (label, flipped, name, sorted(orphaned)[:3])
                unnamed = [h for h in entries if h not in held and h not in missing and hash_key(h) not in missing_keys]
                assert not unnamed, (label, flipped, name, unnamed[:3])
            return {name: set(_reached(tape, name)) for name in written}
        finally:
            tape.close()

    extra: dict[str, set] = {name: set() for name in written}
    kept = check("after salvage")
    for name in written:  # writes resume
        out = run_cli("--dir", tape_dir, "append", "user", '{"content": "goes on"}', "-s", name)
        assert out.returncode == 0, (flipped, out.stderr)
        extra[name].add(out.stdout.decode().strip())
    run_cli("--dir", tape_dir, "compact", "--grace", "now", check=True)
    after = check("after compact")
    assert all(kept[name] <= after[name] for name in written), flipped
