"""One Tape, several threads: its operations take turns.

A Tape keeps what one process knows of the tape in one place: decoded entries and refs,
blocks and dictionaries, read descriptors, zstd contexts and one SQLite connection to the
index, whose rebuild is one transaction on that connection (a read from another thread in
the middle of it finds the index empty). None of it is safe for two threads at once, so
every public method of Tape and Session (and of the classes that extend them) runs under
the store's lock, the re-entrant lock writes and batches already hold. An iterator a
method returns (`log`, `reflog`...) takes the lock again for each step: a consumer that
walks a history slowly holds no other thread up between entries.

A few methods called once an entry (`read_entry`, `append`, `session`) are marked
`takes_own_turn`: they take the lock themselves around what they touch, or touch nothing
shared, and skip the wrapper (a Python call that forwards arguments costs about as much
as a cached `read_entry`). Code already holding the lock calls `Tape._read_entry`.

Threads of one Tape therefore never see each other's work half done, and wait for each
other: a batch, a compaction or a first search indexing in one thread holds the others
until it ends. Work in parallel takes a Tape per thread (`serve` keeps a pool of them).
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Callable, Iterator


def take_turns(cls: type) -> type:
    """Make the public methods and properties `cls` defines run under `self.store._lock`."""
    for name, attr in list(vars(cls).items()):
        if name.startswith("_") or getattr(attr, "takes_own_turn", False):
            continue
        if isinstance(attr, property):
            setattr(cls, name, property(_in_turn(attr.fget), attr.fset and _in_turn(attr.fset), attr.fdel, attr.__doc__))
        elif inspect.isfunction(attr):
            setattr(cls, name, _in_turn(attr))
    return cls


def takes_own_turn(fn: Callable) -> Callable:
    """Leave `fn` as it is: it takes the store's lock itself, or needs none."""
    fn.takes_own_turn = True
    return fn


def _in_turn(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def method(self, *args, **kw):
        lock = self.store._lock
        with lock:
            out = fn(self, *args, **kw)
        if type(out) is types.GeneratorType:
            return _steps_in_turn(lock, out)
        return out

    return method


def _steps_in_turn(lock, gen: Iterator) -> Iterator:
    """`gen`, each step under `lock`, and its end (a consumer that stops early) too."""
    try:
        while True:
            with lock:
                try:
                    item = next(gen)
                except StopIteration:
                    return
            yield item
    finally:
        with lock:
            gen.close()
