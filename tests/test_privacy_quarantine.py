"""SPEC 18: after a redaction, `compact` leaves no byte of the secret in any file of the
copy, quarantine/ included: a file `fsck --salvage` moved there keeps its size and what is
intact of it, with the redacted records (and any other place its text shows) zeroed."""

from __future__ import annotations

import json
import os
import uuid

from ctape import Tape
from ctape.store import framing

from conftest import run_cli
from test_privacy_sync import holders


def _env(tmp_path):
    return {"CTAPE_CACHE_DIR": str(tmp_path / "cache")}


def test_compact_scrubs_a_quarantined_file_that_holds_a_redacted_secret(tmp_path):
    d = tmp_path / "tape"
    env = _env(tmp_path)
    secret = "ghp_" + (uuid.uuid4().hex + uuid.uuid4().hex)[:36]
    t = Tape.init(d)
    s = t.session("s")
    s.append("user", {"content": "read the config"})
    s.append("tool_result", {"call_id": "c1", "output": f"token = {secret}\nuser = me"})
    for i in range(6):
        s.append("assistant", {"content": f"step {i}"})
    t.close()
    (seg,) = (d / "sessions" / "s").glob("*.seg")
    data = bytearray(seg.read_bytes())
    records = [r for r in framing.scan(bytes(data)) if isinstance(r, framing.Record)]
    last = records[-1]
    data[last.offset + 20] ^= 0x01  # damage after the secret: salvage keeps what is intact
    seg.write_bytes(bytes(data))
    p = run_cli("--dir", d, "fsck", "--salvage", env=env)
    assert p.returncode in (0, 1), p.stderr
    quarantined = [q for q in (d / "quarantine").rglob("*") if q.is_file() and not q.name.endswith(".json")]
    assert quarantined and holders(secret.encode(), d / "quarantine"), "the secret is not in quarantine to begin with"
    sizes = {q: q.stat().st_size for q in quarantined}

    p = run_cli("--dir", d, "redact", "--scan", "-s", "s", env=env)
    assert p.returncode == 0, p.stderr
    p = run_cli("--dir", d, "compact", "--json", env=env)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["scrubbed_quarantine"]["files"] >= 1, report
    assert not holders(secret.encode(), d, tmp_path / "cache"), holders(secret.encode(), d, tmp_path / "cache")
    assert {q: q.stat().st_size for q in quarantined} == sizes  # offsets in salvage's notes stay true
    p = run_cli("--dir", d, "log", "-s", "s", env=env)
    assert p.returncode == 0 and secret.encode() not in p.stdout
    p = run_cli("--dir", d, "fsck", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    # fsck names the redacted place, as redacted, not as damage (SPEC 18)
    lines = [line for line in p.stdout.decode().splitlines() if line.startswith("redacted: ")]
    assert len(lines) == 1 and "$.payload.output" in lines[0] and "github" in lines[0] and "bytes withheld" in lines[0], p.stdout


def test_a_quarantined_file_without_redacted_values_is_left_as_it_is(tmp_path):
    d = tmp_path / "tape"
    env = _env(tmp_path)
    t = Tape.init(d)
    s = t.session("s")
    for i in range(5):
        s.append("user", {"content": f"plain {i}"})
    o = t.session("o")
    o.append("tool_result", {"call_id": "c", "output": "AWS_SECRET_ACCESS_KEY=" + "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + uuid.uuid4().hex[:10]})
    t.close()
    (seg,) = (d / "sessions" / "s").glob("*.seg")
    data = bytearray(seg.read_bytes())
    last = [r for r in framing.scan(bytes(data)) if isinstance(r, framing.Record)][-1]
    data[last.offset + 20] ^= 0x01
    seg.write_bytes(bytes(data))
    run_cli("--dir", d, "fsck", "--salvage", env=env)
    before = {q: q.read_bytes() for q in (d / "quarantine").rglob("*") if q.is_file()}
    assert before
    assert run_cli("--dir", d, "redact", "--scan", "-s", "o", env=env).returncode == 0
    assert run_cli("--dir", d, "compact", env=env).returncode == 0
    assert {q: q.read_bytes() for q in (d / "quarantine").rglob("*") if q.is_file()} == before
