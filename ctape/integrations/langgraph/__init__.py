"""LangGraph integration: ``TapeSaver``, a LangGraph checkpointer that keeps a graph's
checkpoints, pending writes and interrupts on a tape (``pip install 'ctape[langgraph]'``;
importing this package imports LangGraph, and nothing else in ctape imports it). How a thread
lives on the tape is told in ``saver.py``, where the saver is put together from its parts,
one job each: ``index`` (the per-thread index and its rows in the index cache), ``values``
(a channel's value at a checkpoint), ``reading`` (``get_tuple``, ``list``), ``writing``
(``put``, ``put_writes``) and ``interrupts``, over ``codec`` (values <-> JSON) and
``gcpause`` (the garbage collector paused while a thread's index is built). The names
imported below are the ones read from ``ctape.integrations.langgraph``.
"""

from .codec import _LONG_INT, _Codec, _loads  # noqa: F401 - tests read them from here
from .gcpause import _PROMOTE_BUDGET, _promoted  # noqa: F401 - tests read them from here
from .index import CHUNK, CHUNKS, KEY, OLD_CHUNKS, TOMBSTONES, VIEW  # noqa: F401 - names of the module before the split
from .interrupts import WAITING
from .saver import TapeSaver

__all__ = ["TapeSaver", "WAITING"]
