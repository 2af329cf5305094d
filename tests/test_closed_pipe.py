"""A reader that stops early (`ctape log --json | head -1`) is no failure: every command
exits 0 whatever it was printing, as `git log | head -1` under `set -o pipefail` passes,
except a status the command decided before printing (scan's findings, fsck's damage).

Before, the output `click.echo` writes exited 0 (it swallows EPIPE) and the JSON, export
and search writers 1, once their output passed the pipe's buffer: the same pipeline passed
or failed by format and history length (found by an audit). Real processes and pipes.
"""

import subprocess
import sys

import pytest

from ctape import Tape


@pytest.fixture(scope="module")
def long_tape(tmp_path_factory):
    d = tmp_path_factory.mktemp("pipe") / "t"
    t = Tape.init(d)
    t.session("s").extend([("user", {"content": f"message {i} " + "x" * 200}) for i in range(3000)])
    t.close()
    return d


@pytest.mark.parametrize("args", [["log", "-s", "s", "--no-pager"], ["log", "-s", "s", "--json"], ["export", "s"],
                                  ["search", "message", "-n", "0"], ["context", "s"]])
def test_a_reader_that_stops_early_is_no_failure(long_tape, args):
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(long_tape), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline()
    p.stdout.close()  # as `head -1` does
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0, err.decode()
    assert b"Traceback" not in err and not err.strip(), err.decode()


def test_a_socket_whose_reader_left_is_no_failure_either(long_tape):
    """stdout a socket (a service's log pipe, `ssh host ctape ... | head`): its reader gone
    shows POLLHUP, not POLLERR as a Linux pipe does (found by a review; BSD pipes too)."""
    import socket

    for _ in range(3):  # (when the close lands is up to the scheduler: a few tries)
        mine, theirs = socket.socketpair()
        p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(long_tape), "log", "-s", "s", "--json"],
                             stdout=theirs, stderr=subprocess.PIPE)
        theirs.close()
        assert mine.recv(100)
        mine.setblocking(False)
        try:  # take what is there, so the close is a clean one (no reset: POLLHUP, not POLLERR)
            while mine.recv(1 << 20):
                pass
        except BlockingIOError:
            pass
        mine.close()
        err = p.stderr.read()
        assert p.wait(timeout=60) == 0, err.decode()
        assert not err.strip(), err.decode()


def test_a_status_decided_before_printing_is_kept_when_the_reader_leaves(tmp_path):
    """`set -o pipefail; ctape scan | head -1` must not read as "no secrets": scan knows
    its answer (exit 1, findings) before it prints them, and a reader that leaves early
    keeps it (it exited 0 before: found by an audit). A scan with nothing to find still
    exits 0."""
    d = tmp_path / "t"
    t = Tape.init(d)
    t.session("s").extend([("user", {"content": f"line {i} AKIA{i:016d} " + "x" * 100}) for i in range(3000)])
    t.session("clean").append("user", {"content": "nothing here"})
    t.close()
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(d), "scan"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert b"aws-access-key" in p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 1, err.decode()
    assert b"Traceback" not in err and not err.strip(), err.decode()
    clean = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(d), "scan", "-s", "clean"], capture_output=True)
    assert clean.returncode == 0, clean.stderr.decode()
