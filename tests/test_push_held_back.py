"""push holds back only the sessions that cannot go up as they are (SPEC 14: damage stops
only its session; SPEC 18: push refuses the sessions with findings), and sends the rest.

Before, one damaged value anywhere stopped every push of the tape (the secrets check read
it and failed), and a block with a damaged record went up silently, unchecked; one likely
secret in one session stopped the push of all others, `push --follow` included. Real
processes (the CLI), a folder remote and a SeaweedFS bucket, clones that read back."""

import json
import os
from contextlib import contextmanager

from ctape import Tape
from ctape.store import framing

from test_remote import cli, remote_url, s3env, seaweed  # noqa: F401  (fixtures)
from test_remote_audit import has_bytes, remote_blobs
from conftest import run_cli


def damage_first_large_record(session_dir, at_least: int = 10_000) -> str:
    """Flip one byte inside the first record of at least `at_least` bytes; its file's path."""
    for name in sorted(os.listdir(session_dir)):
        path = os.path.join(session_dir, name)
        data = bytearray(open(path, "rb").read())
        big = [r for r in framing.scan(bytes(data)) if isinstance(r, framing.Record) and len(r.body) >= at_least]
        if big:
            data[big[0].offset + 200] ^= 0xFF
            with open(path, "wb") as f:
                f.write(bytes(data))
            return path
    raise AssertionError("no large record")


def keys_of(url: str, session: str) -> list[str]:
    return [k for k in remote_blobs(url) if k.startswith(f"f/{session}/")]


def test_damage_in_one_session_holds_back_only_that_session(tmp_path, remote_url):
    a = tmp_path / "A"
    t = Tape.init(a)
    t.session("healthy").append("user", {"content": "healthy 1"})
    t.session("hurt").append("tool_result", {"call_id": "c1", "output": os.urandom(150_000).hex()})  # a value of its own record
    t.session("hurt").append("user", {"content": "after the large value"})
    t.close()
    damaged = damage_first_large_record(a / "sessions" / "hurt")
    cli(a, "remote", "add", "origin", remote_url)

    p = cli(a, "push", check=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and "Traceback" not in err, err
    why, last = err.splitlines()
    assert "not pushing session hurt" in why and os.path.basename(damaged) in why and "fsck --salvage" in why, why
    assert last == "ctape: error: 1 session not pushed (hurt; see the warning above); the others are on origin", last
    assert keys_of(remote_url, "healthy") and not keys_of(remote_url, "hurt")

    # the healthy session keeps going up while the damaged one waits
    cli(a, "append", "user", "--text", "healthy 2", "-s", "healthy")
    p = cli(a, "push", "--json", check=False)
    assert p.returncode == 1
    out = json.loads(p.stdout)
    assert list(out["held_back"]) == ["hurt"] and out["files"] == 1, out
    # with nothing else to send, the push is refused as one, in one line
    p = cli(a, "push", check=False)
    assert p.returncode == 1 and len(p.stderr.splitlines()) == 1 and b"not pushing session hurt" in p.stderr, p.stderr
    # and --json still prints the push's object (it printed nothing: a script got no JSON)
    p = cli(a, "push", "--json", check=False)
    out = json.loads(p.stdout)
    assert p.returncode == 1 and out["files"] == 0 and list(out["held_back"]) == ["hurt"], out
    assert "not pushing session hurt" in out["held_back"]["hurt"] and out["error"] == out["held_back"]["hurt"], out

    # salvaged, the session goes up (the secrets check reads its lost value as lost, as
    # every read does); a clone holds what was intact
    cli(a, "fsck", "--salvage", check=False)
    assert b"[lost: damaged]" in cli(a, "export", "hurt").stdout
    p = cli(a, "push", check=False)
    assert p.returncode == 0, p.stderr
    b = tmp_path / "B"
    run_cli("clone", remote_url, b, check=True)
    assert [json.loads(x)["payload"]["content"] for x in cli(b, "log", "-s", "healthy", "--json").stdout.splitlines()] == ["healthy 2", "healthy 1"]
    assert b"after the large value" in cli(b, "log", "-s", "hurt").stdout
    # the salvage report went up with it (tests/test_remote_salvage.py): the clone reads the
    # lost value as lost, as the salvaging copy does, and fsck passes with the salvage's warning
    assert b"[lost: damaged]" in cli(b, "export", "hurt").stdout
    p = cli(b, "fsck", check=False)
    assert p.returncode == 0 and b"salvaged on" in p.stdout + p.stderr, p.stdout + p.stderr


def test_a_damaged_block_is_held_back_not_sent_unchecked(tmp_path):
    """A record inside a block that no longer decodes: its text cannot be checked for
    secrets, so it does not leave (it went up as it was)."""
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    t.session("hurt").append("user", {"content": os.urandom(20_000).hex()})  # one block, compressed poorly: large
    t.session("hurt").append("user", {"content": "more"})
    t.close()
    damage_first_large_record(a / "sessions" / "hurt")
    cli(a, "remote", "add", "origin", f"file://{remote}")
    p = cli(a, "push", check=False)
    assert p.returncode == 1 and b"not pushing session hurt" in p.stderr, p.stderr
    assert not (remote / "f" / "hurt").exists()
    # --allow-secrets does not send damage either: it cannot be read back anywhere
    p = cli(a, "push", "--allow-secrets", check=False)
    assert p.returncode == 1 and not (remote / "f" / "hurt").exists(), p.stderr


def test_a_session_that_refers_to_a_held_back_one_waits_with_it(tmp_path, remote_url):
    """A large value is stored once per tape: a session that appends the same value refers
    to the record in the first session's file. When that session is held back, the other
    would reach the remote without the value (a clone could not read it): it waits too,
    and says why; a third, unrelated session goes up."""
    a = tmp_path / "A"
    value = os.urandom(150_000).hex()
    t = Tape.init(a)
    t.session("source").append("tool_result", {"call_id": "c1", "output": value})
    t.session("source").append("tool_result", {"call_id": "c2", "output": os.urandom(150_000).hex()})
    t.session("reuser").append("tool_result", {"call_id": "c9", "output": value})  # refers to source's record
    t.session("other").append("user", {"content": "unrelated"})
    t.close()
    assert len(os.listdir(a / "sessions" / "reuser")) == 1
    assert os.path.getsize(next((a / "sessions" / "reuser").iterdir())) < 10_000  # the value is not in its file
    # damage source's second value (not the shared one)
    path = next((a / "sessions" / "source").iterdir())
    data = bytearray(path.read_bytes())
    big = [r for r in framing.scan(bytes(data)) if isinstance(r, framing.Record) and len(r.body) >= 10_000]
    data[big[1].offset + 200] ^= 0xFF
    path.write_bytes(bytes(data))
    cli(a, "remote", "add", "origin", remote_url)

    p = cli(a, "push", "--json", check=False)
    assert p.returncode == 1
    out = json.loads(p.stdout)
    assert sorted(out["held_back"]) == ["reuser", "source"], out
    assert "refers to values stored in session source" in out["held_back"]["reuser"]
    assert keys_of(remote_url, "other") and not keys_of(remote_url, "reuser") and not keys_of(remote_url, "source")


def test_a_chain_of_waiting_sessions_names_the_next_link(tmp_path):
    """top refers to a value stored in middle's file, middle to one in source's, and source
    is held back: middle waits on source and top on middle, and each says so (top named
    source, a session it holds nothing of)."""
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    shared, own = os.urandom(150_000).hex(), os.urandom(150_000).hex()
    t = Tape.init(a)
    t.session("source").append("tool_result", {"call_id": "c1", "output": shared})
    t.session("source").append("tool_result", {"call_id": "c2", "output": os.urandom(150_000).hex()})
    t.session("middle").append("tool_result", {"call_id": "c3", "output": shared})  # source's record
    t.session("middle").append("tool_result", {"call_id": "c4", "output": own})  # stored in middle's file
    t.session("top").append("tool_result", {"call_id": "c5", "output": own})  # middle's record
    t.session("other").append("user", {"content": "unrelated"})
    t.close()
    path = next((a / "sessions" / "source").iterdir())
    data = bytearray(path.read_bytes())
    big = [r for r in framing.scan(bytes(data)) if isinstance(r, framing.Record) and len(r.body) >= 10_000]
    data[big[1].offset + 200] ^= 0xFF  # source's own value, not the shared one
    path.write_bytes(bytes(data))
    cli(a, "remote", "add", "origin", f"file://{remote}")
    p = cli(a, "push", "--json", check=False)
    assert p.returncode == 1
    held = json.loads(p.stdout)["held_back"]
    assert sorted(held) == ["middle", "source", "top"], held
    assert "refers to values stored in session source," in held["middle"], held
    assert "refers to values stored in session middle," in held["top"], held


def test_a_cut_file_is_held_back_as_lost_records_not_as_damage(tmp_path):
    """A segment found shorter than this copy had read it lost acknowledged records (fsck's
    word): the held-back line says so, and how to bring it back, not "damaged records"."""
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    for i in range(5):
        t.session("cut").append("user", {"content": f"turn {i}"})
    t.session("other").append("user", {"content": "unrelated"})
    t.close()
    cli(a, "log", "-s", "cut")  # this copy reads the file whole
    (seg,) = (a / "sessions" / "cut").iterdir()
    data = seg.read_bytes()
    last = [r for r in framing.scan(data) if isinstance(r, framing.Record)][-1]
    seg.write_bytes(data[: last.offset])  # a record boundary: no torn tail, records gone
    assert b"lost acknowledged" in cli(a, "fsck", check=False).stdout
    cli(a, "remote", "add", "origin", f"file://{remote}")
    p = cli(a, "push", "--json", check=False)
    why = json.loads(p.stdout)["held_back"]["cut"]
    assert p.returncode == 1 and "lost acknowledged records" in why and "damaged" not in why, why
    assert "fsck --salvage" in why and "rsync" in why, why


def test_push_s_says_the_other_chosen_sessions_went(tmp_path):
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    t.session("good").append("user", {"content": "fine"})
    t.session("dirty").append("user", {"content": "token ghp_aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5"})
    t.session("unasked").append("user", {"content": "not chosen"})
    t.close()
    cli(a, "remote", "add", "origin", f"file://{remote}")
    p = cli(a, "push", "-s", "good", "-s", "dirty", check=False)
    last = p.stderr.decode().splitlines()[-1]
    assert last == "ctape: error: 1 session not pushed (dirty; see the warning above); the other chosen ones are on origin", last
    assert keys_of(f"file://{remote}", "good") and not keys_of(f"file://{remote}", "unasked")


@contextmanager
def a_token_appended_after_the_check(tape: Tape, session: str):
    """Inside: the push's first secrets check is followed at once by an append of a likely
    secret to `session` (this copy's own segment), as by a writer beside the push."""
    from ctape.sync import push as push_mod

    real, calls = push_mod.check_secrets, []

    def check_then_append(*args, **kw):
        out = real(*args, **kw)
        if not calls:
            calls.append(1)
            tape.session(session).append("user", {"content": "token ghp_aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5"})
        return out

    push_mod.check_secrets = check_then_append
    try:
        yield
    finally:
        push_mod.check_secrets = real


def test_a_secret_appended_after_the_check_holds_back_only_its_session(tmp_path):
    """An append to this copy's own segment that lands after the check is checked when push
    reads the file, under the session's lock. A likely secret there stopped the whole push
    half way (pieces of other sessions up, no manifest naming them); now that session stays
    home and the others go up, listed."""
    from ctape.sync import push as push_mod
    from ctape.sync.backend import open_backend

    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    t.session("chat").append("user", {"content": "before the check"})
    t.session("other").append("user", {"content": "another session"})
    with a_token_appended_after_the_check(t, "chat"):
        r = push_mod.push(t, open_backend(f"file://{remote}"), "origin")
    assert list(r["held_back"]) == ["chat"] and "likely secret" in r["held_back"]["chat"], r
    blobs = remote_blobs(f"file://{remote}")
    assert not any(has_bytes(v, "ghp_aB3dE5gH7jK9mN1pQ3sT5") for v in blobs.values())
    assert keys_of(f"file://{remote}", "other")
    t.close()
    b = tmp_path / "B"
    run_cli("clone", f"file://{remote}", b, check=True)
    assert b"another session" in cli(b, "export", "other").stdout


def test_a_push_round_after_files_went_holds_back_too(tmp_path):
    """Files that go during a push (a compaction in another process) are sent in a second
    round, checked again. That check stopped the push half way on a secret appended after
    the first (other sessions' pieces up, no manifest naming them); it holds back as the
    first does. (Found by review.)"""
    from ctape.sync import push as push_mod
    from ctape.sync.backend import open_backend

    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    for name in ("B", "C", "X"):
        t.session(name).append("user", {"content": f"clean {name}"})
    real_read, gone = push_mod._read_piece, []

    def read(tape, checked, s, file, *rest):
        if s == "B" and not gone:
            gone.append(1)
            raise FileNotFoundError  # as if a compaction in another process had replaced it
        return real_read(tape, checked, s, file, *rest)

    push_mod._read_piece = read
    try:
        with a_token_appended_after_the_check(t, "X"):
            r = push_mod.push(t, open_backend(f"file://{remote}"), "origin")
    finally:
        push_mod._read_piece = real_read
    assert list(r["held_back"]) == ["X"], r
    blobs = remote_blobs(f"file://{remote}")
    assert not any(has_bytes(v, "ghp_aB3dE5gH7jK9mN1pQ3sT5") for v in blobs.values())
    t.close()
    c = tmp_path / "C2"
    run_cli("clone", f"file://{remote}", c, check=True)  # the manifest names what went up
    for name in ("B", "C"):
        assert f"clean {name}".encode() in cli(c, "export", name).stdout


def test_push_s_of_a_held_back_session_sends_nothing_it_was_to_bring(tmp_path):
    """`push -s A` adds the sessions whose files hold what A refers to (`session cp B A`:
    A's entries are B's). With A held back, B went up anyway, unasked, and the "also
    pushing" notice was lost. (Found by review.)"""
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    t.session("B").append("user", {"content": "from B"})
    t.close()
    cli(a, "session", "cp", "B", "A")
    cli(a, "append", "user", "--text", "token ghp_aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5", "-s", "A")
    cli(a, "remote", "add", "origin", f"file://{remote}")
    p = cli(a, "push", "-s", "A", check=False)
    assert p.returncode == 1 and b"likely secret" in p.stderr, p.stderr
    assert not keys_of(f"file://{remote}", "B") and not keys_of(f"file://{remote}", "A")


SECRET_NAME = "AKIAZ7Q3VXN2LJ4PW6TR"  # a session named like an AWS access key


def test_a_session_named_like_a_secret_is_never_named_in_clear(tmp_path):
    """The push holds back a session whose name looks like a secret, and its warning masks
    the name; the last line, `--json`'s keys, a dependent session's warning and `compact
    --remote`'s deferral named it in clear. (Found by a black-box audit.)"""
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    value = os.urandom(150_000).hex()
    t = Tape.init(a)
    t.session("good").append("user", {"content": "g"})
    t.session(SECRET_NAME).append("tool_result", {"call_id": "c1", "output": value})
    t.session("dependent").append("tool_result", {"call_id": "c2", "output": value})  # stored in the other's file
    t.close()
    cli(a, "remote", "add", "origin", f"file://{remote}")
    outputs = []
    for args in (["push"], ["push", "--json"], ["compact", "--remote", "origin", "--grace", "now"]):
        p = cli(a, *args, check=False)
        outputs.append(p.stdout + p.stderr)
        assert b"Traceback" not in p.stderr
    for out in outputs:
        assert SECRET_NAME.encode() not in out, out
    assert b"not pushing session dependent" in outputs[0] and b"aws-access-key" in outputs[0], outputs[0]
    assert keys_of(f"file://{remote}", "good") and not keys_of(f"file://{remote}", SECRET_NAME)


def test_compact_remote_deletes_for_the_others_when_only_held_back_sessions_have_news(tmp_path):
    """A redacted secret of one session stays on the remote until `compact --remote` deletes
    its old file. With another session held back and nothing else to send, the push inside
    `compact --remote` was refused as a whole, the command failed (exit 1, no JSON) and the
    deletion never ran: the secret stayed on the remote. (Found by a black-box audit.)"""
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    leaked = "AKIAZ7Q3VXN2LJ4PW6TQ"
    t = Tape.init(a)
    t.session("good").append("user", {"content": f"leak {leaked}"})
    t.close()
    cli(a, "remote", "add", "origin", f"file://{remote}")
    cli(a, "push", "--allow-secrets")
    cli(a, "append", "user", "--text", "tok ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "-s", "dirty")
    cli(a, "redact", "--scan", "-s", "good")
    p = cli(a, "compact", "--remote", "origin", check=False)  # plans the deletion of good's old file; good's pack goes up
    assert p.returncode == 1 and b"the push held back dirty" in p.stderr and b"plan 0" in p.stderr, p.stderr  # dirty waits
    p = cli(a, "compact", "--remote", "origin", "--grace", "now", "--json", check=False)  # only dirty has news now
    # the others' work is done and reported; the exit says dirty was held back, as `push`'s
    # does (exit 1 after its report, since 2026-12-06: exit 0 read as "all done" to a script)
    assert p.returncode == 1 and b"ctape: error: the push held back" in p.stderr, p.stderr
    out = json.loads(p.stdout)
    assert out["deleted"]["files"] >= 1 and "dirty" in out["deferred"], out
    assert b"likely secret" in p.stderr and b"dirty" in p.stderr, p.stderr  # said, as a warning
    assert not any(has_bytes(v, leaked) for v in remote_blobs(f"file://{remote}").values())


def test_a_session_held_back_during_the_upload_holds_back_what_refers_to_it(tmp_path):
    """The check before the upload holds back a session whose upload refers to values a
    held-back session stores (a large value is stored once per tape). A session held back
    later, when push reads its own segment and finds a secret appended after the check,
    held back only itself: another session whose appends after the check refer to a large
    value first stored in the held-back file went up, and a clone could not read it (the
    value "has not arrived yet"). Now it waits with that one, and so does a session that
    refers to it in turn (a chain); a clone reads the rest, and the next push sends all."""
    from ctape.sync import push as push_mod
    from ctape.sync.backend import open_backend

    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    for name in ("chat", "other", "plain", "third"):
        t.session(name).append("user", {"content": f"before the check: {name}"})
    shared, second = os.urandom(20_000).hex(), os.urandom(20_000).hex()
    real, calls = push_mod.check_secrets, []

    def check_then_append(*args, **kw):
        out = real(*args, **kw)
        if not calls:  # a writer beside the push: each large value lands first in the session before
            calls.append(1)
            t.session("chat").append("tool_result", {"call_id": "c1", "output": shared})
            t.session("chat").append("user", {"content": "token ghp_aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5"})
            t.session("other").append("tool_result", {"call_id": "c2", "output": shared})
            t.session("other").append("tool_result", {"call_id": "c3", "output": second})
            t.session("third").append("tool_result", {"call_id": "c4", "output": second})
        return out

    url = f"file://{remote}"
    push_mod.check_secrets = check_then_append
    try:
        r = push_mod.push(t, open_backend(url), "origin")
    finally:
        push_mod.check_secrets = real
    assert sorted(r["held_back"]) == ["chat", "other", "third"], r
    assert "refers to values stored in session chat" in r["held_back"]["other"], r
    assert "refers to values stored in session other" in r["held_back"]["third"], r
    assert r["files"] == 1, r  # plain's segment; what went of the others is named by no manifest
    b = tmp_path / "B"
    run_cli("clone", url, b, check=True)
    p = cli(b, "fsck", check=False)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert b"before the check: plain" in cli(b, "export", "plain").stdout
    assert [json.loads(line)["session"] for line in cli(b, "sessions", "--json").stdout.decode().splitlines()] == ["plain"]

    # once the finding is allowed, the next push sends every session whole
    r = push_mod.push(t, open_backend(url), "origin", allow_secrets=True)
    assert not r["held_back"], r
    t.close()
    c = tmp_path / "C"
    run_cli("clone", url, c, check=True)
    p = cli(c, "fsck", check=False)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert second.encode() in cli(c, "export", "third").stdout
    assert shared.encode() in cli(c, "export", "other").stdout


def test_a_push_refused_for_a_secret_names_the_session_in_json(tmp_path):
    """Nothing else to send and one session held back for a likely secret: the push is
    refused as one, and --json names the session in held_back, as for damage (it printed
    `"held_back": {}` beside the error: found by a docs audit)."""
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    cli(a, "init")
    cli(a, "append", "user", "--text", "hello", "-s", "alpha")
    cli(a, "append", "user", "--text", "token ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8 here", "-s", "beta")
    cli(a, "remote", "add", "origin", f"file://{remote}")
    assert cli(a, "push", check=False).returncode == 1  # alpha goes, beta stays home
    for args in ((), ("-s", "beta")):
        p = cli(a, "push", "--json", *args, check=False)
        out = json.loads(p.stdout)
        assert p.returncode == 1 and out["files"] == 0 and list(out["held_back"]) == ["beta"], out
        assert "likely secret" in out["held_back"]["beta"] and out["error"] == out["held_back"]["beta"], out
