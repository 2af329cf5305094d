"""The HTTP side of `ctape serve`: the standard library's ThreadingHTTPServer, routes,
and the safety rules that hold for every response.

- Only GET and HEAD are answered; every other method gets 405.
- A request whose Host header is not one of this server's own names (HostRule) gets
  403: a page on another site that points its own name at 127.0.0.1 (DNS rebinding)
  cannot read the tape.
- Errors become statuses in one place (Handler._get): what names nothing (a ref, an
  entry, a session, a page) 404; a known condition of the tape that stops one page (a
  damaged record, a refused symlink, storage that refuses) 409 with its one-line reason;
  500 only for a bug.
- Every page carries a Content-Security-Policy without inline script
  (script-src 'self'), and the scripts and styles are files of this package.
"""

from __future__ import annotations

import errno
import ipaddress
import mimetypes
import os
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
IDLE_SECONDS = 30  # a connection that sends nothing this long is closed
_HASH = re.compile(r"[0-9a-fA-F]{4,64}")


def _norm(name: str) -> str:
    """A host name or IP literal as compared: lower case, without brackets or a trailing
    dot, an IP address in its canonical form (an IPv4-mapped IPv6 address as IPv4, an
    IPv6 zone dropped)."""
    n = name.strip().lower().rstrip(".")
    if n.startswith("[") and n.endswith("]"):
        n = n[1:-1]
    for candidate in (n, n.split("%", 1)[0] if "%" in n else None):
        if candidate is None:
            continue
        try:
            ip = ipaddress.ip_address(candidate)
        except ValueError:
            continue
        if ip.version == 6 and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return str(ip)
    return n


def split_host(header: Optional[str]) -> Optional[tuple[str, int]]:
    """(name, port) of a Host header (port 80 when it names none), or None when malformed."""
    h = (header or "").strip()
    if h.startswith("["):
        name, sep, rest = h.partition("]")
        name += sep
        if not sep or (rest and not rest.startswith(":")):
            return None
        port = rest[1:]
    elif ":" in h:
        name, _, port = h.rpartition(":")
        if ":" in name:  # an IPv6 address without brackets
            return None
    else:
        name, port = h, ""
    if not name or (port and not (port.isascii() and port.isdigit() and len(port) <= 5)):  # (str.isdigit takes '¹', which int() refuses; so are 4,301 digits)
        return None
    return _norm(name), int(port) if port else 80


class HostRule:
    """The Host headers a server answers (SPEC 15: "the bound address or localhost"),
    always with the bound port:

    - the address given to --host, the address it bound, and `localhost`;
    - on a loopback bind, also 127.0.0.1 and [::1];
    - on a wildcard bind (0.0.0.0 or ::), which binds every address of this machine, also
      the loopback addresses, the address the request arrived at, and this machine's own
      names: its hostname (short and fully qualified), NAME.local (mDNS) and the
      addresses the hostname resolves to. Other machines on the network can so use
      this machine's address or its name in the URL.

    Any other name, and any other IP literal, gets 403: a DNS name of another site is
    what DNS rebinding uses, and an address that is not this machine's is not this server.
    """

    def __init__(self, given: str, bound_ip: str, port: int, fqdn: str = ""):
        self.port = port
        ip = ipaddress.ip_address(_norm(bound_ip))
        self.loopback = ip.is_loopback
        self.wildcard = ip.is_unspecified
        names = {"localhost", _norm(given), str(ip)}
        if self.loopback or self.wildcard:
            names |= {"127.0.0.1", "::1"}
        if self.wildcard:
            names |= machine_names(fqdn)
        self.names = frozenset(n for n in names if n)

    def allows(self, header: Optional[str], arrived_at: Optional[str] = None) -> bool:
        got = split_host(header)
        if got is None or got[1] != self.port:
            return False
        name = got[0]
        if name in self.names:
            return True
        return self.wildcard and arrived_at is not None and name == _norm(arrived_at)


def machine_names(fqdn: str = "") -> set[str]:
    """This machine's own names: its hostname, the short form, the fully qualified name
    (`fqdn`, as the server found it when it bound) and the mDNS name NAME.local."""
    import socket

    host = socket.gethostname()
    short = host.split(".")[0]
    names = {_norm(n) for n in (host, short, fqdn, f"{short}.local" if short else "") if n}
    try:  # and the addresses the hostname resolves to (/etc/hosts, DNS)
        names |= {_norm(str(a[4][0])) for a in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        pass
    return names


class Handler(BaseHTTPRequestHandler):
    server_version = "ctape"
    sys_version = ""
    site: Site
    hosts: HostRule
    quiet = True
    # a connection silent this long is closed: 300 half-sent requests held a thread and a
    # descriptor each for good (found by an audit)
    timeout = IDLE_SECONDS

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        if not self.quiet:
            sys.stderr.write("%s %s\n" % (self.address_string(), format % args))

    def __getattr__(self, name: str):
        # any method other than GET and HEAD (POST, PUT, DELETE, PATCH, OPTIONS, made-up ones)
        if name.startswith("do_"):
            return self._refuse_method
        raise AttributeError(name)

    def handle(self) -> None:
        """A client that goes away while it is answered (a refusal, an error page, http.server's
        own answers) ends its request quietly, as one that leaves during a page does."""
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True

    def send_error(self, code, message=None, explain=None) -> None:
        """http.server's own answers (a request line that is no HTTP, a URL or headers too
        long, an HTTP version it does not speak) come before any route: with the same
        security headers as every page (SPEC 15), and a plain text body."""
        try:
            short, _ = self.responses.get(code, ("error", ""))
        except (AttributeError, ValueError):
            short = "error"
        self.close_connection = True
        body = f"{code} {short}\n".encode()
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            # refused before its version was read (`GET / HTTP/2.0`, a one-word request
            # line): http.server then writes no status line and no header (found by an audit)
            self.request_version = "HTTP/1.0"
        try:
            self.send_response(code, short)
            for k, v in _HEADERS.items():
                self.send_header(k, v)
            self.send_header("Connection", "close")
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD" and code >= 200 and code not in (204, 304):
                self.wfile.write(body)
        except OSError:
            pass  # the client went away

    def _refuse_method(self) -> None:
        if not self._check_host():
            return
        self._send(Page("method not allowed: ctape serve is read-only (GET and HEAD only)\n", 405, "text/plain; charset=utf-8"), {"Allow": "GET, HEAD"})

    def _check_host(self) -> bool:
        try:
            arrived_at = self.connection.getsockname()[0]
        except (OSError, AttributeError, IndexError):
            arrived_at = None
        if self.hosts.allows(self.headers.get("Host"), arrived_at):
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
            if path.startswith("/static/") or path == "/favicon.ico":  # no Tape: never waits for a turn
                try:
                    page = self.route(path, params)
                except CtapeError as e:
                    page = Page(f"not found: {e}\n", 404, "text/plain; charset=utf-8")
            else:
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
        except OSError as e:
            if e.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
                raise
            # the process or the machine is out of descriptors or memory: no bug of the page
            page = Page(f"busy: {e.strerror}; try again in a moment\n", 503, "text/plain; charset=utf-8")
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
    request_queue_size = 64  # connections the kernel holds before they are accepted (5 reset clients of a burst)

    def server_close(self) -> None:
        super().server_close()
        if self.site is not None:  # None: the bind failed
            self.site.close()


class CannotListen(CtapeError):
    """The address or port given to serve cannot be bound; the message says what to use
    instead. Exit 2 when the address is wrong (bad input), 1 when the machine refuses a
    good one (a port in use, a privileged port)."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def cannot_listen(host: str, port: int, err: OSError) -> CannotListen:
    """One line that says what to do about a failed bind."""
    import errno
    import socket

    shown = f"[{host}]" if ":" in host else host
    where = f"cannot listen on {shown}" + (f":{port}" if port else "")
    if isinstance(err, socket.gaierror):
        why = "name not known" if err.errno == socket.EAI_NONAME else f"name not resolved ({err.strerror or err})"
        return CannotListen(f"{where}: {why}; use an address of this machine, e.g. 127.0.0.1 (or 0.0.0.0 for all of them)", 2)
    if err.errno == errno.EADDRINUSE:
        return CannotListen(f"{where}: port {port} is in use; pick another with --port, or --port 0 for any free one")
    if err.errno == errno.EADDRNOTAVAIL:
        return CannotListen(f"{where}: {host} is not an address of this machine; use one of its addresses, e.g. 127.0.0.1 (or 0.0.0.0 for all of them)", 2)
    if err.errno in (errno.EACCES, errno.EPERM):
        return CannotListen(f"{where}: port {port} needs privileges this user lacks; pick one above 1023 with --port, or --port 0 for any free one")
    if err.errno == errno.EAFNOSUPPORT:
        return CannotListen(f"{where}: this machine has no IPv6; use an IPv4 address, e.g. 127.0.0.1")
    return CannotListen(f"{where}: {err.strerror or err}; use another --host or --port")


def idle_seconds() -> float:
    """How long a connection may stay silent: IDLE_SECONDS, or $CTAPE_SERVE_IDLE_SECONDS."""
    text = os.environ.get("CTAPE_SERVE_IDLE_SECONDS", "").strip()
    try:
        value = float(text) if text else IDLE_SECONDS
    except ValueError:
        value = IDLE_SECONDS
    return value if 0 < value < 86400 else IDLE_SECONDS


def make_server(tape, host: str = "127.0.0.1", port: int = 0, quiet: bool = True) -> ThreadingHTTPServer:
    """A server for the tape, bound but not yet serving (port 0: a free one). A bind that
    fails raises CannotListen, whose message says what to use instead."""
    import socket

    site = Site(tape)
    handler = type("CtapeHandler", (Handler,), {"site": site, "quiet": quiet, "timeout": idle_seconds()})
    server_cls = Server
    if ":" in host:  # an IPv6 literal
        server_cls = type("V6Server", (Server,), {"address_family": socket.AF_INET6})
    try:
        httpd = server_cls((host, port), handler)
    except OSError as e:
        site.close()
        raise cannot_listen(host, port, e) from None
    httpd.site = site
    httpd.daemon_threads = True
    bound_ip, bound_port = httpd.server_address[:2]
    # server_name: the fully qualified name http.server found for the bound address
    handler.hosts = HostRule(host, bound_ip, bound_port, getattr(httpd, "server_name", "") or "")
    return httpd


def url_of(httpd) -> str:
    host, port = httpd.server_address[:2]
    # a wildcard bind is shown as loopback: a URL that works on this machine
    shown = "[::1]" if host == "::" else f"[{host}]" if ":" in host else ("127.0.0.1" if host == "0.0.0.0" else host)
    return f"http://{shown}:{port}/"
