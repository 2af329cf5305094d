"""A write past the process's file size limit (`ulimit -f`, RLIMIT_FSIZE; also a FAT32
disk's 4 GiB) fails with EFBIG: one line that names the limit and what to do, the tape as
it was, whether the tape's own file or the command's output hit it (it said only "File
too large" before: found by an audit). Real processes under a real limit."""

import os
import resource
import subprocess
import sys

from ctape import Tape

LIMIT = 1 << 20


def _limited():
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def _ctape(d, *args, stdin=None):
    return subprocess.run([sys.executable, "-m", "ctape", "--dir", str(d), *args], input=stdin, capture_output=True,
                          preexec_fn=_limited, timeout=120)


def test_an_append_past_the_file_size_limit_says_so_and_changes_nothing(tmp_path):
    d = tmp_path / "t"
    t = Tape.init(d)
    first = t.session("s").append("user", {"content": "before"}).hash
    t.close()
    big = os.urandom(LIMIT).hex().encode()  # 2 MiB of hex: 1 MiB and more after compression
    p = _ctape(d, "append", "--text", "user", "-s", "s", stdin=big)
    err = p.stderr.decode()
    assert p.returncode == 1 and err.count("\n") == 1, err
    assert "file size limit" in err and "ulimit -f" in err and "nothing acknowledged was lost" in err, err
    assert "Traceback" not in err
    again = Tape.open(d)
    assert [e.hash for e in again.session("s").log()] == [first]
    assert again.fsck()["ok"]
    assert again.session("s").append("user", {"content": "after"})  # the session goes on


def test_output_past_the_file_size_limit_says_so(tmp_path):
    d = tmp_path / "t"
    t = Tape.init(d)
    t.session("s").extend([("user", {"content": os.urandom(2000).hex()}) for _ in range(400)])  # 1.6 MB as JSON Lines
    t.close()
    with open(tmp_path / "out.jsonl", "wb") as out:
        p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(d), "export", "s"], stdout=out, stderr=subprocess.PIPE,
                           preexec_fn=_limited, timeout=120)
    err = p.stderr.decode()
    assert p.returncode == 1 and err.count("\n") == 1, err
    assert "file size limit" in err and "ulimit -f" in err and "nothing in the tape changed" in err, err
