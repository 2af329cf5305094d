"""`ctape serve`: the tape in a browser, read-only, on this machine.

Standard library only (http.server): see docs/design.md, "Why the web view runs on
http.server". Pages are rendered on the server (pages.py, conversation.py, tree.py);
a small script (static/app.js) adds "show all" and the live updates.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

__all__ = ["serve", "make_server", "url_of"]


def __getattr__(name):
    # imported on first use, so that `ctape --help` does not load the server
    if name in ("make_server", "url_of"):
        from . import server

        return getattr(server, name)
    raise AttributeError(f"module 'ctape.web' has no attribute {name!r}")


def _loopback(host: str) -> bool:
    import ipaddress

    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def serve(tape, host: str = "127.0.0.1", port: int = 0, open_browser: bool = False, quiet: bool = True, echo: Optional[Callable[..., None]] = None, ready: Optional[Callable[[str], None]] = None) -> None:
    """Serve TAPE until interrupted; the URL is echoed first (stdout), then a note on stderr."""
    from .server import make_server, url_of

    httpd = make_server(tape, host, port, quiet=quiet)
    url = url_of(httpd)
    if echo is not None:
        echo(url)
        echo("ctape serve: read-only view of " + tape.path + "; Ctrl-C stops it", err=True)
        if not _loopback(host):  # (the options table said so; the command did not: found by an audit)
            echo(f"ctape serve: warning: listening on {host}: anyone who can reach this machine there can read every "
                 "session of the tape (there is no password); use the default 127.0.0.1 and an SSH tunnel to share it", err=True)
    if ready is not None:
        ready(url)
    if open_browser:
        import webbrowser

        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
