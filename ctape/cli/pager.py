"""Paging long output the way git does.

The pager is $CTAPE_PAGER, else $PAGER, else `less` (an empty value or `cat`: no pager).
It runs only when stdout is a terminal and `--no-pager` was not given. Output that fits
on the screen is printed directly. `less` gets LESS=FRX unless the user set LESS (quit
when the text fits one screen, pass colours through, and no alternate screen, so what was
read stays on the screen after `q`), and LV=-c as git sets it. A pager whose program is
not found is skipped with one warning line, as git's "cannot run" (the output is printed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import click


def pager_command() -> str | None:
    """The pager to run, or None for none."""
    for var in ("CTAPE_PAGER", "PAGER"):
        if var in os.environ:
            cmd = os.environ[var].strip()
            return None if cmd in ("", "cat") else cmd
    return "less"


def _runnable(cmd: str) -> bool:
    """Whether the pager command's program can be found (the shell runs the whole line)."""
    import shlex

    try:
        words = shlex.split(cmd)
    except ValueError:
        return True  # a line the shell may read otherwise: let it try
    while words and "=" in words[0] and not words[0].startswith("="):  # VAR=value before the program
        words = words[1:]
    return not words or shutil.which(words[0]) is not None or words[0] in ("exec", "command", "env")


def page(text: str) -> None:
    """Write `text` (lines, with a final newline) to stdout, through the pager when it is
    long and stdout is a terminal."""
    cmd = pager_command()
    rows = shutil.get_terminal_size().lines
    if cmd is None or not sys.stdout.isatty() or text.count("\n") < rows:
        click.echo(text, nl=False)
        return
    if not _runnable(cmd):
        # as git does ("cannot run PAGER"): the output is printed without it, not lost (the
        # shell said "not found" and the text went nowhere, exit 0: found by an audit)
        click.echo(f"ctape: warning: cannot run the pager {cmd!r} (not found); printing without it", err=True)
        click.echo(text, nl=False)
        return
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    env.setdefault("LV", "-c")
    sys.stdout.flush()
    try:
        proc = subprocess.Popen(cmd, shell=True, stdin=subprocess.PIPE, env=env)
    except OSError:
        click.echo(text, nl=False)  # a pager that cannot start: print as if there were none
        return
    try:
        try:
            proc.stdin.write(text.encode("utf-8", "replace"))
        except KeyboardInterrupt:
            # Ctrl-C while the pager shows the first pages (a pipe holds 64 KiB: the write
            # waits for it) belongs to the pager too: the rest is not written, and ctape
            # waits for the pager as below. It went on to exit 130 with `less` still
            # running in the foreground, sharing the terminal with the shell (an audit)
            pass
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the reader quit early (q in less): that is not an error
    while True:
        try:
            proc.wait()
            return
        except KeyboardInterrupt:
            continue  # Ctrl-C belongs to the pager, as in git
