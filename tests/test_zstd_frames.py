"""formats.frames.Frames against the frame ends zstandard itself wrote: streams of one
or more frames (with and without checksums and content sizes, flushed blocks, RLE and raw
blocks, skippable frames), cut at random points and fed in random pieces. `whole` must
be True exactly at a frame's end (or before any byte)."""

from __future__ import annotations

import io
import random

import pytest
import zstandard

from ctape.formats.frames import Frames


def _frame(rnd: random.Random) -> bytes:
    kind = rnd.randrange(4)
    if kind == 0:  # text, as transcripts are
        data = b"".join(b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * rnd.randint(0, 300)) for i in range(rnd.randint(0, 3000)))
    elif kind == 1:  # one byte repeated: RLE blocks
        data = b"a" * rnd.randint(0, 600_000)
    else:  # random bytes: raw blocks
        data = rnd.randbytes(rnd.randint(0, 300_000))
    cc = zstandard.ZstdCompressor(level=rnd.choice([1, 3, 19, -5]), write_checksum=rnd.random() < 0.5,
                                  write_content_size=rnd.random() < 0.5)
    if rnd.random() < 0.5:
        return cc.compress(data)
    out = io.BytesIO()  # as a writer that flushes its blocks as it goes writes it
    w = cc.stream_writer(out, closefd=False)
    w.write(data)
    w.flush(zstandard.FLUSH_BLOCK)
    w.write(data[:100])
    w.close()
    return out.getvalue()


@pytest.mark.parametrize("seed", range(6))
def test_frames_tell_a_cut_stream_from_a_whole_one(seed):
    rnd = random.Random(seed)
    for _ in range(25):
        parts = []
        for _ in range(rnd.randint(1, 3)):
            parts.append(_frame(rnd))
            if rnd.random() < 0.2:
                parts.append(b"\x5a\x2a\x4d\x18" + (7).to_bytes(4, "little") + b"skipped")
        stream = b"".join(parts)
        ends, at = {0}, 0
        for p in parts:
            at += len(p)
            ends.add(at)
        for cut in [len(stream), *sorted(ends)[:-1], *(rnd.randint(0, len(stream)) for _ in range(20))]:
            f, i = Frames(), 0
            while i < cut:
                n = rnd.randint(1, 70_000)
                f.feed(stream[i : min(cut, i + n)])
                i += n
            assert f.whole == (cut in ends), (cut, sorted(ends))


def test_bytes_that_are_not_zstd_are_left_to_the_decompressor():
    f = Frames()
    f.feed(b'{"not": "zstd"}\n')
    assert f.whole
