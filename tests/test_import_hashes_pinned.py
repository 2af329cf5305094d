"""Imports and appends give the very entries they always gave: the hashes of a fixed set of
real transcripts imported, and of appends whose values exercise the blob and escape rules,
are pinned here (computed by ctape before the import path was made faster, issue 25). A
change to the canonical bytes, the blob rule or an importer's mapping shows up as a
different digest; docs/format.md is a contract with tapes that already exist.
"""

import os
import shutil

import pytest
from blake3 import blake3

from ctape import Tape
from ctape.formats import import_files
from ctape.formats._common import entries_for_export
from ctape.model.canonical import BLOB_MIN, canonical_json, entry_body, externalize, object_hash

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "transcripts")


def fixture_files(folder: str) -> list[str]:
    d = os.path.join(FIXTURES, folder)
    return [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith((".jsonl", ".traj"))]


def digest(tape) -> tuple[int, str]:
    """(number of entries, blake3 of every entry hash of every session, sorted)."""
    hashes = sorted(e.hash for name in tape.session_names() for e in entries_for_export(tape, name))
    return len(hashes), blake3("\n".join(hashes).encode()).hexdigest()


PINNED_IMPORTS = {
    "claude-code": (877, "fdd31c36183ce672627fbc8728b0b6059cc2251cf7524b63edda00530533c8d6"),
    "codex": (3167, "537e90bd3da3bcc2f8bd959ac3e1fedd83db435afb5f75735f470beb68e65218"),
    # files dated 2023-11-14. Changed on purpose on 2026-12-05 (was 372 entries, 7ef2a97f...):
    # a container's fields besides its list moved from its first entry to a closing one
    # (formats/openai.py), so that a .traj rewritten as it grows keeps its entries
    "openai": (376, "68103359533b5899168bf0e35e667b085b6f218762cb1e6f83fe3508ba350657"),
}
FOLDERS = {"claude-code": "claude-code", "codex": "codex-rollout", "openai": "openai-chat"}


@pytest.mark.parametrize("fmt", sorted(PINNED_IMPORTS))
def test_imports_of_the_fixture_transcripts_give_the_pinned_entries(tmp_path, fmt):
    # a record without a time takes its file's modification time: fixed here, since a fresh
    # clone gives every fixture the time of the checkout
    copies = tmp_path / "files"
    copies.mkdir()
    with Tape.init(tmp_path / "tape") as t:
        for path in fixture_files(FOLDERS[fmt]):
            copy = copies / os.path.basename(path)
            shutil.copyfile(path, copy)
            os.utime(copy, (1_700_000_000, 1_700_000_000))
            import_files(t, fmt, [str(copy)], None)
        assert digest(t) == PINNED_IMPORTS[fmt]


LONG = "x" * BLOB_MIN


def tricky_values() -> list:
    """Payloads around the blob and escape rules: long strings at any depth, as keys, twice,
    several different ones in an order that differs from the sorted one, escapes and
    control characters that make a short string long once encoded, characters outside
    the BMP, NUL-prefixed strings and things that look like blob references."""
    quote = 'say "hi" \\ back\\' * 80  # 1,360 characters, many escapes
    controls = "\x01" * (BLOB_MIN // 2)  # 512 characters, 3,072 once encoded
    return [
        {"content": "short"},
        {"content": LONG},
        {"content": LONG[:-1]},
        {"content": "é" * BLOB_MIN, "z": "𝄞" * BLOB_MIN, "a": LONG},
        {"content": "hi", "nested": {"b": [LONG, {"deep": quote}], "a": quote + "!"}, LONG: "a long key"},
        {"content": "hi", "controls": controls, "more": controls * 2, "q": quote},
        {"content": "\0b" + "0" * 64, "x": "\0", "y": "\0" + LONG, "w": ["\0\0", LONG + "\0"]},
        {"content": [{"type": "text", "text": "y" * 5000}, {"type": "text", "text": "y" * 5000}, {"type": "image", "data": "QUJD" * 2000}]},
        {"content": "tail\\", "k": "\\" * BLOB_MIN, "j": '"' * BLOB_MIN, "n": "\n" * (BLOB_MIN - 1)},
    ]


PINNED_APPENDS = "558876049744734c6fd207f46df6fd7816f07d79976811ca9d62b634b1d8647b"


def test_appends_of_tricky_values_give_the_pinned_entries(tmp_path):
    with Tape.init(tmp_path / "tape") as t:
        s = t.session("s")
        hashes = []
        for i, payload in enumerate(tricky_values()):
            meta = {"n": i, "copy": payload, "z": [LONG + str(i)]}
            hashes.append(s.append("tool_result" if i % 2 else "user", {**payload, "call_id": "c"} if i % 2 else payload,
                                   meta=meta, delta={"d": payload} if i % 3 == 0 else None, time=f"2026-01-02T03:04:{i:02d}Z").hash)
        got = [t.get(h) for h in hashes]
        assert [(e.payload.get("content"), e.meta["copy"]) for e in got] == [(p["content"], p) for p in tricky_values()]
        assert blake3("\n".join(hashes).encode()).hexdigest() == PINNED_APPENDS


@pytest.mark.parametrize("i", range(len(tricky_values())))
def test_entry_body_is_the_documented_body_with_blobs_put_in_walk_order(i):
    """The entry's bytes are exactly canonical JSON of the externalized body, and the blobs
    are put in the order externalize walks the values (delta, meta, payload; keys in
    insertion order), however entry_body finds them."""
    payload = tricky_values()[i]
    meta = {"copy": dict(reversed(list(payload.items()))), "line": i}
    delta = {"d": [payload]} if i % 2 else None
    t = "2026-01-02T03:04:05.000000Z"
    got, want = [], []
    body = entry_body("user", payload, meta, delta, "ab" * 32, 7, t, lambda b: got.append(b) or object_hash(b"blob", b))

    def put(b):
        want.append(b)
        return object_hash(b"blob", b)

    ext = {k: externalize(v, put) for k, v in (("delta", delta), ("meta", meta), ("payload", payload))}
    assert body == canonical_json({**ext, "kind": "user", "parent": "ab" * 32, "seq": 7, "time": t})
    assert got == want
