"""`python -m ctape.web [--dir DIR] [serve options]`: the web view without the ctape command."""

import sys

import click

from ..cli.serve import serve


@click.command(context_settings={"help_option_names": ["-h", "--help"]}, params=[click.Option(["--dir", "dir_"], metavar="DIR", help="Tape directory."), *serve.params])
@click.pass_context
def main(ctx, dir_, **kw):
    """Serve a read-only web view of the tape (like `ctape serve`)."""
    ctx.obj = {"dir": dir_}
    ctx.invoke(serve, **kw)


def run() -> None:
    from ..errors import CtapeError

    try:
        main(standalone_mode=False)
    except click.ClickException as e:
        click.echo(f"ctape: error: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        sys.exit(130)
    except CtapeError as e:
        click.echo(f"ctape: error: {e}", err=True)
        sys.exit(e.exit_code)
    except OSError as e:
        click.echo(f"ctape: error: {e.strerror or e}; pick another --port or check the path", err=True)
        sys.exit(1)


if __name__ == "__main__":
    run()
