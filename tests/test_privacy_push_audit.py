"""What a privacy audit (2026-12-07) found going up unchecked, each played as the user met
it, against a folder remote: a large value whose entry never landed, text a user typed into
ref records (a checkout's REF, `@BRANCH`, the session a copy came from), the sessions
`push -s A --allow-secrets` adds, and `scan --allow` given twice."""

from __future__ import annotations

import base64
import glob
import os
import struct

from conftest import run_cli

from ctape import Tape
from ctape.store import framing

KEY = "AKIAQWERTYUIOPASDFP1"
TOKEN = "ghp_Jb8Xw3Lp9Rt2Vb7Nm4Kc1Jh6Gf5Dd0Ss3Aa7"


def _tape(tmp_path):
    d = tmp_path / "tape"
    run_cli("--dir", d, "init", check=True)
    (tmp_path / "remote").mkdir()
    run_cli("--dir", d, "remote", "add", "origin", f"file://{tmp_path}/remote", check=True)
    return d


def _texts(d) -> bytes:
    """Every record of every data file of the tape at `d`, as read (blocks decompressed)."""
    t = Tape.open(d)
    out = bytearray()
    for s in t.store.sessions():
        for rel in t.store.list_files(s):
            for r in t.store.scan_file(rel):
                if isinstance(r, framing.Record):
                    body = r.body
                    if r.type == framing.T_OBJECT and len(body) > 33:
                        try:
                            body = t.store.decode_object(body[:32].hex(), body)[1]
                        except Exception:
                            pass
                    out += body + b"\n"
    t.close()
    return bytes(out)


def _clone(tmp_path, name="clone"):
    run_cli("clone", f"file://{tmp_path}/remote", tmp_path / name, check=True)
    return tmp_path / name


def test_a_large_value_whose_entry_never_landed_is_checked(tmp_path):
    """A value of 64 KiB or more is its own record, written before the block with its entry:
    a kill between the two (or a copy taken then) leaves a value no entry refers to, which
    `scan` cannot see and no redaction reaches. Push sent it unchecked."""
    d = _tape(tmp_path)
    t = Tape.open(d)
    s = t.session("c")
    s.append("user", {"content": "hi"})
    out = "\n".join(base64.b32encode(os.urandom(30)).decode() for _ in range(2000)) + f"\nAWS key {KEY}\n"
    s.append("tool_result", {"call_id": "c", "output": out})
    t.close()
    seg = glob.glob(str(d / "sessions" / "c" / "*.seg"))[0]
    data, i = open(seg, "rb").read(), 0
    while i + 10 <= len(data):  # cut the file right after the large value's record (kill -9 then)
        kind, n = chr(data[i + 1]), struct.unpack_from("<I", data, i + 2)[0]
        if kind == "O":
            open(seg, "wb").write(data[: i + 14 + n + 20])
            break
        i += 14 + n
    fresh = {"CTAPE_CACHE_DIR": str(tmp_path / "cache")}  # a fresh index, as on a copy that got the file so
    run_cli("--dir", d, "remote", "add", "origin", f"file://{tmp_path}/remote", env=fresh, check=True)  # (kept beside the index)
    p = run_cli("--dir", d, "push", env=fresh)
    err = p.stderr.decode()
    assert p.returncode == 1 and "in a large value no entry refers to" in err and "compact --grace now" in err, err
    assert KEY not in err
    assert not (tmp_path / "remote" / "f").exists() or not os.listdir(tmp_path / "remote" / "f")
    run_cli("--dir", d, "compact", "--grace", "now", env=fresh, check=True)  # the way out the line gives
    run_cli("--dir", d, "push", env=fresh, check=True)
    assert KEY.encode() not in _texts(_clone(tmp_path))


def test_a_refs_typed_text_is_masked_when_recorded_and_checked_when_pushed(tmp_path):
    """A token used as an anchor's name, then checked out: the checkout's ref record kept
    the REF as typed, where `redact --scan` (which takes the anchor's name out of the
    anchor entry) and `compact` do not reach, and push sent it. Now the text is masked in
    the record (and any such text a record already holds stops the push)."""
    d = _tape(tmp_path)
    run_cli("--dir", d, "append", "user", "--text", "hello", "-s", "chat", check=True)
    run_cli("--dir", d, "anchor", TOKEN, "-s", "chat", check=True)
    run_cli("--dir", d, "append", "user", "--text", "after", "-s", "chat", check=True)
    run_cli("--dir", d, "checkout", TOKEN, "-s", "chat", check=True)
    run_cli("--dir", d, "append", "user", "--text", "fork", "-s", "chat", check=True)
    run_cli("--dir", d, "redact", "--scan", check=True)
    run_cli("--dir", d, "compact", check=True)
    assert TOKEN.encode() not in _texts(d)
    run_cli("--dir", d, "push", check=True)
    assert TOKEN.encode() not in _texts(_clone(tmp_path))


def test_a_deleted_branchs_name_in_heads_record_stops_the_push(tmp_path):
    """HEAD's value names its branch (`@NAME`), in `set` and `old`; the check read only the
    keys of those, and a branch named like a token, deleted as the refusal said, went up in
    the record of the checkout away from it."""
    d = _tape(tmp_path)
    run_cli("--dir", d, "append", "user", "--text", "hello", "-s", "chat", check=True)
    run_cli("--dir", d, "checkout", "-b", TOKEN, "-s", "chat", check=True)
    run_cli("--dir", d, "append", "user", "--text", "on it", "-s", "chat", check=True)
    assert run_cli("--dir", d, "push").returncode == 1
    run_cli("--dir", d, "checkout", "main", "-s", "chat", check=True)
    run_cli("--dir", d, "branch", "-d", TOKEN, "-s", "chat", check=True)
    run_cli("--dir", d, "append", "user", "--text", "later", "-s", "chat", check=True)
    run_cli("--dir", d, "compact", "--expire", "now", "--grace", "now", check=True)
    p = run_cli("--dir", d, "push")
    err = p.stderr.decode()
    assert p.returncode == 1 and "the ref log of session chat holds text that looks like a secret" in err, err
    assert TOKEN not in err
    assert not (tmp_path / "remote" / "f").exists() or not os.listdir(tmp_path / "remote" / "f")


def test_a_copy_of_a_session_named_like_a_secret_does_not_record_that_name(tmp_path):
    """The refusal of a session named like a key says: copy it under another name, remove
    it. The copy's record kept the old name (`source`), and push sent it."""
    d = _tape(tmp_path)
    run_cli("--dir", d, "append", "user", "--text", "hello", "-s", KEY, check=True)
    run_cli("--dir", d, "session", "cp", KEY, "fixed", check=True)
    assert KEY.encode() not in b"".join(
        r.body for rel in Tape.open(d).store.list_files("fixed") for r in Tape.open(d).store.scan_file(rel)
        if isinstance(r, framing.Record) and r.type == framing.T_REF)


def test_push_s_allow_secrets_checks_the_sessions_it_adds(tmp_path):
    """`push -s shared --allow-secrets`, where `shared` refers to a large value stored in
    session `private`'s file: push added `private`'s files, unchecked, key and all."""
    d = _tape(tmp_path)
    t = Tape.open(d)
    readme = "README contents\n" * 100
    t.session("private").append("user", {"content": f"my aws key {KEY} keep it home"})
    t.session("private").append("tool_result", {"call_id": "c", "output": readme})
    t.session("shared").append("user", {"content": "build id Xk9fQ2mZ7pLr4TbW8vN3cY6hJ1sD5gKa"})
    t.session("shared").append("tool_result", {"call_id": "c", "output": readme})
    t.close()
    p = run_cli("--dir", d, "push", "-s", "shared", "--allow-secrets")
    err = p.stderr.decode()
    assert p.returncode == 1 and "session private stores what the chosen sessions refer to" in err, err
    assert not (tmp_path / "remote" / "f").exists() or not os.listdir(tmp_path / "remote" / "f")
    run_cli("--dir", d, "push", "-s", "shared", "-s", "private", "--allow-secrets", check=True)  # named: let through


def test_scan_allow_given_twice_allows_both(tmp_path):
    d = _tape(tmp_path)
    run_cli("--dir", d, "append", "user", "--text", f"one {KEY}", "-s", "a", check=True)
    run_cli("--dir", d, "append", "user", "--text", f"two {TOKEN}", "-s", "a", check=True)
    import json

    ids = [json.loads(x)["id"] for x in run_cli("--dir", d, "scan", "--json").stdout.decode().splitlines()]
    assert len(ids) == 2
    p = run_cli("--dir", d, "scan", "--allow", ids[0], "--allow", "zz")
    assert p.returncode != 0 and run_cli("--dir", d, "scan").returncode == 1  # a bad id allows none
    run_cli("--dir", d, "scan", "--allow", ids[0], "--allow", ids[1], check=True)
    assert run_cli("--dir", d, "scan").returncode == 0


def test_tokens_random_by_design_are_no_findings_and_secrets_still_are(tmp_path):
    """(audit, 2026-12-07) The shipped transcripts gave 53 findings, all false positives:
    ids and signatures in JSON text inside a tool's output (the key rule held for JSON
    values only), macOS temporary folders (a path is one token of base64's alphabet); and
    a lockfile gave one per package (SRI digests), go.sum its `h1:` digests, certificates
    and PGP signatures theirs. A push gate that refuses every transcript is one users turn
    off (--allow-secrets). The same shapes holding real secrets are still found."""
    import hashlib
    import json
    import shutil

    d = _tape(tmp_path)
    fixtures = os.path.join(os.path.dirname(__file__), "fixtures", "transcripts")
    for sub in ("claude-code", "codex-rollout"):
        for name in sorted(os.listdir(os.path.join(fixtures, sub))):
            if name.endswith(".jsonl"):
                run_cli("--dir", d, "import", os.path.join(fixtures, sub, name))
    sri = "sha512-" + base64.b64encode(hashlib.sha512(b"left-pad").digest()).decode()
    cert = "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ\n-----END CERTIFICATE-----"
    t = Tape.open(d)
    fp = t.session("fp")
    fp.append("tool_result", {"call_id": "1", "output": f'"node_modules/left-pad": {{"integrity": "{sri}"}}'})
    fp.append("tool_result", {"call_id": "2", "output": "tmp dir: /var/folders/4n/2f7pppjd2_n0fftzg8vrlg040000gn/T/tmpk_ntrtq3"})
    fp.append("tool_result", {"call_id": "3", "output": "github.com/pkg/errors v0.9.1 h1:FEBLx1zS214owpjy7qsBeixbURkuhQAwrK5UwLGTwt4="})
    fp.append("tool_result", {"call_id": "4", "output": cert})
    fp.append("tool_result", {"call_id": "5", "output": '{"type":"tool_use","id":"toolu_01AbCdEfGh2JkLmNoPqRsTuVwX3","name":"Read"}'})
    real = t.session("real")
    real.append("tool_result", {"call_id": "1", "output": '{"user":"me","password":"Xk9fQ2mZ7pLr4TbW8vN3cY6hJ1sD5gKa"}'})
    real.append("tool_result", {"call_id": "2", "output": "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCY8EXAMPLEKEY"})
    real.append("tool_result", {"call_id": "3", "output": "cat /home/me/keys/Zk9fQ2mZ7pLr4TbW8vN3cY6hJ1sD5gKb/creds"})
    t.close()
    found = [json.loads(x) for x in run_cli("--dir", d, "scan", "--json").stdout.decode().splitlines()]
    shown = [f["preview"] for f in found]
    for bad in ('"id":"[high', '"tool_use_id":"[high', '"signature":"[high', "project_path = '[high", "integrity", "h1:["):
        assert not [p for p in shown if bad in p], (bad, [p for p in shown if bad in p])
    assert not [f for f in found if f["session"] == "fp"], [f["preview"] for f in found if f["session"] == "fp"]
    assert len({f["hash"] for f in found if f["session"] == "real"}) == 3, [f["preview"] for f in found if f["session"] == "real"]
    left = [f for f in found if f["session"] not in ("fp", "real")]
    # (53 before; what is left is the strings of a binary a tool printed, runs of 163 and
    # 181 characters in one output, kept as the payload and as the rollout's raw record)
    assert len(left) <= 12 and all("[high-entropy-string: 1" in f["preview"] for f in left), [f["preview"] for f in left]


def test_the_exemptions_stop_where_their_shape_does():
    """(review, 2026-12-07) The exemptions above, held to their shapes: a cut certificate
    does not hide what follows it, a token after `h1:` of another length than the digest's
    is judged, and only a path under a folder every system has is judged a part at a time
    (a base64 secret may start with "/")."""
    from ctape.ops.detectors import Detectors

    d = Detectors([])
    for text in ("-----BEGIN CERTIFICATE-----\nMIID\n$ cat .env\nAPI_TOKEN=Xk9fQ2mZ7pLr4TbW8vN3cY6hJ1sD5gKa\n"
                 "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
                 "login h1:Xk9fQ2mZ7pLr4TbW8vN3cY6hJ1sD5gKa",
                 "aws_secret_access_key = /wJalrXUtnFEMI/K7MDENG/bPxRfiCY8EXAMPLEK",
                 "SIGNING_KEY=/Xk9fQ2mZ7p/Lr4TbW8vN3cY6/hJ1sD5gKa+Qe8Rt0Lm=",
                 "GET /api/v1/reset/Xk9fQ2mZ7pLr4TbW8vN3 HTTP/1.1"):
        assert d.spans(text), text
    pgp = "-----BEGIN PGP SIGNATURE-----\nVersion: GnuPG v2\n\niQEzBAABCAAdFiEEMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0B\n=Ab3d\n-----END PGP SIGNATURE-----"
    assert not d.spans(pgp)


def test_a_watched_folder_named_like_a_users_pattern_does_not_stop_the_push(tmp_path):
    """(review, 2026-12-07) Every string of a ref record was checked, the watch position's
    path too: a user pattern that matched the folder of a watched transcript refused every
    push of its session for good (no finding to allow, and a new record at every pass).
    Only the text a user types into a record is checked."""
    import shutil

    d = _tape(tmp_path)
    run_cli("--dir", d, "scan", "--add-pattern", "acmecorp-[a-z]+", "--kind", "internal-host", check=True)
    src = tmp_path / "src-acmecorp-billing"
    src.mkdir()
    fixture = os.path.join(os.path.dirname(__file__), "fixtures", "transcripts", "codex-rollout")
    name = sorted(f for f in os.listdir(fixture) if f.endswith(".jsonl"))[-1]
    shutil.copy(os.path.join(fixture, name), src / name)
    run_cli("--dir", d, "watch", "--once", src, check=True)
    p = run_cli("--dir", d, "push")
    assert p.returncode == 0, p.stderr


def test_a_short_name_a_users_pattern_finds_is_masked(tmp_path):
    """(review, 2026-12-07) Text under 12 characters was never masked, even when a pattern
    of the user's finds it: a session `corp-1234` showed in clear in push's lines, and the
    copy the refusal asks for recorded it as its source, so the copy was refused too."""
    import json

    d = _tape(tmp_path)
    run_cli("--dir", d, "scan", "--add-pattern", "corp-[0-9]{4}", "--kind", "corp-ticket", check=True)
    run_cli("--dir", d, "append", "user", "--text", "hi", "-s", "corp-1234", check=True)
    run_cli("--dir", d, "append", "user", "--text", "hi", "-s", "other", check=True)
    p = run_cli("--dir", d, "push", "--json")
    assert p.returncode == 1 and b"corp-1234" not in p.stdout + p.stderr, p.stdout + p.stderr
    assert "[corp-ticket: 9 chars]" in json.loads(p.stdout)["held_back"]
    run_cli("--dir", d, "session", "cp", "corp-1234", "fixed", check=True)
    refs = b"".join(r.body for rel in Tape.open(d).store.list_files("fixed") for r in Tape.open(d).store.scan_file(rel)
                    if isinstance(r, framing.Record) and r.type == framing.T_REF)
    assert b"corp-1234" not in refs
