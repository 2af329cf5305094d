"""A remote emptied and pushed to again (docs/remotes.md, "What a copy remembers"): every
copy, not only the first to push afterwards, finds out, pushes what the new remote lacks
and pulls what it holds. Found by an audit: the second copy said "nothing to push" and
"up to date" while its entries reached no one (the remote's identity was the same bytes
after it was created again, so only a copy that found it missing knew)."""
import os
import shutil
import uuid

import pytest

from ctape import Tape
from conftest import run_cli
from test_remote import s3env, seaweed  # noqa: F401 - fixtures


@pytest.fixture(params=["file", "s3"])
def remote(request, tmp_path):
    """(url, wipe): a fresh remote, and a function that empties it as a user would
    (every object under the prefix deleted; the folder's contents removed)."""
    if request.param == "file":
        d = tmp_path / "remote"
        d.mkdir()

        def wipe():
            for name in os.listdir(d):
                p = d / name
                shutil.rmtree(p) if p.is_dir() else p.unlink()

        return f"file://{d}", wipe
    request.getfixturevalue("s3env")
    server = request.getfixturevalue("seaweed")
    bucket = server.bucket("ct-" + uuid.uuid4().hex[:12])
    url = f"s3://{bucket}/team"

    def wipe():
        c = server.client()
        for o in c.list_objects_v2(Bucket=bucket, Prefix="team/").get("Contents", []):
            c.delete_object(Bucket=bucket, Key=o["Key"])
        assert not c.list_objects_v2(Bucket=bucket, Prefix="team/").get("Contents")

    return url, wipe


def on(d, writer):
    """The command line of one copy (each its own writer, as on its own machine)."""
    def cli(*args, check=True):
        p = run_cli("--dir", d, *args, env={"CTAPE_WRITER": writer})
        if check:
            assert p.returncode == 0, (args, p.stderr.decode())
        return p
    return cli


def append(cli, session, text):
    return cli("append", "user", "--text", text, "-s", session).stdout.decode().strip()


def hashes(d):
    with Tape.open(d) as t:
        return {e.hash for name in t.store.sessions() for b in t.session(name).refs().branches.values() for e in t.session(name).log(b)}


def test_every_copy_pushes_in_full_to_a_remote_emptied_and_created_again(remote, tmp_path):
    url, wipe = remote
    a_dir, b_dir, c_dir = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    a, b = on(a_dir, "laptop"), on(b_dir, "cibox")
    a("init")
    a1 = append(a, "s1", "one")
    a("remote", "add", "origin", url)
    a("push")
    run_cli("clone", url, b_dir, env={"CTAPE_WRITER": "cibox"}, check=True)
    b1 = append(b, "s2", "B's work before the wipe")
    b("push")
    wipe()
    a2 = append(a, "s1", "A's work after the wipe")
    a("push")  # the first copy to push finds the remote empty: pushes in full
    b2 = append(b, "s2", "B's work after the wipe")
    said = b("push").stderr.decode()
    assert "nothing to push" not in said, said
    # the remote holds everything both copies hold, as a new copy finds it
    run_cli("clone", url, c_dir, env={"CTAPE_WRITER": "third"}, check=True)
    assert {a1, a2, b1, b2} <= hashes(c_dir)
    assert run_cli("--dir", c_dir, "fsck").returncode == 0
    # and B's pull brings A's entry made after the wipe
    b("pull")
    assert a2 in hashes(b_dir)


def test_a_copy_pulls_from_the_start_of_a_remote_emptied_and_created_again(remote, tmp_path):
    url, wipe = remote
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a, b = on(a_dir, "laptop"), on(b_dir, "cibox")
    a("init")
    a("remote", "add", "origin", url)
    for i in range(3):  # B reads manifests 0-2 of A's
        append(a, "s1", f"entry {i}")
        a("push")
        if i == 0:
            run_cli("clone", url, b_dir, env={"CTAPE_WRITER": "cibox"}, check=True)
        else:
            b("pull")
    wipe()
    new = append(a, "s1", "after the wipe")
    a("push")  # manifest 0 again, under a new identity
    said = b("pull").stderr.decode()
    assert "up to date" not in said, said
    assert new in hashes(b_dir)
    assert b("fsck", check=False).returncode == 0
