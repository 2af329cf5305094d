"""Remote and privacy gaps an audit found (SPEC sections 14, 17, 18): each test fails on
the code before its fix. Real folder remotes, and SeaweedFS where the remote tests use it."""

from __future__ import annotations

import contextlib
import json
import os

from ctape import Tape
from ctape.history.stream import StreamWriter

from conftest import run_cli, snapshot

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def has_bytes(data: bytes, needle: str) -> bool:
    """Do these bytes, or any zstd frame inside them, hold needle?"""
    import zstandard

    n = needle.encode()
    hit, i = n in data, data.find(ZSTD_MAGIC)
    while i >= 0 and not hit:
        try:
            hit = n in zstandard.ZstdDecompressor().decompressobj().decompress(data[i:])
        except zstandard.ZstdError:
            pass
        i = data.find(ZSTD_MAGIC, i + 1)
    return hit


def holding(needle: str, root) -> list[str]:
    """Files under root whose bytes, or any zstd frame inside them, hold needle."""
    out = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                if has_bytes(f.read(), needle):
                    out.append(os.path.relpath(path, root))
    return out


def cli(d, *args, check=True, env=None):
    return run_cli("--dir", d, *args, check=check, env=env)


def interrupted_stream(d, session: str, pieces: list[str]) -> None:
    """A stream that received `pieces` (each persisted by a flush of its own, as a slow
    model's text arrives) and then died: partial records, no entry."""
    t = Tape.open(d)
    try:
        s = t.session(session)
        w = StreamWriter(s, flush_interval=3600)
        w.__enter__()
        for p in pieces:
            w.write(p)
            w.flush()
        w._stop.set()  # the process dies here: no __exit__, nothing recorded
        w._thread.join()
        from ctape.history.stream import _let_go

        _let_go(s.store, w.id)  # and the kernel lets go of its lock: a dead writer's stream (stream.is_live)
    finally:
        t.close()


def tape_with_remote(tmp_path):
    """A tape A with one message in session chat, and a folder remote `origin` for it."""
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    with Tape.init(a) as t:
        t.session("chat").append("user", {"content": "hello"})
    cli(a, "remote", "add", "origin", f"file://{remote}")
    return a, remote


# -- 1. an interrupted stream's text is checked before it leaves ---------------------------------


def test_push_refuses_a_secret_in_an_interrupted_stream_until_recovered_redacted_and_compacted(tmp_path):
    a, remote = tape_with_remote(tmp_path)
    key = "AKIASTREAMPARTIAL123"
    interrupted_stream(a, "chat", ["here is the key ", key, " and more"])

    p = cli(a, "scan", check=False)
    assert p.returncode == 1 and b"(interrupted stream)" in p.stdout and b"aws-access-key" in p.stdout
    assert key.encode() not in p.stdout + p.stderr and b"ctape recover -s chat" in p.stderr
    (row,) = [json.loads(line) for line in cli(a, "scan", "--json", check=False).stdout.splitlines()]
    assert row["hash"] is None and row["stream"] and row["kind"] == "aws-access-key"

    tape_before = snapshot(a)
    p = cli(a, "push", check=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and len(err.splitlines()) == 1, err
    assert "interrupted stream" in err and "ctape recover -s chat" in err and key not in err
    assert snapshot(remote) == {} and snapshot(a) == tape_before

    # the way out the refusal names: recover (an entry), redact it, compact (drops the partials)
    cli(a, "recover", "-s", "chat")
    cli(a, "redact", "--scan", "-s", "chat")
    assert cli(a, "push", check=False).returncode == 1  # bytes still in the segment
    cli(a, "compact")
    cli(a, "push")
    assert holding(key, remote) == [] and holding(key, a) == []
    assert cli(a, "scan", check=False).returncode == 0


def test_a_stream_still_being_written_is_not_called_interrupted_nor_sent_to_recover(tmp_path):
    """(audit, 2026-12-06) While a stream's writer still ran, `status` called its text an
    interrupted stream ("run `ctape recover`"), and scan, redact and push said to run
    `ctape recover`, which answers "nothing to recover" for a live stream: the advice led
    nowhere. They now say the stream is being written and becomes an entry when its
    writer ends."""
    a, remote = tape_with_remote(tmp_path)
    key = "AKIASTREAMSTILLLIVE1"
    t = Tape.open(a)
    w = StreamWriter(t.session("chat"), flush_interval=3600)
    w.__enter__()  # this process is the writer: its lock is held while the commands run
    try:
        w.write(f"here is the key {key} and more")
        w.flush()
        st = cli(a, "status", "-s", "chat").stdout.decode()
        assert "stream being written" in st and "its writer still runs" in st and "recover" not in st, st
        p = cli(a, "scan", check=False)
        assert p.returncode == 1 and b"(stream being written)" in p.stdout
        assert b"still being written" in p.stderr and b"recover" not in p.stderr, p.stderr
        p = cli(a, "redact", "-s", "chat", "--pattern", "AKIA[A-Z0-9]{16}", check=False)
        assert p.returncode == 1 and b"still being written: its text becomes an entry when its writer ends; then run this again" in p.stderr
        assert b"recover" not in p.stderr, p.stderr
        p = cli(a, "push", check=False)
        assert p.returncode == 1 and b"a stream still being written" in p.stderr and b"recover" not in p.stderr, p.stderr
        assert snapshot(remote) == {}
    finally:
        w.__exit__(None, None, None)
        t.close()
    # ended: its text is an entry, which redact reaches; nothing of a stream is left to name
    p = cli(a, "redact", "-s", "chat", "--pattern", "AKIA[A-Z0-9]{16}", check=False)
    assert p.returncode == 0 and b"1 value redacted" in p.stderr, p.stderr


def test_a_secret_cut_by_a_flush_is_found_whole(tmp_path):
    """The text of a stream is checked as one string, not record by record."""
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    Tape.init(a).close()
    interrupted_stream(a, "chat", ["the key is AKIASTREAM", "CUTINTWO77 ok"])
    cli(a, "remote", "add", "origin", f"file://{remote}")
    assert b"aws-access-key" in cli(a, "scan", check=False).stdout
    p = cli(a, "push", check=False)
    assert p.returncode == 1 and b"interrupted stream" in p.stderr
    # allowed by its id, it goes
    (row,) = [json.loads(line) for line in cli(a, "scan", "--json", check=False).stdout.splitlines()]
    cli(a, "scan", "--allow", row["id"])
    cli(a, "push")
    assert holding("AKIASTREAMCUTINTWO77"[:10], remote)


def test_push_follow_style_second_push_sees_the_stream_whole(tmp_path):
    """A push between two flushes sends the first half (no finding yet); the next push
    sends the second half and must still see the key whole."""
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    s = t.session("chat")
    w = StreamWriter(s, flush_interval=3600)
    w.__enter__()
    w.write("key: AKIAFOLLOW")
    w.flush()
    run_cli("--dir", a, "remote", "add", "origin", f"file://{remote}", check=True)
    assert cli(a, "push", check=False).returncode == 0
    w.write("PUSHHALF12 done")
    w.flush()
    w._stop.set()
    w._thread.join()
    t.close()
    p = cli(a, "push", check=False)
    assert p.returncode == 1 and b"interrupted stream" in p.stderr, p.stderr


# -- 2. temp files a killed push left on a folder remote ------------------------------------------


KILL_AT_LINK = """
import os, sys
real = os.link
def link(src, dst, *a, **k):
    if "/f/" in dst:
        os.kill(os.getpid(), 9)  # killed between writing the temp file and linking it
    return real(src, dst, *a, **k)
os.link = link
sys.argv = ["ctape", "--dir", sys.argv[1], "push", "--allow-secrets"]
from ctape.cli import main
main()
"""


def test_compact_remote_removes_temp_files_a_killed_push_left_once_past_the_grace(tmp_path):
    import subprocess
    import sys

    a, remote = tape_with_remote(tmp_path)
    cli(a, "push")
    secret = "zebrafishcrown77"
    cli(a, "append", "user", "--text", f"db password: {secret}", "-s", "chat")
    p = subprocess.run([sys.executable, "-c", KILL_AT_LINK, str(a)], capture_output=True)
    assert p.returncode == -9
    temps = [f for f in holding(secret, remote) if os.path.basename(f).startswith(".tmp-")]
    assert temps  # the killed write's bytes, under a name no listing shows

    cli(a, "push", "--allow-secrets")
    cli(a, "redact", "-s", "chat", "--pattern", secret)
    # young: a live push could still be writing it, so a run with a grace leaves it
    out = json.loads(cli(a, "compact", "--remote", "origin", "--grace", "1h", "--json").stdout)
    assert out["deleted"]["leftovers"] == 0 and os.path.exists(remote / temps[0])
    # past the grace (here: now), it goes with the rest
    out = json.loads(cli(a, "compact", "--remote", "origin", "--grace", "now", "--expire", "now", "--json").stdout)
    assert out["deleted"]["leftovers"] == len(temps)
    assert holding(secret, remote) == []
    b = tmp_path / "B"
    run_cli("clone", f"file://{remote}", b, check=True)
    assert cli(b, "fsck", check=False).returncode == 0


# -- 3. damage in one session does not hold the others' deletions back --------------------------


from test_remote import remote_url, s3env, seaweed  # noqa: E402,F401  (fixtures: a folder, or a SeaweedFS bucket)


def remote_blobs(url: str, seaweed_server=None) -> dict[str, bytes]:
    """Every object of the remote: key -> bytes."""
    from ctape.sync.backend import open_backend

    b = open_backend(url)
    return {k: b.get(k) for k, _, _ in b.list("")}


def holds(blobs: dict[str, bytes], needle: str) -> list[str]:
    return [k for k, data in blobs.items() if has_bytes(data, needle)]


def test_a_damaged_session_defers_only_its_own_remote_deletions(tmp_path, remote_url):
    a = tmp_path / "A"
    t = Tape.init(a)
    for i in range(3):
        t.session("chat").append("user", {"content": f"chat {i}"})
        t.session("other").append("user", {"content": f"other {i}"})
    secret = "zebrafishcrown99"
    t.session("chat").append("user", {"content": f"db password {secret}"})
    t.close()
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "push", "--allow-secrets")
    cli(a, "append", "user", "--text", "other 4", "-s", "other")
    newest = sorted((a / "sessions" / "other").iterdir())[-1]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # damage inside the session's newest record
    newest.write_bytes(bytes(data))
    other_before = {k for k in remote_blobs(remote_url) if k.startswith("f/other/")}

    cli(a, "redact", "-s", "chat", "--pattern", secret)
    p = cli(a, "compact", "--remote", "origin", "--grace", "now", "--json", check=False)
    out = json.loads(p.stdout)
    assert out["deleted"]["files"] >= 1 and "other" in out["deferred"], out
    # the damaged session was held back by the push: exit 1, as `push` (2026-12-06)
    assert p.returncode == 1 and out["held_back"] == ["other"] and "the push held back other" in p.stderr.decode(), p.stderr
    after = remote_blobs(remote_url)
    assert holds(after, secret) == []  # the healthy session's old files went
    assert other_before <= set(after)  # the damaged session's stay, every piece
    b = tmp_path / "B"
    run_cli("clone", remote_url, b, check=True)
    shown = cli(b, "export", "chat").stdout
    assert b"chat 2" in shown and secret.encode() not in shown
    assert b"other 2" in cli(b, "export", "other").stdout


def test_a_session_whose_pack_did_not_reach_the_remote_keeps_its_old_files_there(tmp_path):
    """The per-session rule never deletes a file whose replacement is not on the remote:
    here chat's pack is refused (its key holds other bytes), so chat's old files stay,
    while other's go; a clone still has every entry."""
    from ctape.sync.backend import FileBackend
    from ctape.sync.prune import compact_remote

    class RefusesChatsPack(FileBackend):
        def put_if_absent(self, key, data):
            if key.startswith("f/chat/pack-"):
                super().put_if_absent(key, b"not the pack")
                return False
            return super().put_if_absent(key, data)

    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    for i in range(3):
        t.session("chat").append("user", {"content": f"chat {i}"})
        t.session("other").append("user", {"content": f"other {i}"})
    t.close()
    cli(a, "remote", "add", "origin", f"file://{remote}")
    cli(a, "push")
    cli(a, "append", "user", "--text", "chat 3", "-s", "chat")
    cli(a, "append", "user", "--text", "other 3", "-s", "other")
    cli(a, "push")
    chat_before = {k for k in remote_blobs(f"file://{remote}") if k.startswith("f/chat/")}

    t = Tape.open(a)
    try:
        out = compact_remote(t, RefusesChatsPack(str(remote), f"file://{remote}"), "origin", grace=0)
    finally:
        t.close()
    assert out["deleted"]["files"] >= 1 and "chat" in out["deferred"], out
    after = set(remote_blobs(f"file://{remote}"))
    assert chat_before <= after
    assert not any(k.startswith("f/other/") and ".seg/" in k for k in after)  # other's segments went
    assert any(p["files"] for p in out["pending"])  # chat's part waits in a plan of its own
    # the junk at the pack's key, which no manifest lists, went with the run's sweep of
    # unlisted pieces (grace 0); the next run sends the pack
    assert not list(remote.glob("f/chat/pack-*/*")) and out["deleted"]["unlisted"] == 1, out
    t = Tape.open(a)
    try:
        out = compact_remote(t, FileBackend(str(remote), f"file://{remote}"), "origin", grace=0)
    finally:
        t.close()
    assert out["deferred"] == "" and not any(".seg/" in k for k in remote_blobs(f"file://{remote}"))
    b = tmp_path / "B"
    run_cli("clone", f"file://{remote}", b, check=True)
    assert b"chat 0" in cli(b, "export", "chat").stdout and b"chat 3" in cli(b, "export", "chat").stdout
    assert cli(b, "fsck", check=False).returncode == 0


# -- 4 and 5. credentials typed into a URL are refused, never echoed; a bad endpoint is one line --


SECRETS = ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMIK7MDENG", "hunter2pw")


def refused_quietly(p, tape_before, d) -> str:
    err = p.stderr.decode()
    assert p.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not any(s in err or s in p.stdout.decode() for s in SECRETS), err
    assert snapshot(d) == tape_before
    return err


def test_credentials_in_any_url_are_refused_without_echoing_them(tmp_path):
    a = tmp_path / "A"
    Tape.init(a).session("chat").append("user", {"content": "hi"})
    before = snapshot(a)
    for args in (
        ("remote", "add", "r1", "https://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMIK7MDENG@mybucket.s3.amazonaws.com/p"),
        ("remote", "add", "r2", "file://me:hunter2pw@/srv/tapes"),
        ("remote", "add", "r3", "s3://bucket/p", "--endpoint", "ftp://me:hunter2pw@host/"),
        ("remote", "add", "r4", "s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMIK7MDENG@bucket/p"),
        ("remote", "add", "r5", "me:hunter2pw@host/p"),
    ):
        err = refused_quietly(cli(a, *args, check=False), before, a)
        assert "***" in err and "credentials" in err
    p = run_cli("clone", "https://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMIK7MDENG@host/x", tmp_path / "C")
    refused_quietly(p, {}, tmp_path / "C")
    p = run_cli("clone", "s3://bucket/x", tmp_path / "C", "--endpoint", "http://me:hunter2pw@127.0.0.1:9")
    refused_quietly(p, {}, tmp_path / "C")


def test_aws_endpoint_url_is_checked_like_endpoint(tmp_path):
    a = tmp_path / "A"
    Tape.init(a).session("chat").append("user", {"content": "hi"})
    cli(a, "remote", "add", "origin", "s3://bucket/p")
    before = snapshot(a)
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1"}
    err = refused_quietly(cli(a, "push", check=False, env={**env, "AWS_ENDPOINT_URL": "http://me:hunter2pw@127.0.0.1:9"}), before, a)
    assert "AWS_ENDPOINT_URL" in err and "***" in err
    for cmd, bad in ((("push",), "127.0.0.1:9000"), (("pull",), "http://"), (("remote", "show"), "http://host:notaport")):
        err = refused_quietly(cli(a, *cmd, check=False, env={**env, "AWS_ENDPOINT_URL": bad}), before, a)
        assert "AWS_ENDPOINT_URL" in err and "http://HOST:PORT" in err, err


# -- 6. a refusal names a command that resolves it -------------------------------------------------


def test_a_secret_in_a_removed_session_or_deleted_branch_gets_a_hint_that_works(tmp_path):
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    t.session("keep").append("user", {"content": "hello"})
    t.session("gone").append("user", {"content": "key AKIASESSIONRMXX12345 oops"})
    t.close()
    cli(a, "session", "rm", "gone")
    cli(a, "branch", "side", "-s", "keep")
    cli(a, "checkout", "side", "-s", "keep")
    cli(a, "append", "user", "--text", "key AKIABRANCHDELETED777 oops", "-s", "keep")
    cli(a, "checkout", "main", "-s", "keep")
    cli(a, "branch", "-D", "side", "-s", "keep")
    cli(a, "remote", "add", "origin", f"file://{remote}")
    p = cli(a, "push", check=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and len(err.splitlines()) == 1 and "ctape scan -s gone" not in err, err
    assert "ctape compact --expire now --grace now" in err
    cli(a, "compact", "--expire", "now", "--grace", "now")
    cli(a, "push")
    assert holding("AKIASESSIONRMXX12345", remote) == [] and holding("AKIABRANCHDELETED777", remote) == []


# -- 7. a push refused for a secret leaves the copy as it was, even when it must compact first ---


def test_a_push_refused_for_a_secret_has_not_compacted_the_copy(tmp_path):
    """A copy that still holds files the remote's compaction deleted compacts before it
    pushes (so that what others may need goes up in its packs). When the secrets check
    refuses the push, that compaction must not have happened: SPEC 2, a rejected command
    leaves the tape byte-identical."""
    a, b, remote = tmp_path / "A", tmp_path / "B", tmp_path / "R"
    remote.mkdir()
    env_a = {"CTAPE_CACHE_DIR": str(tmp_path / "cache-a"), "CTAPE_WRITER": "alpha"}
    env_b = {"CTAPE_CACHE_DIR": str(tmp_path / "cache-b"), "CTAPE_WRITER": "beta"}
    Tape.init(a).close()
    for text in ("one", "two"):
        cli(a, "append", "user", "--text", text, "-s", "chat", env=env_a)
    cli(a, "remote", "add", "origin", f"file://{remote}", env=env_a)
    cli(a, "push", env=env_a)
    run_cli("clone", f"file://{remote}", b, env=env_b, check=True)
    cli(a, "compact", "--remote", "origin", "--grace", "now", env=env_a)  # deletes files B still holds
    cli(b, "append", "user", "--text", "key AKIAREFUSEDPUSH12345 x", "-s", "chat", env=env_b)
    before = snapshot(b)
    p = cli(b, "push", check=False, env=env_b)
    assert p.returncode == 1 and b"not pushing" in p.stderr and b"compacting this copy first" not in p.stderr
    assert snapshot(b) == before
    # allowed, the push compacts as it must and goes through
    p = cli(b, "push", "--allow-secrets", env=env_b)
    assert b"compacting this copy first" in p.stderr
    c = tmp_path / "C"
    run_cli("clone", f"file://{remote}", c, env={"CTAPE_CACHE_DIR": str(tmp_path / "cache-c"), "CTAPE_WRITER": "gamma"}, check=True)
    assert [e["payload"]["content"] for e in map(json.loads, cli(c, "log", "-s", "chat", "--json", env={"CTAPE_CACHE_DIR": str(tmp_path / "cache-c")}).stdout.splitlines())] == [
        "key AKIAREFUSEDPUSH12345 x", "two", "one"]


def test_clone_warns_when_its_writer_id_already_writes_to_the_remote(tmp_path):
    """Two copies with one writer id (CTAPE_WRITER exported alike on two machines) name their
    segments and manifests alike: `clone` says so before the new copy writes anything."""
    a, remote = str(tmp_path / "a"), tmp_path / "remote"
    remote.mkdir()
    env_a = {"CTAPE_CACHE_DIR": str(tmp_path / "cache-a"), "CTAPE_WRITER": "laptop"}
    run_cli("--dir", a, "init", env=env_a, check=True)
    run_cli("--dir", a, "append", "user", '{"content": "hi"}', "-s", "chat", env=env_a, check=True)
    run_cli("--dir", a, "remote", "add", "origin", f"file://{remote}", env=env_a, check=True)
    run_cli("--dir", a, "push", env=env_a, check=True)
    same = run_cli("clone", f"file://{remote}", str(tmp_path / "b"), env={"CTAPE_CACHE_DIR": str(tmp_path / "cache-b"), "CTAPE_WRITER": "laptop"}, check=True)
    assert b"writer id 'laptop'" in same.stderr and b"CTAPE_WRITER" in same.stderr
    other = run_cli("clone", f"file://{remote}", str(tmp_path / "c"), env={"CTAPE_CACHE_DIR": str(tmp_path / "cache-c"), "CTAPE_WRITER": "cibox"}, check=True)
    assert b"writer id" not in other.stderr
    derived = run_cli("clone", f"file://{remote}", str(tmp_path / "d"), env={"CTAPE_CACHE_DIR": str(tmp_path / "cache-d")}, check=True)
    assert b"writer id" not in derived.stderr


def cloned_then_answered(tmp_path):
    """Tape A pushed and cloned as B; then A answers in chat (not pushed yet)."""
    a, remote = tape_with_remote(tmp_path)
    cli(a, "push")
    b = tmp_path / "B"
    cli(tmp_path, "clone", f"file://{remote}", b)
    with Tape.open(a) as t:
        t.session("chat").append("assistant", {"content": "hi back"})
    return a, remote, b


def test_pull_of_a_session_the_remote_lacks_says_so(tmp_path):
    """`pull -s chta` said "pulled 0 files" and nothing else: a typo looked like an
    up-to-date copy. It now says the remote holds no such session. Exit 0, as before: a
    session another machine has yet to push is no mistake (a script may pull it in a loop;
    the sync model does), unlike `push -s` of a session this copy lacks (exit 2)."""
    a, remote, b = cloned_then_answered(tmp_path)
    cli(a, "push")
    p = cli(b, "pull", "-s", "chta")
    err = p.stderr.decode()
    assert err.count("\n") == 1 and err.startswith("ctape: warning: origin holds no session 'chta'") and "remote show origin" in err, err
    with Tape.open(b) as t:
        assert t.session("chat").head.payload["content"] == "hello"  # only what was asked
    p = cli(b, "pull", "-s", "chat", "-s", "chta")
    assert "'chta'" in p.stderr.decode() and "'chat'" not in p.stderr.decode()
    with Tape.open(b) as t:
        assert t.session("chat").head.payload["content"] == "hi back"
    assert cli(b, "pull", "-s", "chat").stderr.decode() == ""


def test_a_piece_refused_by_junk_at_its_key_fails_the_push_until_compact_moves_it(tmp_path):
    """Other bytes at the key of one of this copy's pieces (another copy with the same
    CTAPE_WRITER, a damaged upload): the remote is create-only, so the piece never goes.
    push warned and exited 0 on every run while that entry never reached the remote; it
    now exits 1 and says what to do, and `compact` (a pack is named by its content) gets
    the entry there."""
    a, remote = tape_with_remote(tmp_path)
    cli(a, "push")
    segments = lambda: {p.name: p.stat().st_size for p in (a / "sessions" / "chat").iterdir() if p.name.endswith(".seg")}  # noqa: E731
    pushed = segments()
    cli(a, "append", "assistant", "--text", "the reply that must arrive", "-s", "chat")
    ((name, size),) = [(n, size) for n, size in segments().items() if pushed.get(n) != size]
    key = remote / "f" / "chat" / name / f"{pushed.get(name, 0)}-{size}"
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_bytes(b"junk")
    for _ in range(2):  # every run, not only the first
        p = cli(a, "push", check=False)
        err = p.stderr.decode().strip().splitlines()
        assert p.returncode == 1 and "Traceback" not in p.stderr.decode(), p.stderr
        assert "holds other bytes" in err[0] and err[-1].startswith("ctape: error: 1 piece not pushed") and "ctape compact" in err[-1], err
    assert json.loads(cli(a, "push", "--json", check=False).stdout)["refused"] == 1
    cli(a, "compact")
    cli(a, "push")
    b = tmp_path / "B"
    cli(tmp_path, "clone", f"file://{remote}", b)
    assert b"the reply that must arrive" in cli(b, "export", "chat").stdout
    assert cli(b, "fsck", check=False).returncode == 0


def test_a_damaged_piece_on_the_remote_fails_the_pull_and_compact_remote_repairs_it(tmp_path):
    """A piece whose bytes do not match its manifest was skipped with a warning, and pull
    then said "nothing to pull: up to date", exit 0, with an entry missing; clone said
    "cloned". Both now exit 1 and say what to do, and doing it (compact --remote on the
    copy that pushed it) brings the entry."""
    a, remote, b = cloned_then_answered(tmp_path)
    before = {p for p in remote.rglob("*") if p.is_file()}
    cli(a, "push")
    new = sorted((p for p in remote.rglob("*") if p.is_file() and p not in before and "/f/" in str(p)), key=lambda p: p.stat().st_mtime)
    assert new
    data = bytearray(new[-1].read_bytes())
    data[len(data) // 2] ^= 0xFF
    new[-1].write_bytes(bytes(data))
    for p in (cli(b, "pull", check=False), cli(tmp_path, "clone", f"file://{remote}", tmp_path / "C", check=False)):
        out, err = p.stdout.decode(), p.stderr.decode()
        assert p.returncode == 1 and "up to date" not in out and "Traceback" not in err, (out, err)
        assert "did not match its manifest" in err.strip().splitlines()[-1] and "compact --remote origin" in err
    with Tape.open(b) as t:
        assert t.session("chat").head.payload["content"] == "hello"
    cli(a, "compact", "--remote", "origin", "--grace", "now")
    assert cli(b, "pull").returncode == 0
    with Tape.open(b) as t:
        assert t.session("chat").head.payload["content"] == "hi back"


# -- push -s: what the chosen sessions refer to goes up with them ------------------------------


def test_push_of_some_sessions_takes_the_files_their_entries_need(tmp_path):
    """A large value is stored once per tape and `session cp` refers to its source's entries:
    `push -s b` sent b's file alone, and a clone could not read b ("has not arrived yet",
    fsck exit 1). What the chosen sessions refer to now goes up with them, closed under what
    that refers to in turn, checked for secrets as theirs are; the rest stays home."""
    a, remote = tape_with_remote(tmp_path)
    big = "a tool output shared by sessions " * 100
    with Tape.open(a) as t:
        t.session("first").append("tool_result", {"call_id": "c1", "output": big})
        t.session("second").append("tool_result", {"call_id": "c1", "output": big})  # its value is in first's file
        t.session("other").append("user", {"content": "not pushed"})
    cli(a, "session", "cp", "second", "copy")
    p = cli(a, "push", "-s", "copy")
    assert "also pushing the files of sessions second, first" in p.stderr.decode() or "also pushing the files of sessions first, second" in p.stderr.decode(), p.stderr
    c = tmp_path / "C"
    cli(tmp_path, "clone", f"file://{remote}", str(c))
    assert run_cli("--dir", c, "fsck").returncode == 0
    got = json.loads(cli(c, "show", "copy", "--json").stdout)
    assert got["payload"]["output"] == big
    sessions = {json.loads(x)["session"] for x in cli(c, "sessions", "--json").stdout.splitlines()}
    assert "other" not in sessions and "chat" not in sessions


def test_push_of_some_sessions_refuses_a_secret_in_a_file_they_need(tmp_path):
    a, remote = tape_with_remote(tmp_path)
    big = "shared output with AKIAIOSFODNN7EXAMPLF inside " * 40
    with Tape.open(a) as t:
        t.session("first").append("tool_result", {"call_id": "c1", "output": big})
    with Tape.open(a) as t:
        t.session("second").append("tool_result", {"call_id": "c1", "output": big})
    p = cli(a, "push", "-s", "second", check=False)
    assert p.returncode == 1 and "not pushing" in p.stderr.decode(), p.stderr
    assert not holding("AKIAIOSFODNN7EXAMPLF", remote)


def test_an_endpoint_with_a_query_is_refused_without_repeating_it(tmp_path):
    """`--endpoint http://HOST:PORT/?token=...` was stored, shown by `remote list`, and every
    push then failed with boto3's "EndpointResolutionError"; AWS_ENDPOINT_URL the same way."""
    a, _ = tape_with_remote(tmp_path)
    before = snapshot(a)
    for endpoint in ("http://127.0.0.1:9/?token=SEKRETQ123", "http://127.0.0.1:9/p?SEKRETQ123=1", "http://127.0.0.1:9#SEKRETQ123"):
        p = cli(a, "remote", "add", "e1", "s3://tapes/x", "--endpoint", endpoint, check=False)
        err = p.stderr.decode()
        assert p.returncode == 2 and "no query or fragment" in err and "SEKRETQ123" not in err, err
    assert "SEKRETQ123" not in cli(a, "remote", "list").stdout.decode()
    cli(a, "remote", "add", "s3r", "s3://tapes/x")
    env = dict(os.environ, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y", AWS_ENDPOINT_URL="http://127.0.0.1:9/?token=SEKRETQ123")
    env.pop("AWS_ENDPOINT_URL_S3", None)
    p = cli(a, "pull", "s3r", check=False, env=env)
    err = p.stderr.decode()
    assert p.returncode == 2 and "AWS_ENDPOINT_URL" in err and "SEKRETQ123" not in err, err
    assert snapshot(a) == before


def test_a_clone_where_a_deleted_clone_was_does_not_take_its_cache(tmp_path):
    """A clone's cache folder is named by the remote's tape id, the path and the folder's
    inode; a clone deleted and made again at the same path often gets the same inode, so
    the new one found the old one's settings ("remote 'origin' exists already", exit 2, with
    advice it could not follow) and index. Simulated here: the old cache is put where the
    new folder's name points, as inode reuse does."""
    import shutil

    from ctape.store.store import cache_folder_of

    a, remote = tape_with_remote(tmp_path)
    cli(a, "push")
    c = tmp_path / "C"
    cli(tmp_path, "clone", f"file://{remote}", str(c))
    with Tape.open(c) as t:
        tape_id = t.store.tape_id
    old_cache = cache_folder_of(str(c), tape_id)
    assert os.path.isdir(old_cache)
    kept = tmp_path / "old-cache"
    shutil.copytree(old_cache, kept)
    shutil.rmtree(c)
    c.mkdir()
    new_cache = cache_folder_of(str(c), tape_id)
    shutil.rmtree(new_cache, ignore_errors=True)
    shutil.copytree(kept, new_cache)  # what the old folder's inode, taken again, would find
    p = run_cli("clone", f"file://{remote}", str(c), cwd=tmp_path)
    assert p.returncode == 0, p.stderr.decode()
    assert cli(c, "remote", "list").stdout.decode().count("origin") == 1
    assert run_cli("--dir", c, "fsck").returncode == 0
    assert json.loads(cli(c, "log", "-s", "chat", "--json").stdout)["payload"] == {"content": "hello"}


def test_push_follow_goes_on_after_a_refusal_and_sends_once_it_is_resolved(tmp_path):
    """`push --follow` stopped for good (exit 1) at the first likely secret, and appends made
    after it never reached the remote. It now says why once, keeps following (the other
    sessions' appends go up meanwhile: a finding holds back only its session), and the push
    after the finding is resolved (here `scan --allow`, which changes no file) sends all."""
    import signal
    import subprocess
    import sys
    import time

    a, remote = tape_with_remote(tmp_path)
    cli(a, "push")
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(a), "push", "--follow"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)
        cli(a, "append", "user", "--text", "my token ghp_aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5", "-s", "leak")
        time.sleep(2.0)
        clean = cli(a, "append", "user", "--text", "clean later", "-s", "chat").stdout.decode().strip()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not holding("clean later", remote):
            time.sleep(0.5)
        assert p.poll() is None  # still following
        assert holding("clean later", remote)  # the other session went on
        assert not holding("aB3dE5gH7jK9mN1pQ3sT5", remote)
        ids = [json.loads(x)["id"] for x in cli(a, "scan", "--json", check=False).stdout.splitlines() if x.strip()]
        assert ids
        for i in ids:
            cli(a, "scan", "--allow", i)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not holding("aB3dE5gH7jK9mN1pQ3sT5", remote):
            time.sleep(0.5)
        assert holding("aB3dE5gH7jK9mN1pQ3sT5", remote)
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    err = err.decode()
    assert p.returncode == 0, err
    assert err.count("still following") == 1 and "Traceback" not in err, err
    c = tmp_path / "C"
    cli(tmp_path, "clone", f"file://{remote}", str(c))
    assert clean in {json.loads(x)["hash"] for x in cli(c, "log", "-s", "chat", "--json").stdout.splitlines()}


@contextlib.contextmanager
def _listening(on_connection):
    """(port, the sockets to close at the end): a real listening socket on loopback whose
    connections `on_connection(conn, sockets, stop)` takes, in a thread, until the block ends."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    sockets: list = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                c = srv.accept()[0]
            except OSError:
                continue
            on_connection(c, sockets, stop)

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    try:
        yield srv.getsockname()[1], sockets
    finally:
        stop.set()
        th.join()
        for c in sockets:
            c.close()
        srv.close()


@contextlib.contextmanager
def _silent_endpoint(hang_up: bool = False):
    """(port, the connections taken): a real listening socket on loopback that takes
    every connection, reads nothing and answers nothing, until the block ends; with
    `hang_up`, it reads each request and closes the connection without an answer."""

    def take(c, held, stop):
        if not hang_up:
            held.append(c)
            return
        try:
            c.settimeout(2)
            c.recv(65536)
        except OSError:
            pass
        c.close()

    with _listening(take) as (port, held):
        yield port, held


def _copy_with_remote_at(tmp_path, port: int):
    """(a new copy with one entry and a remote `origin` at 127.0.0.1:PORT, the environment
    to run it with: made-up credentials, a 1 s wait for each answer)."""
    a = tmp_path / "A"
    Tape.init(a).session("chat").append("user", {"content": "hi"})
    cli(a, "remote", "add", "origin", "s3://tapes/team", "--endpoint", f"http://127.0.0.1:{port}")
    return a, {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "CTAPE_REMOTE_TIMEOUT": "1"}


def test_a_store_that_never_answers_is_said_and_given_up_on(tmp_path):
    """An endpoint that takes the connection and never answers held `pull` and `push` 120 s
    a try, 4 tries, 8 minutes in all, saying nothing. Now each try waits CTAPE_REMOTE_TIMEOUT
    (30 s unless set), the first retry is said once, and the end is one line that names the
    setting. A real listening socket that reads and never writes."""
    import time

    with _silent_endpoint() as (port, held):
        a, env = _copy_with_remote_at(tmp_path, port)
        before = snapshot(a)
        for verb in ("push", "pull"):
            t0 = time.monotonic()
            p = cli(a, verb, check=False, env=env)
            took = time.monotonic() - t0
            err = p.stderr.decode().splitlines()
            assert p.returncode == 1 and "Traceback" not in p.stderr.decode(), p.stderr
            assert len(err) == 2 and "no answer from" in err[0] and "trying again" in err[0], err
            assert err[1].startswith("ctape: error: no answer from") and "CTAPE_REMOTE_TIMEOUT" in err[1], err
            assert took < 60, took  # 4 tries of 1 s and botocore's backoff, not minutes
        assert snapshot(a) == before
        p = cli(a, "push", check=False, env={**env, "CTAPE_REMOTE_TIMEOUT": "soon"})
        assert p.returncode == 2 and b"CTAPE_REMOTE_TIMEOUT" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr


def test_push_follow_against_a_store_that_hangs_stops_at_a_second_signal(tmp_path):
    """SIGTERM to `push --follow` finishes the push under way first; against an endpoint
    that never answers that took every try's wait (30 s each, 4 tries), past a
    supervisor's patience, and a second SIGTERM changed nothing. Now the first says so in
    one line, and a second stops at once, as a kill would: the copy is as it was."""
    import signal
    import subprocess
    import sys
    import time

    with _silent_endpoint() as (port, held):
        a = tmp_path / "A"
        Tape.init(a).session("chat").append("user", {"content": "hi"})
        cli(a, "remote", "add", "origin", "s3://tapes/team", "--endpoint", f"http://127.0.0.1:{port}")
        before = snapshot(a)
        env = dict(os.environ, AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s", CTAPE_REMOTE_TIMEOUT="60")
        p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(a), "push", "--follow"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not held:
                time.sleep(0.1)
            assert held, "the push never reached the endpoint"
            time.sleep(0.5)
            p.send_signal(signal.SIGTERM)
            time.sleep(2.0)
            assert p.poll() is None  # the push under way is given its chance
            t0 = time.monotonic()
            p.send_signal(signal.SIGTERM)
            p.wait(10)
            took = time.monotonic() - t0
        finally:
            if p.poll() is None:
                p.kill()
            err = p.stderr.read().decode()
        assert p.returncode == -signal.SIGTERM and took < 5, (p.returncode, took, err)
        assert "stopping once the push under way ends (signal again to stop at once)" in err and "Traceback" not in err, err
        assert snapshot(a) == before
        assert cli(a, "fsck").returncode == 0


def test_a_malformed_ipv6_endpoint_or_url_is_one_line_and_exit_2(tmp_path):
    """`--endpoint 'http://[::1'` (unclosed) or a bracketed host that is no address made
    urlparse raise: "internal error: ValueError", exit 1, in remote add, push, pull and
    clone. From a black-box audit."""
    a = tmp_path / "A"
    Tape.init(a).session("s").append("user", {"content": "x"})
    cli(a, "remote", "add", "origin", "s3://bucket/p")
    before = snapshot(a)
    keys = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    for bad in ("http://[::1", "http://[zz]:80"):
        p = cli(a, "remote", "add", "v6", "s3://bucket/p", "--endpoint", bad, check=False)
        assert p.returncode == 2 and p.stderr.decode().startswith("ctape: error: bad endpoint"), p.stderr
        for cmd in ("push", "pull"):
            p = cli(a, cmd, "origin", check=False, env={**keys, "AWS_ENDPOINT_URL": bad})
            assert p.returncode == 2 and p.stderr.decode().startswith("ctape: error: bad AWS_ENDPOINT_URL"), p.stderr
        p = run_cli("clone", "s3://bucket/p", tmp_path / "c", "--endpoint", bad)
        assert p.returncode == 2 and b"bad endpoint" in p.stderr and b"internal error" not in p.stderr, p.stderr
    p = cli(a, "remote", "add", "v6", "s3://[zz/p", check=False)
    assert p.returncode == 2 and p.stderr.decode().startswith("ctape: error: bad remote URL"), p.stderr
    p = cli(a, "remote", "add", "x.lock", "file:///tmp", check=False)
    assert p.returncode == 2 and b"not ending in .lock" in p.stderr, p.stderr
    for root in ("file:///", "file:///.", "file://localhost//"):  # a push as root wrote into / (an audit)
        p = cli(a, "remote", "add", "r", root, check=False)
        assert p.returncode == 2 and b"not the root folder" in p.stderr, p.stderr
        p = run_cli("clone", root, tmp_path / "c")
        assert p.returncode == 2 and b"not the root folder" in p.stderr, p.stderr
    assert snapshot(a) == before and not (tmp_path / "c").exists()


def test_a_token_in_a_remote_urls_query_or_fragment_is_refused_and_never_repeated(tmp_path):
    """A remote URL names a bucket and prefix, or a folder: a query or fragment names
    nothing, and a token there would be saved in remotes.json and printed by `remote list`
    (found by an audit: `file:///x?token=...` was saved, and an s3 URL's refusal repeated
    its query). Refused like an endpoint's, showing the URL up to `?...`."""
    a = tmp_path / "A"
    Tape.init(a).session("chat").append("user", {"content": "hi"})
    before = snapshot(a)
    for url in (f"file://{tmp_path}/remote?token=hunter2pw", "s3://bucket/p?token=hunter2pw",
                "s3://bucket/p#AKIAIOSFODNN7EXAMPLE", "s3://Bad_Bucket/p?token=hunter2pw", f"file://{tmp_path}/r#hunter2pw"):
        err = refused_quietly(cli(a, "remote", "add", "r", url, check=False), before, a)
        assert "?..." in err, err
        p = run_cli("clone", url, tmp_path / "C")
        refused_quietly(p, {}, tmp_path / "C")
    assert b"hunter2pw" not in cli(a, "remote", "list").stdout


def test_a_push_that_fills_a_folder_remote_leaves_no_temp_file(tmp_path):
    """A piece that cannot be written whole (the remote's disk full) is taken back with its
    temp file: only a killed write leaves one (for `compact --remote`). It stayed for good,
    even after a push that then succeeded (found by an audit). A real full tmpfs."""
    from conftest import small_tmpfs

    a = tmp_path / "A"
    t = Tape.init(a)
    for s in ("c", "d"):
        for i in range(3):
            t.session(s).append("tool_result", {"call_id": f"k{i}", "output": os.urandom(60000).hex()})  # no dedupe, no compression
    t.close()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with small_tmpfs(mnt, "size=2m"):
        (mnt / "remote").mkdir()
        cli(a, "remote", "add", "r", f"file://{mnt}/remote")
        st = os.statvfs(mnt)
        (mnt / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 300_000))  # room for less than the push
        p = cli(a, "push", "r", check=False)
        assert p.returncode == 1 and len(p.stderr.splitlines()) == 1 and b"no space" in p.stderr, p.stderr
        left = [str(f) for f in (mnt / "remote").rglob(".tmp-*")]
        assert not left, left
        (mnt / "filler").unlink()
        cli(a, "push", "r")
        assert not list((mnt / "remote").rglob(".tmp-*"))


def test_a_percent_encoded_file_url_names_the_folder_it_encodes(tmp_path):
    """A black-box audit: `file:///tmp/e/my%20tapes` (the form Path.as_uri() writes) was
    taken literally, so push said the folder did not exist and offered `mkdir -p
    .../my%20tapes`, a second folder of the wrong name. A file URL's path is
    percent-encoded (RFC 8089)."""
    from ctape.sync.backend import parse_url

    folder = tmp_path / "my tapes"
    folder.mkdir()
    assert parse_url(folder.as_uri()) == ("file", str(folder), "")
    a = tmp_path / "a"
    run_cli("--dir", a, "init", check=True)
    run_cli("--dir", a, "append", "user", "--text", "hi", "-s", "s", check=True)
    run_cli("--dir", a, "remote", "add", "origin", folder.as_uri(), check=True)
    run_cli("--dir", a, "push", "origin", check=True)
    assert any(folder.iterdir()) and not (tmp_path / "my%20tapes").exists()
    run_cli("clone", folder.as_uri(), tmp_path / "c", check=True)
    assert run_cli("--dir", tmp_path / "c", "log", "-s", "s", "--oneline", check=True).stdout.strip().endswith(b"hi")
    p = run_cli("--dir", a, "remote", "add", "nul", "file:///tmp/a%00b")
    assert p.returncode == 2 and b"bad remote URL" in p.stderr


def test_a_store_that_hangs_up_before_answering_is_said_with_what_to_do(tmp_path):
    """An endpoint (or a proxy) that takes each request and closes the connection without
    an answer ended a push with "cannot read the bucket (ConnectionClosedError)": the
    exception's name. It now says what happened and what to check (audit, 2026-12-06). A
    real listening socket that reads a request and hangs up."""
    with _silent_endpoint(hang_up=True) as (port, _):
        a, env = _copy_with_remote_at(tmp_path, port)
        before = snapshot(a)
        for verb in ("push", "pull"):
            p = cli(a, verb, check=False, env=env)
            err = p.stderr.decode()
            assert p.returncode == 1 and "Traceback" not in err and err.count("ctape: error") == 1, err
            assert "closed the connection before answering" in err and "CTAPE_REMOTE_TIMEOUT" in err and "(ConnectionClosedError)" not in err, err
        assert snapshot(a) == before


@contextlib.contextmanager
def _proxy_that_hangs(endpoint: str, hangs):
    """(port, an Event set once a request hung): a real TCP proxy on loopback to `endpoint`
    that passes every request on, but holds for good (reads on, never answers) a request
    whose first line `hangs(line)` is true: a server that hangs on some requests only."""
    import socket
    import threading

    host, port = endpoint.split("//", 1)[1].rsplit(":", 1)
    hung = threading.Event()

    def pipe(src, dst, watch, stop):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if watch and hangs(data.split(b"\r\n", 1)[0]):
                    hung.set()
                    stop.wait()
                    break
                dst.sendall(data)
        except OSError:
            pass

    def take(c, sockets, stop):
        u = socket.create_connection((host, int(port)))
        sockets.extend((c, u))
        threading.Thread(target=pipe, args=(c, u, True, stop), daemon=True).start()
        threading.Thread(target=pipe, args=(u, c, False, stop), daemon=True).start()

    with _listening(take) as (port_here, _):
        yield port_here, hung


def test_a_ctrl_c_of_a_transfer_against_a_server_that_hangs_exits_at_once(tmp_path, seaweed):
    """A Ctrl-C of a clone, pull or push whose transfers hang (the server took the requests
    and never answers) exited only once every transfer queued had had its tries and waits:
    82 s with a 20 s wait (CTAPE_REMOTE_TIMEOUT), minutes at the default, with a warning
    about trying again printed meanwhile. It exits at once now: the pool's queued
    transfers are cancelled, and the process does not wait for those under way. The clone
    removes its folder; a pull or push leaves the copy as it was."""
    import signal
    import subprocess
    import sys
    import time
    import uuid

    env = dict(os.environ, **seaweed.env(), CTAPE_REMOTE_TIMEOUT="20", PYTHONFAULTHANDLER="1")
    url = f"s3://{seaweed.bucket('ct-' + uuid.uuid4().hex[:12])}/team"
    a, b = tmp_path / "A", tmp_path / "B"
    t = Tape.init(a)
    for s in range(4):
        for i in range(30):
            t.session(f"s{s}").append("user", {"content": f"{s} {i} " + os.urandom(1500).hex()})
    t.close()
    cli(a, "remote", "add", "origin", url)
    assert cli(a, "push", env=env).returncode == 0

    def interrupted(args, hangs, where):
        with _proxy_that_hangs(seaweed.endpoint, hangs) as (port, hung):
            # (as from a terminal: a shell starts a background job with SIGINT ignored, and
            # a test run in one passed that on, and the clone rightly ignored the Ctrl-C)
            p = subprocess.Popen([sys.executable, "-m", "ctape", *args], env={**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"},
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            try:
                assert hung.wait(60), f"the {where} never reached a request that hangs"
                time.sleep(0.5)
                t0 = time.monotonic()
                p.send_signal(signal.SIGINT)
                try:
                    _, err = p.communicate(timeout=60)
                except subprocess.TimeoutExpired:  # where every thread is (PYTHONFAULTHANDLER), for the failure
                    p.send_signal(signal.SIGABRT)
                    raise AssertionError(f"the {where} went on after a Ctrl-C: {p.communicate(timeout=30)[1].decode()[-6000:]}") from None
                took = time.monotonic() - t0
            finally:
                if p.poll() is None:
                    p.kill()
        err = err.decode()
        assert p.returncode == 130 and took < 10, (where, p.returncode, took, err)
        assert err.splitlines()[-1] == "ctape: error: interrupted" and "Traceback" not in err, err

    interrupted(["clone", url, str(b)], lambda line: line.startswith(b"GET ") and b"/f/" in line, "clone")
    assert not b.exists()
    cli(tmp_path, "clone", url, str(b), env=env)
    for s in range(4):  # new files on A for B to pull, and on B for B to push
        Tape.open(a).session(f"s{s}").append("user", {"content": "more " + os.urandom(1500).hex()})
        Tape.open(b).session(f"s{s}").append("user", {"content": "more " + os.urandom(1500).hex()})
    cli(a, "push", env=env)
    before = snapshot(b)
    interrupted(["--dir", str(b), "pull"], lambda line: line.startswith(b"GET ") and b"/f/" in line, "pull")
    assert snapshot(b) == before
    interrupted(["--dir", str(b), "push"], lambda line: line.startswith(b"PUT ") and b"/f/" in line, "push")
    assert snapshot(b) == before and cli(b, "fsck").returncode == 0
    assert cli(b, "pull", env=env).returncode == 0 and cli(b, "push", env=env).returncode == 0


def test_a_failed_command_run_inside_another_program_does_not_end_that_program(tmp_path):
    """The exit that does not wait for hung transfers (cli.base._leave_lingering_threads)
    first looked for any thread of the process: a program that runs the command line in its
    own process (click's CliRunner, a test, `demo`) with a thread of its own was ended by
    any command that failed (found in review). It is the `ctape` command's own process
    only, and ctape's transfer threads only."""
    import subprocess
    import sys

    host = tmp_path / "host.py"
    host.write_text(
        "import threading, sys\n"
        "from click.testing import CliRunner\n"
        "from ctape.cli import main\n"
        "stop = threading.Event()\n"
        "threading.Thread(target=stop.wait).start()  # the host's own, not a daemon\n"
        f"r = CliRunner().invoke(main, ['--dir', {str(tmp_path / 'T')!r}, 'log', '-s', 'nosuch'])\n"
        "print('host goes on', r.exit_code, flush=True)\n"
        "stop.set()\n")
    p = subprocess.run([sys.executable, str(host)], capture_output=True, timeout=120)
    assert p.returncode == 0 and p.stdout.decode().strip() == "host goes on 1", (p.returncode, p.stdout, p.stderr)
