"""Streams: an assistant message written as it arrives, that survives a crash.

While text arrives, the writer persists what it has received at least every
`flush_interval` seconds as a partial record (one fsync per flush, only the new
text each time). Partial records never become entries one by one: a normal end
appends one `assistant` entry; a crash leaves them open, and `recover` (or the
next write to the session) turns them into one `streaming` entry whose parent is
the HEAD the stream started from.

A stream holds at most max_record() bytes (256 MiB, $CTAPE_MAX_RECORD), counted as its
text takes them in a record (UTF-8 JSON: a NUL counts six): an assistant message is one
record, as an import reads it. The write that would pass the limit keeps what fits and
raises StreamTooLong, and the stream ends as an interrupted one (one `streaming` entry
holding the text up to the limit), so `cat /dev/zero | ctape stream` stops instead of
filling the disk (docs/design.md, "Streams").
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import stat
import threading
from typing import TYPE_CHECKING, Optional

from ..model.errors import InvalidInput
from ..model.models import brief, Entry, now_rfc3339


if TYPE_CHECKING:
    from .session import Session
    from ..store.segment import SegmentWriter


_JSON = json.JSONEncoder(ensure_ascii=False)
PIECE = 16 << 20  # characters of text in one partial record at most


class NotText(InvalidInput, TypeError):
    """A chunk that is not text: a CtapeError, as every error of the API is, and still the
    TypeError Python code expects for a value of the wrong type."""


class StreamTooLong(InvalidInput):
    """A stream passed its limit; the text up to it is kept as a `streaming` entry."""


# -- which streams are live --------------------------------------------------------------
#
# A stream's partial records say nothing of whether its writer still runs. A writer holds an
# flock on `<lock folder>/<tape id>-<stream id>.lock` from its start to its end; the kernel
# lets go of it when the writer's process dies (kill -9 too). So a stream whose lock another
# open file can take is one a dead writer left: recorded as interrupted (a `streaming`
# entry), and one whose lock is held is live and left alone, whichever Tape or process of
# this machine writes to the session meanwhile. (Before, any write of another Tape or
# process recorded a live stream as interrupted: its text came twice, and what it sent
# after that point was never read back after a kill.) The lock folder is the user's, not
# the cache's (/run/user/UID/ctape-streams, else /tmp/ctape-streams-UID; `is_live` looks in
# both): a process with another cache folder (CTAPE_CACHE_DIR, an agent's `cache_dir=`)
# took the stream for dead when it was in the cache (found by an audit of mixed versions). A stream
# written on another machine, by another user, or by a ctape before 2026-12-05 has no lock
# here: taken for dead, as before.

_held: dict[tuple[str, str], int] = {}  # (tape id, stream id) -> the descriptor holding its lock, in this process


def _lock_path(store, stream: str) -> Optional[str]:
    """Where this process holds a stream's lock: the first private lock folder of the user's
    (`_lock_folders`), else the cache folder (as before 2026-12-07)."""
    folders = _lock_folders(make=True)
    if not folders:
        return _cache_lock(store, stream)
    return os.path.join(folders[0], f"{store.tape_id}-{stream}.lock")


def _cache_lock(store, stream: str) -> Optional[str]:
    from ..store.localstate import cache_folder

    folder = cache_folder(store)
    return os.path.join(folder, "streams", f"{stream}.lock") if folder else None


def _lock_folders(make: bool) -> list[str]:
    """The user's private lock folders on this machine, in the order a writer picks one:
    `/run/user/UID/ctape-streams`, then `/tmp/ctape-streams-UID`. Fixed paths, never from
    the environment: a process with another XDG_RUNTIME_DIR or TMPDIR (cron, ssh, a
    systemd service) looked elsewhere, and took a live stream for dead (found in review).
    A folder another user made, or anything else standing there, is not one (taken over,
    it could fake a live stream); with `make`, the folders are made where missing."""
    uid = os.getuid()
    out = []
    for base, name in ((f"/run/user/{uid}", "ctape-streams"), ("/tmp", f"ctape-streams-{uid}")):
        path = os.path.join(base, name)
        if make:
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            except OSError:
                continue  # no such base (no login session: no /run/user/UID), or not writable
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o077:
            out.append(path)
    return out


def _hold(store, stream: str) -> None:
    path = _lock_path(store, stream)
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return  # no cache to write: others take the stream for a dead writer's, as before
    fcntl.flock(fd, fcntl.LOCK_EX)
    _held[store.tape_id, stream] = fd


def _let_go(store, stream: str) -> None:
    fd = _held.pop((store.tape_id, stream), None)
    if fd is None:
        return
    path = _lock_path(store, stream)
    try:
        if path:
            os.unlink(path)
    except OSError:
        pass
    os.close(fd)


def is_live(store, stream: str) -> bool:
    """Does a writer of this machine still write this stream (its lock is held)? Looked for
    in every lock folder of the user's (a writer without /run/user/UID holds it in /tmp),
    and in the cache folder, where versions before 2026-12-07 did (one of those may still be
    streaming on this machine)."""
    if (store.tape_id, stream) in _held:
        return True
    places = [os.path.join(f, f"{store.tape_id}-{stream}.lock") for f in _lock_folders(make=False)] + [_cache_lock(store, stream)]
    return any(_held_elsewhere(p) for p in places if p)


def _held_elsewhere(path: str) -> bool:
    """Is the lock at `path` held (by another process, or another descriptor)? A free one is
    a dead writer's, and removed."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False  # no lock: its writer ended, died before this was kept, or wrote elsewhere
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    try:
        os.unlink(path)  # a dead writer's: nothing holds it any more
    except OSError:
        pass
    return False


def _forget_held_in_child() -> None:
    # a forked child does not write its parent's streams: its copy of the descriptor would
    # keep the lock after the parent died
    for fd in _held.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_forget_held_in_child)


def stream_limit() -> int:
    # the limit of one record, as every reader of outside input applies it (lazy: formats sit
    # above streams; the constant belongs further down, see docs/import.md)
    from ..model.canonical import max_record

    return max_record()


class StreamWriter:
    def __init__(self, session: "Session", flush_interval: float = 0.5, limit: Optional[int] = None):
        self.session = session
        self.limit = stream_limit() if limit is None else limit
        self.bytes = 0  # the text so far as a record holds it (UTF-8 JSON, escapes included)
        if isinstance(flush_interval, bool) or not isinstance(flush_interval, (int, float)) or not 0 < flush_interval < 86400:
            # 0, negatives and NaN made the flush thread spin a core; a string or None killed it
            raise InvalidInput(f"flush_interval must be a number of seconds above 0 (e.g. 0.5), not {brief(flush_interval, 40)}")
        self.interval = flush_interval
        self.id = secrets.token_hex(8)
        self.base: Optional[str] = None
        self.branch: Optional[str] = None
        self.text: list[str] = []
        self.flushed = 0  # characters persisted
        self._chunks = 0  # chunks of self.text persisted
        self.size = 0
        self.half = ""  # the first half of a surrogate pair a chunk ended with (_whole_characters)
        self.entry: Optional[Entry] = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = False
        self._cut = False  # the Tape was closed while it ran (cut_by_close)
        # the last flush of the ticker failed with this (a full disk): it tries again at
        # every tick, and the end of the stream (an append) raises if the disk still fails
        self.flush_error: Optional[BaseException] = None

    def __enter__(self) -> "StreamWriter":
        # a stream is a write to the session: one a dead writer left open is recorded first
        # (as the next append would), so this one goes on after it, not beside it
        recover(self.session)
        refs = self.session.refs()
        self.base, self.branch = refs.head_hash, refs.branch
        _hold(self.session.store, self.id)  # live until __exit__ (or this process's death)
        self._thread = threading.Thread(target=self._ticker, name="ctape-stream-flush", daemon=True)
        self._thread.start()
        # known to the Tape once its ticker runs: a close() in another thread in between
        # found a thread it could not join ("cannot join thread before it is started", a
        # RuntimeError out of close(); found by an audit)
        self.session.tape._streams.add(self)
        return self

    def cut_by_close(self) -> None:
        """The Tape is closing while this stream runs: flush what arrived and let go of the
        lock, as a writer's death would (the text then waits for `recover` or the next
        write); later writes and the end raise. It held the lock until the process ended,
        so no other Tape could record the stream, and text written after was dropped
        silently (found by an audit)."""
        self._stop.set()
        if self._thread is not None and self._thread.ident is not None:
            self._thread.join()
        try:
            self.flush()
        finally:
            self._cut = True
            _let_go(self.session.store, self.id)

    def write(self, chunk: str) -> None:
        if not isinstance(chunk, str):
            raise NotText(f"stream chunks are str, not {type(chunk).__name__}; decode bytes first")
        if self._cut:
            raise InvalidInput(_CUT)
        if self._stop.is_set():  # its entry is written: text taken now went nowhere, silently (found by an audit)
            raise InvalidInput("this stream has ended (its entry is written); start another with s.stream()")
        with self._lock:
            chunk = self._whole_characters(chunk)
            n = _stored_size(chunk)
            if self.bytes + n > self.limit:
                kept = _prefix_within(chunk, self.limit - self.bytes)
                self.text.append(kept)
                self.size += len(kept)
                self.bytes += _stored_size(kept)
                raise StreamTooLong(
                    f"the stream passed {self.limit:,} bytes, the limit for one message; the text up to it "
                    f"({self.size:,} characters) was kept as a streaming entry (set CTAPE_MAX_RECORD to allow more)"
                )
            self.text.append(chunk)
            self.size += len(chunk)
            self.bytes += n

    def _whole_characters(self, chunk: str) -> str:
        """The chunk as whole characters: a surrogate pair split between two chunks (text
        cut by UTF-16 code units, as JavaScript's strings are) is joined, its first half held
        back until the next chunk. Anything else that is not a character is refused here,
        where the caller can keep its text: taken, it failed in the flush thread (which died
        with a traceback, so nothing after it was kept) and at the end. Called under the lock."""
        half, self.half = self.half, ""  # a refused chunk drops it: the stream goes on
        if half and not "\udc00" <= chunk[:1] <= "\udfff":
            raise InvalidInput("the last stream chunk ended with the first half of a surrogate pair and this one does not "
                               "begin with the second; the half was dropped and this chunk was not taken (write it again)")
        text = half + chunk
        if "\ud800" <= text[-1:] <= "\udbff":
            text, held = text[:-1], text[-1]
        else:
            held = ""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            try:  # pairs as two code units (e.g. the two halves joined above) become their character
                text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
            except UnicodeDecodeError:
                raise InvalidInput("stream chunk is not valid Unicode (a lone surrogate: text cut inside a character?); "
                                   "send whole characters, e.g. decode bytes with an incremental UTF-8 decoder") from None
        self.half = held
        return text

    def drop_unflushed(self) -> bool:
        """Forget the text received, if none of it is on disk yet (the stream then ends as if
        it never began); False when a flush already persisted part of it."""
        with self._lock:
            if self.flushed:
                return False
            self.text, self._chunks, self.size, self.bytes = [], 0, 0, 0
            return True

    def _ticker(self) -> None:
        while not self._stop.wait(self.interval / 2):
            try:
                done = self.flush(wait=False)
            except Exception as err:  # noqa: BLE001 - a full disk, an I/O error: tried again at the next tick
                # a failed flush leaves nothing half written (the writer cuts its file back)
                # and the text where it was, so the next tick sends it again; the thread
                # dying here kept every later chunk in memory only, lost to a kill -9
                self.flush_error = err
            else:
                if done:  # (not a tick skipped while another thread held the Tape)
                    self.flush_error = None

    def flush(self, wait: bool = True) -> bool:
        """Persist what has arrived since the last flush (one fsync). The Tape's lock is taken
        before the stream's, as writes take it: `wait=False` (the ticker) skips the flush while
        another thread holds the Tape (False: skipped), and the next tick tries again. A stream inside
        `tape.batch()` is flushed by nothing but its end then, which is what a batch promises
        (nothing in it is durable before its end); the ticker waiting there, with the stream's
        lock held, hung the writer and the batch for good."""
        tape_lock = self.session.store._lock
        if not tape_lock.acquire(blocking=wait):
            return False
        try:
            with self._lock:
                if self.size == self.flushed:
                    return True
                t = now_rfc3339()
                with self.session.store.writing(self.session.name) as w:
                    if self.flushed and self.session.store.index.stream_closed(self.session.name, self.id):
                        self._go_on_as_new()
                    new = "".join(self.text[self._chunks :])  # only what came since the last flush
                    for at in range(0, len(new), PIECE):  # a fast stream: several records, one fsync
                        piece = new[at : at + PIECE]
                        w.put_partial({"s": self.session.name, "stream": self.id, "off": self.flushed + at, "text": piece, "base": self.base, "t": t})
                self.text[self._chunks :] = [new]
                self._chunks = len(self.text)
                self.flushed = self.size
                return True
        finally:
            tape_lock.release()

    def _go_on_as_new(self) -> None:
        """Another copy recorded this stream as interrupted (its writer runs on another
        machine, whose lock that copy cannot see), and the record came here (rsync, pull):
        a stream is closed for good once a record names it, so what this writer flushes
        after would be read by nothing, and lost to a kill. It goes on as a new stream
        instead, from its first character (the text the other copy recorded was a prefix):
        a kill then leaves the whole text for `recover`, and a normal end appends it."""
        old, self.id = self.id, secrets.token_hex(8)
        _hold(self.session.store, self.id)
        _let_go(self.session.store, old)
        self.text = ["".join(self.text)]
        self._chunks, self.flushed = 0, 0

    def content(self) -> str:
        with self._lock:
            return "".join(self.text)

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.session.tape._streams.discard(self)
        if self._cut:
            if exc_type is None:
                raise InvalidInput(_CUT)
            return  # the block's own exception says more
        try:
            if exc_type is None:
                text = self.content()
                self.entry = self.session.append("assistant", {"content": text}, op="stream", record_extra={"stream": self.id})
            elif self.size:
                self.flush()
                with self._lock:
                    self.text = []  # persisted: recover reads it back (one copy in memory, not two)
                    self._chunks = 0
                _let_go(self.session.store, self.id)  # (so that recover records it now)
                recover(self.session)
        finally:
            _let_go(self.session.store, self.id)


_CUT = ("this stream's Tape was closed before the stream ended: the text it had received was kept as an interrupted "
        "stream (open the tape again: `recover()` or the next write records it); start another stream there")


def _stored_size(text: str) -> int:
    """The bytes `text` takes as a JSON string in a record (escapes included: a NUL is six)."""
    return len(_JSON.encode(text).encode("utf-8", "surrogatepass")) - 2


def _prefix_within(text: str, most: int) -> str:
    """The longest start of `text` whose _stored_size is at most `most`."""
    lo, hi = 0, len(text)  # text[:lo] fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _stored_size(text[:mid]) <= most:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def _open_streams(session: "Session") -> dict[str, dict]:
    streams: dict[str, dict] = {}
    for p in session.store.index.open_partials(session.name):
        s = streams.setdefault(p["stream"], {"stream": p["stream"], "base": p.get("base"), "parts": {}, "time": p.get("t")})
        s["parts"][p["off"]] = p["text"]
        s["time"] = max(s["time"] or "", p.get("t") or "") or None
    for s in streams.values():
        text, pos = [], 0
        for off in sorted(s["parts"]):
            piece = s["parts"][off]
            if off > pos:
                break  # a gap: keep the prefix we can prove
            text.append(piece[pos - off :])
            pos = max(pos, off + len(piece))
        s["content"] = "".join(text)
        del s["parts"]
    return streams


def open_streams(session: "Session") -> list[dict]:
    """The open streams, each with `live`: its writer still runs on this machine (`is_live`;
    the next write records only the others)."""
    streams = session.store.settled(session.name, lambda: _open_streams(session))
    for s in streams.values():
        s["live"] = is_live(session.store, s["stream"])
    return sorted(streams.values(), key=lambda s: (s["time"] or "", s["stream"]))


def record_partials(session: "Session", w: "SegmentWriter", skip: Optional[str] = None) -> list[Entry]:
    """Inside a held session lock: record every open stream (but `skip`) as one `streaming` entry."""
    out = []
    # from a settled index (Store.settled): a rebuild in another process from an older
    # listing drops the rows of a stream's end, and the stream looked open
    streams = session.store.settled(session.name, lambda: _open_streams(session))
    for s in sorted(streams.values(), key=lambda s: (s["time"] or "", s["stream"])):
        if s["stream"] == skip or is_live(session.store, s["stream"]):
            continue
        st = session._writer_refs(w)
        base = s["base"]
        e = session._put_entry(w, "streaming", {"content": s["content"]}, {}, None, s["time"], base)
        if st.head_hash == base and not st.head_missing:
            session._write_ref(w, "recover", session._advance(st, e.hash), stream=s["stream"])
        else:
            session._write_ref(w, "recover", {f"stream-{s['stream'][:8]}": e.hash}, stream=s["stream"])
        out.append(e)
    return out


def recover(session: "Session") -> list[Entry]:
    if not session.exists():
        return []
    with session.store.writing(session.name) as w:
        w.partials_checked = True
        return record_partials(session, w)



class StreamInterrupted(Exception):
    def __init__(self, signum: int):
        self.signum = signum


def run_cli_stream(session: "Session", interval: float) -> Optional[Entry]:
    """`ctape stream`: stdin as it arrives; SIGTERM/SIGINT record the partial text at once."""
    import codecs
    import os
    import signal

    from ..model.errors import CtapeError, InvalidInput

    def on_signal(signum, frame):
        raise StreamInterrupted(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    writer = StreamWriter(session, interval)
    try:
        with writer:
            while True:
                chunk = os.read(0, 65536)
                try:
                    writer.write(decoder.decode(chunk, final=not chunk))
                except UnicodeDecodeError as e:
                    # Bad input changes nothing (SPEC 12) while nothing of the stream is on
                    # disk yet: a file piped in whole is refused whole. Once a flush has
                    # persisted part of it, a live stream was cut off: what it sent before the
                    # bad byte (of this read too) is kept, as a kill would have kept it.
                    n = writer.size + len(e.object[: e.start].decode("utf-8"))
                    if writer.drop_unflushed():
                        at = f"at character {n + 1:,}" if n else "from its first byte"
                        raise InvalidInput(f"stdin is not valid UTF-8 {at}; nothing was recorded: convert it to UTF-8 first") from None
                    writer.write(e.object[: e.start].decode("utf-8"))
                    n = f"{writer.size:,} character" + ("s" if writer.size > 1 else "")
                    raise InvalidInput(f"stdin is not valid UTF-8 after {n}; the text before the bad byte was kept as a streaming entry, "
                                       f"since part of it was already on disk") from None
                if not chunk:
                    if not writer.size and writer.drop_unflushed():
                        # (as `append` with nothing on stdin: a producer that failed before
                        # its first byte left an empty assistant entry; found by an audit)
                        raise InvalidInput("nothing arrived on stdin, so nothing was recorded (did the program piped in fail?); "
                                           "`ctape append assistant --text ''` records an empty message")
                    break
    except StreamInterrupted as e:
        kept = "the partial text was recorded as a streaming entry" if writer.size else "no text had arrived, so nothing was recorded"
        err = CtapeError(f"stream interrupted by signal {e.signum}; {kept}")
        err.exit_code = 128 + e.signum
        raise err from None
    return writer.entry
