"""push refuses sessions with unresolved secret findings (SPEC sections 17 and 18)."""

from __future__ import annotations

import os
import random
import shutil
import string
import subprocess

import pytest

from ctape import Tape

from conftest import run_cli, snapshot


def key() -> str:
    return "AKIA" + "".join(random.choice(string.ascii_uppercase + string.digits) for _ in range(16))


def test_push_refuses_a_session_with_a_secret_until_it_is_redacted_or_allowed(tmp_path):
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    t.session("clean").append("user", {"content": "Run the tests, please."})
    leaky = t.session("leaky")
    leaky.append("user", {"content": "Deploy it."})
    secret = key()
    leaky.append("tool_result", {"call_id": "c1", "output": f"export AWS_ACCESS_KEY_ID={secret}\n"})
    t.close()
    run_cli("--dir", a, "remote", "add", "origin", f"file://{remote}", check=True)

    p = run_cli("--dir", a, "push", "origin")
    err = p.stderr.decode()
    # the session with the finding is held back (a warning that says why and what to do, and
    # a last line that counts it); the other goes up (SPEC 18: push refuses the sessions)
    assert p.returncode == 1 and len(err.splitlines()) == 2, err
    why, last = err.splitlines()
    assert "leaky" in why and "redact" in why and "--allow-secrets" in why
    assert "1 session not pushed (leaky" in last, last
    assert secret not in err and secret not in p.stdout.decode()
    pushed = snapshot(remote)
    assert any(k.startswith("f/clean/") for k in pushed) and not any(k.startswith("f/leaky/") for k in pushed), sorted(pushed)
    assert secret.encode() not in b"".join(v for v in pushed.values() if isinstance(v, bytes))

    # a session without findings goes on its own
    assert run_cli("--dir", a, "push", "origin", "-s", "clean").returncode == 0
    # and with only the refused session left to send, the push is refused as one, in one line
    before = snapshot(remote)
    p = run_cli("--dir", a, "push", "origin")
    assert p.returncode == 1 and len(p.stderr.splitlines()) == 1 and b"leaky" in p.stderr, p.stderr
    assert snapshot(remote) == before

    # redacted: the finding is resolved, but the bytes are still in the segment until the
    # next compact: the push says so and sends nothing of that session
    run_cli("--dir", a, "redact", "-s", "leaky", "--scan", check=True)
    before = snapshot(remote)
    p = run_cli("--dir", a, "push", "origin")
    assert p.returncode == 1 and b"compact" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert snapshot(remote) == before
    run_cli("--dir", a, "compact", check=True)
    p = run_cli("--dir", a, "push", "origin")
    assert p.returncode == 0, p.stderr
    # nothing on the remote holds the secret (records are compressed: open them to look)
    remote_bytes = b"".join(v for v in snapshot(remote).values() if isinstance(v, bytes))
    assert secret.encode() not in remote_bytes
    b = tmp_path / "B"
    run_cli("clone", f"file://{remote}", b, check=True)
    shown = run_cli("--dir", b, "export", "leaky", check=True).stdout
    assert secret.encode() not in shown and b"[redacted" in shown
    # and what arrived is the withheld form, not the original bytes behind a marker
    ta, tb = Tape.open(a), Tape.open(b)
    try:
        (h,) = ta.redactions()
        assert tb.store.get_object(h)[0] == ord("W")
    finally:
        ta.close(), tb.close()


def test_push_allow_secrets_overrides(tmp_path):
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    t.session("leaky").append("user", {"content": f"my key is {key()}"})
    t.close()
    run_cli("--dir", a, "remote", "add", "origin", f"file://{remote}", check=True)
    assert run_cli("--dir", a, "push", "origin").returncode == 1
    p = run_cli("--dir", a, "push", "origin", "--allow-secrets")
    assert p.returncode == 0, p.stderr
    assert any(files for _, _, files in os.walk(remote))


# -- a redacted value held by more files than the index names ------------------------------------

LARGE = "the vault opens with lamest nurmil " + "and so on " * 150  # a large value: stored once, by its hash


def two_copies_that_wrote_one_value(tmp_path, monkeypatch):
    """X and Y, rsync copies of one tape, each writing the same large value in a session of
    its own (A on X, B on Y): the same object, in a file of each. Returns (X, Y, A's entry)."""
    x, y = tmp_path / "X", tmp_path / "Y"
    Tape.init(x).close()
    subprocess.run(["rsync", "-a", f"{x}/", f"{y}/"], check=True)
    monkeypatch.setenv("CTAPE_WRITER", "wx0000000001")
    t = Tape.open(x)
    t.session("A").append("user", {"content": "read the vault notes"})
    told = t.session("A").append("tool_result", {"call_id": "c1", "content": LARGE}).hash
    t.close()
    monkeypatch.setenv("CTAPE_WRITER", "wy0000000001")
    t = Tape.open(y)
    t.session("B").append("user", {"content": "read them again"})
    t.session("B").append("tool_result", {"call_id": "c1", "content": LARGE})
    t.close()
    monkeypatch.setenv("CTAPE_WRITER", "wx0000000001")
    return x, y, told


def refused_until_compacted(x, remote, *pushes: list[str]) -> None:
    """Each push (its arguments) refuses in one line that asks for `ctape compact`, and
    leaves the remote as it was."""
    before = snapshot(remote)
    for args in pushes:
        p = run_cli("--dir", x, "push", "origin", *args)
        assert p.returncode == 1 and b"ctape compact" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
        assert snapshot(remote) == before


def pushed_text(tmp_path, remote, name: str) -> bool:
    """Does a clone of the remote show the large value anywhere?"""
    c = tmp_path / name
    run_cli("clone", f"file://{remote}", c, check=True)
    out = b"".join(run_cli("--dir", c, "export", s, check=True).stdout for s in Tape.open(c).store.sessions())
    return b"lamest nurmil" in out


@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed (.ci/run installs it)")
def test_a_value_two_copies_wrote_in_two_sessions_is_not_pushed_after_its_redaction(tmp_path, monkeypatch):
    """Found in review: the check asked the index where a redacted value is, and the index
    names one file per object. X redacts the value in session A (the file the index names);
    Y's file of session B, rsynced to X, holds it too, and `push -s B` uploaded it. The
    push now also reads the files it uploads for redacted objects in their original form."""
    x, y, told = two_copies_that_wrote_one_value(tmp_path, monkeypatch)
    subprocess.run(["rsync", "-a", f"{y}/", f"{x}/"], check=True)
    remote = tmp_path / "remote"
    remote.mkdir()
    run_cli("--dir", x, "remote", "add", "origin", f"file://{remote}", check=True)
    run_cli("--dir", x, "redact", "-s", "A", told, "--path", "$.payload.content", check=True)
    refused_until_compacted(x, remote, ["-s", "B"], [])
    run_cli("--dir", x, "compact", check=True)
    assert run_cli("--dir", x, "push", "origin", "-s", "B").returncode == 0
    assert run_cli("--dir", x, "push", "origin").returncode == 0
    assert not pushed_text(tmp_path, remote, "C")


@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed (.ci/run installs it)")
def test_a_file_rsync_brought_back_after_a_compaction_is_checked_too(tmp_path):
    """X redacts an entry and compacts: the index names the entry's withheld form in the new
    pack. Then rsync from Y, a copy taken before, brings back X's old segment, which holds
    the entry as it was written. X knows the redaction, yet its push uploaded that file
    (the index had said "withheld"): it now refuses until a compaction."""
    x, y = tmp_path / "X", tmp_path / "Y"
    t = Tape.init(x)
    t.session("A").append("user", {"content": "what opens the vault?"})
    told = t.session("A").append("assistant", {"content": "the vault opens with lamest nurmil"}).hash  # small: in the entry
    t.close()
    subprocess.run(["rsync", "-a", f"{x}/", f"{y}/"], check=True)
    run_cli("--dir", x, "redact", "-s", "A", told, "--path", "$.payload.content", check=True)
    run_cli("--dir", x, "compact", check=True)
    subprocess.run(["rsync", "-a", f"{y}/", f"{x}/"], check=True)
    remote = tmp_path / "remote"
    remote.mkdir()
    run_cli("--dir", x, "remote", "add", "origin", f"file://{remote}", check=True)
    refused_until_compacted(x, remote, ["-s", "A"], [])
    run_cli("--dir", x, "compact", check=True)
    assert run_cli("--dir", x, "push", "origin").returncode == 0
    assert not pushed_text(tmp_path, remote, "C")
