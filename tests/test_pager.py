"""The pager behaves like git's (SPEC 13, issue 24 item 4), in a real terminal (tmux):
short output printed directly, long output through `less` with LESS=FRX (nothing lost
from the screen on exit), $CTAPE_PAGER then $PAGER, --no-pager."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from ctape import Tape

pytestmark = pytest.mark.skipif(not shutil.which("tmux") or not shutil.which("less"), reason="needs tmux and less")


class Terminal:
    """A tmux pane of 100x30 running bash, on a server of its own."""

    def __init__(self, env: dict):
        self.sock = f"ctape-pager-{uuid.uuid4().hex[:8]}"
        self.env = env
        self.tmux("new-session", "-d", "-x", "100", "-y", "30", "-s", "t", "bash --norc --noprofile")
        self.tmux("set-option", "-g", "status", "off")
        self.type("PS1='$ '; clear")
        time.sleep(0.3)

    def tmux(self, *args) -> str:
        return subprocess.run(["tmux", "-L", self.sock, *args], env=self.env, capture_output=True, check=True).stdout.decode()

    def type(self, text: str, enter: bool = True) -> None:
        self.tmux("send-keys", "-t", "t", "-l", text)
        if enter:
            self.tmux("send-keys", "-t", "t", "Enter")

    def key(self, k: str) -> None:
        self.tmux("send-keys", "-t", "t", k)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def wait_for(self, text: str, timeout: float = 15) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            s = self.screen()
            if text in s:
                return s
            time.sleep(0.1)
        raise AssertionError(f"{text!r} not on the screen:\n{self.screen()}")

    def close(self):
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], env=self.env, capture_output=True)


@pytest.fixture
def term(tape_dir):
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        for i in range(80):
            s.append("user", {"content": f"message number {i}"})
    env = {k: v for k, v in os.environ.items() if k not in ("PAGER", "CTAPE_PAGER", "LESS", "TMUX")}
    env["CTAPE_DIR"] = str(tape_dir)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    t = Terminal(env)
    yield t
    t.close()


CTAPE = f"{shlex.quote(sys.executable)} -m ctape"


def test_short_output_is_printed_directly(term):
    term.type(f"{CTAPE} log -n 3 --oneline; echo END-$((40+2))")
    s = term.wait_for("END-42")
    assert "message number 79" in s and "message number 77" in s and "(END)" not in s


def test_long_output_pages_and_stays_on_the_screen(term):
    term.type(f"{CTAPE} log --oneline; echo END-$((40+2))")
    s = term.wait_for("message number 79")
    time.sleep(0.5)
    assert "END-42" not in term.screen()  # less is waiting
    term.key("q")
    s = term.wait_for("END-42")
    # no alternate screen (LESS=FRX): what was shown is still there after q
    assert "message number 79" in s or "message number 5" in s, s


def test_no_pager_and_the_pager_settings(term, tape_dir):
    term.type(f"{CTAPE} log --oneline --no-pager | head -0; {CTAPE} log --oneline --no-pager > /dev/null; echo END-$((40+2))")
    term.wait_for("END-42")
    term.type("clear")
    term.type(f"CTAPE_PAGER='sed s/^/paged:/' PAGER=false {CTAPE} log --oneline; echo A-$((1+1))")
    s = term.wait_for("A-2")
    assert "paged:" in s
    term.type("clear")
    term.type(f"PAGER='sed s/^/viapager:/' {CTAPE} log --oneline; echo B-$((1+2))")
    s = term.wait_for("B-3")
    assert "viapager:" in s
    term.type("clear")
    term.type(f"""PAGER='sh -c "cat >/dev/null; echo less-is:\\$LESS"' {CTAPE} log --oneline; echo C-$((1+3))""")
    assert "less-is:FRX" in term.wait_for("C-4")
    term.type("clear")
    term.type(f"""LESS=-S PAGER='sh -c "cat >/dev/null; echo less-is:\\$LESS"' {CTAPE} log --oneline; echo D-$((1+4))""")
    assert "less-is:-S" in term.wait_for("D-5")
    term.type("clear")
    term.type(f"CTAPE_PAGER=cat PAGER=false {CTAPE} log --oneline; echo E-$((1+5))")
    assert "E-6" in term.wait_for("E-6")


def test_a_pager_that_is_not_there_prints_the_output_without_it(term, tmp_path):
    """As git does ("cannot run PAGER"): the output was lost, the shell said "not found",
    exit 0 (found by an audit)."""
    term.type(f"PAGER=nosuchpager-xyz {CTAPE} log --oneline | cat; {CTAPE} log --oneline >/dev/null; echo F-$((1+6))")
    term.wait_for("F-7")
    term.type("clear")
    err = tmp_path / "err"
    term.type(f"PAGER=nosuchpager-xyz {CTAPE} log --oneline 2>{err}; echo G-$((1+7))")
    s = term.wait_for("G-8")
    assert "message number 0" in s, s  # the whole log, printed (its last line is the oldest)
    said = err.read_text()
    assert "cannot run the pager 'nosuchpager-xyz' (not found)" in said and "sh: 1" not in said, said


def test_ctrl_c_while_the_pager_shows_a_long_output_waits_for_the_pager(tape_dir):
    """A log longer than a pipe holds (64 KiB): ctape's write waits while less shows the
    first page. A Ctrl-C there made ctape exit 130 with less still running in the
    foreground, sharing the terminal with the shell; it belongs to the pager, as in git."""
    with Tape.open(tape_dir) as t:
        s = t.session("chat")
        with t.batch():
            for i in range(3000):
                s.append("user", {"content": f"message number {i} " + "x" * 40})
    env = {k: v for k, v in os.environ.items() if k not in ("PAGER", "CTAPE_PAGER", "LESS", "TMUX")}
    env["CTAPE_DIR"] = str(tape_dir)
    term = Terminal(env)
    try:
        term.type(f"{CTAPE} log; echo AFTER-rc=$?; ps -C less -o stat= | wc -l | sed 's/^/LESS-/'")
        term.wait_for("message number 2999")
        time.sleep(0.5)
        term.key("C-c")
        time.sleep(1.0)
        assert "AFTER-rc" not in term.screen(), term.screen()  # still the pager's
        term.key("q")
        s = term.wait_for("LESS-")
        assert "AFTER-rc=0" in s and "LESS-0" in s, s
    finally:
        term.close()
