"""``_gc_paused``: no cyclic garbage collection while a thread's index or a conversation
is built, and what was built moved to the oldest generation at once (within a budget
between two full collections).
"""

from __future__ import annotations

import contextlib
import gc


_MANY_YOUNG = 10_000  # young objects at the end of _gc_paused from which they go to the oldest generation
_PROMOTE_BUDGET = 250_000  # ... and at most this many between two full collections (see _gc_paused)
_promoted = [0, -1]  # objects moved so since the full collection numbered [1]


@contextlib.contextmanager
def _gc_paused():
    """No cyclic garbage collection while a thread's index or a conversation is built: both
    make tens of thousands of objects that all stay, and the collector, started again and
    again by the allocations, walked them all each time (more than half of a new process's
    first get_state on a 1,000-step thread). Nothing they make is garbage; the collector's
    state is restored after, whatever it was, and when they are many they skip the young
    generations (below)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        young = gc.get_count()[0]
        if young >= _MANY_YOUNG and gc.get_freeze_count() == 0:
            # tens of thousands of new objects that stay (a thread's index, read once in a
            # process): move them to the oldest generation at once (freeze, then unfreeze:
            # two list splices) instead of leaving them for the next young-generation pass
            # to visit (30-40 ms of a new process's first get_state on a 1,000-step thread).
            # Only then: a step's few hundred objects take the usual way. Not when the
            # application froze objects itself (a server before fork): unfreeze would undo
            # that. Garbage cycles that were young then (a graph compiled per request, say)
            # wait for the next full collection, which CPython starts by its own count of
            # promoted objects, not ours: at most _PROMOTE_BUDGET objects go this way
            # between two full collections, so what waits stays bounded.
            full = gc.get_stats()[2]["collections"]
            if full != _promoted[1]:
                _promoted[0], _promoted[1] = 0, full
            if _promoted[0] + young <= _PROMOTE_BUDGET:
                _promoted[0] += young
                gc.freeze()
                gc.unfreeze()
        if was:
            gc.enable()
