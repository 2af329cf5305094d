"""scan and redact (SPEC section 18): findings, masked previews, the redaction record,
reads that show the marker, and hashes that never change."""

import json
import os
import secrets
import string

import pytest

from ctape import Tape

from conftest import run_cli, snapshot


def _rand(n, alphabet=string.ascii_letters + string.digits):
    return "".join(secrets.choice(alphabet) for _ in range(n))


def plant(tape_dir):
    """Two sessions with secrets in a user message, a tool call's arguments, a tool output
    and a 5 MB large value; returns {name: secret} and the hashes of every entry."""
    s = {
        "aws": "AKIA" + _rand(16, string.ascii_uppercase + string.digits),
        "github": "ghp_" + _rand(36),
        "stripe": "sk_live_" + _rand(24),
        "blob": _rand(64),  # inside the 5 MB value, beside a private key header
    }
    big = "log line\n" * 1000 + "-----BEGIN RSA PRIVATE KEY-----\n" + s["blob"] + "\n" + "x" * (5 << 20)
    t = Tape.init(tape_dir)
    a = t.session("alpha")
    a.append("user", {"content": f"my key is {s['aws']}, please deploy"})
    a.append("tool_call", {"call_id": "c1", "name": "bash", "arguments": {"command": f"curl -H 'Authorization: token {s['github']}' https://api.github.com"}})
    a.append("tool_result", {"call_id": "c1", "output": f"STRIPE_KEY={s['stripe']}\nok"})
    a.append("assistant", {"content": "done, nothing secret here"})
    b = t.session("beta")
    b.append("user", {"content": "read the key file"})
    b.append("tool_result", {"call_id": "c2", "output": big})
    b.append("assistant", {"content": "the key file is read"})
    t.close()
    return s


def hashes(tape_dir):
    t = Tape.open(tape_dir)
    try:
        return {n: [e.hash for e in t.session(n).log()] for n in ("alpha", "beta")}, \
               {n: t.session(n).refs().branches for n in ("alpha", "beta")}
    finally:
        t.close()


def scan_json(d, *args):
    p = run_cli("--dir", d, "scan", "--json", *args)
    return p, [json.loads(line) for line in p.stdout.decode().splitlines()]


def test_scan_finds_every_planted_secret_and_never_prints_one(tmp_path):
    d = tmp_path / "t"
    s = plant(d)
    p, found = scan_json(d)
    assert p.returncode == 1
    kinds = {(f["session"], f["path"], f["kind"]) for f in found}
    assert ("alpha", "$.payload.content", "aws-access-key") in kinds
    assert ("alpha", "$.payload.arguments.command", "github-token") in kinds
    assert ("alpha", "$.payload.output", "stripe-access-key") in kinds
    assert ("beta", "$.payload.output", "private-key") in kinds
    assert all(set(f) == {"id", "session", "hash", "path", "kind", "preview"} for f in found)
    out = p.stdout + p.stderr + run_cli("--dir", d, "scan").stdout
    for secret in s.values():
        assert secret.encode() not in out
        assert secret[4:20].encode() not in out  # not even most of it
    assert b"please deploy" in out  # the preview shows what is around it


def test_no_byte_of_a_private_key_block_is_printed(tmp_path):
    """A black-box audit: detect-secrets finds a PEM's BEGIN line only, and the entropy rule
    masks only long random lines, so a key's short last line (and a first line of ASN.1
    zeros) came out in the previews beside the finds. The find is now the whole block."""
    import base64

    d = tmp_path / "t"
    run_cli("--dir", d, "init", check=True)
    bodies = []
    for i in range(3):
        raw = base64.b64encode(b"\0" * 18 + secrets.token_bytes(1200)).decode()
        lines = [raw[j:j + 64] for j in range(0, len(raw), 64)]
        lines.append("k7bdcQctI7ZEXGyWEK4m7J0v"[: 20 + i])  # short, below the entropy rule
        bodies.append(lines)
        pem = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END PRIVATE KEY-----\n"
        run_cli("--dir", d, "append", "tool-result", json.dumps({"call_id": f"c{i}", "output": "key:\n" + pem + "done"}), "-s", "k", check=True)
    p, found = scan_json(d)
    out = (p.stdout + p.stderr + run_cli("--dir", d, "scan").stdout).decode()
    assert p.returncode == 1 and {f["kind"] for f in found} == {"private-key"} and len(found) == 3
    for lines in bodies:
        for line in lines:
            assert line[:12] not in out, line
    assert "done" in out  # what follows the block is shown


def test_scan_clean_tape_exits_0_and_allow_keeps_a_finding(tmp_path):
    d = tmp_path / "t"
    t = Tape.init(d)
    t.session("x").append("user", {"content": "hello"})
    t.close()
    assert run_cli("--dir", d, "scan").returncode == 0
    t = Tape.open(d)
    t.session("x").append("user", {"content": "AKIA" + "Q" * 16})
    t.close()
    p, found = scan_json(d)
    assert p.returncode == 1 and len(found) == 1
    real = found[0]["id"]
    typo = real[:-1] + ("0" if real[-1] != "0" else "1")
    p = run_cli("--dir", d, "scan", "--allow", typo)  # allowed (another copy may hold it), with a warning
    assert p.returncode == 0 and f"no finding of this copy has id {typo}" in p.stderr.decode(), p.stderr
    p = run_cli("--dir", d, "scan", "--allow", real)
    assert p.returncode == 0 and b"warning" not in p.stderr, p.stderr
    p, found = scan_json(d)
    assert p.returncode == 0 and found == []
    p = run_cli("--dir", d, "scan", "--allow", real)  # again: it is still this copy's finding (allowed)
    assert p.returncode == 0 and b"warning" not in p.stderr, p.stderr


def test_user_pattern_is_found(tmp_path):
    d = tmp_path / "t"
    t = Tape.init(d)
    t.session("x").append("user", {"content": "the door code is corp-12345678"})
    t.close()
    assert run_cli("--dir", d, "scan").returncode == 0
    assert run_cli("--dir", d, "scan", "--add-pattern", r"corp-\d{8}", "--kind", "door-code").returncode == 0
    p, found = scan_json(d)
    assert p.returncode == 1 and [f["kind"] for f in found] == ["door-code"]
    assert "[door-code: 13 chars]" in found[0]["preview"]


@pytest.mark.parametrize("args", [
    ["scan", "--add-pattern", "("],
    ["scan", "--allow", "nothex"],
    ["redact"],
    ["redact", "--scan", "--pattern", "x"],
    ["redact", "-s", "alpha", "--pattern", "[unclosed"],
    ["redact", "-s", "alpha", "HEAD", "--path", "$.payload.nothere"],
    ["redact", "-s", "alpha", "HEAD", "--path", "payload.content"],
    ["redact", "-s", "alpha", "HEAD", "--path", "$.seq"],
    ["redact", "-s", "alpha", "HEAD"],
])
def test_bad_input_changes_nothing(tmp_path, args):
    d = tmp_path / "t"
    plant(d)
    before = snapshot(d)
    p = run_cli("--dir", d, *args)
    assert p.returncode != 0
    err = p.stderr.decode()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert snapshot(d) == before


@pytest.mark.parametrize("args", [
    ["scan", "--add-pattern", "x{4294967295}"],
    ["redact", "-s", "alpha", "--pattern", "a{99999999999}"],
])
def test_a_repetition_count_too_large_is_a_bad_pattern(tmp_path, args):
    """re raises OverflowError, not re.error, for it: "internal error" with exit 1 before
    (found by an audit)."""
    d = tmp_path / "t"
    plant(d)
    before = snapshot(d)
    p = run_cli("--dir", d, *args)
    assert p.returncode == 2 and p.stderr.decode().startswith("ctape: error: bad pattern"), p.stderr
    assert snapshot(d) == before


def test_redact_scan_shows_marker_keeps_every_hash(tmp_path):
    d = tmp_path / "t"
    s = plant(d)
    before = hashes(d)
    p = run_cli("--dir", d, "redact", "--scan")
    assert p.returncode == 0, p.stderr
    assert hashes(d) == before
    p, found = scan_json(d)
    assert p.returncode == 0 and found == []
    t = Tape.open(d)
    a = {e.kind: e for e in t.session("alpha").log()}
    assert a["user"].payload["content"] == "[redacted: aws-access-key]"
    assert a["tool_call"].payload["arguments"]["command"] == "[redacted: github-token]"
    assert a["tool_result"].payload["output"] == "[redacted: stripe-access-key]"
    assert a["assistant"].payload["content"] == "done, nothing secret here"
    b = {e.kind: e for e in t.session("beta").log()}
    assert b["tool_result"].payload["output"] == "[redacted: private-key]"
    t.close()
    for cmd in (["log", "-s", "alpha"], ["show", before[0]["alpha"][0], "--json"], ["context", "alpha"],
                ["export", "alpha"], ["export", "beta"], ["export", "alpha", "--format", "openai"], ["search", "deploy"]):
        out = run_cli("--dir", d, *cmd)
        assert out.returncode == 0, (cmd, out.stderr)
        for secret in s.values():
            assert secret.encode() not in out.stdout, cmd
    assert b"redacted" in run_cli("--dir", d, "show", before[0]["alpha"][-1]).stdout
    assert run_cli("--dir", d, "fsck").returncode == 0


def test_redact_one_path_and_pattern(tmp_path):
    d = tmp_path / "t"
    s = plant(d)
    first = hashes(d)[0]["alpha"][-1]
    p = run_cli("--dir", d, "redact", "-s", "alpha", first[:12], "--path", "$.payload.content")
    assert p.returncode == 0, p.stderr
    t = Tape.open(d)
    assert t.read_entry(first).payload["content"] == "[redacted: manual]"
    t.close()
    p = run_cli("--dir", d, "redact", "-s", "alpha", "--pattern", "sk_live_[A-Za-z0-9]+", "--kind", "stripe")
    assert p.returncode == 0, p.stderr
    t = Tape.open(d)
    out = [e.payload.get("output") for e in t.session("alpha").log() if e.kind == "tool_result"]
    assert out == ["[redacted: stripe]"]
    t.close()
    assert s["github"].encode() in run_cli("--dir", d, "export", "alpha").stdout  # not redacted: still there


def test_redact_an_entry_named_with_another_session_records_it_where_the_entry_is(tmp_path):
    """`redact ENTRY --path P -s beta` for an entry of alpha: the output named beta, and the
    record went in beta's files, so a copy of alpha alone (`push -s alpha`, an rsync of
    its folder) showed the secret. The record goes where the entry is stored."""
    import shutil

    d = tmp_path / "t"
    s = plant(d)
    first = hashes(d)[0]["alpha"][0]
    p = run_cli("--dir", d, "redact", "-s", "beta", first[:12], "--path", "$.payload.content", "--json")
    assert p.returncode == 0, p.stderr
    (line,) = [json.loads(x) for x in p.stdout.decode().splitlines()]
    assert line["session"] == "alpha" and line["hash"] == first
    alone = tmp_path / "alpha-alone"
    shutil.copytree(d, alone)
    shutil.rmtree(alone / "sessions" / "beta")
    shown = run_cli("--dir", alone, "show", first, "-s", "alpha", "--json", check=True).stdout.decode()
    assert s["aws"] not in shown and "[redacted: manual]" in shown


def test_redact_scan_of_a_session_that_reuses_anothers_entries_records_it_with_the_bytes(tmp_path):
    """A transcript imported twice: the second session reuses the first's entries (stored
    once, in the first's files). `redact --scan -s second` recorded the redaction in
    second's files; a copy of first alone kept the secret. Now it is recorded in first."""
    import shutil

    d, src = tmp_path / "t", tmp_path / "t.jsonl"
    key = "AKIA" + _rand(16, string.ascii_uppercase + string.digits)
    src.write_text(json.dumps({"role": "user", "content": f"deploy with {key} please"}) + "\n"
                   + json.dumps({"role": "assistant", "content": "ok"}) + "\n")
    run_cli("--dir", d, "init", check=True)
    for name in ("first", "second"):
        run_cli("--dir", d, "import", src, "-s", name, check=True)
    p = run_cli("--dir", d, "redact", "--scan", "-s", "second", "--json", check=True)
    assert {json.loads(x)["session"] for x in p.stdout.decode().splitlines()} == {"first"}
    alone = tmp_path / "first-alone"
    shutil.copytree(d, alone)
    shutil.rmtree(alone / "sessions" / "second")
    assert key.encode() not in run_cli("--dir", alone, "export", "first", check=True).stdout


def test_search_cache_built_before_the_redaction_forgets_the_text(tmp_path):
    d = tmp_path / "t"
    s = plant(d)
    assert s["aws"].encode() in run_cli("--dir", d, "search", s["aws"]).stdout
    assert run_cli("--dir", d, "redact", "--scan").returncode == 0
    assert s["aws"].encode() not in run_cli("--dir", d, "search", s["aws"]).stdout
    cache = os.environ["CTAPE_CACHE_DIR"]
    for root, _, files in os.walk(cache):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                assert s["aws"].encode() not in f.read(), name


def test_a_pattern_whose_group_is_a_prefix_masks_the_whole_token(tmp_path):
    """detect-secrets' GitHub pattern captures only `ghp`: the preview once masked those
    three characters and printed the rest of the token (a token of words and digits is
    not high-entropy, so nothing else covered it)."""
    d = tmp_path / "t"
    token = "ghp_T0kenForTheTutorialOnly1234567890abc"
    t = Tape.init(d)
    t.session("s").append("tool_result", {"call_id": "c", "output": f"GITHUB_TOKEN={token}\nHOME=/home/me"})
    t.close()
    p, found = scan_json(d)
    assert p.returncode == 1 and [f["kind"] for f in found] == ["github-token"]
    out = p.stdout + run_cli("--dir", d, "scan").stdout
    for i in range(len(token) - 6):
        assert token[i:i + 6].encode() not in out, token[i:i + 6]
    assert b"GITHUB_TOKEN=" in out and b"HOME=/home/me" in out


def test_a_redaction_whose_record_went_is_said_and_recorded_again(tmp_path):
    """(audit, 2026-12-07) The file that recorded a redaction went (an `rsync --delete` from
    a copy without it): this machine's index kept showing the marker while the files held
    the text in clear (a fresh index showed it, an rsync carried it), fsck said ok, and
    `redact` again did nothing. fsck now says so (exit 1) and `fsck --salvage` records the
    redaction again."""
    import shutil

    env = {"CTAPE_CACHE_DIR": str(tmp_path / "cache")}
    a, t = tmp_path / "A", tmp_path / "T"
    run_cli("--dir", a, "init", env=env, check=True)
    run_cli("--dir", a, "append", "user", "--text", "my password is hunter2", "-s", "chat", env=env, check=True)
    shutil.copytree(a, t)
    run_cli("--dir", t, "redact", "--pattern", "hunter2", "-s", "chat", env=env, check=True)
    for f in (t / "sessions" / "chat").iterdir():  # as `rsync -a --delete A/ T/` leaves it
        if not (a / "sessions" / "chat" / f.name).exists():
            f.unlink()
    p = run_cli("--dir", t, "fsck", env=env)
    assert p.returncode == 1 and b"lost-redaction: 1 redacted place" in p.stdout, p.stdout
    p = run_cli("--dir", t, "fsck", "--salvage", env=env, check=True)
    assert b"chat: recorded again the redaction of 1 place" in p.stderr, p.stderr
    fresh = {"CTAPE_CACHE_DIR": str(tmp_path / "other-cache")}
    out = run_cli("--dir", t, "log", "-s", "chat", env=fresh, check=True).stdout
    assert b"hunter2" not in out and b"[redacted: pattern]" in out
