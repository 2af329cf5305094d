"""compact and redactions (docs/format.md section 17): which objects go whole and which
entries stay only as their withheld form (`Redacted`), and the caches outside the tape
scrubbed of redacted text once the files that held it are gone.
"""

from __future__ import annotations

import os
import re
import sqlite3
from typing import Optional

from ..model.errors import CorruptObject
from ..model import redaction
from ..model.schema import decode_entry
from ..store.store import TYPE_WITHHELD, Store


class Redacted:
    """The tape's redactions as compaction needs them: blobs that go whole, and entries
    that are kept only as their withheld form (docs/format.md section 17)."""

    def __init__(self, places: dict[str, list[tuple[str, str]]]):
        self.places = places
        self.blobs = {bytes.fromhex(o) for o, ps in places.items() if any(p == "$" for p, _ in ps)}
        self.entries = {bytes.fromhex(o): [pk for pk in ps if pk[0] != "$"] for o, ps in places.items()
                        if any(p != "$" for p, _ in ps)}

    def withheld(self, store: Store, rec_body: bytes) -> Optional[bytes]:
        """The withheld form of a redacted entry's object record (None when it does not read)."""
        h = rec_body[:32].hex()
        try:
            _, body = store.decode_object(h, rec_body)
            raw = decode_entry(h, body)
        except CorruptObject:
            return None
        return redaction.withheld_body(raw, self.entries[rec_body[:32]])

    def changes(self, store: Store, rec_body: bytes) -> bool:
        """Whether a pack holding this object record must be written again."""
        key = rec_body[:32]
        if key in self.blobs:
            return True
        if key not in self.entries:
            return False
        if rec_body[32] != TYPE_WITHHELD:
            return True
        _, body = store.decode_object(key.hex(), rec_body)
        return self.withheld(store, rec_body) != body


def _scrub_caches(tape) -> None:
    """Caches outside the tape keep no redacted text: the index is vacuumed, the search
    cache rebuilt when it was built before the redactions."""
    from .search import SearchIndex

    tape.store.index.scrub()
    si = SearchIndex(tape)
    try:
        si.scrub()
    finally:
        si.close()
    from .scan import forget_redacted

    forget_redacted(tape)
    if tape.store.index.path != ":memory:":
        _forget_other_versions(os.path.dirname(tape.store.index.path))


def _forget_freed_in_search(tape) -> None:
    """The search cache keeps no entry the compaction freed (SearchIndex.forget_freed)."""
    from .search import SearchIndex

    try:
        si = SearchIndex(tape)
        try:
            si.forget_freed()
        finally:
            si.close()
    except sqlite3.Error:
        # a cache another process holds locked past its wait, or a full disk: the compaction
        # is done; the next compaction that frees entries empties it
        pass


_OTHER_VERSION = re.compile(r"(index|search)(-\d+)?\.sqlite(-wal|-shm|-journal)?")


def _forget_other_versions(folder: str) -> None:
    """The index and search caches another ctape version keeps in the same folder (one file
    per schema version) hold text this version's redactions never reached: removed (a
    cache: that version builds it again from the tape, and a process of it that has one
    open keeps reading its own copy until it closes)."""
    from ..store.index import index_file
    from .search import search_file

    ours = {index_file(), search_file()}
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = _OTHER_VERSION.fullmatch(name)
        if m is not None and name[: len(name) - len(m.group(3) or "")] not in ours:
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass
