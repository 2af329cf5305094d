"""One flipped byte in a large block loses only what it reaches (docs/format.md section 15).

A pack keeps a session's records in blocks of 2 MiB compressed together (a batch's
segment, in blocks of 1 MiB). One flipped byte in a block failed its checksum, and
`fsck --salvage` kept nothing of it: a whole session of 2,000 entries lost to one bit.
zstd gives back the inner blocks before the damage whole, so salvage now reads what
decodes and keeps each object whose name something intact vouches for: this machine's
index, which read the block while it was whole, or a hash an intact record refers to.
A damaged inner block can decode to other bytes without an error, so nothing else is
kept: every entry after salvage must be one that was written.

Real damage (bytes flipped in the real files), commands run as the user runs them.
"""

import json
import random
import shutil

import pytest

from ctape import Tape
from ctape.errors import LostToDamage
from ctape.store import framing

from conftest import run_cli

LOST = "[lost: damaged]"  # an entry kept whose value was not: read with this in its place
ENTRIES = 1500  # ~1.6 MB of records: one pack block of many zstd inner blocks


def _text(rng: random.Random, i: int) -> str:
    words = ["tape", "entry", "agent", "tool", "result", "branch", "stream", "value", "shell", "file"]
    return f"message {i}: " + " ".join(rng.choice(words) + str(rng.randrange(1000)) for _ in range(120))


def _written(tape_dir) -> dict[str, str]:
    """One session of ENTRIES user messages in one batch, compacted into one pack and read
    by this machine's index; returns hash -> content of every entry written."""
    rng = random.Random(7)
    tape = Tape.init(tape_dir)
    s = tape.session("s")
    written = {}
    with tape.batch():
        for i in range(ENTRIES):
            content = _text(rng, i)
            written[s.append("user", {"content": content}).hash] = content
    tape.close()
    run_cli("--dir", tape_dir, "compact", "--grace", "now", check=True)
    run_cli("--dir", tape_dir, "log", "-s", "s", "--oneline", check=True)  # the index reads the pack whole
    return written


def _pack_blocks(tape_dir):
    (pack,) = (tape_dir / "sessions" / "s").glob("*.pack")
    blocks = [r for r in framing.scan(pack.read_bytes()) if isinstance(r, framing.Record) and r.type in framing.BLOCK_TYPES]
    return pack, blocks


def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def _entries_after_salvage(tape_dir) -> dict[str, str]:
    """hash -> content of every entry any branch of the session reaches."""
    tape = Tape(tape_dir)
    s = tape.session("s")
    seen = {}
    for branch in s.refs().branches:
        try:
            for e in s.log(branch):
                seen[e.hash] = e.payload["content"]
        except LostToDamage:
            pass  # the history stops at the loss
    tape.close()
    return seen


def _report(tape_dir):
    (path,) = (tape_dir / "quarantine" / "s").glob("*.salvage.json")
    return json.loads(path.read_text())


def _salvage(tape_dir):
    r = run_cli("--dir", tape_dir, "fsck", "--salvage")
    assert r.returncode == 0, r.stderr
    assert run_cli("--dir", tape_dir, "fsck").returncode == 0
    report = _report(tape_dir)
    assert (f"({report['recovered']} of them read from a damaged block)" in r.stderr.decode()) == bool(report["recovered"])
    return report


def test_a_flipped_byte_in_a_pack_block_loses_only_what_follows_it(tape_dir):
    written = _written(tape_dir)
    pack, blocks = _pack_blocks(tape_dir)
    big = max(blocks, key=lambda r: len(r.body))
    _flip(pack, big.offset + framing.HEADER_SIZE + len(big.body) * 6 // 10)  # 60% into its compressed bytes

    report = _salvage(tape_dir)
    after = _entries_after_salvage(tape_dir)
    # nothing made up: every entry reached is one that was written, with its content
    assert all(written.get(h) == content or (h in written and content == LOST) for h, content in after.items())
    assert set(report["entries"]) <= set(written)
    # and what decoded before the damage is kept: with the code before, only the entries
    # of the pack's other (small) block were left
    in_big = _block_entries(big)  # (decoded once: per written entry it was 45 s of the test)
    in_other_blocks = ENTRIES - len([1 for h in written if h in in_big])
    assert report["recovered"] >= ENTRIES // 3, report
    assert len(after) >= in_other_blocks + ENTRIES // 3
    # the first entry written is among them: the readable start of the block is its start
    first = next(h for h, content in written.items() if content.startswith("message 0:"))
    assert first in after
    # the session goes on from its HEAD
    run_cli("--dir", tape_dir, "append", "user", '{"content": "goes on"}', "-s", "s", check=True)


def _block_entries(block) -> set[str]:
    from ctape.store import packing
    from ctape.store.files import zstd

    raw = zstd().ZstdDecompressor().decompress(block.body)
    return {r.body[:32].hex() for r in packing.decode_block(raw, "test") if r.type == framing.T_OBJECT}


def test_without_the_index_only_what_intact_records_name_is_kept(tape_dir, tmp_path):
    """A copy whose index never read the block whole has nothing to check most of it
    against: what is kept must still be real (here: the intact part refers to one entry of
    the damaged block, the one before it in the history)."""
    written = _written(tape_dir)
    copy = tmp_path / "copy"
    shutil.copytree(tape_dir, copy)  # a new path: a new, empty index cache
    pack, blocks = _pack_blocks(copy)
    big = max(blocks, key=lambda r: len(r.body))
    _flip(pack, big.offset + framing.HEADER_SIZE + len(big.body) * 6 // 10)

    report = _salvage(copy)
    after = _entries_after_salvage(copy)
    assert all(written.get(h) == content or (h in written and content == LOST) for h, content in after.items())
    assert set(report["entries"]) <= set(written)
    assert report["recovered"] <= 2


@pytest.mark.parametrize("where", ["pack", "durable segment"])
def test_a_block_whose_checksum_alone_was_hit_is_kept_whole(tape_dir, where):
    """The flipped byte in the record's CRC: the block itself is intact and decodes whole,
    and every object in it is vouched for by the index. With a dictionary block (`Z`, a
    durable append's) the dictionary record is found and used."""
    tape = Tape.init(tape_dir)
    s = tape.session("s")
    rng = random.Random(3)
    written = {s.append("user", {"content": _text(rng, i)[:400]}).hash for i in range(120)}  # a dictionary after 16 KB
    tape.close()
    if where == "pack":
        run_cli("--dir", tape_dir, "compact", "--grace", "now", check=True)
        path, blocks = _pack_blocks(tape_dir)
        target = max(blocks, key=lambda r: len(r.body))
    else:
        (path,) = (tape_dir / "sessions" / "s").glob("*.seg")
        blocks = [r for r in framing.scan(path.read_bytes()) if isinstance(r, framing.Record) and r.type == framing.T_DICT_BLOCK]
        target = blocks[len(blocks) // 2]
    run_cli("--dir", tape_dir, "log", "-s", "s", "--oneline", check=True)
    _flip(path, target.offset + framing.HEADER_SIZE + len(target.body) + 1)  # in its CRC

    report = _salvage(tape_dir)
    assert report["recovered"] >= 1
    after = _entries_after_salvage(tape_dir)
    assert set(after) == written  # nothing lost, nothing made up
    assert not [h for h in report["missing"] if h in written]


@pytest.mark.parametrize("tail", [b"\0", b"junk after the last record " * 40], ids=["one-byte", "text"])
def test_a_pack_with_bytes_after_its_records_is_salvaged_as_itself(tape_dir, tail):
    """Every record of the pack reads back, so salvage writes the very pack its name says;
    the damaged file goes to quarantine and the session keeps every entry (found by an
    audit: the move took the new pack to quarantine, and the session had no entries)."""
    hashes = [run_cli("--dir", tape_dir, "append", "user", json.dumps({"content": f"message {i}"}), "-s", "s", check=True).stdout.decode().strip()
              for i in range(3)]
    run_cli("--dir", tape_dir, "compact", "--grace", "now", check=True)
    (pack,) = (tape_dir / "sessions" / "s").glob("*.pack")
    whole = pack.read_bytes()
    pack.write_bytes(whole + tail)
    assert run_cli("--dir", tape_dir, "fsck").returncode == 1
    r = run_cli("--dir", tape_dir, "fsck", "--salvage")
    assert r.returncode == 0, r.stderr.decode()
    assert pack.read_bytes() == whole
    (kept,) = [q for q in (tape_dir / "quarantine" / "s").iterdir() if not q.name.endswith(".json")]  # not the report
    assert kept.read_bytes() == whole + tail
    assert run_cli("--dir", tape_dir, "fsck").returncode == 0
    log = run_cli("--dir", tape_dir, "log", "-s", "s", "--json", check=True).stdout.decode().splitlines()
    assert [json.loads(line)["hash"] for line in log] == hashes[::-1]
