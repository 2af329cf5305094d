"""Manifests the remote lost (docs/remotes.md, "A remote that lost manifests"). Readers went
through an uploader's manifests in order and stopped at the first one missing: one manifest
deleted from the bucket, or a backup of the bucket restored over it, hid every later push of
that copy from every copy that had not read it, with exit 0 everywhere; a fresh copy's
`compact --remote` then deleted the hidden pieces as listed by no manifest, and the pusher,
which took the remote to hold them, never sent them again (found by an audit, on SeaweedFS).

Now readers read past a missing manifest and say so, the sweep keeps what no manifest lists
while one is missing, and the copy that wrote it finds out (at its next pull, or within the
hour at a push), pushes again what the remote lacks and writes an empty manifest in the gap."""
import os
import uuid

import pytest

import ctape.sync.push as push_mod
from ctape import Tape
from ctape.sync.backend import open_backend
from conftest import run_cli
from test_remote import s3env, seaweed  # noqa: F401 - fixtures
from test_remote_recreated import append, hashes, on


@pytest.fixture(params=["file", "s3"])
def remote(request, tmp_path):
    """(url, keys, delete): a fresh remote, the keys it holds, and a way to delete some."""
    if request.param == "file":
        d = tmp_path / "remote"
        d.mkdir()

        def keys():
            return {os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs if not f.startswith(".tmp-")}

        def delete(key):
            os.remove(d / key)

        return f"file://{d}", keys, delete
    request.getfixturevalue("s3env")
    server = request.getfixturevalue("seaweed")
    bucket = server.bucket("ct-" + uuid.uuid4().hex[:12])

    def keys():
        return {o["Key"][len("team/"):] for o in server.client().list_objects_v2(Bucket=bucket, Prefix="team/").get("Contents", [])}

    def delete(key):
        server.client().delete_object(Bucket=bucket, Key="team/" + key)

    return f"s3://{bucket}/team", keys, delete


def test_a_manifest_deleted_from_the_bucket_is_read_past_kept_from_the_sweep_and_put_back(remote, tmp_path, monkeypatch):
    url, keys, delete = remote
    a_dir, c_dir, d_dir = tmp_path / "a", tmp_path / "c", tmp_path / "d"
    a = on(a_dir, "laptop")
    a("init")
    a("remote", "add", "origin", url)
    first = {}
    for s in ("s1", "s2", "s3"):  # manifests 0, 1 and 2 of laptop, one session each
        first[s] = append(a, s, f"the first entry of {s}")
        a("push")
    delete("m/laptop/00000000000000000000.json")
    unlisted = {k for k in keys() if k.startswith("f/s1/")}  # listed only by the lost manifest
    assert unlisted

    # a new copy reads manifests 1 and 2, and says what it lacks
    p = run_cli("clone", url, c_dir, env={"CTAPE_WRITER": "third"})
    said = p.stderr.decode()
    assert p.returncode == 0, said
    assert "the remote lacks m/laptop/00000000000000000000.json" in said, said
    got = hashes(c_dir)
    assert {first["s2"], first["s3"]} <= got and first["s1"] not in got
    # its sweep deletes nothing that no manifest lists: the lost one may list it
    c = on(c_dir, "third")
    said = c("compact", "--remote", "origin", "--grace", "now").stderr.decode()
    assert "pieces no manifest lists are kept: the remote lacks m/laptop/00000000000000000000.json" in said, said
    assert unlisted <= keys()  # (its own compaction replaced s2's and s3's segments by packs)

    # the copy that wrote it finds out at a push (within the hour: here at once), pushes
    # again what the lost one listed, and fills the gap
    monkeypatch.setattr(push_mod, "OWN_CHECK_EVERY", 0.0)
    warned: list[str] = []
    monkeypatch.setenv("CTAPE_WRITER", "laptop")
    with Tape.open(str(a_dir)) as ta:
        push_mod.push(ta, open_backend(url), "origin", warn=warned.append)
    assert any("the remote lost manifests (a backup restored over it" in w for w in warned), warned
    assert "m/laptop/00000000000000000000.json" in keys(), (warned, sorted(keys()))
    p = run_cli("clone", url, d_dir, env={"CTAPE_WRITER": "fourth"})
    assert p.returncode == 0 and "lacks" not in p.stderr.decode(), p.stderr.decode()
    assert set(first.values()) <= hashes(d_dir)
    assert run_cli("--dir", d_dir, "fsck").returncode == 0
    c("pull")
    assert set(first.values()) <= hashes(c_dir)
    said = c("compact", "--remote", "origin", "--grace", "now").stderr.decode()
    assert "are kept" not in said, said  # the gap is filled: the sweep goes on again


def test_a_backup_restored_over_the_remote_loses_nothing_once_the_pusher_pulls(remote, tmp_path):
    """The bucket rolled back to a snapshot taken after the first push: the pusher's later
    manifests and pieces are gone, and it took the remote to hold them ("nothing to push").
    Its next pull finds its newest manifest gone, and its next push sends again all the
    remote lacks, past the numbers other copies have read."""
    url, keys, delete = remote
    a_dir, b_dir, d_dir = tmp_path / "a", tmp_path / "b", tmp_path / "d"
    a = on(a_dir, "laptop")
    a("init")
    a("remote", "add", "origin", url)
    made = [append(a, "chat", "before the snapshot")]
    a("push")
    snapshot = keys()
    run_cli("clone", url, b_dir, env={"CTAPE_WRITER": "cibox"}, check=True)
    b = on(b_dir, "cibox")
    for i in range(2):
        made.append(append(a, "chat", f"after the snapshot {i}"))
        made.append(append(a, "notes", f"a new session {i}"))
        a("push")
    b("pull")  # B read manifests 1 and 2 before the restore
    for k in keys() - snapshot:
        delete(k)  # the backup restored: what was written after it is gone
    assert not (keys() - snapshot)

    said = a("pull").stderr.decode()
    made.append(append(a, "chat", "after the restore"))
    said += a("push").stderr.decode()
    assert "the remote lost manifests (a backup restored over it" in said, said
    assert "nothing to push" not in said, said
    p = run_cli("clone", url, d_dir, env={"CTAPE_WRITER": "fourth"})
    assert p.returncode == 0 and "lacks" not in p.stderr.decode(), p.stderr.decode()
    assert set(made) <= hashes(d_dir)
    assert run_cli("--dir", d_dir, "fsck").returncode == 0
    # B, which had read past the lost numbers, gets the entry made after the restore
    b("pull")
    assert set(made) <= hashes(b_dir)


class _CuttingProxy:
    """A TCP proxy in front of the S3 server that cuts the body of the first answer to a
    GET of a piece (`/f/` in its path) after its headers and 50 bytes, then drops that
    connection: a flaky network, or a proxy that gave up mid-answer."""

    def __init__(self, port: int):
        import socket
        import threading

        self.upstream, self.cuts = port, 0
        self.armed = True
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        import threading

        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.upstream))
            state = {"cut": False}
            threading.Thread(target=self._requests, args=(client, up, state), daemon=True).start()
            threading.Thread(target=self._answers, args=(client, up, state), daemon=True).start()

    def _requests(self, client, up, state):
        import re

        try:
            while data := client.recv(65536):
                if self.armed and re.search(rb"(?m)^GET [^ ]*/f/", data):
                    self.armed, state["cut"] = False, True
                up.sendall(data)
        except OSError:
            pass

    def _answers(self, client, up, state):
        try:
            while data := up.recv(65536):
                if state["cut"]:
                    head = data.find(b"\r\n\r\n")
                    client.sendall(data[: head + 4 + 50])
                    self.cuts += 1
                    break
                client.sendall(data)
        except OSError:
            pass
        import socket

        for s in (client, up):
            try:
                s.shutdown(socket.SHUT_RDWR)  # at once, though the other thread is in recv()
                s.close()
            except OSError:
                pass

    def close(self):
        self.sock.close()


def test_a_download_cut_off_mid_answer_is_asked_again(s3env, seaweed, tmp_path, monkeypatch):
    """A clone whose download of one piece was cut after its headers failed whole ("cannot
    read f/... (ResponseStreamingError)", exit 1, everything removed): botocore's retries end
    with the headers (found by an audit). The piece is asked again, TRIES in all."""
    bucket = seaweed.bucket("ct-" + uuid.uuid4().hex[:12])
    url = f"s3://{bucket}/team"
    a = on(tmp_path / "a", "laptop")
    a("init")
    a("remote", "add", "origin", url)
    made = {append(a, "chat", "x" * 400 + " one"), append(a, "notes", "y" * 400 + " two")}
    a("push")
    proxy = _CuttingProxy(seaweed.port)
    try:
        p = run_cli("clone", url, tmp_path / "b", env={"CTAPE_WRITER": "cibox", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}"})
    finally:
        proxy.close()
    assert proxy.cuts == 1
    assert p.returncode == 0, p.stderr.decode()
    assert made <= hashes(tmp_path / "b")


def test_an_https_endpoint_to_a_plain_http_server_and_a_busy_server_say_what_to_do(s3env, seaweed, tmp_path):
    """Two one-line errors an audit found unhelpful: https to a plain-HTTP server said only
    "(SSLError)", and a 503 with no body said "refused to read the bucket: 503", which reads
    like a permission problem."""
    import http.server
    import threading

    bucket = seaweed.bucket("ct-" + uuid.uuid4().hex[:12])
    p = run_cli("clone", f"s3://{bucket}/team", tmp_path / "b", env={"AWS_ENDPOINT_URL": f"https://127.0.0.1:{seaweed.port}"})
    said = p.stderr.decode()
    assert p.returncode == 1 and len(said.splitlines()) == 1, said
    assert "TLS handshake" in said and "http://" in said, said

    class Busy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_HEAD = do_PUT = do_GET

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        p = run_cli("clone", f"s3://{bucket}/team", tmp_path / "c", env={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.server_address[1]}"})
    finally:
        server.shutdown()
        server.server_close()
    said = p.stderr.decode()
    assert p.returncode == 1 and len(said.splitlines()) == 1, said
    assert "refused" not in said and "503" in said and "try again later" in said, said


def test_a_remote_that_held_the_tape_and_holds_none_now_is_said_to_have_changed(remote, tmp_path):
    """A pull from a remote this copy had read the tape from, which holds none now (emptied,
    or an endpoint typo that reaches another server), said only "origin holds no tape yet;
    nothing to pull" (found by an audit)."""
    url, keys, delete = remote
    a = on(tmp_path / "a", "laptop")
    a("init")
    a("remote", "add", "origin", url)
    append(a, "chat", "hello")
    a("push")
    run_cli("clone", url, tmp_path / "b", env={"CTAPE_WRITER": "cibox"}, check=True)
    for k in keys():
        delete(k)
    p = on(tmp_path / "b", "cibox")("pull")
    said = p.stderr.decode() + p.stdout.decode()
    assert "held this tape when this copy last pulled or pushed, and holds none now" in said, said
    assert "holds no tape yet" in said


def test_a_lost_manifest_restored_from_a_backup_is_read_and_its_pieces_stay(remote, tmp_path):
    """A copy had read past a missing manifest; an admin then restores it from a backup. It
    was dropped from the copy's gaps without being read, and that copy's `compact --remote`
    swept the pieces it lists (found by a review). It is read at the next look now."""
    url, keys, delete = remote
    a = on(tmp_path / "a", "laptop")
    a("init")
    a("remote", "add", "origin", url)
    made = {}
    for s in ("s1", "s2", "s3"):
        made[s] = append(a, s, f"x {s}")
        a("push")
    lost = "m/laptop/00000000000000000001.json"
    saved = tmp_path / "saved.json"  # the backup of the one manifest
    if url.startswith("file://"):
        saved.write_bytes((tmp_path / "remote" / lost).read_bytes())
        restore = lambda: (tmp_path / "remote" / lost).write_bytes(saved.read_bytes())  # noqa: E731
    else:
        import boto3

        bucket, prefix = url[len("s3://"):].split("/", 1)
        c = boto3.client("s3")
        saved.write_bytes(c.get_object(Bucket=bucket, Key=f"{prefix}/{lost}")["Body"].read())
        restore = lambda: c.put_object(Bucket=bucket, Key=f"{prefix}/{lost}", Body=saved.read_bytes())  # noqa: E731
    delete(lost)
    p = run_cli("clone", url, tmp_path / "c", env={"CTAPE_WRITER": "third"})
    assert p.returncode == 0 and "the remote lacks " + lost in p.stderr.decode()
    restore()
    c_cli = on(tmp_path / "c", "third")
    c_cli("compact", "--remote", "origin", "--grace", "now")
    assert any(k.startswith("f/s2/") for k in keys()), sorted(keys())  # what the restored manifest lists stays
    c_cli("pull")
    assert set(made.values()) <= hashes(tmp_path / "c")
    p = run_cli("clone", url, tmp_path / "d", env={"CTAPE_WRITER": "fourth"})
    assert p.returncode == 0 and "lacks" not in p.stderr.decode(), p.stderr.decode()
    assert set(made.values()) <= hashes(tmp_path / "d")


def test_a_push_of_some_sessions_after_a_loss_leaves_the_gap_for_a_whole_push(remote, tmp_path, monkeypatch):
    """After a backup restored over the remote, `push -s s2` filled the gap of a lost
    manifest that had listed s1, which it had not pushed again: readers stopped warning and a
    clone lacked s1 for good (found by a review). A gap is filled by a push of every session."""
    url, keys, delete = remote
    a = on(tmp_path / "a", "laptop")
    a("init")
    a("remote", "add", "origin", url)
    made = {"s0": append(a, "s0", "before the snapshot")}
    a("push")
    snapshot = keys()
    made["s1"] = append(a, "s1", "after the snapshot")
    a("push")
    for k in keys() - snapshot:
        delete(k)
    a("pull")  # finds its newest manifest gone
    made["s2"] = append(a, "s2", "after the restore")
    a("push", "-s", "s2")
    p = run_cli("clone", url, tmp_path / "c", env={"CTAPE_WRITER": "third"})
    assert p.returncode == 0
    assert made["s1"] not in hashes(tmp_path / "c") and "lacks" in p.stderr.decode()  # still said: not filled
    a("push")  # every session: s1 goes up again, then the gap is filled
    p = run_cli("clone", url, tmp_path / "d", env={"CTAPE_WRITER": "fourth"})
    assert p.returncode == 0 and "lacks" not in p.stderr.decode(), p.stderr.decode()
    assert set(made.values()) <= hashes(tmp_path / "d")


def _announcing(url: str, keys) -> str:
    """The key of the manifest in which a `compact --remote` announced its deletion."""
    import json

    backend = open_backend(url)
    found = [k for k in sorted(keys()) if k.startswith("m/") and json.loads(backend.get(k)).get("deleted")]
    assert len(found) == 1, found
    return found[0]


def test_a_lost_manifest_that_announced_a_deletion_is_learnt_from_its_execution_record(remote, tmp_path):
    """The lost manifest was the one in which a `compact --remote` announced its deletion.
    Readers never learnt that the deletion took a segment's pieces: a new clone warned `the
    remote lacks f/...` (the sync model's long run, seed 3056), and a copy that held the
    segment, and had made a claim on an entry only that segment held (a branch deleted on
    the compacting copy, made again here), did not compact before its push: the remote
    lacked the entry for good, and a new clone lacked it. Readers that find a manifest
    missing now learn the deletions they never read from their execution records."""
    url, keys, delete = remote
    a, b, start, side = _side_only_on_a_cloned_segment(url, tmp_path)
    a("compact", "--remote", "origin", "--expire", "now", "--grace", "now")  # deletes the segment's pieces
    later = append(a, "s2", "later")
    a("push")  # a manifest after the announcing one: readers see the gap
    delete(_announcing(url, keys))

    p = run_cli("clone", url, tmp_path / "c", env={"CTAPE_WRITER": "third"})
    said = p.stderr.decode()
    assert p.returncode == 0, said
    assert "the remote lacks m/laptop/" in said and "the remote lacks f/" not in said, said
    assert {start, later} <= hashes(tmp_path / "c")

    b("branch", "again", side, "-s", "s1")  # made without having seen the deletion
    b("push")
    p = run_cli("clone", url, tmp_path / "d", env={"CTAPE_WRITER": "fourth"})
    assert p.returncode == 0 and "the remote lacks f/" not in p.stderr.decode(), p.stderr.decode()
    assert {start, side, later} <= hashes(tmp_path / "d")
    assert run_cli("--dir", tmp_path / "d", "fsck").returncode == 0


def _pushed_and_compacted_away(url, tmp_path):
    """laptop pushes s1, then `compact --remote` deletes its segment there: (laptop, the entry)."""
    a = on(tmp_path / "a", "laptop")
    a("init")
    a("remote", "add", "origin", url)
    start = append(a, "s1", "start")
    a("push")
    a("compact", "--remote", "origin", "--expire", "now", "--grace", "now")
    return a, start


def test_a_lost_announcement_whose_number_its_compactor_filled_is_learnt(remote, tmp_path, monkeypatch):
    """As above, but the compacting copy pushes after the loss: it puts back what it holds and
    fills the lost number with an empty manifest, so readers see no gap (the sync model's
    seed 3073). The later manifests' count of the deletions their uploader had learned of
    tells readers that one was announced that they never read."""
    url, keys, delete = remote
    a, start = _pushed_and_compacted_away(url, tmp_path)
    lost = _announcing(url, keys)
    delete(lost)
    later = append(a, "s2", "later")
    monkeypatch.setattr(push_mod, "OWN_CHECK_EVERY", 0.0)
    monkeypatch.setenv("CTAPE_WRITER", "laptop")
    with Tape.open(str(tmp_path / "a")) as ta:
        push_mod.push(ta, open_backend(url), "origin", warn=lambda s: None)
    assert lost in keys()  # filled
    p = run_cli("clone", url, tmp_path / "c", env={"CTAPE_WRITER": "third"})
    assert p.returncode == 0 and "lacks" not in p.stderr.decode(), p.stderr.decode()
    assert {start, later} <= hashes(tmp_path / "c")
    assert run_cli("--dir", tmp_path / "c", "fsck").returncode == 0


def test_a_lost_announcement_of_an_older_version_is_learnt_from_its_execution_record(tmp_path):
    """A deletion announced by a version before announcements said what they delete (g/<n>
    names only the compactor and its plan), whose manifest was lost: readers learn it from
    the plan's execution record (x/), written before any piece was deleted."""
    import json

    remote = tmp_path / "remote"
    remote.mkdir()
    url = f"file://{remote}"
    a, start = _pushed_and_compacted_away(url, tmp_path)
    later = append(a, "s2", "later")
    a("push")
    keys = lambda: {os.path.relpath(os.path.join(r, f), remote) for r, _, fs in os.walk(remote) for f in fs}  # noqa: E731
    os.remove(remote / _announcing(url, keys))
    (g,) = [k for k in keys() if k.startswith("g/")]
    body = json.loads((remote / g).read_text())
    (remote / g).write_text(json.dumps({k: body[k] for k in ("compactor", "plan", "time")}))  # as an older version wrote it
    p = run_cli("clone", url, tmp_path / "c", env={"CTAPE_WRITER": "third"})
    assert p.returncode == 0 and "the remote lacks f/" not in p.stderr.decode(), p.stderr.decode()
    assert {start, later} <= hashes(tmp_path / "c")


def _side_only_on_a_cloned_segment(url, tmp_path):
    """laptop pushes s1 with a branch `side` that alone reaches an entry, cibox clones, then
    laptop deletes `side`: (laptop, cibox, start, side)."""
    a, b = on(tmp_path / "a", "laptop"), on(tmp_path / "b", "cibox")
    a("init")
    a("remote", "add", "origin", url)
    start = append(a, "s1", "start")
    a("branch", "side", "-s", "s1")
    a("checkout", "side", "-s", "s1")
    side = append(a, "s1", "only on side")
    a("checkout", "main", "-s", "s1")
    a("push")
    run_cli("clone", url, tmp_path / "b", env={"CTAPE_WRITER": "cibox"}, check=True)
    a("branch", "-d", "side", "-s", "s1")
    return a, b, start, side


def test_a_pusher_that_looked_before_the_loss_showed_learns_the_deletion(remote, tmp_path, monkeypatch):
    """Found in review: the announcing manifest, the compactor's newest, was lost, so no copy
    saw a gap; a push of another copy an hour later took the announcement for one whose
    compactor died (no manifest came) and moved past it, and when the gap showed later it
    never looked again: that copy, which held the deleted segment, did not compact before
    its push, and the remote lacked an entry its new branch reached. The announcement now
    says what it deletes, so the first look learns it."""
    from ctape.sync import layout

    url, keys, delete = remote
    a, b, start, side = _side_only_on_a_cloned_segment(url, tmp_path)
    a("compact", "--remote", "origin", "--expire", "now", "--grace", "now")
    delete(_announcing(url, keys))
    monkeypatch.setattr(layout, "UNLISTED_WAIT", 0.0)  # an hour went by
    monkeypatch.setenv("CTAPE_WRITER", "cibox")
    append(b, "s3", "b works")
    with Tape.open(str(tmp_path / "b")) as tb:
        push_mod.push(tb, open_backend(url), "origin")
    later = append(a, "s2", "later")
    a("push", "-s", "s2")  # a later manifest of laptop: the gap shows (push -s fills none)
    b("branch", "again", side, "-s", "s1")
    with Tape.open(str(tmp_path / "b")) as tb:
        push_mod.push(tb, open_backend(url), "origin")
    p = run_cli("clone", url, tmp_path / "d", env={"CTAPE_WRITER": "fourth"})
    assert "the remote lacks f/" not in p.stderr.decode(), p.stderr.decode()
    assert {start, side, later} <= hashes(tmp_path / "d")


def test_a_lost_announcement_whose_run_was_killed_and_run_again_is_learnt(remote, tmp_path, monkeypatch):
    """Found in review: a `compact --remote` killed between its announcing manifest and its
    execution record; the rerun's record lists no file (its pull had learnt the deletion,
    so nothing was left to replace), and it deleted the pieces as announced. With that
    manifest lost, a reader learning from the execution record learnt nothing and warned
    of the pieces. The announcement itself says what goes."""
    import json

    url, keys, delete = remote
    a, b, start, side = _side_only_on_a_cloned_segment(url, tmp_path)
    real = open_backend(url)
    put = type(real).put_if_absent

    def killed_at_the_execution_record(self, key, data):
        if key.startswith("x/"):
            raise KeyboardInterrupt("killed")
        return put(self, key, data)

    monkeypatch.setenv("CTAPE_WRITER", "laptop")
    monkeypatch.setattr(type(real), "put_if_absent", killed_at_the_execution_record)
    with pytest.raises(KeyboardInterrupt), Tape.open(str(tmp_path / "a")) as ta:
        prune_compact(ta, open_backend(url))
    monkeypatch.setattr(type(real), "put_if_absent", put)
    a("compact", "--remote", "origin", "--expire", "now", "--grace", "now")  # the rerun
    assert [json.loads(real.get(k))["files"] for k in keys() if k.startswith("x/")] == [[]]
    later = append(a, "s2", "later")
    a("push", "-s", "s2")
    delete(_announcing(url, keys))
    p = run_cli("clone", url, tmp_path / "c", env={"CTAPE_WRITER": "third"})
    said = p.stderr.decode()
    assert "the remote lacks m/laptop/" in said and "the remote lacks f/" not in said, said
    assert {start, later} <= hashes(tmp_path / "c")


def prune_compact(tape, backend):
    from ctape.sync import prune

    return prune.compact_remote(tape, backend, "origin", expire="now", grace="now")


def test_junk_at_a_deletions_number_is_looked_at_once(tmp_path, monkeypatch):
    """A key under g/ that no ctape wrote (another tool's, a half-written one) is no deletion:
    a reader that looks for lost announcements (here: a manifest is missing) reads it once,
    not at every pull."""
    from ctape.sync.pull import pull

    remote = tmp_path / "remote"
    remote.mkdir()
    url = f"file://{remote}"
    a, start = _pushed_and_compacted_away(url, tmp_path)
    (remote / "g" / f"{1:020d}").write_text("not a deletion")
    for text in ("later", "and later"):
        append(a, "s2", text)
        a("push", "-s", "s2")
    os.remove(remote / "m" / "laptop" / f"{3:020d}.json")  # a gap: readers list g/
    run_cli("clone", url, tmp_path / "c", env={"CTAPE_WRITER": "third"}, check=True)
    backend = open_backend(url)
    got, asked = backend.get, []
    monkeypatch.setattr(backend, "get", lambda key: asked.append(key) or got(key))
    monkeypatch.setenv("CTAPE_WRITER", "third")
    with Tape.open(str(tmp_path / "c")) as t:
        for _ in range(3):
            pull(t, backend, "origin")
    assert asked.count(f"g/{1:020d}") == 0, asked  # read once, by the clone


def test_a_copy_that_compacted_away_what_its_lost_manifest_listed_lists_it_again(tmp_path, monkeypatch, remote):
    """The sync model's LostManifestWorld, seed 6071, shrunk. A's manifest that listed its
    branch deletion is lost; A compacts (the deletion and the record it superseded expire
    into a pack without either), relearns at its push and fills the lost number with an
    empty manifest. The deletion's segment stayed on the remote and on B, but no manifest
    listed it any more: A's next pull brought back A's older segment (another manifest
    lists it), and with it the branch A had deleted, which B did not show. At a relearning
    a copy now lists again the pieces it knew the remote held, that the remote still holds
    and no manifest lists, of files it no longer holds."""
    from ctape.history import reflog
    from ctape.sync import remote as remotes
    from ctape.sync.pull import pull

    url, _, delete = remote
    monkeypatch.setattr(push_mod, "OWN_CHECK_EVERY", 0.0)  # each push lists its own manifests, as the model does
    a, b = tmp_path / "A", tmp_path / "B"

    def opened(d, w):
        monkeypatch.setenv("CTAPE_WRITER", w)
        t = Tape.open(d)
        if "origin" not in remotes.remotes(t.store):
            remotes.add(t.store, "origin", url)
        return t

    monkeypatch.setenv("CTAPE_WRITER", "wroota")
    t = Tape.init(a)
    x = t.session("s1").append("user", {"content": "start"}).hash
    t.close()
    import shutil

    shutil.copytree(a, b)  # as rsync -a would
    tb = opened(b, "wrootb")
    push_mod.push(tb, open_backend(url), "origin")  # B's manifest lists A's first segment
    tb.close()
    ta = opened(a, "wroota")
    ta.session("s1").checkout(x)
    ta.session("s1").delete_branch("main")
    push_mod.push(ta, open_backend(url), "origin")  # A's manifest 0 lists the deletion's segment
    ta.close()
    tb = opened(b, "wrootb")
    pull(tb, open_backend(url), "origin")
    tb.close()
    delete("m/wroota/00000000000000000000.json")  # the remote loses it
    ta = opened(a, "wroota")
    ta.session("s1").append("user", {"content": "later"})
    ta.compact(expire="now", grace="now")
    push_mod.push(ta, open_backend(url), "origin")  # relearns, fills the lost number
    pull(ta, open_backend(url), "origin")
    ra, recs_a = dict(ta.session("s1").refs().branches), {(r["w"], r["n"]) for r in reflog.records(ta.session("s1"))}
    ta.close()
    tb = opened(b, "wrootb")
    pull(tb, open_backend(url), "origin")
    rb, recs_b = dict(tb.session("s1").refs().branches), {(r["w"], r["n"]) for r in reflog.records(tb.session("s1"))}
    tb.close()
    assert "main" not in ra and ra == rb, (ra, rb)
    assert recs_a == recs_b
    c = tmp_path / "C"
    run_cli("clone", url, c, check=True)
    tc = Tape.open(c)
    try:
        assert dict(tc.session("s1").refs().branches) == rb
    finally:
        tc.close()
