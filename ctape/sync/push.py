"""push: upload what the remote lacks, then one manifest that lists it.

For each data file of the tape (every session, or those asked for): the bytes past what
the remote is known to hold go up as one or more pieces (create-only); a pack goes up
whole. That includes other writers' files this copy holds (from rsync or a pull), so a
push and a pull are one round of sync, like rsync both ways. Then the manifest, create-
only at this copy's next number. Killed at any instant, the remote holds pieces no
manifest names yet (never read; the rerun writes the same keys, found equal, or new
ranges) and the tape is untouched.

This copy's own segments are read the way a copy reads them (atime moves) and under the
session's lock: the writer then seals the segment, exactly as after `rsync`, so no pulled
prefix can ever be an older version of a file that later grew (docs/format.md 1a).

Before anything leaves, push_check.py looks at what would go up (secrets, damage, bytes
of redacted values), and push_files.py chooses the files and the sessions that go up
together; this module uploads, writes the manifest and follows (`push --follow`).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections import deque
from typing import Callable, Iterable, Optional

from ..model.errors import ConflictError, CtapeError, InvalidInput
from ..model.models import plural
from ..store.files import open_for_reading, pread_all, storage_error
from ..store.store import REBUILD_TRIES
from . import layout, losses, summary
from .backend import Backend, LastingRemoteError, RemoteError, result_of, transfer_pool
from .push_check import (
    HeldBack,
    SecretsFound,
    _damaged_uploads,
    _redactions_not_pulled,
    check_secrets,
    shown_name,
)
from .push_files import _todo, _unlist_waiting, _waiting_on, _with_what_they_need
from .remote import State, held

PIECE_MAX = 16 << 20  # bytes per piece: a failed upload costs at most this much again
WORKERS = 8  # uploads at once
BATCH_BYTES = 64 << 20  # read ahead at most this much before the uploads catch up


def _upload(backend: Backend, piece) -> str:
    """"new", "there" (the key holds these very bytes: written before), or "other"."""
    chunk = piece[-1]
    key = layout.piece_key(*piece[:5])
    if backend.put_if_absent(key, chunk):
        return "new"
    return "there" if backend.get(key) == chunk else "other"


def _read_range(path: str, start: int, end: int, own: bool) -> bytes:
    # own segments: a plain open, so the read moves the access time like any copy's
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW) if own else open_for_reading(path)
    try:
        return pread_all(fd, end - start, start)
    finally:
        os.close(fd)


class _SessionLock:
    """The session folder's flock: the one writers hold from write() to fsync."""

    def __init__(self, folder: str):
        self.fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)

    def __enter__(self):
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def learn(store, backend: Backend, state: State, warn) -> int:
    """Read every manifest not read yet and note what the remote holds; how many were read."""
    found = 0
    if not state.get("seen"):  # from the first manifest: every salvage report is read here
        state.setdefault("lost_read", {})
    for _, _, m in layout.new_manifests(store, backend, state, warn, cursor="seen", summaries=summary.for_reader(store, backend, state, warn)):
        layout.note_manifest(state, m)
        found += len(m["files"])
        for x in m["lost"]:  # salvage reports, for what _bring_in brings (a pull writes them all)
            if "lost_read" in state:  # (else those read before are not: _bring_in reads them all)
                state["lost_read"][layout.loss_digest(x)] = x
    layout.lost_announcements(store, backend, state, warn)
    return found


def _next_own(store, backend: Backend, state: State) -> int:
    own = layout.own_number(store, state)
    if own is not None:
        return own
    n = -1
    for key, _, is_prefix in backend.list(f"m/{store.writer}/"):
        name = key.rsplit("/", 1)[-1]
        if not is_prefix and name.endswith(".json") and name[:-5].isdigit():
            n = max(n, int(name[:-5]))
    return n + 1


def _read_piece(tape, checked: Optional[dict[str, int]], s: str, file: str, start: int, end: int, mine: bool) -> bytes:
    """The bytes of a file to upload, from `start` on, no further than the secrets check read
    (`checked`); FileNotFoundError when the file is gone (compacted since it was listed)."""
    path = os.path.join(tape.store.root, "sessions", s, file)
    limit = checked.get(f"sessions/{s}/{file}") if checked is not None else None
    if mine:
        with _SessionLock(os.path.dirname(path)):
            end = os.stat(path, follow_symlinks=False).st_size  # all it holds now, whole writes only
            if limit is not None and end > limit:
                # an append landed after the check: check it now, under the lock, and
                # send the file whole. Never a prefix of a file that holds more: this read
                # seals the file, and a copy pulled from that prefix could come back over
                # the longer file once its writer is gone (the sync model, seed 41276)
                limit = check_secrets(tape, [s], False, [(s, file)]).get(f"sessions/{s}/{file}", limit)
            if limit is not None:
                end = min(end, limit)  # no byte the secrets check has not read
            return _read_range(path, start, end, own=True) if end > start else b""
    if limit is not None:
        end = min(end, limit)
    return _read_range(path, start, end, own=False) if end > start else b""


def _files(todo: Iterable[tuple]) -> list[tuple[str, str]]:
    return [(p[0], p[1]) for p in todo]


def _checked(tape, state: State, chosen: list[str], todo: list[tuple], allow_secrets: bool,
             whole: bool = True, asked: Optional[list[str]] = None,
             held: Optional[dict[str, str]] = None) -> tuple[Optional[dict[str, int]], dict[str, str], list[tuple]]:
    """The secrets check of what this push would upload (check_secrets' ends), the sessions
    held back (session -> the line that says why) and what goes up. Damage or a finding in
    one session holds back only that session (SPEC section 14), and the others go up: a
    session whose files to upload hold damaged records (they cannot be checked, and would
    reach every clone), or that the check refuses. The check runs once over everything; only
    when it refuses are the sessions checked one by one, to find which. A session whose
    upload refers to what a held-back one stores waits with it. When nothing is left to
    send, the push is refused as a whole, with the check's own line (unless not `whole`:
    a later round of a push that sent some already). `asked`: the sessions of `push -s`,
    whose closure `todo` is: what it added only for a held-back one stays home too. `held`:
    sessions held back already (by the check before a compaction: _refused_first)."""
    held = {**(held or {}), **_damaged_uploads(tape, todo, read=allow_secrets)}
    rest = [p for p in todo if p[0] not in held]
    added_ends: dict[str, int] = {}
    if allow_secrets and asked is not None:
        # --allow-secrets lets through the sessions `push -s` named, not those added because
        # they store what the named ones refer to: those are checked (before, they went up
        # unchecked, secrets and all; found by an audit)
        added = sorted({p[0] for p in rest} - set(asked))
        refused = _one_by_one(tape, added, lambda s: added_ends.update(
            check_secrets(tape, [s], False, _files(p for p in rest if p[0] == s)) or {}))
        held.update({s: f"{why} (session {shown_name(tape, s)} stores what the chosen sessions refer to; --allow-secrets lets "
                        "through only the sessions named with -s: name it too, or resolve its findings)" for s, why in refused.items()})
        rest = [p for p in rest if p[0] not in held]
    try:
        ends = check_secrets(tape, [s for s in chosen if s not in held], allow_secrets, _files(rest))
        if ends is None and added_ends:
            ends = added_ends  # (the named sessions' files unbounded: not in it)
        refusal: Optional[CtapeError] = None
    except CtapeError as e:  # a likely secret, or a value a damaged record lost (read through the index)
        refusal, ends = e, {}
        held.update(_one_by_one(tape, sorted({p[0] for p in rest}),
                                lambda s: ends.update(check_secrets(tape, [s], False, _files(p for p in rest if p[0] == s)) or {})))
    if held:
        _waiting_on(tape, state, rest, held)
        rest = [p for p in rest if p[0] not in held]
    if held and asked is not None:
        keep = [s for s in asked if s not in held]
        need = _with_what_they_need(tape, state, keep, _todo(tape.store, state, keep))[1] if keep else []
        names = {(q[0], q[1]) for q in need}
        rest = [p for p in rest if (p[0], p[1]) in names]
    if refusal is not None and not held:
        raise refusal  # no one session is to blame: refused as one
    if refusal is not None and not rest and whole:
        if isinstance(refusal, HeldBack):  # (push --json names them: it printed held_back {})
            refusal.held = {shown_name(tape, s): why for s, why in held.items()}
        raise refusal  # nothing else to send: refused as one, with the check's own line
    if held and not rest and whole:
        raise HeldBack(next(iter(held.values())) if len(held) == 1 else f"{len(held)} sessions held back; first: {next(iter(held.values()))}",
                       {shown_name(tape, s): why for s, why in held.items()})
    return ends, held, rest


def _refused_first(tape, chosen: list[str], allow_secrets: bool) -> dict[str, str]:
    """The check before a push compacts this copy (check_secrets, compacting_first): the
    sessions it refuses, each with why, which the push holds back while the others go up,
    as the check after the compaction holds them back (SPEC section 14). Before, one
    finding refused the whole push, and a `push --follow` sent no append of any session
    once a remote compaction had run (found by an audit). When it refuses them all, or
    no one session is to blame, its own refusal stands: nothing is compacted."""
    try:
        check_secrets(tape, chosen, allow_secrets, compacting_first=True)
        return {}
    except CtapeError as e:
        refusal = e
    out = _one_by_one(tape, chosen, lambda s: check_secrets(tape, [s], False, compacting_first=True))
    if not out or len(out) == len(chosen):
        raise refusal
    return out


def _one_by_one(tape, sessions: list[str], check: Callable[[str], object]) -> dict[str, str]:
    """After a check of several sessions refused: each checked alone (`check(session)`),
    and those it refuses, each with why."""
    out = {}
    for s in sessions:
        try:
            check(s)
        except HeldBack as e:
            out[s] = str(e)
        except CtapeError as e:  # a value a damaged record lost, read through the index
            out[s] = f"not pushing session {shown_name(tape, s)}: {e}"
    return out


def _new_deletions(store, backend: Backend, state: State, warn) -> bool:
    """Learn the deletions of the remote announced since this copy last looked (g/<n>: one
    GET each, and a miss); True when there were any. `compact --remote` announces a
    deletion with what it deletes (and the objects it knew redacted), then writes the
    manifest that lists the same, then deletes: the announcement alone tells this copy
    (layout.learn_announcement), so a manifest lost later hides nothing. One written by a
    version before announcements carried that names only its plan: g/<n> stays the next one
    to look at until its manifest has been read (or its execution record: a lost manifest,
    layout.lost_announcements); or, when neither comes for layout.UNLISTED_WAIT by this copy's
    clock, its compactor died before it deleted anything. Until then this copy's manifests
    say it has not seen deletion n."""
    n = start = int(state.get("gnext", 0))
    while (data := backend.get(layout.compaction_key(n))) is not None:
        if n not in state.get("deletions_read", []):
            layout.learn_announcement(store, backend, state, n, data, warn, fallback=False)  # what it deletes, if it says
        n += 1
    if n == start:
        return False
    state["g_seen"] = max(int(state.get("g_seen", 0)), n)
    learn(store, backend, state, warn)
    read = set(state.get("deletions_read", []))
    waiting = state.get("unlisted", {})
    now = time.time()
    nxt = n
    for g in range(start, n):
        if g not in read and now - waiting.setdefault(str(g), now) < layout.UNLISTED_WAIT:
            nxt = g
            break
    state["gnext"] = nxt
    state["unlisted"] = {k: t for k, t in waiting.items() if int(k) >= nxt}
    state["deletions_read"] = sorted(g for g in read if g >= nxt)
    return True


def _gone_held(store, state: State) -> list[str]:
    """The files this copy holds that a compaction of the remote deleted, and that are not
    on the remote again: a copy that held one uploads what its compaction kept again, from
    0, after the deletion (below); once pieces listed after the deletion cover what it
    deleted, the file is there, and holding it asks for nothing (pull brings it back to a
    copy that lacks it, as rsync would; compacting for it again went round for good)."""
    out = []
    folders: dict[str, frozenset] = {}  # one listing per session, not a stat per file the remote
    # ever deleted (a row each, kept for good: 4,000 after 4,000 pushes of `push --follow`, 42
    # ms of every push; found by an audit of what grows with a tape's age)
    for key, (end, g) in state["gone"].items():
        s, file = key.split("/", 1)
        here = folders.get(s)
        if here is None:
            try:
                here = folders[s] = frozenset(os.listdir(os.path.join(store.root, "sessions", s)))
            except OSError:
                here = folders[s] = frozenset()
        if file in here and not _there_again(state, key, end, g):
            out.append(key)
    return out


def _bring_in(tape, backend: Backend, name: str, state: State, sessions: list[str], warn) -> int:
    """Bring in the files of `sessions` that the remote holds and this copy lacks, as a pull
    of them would (pull.missing, pull.fetch), from the manifests this push has read: with
    the salvage reports of those sessions, and saying the conflicts the sync rules made
    (a branch this copy and another both moved); how many files came. A remote that refuses
    the reads (credentials that may only write, say) leaves the compaction to what this
    copy holds, as before."""
    from .pull import branches_of, conflict_lines, conflicts_made, fetch, missing, pull_turn

    store = tape.store
    with pull_turn(store, warn):
        jobs = missing(store, state, set(sessions))
        if not jobs:
            return 0
        took = sorted({s for s, _, _ in jobs})
        before = branches_of(tape, took)
        try:
            _, files, _ = fetch(store, backend, jobs, warn, None, after="what arrived is kept, whole; nothing was pushed: push again")
            if "lost_read" not in state:  # a state of a version that did not keep them: every manifest's, once
                state["lost_read"] = _all_reports(store, backend, state)
        except RemoteError as e:
            warn(f"could not bring in what replaced them from {name} ({e}); compacting with what this copy holds")
            files = 0
        try:
            losses.write_pulled(store, list(state.get("lost_read", {}).values()), name, set(took))
        except OSError as e:
            raise storage_error(e, "quarantine/", after="nothing was pushed: push again") from None
    store.refresh()
    if not files:
        return 0
    warn(f"brought in from {name} the {files} {plural(files, 'file', 'files')} that replaced files this copy holds, which a "
         f"compaction there deleted ({plural(len(took), 'session', 'sessions')} {', '.join(took[:5])}{' ...' if len(took) > 5 else ''})")
    for line in conflict_lines(conflicts_made(tape, before), name):
        warn(line)
    return files


def _all_reports(store, backend: Backend, state: State) -> dict:
    """The salvage reports of every manifest on the remote (layout.loss_digest -> report),
    read with a throwaway copy of the state (its cursors from the start)."""
    import copy

    tmp = State(copy.deepcopy(dict(state)))
    tmp["seen"], tmp["gaps"] = {}, {}
    out = {}
    for _, _, m in layout.new_manifests(store, backend, tmp, lambda s: None, cursor="seen"):
        for x in m["lost"]:
            out[layout.loss_digest(x)] = x
    return out


def _there_again(state: State, key: str, end: int, g: int) -> bool:
    """Do pieces of `key` listed after deletion g cover its bytes [0, end) again?"""
    cur = 0
    for p in sorted(p for p in state["pieces"].get(key, []) if p[3] > g or p[4] > g):
        if p[0] <= cur < p[1]:
            cur = p[1]
    return cur >= end


def _put_back(store, backend: Backend, reused: list[tuple], warn) -> None:
    """A piece this push found on the remote with no manifest listing it (a killed push
    put it) may have been deleted by another copy's `compact --remote`, which sweeps such
    pieces once old, between this push's put and its manifest. Once the manifest lists
    it, it is looked for again (one listing per file) and put back when gone; a sweep
    reads the manifests written since its pull before it deletes, so the window left is
    between that read and its delete (docs/remotes.md, "Pieces no manifest lists")."""
    by_file: dict[tuple[str, str], list[tuple]] = {}
    for r in reused:
        by_file.setdefault((r[0], r[1]), []).append(r)
    for (s, file), pieces in sorted(by_file.items()):
        there = {k for k, _, is_prefix in backend.list(f"f/{s}/{file}/") if not is_prefix}
        for _, _, a, b, gen, digest in pieces:
            key = layout.piece_key(s, file, a, b, gen)
            if key in there:
                continue
            try:
                data = _read_range(os.path.join(store.root, "sessions", s, file), a, b, layout.segment_owner(file) == store.writer)
            except FileNotFoundError:
                data = b""
            if layout.digest(data) == digest and (backend.put_if_absent(key, data) or backend.get(key) == data):
                continue
            warn(f"the remote lost {key}, which this push lists (swept by a compaction of the remote as unlisted), and this "
                 "copy no longer holds those bytes: pulls of other copies will say the remote lacks it")


OWN_CHECK_EVERY = 3600.0  # s: how often a push lists its own manifests, to find those the remote lost


def _relearn_due(store, backend: Backend, state: State) -> bool:
    """Did the remote lose manifests? A pull or an earlier learning found one missing, or
    this copy's newest gone (layout.new_manifests notes either, at no cost); or a listing of
    this copy's own manifests lacks one, made once every OWN_CHECK_EVERY: a push costs the
    requests it did (an incremental one 4), and a copy that pushes finds a loss of its own
    within the hour (a listing per 1,000 manifests)."""
    if state.pop("relearn", None):
        return True
    own = layout.own_number(store, state)
    now = time.time()
    last = state.get("own_checked")
    if not own or (isinstance(last, (int, float)) and 0 <= now - last < OWN_CHECK_EVERY):
        return False
    state["own_checked"] = now
    listed = set(layout.manifest_numbers(backend, store.writer))
    # (one the listing lacks is looked for: a store whose listings lag behind its writes)
    return any(backend.get(layout.manifest_key(store.writer, n)) is None for n in range(own) if n not in listed)


def _still_there(store, backend: Backend, state: State, known: dict) -> list[dict]:
    """At a relearning: the pieces this copy knew the remote held (`known`, its state's
    pieces before) that no manifest there lists now and that the remote still holds, of
    files this copy no longer holds (those it holds go up again anyway): the entries of
    its next manifest that list them again. A lost manifest's pieces stay on the remote;
    a copy that compacted such a file away (its records in a pack of its own now) would
    else never pull it again, nor would a new clone, while the copies that had read the
    manifest before it was lost hold it and never push it again (they find no gap): an
    older record of the file's that comes back without the newer one that superseded it
    (a branch deleted on this copy, its deletion expired here) shows on this copy and not
    on those (the sync model's LostManifestWorld, seed 6071). One listing per session
    with such a piece, and only at a relearning."""
    listed_now = {layout.row_key(k, p) for k, rows in state["pieces"].items() for p in rows}
    local = layout.local_files(store)
    wanted: dict[str, list[tuple[str, list]]] = {}
    for k, rows in known.items():
        s, file = k.split("/", 1)
        if (s, file) in local:
            continue
        gone = state["gone"].get(k)
        for p in rows:
            at = layout.row_key(k, p)
            if at in listed_now or (gone and layout.deletable(at.rsplit("/", 1)[1], *gone)):
                continue  # listed, or taken by a deletion this copy learned of
            wanted.setdefault(s, []).append((k, p))
    out = []
    for s, rows in sorted(wanted.items()):
        there = {key for key, _, is_prefix in backend.list(f"f/{s}/") if not is_prefix}
        for k, p in rows:
            if layout.row_key(k, p) in there:
                f = {"session": s, "file": k.split("/", 1)[1], "start": p[0], "end": p[1], "blake3": p[2]}
                if p[4]:
                    f["gen"] = p[4]
                out.append(f)
    return out


def _refill(store, backend: Backend, state: State) -> None:
    """Write an empty manifest at each of this copy's numbers the remote lost, once what
    they listed is listed again: by a push of every session with none held back, after a
    relearning (killed before, the next push finds its newest manifest lost again and
    relearns; a `push -s` leaves the gaps for a whole push): readers that
    had not read them find no gap to warn of, and compact --remote sweeps again. Copies
    that had read them hold what they listed already; what the remote still holds of it
    that this copy compacted away, the relearning listed again (_still_there)."""
    prefix = f"m/{store.writer}/"
    gaps = state.get("gaps", {})
    for key in sorted(k for k in gaps if k.startswith(prefix)):
        n = int(key[len(prefix):-5])
        if n < (layout.own_number(store, state) or 0):
            backend.put_if_absent(key, layout.encode_manifest(store, store.writer, n, [], g=int(state.get("gnext", 0))))
            del gaps[key]


def put_manifest(store, backend: Backend, state: State, listed: list[dict], deleted: Optional[list[dict]] = None,
                 deleted_g: int = 0, warn: Callable[[str], None] = lambda s: None, redacted: Iterable[str] = (),
                 lost: list[dict] = ()) -> int:
    """Write this copy's next manifest (create-only); its number. The caller saves the state."""
    own = _next_own(store, backend, state)
    for _ in range(1000):
        if backend.put_if_absent(layout.manifest_key(store.writer, own), layout.encode_manifest(store, store.writer, own, listed, deleted, int(state.get("gnext", 0)), deleted_g, redacted, lost)):
            break
        # refused: an earlier push of this copy wrote it and was killed before it noted
        # so (or another copy uses the same CTAPE_WRITER). Never overwritten: the next number.
        warn(f"manifest {layout.manifest_key(store.writer, own)} exists on the remote; writing the next one")
        own += 1
    else:
        raise RemoteError(f"{backend.url}: cannot find a free manifest number for writer {store.writer}")
    for cursor in ("next", "seen"):  # nothing to bring in from our own manifest
        if int(state[cursor].get(store.writer, 0)) == own:
            state[cursor][store.writer] = own + 1
    state["own"], state["own_writer"] = own + 1, store.writer
    return own


def push(tape, backend: Backend, name: str, sessions: Iterable[str] = (), allow_secrets: bool = False,
         warn: Callable[[str], None] = lambda s: None, progress: Optional[Callable[[int, int], None]] = None) -> dict:
    with held(tape.store, name, warn):
        return _push(tape, backend, name, sessions, allow_secrets, warn, progress)


def _push(tape, backend: Backend, name: str, sessions: Iterable[str], allow_secrets: bool,
          warn: Callable[[str], None], progress: Optional[Callable[[int, int], None]]) -> dict:
    store = tape.store
    t0 = time.monotonic()
    wanted = list(dict.fromkeys(sessions))
    known = store.sessions()
    for s in wanted:
        if s not in known:
            from ..history.sessions import unknown

            raise unknown(tape, s)  # exit 1, with the closest names (SPEC 5), as `log -s` says it
    chosen = wanted or known
    state = State.load(store, name, backend.url)
    if not state.get("checked"):
        backend.check()
    # one GET a push: a remote emptied (its identity gone), or emptied and pushed to by
    # another copy since (a new identity), is pushed to in full again, never taken to hold
    # what this copy once uploaded
    meta = layout.check_identity(store, backend, create=False)
    fresh = meta is None
    if fresh:
        state.forget()  # its identity is written once the secrets check has passed
    else:
        state.follow(meta)
    relist: list[dict] = []  # pieces listed again after a relearning (_still_there)
    if not state.get("checked"):
        learn(store, backend, state, warn)  # first push from this copy: learn what is there
        state["checked"] = True
        state["own_checked"] = time.time()  # (it read every manifest there is: _relearn_due)
        state.pop("relearn", None)
        state["refill"] = True  # (the gaps of this copy's own numbers it found: _refill)
    elif _relearn_due(store, backend, state):
        # the remote lost manifests (a backup restored over the bucket, a manifest deleted
        # by hand), and with them, perhaps, the pieces they listed: what this copy knew the
        # remote held is void. Learnt again from what the manifests there list now, as a
        # copy's first push does, and what they lack goes up again (this copy's own lost
        # ones, or another copy's whose files this copy holds); the next number stays past
        # every one written before (other copies read from there)
        warn("the remote lost manifests (a backup restored over it, or deleted from the bucket); "
             "pushing again what this copy holds that the manifests there do not list")
        kept = {k: state[k] for k in ("own", "made", "gaps", "next", "lost_read") if k in state}  # (`next`: what this copy brought in)
        known = {k: [list(p) for p in rows] for k, rows in state["pieces"].items()}
        state.forget()
        state.update(kept)
        state["own_writer"] = store.writer
        learn(store, backend, state, warn)
        relist = _still_there(store, backend, state, known)
        state.pop("relearn", None)
        state["checked"] = True
        state["own_checked"] = time.time()
        state["refill"] = True  # once a push has sent all it holds (_refill)
    own = _next_own(store, backend, state)

    # a compaction of the remote deleted files (announced by g/<n>, one GET): a copy that
    # still holds one of them compacts first, so that whatever it holds that others may
    # need goes up in its pack (what a claim reaches that was made without having seen the
    # deletion that freed it; a session whose deletion expired on the compacting copy
    # before it was pushed, as rsync would bring it back). Looked for even with nothing
    # new to upload: such a copy may be the last to hold what the others need.
    _new_deletions(store, backend, state, warn)
    # the checks below ask the index what this copy holds: bring it up to date with the
    # files first (rsync, or another process, may have brought some since it last looked)
    store.refresh()
    unpulled = [] if allow_secrets else _redactions_not_pulled(tape, state)
    if unpulled:
        raise SecretsFound(
            f"not pushing: a compaction of the remote removed {len(unpulled)} {plural(len(unpulled), 'value', 'values')} as redacted on another copy, and this copy "
            f"still holds them (first: {unpulled[0][:12]}); run `ctape pull {name}` (it brings the redaction) and `ctape compact`, "
            "then push again, or push with --allow-secrets")
    held = _gone_held(store, state)
    early: dict[str, str] = {}  # sessions the check before the compaction held back: session -> why
    if held:
        # the compaction changes this copy: a push the check would refuse must not have made
        # it (SPEC section 2: a rejected command leaves the tape as it was). Every file of the
        # chosen sessions is checked first (the scan cache answers for entries seen before);
        # the files the push then uploads are checked again below
        early = _refused_first(tape, chosen, allow_secrets)
        # what replaced them comes first (the compactor's packs, other copies' files of those
        # sessions), as a pull of those sessions would bring it: this copy's compaction then
        # holds all the remote's did, and a pack equal to the remote's is already there.
        # Before, a copy that only pushes packed what it alone held, which differed from the
        # compactor's pack (a session removed elsewhere, others' appends): every later
        # `compact --remote` deleted that pack and every push put it up again, for good
        # (found by an audit of a remote's age). What came is checked before the compaction
        # too: a refusal then leaves it, as a pull would have, and nothing compacted
        if _bring_in(tape, backend, name, state, sorted({key.split("/", 1)[0] for key in held}), warn):
            early.update(_refused_first(tape, [s for s in chosen if s not in early], allow_secrets))
        warn(f"the remote's compaction deleted {len(held)} {plural(len(held), 'file', 'files')} this copy still holds; compacting this copy first, so that what it needs goes up in its packs")
        tape.compact()
        # what the compaction kept as it was (a session already in one pack with nothing
        # to drop, a damaged session) still holds what this copy needs: it goes up again,
        # in a manifest that says it comes after the deletion
        for key in _gone_held(store, state):
            # its pieces listed past the deleted range, or put again, stay known: readers
            # count them as on the remote (and compact --remote sweeps only what no
            # manifest lists); what is left of the file goes up from 0, under the next
            # generation (layout.generation: `gens` outlives `gone`)
            del state["gone"][key]
            state["have"][key] = 0
    todo = _todo(store, state, chosen)
    asked = wanted if wanted and len(wanted) < len(known) else None  # push -s: some sessions
    if asked:
        chosen, todo = _with_what_they_need(tape, state, chosen, todo)
    t_check = time.monotonic()
    # before anything leaves (SPEC section 18); what the check before a compaction held back
    # stays held, and what refers to it waits with it
    checked, held_back, todo = _checked(tape, state, chosen, todo, allow_secrets, asked=asked, held=early)
    sending = {p[0] for p in todo}
    chosen = [s for s in chosen if s not in held_back and (asked is None or s in asked or s in sending)]
    more = [s for s in chosen if s not in wanted] if wanted else []
    if more:  # said once the push is sure to go (a refused one says only why)
        warn(f"also pushing the files of {plural(len(more), 'session', 'sessions')} {', '.join(more[:5])}{' ...' if len(more) > 5 else ''}: "
             f"the chosen ones refer to values or entries stored there")
    t_sent = time.monotonic()
    if fresh:
        state.follow(layout.check_identity(store, backend, create=True))
    total = sum(e - b for _, _, b, e, _ in todo)
    sent, files, listed, skipped, refused = 0, set(), [], 0, 0
    went: list[tuple] = []  # (session, file, start, end, own segment): what was read and sent
    noted: dict[str, tuple] = {}  # file -> what this copy knew the remote held of it before this push
    there: set[tuple] = set()  # pieces the remote held already
    reused: list[tuple] = []  # of those, the ones no manifest this copy read lists
    checked_first = set(held_back)
    with transfer_pool(WORKERS) as pool:
        # uploads run WORKERS at a time while the next files are read: at most BATCH_BYTES
        # (or 4 * WORKERS pieces) in flight; each is noted in the order it was read
        flying: deque = deque()
        flying_bytes = 0

        def settle(limit: int) -> None:
            """Wait for the oldest uploads until at most `limit` bytes are in flight."""
            nonlocal sent, skipped, refused, flying_bytes
            while flying and (flying_bytes > limit or len(flying) > (4 * WORKERS if limit else 0)):
                (s, file, a, b, gen, last, chunk), fut = flying.popleft()
                flying_bytes -= b - a
                status = result_of(fut)
                key = layout.piece_key(s, file, a, b, gen)
                if status == "other":  # refused, and not ours: reported, never overwritten
                    warn(f"the remote's {key} holds other bytes than this copy's; left as it is")
                    refused += 1
                    continue
                if status == "there":
                    skipped += 1
                    there.add((s, file, a, b))
                k = f"{s}/{file}"
                if k not in noted:
                    noted[k] = (state["have"].get(k), [list(p) for p in state["pieces"].get(k, [])])
                if status == "there" and not any(p[0] == a and p[1] == b and p[4] == gen for p in noted[k][1]):
                    reused.append((s, file, a, b, gen, layout.digest(chunk)))  # a killed push's, unlisted: _put_back
                listed.append({"session": s, "file": file, "start": a, "end": b, "blake3": layout.digest(chunk)})
                if gen:
                    listed[-1]["gen"] = gen
                layout.note_have(state, listed[-1], int(state.get("gnext", 0)), push_end=last)
                sent += b - a
                files.add((s, file))
                if progress:
                    progress(sent, total)

        for round_ in range(REBUILD_TRIES):
            gone = 0  # files listed that a compaction in another process removed since
            for s, file, start, end, mine in todo:
                if s in held_back:
                    continue
                try:
                    data = _read_piece(tape, checked, s, file, start, end, mine)
                except FileNotFoundError:
                    gone += 1  # what it held is in the pack that replaced it: that goes up below
                    continue
                except CtapeError as e:
                    # an append to this copy's own segment after the check, checked under
                    # the lock, holds a likely secret (or a value it cannot read): its session
                    # stays home from here on (what of it went up was checked), and the
                    # others go on, listed in the manifest
                    held_back[s] = str(e) if isinstance(e, HeldBack) else f"not pushing session {shown_name(tape, s)}: {e}"
                    continue
                if not data:
                    continue
                end = start + len(data)
                went.append((s, file, start, end, mine))
                if file.endswith(".pack"):
                    if not layout.pack_ok(file, data):
                        warn(f"not pushed: {s}/{file} does not match its name (run `ctape fsck`)")
                        continue
                    ranges = [(0, end)]
                else:
                    ranges = [(a, min(end, a + PIECE_MAX)) for a in range(start, end, PIECE_MAX)]
                gen = layout.generation(state, f"{s}/{file}")
                for a, b in ranges:
                    piece = (s, file, a, b, gen, b == end, data[a - start : b - start])
                    flying.append((piece, pool.submit(_upload, backend, piece)))
                    flying_bytes += b - a
                    settle(BATCH_BYTES)
            settle(0)
            if not gone:
                break
            if round_ == REBUILD_TRIES - 1:
                warn(f"{gone} {plural(gone, 'file', 'files')} went while pushing (a compaction in another process); push again to send what replaced them")
                break
            # the files that replaced them (what went up is noted in the state): checked, then sent
            chosen = [s for s in chosen if s not in held_back]
            ends, newly, todo = _checked(tape, state, chosen, _todo(store, state, chosen), allow_secrets, whole=False, asked=asked)
            held_back.update(newly)
            if checked is not None:
                checked.update(ends or {})
            total += sum(e - b for _, _, b, e, _ in todo)
    if held_back.keys() - checked_first:
        waiting = _unlist_waiting(tape, state, went, held_back, listed, noted)
        sent -= sum(f["end"] - f["start"] for f in listed if f["session"] in waiting)
        skipped -= sum(1 for p in there if p[0] in waiting)
        listed = [f for f in listed if f["session"] not in waiting]
        files = {f for f in files if f[0] not in waiting}
    state["own"], state["own_writer"] = own, store.writer
    # the salvage reports of the sessions that went (or were there): so that every copy reads
    # what a salvage here found lost as lost, never as missing (ctape/sync/losses.py)
    lost = losses.to_send(store, state, [s for s in chosen if s not in held_back])
    for f in relist:  # listed again, not sent: the remote holds them (_still_there)
        layout.note_have(state, f, int(state.get("gnext", 0)))
    listed = relist + listed
    if listed or lost:
        put_manifest(store, backend, state, listed, warn=warn, lost=lost)
        losses.sent(state, lost)
        went_up = {f["session"] for f in listed}
        _put_back(store, backend, [r for r in reused if r[0] in went_up], warn)
    if state.get("refill") and not wanted and not held_back:
        _refill(store, backend, state)  # after what the lost ones listed is listed again
        state.pop("refill", None)
    state.save(store)
    done = time.monotonic()
    return report(name, backend, {shown_name(tape, s): why for s, why in held_back.items()}, done - t0, files=len(files), pieces=len(listed),
                  bytes=sent, already_there=skipped, refused=refused, salvage_reports=len(lost),
                  check_seconds=round(t_sent - t_check, 3), transfer_seconds=round(done - t_sent, 3))


def report(name: str, backend: Backend, held_back: dict, seconds: float, **counts) -> dict:
    """What a push reports (`--json`): the counts not given are 0; one refused as a whole
    (HeldBack) has no files, its held-back sessions and its `error`."""
    out = {"remote": name, "files": 0, "pieces": 0, "bytes": 0, "requests": backend.requests, "already_there": 0, "refused": 0,
           "salvage_reports": 0, "held_back": held_back, "seconds": round(seconds, 3)}
    out.update(counts)
    return out


REFUSED_RETRY = 5.0  # seconds between looks while a push --follow is refused


def held_back_error(r: dict, chosen: bool = False) -> HeldBack:
    """The one line of a push that sent the rest but held sessions back (exit 1); `chosen`:
    the push named its sessions (`push -s`), and the rest are the other named ones."""
    held = r["held_back"]
    names = ", ".join(sorted(held)[:5]) + (" ..." if len(held) > 5 else "")
    one = len(held) == 1
    return HeldBack(f"{len(held)} session{'' if one else 's'} not pushed ({names}; see the warning{'' if one else 's'} above); "
                    f"the {'other chosen ones' if chosen else 'others'} are on {r['remote']}")


def follow(tape, backend: Backend, name: str, sessions: Iterable[str] = (), allow_secrets: bool = False,
           warn: Callable[[str], None] = lambda s: None, on_push: Callable[[dict], None] = lambda r: None,
           poll: float = 0.25, stop: Optional[Callable[[], bool]] = None) -> None:
    """Push whenever a data file changed (looked at every `poll` seconds), until SIGINT or
    SIGTERM (or `stop()`): an acknowledged append is on the remote within about
    poll + one push. A push under way when the signal comes is finished first (one line
    says so); a second signal stops at once, as a kill would; a failing push
    (network, server, or another process compacting this copy when the push had to
    compact it first) is reported and tried again."""
    import signal
    import threading

    # a plain flag, not a threading.Event: the handler runs in the main thread, and an
    # Event.set() there while the main thread is inside Event.wait() (holding the Event's
    # lock) deadlocks; time.sleep is resumed after the handler, in short naps
    stopping = [False]

    def nap(seconds: float) -> None:
        end = time.monotonic() + seconds
        while not stopping[0] and time.monotonic() < end:
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    busy = [False]  # a push is under way

    def on_signal(sig, _frame) -> None:
        if stopping[0] or not busy[0]:
            if stopping[0]:
                # the second signal: stop now, as a kill would (a push cut anywhere leaves the
                # remote valid and this copy as it was: create-only keys, the manifest last).
                # Waiting for the push under way could take the request timeout times its
                # tries against a server that hangs, past a supervisor's patience
                signal.signal(sig, signal.SIG_DFL)
                os.kill(os.getpid(), sig)
            stopping[0] = True
            return
        stopping[0] = True
        warn("stopping once the push under way ends (signal again to stop at once)")

    old = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, on_signal)
    wanted = list(sessions)
    last = None
    refused: Optional[HeldBack] = None  # the last push was refused, or held sessions back: the follower goes on
    said: frozenset = frozenset()  # why, as last said: said again only when it changes
    seen = None  # the files at the last push
    retry_at = 0.0
    failing: Optional[Exception] = None  # the last push failed (its error): stopped then, the remote lacks what it did not send
    from .remote import remotes

    settings = remotes(tape.store).get(name)  # (None: a backend given in process, no remote of that name)
    try:
        while not stopping[0] and not (stop and stop()):
            now = remotes(tape.store).get(name) if settings is not None else None
            if settings is not None and now != settings:
                # `remote rm` (a bucket chosen by mistake) or a new URL for the name: the
                # follower went on pushing there, and wrote back the state `remote rm`
                # removed (found by an audit)
                again = f" (`ctape push --follow {name}` follows it as it is now)" if now is not None else ""
                raise RemoteError(f"remote {name} was {'removed' if now is None else 'changed'} while following it; stopped{again}")
            snap = {}
            for s in wanted or [None]:
                snap.update(tape.store.list_files(s))
            if refused is not None and time.monotonic() >= retry_at:
                last = None  # an allow changes settings, not files: look again now and then
            if snap != last:
                busy[0] = True
                try:
                    r = push(tape, backend, name, wanted, allow_secrets, warn=warn)
                    why = frozenset(r["held_back"].values())
                    if r["files"] or snap != seen or why != said:  # a look again every REFUSED_RETRY that changed nothing is not news
                        on_push(r)
                    last, seen, refused, failing = snap, snap, None, None
                    if why:
                        # the others went up; a redaction or an allow (looked at again every
                        # REFUSED_RETRY) lets the held-back ones go with a later push
                        if why != said:
                            for line in sorted(why):
                                warn(line)
                            warn(f"still following: the push after that is resolved sends {'it' if len(why) == 1 else 'them'}")
                        refused, retry_at = held_back_error(r, chosen=bool(sessions)), time.monotonic() + REFUSED_RETRY
                    said = why
                except HeldBack as e:
                    # nothing went up; a redaction or an allow changes the files (or the
                    # settings the next look reads), and the push after it goes through
                    if frozenset([str(e)]) != said:
                        warn(f"{e}; still following: the push after it is resolved sends everything")
                    last, refused, retry_at, said, failing = snap, e, time.monotonic() + REFUSED_RETRY, frozenset([str(e)]), None
                except LastingRemoteError:
                    raise  # another tape there, no bucket, credentials refused: no retry mends it
                except (RemoteError, ConflictError) as e:  # the network, or a compaction of this copy under way
                    warn(f"{e}; trying again")
                    failing = e
                    nap(1.0)
                finally:
                    busy[0] = False
                backend.requests = 0
            nap(poll)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    if refused is not None:
        raise refused  # stopped while refusing: what is on this copy is not all on the remote (exit 1)
    if failing is not None:
        # the same for a push that was failing (a server gone, the network): a supervisor
        # or a CI step must not read "all pushed" from the exit status (found by an audit)
        raise RemoteError(f"stopped while pushing to {name} failed, so it may lack what this copy holds "
                          f"({str(failing).rstrip('.')}); run `ctape push {name}` once it can be reached")
