"""Sessions as a whole: sessions, session use/rm/cp, status, recover."""

from __future__ import annotations

import shutil
import sys

import click

from .base import CtapeGroup, emit_json, json_option, main, need_session, need_stdout, open_tape, ref_in_session, session_option, warn_damage


@main.command()
@json_option
@click.pass_context
def sessions(ctx, as_json):
    """List sessions: HEAD, branch, entries, activity, source, title.

    Most recently active first. The session chosen with `ctape session use` is
    marked with *. The title is the first user request (past the tagged blocks
    agents put before it, such as <ide_selection>...</ide_selection>; a message
    of nothing else is not one); the source, for an imported session, the agent
    and the folder it ran in. In a terminal, long
    names and titles are cut to its width (a unique prefix of a name is enough
    for -s of a command that reads, and of checkout, branch and tag, which say
    which session it named; an append to a name no session has creates it).

    \b
    Examples:
      ctape sessions
      ctape sessions --json
    """
    from ..history.sessions import listing, source_text
    from ..ops.render import clean, fit

    need_stdout()
    rows = listing(open_tape(ctx))
    if as_json:
        for r in rows:
            emit_json(r)
        return
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    names = [fit(r["session"], NAME_WIDTH) if width else r["session"] for r in rows]
    table = [
        (
            "*" if r["current"] else " ",
            name,
            r["head"][:12] if r["head"] else "-" * 12,
            r["branch"] or ("(detached)" if r["head"] else "-"),
            str(r["entries"]),
            r["last_time"] or "",
            source_text(r["source"]),
            ("[damaged: see ctape fsck] " if r["damaged"] else "") + (r["title"] or ""),
        )
        for r, name in zip(rows, names)
    ]
    w = [max([len(row[i]) for row in table] or [0]) for i in range(8)]
    for row in table:
        source = f"{row[6]:<{w[6]}}  " if w[6] else ""  # no column when no session was imported
        line = f"{row[0]} {row[1]:<{w[1]}}  {row[2]}  {row[3]:<{w[3]}}  {row[4]:>{w[4]}}  {row[5]:<{w[5]}}  {source}{row[7]}"
        line = clean(line.rstrip())
        click.echo(fit(line, width) if width else line)


NAME_WIDTH = 40  # in a terminal, longer session names are cut (a prefix is enough for -s)


@main.group(cls=CtapeGroup, name="session")
def session_group():
    """Choose, remove or copy a whole session.

    \b
    Examples:
      ctape session use chat
      ctape session cp chat chat-try2
      ctape session rm chat-try2
    """


@session_group.command(name="use")
@click.argument("name", required=False)
@click.option("--clear", is_flag=True, help="Forget this machine's choice.")
@click.pass_context
def session_use(ctx, name, clear):
    """Make NAME this machine's default session for this tape.

    Commands then work on NAME when no -s and no $CTAPE_SESSION is given. The
    choice is kept outside the tape (beside its index cache), so rsync does not
    carry it to other machines.

    \b
    Examples:
      ctape session use chat
      ctape session use --clear
    """
    if name is not None and clear:
        raise click.UsageError("give a session NAME or --clear, not both")
    if name is None and not clear:
        raise click.UsageError("give a session NAME, or --clear")
    if name is not None:
        name = need_session(ctx, name)  # a unique prefix names the session it starts
    open_tape(ctx).use_session(name)
    click.echo(f"default session is now {name}" if name else "no default session now", err=True)


@session_group.command(name="rm")
@click.argument("name")
@click.pass_context
def session_rm(ctx, name):
    """Remove session NAME: it leaves `sessions` and reading it fails.

    The removal is one ref record setting every branch and HEAD to null; it
    syncs like any append. `compact` frees what only NAME reached once its
    ref-log records expire (--expire, 90 days by default, as git keeps a
    deleted branch's commits in HEAD's reflog): `compact --expire now` at once.
    Appending to NAME again starts a new session of that name.

    \b
    Examples:
      ctape session rm scratch
    """
    import os

    from ..history.sessions import live_names

    tape = open_tape(ctx)
    r = tape.remove_session(name)
    tip = r["branches"].get(r["head"][1:]) if r["head"] and r["head"].startswith("@") else r["head"]
    click.echo(f"Removed session {name} (HEAD was {tip[:12] if tip else 'empty'}, {_branches(len(r['branches']))})", err=True)
    if r.get("was_default"):
        left = live_names(tape)
        if len(left) == 1:
            now = f"commands now use the only session left, {left[0]}"
        elif left:
            now = "pick another with `ctape session use NAME` (see `ctape sessions`) or pass -s NAME"
        else:
            now = "the tape has no sessions left"
        click.echo(f"{name} was this machine's default session; {now}", err=True)
    if os.environ.get("CTAPE_SESSION") == name:
        click.echo(f"$CTAPE_SESSION still names {name}: unset it or set it to another session", err=True)


@session_group.command(name="cp")
@click.argument("src")
@click.argument("new")
@click.pass_context
def session_cp(ctx, src, new):
    """Make session NEW with SRC's history, by reference: nothing is copied.

    SRC is a session (every branch, tag and HEAD), SESSION/BRANCH (that branch),
    or any other ref to an entry (a branch main there): HEAD~2, a branch or tag
    name is read in the default session ($CTAPE_SESSION, else `ctape session
    use`, else the only one). A partial copy takes the tags that name entries of
    the history it copies.

    \b
    Examples:
      ctape session cp chat chat-try2
      ctape session cp chat/alt alt-only
      ctape session cp chat~4 from-earlier
    """
    r = open_tape(ctx).copy_session(ref_in_session(ctx, src, None)[0], new)
    tags = len(r.get("tags", ()))
    also = f", {tags} tag{'' if tags == 1 else 's'}" if tags else ""
    click.echo(f"Created session {new} from {src} ({_branches(len(r['branches']))}{also})", err=True)


def _branches(n: int) -> str:
    return f"{n} branch" if n == 1 else f"{n} branches"


@main.command()
@session_option
@click.option("--hidden", is_flag=True, help="Count hidden bookkeeping entries as the last entry.")
@json_option
@click.pass_context
def status(ctx, session, hidden, as_json):
    """Show HEAD, pending tool calls, interrupted stream, last error.

    Its HEAD and branch, title, source, last entry, pending tool calls,
    interrupted stream, last error, and the conflicts a sync left.

    \b
    Examples:
      ctape status -s chat
      ctape status -s chat --json
    """
    from ..ops import render
    from ..history.logview import is_hidden, newest_visible
    from ..history.sessions import summary

    need_stdout()
    tape = open_tape(ctx)
    s = tape.session(need_session(ctx, session))
    st = s.status()
    warn_damage(tape, st["session"])
    if not st.get("incomplete"):
        st.update(summary(tape, st["head"]))
    conflicts = s.view().tag_conflicts  # a view: conflict refs without every branch (a session may have 20,000)
    st["tag_conflicts"] = [{"name": t, "conflict_of": of} for t, of in sorted(conflicts.items())]
    if as_json:
        emit_json(st)
        return
    le = st["last_entry"]
    if le and not hidden and not st["incomplete"] and is_hidden(tape.read_entry(le["hash"])):
        e = newest_visible(tape, le["hash"])
        st["last_entry"] = {"hash": e.hash, "kind": e.kind, "time": e.time} if e else None
    lines = render.status(st)
    lines += [render.clean(f"conflict: tag {c['name']} holds the other value of tag {c['conflict_of']} after a sync; "
                           f"keep it, or delete it with `ctape tag -d {c['name']}`") for c in st["tag_conflicts"]]
    click.echo("\n".join(lines))


@main.command()
@session_option
@click.pass_context
def recover(ctx, session):
    """Record an interrupted stream as a `streaming` entry.

    Prints the new entry's hash on stdout; `nothing to recover` on stderr (exit
    0) when there was nothing to record.
    Every write to the session (append, stream, import, checkout, branch, tag)
    does this first, so the entry follows the HEAD the stream began from.

    \b
    Examples:
      ctape recover -s chat
    """
    entries = open_tape(ctx).session(need_session(ctx, session)).recover()
    for e in entries:
        click.echo(e.hash)
    if not entries:
        click.echo("nothing to recover", err=True)
