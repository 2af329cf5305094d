"""`ctape demo`: a realistic agent session, a crash, and the recovery, on a fresh tape."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time

import click

from .base import main

SYSTEM = "You are a careful coding agent. Use tools to read files and run tests before you answer."
FILE = "def add(a, b):\n    return a - b\n" + "\n".join(f"# line {i}: helper notes for the reader" for i in range(60))


def run_demo(path: str, crash: bool, echo, prog: str = "ctape") -> int:
    """Record the demo session into the tape at `path` (created if needed), then show it
    with commands printed as `prog ...` that work as typed. Returns the exit status.

    All or nothing: a demo that cannot finish removes what it wrote (the tape directory
    when it made it, else the half-made session) and says why in one line."""
    from ..errors import CtapeError
    from ..store.files import uninterrupted
    from ..store.store import Store, refuse_inside_tape
    from ..tape import Tape

    path = os.path.abspath(path)
    refuse_inside_tape(path)  # before anything starts: nothing to take back
    writer = _StreamWriter() if crash else None  # started first: it fails before anything is written
    created = not os.path.exists(path)
    tape = name = None
    try:
        Store.init(path)
        tape = Tape.open(path)
        name = _free_name(tape)
        echo(f"# recording session {name!r} into {tape.path}", err=True)
        _record(tape, name, writer, echo)
    except BaseException as e:
        with uninterrupted():
            if writer is not None:
                writer.stop()
            undone = _undo(path, created, tape, name)
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        why = str(e).split(";")[0] if isinstance(e, CtapeError) else f"{type(e).__name__}: {e}"  # its hint is moot now
        raise CtapeError(f"the demo stopped before it finished ({why}); {undone}") from e
    finally:
        if tape is not None:
            tape.close()
    shell_path = shlex.quote(path)
    status = 0
    for args in (["log", "-s", name, "--graph", "--all", "--no-pager"], ["status", "-s", name], ["branch", "-s", name], ["stats"]):
        echo(f"\n$ {prog} --dir {shell_path} {' '.join(shlex.quote(a) for a in args)}", err=True)
        status = max(status, _run_cli(["--dir", path, *args]))
        sys.stdout.flush()  # each command's output before the next one's header, also in a pipe
    echo(f"\n# more to try: {prog} --dir {shell_path} context -s {shlex.quote(name)} --format anthropic", err=True)
    return status


def _free_name(tape) -> str:
    name, n = "demo", 1
    while tape._session_exists(name):
        n += 1
        name = f"demo-{n}"
    return name


def _record(tape, name: str, writer, echo) -> None:
    s = tape.session(name)
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
    if writer is not None:
        echo("# streaming the next answer, then killing the writer with SIGKILL", err=True)
        writer.crash(tape.path, name)
        st = s.status()
        if not st["interrupted_stream"]:
            raise RuntimeError("the killed writer left no partial stream behind")
        echo(f"# after the crash: interrupted stream holds {len(st['interrupted_stream']['content'])} chars", err=True)
        rec = s.recover()
        echo(f"# recovered as streaming entry {rec[0].hash[:12]}" if rec else "# nothing to recover", err=True)
    s.append("tool_call", {"call_id": "call_4", "name": "apply_patch", "arguments": {"path": "calc.py", "patch": "- a - b\n+ a + b"}})
    s.checkout(anchor.hash, new_branch="retry")
    s.append("user", {"content": "Try again, but run the tests with a timeout of 30 s."})
    s.checkout("main")


def _undo(path: str, created: bool, tape, name) -> str:
    """Take back what a demo that stopped wrote; say what was done."""
    import shutil

    if created and os.path.isdir(path):
        if tape is not None:
            tape.close()
        shutil.rmtree(path, ignore_errors=True)
        return f"removed {path}, which it had created"
    from ..errors import CtapeError

    try:
        if tape is None or name is None or not tape._session_exists(name):
            return "nothing was written"
        tape.remove_session(name)
    except CtapeError:
        return f"the half-made session {name} is left: remove it with `ctape --dir {shlex.quote(path)} session rm {name}`"
    return f"removed the half-made session {name}"


def _run_cli(args: list[str]) -> int:
    """Run one ctape command line in this process, as the shell would; its exit status."""
    try:
        main.main(args=args, prog_name="ctape")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    return 0


# the writer the demo kills: a second Python process running the same ctape as this one
# (its folder first on sys.path, and -P: a folder named ctape in the current directory,
# such as a clone of the repository, is never imported in its place)
# Ctrl-C reaches the whole process group: the writer ignores it (the demo stops it, and
# takes back what was written); it waits for the demo to kill it, or for its stdin to
# close (the demo itself killed), and then leaves as a crash would, writing nothing more
_WRITER = """\
import json, os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
sys.path.insert(0, {root!r})
import ctape
print("imported", flush=True)
path, session = json.loads(sys.stdin.readline() or "null") or os._exit(0)
s = ctape.Tape.open(path).session(session)
with s.stream(flush_interval=0.1) as w:
    for word in "The fix is to change the minus sign to a plus sign and".split():
        w.write(word + " "); time.sleep(0.05)
    print("ready", flush=True); sys.stdin.readline(); os._exit(0)
"""


class _StreamWriter:
    def __init__(self):
        import json

        from ..errors import CtapeError

        self._json = json
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.p = subprocess.Popen([sys.executable, "-P", "-c", _WRITER.format(root=root)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if self.p.stdout.readline() != "imported\n":
            err = self.stop()
            raise CtapeError(f"the demo could not start its second Python process ({err or 'no output'}); nothing was written")

    def crash(self, path: str, session: str) -> None:
        self.p.stdin.write(self._json.dumps([path, session]) + "\n")
        self.p.stdin.flush()
        if self.p.stdout.readline() != "ready\n":
            raise RuntimeError(f"the streaming writer process failed ({self.stop() or 'no output'})")
        time.sleep(0.3)  # past its last flush (every 0.1 s)
        self.stop()

    def stop(self) -> str:
        """Kill the writer (SIGKILL: no clean-up runs in it); the last line it wrote to stderr."""
        if self.p.stderr is None or self.p.stderr.closed:
            return ""  # stopped already
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        err = self.p.stderr.read().strip().splitlines() if self.p.stderr else []
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            try:
                f.close()
            except OSError:
                pass
        return err[-1] if err else ""


@main.command()
@click.option("--crash/--no-crash", default=True, help="Include a killed stream and its recovery.")
@click.pass_context
def demo(ctx, crash):
    """Record a demo session, crash it, recover it.

    Uses --dir, $CTAPE_DIR or ./.ctape (created if needed; never inside another
    tape), session `demo`
    (`demo-2` and so on when taken), then shows it with commands printed as you
    can type them. A demo that cannot finish takes back what it wrote.

    \b
    Examples:
      ctape --dir /tmp/demo-tape demo
    """
    target = ctx.find_root().obj.get("dir") or os.environ.get("CTAPE_DIR") or ".ctape"
    ctx.exit(run_demo(target, crash=crash, echo=click.echo, prog=_prog()))


def _prog() -> str:
    """How the user ran ctape, for the commands the demo prints: `ctape`, or
    `python -m ctape` (with the name of this Python on PATH, else its full path)."""
    if os.path.basename(sys.argv[0]) != "__main__.py":
        return "ctape"
    import shutil

    here = os.path.realpath(sys.executable)
    for name in ("python", "python3"):
        found = shutil.which(name)
        if found and os.path.realpath(found) == here:
            return f"{name} -m ctape"
    return f"{shlex.quote(sys.executable)} -m ctape"
