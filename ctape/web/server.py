"""The HTTP side of `ctape serve`: the standard library's ThreadingHTTPServer, routes,
and the safety rules that hold for every response.

- Only GET and HEAD are answered; every other method gets 405.
- A request whose Host header is not the bound address, localhost or an IP literal
  gets 403: a page on another site that points its own name at 127.0.0.1 (DNS
  rebinding) cannot read the tape.
- Errors become statuses in one place (Handler._get): what names nothing (a ref, an
  entry, a session, a page) 404; a known condition of the tape that stops one page (a
  damaged record, a refused symlink, storage that refuses) 409 with its one-line reason;
  500 only for a bug.
- Every page carries a Content-Security-Policy without inline script
  (script-src 'self'), and the scripts and styles are files of this package.
"""

from __future__ import annotations

import ipaddress
import mimetypes
import re
import sys
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Optional
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import AmbiguousRef, CtapeError, EntryNotFound, InvalidInput, RefNotFound
from .markdown import esc
from .pages import Page, Site

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_STATIC = {"app.js", "style.css"}
_HASH = re.compile(r"[0-9a-fA-F]{4,64}")


def allowed_hosts(host: str, port: int) -> set[str]:
    names = {"localhost", "127.0.0.1", "[::1]", host if ":" not in host else f"[{host}]"}
    return {f"{n}:{port}".lower() for n in names}


def host_ok(header: Optional[str], allowed: set[str], port: int) -> bool:
    """The Host is the bound address, localhost, or an IP literal (never a DNS name of another site)."""
    if not header:
        return False
    h = header.strip().lower()
    if h in allowed:
        return True
    name, _, p = h.rpartition(":")
    if p != str(port):
        return False
    try:
        ipaddress.ip_address(name.strip("[]"))
        return True
    except ValueError:
        return False


class Handler(BaseHTTPRequestHandler):
    server_version = "ctape"
    sys_version = ""
    site: Site
    allowed: set[str]
    port: int
    quiet = True

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        if not self.quiet:
            sys.stderr.write("%s %s\n" % (self.address_string(), format % args))

    def __getattr__(self, name: str):
        # any method other than GET and HEAD (POST, PUT, DELETE, PATCH, OPTIONS, made-up ones)
        if name.startswith("do_"):
            return self._refuse_method
        raise AttributeError(name)

    def _refuse_method(self) -> None:
        if not self._check_host():
            return
        self._send(Page("method not allowed: ctape serve is read-only (GET and HEAD only)\n", 405, "text/plain; charset=utf-8"), {"Allow": "GET, HEAD"})

    def _check_host(self) -> bool:
        if host_ok(self.headers.get("Host"), self.allowed, self.port):
            return True
        self._send(Page("forbidden: unknown Host header (ctape serve answers only to its own address)\n", 403, "text/plain; charset=utf-8"))
        return False

    def do_HEAD(self) -> None:
        self._get(head=True)

    def do_GET(self) -> None:
        self._get(head=False)

    def _send(self, page: Page, extra: Optional[dict] = None, head: bool = False) -> None:
        self.send_response(page.status)
        for k, v in {**_HEADERS, **page.headers, **(extra or {})}.items():
            self.send_header(k, v)
        self.send_header("Content-Type", page.ctype)
        self.send_header("Content-Length", str(len(page.body)))
        self.end_headers()
        if not head and self.command != "HEAD":
            self.wfile.write(page.body)

    def _get(self, head: bool) -> None:
        if not self._check_host():
            return
        url = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(url.query).items()}
        path = unquote(url.path)
        try:
            with self.site.reading():  # a Tape of this request's own: requests run in parallel
                try:
                    page = self.route(path, params)
                except CtapeError as e:  # the one place errors become statuses
                    page = self.site.trouble(path, params, e, status_of(e))
        except CtapeError as e:  # the Tape of this request could not be opened
            page = self.site.layout("cannot show this", f"<h1>Cannot show this</h1><p>{esc(e)}</p>")
            page.status = 409
        except (BrokenPipeError, ConnectionResetError):
            return
        except Exception as e:  # noqa: BLE001 - one bad page must not stop the server
            traceback.print_exc(file=sys.stderr)
            page = self.site.layout("error", f"<h1>Internal error</h1><p>{esc(type(e).__name__)}: {esc(e)}</p>")
            page.status = 500
        try:
            self._send(page, head=head)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def route(self, path: str, q: dict) -> Page:
        parts = [p for p in path.split("/") if p]
        if parts and parts[0] == "static":
            return static(parts[1] if len(parts) == 2 else "")
        if parts == ["favicon.ico"]:
            return Page(b"", 204, "image/x-icon")
        site = self.site  # every route runs on the request's own Tape (Site.reading)
        if not parts:
            return site.sessions_page(q.get("q", ""))
        if parts[0] == "s" and len(parts) in (2, 3):
            name = parts[1]
            sub = parts[2] if len(parts) == 3 else ""
            if sub == "":
                return site.session_page(name, q.get("at") or None, q.get("before") or None)
            if sub == "tree":
                return site.tree_page(name, q.get("at") or None)
            if sub == "head":
                return site.head_json(name)
            if sub == "after":
                return site.after_json(name, q.get("after", ""))
        if parts[0] == "e" and len(parts) in (2, 3) and _HASH.fullmatch(parts[1]):
            sub = parts[2] if len(parts) == 3 else ""
            if sub == "":
                return site.entry_page(parts[1], q.get("s") or None)
            if sub in ("text", "json"):
                return site.entry_text(parts[1], raw=sub == "json", q=q)
            if sub == "image":
                return site.entry_image(parts[1], q)
        if parts == ["diff"]:
            return site.diff_page(q.get("a", ""), q.get("b", ""), q.get("s") or None)
        if parts == ["stats"]:
            return site.stats_page()
        raise RefNotFound(f"no page {path!r}")


def status_of(err: CtapeError) -> int:
    """404 for what names nothing this tape holds (a ref, entry, session or page, or a
    malformed one); 409 for every other known condition: the tape's state stops this one
    page (a damaged record, a symlink refused, storage that refuses), not the server."""
    if isinstance(err, (RefNotFound, EntryNotFound, AmbiguousRef, InvalidInput)):
        return 404
    return 409


def static(name: str) -> Page:
    if name not in _STATIC:
        raise RefNotFound(f"no file {name!r}")
    data = resources.files(__package__).joinpath("static", name).read_bytes()
    ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return Page(data, ctype=f"{ctype}; charset=utf-8")


class Server(ThreadingHTTPServer):
    """A thread per request; closing it closes the Tapes its requests opened."""

    site: Optional[Site] = None

    def server_close(self) -> None:
        super().server_close()
        if self.site is not None:  # None: the bind failed
            self.site.close()


def make_server(tape, host: str = "127.0.0.1", port: int = 0, quiet: bool = True) -> ThreadingHTTPServer:
    """A server for the tape, bound but not yet serving (port 0: a free one)."""
    site = Site(tape)
    handler = type("CtapeHandler", (Handler,), {"site": site, "quiet": quiet})
    server_cls = Server
    if ":" in host:  # an IPv6 literal
        import socket

        server_cls = type("V6Server", (Server,), {"address_family": socket.AF_INET6})
    httpd = server_cls((host, port), handler)
    httpd.site = site
    httpd.daemon_threads = True
    bound_port = httpd.server_address[1]
    handler.port = bound_port
    handler.allowed = allowed_hosts(host, bound_port)
    return httpd


def url_of(httpd) -> str:
    host, port = httpd.server_address[:2]
    shown = f"[{host}]" if ":" in host else ("127.0.0.1" if host == "0.0.0.0" else host)
    return f"http://{shown}:{port}/"
