"""One schema for every record read from disk (issue 17): ctape/schema.py.

Hand-made records that pass every checksum but hold wrong types, counters of 2**70, an
entry without `seq`, invalid UTF-8: each validator names the problem, and an entry read
through the tape is CorruptObject naming it, never a KeyError or TypeError deeper in.
"""

import copy
import json
import os

import pytest

from conftest import run_cli
from ctape import Tape
from ctape.store import framing
from ctape.model import schema
from ctape.model.canonical import MAX_DEPTH, canonical_json, object_hash
from ctape.errors import CorruptObject
from ctape.store.files import TYPE_ENTRY
from ctape.history import reflog

H = "94d347d2cf21c02e5e94b22aa7a7e0f4ee4924be725b7ef30afb69f4ab17d58b"
H2 = "f72df75d0e59ed3da1ac4cba34cbe6dff066a604ea35a7c518bfcf65d1055060"
REF = {"lc": 2, "n": 2, "old": {"main": H}, "op": "append", "s": "demo", "seen": {"32b9c89e8fbd": 4},
       "set": {"main": H2, "HEAD": "@main"}, "t": "2026-11-29T09:09:00.551311Z", "w": "d4b7837c73d5"}
PARTIAL = {"base": H, "off": 0, "s": "chat", "stream": "0123456789abcdef", "t": "2026-11-29T09:09:00.551311Z", "text": "The failing "}
ENTRY = {"delta": None, "kind": "user", "meta": {}, "parent": None, "payload": {"content": "Hello"}, "seq": 1, "time": "2026-01-02T03:04:05.000000Z"}
SEG_HEADER = {"format": "ctape-segment", "session": "chat", "version": 1, "writer": "d4b7837c73d5"}
PACK_HEADER = {"format": "ctape-pack", "session": "chat", "version": 1}


def with_(base, /, **changes):
    rec = copy.deepcopy(base)
    for k, v in changes.items():
        if v is KeyError:
            rec.pop(k, None)
        else:
            rec[k] = v
    return rec


# -- ref records ---------------------------------------------------------------------------------------


def test_valid_ref_records_pass():
    assert schema.ref_record_problem(REF) is None
    assert schema.ref_record_problem(REF, session="demo") is None
    # what ctape and its integrations write: append without old/seen, HEAD null, deletes, extras
    assert schema.ref_record_problem(with_(REF, old=KeyError, seen=KeyError)) is None
    assert schema.ref_record_problem(with_(REF, set={"HEAD": None, "main": None}, old=None)) is None
    assert schema.ref_record_problem(with_(REF, stream="0123456789abcdef", ref="chat~1", source="claude-code", popped=H)) is None
    assert schema.ref_record_problem(with_(REF, set={"main.conflict-32b9c89e": H, "stream-01234567": H2, "HEAD": H})) is None
    assert schema.ref_record_problem(with_(REF, w="oldformat01", n=0, lc=0)) is None


@pytest.mark.parametrize("change, words", [
    ({"s": 5}, "session"), ({"s": "../x"}, "session"), ({"s": ["a"]}, "session"), ({"s": KeyError}, "session"),
    ({"w": None}, "writer"), ({"w": "UPPER"}, "writer"), ({"w": "a/b/c/d"}, "writer"),
    ({"n": "2"}, "`n`"), ({"n": 2 ** 70}, "`n`"), ({"n": -1}, "`n`"), ({"n": True}, "`n`"), ({"n": 2.0}, "`n`"), ({"n": KeyError}, "`n`"),
    ({"lc": 2 ** 63}, "`lc`"), ({"lc": None}, "`lc`"),
    ({"t": 1}, "time"), ({"t": "yesterday"}, "time"), ({"t": KeyError}, "time"),
    ({"op": 3}, "op"), ({"op": KeyError}, "op"),
    ({"set": KeyError}, "set"), ({"set": []}, "set"), ({"set": {"main": "zz"}}, "value"), ({"set": {"main": "@alt"}}, "value"),
    ({"set": {"main": 5}}, "value"), ({"set": {"HEAD": "@../x"}}, "value"), ({"set": {"../x": H}}, "invalid ref"),
    ({"set": {"HEAD": H.upper()}}, "value"), ({"old": {"main": {"x": 1}}}, "old"), ({"old": "x"}, "old"),
    ({"seen": [1]}, "seen"), ({"seen": {"32b9c89e8fbd": 2 ** 70}}, "seen"), ({"seen": {"X": 1}}, "seen"), ({"seen": {"32b9c89e8fbd": "4"}}, "seen"),
    ({"stream": 5}, "stream"), ({"stream": "a/b"}, "stream"), ({"ref": 5}, "ref"), ({"source": {}}, "source"),
])
def test_hostile_ref_records_are_named(change, words):
    why = schema.ref_record_problem(with_(REF, **change))
    assert why is not None and words in why and "\n" not in why


def test_ref_record_of_another_session():
    assert "session" in schema.ref_record_problem(REF, session="chat")


@pytest.mark.parametrize("body", [
    b"", b"[]", b"null", b'"x"', b"\xff\xfe{}", b'{"s": NaN}', b'{"n": Infinity}', b'{"n": 1e400}',
    b"[" * 100_000 + b"]" * 100_000, b'{"n": 1' + b"0" * 5000 + b"}", canonical_json(REF)[:-1], canonical_json(REF) + b"x",
])
def test_undecodable_ref_record_bodies_are_problems_not_exceptions(body):
    rec, why = schema.read_ref_record(body)
    assert rec is None and why


def test_read_ref_record_round_trip():
    rec, why = schema.read_ref_record(canonical_json(REF), session="demo")
    assert why is None and rec == REF


# -- partial records ---------------------------------------------------------------------------------------


def test_partial_records():
    assert schema.partial_record_problem(PARTIAL) is None
    assert schema.partial_record_problem(with_(PARTIAL, base=None)) is None
    for change in ({"s": None}, {"stream": 7}, {"off": -1}, {"off": 2 ** 70}, {"off": "0"}, {"text": None},
                   {"text": KeyError}, {"base": "zz"}, {"t": 5}, {"stream": KeyError}):
        assert schema.partial_record_problem(with_(PARTIAL, **change)), change
    assert schema.partial_record_problem([PARTIAL])
    assert schema.partial_record_problem(PARTIAL, session="other")
    assert schema.read_partial_record(b"\xff")[1]
    assert schema.read_partial_record(canonical_json(PARTIAL))[0] == PARTIAL


# -- file headers ------------------------------------------------------------------------------------------


def test_file_headers():
    assert schema.header_problem(SEG_HEADER) is None
    assert schema.header_problem(SEG_HEADER, "ctape-segment", "chat", "d4b7837c73d5") is None
    assert schema.header_problem(PACK_HEADER, "ctape-pack", "chat") is None
    assert "file name" in schema.header_problem(SEG_HEADER, "ctape-pack")
    assert "writer" in schema.header_problem(SEG_HEADER, writer="aaaaaaaaaaaa")
    assert "session" in schema.header_problem(SEG_HEADER, session="other")
    assert "newer" in schema.header_problem(with_(SEG_HEADER, version=2))
    for change in ({"format": "x"}, {"format": None}, {"version": "1"}, {"version": 0}, {"version": True},
                   {"session": "a/b"}, {"session": KeyError}, {"writer": KeyError}, {"writer": 12}):
        assert schema.header_problem(with_(SEG_HEADER, **change)), change
    assert schema.header_problem("ctape-segment")
    assert schema.read_header(b"{")[1]


# -- entry bodies ------------------------------------------------------------------------------------------


def test_valid_entry_bodies():
    assert schema.entry_body_problem(ENTRY) is None
    assert schema.entry_body_problem(with_(ENTRY, seq=2, parent=H)) is None
    assert schema.entry_body_problem(with_(ENTRY, time="999-01-01T00:00:00.000000Z")) is None  # older ctape, year < 1000
    assert schema.entry_body_problem(with_(ENTRY, payload="not an object", delta=[1])) is None


@pytest.mark.parametrize("change, words", [
    ({"seq": KeyError}, "no seq"), ({"kind": KeyError}, "no kind"), ({"extra": 1}, "unknown keys"),
    ({"kind": "wizard"}, "kind"), ({"kind": ["user"]}, "kind"), ({"kind": "tool-call"}, "kind"),
    ({"seq": 0}, "seq"), ({"seq": 2 ** 70}, "seq"), ({"seq": "1"}, "seq"), ({"seq": True}, "seq"), ({"seq": 1.0}, "seq"),
    ({"parent": H}, "seq 1 and a parent"), ({"seq": 2}, "no parent"), ({"seq": 2, "parent": "zz"}, "no parent"),
    ({"time": "2026-01-02T03:04:05Z"}, "time"), ({"time": 5}, "time"), ({"time": "+12026-01-02T03:04:05.000000Z"}, "time"),
    ({"meta": None}, "meta"), ({"meta": []}, "meta"),
    ({"payload": {"x": "\0b" + "z" * 64}}, "blob reference"),
])
def test_hostile_entry_bodies_are_named(change, words):
    why = schema.entry_body_problem(with_(ENTRY, **change))
    assert why is not None and words in why, why


def test_entry_nesting_is_held_to_the_limit():
    deep = {"content": "x"}
    v = "leaf"
    for _ in range(MAX_DEPTH):
        v = [v]
    ok = with_(ENTRY, payload={"content": "x", "v": v[0]})
    assert schema.entry_body_problem(ok, canonical_json(ok)) is None
    bad = with_(ENTRY, payload={"content": "x", "v": v})
    assert "nested" in schema.entry_body_problem(bad, canonical_json(bad))
    assert "nested" in schema.entry_body_problem(bad)
    del deep


@pytest.mark.parametrize("body", [b"\xff\xfe", b"{", b"[]", b"[" * 50_000 + b"]" * 50_000, b'{"seq": NaN}', b'{"x": 1e999}'])
def test_decode_entry_raises_corrupt_object_naming_it(body):
    with pytest.raises(CorruptObject, match=H):
        schema.decode_entry(H, body)


# -- through the tape: hand-made records with valid checksums and hashes ------------------------------------------


def plant(tape_dir, session, entry_bodies, head):
    """A segment of a hand-made writer in `session`: the entries as O records, then a ref
    record pointing main (and HEAD) at `head`. Every checksum and hash is right."""
    folder = os.path.join(tape_dir, "sessions", session)
    os.makedirs(folder, exist_ok=True)
    out = [framing.frame(framing.T_HEADER, canonical_json({"format": "ctape-segment", "session": session, "version": 1, "writer": "handmade0001"}))]
    names = []
    for body in entry_bodies:
        h = object_hash(b"entry", body)
        names.append(h)
        out.append(framing.frame(framing.T_OBJECT, bytes.fromhex(h) + bytes((TYPE_ENTRY, 0)) + body))
    target = names[head] if isinstance(head, int) else head
    rec = {"s": session, "w": "handmade0001", "n": 1, "lc": 1, "t": "2026-01-01T00:00:00.000000Z", "op": "append", "set": {"main": target, "HEAD": "@main"}}
    out.append(framing.frame(framing.T_REF, canonical_json(rec)))
    with open(os.path.join(folder, "handmade0001-00000000000000000001.seg"), "wb") as f:
        f.write(b"".join(out))
    return names


HOSTILE_BODIES = {
    "no-seq": json.dumps({k: v for k, v in ENTRY.items() if k != "seq"}).encode(),
    "seq-2**70": canonical_json(with_(ENTRY, seq=2 ** 70, parent=H)),
    "seq-string": canonical_json(with_(ENTRY, seq="1")),
    "kind-list": canonical_json(with_(ENTRY, kind=["user"])),
    "meta-list": canonical_json(with_(ENTRY, meta=[1, 2])),
    "time-int": canonical_json(with_(ENTRY, time=5)),
    "not-utf8": b'{"delta":null,"kind":"user","meta":{},"parent":null,"payload":{"content":"\xff"},"seq":1,"time":"2026-01-02T03:04:05.000000Z"}',
    "array": b"[1,2,3]",
    "deep": canonical_json(with_(ENTRY, delta=json.loads("[" * 600 + "]" * 600))),
    "bad-blob-ref": canonical_json(with_(ENTRY, payload={"content": "\0b" + "g" * 64})),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_hand_made_entry_is_corrupt_object_naming_it(tape_dir, name):
    (h,) = plant(tape_dir, "bad", [HOSTILE_BODIES[name]], 0)
    t = Tape.open(tape_dir)
    with pytest.raises(CorruptObject, match=h):
        t.read_entry(h)
    t.close()
    for cmd in (["log", "-s", "bad"], ["state", "bad"], ["context", "bad"], ["show", h]):
        p = run_cli("--dir", tape_dir, *cmd)
        err = p.stderr.decode("utf-8", "replace")
        assert p.returncode == 1, (cmd, err)
        assert "Traceback" not in err and "internal error" not in err, (cmd, err)
        assert len(err.splitlines()) == 1 and h[:12] in err, (cmd, err)


# -- crashes the fuzz harness found in code outside ctape/schema.py (for the lead) ---------------------------------


def test_compact_skips_a_ref_record_without_n(tape_dir):
    """Found by tests/fuzz (whole tape): a checksum-valid ref record without `n` makes
    `compact --grace now` raise KeyError. A compact may refuse (CtapeError) or drop it."""
    good = canonical_json(ENTRY)
    (h,) = plant(tape_dir, "chat", [good], 0)
    folder = os.path.join(tape_dir, "sessions", "chat")
    seg = os.path.join(folder, os.listdir(folder)[0])
    bad = {"s": "chat", "w": "handmade0001", "lc": 2, "t": "2026-01-01T00:00:01.000000Z", "op": "append", "set": {"main": h}}
    with open(seg, "ab") as f:
        f.write(framing.frame(framing.T_REF, canonical_json(bad)))
    t = Tape.open(tape_dir)
    try:
        t.compact(grace="now")
    except CorruptObject:
        pass  # refusing is an answer too
    finally:
        t.close()


def test_stats_skips_an_entry_that_is_not_json(tape_dir):
    """Found by tests/fuzz (whole tape): an object record of type entry whose (hash-valid)
    body is not JSON makes `Tape.stats()` (`ctape stats`) raise instead of answering."""
    plant(tape_dir, "chat", [canonical_json(ENTRY), b"not json", b"\x00\x00\x00\x7b\xff\xff\xff\xff"], 0)
    t = Tape.open(tape_dir)
    try:
        t.stats()
    finally:
        t.close()


def _ref_body(h, **changes):
    rec = {"s": "chat", "w": "handmade0002", "n": 1, "lc": 5, "t": "2026-01-01T00:00:01.000000Z", "op": "append", "set": {"main": h}}
    rec.update(changes)
    return canonical_json(rec)


# name -> ref record body (given the hash of a valid entry); every one found by tests/fuzz or issue 17
HOSTILE_REF_BODIES = {
    "n-2**70": lambda h: _ref_body(h, n=2 ** 70),
    "lc-2**70": lambda h: _ref_body(h, lc=2 ** 70),
    "lc-null": lambda h: _ref_body(h, lc=None),
    "w-list": lambda h: _ref_body(h, w=["a"]),
    "t-list": lambda h: _ref_body(h, t=[1]),
    "set-list": lambda h: _ref_body(h, set=[h]),
    "set-value-list": lambda h: _ref_body(h, set={"main": [h], "HEAD": "@main"}),
    "set-value-dict": lambda h: _ref_body(h, set={"main": {"x": h}}),
    "head-not-a-hash": lambda h: _ref_body(h, set={"main": h, "HEAD": "zz"}),
    "not-json": lambda h: b"\xb5 not json",
    "a-number": lambda h: b"7",
    "no-n": lambda h: canonical_json({"s": "chat", "w": "handmade0002", "lc": 5, "t": "2026-01-01T00:00:01.000000Z", "op": "append", "set": {"main": h}}),
}


def _calls(t, s):
    from ctape.formats import export_ref

    return [("sessions", t.sessions), ("status", s.status), ("log", lambda: list(s.log())), ("reflog", s.reflog),
            ("export", lambda: list(export_ref(t, "chat", "jsonl"))), ("fsck", t.fsck), ("stats", t.stats),
            ("compact", lambda: t.compact(grace="now"))]


def _crashes(tape_dir):
    from ctape.errors import CtapeError

    t = Tape.open(tape_dir)
    s = t.session("chat")
    crashes = []
    for what, call in _calls(t, s):
        try:
            call()
        except CtapeError:
            pass
        except Exception as e:  # noqa: BLE001 - the point of the test
            crashes.append(f"{what}: {type(e).__name__}")
    t.close()
    return crashes


@pytest.mark.parametrize("name", sorted(HOSTILE_REF_BODIES))
def test_hand_made_ref_record_is_damage_not_a_crash(tape_dir, name):
    """Issue 17 item 8: a checksum-valid ref record with fields of the wrong type or range,
    next to a valid one: every command answers or refuses with a CtapeError (fsck: exit 1)."""
    (h,) = plant(tape_dir, "chat", [canonical_json(ENTRY)], 0)
    folder = os.path.join(tape_dir, "sessions", "chat")
    with open(os.path.join(folder, os.listdir(folder)[0]), "ab") as f:
        f.write(framing.frame(framing.T_REF, HOSTILE_REF_BODIES[name](h)))
    crashes = _crashes(tape_dir)
    assert not crashes, crashes


@pytest.mark.parametrize("body", [b"", b"\x01" * 10, b"\x02" * 33], ids=["empty", "10-bytes", "33-bytes"])
def test_short_object_record_is_damage_not_a_crash(tape_dir, body):
    """Found by tests/fuzz (whole tape): an `O` record too short to hold a hash, type and codec."""
    plant(tape_dir, "chat", [canonical_json(ENTRY)], 0)
    folder = os.path.join(tape_dir, "sessions", "chat")
    with open(os.path.join(folder, os.listdir(folder)[0]), "ab") as f:
        f.write(framing.frame(framing.T_OBJECT, body))
    crashes = _crashes(tape_dir)
    assert not crashes, crashes


def test_object_record_problem():
    good = bytes(32) + b"E\x00" + b"{}"
    assert schema.object_record_problem(good) is None
    assert schema.object_record_problem(bytes(32) + b"B\x01") is None
    assert "shorter" in schema.object_record_problem(b"\x01" * 10)
    assert "type" in schema.object_record_problem(bytes(32) + b"X\x00")
    assert "codec" in schema.object_record_problem(bytes(32) + b"E\x07")


def test_reflog_leaves_out_a_ref_record_of_the_wrong_shape(tape_dir):
    """reflog._read_records decodes through schema.read_ref_record: a record whose set
    value is an object, or of another session, is left out of the ref log. (The index
    does the same: see test_hand_made_ref_record_is_damage_not_a_crash above.)"""
    (h,) = plant(tape_dir, "chat", [canonical_json(ENTRY)], 0)
    rel = os.path.join("sessions", "chat", "handmade0001-00000000000000000001.seg")
    with open(os.path.join(tape_dir, rel), "ab") as f:
        for body in (_ref_body(h, n=2, set={"main": {"x": h}}), _ref_body(h, n=3), canonical_json({**json.loads(_ref_body(h, n=4)), "s": "other"})):
            f.write(framing.frame(framing.T_REF, body))
    t = Tape.open(tape_dir)
    try:
        recs = reflog._read_records(t.session("chat"), [rel])
    finally:
        t.close()
    assert [(r["w"], r["n"]) for r in recs] == [("handmade0001", 1), ("handmade0002", 3)]


# -- crashes the fuzz harness found in the importers (formats/codex.py, another helper's) -----------------------------


@pytest.mark.parametrize("line", [
    {"type": {"x": 1}},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": ["b"]}]},
], ids=["type-object", "text-list"])
def test_codex_import_of_a_hostile_line_is_not_a_crash(tape_dir, tmp_path, line):
    """Found by tests/fuzz (import codex): one mutated line of a real rollout."""
    from ctape.errors import CtapeError
    from ctape.formats import import_files

    head = {"type": "session_meta", "timestamp": "2026-01-01T00:00:00Z", "payload": {"id": "s1", "timestamp": "2026-01-01T00:00:00Z"}}
    src = tmp_path / "rollout.jsonl"
    src.write_text(json.dumps(head) + "\n" + json.dumps(line) + "\n")
    t = Tape.open(tape_dir)
    try:
        import_files(t, "codex", [str(src)], "imp")
    except CtapeError:
        pass
    finally:
        t.close()
