"""A data file's records, read and judged: whether a record or a file's header can be
used (record_problem, file_header_problem, segment_writer, pack_name_matches), what a
damaged record may have held (_damage_level, damaged_object_names), a record read at an
offset (_pread_record) or from the bytes a scan read (Source), and a read through the
index's rows done again while a compaction in another process removes the files they name
(StaleRow, retried).
"""

from __future__ import annotations

import json
import os
from typing import Callable, NamedTuple, Optional, TypeVar

from blake3 import blake3

from . import framing
from ..model.errors import CorruptObject, EntryNotFound
from ..model.schema import header_problem, read_partial_record, read_ref_record

TYPE_WITHHELD = ord("W")  # an entry kept without its redacted values (docs/format.md section 17)
REBUILD_TRIES = 4  # readings of every file while another process changes them (Store._rebuild)
T = TypeVar("T")


def retried(read: Callable[[], T], errors, before: Optional[Callable[[], object]] = None) -> T:
    """read(), again while it fails with `errors` (a compaction in another process removed
    a file meanwhile), at most REBUILD_TRIES times: the last try's error is raised.
    `before()` runs ahead of each try."""
    for n in range(REBUILD_TRIES):
        if before is not None:
            before()
        try:
            return read()
        except errors:
            if n == REBUILD_TRIES - 1:
                raise
    raise AssertionError("unreachable")


class StaleRow(EntryNotFound):
    """A row of the index names a file that is gone: another process removed it (compact)
    after the index was read. Not damage: rebuild the index and read again (Store.reread)."""


class Source(NamedTuple):
    """What a scan of a file read: the descriptor it read through, and the bytes it read
    from offset `base` on."""

    fd: Optional[int]
    data: bytes
    base: int

    def record_at(self, offset: int) -> Optional[tuple[int, bytes]]:
        """(type, body) of the record at `offset` if it lies in the bytes read (None if not);
        CorruptObject if those bytes are not a good record."""
        pos = offset - self.base
        if pos < 0 or pos >= len(self.data):
            return None
        item = next(framing.scan(self.data, pos), None)
        if not isinstance(item, framing.Record) or item.offset != pos:
            raise CorruptObject(f"damaged record at offset {offset}")
        return item.type, item.body


def damaged_object_names(root: str, rel: str) -> set[str]:
    """The names of the object records of a data file that fail their checksum: a body
    starts with its name, which most damage (a bit flipped inside a large value) leaves
    whole. Another session may refer to such a value (values are stored once per tape); a
    name the damage hit is a hash that nothing refers to."""
    try:
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
    except OSError:
        return set()
    names = set()
    for item in framing.scan(data):
        if isinstance(item, framing.Damage) and not item.torn:
            parsed = framing.parse_header(data[item.offset : item.offset + framing.HEADER_SIZE])
            if parsed and parsed[0] == framing.T_OBJECT and parsed[1] > 33:
                start = item.offset + framing.HEADER_SIZE
                names.add(data[start : start + 32].hex())
    return names


def pack_name_matches(rel: str, data: bytes) -> bool:
    """A pack's name is `pack-` + the first 32 hex digits of the blake3 of all its bytes."""
    name = os.path.basename(rel)
    return name == f"pack-{blake3(data).hexdigest()[:32]}.pack"


def record_problem(type_: int, body: bytes, session: Optional[str], writer: Optional[str] = None):
    """The decoded ref or stream record, or a short reason (str) why it cannot be used:
    not JSON, fields of the wrong type or range (ctape/model/schema.py), a session other
    than the folder's (`session`; None for packs/, which may hold any), or, in a
    segment, a ref record of another writer than the one the file belongs to (`writer`)."""
    rec, why = (read_ref_record if type_ == framing.T_REF else read_partial_record)(body, session)
    if not why and writer is not None and type_ == framing.T_REF and rec["w"] != writer:
        why = f"ref record of writer {rec['w']!r} in a segment of writer {writer!r}"
    return why if why else rec


def segment_writer(rel: str) -> Optional[str]:
    """The writer a segment belongs to, by its name (`<writer>-<time>.seg`); None for a pack."""
    name = os.path.basename(rel)
    return name.split("-", 1)[0] if name.endswith(".seg") else None


def cut_cause(rel: str, this_writer: str) -> Optional[str]:
    """The likely cause of a data file found shorter than this machine had read it, for the
    messages that report it, when there is one to name: another machine's segment was
    replaced by an older copy of it (a copy taken while its writer appended, which came
    here before that writer saw the copy's read: docs/sync.md, "Writers appending while
    rsync runs"), and a sync from the machine that writes it brings the rest."""
    writer = segment_writer(rel)
    if writer is None or writer == this_writer:
        return None
    return (f"an older copy of it came from another copy of the tape; a sync from the machine that writes it "
            f"(writer {writer}) brings the rest back")


def file_header_problem(rel: str, first) -> Optional[str]:
    """Why the first record of a data file (a framing.Record, or None when the file has
    none) is not the header its path calls for: the format its name says, the session
    of its folder, and for a segment the writer its name says. Such a file is damage,
    never data: it could otherwise move the refs of a session or a writer it does not
    belong to."""
    if first is None or not isinstance(first, framing.Record) or first.type != framing.T_HEADER:
        return "file does not start with a header record"
    try:
        head = json.loads(first.body)
    except ValueError:
        return "file header is not JSON"
    parts = rel.split("/")
    session = parts[1] if parts[0] == "sessions" and len(parts) == 3 else None
    fmt = "ctape-segment" if rel.endswith(".seg") else "ctape-pack"
    return header_problem(head, fmt, session, segment_writer(rel))


def _damage_level(data: bytes, d: framing.Damage) -> int:
    """1: a damaged object record (reading that object fails); 2: anything else, which may
    have been a ref record, so the refs read from this file cannot be trusted."""
    head = data[d.offset : d.offset + framing.HEADER_SIZE]
    parsed = framing.parse_header(head) if len(head) == framing.HEADER_SIZE else None
    return 1 if parsed is not None and parsed[0] == framing.T_OBJECT else 2


def _pread_record(fd: int, offset: int) -> Optional[tuple[int, int, bytes]]:
    """(type, body length, the bytes after the header: body and trailer, fewer if the file
    ends) of the record at `offset`; None when no record header is there."""
    head = os.pread(fd, framing.HEADER_SIZE, offset)
    parsed = framing.parse_header(head) if len(head) == framing.HEADER_SIZE else None
    if parsed is None:
        return None
    type_, length = parsed
    return type_, length, os.pread(fd, length + framing.TRAILER_SIZE, offset + framing.HEADER_SIZE)
