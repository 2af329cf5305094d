"""Seeds and mutations for the fuzz harness (test_fuzz.py).

Hypothesis draws one integer per input, the seed of a `random.Random` that makes every
choice here: a draw through hypothesis costs more than the decoders under test, and an
input is reproduced from its seed alone (`mutated_file(random.Random(seed), data)`).

Mutations work at three depths, so that inputs get past the outer checks to the decoders
behind them: raw bytes (flips, inserts, cuts: mostly caught by a CRC), whole records
re-framed with valid checksums (a mutated body reaches the JSON and block decoders), and
block contents decompressed, mutated and compressed again (reaches packing.decode_block
and the object hashing behind it). JSON values are mutated by replacing a value somewhere
inside with a hostile one (2**70, 1e400 as text, deep nesting, wrong types, blob
references that are not hashes, times out of range).
"""

from __future__ import annotations

import glob
import functools
import json
import os
import random
import re

from ctape.store import framing, packing

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TRANSCRIPTS = os.path.join(ROOT, "tests", "fixtures", "transcripts")
FORMAT_DIRS = {"claude-code": "claude-code", "codex": "codex-rollout", "openai": "openai-chat"}


def tape_seeds() -> list[tuple[str, bytes]]:
    """(kind, bytes) of every seed data file: "seg" or "pack"."""
    files = sorted(glob.glob(os.path.join(HERE, "corpus", "*.seg")) + glob.glob(os.path.join(HERE, "corpus", "*.pack")))
    files += sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "tapes", "*", "sessions", "*", "*.seg")))
    out = []
    for path in files:
        with open(path, "rb") as f:
            out.append(("pack" if path.endswith(".pack") else "seg", f.read()))
    return out


def _zstd():
    import zstandard

    return zstandard


def block_contents(seeds) -> list[bytes]:
    """The decompressed content of every K block of the seeds (what decode_block reads)."""
    z = _zstd().ZstdDecompressor()
    out = []
    for _, data in seeds:
        for rec in framing.scan(data):
            if isinstance(rec, framing.Record) and rec.type == framing.T_BLOCK:
                out.append(z.decompress(rec.body))
    return out


def json_bodies(seeds) -> dict[str, list[bytes]]:
    """Ref records, partial records, headers and entry bodies of the seeds, by kind."""
    z = _zstd().ZstdDecompressor()
    out: dict[str, list[bytes]] = {"ref": [], "partial": [], "header": [], "entry": []}
    for _, data in seeds:
        for rec in framing.scan(data):
            if not isinstance(rec, framing.Record):
                continue
            inner = [rec]
            if rec.type == framing.T_BLOCK:
                inner = packing.decode_block(z.decompress(rec.body), "seed")
            for r in inner:
                if r.type == framing.T_REF:
                    out["ref"].append(r.body)
                elif r.type == framing.T_PARTIAL:
                    out["partial"].append(r.body)
                elif r.type == framing.T_HEADER:
                    out["header"].append(r.body)
                elif r.type == framing.T_OBJECT and r.body[32] == ord("E") and r.body[33] == 0:
                    out["entry"].append(r.body[34:])
    return out


def transcript_seeds(fmt: str, window: int = 12, max_line: int = 20_000) -> list[list[bytes]]:
    """Windows of consecutive lines of the real transcripts of a format (lines cut to
    max_line bytes are left out, to keep each import fast); the .traj document whole."""
    out = []
    for path in sorted(glob.glob(os.path.join(TRANSCRIPTS, FORMAT_DIRS[fmt], "*"))):
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".traj"):
            if len(data) <= 400_000:
                out.append([data])
            continue
        lines = [ln for ln in data.split(b"\n") if ln.strip() and len(ln) <= max_line]
        for i in range(0, min(len(lines), 6 * window), window):
            out.append(lines[i : i + window])
    return out


# -- hostile values ------------------------------------------------------------------------------------


def _deep(n: int, leaf=0):
    v = leaf
    for i in range(n):
        v = [v] if i % 2 else {"k": v}
    return v


HOSTILE_SCALARS = [
    2 ** 63, 2 ** 70, -(2 ** 63) - 1, -1, 0, True, None, 1.5, 1e308, -0.0, "", "x" * 5000,
    "\0b" + "z" * 64, "\0b" + "0" * 64, "\0", "\0#3;", "#1", "@main", "@", "HEAD", "../x", "\ud7ff\ue000",
    "0001-01-01T00:00:00+00:30", "9999-12-31T23:59:59-23:59", "999-01-01T00:00:00Z", "2026-13-45T99:99:99Z",
    [], {}, [None], {"": None}, "a" * 64, "é" * 3,
]
_CHARS = "abcHEADmain0123456789 _-./@#\0\u00e9\ud7ff\n\"{}[]"


def _text(rng: random.Random, n: int = 12) -> str:
    return "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, n)))


def _small(rng: random.Random, budget: int) -> object:
    k = rng.randint(0, 9)
    if budget <= 0 or k < 6:
        return rng.choice([None, True, False, rng.randint(-(2 ** 65), 2 ** 65), rng.randint(-3, 300), rng.uniform(-1e9, 1e9), _text(rng)])
    if k < 8:
        return [_small(rng, budget - 1) for _ in range(rng.randint(0, 4))]
    return {_text(rng, 6): _small(rng, budget - 1) for _ in range(rng.randint(0, 4))}


def hostile_value(rng: random.Random) -> object:
    k = rng.randint(0, 9)
    if k < 5:
        return rng.choice(HOSTILE_SCALARS)
    if k < 9:
        return _small(rng, 3)
    return _deep(rng.randint(90, 1200))


RAW_JSON_TOKENS = [b"1e400", b"-1e400", b"NaN", b"Infinity", b"1" + b"0" * 5000, b'"\\ud800"', b'"\xff\xfe"', b"[" * 3000 + b"]" * 3000, b"nul", b'"\\u0000b' + b"f" * 64 + b'"']


def paths(value, prefix=()):
    """Every path to a value inside a JSON value (bounded)."""
    out = [prefix]
    stack = [(value, prefix)]
    while stack and len(out) < 400:
        v, p = stack.pop()
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in items:
            out.append(p + (k,))
            stack.append((x, p + (k,)))
    return out


def replace_at(value, path, new):
    if not path:
        return new
    parent = value
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = new
    return value


_SCALAR = re.compile(rb":(-?[0-9][0-9.eE+-]*|true|false|null|\"[^\"\\\\]*\")")


def mutated_json(rng: random.Random, body: bytes) -> bytes:
    """A JSON body with one to three values replaced by hostile ones, or a key deleted,
    or a raw token (1e400, NaN, invalid UTF-8) spliced in."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return mutated_bytes(rng, body)
    for _ in range(rng.randint(1, 3)):
        p = rng.choice(paths(value))
        if rng.randint(0, 5) == 0 and p:
            parent = value
            for k in p[:-1]:
                parent = parent[k]
            if isinstance(parent, dict):
                parent.pop(p[-1], None)
                continue
        value = replace_at(value, p, hostile_value(rng))
    try:
        out = json.dumps(value, ensure_ascii=False, sort_keys=rng.random() < 0.8, separators=(",", ":")).encode("utf-8", "surrogatepass")
    except (ValueError, TypeError, RecursionError):
        out = body
    if rng.randint(0, 4) == 0:
        m = list(_SCALAR.finditer(out))
        if m:
            hit = rng.choice(m)
            out = out[: hit.start(1)] + rng.choice(RAW_JSON_TOKENS) + out[hit.end(1) :]
    return out


_INTERESTING = [0x00, 0xFF, 0xCE, 0x7F, 0x80, ord("K"), ord("Z"), ord("R"), ord("{"), ord('"')]
_WORDS = [b"\xff\xff\xff\xff", b"\x00\x00\x00\x80", b"\x00\x00\x00\x00", b"\x01\x00\x00\x00"]


def mutated_bytes(rng: random.Random, data: bytes, max_ops: int = 4) -> bytes:
    """Byte-level mutations: flips, overwrites with interesting bytes, inserts, deletes,
    duplicated ranges, a cut end."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, max_ops)):
        op = rng.randint(0, 6)
        n = len(buf)
        pos = rng.randint(0, max(n - 1, 0))
        if op == 0 and n:
            buf[pos] ^= 1 << rng.randint(0, 7)
        elif op == 1 and n:
            buf[pos] = rng.choice(_INTERESTING)
        elif op == 2:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == 3 and n:
            del buf[pos : pos + rng.randint(1, 64)]
        elif op == 4 and n:
            buf[pos:pos] = buf[pos : min(n, pos + rng.randint(1, 256))]
        elif op == 5:
            del buf[pos:]
        elif op == 6 and n >= 4:
            buf[pos : pos + 4] = rng.choice(_WORDS)
    return bytes(buf)


@functools.lru_cache(maxsize=None)
def _zc():
    return _zstd().ZstdCompressor(level=1, write_content_size=True, write_checksum=True)


@functools.lru_cache(maxsize=None)
def _zd():
    return _zstd().ZstdDecompressor()


@functools.lru_cache(maxsize=64)
def _records_of(data: bytes) -> tuple:
    return tuple(r for r in framing.scan(data) if isinstance(r, framing.Record))


def mutated_file(rng: random.Random, data: bytes) -> bytes:
    """A data file mutated at one of three depths (see the module docstring)."""
    depth = rng.randint(0, 3)
    if depth == 0:
        return mutated_bytes(rng, data)
    records = _records_of(data)
    if not records:
        return mutated_bytes(rng, data)
    i = rng.randrange(len(records))
    rec = records[i]
    body = rec.body
    if depth == 1:  # structure: drop, duplicate or swap whole records (valid frames)
        op = rng.randint(0, 2)
        frames = [framing.frame(r.type, r.body) for r in records]
        if op == 0:
            del frames[i]
        elif op == 1:
            frames.insert(rng.randint(0, len(frames)), frames[i])
        else:
            j = rng.randrange(len(frames))
            frames[i], frames[j] = frames[j], frames[i]
        return b"".join(frames)
    if rec.type == framing.T_BLOCK and depth == 3:
        body = _zc().compress(mutated_block(rng, _zd().decompress(body)))
    elif rec.type in (framing.T_REF, framing.T_PARTIAL, framing.T_HEADER):
        body = mutated_json(rng, body)
    elif rec.type == framing.T_OBJECT and len(body) > 34 and body[33] == 0 and rng.random() < 0.5:
        body = body[:34] + mutated_json(rng, body[34:])  # the hash no longer matches: CorruptObject
    else:
        body = mutated_bytes(rng, body)
    type_ = rec.type if rng.randint(0, 9) else rng.choice(sorted(framing.RECORD_TYPES))
    # the records before the mutated one are written as they were (offsets kept, so a
    # Z block's distance back to its dictionary still holds)
    start = rec.offset
    end = rec.end
    return data[:start] + framing.frame(type_, body) + data[end:]


def _inner_items(content: bytes):
    out, pos = [], 0
    while pos < len(content):
        type_ = content[pos]
        n, pos = packing._read_varint(content, pos + 1)
        if n < 0 or pos + n > len(content):
            return None
        out.append((type_, content[pos : pos + n]))
        pos += n
    return out


def _reframe_inner(items) -> bytes:
    return b"".join(bytes((t,)) + packing._varint(len(b)) + b for t, b in items)


def mutated_block(rng: random.Random, content: bytes) -> bytes:
    """A block's content mutated: raw bytes, or one inner record's JSON (ref records,
    entries: the entry's hash is computed from its bytes, so a mutated entry is a new,
    valid object whose body is hostile), re-framed."""
    items = _inner_items(content)
    if not items or rng.randint(0, 2) == 0:
        return mutated_bytes(rng, content)
    i = rng.randrange(len(items))
    type_, body = items[i]
    if type_ == packing.T_OBJ and len(body) > 2 and body[0] == ord("E"):
        body = body[:2] + (mutated_json(rng, body[2:]) if body[1] == packing.PLAIN else mutated_bytes(rng, body[2:]))
    elif type_ == packing.T_REF and body and body[0] == packing.PLAIN:
        body = body[:1] + mutated_json(rng, body[1:])
    elif type_ == framing.T_PARTIAL:
        body = mutated_json(rng, body)
    else:
        body = mutated_bytes(rng, body)
    items[i] = (type_, body)
    if rng.randint(0, 5) == 0:
        items.insert(rng.randint(0, len(items)), items[rng.randrange(len(items))])
    return _reframe_inner(items)


def mutated_transcript(rng: random.Random, lines: list[bytes]) -> bytes:
    """Transcript lines with one to three lines mutated (JSON-aware or bytes), dropped,
    duplicated or swapped."""
    lines = list(lines)
    for _ in range(rng.randint(1, 3)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        op = rng.randint(0, 5)
        if op <= 2:
            lines[i] = mutated_json(rng, lines[i])
        elif op == 3:
            lines[i] = mutated_bytes(rng, lines[i], max_ops=2).replace(b"\n", b" ")
        elif op == 4:
            lines.insert(rng.randint(0, len(lines)), lines[i])
        else:
            del lines[i]
    return b"\n".join(lines) + (b"\n" if rng.randint(0, 4) else b"")
