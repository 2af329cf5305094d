"""A pull lists every copy that ever pushed (one listing of each uploader's manifests from
the first it has not read): with dozens of uploaders, one round trip after the other was
most of a pull with nothing new. The listings go up to layout.GETS_IN_FLIGHT at a time
(docs/remotes.md, "What a pull costs"); what the pull learns is the same."""

from __future__ import annotations

import threading
import time

from ctape import Tape
from ctape.sync import remote as remotes
from ctape.sync.backend import FileBackend
from ctape.sync.pull import clone, pull
from ctape.sync.push import push

from test_remote import refs_of


class SlowListings(FileBackend):
    """A folder remote whose listings take a round trip of 20 ms; counts how many are under
    way at once."""

    def __init__(self, root):
        super().__init__(root)
        self.lock = threading.Lock()
        self.now = self.most = self.listings = 0

    def stamped(self, prefix, start_after=None):
        with self.lock:
            self.now += 1
            self.listings += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(0.02)
            return iter(list(super().stamped(prefix, start_after)))
        finally:
            with self.lock:
                self.now -= 1


def test_a_pull_lists_the_uploaders_side_by_side_and_learns_the_same(tmp_path, monkeypatch):
    remote = tmp_path / "remote"
    remote.mkdir()
    url = f"file://{remote}"
    monkeypatch.setenv("CTAPE_WRITER", "w00origin")
    a = Tape.init(tmp_path / "a")
    remotes.add(a.store, "origin", url)
    a.session("chat").append("user", {"content": "hello"})
    push(a, FileBackend(str(remote)), "origin")
    for i in range(12):  # twelve more copies, each cloned, appended to and pushed once
        monkeypatch.setenv("CTAPE_WRITER", f"w{i:02d}copy")
        clone(FileBackend(str(remote)), url, None, str(tmp_path / f"c{i}"))
        with Tape.open(tmp_path / f"c{i}") as c:
            c.session(f"s{i}").append("user", {"content": f"from copy {i}"})
            push(c, FileBackend(str(remote)), "origin")
    monkeypatch.setenv("CTAPE_WRITER", "w00origin")
    slow = SlowListings(str(remote))
    pull(a, slow, "origin")
    assert slow.most > 1, "the uploaders were listed one after the other"
    assert slow.listings >= 13
    a.close()
    here = refs_of(tmp_path / "a")
    for i in range(12):  # every copy's session arrived, as its copy has it
        assert here[f"s{i}"] == refs_of(tmp_path / f"c{i}")[f"s{i}"]
    with Tape.open(tmp_path / "a") as t:
        assert t.fsck()["ok"]


def test_a_remote_made_by_a_newer_ctape_is_refused_and_nothing_changes(tmp_path):
    """The remote's identity names its version; one this ctape does not know is refused by
    push, pull and clone with one line (an audit of mixed versions: builds before
    generations read no version, and misread a remote that had them without a word)."""
    import json

    from conftest import run_cli

    remote = tmp_path / "remote"
    remote.mkdir()
    url = f"file://{remote}"
    a = tmp_path / "a"
    run_cli("--dir", a, "init", check=True)
    run_cli("--dir", a, "append", "user", "--text", "hello", "-s", "chat", check=True)
    run_cli("--dir", a, "remote", "add", "origin", url, check=True)
    run_cli("--dir", a, "push", check=True)
    ident = remote / "ctape.json"
    meta = json.loads(ident.read_text())
    ident.write_text(json.dumps({**meta, "version": 2}))
    before = sorted(p.name for p in remote.rglob("*"))
    for args in (("--dir", a, "push"), ("--dir", a, "pull"), ("clone", url, tmp_path / "b")):
        p = run_cli(*args, check=False)
        assert p.returncode != 0 and len(p.stderr.splitlines()) == 1, p
        assert b"was made by a newer ctape (remote version 2, this ctape knows 1); upgrade ctape to use it" in p.stderr, p
    assert sorted(p.name for p in remote.rglob("*")) == before and not (tmp_path / "b").exists()
