"""Paging long output the way git does.

The pager is $CTAPE_PAGER, else $PAGER, else `less` (an empty value or `cat`: no pager).
It runs only when stdout is a terminal and `--no-pager` was not given. Output that fits
on the screen is printed directly. `less` gets LESS=FRX unless the user set LESS (quit
when the text fits one screen, pass colours through, and no alternate screen, so what was
read stays on the screen after `q`), and LV=-c as git sets it.
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


def page(text: str) -> None:
    """Write `text` (lines, with a final newline) to stdout, through the pager when it is
    long and stdout is a terminal."""
    cmd = pager_command()
    rows = shutil.get_terminal_size().lines
    if cmd is None or not sys.stdout.isatty() or text.count("\n") < rows:
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
        proc.stdin.write(text.encode("utf-8", "replace"))
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the reader quit early (q in less): that is not an error
    while True:
        try:
            proc.wait()
            return
        except KeyboardInterrupt:
            continue  # Ctrl-C belongs to the pager, as in git
