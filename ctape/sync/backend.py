"""Where a remote's objects live: a tiny interface over a plain folder or an S3 bucket.

    get(key)                  the bytes, or None when there is no such key
    put_if_absent(key, data)  create-only (`If-None-Match: *`); False when the key exists
    list(prefix, delimiter)   keys (and common prefixes) under a prefix, paged
    delete(key)

Every call counts its requests (`requests`), so that push and pull can report them. No
call ever overwrites a key. Errors are RemoteError with one line that names the remote
and what to do; credentials never appear in them (botocore's messages are not echoed).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
import tempfile
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Optional
from urllib.parse import unquote, urlparse

from ..model.errors import CtapeError, InvalidInput
from ..store.files import place_new

_KEY = re.compile(r"[A-Za-z0-9._\-/]{1,900}")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
TRIES = 4  # attempts of one request (botocore's standard retries: throttling, 5xx, timeouts)
WAIT_DEFAULT = 30.0  # s without an answer before a try gives up (CTAPE_REMOTE_TIMEOUT)
MAX_CONNECTIONS = 16  # kept-alive connections to the store: at least the transfer threads (push.WORKERS, pull.WORKERS)


class RemoteError(CtapeError):
    """A remote cannot be used: missing bucket or folder, access denied, unreachable,
    or it holds something that is not this tape."""

    exit_code = 1


class LastingRemoteError(RemoteError):
    """A RemoteError that trying again does not mend: the remote holds another tape or
    something else, the bucket does not exist, the credentials are missing or refused.
    `push --follow` stops on it (it tried again every second, for ever; an audit)."""


def check_key(key: str) -> str:
    if not _KEY.fullmatch(key) or any(p in ("", ".", "..") for p in key.split("/")):
        raise InvalidInput(f"bad remote key {key[:80]!r}")
    return key


TRANSFER_THREADS = "ctape-transfer"  # the name of transfer_pool's threads (cli.base._leave_lingering_threads)


def result_of(future):
    """future.result(), waited for in short turns: a signal sent to the process may be
    taken by a transfer thread (asleep in a request), and a main thread asleep in a lock
    with no timeout would not look at it until the transfer ends (the tries and waits of
    a store that hangs); between turns it does."""
    from concurrent.futures import TimeoutError as NotYet

    while True:
        try:
            return future.result(timeout=0.25)
        except NotYet:
            continue


@contextmanager
def transfer_pool(workers: int):
    """A ThreadPoolExecutor for transfers. Left by an error or an interrupt, the transfers
    not started never are, and those under way are not waited for: `with
    ThreadPoolExecutor()` ran every queued one to its end first, and against a server that
    hangs each took its tries and waits (a Ctrl-C of a clone exited after 82 s). Left
    normally, it waits for them as before."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(workers, thread_name_prefix=TRANSFER_THREADS)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


class Backend:
    """The interface (and a request counter)."""

    url = ""

    def __init__(self) -> None:
        self.warn: Callable[[str], None] = lambda s: None  # the command's warnings (a store slow to answer)
        self.requests = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self._counting = threading.Lock()  # push and pull transfer from several threads

    def _tick(self, requests: int = 1, up: int = 0, down: int = 0) -> None:
        with self._counting:
            self.requests += requests
            self.bytes_up += up
            self.bytes_down += down

    def get(self, key: str) -> Optional[bytes]:
        raise NotImplementedError

    def put_if_absent(self, key: str, data: bytes) -> bool:
        raise NotImplementedError

    def list(self, prefix: str, delimiter: Optional[str] = None, start_after: Optional[str] = None) -> Iterator[tuple[str, int, bool]]:
        """(key or common prefix, size, is_prefix), in key order; with `start_after`, only
        those after that key."""
        raise NotImplementedError

    def stamped(self, prefix: str, start_after: Optional[str] = None) -> Iterator[tuple[str, int, float]]:
        """(key, size, when it was written by the store's clock, as a timestamp) of every key
        under prefix (no common prefixes), in key order, after `start_after`: one listing, as
        `list` (what a summary's copy of a manifest is checked by: summary.py)."""
        raise NotImplementedError

    def aged(self, prefix: str) -> Iterator[tuple[str, float]]:
        """(key, seconds since it was written) for every key under prefix, in key order: by
        the store's own clock, never this machine's. `compact --remote` deletes what is
        older than its grace period, and a machine whose clock ran ahead of the store's by
        about that much took another copy's piece, put a moment before, for old: the push
        under way listed it, and it was gone (found by an audit, under a clock 15 days
        ahead with the default grace)."""
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def check(self) -> None:
        """Raise RemoteError when the place does not exist or cannot be read."""

    def remove_leftovers(self, older_than: float) -> int:
        """Remove what killed writes left behind that no key names (a folder's temp files),
        when older than `older_than` seconds; how many. An S3 PUT leaves nothing."""
        return 0


_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)?[^/?#]*@")


def mask_url(url: str) -> str:
    """The URL with whatever stands before an `@` in its host part (user:secret) as `***`:
    what an error message may show of a URL someone typed credentials into."""
    return _USERINFO.sub(lambda m: (m.group(1) or "") + "***@", url, count=1)


def refuse_credentials(url: str, what: str = "a remote URL") -> None:
    """Credentials never go in a URL (SPEC section 17): refused in one line that does not
    echo them (the part before `@` shows as ***)."""
    if mask_url(url) != url:
        raise InvalidInput(f"{what} must not hold credentials ({mask_url(url)}): use the AWS variables or a profile")


def check_endpoint(endpoint: str, what: str = "endpoint") -> str:
    """An S3 endpoint: http(s)://HOST[:PORT][/PATH], no credentials (`--endpoint`, and
    AWS_ENDPOINT_URL as boto3 would read it: checked here first, so a bad one is one line)."""
    refuse_credentials(endpoint, f"an {what}" if what[0] in "aeiou" else what)
    try:
        u = urlparse(endpoint)  # raises on a bracketed host that is no IPv6 address, or unclosed
        u.port  # noqa: B018 - raises on a port that is not a number
        ok = u.scheme in ("http", "https") and bool(u.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise InvalidInput(f"bad {what} {endpoint!r}: write http://HOST:PORT or https://HOST")
    if u.query or u.fragment or u.params:
        # never sent as written (boto3 cannot resolve it), and a token there would be kept
        # in remotes.json and shown by `remote list`: refused, and not repeated here
        shown = f"{u.scheme}://{u.netloc}{u.path}"
        raise InvalidInput(f"bad {what} {shown + '?...'!r}: an endpoint has no query or fragment; write http://HOST:PORT or https://HOST "
                           "(credentials go in the AWS variables or a profile)")
    return endpoint


def _without_query(url: str) -> str:
    """What an error may repeat of a remote URL: up to its query or fragment, if any (a
    token there must not reach the terminal, nor remotes.json), as `?...`."""
    cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=-1)
    return url if cut < 0 else url[:cut] + "?..."


def parse_url(url: str) -> tuple[str, str, str]:
    """("s3", bucket, prefix) or ("file", path, "")."""
    refuse_credentials(url)
    shown = _without_query(url)
    try:
        u = urlparse(url)
    except ValueError:  # a bracketed host that is no IPv6 address, or unclosed
        raise InvalidInput(f"bad remote URL {shown!r}: write s3://BUCKET/PREFIX or file:///ABSOLUTE/PATH") from None
    if shown != url and u.scheme in ("file", "s3"):
        # no part of a remote is named by a query or a fragment (a token there would be
        # kept in remotes.json and shown by `remote list`): refused, and not repeated
        raise InvalidInput(f"bad remote URL {shown!r}: a remote URL has no query or fragment; write s3://BUCKET/PREFIX or "
                           "file:///ABSOLUTE/PATH (credentials go in the AWS variables or a profile)")
    url = shown
    if u.scheme == "file":
        # a file URL's path is percent-encoded (RFC 8089; Path.as_uri() writes a space as
        # %20): `file:///tmp/my%20tapes` named a folder called `my%20tapes` (an audit)
        path = unquote(u.path)
        if u.netloc not in ("", "localhost") or not path.startswith("/") or "\0" in path:
            raise InvalidInput(f"bad remote URL {url!r}: write file:///ABSOLUTE/PATH")
        if not os.path.normpath(path).strip("/"):  # (normpath keeps `//`)
            # a remote lays its folders out at its root: `file:///` put them into / itself
            # (found by an audit); a folder of its own is what a remote needs
            raise InvalidInput(f"bad remote URL {url!r}: not the root folder; give a folder of its own, e.g. file:///srv/tapes")
        return "file", os.path.normpath(path), ""
    if u.scheme == "s3":
        if not _BUCKET.fullmatch(u.netloc or ""):
            raise InvalidInput(f"bad remote URL {url!r}: the bucket must be 3-63 characters of a-z, 0-9, '.' and '-'")
        prefix = u.path.strip("/")
        if prefix:
            check_key(prefix)
        return "s3", u.netloc, prefix
    raise InvalidInput(f"bad remote URL {url!r}: use s3://BUCKET/PREFIX or file:///PATH")


def answer_wait() -> float:
    """Seconds a request waits for an answer before its try gives up: CTAPE_REMOTE_TIMEOUT,
    else WAIT_DEFAULT."""
    text = os.environ.get("CTAPE_REMOTE_TIMEOUT", "").strip()
    if not text:
        return WAIT_DEFAULT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400 or value != value:
        raise InvalidInput(f"CTAPE_REMOTE_TIMEOUT={text[:20]!r} is not a number of seconds (0 < s <= 86400); unset it or give one, e.g. 60")
    return value


def open_backend(url: str, endpoint: Optional[str] = None, name: str = "") -> Backend:
    kind, where, prefix = parse_url(url)
    if endpoint is not None:
        check_endpoint(endpoint)
    if kind == "file":
        return FileBackend(where, url, name)
    return S3Backend(where, prefix, endpoint, url, name)


class FileBackend(Backend):
    """A plain folder (tests, NFS): a key is a path; create-only is a hard link of a
    finished temp file, which never replaces a file that is there.

    What it creates is private, as in a tape (files 0600, folders 0700), whatever the
    umask: transcripts hold secrets. A team shares a remote folder by letting its group
    write in the remote's own folder (`chmod 2770`), which no umask does by itself: then
    what is created in it gives that group what the remote's folder gives it (files
    read and write, folders also search). Others get nothing, whatever the remote's
    folder grants them."""

    def __init__(self, root: str, url: str = "", name: str = ""):
        super().__init__()
        self.root = root
        self.url = url or f"file://{root}"
        self.name = name
        self._modes: Optional[tuple[int, int]] = None

    def modes(self) -> tuple[int, int]:
        """(file mode, folder mode) for what this remote creates, from the remote's own
        folder (looked at once)."""
        if self._modes is None:
            mode = os.stat(self.root).st_mode
            # a group that may write in it shares it (no umask gives that); a set-group-ID
            # folder hands its group down, so the folders made in it keep the bit
            group = mode & 0o070 if mode & stat.S_IWGRP else 0
            self._modes = (0o600 | (group & 0o060), 0o700 | group | (mode & stat.S_ISGID if group else 0))
        return self._modes

    def _make_folders(self, folder: str) -> None:
        """Create `folder` and the folders above it, up to the remote's own, with the
        remote's folder mode (set explicitly: the umask would take the group's bits)."""
        if os.path.isdir(folder) or os.path.normpath(folder) == os.path.normpath(self.root):
            return  # (the remote's own folder is never made here: `check` wants it there)
        self._make_folders(os.path.dirname(folder))
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            return  # made by another push meanwhile, with the same mode
        os.chmod(folder, self.modes()[1])

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    def check(self) -> None:
        if os.path.lexists(self.root) and not os.path.isdir(self.root):
            raise RemoteError(f"remote folder {self.root} is a file, not a folder; give a folder's path (file:///PATH)")
        literal = os.path.normpath(urlparse(self.url).path) if self.url.startswith("file:") else self.root
        if not os.path.isdir(self.root) and literal != self.root and os.path.isdir(literal):
            # a URL kept by a version before 2026-12-06, which read its `%20` as is: going on
            # here split the remote in two, each copy "up to date" (found by an audit)
            import pathlib

            name = self.name or "NAME"
            raise RemoteError(f"remote folder {self.root} does not exist, and {literal} does: ctape reads %XX in a file:// URL as an "
                              f"escape since 2026-12-06, and {self.url} named {literal} before; to go on with that folder: "
                              f"ctape remote rm {name} && ctape remote add {name} {pathlib.PurePosixPath(literal).as_uri()}")
        if not os.path.isdir(self.root):
            # a clone or pull names a remote that is there; a push to a new one makes it first
            raise RemoteError(f"remote folder {self.root} does not exist; check the URL (to push to a new folder remote, create it first: mkdir -p {self.root})")

    def get(self, key: str) -> Optional[bytes]:
        self._tick()
        try:
            with open(self._path(key), "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as e:
            raise RemoteError(f"cannot read {key} from {self.url}: {e.strerror}") from None
        self._tick(0, down=len(data))
        return data

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._tick()
        path = self._path(key)
        folder = os.path.dirname(path)
        try:
            for attempt in range(5):
                tmp = os.path.join(folder, f".tmp-{secrets.token_hex(6)}")
                try:
                    self._make_folders(folder)
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                    break
                except FileNotFoundError:
                    if attempt == 4:
                        raise
                    # a deletion beside it removed a folder, empty a moment (delete below)
            try:
                if self.modes()[0] != 0o600:
                    os.fchmod(fd, self.modes()[0])  # the group's bits, past the umask
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except BaseException:
                # a full disk, an I/O error: the piece is not there, and neither is its temp
                # file (only a killed write leaves one, for `compact --remote` to remove)
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
            finally:
                os.close(fd)
            try:
                if not place_new(tmp, path):
                    return False
            finally:
                if os.path.lexists(tmp):
                    os.unlink(tmp)
            dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise RemoteError(f"cannot write {key} to {self.url}: no space left") from None
            raise RemoteError(f"cannot write {key} to {self.url}: {e.strerror}") from None
        self._tick(0, up=len(data))
        return True

    def list(self, prefix: str, delimiter: Optional[str] = None, start_after: Optional[str] = None) -> Iterator[tuple[str, int, bool]]:
        yield from sorted((k, st.st_size if st else 0, st is None) for k, st in self._walk(prefix, delimiter, start_after))

    def stamped(self, prefix: str, start_after: Optional[str] = None) -> Iterator[tuple[str, int, float]]:
        yield from sorted((k, st.st_size, max(st.st_mtime, st.st_ctime)) for k, st in self._walk(prefix, None, start_after) if st)

    def aged(self, prefix: str) -> Iterator[tuple[str, float]]:
        now = self._now()
        yield from sorted((k, now - max(st.st_mtime, st.st_ctime)) for k, st in self._walk(prefix, None) if st)

    def _now(self) -> float:
        """The time by the clock that stamps the folder's files (a network file system's
        server's): the times of a file made and removed for the purpose."""
        try:
            fd, path = tempfile.mkstemp(prefix=".tmp-clock-", dir=self.root)
        except OSError as e:
            raise RemoteError(f"cannot write in {self.url}: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            return max(st.st_mtime, st.st_ctime)
        finally:
            os.close(fd)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass  # taken by another run's removal of leftovers (`--grace now`)

    def _walk(self, prefix: str, delimiter: Optional[str], start_after: Optional[str] = None) -> Iterator[tuple[str, Optional[os.stat_result]]]:
        """(key, its lstat) under prefix, after `start_after` (those before are not looked
        at: an uploader's thousands of manifests read before); (common prefix, None) with a
        delimiter. Temp files of writes under way (or killed) are no keys."""
        self._tick()
        base = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
        start = os.path.join(self.root, *[p for p in base.split("/") if p])
        for folder, dirs, files in os.walk(start):
            rel = os.path.relpath(folder, self.root)
            rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for d in dirs:
                k = rel + d + "/"
                if delimiter == "/" and k.startswith(prefix) and (start_after is None or k > start_after):
                    yield k, None
            for f in files:
                k = rel + f
                if not f.startswith(".tmp-") and k.startswith(prefix) and (start_after is None or k > start_after):
                    try:
                        yield k, os.lstat(os.path.join(folder, f))
                    except FileNotFoundError:
                        continue  # deleted meanwhile
            if delimiter == "/":
                dirs[:] = []

    def delete(self, key: str) -> None:
        self._tick()
        path = self._path(key)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        # and the folders it leaves empty, up to the key's first part (f/, m/...): a folder
        # kept for every file a compaction ever deleted made each listing of f/ walk them all
        # (3,104 after 200 days; found by an audit of what grows with a tape's age). A write
        # that made one of them a moment before makes it again (put_if_absent)
        top = os.path.join(self.root, key.split("/", 1)[0])
        folder = os.path.dirname(path)
        while folder.startswith(top + os.sep):
            try:
                os.rmdir(folder)
            except OSError:
                break  # not empty (or not ours to remove): the folders above are not either
            folder = os.path.dirname(folder)

    def remove_leftovers(self, older_than: float) -> int:
        """A write killed between its temp file and the link leaves `.tmp-*` (the piece's
        bytes: maybe a value redacted since), which no listing shows. One whose age (the
        later of mtime and ctime, as compact judges) passes `older_than` is no live write's:
        a write links its temp file within seconds of creating it."""
        self._tick()
        now, n = self._now(), 0
        for folder, _, files in os.walk(self.root):
            for f in files:
                if not f.startswith(".tmp-"):
                    continue
                path = os.path.join(folder, f)
                try:
                    st = os.lstat(path)
                    if now - max(st.st_mtime, st.st_ctime) >= older_than:
                        os.unlink(path)
                        n += 1
                except FileNotFoundError:
                    continue  # linked and removed by its write meanwhile
                except OSError as e:
                    raise RemoteError(f"cannot remove a leftover temp file from {self.url}: {e.strerror}") from None
        return n


class S3Backend(Backend):
    """An S3-compatible bucket through boto3 (the `ctape[s3]` extra, imported here only).

    Credentials and region come from boto3's usual chain (AWS_ACCESS_KEY_ID /
    AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws, instance roles); the endpoint from the
    remote's --endpoint, else AWS_ENDPOINT_URL (which boto3 reads itself)."""

    def __init__(self, bucket: str, prefix: str, endpoint: Optional[str], url: str, name: str = ""):
        super().__init__()
        try:
            import boto3
            import botocore.config
            import botocore.exceptions as bx
        except ImportError:
            raise RemoteError("s3:// remotes need boto3: pip install 'boto3>=1.35' (ctape's s3 extra)") from None
        self.bx = bx
        self.bucket, self.prefix, self.url = bucket, prefix, url
        self.where = f"remote {name!r} ({url})" if name else url
        self.endpoint = endpoint
        if not endpoint:
            # as boto3 would read them (the S3 one first), checked here: one line, no secret
            for var in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
                if os.environ.get(var):
                    self.endpoint = self.endpoint or check_endpoint(os.environ[var], var)
        self.wait = answer_wait()
        self._said_waiting = False
        cfg = botocore.config.Config(
            retries={"total_max_attempts": TRIES, "mode": "standard"},  # (max_attempts counts retries: one more)
            # push and pull transfer 8 at a time: each thread keeps its own connection
            # alive (fewer than threads would open and close one per request)
            max_pool_connections=MAX_CONNECTIONS,
            connect_timeout=min(10.0, self.wait),
            # the wait for each answer (not for a whole transfer: an upload that is still
            # sending is not waiting). A store that takes the connection and never answers
            # held a command 120 s a try, 8 minutes in all, saying nothing
            read_timeout=self.wait,
            s3={"addressing_style": "path"} if self.endpoint else {},
        )
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        try:
            session = boto3.session.Session()
            self.client = session.client("s3", endpoint_url=self.endpoint, config=cfg, region_name=region or session.region_name or "us-east-1")
        except bx.BotoCoreError as e:
            raise RemoteError(f"cannot set up the S3 client for {self.where}: {type(e).__name__}") from None
        self.client.meta.events.register("before-send.s3.*", self._count)
        self.client.meta.events.register("needs-retry.s3.*", self._waited)

    def _waited(self, caught_exception=None, attempts: int = 0, **_kw) -> None:
        """Before botocore tries a request again: a try that had no answer is said, once a
        command (it returns nothing, so botocore's own retry rules decide)."""
        if isinstance(caught_exception, self.bx.ReadTimeoutError) and not self._said_waiting and attempts < TRIES:
            self._said_waiting = True
            try:
                self.warn(f"no answer from {self.where} in {self.wait:g} s; trying again ({TRIES} tries in all; "
                          "CTAPE_REMOTE_TIMEOUT sets the wait)")
            except Exception:  # noqa: BLE001 - a warning that cannot be shown (stderr gone) must not break the request
                pass

    def _count(self, **_kw) -> None:
        self._tick()

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _fail(self, e: Exception, what: str) -> RemoteError:
        """One line, never botocore's own text (it may echo request details)."""
        bx = self.bx
        if isinstance(e, bx.NoCredentialsError):
            return RemoteError(f"no AWS credentials for {self.where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE")
        if isinstance(e, bx.ReadTimeoutError):
            return RemoteError(f"no answer from {self.where} at {self.endpoint or 'AWS'} in {self.wait:g} s ({TRIES} tries) while trying to {what}; "
                               "check --endpoint / AWS_ENDPOINT_URL and the network, or give it longer (CTAPE_REMOTE_TIMEOUT=SECONDS)")
        if isinstance(e, bx.ConnectionClosedError):  # the server (or a proxy) hung up before answering
            return RemoteError(f"{self.where} at {self.endpoint or 'AWS'} closed the connection before answering while trying to {what}; "
                               "check the server and the network, or give it longer (CTAPE_REMOTE_TIMEOUT=SECONDS)")
        if isinstance(e, bx.SSLError):  # (before EndpointConnectionError: it is one)
            return RemoteError(f"the TLS handshake with {self.where} at {self.endpoint or 'AWS'} failed while trying to {what}: if the server "
                               "speaks plain HTTP, give an http:// endpoint (--endpoint / AWS_ENDPOINT_URL); else check its certificate")
        if isinstance(e, (bx.EndpointConnectionError, bx.ConnectTimeoutError)):
            return RemoteError(f"cannot reach {self.where} at {self.endpoint or 'AWS'}: check --endpoint / AWS_ENDPOINT_URL and the network")
        if isinstance(e, bx.ClientError):
            code = str(e.response.get("Error", {}).get("Code", ""))
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code == "NoSuchBucket":
                return LastingRemoteError(self._no_bucket())
            if code == "RequestTimeTooSkewed":  # (a 403: a laptop's clock, just back from sleep, catches up)
                return RemoteError(f"{self.where} refused to {what}: this machine's clock is off from the server's; check the clock")
            if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken") or status == 403:
                return LastingRemoteError(f"access denied by {self.where} ({code or status}) while trying to {what}; check the AWS credentials")
            if isinstance(status, int) and status >= 500 or code in ("SlowDown", "InternalError", "ServiceUnavailable"):
                # (a 503 with no body reads as code "503": "refused" read like a permission)
                return RemoteError(f"{self.where} could not {what}: it answered {code or status} (a server error, or too many requests) "
                                   f"to each of {TRIES} tries; try again later")
            return RemoteError(f"{self.where} refused to {what}: {code or status}")
        if isinstance(e, bx.BotoCoreError):
            return RemoteError(f"{self.where}: cannot {what} ({type(e).__name__})")
        return RemoteError(f"{self.where}: cannot {what} ({type(e).__name__})")

    def _no_bucket(self) -> str:
        """The server says there is no such bucket. With an endpoint that has a path, the
        path may be the reason (the requests go to ENDPOINT/PATH/BUCKET/...): say so."""
        path = urlparse(self.endpoint).path.rstrip("/") if self.endpoint else ""
        if path:
            return (f"bucket {self.bucket!r} does not exist at {self.endpoint} ({self.where}); the endpoint's path {path!r} comes "
                    f"before the bucket in every request: if the server is at the endpoint's root, leave the path out "
                    f"(`ctape remote rm`, then `ctape remote add` with --endpoint without it); else create the bucket first")
        return f"bucket {self.bucket!r} does not exist ({self.where}); create it first"

    def check(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except self.bx.ClientError as e:
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 404:
                raise RemoteError(self._no_bucket()) from None
            raise self._fail(e, "read the bucket") from None
        except Exception as e:  # noqa: BLE001 - mapped to one line
            raise self._fail(e, "read the bucket") from None

    def get(self, key: str) -> Optional[bytes]:
        bx = self.bx
        dropped = (bx.ResponseStreamingError, bx.IncompleteReadError, bx.ReadTimeoutError, bx.ConnectionClosedError)
        for attempt in range(1, TRIES + 1):
            try:
                body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
            except bx.ClientError as e:
                if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404") or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404 and e.response.get("Error", {}).get("Code") != "NoSuchBucket":
                    return None
                raise self._fail(e, f"read {key}") from None
            except Exception as e:  # noqa: BLE001
                raise self._fail(e, f"read {key}") from None
            try:
                data = body.read()
                break
            except dropped as e:
                # the answer began and was cut (a connection dropped mid-body, a proxy that
                # gave up): botocore's retries end with the headers, so one flaky moment
                # failed a whole clone or pull (found by an audit). Asked again, TRIES in all
                if attempt == TRIES:
                    raise RemoteError(f"{self.where}: the download of {key} was cut off {TRIES} times ({type(e).__name__}); "
                                      "check the server and the network, and run the command again") from None
            except Exception as e:  # noqa: BLE001
                raise self._fail(e, f"read {key}") from None
        self._tick(0, down=len(data))
        return data

    def put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*")
        except self.bx.ClientError as e:
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status in (412, 409):  # the key exists (409: a concurrent conditional write)
                return False
            raise self._fail(e, f"write {key}") from None
        except Exception as e:  # noqa: BLE001
            raise self._fail(e, f"write {key}") from None
        self._tick(0, up=len(data))
        return True

    def list(self, prefix: str, delimiter: Optional[str] = None, start_after: Optional[str] = None) -> Iterator[tuple[str, int, bool]]:
        cut = len(self.prefix) + 1 if self.prefix else 0
        for page in self._pages(prefix, delimiter, start_after):
            rows = [(c["Prefix"][cut:], 0, True) for c in page.get("CommonPrefixes", [])]
            rows += [(o["Key"][cut:], int(o.get("Size", 0)), False) for o in page.get("Contents", [])]
            yield from sorted(rows)

    def stamped(self, prefix: str, start_after: Optional[str] = None) -> Iterator[tuple[str, int, float]]:
        cut = len(self.prefix) + 1 if self.prefix else 0
        for page in self._pages(prefix, None, start_after):
            yield from sorted((o["Key"][cut:], int(o.get("Size", 0)), o["LastModified"].timestamp() if o.get("LastModified") else 0.0)
                              for o in page.get("Contents", []))

    def aged(self, prefix: str) -> Iterator[tuple[str, float]]:
        """Ages by the store's clock: the time its answer to each listing is dated (HTTP
        `Date`, to the second; this machine's clock when it has none). Under `--grace now`
        a key written in the same second stays."""
        import time
        from email.utils import parsedate_to_datetime

        cut = len(self.prefix) + 1 if self.prefix else 0
        for page in self._pages(prefix, None):
            try:
                now = parsedate_to_datetime(page["ResponseMetadata"]["HTTPHeaders"]["date"]).timestamp()
            except (KeyError, TypeError, ValueError):
                now = time.time()
            yield from sorted((o["Key"][cut:], now - o["LastModified"].timestamp()) for o in page.get("Contents", []) if o.get("LastModified"))

    def _pages(self, prefix: str, delimiter: Optional[str], start_after: Optional[str] = None) -> Iterator[dict]:
        full = self._key(prefix.rstrip("/")) + "/" if prefix else (self.prefix + "/" if self.prefix else "")
        kw = {"Bucket": self.bucket, "Prefix": full}
        if delimiter:
            kw["Delimiter"] = delimiter
        if start_after:
            kw["StartAfter"] = self._key(start_after)
        try:
            while True:
                page = self.client.list_objects_v2(**kw)
                yield page
                if not page.get("IsTruncated"):
                    return
                kw["ContinuationToken"] = page["NextContinuationToken"]
        except self.bx.ClientError as e:
            raise self._fail(e, f"list {prefix or 'the bucket'}") from None
        except Exception as e:  # noqa: BLE001
            raise self._fail(e, f"list {prefix or 'the bucket'}") from None

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as e:  # noqa: BLE001
            raise self._fail(e, f"delete {key}") from None
