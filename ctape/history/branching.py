"""Branches and tags of a Session: checkout, branch, delete_branch, branches and the tags.

A mixin of Session (history/session.py), moved there unchanged. It uses the Session's
`tape`, `name`, `_must_exist`, `_not_removed`, `_writing`, `_writer_refs`, `_write_ref`,
`_head_to_extend` and `refs`.
"""

from __future__ import annotations

from typing import Optional

from .turns import take_turns
from ..model import refs as refmod
from ..model.errors import BranchCheckedOut, InvalidInput, RefNotFound
from ..model.models import brief, check_name
from ..model.refs import HEAD, RefState


@take_turns
class Branching:
    """Checkout, branches and tags; a mixin of Session (its public methods take turns too)."""

    def checkout(self, ref: Optional[str], new_branch: Optional[str] = None) -> RefState:
        """Attach HEAD to a branch, or detach it at an entry; `new_branch` forks a branch there
        (at HEAD when `ref` is None)."""
        if ref is not None and not isinstance(ref, str):
            raise InvalidInput(f"a REF is a string (a hash, a branch, SESSION/BRANCH, HEAD~2...), not {brief(ref, 40)}")
        if new_branch is not None:
            check_name(new_branch, "branch name")
        elif ref is None:
            raise InvalidInput("checkout needs a REF (or -b NAME to fork a branch at HEAD)")
        self._must_exist()
        # (with -b, REF is only where the new branch starts: another session's branch is an
        # entry like any other there, as for `branch NAME REF`)
        branch = self._branch_of_ref(ref) if ref is not None and new_branch is None else None
        with self._writing() as w:  # (records a stream a dead writer left first: HEAD is then its entry)
            st = self._writer_refs(w)
            if new_branch is not None:
                refmod.check_new_name(new_branch, "branch name", st.branches)
                if new_branch in st.branches and new_branch not in st.conflicts:
                    raise InvalidInput(f"branch {new_branch!r} already exists; pick another name or check it out")
                if ref is None:  # at HEAD, as the writer sees it
                    h = self._head_to_extend(st)
                    if h is None:
                        raise RefNotFound(f"session {self.name!r} has no entries to fork from")
                    ref = h
                h = self.tape.resolve(ref, self.name)
                if h is None:
                    raise RefNotFound(f"{ref!r} has no entries to fork from")
                self._write_ref(w, "checkout", {new_branch: h, HEAD: "@" + new_branch}, ref=ref)
            elif branch is not None:
                self._write_ref(w, "checkout", {HEAD: "@" + branch}, ref=ref)
            else:
                h = self.tape.resolve(ref, self.name)
                if h is None:
                    raise RefNotFound(f"{ref!r} has no entries yet")
                self._write_ref(w, "checkout", {HEAD: h}, ref=ref)
            return w.refstate

    def _branch_of_ref(self, ref: str) -> Optional[str]:
        """The branch of this session a REF names exactly, for attaching HEAD."""
        if "~" in ref or "^" in ref or "@{" in ref:
            return None
        s, slash, b = ref.partition("/")
        if slash and s != self.name:
            # another session's branch (not its HEAD, a tag or an anchor, which detach HEAD
            # here at their entry as any other REF does; a name it lacks is an unknown ref)
            if self.tape._session_exists(s) and b != HEAD and b in self.tape.session(s).refs().branches:
                raise InvalidInput(f"{ref!r} is a branch of another session; check it out with -s {s}")
            return None
        name = b if slash else ref
        return name if name in self.refs().branches else None

    def branch(self, name: str, ref: Optional[str] = None, force: bool = False) -> str:
        """Create branch `name` at REF (default: HEAD); returns its entry hash. An existing
        branch (a sync's conflict branch too) moves only with force=True, as `git branch
        -f`: the branch HEAD is on too, which takes appends back (`ctape branch -f main
        main~1`; nothing is lost: the ref log keeps the old tip, `HEAD@{1}` when HEAD is on
        the branch)."""
        check_name(name, "branch name")
        self._must_exist()
        with self._writing() as w:
            st = self._writer_refs(w)
            refmod.check_new_name(name, "branch name", st.branches)
            if name in st.branches and not force:
                raise InvalidInput(f"branch {name!r} already exists; move it with `ctape branch -f {name} REF`, or pick another name")
            h = self.tape.resolve(ref, self.name) if ref is not None else self._head_to_extend(st)
            if h is None:
                raise RefNotFound(f"nothing to branch from: session {self.name!r} has no entries yet")
            if st.branches.get(name) == h:
                return h  # already there: no record
            self._write_ref(w, "branch", {name: h})
            return h

    def delete_branch(self, name: str, force: bool = True) -> str:
        """Delete a branch (its entries stay). The branch HEAD is on is refused unless
        `force`, which detaches HEAD at its tip."""
        check_name(name, "branch name")
        self._must_exist()
        with self._writing() as w:
            st = self._writer_refs(w)
            if name not in st.branches:
                raise RefNotFound(f"session {self.name!r} has no branch {name!r}; see `ctape branch -s {self.name}`")
            if st.branch == name and not force:
                raise BranchCheckedOut(f"branch {name!r} is checked out in session {self.name!r}; check out another ref first, or delete it with -D (HEAD stays at its tip)")
            tip = st.branches[name]
            changes: dict[str, Optional[str]] = {name: None}
            if st.branch == name:
                changes[HEAD] = tip  # detach at its tip: nothing is lost
            self._write_ref(w, "delete", changes)
            return tip

    def branches(self) -> list[dict]:
        self._not_removed()
        st = self.refs()
        conflicts, current = st.conflicts, st.branch  # each worked out once (300,000 branches: once, not per branch)
        return [
            {"name": b, "hash": h, "current": current == b, **({"conflict_of": conflicts[b]} if b in conflicts else {})}
            for b, h in sorted(st.branches.items())
        ]

    # -- tags (ctape/history/tags.py) ------------------------------------------------------------------

    def tag(self, name: str, ref: Optional[str] = None, force: bool = False) -> dict:
        """Tag REF (default HEAD) as NAME; an existing tag moves only with force=True."""
        from . import tags

        return tags.create(self, name, ref, force)

    def delete_tag(self, name: str) -> str:
        from . import tags

        return tags.delete(self, name)

    def tags(self) -> list[dict]:
        from . import tags

        return tags.listing(self)
