"""Sessions as a whole: which exist, the default one, removing and copying them.

A session is removed by one ref record (op "session-rm") that sets every branch and
HEAD to null; a session whose refs are all null is gone: not listed, and reading it
fails as unknown. Appending to the name again starts it afresh. A copy is one ref
record in the new session (op "session-cp") pointing at the source's entries: entries
are content-addressed and any session reads any entry of the tape, so nothing is copied.
"""

from __future__ import annotations

import difflib
import json
import os
from typing import TYPE_CHECKING, Any, Optional

from ..model.errors import CorruptObject, EntryNotFound, InvalidInput, NoDefaultSession, RefNotFound, SessionNotFound
from ..model.models import brief, check_name, Entry, NAME_RE
from ..model.refs import HEAD, TAG, RefState
from . import derived
from .stream import _open_streams

if TYPE_CHECKING:
    from .tape import Tape


def is_removed(st: RefState) -> bool:
    """True for a session whose every ref was set to null (by `session rm`)."""
    return HEAD in st.claims and st.head is None and not st.branches


SHOWN = 8  # session names an error lists before it says how many there are
SHOWN_WIDTH = 60  # ... and the characters they take at most (names may be 128 long): the line stays short


def live_names(tape: "Tape") -> list[str]:
    """The sessions not removed, after one refresh of the whole tape (Store.settled_all)."""
    return tape.store.settled_all(lambda: [n for n in tape.store.sessions() if NAME_RE.fullmatch(n) and tape._session_exists(n)])


def unknown(tape: "Tape", name: str) -> SessionNotFound:
    return SessionNotFound(f"no session {name!r} in this tape; {closest(tape, name)}")


def closest(tape: "Tape", name: str) -> str:
    """What an error about an unknown `name` suggests: the sessions named most alike."""
    names = live_names(tape)
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    if near:
        hint = f"did you mean {' or '.join(near)}?"
    elif names:  # none alike: still the nearest few, as the spec asks
        if len(names) == 1:
            hint = f"its only session is {next(iter(names))}"
        elif len(names) <= 3:
            hint = f"its sessions are {', '.join(sorted(names))}"
        else:
            nearest = difflib.get_close_matches(name, names, n=3, cutoff=0) or sorted(names)[:3]
            hint = f"the nearest of its {len(names)} sessions: {', '.join(nearest)} (see `ctape sessions`)"
    else:
        hint = "the tape has no sessions yet (appending creates one)"
    return hint


def require(tape: "Tape", name: str, prefix: bool = True) -> str:
    """The session `name` names: itself if it is a session of the tape, else (with `prefix`)
    the one session whose name starts with it. None: SessionNotFound naming the closest
    ones; several: InvalidInput listing them (exit 2)."""
    check_name(name, "session name")
    if tape._session_exists(name):
        return name
    if prefix and not os.path.isdir(tape.store.session_dir(name)):
        # (a removed session's own name names it, removed: it is not a prefix of another's)
        found = [n for n in live_names(tape) if n.startswith(name)]
        if len(found) == 1:
            return found[0]
        if found:
            shown = ", ".join(found[:6]) + (f", ... ({len(found)} in all)" if len(found) > 6 else "")
            raise InvalidInput(f"session prefix {name!r} is ambiguous: {shown}; type more of the name")
    raise unknown(tape, name)


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
    few: list[str] = []
    for n in sorted(names):  # as many as fit a short line (at most SHOWN), then how many
        if len(few) == SHOWN or few and sum(map(len, few)) + len(n) > SHOWN_WIDTH:
            break
        few.append(n)
    shown = ", ".join(few) + (f", ... {len(names)} in all: `ctape sessions`" if len(names) > len(few) else "")
    raise NoDefaultSession(f"several sessions ({shown}): pass -s NAME (reads take a unique prefix), set CTAPE_SESSION, or run `ctape session use NAME`")


def remove(tape: "Tape", name: str) -> dict:
    """Remove a session: one ref record setting every branch and HEAD to null (and one
    closing each stream it left interrupted)."""
    s = tape.session(require(tape, name, prefix=False))  # removing takes the whole name
    with tape.store.writing(name) as w:
        st = s._writer_refs(w)
        old = {"head": st.head, "branches": dict(st.branches)}
        changes: dict[str, Optional[str]] = {b: None for b in st.branches}
        changes.update({TAG + t: None for t in st.tags})  # its tags go too: compact frees what they held
        changes[HEAD] = None
        s._write_ref(w, "session-rm", changes)
        # an interrupted stream goes with its session: recorded later, it would bring the
        # removed history back into the next session of this name (a record closes it)
        for stream in sorted(_open_streams(s)):
            s._write_ref(w, "session-rm", {HEAD: None}, stream=stream)
    from ..store.localstate import choose_session, chosen_session

    was_default = chosen_session(tape.store) == name
    if was_default:
        choose_session(tape.store, None)
    return {"session": name, **old, "was_default": was_default}


def copy(tape: "Tape", src: str, new: str) -> dict:
    """A new session NEW whose history is SRC's, by reference: every branch, tag and HEAD
    of a session, one branch for SESSION/BRANCH, or a branch `main` at an entry for any
    other ref. A copy of less than a whole session takes the source session's tags that
    name entries on the history it copies (as git fetches the tags of a branch)."""
    check_name(new, "session name")
    if not isinstance(src, str) or not src:
        raise InvalidInput(f"copy what? give a session, SESSION/BRANCH or a REF, not {brief(src, 40)}")
    if tape._session_exists(new):
        raise InvalidInput(f"session {new!r} already exists; pick another name or remove it first (`ctape session rm {new}`)")
    changes: dict[str, Optional[str]]
    if NAME_RE.fullmatch(src) and tape._session_exists(src):
        st = tape.session(src).refs()
        if st.head is None:
            raise RefNotFound(f"session {src!r} has no entries to copy")
        changes = dict(st.branches)
        changes.update({TAG + t: h for t, h in st.tags.items()})
        changes[HEAD] = st.head
    elif "/" in src and not any(c in src for c in "~^@") and _is_branch(tape, *src.split("/", 1)):
        s, _, b = src.partition("/")
        h = tape.resolve(src)
        changes = {b: h, HEAD: "@" + b}
    else:  # an entry (SESSION/HEAD, a tag, an anchor, a hash, REF~N...): a branch `main` there
        try:
            h = tape.resolve(src)
        except RefNotFound:
            if NAME_RE.fullmatch(src) and not all(c in "0123456789abcdef" for c in src):
                raise unknown(tape, src) from None  # a name, most likely a mistyped session
            raise
        if h is None:
            raise RefNotFound(f"{src!r} has no entries to copy")
        changes = {"main": h, HEAD: "@main"}
    for ref, h in changes.items():
        if h is not None and not h.startswith("@") and not tape.has_entry(h):
            what = "HEAD" if ref == HEAD else f"tag {ref[len(TAG):]}" if ref.startswith(TAG) else f"branch {ref}"
            where = tape.store.lost_to_damage(h)
            why = "which this tape does not hold yet (sync in progress?)" if where is None else \
                "which was lost to damage (see `ctape fsck`)" if where.startswith("quarantine") else \
                "which damaged records hold (see `ctape fsck`)"
            raise RefNotFound(f"{src!r}: its {what} points at {h[:12]}, {why}")
    if not any(k.startswith(TAG) for k in changes):
        tip = changes[HEAD] if not changes[HEAD].startswith("@") else changes[changes[HEAD][1:]]
        changes.update(_tags_on_path(tape, src.split("/")[0].split("~")[0].split("^")[0].split("@")[0], tip))
    tape.session(new).set_refs("session-cp", changes, source=src)
    return {"session": new, "source": src, "head": changes[HEAD],
            "branches": {k: v for k, v in changes.items() if k != HEAD and not k.startswith(TAG)},
            "tags": {k[len(TAG):]: v for k, v in changes.items() if k.startswith(TAG)}}


def _is_branch(tape: "Tape", session: str, name: str) -> bool:
    """Is NAME a branch of SESSION (the one copied as such by SESSION/BRANCH)? An unknown
    session is an error here; anything else SESSION/X names (its HEAD, a tag, an anchor) is
    an entry, copied as a branch `main` (it became a branch named after the tag, or failed:
    found by an audit)."""
    require(tape, session)
    return name != HEAD and name in tape.session(session).refs().branches


def _tags_on_path(tape: "Tape", session: str, tip: str) -> dict[str, str]:
    """The tags of `session` (when SRC named one) that name entries on the path root->tip."""
    if not NAME_RE.fullmatch(session) or not tape._session_exists(session):
        return {}
    from . import derived

    tags = tape.session(session).refs().tags
    if not tags:
        return {}
    top = tape.read_entry(tip).seq
    out = {}
    for name, h in tags.items():
        try:
            seq = tape.read_entry(h).seq
        except (EntryNotFound, CorruptObject):
            continue  # not synced yet or damaged: not known to be on the path
        if seq <= top and derived.ancestor(tip, top - seq, tape.read_entry, tape.store.index.keyframe) == h:
            out[TAG + name] = h
    return out



# -- what a session is about: its title and where it came from ------------------------------

SUMMARY_VIEW = "ctape.session-summary.2"  # index cache rows: HEAD hash -> {"title", "source"} (2: titles past tagged blocks)


def listing(tape: "Tape") -> list[dict]:
    """Every session as `Tape.sessions()` gives it plus its `title` and `source`, most
    recently active first (then by name): the order of `ctape sessions` and the web's list."""
    rows = tape.sessions()
    for r in rows:
        r.update(summary(tape, r["head"]))
    rows.sort(key=lambda r: r["session"])
    rows.sort(key=lambda r: r["last_time"] or "", reverse=True)
    return rows


def summary(tape: "Tape", head: Optional[str]) -> dict:
    """{"title", "source"} of the history root->head: the first user request (one line, at
    most TITLE_WIDTH characters) and, for an imported session, {"agent", "cwd"?}. Kept in
    the index cache per HEAD. A HEAD not seen before is read back to the nearest entry that
    was, or to the nearest keyframe (derived.py folds `about` forward), or to the root:
    a session is never read whole for its title once its keyframes are written."""
    found: dict[str, Any] = {"title": None, "source": None}
    if head is None:
        return found
    index = tape.store.index
    cached = index.view_path(SUMMARY_VIEW, head, 1)
    if cached:
        return json.loads(cached[0][2])
    newer: list[Entry] = []  # read from head back, newest first
    older: Optional[dict] = None  # `about` just before the oldest of them
    h: Optional[str] = head
    parent = None
    whole = True
    while h is not None:
        cached = index.view_path(SUMMARY_VIEW, h, 1) if h != head else None
        if cached:
            got = json.loads(cached[0][2])
            src = got["source"] or {}
            older = {"title": got["title"], "agent": src.get("agent"), "cwd": src.get("cwd")}
            break
        try:
            e = tape.read_entry(h)
        except (EntryNotFound, CorruptObject):
            whole = False  # not synced yet or damaged: say what was read, keep nothing
            break
        if h == head:
            parent = e.parent
        if e.seq % derived.KEY_EVERY == 0:
            older = _about_at_keyframe(tape, e, len(newer) >= derived.KEY_EVERY)
            if older is not None:
                break
        newer.append(e)
        h = e.parent
    about = older or derived.empty()["about"]
    for e in reversed(newer):
        about = derived.about_after(about, e)
    found["title"] = about["title"]
    if about["agent"]:
        found["source"] = {"agent": about["agent"], **({"cwd": about["cwd"]} if about["cwd"] else {})}
    if whole:
        index.put_views(SUMMARY_VIEW, [(head, parent, json.dumps(found))])
    return found


def _about_at_keyframe(tape: "Tape", e: Entry, fold: bool) -> Optional[dict]:
    """`about` at entry e, a keyframe's place: from its keyframe; or, when `fold` (the walk
    back has gone far already), from folding the path, which writes the keyframes the next
    look finds. None when neither knows (an older keyframe; a hole or damage on the path)."""
    k = tape.store.index.keyframe(e.hash)
    if k is not None and k.get("v") == derived.KEYFRAME_VERSION and k.get("about") is not None:
        return k["about"]
    if not fold:
        return None
    try:
        return tape.derived(e.hash).get("about")
    except (EntryNotFound, CorruptObject):
        return None


def source_text(source: Optional[dict]) -> str:
    """A source in a few words: the agent and the last part of its working directory."""
    if not source:
        return ""
    cwd = (source.get("cwd") or "").rstrip("/\\")
    where = os.path.basename(cwd.replace("\\", "/")) if cwd else ""
    if len(where) > 200:  # a real directory name is at most 255 bytes; an imported one is any text
        where = where[:199] + "…"
    return f"{source['agent']} {where}".strip()

