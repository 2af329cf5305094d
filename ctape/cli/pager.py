"""Paging long output the way git does.

The pager is $CTAPE_PAGER, else $PAGER, else `less` (an empty value or `cat`: no pager).
It runs only when stdout is a terminal and `--no-pager` was not given. Output that fits
on the screen is printed directly. `less` gets LESS=FRX unless the user set LESS (quit
when the text fits one screen, pass colours through, and no alternate screen, so what was
read stays on the screen after `q`), and LV=-c as git sets it. A pager whose program is
not found is skipped with one warning line, as git's "cannot run" (the output is printed).
Output streams as it is made, into the pager or to stdout: only the first screen's worth
is read before the first write. A Ctrl-C while the pager runs is the pager's, as in git.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from typing import Iterator, Optional

import click


def _write(pieces: Iterator[str]) -> None:
    for piece in pieces:
        click.echo(piece, nl=False)


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


CHUNK_LINES = 1 << 16  # characters written at a time: output streams as it is made


def chunks(lines: Iterator[str]) -> Iterator[str]:
    """The lines joined into pieces of about CHUNK_LINES characters, each ending in a newline."""
    buf: list[str] = []
    size = 0
    for line in lines:
        buf.append(line)
        size += len(line) + 1
        if size >= CHUNK_LINES:
            yield "\n".join(buf) + "\n"
            buf, size = [], 0
    if buf:
        yield "\n".join(buf) + "\n"


def page(lines: Iterator[str]) -> None:
    """Write the lines to stdout as they come, through the pager when they are more than
    the screen holds and stdout is a terminal. Only the first screen's worth is read
    before anything is written: a `log` of 200,000 entries showed nothing for 10-15 s,
    and held all its text at once (found by an audit)."""
    cmd = pager_command()
    lines = iter(lines)
    if cmd is None or not sys.stdout.isatty():
        _write(chunks(lines))
        return
    rows = shutil.get_terminal_size().lines
    head: list[str] = []
    shown = 0
    for line in lines:
        head.append(line)
        shown += line.count("\n") + 1
        if shown >= rows:
            break
    if shown < rows:
        _write(chunks(iter(head)))
        return
    rest = chunks(itertools.chain(head, lines))
    if not _runnable(cmd):
        # as git does ("cannot run PAGER"): the output is printed without it, not lost (the
        # shell said "not found" and the text went nowhere, exit 0: found by an audit)
        click.echo(f"ctape: warning: cannot run the pager {cmd!r} (not found); printing without it", err=True)
        _write(rest)
        return
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    env.setdefault("LV", "-c")
    sys.stdout.flush()
    try:
        proc = subprocess.Popen(cmd, shell=True, stdin=subprocess.PIPE, env=env)
    except OSError:
        _write(rest)  # a pager that cannot start: print as if there were none
        return
    failed: Optional[BaseException] = None
    try:
        for piece in rest:
            proc.stdin.write(piece.encode("utf-8", "replace"))
    except BrokenPipeError:
        pass  # the reader quit early (q in less): that is not an error
    except KeyboardInterrupt:
        # Ctrl-C while the pager shows the first pages (a pipe holds 64 KiB: the write
        # waits for it) belongs to the pager too: the rest is not written, and ctape
        # waits for the pager as below. It went on to exit 130 with `less` still
        # running in the foreground, sharing the terminal with the shell (an audit)
        pass
    except Exception as e:  # noqa: BLE001 - an error while the lines are made: said once the pager is done
        failed = e
    try:
        proc.stdin.close()
    except BrokenPipeError:
        pass
    while True:
        try:
            proc.wait()
            break
        except KeyboardInterrupt:
            continue  # Ctrl-C belongs to the pager, as in git
    if failed is not None:
        raise failed  # (left running, the pager kept the terminal after ctape's exit: review)
