"""What a copy of a segment may lack, written again in a new segment: the part of
SegmentWriter (segment.py inherits this class) that repeats a write made while a copy read
its segment, keeps the descriptors of the segments it wrote to, and repeats what a shorter
file brought back under a segment's name, or a copy that read a segment, may lack
("copies that come back" below).
"""

from __future__ import annotations

import os
import stat
import time
from typing import Optional

from . import framing, packing
from ..model.errors import CorruptObject
from .files import UNREAD_ATIME_NS, dict_decompressor, pread_all, storage_error
from .index import IndexBatch

REPEAT_WINDOW_NS = 10 * 10**9  # at close: writes this long before a read are repeated (see "copies that come back")


def _files_row(file_id: int, indexed: int) -> IndexBatch:
    b = IndexBatch()
    b.files.append((file_id, indexed, 0, 0))
    return b


class Repeats:
    """A SegmentWriter's repeats of what copies may lack (a part of SegmentWriter)."""

    def _without_dictionaries(self, records: bytes, base: int, raw_blocks: dict[int, bytes]) -> bytes:
        """The records of a write (written at offset `base`), its `Z` blocks turned into plain
        `K` blocks of the same content (kept in `raw_blocks` by offset): a `Z` block points
        back at a dictionary that may not be part of the write."""
        out = bytearray()
        for item in framing.scan(records):
            if item.type == framing.T_DICT:
                continue
            if item.type == framing.T_DICT_BLOCK:
                out += framing.frame(framing.T_BLOCK, self._plain().compress(raw_blocks[base + item.offset]))
            else:
                out += framing.frame(item.type, item.body)
        return bytes(out)

    def _repeat_in_new_segment(self, records: bytes, durable: bool, start: int) -> None:
        """The segment was read while we wrote, so the reader's copy may lack this write.
        Write the same records again to a new segment (a record does not depend on where
        it sits; blocks that need a dictionary are written without one): the write then
        survives whatever later happens to the copied file. Index rows still point at the
        first copy, which this machine keeps. The new segment's header names the old one
        and `start` (`repeats`): when the shorter copy comes back by rsync, no copy that
        has the new segment takes it for lost data (store._note_lost)."""
        old = os.path.basename(self.rel)
        self.store.index.note_repeated(self.rel, start)
        self._close_segment()
        try:
            self._create_segment({"file": old, "from": start})
            self.buf += records
            self._write_buf(durable)
        except OSError as e:
            self._undo_write()
            raise storage_error(e, f"session {self.session}") from None
        self.offset = len(self.buf)
        self.buf = bytearray()
        self.created = False
        self.store.index.add(_files_row(self.file_id, self.offset))

    # -- copies that come back ---------------------------------------------------------------
    #
    # A copy's size is taken before its data is read: rsync's sender opens a file, takes
    # its size (fstat), and reads that many bytes, maybe much later (it may wait on the
    # pipe to its receiver). A write that lands in between passes the access-time check
    # after it (nothing was read yet), and the copy lacks it. When that copy comes back
    # (`rsync -a B/ A/` renames it over the longer file) the write is gone from A, unless
    # its records are somewhere else. So a writer keeps the descriptors of the segments it
    # wrote to (KEPT_MAX), which still reach the longer file after a rename over its name,
    # and looks at them whenever the session's folder changed (before it reloads its view)
    # and when it closes:
    # - a segment whose name now holds a shorter file: the records past that length are
    #   written again, from the descriptor, to a new segment that says it repeats them
    #   (`repeats`), so the shorter file is not loss (store._note_repeats);
    # - a segment that was read and is still there, as soon as the writer sees the read (the
    #   next write finds it read and seals it, the folder changed, or the writer closes):
    #   the copy that read it may be short of any write made a little before the read, and
    #   may come back, or reach a third copy that already has the longer file (which would
    #   then refuse to write, having lost what it read); the writes synced within
    #   REPEAT_WINDOW_NS before the read are repeated the same way, once.
    # Left open: a copy whose size was taken before a write and whose first read came only
    # after this process closed (nothing sees that read), if it comes back (docs/sync.md,
    # "Writers appending while rsync runs").

    def _note_written(self, start: int) -> None:
        k = self.kept.get(self.rel)
        if k is None:
            k = self.kept[self.rel] = [self.fd, []]
        elif k[0] != self.fd:  # the same file opened again (a reload found its name unchanged)
            os.close(k[0])
            k[0] = self.fd
        writes = k[1]
        writes.append((start, time.time_ns()))
        if len(writes) > 4096:
            del writes[:2048]

    def _drop_kept(self, rel: str) -> None:
        fd = self.kept.pop(rel)[0]
        if fd != self.fd:
            os.close(fd)

    def check_kept(self, closing: bool) -> None:
        """Repeat what copies may lack of the segments this writer wrote to (see above).
        A name that holds a shorter file is repeated at once (the view is read again next);
        the writes before a read, at close, or else with the next write (flush): a write
        discarded leaves the tape as it was."""
        for rel, (fd, writes) in list(self.kept.items()):
            try:
                fst = os.fstat(fd)
                now = os.stat(os.path.join(self.store.root, rel), follow_symlinks=False)
            except FileNotFoundError:
                # packed by compaction, or an rsync --delete: not for us to put back
                self._drop_kept(rel)
                continue
            if (now.st_ino, now.st_dev) != (fst.st_ino, fst.st_dev):
                if stat.S_ISREG(now.st_mode) and now.st_size < fst.st_size:
                    self._repeat_safely(rel, fd, fst.st_size, cut=now.st_size)
                self._drop_kept(rel)  # once: the name holds another file now
            elif fst.st_atime_ns != UNREAD_ATIME_NS and writes:
                if closing:
                    self._repeat_before_read(rel, fd, fst, writes)
                else:
                    self.repeats_due.setdefault(rel, (fd, fst))

    def _repeat_before_read(self, rel: str, fd: int, fst: os.stat_result, writes: list) -> None:
        """The segment was read: repeat the writes synced within REPEAT_WINDOW_NS before
        that read, which the copy that read it may lack (see above). Once a read: a read
        segment takes no more writes."""
        since = fst.st_atime_ns - REPEAT_WINDOW_NS
        starts = [start for start, synced in writes if synced >= since]
        if starts:
            self._repeat_safely(rel, fd, fst.st_size, start=min(starts))
        writes.clear()

    def _repeat_safely(self, rel: str, fd: int, size: int, **where) -> None:
        try:
            self._repeat_from(rel, fd, size, **where)
        except CorruptObject:
            pass  # the file behind the descriptor is damaged itself: fsck reports it

    def _repeat_from(self, rel: str, fd: int, size: int, cut: Optional[int] = None, start: Optional[int] = None) -> None:
        """Write the records of the file behind `fd` from `start` (or from the last record
        boundary at or before `cut`) to its end into a new segment whose header names `rel`
        and that offset. `Z` blocks become plain `K` blocks: their dictionaries may lie
        before the offset."""
        data = pread_all(fd, size)
        items = [item for item in framing.scan(data) if isinstance(item, framing.Record)]
        if start is None:
            start = max((item.offset for item in items if item.offset <= cut), default=0)
        bodies = {item.offset: item for item in items}
        dicts: dict[int, object] = {}
        out = bytearray()
        for item in items:
            if item.offset < start or item.type in (framing.T_HEADER, framing.T_DICT):
                continue
            if item.type == framing.T_DICT_BLOCK:
                where = f"block at offset {item.offset} of {rel}"
                distance, frame = packing.split_dict_block(item.body)
                at = bodies.get(item.offset - distance)
                if at is None or at.type != framing.T_DICT:
                    raise CorruptObject(f"damaged {where}: no dictionary record where it points")
                if at.offset not in dicts:
                    dicts[at.offset] = dict_decompressor(self.store.decompress(at.body, where))
                raw = self.store.decompress(frame, where, dicts[at.offset])
                out += framing.frame(framing.T_BLOCK, self._plain().compress(raw))
            else:
                out += framing.frame(item.type, item.body)
        if not out:
            return
        self.store.index.note_repeated(rel, start)
        header = self._header_frame({"file": os.path.basename(rel), "from": start})
        os.close(self._publish_file(self._new_segment_name(), header + out))
