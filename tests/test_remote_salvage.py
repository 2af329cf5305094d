"""What a salvage found lost travels with the tape through a remote (ctape/sync/losses.py).

`fsck --salvage` moves a damaged file into quarantine/ and writes a report naming the
values and entries lost with it; reads then show a lost value as `[lost: damaged]` and
fsck passes with a warning. rsync carries quarantine/; a remote holds no quarantined file,
so before this change a clone of a salvaged tape named each lost value as a missing object
(`fsck` exit 1) and could not tell damage from "not synced yet". Real processes (the CLI),
a folder remote and SeaweedFS; clones, a copy made by rsync, partial pulls."""

import json
import os
import shutil

from ctape import Tape
from ctape.sync import layout

from test_push_held_back import damage_first_large_record
from test_remote import cli, remote_url, s3env, seaweed  # noqa: F401  (fixtures)
from test_remote_audit import remote_blobs
from conftest import run_cli

LOST = b"[lost: damaged]"


def salvaged_tape(path, made: bool = False) -> str:
    """A tape whose session `hurt` lost a large value to damage and was salvaged; the value's
    hash. Session `healthy` is untouched. `made`: the tape is there already (hurt_tape)."""
    if not made:
        hurt_tape(path)
    damage_first_large_record(path / "sessions" / "hurt")
    p = cli(path, "fsck", "--salvage", check=False)
    assert b"salvaged" in p.stderr, p.stderr
    (report,) = [json.loads(f.read_text()) for f in (path / "quarantine" / "hurt").glob("*.salvage.json")]
    (lost,) = report["missing"]
    return lost


def hurt_tape(path) -> None:
    t = Tape.init(path)
    t.session("healthy").append("user", {"content": "healthy 1"})
    t.session("hurt").append("tool_result", {"call_id": "c1", "output": os.urandom(150_000).hex()})
    t.session("hurt").append("user", {"content": "after the large value"})
    t.close()


def reports(path, session="hurt") -> list[dict]:
    folder = path / "quarantine" / session
    return [json.loads(f.read_text()) for f in sorted(folder.glob("*.salvage.json"))] if folder.is_dir() else []


def folder(path) -> str:
    path.mkdir()
    return f"file://{path}"


def manifests(url) -> list[dict]:
    return [json.loads(v) for k, v in remote_blobs(url).items() if k.startswith("m/")]


def test_a_clone_of_a_salvaged_tape_reads_the_lost_value_as_lost(tmp_path, remote_url):
    a, b = tmp_path / "A", tmp_path / "B"
    lost = salvaged_tape(a)
    writer = Tape.open(a).store.writer
    cli(a, "remote", "add", "origin", remote_url)
    p = cli(a, "push")
    assert b"and 1 salvage report to origin" in p.stdout, p.stdout

    run_cli("clone", remote_url, b, check=True)
    # the clone reads what the salvaging copy reads: the entry, its value lost
    assert LOST in cli(b, "export", "hurt").stdout
    assert b"after the large value" in cli(b, "log", "-s", "hurt").stdout
    p = cli(b, "fsck", "--json", check=False)
    out = json.loads(p.stdout)
    assert p.returncode == 0 and out["ok"], out["problems"]
    (warning,) = [w for w in out["warnings"] if "salvaged on" in w["problem"]]
    assert lost[:12] in warning["problem"] and f"on copy {writer}" in warning["problem"], warning
    (report,) = reports(b)
    assert report["missing"] == [lost] and report["pulled_from"] == "origin"

    # the clone sends nothing back, and a second clone holds one report, not two
    assert b"nothing to push" in cli(b, "push").stdout
    assert b"nothing to push" in cli(a, "push").stdout
    assert sum(len(m.get("lost", [])) for m in manifests(remote_url)) == 1
    cli(b, "pull")
    assert len(reports(b)) == 1


def test_what_goes_up_is_the_loss_not_the_damage_report(tmp_path):
    """The remote gets hashes, times and a count: never the reasons (a record that failed
    its schema can be quoted there), never the quarantined file or the kept entries."""
    a, url = tmp_path / "A", folder(tmp_path / "remote")
    salvaged_tape(a)
    (local,) = reports(a)
    assert "offset" in local["lost"] and local["entries"]  # what stays home
    cli(a, "remote", "add", "origin", url)
    cli(a, "push")
    (sent,) = [x for m in manifests(url) for x in m.get("lost", [])]
    assert sent["lost"] == local["lost"].split(":")[0] and "offset" not in json.dumps(sent), sent
    assert set(sent) == {"file", "time", "lost", "missing", "kept_at", "copy"}, sent
    assert not [k for k in remote_blobs(url) if "quarantine" in k]


def test_a_report_brought_by_rsync_and_by_a_remote_is_one_report(tmp_path):
    """Copy C got A's quarantine/ by rsync and pushes too: the remote then holds the report
    twice (C had not pulled A's manifest), and a copy that pulls both writes it once."""
    a, c, d = tmp_path / "A", tmp_path / "C", tmp_path / "D"
    url, second = folder(tmp_path / "remote"), folder(tmp_path / "remote2")
    salvaged_tape(a)
    cli(a, "remote", "add", "origin", url)
    cli(a, "push")
    shutil.copytree(a, c)  # as `rsync -a A/ C/` would
    cli(c, "remote", "add", "second", second)
    cli(c, "push", "second")
    run_cli("clone", second, d, check=True)
    cli(d, "remote", "add", "first", url)
    cli(d, "pull", "first")
    assert len(reports(d)) == 1 and LOST in cli(d, "export", "hurt").stdout
    p = cli(d, "fsck", check=False)
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_partial_pull_brings_only_its_sessions_reports_and_a_full_pull_the_rest(tmp_path):
    a, b, url = tmp_path / "A", tmp_path / "B", folder(tmp_path / "remote")
    hurt_tape(a)
    cli(a, "remote", "add", "origin", url)
    cli(a, "push")
    run_cli("clone", url, b, check=True)
    salvaged_tape(a, made=True)
    cli(a, "push")
    cli(b, "pull", "-s", "healthy")
    assert not reports(b)
    p = cli(b, "pull", "--json")
    assert json.loads(p.stdout)["salvage_reports"] == 1 and len(reports(b)) == 1


def test_a_salvage_after_the_files_went_up_sends_the_report_alone(tmp_path):
    """The files were on the remote before this copy's disk damaged them: the salvage's pack
    goes up, and the report with it; a copy that pulled the intact value keeps reading it."""
    a, b, url = tmp_path / "A", tmp_path / "B", folder(tmp_path / "remote")
    t = Tape.init(a)
    big = os.urandom(150_000).hex()
    t.session("hurt").append("tool_result", {"call_id": "c1", "output": big})
    t.session("hurt").append("user", {"content": "after"})
    t.close()
    cli(a, "remote", "add", "origin", url)
    cli(a, "push")
    run_cli("clone", url, b, check=True)
    damage_first_large_record(a / "sessions" / "hurt")
    cli(a, "fsck", "--salvage", check=False)
    p = cli(a, "push")
    assert b"1 salvage report" in p.stdout, p.stdout
    p = cli(b, "pull")
    assert b"1 salvage report" in p.stdout, p.stdout
    # B holds the value intact: it reads it, and fsck passes with the salvage as a warning
    assert big.encode() in cli(b, "export", "hurt").stdout
    p = cli(b, "fsck", "--json", check=False)
    assert p.returncode == 0 and any("salvaged on" in w["problem"] for w in json.loads(p.stdout)["warnings"])


def test_a_bad_salvage_report_in_a_manifest_is_left_out_and_its_files_kept():
    """A report is a hint: one that does not read as one (another version, junk) is left
    out, and the manifest's files still count (a review found the whole manifest, files
    and all, ignored for it)."""
    store = type("S", (), {"tape_id": "ab" * 8})()
    good = {"file": "sessions/s/pack-" + "0" * 32 + ".pack", "time": "2026-12-04T00:00:00Z", "lost": "1 damaged place(s)",
            "missing": ["a" * 64], "missing_keys": [-5, 7], "kept_at": "quarantine/s/x", "copy": "abcd1234"}
    files = [{"session": "s", "file": "pack-" + "1" * 32 + ".pack", "start": 0, "end": 10, "blake3": "b" * 64}]
    for bad in ({**good, "file": "../etc/passwd"}, {**good, "missing": ["zz"]}, {**good, "copy": "../x"}, {**good, "lost": ""},
                {**good, "missing_keys": 5}, {**good, "missing_keys": [1 << 70]}, "x"):
        data = layout.encode_manifest(store, "abcd1234", 0, files, lost=[bad, good])
        m, why = layout.decode_manifest(data, store.tape_id, "abcd1234", 0)
        assert m is not None and m["lost"] == [good] and m["files"] == files, (bad, why)
    # a manifest of an earlier version has none
    m, _ = layout.decode_manifest(layout.encode_manifest(store, "abcd1234", 0, []), store.tape_id, "abcd1234", 0)
    assert m["lost"] == []


def test_a_report_relayed_through_two_remotes_stays_one_report(tmp_path):
    """A report pulled from one remote and pushed to another is the same report: its
    `kept_at` is not added to at each hop (a review saw "on copy W on copy W", which grew
    past the limit a report is read with), and fsck says where the damaged file is."""
    a, b, c = tmp_path / "A", tmp_path / "B", tmp_path / "C"
    first, second = folder(tmp_path / "r1"), folder(tmp_path / "r2")
    salvaged_tape(a)
    writer = Tape.open(a).store.writer
    cli(a, "remote", "add", "origin", first)
    cli(a, "push")
    run_cli("clone", first, b, check=True)
    cli(b, "remote", "add", "second", second)
    cli(b, "push", "second")
    run_cli("clone", second, c, check=True)
    (report,) = reports(c)
    (own,) = reports(a)
    assert report["kept_at"] == own["kept_at"], (report, own)
    out = json.loads(cli(c, "fsck", "--json").stdout)
    (said,) = [w["problem"] for w in out["warnings"] if "salvaged on" in w["problem"]]
    assert said.endswith(f"kept in {own['kept_at']} on copy {writer}"), said
