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


ops = st.lists(st.tuples(st.sampled_from(["upload", "announce", "deletes"]), st.sampled_from(COPIES), st.sampled_from(sorted(FILES))), max_size=16)


@settings(max_examples=400, deadline=None)
@given(ops)
def test_a_deletions_deletes_leave_what_was_put_again_after_its_announcement(seq):
    """The bucket by keys: a deletion is announced (its manifest) and its deletes run later,
    with pushes in between that learned of it. Each push puts under the generation its
    copy learned (layout.generation), each deletion's deletes take what layout.deletable
    names. After any sequence, a reader in any order of uploaders holds a file exactly
    when the bucket holds a key of it listed after its last deletion, and every key it
    would fetch is in the bucket (before generations, a push between the announcement and
    the deletes put under the old key, and the deletes took it: a reader's fetch missed)."""
    keys: set[tuple[str, int]] = set()  # (file, gen) objects in the bucket
    live: set[tuple[str, int]] = set()  # keys a manifest lists after the file's last deletion
    deletions = 0
    last: dict[str, int] = {}  # file -> its last deletion's number
    pending: list[tuple[str, int]] = []  # announced deletions whose deletes have not run
    manifests: dict[str, list[dict]] = {c: [] for c in COPIES}
    for op, copy, file in seq:
        if op == "upload":  # a push learns every announced deletion first (g/<n>, then its manifest)
            state = {"gens": {f"S/{f}": n + 1 for f, n in last.items()}}
            gen = layout.generation(state, f"S/{file}")
            keys.add((file, gen))
            live.add((file, gen))
            manifests[copy].append(_manifest(files=[_put_again_piece(file, gen)], g=deletions))
        elif op == "announce" and any(f == file for f, _ in live):
            manifests[copy].append(_manifest(deleted=[{"session": "S", "file": file, "end": FILES[file]}], g=deletions + 1, deleted_g=deletions))
            last[file] = deletions
            pending.append((file, deletions))
            live = {k for k in live if k[0] != file}
            deletions += 1
        elif op == "deletes" and pending:
            f, n = pending.pop(0)
            keys = {(g_f, gen) for g_f, gen in keys if g_f != f or not layout.deletable(f"0-{FILES[f]}" + (f".{gen}" if gen else ""), FILES[f], n)}
    for order in itertools.permutations(COPIES):
        state = _fresh_state()
        for u in order:
            for m in manifests[u]:
                layout.note_manifest(state, m)
        held = {k.split("/", 1)[1]: rows for k, rows in state["pieces"].items() if rows}
        assert set(held) == {f for f, _ in live}, order
        for f, rows in held.items():
            assert (f, rows[0][4]) in keys, (order, f, rows)
    assert live <= keys
