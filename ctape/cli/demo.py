"""`ctape demo`: a realistic agent session, a crash, and the recovery, on a fresh tape."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import click

from .base import main

SYSTEM = "You are a careful coding agent. Use tools to read files and run tests before you answer."
FILE = "def add(a, b):\n    return a - b\n" + "\n".join(f"# line {i}: helper notes for the reader" for i in range(60))


def run_demo(path: str, crash: bool, echo) -> None:
    from ..store.store import Store
    from ..tape import Tape

    Store.init(path)
    tape = Tape.open(path)
    name = "demo"
    n = 1
    while tape._session_exists(name):
        n += 1
        name = f"demo-{n}"
    s = tape.session(name)
    echo(f"# recording session {name!r} into {tape.path}", err=True)
    s.append("system", {"content": SYSTEM})
    s.append("user", {"content": "The tests fail. Fix add() in calc.py."}, delta={"cwd": "/repo", "turn": 1})
    s.append("tool_call", {"call_id": "call_1", "name": "read_file", "arguments": {"path": "calc.py"}})
    s.append("tool_result", {"call_id": "call_1", "output": FILE})
    s.append("tool_call", {"call_id": "call_2", "name": "bash", "arguments": {"cmd": "pytest -q"}})
    s.append("error", {"message": "pytest: command timed out after 120 s", "call_id": "call_2"})
    anchor = s.append("anchor", {"name": "before-fix", "summary": "add() subtracts; tests time out"})
    s.append("tool_call", {"call_id": "call_3", "name": "read_file", "arguments": {"path": "calc.py"}})
    s.append("tool_result", {"call_id": "call_3", "output": FILE})  # same content: stored once
    s.append("assistant", {"content": "add() returns a - b; it should return a + b."}, delta={"diagnosis": "sign"})
    if crash:
        echo("# streaming the next answer, then killing the writer with SIGKILL", err=True)
        _crash_a_stream(tape.path, name)
        st = s.status()
        echo(f"# after the crash: interrupted stream holds {len(st['interrupted_stream']['content'])} chars", err=True)
        rec = s.recover()
        echo(f"# recovered as streaming entry {rec[0].hash[:12]}" if rec else "# nothing to recover", err=True)
    s.append("tool_call", {"call_id": "call_4", "name": "apply_patch", "arguments": {"path": "calc.py", "patch": "- a - b\n+ a + b"}})
    s.checkout(anchor.hash, new_branch="retry")
    s.append("user", {"content": "Try again, but run the tests with a timeout of 30 s."})
    s.checkout("main")
    tape.close()
    env = dict(os.environ, CTAPE_DIR=tape.path, CTAPE_SESSION=name)
    for args in (["log", "--graph", "--no-pager"], ["status"], ["branch"], ["stats"]):
        echo(f"\n$ ctape {' '.join(args)}", err=True)
        subprocess.run([sys.executable, "-m", "ctape", *args], env=env, check=False)


def _crash_a_stream(path: str, session: str) -> None:
    code = (
        "import sys, time, ctape\n"
        f"s = ctape.Tape.open({path!r}).session({session!r})\n"
        "with s.stream(flush_interval=0.1) as w:\n"
        "    for word in 'The fix is to change the minus sign to a plus sign and'.split():\n"
        "        w.write(word + ' '); time.sleep(0.05)\n"
        "    print('ready', flush=True); time.sleep(60)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    time.sleep(0.3)
    p.kill()
    p.wait()


@main.command()
@click.option("--crash/--no-crash", default=True, help="Include a killed stream and its recovery.")
@click.pass_context
def demo(ctx, crash):
    """Record a realistic agent session into a fresh tape, crash it, recover it.

    Uses --dir, $CTAPE_DIR or ./.ctape (created if needed), session `demo`.

    \b
    Examples:
      ctape --dir /tmp/demo-tape demo
    """
    target = ctx.find_root().obj.get("dir") or os.environ.get("CTAPE_DIR") or ".ctape"
    run_demo(target, crash=crash, echo=click.echo)
