"""Looking after a tape: init, compact, fsck, stats."""

from __future__ import annotations

import os
import sys

import click

from .base import EXIT_FAIL, CtapeGroup, Duration, emit_json, json_option, main, open_tape


@main.command()
@click.argument("path", required=False)
@click.pass_context
def init(ctx, path):
    """Create a tape directory (PATH, else --dir, else ./.ctape).

    \b
    Examples:
      ctape init
      ctape --dir /data/tapes init
    """
    from ..store.store import Store

    target = path or ctx.find_root().obj.get("dir") or os.environ.get("CTAPE_DIR") or ".ctape"
    if Store.init(target):
        click.echo(f"Initialized empty tape in {os.path.abspath(target)}", err=True)
    else:
        click.echo(f"{os.path.abspath(target)} is already a tape; nothing changed", err=True)


@main.command()
@click.option("--expire", type=Duration(), default="90d", show_default=True, help="Ref-log records and anchors older than this stop keeping entries alive.")
@click.option("--grace", type=Duration(), default="14d", show_default=True, help="Never remove objects younger than this.")
@click.option("--dry-run", is_flag=True, help="Report what would be removed; change nothing.")
@json_option
@click.pass_context
def compact(ctx, expire, grace, dry_run, as_json):
    """Remove what nothing reaches, and pack small files.

    DUR is like now, 30m, 12h, 14d, 2w. `--grace now` is only for tapes nobody
    is writing to.

    \b
    Examples:
      ctape compact --dry-run
      ctape compact --expire 30d
    """
    tape = open_tape(ctx)
    progress = None
    if sys.stderr.isatty():
        progress = lambda msg: click.echo(f"\r{msg}", err=True, nl=False)  # noqa: E731
    report = tape.compact(expire=expire, grace=grace, dry_run=dry_run, progress=progress)
    if progress:
        click.echo("", err=True)
    if as_json:
        emit_json(report)
    else:
        verb = "would free" if dry_run else "freed"
        click.echo(
            f"kept {report['kept_objects']} objects ({report['kept_bytes']} bytes), "
            f"{verb} {report['freed_objects']} objects ({report['freed_bytes']} bytes); "
            f"files {report['files_before']} -> {report['files_after']}"
        )


@main.command()
@click.option("--salvage", is_flag=True, help="First keep what is intact of damaged files (new packs) and move the damaged files into quarantine/.")
@json_option
@click.pass_context
def fsck(ctx, salvage, as_json):
    """Verify every object, record and reference; exit 1 on corrupt or missing data.

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
            click.echo(f"salvaged {s['file']}: kept {s['kept_records']} records, moved the file to {s['quarantined']}", err=True)
        for session, changes in done["refs"].items():
            for ref, value in changes.items():
                said = "removed (its tip was lost)" if value is None else f"now {value}" if value.startswith("@") else f"keeps {value[:12]}"
                click.echo(f"{session}: {ref} {said}", err=True)
        for rel in done["truncated"]:
            click.echo(f"noted the loss in {rel} (cut shorter than it was)", err=True)
        if done["removed_temp_packs"]:
            click.echo(f"removed {done['removed_temp_packs']} unfinished pack(s) of a killed compaction", err=True)
        if not (done["salvaged"] or done["truncated"] or done["removed_temp_packs"]):
            click.echo("nothing to salvage: no damaged files", err=True)
    report = tape.fsck()
    if as_json:
        emit_json(report)
    else:
        for p in report["problems"]:
            click.echo(f"{p['severity']}: {p['what']}: {p['problem']}")
        for w in report.get("warnings", []):
            click.echo(f"warning: {w['what']}: {w['problem']}", err=True)
        click.echo(f"{'ok' if report['ok'] else 'FAILED'}: checked {report['objects']} objects, {report['records']} ref records in {report['files']} files", err=True)
    if not report["ok"]:
        sys.exit(EXIT_FAIL)


@main.command()
@json_option
@click.pass_context
def stats(ctx, as_json):
    """Objects, logical bytes, stored bytes, dedupe saving.

    \b
    Examples:
      ctape stats --json
    """
    st = open_tape(ctx).stats()
    if as_json:
        emit_json(st)
    else:
        for k, v in st.items():
            click.echo(f"{k:<20} {v}")


@main.group(cls=CtapeGroup, name="cache")
def cache_group():
    """Look after the index caches kept outside the tapes (~/.cache/ctape).

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
    exists there. A cache is only ever a speed-up: nothing on a tape is touched.

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
    click.echo(f"{'would free' if dry_run else 'freed'} {freed} bytes in {n}; kept {kept}", err=True)
