"""compact --remote's sweep of the pieces no manifest lists (prune._sweep_unlisted,
docs/remotes.md "Pieces no manifest lists"), against what a review (helper-85) found: a
push's rerun that lists an old unlisted piece while a sweep is under way, a manifest this
version cannot read that appears after the pull, a record of such a manifest that
outlived it. Each test failed on the sweep as first written. On a folder remote: the
backends share every line that matters here with S3's (aged, list, put_if_absent)."""

from __future__ import annotations

import json
import os

import pytest

from ctape import Tape
from ctape.sync import layout, prune, push as pushing
from ctape.sync.backend import FileBackend
from ctape.sync.pull import pull

DAYS = 86400.0


def _fb(remote):
    return FileBackend(str(remote), f"file://{remote}")


class Killed(Exception):
    pass


def _two_copies(tmp_path, monkeypatch):
    remote = tmp_path / "remote"
    remote.mkdir()
    a, b = tmp_path / "A", tmp_path / "B"
    t = Tape.init(a)
    t.session("chat").append("user", {"content": "hello"})
    from ctape.sync import remote as remotes

    remotes.add(t.store, "origin", f"file://{remote}")
    pushing.push(t, _fb(remote), "origin")
    t.close()
    from ctape.sync.pull import clone

    clone(_fb(remote), f"file://{remote}", None, str(b))
    return remote, a, b


def _b_killed_before_its_manifest(tmp_path, monkeypatch):
    """Two copies A and B; B appends and its push is killed after its pieces, before its
    manifest: (remote, A's path, B's open Tape)."""
    remote, a, b = _two_copies(tmp_path, monkeypatch)
    tb = Tape.open(b)
    tb.session("chat").append("user", {"content": "from B, only here"})
    with monkeypatch.context() as m:
        m.setattr(pushing, "put_manifest", lambda *a, **k: (_ for _ in ()).throw(Killed()))
        with pytest.raises(Killed):
            pushing.push(tb, _fb(remote), "origin")
    return remote, a, tb


def test_a_rerun_that_finds_an_old_unlisted_piece_equal_loses_it_to_a_sweep_under_way(tmp_path, monkeypatch):
    """B's push is killed before its manifest: piece K stays unlisted. Weeks later (older
    than --grace) A runs `compact --remote`; its sweep lists f/ (K unlisted, old); B's rerun
    puts K again (refused: equal, "there") and lists it in a manifest; the sweep deletes K.
    The remote's manifests now list a key that is gone: every reader warns, and B, sure the
    remote holds it, never sends it again."""
    remote, a, tb = _b_killed_before_its_manifest(tmp_path, monkeypatch)

    class Later(FileBackend):
        """The same folder, read 20 days later; B's rerun lands between the listing and the deletes."""

        def aged(self, prefix):
            rows = [(k, age + 20 * DAYS) for k, age in FileBackend.aged(self, prefix)]
            out = pushing.push(tb, _fb(remote), "origin")  # B's rerun: its piece found equal
            assert out["already_there"] >= 1, out
            yield from rows

    ta = Tape.open(a)
    out = prune.compact_remote(ta, Later(str(remote), f"file://{remote}"), "origin", grace="14d")
    ta.close()
    from ctape.sync.pull import clone

    warns = []
    clone(_fb(remote), f"file://{remote}", None, str(tmp_path / "C"), warn=warns.append)
    assert not [w for w in warns if "lacks" in w], (out["deleted"], warns)  # B's listed piece was swept


def test_a_junk_manifest_that_appears_after_the_pull_does_not_stop_the_sweep(tmp_path, monkeypatch):
    """A manifest this version cannot read (another version's) that appears after the pull
    was neither counted as a change nor recorded, so the sweep deleted the (old) pieces it
    lists. Now it stops the sweep."""
    remote, a, b = _two_copies(tmp_path, monkeypatch)
    fb = _fb(remote)
    key = "f/chat/zzzz9999-00000000000000000001.seg/0-10"
    assert fb.put_if_absent(key, b"0123456789")  # put by a newer ctape's push killed before its manifest, weeks ago

    real = prune._carry_out

    def carry_out(*args, **kw):
        # the newer copy's rerun lists it, after this run's pull
        newer = json.dumps({"format": "ctape-remote-manifest", "version": 2, "uploader": "zzzz9999", "n": 0}).encode()
        assert fb.put_if_absent(layout.manifest_key("zzzz9999", 0), newer)
        return real(*args, **kw)

    monkeypatch.setattr(prune, "_carry_out", carry_out)
    ta = Tape.open(a)
    warns = []
    out = prune.compact_remote(ta, fb, "origin", grace=0, warn=warns.append)
    ta.close()
    assert os.path.exists(remote / key), (out["deleted"], warns)  # it was swept


def test_ignored_outlives_the_remote_it_was_about(tmp_path, monkeypatch):
    """The record of a manifest that could not be read was never cleared, not even when the
    remote was emptied and made again: the sweep stayed off for good, for a manifest no
    longer there."""
    remote, a, b = _two_copies(tmp_path, monkeypatch)
    fb = _fb(remote)
    assert fb.put_if_absent(layout.manifest_key("zzzz9999", 0), b"junk")
    ta = Tape.open(a)
    pull(ta, fb, "origin")
    # the remote is emptied and pushed to again from scratch
    import shutil

    shutil.rmtree(remote)
    remote.mkdir()
    pushing.push(ta, _fb(remote), "origin")
    assert fb.put_if_absent("f/chat/zzzz9999-00000000000000000001.seg/0-10", b"0123456789")  # left by a killed push
    warns = []
    out = prune.compact_remote(ta, _fb(remote), "origin", grace=0, warn=warns.append)
    ta.close()
    assert out["deleted"]["unlisted"] == 1, (out["deleted"], warns)  # it said "could not be read" for a manifest gone


def test_a_reused_piece_that_went_between_the_put_and_the_manifest_is_put_back(tmp_path, monkeypatch):
    """The window the sweep's second read of the manifests leaves: B's rerun finds its old
    unlisted piece there, and a sweep deletes it before B's manifest lists it. B looks for
    it again once the manifest is written, and puts it back."""
    remote, a, tb = _b_killed_before_its_manifest(tmp_path, monkeypatch)
    fb = _fb(remote)
    listed = {k for k, _, p in fb.list("f/") if not p}
    real = pushing.put_manifest
    swept = []

    def manifest_after_a_sweep(store, backend, state, listed_now, *args, **kw):
        for f in listed_now:  # the sweep's delete lands just before the manifest
            key = layout.piece_key(f["session"], f["file"], f["start"], f["end"], f.get("gen", 0))
            if key in listed:
                backend.delete(key)
                swept.append(key)
        return real(store, backend, state, listed_now, *args, **kw)

    monkeypatch.setattr(pushing, "put_manifest", manifest_after_a_sweep)
    out = pushing.push(tb, fb, "origin")
    tb.close()
    assert swept and out["already_there"] >= 1, (swept, out)
    assert all(os.path.exists(remote / k) for k in swept)
    from ctape.sync.pull import clone

    warns = []
    clone(_fb(remote), f"file://{remote}", None, str(tmp_path / "C"), warn=warns.append)
    assert not [w for w in warns if "lacks" in w], warns
