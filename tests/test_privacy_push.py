"""push refuses sessions with unresolved secret findings (SPEC sections 17 and 18)."""

from __future__ import annotations

import os
import random
import string

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

    before = snapshot(remote)
    p = run_cli("--dir", a, "push", "origin")
    err = p.stderr.decode()
    assert p.returncode == 1 and len(err.splitlines()) == 1, err
    assert "leaky" in err and "redact" in err and "--allow-secrets" in err
    assert secret not in err and secret not in p.stdout.decode()
    assert snapshot(remote) == before  # nothing left the machine

    # a session without findings goes on its own
    assert run_cli("--dir", a, "push", "origin", "-s", "clean").returncode == 0

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
