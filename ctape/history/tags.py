"""Tags and anchors: names for entries of a session, usable wherever a REF is.

A tag is a ref record like a branch move, under the ref name `tag:NAME` (`:` is not
allowed in branch names, so the two never collide and listings keep them apart). It
syncs like any ref, survives `compact` (a ref record's value is a root) and never moves
by itself: appends move HEAD's branch, never a tag. When two copies set one tag to
different entries and then sync, one value wins on every copy and the other stays as
the tag NAME.conflict-WRITER8-TIP8 (as a conflict branch does), which `tag` and
`status` point out until someone deletes it.

An anchor name resolves to the newest `anchor` entry of that name on the path to the
session's HEAD. The derived values kept at keyframes list each window's anchors, so the
look-up follows only the keyframes that hold any (see derived.find_anchor).

Resolution of a bare NAME with a session (SPEC 4 and 13): a branch, then a tag, then an
anchor. `tag:NAME` names the tag even where a branch of that name shadows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from . import derived
from ..model.errors import InvalidInput, InvalidName, RefNotFound
from ..model.models import _FULL_HASH, NAME_RE, RESERVED_BRANCHES, check_name
from ..model.refs import TAG, RefState, check_new_name

if TYPE_CHECKING:
    from .session import Session


def create(session: "Session", name: str, ref: Optional[str] = None, force: bool = False) -> dict:
    """Tag REF (default: HEAD) as NAME. An existing tag is an error unless `force`.
    Returns {"name", "hash", "old", "shadowed_by_branch"}."""
    check_name(name, "tag name")
    if name in RESERVED_BRANCHES or _FULL_HASH.fullmatch(name):  # as for branches: it would read as HEAD, or an entry
        raise InvalidName(f"invalid tag name {name[:12] + '...' if len(name) > 12 else name!r}: it reads as "
                          f"{'HEAD' if name in RESERVED_BRANCHES else 'an entry hash'} in a REF; pick another name")
    session._must_exist()
    tape = session.tape
    with session._writing() as w:
        st = session._writer_refs(w)
        h = tape.resolve(ref, session.name) if ref is not None else st.head_hash
        if h is None:
            raise RefNotFound(f"nothing to tag: session {session.name!r} has no entries yet")
        check_new_name(name, "tag name", st.tags)
        old = st.tags.get(name)
        if old is not None and not force:
            raise InvalidInput(f"tag {name!r} already exists (at {old[:12]}); use -f to move it, or pick another name")
        if old != h:  # -f to where it is already: nothing to write
            session._write_ref(w, "tag", {TAG + name: h})
        return {"name": name, "hash": h, "old": old, "shadowed_by_branch": name in st.branches, "unchanged": old == h}


def delete(session: "Session", name: str) -> str:
    """Delete tag NAME; returns the hash it named (the entry stays on the tape)."""
    check_name(name, "tag name")
    session._must_exist()
    with session._writing() as w:
        st = session._writer_refs(w)
        if name not in st.tags:
            raise RefNotFound(f"session {session.name!r} has no tag {name!r}; see `ctape tag -s {session.name}`")
        h = st.tags[name]
        session._write_ref(w, "untag", {TAG + name: None})
        return h


def listing(session: "Session") -> list[dict]:
    """The session's tags, by name: {"name", "hash", "shadowed_by_branch"}, and for a tag
    that holds the other value a sync found for a tag, "conflict_of": that tag's name.
    A session never written has none (as `branches`); a removed one is unknown."""
    session._not_removed()
    st = session.refs()
    conflicts = st.tag_conflicts
    return [{"name": n, "hash": h, "shadowed_by_branch": n in st.branches, **({"conflict_of": conflicts[n]} if n in conflicts else {})}
            for n, h in sorted(st.tags.items())]


def named_entry(session: "Session", name: str, st: Optional[RefState] = None) -> Optional[str]:
    """The entry a bare NAME names in a session after its branches: a tag, else the newest
    anchor of that name on the path to HEAD, else None. `tag:NAME` is a tag only."""
    st = st if st is not None else session.refs()
    if name.startswith(TAG):
        return st.tags.get(name[len(TAG):])
    h = st.tags.get(name)
    if h is not None:
        return h
    return anchor(session, name, st)


def anchor(session: "Session", name: str, st: Optional[RefState] = None) -> Optional[str]:
    """The newest anchor entry called NAME on the path to the session's HEAD."""
    st = st if st is not None else session.refs()
    head = st.head_hash
    if head is None:
        return None
    tape = session.tape
    return derived.find_anchor(tape.derived(head), name, tape.derived)


def is_tag_ref(text: str) -> bool:
    return text.startswith(TAG) and NAME_RE.fullmatch(text[len(TAG):]) is not None
