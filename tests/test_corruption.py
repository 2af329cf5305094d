"""Damaged data files (SPEC sections 2 and 12): flipped bytes, cuts, zero-filled tails, zstd bombs.

A segment is a list of records: a 10-byte header (magic, type, length, header crc), the
body, a 4-byte body crc (ctape/framing.py). Every byte of a complete record is covered
by a checksum, so a flipped byte anywhere is corruption: `fsck` exits 1 at every
position. A torn tail (exit 0, a warning) is only what a crash leaves: the file cut
inside its last record, or the last record's bytes zero from some point to the end
of the file (with the header intact, at least 8 zeros). Reads after damage return the
right data or fail with one line; never other data, never a traceback.

A durable append writes its small objects and its ref record as one compressed block
(`K`, or `Z`: compressed with a dictionary `D` written earlier in the same segment,
found by its distance back) and objects of 64 KiB or more as plain `O` records
(ctape/packing.py, docs/format.md sections 4-7). The fixture's segment holds every one
of these record types; the tests find "the record holding object H" and "the records
holding ref records" through the blocks' contents. Besides flipped bytes (which the
checksums catch), some tests write records whose checksums are right but whose content
is not: zstd frames that claim 1 TiB, `Z` records that point at no dictionary.

The many-position loops run the command in-process (click's CliRunner) for speed; a
few positions also go through a real `ctape` process.
"""

import json
import os
import shutil
import struct
import zlib

import pytest
import zstandard
from click.testing import CliRunner

import ctape.store.segment
from conftest import run_cli, snapshot
from ctape import Tape
from ctape.store import framing, packing
from ctape.model.canonical import object_hash
from ctape.cli import main
from ctape.errors import CorruptObject, ObjectTooLarge
from ctape.store.segment import BLOCK_OBJECT_MAX
from ctape.store.store import CODEC_ZSTD

BIG_OUTPUT = "tests/test_a.py::test_ok PASSED\n" * 2500  # 80,000 characters: a plain `O` record


class Fixture:
    """A tape with two sessions and, for session chat, the expected output after every step."""

    def __init__(self, tmp_path):
        self.dir = tmp_path / "tape"
        self.cache = tmp_path / "cache-base"
        Tape.init(self.dir).close()
        self.steps = []  # (segment size, log json, status json) after each step of chat
        with pytest.MonkeyPatch.context() as mp:
            # a dictionary after 512 bytes of blocks, not 16 KiB, and a new one once as many bytes
            # as it holds were compressed with it: `D` and `Z` records in a small segment
            mp.setattr(ctape.store.segment, "DICT_MIN", 512)
            mp.setattr(ctape.store.segment, "DICT_REFRESH", 1)
            t = Tape.open(self.dir)
            s = t.session("chat")
            ops = [
                lambda: s.append("system", {"content": "You are a careful agent. " * 60}),
                lambda: s.append("user", {"content": "fix the tests"}, meta={"tokens": "4"}, delta={"cwd": "/repo"}),
                lambda: s.append("tool_call", {"call_id": "c1", "name": "read", "arguments": {"path": "a.py"}}),
                lambda: s.append("tool_result", {"call_id": "c1", "output": BIG_OUTPUT, "preview": "def f():\n    return 1\n" * 80}),
                lambda: s.branch("alt"),
                # a blob in a block compressed with a dictionary (and a block larger than its dictionary)
                lambda: s.append("error", {"message": "tests failed", "call_id": "c1", "log": "FAILED tests/test_a.py::test_x - assert 1 == 2\n" * 40}),
                lambda: s.append("assistant", {"content": "done", "parts": ["\0x", "é"]}),
            ]
            other = t.session("other")
            other.append("user", {"content": "You are a careful agent. " * 60})
            other.append("assistant", {"content": "ok"})
            t.close()
            self.other_seg = self._segment("other")
            self.steps.append((0, "", None))
            # the chat appends go through one open Tape: a dictionary is made from the blocks
            # written before through it, which a new Tape would not know
            t = Tape.open(self.dir)
            s = t.session("chat")
            try:
                for op in ops:
                    op()
                    self.seg = self._segment("chat")
                    self.steps.append((os.path.getsize(self.seg), self.cli("log", "-s", "chat", "--json").stdout, self.cli("status", "-s", "chat", "--json").stdout))
            finally:
                t.close()
        self.rel = str(self.seg.relative_to(self.dir))
        self.other_rel = str(self.other_seg.relative_to(self.dir))
        self.data = self.seg.read_bytes()
        self.other_data = self.other_seg.read_bytes()
        self.records = list(framing.scan(self.data))
        assert all(isinstance(r, framing.Record) for r in self.records)
        self.other_records = list(framing.scan(self.other_data))
        assert all(isinstance(r, framing.Record) for r in self.other_records)
        self.log = self.steps[-1][1]
        self.status = self.steps[-1][2]
        self.entries = [json.loads(line) for line in self.log.splitlines()]
        assert [e["kind"] for e in self.entries] == ["assistant", "error", "tool_result", "tool_call", "user", "system"]
        self.shows = {e["hash"]: self.cli("show", e["hash"], "--json").stdout for e in self.entries}
        for e in self.entries:
            assert json.loads(self.shows[e["hash"]]) == e
        # what every top-level record holds, read from the intact tape: a block, the objects
        # (with their names) and ref records inside it; any other record, itself
        self.held = {}  # offset of a top-level record -> the records it holds
        t = Tape.open(self.dir)
        try:
            for item in t.store.scan_file(self.rel):
                assert isinstance(item, framing.Record), item
                self.held.setdefault(item.offset, []).append(item)
            assert all(isinstance(item, framing.Record) for item in t.store.scan_file(self.other_rel))
        finally:
            t.close()
        assert sorted(self.held) == [r.offset for r in self.records]
        # the segment holds every kind of record a durable append writes
        types = [r.type for r in self.records]
        assert types[0] == framing.T_HEADER and types.count(framing.T_HEADER) == 1
        for needed in (framing.T_BLOCK, framing.T_DICT, framing.T_DICT_BLOCK, framing.T_OBJECT):
            assert needed in types, f"no {chr(needed)} record in the fixture: {[chr(t) for t in types]}"
        assert not {framing.T_REF, framing.T_PARTIAL} & set(types)  # durable appends write no top-level ref records
        assert self.records[-1].type == framing.T_DICT_BLOCK
        # each `Z` names a `D` before it, and there are two dictionaries (a `Z` can name the wrong one)
        dicts = {r.offset for r in self.records if r.type == framing.T_DICT}
        assert {dictionary_of(z) for z in self.records if z.type == framing.T_DICT_BLOCK} == dicts and len(dicts) >= 2
        # every entry, and the tool output, is held by exactly one record of the segment
        for e in self.entries:
            self.holding(e["hash"])
        self.big_hash = object_hash(b"blob", BIG_OUTPUT.encode())
        self.big = self.holding(self.big_hash)
        assert self.big.type == framing.T_OBJECT and self.big.body[33] == CODEC_ZSTD
        assert zstandard.frame_content_size(self.big.body[34:]) >= BLOCK_OBJECT_MAX
        assert len(self.holding_refs()) == len(self.steps) - 1  # one ref record a step, each in a block
        # an index cache built from the intact tape, copied before each damaged read
        self.cli("fsck", cache=self.cache)
        self.cli("log", "-s", "chat", cache=self.cache)

    # -- what the records hold --------------------------------------------------------------

    def objects_in(self, rec):
        """The hashes of the objects a top-level record of chat holds."""
        return [r.body[:32].hex() for r in self.held[rec.offset] if r.type == framing.T_OBJECT]

    def refs_in(self, rec):
        """The ref records (parsed) a top-level record of chat holds."""
        return [json.loads(r.body) for r in self.held[rec.offset] if r.type == framing.T_REF]

    def entries_in(self, rec):
        """The hashes of the entries a top-level record of chat holds."""
        return [r.body[:32].hex() for r in self.held[rec.offset] if r.type == framing.T_OBJECT and r.body[32] == ord("E")]

    def holding(self, h):
        """The top-level record of chat holding object h."""
        (rec,) = [r for r in self.records if h in self.objects_in(r)]
        return rec

    def holding_refs(self):
        """The top-level records of chat holding a ref record."""
        return [r for r in self.records if self.refs_in(r)]

    def of_type(self, type_):
        return [r for r in self.records if r.type == type_]

    # -- files and commands -------------------------------------------------------------------

    def _segment(self, session):
        (seg,) = (self.dir / "sessions" / session).glob("*.seg")
        return seg

    def cli(self, *args, cache=None):
        # no cache given: a path that cannot be a directory, so the index lives in memory
        # and is rebuilt from the (damaged) files by every command
        cache = cache or "/dev/null/no-cache"
        return CliRunner().invoke(main, ["--dir", str(self.dir), *args], env={"CTAPE_CACHE_DIR": str(cache)}, catch_exceptions=True)

    def stale_cache(self):
        c = self.dir.parent / "cache-stale"
        if c.exists():
            shutil.rmtree(c)
        shutil.copytree(self.cache, c)
        return c

    def write(self, data, path=None):
        path = path or self.seg
        path.chmod(0o600)
        with open(path, "r+b") as f:
            f.truncate(0)
            f.write(data)

    def restore(self):
        for seg in (self.dir / "sessions").glob("*/*.seg"):
            if seg not in (self.seg, self.other_seg):
                seg.unlink()  # written by a test that appended
        self.write(self.data)
        self.write(self.other_data, self.other_seg)

    def record_at(self, pos):
        return next(r for r in self.records if r.offset <= pos < r.end)


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    os.environ.setdefault("CTAPE_CACHE_DIR", str(tmp_path_factory.mktemp("modcache")))
    f = Fixture(tmp_path_factory.mktemp("corrupt"))
    yield f


@pytest.fixture
def clean(fx):
    fx.restore()
    yield fx
    fx.restore()


def dictionary_of(z):
    """The offset of the `D` record a `Z` record points at."""
    distance, _ = packing.split_dict_block(z.body)
    return z.offset - distance


def one_line_failure(res, code=1):
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.stdout + res.stderr
    assert res.exit_code == code, (res.exit_code, res.stderr)
    assert len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith("ctape: error: ")
    assert "internal error" not in res.stderr, res.stderr  # a traceback in one line is still a traceback


SLOW = os.environ.get("CTAPE_SLOW") == "1"


def positions(fx, every=1):
    """Every byte of every record's header and trailer, and body bytes at a stride."""
    out = []
    for r in fx.records:
        body_start, body_end = r.offset + framing.HEADER_SIZE, r.end - framing.TRAILER_SIZE
        out += list(range(r.offset, body_start)) + list(range(body_end, r.end))
        out += list(range(body_start, body_end, every)) + [body_end - 1]
    return sorted(set(out))


def flipped(data, pos, mask):
    b = bytearray(data)
    b[pos] ^= mask
    return bytes(b)


def check_reads(fx, cache, record_type, with_status=True):
    """log, status and show of every entry: the expected bytes, or a one-line failure."""
    log = fx.cli("log", "-s", "chat", "--json", cache=cache)
    stopped = "history stops here" in log.stderr and "damaged records" in log.stderr
    if log.exit_code == (1 if stopped else 0) and log.stdout != fx.log:
        # a damaged session shows what reads back (SPEC 14), never silently: a warning
        # says so, and what it shows is the true history cut at the damage (HEAD's side of
        # it, or the older side when the ref record that moved HEAD on was lost); a walk
        # that stopped at damaged bytes exits 1 once it has printed (SPEC 5)
        assert "warning" in log.stderr, f"log returned other data after damage in a {chr(record_type)} record, without a warning"
        assert fx.log.startswith(log.stdout) or fx.log.endswith(log.stdout), f"log returned other data after damage in a {chr(record_type)} record"
    elif log.exit_code == 0:
        assert log.stdout == fx.log
    else:
        one_line_failure(log)
        assert fx.log.startswith(log.stdout)  # whatever it printed before failing was right
    if with_status:
        st = fx.cli("status", "-s", "chat", "--json", cache=cache)
        if st.exit_code == 0:
            got, want = json.loads(st.stdout), json.loads(fx.status)
            want.pop("damaged")
            if not got.pop("damaged"):
                assert got == want, f"status returned other data after damage in a {chr(record_type)} record"
            else:  # named in status, and a warning says so (SPEC 14)
                assert "warning" in st.stderr and "--salvage" in st.stderr
                if got["head"] != want["head"]:
                    # the ref record that moved HEAD on was in the damage: HEAD is where the
                    # readable records leave it: a real earlier entry of the same history, or none yet
                    assert got["head"] in {e["hash"] for e in fx.entries} | {None}
                elif got != want:  # what could not be read is left out and said so, never made up
                    assert got.pop("incomplete") is True
                    assert got.pop("incomplete_because") == "damaged"  # not taken for a sync under way
                    for k, v in got.items():
                        assert v == want[k] or v in (None, [], {}), (k, v)
        else:
            one_line_failure(st)
            assert st.stdout == ""
    for h, want in fx.shows.items():
        sh = fx.cli("show", h, "--json", cache=cache)
        if sh.exit_code == 0:
            assert sh.stdout == want
        else:
            one_line_failure(sh)
            assert sh.stdout == ""


# -- fsck ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0xFF, 0x01, 0x80])
def test_fsck_fails_on_every_flipped_byte(clean, mask):
    fx = clean
    # every byte of every record's header and trailer, and body bytes at a stride: all bits
    # of every third body byte flipped (of every one with CTAPE_SLOW=1), one bit of every seventh
    pos_list = positions(fx, every=(1 if SLOW else 3) if mask == 0xFF else 7)
    for pos in pos_list:
        fx.write(flipped(fx.data, pos, mask))
        res = fx.cli("fsck", "--json")
        assert res.exit_code == 1, f"flip {mask:#x} at {pos} (record {chr(fx.record_at(pos).type)}@{fx.record_at(pos).offset}) not caught"
        report = json.loads(res.stdout)
        assert report["ok"] is False and report["problems"]
        assert "Traceback" not in res.stderr
    fx.restore()
    assert fx.cli("fsck").exit_code == 0


def test_fsck_fails_on_flips_in_the_other_session(clean):
    fx = clean
    recs = list(framing.scan(fx.other_data))
    for r in recs:
        for pos in (r.offset, r.offset + 5, r.offset + framing.HEADER_SIZE + 3, r.end - 1):
            fx.write(flipped(fx.other_data, pos, 0xFF), fx.other_seg)
            assert fx.cli("fsck").exit_code == 1, pos
    fx.restore()


def test_fsck_through_a_real_process(clean):
    fx = clean
    for pos in (0, fx.records[1].offset + 2, fx.records[2].offset + 40, len(fx.data) - 1):
        fx.write(flipped(fx.data, pos, 0xFF))
        p = run_cli("--dir", fx.dir, "fsck")
        assert p.returncode == 1 and b"Traceback" not in p.stdout + p.stderr
        assert p.stdout.strip(), "fsck names the problem on stdout"


# -- reads after a flip -----------------------------------------------------------------


@pytest.mark.parametrize("cache", ["fresh", "stale"])
def test_log_and_show_after_a_flip_in_an_object_record(clean, cache):
    fx = clean
    tested = set()
    for pos in positions(fx, every=11):
        r = fx.record_at(pos)
        if fx.refs_in(r) and not fx.objects_in(r):
            continue  # a block of ref records only: the ref-record tests below
        tested.add(r.type)
        fx.write(flipped(fx.data, pos, 0xFF))
        check_reads(fx, fx.stale_cache() if cache == "stale" else None, r.type, with_status=False)
    assert {framing.T_BLOCK, framing.T_DICT_BLOCK, framing.T_OBJECT, framing.T_DICT} <= tested


@pytest.mark.parametrize("cache", ["fresh", "stale"])
def test_status_after_a_flip_in_a_blob_or_header(clean, cache):
    fx = clean
    tested = set()
    for pos in positions(fx, every=17):
        r = fx.record_at(pos)
        if fx.refs_in(r) or fx.entries_in(r):
            continue
        tested.add(r.type)
        fx.write(flipped(fx.data, pos, 0xFF))
        check_reads(fx, fx.stale_cache() if cache == "stale" else None, r.type)
    assert tested == {framing.T_HEADER, framing.T_OBJECT, framing.T_DICT}


@pytest.mark.parametrize("cache", ["fresh", "stale"])
def test_status_after_a_flip_in_an_entry(clean, cache):
    fx = clean
    head_entry = fx.holding(fx.entries[0]["hash"])
    assert head_entry.type in framing.BLOCK_TYPES and len(head_entry.body) > 50
    for pos in (head_entry.offset + framing.HEADER_SIZE + 50, head_entry.end - 1):
        fx.write(flipped(fx.data, pos, 0xFF))
        check_reads(fx, fx.stale_cache() if cache == "stale" else None, head_entry.type)


def test_reads_after_a_flip_in_a_ref_record_with_a_stale_index(clean):
    fx = clean
    holders = {r.offset for r in fx.holding_refs()}
    tested = set()
    for pos in positions(fx, every=13):
        r = fx.record_at(pos)
        if r.offset not in holders:
            continue
        tested.add(r.offset)
        fx.write(flipped(fx.data, pos, 0xFF))
        check_reads(fx, fx.stale_cache(), r.type)
    assert tested == holders and len(holders) >= 5


def test_reads_after_a_flip_in_a_ref_record(clean):
    fx = clean
    last_ref = fx.holding_refs()[-1]
    assert len(last_ref.body) > 5
    for pos in (last_ref.offset + framing.HEADER_SIZE + 5, last_ref.end - 1):
        fx.write(flipped(fx.data, pos, 0xFF))
        check_reads(fx, None, last_ref.type)


def test_reads_after_a_flip_through_a_real_process(clean):
    fx = clean
    # the tool output blob (a plain `O` record): shared by no one else, read by log and show
    blob = fx.big
    assert fx.objects_in(blob) == [fx.big_hash] and len(blob.body) > 40
    fx.write(flipped(fx.data, blob.offset + framing.HEADER_SIZE + 40, 0xFF))
    for args in (["log", "-s", "chat", "--json"], ["show", "chat~2", "--json"]):
        p = run_cli("--dir", fx.dir, *args, env={"CTAPE_CACHE_DIR": str(fx.stale_cache())})
        assert b"Traceback" not in p.stdout + p.stderr
        if p.returncode in (0, 1) and b"warning" in p.stderr and args[0] == "log":
            # read up to the damage, and said so (SPEC 14); exit 1 when it stopped there (SPEC 5)
            assert p.returncode == (1 if b"history stops here" in p.stderr else 0), p.stderr
            assert fx.log.startswith(p.stdout.decode())
        elif p.returncode == 0:
            assert p.stdout.decode() in (fx.log, fx.shows.get(fx.entries[2]["hash"]))
        else:
            assert p.returncode == 1 and len(p.stderr.splitlines()) == 1, p.stderr


# -- dictionaries and the blocks that use them --------------------------------------------


@pytest.mark.parametrize("cache", ["fresh", "stale"])
def test_reads_after_a_flip_in_a_dictionary(clean, cache):
    fx = clean
    for d in fx.of_type(framing.T_DICT):
        users = [z.offset for z in fx.of_type(framing.T_DICT_BLOCK) if dictionary_of(z) == d.offset]
        assert users
        body_start, body_end = d.offset + framing.HEADER_SIZE, d.end - framing.TRAILER_SIZE
        for pos in [d.offset + 1, d.offset + 3, d.offset + 7, *range(body_start, body_end, 37), body_end - 1, d.end - 1]:
            fx.write(flipped(fx.data, pos, 0xFF))
            res = fx.cli("fsck", "--json")
            assert res.exit_code == 1 and "Traceback" not in res.stdout + res.stderr, pos
            what = {p["what"] for p in json.loads(res.stdout)["problems"]}
            # the dictionary, and every block compressed with it
            assert {f"{fx.rel}@{o}" for o in [d.offset, *users]} <= what, (pos, what)
            check_reads(fx, fx.stale_cache() if cache == "stale" else None, d.type)


def test_an_unused_dictionary_that_does_not_decompress_fails_fsck(clean):
    """Good checksums, a body that is no zstd frame, and no block using it: reads do not
    care, but fsck verifies every dictionary, used or not."""
    fx = clean
    fx.write(fx.data + framing.frame(framing.T_DICT, b"not a zstd frame at all"))
    res = fx.cli("fsck", "--json")
    assert res.exit_code == 1, res.stdout
    assert f"{fx.rel}@{len(fx.data)}" in {p["what"] for p in json.loads(res.stdout)["problems"]}
    assert fx.cli("log", "-s", "chat", "--json").stdout == fx.log


def with_distance(z, distance):
    """The body of `Z` record z pointing `distance` bytes back (an int, or the raw bytes of the number)."""
    _, frame = packing.split_dict_block(z.body)
    return (packing._varint(distance) if isinstance(distance, int) else distance) + frame


def bad_distances(fx, z):
    """(what, distance) pairs for `Z` record z that name no dictionary. A number of another
    length moves the records after z, whose own distances are then wrong too: more damage,
    the same rules."""
    before = [r for r in fx.records if r.offset < z.offset and r.type != framing.T_DICT]
    return [
        ("the file header", z.offset),
        ("the last record before it that is not a dictionary", z.offset - before[-1].offset),
        ("the middle of its dictionary", z.offset - dictionary_of(z) - 1),
        ("itself", 0),
        ("one byte before the file", z.offset + 1),
        ("a TiB before the file", 1 << 40),
        ("an unreadable number", b"\x80" * 6),
    ]


@pytest.mark.parametrize("cache", ["fresh", "stale"])
def test_a_dict_block_that_names_no_dictionary(clean, cache):
    fx = clean
    for z in fx.of_type(framing.T_DICT_BLOCK):
        for what, distance in bad_distances(fx, z):
            body = with_distance(z, distance)
            fx.write(replace_record(fx.data, z, body))
            res = fx.cli("fsck", "--json")
            assert res.exit_code == 1 and "Traceback" not in res.stdout + res.stderr, (z.offset, what)
            problems = {p["what"]: p["problem"] for p in json.loads(res.stdout)["problems"]}
            assert f"{fx.rel}@{z.offset}" in problems, (z.offset, what, problems)
            assert "dictionary" in problems[f"{fx.rel}@{z.offset}"], (what, problems)
            check_reads(fx, fx.stale_cache() if cache == "stale" else None, z.type)


def test_a_dict_block_that_names_the_wrong_dictionary(clean):
    fx = clean
    dicts = [r.offset for r in fx.of_type(framing.T_DICT)]
    z = fx.records[-1]
    own = dictionary_of(z)
    other = next(o for o in dicts if o != own)
    assert other < z.offset
    # what zstd makes of the frame with the other dictionary: (almost surely) an error; if it
    # decodes, the frame's checksum proves it is the same block, and fsck has nothing to report
    content = zstandard.ZstdDecompressor().decompress(next(r for r in fx.records if r.offset == other).body)
    dctx = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(content, dict_type=zstandard.DICT_TYPE_RAWCONTENT))
    try:
        decodes = dctx.decompress(packing.split_dict_block(z.body)[1]) is not None
    except zstandard.ZstdError:
        decodes = False
    fx.write(replace_record(fx.data, z, with_distance(z, z.offset - other)))
    res = fx.cli("fsck", "--json")
    assert "Traceback" not in res.stdout + res.stderr
    assert res.exit_code == (0 if decodes else 1), res.stdout
    if not decodes:
        assert f"{fx.rel}@{z.offset}" in {p["what"] for p in json.loads(res.stdout)["problems"]}
    check_reads(fx, None, z.type)
    check_reads(fx, fx.stale_cache(), z.type)


# -- cuts and zero-filled tails: what a crash leaves --------------------------------------


def expected_after_cut(fx, size):
    """The (log, status) the tape had when the segment was `size` bytes long or less."""
    best = None
    for seg_size, log, status in fx.steps:
        if seg_size <= size:
            best = (log, status)
    return best


def test_a_cut_anywhere_is_a_torn_tail(clean):
    fx = clean
    cuts = sorted(set(range(0, len(fx.data), 6)) | {r.offset for r in fx.records} | {r.end - 1 for r in fx.records} | {r.offset + 3 for r in fx.records})
    for cut in cuts:
        fx.write(fx.data[:cut])
        res = fx.cli("fsck", "--json")
        report = json.loads(res.stdout)
        assert res.exit_code == 0, (cut, report["problems"])
        torn = cut not in {r.end for r in fx.records} and cut != 0
        assert bool(report["warnings"] and any("torn" in w["problem"] for w in report["warnings"])) == torn, (cut, report)
        want = expected_after_cut(fx, cut)
        if want is None or want[0] == "":
            continue
        log = fx.cli("log", "-s", "chat", "--json")
        assert log.exit_code == 0 and log.stdout == want[0], cut
        st = fx.cli("status", "-s", "chat", "--json")
        assert st.exit_code == 0 and st.stdout == want[1], cut


def test_a_zero_filled_tail_is_torn_only_where_a_crash_can_leave_it(clean):
    fx = clean
    last = fx.records[-1]
    body_start = last.offset + framing.HEADER_SIZE
    for k in range(last.offset, last.end):
        damaged = fx.data[:k] + bytes(last.end - k)
        fx.write(damaged)
        res = fx.cli("fsck", "--json")
        report = json.loads(res.stdout)
        # zeros from the record start, or from inside the body/trailer leaving >= 8 zeros: torn (a crash);
        # zeros starting inside the header, or fewer than 8 at the end: corruption
        # (the run of zeros is counted as it is: a byte just before k may be zero already)
        # (and zeros written over zeros change nothing: the record's checksum may end in a
        # zero byte, one time in 256, and then the record is still whole)
        record = damaged[body_start : last.end]
        zero_run = len(record) - len(record.rstrip(b"\0"))
        if damaged == fx.data:
            assert res.exit_code == 0 and report["warnings"] == [], (k - last.offset, report)
            continue
        torn = k == last.offset or (body_start <= k and zero_run >= 8)
        assert res.exit_code == (0 if torn else 1), (k - last.offset, report)
        if torn:
            assert any("torn" in w["problem"] for w in report["warnings"])
            log = fx.cli("log", "-s", "chat", "--json")
            assert log.exit_code == 0 and log.stdout == expected_after_cut(fx, last.offset)[0]


def test_zeros_past_the_end_are_a_torn_tail(clean):
    fx = clean
    for n in (1, 9, 10, 100, 4096):
        fx.write(fx.data + bytes(n))
        res = fx.cli("fsck", "--json")
        assert res.exit_code == 0, n
        assert any("torn" in w["problem"] for w in json.loads(res.stdout)["warnings"])
        assert fx.cli("log", "-s", "chat", "--json").stdout == fx.log


def test_append_after_a_torn_tail_never_continues_it(clean):
    fx = clean
    last = fx.records[-1]
    fx.write(fx.data[: last.offset + 20])
    before = fx.seg.read_bytes()
    res = fx.cli("append", "user", '{"content": "after the crash"}', "-s", "chat")
    assert res.exit_code == 0, res.stderr
    assert fx.seg.read_bytes() == before  # the torn segment is never written again
    res = fx.cli("fsck", "--json")
    assert res.exit_code == 0, res.stdout
    log = [json.loads(line) for line in fx.cli("log", "-s", "chat", "--json").stdout.splitlines()]
    assert log[0]["payload"] == {"content": "after the crash"}
    assert [e["hash"] for e in log[1:]] == [json.loads(line)["hash"] for line in expected_after_cut(fx, last.offset)[0].splitlines()]


# -- zstd frames that claim a huge size --------------------------------------------------


def zstd_frame_claiming(size: int, payload: bytes) -> bytes:
    """A zstd frame whose header claims `size` bytes but holds one raw block of `payload`."""
    fhd = (3 << 6) | (1 << 5)  # 8-byte frame content size, single segment
    block = struct.pack("<I", 1 | (0 << 1) | (len(payload) << 3))[:3] + payload
    return struct.pack("<I", 0xFD2FB528) + bytes([fhd]) + struct.pack("<Q", size) + block


def bomb_of_length(n: int, size: int = 1 << 40) -> bytes:
    """A frame of exactly n bytes that claims `size`: the record keeps its length, so every
    record after it keeps its offset (a `Z` record finds its dictionary by distance)."""
    frame = zstd_frame_claiming(size, b"x" * (n - 16))
    assert len(frame) == n and zstandard.frame_content_size(frame) == size
    return frame


def replace_record(data: bytes, rec: framing.Record, new_body: bytes) -> bytes:
    return data[: rec.offset] + framing.frame(rec.type, new_body) + data[rec.end :]


@pytest.fixture
def no_bomb_decompressed(monkeypatch):
    """Any zstd decompression (in this process) of a frame that claims 1 TiB fails the test."""
    real_cls, real_decompress = zstandard.ZstdDecompressor, zstandard.decompress

    def check(data):
        try:
            claim = zstandard.frame_content_size(data)
        except zstandard.ZstdError:
            return
        if claim >= 1 << 40:
            raise AssertionError("decompressed a frame that claims 1 TiB")

    class Guarded:
        def __init__(self, real):
            self._real = real

        def decompress(self, data, *a, **kw):
            check(data)
            return self._real.decompress(data, *a, **kw)

        def __getattr__(self, name):
            return getattr(self._real, name)

    def decompress(data, *a, **kw):
        check(data)
        return real_decompress(data, *a, **kw)

    monkeypatch.setattr(zstandard, "ZstdDecompressor", lambda *a, **kw: Guarded(real_cls(*a, **kw)))
    monkeypatch.setattr(zstandard, "decompress", decompress)


@pytest.fixture
def bomb(clean):
    fx = clean
    # the big tool output: a compressed blob in a plain `O` record
    rec = fx.big
    assert rec.body[32] == ord("B") and rec.body[33] == CODEC_ZSTD
    h = rec.body[:32].hex()
    body = rec.body[:34] + bomb_of_length(len(rec.body) - 34)
    fx.write(replace_record(fx.data, rec, body))
    yield fx, h


def test_zstd_frame_claiming_a_huge_size_is_refused_before_decompressing(bomb, no_bomb_decompressed):
    fx, h = bomb
    t = Tape.open(fx.dir)
    try:
        with pytest.raises(ObjectTooLarge) as ei:
            t.store.get_object(h)
        assert h in str(ei.value) and str(1 << 40) in str(ei.value)
    finally:
        t.close()


def test_zstd_bomb_through_the_cli(bomb):
    fx, h = bomb
    res = fx.cli("fsck", "--json")
    assert res.exit_code == 1
    assert any(h in p["what"] for p in json.loads(res.stdout)["problems"])
    tool_result = next(e for e in fx.entries if e["kind"] == "tool_result")
    p = run_cli("--dir", fx.dir, "show", tool_result["hash"], env={"CTAPE_CACHE_DIR": str(fx.dir.parent / "c-bomb")})
    assert p.returncode == 1 and b"Traceback" not in p.stderr
    (line,) = p.stderr.decode().splitlines()
    assert h in line and "limit" in line
    # entries that do not need the blob still read
    user = next(e for e in fx.entries if e["kind"] == "user")
    assert fx.cli("show", user["hash"], "--json").stdout == fx.shows[user["hash"]]


@pytest.mark.parametrize("type_", [framing.T_BLOCK, framing.T_DICT_BLOCK], ids=["K", "Z"])
def test_a_block_claiming_a_huge_size_is_refused_before_decompressing(clean, no_bomb_decompressed, type_):
    fx = clean
    rec = next(r for r in fx.of_type(type_) if fx.entries_in(r))
    if type_ == framing.T_DICT_BLOCK:
        _, frame = packing.split_dict_block(rec.body)
        body = rec.body[: len(rec.body) - len(frame)] + bomb_of_length(len(frame))
    else:
        body = bomb_of_length(len(rec.body))
    assert len(body) == len(rec.body)
    fx.write(replace_record(fx.data, rec, body))
    t = Tape.open(fx.dir)
    try:
        with pytest.raises(ObjectTooLarge) as ei:
            t.store.block_items(t.store.index.file_id(fx.rel), rec.offset, body, type_)
        assert str(1 << 40) in str(ei.value) and f"offset {rec.offset} of {fx.rel}" in str(ei.value)
        for h in fx.objects_in(rec):
            with pytest.raises(CorruptObject):
                t.store.get_object(h)
    finally:
        t.close()
    res = fx.cli("fsck", "--json")
    assert res.exit_code == 1
    problems = {p["what"]: p["problem"] for p in json.loads(res.stdout)["problems"]}
    assert str(1 << 40) in problems[f"{fx.rel}@{rec.offset}"], problems
    check_reads(fx, None, type_)
    check_reads(fx, fx.stale_cache(), type_)
    # and through a real process: one line, no traceback, no attempt at 1 TiB
    (entry,) = fx.entries_in(rec)
    p = run_cli("--dir", fx.dir, "show", entry, env={"CTAPE_CACHE_DIR": str(fx.dir.parent / "c-block-bomb")})
    assert p.returncode == 1 and b"Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr


def frame_sizes(fx):
    """What every zstd frame of both segments claims: (file, record, size of the dictionary it
    needs or None, its own size) for every `O` (zstd), `D`, `K` and `Z` record."""
    out = []
    for rel, records in ((fx.rel, fx.records), (fx.other_rel, fx.other_records)):
        dicts = {}
        for r in records:
            if r.type == framing.T_OBJECT and r.body[33] == CODEC_ZSTD:
                out.append((rel, r, None, zstandard.frame_content_size(r.body[34:])))
            elif r.type in (framing.T_DICT, framing.T_BLOCK):
                out.append((rel, r, None, zstandard.frame_content_size(r.body)))
                if r.type == framing.T_DICT:
                    dicts[r.offset] = out[-1][3]
            elif r.type == framing.T_DICT_BLOCK:
                distance, frame = packing.split_dict_block(r.body)
                out.append((rel, r, (r.offset - distance, dicts[r.offset - distance]), zstandard.frame_content_size(frame)))
    return out


def over_the_limit(fx, limit):
    """(objects, blocks) fsck reports at CTAPE_MAX_OBJECT=limit, from what is stored: the hashes of
    the objects whose frame claims more, and {file@offset: the messages fsck may give} for the
    records it cannot read: a dictionary or block claiming more, or a `Z` block whose
    dictionary claims more (the dictionary is needed first; when both claim more, either
    message will do)."""
    objects, blocks = [], {}
    for rel, r, dictionary, n in frame_sizes(fx):
        if r.type == framing.T_OBJECT and n > limit:
            objects.append(r.body[:32].hex())
        if r.type == framing.T_DICT and n > limit:  # fsck checks every dictionary itself too
            blocks[f"{rel}@{r.offset}"] = {f"dictionary at offset {r.offset} of {rel} claims {n} bytes, over the limit of {limit}"}
        if r.type not in framing.BLOCK_TYPES:
            continue
        msgs = set()
        if dictionary is not None and dictionary[1] > limit:
            msgs.add(f"dictionary at offset {dictionary[0]} of {rel} claims {dictionary[1]} bytes, over the limit of {limit}")
        if n > limit:
            msgs.add(f"block at offset {r.offset} of {rel} claims {n} bytes, over the limit of {limit}")
        if msgs:
            blocks[f"{rel}@{r.offset}"] = msgs
    return sorted(objects), blocks


def test_configured_limit_refuses_an_honest_frame(clean):
    fx = clean
    frames = frame_sizes(fx)
    smallest_block = min(n for _, r, _, n in frames if r.type == framing.T_BLOCK)
    seen = set()  # which kinds of refusal the limits below caused, so the test cannot go vacuous
    for limit in (1000, smallest_block):
        over, blocks = over_the_limit(fx, limit)
        assert fx.big_hash in over
        for rel, r, dictionary, n in frames:
            if f"{rel}@{r.offset}" in blocks:
                seen.add(chr(r.type) + (" (dictionary)" if dictionary and dictionary[1] > limit else ""))
        res = CliRunner().invoke(main, ["--dir", str(fx.dir), "fsck", "--json"], env={"CTAPE_MAX_OBJECT": str(limit), "CTAPE_CACHE_DIR": "/dev/null/x"})
        assert res.exit_code == 1
        problems = json.loads(res.stdout)["problems"]
        flagged = sorted(p["what"].split()[-1] for p in problems if p["what"].startswith("object "))
        assert flagged == over
        reported = {p["what"]: p["problem"] for p in problems if "@" in p["what"]}
        assert reported.keys() == blocks.keys(), (limit, reported, blocks)
        for what, problem in reported.items():
            assert problem in blocks[what], (limit, what, problem, blocks[what])
        # everything else follows from those: entries and refs whose objects were in refused blocks
        for p in problems:
            if not p["what"].startswith("object ") and p["what"] not in blocks:
                assert p["severity"] == "missing" and p["what"].startswith(("entry ", "ref ")), (limit, p)
    assert {"K", "Z", "Z (dictionary)"} <= seen, seen
    biggest = max(n for *_, n in frames)
    assert biggest > 1000
    res = CliRunner().invoke(main, ["--dir", str(fx.dir), "fsck"], env={"CTAPE_MAX_OBJECT": str(biggest), "CTAPE_CACHE_DIR": "/dev/null/x"})
    assert res.exit_code == 0, res.stdout


def test_compact_leaves_a_damaged_session_as_it_is(clean):
    """compact removes the files it replaces; a damaged one may still be recovered by hand
    or from another copy, so compaction leaves that session's files byte for byte as they
    are (SPEC 14), says so, and compacts the others."""
    fx = clean
    d = fx.of_type(framing.T_DICT)[0]
    fx.write(flipped(fx.data, d.offset + framing.HEADER_SIZE + 5, 0xFF))
    damaged_dir = fx.seg.parent
    before = snapshot(damaged_dir)
    other = fx.other_seg.parent
    other_before = snapshot(other)
    try:
        res = fx.cli("compact", "--grace", "now", "--json")
        assert res.exit_code == 0, res.stderr
        assert json.loads(res.stdout)["skipped_sessions"] == [damaged_dir.name]
        assert snapshot(damaged_dir) == before
        assert [p.suffix for p in other.iterdir()] == [".pack"]
    finally:  # the fixture is shared: put the other session's files back as they were
        for p in other.iterdir():
            p.unlink()
        for name, data in other_before.items():
            (other / name).write_bytes(data)


def test_a_record_whose_checksum_ends_in_zeros_is_whole_and_one_more_zero_is_corruption():
    # the case the zero-filled-tail walk meets one run in 256: zeros over zeros change nothing
    body = next(b for b in (str(i).encode() * 3 for i in range(100_000)) if zlib.crc32(b) >> 24 == 0)
    data = framing.frame(framing.T_REF, body)
    assert data[-1] == 0
    (rec,) = framing.scan(data)
    assert isinstance(rec, framing.Record) and rec.body == body
    first_zero = len(data.rstrip(b"\0"))
    damaged = data[: first_zero - 1] + bytes(len(data) - first_zero + 1)
    (dmg,) = framing.scan(damaged)
    assert isinstance(dmg, framing.Damage) and not dmg.torn  # fewer than 8 zeros: a crash does not leave this
