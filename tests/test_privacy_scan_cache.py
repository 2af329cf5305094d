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


# -- a scan beside another process ----------------------------------------------------------------
# Two processes scan one tape (a push's check beside `ctape scan`): here two Tape objects, each
# with its own connection to scan.sqlite, and the first scan paused just before it writes its
# rows while the other process does its work. Before, a scan's rows were written whatever had
# happened to the cache since it opened it.

def _paused_scan(tmp_path, meanwhile):
    """Scan in a thread, paused before its rows are written while `meanwhile()` runs."""
    import threading

    ready, go, out = threading.Event(), threading.Event(), {}
    real = scanmod.ScanCache.flush

    def flush(self):
        if threading.current_thread().name == "paused" and self.pending and not ready.is_set():
            ready.set()
            assert go.wait(30)
        return real(self)

    def scan():
        t = Tape.open(tmp_path / "t", cache_dir=str(tmp_path / "cache"))
        out["found"] = scanmod.scan(t)["findings"]
        t.close()

    scanmod.ScanCache.flush = flush
    try:
        th = threading.Thread(target=scan, name="paused")
        th.start()
        assert ready.wait(30)
        try:
            meanwhile()
        finally:
            go.set()
            th.join(30)
    finally:
        scanmod.ScanCache.flush = real
    return out["found"]


def test_a_scan_with_older_settings_does_not_fill_the_cache_of_newer_ones(tmp_path):
    # A pattern added while a scan runs: a scan with it empties the cache and fills it; the
    # older scan's rows (found without the pattern) then went in under the new label, and
    # every later scan, and push's check, trusted them: the codename was never reported.
    t, _ = _tape(tmp_path)
    t.close()

    def add_the_pattern_and_scan():
        other = Tape.open(tmp_path / "t", cache_dir=str(tmp_path / "cache"))
        scanmod.add_pattern(other, r"bluefalcon-\d+", "codename")
        assert sorted(f.kind for f in scanmod.scan(other)["findings"]) == ["codename", "github-token"]
        other.close()

    old = _paused_scan(tmp_path, add_the_pattern_and_scan)
    assert [f.kind for f in old] == ["github-token"]  # what the older settings find
    later = Tape.open(tmp_path / "t", cache_dir=str(tmp_path / "cache"))
    assert sorted(f.kind for f in scanmod.scan(later)["findings"]) == ["codename", "github-token"]
    head = later.session("s").head.hash
    assert "codename" in {f.kind for f in scanmod.scan_entries(later, [("s", head)])}  # push's check
    later.close()


def test_a_scan_that_began_before_a_redaction_does_not_write_its_text_back_after_compact(tmp_path):
    from ctape.ops.redact import redact_pattern

    t, secret = _tape(tmp_path)
    t.session("s").append("tool_result", {"call_id": "d", "output": f"pw=hunter2xyz token={secret}"})
    t.close()

    def redact_and_compact():
        other = Tape.open(tmp_path / "t", cache_dir=str(tmp_path / "cache"))
        redact_pattern(other, "hunter2", ["s"])
        other.compact()
        assert b"hunter2xyz" not in _cache_bytes(tmp_path)
        other.close()

    _paused_scan(tmp_path, redact_and_compact)
    assert b"hunter2xyz" not in _cache_bytes(tmp_path)  # the paused scan's preview stayed out
    again = Tape.open(tmp_path / "t", cache_dir=str(tmp_path / "cache"))
    assert "github-token" in {f.kind for f in scanmod.scan(again)["findings"]}  # the cache works on
    again.close()
