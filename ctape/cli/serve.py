"""`ctape serve`: the click command (a thin skin over ctape.web.serve)."""

from __future__ import annotations

import click

from .base import main


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (anything but loopback exposes the tape to the network).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="Port to bind (default: a free one).")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a web browser.")
@click.option("--verbose", is_flag=True, help="Log every request on stderr.")
@click.pass_context
def serve(ctx, host, port, open_browser, verbose):
    """Serve a read-only web view of the tape (sessions, branch trees, diffs, stats).

    Prints the URL as the first line of stdout, then serves until interrupted.
    Only GET and HEAD are answered, only to Host names of this machine.

    \b
    Examples:
      ctape serve --open
      ctape --dir /tmp/demo-tape serve --port 8123
    """
    from ..web import serve as run
    from .base import open_tape

    if not host.strip():  # '' binds every interface: say 0.0.0.0 for that, never by an empty variable
        raise click.BadParameter("an empty address binds every interface; give 0.0.0.0 for that, or leave --host out (127.0.0.1)", param_hint="--host")

    run(open_tape(ctx), host=host, port=port, open_browser=open_browser, quiet=not verbose, echo=click.echo)


main.add_command(serve)
