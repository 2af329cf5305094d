"""Moving through history: checkout, branch, reflog."""

from __future__ import annotations

import click

from .base import (
    echo_lines,
    emit_json,
    json_option,
    main,
    need_session,
    open_tape,
    pager_option,
    session_option,
)


@main.command()
@click.argument("ref", required=False)
@click.option("-b", "new_branch", metavar="NAME", help="Create branch NAME at REF (default: HEAD) and attach HEAD to it.")
@session_option
@click.pass_context
def checkout(ctx, ref, new_branch, session):
    """Move the session's HEAD to REF (attach to a branch, or detach at an entry).

    Later appends continue from there; nothing is lost or copied.

    \b
    Examples:
      ctape checkout alt -s chat             # attach to chat/alt
      ctape checkout chat~3 -s chat          # detached at an older entry
      ctape checkout -b retry chat~3 -s chat # fork a branch there
      ctape checkout -b idea                 # fork a branch at HEAD
    """
    if ref is None and new_branch is None:
        raise click.UsageError("give a REF to check out, or -b NAME to fork a branch at HEAD")
    tape = open_tape(ctx)
    name = need_session(ctx, session)
    st = tape.session(name).checkout(ref, new_branch)
    h = st.head_hash
    if st.branch:
        click.echo(f"HEAD is now on branch {st.branch} at {h[:12] if h else '(no entries)'}", err=True)
    else:
        click.echo(f"HEAD is now detached at {h[:12] if h else '?'}", err=True)


@main.command()
@click.argument("name", required=False)
@click.argument("ref", required=False)
@click.option("-d", "--delete", "delete", metavar="NAME", help="Delete branch NAME (its entries stay); refuses the checked-out branch.")
@click.option("-D", "force_delete", metavar="NAME", help="Delete branch NAME even if checked out: HEAD stays, detached, at its tip.")
@session_option
@json_option
@click.pass_context
def branch(ctx, name, ref, delete, force_delete, session, as_json):
    """List branches, create NAME at REF (default HEAD), or delete one.

    \b
    Examples:
      ctape branch -s chat
      ctape branch experiment chat~2 -s chat
      ctape branch -d experiment -s chat
      ctape branch -D main -s chat    # HEAD is detached at main's tip
    """
    from ..render import clean

    if delete is not None and force_delete is not None:
        raise click.UsageError("give -d or -D, not both")
    tape = open_tape(ctx)
    s = tape.session(need_session(ctx, session))
    gone = delete if delete is not None else force_delete
    if gone is not None:
        tip = s.delete_branch(gone, force=force_delete is not None)
        click.echo(f"Deleted branch {gone} (was {tip[:12]})", err=True)
        return
    if name is not None:
        h = s.branch(name, ref)
        click.echo(f"Created branch {name} at {h[:12]}", err=True)
        return
    rows = s.branches()
    if as_json:
        for b in rows:
            emit_json(b)
        return
    width = max([24, *(len(b["name"]) for b in rows)])
    for b in rows:
        mark = "*" if b["current"] else " "
        note = f"  (conflict: the other tip of {b['conflict_of']})" if "conflict_of" in b else ""
        click.echo(clean(f"{mark} {b['name']:<{width}} {b['hash'][:12]}{note}"))
    st = s.refs()
    if st.branch is None and st.head_hash:
        click.echo(f"* (HEAD detached at {st.head_hash[:12]})")


@main.command()
@click.argument("session_arg", metavar="[SESSION]", required=False)
@session_option
@click.option("-n", "limit", type=int, default=-1, help="Show at most N lines.")
@json_option
@pager_option
@click.pass_context
def reflog(ctx, session_arg, session, limit, as_json, no_pager):
    """Every move of the session's HEAD and branches, newest first.

    HEAD positions are numbered for SESSION@{N}.

    \b
    Examples:
      ctape reflog chat
      ctape checkout chat@{1} -s chat
    """
    from .. import render

    tape = open_tape(ctx)
    name = need_session(ctx, session_arg if session_arg is not None else session)
    rows = tape.session(name).reflog()
    if limit is not None and limit >= 0:
        rows = rows[:limit]
    if as_json:
        for r in rows:
            emit_json(r)
        return
    echo_lines([render.reflog_line(r, name) for r in rows], not no_pager)
