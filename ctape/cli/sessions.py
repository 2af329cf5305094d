"""Sessions as a whole: sessions, status, recover."""

from __future__ import annotations

import click

from .base import emit_json, json_option, main, need_session, open_tape, session_option


@main.command()
@json_option
@click.pass_context
def sessions(ctx, as_json):
    """List every session: HEAD, branch, entry count, last activity.

    \b
    Examples:
      ctape sessions
      ctape sessions --json
    """
    rows = open_tape(ctx).sessions()
    for r in rows:
        if as_json:
            emit_json(r)
        else:
            head = r["head"][:12] if r["head"] else "-" * 12
            click.echo(f"{r['session']:<24} {head}  {r['branch'] or '(detached)':<16} {r['entries']:>7}  {r['last_time'] or ''}")


@main.command()
@session_option
@json_option
@click.pass_context
def status(ctx, session, as_json):
    """HEAD, branch, last entry, pending tool calls, interrupted stream, last error.

    \b
    Examples:
      ctape status -s chat
      ctape status -s chat --json
    """
    from .. import render

    st = open_tape(ctx).session(need_session(session)).status()
    if as_json:
        emit_json(st)
    else:
        click.echo("\n".join(render.status(st)))


@main.command()
@session_option
@click.pass_context
def recover(ctx, session):
    """Record an interrupted stream as one `streaming` entry; print its hash.

    \b
    Examples:
      ctape recover -s chat
    """
    entries = open_tape(ctx).session(need_session(session)).recover()
    for e in entries:
        click.echo(e.hash)
    if not entries:
        click.echo("nothing to recover", err=True)
