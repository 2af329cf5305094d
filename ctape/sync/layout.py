"""The remote's key layout and its manifests (docs/remotes.md, "Key layout").

    ctape.json                               the tape's identity: written once (create-only)
    m/<uploader>/<n:020d>.json               manifest n of one uploading copy (its writer id)
    f/<session>/<file>/<start>-<end>         bytes [start, end) of a data file of the tape
    f/<session>/<file>/<start>-<end>.<gen>   the same, put again after deletion gen-1 of its file
    d/<compactor>/<n:020d>.json              plan n of one compacting copy: files to delete later
    x/<compactor>/<n:020d>.json              plan n carried out (the compactor's own bookkeeping)
    g/<n:020d>                               the n-th deletion on the remote and what it deletes (one GET tells a pusher)
    s/<compactor>/<n:020d>.json.zst          a summary: every uploader's manifests from 0, byte for byte (summary.py)

A compactor announces a deletion at g/<n> and in its next manifest ("deleted": the files,
each with the end the remote held) before it deletes anything, so readers learn it at no
extra cost; from g/<n> when that manifest is lost (lost_announcements).

A key is written once and never overwritten. A data file's bytes for a range are the same
in every copy (a segment only grows, by its one writer; a pack never changes), so two
copies that upload the same range write equal objects, and a refused create-only write is
checked by content. A manifest lists what one push added; a pull reads each uploader's
manifests from the next number it has not read, so a pull with nothing new costs one GET
per uploader (a miss), plus one listing of m/ to learn new uploaders.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from typing import Iterable, Iterator, Optional

from blake3 import blake3

from ..model.models import NAME_RE, brief, later_version
from .backend import Backend, LastingRemoteError, RemoteError, result_of, transfer_pool

IDENTITY = "ctape.json"
IDENTITY_FORMAT = "ctape-remote"
REMOTE_VERSION = 1  # the remotes this ctape reads and writes (read_identity refuses a later one)
MANIFEST_FORMAT = "ctape-remote-manifest"
DELETION_FORMAT = "ctape-remote-deletion"
MAX_MANIFEST = 64 << 20
MAX_FILE = 1 << 40
SEG_FILE = re.compile(r"([a-z0-9]{4,32})-(?:\d{20}|-\d{19})\.seg")  # (a minus: a segment made before 12-06 with a clock before 1970)
PACK_FILE = re.compile(r"pack-[0-9a-f]{32}\.pack")
UPLOADER = re.compile(r"[a-z0-9]{4,32}")
HASH = re.compile(r"[0-9a-f]{64}")


def manifest_key(uploader: str, n: int) -> str:
    return f"m/{uploader}/{n:020d}.json"


def plan_key(compactor: str, n: int, done: bool = False) -> str:
    return f"{'x' if done else 'd'}/{compactor}/{n:020d}.json"


def compaction_key(n: int) -> str:
    return f"g/{n:020d}"


def piece_key(session: str, file: str, start: int, end: int, gen: int = 0) -> str:
    """The key of a piece. `gen`: 0, or one more than the number of the last deletion of
    its file that its uploader had learned of (a file put again after a deletion goes under
    keys of its own, which that deletion's deletes never take: see `deletable`)."""
    return f"f/{session}/{file}/{start}-{end}" + (f".{gen}" if gen else "")


def listed_key(f: dict) -> str:
    """The key of a piece as a manifest lists it (session, file, start, end, gen)."""
    return piece_key(f["session"], f["file"], f["start"], f["end"], f.get("gen", 0))


def row_key(key: str, row: list) -> str:
    """The key of a piece this copy knows, from its row (note_have) of file `key`."""
    session, file = key.split("/", 1)
    return piece_key(session, file, row[0], row[1], row[4])


PIECE_NAME = re.compile(r"(\d{1,20})-(\d{1,20})(?:\.([1-9]\d{0,18}))?")


def deletable(name: str, end: int, n: int) -> bool:
    """May deletion n of a file, which covered it up to `end`, delete the piece stored
    under `name` (the last part of its key)? Only a piece within that range put by an
    uploader that had not learned of deletion n (generation <= n). A piece past the end is
    new bytes; one of a later generation was put again after the deletion (by a copy that
    read its announcement, perhaps before its deletes ran, under keys the deletes leave)."""
    m = PIECE_NAME.fullmatch(name)
    return bool(m) and int(m.group(2)) <= end and int(m.group(3) or 0) <= n


def generation(state, key: str) -> int:
    """The generation this copy puts a piece of file `key` ("session/file") under: one
    more than the last deletion of it this copy learned of (state["gens"]; kept after the
    file is there again, so that a file held again after its deletion goes up under keys
    that deletion's deletes never take)."""
    return int(state.get("gens", {}).get(key, 0))


def digest(data: bytes) -> str:
    return blake3(data).hexdigest()


def file_ok(session, file) -> bool:
    return isinstance(session, str) and isinstance(file, str) and bool(NAME_RE.fullmatch(session)) and not session.endswith(".lock") and bool(SEG_FILE.fullmatch(file) or PACK_FILE.fullmatch(file))


def identity(store) -> bytes:
    """`made`: a new random value each time a copy creates the remote, so that a remote
    emptied and pushed to again by another copy is told from the one this copy knew
    (remote.State.follow)."""
    return (json.dumps({"format": IDENTITY_FORMAT, "version": REMOTE_VERSION, "tape_id": store.tape_id, "tape_version": 2 if store.dictionaries else 1,
                        "made": secrets.token_hex(16)}, sort_keys=True) + "\n").encode()


def read_identity(backend: Backend) -> Optional[dict]:
    """The remote's identity, None when nothing was pushed yet; RemoteError for junk."""
    data = backend.get(IDENTITY)
    if data is None:
        return None
    try:
        meta = json.loads(data[: 1 << 16])
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != IDENTITY_FORMAT or not isinstance(meta.get("tape_id"), str) or not re.fullmatch(r"[0-9a-f]{1,64}", meta["tape_id"]):
        raise LastingRemoteError(f"{backend.url} holds something that is not a ctape remote ({IDENTITY} is not ctape's); use another prefix")
    version = meta.get("version", 1)
    if later_version(version, REMOTE_VERSION):
        # a later ctape raises it when it writes what this one would misread (an audit of
        # mixed versions: builds before generations read no version here, and misread a
        # remote that had them without a word)
        raise LastingRemoteError(f"{backend.url} was made by a newer ctape (remote version {brief(version, 20)}, this ctape knows {REMOTE_VERSION}); "
                                 "upgrade ctape to use it")
    return meta


def check_identity(store, backend: Backend, create: bool) -> Optional[dict]:
    """The remote's identity when it holds this tape, None when it holds nothing yet (with
    `create`, it gets this tape's identity, create-only). Another tape's remote is refused."""
    meta = read_identity(backend)
    if meta is None and create:
        mine = identity(store)
        if backend.put_if_absent(IDENTITY, mine):
            return json.loads(mine)
        meta = read_identity(backend)  # another copy wrote it meanwhile
    if meta is None:
        return None
    if meta["tape_id"] != store.tape_id:
        raise LastingRemoteError(f"{backend.url} holds another tape (id {meta['tape_id'][:12]}, this one is {store.tape_id[:12]}); use another prefix, or `ctape clone` it")
    return meta


def deletion_files(files: Iterable[dict]) -> list[dict]:
    """The files of a deletion as manifests, plans and announcements hold them: session,
    file, and the end up to which it goes."""
    return [{"session": f["session"], "file": f["file"], "end": f["end"]} for f in files]


def encode_manifest(store, uploader: str, n: int, files: list[dict], deleted: Optional[list[dict]] = None, g: int = 0,
                    deleted_g: int = 0, redacted: Iterable[str] = (), lost: Iterable[dict] = ()) -> bytes:
    t = time.time()
    body = {
        "format": MANIFEST_FORMAT,
        "version": 1,
        "tape_id": store.tape_id,
        "uploader": uploader,
        "n": n,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1e6) % 1000000:06d}Z",
        "files": files,
    }
    if g:
        body["g"] = g  # deletions (g/<n>) the uploader had learned of: its pieces come after them
    if deleted:
        body["deleted"] = deletion_files(deleted)
        body["deleted_g"] = deleted_g
        # the objects the compactor knew redacted: a copy that holds one and has not pulled
        # its redaction would upload its bytes again (push refuses; docs/remotes.md)
        body["redacted"] = sorted(redacted)
    lost = list(lost)
    if lost:
        body["lost"] = lost  # salvage reports of the sessions pushed (ctape/sync/losses.py)
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _load(data: bytes, fmt: str, limit: int = MAX_MANIFEST) -> tuple[Optional[dict], str]:
    """A remote's JSON document of format `fmt`, version 1: (it, "") or (None, why not;
    "" when it is JSON but not that format)."""
    if len(data) > limit:
        return None, "too large"
    try:
        m = json.loads(data)
    except (ValueError, RecursionError):  # (nested past the parser's depth: junk)
        return None, "not JSON"
    if not isinstance(m, dict) or m.get("format") != fmt or m.get("version") != 1:
        return None, ""
    return m, ""


def decode_manifest(data: bytes, tape_id: str, uploader: str, n: int) -> tuple[Optional[dict], str]:
    """(manifest, "") or (None, why it is not one: junk another tool wrote)."""
    m, why = _load(data, MANIFEST_FORMAT)
    if m is None:
        return None, why or "not a ctape manifest"
    if m.get("tape_id") != tape_id or m.get("uploader") != uploader or m.get("n") != n:
        return None, "names another tape, uploader or number than its key"
    files = m.get("files")
    if not isinstance(files, list):
        return None, "no file list"
    good = []
    for f in files:
        if not isinstance(f, dict) or not file_ok(f.get("session"), f.get("file")):
            return None, "a file entry with a bad name"
        s, e, h = f.get("start"), f.get("end"), f.get("blake3")
        if not (type(s) is int and type(e) is int and 0 <= s < e <= MAX_FILE) or not (isinstance(h, str) and HASH.fullmatch(h)):
            return None, "a file entry with a bad range or hash"
        if PACK_FILE.fullmatch(f["file"]) and s != 0:
            return None, "a pack in pieces"
        gen = f.get("gen", 0)  # absent before generations: 0
        if type(gen) is not int or not 0 <= gen < 1 << 62:
            return None, "a file entry with a bad generation"
        good.append({"session": f["session"], "file": f["file"], "start": s, "end": e, "blake3": h})
        if gen:
            good[-1]["gen"] = gen
    m["files"] = good
    deleted = m.get("deleted", [])
    if not isinstance(deleted, list) or not all(_deletion_ok(f) for f in deleted):
        return None, "a deleted entry with a bad name or end"
    m["deleted"] = deletion_files(deleted)
    redacted = m.get("redacted", [])  # absent in manifests of versions before it
    if not isinstance(redacted, list) or not all(isinstance(h, str) and HASH.fullmatch(h) for h in redacted):
        return None, "a bad list of redacted objects"
    m["redacted"] = redacted
    # salvage reports: absent in manifests of versions before them, and when none. Only a
    # hint of what was lost: one that does not read as one is left out, the files stay
    lost = m.get("lost", [])
    m["lost"] = [{k: x[k] for k in LOSS_KEYS if k in x} for x in lost if loss_ok(x)] if isinstance(lost, list) else []
    for k in ("g", "deleted_g"):
        if type(m.get(k, 0)) is not int or not 0 <= m.get(k, 0) < 1 << 62:
            return None, f"a bad {k}"
        m[k] = m.get(k, 0)
    return m, ""


LOSS_KEYS = ("file", "time", "lost", "missing", "missing_keys", "kept_at", "copy")


def loss_ok(x) -> bool:
    """A salvage report as a manifest carries it: the data file it was about, when, what
    was lost (a short text), the entries and values gone, where the damaged file is kept
    on the copy that salvaged it, and that copy's writer id."""
    if not isinstance(x, dict) or not all(isinstance(x.get(k), str) and 0 < len(x[k]) <= 300 for k in ("file", "time", "lost", "kept_at")):
        return False
    parts = x["file"].split("/")
    if len(parts) != 3 or parts[0] != "sessions" or not file_ok(parts[1], parts[2]):
        return False
    missing = x.get("missing")
    if not isinstance(missing, list) or not all(isinstance(h, str) and HASH.fullmatch(h) for h in missing):
        return False
    keys = x.get("missing_keys", [])  # objects named by the index's key only (ctape/ops/salvage.py)
    if not isinstance(keys, list) or not all(type(k) is int and -(1 << 63) <= k < 1 << 63 for k in keys):
        return False
    return "copy" not in x or (isinstance(x["copy"], str) and bool(UPLOADER.fullmatch(x["copy"])))


def _deletion_ok(f) -> bool:
    return isinstance(f, dict) and file_ok(f.get("session"), f.get("file")) and type(f.get("end")) is int and 0 < f["end"] <= MAX_FILE


def note_manifest(state, m: dict) -> None:
    """What one manifest says the remote holds, and what a remote compaction deleted."""
    ends: dict[tuple, int] = {}  # where the push that wrote this manifest ended each file
    for f in m["files"]:
        k = (f["session"], f["file"])
        ends[k] = max(ends.get(k, 0), f["end"])
    for f in m["files"]:
        note_have(state, f, m["g"], push_end=f["end"] == ends[(f["session"], f["file"])])
    # how many deletions the remote announced, as far as this manifest tells: one this copy
    # never reads the manifest of is learnt from its announcement (lost_announcements)
    state["g_seen"] = max(int(state.get("g_seen", 0)), m["g"], m["deleted_g"] + 1 if m["deleted"] else 0)
    if m["deleted"]:  # deletion deleted_g is learnt (push looks at its g/<n> until then)
        note_deletion(state, m["deleted_g"], m["deleted"], m["redacted"])
    for x in m["lost"]:  # a salvage report the remote holds: never sent again
        state.setdefault("losses", {})[loss_digest(x)] = 1


def note_deletion(state, g: int, files: list[dict], redacted: Iterable[str]) -> None:
    """Deletion g (g/<g>) took `files` off the remote, each up to its end; its compactor
    knew `redacted` redacted. From its manifest or from its announcement."""
    for f in files:
        note_gone(state, f, g)
    read = state.setdefault("deletions_read", [])
    if g not in read:
        read.append(g)
    table = state.setdefault("redacted", {})  # `remote show` keeps no such table
    for h in redacted:
        table[h] = g


def loss_digest(x: dict) -> str:
    """A salvage report's identity (ops.maintenance.report_identity): the same on every
    copy that holds it, however it came."""
    from ..ops.maintenance import report_identity

    return report_identity(x)


def uploaders(backend: Backend) -> list[str]:
    """The copies that pushed (one listing of m/ with a delimiter; junk names ignored)."""
    out = []
    for key, _, is_prefix in backend.list("m/", "/"):
        name = key[2:].rstrip("/")
        if is_prefix and UPLOADER.fullmatch(name):
            out.append(name)
    return out


def manifest_numbers(backend: Backend, uploader: str, first: int = 0) -> list[int]:
    """The numbers of an uploader's manifests on the remote from `first` on, in order (one
    listing; keys that are not a manifest's are left out)."""
    return sorted(manifest_sizes(backend, uploader, first))


def manifest_sizes(backend: Backend, uploader: str, first: int = 0) -> dict[int, tuple[int, float]]:
    """manifest_numbers, each with the size of its key and when the store wrote it (what a
    summary's copy is checked by: summary.py)."""
    out = {}
    for key, size, when in backend.stamped(f"m/{uploader}/", start_after=manifest_key(uploader, first - 1) if first > 0 else None):
        name = key.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit() and key == manifest_key(uploader, int(name[:-5])):
            out[int(name[:-5])] = (size, when)
    return out


def own_number(store, state) -> Optional[int]:
    """The number of this copy's next manifest, as its state says: None when unknown, or
    noted under another writer id (CTAPE_WRITER set for some runs and not others), or by a
    version before writer ids were noted with it (push then lists its manifests once)."""
    own = state.get("own")
    return own if isinstance(own, int) and state.get("own_writer") == store.writer else None


def _first_unread(store, state, cursor: str, u: str, own: int) -> int:
    """Where new_manifests lists uploader u from: the first manifest not read; for this
    copy's own, the last it wrote (to see that one gone too)."""
    n = int(state[cursor].get(u, 0))
    return min(n, own - 1) if u == store.writer and own else n


def new_manifests(store, backend: Backend, state, warn, cursor: str = "next", summaries=None) -> Iterator[tuple[str, int, dict]]:
    """Every manifest not read yet, uploader by uploader, in order: (uploader, n, manifest).
    Moves state[cursor] on as it goes (the caller saves the state when it is done): "next"
    for pull (whose files it brought in), "seen" for push (what it learned is there).

    One listing of each uploader's manifests from the first not read (a pull with nothing
    new costs that listing, as it cost one GET that missed before), then a GET of each. A
    number the listing skips, that a GET does not find either, is a manifest the remote
    lost (deleted from the bucket, or a backup restored over it): said once, noted in
    state["gaps"] (compact --remote then deletes no piece that no manifest lists: the lost
    one may list it), and read past. Before, reading stopped there for good: every later
    push of that copy was invisible to every copy that had not read it, and a sweep
    deleted its pieces (found by an audit). This copy's own manifests are listed from the
    last it wrote, to see that one gone too. Either way state["relearn"] tells this copy's
    next push to learn the remote again and put back what it holds that the manifests there
    do not list (push.py): what a lost manifest listed may be held by any copy.

    With `summaries` (summary.Summaries), an uploader with its `worth` manifests or more to
    read (a clone, a copy away for long, `remote show`) has those the newest summary holds
    as their keys do read from it: one GET for them all (summary.py). This copy's own are
    always read from the keys."""
    own = own_number(store, state) or 0
    names = uploaders(backend)
    if own and store.writer not in names:
        names.append(store.writer)  # every manifest of this copy gone: it must look at its own
    gaps = state.setdefault("gaps", {})
    # each uploader's listing from the first not read, up to GETS_IN_FLIGHT of them under
    # way at once: a pull lists every copy that ever pushed, one round trip each, and one
    # after the other that was most of a pull with nothing new once a remote had dozens
    firsts = {u: _first_unread(store, state, cursor, u, own) for u in names}
    listings = calls_in_order(lambda u: manifest_sizes(backend, u, firsts[u]), names)
    for u, listed in zip(names, listings):
        n = int(state[cursor].get(u, 0))
        # a lost manifest that came back (restored by hand; filled, empty, by its writer) is
        # read now: its number is behind the cursor, and what it lists was never noted
        # (the sweep keeps unlisted pieces until then: prune._unreadable)
        for key in sorted(k for k in gaps if k.startswith(f"m/{u}/")):
            k = int(key[len(f"m/{u}/"):-5])
            data = backend.get(key) if k < n else None
            if data is not None:
                del gaps[key]
                m, why = decode_manifest(data, store.tape_id, u, k)
                if m is None:
                    warn(f"ignored {key} on the remote: {why}")
                    state.setdefault("ignored", {})[key] = why
                else:
                    yield u, k, m
        first = firsts[u]
        if u == store.writer and own and own - 1 not in listed and own - 1 >= first and backend.get(manifest_key(u, own - 1)) is None:
            state["relearn"] = True
        top = max([k for k in listed if k >= n], default=n - 1)
        if u == store.writer and own:
            top = max(top, own - 1)  # this copy's own numbers past the listing went too
        elif summaries is not None and top + 1 - n >= summaries.worth:
            # many to read (a clone, a copy away for long): those a summary holds as their
            # keys do are read from it, in one GET (summary.py)
            s = summaries.reaching(u, n)
            if s is not None:
                end = min(s.usable(u, n, listed), top + 1)
                for k in range(n, end):
                    gaps.pop(manifest_key(u, k), None)  # (restored since it was found missing)
                    yield u, k, s.manifests[u][k]
                    state[cursor][u] = k + 1
                n = max(n, end)
        for k, data in zip(range(n, top + 1), gets_in_order(backend, [manifest_key(u, k) for k in range(n, top + 1)])):
            # (one the listing skipped: looked for again)
            if data is None:
                if manifest_key(u, k) not in gaps:
                    state["relearn"] = True
                    warn(f"the remote lacks {manifest_key(u, k)} (deleted from the bucket, or a backup restored over it): what it listed "
                         f"may be missing here; the next push of each copy that holds it puts it back")
                gaps[manifest_key(u, k)] = 1
            else:
                gaps.pop(manifest_key(u, k), None)
                m, why = decode_manifest(data, store.tape_id, u, k)
                if m is None:
                    warn(f"ignored {manifest_key(u, k)} on the remote: {why}")
                    # its pieces would look unlisted: compact --remote deletes none of those
                    state.setdefault("ignored", {})[manifest_key(u, k)] = why
                else:
                    yield u, k, m
            state[cursor][u] = k + 1


GETS_IN_FLIGHT = 16  # a clone's reads of manifests: as many connections as the S3 client keeps (backend.py)


def gets_in_order(backend: Backend, keys: list[str]) -> Iterator[Optional[bytes]]:
    """backend.get of each key, in order, with up to GETS_IN_FLIGHT requests under way: a
    clone reads every manifest the remote ever had, and one at a time that was a round trip
    each (1,082 of them after 200 days of a team's remote, tens of thousands after a month
    of `push --follow`; found by an audit of what grows with a tape's age). A few keys are
    read one after the other, as before. Manifests never change once written, so reading
    ahead sees what reading in turn would."""
    return calls_in_order(backend.get, keys)


def calls_in_order(fn, args: list) -> Iterator:
    """fn(a) for each a of args, in order, with up to GETS_IN_FLIGHT calls under way (each
    a request to the remote); two or fewer are made one after the other."""
    if len(args) <= 2:
        for a in args:
            yield fn(a)
        return
    from collections import deque

    # the reader that stops (an error, an interrupt, a generator closed) does not wait for
    # the requests under way (a hung server held a Ctrl-C for the client's timeouts; found
    # in review). Read to the end, none is under way
    with transfer_pool(min(GETS_IN_FLIGHT, len(args))) as pool:
        ahead = deque(args)
        under_way = deque(pool.submit(fn, ahead.popleft()) for _ in range(min(GETS_IN_FLIGHT, len(ahead))))
        while under_way:
            out = result_of(under_way.popleft())
            if ahead:
                under_way.append(pool.submit(fn, ahead.popleft()))
            yield out


UNLISTED_WAIT = 3600.0  # s: a deletion announced with no manifest after this long was never carried out


def local_files(store) -> dict[tuple[str, str], int]:
    """This copy's session files: (session, file name) -> size."""
    out = {}
    for rel, size in store.list_files(None).items():
        parts = rel.split("/")
        if len(parts) == 3 and parts[0] == "sessions":
            out[(parts[1], parts[2])] = size
    return out


def pass_read_deletions(state) -> None:
    """Move `gnext` past the deletions this copy has read (their manifests, or their
    announcements), so a push looks only at the announcements after them: a new clone's
    first push GOT every g/<n> the remote had ever announced, one request each (201 after
    200 nightly compactions; found by an audit of what grows with a tape's age). Push's own
    look (push._new_deletions) passes them the same way, after reading them."""
    read = set(state.get("deletions_read", []))
    n = start = int(state.get("gnext", 0))
    while n in read:
        n += 1
    if n != start:
        state["gnext"] = n
        state["deletions_read"] = sorted(g for g in read if g >= n)
        state["unlisted"] = {k: t for k, t in state.get("unlisted", {}).items() if int(k) >= n}


def lost_announcements(store, backend: Backend, state, warn) -> int:
    """The deletions of a remote compaction this copy never read the manifest of (lost:
    deleted from the bucket, or a backup restored over it; its writer may have filled its
    number with an empty one since), learnt from their announcements; how many. A reader
    that never learns such a deletion fetches the pieces it took (a new clone warned `the
    remote lacks f/...`: the sync model's long run, seeds 3056 and 3073), and a pusher
    that holds such a file does not compact it first, so an entry only that file held,
    which a claim of that copy reached, never reached the remote.

    Which: those below `g_seen` (the count of deletions some manifest's uploader had
    learned of, or a push found announced) that this copy neither read nor passed
    (`gnext`); and, while a manifest is missing (`gaps`), any a listing of g/ from there
    shows (the lost one may be the last that could count it). None on the usual path."""
    read = set(state.get("deletions_read", []))
    floor = int(state.get("gnext", 0))
    numbers = {g for g in range(floor, int(state.get("g_seen", 0))) if g not in read}
    if state.get("gaps"):
        for key, _, is_prefix in backend.list("g/", start_after=compaction_key(floor - 1) if floor else None):
            name = key[2:]
            if not is_prefix and name.isdigit() and key == compaction_key(int(name)) and int(name) not in read:
                numbers.add(int(name))
    learnt = 0
    for g in sorted(numbers):
        if learn_announcement(store, backend, state, g, backend.get(compaction_key(g)), warn):
            learnt += 1
    return learnt


def learn_announcement(store, backend: Backend, state, g: int, data: Optional[bytes], warn, fallback: bool = True) -> bool:
    """Learn deletion g from its announcement `data` (g/<g>): the files it deletes and the
    objects its compactor knew redacted. An announcement written before it carried them
    names the plan: its execution record (x/), written before any piece is deleted, gives
    the files (with `fallback`; a push that has the manifests to read yet does not look);
    none yet, nothing is deleted yet, and after UNLISTED_WAIT its compactor is taken to
    have died before it deleted anything (as a push judges: `unlisted`). True when the
    deletion is learnt."""
    def junk() -> bool:  # not a deletion: noted as read, so it is not looked at again
        state.setdefault("deletions_read", []).append(g)
        return False

    if data is None:
        return False
    try:
        a = json.loads(data)
        compactor, plan = a["compactor"], a["plan"]
    except (ValueError, TypeError, KeyError):
        return junk()  # not one ctape wrote: no deletion to learn
    if not (isinstance(compactor, str) and UPLOADER.fullmatch(compactor) and type(plan) is int and plan >= 0):
        return junk()
    files, redacted = a.get("files"), a.get("redacted", [])
    if files is None:
        if not fallback:
            return False
        x = backend.get(plan_key(compactor, plan, done=True))
        if x is None:
            waiting = state.setdefault("unlisted", {})
            if time.time() - waiting.setdefault(str(g), time.time()) >= UNLISTED_WAIT:
                state.setdefault("deletions_read", []).append(g)  # never carried out: nothing to learn
            return False
        done, why = decode_deletion(x, store.tape_id, compactor, plan, True)
        if done is None:
            warn(f"ignored {plan_key(compactor, plan, done=True)} on the remote: {why}")
            return False
        files, redacted = done["files"], []
    if not (isinstance(files, list) and all(_deletion_ok(f) for f in files)
            and isinstance(redacted, list) and all(isinstance(h, str) and HASH.fullmatch(h) for h in redacted)):
        warn(f"ignored {compaction_key(g)} on the remote: not a deletion ctape wrote")
        return junk()
    note_deletion(state, g, files, redacted)
    return True


def note_have(state, f: dict, g: int = 0, push_end: bool = True) -> None:
    """The remote holds f's piece: remember it (state["pieces"]: [start, end, blake3, g,
    gen, push_end], gen naming its key: `piece_key`; push_end 1 when a push ended the file
    there, 0 for a piece a longer one of the same push follows: a pull stops only at
    such an end, pull._apply; rows of an older state have no push_end and count as ends)
    and extend the known prefix of its file (state["have"]) over the pieces that join on
    from 0. `g` is how many deletions (g/<n>) its uploader had learned of: a piece of a
    deleted file listed by an uploader that had not seen the deletion was deleted with
    it; one listed after it (a copy that uploaded the file again) is there."""
    k = f"{f['session']}/{f['file']}"
    gone = state.get("gone", {}).get(k)
    if gone and f["end"] <= gone[0] and g <= gone[1] and f.get("gen", 0) <= gone[1]:
        # deleted by a remote compaction (note_gone): listed by an uploader that had not
        # learned of it (`g`), under a key its deletes take (`gen`; an uploader can learn
        # a deletion of a file, and put it again under the next generation, while its count
        # of deletions still waits for an earlier announcement's manifest)
        return
    pieces = state["pieces"].setdefault(k, [])
    row = [f["start"], f["end"], f["blake3"], g, f.get("gen", 0), int(push_end)]
    for p in pieces:
        if p[:3] == row[:3]:
            if len(p) > 5:
                p[5] = max(p[5], row[5])
            # the same piece listed again: by a copy that uploaded it again after a deletion
            # (the key is the same, so is what it holds). The latest listing says when it was
            # last put there: keeping the first made a later manifest's deletion take the
            # piece off, for a reader that read both listings first (a fresh clone lacked a
            # session the remote held whole)
            p[3] = max(p[3], g)
            p[4] = max(p[4], row[4])  # fetched from the latest key: the one a deletion takes last
            return
    pieces.append(row)
    pieces.sort()
    _extend(state, k)


def _extend(state, k: str) -> None:
    gone = state.get("gone", {}).get(k)
    end = gone[0] if gone else 0
    for p in state["pieces"].get(k, []):
        if p[0] <= end < p[1]:
            end = p[1]
    state["have"][k] = max(end, int(state["have"].get(k, 0)) if gone else end)


def known_pieces(state, key: str) -> list[dict]:
    session, file = key.split("/", 1)
    return [{"session": session, "file": file, "start": p[0], "end": p[1], "blake3": p[2], "gen": p[4], "push_end": p[5] if len(p) > 5 else 1}
            for p in state["pieces"].get(key, [])]


def segment_owner(file: str) -> Optional[str]:
    m = SEG_FILE.fullmatch(file)
    return m.group(1) if m else None


def pack_ok(file: str, data: bytes) -> bool:
    return file == f"pack-{blake3(data).hexdigest()[:32]}.pack"


def encode_deletion(store, compactor: str, n: int, files: list[dict], done: bool, t: Optional[float] = None) -> bytes:
    """A plan (d/) or its execution (x/): the files, each with the end the remote held.
    `t`: the plan's time (default now; a part of a plan that waits keeps the plan's)."""
    t = time.time() if t is None else t
    body = {
        "format": DELETION_FORMAT,
        "version": 1,
        "tape_id": store.tape_id,
        "compactor": compactor,
        "n": n,
        "done": done,
        "time": t,
        "files": deletion_files(files),
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def decode_deletion(data: bytes, tape_id: str, compactor: str, n: int, done: bool) -> tuple[Optional[dict], str]:
    """(plan, "") or (None, why it is not one)."""
    m, why = _load(data, DELETION_FORMAT)
    if m is None or m.get("done") is not done:
        return None, why or "not a ctape deletion plan"
    if m.get("tape_id") != tape_id or m.get("compactor") != compactor or m.get("n") != n or not isinstance(m.get("time"), (int, float)):
        return None, "names another tape, compactor or number than its key"
    files = m.get("files")
    if not isinstance(files, list):
        return None, "no file list"
    if not all(_deletion_ok(f) for f in files):
        return None, "a file entry with a bad name or end"
    return m, ""


def note_gone(state, f: dict, n: int) -> None:
    """Deletion n (g/<n>) took f's file off the remote up to f["end"]: the pieces listed
    before it are no longer there to fetch, and what it held up to there counts as uploaded
    (it lives on in the packs that replaced it)."""
    k = f"{f['session']}/{f['file']}"
    old = state["gone"].get(k)
    state["gone"][k] = [max(old[0] if old else 0, f["end"]), max(old[1] if old else 0, n)]
    gens = state.setdefault("gens", {})
    gens[k] = max(int(gens.get(k, 0)), n + 1)
    state["pieces"][k] = [p for p in state["pieces"].get(k, []) if p[1] > f["end"] or p[3] > n or p[4] > n]
    if not state["pieces"][k]:
        del state["pieces"][k]
    state["have"][k] = max(int(state["have"].get(k, 0)), f["end"])
