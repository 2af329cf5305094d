"""One copy's push, pull and remote compaction of one remote take turns on its state
(`remote-NAME.json`): each loads, changes and saves it whole.

Forced interleaving, as `push --follow` beside a `ctape pull` on one copy meets it: a pull
is paused right after loading the state while another Tape of the same copy (what another
process would open) appends and pushes. Before the lock, the pull then saved the state it
had loaded over the push's: the next push wrote its manifest under a number already taken
(a warning, "exists on the remote; writing the next one") and uploaded again what the
lost update forgot (10 requests where 4 do)."""

import sys
import threading
import time

from ctape import Tape
from ctape.store import localstate
from ctape.sync import remote
from ctape.sync.backend import open_backend
from ctape.sync.prune import compact_remote
from ctape.sync.pull import clone, pull
from ctape.sync.push import push


def _copy_with_remote(tmp_path):
    d, cache = tmp_path / "t", str(tmp_path / "cache")
    (tmp_path / "remote").mkdir()
    url = f"file://{tmp_path}/remote"
    t = Tape.init(d, cache_dir=cache)
    remote.add(t.store, "origin", url)
    t.session("chat").append("user", {"content": "first"})
    push(t, open_backend(url), "origin")
    return t, Tape.open(d, cache_dir=cache), url


def _paused_after_load(first, second, caller=None):
    """Run first() in a thread paused right after it loaded a remote state (in `caller`,
    when given), then second()
    in another; let the first go on after the second had time to finish (it waits, with
    the lock). Returns the second's warnings."""
    real = remote.State.load.__func__
    paused, go = threading.Event(), threading.Event()

    def load(cls, *args, **kw):
        out = real(cls, *args, **kw)
        if threading.current_thread().name == "first" and not paused.is_set() and caller in (None, sys._getframe(1).f_code.co_name):
            paused.set()
            assert go.wait(30)
        return out

    remote.State.load = classmethod(load)
    localstate.BUSY_AFTER, busy_after = 0.2, localstate.BUSY_AFTER  # said however slow the second is to start
    warned: list[str] = []
    try:
        a = threading.Thread(target=first, name="first")
        a.start()
        assert paused.wait(30)
        b = threading.Thread(target=lambda: second(warned.append), name="second")
        b.start()
        time.sleep(1.5)  # without the lock the second is done by now; with it, it said it waits
        go.set()
        a.join(30)
        b.join(30)
        assert not a.is_alive() and not b.is_alive()
    finally:
        remote.State.load = classmethod(real)
        localstate.BUSY_AFTER = busy_after
    return warned


def test_a_push_beside_a_pull_of_the_same_copy_loses_nothing_of_the_state(tmp_path):
    ta, tb, url = _copy_with_remote(tmp_path)

    def second(warn):
        tb.session("chat").append("user", {"content": "while pulling"})
        push(tb, open_backend(url), "origin", warn=warn)

    waited = _paused_after_load(lambda: pull(ta, open_backend(url), "origin"), second)
    # the next push after one append: its own manifest number, the new bytes only
    ta.session("chat").append("user", {"content": "after"})
    warned: list[str] = []
    got = push(ta, open_backend(url), "origin", warn=warned.append)
    assert warned == []
    assert got["already_there"] == 0
    assert got["requests"] <= 5, got  # docs/remotes.md: an incremental push after one append, 4
    assert waited == ["waiting for another push, pull or compaction of origin on this copy"]


def test_a_push_waits_for_the_deletions_of_a_remote_compaction_of_the_same_copy(tmp_path):
    """`compact --remote` holds its turn only while it carries out its plans (its pull and
    push take their own turns), so `push --follow` waits for the deletions, not for the
    compaction of this copy."""
    ta, tb, url = _copy_with_remote(tmp_path)
    order: list[str] = []

    def first():
        compact_remote(ta, open_backend(url), "origin", grace="now")
        order.append("compacted")

    def second(warn):
        tb.session("chat").append("user", {"content": "while compacting"})
        push(tb, open_backend(url), "origin", warn=warn)
        order.append("pushed")

    waited = _paused_after_load(first, second, caller="_carry_out")
    assert order == ["compacted", "pushed"]
    assert waited == ["waiting for another push, pull or compaction of origin on this copy"]
    # another copy gets everything
    clone(open_backend(url), url, None, str(tmp_path / "clone"))
    tc = Tape.open(tmp_path / "clone")
    assert [e.payload["content"] for e in tc.session("chat").log()][::-1] == ["first", "while compacting"]


def test_remote_rm_beside_a_push_leaves_no_state_behind(tmp_path):
    """`remote rm` removed the state file while a push was under way, which then saved it
    again: a remote added later under that name and URL started from the stale state."""
    import os

    ta, tb, url = _copy_with_remote(tmp_path)
    ta.session("chat").append("user", {"content": "one more"})
    _paused_after_load(lambda: push(ta, open_backend(url), "origin"), lambda warn: remote.remove(tb.store, "origin"))
    assert remote.remotes(ta.store) == {}
    assert not os.path.exists(os.path.join(remote.cache_folder(ta.store), "remote-origin.json"))


def test_a_pull_that_waits_for_another_pull_of_the_same_copy_says_so(tmp_path):
    """Pulls of a copy bring files in one at a time (pull.pull_turn, of any remote; a push
    that brings files in before compacting takes it too): the one that waits said nothing
    (found in review)."""
    import fcntl
    import os

    from ctape.sync.pull import _LOCK

    ta, tb, url = _copy_with_remote(tmp_path)
    fd = os.open(os.path.join(os.path.dirname(ta.store.index.path), _LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another pull of this copy, under way
    warned: list[str] = []
    th = threading.Thread(target=lambda: pull(tb, open_backend(url), "origin", warn=warned.append))
    th.start()
    time.sleep(1.0)
    assert th.is_alive() and warned == ["waiting for another pull on this copy (it brings files in)"], warned
    os.close(fd)
    th.join(30)
    assert not th.is_alive()
