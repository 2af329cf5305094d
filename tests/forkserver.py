"""`python -m ctape` for the tests, without a new interpreter for each command.

The suite runs ~4,000 ctape commands; a new interpreter with ctape and click imported
costs ~0.1 s of CPU before the command does anything, about a third of the suite's CPU.
A server process (one per pytest worker) imports ctape once and forks a child for each
command. The child is a real process of its own: it gets the caller's argv, environment,
working folder, umask and standard streams (its pipes, passed over a Unix socket), runs
`ctape` as `python -m ctape` does (runpy, `__main__`), and ends as an interpreter ends
(threads joined, atexit handlers, streams flushed); its exit status (or the signal that
killed it) comes back as subprocess's returncode.

What a forked child shares with its server, and how that is kept from mattering:
- the interpreter's start-up: a command whose environment differs from the server's in
  what Python reads when it starts (PYTHON*, LANG, LC_*) runs in a new interpreter instead;
- the hash seed: each server serves ROUNDS commands and is then replaced by a new one
  (a new seed), so an output that depends on the order of a set cannot pass by luck for
  the whole suite;
- modules imported once: ctape keeps no state at import that depends on the process
  (its stores, opened later, see forks with os.register_at_fork).

`CTAPE_TEST_FORK=0` runs every command in a new interpreter (the way to check that a
failure is not the server's).

Run as a script, this file is the server: `python forkserver.py SOCKET`.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading

ROUNDS = 64  # commands a server forks before a new server (a new hash seed) takes over
STARTUP_VARS = ("PYTHON", "LANG", "LC_")  # read by the interpreter as it starts


# -- the server -----------------------------------------------------------------------------


def _serve(path: str):
    """Accept requests and fork a child for each; returns only in a child, with its request."""
    import ctape.cli  # noqa: F401 - what every command needs, imported once for every child
    import ctape.tape  # noqa: F401

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # the name appears listening: a client that sees it connects (CI saw one refused)
    parent = os.getppid()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the loop through wake_w
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    running: dict[int, socket.socket] = {}  # child pid -> the caller's connection
    served = 0
    while served < ROUNDS or running:
        if os.getppid() != parent:  # the pytest worker is gone
            os._exit(0)
        for key, _ in sel.select(timeout=1.0):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                while not msg.endswith(b"\n"):
                    more = conn.recv(1 << 20)
                    if not more:
                        break
                    msg += more
                if not msg.endswith(b"\n"):  # a caller gone before its request
                    for fd in fds:
                        os.close(fd)
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    listener.close()
                    for c in running.values():
                        c.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    return conn, json.loads(msg), fds
                for fd in fds:
                    os.close(fd)
                running[pid] = conn
                served += 1
                if served >= ROUNDS:  # the caller starts a new server for the next command
                    sel.unregister(listener)
                    listener.close()
                    os.unlink(path)
            else:
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = running.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(struct.pack("!i", os.waitstatus_to_exitcode(status)))
                except OSError:
                    pass
                conn.close()
    os._exit(0)


def _become(conn: socket.socket, req: dict, fds: list[int]) -> None:
    """In the forked child: take the caller's streams, folder, environment and argv."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    conn.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(req["cwd"])
    os.umask(req["umask"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.path[0] = os.getcwd()  # as `python -m` puts it
    sys.argv = ["-m", *req["args"]]


def _server_main(path: str) -> None:
    # ctape from where `python -m ctape` in the caller's folder finds it (a working tree
    # there comes before an installed copy), not from this file's folder
    sys.path[0] = os.getcwd()
    conn, req, fds = _serve(path)
    _become(conn, req, fds)
    import runpy

    runpy._run_module_as_main("ctape")  # what `python -m ctape` runs


# -- the client ------------------------------------------------------------------------------


class _Client:
    """This process's server: started at its first command, replaced after ROUNDS."""

    def __init__(self, folder: str):
        self.folder = folder
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.old: list[subprocess.Popen] = []  # servers replaced: they end with their last command
        self.path = ""
        self.sent = 0
        self.started = 0
        self.env: dict[str, str] = {}

    def connect(self, env: dict[str, str]) -> socket.socket | None:
        """A connection to a server whose interpreter started as `env` asks, or None."""
        with self.lock:
            if self.proc is None or self.sent >= ROUNDS or self.proc.poll() is not None:
                self._start()
            if _startup(env) != _startup(self.env):
                return None
            self.sent += 1
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.path)
            except OSError:
                s.close()
                self.proc = None
                return None
            return s

    def _start(self) -> None:
        """A server started as this process was (its children take each caller's environment;
        one started from a caller's PYTHONIOENCODING would send every other command to a new
        interpreter for good)."""
        if self.proc is not None:
            self.old = [p for p in self.old if p.poll() is None] + [self.proc]
        self.started += 1
        self.path = os.path.join(self.folder, f"fork-{os.getpid()}-{self.started}.sock")
        self.env = dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, __file__, self.path], env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=None, close_fds=True)
        self.sent = 0
        while not os.path.exists(self.path):  # bound once ctape is imported
            if self.proc.poll() is not None:
                raise RuntimeError(f"the ctape fork server did not start (exit {self.proc.returncode})")
            threading.Event().wait(0.005)

    def stop(self) -> None:
        for p in [*self.old, self.proc]:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def _startup(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_VARS)}


_client: _Client | None = None


def run(args: list[str], input: bytes | None, env: dict[str, str], cwd, folder: str) -> subprocess.CompletedProcess:
    """subprocess.run([python, -m, ctape, *args], input=input, capture_output=True, env=env, cwd=cwd)."""
    global _client
    argv = [sys.executable, "-m", "ctape", *args]
    if os.environ.get("CTAPE_TEST_FORK") == "0":
        return subprocess.run(argv, input=input, capture_output=True, env=env, cwd=cwd)
    if _client is None:
        _client = _Client(folder)
    conn = _client.connect(env)
    if conn is None:
        return subprocess.run(argv, input=input, capture_output=True, env=env, cwd=cwd)
    umask = os.umask(0o022)
    os.umask(umask)
    req = json.dumps({"args": list(args), "env": env, "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(), "umask": umask})
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe() if input is not None else (_stdin(), -1)
    try:
        socket.send_fds(conn, [req.encode() + b"\n"], [in_r, out_w, err_w])
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    with conn, open(out_r, "rb") as out_f, open(err_r, "rb") as err_f:
        feed = None
        if input is not None:
            def write_input():
                with open(in_w, "wb") as f:
                    try:
                        f.write(input)
                    except BrokenPipeError:
                        pass
            feed = threading.Thread(target=write_input, daemon=True)
            feed.start()
        err_chunks: list[bytes] = []
        drain = threading.Thread(target=lambda: err_chunks.append(err_f.read()), daemon=True)
        drain.start()
        stdout = out_f.read()
        drain.join()
        if feed is not None:
            feed.join()
        status = b""
        while len(status) < 4:
            more = conn.recv(4 - len(status))
            if not more:
                raise RuntimeError("the ctape fork server went away during a command")
            status += more
    (code,) = struct.unpack("!i", status)
    return subprocess.CompletedProcess(argv, code, stdout, err_chunks[0])


def _stdin() -> int:
    """What a child of this process would read: its standard input (or nothing)."""
    try:
        return os.dup(0)
    except OSError:
        return os.open(os.devnull, os.O_RDONLY)


def stop() -> None:
    if _client is not None:
        _client.stop()


if __name__ == "__main__":
    _server_main(sys.argv[1])
