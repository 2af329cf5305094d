"""Damaged data files (SPEC sections 2 and 12): flipped bytes, cuts, zero-filled tails, zstd bombs.

A segment is a list of records: a 10-byte header (magic, type, length, header crc), the
body, a 4-byte body crc (ctape/framing.py). Every byte of a complete record is covered
by a checksum, so a flipped byte anywhere is corruption: `fsck` exits 1 at every
position. A torn tail (exit 0, a warning) is only what a crash leaves: the file cut
inside its last record, or the last record's bytes zero from some point to the end
of the file (with the header intact, at least 8 zeros). Reads after damage return the
right data or fail with one line; never other data, never a traceback.

The many-position loops run the command in-process (click's CliRunner) for speed; a
few positions also go through a real `ctape` process.
"""

import json
import os
import shutil
import struct

import pytest
from click.testing import CliRunner

from conftest import run_cli
from ctape import Tape, framing
from ctape.cli import main
from ctape.errors import ObjectTooLarge
from ctape.store import CODEC_ZSTD


class Fixture:
    """A tape with two sessions and, for session chat, the expected output after every step."""

    def __init__(self, tmp_path):
        self.dir = tmp_path / "tape"
        self.cache = tmp_path / "cache-base"
        Tape.init(self.dir).close()
        self.steps = []  # (segment size, log json, status json) after each step of chat
        t = Tape.open(self.dir)
        s = t.session("chat")
        ops = [
            lambda: s.append("system", {"content": "You are a careful agent. " * 60}),
            lambda: s.append("user", {"content": "fix the tests"}, meta={"tokens": "4"}, delta={"cwd": "/repo"}),
            lambda: s.append("tool_call", {"call_id": "c1", "name": "read", "arguments": {"path": "a.py"}}),
            lambda: s.append("tool_result", {"call_id": "c1", "output": "def f():\n    return 1\n" * 80}),
            lambda: s.branch("alt"),
            lambda: s.append("error", {"message": "tests failed", "call_id": "c1"}),
            lambda: s.append("assistant", {"content": "done", "parts": ["\0x", "é"]}),
        ]
        other = t.session("other")
        other.append("user", {"content": "You are a careful agent. " * 60})
        other.append("assistant", {"content": "ok"})
        t.close()
        self.other_seg = self._segment("other")
        self.steps.append((0, "", None))
        for op in ops:
            t = Tape.open(self.dir)
            s = t.session("chat")  # noqa: F841 (used by the lambdas)
            op()
            t.close()
            self.seg = self._segment("chat")
            self.steps.append((os.path.getsize(self.seg), self.cli("log", "-s", "chat", "--json").stdout, self.cli("status", "-s", "chat", "--json").stdout))
        self.data = self.seg.read_bytes()
        self.other_data = self.other_seg.read_bytes()
        self.records = list(framing.scan(self.data))
        assert all(isinstance(r, framing.Record) for r in self.records)
        self.log = self.steps[-1][1]
        self.status = self.steps[-1][2]
        self.entries = [json.loads(line) for line in self.log.splitlines()]
        self.shows = {e["hash"]: self.cli("show", e["hash"], "--json").stdout for e in self.entries}
        for e in self.entries:
            assert json.loads(self.shows[e["hash"]]) == e
        # an index cache built from the intact tape, copied before each damaged read
        self.cli("fsck", cache=self.cache)
        self.cli("log", "-s", "chat", cache=self.cache)

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


def one_line_failure(res, code=1):
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.stdout + res.stderr
    assert res.exit_code == code, (res.exit_code, res.stderr)
    assert len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith("ctape: error: ")


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
    if log.exit_code == 0:
        assert log.stdout == fx.log, f"log returned other data after damage in a {chr(record_type)} record"
    else:
        one_line_failure(log)
        assert fx.log.startswith(log.stdout)  # whatever it printed before failing was right
    if with_status:
        st = fx.cli("status", "-s", "chat", "--json", cache=cache)
        if st.exit_code == 0:
            assert st.stdout == fx.status, f"status returned other data after damage in a {chr(record_type)} record"
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
    pos_list = positions(fx, every=1) if mask == 0xFF else positions(fx, every=7)
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
    for pos in positions(fx, every=11):
        r = fx.record_at(pos)
        if r.type == framing.T_REF:
            continue
        fx.write(flipped(fx.data, pos, 0xFF))
        check_reads(fx, fx.stale_cache() if cache == "stale" else None, r.type, with_status=False)


@pytest.mark.parametrize("cache", ["fresh", "stale"])
def test_status_after_a_flip_in_a_blob_or_header(clean, cache):
    fx = clean
    for pos in positions(fx, every=17):
        r = fx.record_at(pos)
        if r.type == framing.T_REF or (r.type == framing.T_OBJECT and r.body[32] == ord("E")):
            continue
        fx.write(flipped(fx.data, pos, 0xFF))
        check_reads(fx, fx.stale_cache() if cache == "stale" else None, r.type)


@pytest.mark.parametrize("cache", ["fresh", "stale"])
def test_status_after_a_flip_in_an_entry(clean, cache):
    fx = clean
    head_entry = next(r for r in fx.records if r.type == framing.T_OBJECT and r.body[:32].hex() == fx.entries[0]["hash"])
    for pos in (head_entry.offset + framing.HEADER_SIZE + 50, head_entry.end - 1):
        fx.write(flipped(fx.data, pos, 0xFF))
        check_reads(fx, fx.stale_cache() if cache == "stale" else None, head_entry.type)


def test_reads_after_a_flip_in_a_ref_record_with_a_stale_index(clean):
    fx = clean
    for pos in positions(fx, every=13):
        r = fx.record_at(pos)
        if r.type != framing.T_REF:
            continue
        fx.write(flipped(fx.data, pos, 0xFF))
        check_reads(fx, fx.stale_cache(), r.type)


def test_reads_after_a_flip_in_a_ref_record(clean):
    fx = clean
    last_ref = [r for r in fx.records if r.type == framing.T_REF][-1]
    for pos in (last_ref.offset + framing.HEADER_SIZE + 5, last_ref.end - 1):
        fx.write(flipped(fx.data, pos, 0xFF))
        check_reads(fx, None, framing.T_REF)


def test_reads_after_a_flip_through_a_real_process(clean):
    fx = clean
    # the tool output blob: shared by no one else, read by log and show
    blob = max((r for r in fx.records if r.type == framing.T_OBJECT), key=lambda r: len(r.body))
    fx.write(flipped(fx.data, blob.offset + framing.HEADER_SIZE + 40, 0xFF))
    for args in (["log", "-s", "chat", "--json"], ["show", "chat~2", "--json"]):
        p = run_cli("--dir", fx.dir, *args, env={"CTAPE_CACHE_DIR": str(fx.stale_cache())})
        assert b"Traceback" not in p.stdout + p.stderr
        if p.returncode == 0:
            assert p.stdout.decode() in (fx.log, fx.shows.get(fx.entries[2]["hash"]))
        else:
            assert p.returncode == 1 and len(p.stderr.splitlines()) == 1, p.stderr


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
        record = damaged[body_start : last.end]
        zero_run = len(record) - len(record.rstrip(b"\0"))
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


def replace_record(data: bytes, rec: framing.Record, new_body: bytes) -> bytes:
    return data[: rec.offset] + framing.frame(rec.type, new_body) + data[rec.end :]


@pytest.fixture
def bomb(clean):
    fx = clean
    # the big tool output: a compressed blob
    rec = max((r for r in fx.records if r.type == framing.T_OBJECT and r.body[33] == CODEC_ZSTD and r.body[32] == ord("B")), key=lambda r: len(r.body))
    h = rec.body[:32].hex()
    body = rec.body[:32] + bytes([rec.body[32], CODEC_ZSTD]) + zstd_frame_claiming(1 << 40, b"x" * 100)
    fx.write(replace_record(fx.data, rec, body))
    yield fx, h


def test_zstd_frame_claiming_a_huge_size_is_refused_before_decompressing(bomb, monkeypatch):
    fx, h = bomb
    t = Tape.open(fx.dir)
    try:

        class NoDecompress:
            def decompress(self, *a, **kw):
                raise AssertionError("decompressed a frame that claims 1 TiB")

        t.store._dctx = NoDecompress()
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


def test_configured_limit_refuses_an_honest_frame(clean):
    import zstandard

    fx = clean
    records = fx.records + list(framing.scan(fx.other_data))
    sizes = {r.body[:32].hex(): zstandard.frame_content_size(r.body[34:]) for r in records if r.type == framing.T_OBJECT and r.body[33] == CODEC_ZSTD}
    biggest = max(sizes.values())
    assert biggest > 1000
    over = sorted(h for h, n in sizes.items() if n > 1000)
    res = CliRunner().invoke(main, ["--dir", str(fx.dir), "fsck", "--json"], env={"CTAPE_MAX_OBJECT": "1000", "CTAPE_CACHE_DIR": "/dev/null/x"})
    assert res.exit_code == 1
    flagged = sorted(p["what"].split()[-1] for p in json.loads(res.stdout)["problems"] if p["what"].startswith("object "))
    assert flagged == over
    res = CliRunner().invoke(main, ["--dir", str(fx.dir), "fsck"], env={"CTAPE_MAX_OBJECT": str(biggest), "CTAPE_CACHE_DIR": "/dev/null/x"})
    assert res.exit_code == 0, res.stdout
