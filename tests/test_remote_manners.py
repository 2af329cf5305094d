"""Small manners of the remote and privacy commands an audit found (2026-12-06): `scan`
checks every session whatever $CTAPE_SESSION says (push sends them all), `push -s` of an
unknown session says so as other commands do, a bucket "missing" behind an endpoint with a
path names the path, and a bad CTAPE_WRITER is refused by `init` and `clone` themselves."""
import os
import uuid

from conftest import run_cli, snapshot
from test_remote import s3env, seaweed  # noqa: F401 - fixtures

KEY = "AKIAZ7Q3VXN2LJ4PW6TR"


def _two_sessions(tmp_path):
    d = tmp_path / "t"
    run_cli("init", d, check=True)
    run_cli("--dir", d, "append", "user", "--text", "hello", "-s", "s1", check=True)
    run_cli("--dir", d, "append", "user", "--text", f"the key is {KEY}", "-s", "sec", check=True)
    return d


def test_scan_and_redact_check_every_session_whatever_ctape_session_says(tmp_path):
    d = _two_sessions(tmp_path)
    p = run_cli("--dir", d, "scan", env={"CTAPE_SESSION": "s1"})
    assert p.returncode == 1 and "aws-access-key" in p.stdout.decode() and " sec " in p.stdout.decode(), (p.stdout, p.stderr)
    p = run_cli("--dir", d, "scan", "-s", "s1")  # -s still narrows it
    assert p.returncode == 0 and "0 findings in 1 session" in p.stderr.decode(), p.stderr
    p = run_cli("--dir", d, "redact", "--scan", env={"CTAPE_SESSION": "s1"})
    assert p.returncode == 0 and "redacted sec" in p.stdout.decode(), (p.stdout, p.stderr)
    assert run_cli("--dir", d, "scan").returncode == 0


def test_push_of_an_unknown_session_says_the_closest_names(tmp_path):
    d = _two_sessions(tmp_path)
    (tmp_path / "remote").mkdir()
    run_cli("--dir", d, "remote", "add", "origin", f"file://{tmp_path / 'remote'}", check=True)
    before = snapshot(d)
    p = run_cli("--dir", d, "push", "-s", "s2", "--allow-secrets")
    err = p.stderr.decode()
    assert p.returncode == 1 and err.count("\n") == 1 and "no session 's2'" in err and "did you mean s1?" in err, err
    assert snapshot(d) == before and os.listdir(tmp_path / "remote") == []


def test_a_missing_bucket_behind_an_endpoint_with_a_path_names_the_path(tmp_path, s3env):
    d = _two_sessions(tmp_path)
    bucket = s3env.bucket("ct-" + uuid.uuid4().hex[:12])  # it exists: the path is what is wrong
    run_cli("--dir", d, "remote", "add", "p", f"s3://{bucket}/x", "--endpoint", s3env.endpoint + "/some/path", check=True)
    p = run_cli("--dir", d, "push", "p", "--allow-secrets")
    err = p.stderr.decode()
    assert p.returncode != 0 and err.count("\n") == 1 and "'/some/path'" in err and "leave the path out" in err, err
    run_cli("--dir", d, "remote", "add", "q", f"s3://{bucket}/x", "--endpoint", s3env.endpoint, check=True)
    assert run_cli("--dir", d, "push", "q", "--allow-secrets").returncode == 0


def test_a_bad_ctape_writer_is_refused_by_init_and_clone_before_anything_is_made(tmp_path):
    for bad in ("ci", "Laptop1", "x" * 33):
        p = run_cli("init", tmp_path / "new", env={"CTAPE_WRITER": bad})
        err = p.stderr.decode()
        assert p.returncode == 2 and err.count("\n") == 1 and "CTAPE_WRITER must be 4-32 characters" in err, err
        assert not (tmp_path / "new").exists()
    d = _two_sessions(tmp_path)
    (tmp_path / "remote").mkdir()
    run_cli("--dir", d, "remote", "add", "origin", f"file://{tmp_path / 'remote'}", check=True)
    run_cli("--dir", d, "push", "--allow-secrets", check=True)
    p = run_cli("clone", f"file://{tmp_path / 'remote'}", tmp_path / "c", env={"CTAPE_WRITER": "ci"})
    assert p.returncode == 2 and "CTAPE_WRITER must be" in p.stderr.decode(), p.stderr
    assert not (tmp_path / "c").exists()


def test_a_pull_that_makes_a_conflict_branch_says_so(tmp_path):
    """Both copies appended to `main` offline; the pull that brings the other side makes a
    conflict branch, and HEAD may now be on the other copy's work. It said only "pulled 1
    file"; a note now names the branch (stderr; `--json` has `conflicts`). A pull with
    nothing new, or a new session, says nothing of conflicts."""
    remote = tmp_path / "remote"
    remote.mkdir()
    a, b = tmp_path / "a", tmp_path / "b"
    run_cli("init", a, env={"CTAPE_WRITER": "laptop"}, check=True)
    run_cli("--dir", a, "append", "user", "--text", "start", "-s", "s1", env={"CTAPE_WRITER": "laptop"}, check=True)
    run_cli("--dir", a, "remote", "add", "origin", f"file://{remote}", check=True)
    run_cli("--dir", a, "push", env={"CTAPE_WRITER": "laptop"}, check=True)
    run_cli("clone", f"file://{remote}", b, env={"CTAPE_WRITER": "cibox"}, check=True)
    run_cli("--dir", a, "append", "user", "--text", "from A", "-s", "s1", env={"CTAPE_WRITER": "laptop"}, check=True)
    run_cli("--dir", b, "append", "user", "--text", "from B", "-s", "s1", env={"CTAPE_WRITER": "cibox"}, check=True)
    run_cli("--dir", b, "append", "user", "--text", "new session", "-s", "s2", env={"CTAPE_WRITER": "cibox"}, check=True)
    run_cli("--dir", b, "push", env={"CTAPE_WRITER": "cibox"}, check=True)
    p = run_cli("--dir", a, "pull", env={"CTAPE_WRITER": "laptop"}, check=True)
    err = p.stderr.decode()
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "note: session s1: main moved on two copies at once (as origin brought it)" in notes[0], err
    branch = notes[0].split("is kept as ")[1].split(" ")[0]
    assert branch.startswith("main.conflict-")
    listed = run_cli("--dir", a, "branch", "-s", "s1", check=True).stdout.decode()
    assert branch in listed, listed
    p = run_cli("--dir", a, "pull", "--json", env={"CTAPE_WRITER": "laptop"}, check=True)
    assert '"conflicts": {}' in p.stdout.decode() and "note:" not in p.stderr.decode()


def test_a_remote_compaction_that_held_sessions_back_exits_1(tmp_path):
    """`push` exits 1 when it holds a session back (a likely secret); `compact --remote`, which
    pushes first, exited 0, so a script that runs it to take a redacted secret off the
    remote took it for done. It exits 1 now, naming the session, and the others' work is
    done as before."""
    d = _two_sessions(tmp_path)
    (tmp_path / "remote").mkdir()
    run_cli("--dir", d, "remote", "add", "origin", f"file://{tmp_path / 'remote'}", check=True)
    p = run_cli("--dir", d, "compact", "--remote", "origin", "--grace", "now")
    err = p.stderr.decode()
    assert p.returncode == 1 and ("ctape: error: the push held back sec (see" in err or "held back every session it had to send" in err), err
    assert err.count("ctape: error") == 1 and "Traceback" not in err
    for args in ([], ["--json"]):  # one held back, the other sent
        run_cli("--dir", d, "append", "user", "--text", "more", "-s", "s1", check=True)
        p = run_cli("--dir", d, "compact", "--remote", "origin", "--grace", "now", *args)
        err = p.stderr.decode()
        assert p.returncode == 1 and "ctape: error: the push held back sec (see" in err, err
        assert err.count("ctape: error") == 1 and "Traceback" not in err
    run_cli("--dir", d, "redact", "--scan", check=True)
    p = run_cli("--dir", d, "compact", "--remote", "origin", "--grace", "now")
    assert p.returncode == 0, p.stderr


def test_a_folder_url_kept_by_an_older_version_that_names_another_folder_now_says_so(tmp_path):
    """Found by an audit of mixed versions: `file:///srv/my%20tapes`, added and pushed to by a
    ctape before 2026-12-06 (which took `%20` as it is), names `my tapes` now. The push said
    the folder did not exist and to create it; done, each copy pushed to its own folder and
    pulled "up to date" for ever. It now says which folder the URL named, and how to keep it."""
    old = tmp_path / "my%20tapes"
    old.mkdir()
    url = f"file://{old}"
    d = tmp_path / "t"
    run_cli("--dir", d, "init", check=True)
    run_cli("--dir", d, "remote", "add", "origin", url, check=True)
    run_cli("--dir", d, "append", "user", "--text", "hi", "-s", "chat", check=True)
    p = run_cli("--dir", d, "push")
    said = p.stderr.decode()
    assert p.returncode != 0 and f"and {old} does" in said and "ctape remote rm origin && ctape remote add origin file://" in said, said
    assert "mkdir" not in said and not (tmp_path / "my tapes").exists()
    fixed = said.rsplit("ctape remote add origin ", 1)[1].split()[0]
    run_cli("--dir", d, "remote", "rm", "origin", check=True)
    run_cli("--dir", d, "remote", "add", "origin", fixed, check=True)
    run_cli("--dir", d, "push", check=True)
    assert os.listdir(old)  # the folder it pushed to before
