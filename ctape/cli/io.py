"""Moving history in and out of a tape: import, export."""

from __future__ import annotations

import os
import sys
from typing import Optional

import click

from .base import main, need_stdin, need_stdout, open_tape, ref_in_session, session_in_ref, session_option, warn_damage, writing_output


FORMATS = ("jsonl", "claude-code", "codex", "openai", "gemini")


@main.command(name="import")
@click.argument("args", metavar="[FORMAT] FILE...", nargs=-1, required=True)
@session_option
@click.pass_context
def import_(ctx, args, session):
    """Import transcripts: jsonl (ctape's own export), claude-code, codex, openai, gemini.

    FORMAT is detected from each file's first records when it is not given. FILE
    may be - (stdin), a pipe or a .zst file; stdin and pipes may be zstd-compressed.
    Importing what the tape already holds adds nothing, says so, and moves no
    HEAD; a file that grew adds its new records and moves its branches on.

    \b
    Examples:
      ctape import ~/.claude/projects/x/SESSION.jsonl -s cc
      ctape import codex rollout-*.jsonl
      ctape import jsonl backup.jsonl
      zstdcat rollout.jsonl.zst | ctape import codex -
    """
    from ..errors import CtapeError
    from ..formats import import_files
    from ..formats.reading import spooled

    fmt, files = (args[0], list(args[1:])) if args[0] in FORMATS else (None, list(args))
    if not files:
        raise click.UsageError(f"give a FILE to import as {fmt}")
    first = args[0]
    if fmt is None and len(args) > 1 and first != "-" and not os.path.lexists(first) and "/" not in first and "." not in first:
        # `import codexx FILE`: a mistyped FORMAT more likely than a file named so
        raise click.BadParameter(f"{first!r} is neither a FORMAT ({', '.join(FORMATS)}) nor a file", param_hint="FORMAT")
    for f in files:
        if os.path.isdir(f):
            raise click.BadParameter(f"{f!r} is a directory; give the transcript files in it", param_hint="FILE")
    if "-" in files:
        need_stdin("give the transcript as a FILE, or pipe it in")
    tape = open_tape(ctx)
    progress = sys.stderr is not None and sys.stderr.isatty()
    if len(files) == 1:  # its importer checks it before writing anything
        lines = import_files(tape, fmt, files, session, progress=progress)
    else:
        with spooled(files) as readable:
            for path in readable:  # every file first: one refused imports nothing
                _check_format(path, fmt)
            try:
                lines = import_files(tape, fmt, readable, session, progress=progress)
            except CtapeError as e:  # found only while importing: a full disk, a broken file
                err = CtapeError(f"{e}; the files listed before the one that failed may be imported already "
                                 "(once it is fixed, run the command again: what the tape holds adds nothing)")
                err.exit_code = e.exit_code
                raise err from None
    for line in lines:
        click.echo(line, err=True)


def _check_format(path: str, fmt: Optional[str]) -> None:
    """Refuse, before anything is written, a file whose format cannot be told from its first
    records (formats.detect), or, when a FORMAT is named, is another one: a later file
    refused would otherwise leave the earlier ones imported."""
    from ..errors import InvalidInput
    from ..formats.detect import detect
    from ..formats.reading import real_path

    if fmt is None:
        detect(path)  # says what is wrong, and that naming the format may help
        return
    try:
        found = detect(path)
    except InvalidInput:
        if not os.access(real_path(path), os.R_OK):
            raise  # "cannot read FILE: why"
        found = None
    if found != fmt:
        seen = f"its first records are {found}" if found else "its first records are in no format ctape knows"
        raise InvalidInput(f"{path}: not a {fmt} transcript ({seen}); nothing was imported: "
                           "name the format it is in, or leave FORMAT out to detect each file's")


@main.command()
@click.argument("ref")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "openai", "claude-code", "codex", "gemini"]), default="jsonl", show_default=True)
@session_option
@click.pass_context
def export(ctx, ref, fmt, session):
    """Write history to stdout: a whole SESSION, or the path root -> REF.

    REF is read as `show` reads it: HEAD~3, a branch or a tag name in the
    session (-s, else the default one); a session's name exports all of it.

    \b
    Examples:
      ctape export chat > chat.jsonl
      ctape export chat/alt --format openai
      ctape export HEAD~3 -s chat > before.jsonl
    """
    from ..formats import export_notes, export_ref

    need_stdout()
    # bytes: a source line that was not UTF-8 comes back as a str with surrogate escapes,
    # and goes out as the bytes it was (docs/import.md)
    out = sys.stdout.buffer
    tape = open_tape(ctx)
    ref, session = ref_in_session(ctx, ref, session)
    tally: dict = {}
    with writing_output():
        for line in export_ref(tape, ref, fmt, tally):
            out.write(line.encode("utf-8", "surrogateescape") + b"\n")
        out.flush()
    for note in export_notes(tape, ref, fmt, tally):
        click.echo(f"note: {note}", err=True)
    warn_damage(tape, session or session_in_ref(tape, ref))
