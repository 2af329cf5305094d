"""Which files a push sends, and which sessions go up only with which.

The files of the chosen sessions that are longer here than on the remote; for `push -s`,
with the files of other sessions that hold what those refer to (a large value is stored
once per tape, and `session cp` refers to its source's entries); and the sessions that
wait with one held back, because a clone could not read what they refer to without it.
"""

from __future__ import annotations

import json

from ..model.errors import CtapeError
from ..store import framing
from . import layout
from .push_check import shown_name
from .remote import State


def _todo(store, state: State, chosen: list[str]) -> list[tuple]:
    """(session, file, start, end, own segment) for every file longer here than there."""
    todo = []
    for s in chosen:
        for rel, size in sorted(store.list_files(s).items()):
            if not rel.startswith(f"sessions/{s}/"):
                continue
            file = rel.rsplit("/", 1)[1]
            if not layout.file_ok(s, file):
                continue
            have = int(state["have"].get(f"{s}/{file}", 0))
            if size <= have:
                continue
            is_pack = file.endswith(".pack")
            todo.append((s, file, 0 if is_pack else have, size, layout.segment_owner(file) == store.writer))
    return todo


def _with_what_they_need(tape, state: State, chosen: list[str], todo: list[tuple]) -> tuple[list[str], list[tuple]]:
    """`push -s`: the chosen sessions and files, with the files of other sessions that hold
    what the upload refers to and the remote lacks. A large value is stored once per tape
    and `session cp` refers to its source's entries, so an entry of a chosen session may
    refer to an object in another session's file; without that file a clone could not read
    it ("has not arrived yet"). Closed under what the added files refer to in turn."""
    from ..ops.compact_scan import LINKS
    from ..store.files import TYPE_ENTRY
    from ..store.store import TYPE_WITHHELD

    store = tape.store
    sizes: dict[str, int] = {}
    queued = {(s, file) for s, file, *_ in todo}
    out, sessions, queue = list(todo), list(chosen), list(todo)
    while queue:
        s, file, start, end, _ = queue.pop()
        wanted: set[str] = set()
        try:
            for rec in store.scan_file(f"sessions/{s}/{file}", 0 if file.endswith(".pack") else start, end):
                if not isinstance(rec, framing.Record):
                    continue
                if rec.type == framing.T_OBJECT and len(rec.body) > 33 and rec.body[32] in (TYPE_ENTRY, TYPE_WITHHELD):
                    _, body = store.decode_object(rec.body[:32].hex(), rec.body)
                    wanted.update((a or b).decode() for a, b in LINKS.findall(body))
                elif rec.type == framing.T_REF:
                    values = (json.loads(rec.body).get("set") or {}).values()
                    wanted.update(v for v in values if isinstance(v, str) and len(v) == 64)
        except (OSError, CtapeError, ValueError):
            continue  # damaged or gone: what it holds is not read here either (check_secrets, the push)
        for h in wanted:
            loc = store.index.find_object(h)
            path = store.index.path_of(loc[0]) if loc else None
            if not path or not path.startswith("sessions/"):
                continue
            _, s2, f2 = path.split("/", 2)
            if s2 in chosen or (s2, f2) in queued or int(state["have"].get(f"{s2}/{f2}", 0)) > loc[1]:
                continue  # going up with the chosen ones, or on the remote already
            if s2 not in sizes:
                sizes.update(store.list_files(s2))
            size = sizes.get(path, 0)
            if not layout.file_ok(s2, f2) or size <= loc[1]:
                continue
            have = int(state["have"].get(f"{s2}/{f2}", 0))
            piece = (s2, f2, 0 if f2.endswith(".pack") else have, size, layout.segment_owner(f2) == store.writer)
            queued.add((s2, f2))
            out.append(piece)
            queue.append(piece)
            if s2 not in sessions:
                sessions.append(s2)
    return sessions, out


def _waiting_on(tape, state: State, rest: list[tuple], held: dict[str, str]) -> None:
    """Add to `held` the sessions of `rest` whose upload refers to what a held-back session
    stores and the remote lacks (a large value is stored once per tape; `session cp` refers
    to its source's entries): a clone could not read them. Until none is added; then each
    names the first session it refers to that waits (in a chain A -> B -> C with C held
    back, A names B, which names C)."""
    needs: dict[str, list[str]] = {}
    waiting: list[str] = []
    while True:
        more = []
        for s in sorted({p[0] for p in rest} - held.keys() - set(waiting)):
            if s not in needs:
                needs[s] = _with_what_they_need(tape, state, [s], [p for p in rest if p[0] == s])[0][1:]
            if any(x in held or x in waiting for x in needs[s]):
                more.append(s)
        if not more:
            break
        waiting += more
    for s in waiting:
        first = next(x for x in needs[s] if x in held or x in waiting)
        held[s] = (f"not pushing session {shown_name(tape, s)}: it refers to values stored in session "
                   f"{shown_name(tape, first)}, which is held back; it goes with that one")


def _unlist_waiting(tape, state: State, went: list[tuple], held_back: dict[str, str], listed: list[dict],
                    noted: dict[str, tuple]) -> set[str]:
    """The sessions that went up in this push whose uploads refer to values a session held
    back during the upload stores (a secret appended after the check, found when push read
    its own segment): they wait with it, as the check before the upload makes them wait
    (`_waiting_on`), and are added to `held_back`. Their pieces are on the remote already,
    but no manifest will name them (as after a push killed before its manifest: nobody reads
    them, and the next push finds them equal or adds new ranges), and this copy forgets it
    sent them. Until none is added: a session that waits may hold what another refers to."""
    waiting: set[str] = set()
    while True:
        held = dict(held_back)
        _waiting_on(tape, state, [p for p in went if p[0] not in held_back], held)
        more = held.keys() - held_back.keys()
        if not more:
            return waiting
        held_back.update((s, held[s]) for s in more)
        waiting |= more
        for k, (have, pieces) in noted.items():
            if k.split("/", 1)[0] in more:
                if have is None:
                    state["have"].pop(k, None)
                else:
                    state["have"][k] = have
                if pieces:
                    state["pieces"][k] = pieces
                else:
                    state["pieces"].pop(k, None)
