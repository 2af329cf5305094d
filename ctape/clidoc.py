"""The CLI reference (docs/cli.md), generated from click's own --help text.

    python -m ctape.clidoc > docs/cli.md

The output is deterministic: the terminal width is fixed at 100 columns, commands
come in click's listing order (sorted), each group's subcommands after it, and nothing depends on the environment.
tests/test_cli_docs.py fails when docs/cli.md differs from this output.
"""

from __future__ import annotations

import click

WIDTH = 100

HEADER = """\
# ctape command-line reference

Generated from `ctape --help` and each command's `--help` by `python -m ctape.clidoc`;
do not edit by hand. Regenerate with:

    python -m ctape.clidoc > docs/cli.md
"""


def _context(cmd: click.Command, name: str, parent: click.Context | None) -> click.Context:
    settings = dict(cmd.context_settings)
    settings.setdefault("terminal_width", WIDTH)
    settings.setdefault("max_content_width", WIDTH)
    return cmd.context_class(cmd, info_name=name, parent=parent, **settings)


def _help(cmd: click.Command, ctx: click.Context) -> str:
    # click keeps the help option of the first context that asked for it; one made without
    # the root's settings (a test walking the commands) would drop `-h` from this page
    if hasattr(cmd, "_help_option"):
        cmd._help_option = None
    text = cmd.get_help(ctx)
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


def _section(title: str, body: str) -> str:
    return f"## `{title}`\n\n```text\n{body}\n```\n"


def render() -> str:
    """The whole reference as Markdown."""
    from .cli import main

    root = _context(main, "ctape", None)
    parts = [HEADER, _section("ctape", _help(main, root))]
    _commands(main, root, "ctape", parts)
    return "\n".join(parts)


def _commands(group: click.Group, ctx: click.Context, path: str, parts: list[str]) -> None:
    """A section per command, and per subcommand of a group (`ctape session use`)."""
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        sub = _context(cmd, name, ctx)
        parts.append(_section(f"{path} {name}", _help(cmd, sub)))
        if isinstance(cmd, click.Group):
            _commands(cmd, sub, f"{path} {name}", parts)


def main() -> None:
    click.echo(render(), nl=False)


if __name__ == "__main__":
    main()
