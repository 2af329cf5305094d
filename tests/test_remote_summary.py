"""Summaries of a remote's manifests (ctape/sync/summary.py, docs/remotes.md): a clone of a
remote that `push --follow` wrote to for a month read tens of thousands of manifests, one
GET each. A summary that `compact --remote` writes holds them byte for byte; a reader far
behind reads those from it, and what it learns is what reading the keys teaches, whatever
happened to the keys since (lost, filled again, junk beside them)."""

from __future__ import annotations

import json
import os

import pytest

from ctape import Tape
from ctape.sync import layout, remote as remotes, summary
from ctape.sync.backend import FileBackend, open_backend
from ctape.sync.prune import compact_remote
from ctape.sync.pull import clone
from ctape.sync.push import push

from test_remote import refs_of, remote_url, s3env, seaweed  # noqa: F401

VOLATILE = ("checked", "made", "summaries")  # (when the state was made; what the summaries reach: bookkeeping)


def _tape_with_pushes(tmp_path, pushes: int):
    """A tape pushed to a folder remote after each append, a session removed on the way
    (a deletion in the manifests)."""
    remote = tmp_path / "remote"
    remote.mkdir()
    url = f"file://{remote}"
    a = Tape.init(tmp_path / "a")
    remotes.add(a.store, "origin", url)
    for i in range(pushes):
        a.session("chat" if i % 3 else "side").append("user", {"content": f"message {i}"})
        push(a, FileBackend(str(remote)), "origin")
        if i == pushes // 2:
            a.remove_session("side")
            compact_remote(a, FileBackend(str(remote)), "origin", expire="now", grace="now")
    return a, remote, url


def _clone(tmp_path, url, remote, name, worth):
    """A clone, reading a summary for uploaders with `worth` manifests or more to read:
    (its refs, its state of the remote, its warnings, its requests)."""
    warned: list[str] = []
    backend = open_backend(url)
    old = summary.SUMMARY_WORTH
    summary.SUMMARY_WORTH = worth
    try:
        clone(backend, url, None, str(tmp_path / name), warn=warned.append)
    finally:
        summary.SUMMARY_WORTH = old
    t = Tape.open(tmp_path / name)
    try:
        st = remotes.State.load(t.store, "origin", url)
        state = {k: v for k, v in st.items() if k not in VOLATILE}
    finally:
        t.close()
    return refs_of(tmp_path / name), state, warned, backend.requests


def _summarize(a, remote, every=1) -> int:
    old = summary.SUMMARY_EVERY
    summary.SUMMARY_EVERY = every
    try:
        return compact_remote(a, FileBackend(str(remote)), "origin", expire="90d", grace="14d")["summarized"]
    finally:
        summary.SUMMARY_EVERY = old


def test_a_clone_reads_what_a_summary_holds_in_one_request_and_learns_what_the_keys_teach(tmp_path):
    a, remote, url = _tape_with_pushes(tmp_path, 60)
    manifests = len(list((remote / "m").rglob("*.json")))
    assert _summarize(a, remote) >= manifests  # (the compaction's own manifest after it: read from its key)
    for i in range(3):  # pushes after the summary: read from their keys
        a.session("chat").append("user", {"content": f"after {i}"})
        push(a, FileBackend(str(remote)), "origin")
    a.close()
    keys = _clone(tmp_path, url, remote, "by-keys", worth=10**9)
    summed = _clone(tmp_path, url, remote, "by-summary", worth=8)
    assert summed[:3] == keys[:3] and not keys[2]
    assert summed[3] < keys[3] - manifests + 10, (summed[3], keys[3])  # one GET instead of one a manifest
    assert keys[0]["chat"][0]["main"] == Tape.open(tmp_path / "a").session("chat").refs().branches["main"]


def test_a_summary_stands_only_for_the_keys_as_they_are_now(tmp_path):
    """A manifest lost since the summary was written, and one its writer filled again
    (empty: push._refill), are read from their keys; the summary's copies are not used
    from there on. Junk at a summary's key is said once and read past."""
    a, remote, url = _tape_with_pushes(tmp_path, 40)
    assert _summarize(a, remote)
    me = a.store.writer
    a.close()
    # one that lists a file of "chat" after the removal of "side" is filled again (empty, as
    # its writer does), a later one is lost
    n = next(n for n in range(25, 40) if b'"session":"chat"' in (remote / layout.manifest_key(me, n)).read_bytes())
    os.unlink(remote / layout.manifest_key(me, n + 4))
    filled = remote / layout.manifest_key(me, n)
    body = json.loads(filled.read_bytes())
    body["files"] = []
    filled.write_bytes(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    # and one written again with other bytes of the same size (a writer that lost its newest
    # manifests and its state reuses their numbers): only its time tells it from the copy
    same = remote / layout.manifest_key(me, next(k for k in range(n - 1, 0, -1) if b'"blake3"' in (remote / layout.manifest_key(me, k)).read_bytes()))
    data = same.read_bytes()
    i = data.index(b'"blake3":"') + 10
    changed = data[:i] + (b"0" if data[i:i + 1] != b"0" else b"1") + data[i + 1:]
    assert len(changed) == len(data)
    same.unlink()
    same.write_bytes(changed)
    keys = _clone(tmp_path, url, remote, "by-keys", worth=10**9)
    summed = _clone(tmp_path, url, remote, "by-summary", worth=1)
    assert summed[:3] == keys[:3]
    assert any("lacks m/" in w for w in keys[2])  # the loss is said either way
    (s,) = [p for p in (remote / "s").rglob("*.json.zst")]
    s.write_bytes(b"junk")
    junk = _clone(tmp_path, url, remote, "by-junk", worth=1)
    assert junk[:2] == keys[:2] and any("ignored s/" in w and "not a zstd frame" in w for w in junk[2]), junk[2]


def test_compact_remote_writes_a_summary_now_and_then_and_keeps_two(tmp_path):
    a, remote, url = _tape_with_pushes(tmp_path, 12)
    assert _summarize(a, remote, every=10**9) == 0 and not (remote / "s").exists()  # too few new ones
    written = []
    for round_ in range(4):
        for i in range(3):
            a.session("chat").append("user", {"content": f"round {round_} {i}"})
            push(a, FileBackend(str(remote)), "origin")
        written.append(_summarize(a, remote, every=3))
    assert all(written) and written == sorted(written), written
    names = sorted(p.name for p in (remote / "s" / a.store.writer).iterdir())
    assert names == [f"{n:020d}.json.zst" for n in (2, 3)], names  # the newest and the one before
    newest = summary.Summaries(a.store, FileBackend(str(remote)), lambda m: pytest.fail(m), {}).fullest()
    assert newest.total == written[-1] and newest.key.endswith("00000000000000000003.json.zst")
    a.close()


def test_on_seaweedfs_a_clone_through_a_summary_learns_what_the_keys_teach(tmp_path, remote_url):
    """The same on a real S3 server (and a folder): sizes from its listings, the summary
    written create-only, read with one GET."""
    a = Tape.init(tmp_path / "a")
    remotes.add(a.store, "origin", remote_url)
    for i in range(40):
        a.session("chat").append("user", {"content": f"message {i}"})
        push(a, open_backend(remote_url), "origin")
    old = summary.SUMMARY_EVERY
    summary.SUMMARY_EVERY = 1
    try:
        r = compact_remote(a, open_backend(remote_url), "origin", expire="90d", grace="14d")
    finally:
        summary.SUMMARY_EVERY = old
    assert r["summarized"] >= 40, r  # (and the compaction's own push)
    a.close()
    out = [_clone(tmp_path, remote_url, None, name, worth) for name, worth in (("by-keys", 10**9), ("by-summary", 8))]
    assert out[0][:3] == out[1][:3] and not out[0][2]
    assert out[1][3] <= out[0][3] - 30, (out[0][3], out[1][3])


def test_a_pull_past_what_the_summaries_hold_does_not_read_them_again(tmp_path):
    """(Found in review.) A pull 32 manifests behind a `push --follow`, past the newest
    summary, read the whole summary each time for nothing; how far it reaches is kept."""
    from ctape.sync.pull import pull

    a, remote, url = _tape_with_pushes(tmp_path, 20)
    assert _summarize(a, remote)
    _clone(tmp_path, url, remote, "b", worth=8)  # reads the summary: its reach is known there

    class Counting(FileBackend):
        summary_gets = 0

        def get(self, key):
            if key.startswith("s/"):
                Counting.summary_gets += 1
            return super().get(key)

    for i in range(12):
        a.session("chat").append("user", {"content": f"later {i}"})
        push(a, FileBackend(str(remote)), "origin")
    a.close()
    b = Tape.open(tmp_path / "b")
    old = summary.SUMMARY_WORTH
    summary.SUMMARY_WORTH = 8
    try:
        r = pull(b, Counting(str(remote), url), "origin")
    finally:
        summary.SUMMARY_WORTH = old
        b.close()
    assert r["files"] >= 12 and Counting.summary_gets == 0, (r, Counting.summary_gets)
