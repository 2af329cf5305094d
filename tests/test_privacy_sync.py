"""A redaction travels like a deletion (SPEC section 18): made on one copy, rsynced to
another, and after each copy compacts no file of either (tape, caches) holds a byte of
any secret, while every hash, branch and fsck result stays as it was."""

import json
import os
import shutil
import subprocess

import pytest
import zstandard

from ctape import Tape
from ctape.store import framing
from conftest import run_cli
from test_privacy import hashes, plant

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed (.ci/run installs it)")


def rsync(src, dst):
    subprocess.run(["rsync", "-a", f"{src}/", f"{dst}/"], check=True)


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _unzstd(data: bytes):
    """The decompressed content of every zstd frame found anywhere in the bytes (caches
    keep compressed text: a plain grep would miss it), a frame made with a dictionary too:
    each other frame's text of up to 1 MiB is tried as one (a data file's `Z` blocks use
    its `D` record's content, which `zstd -d -D` recovers from a file that no reader of
    ctape's would read: one in quarantine/ with a damaged record)."""
    texts, needing = [], []
    i = data.find(ZSTD_MAGIC)
    while i >= 0:
        try:
            text = zstandard.ZstdDecompressor().decompressobj().decompress(data[i:i + (64 << 20)])
        except zstandard.ZstdError:
            needing.append(i)
        else:
            texts.append(text)
            yield text
        i = data.find(ZSTD_MAGIC, i + 1)
    dictionaries = [zstandard.ZstdCompressionDict(t, dict_type=zstandard.DICT_TYPE_RAWCONTENT) for t in texts if 8 <= len(t) <= 1 << 20]
    for i in needing:
        for d in dictionaries:
            try:
                yield zstandard.ZstdDecompressor(dict_data=d).decompressobj().decompress(data[i:i + (64 << 20)])
                break
            except zstandard.ZstdError:
                continue


def _tape_records(d):
    """Every record body of every data file, blocks and objects decompressed (blocks
    compressed with a dictionary need ctape's reader)."""
    t = Tape.open(d, cache_dir=str(d) + ".probe-cache")
    try:
        for rel in t.store.list_files(None):
            for item in t.store.scan_file(rel):
                if isinstance(item, framing.Record):
                    body = item.body
                    if item.type == framing.T_OBJECT and body[33] == 1:
                        body = t.store.decompress(body[34:], "probe")
                    yield rel, body
    finally:
        t.close()
        shutil.rmtree(str(d) + ".probe-cache", ignore_errors=True)


def holders(secret: bytes, *folders):
    """Every file under the folders whose bytes hold the secret: as they are, inside any
    zstd frame, and (for tapes) inside every record as ctape reads it."""
    out = []
    for folder in folders:
        for root, _, files in os.walk(folder):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    data = f.read()
                if secret in data or any(secret in x for x in _unzstd(data)):
                    out.append(os.path.join(root, name))
        if os.path.exists(os.path.join(folder, "ctape.json")):
            out += [f"{folder}/{rel}" for rel, body in _tape_records(folder) if secret in body]
    return out


def fsck(d, env):
    p = run_cli("--dir", d, "fsck", "--json", env=env)
    return json.loads(p.stdout)


def test_redaction_reaches_a_second_copy_and_compaction_drops_every_byte(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    env_a = {"CTAPE_CACHE_DIR": str(tmp_path / "cache-a"), "CTAPE_WRITER": "laptop"}
    env_b = {"CTAPE_CACHE_DIR": str(tmp_path / "cache-b"), "CTAPE_WRITER": "server"}
    s = plant(a)
    rsync(a, b)
    before = hashes(a)
    # both copies have read and searched the secrets: their caches hold text
    for d, env in ((a, env_a), (b, env_b)):
        assert s["aws"].encode() in run_cli("--dir", d, "search", s["aws"], env=env).stdout
        run_cli("--dir", d, "log", "-s", "beta", env=env, check=True)
    for secret in s.values():  # the check below can fail: the bytes are there to begin with
        assert holders(secret.encode(), a) and holders(secret.encode(), b)
    assert holders(s["aws"].encode(), tmp_path / "cache-b")
    ok_before = fsck(a, env_a)["ok"]
    assert ok_before

    assert run_cli("--dir", a, "redact", "--scan", env=env_a).returncode == 0
    rsync(a, b)
    # the second copy shows the marker the moment it has the record
    out = run_cli("--dir", b, "export", "alpha", env=env_b, check=True).stdout
    assert b"[redacted: aws-access-key]" in out and s["aws"].encode() not in out

    for d, env in ((a, env_a), (b, env_b)):
        run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", env=env, check=True)
    for name, secret in s.items():
        assert holders(secret.encode(), a, b, tmp_path / "cache-a", tmp_path / "cache-b") == [], name
    for d, env in ((a, env_a), (b, env_b)):
        assert hashes(d) == before
        report = fsck(d, env)
        assert report["ok"] == ok_before, report["problems"]
        assert {r["bytes"] for r in report["redacted"]} <= {"withheld", "dropped"}
        assert s["aws"].encode() not in run_cli("--dir", d, "search", s["aws"], env=env).stdout
        assert run_cli("--dir", d, "scan", env=env).returncode == 0
    # a later sync both ways brings nothing back
    rsync(a, b)
    rsync(b, a)
    assert hashes(a) == hashes(b) == before
    for name, secret in s.items():
        assert holders(secret.encode(), a, b) == [], name


def test_redaction_racing_an_append_loses_no_append(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    env_a = {"CTAPE_CACHE_DIR": str(tmp_path / "cache-a"), "CTAPE_WRITER": "laptop"}
    env_b = {"CTAPE_CACHE_DIR": str(tmp_path / "cache-b"), "CTAPE_WRITER": "server"}
    s = plant(a)
    rsync(a, b)
    # a redacts while b, not yet synced, appends to the same session
    assert run_cli("--dir", a, "redact", "--scan", env=env_a).returncode == 0
    h = run_cli("--dir", b, "append", "user", "--text", "appended on b", "-s", "alpha", env=env_b, check=True).stdout.decode().strip()
    rsync(a, b)
    rsync(b, a)
    for d, env in ((a, env_a), (b, env_b)):
        log = run_cli("--dir", d, "log", "-s", "alpha", "--json", env=env, check=True).stdout.decode()
        assert h in log
        assert s["aws"].encode() not in run_cli("--dir", d, "export", "alpha", env=env, check=True).stdout
        run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", env=env, check=True)
        assert h in run_cli("--dir", d, "log", "-s", "alpha", "--json", env=env, check=True).stdout.decode()
        assert fsck(d, env)["ok"]
    assert holders(s["aws"].encode(), a, b) == []
