"""Moving history in and out of a tape: import, export."""

from __future__ import annotations

import os
import sys

import click

from .base import main, open_tape, session_option


FORMATS = ("jsonl", "claude-code", "codex", "openai", "gemini")


@main.command(name="import")
@click.argument("args", metavar="[FORMAT] FILE...", nargs=-1, required=True)
@session_option
@click.pass_context
def import_(ctx, args, session):
    """Import transcripts: jsonl (ctape's own export), claude-code, codex, openai, gemini.

    FORMAT is detected from each file's first records when it is not given. FILE
    may be - (stdin), a pipe or a .zst file.
    Importing what the tape already holds adds nothing, says so, and moves no
    HEAD; a file that grew adds its new records and moves its branches on.

    \b
    Examples:
      ctape import ~/.claude/projects/x/SESSION.jsonl -s cc
      ctape import codex rollout-*.jsonl
      ctape import jsonl backup.jsonl
      zstdcat rollout.jsonl.zst | ctape import codex -
    """
    from ..formats import import_files

    fmt, files = (args[0], list(args[1:])) if args[0] in FORMATS else (None, list(args))
    if not files:
        raise click.UsageError(f"give a FILE to import as {fmt}")
    for f in files:
        if os.path.isdir(f):
            raise click.BadParameter(f"{f!r} is a directory; give the transcript files in it", param_hint="FILE")
    for line in import_files(open_tape(ctx), fmt, files, session, progress=sys.stderr.isatty()):
        click.echo(line, err=True)


@main.command()
@click.argument("ref")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "openai", "claude-code", "codex", "gemini"]), default="jsonl", show_default=True)
@click.pass_context
def export(ctx, ref, fmt):
    """Write history to stdout: a whole SESSION, or the path root -> REF.

    \b
    Examples:
      ctape export chat > chat.jsonl
      ctape export chat/alt --format openai
    """
    from ..formats import export_notes, export_ref

    # bytes: a source line that was not UTF-8 comes back as a str with surrogate escapes,
    # and goes out as the bytes it was (docs/import.md)
    out = sys.stdout.buffer
    tape = open_tape(ctx)
    for line in export_ref(tape, ref, fmt):
        out.write(line.encode("utf-8", "surrogateescape") + b"\n")
    out.flush()
    for note in export_notes(tape, ref, fmt):
        click.echo(f"note: {note}", err=True)
