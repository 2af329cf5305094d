"""What two privacy audits found (2026-12-03): secrets in object keys, values that only
look redacted, names, a finding that stood for several finds, tokens after NAME= or
before a full stop, and imported lines kept as base64. Each: scan finds it without
printing it, redact takes it out, push refuses until then, and after compact no file
of the tape or of the remote holds it."""

import json
import os
import random
import string

from ctape import Tape

from conftest import run_cli, snapshot
from test_privacy_sync import _unzstd, holders


def _remote_holds(secret: bytes, remote) -> bool:
    """Whether any object of a folder remote holds the bytes, as they are or in a zstd frame."""
    return any(secret in data or any(secret in x for x in _unzstd(data))
               for data in (p.read_bytes() for p in remote.rglob("*") if p.is_file()))


def _key(prefix, n, alphabet=string.ascii_uppercase + string.digits):
    return prefix + "".join(random.choice(alphabet) for _ in range(n))


def _scan(d, *args):
    p = run_cli("--dir", d, "scan", "--json", *args)
    return p, [json.loads(line) for line in p.stdout.decode().splitlines()]


def test_a_secret_used_as_an_object_key_is_found_redacted_and_never_pushed(tmp_path):
    aws, gh = _key("AKIA", 16), _key("ghp_", 36, string.ascii_letters + string.digits)
    both = _key("ghp_", 36, string.ascii_letters + string.digits)  # a key whose value is a secret too
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    s = t.session("chat")
    call = s.append("tool_call", {"call_id": "c1", "name": "http", "arguments": {"headers": {f"Authorization: Bearer {gh}": ""}}})
    state = s.append("user", {"content": "ok"}, delta={"aws": {aws: "us-east-1"}, "n": 1})
    pair = s.append("user", {"content": "x"}, meta={both: aws, "model": "m"})
    t.close()
    run_cli("--dir", a, "remote", "add", "origin", f"file://{remote}", check=True)

    p, found = _scan(a)
    assert p.returncode == 1
    out = p.stdout + p.stderr
    for secret in (aws, gh, both):
        assert secret.encode() not in out  # not in a preview, and not in a path either
    by = {(f["hash"], f["path"], f["kind"]) for f in found}
    assert {f["hash"] for f in found} == {call.hash, state.hash, pair.hash}
    assert all(f["path"].count("{#") + f["path"].count("[#") == 1 for f in found), by
    assert any(f["hash"] == pair.hash and "[#" in f["path"] for f in found)  # the value under the secret key

    before = snapshot(remote)
    p = run_cli("--dir", a, "push", "origin")
    assert p.returncode == 1 and b"redact" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert not any(x.encode() in p.stderr for x in (aws, gh, both))
    assert snapshot(remote) == before

    p = run_cli("--dir", a, "redact", "--scan", check=True)
    assert not any(x.encode() in p.stdout + p.stderr for x in (aws, gh, both))
    assert run_cli("--dir", a, "redact", "--scan", check=True).stderr.startswith(b"0 values redacted")
    assert _scan(a)[0].returncode == 0
    with Tape.open(a) as t:
        assert [e.hash for e in t.session("chat").log()] == [pair.hash, state.hash, call.hash]  # every hash kept
        st = t.session("chat").state()
        assert st["n"] == 1 and list(st["aws"].values()) == ["us-east-1"] and list(st["aws"])[0].startswith("[redacted: ")
        headers = t.read_entry(call.hash).payload["arguments"]["headers"]
        assert list(headers.values()) == [""] and list(headers)[0].startswith("[redacted: github-token")
        meta = t.read_entry(pair.hash).meta
        assert meta["model"] == "m" and len(meta) == 2 and all(k.startswith("[redacted: ") or k == "model" for k in meta)
        assert list(v for k, v in meta.items() if k != "model") == ["[redacted: aws-access-key]"]
    shown = b"".join(run_cli("--dir", a, *cmd, check=True).stdout for cmd in
                     (["export", "chat"], ["log", "-s", "chat"], ["state", "-s", "chat"], ["show", pair.hash, "--json"]))
    assert not any(x.encode() in shown for x in (aws, gh, both)) and b"[redacted: " in shown

    run_cli("--dir", a, "compact", "--expire", "now", "--grace", "now", check=True)
    assert run_cli("--dir", a, "fsck").returncode == 0
    assert run_cli("--dir", a, "push", "origin").returncode == 0
    for secret in (aws, gh, both):
        assert holders(secret.encode(), a) == [] and not _remote_holds(secret.encode(), remote)
    b = tmp_path / "B"
    run_cli("clone", f"file://{remote}", b, check=True)
    assert not any(x.encode() in run_cli("--dir", b, "export", "chat", check=True).stdout for x in (aws, gh, both))


def test_redact_by_the_path_scan_gives_and_again_changes_nothing(tmp_path):
    aws = _key("AKIA", 16)
    d = tmp_path / "t"
    with Tape.init(d) as t:
        e = t.session("chat").append("user", {"content": "ok"}, delta={"aws": {aws: "us-east-1"}})
    _, found = _scan(d)
    (f,) = found
    assert f["path"].startswith("$.delta.aws{#")
    p = run_cli("--dir", d, "redact", e.hash[:12], "--path", f["path"], "-s", "chat", check=True)
    assert p.stdout.startswith(b"redacted ")
    before = snapshot(d)
    p = run_cli("--dir", d, "redact", e.hash[:12], "--path", f["path"], "-s", "chat", check=True)
    assert p.stderr.startswith(b"0 values redacted") and snapshot(d) == before
    p = run_cli("--dir", d, "redact", e.hash[:12], "--path", f["path"] + ".x", "-s", "chat")
    assert p.returncode == 2 and b"comes last" in p.stderr and snapshot(d) == before


def test_a_value_that_only_starts_like_a_marker_is_redacted(tmp_path):
    """`[redacted: aws-access-key] was the old key; new: ...AKIA...` was taken for a value
    redacted already: every redact said "0 values redacted" while scan still found it."""
    aws = _key("AKIA", 16)
    d = tmp_path / "t"
    with Tape.init(d) as t:
        t.session("chat").append("tool_result", {"call_id": "c1", "output": f"[redacted: aws-access-key] was the old key; new: AWS_ACCESS_KEY_ID={aws}"})
    assert _scan(d)[0].returncode == 1
    p = run_cli("--dir", d, "redact", "--scan", check=True)
    assert p.stdout.startswith(b"redacted ")
    assert _scan(d)[0].returncode == 0
    run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", check=True)
    assert holders(aws.encode(), d) == []


def test_scan_prints_no_control_character_of_the_text_it_shows(tmp_path):
    gh = _key("ghp_", 36, string.ascii_letters + string.digits)
    d = tmp_path / "t"
    with Tape.init(d) as t:
        t.session("chat").append("user", {"content": f"x \x1b[31m \x9b31m \x07 {gh}"})
    p = run_cli("--dir", d, "scan")
    out = p.stdout.decode()
    assert p.returncode == 1 and "\\x1b" in out and "\\x9b" in out
    assert not any(c in out for c in "\x1b\x9b\x07") and gh not in out


def test_push_refuses_a_session_branch_or_tag_named_like_a_secret(tmp_path):
    """A session's name is part of its objects' keys on a remote, and ref names are in the
    records that go up: neither was looked at (a privacy audit)."""
    gh = _key("ghp_", 36, string.ascii_letters + string.digits)
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    with Tape.init(a) as t:
        t.session("chat").append("user", {"content": "hi"})
    run_cli("--dir", a, "remote", "add", "origin", f"file://{remote}", check=True)

    def refused(*want):
        before = snapshot(remote)
        p = run_cli("--dir", a, "push", "origin")
        err = p.stderr.decode()
        assert p.returncode == 1 and len(err.splitlines()) == 1 and gh not in err, err
        assert all(w in err for w in want), err
        assert snapshot(remote) == before

    run_cli("--dir", a, "tag", f"deploy-{gh}", "-s", "chat", check=True)
    refused("tag:deploy-[github-token", "ctape tag NEW REF -s chat")
    run_cli("--dir", a, "tag", "-d", f"deploy-{gh}", "-s", "chat", check=True)
    refused("it was deleted", "rotate it", "--allow-secrets")  # its deletion record holds the name
    assert run_cli("--dir", a, "push", "origin", "--allow-secrets").returncode == 0
    run_cli("--dir", a, "branch", f"try-{gh}", "-s", "chat", check=True)
    refused("try-[github-token", "ctape branch NEW REF -s chat")
    run_cli("--dir", a, "branch", "-d", f"try-{gh}", "-s", "chat", check=True)
    assert run_cli("--dir", a, "push", "origin", "--allow-secrets").returncode == 0
    with Tape.open(a) as t:
        t.session(f"s-{gh}").append("user", {"content": "hi"})
    refused("the name of session 's-[github-token", "ctape session cp")
    run_cli("--dir", a, "session", "rm", f"s-{gh}", check=True)
    refused("the name of session", "rotate it")
    with Tape.open(a) as t:
        t.session("chat").append("user", {"content": "a name like main-3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d is no secret"})
    run_cli("--dir", a, "branch", "feature-3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7dAbCdEf", "-s", "chat", check=True)  # no entropy rule on names
    assert run_cli("--dir", a, "push", "origin", "-s", "chat").returncode == 0


def test_a_finding_is_one_find_so_allowing_one_allows_no_other(tmp_path):
    """One finding stood for every find of its kind in a value (the preview showing the
    first) and in a stream's text: allowing a false positive also allowed a real token
    beside it, or one the stream wrote later, and push sent it (a privacy audit)."""
    fake, real, later = "Zx9Qm2Lk7Rt4Vb8Np3Wc6Yd1Hs5Jf0Ga", "Qw8Er4Ty2Ui6Op0As3Df7Gh1Jk5Lz9Xc", "Lk7Pq3Zx8Wm2Rt6Yb4Nc9Vd1Gh5Jf0Sa"
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    t = Tape.init(a)
    t.session("chat").append("tool_result", {"call_id": "c1", "output": f"build {fake} ok. " + "lorem ipsum. " * 10 + f"the token is {real} ok"})
    run_cli("--dir", a, "remote", "add", "origin", f"file://{remote}", check=True)
    p, found = _scan(a)
    assert len(found) == 2 and len({f["id"] for f in found}) == 2 and {f["path"] for f in found} == {"$.payload.output"}
    first = next(f for f in found if "build [" in f["preview"])
    run_cli("--dir", a, "scan", "--allow", first["id"], check=True)
    p, found = _scan(a)
    assert p.returncode == 1 and len(found) == 1 and "the token is [" in found[0]["preview"]
    assert run_cli("--dir", a, "push", "origin").returncode == 1
    run_cli("--dir", a, "redact", "--scan", check=True)  # the value once, though two finds were in it
    with Tape.open(a) as t2:
        assert next(iter(t2.session("chat").log())).payload["output"] == "[redacted: high-entropy-string]"

    # a stream's text grows: a find it brings later is another finding
    w = t.session("live").stream(flush_interval=60)
    w.write(f"the build sha is {fake} (a commit id). ")
    w.flush()
    p, found = _scan(a, "-s", "live")
    assert len(found) == 1
    run_cli("--dir", a, "scan", "--allow", found[0]["id"], check=True)
    assert _scan(a, "-s", "live")[0].returncode == 0
    w.write(f"and the prod API token is {later}")
    w.flush()
    p, found = _scan(a, "-s", "live")
    assert p.returncode == 1 and len(found) == 1 and "prod API token is [" in found[0]["preview"]
    assert run_cli("--dir", a, "push", "origin", "-s", "live").returncode == 1
    t.close()


def test_a_token_after_name_equals_or_before_a_full_stop_is_found(tmp_path):
    """The entropy rule took a token right after "=" or right before "." for part of a
    longer one: an env dump (NAME=VALUE, what scan is first for) and a token ending a
    sentence were not found (a privacy audit). Dotted names and base64 padding still are
    not split into tokens."""
    from ctape.ops.scan import Detectors

    d = Detectors([])
    found = lambda text: [k for _, _, k in d.spans_many([text], [True])[0]]
    assert found("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY\n") == ["high-entropy-string"]
    assert found("DATABASE_PASSWORD=q8Zr2Lk7Tt4Vb8Np3Wc6Yd1Hs5Jf0GaXy") == ["high-entropy-string"]
    assert found("the staging token is Pz4Lm8Qr2Vt6Xw0Bn3Ck7Dj1Fh5Gs9Ka.") == ["high-entropy-string"]
    for text in ("module Pz4Lm8Qr2Vt6Xw0Bn3Ck7Dj1Fh5Gs9Ka.py", "x.Pz4Lm8Qr2Vt6Xw0Bn3Ck7Dj1Fh5Gs9Ka", "a==Pz4Lm8Qr2Vt6Xw0Bn3Ck7Dj1Fh5Gs9Ka",
                 "see =Pz4Lm8Qr2Vt6Xw0Bn3Ck7Dj1Fh5Gs9Ka"):
        assert found(text) == [], text
    a, remote = tmp_path / "A", tmp_path / "remote"
    remote.mkdir()
    with Tape.init(a) as t:
        t.session("chat").append("tool_result", {"call_id": "c1", "output": "HOME=/root\nAWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY\n"})
    run_cli("--dir", a, "remote", "add", "origin", f"file://{remote}", check=True)
    assert run_cli("--dir", a, "push", "origin").returncode == 1


def test_a_key_in_an_imported_line_that_is_not_utf8_is_found_and_redacted(tmp_path):
    """Such a line is kept as base64 (meta ctape.raw.b64, so that export gives its bytes
    back): scan did not look inside, and push and `export --format claude-code` sent the
    key in clear (a privacy audit)."""
    aws = _key("AKIA", 16)
    src = tmp_path / "cc.jsonl"
    good = b'{"type":"user","message":{"role":"user","content":"hello"},"uuid":"u0","parentUuid":null,"timestamp":"2025-07-14T22:59:30.000Z","sessionId":"s"}'
    bad = ('{"type":"user","message":{"role":"user","content":"export AWS_ACCESS_KEY_ID=%s # caf' % aws).encode() + b'\xe9"},"uuid":"x1"}'
    src.write_bytes(good + b"\n" + bad + b"\n")
    d = tmp_path / "t"
    Tape.init(d).close()
    run_cli("--dir", d, "import", "claude-code", str(src), "-s", "cc", check=True)
    p, found = _scan(d)
    assert p.returncode == 1 and [f["path"] for f in found] == ['$.meta["ctape.raw.b64"]']
    assert aws.encode() not in p.stdout
    run_cli("--dir", d, "redact", "--scan", check=True)
    run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", check=True)
    out = run_cli("--dir", d, "export", "cc", "--format", "claude-code", check=True).stdout
    assert aws.encode() not in out and b"[redacted: aws-access-key]" in out
    assert holders(aws.encode(), d) == []
    import base64
    assert holders(base64.b64encode(bad)[:40], d) == []


def test_a_value_under_a_key_redacted_before_is_redacted_and_a_path_never_spells_a_secret_key(tmp_path):
    """(A review of the fixes.) A later redaction of the value under a renamed key named a
    path that led nowhere in the stored body: "redacted", yet shown, kept and pushed. And a
    path given by hand with a secret key in it was recorded as it was, for good."""
    import json as _json

    aws = _key("AKIA", 16)
    d = tmp_path / "t"
    with Tape.init(d) as t:
        e = t.session("c").append("tool_call", {"call_id": "1", "name": "f", "headers": {aws: "corp-12345678"}})
        e2 = t.session("c").append("tool_call", {"call_id": "2", "name": "f", "headers": {aws: "x", "b": "hunter2"}})
    run_cli("--dir", d, "redact", "--scan", "-s", "c", check=True)  # the key
    run_cli("--dir", d, "scan", "--add-pattern", "corp-[0-9]{8}", "--kind", "corp", check=True)
    p, found = _scan(d)
    assert p.returncode == 1 and len(found) == 1
    run_cli("--dir", d, "redact", "--scan", "-s", "c", check=True)  # the value under the renamed key
    assert _scan(d)[0].returncode == 0
    shown = run_cli("--dir", d, "show", e.hash, "--json", check=True).stdout
    assert b"corp-12345678" not in shown and aws.encode() not in shown
    # by hand, a path that spells a key the patterns take for a secret is recorded by its key id
    p = run_cli("--dir", d, "redact", e2.hash[:12], "--path", f"$.payload.headers.{aws}", "-s", "c", check=True)
    assert aws.encode() not in p.stdout + p.stderr
    run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", check=True)
    assert holders(aws.encode(), d) == [] and holders(b"corp-12345678", d) == []
    fsck = run_cli("--dir", d, "fsck", "--json", check=True).stdout
    assert aws.encode() not in fsck and all(isinstance(r["path"], str) for r in _json.loads(fsck)["redacted"])


def test_a_value_redacted_whole_is_not_written_again_by_an_append_or_an_import(tmp_path):
    """After `redact` and `compact` the tape was clean; then an agent appended the same large
    value again (it read the same file), or an export taken before the redaction was
    imported again ("nothing new"): the blob's bytes were written back into a new segment,
    on disk and in every backup, though every read showed the marker. A value redacted
    whole is now never written again. (Found by an audit.)"""
    d, cache = tmp_path / "t", os.environ["CTAPE_CACHE_DIR"]
    secret = "AKIA" + _key("", 16)
    big = "line\n" * 300 + f"AWS_ACCESS_KEY_ID={secret}\n"
    run_cli("init", d, check=True)
    run_cli("--dir", d, "append", "tool-result", "--text", "-s", "chat", "--meta", "call_id=c1", input=big.encode(), check=True)
    exported = run_cli("--dir", d, "export", "chat", check=True).stdout
    (tmp_path / "before.jsonl").write_bytes(exported)
    run_cli("--dir", d, "redact", "--scan", "-s", "chat", check=True)
    run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", check=True)
    assert not holders(secret.encode(), d, cache)

    again = run_cli("--dir", d, "append", "tool-result", "--text", "-s", "chat", "--meta", "call_id=c2", input=big.encode(), check=True)
    run_cli("--dir", d, "import", "jsonl", tmp_path / "before.jsonl", check=True)
    assert not holders(secret.encode(), d, cache)
    shown = json.loads(run_cli("--dir", d, "show", again.stdout.decode().strip(), "--json", check=True).stdout)
    assert shown["payload"]["output"] == "[redacted: aws-access-key]"
    assert run_cli("--dir", d, "fsck").returncode == 0
    assert _scan(d, "-s", "chat")[0].returncode == 0


def test_compact_after_a_redaction_removes_the_caches_of_other_ctape_versions(tmp_path):
    """Each schema version keeps its own index (and search) file in the cache folder; the
    file an older ctape left (`index-16.sqlite`) kept its keyframes, with the secret in a
    state value, after this version redacted and compacted (found by an audit, with the
    real older code). Here the older file is this version's copied under the older name:
    the same kind of rows, the same text."""
    import glob
    import shutil

    d, cache = tmp_path / "t", os.environ["CTAPE_CACHE_DIR"]
    secret = "AKIA" + _key("", 16)
    t = Tape.init(d)
    s = t.session("chat")
    with t.batch():
        s.append("user", {"content": "start"}, delta={"aws_key": secret})
        for i in range(300):
            s.append("assistant", {"content": f"step {i}"})
    assert s.state()["aws_key"] == secret  # a keyframe at seq 256 holds it
    t.close()
    (index,) = glob.glob(os.path.join(cache, "*", "index-*.sqlite"))
    folder = os.path.dirname(index)
    shutil.copy(index, os.path.join(folder, "index-16.sqlite"))
    shutil.copy(index, os.path.join(folder, "index.sqlite"))  # versions up to 15
    assert holders(secret.encode(), folder)

    run_cli("--dir", d, "redact", "--scan", "-s", "chat", check=True)
    run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", check=True)
    assert not holders(secret.encode(), d, cache)
    assert not [n for n in os.listdir(folder) if n.startswith(("index-16", "index.sqlite"))]
    assert os.path.exists(index)  # this version's own cache stays


def test_a_moved_tape_keeps_its_scan_patterns_and_push_still_refuses(tmp_path):
    """The patterns and allowed ids live in the tape's cache folder, whose key is its path
    and inode: after `mv`, `scan` found nothing with no word, and `push` uploaded what the
    pattern had stopped (found by an audit). The settings of another cache folder of the
    same tape are taken over, with a note on stderr."""
    d, moved, remote = tmp_path / "t", tmp_path / "moved", tmp_path / "remote"
    t = Tape.init(d)
    t.session("chat").append("user", {"content": "the door code is corp-12345678"})
    ordinary = t.session("chat").append("user", {"content": "an ordinary note, nothing secret: ticket corp-87654321"}).hash
    t.close()
    run_cli("--dir", d, "scan", "--add-pattern", r"corp-\d{8}", "--kind", "corp-ticket", check=True)
    p, found = _scan(d)
    assert p.returncode == 1 and len(found) == 2
    ordinary = next(f for f in found if f["hash"] == ordinary)
    run_cli("--dir", d, "scan", "--allow", ordinary["id"], check=True)
    os.rename(d, moved)
    remote.mkdir()

    p, after = _scan(moved)
    assert p.returncode == 1 and [f["id"] for f in after] == [f["id"] for f in found if f["id"] != ordinary["id"]], p.stderr
    assert "taken from its cache folder for" in p.stderr.decode() and str(d) in p.stderr.decode()
    run_cli("--dir", moved, "remote", "add", "origin", f"file://{remote}", check=True)
    push = run_cli("--dir", moved, "push", "origin")
    assert push.returncode == 1 and "corp-ticket" in push.stderr.decode()
    assert not _remote_holds(b"corp-12345678", remote)
    p, _ = _scan(moved)
    assert "taken from" not in p.stderr.decode()  # once: the settings are its own now


def test_redact_scan_says_and_fails_when_finds_in_an_interrupted_stream_are_left(tmp_path):
    """A secret in the text of a stream whose writer was killed is not in an entry yet:
    `scan` found it (exit 1), `redact --scan` said "0 values redacted" and exited 0, so
    `redact --scan && push` read as done (found by an audit). It now exits 1 and says to
    run `recover` first; after that it redacts the text."""
    import subprocess
    import sys
    import time

    d = tmp_path / "t"
    secret = "AKIA" + _key("", 16)
    ready = tmp_path / "ready"
    t = Tape.init(d)
    t.session("chat").append("user", {"content": "hi"})
    t.close()
    child = subprocess.Popen([sys.executable, "-c", f"""
import time, ctape
s = ctape.Tape.open({str(d)!r}).session("chat")
with s.stream(flush_interval=0.05) as w:
    w.write("the key is {secret} and more text ")
    time.sleep(0.5)
    open({str(ready)!r}, "w").write("1")
    time.sleep(60)
"""])
    try:
        while not ready.exists():
            assert child.poll() is None
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
    p = run_cli("--dir", d, "redact", "--scan", "-s", "chat")
    assert p.returncode == 1 and "ctape recover -s chat" in p.stderr.decode(), p.stderr
    run_cli("--dir", d, "recover", "-s", "chat", check=True)
    p = run_cli("--dir", d, "redact", "--scan", "-s", "chat")
    assert p.returncode == 0 and b"1 value redacted" in p.stderr, p.stderr
    assert _scan(d, "-s", "chat")[0].returncode == 0
