"""`ctape redact`: take values out of a tape, on every copy, keeping every hash
(SPEC section 18; the record and what it proves: docs/format.md section 17).

A redaction is one ref record per session (op "redact", nothing in `set`) naming
places: (entry hash, JSON path, kind), and the blob itself when the value is stored
as one. It travels like any ref record (rsync, push, pull); every copy that has it
shows the marker at once, and its next `compact` drops the bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

from ..model import redaction
from ..model.canonical import is_hash
from ..model.errors import InvalidInput
from ..model.schema import decode_entry
from ..store.files import TYPE_ENTRY
from ..store.store import TYPE_WITHHELD
from .scan import Detectors, Finding, check_kind, check_regex, load_settings, scan

if TYPE_CHECKING:
    from ..history.tape import Tape

RECORD_ITEMS = 1000  # places per record: a long scan result becomes several records


def _place(tape: "Tape", h: str, path: str, kind: str, keys: Optional[Detectors] = None) -> Optional[list[dict]]:
    """The record items for one value; None when it is already redacted. InvalidInput
    when the entry or the path is not there or the value is not text. A key on the path
    that `keys` (the patterns) take for a secret is named by its key id, never spelled
    out in the record (`$.payload.headers.AKIA...` -> `$.payload.headers[#K]`)."""
    steps = redaction.entry_path(path)
    if keys is not None:
        steps = [redaction.KeyStep.of(x) if i and isinstance(x, str) and keys.pattern_spans(x) else x for i, x in enumerate(steps)]
    type_, body = tape.store.get_object(h)
    if type_ not in (TYPE_ENTRY, TYPE_WITHHELD):
        raise InvalidInput(f"{h} is a payload value, not an entry; give an entry hash")
    raw = decode_entry(h, body)
    red = tape.redactions()
    done = red.get(h, ())
    if any(_steps(p) == steps for p, _ in done):
        return None  # redacted already
    raw = redaction.apply(raw, done)
    found, value = redaction.get_at(raw, steps)
    if not found:
        raise InvalidInput(f"entry {h[:12]} has nothing at {path}; see `ctape show {h[:12]} --json`")
    if type(value) is not str:
        raise InvalidInput(f"the value at {path} is not text; give the path of a string inside it")
    blob = value[2:] if value[:2] == "\0b" and len(value) == 66 else None
    if blob in red:
        return None
    return redaction.place(h, redaction.format_path(steps), kind, blob)


def _steps(path: str) -> Optional[list]:
    try:
        return redaction.parse_path(path)
    except InvalidInput:
        return None  # a record another version wrote


def redact(tape: "Tape", session: str, places: Iterable[tuple[str, str, str]]) -> dict:
    """Redact (entry, path, kind) places with records in `session`. Every place is
    checked before anything is written: a bad one changes nothing."""
    items, done = [], set()
    keys = Detectors(load_settings(tape)["patterns"], entropy=False)
    for h, path, kind in places:
        check_kind(kind)
        h = tape.resolve(h, session) if not is_hash(h) else h
        got = _place(tape, h, path, kind, keys)
        if got is None:
            continue
        for item in got:
            key = (item["object"], item["path"])
            if key not in done:
                done.add(key)
                items.append(item)
    sess = tape.session(session)
    for i in range(0, len(items), RECORD_ITEMS):
        sess.set_refs(redaction.OP, {}, redact=items[i:i + RECORD_ITEMS])
    return {"session": session, "redacted": [i for i in items if i["path"] != "$"],
            "blobs": [i["object"] for i in items if i["path"] == "$"]}


def redact_entry(tape: "Tape", session: str, ref: str, path: str, kind: str) -> dict:
    """`ctape redact ENTRY --path P -s SESSION`: ENTRY is resolved in SESSION (a prefix, a
    branch), and the record goes in the session whose files store the entry: the record
    travels with the bytes it redacts (a `push -s` of that session alone carries it, and
    a clone of it shows the marker), and the output names where the value is. An entry
    another session stores (a fork reached from SESSION, or one given by hash) is
    recorded there; one the store cannot place (in a pack's shared folder) in SESSION."""
    h = tape.resolve(ref, session) if not is_hash(ref) else ref
    if h is None:
        raise InvalidInput(f"{ref!r} names no entry in session {session!r} yet")
    return redact(tape, _home(tape, h, session, set(tape.session_names())), [(h, path, kind)])


def _home(tape: "Tape", h: str, session: str, live: set[str]) -> str:
    """The session a redaction of entry h is recorded in: the one whose files store it,
    else (the store cannot place it) `session`."""
    home = tape.store.session_of(h)
    return home if home in live else session


def redact_findings(tape: "Tape", findings: Iterable[Finding]) -> list[dict]:
    """Redact each finding in the session that stores its entry (`_home`; one run of
    records per session): a fork's finding in an entry of the session it forked from is
    recorded there, with the bytes."""
    by_session: dict[str, list] = {}
    live = set(tape.session_names())
    for f in findings:
        by_session.setdefault(_home(tape, f.hash, f.session, live), []).append((f.hash, f.path, f.kind))
    return [redact(tape, s, places) for s, places in sorted(by_session.items())]


def redact_scan(tape: "Tape", sessions: Optional[list[str]] = None, streams: Optional[list] = None) -> list[dict]:
    """Redact every finding of `scan`; the finds in interrupted streams, which are not
    entries yet (`recover` makes them one), are added to `streams` when it is given."""
    return _redact_found(tape, scan(tape, sessions), streams)


def redact_pattern(tape: "Tape", regex: str, sessions: Optional[list[str]] = None, kind: str = "pattern",
                   streams: Optional[list] = None) -> list[dict]:
    check_regex(regex)
    check_kind(kind)
    det = Detectors([{"kind": kind, "regex": regex}], entropy=False, builtin=False)
    return _redact_found(tape, scan(tape, sessions, detectors=det, include_allowed=True), streams)


def _redact_found(tape: "Tape", found: dict, streams: Optional[list]) -> list[dict]:
    """Redact a scan's findings; its finds in interrupted streams go to `streams`."""
    if streams is not None:
        streams += found["streams"]
    return redact_findings(tape, found["findings"])


def scrub_quarantine(store, red) -> dict:
    """Take redacted bytes out of quarantine/ too (SPEC 18: "no file of that copy"). A
    quarantined file is damaged and kept for recovery by hand, so it is never repacked:
    instead every record that holds a redacted object (a whole block when the object is
    inside one) is overwritten with zeros where it lies, and so is every other place of the
    file where the text of a redacted value still shows (as it is, or in a zstd frame that
    decompresses to it): a damaged region can hold a copy the records no longer name. Sizes
    and offsets stay, so what fsck --salvage wrote about the file stays true.
    `red` is compaction's Redacted. Returns {"files": N, "bytes": zeroed}."""
    import os

    from ..store import framing
    from ..store.files import fsync_dir, write_all, zstd

    qroot = os.path.join(store.root, "quarantine")
    out = {"files": 0, "bytes": 0}
    if not (red.blobs or red.entries) or not os.path.isdir(qroot):
        return out
    for folder, _, names in os.walk(qroot):
        for name in names:
            if name.endswith(".json") or name.startswith(".tmp-"):
                continue  # fsck --salvage's reports: offsets and counts, no values
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, store.root)
            with open(path, "rb") as f:
                data = f.read()
            ends = {r.offset: r.end for r in framing.scan(data) if isinstance(r, framing.Record)}
            spans, needles = [], set()
            for item in store.scan_file(rel):
                if not isinstance(item, framing.Record) or item.type != framing.T_OBJECT or len(item.body) < 34:
                    continue
                key = item.body[:32]
                if key not in red.blobs and key not in red.entries:
                    continue
                spans.append((item.offset, ends.get(item.offset, item.offset + len(item.body))))
                needles |= _values_of(store, item.body, red.entries.get(key, ()))
            needles = {n for n in needles if len(n) >= 8}
            for n in needles:
                i = data.find(n)
                while i >= 0:
                    spans.append((i, i + len(n)))
                    i = data.find(n, i + 1)
            spans += _frames_holding(data, needles, zstd())
            if not spans:
                continue
            buf = bytearray(data)
            for a, b in spans:
                buf[a:b] = bytes(b - a)
                out["bytes"] += b - a
            tmp = os.path.join(folder, f".tmp-scrub-{name}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                write_all(fd, bytes(buf))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            fsync_dir(folder)
            out["files"] += 1
    return out


def _values_of(store, rec_body: bytes, places) -> set[bytes]:
    """The text of each redacted value of one entry record, as it may show in a file: its
    UTF-8 and its JSON-escaped form (strings), or its canonical JSON (anything else)."""
    import json

    from ..model.canonical import canonical_json
    from ..model.errors import CorruptObject

    try:
        h = rec_body[:32].hex()
        _, body = store.decode_object(h, rec_body)
        raw = decode_entry(h, body)
    except (CorruptObject, ValueError, KeyError, TypeError):
        return set()
    out = set()
    for path, kind in places:
        try:
            found, value = redaction.get_at(raw, redaction.entry_path(path))
        except InvalidInput:
            continue
        if not found or value == redaction.marker(kind):
            continue
        if isinstance(value, str):
            out |= {value.encode("utf-8", "surrogateescape"), json.dumps(value, ensure_ascii=False)[1:-1].encode("utf-8", "surrogateescape")}
        else:
            out.add(canonical_json(value))
    return out


def _frames_holding(data: bytes, needles: set[bytes], z) -> list[tuple[int, int]]:
    """The byte ranges of the zstd frames in `data` that decompress to text holding a
    needle: alone, or with a dictionary of the file (a `Z` block's, which is a `D` record's
    content: the frames' texts before it are tried, the nearest first). Before, a `Z` block
    whose record check failed kept a redacted text that `zstd -d -D` recovered from the
    quarantined file (an audit). A frame that no way reads whole (damaged) counts by what
    it gives before the damage, as `zstd -d` prints it, and is zeroed to the next frame."""
    if not needles:
        return []
    view = memoryview(data)  # (a slice of bytes copied the rest of the file for each frame)
    magic = b"\x28\xb5\x2f\xfd"
    starts = []
    i = data.find(magic)
    while i >= 0:
        starts.append(i)
        i = data.find(magic, i + 1)
    out, needing, texts = [], [], []
    for j, i in enumerate(starts):
        text, used = _decompressed_at(z, view, i)
        if text is None:
            needing.append((j, i))  # compressed with a dictionary, or damaged
            continue
        if any(n in text for n in needles):
            out.append((i, i + used))
        if len(text) <= DICTIONARY_MAX:
            texts.append((i, text))
    dictionaries: dict[int, object] = {}

    def dictionary(at: int, text: bytes):
        if at not in dictionaries:
            dictionaries[at] = z.ZstdCompressionDict(text, dict_type=z.DICT_TYPE_RAWCONTENT)
        return dictionaries[at]

    for j, i in needing:
        before = sorted((t for t in texts if t[0] < i), key=lambda t: i - t[0])  # the nearest D before it first
        for at, text in before:
            got, used = _decompressed_at(z, view, i, dictionary(at, text))
            if got is not None:  # a wrong one fails: every block is written with its checksum
                if any(n in got for n in needles):
                    out.append((i, i + used))
                break
        else:  # damaged: what it gives before the damage, alone or with the nearest dictionary
            nxt = starts[j + 1] if j + 1 < len(starts) else len(data)
            parts = [_readable_part(z, view, i, nxt)] + ([_readable_part(z, view, i, nxt, dictionary(*before[0]))] if before else [])
            if any(n in part for part in parts for n in needles):
                out.append((i, nxt))
    return out


DICTIONARY_MAX = 1 << 20  # a `D` record's content is 64 KiB (store/segment.py): larger texts are no dictionary
_READ = 1 << 17


def _decompressed_at(z, view, i: int, dictionary=None) -> tuple[Optional[bytes], int]:
    """The text of the zstd frame at view[i:] and its length in the data, or (None, 0)."""
    try:
        d = (z.ZstdDecompressor() if dictionary is None else z.ZstdDecompressor(dict_data=dictionary)).decompressobj()
        got = bytearray()
        pos, end = i, min(len(view), i + (256 << 20))
        while pos < end and not d.eof:
            got += d.decompress(view[pos:min(end, pos + _READ)])
            pos = min(end, pos + _READ)
    except z.ZstdError:
        return None, 0
    if not d.eof:
        return None, 0
    return bytes(got), pos - i - len(d.unused_data)


def _readable_part(z, view, i: int, end: int, dictionary=None) -> bytes:
    """What a damaged frame at view[i:end] gives before the damage, fed a byte at a time
    (the output of the call that meets the damage is lost: this keeps it to one byte's)."""
    d = (z.ZstdDecompressor() if dictionary is None else z.ZstdDecompressor(dict_data=dictionary)).decompressobj()
    got = bytearray()
    try:
        for pos in range(i, end):
            got += d.decompress(view[pos:pos + 1])
    except z.ZstdError:
        pass
    return bytes(got)


def lost_redactions(tape: "Tape", records: Optional[Iterable[dict]] = None) -> list[tuple[str, str, str]]:
    """The redacted places this machine knows (its index) that no redaction record in the
    tape's files names any more, of objects the tape still holds: the file that recorded
    them went (an `rsync --delete`, or a backup restored, from a copy that did not have
    the redaction). This machine still shows the marker; another copy, or a fresh index,
    shows the text, and an rsync of the folder carries it. `records`: the ref records of
    every file, when the caller read them (fsck); else they are read here."""
    import json

    from ..store import framing

    store = tape.store
    if records is None:
        records = []
        for rel in store.list_files(None):
            for item in store.scan_file(rel):
                if isinstance(item, framing.Record) and item.type == framing.T_REF:
                    try:
                        rec = json.loads(item.body)
                    except ValueError:
                        continue
                    if isinstance(rec, dict):
                        records.append(rec)
    named = {(o, path) for rec in records for o, path, _ in redaction.record_items(rec)}
    return [(o, path, kind) for o, places in sorted(tape.redactions().items()) for path, kind in places
            if (o, path) not in named and store.has_object(o)]


def record_again(tape: "Tape", places: list[tuple[str, str, str]]) -> dict[str, int]:
    """Write redaction records for `places` again (lost_redactions), each in the session
    whose files hold its object: session -> places recorded."""
    by_session: dict[str, list[dict]] = {}
    store = tape.store
    for o, path, kind in places:
        loc = store.index.find_object(o)
        rel = store.index.path_of(loc[0]) if loc is not None else None
        parts = (rel or "").split("/")
        if len(parts) < 3 or parts[0] != "sessions":
            continue  # (a pack's shared folder: not placed in a session)
        by_session.setdefault(parts[1], []).append({"object": o, "path": path, "kind": kind})
    for s, items in by_session.items():
        for i in range(0, len(items), RECORD_ITEMS):
            tape.session(s).set_refs(redaction.OP, {}, redact=items[i:i + RECORD_ITEMS])
    return {s: len(items) for s, items in by_session.items()}

