"""compact --remote: pack what a remote holds, then delete what the packs replaced, in two
phases so that no reader or pusher loses anything (docs/remotes.md, "Compacting a remote").

One run:
1. pull everything (so this copy holds every file the remote holds, and every claim);
2. compact this copy (the usual `compact`: one pack per session, the old files go);
3. push (the packs go up, create-only, like any file);
4. carry out this copy's own plans that are older than the grace period: for each file a
   plan named, check that this run's compaction read the whole of what the remote holds
   of it and replaced it, and that no push arrived since the pull; announce the deletion
   (`g/<n>`, then a manifest that lists it), mark the plan carried out (`x/<me>/<n>`),
   then delete the pieces; and finish any copy's execution record whose pieces a killed
   run left (announced, so no reader fetches them);
5. write a new plan `d/<me>/<n>` naming the remote's files this run's compaction replaced
   and no plan names yet. They are deleted by a later run, after the grace period;
6. delete the pieces no manifest lists, once older than the grace period (what killed
   pushes left: `_sweep_unlisted`).

Readers learn a deletion from the compactor's manifest that announces it ("deleted"), which
is written before anything is deleted: they stop fetching the deleted pieces. A push that
has something to upload looks at g/<next> (one GET); after a deletion it learns what went,
and a copy that still holds a deleted file compacts itself first: whatever its claims
reach (even a claim made without having seen the deletion that freed it) goes up in its
pack. So a run that deleted too early costs space, never an entry. A copy that
still holds such a file keeps it; nothing in the tape is ever deleted by a remote.

Why two phases: a claim made on another copy before this run (a branch that copy had not
seen deleted, say) may reach the remote only later; with the grace period (default 14
days, far longer than any copy goes without pushing), the second run's pull brings it, its
compaction keeps what the claim reaches, and only then are the old files deleted. `--grace
now` carries a plan out in the run that made it: for remotes nobody else writes to.
"""

from __future__ import annotations

import json
import time
from typing import Callable, Collection, Optional

from . import layout, summary
from .backend import Backend, RemoteError
from .pull import pull
from .push import HeldBack, push, put_manifest, shown_name
from .remote import State, held


def _own_plans(store, backend: Backend, state, warn) -> tuple[dict[int, dict], dict[int, dict]]:
    """This copy's plans (d/<me>/) and execution records (x/<me>/), by number. Only what the
    run uses is read: an execution record this copy finished before (state["pruned"]), and
    the plan of a deletion carried out, are known by their keys alone (`_UNREAD`). A copy
    that compacts every night GOT every plan and record it had ever written: 398 GETs on the
    200th night (found by an audit of what grows with a tape's age)."""
    me = store.writer
    pruned = set(state.get("pruned", []))
    done = _records(store, backend, me, True, warn, known=pruned)
    return _records(store, backend, me, False, warn, known=set(done)), done


def _records(store, backend: Backend, compactor: str, done: bool, warn, known: Collection[int] = ()) -> dict[int, dict]:
    """One compactor's plans (d/) or execution records (x/), by number; those numbered in
    `known` are listed but not read (their value says so: `_UNREAD`)."""
    out: dict[int, dict] = {}
    for key, _, is_prefix in backend.list(f"{'x' if done else 'd'}/{compactor}/"):
        name = key.rsplit("/", 1)[-1]
        if is_prefix or not name.endswith(".json") or not name[:-5].isdigit():
            continue
        n = int(name[:-5])
        if n in known:
            out[n] = {"n": n, "files": [], _UNREAD: True}
            continue
        m = _record(store, backend, compactor, n, done, warn)
        if m is not None:
            out[m["n"]] = m
    return out


_UNREAD = "unread"  # a plan or record _records listed and did not read: known by its number only


def _record(store, backend: Backend, compactor: str, n: int, done: bool, warn) -> Optional[dict]:
    data = backend.get(layout.plan_key(compactor, n, done))
    m, why = layout.decode_deletion(data or b"", store.tape_id, compactor, n, done)
    if m is None:
        warn(f"ignored {layout.plan_key(compactor, n, done)} on the remote: {why}")
    return m


def _others_unfinished(store, backend: Backend, state, warn) -> list[tuple[str, int, dict]]:
    """Other copies' execution records this copy has not finished yet: (compactor, n,
    record), from one listing of x/; each is read once (state["pruned"] keeps "who/n")."""
    out = []
    for key, _, is_prefix in backend.list("x/"):
        parts = key.split("/")
        if is_prefix or len(parts) != 3 or parts[1] == store.writer or not parts[2].endswith(".json") or not parts[2][:-5].isdigit():
            continue
        who, n = parts[1], int(parts[2][:-5])
        if f"{who}/{n}" not in state["pruned"]:
            m = _record(store, backend, who, n, True, warn)
            if m is not None:
                out.append((who, n, m))
    return out


def _finish(backend: Backend, state, record: dict) -> int:
    """Delete the pieces an execution record's deletion left (its run was killed before it
    deleted them all): the deletion was announced before the record was written, so no
    reader fetches them. A file this copy has not learned the deletion of is left alone;
    of one it has, only what that deletion may take (`_delete_deleted`)."""
    n = 0
    for f in record["files"]:
        key = f"{f['session']}/{f['file']}"
        gone = state["gone"].get(key)
        if gone is None or gone[0] < f["end"]:
            continue
        n += _delete_deleted(backend, state, f["session"], f["file"], f["end"], gone[1])
    return n


def _finish_announced(backend: Backend, state) -> int:
    """Delete the pieces of files whose deletion a manifest announced but whose run was
    killed before it wrote its execution record (so `_others_unfinished` does not see it):
    the announcement is what makes the deletion safe (no reader fetches those pieces), and
    a redacted value must not wait on the remote for that copy's next run. One listing per
    session with a deletion this copy has not seen finished (`finished` in its state); only
    what the deletion may take (`_delete_deleted`)."""
    n = 0
    by_session: dict[str, list[str]] = {}
    for key, (_, g) in state["gone"].items():
        if state["finished"].get(key) != g:  # each deletion once: a remote keeps every one it ever announced
            s, file = key.split("/", 1)
            by_session.setdefault(s, []).append(file)
    for s, files in sorted(by_session.items()):
        there = {k[len(f"f/{s}/"):-1] for k, _, is_prefix in backend.list(f"f/{s}/", delimiter="/") if is_prefix}
        for file in sorted(files):
            key = f"{s}/{file}"
            end, g = state["gone"][key]
            if file in there:
                n += _delete_deleted(backend, state, s, file, end, g)
            state["finished"][key] = g
    return n


def _delete_deleted(backend: Backend, state, session: str, file: str, end: int, g: int) -> int:
    """Delete the pieces of one file that deletion g (which covered it up to `end`) took
    off the remote: those `layout.deletable` names (within the range, of a generation
    before it; a piece a copy put again after learning of the deletion is under a key of a
    later generation, whenever its deletes run), and not one a manifest listed after the
    deletion (a copy of a version before generations put it again under the old key)."""
    k = f"{session}/{file}"
    again = {layout.row_key(k, p) for p in state["pieces"].get(k, []) if p[3] > g or p[4] > g}
    n = 0
    for key, _, is_prefix in backend.list(f"f/{session}/{file}/"):
        if not is_prefix and key not in again and layout.deletable(key.rsplit("/", 1)[1], end, g):
            backend.delete(key)
            n += 1
    return n


def _remote_end(state, key: str) -> int:
    return max([p[1] for p in state["pieces"].get(key, [])] + [int(state["have"].get(key, 0))])


def compact_remote(tape, backend: Backend, name: str, expire="90d", grace="14d", allow_secrets: bool = False,
                   warn: Callable[[str], None] = lambda s: None, progress: Optional[Callable[[str], None]] = None) -> dict:
    from ..ops.compact import parse_duration

    store = tape.store
    grace_s = parse_duration(grace, "grace")  # (a number of seconds or a timedelta too)
    pulled = pull(tape, backend, name, warn=warn)
    before = layout.local_files(store)
    local = tape.compact(expire=expire, grace=grace, progress=progress)
    after = layout.local_files(store)
    redacted = set(tape.redactions())  # their records go up with this push: a deletion names them
    held_back = []  # sessions the push held back (secrets, damage): their deletions wait, and the run fails
    try:
        pushed = push(tape, backend, name, allow_secrets=allow_secrets, warn=warn)
    except HeldBack as e:  # nothing to send but what is held back: the other sessions' deletions go on
        warn(f"{e} (its remote deletions wait)")
        pushed = {"bytes": 0, "held_back": {}}
        held_back = ["*"]  # every session it had to send
    for s, why in pushed["held_back"].items():
        warn(f"{why} (its remote deletions wait)")
        held_back.append(s)
    # this copy's turn on the remote's state (remote.held), for the deletions only: a `push
    # --follow` beside this run waits while it deletes, not while it compacts
    with held(store, name, warn):
        out = _carry_out(tape, backend, name, grace_s, before, after, redacted, warn)
    try:  # the manifests summarized for readers far behind, now and then (summary.py)
        out["summarized"] = summary.write(store, backend, warn, known=State.load(store, name, backend.url).get("summaries"))
    except RemoteError as e:  # the compaction is done: a summary only saves readers requests
        warn(f"no summary of the manifests written ({str(e).rstrip('.')}); the next `compact --remote` writes it")
        out["summarized"] = 0
    return {"remote": name, "local": local, "pulled": pulled["bytes"], "pushed": pushed["bytes"], **out, "held_back": held_back,
            "requests": backend.requests}


def _carry_out(tape, backend: Backend, name: str, grace_s: float, before: dict, after: dict, redacted: set, warn) -> dict:
    """Steps 4 and 5 of docs/remotes.md, "Compacting a remote": the plans older than the
    grace period carried out, and this run's plan written."""
    store = tape.store
    state = State.load(store, name, backend.url)
    state.setdefault("pruned", [])
    # replaced: files this run's compaction read whole (as much as the remote holds) and removed
    replaced = {}
    for key in state["pieces"]:
        s, file = key.split("/", 1)
        end = _remote_end(state, key)
        if (s, file) in before and (s, file) not in after and before[(s, file)] >= end and int(state["have"].get(key, 0)) == end:
            replaced[(s, file)] = end
    # a file is deleted only once its session's files as this run left them (its pack, and
    # any it kept) are all on the remote: the pack holds every live object of the session's
    # old files (a pack keeps each live object its session's files held), so nothing the old
    # file held is then only here. Per session, so that a session whose push stopped at a
    # damaged record defers its own deletions only (SPEC section 14)
    not_up = sorted({s for (s, file), size in after.items() if layout.file_ok(s, file) and int(state["have"].get(f"{s}/{file}", 0)) < size})
    plans, done = _own_plans(store, backend, state, warn)
    me = store.writer
    now = time.time()
    deleted = {"files": 0, "bytes": 0, "objects": 0, "unlisted": 0}
    deferred = ""
    # what killed writes left that no key names (a folder's temp files): removed once older
    # than the grace period, like a plan, so that no live push is still writing one
    deleted["leftovers"] = backend.remove_leftovers(grace_s)
    # finish what a killed run started, this copy's or another's (a redacted value must not
    # wait on the remote for that copy's next run): an execution record whose files still
    # have pieces
    for n, x in sorted(done.items()):
        if n not in state["pruned"]:
            deleted["objects"] += _finish(backend, state, x)
            state["pruned"].append(n)
    for who, n, x in _others_unfinished(store, backend, state, warn):
        deleted["objects"] += _finish(backend, state, x)
        state["pruned"].append(f"{who}/{n}")
    if any(state["finished"].get(k) != g for k, (_, g) in state["gone"].items()) and not _changed_since(store, backend, state, warn):
        deleted["objects"] += _finish_announced(backend, state)
    ages = {n: _age(backend, me, plans[n], now) for n in plans if n not in done}
    due = [n for n in sorted(ages) if ages[n] >= grace_s]
    planned_now = {(f["session"], f["file"]) for n in plans if n not in done for f in plans[n]["files"]}
    fresh = [{"session": s, "file": file, "end": end} for (s, file), end in sorted(replaced.items()) if (s, file) not in planned_now]
    n_new = max(list(plans) + list(done) + [-1]) + 1
    if fresh:
        while not backend.put_if_absent(layout.plan_key(me, n_new), layout.encode_deletion(store, me, n_new, fresh, done=False)):
            n_new += 1  # a killed run wrote it: never overwritten, the next number
        plans[n_new] = {"n": n_new, "time": now, "files": fresh}
        ages[n_new] = 0.0
        if grace_s <= 0:
            due.append(n_new)
        n_new += 1
    if due and _changed_since(store, backend, state, warn):
        deferred = "another copy pushed during the compaction"
    elif due:
        for n in due:
            ok = [f for f in plans[n]["files"] if replaced.get((f["session"], f["file"])) == f["end"]]
            wait = [f for f in ok if f["session"] in not_up]
            if wait:
                ok = [f for f in ok if f["session"] not in not_up]
                if not ok:
                    continue  # the plan waits whole, for a run that pushes those sessions
                # the rest goes now; these wait in a plan of their own, as old as this one
                t = now - ages[n]  # as old as this one (by the store's clock, if this one was dated ahead: _age)
                while not backend.put_if_absent(layout.plan_key(me, n_new), layout.encode_deletion(store, me, n_new, wait, done=False, t=t)):
                    n_new += 1
                plans[n_new] = {"n": n_new, "time": t, "files": wait}
                ages[n_new] = ages[n]
                n_new += 1
            g = None
            if ok:
                g = _announce(store, backend, state, n, ok, redacted)
                put_manifest(store, backend, state, [], deleted=ok, deleted_g=g, warn=warn, redacted=redacted)
            if not backend.put_if_absent(layout.plan_key(me, n, done=True), layout.encode_deletion(store, me, n, ok, done=True)):
                continue  # carried out by an earlier run (the pieces were deleted above)
            for f in ok:
                layout.note_gone(state, f, g)
                deleted["objects"] += _delete_deleted(backend, state, f["session"], f["file"], f["end"], g)
                deleted["files"] += 1
                deleted["bytes"] += f["end"]
            state["pruned"].append(n)
            done[n] = {"files": ok}
    deleted["unlisted"] = _sweep_unlisted(store, backend, state, grace_s, warn)
    if not_up and not deferred:
        # said even when none of its files was due: its files stay on the remote until it is
        # pushed whole (a damaged session: `fsck --salvage`, then this again)
        shown = ", ".join(shown_name(tape, s) for s in not_up[:5])
        deferred = (f"session{'s' if len(not_up) > 1 else ''} {shown} not wholly on the remote (held back by the push: "
                    "see its warnings; or damaged: see `ctape fsck`): deletions of its files wait; the other sessions' went ahead")
    state.save(store)
    pending = [{"n": n, "files": len(plans[n]["files"]), "bytes": sum(f["end"] for f in plans[n]["files"]),
                "due_in_seconds": max(0, round(grace_s - ages.get(n, 0.0)))} for n in sorted(plans) if n not in done]
    return {"deleted": deleted, "planned": len(fresh), "pending": pending, "deferred": deferred}


FUTURE_SLACK = 300.0  # s: a plan dated further ahead than this was written by a clock that ran ahead


def _age(backend: Backend, me: str, plan: dict, now: float) -> float:
    """A plan's age: by its time, unless that is in the future (written while this machine's
    clock ran ahead, since put right): then by the store's clock, since its key was
    written. Before, such a plan waited as long as the clock had been ahead, and the
    deletions it held back (of redacted texts too) with it, whatever --grace said (found
    by an audit: 30 days ahead)."""
    if plan["time"] <= now + FUTURE_SLACK:
        return now - plan["time"]
    key = layout.plan_key(me, plan["n"])
    return next((age for k, age in backend.aged(key) if k == key), 0.0)


def _sweep_unlisted(store, backend: Backend, state, grace_s: float, warn) -> int:
    """Delete the pieces that no manifest lists as on the remote, once older than the grace
    period: what a push killed before its manifest left (its rerun, after this copy's files
    changed, never lists them; perhaps a value redacted since), junk at a piece's key, and
    the old pieces of a deletion whose deletes were killed. A live push lists its pieces
    within seconds of putting them; a rerun that finds an old unlisted piece there lists it
    too, so the manifests that appeared since this run's pull are read after the listing,
    and what they list stays (a push checks such a piece again after its manifest:
    push._put_back). Not while a manifest cannot be read (another version's, junk), or is
    missing where later ones of its uploader are (layout.new_manifests): the pieces it
    lists would look unlisted."""
    if _unreadable(backend, state, warn):
        return 0
    live = {layout.row_key(k, p) for k, rows in state["pieces"].items() for p in rows}
    old = []
    for key, age in backend.aged("f/"):
        parts = key.split("/")
        if (len(parts) == 4 and key not in live and age >= grace_s and layout.file_ok(parts[1], parts[2])
                and layout.PIECE_NAME.fullmatch(parts[3])):
            old.append(key)
    if not old:
        return 0
    new, unreadable = _new_since(store, backend, state, warn)
    if unreadable:
        warn("pieces no manifest lists are kept: a manifest written since this run's pull could not be read")
        return 0
    for _, m in new:
        live.update(layout.listed_key(f) for f in m["files"])
    n = 0
    for key in old:
        if key not in live:
            backend.delete(key)
            n += 1
    return n


def _unreadable(backend: Backend, state, warn) -> bool:
    """Is a manifest this copy could not read still on the remote? (Those gone, removed by
    hand as junk, are forgotten.) Said in one line with the way out."""
    gaps = state.get("gaps", {})  # (one written since is read, and dropped, by the next pull)
    if gaps:
        first = sorted(gaps)[0]
        warn(f"pieces no manifest lists are kept: the remote lacks {first} (deleted from the bucket, or a backup restored over it), "
             f"which may list them; `ctape push` on the copy that wrote it puts it back")
        return True
    ignored = state.get("ignored", {})
    for key in sorted(ignored):
        if backend.get(key) is None:
            del ignored[key]
    if not ignored:
        return False
    first = sorted(ignored)[0]
    warn(f"pieces no manifest lists are kept: {first} on the remote could not be read ({ignored[first]}); "
         "if another ctape version wrote it, upgrade; if it is junk, delete it from the remote")
    return True


def _new_since(store, backend: Backend, state, warn) -> tuple[list[tuple[str, dict]], bool]:
    """The manifests that appeared since this run's pull, (uploader, manifest), and whether
    one of them could not be read (its claims and pieces are unknown)."""
    probe = {"next": dict(state["next"])}
    new = [(u, m) for u, _, m in layout.new_manifests(store, backend, probe, warn)]
    return new, bool(probe.get("ignored") or probe.get("gaps"))


def _changed_since(store, backend: Backend, state, warn) -> bool:
    """A manifest of another copy appeared since this run's pull, or one that cannot be
    read: its claims were not weighed."""
    new, unreadable = _new_since(store, backend, state, warn)
    return unreadable or any(u != store.writer for u, _ in new)


def _announce(store, backend: Backend, state, plan: int, files: list[dict], redacted: set) -> int:
    """g/<next>: one more deletion on the remote, and what it deletes (the files, each with
    the end the remote held, and the objects this copy knew redacted: what the manifest
    written next lists as `deleted` and `redacted`). Every push that has something to
    upload looks for the next number (one GET) and learns the deletion from it; readers
    learn it from the manifest, or from here when that manifest is lost (a copy that holds
    a deleted file compacts it before its push: layout.lost_announcements)."""
    n = first = int(state.get("gnext", 0))
    body = json.dumps({"compactor": store.writer, "plan": plan, "time": time.time(),
                       "files": layout.deletion_files(files),
                       "redacted": sorted(redacted)}, sort_keys=True).encode()
    while not backend.put_if_absent(layout.compaction_key(n), body):
        n += 1
    if n == first:
        state["gnext"] = n + 1
    else:
        # the numbers skipped are other compactors' deletions, announced since this copy
        # looked: not passed unread (a lost manifest of one would have hidden it from
        # lost_announcements, which starts at gnext; found in review). The next push reads them
        state.setdefault("deletions_read", []).append(n)
    return n
