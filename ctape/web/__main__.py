"""`python -m ctape.web [--dir DIR] [serve options]`: the web view without the ctape command."""

import click

from .cli import serve


@click.command(context_settings={"help_option_names": ["-h", "--help"]}, params=[*serve.params, click.Option(["--dir", "dir_"], metavar="DIR", help="Tape directory.")])
@click.pass_context
def main(ctx, dir_, **kw):
    ctx.obj = {"dir": dir_}
    ctx.invoke(serve, **kw)


if __name__ == "__main__":
    main()
