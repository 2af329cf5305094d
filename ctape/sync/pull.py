"""pull and clone: bring in what this copy lacks, as rsync would, and let the index merge.

The manifests not read yet name pieces of data files. For each file:
- a pack that is not here is downloaded, checked against its name, and appears whole;
- a segment of another writer grows by the pieces that join on at its end, all of this
  pull's at once: a segment not here yet appears whole (a file with no name, linked in),
  and one that is here is replaced whole by a file of its bytes and the new ones (under
  the session's lock, synced, renamed over it), as rsync replaces a file. So the local
  file is always a prefix of its writer's file at a length a push read it at, which its
  writer saw (push seals the segment: docs/remotes.md), exactly what rsync could have
  copied; never a length cut inside a piece by a kill, or between two pieces of one push,
  which a plain `rsync -a` of this copy back to the writer's would have put over the
  writer's longer file (found by an audit: the acknowledged appends after the cut were
  gone there);
- this copy's own segments are never touched (its own are always at least as long here);
- like rsync without --delete, a file this copy lacks comes (back) even when this copy
  had it and compacted it away: its records may be needed again (a claim that a local
  deletion had not seen revives a branch whose entries the compaction freed).
Then the store's normal index refresh reads the new bytes, and the sync rules of
docs/format.md section 12 decide the refs: nothing here merges anything.

Killed at any instant, the tape holds each file as it was or as this pull made it, and the
manifest cursor is not moved, so a rerun completes it (a temporary `.tmp-seg-*` file may be
left, which fsck names).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import time
from typing import Callable, Iterable, Optional

from ..model.errors import CtapeError, InvalidInput
from ..model.refs import CONFLICT
from ..store.files import check_not_symlink, copy_bytes, fsync_dir, make_folder, storage_error, uninterrupted, write_all
from ..store.segment import new_file_whole as _new_file
from ..store.store import Store
from . import layout, losses, summary
from .backend import Backend, RemoteError, result_of, transfer_pool
from .remote import State, held

_LOCK = "remote-pull.lock"
WORKERS = 8  # downloads at once
BATCH_BYTES = 64 << 20  # fetched ahead of the writes at most (about)


class _Held:
    """flock on a file or folder fd, released on exit; `busy` is called once when another
    holds it (before this one waits)."""

    def __init__(self, path: str, folder: bool = False, busy: Optional[Callable[[], None]] = None):
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY) if folder else os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self.busy = busy

    def __enter__(self):
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if self.busy is not None:
                self.busy()
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def _session_folder(store, session: str) -> str:
    return make_folder(os.path.join(store.root, "sessions", session))


def _extend_whole(folder: str, name: str, at: int, data: bytes) -> bool:
    """Replace folder/name, if it is exactly `at` bytes long, by a file of its bytes and then
    `data`, whole (a new file synced, then renamed over it; the folder synced), under the
    session's lock (so compaction's freeze sees the one or the other); False when it is
    not that long (or gone). Killed at any instant, the name holds the old file or the new
    one, never a part of `data`."""
    path = os.path.join(folder, name)
    with _Held(folder, folder=True):
        try:
            src = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return False
        tmp = None
        try:
            st = os.fstat(src)
            if st.st_size != at:
                return False
            tmp = os.path.join(folder, f".tmp-seg-{secrets.token_hex(6)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, st.st_mode & 0o777)
            try:
                copy_bytes(src, fd, at)
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, path)
            tmp = None
        finally:
            os.close(src)
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
    fsync_dir(folder)
    return True


def _get_piece(backend: Backend, f: dict, warn) -> tuple[Optional[bytes], Optional[str]]:
    """A piece's bytes, checked against its manifest; or None and why ("missing",
    "damaged") when the remote lacks it or holds other bytes."""
    key = layout.listed_key(f)
    data = backend.get(key)
    if data is None:  # deleted by a compaction of the remote since its manifest was read, say
        warn(f"the remote lacks {key}, which a manifest lists; skipped")
        return None, "missing"
    if len(data) != f["end"] - f["start"] or layout.digest(data) != f["blake3"]:
        warn(f"the remote's {key} does not match its manifest; skipped")
        return None, "damaged"
    return data, None


PULL_AGAIN = "what arrived before is kept, whole; pull again for the rest"


def pull(tape, backend: Backend, name: str, sessions: Iterable[str] = (), warn: Callable[[str], None] = lambda s: None,
         progress: Optional[Callable[[int, int], None]] = None, after: str = PULL_AGAIN) -> dict:
    """`after`: what a failed write says is left (a clone removes what it wrote)."""
    with held(tape.store, name, warn):
        return _pull(tape, backend, name, sessions, warn, progress, after)


def _pull(tape, backend: Backend, name: str, sessions: Iterable[str], warn: Callable[[str], None],
          progress: Optional[Callable[[int, int], None]], after: str) -> dict:
    store = tape.store
    t0 = time.monotonic()
    wanted = set(sessions)
    state = State.load(store, name, backend.url)
    if not state.get("checked"):
        backend.check()
    meta = layout.check_identity(store, backend, create=False)
    if meta is None:
        if state.get("made") or state["next"]:
            # this copy read a tape there before: emptied since, or another place than meant
            # (a typo in the endpoint that reaches another server said only "no tape yet")
            warn(f"{name} held this tape when this copy last pulled or pushed, and holds none now: it was emptied, or its "
                 f"URL or endpoint now names another place (see `ctape remote show {name}`)")
        state.forget()
        state.save(store)
        return {"remote": name, "files": 0, "bytes": 0, "requests": backend.requests, "empty": True}
    state.follow(meta)  # emptied and pushed to again since this copy last read it: read from the start
    state["checked"] = True
    with pull_turn(store, warn):
        start_next = dict(state["next"])
        lost = []
        together: dict[str, set[str]] = {}  # (pull -s) session -> the others a push sent with it
        for _, _, m in layout.new_manifests(store, backend, state, warn, summaries=summary.for_reader(store, backend, state, warn)):
            layout.note_manifest(state, m)
            lost += m["lost"]
            names = {f["session"] for f in m["files"]}
            for s in names & wanted:
                together.setdefault(s, set()).update(names - wanted)
        layout.lost_announcements(store, backend, state, warn)
        layout.pass_read_deletions(state)
        for s in sorted(wanted - {key.split("/", 1)[0] for key in state["pieces"]}):
            # a typo would look like an up-to-date copy; a session another machine has yet to
            # push is no mistake, so a script that pulls it in a loop goes on (exit 0)
            warn(f"{name} holds no session {s!r} (yet); see `ctape remote show {name}` for the sessions it holds")
        jobs = missing(store, state, wanted)
        # the branches of each session here that gets bytes, to say which conflicts the pull
        # made (a session new to this copy has none: a clone reads no refs here)
        branches_before = branches_of(tape, {s for s, _, _ in jobs})
        got, files, skipped = fetch(store, backend, jobs, warn, progress, after)
        # (pull -s) the chosen sessions that got files and refer to what this copy lacks
        lack = _lacking_sessions(tape, wanted & set(together) & {s for s, _, _ in jobs}) if wanted and together else set()
        if lack:
            extra = sorted(set().union(*(together[s] for s in lack)) - wanted)
            if extra:
                # `push -s` sends the files of the sessions that hold what the chosen ones
                # refer to (a session made by `session cp`, a value stored once per tape)
                # with them; `pull -s` brought the chosen ones only, which then could not be
                # read (found by an audit)
                warn(f"also pulling the files of session{'s' if len(extra) > 1 else ''} {', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}: "
                     "the chosen sessions refer to what they hold")
                wanted |= set(extra)
                branches_before.update(branches_of(tape, set(extra)))  # (a conflict made in one of them is said too)
                more = fetch(store, backend, missing(store, state, set(extra)), warn, progress, after)
                got, files, skipped = got + more[0], files + more[1], {k: n + more[2][k] for k, n in skipped.items()}
                lack = _lacking_sessions(tape, lack)
            still = sorted(lack)
            if still:
                # what it refers to went up with another push than its own: which session
                # holds it, a remote does not say
                warn(f"session{'s' if len(still) > 1 else ''} {', '.join(still[:5])} refer{'' if len(still) > 1 else 's'} to entries or "
                     f"values that other sessions on {name} hold: pull them too (`ctape pull {name}` brings every session)")
        try:  # what salvages on other copies found lost: read as lost here too
            reports = losses.write_pulled(store, lost, name, wanted)
        except OSError as e:
            raise storage_error(e, "quarantine/", after=after) from None
        if wanted:  # a partial pull: the next full pull reads these manifests again
            state["next"] = start_next
        else:  # every report is written: those push kept for what it brings in (push._bring_in) can go
            state["lost_read"] = {}
        for u, n in state["next"].items():
            if int(state["seen"].get(u, 0)) < n:
                state["seen"][u] = n
        state.save(store)
    moved = time.monotonic() - t0
    tape.store.refresh()  # what the next command would do anyway: the index reads the new bytes
    conflicts = conflicts_made(tape, branches_before)
    return {"remote": name, "files": files, "bytes": got, "requests": backend.requests, "skipped": skipped, "salvage_reports": reports,
            "conflicts": conflicts, "transfer_seconds": round(moved, 3), "index_seconds": round(time.monotonic() - t0 - moved, 3)}


def _lacking_sessions(tape, sessions: set[str]) -> set[str]:
    """Those of the sessions that refer to what this copy lacks (lacking), its index
    brought up to date with the files first."""
    tape.store.refresh()
    return {s for s in sessions if lacking(tape, s)}


def lacking(tape, session: str) -> bool:
    """Does the session refer to an object this copy lacks: an entry its ref records set,
    or the parent or a large value of an entry its files hold? (As fsck's "has not arrived
    yet": a tip alone missed an append made after a `session cp`, found in review.) One
    read of the session's files."""
    from ..model.canonical import blob_refs
    from ..model.schema import decode_entry
    from ..store import framing
    from ..store.files import TYPE_ENTRY

    store = tape.store
    named: set[str] = set()
    for rel in store.list_files(session):
        for item in store.scan_file(rel):
            if not isinstance(item, framing.Record):
                continue
            if item.type == framing.T_OBJECT and len(item.body) > 33 and item.body[32] == TYPE_ENTRY:
                h = item.body[:32].hex()
                try:
                    raw = decode_entry(h, store.decode_object(h, item.body)[1])
                except (CtapeError, ValueError, KeyError, TypeError):
                    continue  # damage is fsck's to say
                named.update(blob_refs([raw.get("payload"), raw.get("meta"), raw.get("delta")], []))
                if raw.get("parent"):
                    named.add(raw["parent"])
            elif item.type == framing.T_REF:
                try:
                    rec = json.loads(item.body)
                except ValueError:
                    continue
                sets = rec.get("set") if isinstance(rec, dict) else None
                if isinstance(sets, dict):
                    named.update(v for v in sets.values() if isinstance(v, str) and len(v) == 64)
    return any(not store.has_object(h) for h in named)


def branches_of(tape, sessions) -> dict[str, set[str]]:
    """The branches of each of `sessions` this copy holds (a session new to it has none), to
    tell afterwards which conflicts bringing files in made (conflicts_made)."""
    return {s: set(tape.session(s).refs().branches) for s in sessions if tape._session_exists(s)}


def conflicts_made(tape, before: dict[str, set[str]]) -> dict[str, list[str]]:
    """session -> the conflict branches made since `before` (branches_of): a branch both
    this copy and another moved is now two (docs/sync.md, "Conflicts")."""
    out = {}
    for s, had in sorted(before.items()):
        made = sorted(b for b in set(tape.session(s).refs().branches) - had if CONFLICT in b)
        if made:
            out[s] = made
    return out


def conflict_lines(conflicts: dict[str, list[str]], name: str) -> list[str]:
    """What to say of `conflicts` (conflicts_made), which remote NAME brought: HEAD may now be
    on the other copy's side, and an agent appending on would not know. Which copies moved
    it is not said: a copy that only pulls gets the conflict two others made (it read "on
    this copy and on NAME's", which blamed it; found by an audit)."""
    out = []
    for session, branches in conflicts.items():
        for b in branches:
            of = b[: b.rindex(CONFLICT)]
            out.append(f"session {session}: {of} moved on two copies at once (as {name} brought it): one side is {of} now, the other "
                       f"is kept as {b} (see `ctape branch -s {session}` and `ctape log {b} -s {session}`)")
    return out


def missing(store, state: State, wanted: set[str]) -> list[tuple[str, str, list[dict]]]:
    """What to fetch: (session, file, its pieces in order) for every file the remote holds
    (of the `wanted` sessions; every session when empty) that this copy lacks or holds
    shorter, not only those new manifests name: as rsync without --delete, a file this
    copy lacks (compacted away since, or never here) comes (back), so a claim that
    revives an entry finds its objects. A pack never changes and this copy's own segments
    are never touched."""
    todo = []
    for key in sorted(state["pieces"]):
        s, file = key.split("/", 1)
        if wanted and s not in wanted:
            continue
        path = os.path.join(store.root, "sessions", s, file)
        try:
            size = os.lstat(path).st_size
        except FileNotFoundError:
            size = -1
        if size >= 0 and (file.endswith(".pack") or layout.segment_owner(file) == store.writer):
            continue
        if size < int(state["have"].get(key, 0)) or size < max(p[1] for p in state["pieces"][key]):
            todo.append((s, file, max(size, 0)))
    jobs = []
    for s, file, size in todo:
        fs = layout.known_pieces(state, f"{s}/{file}")
        if file.endswith(".pack"):
            jobs.append((s, file, fs[:1]))
            continue
        chain, cur = [], size
        for f in fs:
            if f["start"] <= cur < f["end"]:
                chain.append(f)
                cur = f["end"]
        if chain:
            jobs.append((s, file, chain))
    return jobs


def fetch(store, backend: Backend, jobs: list, warn: Callable[[str], None], progress: Optional[Callable[[int, int], None]],
          after: str = PULL_AGAIN) -> tuple[int, int, dict[str, int]]:
    """Download and write what `missing` found, WORKERS pieces at a time and at most about
    BATCH_BYTES ahead of the writes; (bytes added, files that grew or came, the pieces not
    pulled by why: "missing", "damaged", each warned about). The caller holds this copy's
    turn on the remote (remote.held) and pull_turn."""
    total = sum(f["end"] - f["start"] for _, _, chain in jobs for f in chain)
    got, files, done = 0, 0, 0
    skipped = {"missing": 0, "damaged": 0}
    with transfer_pool(WORKERS) as pool:
        i = 0
        while i < len(jobs):
            batch, size = [], 0
            while i < len(jobs) and (not batch or size < BATCH_BYTES):
                batch.append(jobs[i])
                size += sum(f["end"] - f["start"] for f in jobs[i][2])
                i += 1
            pieces = [f for _, _, chain in batch for f in chain]
            fetched = {}
            under_way = [pool.submit(_get_piece, backend, f, warn) for f in pieces]
            for f, (data, why) in zip(pieces, map(result_of, under_way)):
                fetched[id(f)] = data
                if why:
                    skipped[why] += 1
            for s, file, chain in batch:
                try:
                    n = _apply(store, s, file, [(f, fetched[id(f)]) for f in chain])
                except OSError as e:
                    raise storage_error(e, f"session {s}", after=after) from None
                got += n
                files += n > 0
                done += sum(f["end"] - f["start"] for f in chain)
                if progress:
                    progress(done, total)
    return got, files, skipped


def pull_turn(store, warn: Callable[[str], None]):
    """The lock that lets one process of this copy at a time bring files in (of any remote);
    waiting for it is said (a long pull of another remote held a push that brings files in
    first, silently: found in review)."""
    d = os.path.dirname(store.index.path) if store.index.path != ":memory:" else None
    busy = lambda: warn("waiting for another pull on this copy (it brings files in)")  # noqa: E731
    return _Held(os.path.join(d, _LOCK), busy=busy) if d else _Nothing()


def _apply(store, session: str, file: str, pieces: list) -> int:
    """Write the fetched pieces of one file; the bytes added. A segment takes the pieces
    that join on at its end, up to the last one that ends where a push ended (a piece
    missing, or damaged, leaves the rest for a later pull), all at once (see the top)."""
    folder = _session_folder(store, session)
    path = os.path.join(folder, file)
    check_not_symlink(path)
    if file.endswith(".pack"):
        f, data = pieces[0]
        return len(data) if data is not None and layout.pack_ok(file, data) and _new_file(folder, file, data) else 0
    try:
        size = os.stat(path).st_size
        exists = True
    except FileNotFoundError:
        size, exists = 0, False
    parts: list[bytes] = []
    end, keep = size, 0
    for f, data in pieces:
        if data is None:
            break
        if not (f["start"] <= end < f["end"]):
            continue
        parts.append(data[end - f["start"]:])
        end = f["end"]
        if f.get("push_end", True):
            keep = len(parts)
    if not keep:
        return 0
    data = b"".join(parts[:keep])
    done = _extend_whole(folder, file, size, data) if exists else _new_file(folder, file, data)
    return len(data) if done else 0


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def _forget_stale_cache(target: str, tape_id: str) -> None:
    """A new clone's cache folder is named by the remote's tape id, its path and its folder's
    inode. An earlier clone of the same remote at the same path, deleted since, may have
    left one under that very name (the new folder took its inode): its index, its remotes
    (`remote 'origin' exists already`) and its settings are of a tape that is gone."""
    import shutil

    from ..store.store import cache_folder_of

    stale = cache_folder_of(target, tape_id)
    if os.path.isdir(stale) and not os.path.islink(stale):
        shutil.rmtree(stale, ignore_errors=True)


def clone(backend: Backend, url: str, endpoint: Optional[str], target: str, warn=lambda s: None, progress=None) -> dict:
    """A new copy of the remote's tape at `target` (absent or an empty folder), with the
    remote as `origin`.

    While it is made, the folder holds a marker (store.CLONING) that names the remote, held
    locked by this process: a clone stopped where it could not clean up (kill -9, a power
    cut) leaves a folder that every command refuses, saying so (never an empty tape that
    fsck calls fine), and the same clone run again finishes it: it pulls what is missing,
    as a pull after an interrupted pull does. A clone that fails otherwise removes what it
    wrote, as git's does (one that was finishing an earlier one leaves it to be run again)."""
    from ..store.store import CLONING, refuse_inside_tape, unfinished_clone
    from ..tape import Tape
    from . import remote as remotes

    target = os.path.abspath(target)
    refuse_inside_tape(target, "clone into")
    marker = os.path.join(target, CLONING)
    earlier = unfinished_clone(target) if os.path.isdir(target) and not os.path.islink(target) else None
    if earlier is None and _cloned_already(target, url):
        # the same clone ran to its end before (stopped after it, or run twice): bring it up to date
        tape = Tape.open(target)
        try:
            backend.check()
            out = pull(tape, backend, "origin", warn=warn, progress=progress)
            out["sessions"] = len(tape.store.sessions())
        finally:
            tape.close()
        out["dir"], out["already"] = target, True
        return out
    if earlier is None and os.path.lexists(target) and (not os.path.isdir(target) or os.path.islink(target) or os.listdir(target)):
        what = "a file" if not os.path.isdir(target) else "a symlink" if os.path.islink(target) else "a folder that is not empty"
        raise InvalidInput(f"cannot clone into {target}: it is {what}; give a new folder's path, or an empty folder")
    if earlier:
        if earlier != url:
            raise InvalidInput(f"{target} is an unfinished clone of {earlier}, not of {url}: finish it with `ctape clone {earlier} {target}`, or remove the folder")
    backend.check()
    meta = layout.read_identity(backend)
    if meta is None:
        raise RemoteError(f"{url} holds no tape yet; push one to it first")
    made = not os.path.exists(target)
    if made:
        try:
            os.makedirs(target, mode=0o700)
        except FileExistsError:
            raise InvalidInput(f"{target} was made meanwhile (another clone?); give a new folder's path") from None
        except OSError as e:
            raise storage_error(e, f"a tape at {target}", after="") from None
    try:
        lock = _hold_marker(marker, url, target)
    except _CloneUnderWay:
        raise  # nothing of that clone's is removed
    except BaseException:
        if earlier is None:
            with uninterrupted():
                _remove_clone(target, made)
        raise
    try:
        if earlier is not None:
            _check_same_tape(target, meta["tape_id"], url)
        Store.init(target, meta["tape_id"], 2 if meta.get("tape_version", 2) >= 2 else 1, _cloning=True)
        if earlier is None:
            _forget_stale_cache(target, meta["tape_id"])
        tape = Tape.open(target, _cloning=True)
        try:
            if earlier is None or "origin" not in remotes.remotes(tape.store):
                remotes.add(tape.store, "origin", url, endpoint)
            after = f"the clone was removed from {target}" if earlier is None else "run the same clone again to finish it"
            out = pull(tape, backend, "origin", warn=warn, progress=progress, after=after)
            out["sessions"] = len(tape.store.sessions())
            if tape.store.writer in layout.uploaders(backend):
                # another copy writes under this id (CTAPE_WRITER set alike on two machines): both
                # would name their segments and manifests alike, and one's writes hide the other's.
                # Or a copy removed and cloned again into a folder that got its path and inode
                # back (ext4 reuses inodes): the same id, and nothing to do (found by an audit)
                how = "set by CTAPE_WRITER" if os.environ.get("CTAPE_WRITER") else "made from this folder's path and inode"
                warn(f"the remote already holds writes of writer id {tape.store.writer!r}, the id this copy writes under "
                     f"({how}): if the copy that wrote them still exists, give this one an id of its own before writing "
                     "(CTAPE_WRITER; docs/format.md, writer ids); if it was removed from this folder, nothing needs doing")
        finally:
            tape.close()
        os.unlink(marker)  # the tape is whole: from here on it is a copy like any other
        fsync_dir(target)
    except BaseException:
        if earlier is None:  # as git: a clone that fails leaves no half copy behind
            with uninterrupted():
                if lock is not None:
                    os.close(lock)
                    lock = None
                _remove_clone(target, made)
        raise
    finally:
        if lock is not None:
            os.close(lock)
    out["dir"] = target
    return out


def _cloned_already(target: str, url: str) -> bool:
    """Whether target is a tape (its clone finished) whose `origin` is url."""
    from ..tape import Tape
    from . import remote as remotes

    if not os.path.isfile(os.path.join(target, "ctape.json")) or os.path.islink(target):
        return False
    try:
        tape = Tape.open(target)
    except Exception:  # noqa: BLE001 - no tape this clone can use (damaged, unreadable): refused as a folder that is not empty
        return False
    try:
        return remotes.remotes(tape.store).get("origin", {}).get("url") == url
    finally:
        tape.close()


class _CloneUnderWay(InvalidInput):
    pass


def _hold_marker(marker: str, url: str, target: str) -> int:
    """Write (or take over) the clone's marker and hold it locked; refused while another
    clone holds it."""
    try:
        fd = os.open(marker, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as e:
        raise storage_error(e, f"a tape at {target}", after="") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _CloneUnderWay(f"another `ctape clone` is making {target} right now; wait for it to end") from None
        os.ftruncate(fd, 0)
        write_all(fd, (json.dumps({"url": url}) + "\n").encode())
        os.fsync(fd)
        fsync_dir(target)
        return fd
    except OSError as e:
        os.close(fd)
        raise storage_error(e, f"a tape at {target}", after="") from None
    except BaseException:
        os.close(fd)
        raise


def _check_same_tape(target: str, tape_id: str, url: str) -> None:
    """An unfinished clone is finished only from the tape it was made of."""
    from ..store.store import FORMAT_FILE

    try:
        with open(os.path.join(target, FORMAT_FILE), "rb") as f:
            found = json.loads(f.read(1 << 16)).get("tape_id")
    except FileNotFoundError:
        return  # stopped before the tape was made
    except (OSError, ValueError, AttributeError):
        found = None
    if found != tape_id:
        raise InvalidInput(f"{target} is an unfinished clone of another tape than the one at {url} now; remove the folder and clone again")


def _remove_clone(target: str, made: bool) -> None:
    """Remove what a failed clone wrote: the folder it made, or what it put in an empty one."""
    import shutil

    if made:
        shutil.rmtree(target, ignore_errors=True)
        return
    for name in os.listdir(target):
        path = os.path.join(target, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
