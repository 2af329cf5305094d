"""Looking after a tape: init, compact, fsck, stats."""

from __future__ import annotations

import os
import sys
from typing import Optional

import click

from ..model.models import plural
from .base import EXIT_FAIL, CtapeGroup, Duration, _is_tape, decided, emit_json, json_option, main, open_tape, warn_tape_damage


@main.command()
@click.argument("path", required=False)
@click.pass_context
def init(ctx, path):
    """Create a tape directory (PATH, else --dir, else ./.ctape).

    A tape is never made inside another one's folder, nor at /. Made below a
    folder whose tape commands used until now (a ~/.ctape), ./.ctape is the one
    commands here use from then on, as git's nested repositories are; init
    says so.

    \b
    Examples:
      ctape init
      ctape --dir /data/tapes init
    """
    from ..store.store import Store, refuse_inside_tape

    explicit = path or ctx.find_root().obj.get("dir") or os.environ.get("CTAPE_DIR")
    target = explicit or ".ctape"
    refuse_inside_tape(os.path.abspath(target))
    outer = None if explicit else _tape_used_here(os.path.abspath(target))
    inner = os.path.join(target, ".ctape")
    if not _is_tape(target) and _is_tape(inner):
        target = inner  # a folder holding a tape in .ctape/ names that tape, as --dir does
    try:
        others = sorted(os.listdir(target)) if not _is_tape(target) else []
    except OSError:
        others = []
    if Store.init(target):
        click.echo(f"Initialized empty tape in {os.path.abspath(target)}", err=True)
        if others:
            # `ctape init .` in a project made the project folder the tape, its files among
            # the tape's (fsck then listed each as "not part of a tape"; an audit): git's
            # `init .` makes ./.git. Said, not refused: init PATH makes the tape at PATH
            shown = ", ".join(others[:3]) + (" ..." if len(others) > 3 else "")
            click.echo(f"ctape: warning: {os.path.abspath(target)} already held other files ({shown}): the tape's files "
                       "are among them now (ctape.json, packs/, sessions/: remove them to undo); `ctape init` with no PATH "
                       "makes ./.ctape instead", err=True)
        if outer is not None:
            click.echo(f"note: commands in this folder and below now use this tape, not {outer}", err=True)
    else:
        click.echo(f"{os.path.abspath(target)} is already a tape; nothing changed", err=True)


def _tape_used_here(target: str) -> Optional[str]:
    """The tape commands here used until now (found upwards), when it is not `target`:
    the implicit ./.ctape made below it takes its place here, and init says so (issue 24
    asked that init never nest a tape silently; SPEC 5 that it make ./.ctape)."""
    from ..errors import CtapeError
    from .base import find_tape_dir

    if _is_tape(target):
        return None
    try:
        found = os.path.abspath(find_tape_dir(None))
    except CtapeError:
        return None
    return found if found != target else None


@main.command()
@click.option("--expire", type=Duration(), default="90d", show_default=True, help="Ref-log records and anchors older than this stop keeping entries alive.")
@click.option("--grace", type=Duration(), default="14d", show_default=True, help="Never remove objects younger than this.")
@click.option("--dry-run", is_flag=True, help="Report what would be removed; change nothing.")
@click.option("--remote", "remote_name", metavar="NAME", help="Also compact remote NAME: pull, compact, push the packs, and delete on the remote what they replaced once a plan is older than --grace.")
@click.option("--allow-secrets", is_flag=True, help="With --remote: push even sessions with unresolved secret findings.")
@json_option
@click.pass_context
def compact(ctx, expire, grace, dry_run, remote_name, allow_secrets, as_json):
    """Remove what nothing reaches, and pack small files.

    DUR is like now, 30m, 12h, 14d, 2w. `--grace now` is only for tapes nobody
    is writing to. With --remote, files on the remote are deleted in two runs:
    one plans them, a run after --grace deletes them (docs/remotes.md). At its end it
    holds every session's lock at once, an open file each: it raises its soft limit of
    open files where the hard one allows, else stops before it writes anything.

    \b
    Examples:
      ctape compact --dry-run
      ctape compact --expire 30d
      ctape compact --remote origin
    """
    if allow_secrets and remote_name is None:
        raise click.UsageError("--allow-secrets goes with --remote (a local compaction sends nothing)")
    tape = open_tape(ctx)
    progress = None
    if sys.stderr.isatty():
        progress = lambda msg: click.echo(f"\r{msg}", err=True, nl=False)  # noqa: E731
    if remote_name is not None:
        _compact_remote(tape, remote_name, expire, grace, dry_run, allow_secrets, progress, as_json)
        return
    report = tape.compact(expire=expire, grace=grace, dry_run=dry_run, progress=progress)
    if progress:
        click.echo("", err=True)
    if as_json:
        emit_json(report)
    else:
        verb = "would free" if dry_run else "freed"
        click.echo(
            f"kept {report['kept_objects']} {plural(report['kept_objects'], 'object', 'objects')} ({report['kept_bytes']} bytes), "
            f"{verb} {report['freed_objects']} {plural(report['freed_objects'], 'object', 'objects')} ({report['freed_bytes']} bytes); "
            f"files {report['files_before']} -> {report['files_after']}"
        )
    _say_skipped(tape, report)


def _say_skipped(tape, report: dict) -> None:
    """The sessions compaction left as they are (damaged records, or a symlink among their
    files): a warning each, since what they no longer reach, and bytes redacted in them
    (`ctape redact` says compact removes those), stay on disk until they are repaired."""
    unsafe = tape.store.unsafe_sessions
    for name in report.get("skipped_sessions", []):
        why, fix = (("holds a symbolic link", "move the link out of its folder") if name in unsafe else
                    ("has damaged records", "run `ctape fsck --salvage` (or restore its files from another copy)"))
        left = "would leave" if report.get("dry_run") else "left"
        click.echo(f"ctape: warning: session {name!r} {why}, so compact {left} its files as they are (what it no longer "
                   f"reaches and bytes redacted in it stay on disk); {fix}, then compact again", err=True)


def _compact_remote(tape, name, expire, grace, dry_run, allow_secrets, progress, as_json) -> None:
    from ..sync import remote as remotes
    from ..sync.prune import compact_remote

    if dry_run:
        raise click.UsageError("--dry-run does not go with --remote; `ctape remote show NAME` lists the planned deletions")
    name, backend = remotes.connect(tape.store, name)
    warn = backend.warn = lambda m: click.echo(f"ctape: warning: {m}", err=True)
    r = compact_remote(tape, backend, name, expire=expire, grace=grace, allow_secrets=allow_secrets, warn=warn, progress=progress)
    if progress:
        click.echo("", err=True)
    if as_json:
        emit_json(r)
        _fail_if_held_back(r, name)
        return
    loc, d = r["local"], r["deleted"]
    click.echo(f"kept {loc['kept_objects']} {plural(loc['kept_objects'], 'object', 'objects')} ({loc['kept_bytes']} bytes), "
               f"freed {loc['freed_objects']} {plural(loc['freed_objects'], 'object', 'objects')} "
               f"({loc['freed_bytes']} bytes); files {loc['files_before']} -> {loc['files_after']}")
    killed = d.get("leftovers", 0) + d.get("unlisted", 0)
    left = f", and {killed} object{'' if killed == 1 else 's'} no manifest lists (a killed push's, or junk)" if killed else ""
    _say_skipped(tape, loc)
    click.echo(f"remote {name}: pushed {r['pushed']} bytes, deleted {d['files']} file{'' if d['files'] == 1 else 's'} ({d['bytes']} bytes){left} in {r['requests']} {plural(r['requests'], 'request', 'requests')}")
    if r.get("summarized"):
        click.echo(f"remote {name}: wrote a summary of its {r['summarized']} manifests (a clone reads them in one request)")
    if r["deferred"]:
        # a damaged session's deletions wait for `fsck --salvage` (the reason says so); the others for another run
        again = "" if "fsck" in r["deferred"] else "; run it again"
        click.echo(f"remote {name}: deletions deferred ({r['deferred']}){again}", err=True)
    for p in r["pending"]:
        when = "now" if p["due_in_seconds"] == 0 else f"in {_duration(p['due_in_seconds'])}"
        click.echo(f"remote {name}: plan {p['n']}: {p['files']} file{'' if p['files'] == 1 else 's'} ({p['bytes']} bytes) to delete, due {when}", err=True)
    _fail_if_held_back(r, name)


def _fail_if_held_back(r: dict, name: str) -> None:
    """Exit 1 when the push of a remote compaction held sessions back, as `push` does: what
    they hold is not on the remote, and a redaction meant to leave it is not done there."""
    held = r.get("held_back") or []
    if held:
        from ..sync.push_check import HeldBack

        shown = "every session it had to send" if held == ["*"] else ", ".join(held[:5]) + (" ..." if len(held) > 5 else "")
        raise HeldBack(f"the push held back {shown} (see the warnings above): not on {name}, and the deletions there wait; "
                       "deal with what the warnings say, then run `ctape compact --remote` again")


def _duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


REDACTED_SHOWN = 20  # redacted places fsck prints; --json has them all


@main.command()
@click.option("--salvage", is_flag=True, help="First keep what is intact of damaged files (new packs) and move the damaged files into quarantine/.")
@json_option
@click.pass_context
def fsck(ctx, salvage, as_json):
    """Verify every object, record and reference; exit 1 on damaged data.

    With --salvage, first keep what is intact of every damaged file (a new pack) and move
    the damaged file into quarantine/ inside the tape (kept, never read again); a file cut
    shorter than it was has its loss written down. Then verify as usual: what was lost is
    a warning from then on.

    \b
    Examples:
      ctape fsck
      ctape fsck --json
      ctape fsck --salvage
    """
    tape = open_tape(ctx)
    if salvage:
        done = tape.salvage()
        for s in done["salvaged"]:
            from_damaged = f" ({s['recovered']} of them read from a damaged block)" if s.get("recovered") else ""
            click.echo(f"salvaged {s['file']}: kept {s['kept_records']} {plural(s['kept_records'], 'record', 'records')}{from_damaged}, moved the file to {s['quarantined']}", err=True)
        for session, changes in done["refs"].items():
            for ref, value in changes.items():
                said = "removed (its tip was lost)" if value is None else f"now {value}" if value.startswith("@") else f"keeps {value[:12]}"
                click.echo(f"{session}: {ref} {said}", err=True)
        for rel in done["truncated"]:
            how = "cut shorter than it was" if os.path.lexists(os.path.join(tape.store.root, rel)) else "the file is gone"
            click.echo(f"noted the loss in {rel} ({how})", err=True)
        if done["removed_temp_packs"]:
            click.echo(f"removed {done['removed_temp_packs']} unfinished {plural(done['removed_temp_packs'], 'pack', 'packs')} of a killed compaction", err=True)
        for session, n in done.get("redactions", {}).items():
            click.echo(f"{session}: recorded again the redaction of {n} {plural(n, 'place', 'places')} this machine knew and no file recorded", err=True)
        if not (done["salvaged"] or done["truncated"] or done["removed_temp_packs"] or done.get("redactions")):
            click.echo("nothing to salvage: no damaged files", err=True)
    report = tape.fsck()
    if not report["ok"]:
        decided(EXIT_FAIL)
    if as_json:
        emit_json(report)
    else:
        from ..ops.render import clean  # a foreign file's name, a key of a payload: as they are, they could drive the terminal

        for p in report["problems"]:
            click.echo(clean(f"{p['severity']}: {p['what']}: {p['problem']}"))
        for w in report.get("warnings", []):
            click.echo(clean(f"warning: {w['what']}: {w['problem']}"), err=True)
        redacted = report.get("redacted", [])
        for r in redacted[:REDACTED_SHOWN]:
            click.echo(clean(f"redacted: {r['object'][:12]} {r['path']} ({r['kind']}; bytes {r['bytes']})"))
        if len(redacted) > REDACTED_SHOWN:
            click.echo(f"redacted: ... and {len(redacted) - REDACTED_SHOWN} more places (fsck --json lists them all)")
        click.echo(f"{'ok' if report['ok'] else 'FAILED'}: checked {report['objects']} {plural(report['objects'], 'object', 'objects')}, "
                   f"{report['records']} ref {plural(report['records'], 'record', 'records')} in {report['files']} {plural(report['files'], 'file', 'files')}", err=True)
    if not report["ok"]:
        sys.exit(EXIT_FAIL)


@main.command()
@json_option
@click.pass_context
def stats(ctx, as_json):
    """The tape's folder, objects, logical bytes, stored bytes, dedupe saving.

    The first line names the tape the commands here use (--dir, else $CTAPE_DIR, else
    the nearest .ctape/ upwards), as `git rev-parse --show-toplevel` names a repository.

    \b
    Examples:
      ctape stats
      ctape stats --json
    """
    from ..ops.render import clean

    tape = open_tape(ctx)
    st = {"tape": tape.store.root, **tape.stats()}
    if as_json:
        emit_json(st)
    else:
        for k, v in st.items():
            click.echo(clean(f"{k:<20} {v}"))  # (a folder's name may hold anything)
    warn_tape_damage(tape)


@main.group(cls=CtapeGroup, name="cache")
def cache_group():
    """Clean the index caches outside the tapes (~/.cache/ctape): `gc` (with --dry-run, only lists).

    \b
    Examples:
      ctape cache gc --dry-run
    """


@cache_group.command(name="gc")
@click.option("--dry-run", is_flag=True, help="Report what would be removed; change nothing.")
@click.option("--unknown", is_flag=True, help="Also remove folders that name no tape (made by an older ctape).")
@json_option
def cache_gc(dry_run, unknown, as_json):
    """Remove the cache folders of tapes that are gone.

    Each tape's cache folder (under $CTAPE_CACHE_DIR, else $XDG_CACHE_HOME/ctape,
    else ~/.cache/ctape) names its tape; the folder goes when that tape no longer
    exists there. In the folders kept, temporary files that commands killed while
    saving a setting left behind (over an hour old) are removed. Nothing on a tape
    is touched; what a cache folder holds besides the index is this machine's
    settings for its tape (remotes, `session use`, `scan --allow` ids and
    patterns), which go with the folder of a tape that is gone, and which deleting
    a cache folder by hand forgets.

    \b
    Examples:
      ctape cache gc --dry-run
      ctape cache gc --json
    """
    from ..store.localstate import gc

    rows = gc(dry_run=dry_run, unknown=unknown)
    if as_json:
        for r in rows:
            emit_json(r)
        return
    gone = [r for r in rows if r["removed"] or (dry_run and r["state"] == "gone") or (dry_run and unknown and r["state"] == "unknown")]
    for r in gone:
        click.echo(f"{'would remove' if dry_run else 'removed'} {r['folder']} ({r['bytes']} bytes): {r['why']}")
    kept = len(rows) - len(gone)
    freed = sum(r["bytes"] for r in gone)
    n = f"{len(gone)} folder" + ("" if len(gone) == 1 else "s")
    temps = sum(r.get("temporaries", 0) for r in rows)
    left = f"; {'would remove' if dry_run else 'removed'} {temps} temporary file{'' if temps == 1 else 's'} killed commands left" if temps else ""
    click.echo(f"{'would free' if dry_run else 'freed'} {freed} bytes in {n}; kept {kept}{left}", err=True)
