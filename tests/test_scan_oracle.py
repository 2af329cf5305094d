"""scan runs its patterns over many strings at once and skips the strings a pattern cannot
match in (ctape/ops/detectors.py, Gate); its findings must be exactly those of the plain scan
it replaces: every pattern and the entropy check run on every string alone. These tests
hold the two side by side on tapes with secrets of every kind planted at string edges,
next to other strings, in large values, in meta and delta, under id-like keys, in text
that is not ASCII, and in real transcripts."""

from __future__ import annotations

import glob
import os
import random
import string

import pytest

from ctape import Tape
from ctape.model import redaction
from ctape.ops import scan as scanmod
from ctape.ops.scan import Detectors, Finding, _high_entropy, _id_key, _strings, preview

FIXTURES = "/work/shared/fixtures/transcripts"
ALNUM = string.ascii_letters + string.digits


def _r(rnd: random.Random, n: int, chars: str = ALNUM) -> str:
    return "".join(rnd.choice(chars) for _ in range(n))


def secrets(rnd: random.Random) -> list[str]:
    """One sample of every kind scan knows (detect-secrets' plugins, ctape's own, entropy)."""
    low = string.ascii_lowercase + string.digits
    tok = ALNUM + "_-"
    return [
        "AKIA" + _r(rnd, 16, string.ascii_uppercase + string.digits),
        f'aws_secret_access_key = "{_r(rnd, 40, ALNUM + "/+")}"',
        "AccountKey=" + _r(rnd, 88, ALNUM + "+/="),
        f"https://deploy:{_r(rnd, 14)}@git.example.com/x.git",
        rnd.choice("MNO") + _r(rnd, 23, tok) + "." + _r(rnd, 6, tok) + "." + _r(rnd, 27, tok),
        "ghp_" + _r(rnd, 36),
        "glpat-" + _r(rnd, 20, tok),
        "eyJhbGciOiJIUzI1NiJ9." + _r(rnd, 30, tok) + "." + _r(rnd, 20, tok),
        _r(rnd, 32, low) + "-us" + str(rnd.randint(1, 20)),
        "//registry.npmjs.org/:_authToken=npm_" + _r(rnd, 36),
        "sk-proj-" + _r(rnd, 20) + "T3BlbkFJ" + _r(rnd, 20),
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE" + _r(rnd, 60) + "\n-----END RSA PRIVATE KEY-----",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "pypi-AgEIcHlwaS5vcmc" + _r(rnd, 80, tok),
        "SG." + _r(rnd, 22, tok) + "." + _r(rnd, 43, tok),
        "xoxb-" + str(rnd.randint(10**9, 10**10)) + "-" + _r(rnd, 24, low),
        "XOXP-1234-" + _r(rnd, 10, low),
        "https://hooks.slack.com/services/T" + _r(rnd, 8) + "/B" + _r(rnd, 8) + "/" + _r(rnd, 24),
        "sq0csp-" + _r(rnd, 43, tok),
        "sk_live_" + _r(rnd, 24),
        "rk_live_" + _r(rnd, 24),
        str(rnd.randint(10**8, 10**9)) + ":" + _r(rnd, 35, tok),
        "AC" + _r(rnd, 32, low),
        "SK" + _r(rnd, 32, low),
        "sk-ant-api03-" + _r(rnd, 48, tok),
        _r(rnd, 40, ALNUM + "+/") + "==",  # high entropy
        "ſk_live_" + _r(rnd, 24) + " awſ_key='" + _r(rnd, 40) + "'",  # the long s: a case rule's way into ASCII
        "codename bluefalcon-" + str(rnd.randint(1, 99)),
    ]


FILLER = [
    "", " ", "\n", "\n\n", "ok", "all tests passed", "def f(x):\n    return x + 1\n",
    "see https://example.com/path?q=1 and /usr/lib/python3.11/site-packages",
    "commit 3f2a9c0d1e4b5a6978c0d1e2f3a4b5c6d7e8f9a0", "uuid 550e8400-e29b-41d4-a716-446655440000",
    "café ☕ naïve — ünïcödé 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ١٢٣٤٥٦٧٨٩٠", "aws s3 cp --profile prod key.txt", "GITHUB_TOKEN=",
    "https://user@host", "/:_authToken=", "\\u0000 \0 nul", "x" * 30, "A" * 40 + "B" * 30,
]


def _text(rnd: random.Random, pool: list[str], real: list[str]) -> str:
    parts = []
    for _ in range(rnd.randint(1, 4)):
        r = rnd.random()
        parts.append(rnd.choice(pool) if r < 0.35 else rnd.choice(FILLER) if r < 0.7 else rnd.choice(real) if real else "")
    sep = rnd.choice(["", " ", "\n", "\n\n", "'", '"', "=", ":", "\0"])
    return sep.join(parts)


def _real_snippets(limit: int = 400) -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(FIXTURES, "*", "*.jsonl")))[:4]:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if len(out) >= limit:
                    return out
                start = len(line) // 3
                out.append(line[start:start + 300])
    return out


def planted_tape(path: str, cache: str, entries: int, seed: int) -> Tape:
    rnd = random.Random(seed)
    real = _real_snippets()
    t = Tape.init(path, cache_dir=cache)
    for k in range(entries):
        pool = secrets(rnd)
        s = t.session(f"s{k % 3}")
        big = _text(rnd, pool, real) + " filler " * rnd.randint(150, 400) + _text(rnd, pool, real)  # a large value
        payload = {
            "call_id": f"c{k}",
            "content": _text(rnd, pool, real),
            "parts": [_text(rnd, pool, real) for _ in range(rnd.randint(0, 3))],
            "request_id": _text(rnd, pool, real),  # an id-like key: no entropy check
            "signature": rnd.choice(pool),
            "args": {"command": _text(rnd, pool, real), "url": _text(rnd, pool, real)},
        }
        if rnd.random() < 0.3:
            payload["output"] = big
        if rnd.random() < 0.1:
            payload["again"] = payload["content"]  # the same string twice in one entry
        if rnd.random() < 0.1:
            payload["escaped"] = "\0" + _text(rnd, pool, real)  # a leading NUL is stored escaped
        meta = {"note": _text(rnd, pool, real)} if rnd.random() < 0.5 else None
        delta = [_text(rnd, pool, real), {"piece": _text(rnd, pool, real)}] if rnd.random() < 0.3 else None
        s.append(rnd.choice(["user", "assistant", "tool_result"]), payload, meta=meta, delta=delta)
    return t


def reference(tape: Tape, det: Detectors) -> list[tuple]:
    """Every pattern and the entropy check on every string alone: the plain scan."""
    red = tape.redactions()
    out = []
    for name in tape.session_names():
        st = tape.session(name).refs()
        stack = [x for x in list(st.branches.values()) + list(st.tags.values()) + [st.head_hash] if x]
        seen: set[str] = set()
        while stack:
            h = stack.pop()
            if h in seen or not tape.store.has_object(h):
                continue
            seen.add(h)
            raw = scanmod.decode_entry(h, tape.store.get_object(h)[1])
            if raw["parent"]:
                stack.append(raw["parent"])
            if h in red:
                raw = redaction.apply(raw, red[h])
            inline, blobs = [], []
            for root in redaction.ROOTS:
                for steps, key, s in _strings(raw[root], [root], None):
                    if s[:2] == "\0b" and len(s) == 66:
                        if s[2:] not in red:
                            blobs.append((steps, key, tape.store.get_object(s[2:])[1].decode("utf-8", "replace")))
                    else:
                        inline.append((steps, key, s[1:] if s[:1] == "\0" else s))
            for steps, key, text in inline + blobs:
                finds = []
                for kind, rx in det.patterns:
                    scanmod._finds(kind, rx, text, finds)
                if det.entropy and not _id_key(key):
                    finds += [(a, b, "high-entropy-string") for a, b in _high_entropy(text)]
                spans = scanmod._merge(finds)
                kinds = set()
                for sp in spans:  # a finding per find, named by its place after the first of its kind
                    at = str(sp[0]) if sp[2] in kinds else ""
                    kinds.add(sp[2])
                    out.append(Finding(name, h, redaction.format_path(steps), sp[2], preview(text, spans, sp), at=at).to_json())
    return sorted((f["hash"], f["path"], f["kind"], f["preview"], f["id"]) for f in out)


def _found(findings) -> list[tuple]:
    return sorted((f.hash, f.path, f.kind, f.preview, f.id) for f in findings)


@pytest.mark.parametrize("seed", [1, 2])
def test_scan_finds_exactly_what_the_plain_scan_finds(tmp_path, seed):
    t = planted_tape(str(tmp_path / "t"), str(tmp_path / "cache"), 120, seed)
    scanmod.add_pattern(t, r"bluefalcon-\d+", "codename")
    scanmod.add_pattern(t, r"(?i)FILLER\s+FILLER$", "tail")  # an anchor and a case rule
    det = Detectors(scanmod.load_settings(t)["patterns"])
    want = reference(t, det)
    kinds = {k for _, _, k, _, _ in want}
    assert len(kinds) >= 20, kinds  # the planted secrets reached most detectors
    got = scanmod.scan(t)
    assert _found(got["findings"]) == want
    again = scanmod.scan(t)  # from the cache: the same
    assert again["cached"] > 0 and _found(again["findings"]) == want
    t.close()


def test_push_check_finds_what_scan_finds(tmp_path):
    t = planted_tape(str(tmp_path / "t"), str(tmp_path / "cache"), 40, 3)
    det = Detectors(scanmod.load_settings(t)["patterns"])
    want = reference(t, det)
    items = []
    for name in t.session_names():
        items += [(name, e.hash) for e in t.session(name).log()]
    assert _found(scanmod.scan_entries(t, items)) == want
    t.close()


def _push_items(t: Tape, blobs: dict):
    """What push's check gives the scan: every entry with its record, as the files hold them."""
    from ctape.store import framing
    from ctape.store.files import TYPE_BLOB, TYPE_ENTRY

    for s in t.store.sessions():
        for rel in sorted(t.store.list_files(s)):
            for rec in t.store.scan_file(rel):
                if isinstance(rec, framing.Record) and rec.type == framing.T_OBJECT and len(rec.body) > 33:
                    if rec.body[32] == TYPE_BLOB:
                        blobs[rec.body[:32].hex()] = rec.body
                    elif rec.body[32] == TYPE_ENTRY:
                        yield s, rec.body[:32].hex(), rec.body


@pytest.mark.parametrize("seed", [5, 6])
def test_push_check_with_records_finds_what_scan_finds(tmp_path, seed):
    """push hands the scan each entry's record: entries whose bytes (and their large
    values' bytes) hold nothing a detector could find are not decoded at all."""
    t = planted_tape(str(tmp_path / "t"), str(tmp_path / "cache"), 80, seed)
    s = t.session("clean")
    for k in range(60):  # entries the byte check passes over, some with large values
        s.append("user", {"content": f"step {k}: all fine " + ("and more " * (200 if k % 3 == 0 else 1)), "hash": "ab" * 32,
                          "parent": "cd" * 32, "list": ["ef" * 32, "x"]})
    det = Detectors(scanmod.load_settings(t)["patterns"])
    assert det.can_prefilter()
    want = reference(t, det)
    blobs: dict = {}
    assert _found(scanmod.scan_entries(t, _push_items(t, blobs), blobs)) == want
    t.close()


def test_a_string_that_looks_like_a_large_value_reference_is_still_read(tmp_path):
    """Only a whole JSON string value that is a reference is blanked by the byte check:
    a string that starts with NUL, b and a large value's hash is text to match."""
    from ctape.model.canonical import object_hash

    t = Tape.init(str(tmp_path / "t"), cache_dir=str(tmp_path / "cache"))
    big = "plain words " * 200
    s = t.session("s")
    s.append("user", {"content": big})  # a large value: stored as a blob
    h = object_hash(b"blob", big.encode())
    s.append("user", {"content": "\0b" + h + "zz", "list": ["\0b" + h + "zz"]})
    s.append("user", {"content": 'x"\0b' + h})  # in JSON: `"x\"\u0000b<hash>"`, the quote before it escaped
    scanmod.add_pattern(t, r"[0-9a-f]{64}zz", "hexzz")
    scanmod.add_pattern(t, r"x.{2}[0-9a-f]{64}", "xhex")
    det = Detectors(scanmod.load_settings(t)["patterns"])
    assert det.can_prefilter()
    want = reference(t, det)
    assert sorted(k for _, _, k, _, _ in want) == ["hexzz", "hexzz", "xhex"]
    blobs: dict = {}
    items = list(_push_items(t, blobs))
    assert h in blobs
    assert _found(scanmod.scan_entries(t, items, blobs)) == want
    t.close()


def test_the_byte_check_never_passes_over_a_finding():
    """Detectors.clean_many on an entry's JSON and its large values, against spans()."""
    import json as _json

    rnd = random.Random(11)
    det = Detectors()
    for _ in range(400):
        pool = secrets(rnd)
        text = _text(rnd, pool, [])
        body = _json.dumps({"delta": None, "meta": {"k": text}, "parent": "ab" * 32, "payload": {"content": text}},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        masked, refs = scanmod._mask_json(body)
        assert refs == []
        if det.clean_many([masked])[0]:
            assert det.spans(text) == [], text
        if det.clean_many([text.encode("utf-8", "surrogatepass")])[0]:
            assert det.spans(text) == [], text


def test_batches_and_rounds_change_nothing(tmp_path, monkeypatch):
    """Small rounds (many batches, large values split across them) find the same."""
    t = planted_tape(str(tmp_path / "t"), str(tmp_path / "cache"), 60, 4)
    det = Detectors(scanmod.load_settings(t)["patterns"])
    want = reference(t, det)
    monkeypatch.setattr(scanmod.Scanner, "BATCH_ENTRIES", 7)
    monkeypatch.setattr(scanmod.Scanner, "BATCH_CHARS", 3000)
    assert _found(scanmod.scan(t, detectors=det)["findings"]) == want
    t.close()


def test_gates_never_skip_a_string_a_pattern_matches():
    """Each detector and a few user patterns, on strings built around their matches."""
    rnd = random.Random(7)
    user = [{"kind": "u1", "regex": r"corp-[0-9]{8}"}, {"kind": "u2", "regex": r"^\s*password\s*=\s*\S+"},
            {"kind": "u3", "regex": r"(?i)secret(?:_key)?\s*[:=]\s*[A-Z0-9]{12,}"}, {"kind": "u4", "regex": r"(a|b)+c{3,}\d"},
            {"kind": "u5", "regex": r"[^\s]{30,}"}, {"kind": "u6", "regex": r"(?:x|)tok\b"}]
    det = Detectors(user)
    texts = []
    for _ in range(600):
        pool = secrets(rnd) + ["corp-12345678", "  password = hunter2", "SeCrEt_KEY: ABCDEF123456XYZ", "ababccc7", "tok", "xtok"]
        texts.append(_text(rnd, pool, []))
    flags = [rnd.random() < 0.8 for _ in texts]
    many = det.spans_many(texts, flags)
    for text, flag, got in zip(texts, flags, many):
        assert got == det.spans(text, None if flag else "id"), text


try:
    from hypothesis import given, settings, strategies as st

    _alphabet = st.sampled_from(list("aAzZ09+/=_-.:@ \n\0") + ["ſ", "K", "é", "١", "ghp_", "-us1", "xox", "AKIA", "sk-ant-", "eyJ", "://", "AccountKey="])

    @settings(max_examples=150, deadline=None)
    @given(st.lists(st.lists(_alphabet, max_size=80).map("".join), min_size=1, max_size=8))
    def test_gates_on_random_strings(texts):
        det = Detectors([{"kind": "u", "regex": r"(?i)ak[a-z]{2}"}])
        for text, got in zip(texts, det.spans_many(texts, [True] * len(texts))):
            assert got == det.spans(text), text
except ImportError:  # pragma: no cover - hypothesis is a test extra
    pass
