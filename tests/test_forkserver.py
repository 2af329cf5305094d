"""The tests' fork server (tests/forkserver.py) gives what a new `python -m ctape` gives:
the same exit status, output and errors, with the caller's input, folder and environment;
a new interpreter where the environment changes how Python starts; a new server
(a new hash seed) after ROUNDS commands."""

import os
import signal
import subprocess
import sys
import threading

import forkserver
from conftest import _RUN_CACHE


def real(args, input=None, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "ctape", *args], input=input, capture_output=True, env=env or dict(os.environ), cwd=cwd)


def forked(args, input=None, env=None, cwd=None):
    return forkserver.run(list(args), input, env or dict(os.environ), cwd, _RUN_CACHE)


def outcome(p):
    return p.returncode, p.stdout, p.stderr


def test_a_forked_command_gives_what_a_new_interpreter_gives(tape_dir):
    d = str(tape_dir)
    assert real(["--dir", d, "append", "user", "-", "-s", "chat"], input=b'{"content": "caf\xc3\xa9"}').returncode == 0
    for args in (
        ["--help"],
        ["--dir", d, "log", "-s", "chat"],
        ["--dir", d, "log", "-s", "chat", "--json"],
        ["--dir", d, "log", "-s", "nobody"],  # an error: one line, exit 1
        ["--dir", d, "lgo"],  # a usage error: exit 2
        ["--dir", d, "status", "--bogus"],
        [],
    ):
        assert outcome(forked(args)) == outcome(real(args)), args


def test_input_folder_and_environment_are_the_callers(tmp_path):
    env = dict(os.environ, CTAPE_DIR=str(tmp_path / "t"))
    assert forked(["init"], env=env).returncode == 0
    p = forked(["append", "user", "-", "-s", "chat"], input=b'{"content": "from stdin"}', env=env)
    assert p.returncode == 0, p.stderr
    assert b"from stdin" in forked(["log", "-s", "chat", "--json"], env=env).stdout
    # the folder: a tape found from the working folder, as git finds its repository
    (tmp_path / "w").mkdir()
    assert forked(["init"], cwd=tmp_path / "w").returncode == 0
    assert (tmp_path / "w" / ".ctape").is_dir()
    # (the umask goes too; ctape gives every file it makes its mode, so no command shows it)


def test_an_environment_python_starts_from_runs_in_a_new_interpreter(tape_dir):
    d = str(tape_dir)
    assert real(["--dir", d, "append", "user", "--text", "caf\u00e9 \u00fcber", "-s", "chat"]).returncode == 0
    env = dict(os.environ, PYTHONIOENCODING="latin-1")
    # stdout is UTF-8 whatever the locale (cli/base.utf8_output); stderr, for people, keeps
    # the encoding Python starts with: an error that quotes a name shows which one it was
    args = ["--dir", d, "log", "-s", "caf\u00e9"]
    want = real(args, env=env)
    assert "caf\u00e9".encode("latin-1") in want.stderr and "caf\u00e9".encode() not in want.stderr, want.stderr
    assert outcome(forked(args, env=env)) == outcome(want)


def test_commands_from_several_threads_each_get_their_own_output(tmp_path):
    dirs = [str(tmp_path / f"t{i}") for i in range(6)]
    results = {}

    def one(d):
        forked(["--dir", d, "init"])
        forked(["--dir", d, "append", "user", "--text", f"I am {d}", "-s", "chat"])
        results[d] = forked(["--dir", d, "log", "-s", "chat"])

    threads = [threading.Thread(target=one, args=(d,)) for d in dirs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for d in dirs:
        assert results[d].returncode == 0
        assert f"I am {d}".encode() in results[d].stdout
        assert sum(f"I am {e}".encode() in results[d].stdout for e in dirs) == 1


def test_a_new_server_after_its_rounds(tmp_path):
    forked(["--help"])
    client = forkserver._client
    first = client.proc.pid
    for _ in range(forkserver.ROUNDS):
        assert forked(["--help"]).returncode == 0
    assert client.proc.pid != first


def test_a_child_killed_by_a_signal_gives_its_negative_number(tape_dir, tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    forked(["--help"])  # the server is up
    out = {}
    t = threading.Thread(target=lambda: out.update(p=forked(["--dir", str(tape_dir), "watch", str(tmp_path / "empty.jsonl")])))
    t.start()
    children = ""
    for _ in range(500):  # the command running `watch` (it follows until stopped)
        server = forkserver._client.proc.pid  # (the one the command went to)
        children = open(f"/proc/{server}/task/{server}/children").read().split()
        if children:
            break
        threading.Event().wait(0.02)
    assert len(children) == 1
    os.kill(int(children[0]), signal.SIGKILL)
    t.join(timeout=60)
    assert out["p"].returncode == -signal.SIGKILL


def test_a_server_first_asked_for_another_startup_still_serves_the_ordinary_ones(tmp_path):
    """A worker's first command may set PYTHONIOENCODING: it runs in a new interpreter, and
    the server then started must still serve every ordinary command after it."""
    client = forkserver._Client(str(tmp_path))
    try:
        assert client.connect(dict(os.environ, PYTHONIOENCODING="latin-1")) is None
        conn = client.connect(dict(os.environ))
        assert conn is not None
        conn.close()
    finally:
        client.stop()
