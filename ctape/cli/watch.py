"""The `ctape watch` command: a thin skin over ctape.watch."""

from __future__ import annotations

import os
import sys

import click

from .base import main


@click.command("watch")
@click.argument("paths", nargs=-1, type=click.Path(), metavar="[PATH]...")
@click.option("--once", is_flag=True, help="Make one pass and exit (default: follow until interrupted).")
@click.option("--poll", is_flag=True, help="Poll every second instead of using inotify.")
@click.option("-j", "--jobs", type=click.IntRange(1, 64), default=min(2, os.cpu_count() or 1), show_default="2 on 2+ cores", help="Processes for a large pass (over 64 MB to read).")
@click.option("-q", "--quiet", is_flag=True, help="Say nothing about what is imported; errors are still shown.")
@click.pass_context
def watch(ctx, paths, once, poll, jobs, quiet):
    """Import Claude Code, Codex and Gemini CLI transcripts, then follow them as they grow.

    With no PATH: Claude Code's $CLAUDE_CONFIG_DIR/projects (else ~/.claude/projects,
    subagent files included), Codex's $CODEX_HOME/sessions (else ~/.codex/sessions,
    .jsonl and .jsonl.zst) and Gemini CLI's ~/.gemini/tmp/*/chats ($GEMINI_CLI_HOME
    for ~). A PATH is a transcript file or a folder of them; the format is detected
    per file. Each file is imported into its own session, as `ctape import`
    would; a rerun adds only what was appended. SIGINT/SIGTERM/SIGHUP finish the current
    batch and exit 0. See docs/watch.md for hooks and service files.

    \b
    Examples:
      ctape watch                       # follow the three tools' history folders
      ctape watch --once                # one pass, e.g. from cron
      ctape watch --once "$TRANSCRIPT"  # from a Claude Code Stop hook
      ctape watch ~/agent-runs/         # any folder of transcripts
    """
    from ..model.canonical import max_record
    from ..watch import follow, watch_once
    from .base import open_tape

    max_record()  # a bad $CTAPE_MAX_RECORD is refused once, not said of every file

    tape = open_tape(ctx)
    tty = sys.stderr.isatty()
    echo = (lambda s: None) if quiet else (lambda s: click.echo(s, err=True))
    errors = lambda s: click.echo(s, err=True)  # noqa: E731

    def summary(rep):
        if rep.stopped and not quiet:  # not "N of N files": the pass did not get to the rest
            records = f"{rep.records} record{'s' if rep.records != 1 else ''}"
            click.echo(f"watch: stopped after {rep.files} file{'s' if rep.files != 1 else ''} ({records} imported); "
                       "the next pass imports the rest", err=True)
        elif rep.changed and not quiet:
            records = f"{rep.records} record{'s' if rep.records != 1 else ''}"
            click.echo(f"watch: imported {records} from {rep.changed} of {rep.files} file{'s' if rep.files != 1 else ''}", err=True)
        elif not rep.transcripts and not rep.errors and not rep.stopped and (not rep.files or not any(os.path.isfile(p) for p in paths)):
            # a wrong folder is not "nothing new" (a named file that is empty so far waits in
            # silence); a problem, said with -q too (cron's `--once -q` missed a mistyped folder)
            others = f": its {rep.files} file{'s are' if rep.files != 1 else ' is'} none ctape knows, or empty" if rep.files else ""
            click.echo(f"watch: no transcript in {', '.join(watched(list(paths)))}{others} (Claude Code, Codex and the other "
                       "formats of `ctape import`); give their folder or file", err=True)

    if once:
        rep = watch_once(tape, list(paths), echo=echo, warn=errors, progress=tty, signals=True, jobs=jobs)
        summary(rep)
        sys.exit(1 if rep.errors else 0)
    passes = []

    def first_summary(rep):
        # the first pass may cover many files: one summary line; after it, each file's own
        # "+N records" line says it all (one line per change, not two)
        if not passes:
            passes.append(rep)
            summary(rep)

    from ..watch.sources import check_paths

    check_paths(list(paths))  # before "following": a path that is not there is refused first, as with --once
    echo(f"watch: following {', '.join(watched(list(paths)))}; Ctrl-C stops")
    follow(tape, list(paths), echo=echo, warn=errors, progress=tty, poll=poll, on_pass=first_summary, jobs=jobs)


def watched(paths: list[str]) -> list[str]:
    """The folders or files follow mode watches, as the user knows them (~ for home)."""
    from ..watch.sources import default_roots

    home = os.path.expanduser("~")
    shown = paths or [root for root, _ in default_roots()]
    return [("~" + p[len(home):]) if p.startswith(home + os.sep) else p for p in shown]


main.add_command(watch)
