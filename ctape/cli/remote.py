"""Remotes on object storage (SPEC section 17): remote add/list/rm/show, push, pull, clone.

Thin: each command resolves the remote and calls one function of ctape.sync.
"""

from __future__ import annotations

import sys
import time

import click

from ..model.models import human_bytes, plural
from .base import emit_json, json_option, main, open_tape


def _warn(msg: str) -> None:
    from ..ops.render import clean

    click.echo(f"ctape: warning: {clean(msg)}", err=True)


class _Progress:
    """A progress line on stderr, on a terminal, once a transfer has taken a second."""

    def __init__(self, verb: str):
        self.verb, self.t0, self.shown = verb, time.monotonic(), False

    def __call__(self, done: int, total: int) -> None:
        if sys.stderr.isatty() and time.monotonic() - self.t0 > 1:
            self.shown = True
            click.echo(f"\r{self.verb} {human_bytes(done)} of {human_bytes(total)}", err=True, nl=False)

    def end(self) -> None:
        if self.shown:
            click.echo("", err=True)


def _n(count: int, noun: str) -> str:
    """`1 file`, `2 files`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _summary(verb: str, r: dict) -> str:
    asked = _n(r["requests"], "request")
    reports = r.get("salvage_reports", 0)  # what a salvage found lost (ctape/sync/losses.py)
    if not r["files"] and not r["bytes"] and not reports:  # as git says "Everything up-to-date"
        if verb == "pushed":
            return f"nothing to push: {r['remote']} is up to date ({asked})"
        return f"nothing to pull: up to date with {r['remote']} ({asked})"
    prep = "to" if verb == "pushed" else "from"
    what = [f"{_n(r['files'], 'file')} ({human_bytes(r['bytes'])})"] if r["files"] or r["bytes"] else []
    what += [_n(reports, "salvage report")] if reports else []
    return f"{verb} {' and '.join(what)} {prep} {r['remote']} in {asked}"


@main.group()
def remote():
    """Remotes of this copy: object storage (s3://BUCKET/PREFIX) or a folder (file:///PATH).

    Kept in this copy's local settings (never synced). Credentials and region come
    from the standard AWS variables and profiles; --endpoint or AWS_ENDPOINT_URL points
    at a non-AWS store (R2, MinIO, SeaweedFS...).

    \b
    Examples:
      ctape remote add origin s3://team-tapes/agents
      ctape remote add lab s3://tapes --endpoint http://127.0.0.1:8333
      ctape remote list
    """


@remote.command("add")
@click.argument("name")
@click.argument("url")
@click.option("--endpoint", metavar="URL", help="S3 endpoint of a non-AWS store (default: $AWS_ENDPOINT_URL).")
@click.pass_context
def remote_add(ctx, name, url, endpoint):
    """Add a remote NAME at URL (s3://BUCKET/PREFIX or file:///PATH).

    \b
    Examples:
      ctape remote add origin s3://team-tapes/agents
      ctape remote add backup file:///mnt/nfs/tapes/project
    """
    from ..sync import remote as remotes

    remotes.add(open_tape(ctx).store, name, url, endpoint)
    click.echo(f"added remote {name} ({url})", err=True)


@remote.command("list")
@json_option
@click.pass_context
def remote_list(ctx, as_json):
    """List the remotes of this copy.

    \b
    Examples:
      ctape remote list
      ctape remote list --json
    """
    from ..sync import remote as remotes

    for name, conf in remotes.remotes(open_tape(ctx).store).items():
        if as_json:
            emit_json({"name": name, "url": conf["url"], "endpoint": conf.get("endpoint")})
        else:
            from ..ops.render import clean

            click.echo("\t".join(clean(v) for v in (name, conf["url"], conf.get("endpoint")) if v))


@remote.command("rm")
@click.argument("name")
@click.pass_context
def remote_rm(ctx, name):
    """Forget the remote NAME (nothing on the remote changes).

    \b
    Examples:
      ctape remote rm origin
    """
    from ..sync import remote as remotes

    remotes.remove(open_tape(ctx).store, name)
    click.echo(f"removed remote {name}", err=True)


@remote.command("show")
@click.argument("name", required=False)
@json_option
@click.pass_context
def remote_show(ctx, name, as_json):
    """What the remote holds: sessions, bytes, writers, each uploader's last push.

    \b
    Examples:
      ctape remote show origin
      ctape remote show origin --json
    """
    from ..sync import remote as remotes
    from ..sync.show import show

    tape = open_tape(ctx)
    name, backend = remotes.connect(tape.store, name)
    backend.warn = _warn
    rep = show(tape.store, backend, name, warn=_warn)
    if as_json:
        emit_json(rep)
        return
    from ..ops.render import clean

    click.echo(f"remote {name}: {clean(rep['url'])}")
    click.echo(f"  {_n(len(rep['sessions']), 'session')}, {human_bytes(rep['bytes'])} in {_n(rep['objects'], 'piece')}")
    for s in rep["sessions"]:
        click.echo(f"  session {s['session']}: {_n(s['files'], 'file')}, {human_bytes(s['bytes'])}")
    for w in rep["uploaders"]:
        click.echo(f"  uploader {w['uploader']}: {w['pushes']} push{'' if w['pushes'] == 1 else 'es'}, last {w['last_push']}")
    if rep["writers"]:
        click.echo(f"  writers: {', '.join(rep['writers'])}")
    if rep["deleted_files"]:
        click.echo(f"  deleted by compact --remote: {_n(rep['deleted_files'], 'file')}")
    for p in rep["planned_deletions"]:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(p["time"]))
        click.echo(f"  planned by {p['compactor']} at {when}: delete {_n(p['files'], 'file')} ({human_bytes(p['bytes'])}) after the grace period")


@main.command()
@click.argument("name", required=False)
@click.option("-s", "--session", "sessions", multiple=True, help="Only this session (repeat for more).")
@click.option("--follow", is_flag=True, help="Keep pushing as writers append (an acknowledged append is on the remote within 2 s) until interrupted "
              "(a push under way is finished first; interrupt again to stop at once).")
@click.option("--allow-secrets", is_flag=True, help="Push even sessions with unresolved secret findings (see `ctape scan`).")
@json_option
@click.pass_context
def push(ctx, name, sessions, follow, allow_secrets, as_json):
    """Upload what the remote lacks (create-only writes; nothing is overwritten).

    A session with a likely secret (see `ctape scan`) or damaged records is held back, with
    a line that says why, and the others go up; the push then exits 1.

    \b
    Examples:
      ctape push
      ctape push origin -s chat
      ctape push --follow
    """
    from ..sync import remote as remotes
    from ..sync.push import follow as follow_loop
    from ..sync.push import push as do_push
    from ..sync.push import report as push_report
    from ..sync.push_check import HeldBack

    tape = open_tape(ctx)
    name, backend = remotes.connect(tape.store, name)
    backend.warn = _warn

    def report(r: dict) -> None:
        if as_json:
            emit_json(r)
        elif not follow or r["files"]:
            click.echo(_summary("pushed", r))

    if follow:
        follow_loop(tape, backend, name, sessions, allow_secrets, warn=_warn, on_push=report)
        return
    bar = _Progress("pushed")
    t0 = time.monotonic()
    try:
        r = do_push(tape, backend, name, sessions, allow_secrets, warn=_warn, progress=bar)
    except HeldBack as e:
        bar.end()
        if as_json:
            # refused as a whole (nothing else to send): a script reading --json still gets
            # the push's object, with what was held back and why (it got nothing before)
            emit_json(push_report(name, backend, e.held, time.monotonic() - t0, error=str(e)))
        raise
    bar.end()
    for why in r["held_back"].values():
        _warn(why)
    report(r)
    if r["held_back"]:
        from ..sync.push import held_back_error

        raise held_back_error(r, chosen=bool(sessions))
    if r["refused"]:
        from ..errors import CtapeError

        # what is written here has not reached the remote: a script must not take it for done
        raise CtapeError(f"{r['refused']} {plural(r['refused'], 'piece', 'pieces')} not pushed: {name} holds other bytes at their keys (see the warnings); "
                         "run `ctape compact`, which moves them into a pack under a new name, then push again")


@main.command()
@click.argument("name", required=False)
@click.option("-s", "--session", "sessions", multiple=True, help="Only this session (repeat for more).")
@json_option
@click.pass_context
def pull(ctx, name, sessions, as_json):
    """Download what this copy lacks and merge it, by the same rules as rsync.

    \b
    Examples:
      ctape pull
      ctape pull origin -s chat
    """
    from ..model.models import check_name
    from ..sync import remote as remotes
    from ..sync.pull import pull as do_pull

    for s in sessions:  # a name that cannot exist is a typo, not a session still to come
        check_name(s, "session name")
    tape = open_tape(ctx)
    name, backend = remotes.connect(tape.store, name)
    backend.warn = _warn
    bar = _Progress("pulled")
    r = do_pull(tape, backend, name, sessions, warn=_warn, progress=bar)
    bar.end()
    if as_json:
        emit_json(r)
    elif r.get("empty"):
        click.echo(f"{name} holds no tape yet; nothing to pull")
    elif any(r["skipped"].values()):  # not "up to date": some of it did not come
        click.echo(f"pulled {_n(r['files'], 'file')} ({human_bytes(r['bytes'])}) from {name} in {_n(r['requests'], 'request')}; "
                   f"{_n(sum(r['skipped'].values()), 'piece')} skipped (see the warnings)")
    else:
        click.echo(_summary("pulled", r))
    if not as_json:
        _say_conflicts(r.get("conflicts", {}), name)
    _fail_on_damage(r, name)


def _say_conflicts(conflicts: dict, name: str) -> None:
    """A branch that this copy and another both moved is now two (docs/sync.md, "Conflicts"):
    said, since HEAD may now be on the other copy's side, and an agent appending on would
    not know."""
    from ..sync.pull import conflict_lines

    for line in conflict_lines(conflicts, name):
        click.echo(f"note: {line}", err=True)


def _fail_on_damage(r: dict, name: str) -> None:
    """Exit 1 when pieces on the remote did not match their manifests: what is listed there
    could not be had. (A missing piece is what a compaction of the remote leaves between
    reading its manifests and fetching: a warning, and the next pull sees the new ones.)"""
    damaged = r.get("skipped", {}).get("damaged", 0)
    if damaged:
        from ..errors import CorruptObject

        one = damaged == 1
        it, its, was = ("it", "its", "was") if one else ("them", "their", "were")
        raise CorruptObject(f"{_n(damaged, 'piece')} on {name} did not match {its} manifest and {was} not pulled (see the "
                            f"warnings); what did arrive is kept. The copy that pushed {it} still holds {it}: "
                            f"`ctape compact --remote {name}` there writes {it} to the remote again")


@main.command()
@click.argument("url")
@click.argument("directory", metavar="DIR")
@click.option("--endpoint", metavar="URL", help="S3 endpoint of a non-AWS store (default: $AWS_ENDPOINT_URL).")
@json_option
def clone(url, directory, endpoint, as_json):
    """Make a new copy of the tape at URL in DIR, with the remote as `origin`.

    DIR is a new or empty folder, never inside another tape.

    \b
    Examples:
      ctape clone s3://team-tapes/agents ./tapes
      ctape clone file:///mnt/nfs/tapes/project ./tapes
    """
    from ..ops.render import clean
    from ..sync.backend import open_backend
    from ..sync.pull import clone as do_clone

    if not directory.strip():  # ('' read as the current folder, "not empty": found by an audit)
        raise click.BadParameter("is empty; give the folder to make the copy in (`.` for this one, when it is empty)", param_hint="'DIR'")
    backend = open_backend(url, endpoint, "origin")
    backend.warn = _warn
    bar = _Progress("cloned")
    r = do_clone(backend, url, endpoint, directory, warn=_warn, progress=bar)
    bar.end()
    if as_json:
        emit_json(r)
    elif r.get("already"):  # an earlier run of this clone finished (its end was not seen): brought up to date
        click.echo(f"{clean(r['dir'])} already has {clean(url)} as origin (an earlier clone, or the copy that pushed there); pulled {_n(r['files'], 'file')} ({human_bytes(r['bytes'])}) in {_n(r['requests'], 'request')}")
    else:
        click.echo(f"cloned {_n(r['sessions'], 'session')}, {_n(r['files'], 'file')} ({human_bytes(r['bytes'])}) into {clean(r['dir'])} in {_n(r['requests'], 'request')}")
    _fail_on_damage(r, "origin")
