"""Reading back what the tape's files hold: the part of the Store (store.py inherits this
class) that reads a record at an offset, the records of a block or of a whole file, and an
object where the index places it, verified; and says what became of an object it cannot
find (lost to damage, salvaged away, or not here yet).
"""

from __future__ import annotations

import json
import os
import stat
import zlib
from typing import Callable, Iterator, Optional, TypeVar

from . import framing, packing
from ..model.canonical import object_hash
from ..model.errors import CorruptObject, EntryNotFound, LostToDamage, ObjectTooLarge
from .files import CODEC_RAW, CODEC_ZSTD, TYPE_ENTRY, dict_decompressor, open_for_reading, pread_all, zstd
from .index import hash_key
from ..model.schema import object_record_problem
from .records import TYPE_WITHHELD, Source, StaleRow, _pread_record, damaged_object_names, retried

LOST_VALUE = "[lost: damaged]"  # what a read shows for a value lost to damage (docs/format.md section 15)
QUARANTINE = "quarantine"  # damaged files moved aside by `fsck --salvage`: kept, never read
REPORT = ".salvage.json"  # beside each: what was lost
REPORT_MAX = 64 << 20  # a salvage report is read up to this (its kept entries make a big salvage's long)
PENDING = ".salvage.pending"  # the report of a salvage not finished yet (the rerun finishes it)
T = TypeVar("T")


class Reading:
    """Objects and records read back from the tape's files (a part of Store)."""

    def scan_file(self, rel: str, start: int = 0, end: Optional[int] = None, ends: Optional[dict] = None) -> Iterator[framing.Record | framing.Damage]:
        """Every record of a data file from `start` to `end` (default: its size), at offsets
        in the file. The records inside a block come out one by one, at the block's offset;
        a block that does not decode, and a dictionary record that does not decompress
        (even one no block uses), come out as damage. `ends`, when given, gets
        ends[rel] = the offset just after the last whole record read: where a later read
        must start so that a record cut by `end` (a write under way) is not skipped."""
        fd = open_for_reading(os.path.join(self.root, rel))
        try:
            size = os.fstat(fd).st_size if end is None else end
            data = pread_all(fd, size - start, start) if size > start else b""
            src = Source(fd, data, start)  # a block's dictionary is read from what this read
            file_id = None
            if ends is not None:
                ends[rel] = start
            for item in framing.scan(data):
                offset = start + item.offset
                if isinstance(item, framing.Damage):
                    yield framing.Damage(offset, item.torn, item.reason)
                    continue
                if ends is not None:
                    ends[rel] = start + item.end
                if item.type == framing.T_DICT:
                    try:
                        self.decompress(item.body, f"dictionary at offset {offset} of {rel}")
                    except CorruptObject as e:
                        yield framing.Damage(offset, False, str(e).split(";")[0])
                        continue
                    yield framing.Record(offset, item.type, item.body)
                elif item.type in framing.BLOCK_TYPES:
                    if file_id is None:
                        file_id = self.index.file_id(rel)
                    try:
                        inner = self.block_items(file_id, offset, item.body, item.type, src)
                    except CorruptObject as e:
                        yield framing.Damage(offset, False, str(e).split(";")[0])
                        continue
                    for rec in inner:
                        yield framing.Record(offset, rec.type, rec.body)
                else:
                    yield framing.Record(offset, item.type, item.body)
        finally:
            os.close(fd)

    def decode_object(self, h: str, rec_body: bytes) -> tuple[int, bytes]:
        why = object_record_problem(rec_body)
        if why:
            raise CorruptObject(f"object {h}: {why}; run `ctape fsck`")
        if rec_body[:32].hex() != h:
            raise CorruptObject(f"object {h} is not where the index says; run `ctape fsck`")
        type_, codec = rec_body[32], rec_body[33]
        data = rec_body[34:]
        if codec == CODEC_ZSTD:
            body = self.decompress(data, f"object {h}")
        elif codec == CODEC_RAW:
            body = data
        else:
            raise CorruptObject(f"object {h} has an unknown codec {codec}; run `ctape fsck`")
        if type_ == TYPE_WITHHELD:
            return type_, body  # an entry's withheld form: its hash names the original (docs/format.md section 17)
        kind = b"entry" if type_ == TYPE_ENTRY else b"blob"
        if object_hash(kind, body) != h:
            raise CorruptObject(f"object {h} is corrupt (hash mismatch); run `ctape fsck`")
        return type_, body

    def read_record_at(self, file_id: int, offset: int, want_type: bool = False, fd: Optional[int] = None):
        """The body of the record at `offset` (with its type when asked), checksum verified;
        read through `fd` when given, else through this process's descriptor of the file."""
        if fd is None:
            with self._fd_lock:
                try:
                    read = _pread_record(self._read_fd(file_id), offset)
                except FileNotFoundError:
                    raise StaleRow("a file the index names is gone (compacted?)") from None
        else:
            read = _pread_record(fd, offset)
        if read is None:
            raise CorruptObject(f"damaged record at offset {offset} of {self.index.path_of(file_id)}; run `ctape fsck`")
        type_, length, rest = read
        body = rest[:length]
        self.io["bytes_read"] += framing.HEADER_SIZE + len(rest)
        self.io["records_read"] += 1
        if len(rest) != length + framing.TRAILER_SIZE or int.from_bytes(rest[length:], "little") != zlib.crc32(body):
            raise CorruptObject(f"damaged record at offset {offset} of {self.index.path_of(file_id)}; run `ctape fsck`")
        return (type_, body) if want_type else body

    def block_items(self, file_id: int, offset: int, body: bytes, type_: int = framing.T_BLOCK, src: Optional["Source"] = None,
                    refs: bool = True) -> list[framing.Record]:
        """The records inside a block (`K`, or `Z` with its dictionary); ref records only with `refs`."""
        where = f"block at offset {offset} of {self.index.path_of(file_id)}"
        return packing.decode_block(self.block_raw(file_id, offset, body, type_, where, src), where, refs)

    def block_raw(self, file_id: int, offset: int, body: bytes, type_: int, where: str, src: Optional["Source"] = None) -> bytes:
        """The decompressed bytes of a block record. A scan of the file passes what it read
        (`src`), and a `Z` block's dictionary is then taken from those same bytes or read
        through the same descriptor, never through another view of the file."""
        if type_ != framing.T_DICT_BLOCK:
            return self.decompress(body, where)
        distance, frame = packing.split_dict_block(body)
        if not 0 < distance <= offset:
            raise CorruptObject(f"damaged {where}: its dictionary offset is impossible; run `ctape fsck`")
        return self.decompress(frame, where, self._dictionary(file_id, offset - distance, where, src))

    def _dictionary(self, file_id: int, offset: int, where: str, src: Optional["Source"]):
        """A decompressor for the dictionary record at `offset`; the last few are cached by
        file, offset, the record's length and its checksum (a file cut and written again,
        or replaced, may hold another dictionary at the same offset)."""
        if src is None:
            # a block read on its own: a cached dictionary is known by its record's frame
            # (length and stored checksum, 2 small reads), not by reading its body again
            key = self._dict_key(file_id, offset)
            dctx = self._dicts.pop(key, None) if key is not None else None
            if dctx is not None:
                self._dicts[key] = dctx
                return dctx
        try:
            rec = src.record_at(offset) if src is not None else None
            if rec is None:
                rec = self.read_record_at(file_id, offset, want_type=True, fd=src.fd if src is not None else None)
        except CorruptObject:
            raise CorruptObject(f"damaged {where}: its dictionary record is damaged; run `ctape fsck`") from None
        type_, body = rec
        if type_ != framing.T_DICT:
            raise CorruptObject(f"damaged {where}: no dictionary record where it points; run `ctape fsck`")
        key = (file_id, offset, len(body), zlib.crc32(body))
        dctx = self._dicts.pop(key, None)
        if dctx is None:
            dctx = dict_decompressor(self.decompress(body, f"dictionary at offset {offset} of {self.index.path_of(file_id)}"))
            if len(self._dicts) >= 4:
                self._dicts.pop(next(iter(self._dicts)))
        self._dicts[key] = dctx  # most recently used last
        return dctx

    def _dict_key(self, file_id: int, offset: int) -> Optional[tuple]:
        """(file, offset, length, stored checksum) of the dictionary record at `offset`, read
        from its frame only; None when there is no whole dictionary record's frame there
        (the full read then says what is wrong)."""
        with self._fd_lock:
            try:
                fd = self._read_fd(file_id)
            except (FileNotFoundError, EntryNotFound):
                return None
            head = os.pread(fd, framing.HEADER_SIZE, offset)
            parsed = framing.parse_header(head) if len(head) == framing.HEADER_SIZE else None
            if parsed is None or parsed[0] != framing.T_DICT:
                return None
            tail = os.pread(fd, framing.TRAILER_SIZE, offset + framing.HEADER_SIZE + parsed[1])
        if len(tail) != framing.TRAILER_SIZE:
            return None
        return (file_id, offset, parsed[1], int.from_bytes(tail, "little"))

    def block_records(self, file_id: int, offset: int, body: bytes, type_: int = framing.T_BLOCK) -> dict[str, bytes]:
        """The object records inside a block, by hash (the last few blocks are cached)."""
        key = (file_id, offset)
        cached = self._blocks.get(key)
        if cached is None:
            items = self.block_items(file_id, offset, body, type_, refs=False)
            cached = {r.body[:32].hex(): r.body for r in items if r.type == framing.T_OBJECT}
            self._blocks[key] = cached
            if len(self._blocks) > 8:
                self._blocks.pop(next(iter(self._blocks)))
        return cached

    def decompress(self, data: bytes, what: str, dctx=None) -> bytes:
        """Decompress a zstd frame, refusing one that claims more than max_object bytes."""
        z = zstd()
        try:
            size = z.frame_content_size(data)
        except z.ZstdError:
            raise CorruptObject(f"{what} is corrupt (bad zstd frame); run `ctape fsck`") from None
        if size < 0 or size > self.max_object:
            raise ObjectTooLarge(f"{what} claims {size} bytes, over the limit of {self.max_object}; raise CTAPE_MAX_OBJECT if you trust this tape")
        if dctx is None:
            if self._dctx is None:
                self._dctx = z.ZstdDecompressor()
            dctx = self._dctx
        try:
            return dctx.decompress(data, max_output_size=size)
        except z.ZstdError:
            raise CorruptObject(f"{what} is corrupt (zstd data); run `ctape fsck`") from None

    def read_object_at(self, h: str, file_id: int, offset: int) -> tuple[int, bytes]:
        cached = self._blocks.get((file_id, offset))
        if cached is None:
            type_, body = self.read_record_at(file_id, offset, want_type=True)
            if type_ not in framing.BLOCK_TYPES:
                return self.decode_object(h, body)
            cached = self.block_records(file_id, offset, body, type_)
        inner = cached.get(h)
        if inner is None:
            raise CorruptObject(f"object {h} is not in the block the index names; run `ctape fsck`")
        # inside a block an object has no stored name: its name was computed from these
        # very bytes when the block was decoded, so there is nothing left to verify
        return inner[32], inner[34:]

    def get_object(self, h: str) -> tuple[int, bytes]:
        """(type, canonical body) of an object, verified against its hash."""
        p = self.pending.get(h)
        if p is not None:
            return p
        loc = self._located(h)
        try:
            return self.read_object_at(h, *loc)
        except (CorruptObject, EntryNotFound):
            # the index may be stale (files replaced by compaction): rebuild and read again
            return self.reread(lambda: self._read_indexed(h))

    def _read_indexed(self, h: str) -> tuple[int, bytes]:
        return self.read_object_at(h, *self._located(h))

    def _located(self, h: str) -> tuple[int, int]:
        """(file id, offset) of object h by the index, looked up again after a refresh when
        the index lacks it: the object may be new, or another process's rebuild, from a
        listing taken before a compaction's pack had its name, may have committed after
        ours, and its rows lack that pack until a look. Not found: _not_found raises."""
        loc = self.index.find_object(h)
        if loc is None:
            self.refresh()
            loc = self.index.find_object(h)
        if loc is None:
            self._not_found(h)
        return loc

    def reread(self, read: Callable[[], T]) -> T:
        """After a read through the index failed: rebuild the index and `read()` again; again
        while the rows it reads name a file gone meanwhile (StaleRow: a compaction in another
        process, whose cache is not this one), at most REBUILD_TRIES times."""
        return retried(read, StaleRow, before=self._reindex_judging)

    def _reindex_judging(self) -> None:
        """_full_reindex, after a refresh that judges the files gone since the index read
        them (Freshness._note_lost): a rebuild alone forgot a file deleted from outside
        without a word, so a value it held read as "not synced yet" for good, and salvage
        found nothing to do (found by an audit). One rebuild: the refresh's, when it made one."""
        before = self.index.rebuilds()
        self.refresh()
        if self.index.rebuilds() == before:
            self._full_reindex()

    def _not_found(self, h: str):
        """An object the index cannot find: damaged if the tape has damaged records, lost if
        a salvage report names it, else not here yet."""
        damaged = list(self.index.file_rows(damaged=True))
        if damaged and self.index.refused_at_limit() == self.max_object:
            raise ObjectTooLarge(f"object {h} cannot be read: {', '.join(damaged[:3])} holds records that claim more than the limit of "
                                 f"{self.max_object} bytes, or are damaged; raise CTAPE_MAX_OBJECT if you trust this tape, and see `ctape fsck`")
        where = self.lost_to_damage(h)
        if where and where.startswith(QUARANTINE):
            # gone for good, a hole in history like one not synced yet (readers stop there)
            raise LostToDamage(f"object {h} was lost to damage (salvaged: see {where})")
        if where:
            raise CorruptObject(f"object {h} cannot be read: damaged records in {where}; run `ctape fsck`, and `ctape fsck --salvage` to keep what is intact")
        raise EntryNotFound(f"object {h} is not in this tape (not synced yet, or removed)")

    def lost_to_damage(self, h: str) -> Optional[str]:
        """Where an object the index cannot find went, when damage is why: the salvage
        report that names it as lost, else the damaged files that could hold it (a record
        that fails its checksum hides its name). None: nothing says it was damaged (not
        synced yet, or removed)."""
        report = self._salvage_losses().get(h) or self._salvage_lost_keys().get(hash_key(h))
        if report:
            return report
        damaged = self.damaged_files()
        return ", ".join(damaged[:3]) + (" ..." if len(damaged) > 3 else "") if damaged else None

    def damaged_files(self) -> list[str]:
        """Every file of the tape with damaged records or lost acknowledged ones."""
        return sorted(set(self.index.file_rows(damaged=True)) | {p for p, _, _ in self.index.lost_rows()})

    def read_value(self, h: str, entry: Optional[str] = None) -> bytes:
        """The bytes of a value (blob) that `entry` refers to. A value known to be lost to
        damage reads as LOST_VALUE, so that the entry still reads (docs/format.md section
        15): a salvage report names it, or (damage stays in its session, SPEC 14) a damaged
        record of another session's file holds it. Otherwise a value that cannot be read
        fails as get_object does: damage in the entry's own session stops the read (one
        line that names the files and --salvage), one not here yet is EntryNotFound."""
        try:
            return self.get_object(h)[1]
        except ObjectTooLarge:
            raise  # readable under a higher limit: not lost
        except (CorruptObject, EntryNotFound):
            if h in self._salvage_losses() or hash_key(h) in self._salvage_lost_keys():
                return LOST_VALUE.encode()
            mine = self.session_of(entry)
            key = hash_key(h)
            held = [p for p in self.damaged_files() if h in self._damaged_names(p) or self._holds(p, h) or key in self.index.lost_keys(p)]
            if held and mine is not None and not any(p.startswith(f"sessions/{mine}/") for p in held):
                return LOST_VALUE.encode()
            raise

    def session_of(self, h: Optional[str]) -> Optional[str]:
        """The session whose file holds object h (None when unknown or in packs/)."""
        loc = self.index.find_object(h) if h else None
        rel = self.index.path_of(loc[0]) if loc else None
        return rel.split("/")[1] if rel and rel.startswith("sessions/") else None

    def _holds(self, rel: str, h: str) -> bool:
        """Does the index place object h in file rel (where it does not read back)?"""
        loc = self.index.find_object(h)
        return loc is not None and self.index.path_of(loc[0]) == rel

    def _damaged_names(self, rel: str) -> set[str]:
        """damaged_object_names of a file, kept while the file keeps its size."""
        try:
            size = os.lstat(os.path.join(self.root, rel)).st_size
        except OSError:
            return set()
        cached = self._held.get(rel)
        if cached is None or cached[0] != size:
            cached = self._held[rel] = (size, damaged_object_names(self.root, rel))
        return cached[1]

    def _salvage_losses(self) -> dict[str, str]:
        """Every object the salvage reports (final or pending) name as lost: hash -> report.
        Read again only when quarantine/ changed."""
        base = os.path.join(self.root, QUARANTINE)
        names = []
        try:
            for d in sorted(os.scandir(base), key=lambda e: e.name):
                if d.is_dir(follow_symlinks=False):
                    for e in os.scandir(d.path):
                        if e.name.endswith((REPORT, PENDING)) and not e.name.startswith(".") and e.is_file(follow_symlinks=False):
                            st = e.stat(follow_symlinks=False)
                            names.append((f"{QUARANTINE}/{d.name}/{e.name}", st.st_size, st.st_mtime_ns))
        except (FileNotFoundError, NotADirectoryError):
            pass
        key = tuple(sorted(names))
        if self._losses is not None and self._losses[0] == key:
            return self._losses[1]
        losses: dict[str, str] = {}
        keys: dict[int, str] = {}  # objects a report names by index key only (their records no longer said)
        for rel, _, _ in key:
            try:
                with open(os.path.join(self.root, rel), "rb") as f:
                    report = json.loads(f.read(REPORT_MAX))
                for lost in report.get("missing", []):
                    if isinstance(lost, str):
                        losses.setdefault(lost, rel)
                for k in report.get("missing_keys", []):
                    if type(k) is int:
                        keys.setdefault(k, rel)
            except (OSError, ValueError, AttributeError, TypeError):
                continue  # fsck reports an unreadable report
        self._losses = (key, losses, keys)
        return losses

    def _salvage_lost_keys(self) -> dict[int, str]:
        """The index keys (hash_key) of objects the salvage reports name by key: hash_key -> report."""
        self._salvage_losses()
        return self._losses[2]

    def file_on_disk(self, file_id: int) -> bool:
        """Whether the file an index row points into is still in the tape (not only open in
        this process: a descriptor keeps a removed file readable here)."""
        rel = self.index.path_of(file_id)
        try:
            return rel is not None and stat.S_ISREG(os.stat(os.path.join(self.root, rel), follow_symlinks=False).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def has_object(self, h: str) -> bool:
        """Does the tape hold object h? The index answers; when it says no after another
        process rebuilt the cache (from a listing that may predate a file, whose rows that
        rebuild removed: see _refresh), or before this process ever looked at every file,
        it is brought up to date and asked again. A plain "not here" costs one query."""
        if h in self.pending or self.index.find_object(h) is not None:
            return True
        if self._whole_at is None or self.index.rebuilds() != self._whole_at:
            self.refresh()
            return self.index.find_object(h) is not None
        return False
