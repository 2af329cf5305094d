"""Several copies of one tape, each its own process, appending, forking, pushing, pulling
and compacting the remote with no grace period, all at once; one copy also runs `push
--follow` in a second process (one copy's operations take turns on its remote state).
Afterwards, a round of push and pull on every copy: every acknowledged entry is reachable
on every copy and in a fresh clone, every copy shows the same refs, and fsck is clean.

No branch or session is deleted, so nothing acknowledged may go: a compaction of the
remote that deletes too early must cost space, never an entry (docs/remotes.md,
"Compacting a remote"). Against SeaweedFS. CI: 4 copies for 20 s; `CTAPE_SLOW=1`: 6
copies for CTAPE_REMOTE_SECONDS (default 180)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

from conftest import run_cli
from test_remote import SLOW, cli, fsck_clean, new_tape, reached_by_refs, refs_of, run_hosts, s3env, seaweed  # noqa: F401

HOST = r"""
import os, random, sys, time
from ctape import Tape
from ctape.errors import ConflictError
from ctape.sync import remote as remotes
from ctape.sync.push import push
from ctape.sync.pull import pull
from ctape.sync.prune import compact_remote
d, until, out, seed = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
rnd = random.Random(seed)
t = Tape.open(d)
i = 0
def note(h):
    with open(out, "a") as f:
        f.write(h + "\n")
while time.time() < until or (i < 8 and time.time() < until + 120):  # 8 acks each, however loaded the machine
    act = rnd.random()
    name, be = remotes.connect(t.store, "origin")
    if act < 0.55:
        s = t.session(rnd.choice(["chat", "work", f"own{seed}"]))
        note(s.append(rnd.choice(["user", "assistant"]), {"content": f"{seed} {i} " + os.urandom(rnd.randint(0, 1500)).hex()}).hash)
        i += 1
    elif act < 0.6:
        # a fork: a branch from an older entry, with an entry of its own
        s = t.session(rnd.choice(["chat", f"own{seed}"]))
        log = list(s.log(limit=30))
        if log:
            b = f"f{seed}-{i}"
            s.branch(b, rnd.choice(log).hash)
            s.checkout(b)
            note(s.append("user", {"content": f"fork {seed} {i}"}).hash)
            s.checkout("main")
            i += 1
    else:
        try:
            if act < 0.75:
                push(t, be, name)
            elif act < 0.9:
                pull(t, be, name)
            elif act < 0.96:
                got = compact_remote(t, be, name, grace="now")
                with open(out + ".deleted", "a") as f:
                    f.write(f"{got['deleted']['files']}\n")
            else:
                t.compact()
        except ConflictError as e:
            # another compaction of this copy is running (copy h0's `push --follow`
            # compacts it first when the remote deleted files it holds): as a script
            # would, go on and try later (seen once: the host died of it)
            if "another `ctape compact` is running" not in str(e):
                raise
t.close()
"""


def _copies(tmp_path, s3env, hosts: int) -> tuple[str, list]:
    """A tape pushed to a new bucket, and hosts - 1 clones of it: (url, copies)."""
    bucket = s3env.bucket("ct-" + uuid.uuid4().hex[:12])
    url = f"s3://{bucket}/shared"
    a = new_tape(tmp_path / "h0")
    cli(a, "remote", "add", "origin", url)
    cli(a, "push")
    dirs = [a] + [tmp_path / f"h{i}" for i in range(1, hosts)]
    for d in dirs[1:]:
        run_cli("clone", url, d, check=True)
    return url, dirs


def _lines(tmp_path, hosts: int, suffix: str = "") -> list[str]:
    """The lines the hosts wrote to acked<i><suffix>."""
    out = []
    for i in range(hosts):
        f = tmp_path / f"acked{i}{suffix}"
        if f.exists():
            out += f.read_text().splitlines()
    return out



def test_copies_compacting_the_remote_while_others_push_and_pull_lose_nothing(tmp_path, s3env):
    hosts, secs = (6, float(os.environ.get("CTAPE_REMOTE_SECONDS", 180))) if SLOW else (4, 20)
    url, dirs = _copies(tmp_path, s3env, hosts)
    a = dirs[0]
    follow = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(a), "push", "--follow"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    run_hosts(HOST, dirs, tmp_path, secs)
    follow.send_signal(signal.SIGINT)
    _, err = follow.communicate(timeout=120)
    assert follow.returncode in (0, 130), err.decode()[-3000:]
    assert "Traceback" not in err.decode(), err.decode()[-3000:]
    acked = set(_lines(tmp_path, hosts))
    assert len(acked) > 20
    assert sum(map(int, _lines(tmp_path, hosts, ".deleted"))) > 0  # the remote's compactions did delete files while the others ran
    for _ in range(2):  # a compaction's push can make another copy's next push compact first
        for d in dirs:
            cli(d, "push")
        for d in dirs:
            cli(d, "pull")
    run_cli("clone", url, tmp_path / "fresh", check=True)
    first = refs_of(dirs[0])
    # every copy's fsck before the first assertion: a failure says which copies (and the
    # fresh clone: the remote) lack what (seen once in CI on h0 alone, not reproduced)
    unclean = {d.name: p.stdout.decode()[-600:] + p.stderr.decode()[-300:]
               for d in dirs + [tmp_path / "fresh"] for p in [cli(d, "fsck", check=False)] if p.returncode}
    assert not unclean, unclean
    for d in dirs + [tmp_path / "fresh"]:
        missing = acked - reached_by_refs(d)
        assert not missing, f"{d.name} lacks {len(missing)} acknowledged entries"
        assert refs_of(d) == first, d.name


def test_push_follow_waits_out_a_compaction_of_its_copy_it_needed(tmp_path):
    """A push that must compact its copy first (the remote's compaction deleted files it
    still holds) while another process compacts that copy: `push --follow` said "another
    `ctape compact` is running" and exited 1, found by the test above. It now says so and
    tries again."""
    import fcntl
    import threading

    from ctape import Tape
    from ctape.sync import remote
    from ctape.sync.backend import open_backend
    from ctape.sync.prune import compact_remote
    from ctape.sync.push import follow

    (tmp_path / "remote").mkdir()
    url = f"file://{tmp_path}/remote"
    a = Tape.open(new_tape(tmp_path / "a"))
    remote.add(a.store, "origin", url)
    for i in range(5):
        a.session("chat").append("user", {"content": f"a {i}"})
    from ctape.sync.pull import clone
    from ctape.sync.push import push

    push(a, open_backend(url), "origin")

    clone(open_backend(url), url, None, str(tmp_path / "b"))
    compact_remote(a, open_backend(url), "origin", grace="now")  # deletes the files b holds
    b = Tape.open(tmp_path / "b")
    b.session("chat").append("user", {"content": "b, after the remote's compaction"})

    warned: list[str] = []
    pushed: list[dict] = []
    fd = os.open(str(tmp_path / "b"), os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what a `ctape compact` of copy b holds while it runs
    t = threading.Thread(target=follow, args=(b, open_backend(url), "origin"),
                         kwargs={"warn": warned.append, "on_push": pushed.append, "poll": 0.05, "stop": lambda: bool(pushed)})
    t.start()
    deadline = time.time() + 30
    while not any("another `ctape compact` is running" in w for w in warned) and time.time() < deadline:
        time.sleep(0.05)
    assert t.is_alive() and not pushed, warned
    os.close(fd)  # that compaction is done
    t.join(30)
    assert not t.is_alive() and pushed, warned
    assert any(w.endswith("trying again") for w in warned)
    clone(open_backend(url), url, None, str(tmp_path / "c"))
    c = Tape.open(tmp_path / "c")
    assert [e.payload["content"] for e in c.session("chat").log(limit=2)] == ["b, after the remote's compaction", "a 4"]


REDACTING_HOST = r"""
import os, random, sys, time
from ctape import Tape
from ctape.ops.redact import redact
from ctape.sync import remote as remotes
from ctape.sync.push import push, SecretsFound
from ctape.sync.pull import pull
from ctape.sync.prune import compact_remote
d, until, out, seed = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
rnd = random.Random(seed)
t = Tape.open(d)
mine = []  # (entry, session, text) of this host's codenames not redacted yet
i = 0
def note(suffix, line):
    with open(out + suffix, "a") as f:
        f.write(line + "\n")
def refused():
    # what a user does when push refuses (docs/privacy.md): pull the redaction, compact
    name, be = remotes.connect(t.store, "origin")
    pull(t, be, name)
    t.compact()
while time.time() < until or (i < 8 and time.time() < until + 120):  # 8 acks each, however loaded the machine
    act = rnd.random()
    name, be = remotes.connect(t.store, "origin")
    try:
        if act < 0.55:
            s = rnd.choice(["chat", f"own{seed}"])
            text = f"codename walrus{seed}x{i}x{rnd.randrange(10**9)}" if rnd.random() < 0.3 else f"{seed} {i} plain"
            h = t.session(s).append("user", {"content": text}).hash
            note("", h)
            if text.startswith("codename"):
                mine.append((h, s, text))
            i += 1
        elif act < 0.62 and mine:
            h, s, text = mine.pop(rnd.randrange(len(mine)))
            redact(t, s, [(h, "$.payload.content", "codename")])
            note(".redacted", text)
        elif act < 0.75:
            push(t, be, name)
        elif act < 0.9:
            pull(t, be, name)
        elif act < 0.96:
            compact_remote(t, be, name, grace="now")
        else:
            t.compact()
    except SecretsFound:
        refused()
for h, s, text in mine:
    note(".kept", text)
t.close()
"""


def _texts_held(texts: set[str], folder) -> set[str]:
    """Which of the texts any file under the folder holds: raw, inside a zstd frame, or in
    a record as ctape reads it (test_privacy_sync.holders, once for many texts)."""
    from test_privacy_sync import _tape_records, _unzstd

    found = set()
    wanted = {t.encode(): t for t in texts}
    bodies = []
    for root, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            bodies.append(data)
            bodies.extend(_unzstd(data))
    if os.path.exists(os.path.join(folder, "ctape.json")):
        bodies.extend(body for _, body in _tape_records(folder))
    for b, t in wanted.items():
        if any(b in body for body in bodies):
            found.add(t)
    return found


def test_copies_redacting_while_others_push_pull_and_compact_keep_no_redacted_text(tmp_path, s3env):
    """Each copy writes texts (a codename no detector knows) and redacts some of its own at
    random while the others push, pull and compact the remote; a push that the remote says
    holds a redaction this copy has not pulled is refused, and the copy does what the
    message says (pull, compact). Afterwards: every copy pulls and compacts, pushes, one
    copy compacts the remote, every copy pulls and compacts again. No redacted text is left
    in any copy, on the remote, or in a fresh clone; every text not redacted is still there;
    nothing acknowledged is lost."""
    from test_remote_compact import remote_as_tape, remote_keys

    hosts, secs = (5, float(os.environ.get("CTAPE_REMOTE_SECONDS", 180))) if SLOW else (3, 20)
    url, dirs = _copies(tmp_path, s3env, hosts)
    a = dirs[0]
    run_hosts(REDACTING_HOST, dirs, tmp_path, secs)
    acked, redacted, kept = (set(_lines(tmp_path, hosts, x)) for x in ("", ".redacted", ".kept"))
    assert len(acked) > 20 and redacted and kept

    def settle(d):
        cli(d, "pull")
        cli(d, "compact")

    for d in dirs:
        settle(d)
    for d in dirs:
        cli(d, "push")
    cli(a, "compact", "--remote", "origin", "--grace", "now")
    for d in dirs:
        settle(d)
    run_cli("clone", url, tmp_path / "fresh", check=True)
    first = refs_of(dirs[0])
    remote = remote_as_tape(remote_keys(url, s3env), a, tmp_path / "remote-as-tape")
    for d in dirs + [tmp_path / "fresh", remote]:
        held = _texts_held(redacted | kept, d)
        assert not held & redacted, f"{d.name} holds {len(held & redacted)} redacted text(s), e.g. {sorted(held & redacted)[:2]}"
        if d != remote:
            assert kept <= held, f"{d.name} lacks {len(kept - held)} text(s) never redacted"
            fsck_clean(d)
            missing = acked - reached_by_refs(d)
            assert not missing, f"{d.name} lacks {len(missing)} acknowledged entries"
            assert refs_of(d) == first, d.name
