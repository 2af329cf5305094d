"""compact: writing a pack (docs/format.md section 13). `PackWriter` builds one block by
block under a temporary name and installs it under its content hash; `_write_pack` fills
a session's pack with what it keeps; a failure takes back the packs written (`_take_back`).
"""

from __future__ import annotations

import json
import os
import secrets
from contextlib import contextmanager
from typing import Iterable, Iterator, Optional

from blake3 import blake3

from ..store import framing, packing
from ..model.canonical import canonical_json
from ..model.errors import CorruptObject, StorageError
from ..store.files import fsync_dir, storage_error, zstd
from ..store.store import TYPE_WITHHELD, Store
from .compact_redacted import Redacted
from .compact_scan import _records

BLOCK_BYTES = 2 << 20  # uncompressed bytes per pack block: larger compresses better, reads cost more
BLOCK_LEVEL = 12  # zstd level: 19 saves ~12% more but compresses ~10x slower
LARGE_OBJECT = 64 << 10  # objects this large stay on their own (read without their neighbours)


class PackWriter:
    """Builds a pack block by block (see packing.py), then installs it under its content hash."""

    def __init__(self, store: Store, session: str, gaps: Optional[dict[str, list]] = None):
        self.store = store
        self.session = session
        self.dir = store.session_dir(session)
        self.tmp = os.path.join(self.dir, f".tmp-pack-{secrets.token_hex(6)}")
        self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        self.hasher = blake3()
        self.block: list[tuple[int, bytes]] = []
        self.block_size = 0
        self.objects: set[str] = set()
        self.count = 0
        self.cctx = zstd().ZstdCompressor(level=BLOCK_LEVEL, write_content_size=True, write_checksum=True)
        try:
            header: dict = {"format": "ctape-pack", "version": 1, "session": session}
            if gaps:  # the gaps of the records read, which may go: a cut-off claim may come back later
                header["gaps"] = {w: sorted([lo, hi] for lo, hi in pairs) for w, pairs in sorted(gaps.items())}
            self._write(framing.frame(framing.T_HEADER, canonical_json(header)))
        except BaseException:
            self.abort()
            raise

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.hasher.update(data)

    def add_object(self, body: bytes) -> None:
        """Add an object record body (hash, type, codec, data) unless the pack has it."""
        h = body[:32].hex()
        if h in self.objects:
            return
        if len(body) >= LARGE_OBJECT:  # large: on its own, so reading it needs no neighbours
            self.objects.add(h)
            self.count += 1
            self._write(framing.frame(framing.T_OBJECT, body))
            return
        try:
            # verified: inside a block the name is not stored, and the references to it
            # become distances, so a wrong name would silently rename what points at it
            _, raw = self.store.decode_object(h, body)
        except CorruptObject:
            return  # it does not read back (fsck reports it); compaction keeps what does
        self.objects.add(h)
        self.count += 1
        if len(raw) >= LARGE_OBJECT * 4:
            self._write(framing.frame(framing.T_OBJECT, body))
            return
        self._add(framing.T_OBJECT, body[:33] + b"\0" + raw)

    def add_withheld(self, h: str, body: bytes) -> None:
        """An entry's withheld form: an object record of its own (type W, named by the
        original's hash, which it no longer matches: never inside a block, where names
        are computed from the bytes)."""
        if h in self.objects:
            return
        self.objects.add(h)
        self.count += 1
        self._write(framing.frame(framing.T_OBJECT, self.store.encode_object(TYPE_WITHHELD, body, h)))

    def add_record(self, type_: int, body: bytes) -> None:
        """A ref or partial record, in order among the objects (its hashes point at them)."""
        self.count += 1
        self._add(type_, body)

    def _add(self, type_: int, body: bytes) -> None:
        self.block.append((type_, body))
        self.block_size += len(body)
        if self.block_size >= BLOCK_BYTES:
            self._flush_block()

    def _flush_block(self) -> None:
        if self.block:
            raw = packing.encode_block(self.block)
            self._write(framing.frame(framing.T_BLOCK, self.cctx.compress(raw)))
            self.block, self.block_size = [], 0

    def finish(self, before_rename: Optional[Callable[[str], None]] = None) -> Optional[str]:
        """fsync, rename to pack-<hash>.pack, fsync the folder; returns the relative path.
        `before_rename(rel)` runs just before the rename puts the pack at rel (salvage keeps
        the damaged file of that very name first)."""
        self._flush_block()
        os.fsync(self.fd)
        os.close(self.fd)
        if self.count == 0:
            os.unlink(self.tmp)
            return None
        name = f"pack-{self.hasher.hexdigest()[:32]}.pack"
        final = os.path.join(self.dir, name)
        if before_rename is not None:
            before_rename(f"sessions/{self.session}/{name}")
        os.rename(self.tmp, final)
        fsync_dir(self.dir)
        return f"sessions/{self.session}/{name}"

    def abort(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


def _pack_error(e: OSError, session: str) -> StorageError:
    return storage_error(e, f"a pack of session {session}", after="compact removed nothing: the tape is as it was")


def _take_back(store: Store, packs: Iterable[Optional[str]], snapshot) -> None:
    """Remove the packs a compaction wrote before it failed, before it removed anything:
    what they hold is still in the files they were to replace. Never a file of the
    snapshot: a pack written again whole is named as the one it replaces (its name is its
    content's hash), and that file is the session's only copy (found by a review: a session
    already in one pack, rewritten because objects moved to it, lost its pack when the
    compaction was interrupted after it)."""
    folders = set()
    for rel in packs:
        if rel is None or rel in snapshot:
            continue
        try:
            os.unlink(os.path.join(store.root, rel))
            folders.add(os.path.dirname(os.path.join(store.root, rel)))
        except OSError:
            pass
    for d in folders:
        try:
            fsync_dir(d)
        except OSError:
            pass


@contextmanager
def _pack(store: Store, session: str, gaps: Optional[dict[str, list]] = None) -> Iterator[PackWriter]:
    """A PackWriter for the session: a failure takes its half-written pack back, and a full
    disk (or any OSError) is the one line _pack_error says."""
    try:
        pw = PackWriter(store, session, gaps)
    except OSError as e:
        raise _pack_error(e, session) from None
    try:
        yield pw
    except OSError as e:
        pw.abort()
        raise _pack_error(e, session) from None
    except BaseException:
        pw.abort()
        raise


def _write_pack(store, session, files, snapshot, ages, grace_s, live, kept_ids, open_streams, red: Redacted,
                gaps: Optional[dict[str, list]] = None, taken: Optional[dict[str, set[bytes]]] = None,
                given: frozenset = frozenset()) -> Optional[str]:
    """The session's pack: what its files hold that stays, less the objects `given` to
    another session's pack, plus `taken`: file -> objects this pack takes over from
    another session's file (compact_reach._moves)."""
    with _pack(store, session, gaps) as pw:
        done: set[bytes] = set()
        for path in sorted(files):
            young = ages[path] < grace_s
            for rec in _records(store, path, 0, snapshot[path]):
                if rec.type == framing.T_OBJECT:
                    key = rec.body[:32]
                    if key in red.blobs or key in given:
                        continue  # a redacted value goes whole, young or not; another pack takes what is given
                    if young or key in live:
                        _add_kept(pw, store, red, key, rec.body)
                elif rec.type in (framing.T_REF, framing.T_PARTIAL) and rec.body not in done:
                    r = json.loads(rec.body)
                    keep = (r["s"], r["w"], r["n"]) in kept_ids if rec.type == framing.T_REF else (r["s"], r["stream"]) in open_streams
                    if keep:
                        done.add(rec.body)
                        pw.add_record(rec.type, rec.body)
        for path, keys in sorted((taken or {}).items()):
            for rec in _records(store, path, 0, snapshot[path]):
                if rec.type == framing.T_OBJECT and rec.body[:32] in keys:
                    _add_kept(pw, store, red, rec.body[:32], rec.body)
        return pw.finish()


def _add_kept(pw: PackWriter, store: Store, red: Redacted, key: bytes, body: bytes) -> None:
    """An object the pack keeps: a redacted entry in its withheld form, anything else as is."""
    if key in red.entries:
        withheld = red.withheld(store, body)
        if withheld is not None:
            pw.add_withheld(key.hex(), withheld)
        return
    pw.add_object(body)
