"""What a remote's age costs (SPEC 17: "an incremental push after one append costs a few
requests"; docs/remotes.md). A remote compacted every night for months holds hundreds of
deletion announcements, plans and execution records; what a copy pays for a push or a
compaction must not grow with them. Found by an audit that simulated 200 days of a team's
tape (writers coming and going, `compact --remote` every night)."""

from __future__ import annotations

import json

from test_remote import cli, cli_json


NIGHTS = 12


def _nights(a, remote, nights=NIGHTS) -> list[int]:
    """`nights` rounds of: append to a session, push, remove yesterday's session, compact
    the remote (each compaction that deletes announces g/<n>); the requests of each
    compaction."""
    cli(a, "init")
    cli(a, "remote", "add", "origin", f"file://{remote}")
    requests = []
    for night in range(nights):
        cli(a, "append", "user", json.dumps({"content": f"night {night}"}), "-s", f"s{night}")
        cli(a, "append", "user", json.dumps({"content": "keep"}), "-s", "keep")
        cli(a, "push")
        if night:
            cli(a, "session", "rm", f"s{night - 1}")
        r = cli_json(a, "compact", "--remote", "origin", "--grace", "now", "--expire", "now")[0]
        assert r["deleted"]["files"] >= (1 if night else 0), r
        requests.append(r["requests"])
    return requests


def test_a_nightly_compaction_costs_the_same_on_the_hundredth_night(tmp_path):
    """`compact --remote` GOT every plan (d/) and execution record (x/) its copy had ever
    written, two more requests every night (398 on the 200th). A record this copy finished
    and the plan of a deletion carried out are known by their keys: the listing is enough."""
    a, remote = tmp_path / "a", tmp_path / "remote"
    remote.mkdir()
    requests = _nights(a, remote)
    assert len(list((remote / "x").rglob("*.json"))) >= NIGHTS - 2  # the history is there
    assert max(requests[3:]) - min(requests[3:]) <= 2, requests  # flat (it grew 2 a night)


def test_a_new_clones_first_push_does_not_read_every_announcement(tmp_path):
    """A new clone's first push GOT every deletion announcement g/<n> the remote ever had
    (pull and clone read the manifests that carry them, but left push's starting point at
    0): 21 GETs after 20 nightly compactions, 201 after 200."""
    a, remote = tmp_path / "a", tmp_path / "remote"
    remote.mkdir()
    _nights(a, remote)
    announced = sorted(int(p.name) for p in (remote / "g").iterdir() if p.name.isdigit())
    assert len(announced) >= NIGHTS - 2, announced  # the test needs a remote with a history
    b = tmp_path / "b"
    cli(tmp_path, "clone", f"file://{remote}", b)
    cli(b, "append", "user", json.dumps({"content": "from b"}), "-s", "keep")
    r = cli_json(b, "push")[0]
    assert r["files"] == 1 and r["requests"] <= 6, r
    # and a later push after one append costs what the docs say
    cli(b, "append", "user", json.dumps({"content": "again"}), "-s", "keep")
    r = cli_json(b, "push")[0]
    assert r["requests"] <= 5, r
    cli(a, "pull")
    assert cli(a, "log", "-s", "keep", "-n", "1", "--oneline").stdout.decode().split()[-1] == "again"


def test_manifests_are_read_ahead_in_order(tmp_path):
    """A clone reads every manifest the remote ever had, GETs under way together
    (layout.gets_in_order); what it yields is what reading one after the other gives, in
    order, a missing key as None, at every length around the number in flight."""
    from ctape.sync.backend import FileBackend
    from ctape.sync.layout import GETS_IN_FLIGHT, gets_in_order

    root = tmp_path / "r"
    root.mkdir()
    b = FileBackend(str(root))
    for i in range(3 * GETS_IN_FLIGHT):
        if i % 5 != 2:
            b.put_if_absent(f"k/{i:04d}", str(i).encode())
    for n in (0, 1, 2, 3, GETS_IN_FLIGHT - 1, GETS_IN_FLIGHT, GETS_IN_FLIGHT + 1, 3 * GETS_IN_FLIGHT):
        keys = [f"k/{i:04d}" for i in range(n)]
        assert list(gets_in_order(b, keys)) == [b.get(k) for k in keys], n


def test_a_folder_remote_keeps_no_empty_folder_for_what_compaction_deleted(tmp_path):
    """A folder remote kept a folder for every file a compaction ever deleted (`f/S/FILE/`,
    empty): 3,104 after 200 days, and every listing of f/ walked them. Deleting a piece
    removes the folders it leaves empty; a push beside it makes them again as it needs."""
    from ctape.sync.backend import FileBackend

    a, remote = tmp_path / "a", tmp_path / "remote"
    remote.mkdir()
    _nights(a, remote, nights=4)
    empty = [str(p) for p in (remote / "f").rglob("*") if p.is_dir() and not any(p.iterdir())]
    assert empty == [], empty
    b = FileBackend(str(remote))
    assert b.put_if_absent("f/x/y/0-1", b"1") and b.get("f/x/y/0-1") == b"1"
    b.delete("f/x/y/0-1")
    assert not (remote / "f" / "x").exists() and (remote / "f").is_dir()
    assert b.put_if_absent("f/x/y/0-1", b"2") and b.get("f/x/y/0-1") == b"2"


def test_an_announcement_skipped_for_another_compactors_is_read_later(tmp_path):
    """A compactor whose announcement number was taken by another compactor meanwhile took
    the next one and moved its starting point past both, never reading the other: had
    that one's manifest been lost, nothing would have told this copy of its deletion."""
    from ctape import Tape
    from ctape.sync import layout, prune
    from ctape.sync.backend import FileBackend
    from ctape.sync.push import _new_deletions

    a, remote = tmp_path / "a", tmp_path / "remote"
    remote.mkdir()
    cli(a, "init")
    cli(a, "append", "user", json.dumps({"content": "x"}), "-s", "s")
    tape = Tape.open(a)
    try:
        b = FileBackend(str(remote))
        other = {"session": "s", "file": "0000deadbeef-00000000000000000001.seg", "end": 10}
        assert b.put_if_absent(layout.compaction_key(0), json.dumps(
            {"compactor": "0000deadbeef", "plan": 0, "time": 0, "files": layout.deletion_files([other]),
             "redacted": []}, sort_keys=True).encode())
        state = {"gnext": 0}
        n = prune._announce(tape.store, b, state, 0, [], set())
        assert n == 1 and state["gnext"] == 0 and 1 in state["deletions_read"], state
        # the next push's look reads g/0 (and passes g/1, its own)
        from ctape.sync.remote import State
        st = State.load(tape.store, "origin", f"file://{remote}")
        st.update(state)
        st.setdefault("gone", {})
        _new_deletions(tape.store, b, st, lambda s: None)
        assert "s/" + other["file"] in st["gone"] and st["gnext"] == 2, dict(st)
    finally:
        tape.close()


def test_a_reader_that_stops_does_not_wait_for_the_reads_ahead(tmp_path):
    """A reader of manifests that stops (an error, a Ctrl-C) waited for every GET under way
    before it could go on: against a server that hangs, the client's timeouts. The reads
    ahead are left to finish on their own (found in review)."""
    import threading
    import time

    from ctape.sync.layout import gets_in_order

    release = threading.Event()

    class Hung:
        def get(self, key):
            if key != "k/0":
                release.wait(20)  # a server that does not answer
            return key.encode()

    gen = gets_in_order(Hung(), [f"k/{i}" for i in range(10)])
    assert next(gen) == b"k/0"
    t = time.monotonic()
    gen.close()
    took = time.monotonic() - t
    release.set()
    assert took < 10, took  # (wait=False: microseconds; before, the 20 s of the hung reads)


def test_a_copy_that_only_pushes_stops_putting_a_removed_sessions_pack_up_again(tmp_path):
    """A copy that only pushes (CI, `push --follow`) and a copy that compacts the remote
    every night. A session the push-only copy wrote was removed on the other: each night's
    `compact --remote` deleted the pack the push-only copy had made of it (the removal was
    not in it), and each push of that copy, holding a deleted file, compacted it into the
    same pack and put it up again under the next generation, for good. A push that
    compacts for a deletion brings in first what replaced the files (pull.missing): its
    pack then holds what the compactor's held, the copies settle, and the removed
    session's keys stop changing."""
    a, b, remote = tmp_path / "a", tmp_path / "b", tmp_path / "remote"
    remote.mkdir()
    cli(a, "init")
    cli(a, "remote", "add", "origin", f"file://{remote}")
    for i in range(10):
        cli(a, "append", "user", json.dumps({"content": f"old {i}"}), "-s", "gone")
    cli(a, "append", "user", json.dumps({"content": "keep"}), "-s", "keep")
    cli(a, "push")
    cli(tmp_path, "clone", f"file://{remote}", b)
    cli(b, "session", "rm", "gone")

    def keys(session):
        return sorted(str(p.relative_to(remote / "f")) for p in (remote / "f" / session).rglob("*") if p.is_file())

    seen = []
    for night in range(5):
        cli(a, "append", "user", json.dumps({"content": f"night {night}"}), "-s", "keep")
        err = cli(a, "push").stderr.decode()  # (a pushes; it never pulls)
        if night == 1:  # what a's push brought in, and said so
            assert "brought in from origin the 2 files that replaced files this copy holds, which a compaction there deleted (sessions gone, keep)" in err, err
        seen.append(keys("gone"))
        cli(b, "compact", "--remote", "origin", "--grace", "now")
        seen.append(keys("gone"))
    # settled: the same one pack after every push and every compaction (a pack of a's was
    # put up by each push and deleted by each compaction)
    assert len({tuple(k) for k in seen[4:]}) == 1 and len(seen[-1]) == 1, seen
    # and every copy agrees: the session is removed on both and on a new clone
    c = tmp_path / "c"
    cli(tmp_path, "clone", f"file://{remote}", c)
    cli(a, "pull")
    for d in (a, b, c):
        names = [line.split()[0] for line in cli(d, "sessions").stdout.decode().splitlines() if line.strip()]
        assert names == ["keep"], (d, names)


def _a_and_its_clone_b(tmp_path):
    """a (with session S, pushed to a folder remote) and b, a clone of it."""
    a, b, remote = tmp_path / "a", tmp_path / "b", tmp_path / "remote"
    remote.mkdir()
    cli(a, "init")
    cli(a, "remote", "add", "origin", f"file://{remote}")
    cli(a, "append", "user", "--text", "a1", "-s", "S")
    cli(a, "push")
    cli(tmp_path, "clone", f"file://{remote}", b)
    return a, b


def test_a_push_that_brings_in_another_copys_allowed_secret_is_refused_before_it_compacts(tmp_path):
    """b pushed a likely secret knowingly (--allow-secrets) and compacted the remote. a's
    push brings in b's pack before compacting; its check then finds b's secret, as a pull
    and a push would (each copy decides what leaves it). The check runs before the
    compaction: a refused push leaves what it brought in, as a pull would, and nothing
    compacted (it compacted first, then refused: found in review). Allowed here, it goes."""
    a, b = _a_and_its_clone_b(tmp_path)
    cli(b, "append", "user", "--text", "my token ghp_aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5", "-s", "S")
    cli(b, "push", "--allow-secrets")
    cli(b, "compact", "--remote", "origin", "--grace", "now", "--allow-secrets")
    cli(a, "append", "user", "--text", "a2", "-s", "S")
    own = sorted(f.name for f in (a / "sessions" / "S").iterdir() if f.name.endswith(".seg"))
    p = cli(a, "push", check=False)
    assert p.returncode == 1 and b"brought in from origin" in p.stderr and b"likely secret" in p.stderr, p.stderr
    assert sorted(f.name for f in (a / "sessions" / "S").iterdir() if f.name.endswith(".seg")) == own  # not compacted
    finding = json.loads(cli(a, "scan", "-s", "S", "--json", check=False).stdout.splitlines()[0])["id"]
    cli(a, "scan", "--allow", finding)
    p = cli(a, "push", check=False)
    assert p.returncode == 0, p.stderr


def test_a_push_that_brings_in_says_the_conflicts_the_sync_made(tmp_path):
    """a and b both moved S's main; b compacted the remote. a's push brings in b's pack, and
    the sync rules make a conflict branch (main may now be b's side): said, as a pull says
    it (it was silent: found in review)."""
    a, b = _a_and_its_clone_b(tmp_path)
    cli(a, "append", "user", "--text", "a2", "-s", "S")
    cli(b, "append", "user", "--text", "b2", "-s", "S")
    cli(b, "push")
    cli(b, "compact", "--remote", "origin", "--grace", "now")
    p = cli(a, "push")
    assert b"session S: main moved on two copies at once (as origin brought it)" in p.stderr and b"main.conflict-" in p.stderr, p.stderr


def _x_salvaged_s_and_pushed_its_report(tmp_path):
    """(p, x): x, a clone of p, lost a large value of S to damage, salvaged it, and pushed
    the salvage report."""
    import os

    from ctape import Tape
    from test_push_held_back import damage_first_large_record

    p, x = _a_and_its_clone_b(tmp_path)
    t = Tape.open(x)
    t.session("S").append("tool_result", {"call_id": "c1", "output": os.urandom(150_000).hex()})
    t.session("S").append("user", {"content": "after the large value"})
    t.close()
    damage_first_large_record(str(x / "sessions" / "S"))
    assert b"salvaged" in cli(x, "fsck", "--salvage", check=False).stderr
    assert b"1 salvage report" in cli(x, "push").stdout
    return p, x


def test_a_push_that_brings_in_a_salvaged_sessions_pack_brings_its_salvage_report(tmp_path):
    """x salvaged a damaged segment of S (a value lost), pushed its report, and compacted
    the remote. p, which only pushes, brought in x's pack without the report: its fsck then
    named the lost value as missing (exit 1; found in review)."""
    p, x = _x_salvaged_s_and_pushed_its_report(tmp_path)
    cli(x, "compact", "--remote", "origin", "--grace", "now")
    cli(p, "append", "user", "--text", "p2", "-s", "S")
    out = cli(p, "push")
    assert b"brought in from origin" in out.stderr, out.stderr
    f = cli(p, "fsck", check=False)
    assert f.returncode == 0, (f.stdout, f.stderr)
    assert b"salvaged" in f.stdout + f.stderr


def test_a_push_that_cannot_read_what_replaced_the_files_compacts_what_it_holds(tmp_path):
    """A remote that refuses the reads of pieces (credentials that may only write, here a
    piece that cannot be opened) does not fail the push that brings them in first: it
    says so and compacts what this copy holds, as before."""
    import os

    a, b = _a_and_its_clone_b(tmp_path)
    cli(b, "append", "user", "--text", "b2", "-s", "S")
    cli(b, "push")
    cli(b, "compact", "--remote", "origin", "--grace", "now")
    (piece,) = [p for p in (tmp_path / "remote" / "f" / "S").rglob("*") if p.is_file()]
    data = piece.read_bytes()
    piece.unlink()
    os.symlink(piece.name, piece)  # (a loop: every open fails, as a refused read does)
    cli(a, "append", "user", "--text", "a2", "-s", "S")
    p = cli(a, "push", check=False)
    assert p.returncode == 0 and b"could not bring in what replaced them from origin" in p.stderr, p.stderr
    piece.unlink()
    piece.write_bytes(data)
    c = tmp_path / "c"
    cli(tmp_path, "clone", f"file://{tmp_path / 'remote'}", c)
    texts = {line.split()[-1] for line in cli(c, "log", "-s", "S", "--all", "--oneline").stdout.decode().splitlines()}
    assert {"a1", "a2", "b2"} <= texts, texts


def test_a_copy_whose_state_predates_the_reports_it_keeps_reads_them_once(tmp_path):
    """A copy upgraded with a state written before pushes kept the salvage reports they read
    (`lost_read`) brought a salvaged session's pack in without its report (fsck then named
    the lost value missing; found in review): such a state reads every manifest's reports
    once, when a push first brings files in."""
    import glob
    import os

    from ctape import Tape

    p, x = _x_salvaged_s_and_pushed_its_report(tmp_path)
    t = Tape.open(x)
    xw = t.store.writer
    t.close()
    # p's push read x's manifest, with its report, as a version before `lost_read` did
    (f,) = [f for f in glob.glob(os.environ["CTAPE_CACHE_DIR"] + "/**/remote-origin.json", recursive=True)
            if xw not in json.load(open(f)).get("next", {})]  # (x's own state has pulled its manifests)
    d = json.load(open(f))
    d.pop("lost_read", None)
    d["seen"][xw] = 1
    json.dump(d, open(f, "w"))
    cli(x, "compact", "--remote", "origin", "--grace", "now")
    cli(p, "append", "user", "--text", "p2", "-s", "S")
    assert b"brought in from origin" in cli(p, "push").stderr
    f = cli(p, "fsck", check=False)
    assert f.returncode == 0, (f.stdout, f.stderr)
