"""Summaries of a remote's manifests (docs/remotes.md, "Summaries of the manifests").

    s/<compactor>/<n:020d>.json.zst    every uploader's manifests from its first on, byte for byte

A pull reads each uploader's manifests from the first it has not read, one GET each, and a
clone reads them all: tens of thousands after a month of `push --follow`, which pushes
every few seconds. Manifests are never merged (a key is written once and never changed),
so `compact --remote` writes, now and then, a summary: the text of every manifest of each
uploader from 0 up to the first that is missing or not a manifest, as its key holds it. A
reader with many manifests of an uploader to read (a clone, a pull after a long time away,
`remote show`) reads them from the newest summary, in one GET, and the rest from their
keys. It reads the same bytes and decodes and checks them as it decodes a key's
(layout.decode_manifest, against the number of the key), in the same order: the summary
adds nothing a manifest does not say.

What may differ from the keys: a manifest that was lost since (deleted from the bucket, or
a backup restored over it), and one its writer filled again since (with an empty
manifest: push._refill). A reader uses a summary's copy of a manifest only where its
listing of the uploader's keys shows that key, with the copy's size; from the first that
it lacks or that differs, it reads the keys, as without a summary. A summary that is
gone, damaged or junk is read past (said once, for junk): readers then read the keys.
"""

from __future__ import annotations

import json
import time
from typing import Callable, Optional

from . import layout
from .backend import Backend

SUMMARY_FORMAT = "ctape-remote-summary"
SUMMARY_EVERY = 256  # compact --remote writes a summary once this many manifests are not in the newest
SUMMARY_WORTH = 32  # a reader GETs the newest summary for an uploader with this many manifests to read
MAX_SUMMARY = 128 << 20  # bytes of manifests in one summary (~300,000; a reader holds them all at once)


def summary_key(compactor: str, n: int) -> str:
    return f"s/{compactor}/{n:020d}.json.zst"


class Summary:
    """One summary as read: per uploader, its manifests from 0 on, decoded, and each one's
    size as its key holds it."""

    __slots__ = ("key", "manifests", "sizes", "texts", "written")

    def __init__(self, key: str, manifests: dict[str, list[dict]], sizes: dict[str, list[int]], texts: dict[str, list[str]]):
        self.key, self.manifests, self.sizes, self.texts = key, manifests, sizes, texts
        self.written = 0.0  # when the store wrote it (its listing's time; Summaries sets it)

    @property
    def total(self) -> int:
        return sum(len(rows) for rows in self.manifests.values())

    def reach(self) -> dict[str, int]:
        return {u: len(rows) for u, rows in self.manifests.items()}

    def usable(self, uploader: str, n: int, listed: dict[int, tuple[int, float]]) -> int:
        """The end of the run of this uploader's manifests from n on that the summary may
        stand for: each one listed on the remote now, with the size of the summary's copy,
        and written by the store before the summary was (a number written again since, by a
        writer that lost its newest manifests and its state, may hold other bytes of the
        same size: found in review)."""
        sizes = self.sizes.get(uploader, [])
        k = n
        while k < len(sizes) and k in listed and listed[k][0] == sizes[k] and listed[k][1] < self.written:
            k += 1
        return k


def encode(store, compactor: str, n: int, texts: dict[str, list[str]]) -> bytes:
    from ..store.files import zstd

    t = time.time()
    body = {"format": SUMMARY_FORMAT, "version": 1, "tape_id": store.tape_id, "compactor": compactor, "n": n,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)), "manifests": texts}
    return zstd().ZstdCompressor(level=3).compress(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def decode(data: bytes, tape_id: str, compactor: str, n: int) -> tuple[Optional[Summary], str]:
    """(the summary, "") or (None, why it is not one)."""
    from ..store.files import zstd

    z = zstd()
    limit = 2 * MAX_SUMMARY  # (its JSON escapes: never more than this for MAX_SUMMARY of manifests)
    try:
        with z.ZstdDecompressor().stream_reader(data, read_across_frames=True) as r:
            raw = r.read(limit + 1)  # a bomb stops here
    except z.ZstdError:
        return None, "not a zstd frame"
    body, why = layout._load(raw, SUMMARY_FORMAT, limit)
    if body is None:
        return None, why or "not a ctape summary"
    if body.get("tape_id") != tape_id or body.get("compactor") != compactor or body.get("n") != n:
        return None, "names another tape, compactor or number than its key"
    texts = body.get("manifests")
    if not isinstance(texts, dict):
        return None, "no manifests"
    manifests: dict[str, list[dict]] = {}
    sizes: dict[str, list[int]] = {}
    for u, rows in texts.items():
        if not (isinstance(u, str) and layout.UPLOADER.fullmatch(u) and isinstance(rows, list)):
            return None, "a bad uploader"
        for k, text in enumerate(rows):
            b = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else b""
            m, why = layout.decode_manifest(b, tape_id, u, k)
            if m is None:
                return None, f"its copy of {layout.manifest_key(u, k)} is not a manifest ({why})"
            manifests.setdefault(u, []).append(m)
            sizes.setdefault(u, []).append(len(b))
    return Summary(summary_key(compactor, n), manifests, sizes, texts), ""


def numbers(backend: Backend) -> dict[str, list[tuple[int, float]]]:
    """compactor -> its summaries on the remote, (number, when the store wrote it), in order
    (one listing)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for key, _, when in backend.stamped("s/"):
        parts = key.split("/")
        if len(parts) != 3 or not layout.UPLOADER.fullmatch(parts[1]) or not parts[2].endswith(".json.zst"):
            continue
        digits = parts[2][:-len(".json.zst")]
        if digits.isdigit() and key == summary_key(parts[1], int(digits)):
            out.setdefault(parts[1], []).append((int(digits), when))
    return {c: sorted(ns) for c, ns in out.items()}


def for_reader(store, backend: Backend, state, warn: Callable[[str], None]) -> "Summaries":
    """What layout.new_manifests reads summaries through, for a reader whose state of the
    remote is `state` (how far the summaries reach is kept there)."""
    return Summaries(store, backend, warn, state.setdefault("summaries", {}))


class Summaries:
    """Each compacting copy's newest summary, read only when it may reach past where a
    reader is: how far each one reaches for each uploader is kept in `known` (the reader's
    state of the remote: key -> {uploader: manifests}), so a pull that is behind, but past
    what the summaries hold, does not GET them again (a pull of 40 new manifests read a
    summary of 3,000 for nothing each time: found in review)."""

    def __init__(self, store, backend: Backend, warn: Callable[[str], None], known: dict):
        self.store, self.backend, self.warn, self.known = store, backend, warn, known
        self.worth = SUMMARY_WORTH  # (layout.new_manifests looks only for an uploader this far behind)
        self.newest: Optional[dict[str, float]] = None  # key -> when written
        self.read: dict[str, Optional[Summary]] = {}

    def _listed(self) -> dict[str, float]:
        if self.newest is None:
            self.newest = {summary_key(c, ns[-1][0]): ns[-1][1] for c, ns in numbers(self.backend).items()}
            for key in [k for k in self.known if k not in self.newest]:
                del self.known[key]  # (replaced by a newer one)
        return self.newest

    def load(self, key: str) -> Optional[Summary]:
        if key not in self.read:
            data = self.backend.get(key)
            s = None
            if data is not None:  # (None: replaced by a newer one since the listing)
                parts = key.split("/")
                s, why = decode(data, self.store.tape_id, parts[1], int(parts[2][:-len(".json.zst")]))
                if s is None:
                    self.warn(f"ignored {key} on the remote: {why}")
                else:
                    s.written = self._listed()[key]
                    self.known[key] = s.reach()
            self.read[key] = s
        return self.read[key]

    def reaching(self, uploader: str, n: int) -> Optional[Summary]:
        """The summary that holds the most of this uploader's manifests, if past n."""
        best: Optional[Summary] = None
        for key in sorted(self._listed()):
            reach = self.known.get(key)
            if reach is not None and reach.get(uploader, 0) <= n:
                continue
            s = self.load(key)
            if s is not None and len(s.manifests.get(uploader, ())) > n and (best is None or len(s.manifests[uploader]) > len(best.manifests[uploader])):
                best = s
        return best

    def fullest(self) -> Optional[Summary]:
        """The newest summary that holds the most manifests (each read)."""
        found = [s for s in (self.load(k) for k in sorted(self._listed())) if s is not None]
        return max(found, key=lambda s: s.total, default=None)


def _run(listed: dict, k: int) -> int:
    """How many manifests are listed one after the other from number k on."""
    n = 0
    while k + n in listed:
        n += 1
    return n


def write(store, backend: Backend, warn: Callable[[str], None], every: Optional[int] = None, known: Optional[dict] = None) -> int:
    """compact --remote's step: a new summary, when `every` (SUMMARY_EVERY) manifests or
    more are not in the newest one; how many manifests it holds (0: none written). Built
    from the newest summary, checked against a listing of every uploader's manifests as a
    reader checks it, and the manifests after it, read from their keys. This copy's older
    summaries are then deleted, but the one before the new one (a reader that listed it a
    moment ago still finds it)."""
    every = SUMMARY_EVERY if every is None else every
    summaries = Summaries(store, backend, warn, dict(known or {}))
    listings = {u: layout.manifest_sizes(backend, u) for u in layout.uploaders(backend)}
    reaches = [summaries.known.get(k) for k in summaries._listed()]
    if all(r is not None for r in reaches):
        # how far the summaries reach is known (this copy's pull read them): a night that
        # writes none decides without reading them
        reach = max(reaches, key=lambda r: sum(r.values()), default={})
        if sum(_run(listed, reach.get(u, 0)) for u, listed in listings.items()) < every:
            return 0
    base = summaries.fullest()
    texts: dict[str, list[str]] = {}
    todo: dict[str, tuple[dict[int, tuple[int, float]], list[int]]] = {}
    held = 0
    for u, listed in listings.items():
        rows: list[str] = []
        if base is not None:
            rows = base.texts.get(u, [])[:base.usable(u, 0, listed)]
            held += sum(base.sizes.get(u, [])[:len(rows)])
        texts[u] = rows
        k = len(rows)
        new = []
        while k in listed:
            new.append(k)
            k += 1
        todo[u] = (listed, new)
    if sum(len(new) for _, new in todo.values()) < every:
        return 0  # (decided from the listings: the GETs of a night that writes none would grow with the remote's age)
    added = 0
    for u, (listed, new) in todo.items():
        rows = texts[u]
        for k, data in zip(new, layout.gets_in_order(backend, [layout.manifest_key(u, k) for k in new])):
            if data is None or len(data) != listed[k][0] or held + len(data) > MAX_SUMMARY:
                break  # gone or written again since the listing: the next summary takes it
            m, _ = layout.decode_manifest(data, store.tape_id, u, k)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                m = None
            if m is None:
                break  # not a manifest: readers read its key, and say so
            rows.append(text)
            held += len(data)
            added += 1
    texts = {u: rows for u, rows in texts.items() if rows}
    if added < every:
        return 0
    me = store.writer
    mine = [n for n, _ in numbers(backend).get(me, [])]
    n = mine[-1] + 1 if mine else 0
    data = encode(store, me, n, texts)
    while not backend.put_if_absent(summary_key(me, n), data):
        n += 1  # a killed run wrote it: never overwritten, the next number
        data = encode(store, me, n, texts)
    for old in mine[:-1]:
        backend.delete(summary_key(me, old))
    return sum(len(rows) for rows in texts.values())
