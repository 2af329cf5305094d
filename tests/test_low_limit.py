"""A decompression limit set too low (`CTAPE_MAX_OBJECT=100`, meant as KiB) makes intact
records unreadable for that process: its reads warn and show what they can, and `fsck
--salvage` under it refuses, the tape unchanged. It said "damaged, run `ctape fsck
--salvage`", and that salvage moved the intact segment into quarantine/: back under the
default limit the session was gone and fsck said ok (found by an audit). Real processes."""

import os
import subprocess
import sys

from conftest import snapshot
from ctape import Tape


def _ctape(d, *args, limit=None):
    env = {**os.environ}
    env.pop("CTAPE_MAX_OBJECT", None)
    if limit is not None:
        env["CTAPE_MAX_OBJECT"] = str(limit)
    return subprocess.run([sys.executable, "-m", "ctape", "--dir", str(d), *args], capture_output=True, env=env, timeout=120)


def test_salvage_under_a_low_limit_refuses_and_moves_nothing(tmp_path):
    d = tmp_path / "t"
    t = Tape.init(d)
    hs = [t.session("s").append("user", {"content": f"message {i}: " + os.urandom(600).hex()}).hash for i in range(3)]
    big = t.session("s").append("tool_result", {"call_id": "c", "output": os.urandom(1 << 20).hex()}).hash  # 2 MiB
    hs.append(big)
    t.close()
    p = _ctape(d, "log", "-s", "s", "--oneline", limit=100)  # every block refused
    err = p.stderr.decode()
    assert "may be intact" in err and "CTAPE_MAX_OBJECT" in err and "fsck --salvage` to keep" not in err, err
    for limit in (100, 1 << 20):  # every block; only the large value (fsck calls it corrupt there)
        before = snapshot(d)
        p = _ctape(d, "fsck", "--salvage", limit=limit)
        err = p.stderr.decode()
        assert p.returncode == 2 and err.count("\n") == 1 and "cannot salvage under this limit" in err, err
        assert "nothing was changed" in err and "Traceback" not in err
        assert snapshot(d) == before
        assert not (d / "quarantine").exists() and not any(n.endswith(".pending") for n in os.listdir(d))
    p = _ctape(d, "fsck")
    assert p.returncode == 0, p.stderr.decode()
    with Tape.open(d) as t:
        assert [e.hash for e in t.session("s").log()] == hs[::-1]
