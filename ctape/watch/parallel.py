"""A large pass split over several processes (`ctape watch --jobs N`).

Each worker opens the tape itself and imports a share of the files (balanced by size),
in batches of its own; sessions are locked per session, so two workers never interleave
in one. Workers do not write the cache file: they send their positions back, and the
parent keeps them. SIGINT/SIGTERM in the parent ask every worker to stop after its
current batch.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Optional

from .engine import PassReport, Watcher
from .sources import Source

MIN_BYTES = 64 << 20  # below this, one process does the pass


def split(todo: list[Source], sizes: dict[str, int], jobs: int) -> list[list[Source]]:
    shares: list[list[Source]] = [[] for _ in range(jobs)]
    load = [0] * jobs
    for s in sorted(todo, key=lambda s: -sizes.get(s.path, 0)):
        i = load.index(min(load))
        shares[i].append(s)
        load[i] += sizes.get(s.path, 0)
    return [share for share in shares if share]


def _worker(tape_dir: str, share: list[tuple], stop, out) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # (a closed terminal: the parent stops them)
    from ..tape import Tape

    lines: list[str] = []
    with Tape.open(tape_dir) as tape:
        w = Watcher(tape, keep=False, echo=lines.append)
        w.save_cache = lambda: None  # the parent writes the cache file
        w.should_stop = stop.is_set
        mine = [Source(p, fmt, named) for p, fmt, named in share]  # (named: refused as the parent would refuse it)
        rep = w.run_pass(sources=mine)
        keys = {s.key for s in mine}
        positions = [vars(p) for p in w.cache.positions.values() if p.key in keys]
    out.put((rep, positions, lines))


def run(w: Watcher, todo: list[Source], jobs: int) -> Optional[PassReport]:
    """One pass over `todo` with `jobs` worker processes; the parent's watcher `w` gets the
    positions, its echo the messages. None for a pass of MIN_BYTES or less, which one
    process does faster (Watcher.split)."""
    from .position import Position

    if w._todo_bytes(todo) <= MIN_BYTES:
        return None
    sizes = {}
    for s in todo:
        try:
            sizes[s.path] = os.stat(s.path).st_size
        except OSError:
            pass
    ctx = multiprocessing.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(w.tape.path, [(s.path, s.fmt, s.named) for s in share], stop, out)) for share in split(todo, sizes, jobs)]
    for p in procs:
        p.start()
    total = PassReport()
    got = 0
    try:
        while got < len(procs):
            try:
                rep, positions, lines = out.get(timeout=0.2)
            except Exception:  # queue.Empty: look at the stop flag and the workers
                if w.stop:
                    stop.set()
                if not any(p.is_alive() for p in procs) and out.empty():
                    break
                continue
            got += 1
            for line in lines:
                w.echo(line)
            for d in positions:
                w.cache.put(Position(**d))
            total.files += rep.files
            total.transcripts += rep.transcripts
            total.changed += rep.changed
            total.records += rep.records
            total.bytes += rep.bytes
            total.errors += rep.errors
            total.stopped = total.stopped or rep.stopped
    finally:
        for p in procs:
            p.join()
        w.save_cache()
    if got < len(procs):
        total.errors.append("watch: a worker process ended without a report; run the pass again")
    total.stopped = total.stopped or w.stop
    return total
