"""The canonical form and content hashes (SPEC section 2), as hypothesis round-trips."""

import json

from blake3 import blake3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctape import Tape
from ctape.model.canonical import BLOB_MIN, canonical_json, entry_body, externalize, internalize, object_hash

from conftest import examples

# strings that exercise the blob and escape rules: "\0"-prefixed (incl. ones that look
# like a blob reference), around BLOB_MIN, and ordinary unicode text
HEX = "0123456789abcdef"
special_strings = st.one_of(
    st.text(max_size=30).map(lambda s: "\0" + s),
    st.text(alphabet=HEX, min_size=64, max_size=64).map(lambda h: "\0b" + h),
    st.text(alphabet=HEX, min_size=64, max_size=64).map(lambda h: "\0\0b" + h),
    st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", "\0", "☃", "𝄞"]), st.integers(BLOB_MIN - 2, BLOB_MIN + 2)),
    st.builds(lambda s, n: "\0" + s * n, st.sampled_from(["b", "ab"]), st.integers(BLOB_MIN - 2, BLOB_MIN + 2)),
)
strings = st.one_of(st.text(max_size=40), special_strings)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    strings,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(strings, inner, max_size=5)),
    max_leaves=25,
)
json_objects = st.dictionaries(strings, json_values, max_size=5)


def reference_canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def shuffled(value, rnd):
    """The same JSON value with every dict's keys in another insertion order."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


def test_pinned_hashes():
    # the naming contract: blake3(TYPE + b"\0" + BODY), 64 lowercase hex digits
    assert object_hash(b"blob", b"hello") == blake3(b"blob\0hello").hexdigest()
    assert object_hash(b"entry", b"{}") == blake3(b"entry\0{}").hexdigest()
    assert object_hash(b"entry", b"{}") != object_hash(b"blob", b"{}")
    assert canonical_json({"b": 1, "a": [1.5, "é", None, True]}) == '{"a":[1.5,"é",null,true],"b":1}'.encode()


@given(json_values, st.randoms(use_true_random=False))
@settings(max_examples=examples(300))
def test_canonical_json_is_stable(value, rnd):
    b = canonical_json(value)
    assert b == reference_canonical(value)
    assert canonical_json(json.loads(b)) == b  # a fixed point: reading and re-encoding changes nothing
    assert canonical_json(shuffled(value, rnd)) == b  # key order never matters
    b.decode("utf-8")  # always valid UTF-8


@given(json_values)
@settings(max_examples=examples(300))
def test_externalize_internalize_round_trip(value):
    blobs = {}

    def put(data: bytes) -> str:
        h = object_hash(b"blob", data)
        blobs[h] = data
        return h

    ext = externalize(value, put)
    # every long string left the entry body; nothing in the body is a long string
    body = canonical_json(ext)
    assert internalize(json.loads(body), lambda h: blobs[h].decode()) == value
    assert internalize(ext, lambda h: blobs[h].decode()) == value
    for data in blobs.values():
        assert len(data.decode("utf-8")) >= BLOB_MIN
    # externalizing the same value twice gives the same body: content addressing holds
    assert canonical_json(externalize(value, put)) == body


def test_escape_rules_explicitly():
    blobs = {}

    def put(data):
        h = object_hash(b"blob", data)
        blobs[h] = data
        return h

    fake_ref = "\0b" + "0" * 64
    long = "y" * BLOB_MIN
    ext = externalize({"a": fake_ref, "b": "\0", "c": long, "d": [long, "x" * (BLOB_MIN - 1)]}, put)
    assert ext["a"] == "\0" + fake_ref
    assert ext["b"] == "\0\0"
    assert ext["c"] == "\0b" + object_hash(b"blob", long.encode())
    assert ext["d"][0] == ext["c"] and ext["d"][1] == "x" * (BLOB_MIN - 1)
    assert len(blobs) == 1


@given(json_objects, json_objects, json_values)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_entry_round_trips_through_the_tape(tape_dir, extra, meta, delta):
    payload = dict(extra)
    payload["content"] = "hi"
    t = Tape.open(tape_dir)
    try:
        s = t.session("rt")
        parent = s.refs().head_hash
        e = s.append("user", payload, meta=meta, delta=delta)
    finally:
        t.close()
    # the hash is the contract: recompute it from the canonical body, independently of the store
    body = {
        "delta": externalize(delta, lambda b: object_hash(b"blob", b)),
        "kind": "user",
        "meta": externalize(meta, lambda b: object_hash(b"blob", b)),
        "parent": parent,
        "payload": externalize(payload, lambda b: object_hash(b"blob", b)),
        "seq": e.seq,
        "time": e.time,
    }
    assert e.hash == object_hash(b"entry", reference_canonical(body))
    t2 = Tape.open(tape_dir)  # a fresh handle reads from disk, not from the writer's cache
    try:
        got = t2.get(e.hash)
        assert (got.payload, got.meta, got.delta, got.kind, got.parent, got.time) == (payload, meta, delta, "user", parent, e.time)
        assert canonical_json(got.payload) == canonical_json(payload)
        assert canonical_json(got.meta) == canonical_json(meta)
        assert canonical_json(got.delta) == canonical_json(delta)
    finally:
        t2.close()


@given(json_values, json_objects, json_values, st.sampled_from([None, "ab" * 32]), st.integers(1, 10**6))
@settings(max_examples=examples(300), deadline=None)
def test_entry_body_is_canonical_json_of_the_externalized_body(payload, meta, delta, parent, seq):
    """The append path puts the entry's bytes together from its parts, skipping the
    externalize walk where it cannot change anything: the result must be exactly the
    canonical JSON of the documented body, with the same blobs in the same order."""
    t = "2026-01-02T03:04:05.000000Z"
    fast, slow = [], []
    got = entry_body("tool_result", payload, meta, delta, parent, seq, t, lambda b: fast.append(b) or object_hash(b"blob", b))

    def put(b):
        slow.append(b)
        return object_hash(b"blob", b)

    want = canonical_json(
        {
            "delta": externalize(delta, put),
            "kind": "tool_result",
            "meta": externalize(meta, put),
            "parent": parent,
            "payload": externalize(payload, put),
            "seq": seq,
            "time": t,
        }
    )
    assert got == want
    assert fast == slow


def _nest(depth, leaf, kind):
    for _ in range(depth):
        leaf = [leaf] if kind == "list" else {"k": leaf}
    return leaf


deep_values = st.builds(_nest, st.integers(95, 103), st.one_of(st.none(), strings), st.sampled_from(["list", "dict"]))
content_parts = st.lists(st.dictionaries(st.sampled_from(["type", "text", "x"]), st.one_of(strings, json_values), max_size=3), max_size=3)
payloads = st.one_of(
    json_values,
    deep_values,
    st.fixed_dictionaries({"content": st.one_of(strings, content_parts)}, optional={"x": st.one_of(json_values, deep_values), "bad": st.sampled_from([float("nan"), "\ud800", 1])}),
)


@given(payloads, st.one_of(json_objects, st.dictionaries(strings, deep_values, max_size=2)), st.one_of(json_values, deep_values))
@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_entry_body_refuses_and_encodes_as_the_documented_rules(payload, meta, delta):
    """entry_body encodes a body first and looks at its values only when the text may hold
    a blob, a NUL string or too deep a nesting (canonical._encoded_plain): whatever the
    values, it must give the documented bytes, or refuse exactly what the limits and the
    JSON rules refuse (nesting past MAX_DEPTH, NaN, a lone surrogate)."""
    from ctape.model.canonical import value_problem
    from ctape.model.errors import InvalidInput

    t = "2026-01-02T03:04:05.000000Z"
    blobs, want_blobs = [], []

    def putter(into):
        return lambda b: into.append(b) or object_hash(b"blob", b)

    try:
        got = entry_body("user", payload, meta, delta, None, 1, t, putter(blobs))
    except InvalidInput:
        got = None
    want = None
    if value_problem(payload, meta, delta) is None:
        put = putter(want_blobs)
        try:
            want = canonical_json({"delta": externalize(delta, put), "kind": "user", "meta": externalize(meta, put),
                                   "parent": None, "payload": externalize(payload, put), "seq": 1, "time": t})
        except InvalidInput:
            pass
    assert got == want
    if got is not None:
        assert blobs == want_blobs
