"""`ctape watch` of one large transcript stays in bounded memory (issue 25: a 1 GB Claude
Code transcript peaked at 4.4 GB, every line held with its parsed value).

Peak RSS of a real `ctape watch --once` process, against the same process on a tiny file:
not a timing, so the machine's load does not matter. A 40 MB transcript (200 MB with
CTAPE_SLOW=1) made of the real fixture's records with fresh uuids.
"""

import json
import os
import subprocess
import sys
import uuid

from conftest import run_cli
from test_watch import CLAUDE_FORKS

MB = 1_000_000

PEAK = r"""
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], capture_output=True)
sys.stderr.buffer.write(p.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)
"""


def transcript(path, size: int) -> None:
    """The fixture's records again and again, one conversation (fresh uuids, chained)."""
    recs = [json.loads(x) for x in CLAUDE_FORKS.read_bytes().splitlines() if x.strip()]
    sid = str(uuid.uuid4())
    written, last, n = 0, None, 0
    with open(path, "w") as f:
        while written < size:
            ids: dict = {}
            for r in recs:
                r = dict(r)
                for k in ("uuid", "parentUuid", "leafUuid", "logicalParentUuid"):
                    if isinstance(r.get(k), str):
                        r[k] = ids.setdefault(r[k], str(uuid.UUID(int=n)))
                        n += 1
                if "parentUuid" in r and r["parentUuid"] is None and last and r.get("type") in ("user", "assistant"):
                    r["parentUuid"] = last
                if "sessionId" in r:
                    r["sessionId"] = sid
                if isinstance(r.get("uuid"), str):
                    last = r["uuid"]
                line = json.dumps(r, ensure_ascii=False) + "\n"
                f.write(line)
                written += len(line.encode())


def peak_kb(tape_dir, path) -> int:
    p = subprocess.run([sys.executable, "-c", PEAK, sys.executable, "-m", "ctape", "--dir", str(tape_dir), "watch", "--once", "-q", str(path)],
                       capture_output=True, text=True, env=dict(os.environ))
    kb, code = p.stdout.split()
    assert code == "0" and "Traceback" not in p.stderr, p.stderr
    return int(kb) // (1024 if sys.platform == "darwin" else 1)  # macOS counts bytes


def growth_over_a_tiny_file(tmp_path, write, size: int) -> tuple[int, int, int]:
    """(growth in bytes, peak KB, base KB): the peak RSS of `watch --once` of a file that
    write(path, size) makes, over that of a file of its first 30 lines."""
    big, tiny = tmp_path / "big" / "s.jsonl", tmp_path / "tiny" / "s.jsonl"
    big.parent.mkdir()
    tiny.parent.mkdir()
    write(big, size)
    with big.open("rb") as f:
        tiny.write_bytes(b"".join(next(f) for _ in range(30)))
    for name in ("a", "b"):
        run_cli("--dir", tmp_path / name, "init", check=True)
    base = peak_kb(tmp_path / "a", tiny)
    peak = peak_kb(tmp_path / "b", big)
    return (peak - base) * 1024, peak, base


def test_peak_memory_of_watch_grows_less_than_the_transcript(tmp_path):
    size = (200 if os.environ.get("CTAPE_SLOW") == "1" else 40) * MB
    growth, peak, base = growth_over_a_tiny_file(tmp_path, transcript, size)
    # before: 5.2 x the transcript (every line and its parsed value held at once); now the
    # lines' structure, and one batch (64 MB of source) of writes waiting for its fsync
    assert growth < 3.5 * size, f"peak {peak / 1024:.0f} MB, {growth / size:.1f} x the transcript over a tiny file's {base / 1024:.0f} MB"


def rollout_with_an_open_run(path, size: int) -> None:
    """A Codex rollout whose user request is written only as an event, then `size` bytes of
    records that end no message run (reasoning), then the answer: the event's run stays open
    over all of them."""
    sid = str(uuid.uuid4())

    def line(rtype, payload):
        return json.dumps({"timestamp": "2026-08-20T10:00:00.000Z", "type": rtype, "payload": payload}) + "\n"

    with open(path, "w") as f:
        f.write(line("session_meta", {"id": sid, "timestamp": "2026-08-20T10:00:00.000Z", "cwd": "/w", "base_instructions": {"text": "You are Codex."}}))
        f.write(line("event_msg", {"type": "user_message", "message": "only as an event", "images": []}))
        written, n = 0, 0
        while written < size:
            text = line("response_item", {"type": "reasoning", "summary": [], "encrypted_content": uuid.uuid4().hex * 64 + str(n)})
            f.write(text)
            written += len(text)
            n += 1
        f.write(line("response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}))


def test_a_codex_run_that_stays_open_is_not_held_whole(tmp_path):
    """watch holds a Codex line while an event before it has an open run (whether the event
    is a message is known at the run's end); a run that does not end for QUEUE_MAX bytes is
    decided then, so the lines held stay bounded, not the size of the file."""
    size = 160 * MB  # past one batch (64 MB of source), or the batch's writes are the peak
    growth, peak, base = growth_over_a_tiny_file(tmp_path, rollout_with_an_open_run, size)
    # held whole, 2.8 x (456 MB); bounded, 1.2 x: one batch of writes and QUEUE_MAX of lines
    assert growth < 1.5 * size, f"peak {peak / 1024:.0f} MB, {growth / size:.1f} x the rollout over a tiny file's {base / 1024:.0f} MB"
