"""`log` of several lines, one of which ends at an entry that cannot be read (a gap a
salvage left): the other lines are still shown, then the one warning line."""

import os

from conftest import run_cli


def test_log_all_shows_the_branches_beside_a_gap(tmp_path):
    """Found by an audit: after `fsck --salvage` kept the entries before a lost one on
    `salvaged-...`, `log --all` (and `log main salvaged-...`) stopped at main's gap and
    never showed that branch's entries; `log salvaged-...` alone did."""
    d = tmp_path / "t"
    run_cli("--dir", d, "init", check=True)
    for i in range(1, 7):
        run_cli("--dir", d, "append", "user", "--text", f"line {i} " + "x" * 300, "-s", "chat", check=True)
    (seg,) = [f for f in os.listdir(d / "sessions" / "chat") if f.endswith(".seg")]
    path = d / "sessions" / "chat" / seg
    with open(path, "r+b") as f:  # damage in the middle: one entry lost
        f.seek(os.path.getsize(path) // 2)
        f.write(b"XXXXXXXX")
    run_cli("--dir", d, "fsck", "--salvage", check=True)
    branches = run_cli("--dir", d, "branch", "-s", "chat", check=True).stdout.decode()
    (salvaged,) = [w for w in branches.split() if w.startswith("salvaged-")]
    alone = run_cli("--dir", d, "log", "--oneline", salvaged, "-s", "chat", check=True).stdout.decode()
    assert "line 1" in alone
    for args in (["--all"], ["main", salvaged], ["--all", "--graph"]):
        p = run_cli("--dir", d, "log", "--oneline", *args, "-s", "chat")
        out, err = p.stdout.decode(), p.stderr.decode()
        assert p.returncode == 0, err
        assert "line 6" in out and "line 1" in out, (args, out)
        assert "history stops here" in err, err
