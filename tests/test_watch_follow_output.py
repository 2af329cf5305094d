"""What `ctape watch` (follow mode) says (issue 24, item 9): one line at start naming what
it follows (it said nothing until something changed), and one line per change (it printed
the file's "+N records" line and a pass summary for each append). A real follower in a
subprocess, a real append."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ctape import Tape

LINE = {"timestamp": "2026-03-01T00:00:00.000Z", "type": "session_meta", "payload": {"id": "0197a0b0-0000-7000-8000-000000000001", "base_instructions": {"text": "be brief"}}}


def line(i: int) -> bytes:
    rec = {"timestamp": f"2026-03-01T00:00:{i:02d}.000Z", "type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"request {i}"}]}}
    return (json.dumps(rec) + "\n").encode()


def entries(tape_dir) -> int:
    with Tape.open(tape_dir) as t:
        s = t.session("0197a0b0-0000-7000-8000-000000000001")
        return len(list(s.log(hidden=True))) if s.exists() else 0


def test_follow_says_what_it_follows_and_one_line_per_change(tape_dir, tmp_path):
    path = tmp_path / "runs" / "rollout-2026-03-01T00-00-00-0197a0b0-0000-7000-8000-000000000001.jsonl"
    path.parent.mkdir()
    path.write_bytes((json.dumps(LINE) + "\n").encode() + line(1))
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "watch", "--poll", str(path.parent)], stderr=subprocess.PIPE)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(x.decode() for x in p.stderr), daemon=True)
    reader.start()
    try:
        for _ in range(300):
            if entries(tape_dir) == 2:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        first = list(err)
        assert first[0] == f"watch: following {path.parent}; Ctrl-C stops\n", first
        with open(path, "ab") as f:
            f.write(line(2))
        for _ in range(300):
            if entries(tape_dir) == 3:
                break
            time.sleep(0.1)
        time.sleep(1.5)  # a second poll: nothing more may be printed
    finally:
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 0
        reader.join(timeout=10)
    later = err[len(first):]
    assert later == [f"watch: +1 record from {path} into session 0197a0b0-0000-7000-8000-000000000001\n"], err


def test_a_history_folder_made_after_the_follower_started_is_watched_at_once(tape_dir, tmp_path):
    """A black-box audit: with ~/.codex/sessions not there yet when `watch` started (the
    service started before Codex was first run), the first rollout waited for the minute's
    rescan. The nearest folder that exists is watched for the next folder on the way, and
    the root once it is made: the rollout is imported within a pass (real inotify)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    for k in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "GEMINI_CLI_HOME"):
        env.pop(k, None)
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "watch"], stderr=subprocess.PIPE, env=env)
    try:
        time.sleep(3)  # started, its first pass found nothing
        day = home / ".codex" / "sessions" / "2026" / "03" / "01"
        day.mkdir(parents=True)
        path = day / "rollout-2026-03-01T00-00-00-0197a0b0-0000-7000-8000-000000000001.jsonl"
        path.write_bytes((json.dumps(LINE) + "\n").encode() + line(1) + line(2))
        started = time.monotonic()
        # well before the minute's rescan (60 s after the start), however loaded the machine
        while entries(tape_dir) < 3 and time.monotonic() - started < 40:
            time.sleep(0.2)
    finally:
        p.send_signal(signal.SIGINT)
        out = p.communicate(timeout=30)[1].decode()
    assert entries(tape_dir) == 3, f"not imported within 40 s of the folder's creation: {out}"


@pytest.mark.parametrize("how", ["moved aside", "removed", "a subfolder moved aside"])
def test_a_root_made_again_after_it_was_removed_or_moved_is_watched_at_once(tape_dir, tmp_path, how):
    """A black-box audit: a watched root removed (`rm -rf ~/.codex/sessions`) or moved aside
    and made again by the agent waited for the minute's rescan (58 s): the folder's watch
    was gone, or followed the folder to where it was moved. The same for a folder inside
    a root moved aside and made again. Now imported within a pass (real inotify)."""
    root = tmp_path / "root"
    (root / "p").mkdir(parents=True)
    name = "rollout-2026-03-01T00-00-00-0197a0b0-0000-7000-8000-000000000001.jsonl"
    p = subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "watch", str(root)], stderr=subprocess.PIPE)
    try:
        time.sleep(3)  # started, its first pass found nothing
        if how == "moved aside":
            root.rename(tmp_path / "root-old")
        elif how == "removed":
            subprocess.run(["rm", "-rf", str(root)], check=True)
        else:
            (root / "p").rename(tmp_path / "p-old")
        time.sleep(1)
        (root / "p").mkdir(parents=True)
        (root / "p" / name).write_bytes((json.dumps(LINE) + "\n").encode() + line(1) + line(2))
        started = time.monotonic()
        # well before the minute's rescan (60 s after the start), however loaded the machine
        while entries(tape_dir) < 3 and time.monotonic() - started < 40:
            time.sleep(0.2)
        assert entries(tape_dir) == 3, f"not imported within 40 s of the folder's making again ({how})"
        if how == "moved aside":  # the old folder's changes are not taken for the new one's
            (tmp_path / "root-old" / "p" / "stray.jsonl").write_bytes(b"")
        with open(root / "p" / name, "ab") as f:
            f.write(line(3))
        started = time.monotonic()
        while entries(tape_dir) < 4 and time.monotonic() - started < 40:
            time.sleep(0.2)
        assert entries(tape_dir) == 4, "an append to the folder made again was not followed"
    finally:
        p.send_signal(signal.SIGINT)
        out = p.communicate(timeout=30)[1].decode()
    assert "Traceback" not in out, out
