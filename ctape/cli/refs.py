"""Moving through history and naming it: checkout, branch, tag, reflog; and git's warning for an ambiguous refname."""

from __future__ import annotations

import warnings

import click

from .base import echo_lines, emit_json, json_option, main, need_session, need_stdout, once, open_tape, pager_option, session_option
from .search import _safe, summary_of


def warn_ambiguous(tape, ref, session) -> None:
    """One warning line when a bare name that resolves as a branch, tag, anchor or session
    (SPEC 4: those come first, and still win) is also a hex prefix of an entry, as git warns
    "refname is ambiguous". Checked only for names of 4 to 63 hex digits: cheap otherwise."""
    from ..errors import CtapeError, CtapeWarning
    from ..model.refspec import parse_ref

    try:
        spec = parse_ref(ref) if ref else None
    except CtapeError:
        return  # the command itself says what is wrong with it
    if spec is None or spec.reflog is not None or not _hexish(spec.base):
        return
    what = _named_as(tape, spec.base, session)
    if what is None:
        return
    entry = _prefix_of(tape, spec.base)
    if entry is not None:
        warnings.warn(
            f"refname {spec.base!r} is ambiguous: it names {what} {spec.base} and is the prefix of {entry}; "
            f"the {what} wins, write the full hash for the entry",
            CtapeWarning,
            stacklevel=2,
        )


def warn_new_name(tape, name, kind: str = "branch") -> None:
    """At `branch NAME` / `checkout -b NAME`: a warning when NAME is already a hex prefix of an entry."""
    from ..errors import CtapeWarning

    if name and _hexish(name):
        entry = _prefix_of(tape, name)
        if entry is not None:
            warnings.warn(
                f"{kind} name {name!r} is also the prefix of {entry}: as a ref, {name} now names the {kind}; "
                "write the full hash for the entry",
                CtapeWarning,
                stacklevel=2,
            )


def _hexish(name: str) -> bool:
    return 4 <= len(name) < 64 and all(ch in "0123456789abcdefABCDEF" for ch in name)


def _named_as(tape, name: str, session):
    """What a bare name resolves to before any hex prefix (Tape._resolve_base's order), or None."""
    from ..history import tags
    from ..errors import CtapeError
    from ..model.models import NAME_RE

    try:
        if session is not None and tape._session_exists(session):
            sess = tape.session(session)
            st = sess.refs()
            if name in st.branches:
                return "branch"
            if name in st.tags:
                return "tag"
            if tags.anchor(sess, name, st) is not None:
                return "anchor"
        if NAME_RE.fullmatch(name) and tape._session_exists(name):
            return "session"
    except CtapeError:
        return None
    return None


def _prefix_of(tape, name: str):
    """'entry HASH...' or 'several entries' when `name` is a hex prefix of entries in the tape."""
    from ..errors import AmbiguousRef, RefNotFound

    try:
        return f"entry {tape._resolve_prefix(name.lower())[:16]}..."
    except AmbiguousRef:
        return "several entries"
    except RefNotFound:
        return None


@main.command()
@click.argument("ref", required=False)
@click.option("-b", "new_branch", metavar="NAME", multiple=True, callback=once, help="Create branch NAME at REF (default: HEAD) and attach HEAD to it.")
@session_option
@click.pass_context
def checkout(ctx, ref, new_branch, session):
    """Move HEAD to REF: attach it to a branch, or detach it at an entry.

    Later appends continue from there; nothing is lost or copied. With several
    sessions and none chosen (-s, $CTAPE_SESSION, `session use`), a REF
    SESSION/BRANCH moves that session's HEAD.

    \b
    Examples:
      ctape checkout alt -s chat             # attach to chat/alt
      ctape checkout chat/alt                # the same
      ctape checkout chat~3 -s chat          # detached at an older entry
      ctape checkout -b retry chat~3 -s chat # fork a branch there
      ctape checkout -b idea                 # fork a branch at HEAD
    """
    if ref is None and new_branch is None:
        raise click.UsageError("give a REF to check out, or -b NAME to fork a branch at HEAD")
    if ref == "":
        from ..model.refspec import parse_ref

        parse_ref(ref)  # the empty ref's own error, before the session's
    from ..errors import NoDefaultSession

    tape = open_tape(ctx)
    owner = None
    try:
        name = need_session(ctx, session)
    except NoDefaultSession:
        # several sessions and none chosen (-s, $CTAPE_SESSION, `session use`): a ref
        # SESSION/BRANCH says which (it asked for -s; found by a contract audit)
        owner = _named_session(tape, ref)
        if owner is None:
            raise
        name = owner
    warn_ambiguous(tape, ref, name)
    st = tape.session(name).checkout(ref, new_branch)
    warn_new_name(tape, new_branch)
    h = st.head_hash
    whose = f"HEAD of session {name}" if owner else "HEAD"
    if st.branch:
        click.echo(f"{whose} is now on branch {st.branch} at {h[:12] if h else '(no entries)'}", err=True)
    else:
        click.echo(f"{whose} is now detached at {h[:12] if h else '?'}", err=True)


def _named_session(tape, ref) -> str | None:
    """The session a SESSION/BRANCH ref names (with ~N, ^ or not), when it exists: checkout
    moves that session's HEAD when no session is chosen otherwise. None otherwise."""
    from ..errors import CtapeError
    from ..model.refspec import parse_ref

    if not ref or "/" not in ref:
        return None
    try:
        base = parse_ref(ref).base
    except CtapeError:
        return None
    owner = base.split("/", 1)[0]
    return owner if tape._session_exists(owner) else None


@main.command()
@click.argument("name", required=False)
@click.argument("ref", required=False)
@click.option("-d", "--delete", "delete", metavar="NAME", multiple=True, callback=once,
              help="Delete branch NAME (its entries stay); refuses the checked-out branch.")
@click.option("-D", "force_delete", metavar="NAME", multiple=True, callback=once,
              help="Delete branch NAME even if checked out: HEAD stays, detached, at its tip.")
@click.option("-f", "--force", is_flag=True, help="Move NAME to REF if it exists (the branch HEAD is on too: this takes appends back).")
@session_option
@json_option
@click.pass_context
def branch(ctx, name, ref, delete, force_delete, force, session, as_json):
    """List branches, create NAME at REF (default HEAD), or delete one.

    An existing NAME moves only with -f, as in git; on the branch HEAD is on, that
    takes back appends (`branch -f main main~1`); nothing is lost: the old tip stays
    in the ref log (`ctape reflog`, `HEAD@{1}`) until `compact` expires it. -d and -D take one NAME:
    a command deletes one branch, or none when it is refused (unlike `git branch -d a
    b`, more names are a usage error, exit 2).

    \b
    Examples:
      ctape branch -s chat
      ctape branch experiment chat~2 -s chat
      ctape branch -f main main~1 -s chat    # take back the last append
      ctape branch -d experiment -s chat
      ctape branch -D main -s chat    # HEAD is detached at main's tip
    """
    from ..ops.render import clean

    if delete is not None and force_delete is not None:
        raise click.UsageError("give -d or -D, not both")
    gone = delete if delete is not None else force_delete
    if force and (gone is not None or name is None):
        raise click.UsageError("-f moves a branch: ctape branch -f NAME REF")
    if gone is not None and name is not None:
        flag = "-d" if delete is not None else "-D"
        raise click.UsageError(f"{flag} takes one branch name: ctape branch {flag} NAME (one command for each branch)")
    if gone is None and name is None:
        need_stdout()
    tape = open_tape(ctx)
    s = tape.session(need_session(ctx, session))
    if gone is not None:
        tip = s.delete_branch(gone, force=force_delete is not None)
        click.echo(f"Deleted branch {gone} (was {tip[:12]})", err=True)
        if as_json:  # one object, as `tag --json NAME` prints: the branch's value now and before
            emit_json({"name": gone, "hash": None, "old": tip})
        return
    if name is not None:
        warn_ambiguous(tape, ref, s.name)
        before = s.refs()
        old = before.branches.get(name) if force else None
        h = s.branch(name, ref, force=force)
        warn_new_name(tape, name)
        if old is None:
            click.echo(f"Created branch {name} at {h[:12]}", err=True)
        elif old == h:
            click.echo(f"Branch {name} is already at {h[:12]}; nothing moved", err=True)
        else:
            on = "; HEAD is on it" if before.branch == name else ""
            click.echo(f"Moved branch {name} from {old[:12]} to {h[:12]}{on} (`ctape branch -f {name} {old[:12]}` moves it back)", err=True)
        if as_json:
            emit_json({"name": name, "hash": h, "old": old})
        return
    rows = s.branches()
    if as_json:
        for b in rows:
            emit_json(b)
        return
    width = max([24, *(len(b["name"]) for b in rows)])
    st = s.refs()
    if st.branch is None and st.head_hash:  # first, as git lists it
        click.echo(f"* (HEAD detached at {st.head_hash[:12]})")
    for b in rows:
        mark = "*" if b["current"] else " "
        note = f"  (conflict: the other tip of {b['conflict_of']})" if "conflict_of" in b else ""
        click.echo(clean(f"{mark} {b['name']:<{width}} {b['hash'][:12]}{note}"))


@main.command()
@click.argument("session_arg", metavar="[SESSION]", required=False)
@session_option
@click.option("-n", "limit", type=click.IntRange(min=0), help="Show at most N lines.")
@json_option
@pager_option
@click.pass_context
def reflog(ctx, session_arg, session, limit, as_json, no_pager):
    """Every move of the session's HEAD and branches, newest first.

    HEAD positions are numbered for SESSION@{N}, or HEAD@{N} in the current
    session (the first column; --json: "index"); a line that did not move
    HEAD, such as a branch made elsewhere, has no number.

    \b
    Examples:
      ctape reflog chat
      ctape checkout chat@{1} -s chat
      ctape show HEAD@{2}
    """
    from ..ops import render

    need_stdout()
    if session_arg is not None and session is not None and session != session_arg and \
            ctx.get_parameter_source("session") == click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError(f"two sessions: {session_arg!r} and -s {session!r}; give one")
    tape = open_tape(ctx)
    name = need_session(ctx, session_arg if session_arg is not None else session)
    rows = tape.session(name).reflog()
    if limit is not None:
        rows = rows[:limit]
    if as_json:
        for r in rows:
            emit_json(r)
        return
    echo_lines([render.reflog_line(r, name) for r in rows], not no_pager)


@main.command()
@click.argument("name", required=False)
@click.argument("ref", required=False)
@click.option("-d", "--delete", "delete", metavar="NAME", multiple=True, callback=once, help="Delete tag NAME (the entry stays on the tape).")
@click.option("-f", "--force", is_flag=True, help="Move an existing tag NAME to REF.")
@session_option
@json_option
@click.pass_context
def tag(ctx, name, ref, delete, force, session, as_json):
    """List tags, tag REF (default: HEAD) as NAME, or delete a tag.

    A tag names one entry for good: appends never move it, and `compact` keeps what
    it reaches. A tag is a REF wherever a session is given: a bare name is tried as
    a branch, then a tag, then an anchor name; `tag:NAME` is the tag even where a
    branch of that name hides it. When two copies set one tag differently and
    sync, one value wins everywhere and the other stays as the tag
    NAME.conflict-WRITER8-TIP8, marked here and in `status` until deleted.

    \b
    Examples:
      ctape tag -s chat
      ctape tag before-refactor -s chat
      ctape tag v1 chat~4 -s chat
      ctape tag -f v1 -s chat
      ctape tag -d v1 -s chat
    """
    tape = open_tape(ctx)
    s = tape.session(need_session(ctx, session))
    if delete is not None:
        if name is not None:
            raise click.UsageError("-d takes one tag name: ctape tag -d NAME (one command for each tag)")
        h = s.delete_tag(delete)
        click.echo(f"deleted tag {delete} (was {h[:12]})", err=True)
        if as_json:
            emit_json({"name": delete, "hash": None, "old": h})
        return
    if name is None:
        if force:
            raise click.UsageError("-f needs a tag NAME to move")
        need_stdout()
        rows = s.tags()
        width = max([len(t["name"]) for t in rows] or [0])
        for t in rows:
            if as_json:
                emit_json(t)
            else:
                note = f"  (conflict: the other value of tag {t['conflict_of']} after a sync)" if "conflict_of" in t else ""
                click.echo(f"{_safe(t['name']):<{width}}  {t['hash'][:12]}  {_safe(summary_of(tape, t['hash']))}{note}")
        return
    r = s.tag(name, ref, force)
    if r.get("unchanged"):
        click.echo(f"tag {name} is already at {r['hash'][:12]}", err=True)
    elif r["old"]:
        click.echo(f"moved tag {name} from {r['old'][:12]} to {r['hash'][:12]}", err=True)
    else:
        click.echo(f"tagged {r['hash'][:12]} as {name}", err=True)
    if r["shadowed_by_branch"]:
        click.echo(f"warning: branch {name!r} has the same name and wins when {name} is used as a REF; write tag:{name} for the tag", err=True)
    if as_json:
        emit_json({"name": name, "hash": r["hash"], "old": r["old"]})
