"""`ctape watch`: capture the transcripts Claude Code and Codex write, as they grow.

    from ctape import Tape
    from ctape.watch import watch_once, follow

    with Tape.open(".ctape") as tape:
        report = watch_once(tape)                    # the default history folders
        report = watch_once(tape, ["~/work/x.jsonl"])  # or given files / folders
        follow(tape)                                  # until SIGINT/SIGTERM

Modules: sources (finding and reading files), position (where each file is imported
up to, in the tape and in a cache), engine (one pass: the Watcher, its batches and what
to read of each source), with its parts state (what it keeps of each source), reading
(complete lines, and the checks of the bytes before a position), codex, claude and whole
(each format's import); parallel (a pass over processes), notify (waiting for changes).
docs/watch.md is the user's guide.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager
from typing import Callable, Optional

__all__ = ["watch_once", "follow", "Watcher", "PassReport"]

RESCAN_EVERY = 60.0  # seconds: follow mode looks at every file this often, events or not
SAVE_LAYOUTS_EVERY = 30.0  # seconds: follow mode saves Claude Code layouts for a restart this often
IDLE_LAYOUT = 600.0  # seconds: follow mode keeps the layout of a file this long after it last grew


def __getattr__(name: str):
    if name in ("Watcher", "PassReport"):  # imported on use: `ctape --help` stays fast
        from . import engine

        return getattr(engine, name)
    raise AttributeError(name)


@contextmanager
def stop_on_signals(w):
    """SIGINT, SIGTERM and SIGHUP (a closed terminal) set w.stop: the current batch is
    finished, then the pass ends, and the cache is written (SIGHUP killed the process at
    once, its split pass's workers left running: found by an audit)."""

    def stop(signum, frame):
        w.stop = True

    sigs = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())
    old = {sig: signal.signal(sig, stop) for sig in sigs}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def watch_once(tape, paths: Optional[list[str]] = None, *, echo: Callable[[str], None] = lambda s: None, progress: bool = False, roots=None, warn=None, signals: bool = False, jobs: int = 1):
    """One pass: import what is new in every source (`signals`: SIGINT/SIGTERM end it
    after the current batch instead of interrupting it)."""
    from . import parallel
    from .engine import Watcher
    from .sources import check_paths

    paths = [os.path.expanduser(p) for p in paths or []]
    check_paths(paths)
    w = Watcher(tape, paths, roots=roots, echo=echo, progress=progress, warn=warn, keep=False)
    w.split = parallel.run
    try:
        if not signals:
            return w.run_pass(jobs=jobs)
        with stop_on_signals(w):
            return w.run_pass(jobs=jobs)
    finally:
        w.save_cache()


def follow(tape, paths: Optional[list[str]] = None, *, echo: Callable[[str], None] = lambda s: None, progress: bool = False, poll: bool = False, roots=None, warn=None, on_pass: Optional[Callable] = None, jobs: int = 1) -> None:
    """Pass after pass until SIGINT or SIGTERM: each signal lets the current batch finish."""
    from . import parallel
    from .engine import Watcher
    from .notify import notifier
    from .sources import check_paths

    paths = [os.path.expanduser(p) for p in paths or []]
    check_paths(paths)
    w = Watcher(tape, paths, roots=roots, echo=echo, progress=progress, warn=warn)
    w.split = parallel.run
    n = notifier(poll)
    with stop_on_signals(w):
        _follow(w, n, paths, roots, echo, warn, on_pass, jobs)


def _follow(w, n, paths, roots, echo, warn, on_pass, jobs) -> None:
    from . import sources
    from .notify import Polling

    try:
        folders = [p if os.path.isdir(p) else os.path.dirname(os.path.abspath(p)) for p in paths]
        if not paths:
            folders = [root for root, _ in (roots or sources.default_roots())]
        for d in folders:
            try:
                # a root made later (the agent's first run), or made again after it was
                # removed or moved aside, is watched at once (notify.Inotify.expect)
                n.expect(d)
            except OSError as e:  # out of inotify watches: poll instead
                (warn or echo)(f"watch: {e}; polling instead")
                n.close()
                n = Polling()
        report = w.run_pass(jobs=jobs)  # the first pass may be large: split it
        if on_pass:
            on_pass(report)
        last_full = last_save = time.monotonic()
        while not w.stop:
            changed = n.wait(0.5)
            if w.stop:
                break
            if changed is None or time.monotonic() - last_full > RESCAN_EVERY:
                changed, last_full = None, time.monotonic()
                n.check_roots()  # a root under a folder renamed or removed: watched again
                for d in folders:  # folders that appeared since (a new project, a new day)
                    if os.path.isdir(d):
                        n.add_tree(d)
            elif not changed and not w.retry:  # (a batch that gave way to another is tried again at once)
                continue
            report = w.run_pass(changed)  # (None: every source; a retry joins the changed ones)
            if on_pass:
                on_pass(report)
            if time.monotonic() - last_save > SAVE_LAYOUTS_EVERY:
                w.save_layouts(idle=IDLE_LAYOUT)
                last_save = time.monotonic()
        w.save_layouts()
    finally:
        w.save_cache()
        n.close()
