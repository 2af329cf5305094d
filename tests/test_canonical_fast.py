"""The fast encoder (orjson, the optional `fast` extra) writes exactly the standard
encoder's canonical bytes, or is not used: every value, entry body and refusal is the same
with it and without it (model/canonical.py, fast_encoder). An entry's name is the hash of
those bytes, so a difference would name the same entry twice on two machines."""

import datetime
import enum
import os
import subprocess
import sys
import uuid
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctape.model import canonical
from ctape.model.canonical import BLOB_MIN, MAX_DEPTH, canonical_json, entry_body
from ctape.model.errors import InvalidInput

from conftest import examples

pytest.importorskip("orjson")


@contextmanager
def encoder(fast: bool):
    saved = canonical._fast, canonical._fast_known
    canonical._fast, canonical._fast_known = (canonical._fast_encoder() if fast else None), True
    try:
        yield
    finally:
        canonical._fast, canonical._fast_known = saved


def both(fn, *args):
    """fn(*args) with the fast encoder and without: (result or refusal) of each."""
    out = []
    for fast in (True, False):
        with encoder(fast):
            try:
                out.append(("ok", fn(*args)))
            except InvalidInput as e:
                out.append(("refused", str(e)))
    return out


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Name(str):
    pass


class Mapping(dict):
    pass


# every kind of character the encoders escape or pass through: controls, quotes, DEL,
# the line separators, non-BMP, and lone surrogates (refused by both)
chars = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())
strings = st.one_of(
    st.text(chars, max_size=12),
    st.text(chars, max_size=5).map(lambda s: "\0" + s),
    st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", "\u2028", "𝄞"]), st.integers(BLOB_MIN - 2, BLOB_MIN + 2)),
)
odd = st.sampled_from(
    [datetime.datetime(2026, 12, 5), uuid.UUID(int=7), Colour.RED, Level.HIGH, Name("x"), (1, "a"), Mapping(a=1), b"bytes", {1, 2}]
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**66), max_value=2**66),
    st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1]),
    st.floats(),  # NaN and infinities included: both refuse them
    strings,
)
values = st.recursive(
    st.one_of(scalars, odd),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(strings, inner, max_size=4)),
    max_leaves=20,
)
plain = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(strings, inner, max_size=4)), max_leaves=20)


def nested(depth: int, leaf=1):
    v = leaf
    for i in range(depth):
        v = [v] if i % 2 else {"k": v}
    return v


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_canonical_json_is_the_same_with_and_without_the_fast_encoder(value):
    fast, standard = both(canonical_json, value)
    assert fast == standard


def body_of(payload, meta, delta):
    blobs = []

    def put_blob(b: bytes) -> str:
        h = canonical.object_hash(b"blob", b)
        blobs.append(h)
        return h

    return entry_body("message", payload, meta, delta, "ab" * 32, 3, "2026-12-05T08:00:00.000000Z", put_blob), blobs


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values, st.one_of(st.none(), st.dictionaries(strings, values, max_size=3)), st.one_of(st.none(), plain))
def test_an_entry_body_is_the_same_with_and_without_the_fast_encoder(payload, meta, delta):
    fast, standard = both(body_of, payload, meta, delta)
    assert fast == standard


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 2, 300])
@pytest.mark.parametrize("where", ["payload", "meta", "delta"])
def test_nesting_at_the_limit_is_judged_the_same(depth, where):
    v = {"payload": {"a": 1}, "meta": {}, "delta": None}
    v[where] = nested(depth) if where != "meta" or depth == 0 else {"m": nested(depth - 1)}
    fast, standard = both(body_of, v["payload"], v["meta"], v["delta"])
    assert fast == standard
    assert (fast[0] == "ok") == (depth <= MAX_DEPTH)


def test_every_character_and_every_key_order():
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    keys = {chr(c): c for c in list(range(0, 0x800)) + [0xFFFF, 0xE000, 0x10000, 0x1F600, 0x10FFFF]}
    for value in ({"t": text}, keys, {"\0a": ["\0", "\x7f", "\u2028\u2029", "\ufeff"]}):
        fast, standard = both(canonical_json, value)
        assert fast == standard and fast[0] == "ok"


def test_the_fast_encoder_writes_plain_entries():
    """It is used (a silent fall back would cost the append path ~15% of its work,
    docs/performance.md) and not used for values it would write differently."""
    calls = []
    real = canonical._fast_encoder()

    def counting(value):
        calls.append(value)
        return real(value)

    saved = canonical._fast, canonical._fast_known
    canonical._fast, canonical._fast_known = counting, True
    try:
        body_of({"text": "hello", "n": 3}, {"model": "m"}, None)
        assert len(calls) == 1
        for payload in ({"cost": 0.5}, {"when": datetime.datetime(2026, 1, 1)}, {"n": Level.HIGH}, {"s": Name("x")}, (1, 2)):
            try:
                body_of(payload, {}, None)
            except InvalidInput:
                pass
        assert len(calls) == 1
        canonical_json({"set": {"main": "ab" * 32}, "n": 4})
        assert len(calls) == 2
    finally:
        canonical._fast, canonical._fast_known = saved


def test_ctape_pure_json_turns_it_off():
    code = "from ctape.model import canonical; print(canonical.fast_encoder() is None)"
    env = dict(os.environ, CTAPE_PURE_JSON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    env.pop("CTAPE_PURE_JSON")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_orjson_is_not_imported_by_the_command_line_until_it_writes():
    code = "import sys; from ctape.cli import main; print('orjson' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


HELD = r"""
import resource, sys
from ctape.model import canonical
fast = sys.argv[1] == "fast"
canonical._fast, canonical._fast_known = (canonical._fast_encoder() if fast else None), True
body = {"kind": "message", "payload": {"text": "x" * 900}, "meta": {"model": "m"}, "seq": 0}
held = []
for i in range(100_000):
    body["seq"] = i
    held.append(canonical.canonical_json(body))
    junk = [bytes(100) for _ in range(2)]  # other allocations between them, as in a batch
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, sum(map(len, held)))
"""


def test_bodies_held_cost_their_size_with_the_fast_encoder():
    """orjson's bytes keep the room of its buffer (~8 KB for a 1 KB body); a watch that
    held a batch of them peaked at 2.0 x a rollout where it had 1.2 x
    (tests/test_watch_memory.py). The encoder hands back a copy of the text alone."""
    rss = {}
    for mode in ("fast", "pure"):
        out = subprocess.run([sys.executable, "-c", HELD, mode], capture_output=True, text=True, check=True)
        kb, held = map(int, out.stdout.split())
        rss[mode] = kb * 1024
    # 100,000 bodies of ~960 bytes: ~100 MB held either way (~800 MB when each kept its room)
    assert rss["fast"] < 1.3 * rss["pure"], rss


@pytest.mark.parametrize("change", [
    (b"\\u001f", b"\\u001F"),  # upper-case hex in an escape
    ("\u2028".encode(), b"\\u2028"),  # a line separator escaped
    (b"18446744073709551615", b"1.8446744073709552e19"),  # a 64-bit edge as a float
])
def test_an_orjson_that_writes_differently_is_not_used(monkeypatch, change):
    """A version of orjson that writes any of the probe's values differently from Python's
    encoder is not used (checked once a process): names must not depend on what is installed."""
    import types

    import orjson

    old, new = change
    fake = types.SimpleNamespace(OPT_SORT_KEYS=orjson.OPT_SORT_KEYS, dumps=lambda v, option: orjson.dumps(v, option=option).replace(old, new))
    assert fake.dumps(canonical._PROBE, option=orjson.OPT_SORT_KEYS) != orjson.dumps(canonical._PROBE, option=orjson.OPT_SORT_KEYS)
    monkeypatch.setitem(sys.modules, "orjson", fake)
    assert canonical._fast_encoder() is None
    monkeypatch.setitem(sys.modules, "orjson", orjson)
    assert canonical._fast_encoder() is not None
