"""`export` and `session cp` read a REF as `show` does (SPEC 4, 5): HEAD, HEAD~N, a branch
or a tag name in the session chosen with -s ($CTAPE_SESSION, `session use`, else the
tape's only one). They used to refuse every ref that needs a session ("unknown ref
'HEAD': ... its only session is chat"), though the error named the one session it could
have used (audit, 2026-12-06)."""
import json

from conftest import run_cli, snapshot
from ctape import Tape


def _lines(p):
    assert p.returncode == 0, p.stderr
    return [json.loads(x) for x in p.stdout.decode().splitlines()]


def _path(p):
    return [x["hash"] for x in _lines(p) if "hash" in x]


def test_export_reads_head_branches_and_tags_in_the_session(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        a = [s.append("user", {"content": f"m{i}"}).hash for i in range(4)]
        s.tag("v1", a[1])
        s.branch("alt", a[2])
    cases = {"HEAD": a, "HEAD~1": a[:3], "main": a, "v1": a[:2], "alt": a[:3], "alt~2": a[:1]}
    for ref, want in cases.items():
        assert _path(run_cli("--dir", tape_dir, "export", ref)) == want, ref  # the only session
        assert _path(run_cli("--dir", tape_dir, "export", ref, "-s", "chat")) == want, ref
        assert _path(run_cli("--dir", tape_dir, "export", ref, env={"CTAPE_SESSION": "chat"})) == want, ref
    # what named itself reads as before: a session whole, SESSION~N, a hash prefix
    whole = _lines(run_cli("--dir", tape_dir, "export", "chat"))
    assert whole[0] == {"ctape": "export", "session": "chat", "version": 1}
    assert _path(run_cli("--dir", tape_dir, "export", "chat~2")) == a[:2]
    assert _path(run_cli("--dir", tape_dir, "export", a[2][:12])) == a[:3]
    # an export in another format takes them too
    assert run_cli("--dir", tape_dir, "export", "HEAD~1", "--format", "openai").returncode == 0


def test_export_and_session_cp_say_what_is_wrong_and_change_nothing(tape_dir):
    with Tape.open(tape_dir) as t:
        t.session("one").append("user", {"content": "a"})
        t.session("two").append("user", {"content": "b"})
    before = snapshot(tape_dir)
    for args, said in ((["export", "HEAD"], "'HEAD' needs a session"), (["export", "HEAD", "-s", "nosuch"], "no session 'nosuch'"),
                       (["export", "HEAD~5", "-s", "one"], "goes past the root"), (["session", "cp", "HEAD", "new"], "'HEAD' needs a session")):
        p = run_cli("--dir", tape_dir, *args)
        err = p.stderr.decode()
        assert p.returncode != 0 and p.stdout == b"" and err.count("\n") == 1 and said in err, (args, err)
    assert snapshot(tape_dir) == before


def test_session_cp_takes_a_ref_of_the_default_session(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        a = [s.append("user", {"content": f"m{i}"}).hash for i in range(3)]
    p = run_cli("--dir", tape_dir, "session", "cp", "HEAD~1", "early")
    assert p.returncode == 0 and "Created session early from HEAD~1" in p.stderr.decode(), p.stderr
    with Tape.open(tape_dir) as t:
        assert t.session("early").refs().branches == {"main": a[1]}
