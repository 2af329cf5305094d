"""What search's index holds of one very large value: at most MAX_TEXT characters, read
without taking many times the value's size in memory. A 100 MB tool output made the first
`search` peak at 1.28 GB (12.8 times), 300 MB at 3.7 GB: the whole value was decoded and
split into words before it was cut (found by an audit of scale). A real process's peak."""

import subprocess
import sys

from ctape import Tape

MB = 1 << 20


def test_the_first_search_past_a_very_large_value_stays_near_its_size(tmp_path):
    d = tmp_path / "t"
    size = 40 * MB
    with Tape.init(d) as t:
        t.session("s").append("tool_result", {"call_id": "c", "output": "word " * (size // 5)})
        t.session("s").append("user", {"content": "findme please"})
    code = ("import sys\nfrom ctape.__main__ import run\n"
            f"sys.argv = ['ctape', '--dir', {str(d)!r}, 'search', 'findme']\n"
            "try:\n    run()\nexcept SystemExit:\n    pass\n"
            # VmHWM: this process's own peak (ru_maxrss keeps the peak of the process it was
            # forked from across exec: a pytest worker's hundreds of MB)
            "print([int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmHWM:')][0], file=sys.stderr)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin", "CTAPE_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": ":".join(sys.path)})
    assert b"findme please" in p.stdout, p.stderr
    peak = int(p.stderr.decode().split()[-1])
    assert peak < 60 * MB + 3 * size, f"peak {peak / MB:.0f} MB for a {size // MB} MB value"  # (a process alone: ~35 MB; it was 645 MB)
