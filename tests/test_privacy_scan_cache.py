"""scan keeps what it found in each entry in this machine's cache (scan.sqlite), so a
second scan, and the scan every push runs, reads only what is new; the cache follows the
detectors, the redactions and the allowed ids, and never holds a secret's bytes."""

from __future__ import annotations

import glob
import os
import uuid

from ctape import Tape
from ctape.ops import scan as scanmod


def _tape(tmp_path, n=40):
    d = tmp_path / "t"
    t = Tape.init(d, cache_dir=str(tmp_path / "cache"))
    s = t.session("s")
    secret = "ghp_" + (uuid.uuid4().hex * 2)[:36]
    for i in range(n):
        s.append("user", {"content": f"step {i}: all fine"})
    s.append("tool_result", {"call_id": "c", "output": f"GITHUB_TOKEN={secret}"})
    s.append("assistant", {"content": "codename bluefalcon-7 is live"})
    return t, secret


def _cache_bytes(tmp_path) -> bytes:
    return b"".join(open(p, "rb").read() for p in glob.glob(str(tmp_path / "cache" / "**" / "scan.sqlite*"), recursive=True))


def test_a_second_scan_reads_nothing_again_and_finds_the_same(tmp_path):
    t, secret = _tape(tmp_path)
    first = scanmod.scan(t)
    assert first["cached"] == 0 and [f.kind for f in first["findings"]] == ["github-token"]
    second = scanmod.scan(t)
    assert second["cached"] == 42 and second["bytes"] == 0
    assert [f.to_json() for f in second["findings"]] == [f.to_json() for f in first["findings"]]
    t.session("s").append("user", {"content": "one more"})
    third = scanmod.scan(t)
    assert third["cached"] == 42 and third["bytes"] > 0 and len(third["findings"]) == 1
    assert _cache_bytes(tmp_path) and secret.encode() not in _cache_bytes(tmp_path) and secret[8:20].encode() not in _cache_bytes(tmp_path)
    t.close()


def test_the_cache_follows_patterns_redactions_and_allowed_ids(tmp_path):
    t, secret = _tape(tmp_path)
    assert len(scanmod.scan(t)["findings"]) == 1
    scanmod.add_pattern(t, r"bluefalcon-\d+", "codename")  # new detectors: everything again
    r = scanmod.scan(t)
    assert r["cached"] == 0 and sorted(f.kind for f in r["findings"]) == ["codename", "github-token"]
    from ctape.ops.redact import redact_scan

    found = {f.kind: f for f in r["findings"]}
    scanmod.allow(t, found["codename"].id)
    r = scanmod.scan(t)
    assert [f.kind for f in r["findings"]] == ["github-token"] and r["allowed"] == 1 and r["cached"] == 42
    redact_scan(t)
    r = scanmod.scan(t)
    assert r["findings"] == [], r["findings"]
    t.close()


def test_a_lost_or_broken_cache_costs_a_full_scan_only(tmp_path):
    t, _ = _tape(tmp_path)
    scanmod.scan(t)
    for p in glob.glob(str(tmp_path / "cache" / "**" / "scan.sqlite*"), recursive=True):
        with open(p, "wb") as f:
            f.write(b"not a database" * 10)
    r = scanmod.scan(t)
    assert len(r["findings"]) == 1
    for p in glob.glob(str(tmp_path / "cache" / "**" / "scan.sqlite*"), recursive=True):
        os.unlink(p)
    r = scanmod.scan(t)
    assert r["cached"] == 0 and len(r["findings"]) == 1
    t.close()


def test_compact_leaves_no_text_of_a_redacted_value_in_the_scan_cache(tmp_path):
    """A value redacted by pattern (no detector found it) may sit in the preview of another
    find in the same entry; after compact the scan cache holds none of it."""
    d = tmp_path / "t"
    t = Tape.init(d, cache_dir=str(tmp_path / "cache"))
    token = "ghp_" + (uuid.uuid4().hex * 2)[:36]
    t.session("s").append("tool_result", {"call_id": "c", "output": f"pw=hunter2xyz token={token}"})
    t.close()
    t = Tape.open(d, cache_dir=str(tmp_path / "cache"))
    r = scanmod.scan(t)
    assert [f.kind for f in r["findings"]] == ["github-token"]
    from ctape.ops.redact import redact_pattern

    redact_pattern(t, "hunter2", ["s"])
    assert b"hunter2xyz" in _cache_bytes(tmp_path)  # the preview of the token's find, until compact
    t.compact()
    assert b"hunter2xyz" not in _cache_bytes(tmp_path)
    t.close()
