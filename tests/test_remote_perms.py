"""Who may read a folder remote (docs/remotes.md, "Who may read a folder remote").

Transcripts hold secrets, so what a push, a clone's first push or `compact --remote`
creates on a folder remote is private as in a tape (files 0600, folders 0700), whatever
the umask of the process that pushed; a team that shares the remote folder lets its
group write in that folder, and what is created in it then gives the group the same.
Others get nothing in either case. Real `ctape` processes, real folders."""

import os
import stat
from contextlib import contextmanager

import pytest

from ctape import Tape

from conftest import run_cli


@contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(root):
    """(files, folders) under root (not root itself): path -> permission bits."""
    files, folders = {}, {}
    for folder, dirs, names in os.walk(root):
        for d in dirs:
            folders[os.path.join(folder, d)] = stat.S_IMODE(os.lstat(os.path.join(folder, d)).st_mode)
        for n in names:
            files[os.path.join(folder, n)] = stat.S_IMODE(os.lstat(os.path.join(folder, n)).st_mode)
    return files, folders


def tape_with_history(path, sessions=("chat", "other")):
    t = Tape.init(str(path))
    for name in sessions:
        s = t.session(name)
        s.append("user", {"content": f"hello from {name}"})
        s.append("assistant", {"content": "x" * 5000})
    t.close()


def push_and_compact(tmp_path, remote):
    """A push, more history, a second push, a remote compaction, and a clone's push: every
    kind of file the remote gets (pieces, manifests, packs, marks)."""
    a = tmp_path / "a"
    tape_with_history(a)
    url = f"file://{remote}"
    for args in (("remote", "add", "origin", url), ("push", "origin")):
        run_cli("--dir", a, *args, check=True)
    t = Tape.open(str(a))
    t.session("chat").append("user", {"content": "later"})
    t.session("third").append("user", {"content": "a new session"})
    t.close()
    run_cli("--dir", a, "push", "origin", check=True)
    run_cli("--dir", a, "compact", "--remote", "origin", "--grace", "now", check=True)
    run_cli("clone", url, tmp_path / "b", check=True)
    t = Tape.open(str(tmp_path / "b"))
    t.session("chat").append("assistant", {"content": "from b"})
    t.close()
    run_cli("--dir", tmp_path / "b", "push", "origin", check=True)


@pytest.mark.parametrize("mask", [0o022, 0o000])
def test_a_folder_remote_is_private_whatever_the_umask(tmp_path, mask):
    remote = tmp_path / "remote"
    with umask(mask):
        remote.mkdir()  # 0755 or 0777: the umask's idea, not a choice to share
        os.chmod(remote, 0o755)
        push_and_compact(tmp_path, remote)
    files, folders = modes(remote)
    assert len(files) >= 5 and folders
    wrong = {p: oct(m) for p, m in files.items() if m != 0o600}
    wrong.update({p: oct(m) for p, m in folders.items() if m != 0o700})
    assert not wrong, f"umask {oct(mask)}: {wrong}"


@pytest.mark.parametrize("root_mode, file_mode, folder_mode", [
    (0o2770, 0o660, 0o2770),  # a team's share: the group reads and writes, and keeps its group
    (0o775, 0o660, 0o770),  # shared with the group; others get nothing, whatever the folder gives them
    (0o750, 0o600, 0o700),  # the group may only read the folder: what a umask makes, not a share
    (0o707, 0o600, 0o700),
])
def test_a_shared_folder_gives_its_group_what_it_grants(tmp_path, root_mode, file_mode, folder_mode):
    remote = tmp_path / "remote"
    with umask(0o077):  # the pusher's own umask would take the group's bits: it does not
        remote.mkdir()
        os.chmod(remote, root_mode)
        push_and_compact(tmp_path, remote)
    files, folders = modes(remote)
    assert len(files) >= 5 and folders
    wrong = {p: oct(m) for p, m in files.items() if m != file_mode}
    wrong.update({p: oct(m) for p, m in folders.items() if m != folder_mode})
    assert not wrong, wrong
    if root_mode & stat.S_ISGID:
        gid = os.stat(remote).st_gid
        assert {os.stat(p).st_gid for p in list(files) + list(folders)} == {gid}
