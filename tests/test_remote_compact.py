"""compact --remote (SPEC section 17, docs/remotes.md "Compacting a remote"): against a folder
and a real SeaweedFS. What is deleted on the remote is deleted in two phases; a claim pushed
by another copy between them keeps what it reaches; copies that pull afterwards, and new
clones, converge and lose nothing; a run killed at any instant is finished by the next."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager

import pytest

from ctape import Tape

from conftest import run_cli
from test_privacy_sync import holders
from test_remote import SLOW, cli, cli_json, fsck_clean, reached_by_refs, refs_of, remote_url, s3env, seaweed  # noqa: F401


def remote_keys(url: str, server=None) -> dict[str, bytes]:
    """Every object of the remote, by key (a folder walked, or the bucket listed)."""
    out = {}
    if url.startswith("file://"):
        root = url[len("file://"):]
        for folder, _, files in os.walk(root):
            for f in files:
                p = os.path.join(folder, f)
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, root)] = fh.read()
        return out
    bucket, prefix = url[len("s3://"):].split("/", 1)
    client = server.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix) + 1:]] = client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    return out


def remote_as_tape(keys: dict[str, bytes], like, dest):
    """The remote's pieces put back together as the files of a tape (with `like`'s identity),
    so that every record can be read as ctape reads it."""
    import shutil

    os.makedirs(dest / "sessions")
    shutil.copy(like / "ctape.json", dest / "ctape.json")
    for k, v in keys.items():
        if k.startswith("f/"):
            _, s, file, span = k.split("/")
            start = int(span.split("-")[0])
            os.makedirs(dest / "sessions" / s, exist_ok=True)
            with open(dest / "sessions" / s / file, "ab+") as f:
                f.seek(0, 2)
                if f.tell() < start:
                    f.write(b"\0" * (start - f.tell()))
                f.seek(start)
            with open(dest / "sessions" / s / file, "r+b") as f:
                f.seek(start)
                f.write(v)
    return dest


def _server(request, url):
    return request.getfixturevalue("seaweed") if url.startswith("s3://") else None


def data_keys(keys) -> set[str]:
    return {k for k in keys if k.startswith("f/")}


def tape_with_a_side_branch(path):
    """main, and a branch `side` whose three entries (large, random) only it reaches."""
    t = Tape.init(path)
    s = t.session("chat")
    s.append("system", {"content": "shared prompt " * 100})
    s.append("user", {"content": "start"})
    s.branch("side")
    s.checkout("side")
    for i in range(3):
        s.append("assistant", {"content": f"side {i} " + os.urandom(3000).hex()})
    s.checkout("main")
    s.append("user", {"content": "on main"})
    t.close()
    return path


def entries_of(d, session="chat", branch="side"):
    t = Tape.open(d)
    try:
        h, out = t.session(session).refs().branches.get(branch), []
        while h is not None:
            out.append(h)
            h = t.read_entry(h).parent
        return out
    finally:
        t.close()


def test_two_phases_a_claim_pushed_in_between_keeps_what_it_reaches(tmp_path, remote_url, request):
    """A deletes `side` and compacts the remote; B, which never saw the deletion, moves
    `side` on and pushes before the grace period is over. The second run must keep every
    entry of B's `side` (its old part was only in the files the plan names), and only then
    delete those files. A run that deleted at once (no plan, no second pull) loses them."""
    server = _server(request, remote_url)
    a, b, c = tmp_path / "A", tmp_path / "B", tmp_path / "C"
    tape_with_a_side_branch(a)
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "push")
    run_cli("clone", remote_url, b, check=True)
    old_side = entries_of(b)
    assert len(old_side) == 5
    cli(a, "branch", "-d", "side", "-s", "chat")
    cli(a, "push")
    before = data_keys(remote_keys(remote_url, server))

    # phase 1: a plan, nothing deleted
    r = cli_json(a, "compact", "--remote", "origin", "--expire", "now")[0]
    assert r["deleted"]["files"] == 0 and r["planned"] >= 1, r
    assert r["pending"] and r["pending"][0]["due_in_seconds"] > 13 * 86400
    after1 = remote_keys(remote_url, server)
    assert before <= data_keys(after1), "phase 1 deleted something"
    plan = json.loads(next(v for k, v in after1.items() if k.startswith("d/")))
    assert {f["file"] for f in plan["files"]} >= {k.split("/")[2] for k in before}
    show = cli_json(a, "remote", "show", "origin")[0]
    assert show["planned_deletions"] and show["deleted_files"] == 0

    # B moves side on without having seen the deletion: its claim beats the deletion
    t = Tape.open(b)
    s = t.session("chat")
    s.checkout("side")
    s.append("user", {"content": "B goes on on side"})
    t.close()
    cli(b, "push")

    # phase 2 (the grace period taken as over): pull, compact, then delete
    r = cli_json(a, "compact", "--remote", "origin", "--expire", "now", "--grace", "now")[0]
    assert r["deleted"]["files"] >= len(before) and not r["deferred"], r
    left = remote_keys(remote_url, server)
    assert not (before & data_keys(left)), "the planned files are still there"
    show = cli_json(a, "remote", "show", "origin")[0]
    assert show["deleted_files"] >= len(before)

    run_cli("clone", remote_url, c, check=True)
    for d in (a, b, c):
        cli(d, "pull")
        fsck_clean(d)
        side = entries_of(d)
        assert set(old_side) <= set(side), f"{d.name} lost entries of side"
    assert refs_of(a) == refs_of(b) == refs_of(c)
    assert reached_by_refs(a) == reached_by_refs(b) == reached_by_refs(c)


def test_space_is_freed_and_every_copy_converges(tmp_path, remote_url, request):
    server = _server(request, remote_url)
    a, b = tmp_path / "A", tmp_path / "B"
    tape_with_a_side_branch(a)
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "push")
    run_cli("clone", remote_url, b, check=True)
    for i in range(4):  # many small pushes: many pieces
        cli(b, "append", "user", json.dumps({"content": f"b {i}"}), "-s", "chat")
        cli(b, "push")
    cli(a, "pull")
    cli(a, "branch", "-d", "side", "-s", "chat")
    full = remote_keys(remote_url, server)
    r = cli_json(a, "compact", "--remote", "origin", "--expire", "now", "--grace", "now")[0]
    assert r["deleted"]["files"] >= 5, r
    small = remote_keys(remote_url, server)
    size = lambda keys: sum(len(v) for k, v in keys.items() if k.startswith("f/"))  # noqa: E731
    assert size(small) < size(full) - 9000, (size(small), size(full))  # side's 9 KB of random text went
    assert len(data_keys(small)) == 1  # one pack
    # B still holds the deleted files: its next push compacts B first (by B's own policy,
    # which keeps a deleted branch for --expire 90d) and uploads what B keeps
    cli(b, "pull")
    p = cli(b, "push")
    assert b"compacting this copy first" in p.stderr, p.stderr
    assert refs_of(a) == refs_of(b)
    # once B lets go too, the next compaction of the remote frees the space for good
    cli(b, "compact", "--expire", "now", "--grace", "now")
    cli(b, "push")
    cli(a, "compact", "--remote", "origin", "--expire", "now", "--grace", "now")
    again = remote_keys(remote_url, server)
    assert size(again) < size(full) - 9000 and len(data_keys(again)) == 1, (size(again), sorted(data_keys(again)))
    cli(b, "pull")
    cli(b, "append", "user", '{"content": "after"}', "-s", "chat")
    cli(b, "push")
    cli(a, "pull")
    for d in (a, b):
        fsck_clean(d)
    assert refs_of(a) == refs_of(b) and reached_by_refs(a) == reached_by_refs(b)
    # a second compaction with nothing new deletes nothing it needs and converges again
    cli(a, "compact", "--remote", "origin", "--expire", "now", "--grace", "now")
    c = tmp_path / "C"
    run_cli("clone", remote_url, c, check=True)
    fsck_clean(c)
    assert refs_of(c) == refs_of(a) and reached_by_refs(c) == reached_by_refs(a)


def pushed_with_a_secret(a, remote_url) -> str:
    """A tape at `a` whose session "chat" holds an API key in a tool output, pushed (with
    --allow-secrets) to the remote; returns the key."""
    secret = "sk-ant-api03-" + uuid.uuid4().hex + uuid.uuid4().hex
    t = Tape.init(a)
    s = t.session("chat")
    s.append("user", {"content": "deploy it"})
    s.append("tool_result", {"call_id": "c1", "output": f"ANTHROPIC_API_KEY={secret}\nPATH=/usr/bin"})
    s.append("assistant", {"content": "done"})
    t.close()
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "push", "--allow-secrets")
    return secret


def redacted_compacted_and_cloned(a, remote_url, server, secret, tmp_path):
    """`redact --scan` and `compact --remote --grace now` on A; then no object of the remote
    holds the secret (records read as ctape reads them, and raw), and a clone is clean."""
    cli(a, "redact", "--scan", "-s", "chat")
    cli(a, "compact", "--remote", "origin", "--grace", "now")
    keys = remote_keys(remote_url, server)
    assert not holders(secret.encode(), remote_as_tape(keys, a, tmp_path / "after"))
    assert not any(secret[:24].encode() in v for v in keys.values())
    c = tmp_path / "C"
    run_cli("clone", remote_url, c, check=True)
    fsck_clean(c)
    return c


def test_a_redacted_secret_leaves_the_remote_after_compact_remote(tmp_path, remote_url, request):
    """SPEC 18: after the redaction reached a copy and it compacted, the remote after its
    compaction holds no byte of the secret."""
    server = _server(request, remote_url)
    a = tmp_path / "A"
    secret = pushed_with_a_secret(a, remote_url)
    assert holders(secret.encode(), remote_as_tape(remote_keys(remote_url, server), a, tmp_path / "before"))
    c = redacted_compacted_and_cloned(a, remote_url, server, secret, tmp_path)
    out = cli(c, "log", "-s", "chat").stdout
    assert secret.encode() not in out


def test_killed_at_random_instants_then_rerun(tmp_path, s3env):
    bucket = s3env.bucket("ct-" + uuid.uuid4().hex[:12])
    url = f"s3://{bucket}/k"
    a, b = tmp_path / "A", tmp_path / "B"
    t = Tape.init(a)
    rnd = random.Random(5)
    for n in range(4):
        s = t.session(f"s{n}")
        for i in range(12):
            s.append("assistant", {"content": os.urandom(rnd.randint(500, 20000)).hex()})
    t.close()
    cli(a, "remote", "add", "origin", url)
    cli(a, "push")
    run_cli("clone", url, b, check=True)
    for round_ in range(3 if not SLOW else 12):
        t = Tape.open(b)
        for n in range(4):
            t.session(f"s{n}").append("user", {"content": f"round {round_}"})
        t.close()
        cli(b, "push")
        p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(a), "compact", "--remote", "origin", "--grace", "now", "--expire", "now"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rnd.uniform(0.2, 2.5))
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert cli(a, "log", "-s", "s0", "-n", "1", check=False).returncode == 0
    cli(a, "compact", "--remote", "origin", "--grace", "now", "--expire", "now")
    cli(a, "compact", "--remote", "origin", "--grace", "now", "--expire", "now")  # carries out what the kills left planned
    cli(b, "pull")
    c = tmp_path / "C"
    run_cli("clone", url, c, check=True)
    for d in (a, b, c):
        fsck_clean(d)
    assert refs_of(a) == refs_of(b) == refs_of(c)
    assert reached_by_refs(a) == reached_by_refs(b) == reached_by_refs(c)
    assert len(reached_by_refs(c)) == 4 * (12 + (3 if not SLOW else 12))


def test_bad_uses_are_one_line_errors(tmp_path):
    a = tape_with_a_side_branch(tmp_path / "A")
    # an unknown remote NAME is not found (exit 1, SPEC 5), as an unknown session; --dry-run with --remote is usage (2)
    for args, code in ((["compact", "--remote", "nope"], 1), (["compact", "--remote", "origin", "--dry-run"], 2)):
        if args[2] == "origin":
            (tmp_path / "R").mkdir()
            cli(a, "remote", "add", "origin", f"file://{tmp_path / 'R'}")
        p = cli(a, *args, check=False)
        assert p.returncode == code, p.stderr
        assert len(p.stderr.decode().strip().splitlines()) == 1 and b"Traceback" not in p.stderr


def test_a_copy_that_never_pulls_and_revives_what_was_deleted_loses_nothing(tmp_path, remote_url, request):
    """The case the grace period cannot cover: `--grace now`, and a copy that only pushes
    (a CI runner, `push --follow`) moves `side` on after the remote's files went. Its next
    push learns of the deletion (g/<n>), compacts the copy first, and uploads the pack
    that holds what its claim reaches: a clone has every entry."""
    server = _server(request, remote_url)
    a, b, c = tmp_path / "A", tmp_path / "B", tmp_path / "C"
    tape_with_a_side_branch(a)
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "push")
    run_cli("clone", remote_url, b, check=True)
    old_side = entries_of(b)
    cli(a, "branch", "-d", "side", "-s", "chat")
    r = cli_json(a, "compact", "--remote", "origin", "--expire", "now", "--grace", "now")[0]
    assert r["deleted"]["files"] >= 1 and r["local"]["freed_objects"] >= 3, r
    t = Tape.open(b)
    s = t.session("chat")
    s.checkout("side")
    s.append("user", {"content": "B goes on on side, never having pulled"})
    t.close()
    p = cli(b, "push")
    assert b"compacting this copy first" in p.stderr, p.stderr
    run_cli("clone", remote_url, c, check=True)
    fsck_clean(c)
    assert set(old_side) <= set(entries_of(c))
    cli(a, "pull")
    fsck_clean(a)
    assert refs_of(a) == refs_of(b) == refs_of(c)
    assert reached_by_refs(a) == reached_by_refs(b) == reached_by_refs(c)


def test_a_deletion_another_copy_left_half_done_is_finished_by_the_next_compactor(tmp_path, remote_url, request, monkeypatch):
    """Found by the sync model (RemoteRedactWorld, seed 71417): copy B's `compact --remote`
    announced a deletion and wrote its record, then died before deleting the pieces. Only
    B's next run finished it, so a secret redacted on A meanwhile stayed on the remote after
    A's `compact --remote --grace now`. Any compactor now finishes such a record."""
    from ctape.sync import prune
    from ctape.sync.backend import open_backend

    server = _server(request, remote_url)
    a, b = tmp_path / "A", tmp_path / "B"
    secret = pushed_with_a_secret(a, remote_url)
    run_cli("clone", remote_url, b, check=True)

    class Killed(Exception):
        pass

    def killed(*args):
        raise Killed()

    with monkeypatch.context() as m:  # B dies right after its record, before any piece goes
        m.setattr(prune, "_delete_deleted", killed)
        tb = Tape.open(b)
        try:
            with pytest.raises(Killed):
                prune.compact_remote(tb, open_backend(remote_url), "origin", grace="now", expire="now", allow_secrets=True)
        finally:
            tb.close()
    keys = remote_keys(remote_url, server)
    assert any(k.startswith("x/") for k in keys), "B's record was written"
    assert holders(secret.encode(), remote_as_tape(keys, a, tmp_path / "half")), "its pieces are still there"
    c = redacted_compacted_and_cloned(a, remote_url, server, secret, tmp_path)
    assert refs_of(c) == refs_of(a)


def tree_bytes(d) -> dict[str, bytes]:
    out = {}
    for folder, _, files in os.walk(d):
        for f in files:
            with open(os.path.join(folder, f), "rb") as fh:
                out[os.path.relpath(os.path.join(folder, f), d)] = fh.read()
    return out


def undetected_secret(seed: int) -> str:
    """A secret no detector finds: plain words."""
    rng = random.Random(seed)
    return "the vault opens with " + " ".join("".join(rng.choice("aeioulmnrst") for _ in range(6)) for _ in range(6))


def pushed_and_cloned_with_an_undetected_secret(a, b, remote_url, seed: int) -> tuple[str, str]:
    """A tape at `a` whose session "chat" holds a text no detector finds (plain words),
    pushed without --allow-secrets and cloned to `b`; returns (the text, its entry)."""
    secret = undetected_secret(seed)
    t = Tape.init(a)
    s = t.session("chat")
    s.append("user", {"content": "what opens the vault?"})
    told = s.append("assistant", {"content": secret}).hash
    s.append("user", {"content": "thanks"})
    t.close()
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "push")
    run_cli("clone", remote_url, b, check=True)
    return secret, told


def test_a_copy_that_has_not_pulled_a_redaction_does_not_upload_it_again(tmp_path, remote_url, request):
    """A redacts a text no detector finds (by its path) and compacts the remote. B, a clone
    taken before, still holds the text and has not pulled the redaction. B's next push
    learns of the deletion; it used to compact B and upload its pack, text and all, so the
    remote held the secret again. The deletion's manifest now names the objects its
    compactor knew redacted, and B's push refuses (one line: pull, compact), leaving B as
    it was; after the pull and a compaction B's push goes through and the remote stays clean."""
    server = _server(request, remote_url)
    a, b, c = tmp_path / "A", tmp_path / "B", tmp_path / "C"
    secret, told = pushed_and_cloned_with_an_undetected_secret(a, b, remote_url, 7)
    cli(a, "redact", "-s", "chat", told, "--path", "$.payload.content")
    cli(a, "compact", "--remote", "origin", "--grace", "now")
    assert not holders(secret.encode(), remote_as_tape(remote_keys(remote_url, server), a, tmp_path / "after-a"))
    assert cli_json(b, "remote", "show", "origin")[0]["sessions"]  # reads the deletion's manifest too

    t = Tape.open(b)
    t.session("chat").append("user", {"content": "B goes on, never having pulled"})
    t.close()
    before = tree_bytes(b)
    p = cli(b, "push", check=False)
    assert p.returncode != 0 and b"ctape pull origin" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert tree_bytes(b) == before  # refused: nothing compacted
    assert not holders(secret.encode(), remote_as_tape(remote_keys(remote_url, server), a, tmp_path / "after-b"))

    cli(b, "pull")
    # the redaction is here now, and B holds files the remote's compaction deleted: the push
    # compacts B first (which takes the redacted bytes out) and goes through. It was refused
    # with "run `ctape compact` first", the step it was about to take (found by an audit)
    assert holders(secret.encode(), b)
    p = cli(b, "push")
    assert b"compacting this copy first" in p.stderr, p.stderr
    assert not holders(secret.encode(), b)
    assert not holders(secret.encode(), remote_as_tape(remote_keys(remote_url, server), a, tmp_path / "after-b2"))
    run_cli("clone", remote_url, c, check=True)
    fsck_clean(c)
    assert reached_by_refs(c) == reached_by_refs(b)
    assert "B goes on, never having pulled" in cli(c, "log", "-s", "chat").stdout.decode()


def test_a_copy_whose_index_has_not_seen_an_rsynced_file_still_refuses(tmp_path, remote_url, request):
    """Found by the sync model (seed 99038 of CleanedRemoteWorld): B holds the text in a
    file that rsync brought after B's index last looked at its files. A redacts the text
    and compacts the remote. B's push asked its index whether B holds the redacted value,
    was told no, compacted B (it held a deleted file) and uploaded the text again. A push
    now brings the index up to date with the files before it looks."""
    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed (.ci/run installs it)")
    server = _server(request, remote_url)
    a, b = tmp_path / "A", tmp_path / "B"
    t = Tape.init(a)
    t.session("chat").append("user", {"content": "what opens the vault?"})
    t.close()
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "push")
    run_cli("clone", remote_url, b, check=True)
    assert "what opens the vault?" in cli(b, "log", "-s", "chat").stdout.decode()  # B's index is built
    secret = undetected_secret(11)
    t = Tape.open(a)
    told = t.session("chat").append("assistant", {"content": secret}).hash
    t.close()
    cli(a, "push")
    subprocess.run(["rsync", "-a", f"{a}/", f"{b}/"], check=True)  # B's index is not told
    cli(a, "redact", "-s", "chat", told, "--path", "$.payload.content")
    cli(a, "compact", "--remote", "origin", "--grace", "now")
    assert not holders(secret.encode(), remote_as_tape(remote_keys(remote_url, server), a, tmp_path / "after-a"))

    before = tree_bytes(b)
    p = cli(b, "push", check=False)
    assert p.returncode != 0 and b"ctape pull origin" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert tree_bytes(b) == before
    assert not holders(secret.encode(), remote_as_tape(remote_keys(remote_url, server), a, tmp_path / "after-b"))
    cli(b, "pull")
    cli(b, "compact")
    cli(b, "push")
    assert not holders(secret.encode(), remote_as_tape(remote_keys(remote_url, server), a, tmp_path / "after-b2"))
    fsck_clean(b)


def test_a_push_between_a_deletions_announcement_and_its_manifest_learns_it_later(tmp_path, remote_url, request, monkeypatch):
    """Found in review: `compact --remote` announces a deletion (g/<n>), then writes the
    manifest that lists it (and the redacted objects), then deletes. B's push in between
    found g/<n>, read the manifests (not that one yet) and moved past g/<n> for good: it
    never learnt the deletion nor the redaction, and after a `compact` its next push put
    the text back on the cleaned remote. g/<n> now stays B's next look until its manifest
    has been read; and since 2026-12-07 the announcement carries what the manifest lists,
    so B learns the redaction from it and refuses already."""
    from ctape.sync import prune
    from ctape.sync import remote as remotes

    server = _server(request, remote_url)
    a, b = tmp_path / "A", tmp_path / "B"
    secret, told = pushed_and_cloned_with_an_undetected_secret(a, b, remote_url, 11)
    cli(a, "redact", "-s", "chat", told, "--path", "$.payload.content")

    real, between = prune.put_manifest, []

    def push_of_b_first(*args, **kw):
        if kw.get("deleted"):
            p = cli(b, "push", check=False)  # g/<n> is there, its manifest not yet
            between.append((p.returncode, p.stderr.decode()))
        return real(*args, **kw)

    monkeypatch.setattr(prune, "put_manifest", push_of_b_first)
    ta = Tape.open(a)
    try:
        name, backend = remotes.connect(ta.store, "origin")
        r = prune.compact_remote(ta, backend, name, grace="now")
    finally:
        ta.close()
    monkeypatch.setattr(prune, "put_manifest", real)
    # the announcement itself says what goes and what was redacted (before, it named only
    # the plan, and this push went through unaware): B refuses at once, as after the manifest
    assert [code for code, _ in between] == [1] and "ctape pull origin" in between[0][1], between
    assert r["deleted"]["files"] >= 1, r
    assert not holders(secret.encode(), remote_as_tape(remote_keys(remote_url, server), a, tmp_path / "after-a"))

    t = Tape.open(b)
    t.session("chat").append("user", {"content": "B goes on"})
    t.close()
    p = cli(b, "push", check=False)
    assert p.returncode != 0 and b"ctape pull origin" in p.stderr, p.stderr
    cli(b, "compact")  # what a user might try first: still refused, nothing goes up
    assert cli(b, "push", check=False).returncode != 0
    assert not holders(secret.encode(), remote_as_tape(remote_keys(remote_url, server), a, tmp_path / "after-b"))
    cli(b, "pull")
    cli(b, "compact")
    cli(b, "push")
    assert not holders(secret.encode(), remote_as_tape(remote_keys(remote_url, server), a, tmp_path / "after-b2"))


def test_a_file_uploaded_again_after_its_deletion_lets_copies_settle(tmp_path, remote_url, request):
    """A compaction of the remote deletes pack P; a copy that held only P uploads it again
    (docs/remotes.md: what its own compaction kept goes up again, after the deletion). The
    other copies then went round for good: each push compacted this copy first (P was
    "deleted" and held), each pull fetched P back (the remote holds it), 14 days long with
    the default grace. From a black-box audit. Now P, on the remote again, is no deleted
    file: a round of push and pull settles, and nothing is lost."""
    a, b, c = tmp_path / "A", tmp_path / "B", tmp_path / "C"
    t = Tape.init(a)
    for i in range(3):
        t.session("S").append("user", {"content": f"a{i}"})
    t.close()
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "compact", "--remote", "origin", "--grace", "now")  # the remote: S as one pack P
    run_cli("clone", remote_url, c, check=True)
    run_cli("clone", remote_url, b, check=True)
    cli(b, "append", "user", "--text", "b1", "-s", "S")
    cli(b, "push")
    cli(a, "compact", "--remote", "origin", "--grace", "now")  # P replaced by P2, and deleted
    cli(c, "push")  # C holds only P: its compaction keeps it, and it goes up again
    for d in (b, a, c):
        for _ in range(2):  # the first round may compact and bring what it lacks
            cli(d, "pull")
            cli(d, "push")
        pull, push = cli(d, "pull"), cli(d, "push")
        assert b"nothing to pull" in pull.stdout and b"nothing to push" in push.stdout, (d, pull.stdout, push.stdout)
        assert b"compacting this copy first" not in push.stderr, (d, push.stderr)
    texts = {json.loads(x)["payload"]["content"] for x in cli(b, "log", "-s", "S", "--json").stdout.splitlines()}
    assert texts == {"a0", "a1", "a2", "b1"}
    for d in (a, b, c):
        fsck_clean(d)


def test_a_clone_that_reads_both_listings_of_a_file_before_its_deletion_fetches_it(tmp_path, remote_url, request, monkeypatch):
    """Copy C lists pack P, a compaction of the remote by Z deletes P, and C uploads P again
    after it (what C's compaction kept as it was): C's manifests list the same piece twice,
    before and after the deletion. A clone reads the uploaders in order of name, so when C's
    id comes before Z's it read both listings first: the second, found equal to the first,
    was dropped, and Z's deletion then took the piece off. The clone lacked P, which the
    remote held whole (the concurrent redaction test lost a session's 15 entries this way
    in CI: its last pack, uploaded again, was the session's only file on the remote)."""
    a, z, fresh = tmp_path / "C", tmp_path / "Z", tmp_path / "fresh"
    monkeypatch.setenv("CTAPE_WRITER", "aaaa0000c")  # read first
    t = Tape.init(a)
    for i in range(3):
        t.session("S").append("user", {"content": f"c{i}"})
    t.close()
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "compact", "--remote", "origin", "--grace", "now")  # the remote: S as one pack P, listed by C
    (p,) = os.listdir(a / "sessions" / "S")
    monkeypatch.setenv("CTAPE_WRITER", "zzzz0000z")  # read last
    run_cli("clone", remote_url, z, check=True)
    cli(z, "append", "user", "--text", "z1", "-s", "S")
    cli(z, "compact", "--remote", "origin", "--grace", "now")  # P replaced by P2 and deleted
    monkeypatch.setenv("CTAPE_WRITER", "aaaa0000c")
    with _out_of_reach(remote_url, "f/S/", keep="f/S/" + p):
        assert b"compacting this copy first" in cli(a, "push").stderr
    assert "f/S/" + p in {k.rsplit("/", 1)[0] for k in data_keys(remote_keys(remote_url, _server(request, remote_url)))}
    monkeypatch.setenv("CTAPE_WRITER", "mmmm0000f")
    run_cli("clone", remote_url, fresh, check=True)
    assert p in os.listdir(fresh / "sessions" / "S"), "the clone lacks a file the remote holds"
    cli(fresh, "pull")
    assert b"nothing to pull" in cli(fresh, "pull").stdout
    fsck_clean(fresh)


@contextmanager
def _out_of_reach(url: str, prefix: str, keep: str):
    """The objects under `prefix` (but those under `keep`) taken off the remote inside the
    block, and put back after it. A push that compacts for a deletion brings in first what
    replaced the deleted files (push._bring_in), so its pack is the compactor's, there
    already; a file goes up again as it is only when this copy could not read those (a piece
    damaged or gone meanwhile): these tests play that case."""
    from ctape.sync.backend import open_backend

    be = open_backend(url)
    held = {k: be.get(k) for k, _, is_prefix in list(be.list(prefix)) if not is_prefix and not k.startswith(keep)}
    assert held
    for k in held:
        be.delete(k)
    try:
        yield
    finally:
        for k, v in held.items():
            assert be.put_if_absent(k, v)


def _c_holds_p_and_z_deletes_it(tmp_path, remote_url, monkeypatch):
    """C (read first) pushes session S as one pack P; Z clones, appends, and is about to run
    `compact --remote --grace now`, which replaces P and deletes it. (C, Z, P)"""
    a, z = tmp_path / "C", tmp_path / "Z"
    monkeypatch.setenv("CTAPE_WRITER", "aaaa0000c")
    t = Tape.init(a)
    for i in range(3):
        t.session("S").append("user", {"content": f"c{i}"})
    t.close()
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "compact", "--remote", "origin", "--grace", "now")
    (p,) = os.listdir(a / "sessions" / "S")
    monkeypatch.setenv("CTAPE_WRITER", "zzzz0000z")
    run_cli("clone", remote_url, z, check=True)
    cli(z, "append", "user", "--text", "z1", "-s", "S")
    return a, z, p


def _compact_remote_of(z, **kw):
    from ctape.sync import prune
    from ctape.sync import remote as remotes

    t = Tape.open(z)
    try:
        name, backend = remotes.connect(t.store, "origin")
        return prune.compact_remote(t, backend, name, grace="now", **kw)
    finally:
        t.close()


def _clone_has_every_file(remote_url, fresh, p, monkeypatch):
    monkeypatch.setenv("CTAPE_WRITER", "mmmm0000f")
    c = run_cli("clone", remote_url, fresh, check=True)
    assert b"lacks" not in c.stderr, c.stderr
    assert p in os.listdir(fresh / "sessions" / "S"), "the clone lacks a file the remote lists"
    pull = cli(fresh, "pull")
    assert b"nothing to pull" in pull.stdout and not pull.stderr, pull
    fsck_clean(fresh)
    texts = {json.loads(x)["payload"]["content"] for x in cli(fresh, "log", "-s", "S", "--json").stdout.splitlines()}
    assert texts == {"c0", "c1", "c2", "z1"}


def test_a_file_put_again_between_its_deletions_announcement_and_its_deletes_stays(tmp_path, remote_url, request, monkeypatch):
    """Z announces the deletion of P (g/<n>, then its manifest), then deletes. C's push in
    between learns the deletion, compacts (P kept as it is) and puts P again: the key still
    holds the old P, found equal, listed as put after the deletion; then Z deletes it. Every
    reader then missed P for good (each pull warned "the remote lacks ..."), and C, sure the
    remote held it, never sent it again. Now C puts P under a key of the next generation
    (layout.piece_key), which the deletes leave."""
    import subprocess

    from ctape.sync import prune

    a, z, p = _c_holds_p_and_z_deletes_it(tmp_path, remote_url, monkeypatch)
    real, pushes = prune._delete_deleted, []

    def push_of_c_between(*args):
        if not pushes:  # C's push starts once the deletion is announced and marked carried out
            env = dict(os.environ, CTAPE_WRITER="aaaa0000c")
            with _out_of_reach(remote_url, "f/S/", keep=f"f/S/{p}"):  # (so C holds only P: _out_of_reach)
                pushes.append(subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(a), "push"], env=env,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE))
                pushes[0].wait(60)  # C's push lists P as put again and is done
        return real(*args)

    monkeypatch.setattr(prune, "_delete_deleted", push_of_c_between)
    r = _compact_remote_of(z)
    monkeypatch.setattr(prune, "_delete_deleted", real)
    assert r["deleted"]["files"] == 1 and pushes, r
    out, err = pushes[0].communicate(timeout=60)
    assert pushes[0].returncode == 0 and b"compacting this copy first" in err, err
    _clone_has_every_file(remote_url, tmp_path / "fresh", p, monkeypatch)


def _pushed_once(a, remote_url):
    """A tape at `a` with one entry in session chat, pushed to the remote `origin`."""
    t = Tape.init(a)
    t.session("chat").append("user", {"content": "deploy it"})
    t.close()
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "push")
    return a


def test_pieces_a_killed_push_left_unlisted_leave_with_compact_remote(tmp_path, remote_url, request, monkeypatch):
    """A push killed after its pieces and before its manifest leaves pieces nobody lists.
    Its rerun lists them only while this copy's files are as they were; after a `compact`
    they never are, and such a piece stayed on the remote for good, with a value redacted
    since in it: one past the listed end of a segment (a deletion takes a file only up to
    the end the remote listed), one of a segment no manifest ever named. `compact --remote`
    now deletes the pieces no manifest lists once they are older than the grace period."""
    from ctape.sync import push as pushing
    from ctape.sync import remote as remotes

    server = _server(request, remote_url)
    a = _pushed_once(tmp_path / "A", remote_url)
    secrets = ["sk-ant-api03-" + uuid.uuid4().hex + uuid.uuid4().hex for _ in range(2)]
    t = Tape.open(a)
    t.session("chat").append("tool_result", {"call_id": "c1", "output": f"ANTHROPIC_API_KEY={secrets[0]}"})
    t.session("other").append("tool_result", {"call_id": "c2", "output": f"ANTHROPIC_API_KEY={secrets[1]}"})

    class Killed(Exception):
        pass

    def killed(*args, **kw):
        raise Killed()

    with monkeypatch.context() as m:
        m.setattr(pushing, "put_manifest", killed)
        name, backend = remotes.connect(t.store, "origin")
        with pytest.raises(Killed):
            pushing.push(t, backend, name, allow_secrets=True)
    t.close()
    before = remote_keys(remote_url, server)
    for secret in secrets:
        assert holders(secret.encode(), remote_as_tape(before, a, tmp_path / f"killed-{secret[-6:]}"))
    cli(a, "compact", "--grace", "now")  # the segments are packed: no rerun lists those pieces
    cli(a, "redact", "--scan")
    (young,) = cli_json(a, "compact", "--remote", "origin")  # default grace: young pieces stay
    assert young["deleted"]["unlisted"] == 0, young
    assert data_keys(before) <= data_keys(remote_keys(remote_url, server))
    out = cli(a, "compact", "--remote", "origin", "--grace", "now")
    assert b"no manifest lists" in out.stdout, out.stdout
    keys = remote_keys(remote_url, server)
    for secret in secrets:
        assert not holders(secret.encode(), remote_as_tape(keys, a, tmp_path / f"after-{secret[-6:]}"))
        assert not any(secret[:24].encode() in v for v in keys.values())
    c = tmp_path / "C"
    p = run_cli("clone", remote_url, c, check=True)
    assert b"lacks" not in p.stderr, p.stderr
    fsck_clean(c)
    assert refs_of(c) == refs_of(a)


def test_a_manifest_this_version_cannot_read_keeps_the_unlisted_pieces(tmp_path, remote_url, request, monkeypatch):
    """A manifest of another version (or junk) is ignored with a warning; the pieces it
    lists would look unlisted, so `compact --remote` deletes no unlisted piece then, and
    says so."""
    server = _server(request, remote_url)
    a = _pushed_once(tmp_path / "A", remote_url)
    from ctape.sync import layout
    from ctape.sync.backend import open_backend

    backend = open_backend(remote_url)
    newer = json.dumps({"format": "ctape-remote-manifest", "version": 2, "uploader": "zzzz9999", "n": 0}).encode()
    assert backend.put_if_absent(layout.manifest_key("zzzz9999", 0), newer)
    assert backend.put_if_absent("f/chat/zzzz9999-00000000000000000001.seg/0-10", b"0123456789")
    out = cli(a, "compact", "--remote", "origin", "--grace", "now")
    assert b"pieces no manifest lists are kept" in out.stderr, out.stderr
    assert "f/chat/zzzz9999-00000000000000000001.seg/0-10" in remote_keys(remote_url, server)


def test_a_file_put_again_while_an_earlier_announcement_waits_for_its_manifest_is_read(tmp_path, remote_url, request, monkeypatch):
    """A compactor killed between its announcement (g/0) and its manifest leaves g/0 with
    no manifest; a push stays at g/0 for an hour (docs/remotes.md). Z then deletes P
    (deletion 1), and C, which learned deletion 1 from its manifest, puts P again under the
    generation-2 key but lists it with g=0, its count of deletions that waits for g/0.
    Readers judged by g alone and took P for deleted: a clone lacked P, and C, sure the
    remote held it, never sent it again. They now judge by the key's generation too.
    (Found by a review, helper-84.)"""
    from ctape.sync import layout
    from ctape.sync.backend import open_backend

    a, z, p = _c_holds_p_and_z_deletes_it(tmp_path, remote_url, monkeypatch)
    backend = open_backend(remote_url)
    assert backend.put_if_absent(layout.compaction_key(0), json.dumps({"compactor": "kkkk0000k", "plan": 0, "time": time.time()}).encode())
    monkeypatch.setenv("CTAPE_WRITER", "zzzz0000z")
    cli(z, "compact", "--remote", "origin", "--grace", "now")  # deletion 1: P replaced and deleted
    monkeypatch.setenv("CTAPE_WRITER", "aaaa0000c")
    with _out_of_reach(remote_url, "f/S/", keep=f"f/S/{p}"):  # (so C holds only P: _out_of_reach)
        assert b"compacting this copy first" in cli(a, "push").stderr  # C puts P again
    assert any(k.startswith(f"f/S/{p}/") and k.endswith(".2") for k, _, pre in backend.list("f/") if not pre)
    _clone_has_every_file(remote_url, tmp_path / "fresh", p, monkeypatch)
