"""Sessions as a whole: which exist, the default one, removing and copying them.

A session is removed by one ref record (op "session-rm") that sets every branch and
HEAD to null; a session whose refs are all null is gone: not listed, and reading it
fails as unknown. Appending to the name again starts it afresh. A copy is one ref
record in the new session (op "session-cp") pointing at the source's entries: entries
are content-addressed and any session reads any entry of the tape, so nothing is copied.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Optional

from ..model.errors import InvalidInput, NoDefaultSession, RefNotFound, SessionNotFound
from ..model.models import NAME_RE, check_name
from ..model.refs import HEAD, TAG, RefState

if TYPE_CHECKING:
    from .tape import Tape


def is_removed(st: RefState) -> bool:
    """True for a session whose every ref was set to null (by `session rm`)."""
    return HEAD in st.claims and st.head is None and not st.branches


def live_names(tape: "Tape") -> list[str]:
    return [n for n in tape.store.sessions() if NAME_RE.fullmatch(n) and tape._session_exists(n)]


def unknown(tape: "Tape", name: str) -> SessionNotFound:
    names = live_names(tape)
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    if near:
        hint = f"did you mean {' or '.join(near)}?"
    elif names:
        hint = "see `ctape sessions`"
    else:
        hint = "the tape has no sessions yet (appending creates one)"
    return SessionNotFound(f"no session {name!r} in this tape; {hint}")


def require(tape: "Tape", name: str) -> str:
    """`name` if it is a session of the tape, else SessionNotFound naming the closest ones."""
    check_name(name, "session name")
    if not tape._session_exists(name):
        raise unknown(tape, name)
    return name


def default(tape: "Tape") -> str:
    """The session a command uses when none is named: the one chosen on this machine with
    `session use`, else the tape's only session."""
    from ..store.localstate import chosen_session

    chosen = chosen_session(tape.store)
    if chosen is not None:
        if not tape._session_exists(chosen):
            raise SessionNotFound(f"this machine's default session {chosen!r} no longer exists; run `ctape session use NAME` or pass -s NAME")
        return chosen
    names = live_names(tape)
    if len(names) == 1:
        return names[0]
    if not names:
        raise NoDefaultSession("no session yet: pass -s NAME (appending creates the session)")
    shown = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")
    raise NoDefaultSession(f"several sessions ({shown}): pass -s NAME, set CTAPE_SESSION, or run `ctape session use NAME`")


def remove(tape: "Tape", name: str) -> dict:
    """Remove a session: one ref record setting every branch and HEAD to null."""
    s = tape.session(require(tape, name))
    with tape.store.writing(name) as w:
        st = s._writer_refs(w)
        old = {"head": st.head, "branches": dict(st.branches)}
        changes: dict[str, Optional[str]] = {b: None for b in st.branches}
        changes.update({TAG + t: None for t in st.tags})  # its tags go too: compact frees what they held
        changes[HEAD] = None
        s._write_ref(w, "session-rm", changes)
    from ..store.localstate import choose_session, chosen_session

    if chosen_session(tape.store) == name:
        choose_session(tape.store, None)
    return {"session": name, **old}


def copy(tape: "Tape", src: str, new: str) -> dict:
    """A new session NEW whose history is SRC's, by reference: every branch and HEAD of a
    session, one branch for SESSION/BRANCH, or a branch `main` at an entry for any other ref."""
    check_name(new, "session name")
    if tape._session_exists(new):
        raise InvalidInput(f"session {new!r} already exists; pick another name or remove it first (`ctape session rm {new}`)")
    changes: dict[str, Optional[str]]
    if NAME_RE.fullmatch(src) and tape._session_exists(src):
        st = tape.session(src).refs()
        if st.head is None:
            raise RefNotFound(f"session {src!r} has no entries to copy")
        changes = dict(st.branches)
        changes[HEAD] = st.head
    elif "/" in src and not any(c in src for c in "~^@"):
        s, _, b = src.partition("/")
        require(tape, s)
        h = tape.resolve(src)
        changes = {b: h, HEAD: "@" + b}
    else:
        try:
            h = tape.resolve(src)
        except RefNotFound:
            if NAME_RE.fullmatch(src) and not all(c in "0123456789abcdef" for c in src):
                raise unknown(tape, src) from None  # a name, most likely a mistyped session
            raise
        if h is None:
            raise RefNotFound(f"{src!r} has no entries to copy")
        changes = {"main": h, HEAD: "@main"}
    for h in changes.values():
        if h is not None and not h.startswith("@") and not tape.has_entry(h):
            raise RefNotFound(f"{src!r} points at {h[:12]}, which this tape does not hold yet (sync in progress?)")
    tape.session(new).set_refs("session-cp", changes, source=src)
    return {"session": new, "source": src, "head": changes[HEAD], "branches": {k: v for k, v in changes.items() if k != HEAD}}

