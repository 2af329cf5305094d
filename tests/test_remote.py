"""Remotes (SPEC section 17) against a real S3 server (SeaweedFS, started here on
127.0.0.1) and against plain folders (file://): push, pull and clone are one round of
sync like rsync both ways, interrupted runs complete, bad remotes change nothing."""

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

from conftest import run_cli, snapshot
from remote_server import SECRET_KEY, started
from test_sync import reached_by_refs

SLOW = os.environ.get("CTAPE_SLOW") == "1"


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory):
    try:
        server = started(str(tmp_path_factory.mktemp("seaweed")))
    except RuntimeError as e:
        pytest.skip(f"SeaweedFS (weed) cannot start here: {e}")
    yield server
    server.stop()


@pytest.fixture
def s3env(seaweed, monkeypatch):
    for k, v in seaweed.env().items():
        monkeypatch.setenv(k, v)
    return seaweed


@pytest.fixture(params=["file", "s3"])
def remote_url(request, tmp_path):
    """A fresh, empty remote: a folder, or a bucket on SeaweedFS."""
    if request.param == "file":
        d = tmp_path / "remote"
        d.mkdir()
        return f"file://{d}"
    request.getfixturevalue("s3env")
    server = request.getfixturevalue("seaweed")
    bucket = server.bucket("ct-" + uuid.uuid4().hex[:12])
    return f"s3://{bucket}/team/tapes"


def cli(d, *args, check=True):
    return run_cli("--dir", d, *args, check=check)


def cli_json(d, *args):
    p = cli(d, *args, "--json")
    return [json.loads(line) for line in p.stdout.decode().splitlines()]


def refs_of(d):
    t = Tape.open(d)
    try:
        out = {}
        for name in t.store.sessions():
            st = t.session(name).refs()
            out[name] = (dict(st.branches), st.head_hash)
        return out
    finally:
        t.close()


def fsck_clean(d):
    p = cli(d, "fsck", check=False)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()


def new_tape(path, writer=None):
    t = Tape.init(path)
    s = t.session("chat")
    s.append("system", {"content": "shared prompt " * 200})
    s.append("user", {"content": "start"})
    t.close()
    return path


# -- round trips --------------------------------------------------------------------------


def test_push_clone_pull_round_trip_with_conflicts_deletions_and_tags(tmp_path, remote_url):
    a = new_tape(tmp_path / "A")
    cli(a, "tag", "v1", "-s", "chat")
    cli(a, "branch", "side", "-s", "chat")
    cli(a, "branch", "gone", "-s", "chat")
    cli(a, "remote", "add", "origin", remote_url)
    first = cli_json(a, "push")[0]
    assert first["files"] >= 1 and first["bytes"] > 0
    b = tmp_path / "B"
    p = run_cli("clone", remote_url, b, check=True)
    assert p.stdout.decode().startswith("cloned 1 session,")
    assert refs_of(b) == refs_of(a)
    assert [t["name"] for t in cli_json(b, "tag", "-s", "chat")] == ["v1"]
    # both sides move main (a conflict) and B deletes a branch
    cli(a, "append", "user", '{"content": "from A"}', "-s", "chat")
    cli(b, "append", "user", '{"content": "from B"}', "-s", "chat")
    cli(b, "branch", "-D", "gone", "-s", "chat")
    cli(a, "push")
    cli(b, "push")
    cli(a, "pull")
    cli(b, "pull")
    assert refs_of(a) == refs_of(b)
    branches = refs_of(a)["chat"][0]
    assert "gone" not in branches and "side" in branches
    assert any(".conflict-" in n for n in branches), branches
    assert reached_by_refs(a) == reached_by_refs(b)
    for d in (a, b):
        fsck_clean(d)
    # a clone made now is the same again
    c = tmp_path / "C"
    run_cli("clone", remote_url, c, check=True)
    assert refs_of(c) == refs_of(a)
    fsck_clean(c)


def test_a_push_and_a_pull_with_nothing_new_cost_almost_nothing(tmp_path, remote_url):
    a = new_tape(tmp_path / "A")
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "push")
    b = tmp_path / "B"
    run_cli("clone", remote_url, b, check=True)
    # an incremental push after one append: the piece and the manifest (SPEC 11: <= 5)
    cli(a, "append", "user", '{"content": "one more"}', "-s", "chat")
    r = cli_json(a, "push")[0]
    assert r["files"] == 1 and r["requests"] <= 5, r
    # the remote's identity (still this tape?) and g/<next> (did a compact --remote delete
    # anything this copy may hold?)
    assert cli_json(a, "push")[0]["requests"] == 2
    # a pull with nothing new: the identity, one listing of m/ and a miss per uploader
    cli(b, "pull")
    r = cli_json(b, "pull")[0]
    assert r["files"] == 0 and r["requests"] <= 3, r
    # and said as git says it
    assert cli(a, "push").stdout.decode() == "nothing to push: origin is up to date (2 requests)\n"
    assert cli(b, "pull").stdout.decode().startswith("nothing to pull: up to date with origin (")


def test_a_remote_emptied_since_is_pushed_to_in_full_again(tmp_path, remote_url):
    a = new_tape(tmp_path / "A")
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "push")
    from ctape.sync.backend import open_backend

    be = open_backend(remote_url)
    for key, _, _ in list(be.list("")):
        be.delete(key)
    assert cli_json(a, "push")[0]["files"] >= 1
    b = tmp_path / "B"
    run_cli("clone", remote_url, b, check=True)
    assert refs_of(b) == refs_of(a)


def test_remote_list_show_rm(tmp_path, remote_url):
    a = new_tape(tmp_path / "A")
    cli(a, "remote", "add", "origin", remote_url)
    assert cli_json(a, "remote", "list") == [{"name": "origin", "url": remote_url, "endpoint": None}]
    assert cli(a, "remote", "add", "origin", remote_url, check=False).returncode == 2
    cli(a, "push")
    rep = cli_json(a, "remote", "show", "origin")[0]
    assert [s["session"] for s in rep["sessions"]] == ["chat"] and rep["bytes"] > 0
    assert len(rep["uploaders"]) == 1 and rep["uploaders"][0]["pushes"] == 1
    cli(a, "remote", "rm", "origin")
    assert cli_json(a, "remote", "list") == []
    p = cli(a, "push", check=False)
    assert p.returncode == 2 and b"no remote" in p.stderr


def test_two_copies_that_also_rsync_with_each_other(tmp_path, remote_url):
    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed (.ci/run installs it)")
    a = new_tape(tmp_path / "A")
    b = tmp_path / "B"
    subprocess.run(["rsync", "-a", f"{a}/", f"{b}/"], check=True)
    c = tmp_path / "C"
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "push")
    run_cli("clone", remote_url, c, check=True)
    cli(b, "remote", "add", "origin", remote_url)
    acked = set()
    for round_ in range(3):
        for d in (a, b, c):
            acked.add(cli(d, "append", "user", json.dumps({"content": f"{d.name} {round_}"}), "-s", "chat").stdout.decode().strip())
        cli(a, "push")
        subprocess.run(["rsync", "-a", f"{a}/", f"{b}/"], check=True)
        cli(b, "pull")
        cli(c, "push")
        cli(b, "push")
        subprocess.run(["rsync", "-a", f"{b}/", f"{a}/"], check=True)
        cli(a, "pull")
    for d in (a, b, c):
        cli(d, "push")
    for d in (a, b, c):
        cli(d, "pull")
    subprocess.run(["rsync", "-a", f"{a}/", f"{b}/"], check=True)
    subprocess.run(["rsync", "-a", f"{b}/", f"{a}/"], check=True)
    cli(c, "pull")
    for d in (a, b, c):
        fsck_clean(d)
        assert acked <= reached_by_refs(d)
    assert refs_of(a) == refs_of(b) == refs_of(c)


# -- many hosts at once --------------------------------------------------------------------

HOST = r"""
import json, os, random, sys, time
from ctape import Tape
from ctape.sync import remote as remotes
from ctape.sync.push import push
from ctape.sync.pull import pull
d, until, out, seed = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
rnd = random.Random(seed)
t = Tape.open(d)
acked = []
i = 0
while time.time() < until or (i < 8 and time.time() < until + 120):  # 8 acks each, however loaded the machine
    act = rnd.random()
    if act < 0.6:
        s = t.session(rnd.choice(["chat", "work"]))
        h = s.append("user", {"content": f"{seed} {i} " + "x" * rnd.randint(0, 3000)}).hash
        acked.append(h)
        with open(out, "a") as f:
            f.write(h + "\n")
        i += 1
    elif act < 0.8:
        name, be = remotes.connect(t.store, "origin")
        push(t, be, name)
    else:
        name, be = remotes.connect(t.store, "origin")
        pull(t, be, name)
t.close()
"""


def run_hosts(script: str, dirs: list, tmp_path, secs: float) -> None:
    """One process per copy running `script` for secs (and on, up to 120 s more, until it
    acknowledged 8 writes: on a loaded machine the work, not the time, is what a test needs);
    each writes what it acknowledged to tmp_path/acked<i> (and files beside it)."""
    until = time.time() + secs
    procs = [subprocess.Popen([sys.executable, "-c", script, str(d), str(until), str(tmp_path / f"acked{i}"), str(i)], stderr=subprocess.PIPE)
             for i, d in enumerate(dirs)]
    for p in procs:
        _, err = p.communicate(timeout=secs + 420)
        assert p.returncode == 0, err.decode()[-3000:]


def test_several_hosts_append_push_and_pull_at_once(tmp_path, s3env):
    bucket = s3env.bucket("ct-" + uuid.uuid4().hex[:12])
    url = f"s3://{bucket}"
    a = new_tape(tmp_path / "h0")
    cli(a, "remote", "add", "origin", url)
    cli(a, "push")
    hosts, secs = (8, 60) if SLOW else (4, 15)
    dirs = [a] + [tmp_path / f"h{i}" for i in range(1, hosts)]
    for d in dirs[1:]:
        run_cli("clone", url, d, check=True)
    run_hosts(HOST, dirs, tmp_path, secs)
    acked = set()
    for i in range(hosts):
        if (tmp_path / f"acked{i}").exists():
            acked |= set((tmp_path / f"acked{i}").read_text().split())
    assert len(acked) > 20
    for d in dirs:
        cli(d, "push")
    for d in dirs:
        cli(d, "pull")
    first = refs_of(dirs[0])
    for d in dirs:
        fsck_clean(d)
        missing = acked - reached_by_refs(d)
        assert not missing, f"{d.name} lacks {len(missing)} acknowledged entries"
        assert refs_of(d) == first


# -- interrupted runs ---------------------------------------------------------------------


def _big_tape(path, sessions=6, appends=30):
    t = Tape.init(path)
    rnd = random.Random(7)
    for s in range(sessions):
        sess = t.session(f"s{s}")
        for i in range(appends):
            sess.append("assistant", {"content": os.urandom(rnd.randint(1000, 40000)).hex()})
            if i % 7 == 0:
                # a read by a copy seals the segment: more files, more pieces
                with open(os.path.join(path, "sessions", f"s{s}", sorted(os.listdir(os.path.join(path, "sessions", f"s{s}")))[-1]), "rb") as f:
                    f.read(1)
    t.close()


def test_push_and_pull_killed_at_random_instants_then_rerun(tmp_path, s3env):
    bucket = s3env.bucket("ct-" + uuid.uuid4().hex[:12])
    url = f"s3://{bucket}/k"
    a = tmp_path / "A"
    _big_tape(a)
    cli(a, "remote", "add", "origin", url)
    rnd = random.Random(11)
    for _ in range(3 if not SLOW else 10):
        p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(a), "push"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rnd.uniform(0.3, 1.2))
        p.send_signal(signal.SIGKILL)
        p.wait()
    cli(a, "push")
    fsck_clean(a)
    b = tmp_path / "B"
    run_cli("clone", url, b, check=True)
    assert refs_of(b) == refs_of(a) and reached_by_refs(b) == reached_by_refs(a)
    # more on A, then a pull on B killed at random instants
    t = Tape.open(a)
    for s in range(6):
        for i in range(10):
            t.session(f"s{s}").append("assistant", {"content": os.urandom(20000).hex()})
    t.close()
    cli(a, "push")
    for _ in range(3 if not SLOW else 10):
        p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(b), "pull"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rnd.uniform(0.3, 1.0))
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert cli(b, "log", "-s", "s0", "-n", "1", check=False).returncode == 0  # opens fine, mid-way
    cli(b, "pull")
    fsck_clean(b)
    assert refs_of(b) == refs_of(a) and reached_by_refs(b) == reached_by_refs(a)


# -- bad remotes change nothing -------------------------------------------------------------


def test_wrong_or_absent_credentials_and_a_missing_bucket(tmp_path, s3env, monkeypatch):
    bucket = s3env.bucket("ct-" + uuid.uuid4().hex[:12])
    a = new_tape(tmp_path / "A")
    cli(a, "remote", "add", "origin", f"s3://{bucket}/x")
    cli(a, "remote", "add", "nobucket", "s3://ct-no-such-bucket-here/x")
    before = snapshot(a)
    wrong = "WRONGsecretNEVERprint" + uuid.uuid4().hex
    cases = [
        ({"AWS_SECRET_ACCESS_KEY": wrong}, ["push", "origin"], b"access denied"),
        ({"AWS_SECRET_ACCESS_KEY": wrong}, ["pull", "origin"], b"access denied"),
        ({"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "AWS_PROFILE": None, "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}, ["push", "origin"], b"credentials"),
        ({}, ["push", "nobucket"], b"does not exist"),
        ({}, ["pull", "nobucket"], b"does not exist"),
    ]
    for env, args, says in cases:
        e = dict(os.environ)
        for k, v in env.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(a), *args], capture_output=True, env=e, timeout=120)
        out = p.stdout + p.stderr
        assert p.returncode != 0, (args, out)
        assert says in p.stderr.lower(), (args, out)
        assert len(p.stderr.decode().strip().splitlines()) == 1, out
        assert b"Traceback" not in out and wrong.encode() not in out and SECRET_KEY.encode() not in out
        assert snapshot(a) == before
    p = run_cli("clone", "s3://ct-no-such-bucket-here/x", tmp_path / "C")
    assert p.returncode != 0 and not (tmp_path / "C").exists() and len(p.stderr.splitlines()) == 1


def test_bad_urls_and_names_are_one_line_errors(tmp_path):
    a = new_tape(tmp_path / "A")
    before = snapshot(a)
    for args in (["remote", "add", "x", "http://bucket/x"], ["remote", "add", "x", "s3://AB/x"], ["remote", "add", "../x", "file:///tmp"],
                 ["remote", "add", "x", "s3://key:secret@bucket/x"], ["remote", "add", "x", "file://relative"], ["push"]):
        p = cli(a, *args, check=False)
        assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and b"secret" not in p.stderr, (args, p.stderr)
    p = cli(a, "pull", "nope", check=False)  # a name that is no remote here: not found (SPEC 5), exit 1
    assert p.returncode == 1 and len(p.stderr.splitlines()) == 1, p.stderr
    assert snapshot(a) == before


def test_junk_another_tool_wrote_is_ignored_or_refused(tmp_path, remote_url):
    a = new_tape(tmp_path / "A")
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "push")
    from ctape.sync.backend import open_backend

    be = open_backend(remote_url)
    junk = {
        "m/deadbeef0000/00000000000000000000.json": b"not json",
        "m/deadbeef0001/00000000000000000000.json": json.dumps({"format": "ctape-remote-manifest", "version": 1, "tape_id": "0" * 32, "uploader": "deadbeef0001", "n": 0, "files": []}).encode(),
        "m/NOT_A_WRITER/x.json": b"{}",
        "m/deadbeef0002/00000000000000000000.json": b"{\"format\": \"ctape-remote-manifest\", \"version\": 1, \"files\": [{\"session\": \"../../etc\"}]}",
        "f/chat/../x": None,
        "f/chat/zz/0-3": b"abc",
        "random/file.bin": os.urandom(100),
    }
    for k, v in junk.items():
        if v is not None:
            be.put_if_absent(k, v)
    # the tape's own uploader gets a manifest that names a piece the remote lacks
    t = Tape.open(a)
    tape_id, writer = t.store.tape_id, t.store.writer
    t.close()
    bad = {"format": "ctape-remote-manifest", "version": 1, "tape_id": tape_id, "uploader": "feedface0000", "n": 0, "time": "x",
           "files": [{"session": "chat", "file": "feedface0000-00000000000000000001.seg", "start": 0, "end": 10, "blake3": "0" * 64}]}
    be.put_if_absent("m/feedface0000/00000000000000000000.json", json.dumps(bad).encode())
    b = tmp_path / "B"
    p = run_cli("clone", remote_url, b)
    assert p.returncode == 0, p.stderr
    assert b"Traceback" not in p.stderr and b"ignored" in p.stderr and b"lacks" in p.stderr
    assert refs_of(b) == refs_of(a)
    fsck_clean(b)
    assert not (b / "etc").exists()
    # a prefix that holds something else than a ctape remote is refused, one line
    be.put_if_absent("other/ctape.json", b"junk")
    other = remote_url + "/other" if remote_url.startswith("file") else remote_url + "/other"
    if remote_url.startswith("file"):
        other = remote_url + "/other"
    cli(a, "remote", "add", "other", other)
    before = snapshot(a)
    p = cli(a, "pull", "other", check=False)
    assert p.returncode == 1 and b"not a ctape remote" in p.stderr and len(p.stderr.splitlines()) == 1
    p = cli(a, "push", "other", check=False)
    assert p.returncode == 1 and len(p.stderr.splitlines()) == 1
    assert snapshot(a) == before


def test_a_remote_of_another_tape_is_refused(tmp_path, remote_url):
    a = new_tape(tmp_path / "A")
    z = new_tape(tmp_path / "Z")
    cli(a, "remote", "add", "origin", remote_url)
    cli(z, "remote", "add", "origin", remote_url)
    cli(a, "push")
    before = snapshot(z)
    for verb in ("push", "pull"):
        p = cli(z, verb, check=False)
        assert p.returncode == 1 and b"another tape" in p.stderr, p.stderr
    assert snapshot(z) == before


# -- push --follow --------------------------------------------------------------------------


def test_push_follow_puts_an_acknowledged_append_on_the_remote_within_2s(tmp_path, remote_url):
    a = new_tape(tmp_path / "A")
    cli(a, "remote", "add", "origin", remote_url)
    b = tmp_path / "B"
    cli(a, "push")
    run_cli("clone", remote_url, b, check=True)
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(a), "push", "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.5)
        lags = []
        for i in range(3):
            h = cli(a, "append", "user", json.dumps({"content": f"followed {i}"}), "-s", "chat").stdout.decode().strip()
            t0 = time.monotonic()
            while time.monotonic() - t0 < 10:
                rep = cli_json(b, "pull")
                if h in reached_by_refs(b):
                    break
            lags.append(time.monotonic() - t0)
            assert h in reached_by_refs(b)
        # the pull and the check take time of their own: the bound is on the remote side
        assert min(lags) < 2.5, lags
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    assert b"Traceback" not in err



def test_push_follow_rides_out_a_server_that_goes_away_and_comes_back(tmp_path):
    """The object store goes down (killed) while `push --follow` runs and appends go on:
    each failing push is one line saying it tries again; once the server is back (same
    port, same data), everything appended meanwhile reaches the remote, and the follower
    never stopped. A server of its own, since this test stops it."""
    with _pushed_to_own_server(tmp_path, "outage") as (server, env, url, a):
        b = tmp_path / "B"
        run_cli("clone", url, b, check=True, env=env)
        p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(a), "push", "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, **env})
        try:
            time.sleep(1.0)
            server.stop()
            during = [cli(a, "append", "user", json.dumps({"content": f"while down {i}"}), "-s", "chat").stdout.decode().strip() for i in range(3)]
            time.sleep(3.0)
            assert p.poll() is None  # still following
            server.start()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not set(during) <= reached_by_refs(b):
                run_cli("--dir", b, "pull", check=False, env=env)
                time.sleep(0.5)
            assert set(during) <= reached_by_refs(b)
        finally:
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=30)
        err = err.decode()
        assert p.returncode == 0, err
        assert "Traceback" not in err
        lines = [x for x in err.splitlines() if x]
        assert lines and all(x.startswith("ctape: warning: ") and x.endswith("; trying again") for x in lines), lines


@contextmanager
def _pushed_to_own_server(tmp_path, bucket: str):
    """(server, its env, a remote URL on it, a tape pushed there): a SeaweedFS of the test's
    own, which it may stop and start; stopped at the end."""
    try:
        server = started(str(tmp_path / "weed"))
    except RuntimeError as e:
        pytest.skip(f"SeaweedFS (weed) cannot start here: {e}")
    try:
        env = server.env()
        url = f"s3://{server.bucket(bucket)}/t"
        a = new_tape(tmp_path / "A")
        run_cli("--dir", a, "remote", "add", "origin", url, check=True, env=env)
        run_cli("--dir", a, "push", check=True, env=env)
        yield server, env, url, a
    finally:
        server.stop()


def test_push_follow_stopped_while_its_pushes_fail_exits_1(tmp_path):
    """Stopped (SIGTERM, SIGINT) while the server is down and an acknowledged append has
    not gone up, `push --follow` exited 0, as after everything went up: a supervisor or a
    CI step could not tell (found by an audit). It now exits 1 with one line that says
    what to run, as a plain push at that moment does. (`CTAPE_SLOW=1`: both signals, and
    the server back each time, where a plain push sends the rest.)"""
    with _pushed_to_own_server(tmp_path, "down") as (server, env, url, a):
        for sig in (signal.SIGTERM, signal.SIGINT) if SLOW else (random.choice((signal.SIGTERM, signal.SIGINT)),):
            p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(a), "push", "--follow"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env={**os.environ, **env, "CTAPE_REMOTE_TIMEOUT": "2"})
            time.sleep(1.0)
            server.stop()
            h = cli(a, "append", "user", json.dumps({"content": f"while down {sig}"}), "-s", "chat").stdout.decode().strip()
            time.sleep(2.5)  # a push failed meanwhile
            p.send_signal(sig)
            _, err = p.communicate(timeout=120)
            err = err.decode()
            assert p.returncode == 1, err
            assert "Traceback" not in err and err.splitlines()[-1].startswith("ctape: error: stopped while pushing to origin failed"), err
            assert "run `ctape push origin`" in err
            assert run_cli("--dir", a, "push", env={**env, "CTAPE_REMOTE_TIMEOUT": "2"}).returncode == 1
            if SLOW:
                server.start()
                run_cli("--dir", a, "push", check=True, env=env)
                b = tmp_path / f"B{int(sig)}"
                run_cli("clone", url, b, check=True, env=env)
                assert h in reached_by_refs(b)


def test_a_pushed_segment_is_sealed_so_an_older_copy_coming_back_by_rsync_loses_nothing(tmp_path, remote_url):
    """push reads this copy's own segments as a copy does: the writer seals them, so a
    pulled prefix rsynced back over the writer's copy is never an older version of a file
    that grew (docs/format.md 1a)."""
    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed (.ci/run installs it)")
    a = new_tape(tmp_path / "A")
    cli(a, "remote", "add", "origin", remote_url)
    cli(a, "push")
    b = tmp_path / "B"
    run_cli("clone", remote_url, b, check=True)
    sizes = {p.name: p.stat().st_size for p in (a / "sessions" / "chat").iterdir()}
    h = cli(a, "append", "user", '{"content": "after the push"}', "-s", "chat").stdout.decode().strip()
    for name, size in sizes.items():
        assert (a / "sessions" / "chat" / name).stat().st_size == size, "a pushed segment grew"
    subprocess.run(["rsync", "-a", f"{b}/", f"{a}/"], check=True)
    fsck_clean(a)
    assert h in reached_by_refs(a)


def test_an_unknown_remote_name_is_not_found_exit_1(tmp_path):
    """SPEC 5: 1 is "not found", 2 bad usage. An unknown remote NAME is not found, as an
    unknown session or branch (`session rm`, `branch -d`) is: it exited 2 (an audit)."""
    a = tmp_path / "A"
    Tape.init(a).session("chat").append("user", {"content": "hi"})
    cli(a, "remote", "add", "origin", f"file://{tmp_path}/remote")
    for args in (("remote", "rm", "nosuch"), ("remote", "show", "nosuch"), ("push", "nosuch"), ("pull", "nosuch")):
        p = cli(a, *args, check=False)
        assert p.returncode == 1 and p.stderr.decode().startswith("ctape: error: no remote 'nosuch'"), (args, p.stderr)
    assert cli(a, "push", "bad/name", check=False).returncode == 2  # a name that cannot be one: usage
