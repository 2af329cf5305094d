"""What a copy learns from a remote's manifests must not depend on the order it reads the
uploaders in (docs/remotes.md: "a reader never takes a piece uploaded after a deletion for
one the deletion removed, whatever order it reads the uploaders in"). A pull or clone reads
them in order of name, each uploader's manifests in its own order; copies of one tape have
random writer ids, so every order happens.

A stateful property test against a plain model of the bucket: copies upload packs (the same
pack, named by its content, is the same key with the same bytes whoever uploads it) and
compactions of the remote delete them, with the deletion numbers and each manifest's `g`
as push and `compact --remote` write them. After any sequence, a reader that reads the
manifests in any order of uploaders holds a file exactly when the bucket does. Before the
fix, a piece listed again after its deletion was taken for the first listing, and a
reader that read both before the deletion thought the file gone (CI, the concurrent
redaction test: a fresh clone without a session)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from ctape.sync import layout

FILES = {"pack-a.pack": 300, "pack-b.pack": 500}
COPIES = ["ccc1", "aaa1", "bbb1"]  # event order and name order differ


def _manifest(files=(), deleted=(), g=0, deleted_g=0) -> dict:
    return {"files": list(files), "deleted": list(deleted), "g": g, "deleted_g": deleted_g, "lost": [], "redacted": []}


def _piece(file: str) -> dict:
    return {"session": "S", "file": file, "start": 0, "end": FILES[file], "blake3": f"h-{file}"}


def _fresh_state() -> dict:
    return {"have": {}, "pieces": {}, "gone": {}}


def _read(manifests: dict[str, list[dict]], order) -> set[str]:
    state = _fresh_state()
    for u in order:
        for m in manifests[u]:
            layout.note_manifest(state, m)
    return {k.split("/", 1)[1] for k, rows in state["pieces"].items() if rows}


events = st.lists(st.tuples(st.sampled_from(["upload", "delete"]), st.sampled_from(COPIES), st.sampled_from(sorted(FILES))), max_size=14)


@settings(max_examples=400, deadline=None)
@given(events)
def test_any_order_of_uploaders_learns_what_the_bucket_holds(seq):
    there: set[str] = set()  # the model: which packs the bucket holds
    deletions = 0  # g/<n> announced so far; each push learns them first (one GET)
    manifests: dict[str, list[dict]] = {c: [] for c in COPIES}
    for op, copy, file in seq:
        if op == "upload":  # a push: create-only; found there with these bytes, it is listed all the same
            manifests[copy].append(_manifest(files=[_piece(file)], g=deletions))
            there.add(file)
        elif file in there:  # compact --remote: a file it read whole and replaced
            manifests[copy].append(_manifest(deleted=[{"session": "S", "file": file, "end": FILES[file]}], g=deletions + 1, deleted_g=deletions))
            deletions += 1
            there.discard(file)
    for order in itertools.permutations(COPIES):
        assert _read(manifests, order) == there, order


def test_the_case_ci_found():
    """C lists P, Z deletes it, C lists it again; C is read before Z."""
    p = "pack-a.pack"
    manifests = {"aaa1": [_manifest(files=[_piece(p)], g=0), _manifest(files=[_piece(p)], g=1)],
                 "zzz1": [_manifest(deleted=[{"session": "S", "file": p, "end": FILES[p]}], g=1, deleted_g=0)]}
    assert _read(manifests, ["aaa1", "zzz1"]) == {p}
    assert _read(manifests, ["zzz1", "aaa1"]) == {p}


def _put_again_piece(file: str, gen: int) -> dict:
    return {**_piece(file), "gen": gen} if gen else _piece(file)


class _Bucket:
    """The bucket's piece keys, as much of a Backend as prune's deletes use."""

    def __init__(self):
        self.keys: set[str] = set()

    def list(self, prefix, delimiter=None):
        return [(k, 0, False) for k in sorted(self.keys) if k.startswith(prefix)]

    def delete(self, key):
        self.keys.discard(key)


def _learn(state: dict, manifests: dict[str, list[dict]]) -> None:
    """A copy reads the manifests it has not read yet (a push's `learn`, a pull)."""
    for u in COPIES:
        n = state["next"].get(u, 0)
        for m in manifests[u][n:]:
            layout.note_manifest(state, m)
        state["next"][u] = len(manifests[u])


def _copy_state() -> dict:
    return {"have": {}, "pieces": {}, "gone": {}, "gens": {}, "next": {}}


ops = st.lists(st.tuples(st.sampled_from(["learn", "upload", "announce", "killed", "deletes", "finish"]), st.sampled_from(COPIES),
                         st.sampled_from(sorted(FILES))), max_size=24)


@settings(max_examples=600, deadline=None)
@given(ops)
def test_a_deletions_deletes_leave_what_was_put_again_after_its_announcement(seq):
    """The bucket by keys, copies that learn the remote's manifests only now and then, and
    deletions whose deletes run later (prune._delete_deleted, with the compactor's state as
    it was at its announcement; or `_finish` by another copy, with that copy's state now).
    A push puts under the generation its copy learned (layout.generation, from note_gone)
    and lists with its count of deletions, which an announcement a killed compactor left
    without a manifest holds back. After any sequence, a reader in any order of uploaders
    holds each file that a push put after every deletion of it that was announced, holds
    no other, and every key it would fetch is in the bucket. Before generations, a push
    between an announcement and the deletes put under the old key, and the deletes took
    it; before readers judged by the key's generation, a push whose count was held back
    put a file again that every reader took for deleted (helper-84)."""
    from ctape.sync import prune

    bucket = _Bucket()
    states = {c: _copy_state() for c in COPIES}
    manifests: dict[str, list[dict]] = {c: [] for c in COPIES}
    deletions = 0
    stuck: int | None = None  # an announcement with no manifest: counts wait there
    pushed: dict[str, list[tuple[int, int]]] = {f: [] for f in FILES}  # file -> (g, gen) of each listing
    dels: dict[str, list[int]] = {f: [] for f in FILES}
    pending: list[tuple[str, int, dict]] = []  # (file, deletion, the compactor's state then)
    for op, copy, file in seq:
        state = states[copy]
        key = f"S/{file}"
        if op == "learn":
            _learn(state, manifests)
        elif op == "upload":  # a push: learns first, as push does (g/<n>, then the manifests)
            _learn(state, manifests)
            learned = sum(1 for m in (m for ms in manifests.values() for m in ms) if m["deleted"] and
                          state["next"].get(m["uploader"], 0) > m["n"])
            g = learned if stuck is None else min(learned, stuck)
            gen = layout.generation(state, key)
            bucket.keys.add(layout.piece_key("S", file, 0, FILES[file], gen))
            m = {**_manifest(files=[_put_again_piece(file, gen)], g=g), "uploader": copy, "n": len(manifests[copy])}
            manifests[copy].append(m)
            layout.note_manifest(state, m)
            state["next"][copy] = len(manifests[copy])
            pushed[file].append((g, gen))
        elif op == "killed":  # a compactor killed between its announcement and its manifest
            stuck = deletions if stuck is None else stuck
            deletions += 1
        elif op == "announce":  # compact --remote: pulls, and deletes a file it holds listed
            _learn(state, manifests)
            if key not in state["pieces"]:
                continue
            n = deletions
            deletions += 1
            m = {**_manifest(deleted=[{"session": "S", "file": file, "end": FILES[file]}], g=n + 1, deleted_g=n),
                 "uploader": copy, "n": len(manifests[copy])}
            manifests[copy].append(m)
            layout.note_manifest(state, m)
            state["next"][copy] = len(manifests[copy])
            dels[file].append(n)
            pending.append((file, n, copy_of(state)))
        elif op == "deletes" and pending:  # the compactor's deletes, as late as they come
            f, n, then = pending.pop(0)
            prune._delete_deleted(bucket, then, "S", f, FILES[f], n)
        elif op == "finish" and dels[file]:  # another copy finishes a killed run's record
            _learn(state, manifests)
            gone = state["gone"].get(key)
            if gone is not None:
                prune._delete_deleted(bucket, state, "S", file, FILES[file], gone[1])
    for order in itertools.permutations(COPIES):
        reader = _copy_state()
        for u in order:
            for m in manifests[u]:
                layout.note_manifest(reader, m)
        held = {k.split("/", 1)[1]: rows for k, rows in reader["pieces"].items() if rows}
        expected = {f for f, ls in pushed.items() if any(all(g > n or gen > n for n in dels[f]) for g, gen in ls)}
        assert set(held) == expected, (order, held, expected)
        for f, rows in held.items():
            assert layout.piece_key("S", f, 0, FILES[f], rows[0][4]) in bucket.keys, (order, f, rows, sorted(bucket.keys))


def copy_of(state: dict) -> dict:
    import copy

    return copy.deepcopy(state)
