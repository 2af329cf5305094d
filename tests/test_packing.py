"""Pack blocks store no hashes; reading them must rebuild every record byte for byte."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ctape import Tape
from ctape.store import framing
from ctape.model.canonical import canonical_json, object_hash
from ctape.store.packing import decode_block, encode_block

from conftest import run_cli


def obj(kind: bytes, data: bytes) -> bytes:
    h = object_hash(b"entry" if kind == b"E" else b"blob", data)
    return bytes.fromhex(h) + kind + b"\0" + data


def roundtrip(items):
    raw = encode_block(items)
    got = [(r.type, r.body) for r in decode_block(raw, "test block")]
    assert got == items
    return raw


def test_chain_and_records_roundtrip_and_shrink():
    items, parent = [], None
    blob = obj(b"B", b"x" * 2000)
    items.append((framing.T_OBJECT, blob))
    for i in range(50):
        body = canonical_json({"kind": "user", "parent": parent, "payload": {"content": f"m{i}", "file": "\0b" + blob[:32].hex()}, "seq": i + 1})
        o = obj(b"E", body)
        items.append((framing.T_OBJECT, o))
        rec = canonical_json({"s": "chat", "set": {"main": o[:32].hex()}, "old": {"main": parent}, "n": i + 1})
        items.append((framing.T_REF, rec))
        parent = o[:32].hex()
    raw = roundtrip(items)
    assert sum(len(b) for _, b in items) - len(raw) > 50 * (32 + 64 + 64) * 0.9  # names and hashes are gone


def test_bodies_that_look_like_references_are_kept_as_they_are():
    a = obj(b"E", canonical_json({"parent": None, "payload": {"content": "#1"}}))
    tricky = [
        canonical_json({"parent": a[:32].hex(), "payload": {"content": '"#1"'}}),
        canonical_json({"parent": a[:32].hex(), "payload": {"content": "\0#1"}}),
        canonical_json({"parent": a[:32].hex(), "payload": {"x": "#2", "y": a[:32].hex()}}),
    ]
    roundtrip([(framing.T_OBJECT, a)] + [(framing.T_OBJECT, obj(b"E", b)) for b in tricky])


hexes = st.text("0123456789abcdef", min_size=64, max_size=64)
values = st.recursive(
    st.one_of(st.none(), st.integers(), st.text(max_size=20), hexes, st.just("#1"), st.just("\0#2"), st.just('"#3"')),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(values, min_size=1, max_size=8), st.data())
def test_random_blocks_roundtrip(payloads, data):
    items, names = [], []
    for p in payloads:
        ref = data.draw(st.sampled_from(names)) if names and data.draw(st.booleans()) else None
        body = canonical_json({"parent": ref, "payload": p, "blob": "\0b" + ref if ref else None})
        o = obj(b"E", body)
        items.append((framing.T_OBJECT, o))
        names.append(o[:32].hex())
        if data.draw(st.booleans()):
            items.append((framing.T_REF, canonical_json({"set": {"main": data.draw(st.sampled_from(names))}, "p": p})))
    roundtrip(items)


def test_compacted_tape_reads_back_equal(tape_dir):
    t = Tape.open(tape_dir)
    s = t.session("chat")
    for i in range(300):
        s.append("tool_result", {"call_id": f"c{i}", "output": ("same file " * 200) if i % 5 == 0 else f"out {i}"}, delta={"i": i})
    before = [e.to_json() for e in s.log()]
    t.compact(grace="now")
    t.close()
    t = Tape.open(tape_dir)
    assert [e.to_json() for e in t.session("chat").log()] == before
    assert t.fsck()["ok"]
    r = run_cli("--dir", tape_dir, "log", "-s", "chat", "-n", "3", "--json", env={"CTAPE_CACHE_DIR": str(tape_dir.parent / "fresh-cache")})
    assert [json.loads(x) for x in r.stdout.splitlines()] == before[:3]


def test_a_hash_followed_by_a_digit_in_text():
    """Found in review: a blob reference written out in text, followed by a digit."""
    blob = obj(b"B", b"y" * 3000)
    text = "\\u0000b" + blob[:32].hex() + "7 and more"
    e = obj(b"E", canonical_json({"parent": None, "payload": {"content": text}}))
    roundtrip([(framing.T_OBJECT, blob), (framing.T_OBJECT, e)])


def test_review_repro_survives_compact(tape_dir):
    t = Tape.open(tape_dir)
    s = t.session("chat")
    blob = "z" * 2000
    s.append("tool_result", {"call_id": "c", "output": blob})
    from ctape.model.canonical import object_hash as oh

    h = oh(b"blob", blob.encode())
    msg = s.append("user", {"content": "\\u0000b" + h + "5"})
    t.compact(expire="now", grace="now")
    t.close()
    t = Tape.open(tape_dir)
    assert t.get("chat").payload == msg.payload
    assert t.fsck()["ok"]


# -- references the writer names (packing._encode_known): no decode check at write time,
# so decoding must give back exactly the body for any bytes around the references

def _pieces(names):
    quoted = [b'"' + n.encode() + b'"' for n in names]
    blobs = [b"\\u0000b" + n.encode() for n in names]
    raw = [n.encode() for n in names]
    return st.sampled_from(quoted + blobs + raw + [b'"', b"#", b"1", b"\\", b"\\u0000", b"b", b";", b'"#1"'])


def _known_roundtrip(bodies_and_refs):
    items, names = [], []
    for make_body, refs in bodies_and_refs:
        o = obj(b"E", make_body(names))
        items.append((framing.T_OBJECT, o, refs(names)))
        names.append(o[:32].hex())
    raw = encode_block(items)
    assert [(r.type, r.body) for r in decode_block(raw, "test block")] == [(t, b) for t, b, _ in items]


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_known_references_decode_exactly_whatever_surrounds_them(data):
    items, names = [], []
    for i in range(data.draw(st.integers(1, 5))):
        if names:
            body = b"".join(data.draw(st.lists(_pieces(names), max_size=8)))
            refs = data.draw(st.lists(st.sampled_from(names + ["f" * 64]), max_size=4))
        else:
            body, refs = b'{"seq":%d}' % i, []
        o = obj(b"E", body)
        items.append((framing.T_OBJECT, o, refs))
        names.append(o[:32].hex())
    raw = encode_block(items)
    got = [(r.type, r.body) for r in decode_block(raw, "test block")]
    assert got == [(t, b) for t, b, _ in items]


def test_known_references_that_touch_or_sit_beside_look_alikes():
    first = (lambda names: b"a", lambda names: [])
    second = (lambda names: b"b", lambda names: [])
    cases = [
        lambda n: b'"' + n[0] + b'"' + n[1] + b'"',  # two references sharing a quote
        lambda n: b'"' + n[0] + b'""#1"',  # a reference beside text that decodes
        lambda n: b'"' + n[0] + b'"#1"',  # the closing quote would start one
        lambda n: b"\\u0000b" + n[0] + b'"' + n[1] + b'"',
        lambda n: b"\\\\u0000b" + n[1] + b";1",
    ]
    for case in cases:
        body = lambda names, case=case: case([x.encode() for x in names])  # noqa: E731
        _known_roundtrip([first, second, (body, lambda names: list(names))])


def test_known_references_are_replaced():
    a = obj(b"E", b'{"seq":1}')
    b = obj(b"E", canonical_json({"parent": a[:32].hex(), "payload": {"x": 1}}))
    rec = canonical_json({"set": {"main": b[:32].hex()}, "old": {"main": a[:32].hex()}})
    items = [(framing.T_OBJECT, a, []), (framing.T_OBJECT, b, [a[:32].hex()]), (framing.T_REF, rec, [b[:32].hex(), a[:32].hex()])]
    raw = encode_block(items)
    assert a[:32].hex().encode() not in raw and b[:32].hex().encode() not in raw
    assert [(r.type, r.body) for r in decode_block(raw, "test block")] == [(t, body) for t, body, _ in items]


def test_varint_is_leb128_at_every_width():
    from ctape.store.packing import _read_varint, _varint

    def leb128(n):
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | 0x80 if n else byte)
            if not n:
                return bytes(out)

    for n in [*range(0, 300), *range(0x3F00, 0x4100), 2**21 - 1, 2**21, 2**28 + 5, 2**35 - 1]:
        assert _varint(n) == leb128(n), n
        assert _read_varint(_varint(n), 0) == (n, len(leb128(n)))
