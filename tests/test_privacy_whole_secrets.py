"""What a privacy audit found (2026-12-07): a preview that printed the part of a secret its
pattern did not match, a long token no rule found, an escaped URL the push's byte check
read past, Gemini's camel-case media parts, a damaged dictionary block in quarantine/, and
a refusal that offered only a destructive way out. Each test fails on the code before."""

from __future__ import annotations

import base64
import json
import pathlib
import random
import string

from ctape import Tape
from ctape.store import framing

from conftest import run_cli
from test_privacy_audit import _remote_holds
from test_privacy_sync import _unzstd, holders

TRANSCRIPTS = pathlib.Path(__file__).resolve().parent / "fixtures" / "transcripts"


def _random(n, alphabet=string.ascii_letters + string.digits):
    return "".join(random.choice(alphabet) for _ in range(n))


def _pieces(secret: str, n: int = 12) -> list[str]:
    return [secret[i:i + n] for i in range(0, len(secret) - n + 1)]


def _remote(tmp_path, d):
    remote = tmp_path / "remote"
    remote.mkdir()
    run_cli("--dir", d, "remote", "add", "origin", f"file://{remote}", check=True)
    return remote


def test_a_preview_masks_the_whole_token_not_only_what_the_pattern_matched(tmp_path):
    """detect-secrets' JSON web token pattern ends lazily before the signature; Stripe's
    and OpenAI's take a fixed number of characters: the preview printed the rest of the
    secret beside the mask, and the scan cache kept it."""
    sig = _random(43, string.ascii_letters + string.digits + "_-")
    jwt = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ." + sig)
    stripe = "sk_live_" + _random(99)
    openai = "sk-proj-" + _random(74) + "T3BlbkFJ" + _random(74)
    d, cache = tmp_path / "t", tmp_path / "cache"
    with Tape.init(d) as t:
        s = t.session("chat")
        s.append("user", {"content": f"curl -H 'Authorization: Bearer {jwt}' https://api"})
        s.append("user", {"content": f"STRIPE_KEY={stripe}\nnext line"})
        s.append("user", {"content": f"OPENAI_API_KEY={openai}."})
    p = run_cli("--dir", d, "scan", env={"CTAPE_CACHE_DIR": str(cache)})
    out = p.stdout.decode()
    assert p.returncode == 1 and out.count("\n") >= 3, out
    for secret in (sig, stripe[8:], openai[-74:]):
        shown = [x for x in _pieces(secret) if x in out]
        assert not shown, (shown[:2], out)
        assert not any(holders(x.encode(), cache) for x in _pieces(secret)[::8]), "the scan cache keeps a piece of it"
    # what is around the token stays readable
    assert "STRIPE_KEY=[stripe-access-key: 107 chars]\\nnext line" in out and "OPENAI_API_KEY=[openai-token: 164 chars]." in out, out
    assert "Bearer [json-web-token: " in out and "' https://api" in out, out


def test_a_long_high_entropy_token_is_found_and_not_pushed(tmp_path):
    """An AWS session token (hundreds of characters) in an env file an agent read: the
    entropy rule took tokens of 24-100 characters only, so it was no finding, and push
    sent it. detect-secrets' entropy plugin flags it."""
    token = "IQoJb3JpZ2luX2Vj" + _random(340, string.ascii_letters + string.digits + "+/")
    d = tmp_path / "t"
    with Tape.init(d) as t:
        t.session("chat").append("tool_result", {"call_id": "c1", "output": f'AWS_SESSION_TOKEN="{token}"\nAWS_REGION=us-east-1\n'})
    p = run_cli("--dir", d, "scan", "--json")
    found = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert p.returncode == 1 and [f["kind"] for f in found] == ["high-entropy-string"], p.stdout
    assert not any(x in p.stdout.decode() for x in _pieces(token)), found
    remote = _remote(tmp_path, d)
    p = run_cli("--dir", d, "push")
    assert p.returncode == 1 and "not pushing" in p.stderr.decode(), p.stderr
    assert not _remote_holds(token[100:140].encode(), remote)
    # base64 data (an image in a data: URL) is still no finding
    with Tape.open(d) as t:
        t.session("img").append("user", {"content": f"![chart](data:image/png;base64,{_random(3000, string.ascii_letters + string.digits + '+/')}=)"})
    p = run_cli("--dir", d, "scan", "-s", "img")
    assert p.returncode == 0, p.stdout


def test_a_push_decodes_a_line_kept_verbatim_before_judging_it(tmp_path):
    """A transcript line kept verbatim (meta "ctape.raw": a line with NaN) that writes
    "/" as "\\/", as PHP's and Java's encoders do: scan read it decoded and found the
    password, but the push's byte check looked for "://" in the stored JSON, judged it
    clean without decoding, and sent it."""
    password = _random(10)
    src = tmp_path / "t.jsonl"
    src.write_bytes(next(iter(sorted((TRANSCRIPTS / "claude-code").glob("*.jsonl")))).read_bytes()
                    + ('{"type":"progress","n":NaN,"cmd":"psql https:\\/\\/admin:%s@db.example.com"}\n' % password).encode())
    d = tmp_path / "t"
    run_cli("init", d, check=True)
    run_cli("--dir", d, "import", src, "-s", "chat", check=True)
    remote = _remote(tmp_path, d)
    p = run_cli("--dir", d, "push")
    assert p.returncode == 1 and "basic-auth" in p.stderr.decode() and password not in p.stderr.decode(), p.stderr
    assert not _remote_holds(password.encode(), remote)
    run_cli("--dir", d, "redact", "--scan", check=True)
    run_cli("--dir", d, "compact", check=True)
    assert run_cli("--dir", d, "push").returncode == 0
    assert not _remote_holds(password.encode(), remote) and not holders(password.encode(), d)


def test_a_gemini_text_file_is_redacted_in_its_kept_record_too(tmp_path):
    """A text file attached as Gemini `inlineData` (camel-case `mimeType`): the copy in the
    payload (a data: URL) was found and redacted, the one in meta["gemini"] was not
    scanned as text, so show, export and push kept its base64."""
    key = "AKIA" + _random(16, string.ascii_uppercase + string.digits)
    b64 = base64.b64encode(f"AWS_ACCESS_KEY_ID={key}\n".encode()).decode()
    session = {"sessionId": "6f1c2a9e-1111-4222-8333-944455556666", "projectHash": "abc123", "startTime": "2026-11-01T10:00:00.000Z",
               "lastUpdated": "2026-11-01T10:01:00.000Z", "messages": [
                   {"id": "m1", "timestamp": "2026-11-01T10:00:00.000Z", "type": "user",
                    "content": [{"text": "check this env file"}, {"inlineData": {"mimeType": "text/plain", "data": b64}}]},
                   {"id": "m2", "timestamp": "2026-11-01T10:00:30.000Z", "type": "gemini", "content": "It holds a key; rotate it.", "model": "gemini-2.5-pro"}]}
    src = tmp_path / "session.json"
    src.write_text(json.dumps(session))
    d = tmp_path / "t"
    run_cli("init", d, check=True)
    run_cli("--dir", d, "import", src, "-s", "gem", check=True)
    p = run_cli("--dir", d, "scan", "--json")
    paths = sorted(json.loads(line)["path"] for line in p.stdout.decode().splitlines())
    assert p.returncode == 1 and any("inlineData" in x for x in paths) and len(paths) == 2, paths
    run_cli("--dir", d, "redact", "--scan", check=True)
    run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", check=True)
    for args in (("export", "gem", "--format", "gemini"), ("show", "HEAD~1", "-s", "gem")):
        p = run_cli("--dir", d, *args)
        assert p.returncode == 0 and b64.encode() not in p.stdout, args
    remote = _remote(tmp_path, d)
    assert run_cli("--dir", d, "push").returncode == 0
    assert not any(holders(x.encode(), d) or _remote_holds(x.encode(), remote) for x in (b64, key))


def test_a_redacted_text_in_a_damaged_dictionary_block_leaves_quarantine(tmp_path):
    """A writer that stays open compresses its blocks with a dictionary of the file (`Z`
    records); fsck --salvage moved a file whose such block had a bad record check to
    quarantine/, and compact's scrub, which decompressed frames without a dictionary,
    left the redacted key there for `zstd -d -D` to recover."""
    random.seed(7)
    key = "AKIA" + _random(16, string.ascii_uppercase + string.digits)
    words = ["build", "test", "run", "ok", "file", "src/main.py", "error"]
    d, cache = tmp_path / "tape", tmp_path / "cache"
    env = {"CTAPE_CACHE_DIR": str(cache)}
    t = Tape.init(d)
    s = t.session("chat")
    for i in range(90):
        s.append("user", {"content": f"step {i}: " + " ".join(random.choice(words) for _ in range(60))})
        if i in (59, 69):
            s.append("user", {"content": f"deploy with {key} please"})  # the second lands in a Z block
    t.close()
    (seg,) = (d / "sessions" / "chat").glob("*.seg")
    data = bytearray(seg.read_bytes())
    blocks = [r for r in framing.scan(bytes(data)) if isinstance(r, framing.Record) and r.type == framing.T_DICT_BLOCK]
    holding = [r for r in blocks if _holds(bytes(data), r, key)]
    assert holding, "no dictionary block holds the key: the setup no longer makes one"
    data[holding[-1].end - 1] ^= 0xFF  # its record check fails; its frame is whole
    seg.write_bytes(bytes(data))
    assert run_cli("--dir", d, "fsck", "--salvage", env=env).returncode in (0, 1)
    assert holders(key.encode(), d / "quarantine"), "the key is not in quarantine to begin with"
    run_cli("--dir", d, "redact", "--scan", env=env, check=True)
    p = run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", "--json", env=env)
    assert p.returncode == 0 and json.loads(p.stdout)["scrubbed_quarantine"]["files"] >= 1, p.stdout
    assert not holders(key.encode(), d, cache), holders(key.encode(), d, cache)


def _holds(data: bytes, r, key: str) -> bool:
    """Whether the record's frame, with the file's dictionaries, holds the key."""
    others = data[:r.offset] + data[r.end:]
    inside = {x for x in _unzstd(data)} - {x for x in _unzstd(others)}
    return any(key.encode() in x for x in inside)


def test_a_refusal_for_an_entry_on_no_branch_names_the_redaction_that_resolves_it(tmp_path):
    """`branch -f main main~1` took back an append that held a key: the push refused and
    offered only `compact --expire now --grace now` (which expires every ref log of the
    tape) or --allow-secrets; a redaction of that value keeps the ref log."""
    key = "AKIA" + _random(16, string.ascii_uppercase + string.digits)
    d = tmp_path / "t"
    with Tape.init(d) as t:
        s = t.session("chat")
        s.append("user", {"content": "hi"})
        s.append("user", {"content": f"my key is {key}"})
    run_cli("--dir", d, "branch", "-f", "main", "main~1", "-s", "chat", check=True)
    _remote(tmp_path, d)
    p = run_cli("--dir", d, "push")
    err = p.stderr.decode()
    assert p.returncode == 1 and "ctape redact " in err and key not in err, err
    cmd = err[err.index("`ctape redact ") + 1:]
    cmd = cmd[:cmd.index("`")]
    import shlex

    args = shlex.split(cmd)[1:]
    run_cli("--dir", d, *args, check=True)
    run_cli("--dir", d, "compact", check=True)
    assert run_cli("--dir", d, "push").returncode == 0
    p = run_cli("--dir", d, "reflog", "-s", "chat")
    assert p.returncode == 0 and len(p.stdout.decode().splitlines()) >= 3  # the ref log stays


def test_review_mends_of_the_scanner_and_the_scrub(tmp_path):
    """(Found in review of the fixes above.) Long tokens made Gemini's thoughtSignature and
    an SSH public key findings; a text part under a camel-case media type that is no base64
    of text was read as garbage (a key in it missed); the scrub zeroed nothing of a frame
    damaged at its end, whose blocks `zstd -d` still prints."""
    import zstandard

    from ctape.ops import redact
    from ctape.ops.detectors import Detectors

    d = Detectors()
    pub = "AAAAB3NzaC1yc2EAAAADAQABAAABAQ" + _random(340, string.ascii_letters + string.digits + "+/")
    assert d.spans(f"ssh-rsa {pub} me@host") == [] and d.spans(f"token {pub}")
    assert d.spans(_random(800, string.ascii_letters + string.digits + "+/"), key="thoughtSignature") == []
    key = "AKIA" + _random(16, string.ascii_uppercase + string.digits)
    t = tmp_path / "t"
    with Tape.init(t) as tape:
        tape.session("a").append("user", {"content": [{"mediaType": "text/plain", "data": key}]})
    p = run_cli("--dir", t, "scan")
    assert p.returncode == 1 and "aws-access-key" in p.stdout.decode(), p.stdout
    random.seed(3)
    words = [b"build", b"test", b"run", b"ok", b"file", b"src/main.py", b"error", b"deploy"]
    big = b"deploy with " + key.encode() + b" please " + b" ".join(random.choice(words) for _ in range(120_000))
    frame = bytearray(zstandard.ZstdCompressor(level=3, write_checksum=True).compress(big))
    frame[-2] ^= 0xFF  # its checksum: every block reads, the frame fails
    data = b"\0" * 32 + bytes(frame)
    assert redact._frames_holding(data, {key.encode()}, zstandard) == [(32, len(data))]
