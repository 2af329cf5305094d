"""One pass of `ctape watch`: import what was appended to each source since the last pass.

For each source file the pass decides, from its position (see position.py):

- nothing new: same device, inode, size and mtime as when the position was written, and
  the tape still holds the last entry imported (it is not an older copy of the tape);
- appended: same device and inode, at least as long, and the bytes at the start and just
  before the position unchanged: the lines after the position are imported, continuing
  the chain (Codex) or the thread layout (Claude Code) where the last pass left it;
- anything else (rewritten, shortened, replaced, renamed to `.zst`, or no position this
  process can continue from): the whole file is imported again into the same session.
  Content addressing makes the repeated part free.

Refs move as `ctape import` moves them (formats/_common.safe_refs): never removed or
rewound. A branch the file's tip extends moves forward; one ahead of it (the file got
shorter) stays; one that went another way (the file was rewritten, or another file holds
the same session) stays too, and the file's version goes to `BRANCH-imported`, unless the
entry it names stays on another branch of the file's. One line says so.

Only complete lines (ending in a newline) are read. A line that is not JSON is left for
the next pass while nothing valid follows it (a tool may still be writing it); once a
valid line follows, it is imported as a raw hidden record (export gives it back as it
was) and reported once.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import deque
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from blake3 import blake3

from ..errors import ConflictError, CtapeError, InvalidInput
from ..formats import _common as c
from ..model.refs import HEAD
from . import sources as src_mod
from .position import Cache, Position, latest_in_tape, load_layout, save_layout
from .sources import ID_BYTES, Source, digest

LINE_FORMATS = ("codex", "claude-code", "gemini")  # read line by line as they grow; the others whole

BATCH_BYTES = 64 << 20  # source bytes imported per batch (one fsync per batch)
# sessions written per batch: a batch holds each one's lock and descriptors until it ends, so
# a first pass over hundreds of small transcripts would run out of them (`ulimit -n`); ending
# the batch sooner costs no sync (a batch syncs each session's file anyway)
BATCH_SESSIONS = 16
VERIFY_ALL = 64 << 20  # a prefix up to this size is read again and compared whenever its file changed
VERIFY_EVERY = 60.0  # seconds: a running watcher compares a larger prefix whole this often (else its ends)
CACHE_EVERY = 10.0  # seconds: a following watcher rewrites its cache file at most this often
PROGRESS_BYTES = 64 << 20  # a progress line when a pass has more than this to read
QUEUE_MAX = 16 << 20  # codex: bytes of lines held at most while an event's run is open


@dataclass
class Live:
    """What a running watcher keeps of a source between passes (beyond its position)."""

    pos: Position
    builder: object = None  # claude-code: the thread layout so far
    orphans: set = field(default_factory=set)
    agent: Optional[str] = None
    used: float = 0.0  # time.monotonic() of the last pass that imported from it
    hasher: object = None  # the digest of the bytes before pos.off, to go on with (blake3)
    verified: float = 0.0  # time.monotonic() when the file's bytes before pos.off were last read and compared
    voices: object = None  # codex: the runs of messages as they stand at pos (codex.Voices)
    instructions: Optional[str] = None  # codex: the entry of the instructions before pos (codex.put_line)


@dataclass
class PassReport:
    files: int = 0  # sources looked at
    changed: int = 0  # sources with something imported
    records: int = 0  # records imported that the tape did not hold
    bytes: int = 0  # source bytes read
    errors: list = field(default_factory=list)


def _zstd_error() -> type:
    from ..store.files import zstd

    return zstd().ZstdError


def _said(e: BaseException) -> str:
    """A source's problem as watch reports it (one line; the other files go on)."""
    if isinstance(e, RecursionError):
        return "holds JSON nested too deeply to read; skipped"
    if isinstance(e, _zstd_error()):
        return f"not a zstd file, or a damaged one ({e}); skipped"
    return str(e)


class NotATranscript(InvalidInput):
    def __init__(self):
        super().__init__("not a transcript ctape knows (Claude Code, Codex, Gemini CLI, OpenAI-style, ctape jsonl); skipped")


class _Stopped(Exception):
    """Asked to stop inside a large file (Claude Code): its batches so far are written,
    `records` of them new to the tape."""

    records = 0


class _Line:
    """A complete line read in this pass."""

    __slots__ = ("number", "offset", "raw", "value", "ok", "pre")

    def __init__(self, number: int, offset: int, raw: bytes, pre: bytes = b""):
        self.number, self.offset, self.raw, self.pre = number, offset, raw, pre  # pre: blank lines before it
        try:
            self.value, self.ok = c.loads(raw), True
        except (ValueError, UnicodeDecodeError):
            self.value, self.ok = None, False

    @property
    def body(self) -> bytes:
        """The line without its end, as the importers keep a line that is not JSON (its
        bytes: one that is not UTF-8 either is kept whole, never decoded with losses)."""
        return self.raw.rstrip(b"\r\n")

    @property
    def end(self) -> int:
        return self.offset + len(self.raw)


def complete_lines(stream, offset: int, line: int, limit: int = src_mod.CHUNK):
    """Lists of the non-blank complete lines after `offset`, about `limit` bytes at a time;
    blank lines are counted but not returned. A line still without its end after
    c.max_record() bytes is refused (InvalidInput): the buffer never holds more than that
    and one read."""
    most = c.max_record()
    buf = bytearray()
    base, n = offset, line
    pre = b""
    while True:
        chunk = stream.read(limit)
        if not chunk:
            return
        buf += chunk
        out, start = [], 0
        while True:
            i = buf.find(b"\n", start)
            if i < 0:
                break
            n += 1
            raw = bytes(buf[start : i + 1])
            if len(raw) - 1 > most:
                raise _too_long(n, most)
            if raw.strip():
                out.append(_Line(n, base + start, raw, pre))
                pre = b""
            else:
                pre += raw
            start = i + 1
        del buf[:start]
        base += start
        if len(buf) > most:
            raise _too_long(n + 1, most)
        if out:
            yield out


def _too_long(number: int, most: int) -> InvalidInput:
    return InvalidInput(
        f"line {number} is longer than {most:,} bytes, the limit for one record (docs/import.md); "
        "the file is skipped (set CTAPE_MAX_RECORD to allow longer records)"
    )


class Watcher:
    """Imports transcripts as they grow. `run_pass()` makes one pass; the caller loops."""

    def __init__(self, tape, paths: Optional[list[str]] = None, roots=None, echo: Callable[[str], None] = lambda s: None, progress: bool = False, warn: Optional[Callable[[str], None]] = None, keep: bool = True):
        self.tape = tape
        self.paths = list(paths or [])
        self.roots = roots
        self.keep = keep  # keep layouts in memory between passes (follow); else save them at each batch
        self.echo = echo  # what was imported
        self.warn = warn or echo  # problems: errors, lines kept raw
        self.progress = progress
        self.cache = Cache(tape)
        self.live: dict[str, Live] = {}
        self.stop = False  # set by a signal handler: finish the current batch, then return
        # splits a large pass over processes (ctape/watch/parallel.py's run, passed in by
        # ctape.watch: that module builds on this one); None when the pass is too small
        self.split: Optional[Callable[["Watcher", list, int], Optional[PassReport]]] = None
        self.reported: set = set()
        self._stack: Optional[ExitStack] = None
        self._batch_bytes = 0
        self._touched: list[Position] = []
        self._said: list[str] = []  # what the batch imported, said once its fsync is done
        self.retry: set[str] = set()  # sources of a batch that met another one (ConflictError): in the next pass
        self._layouts: dict[str, Live] = {}  # claude-code layouts to save in the cache
        self._cache_saved = 0.0

    # -- passes --------------------------------------------------------------------------

    def sources(self) -> list[Source]:
        return src_mod.discover(self.paths, self.roots)

    def should_stop(self) -> bool:
        return self.stop

    def run_pass(self, only: Optional[set] = None, jobs: int = 1, sources: Optional[list[Source]] = None) -> PassReport:
        """One pass over every source (or the keys in `only`, or the `sources` given); with
        `jobs` > 1 a large pass is split over that many processes."""
        rep = PassReport()
        if only is not None and self.retry:
            only = set(only) | self.retry
        self.retry = set()
        todo = sources if sources is not None else [s for s in self.sources() if only is None or s.key in only]
        if only is None and sources is None:
            self._prune({s.key for s in todo})
        if jobs > 1 and len(todo) > 1 and self.split is not None:
            split = self.split(self, todo, jobs)
            if split is not None:
                return split
        total = self._todo_bytes(todo) if self.progress else 0
        shown = total > PROGRESS_BYTES
        s = None
        try:
            for s in todo:
                if self.should_stop():
                    break
                rep.files += 1
                if self._stack is None:
                    self._begin()
                self._one(s, rep)
                if shown:
                    sys.stderr.write(f"\rwatch: {rep.files}/{len(todo)} files, {rep.bytes >> 20}/{total >> 20} MB")
                    sys.stderr.flush()
                if self._batch_full():
                    self._commit()
            self._commit()
        except BaseException as e:
            touched = [p.key for p in self._touched]
            if self._stack is not None:  # nothing of this batch is written
                stack, self._stack, self._touched, self._said = self._stack, None, [], []
                stack.__exit__(type(e), e, e.__traceback__)  # (after a ConflictError: once the other batch ended)
            if not isinstance(e, ConflictError):
                raise
            # another batch writes the same sessions in another order: this one gave way
            # (Store.batch). Its files start again from the tape's position, in the next pass
            for key in touched + ([s.key] if s is not None else []):
                self._forget(key)
                self.retry.add(key)
            msg = f"watch: {e}"
            rep.errors.append(msg)
            self.warn(msg)
        finally:
            if shown:
                sys.stderr.write("\r" + " " * 60 + "\r")
                sys.stderr.flush()
        return rep

    def _one(self, s: Source, rep: PassReport) -> None:
        try:
            n, read = self._source(s)
        except _Stopped as e:
            # asked to stop inside a large file: its batches so far are written; the next pass
            # goes on from its position (a Claude Code layout cut in the middle is not kept)
            self.live.pop(s.key, None)
            self._layouts.pop(s.key, None)
            rep.records += e.records
            rep.changed += e.records > 0
            n = f"+{e.records} record{'s' if e.records != 1 else ''}, " if e.records else ""
            self.echo(f"watch: {s.path}: {n}stopped after a batch; the next pass imports the rest")
            return
        except ConflictError:
            raise  # the batch gives way to another (run_pass): not this file's problem
        except (CtapeError, OSError, ValueError, RecursionError, _zstd_error()) as e:
            self._forget(s.key)  # its next pass starts from the tape's position
            text = _said(e)
            if text.startswith(f"{s.path}: "):  # the importers name the file too
                text = text[len(s.path) + 2 :]
            msg = f"watch: {s.path}: {text}"
            rep.errors.append(msg)
            if (s.key, str(e)) not in self.reported:
                self.reported.add((s.key, str(e)))
                self.warn(msg)
            return
        rep.records += n
        rep.changed += n > 0
        rep.bytes += read
        p = self._known(s.key)
        if n and p is not None and p.fmt in LINE_FORMATS:  # (a whole file's import says its own line)
            where = f" into session {p.session}" if p.session else ""
            self._said.append(f"watch: +{n} record{'s' if n != 1 else ''} from {s.path}{where}")

    def _todo_bytes(self, todo) -> int:
        total = 0
        for s in todo:
            try:
                size = os.stat(s.path).st_size
            except OSError:
                continue
            p = self._known(s.key)
            total += size - (p.off if p and p.path == s.path and not s.zst else 0)
        return max(0, total)

    # -- batches -------------------------------------------------------------------------

    def _begin(self) -> None:
        self._stack = ExitStack()
        self._stack.enter_context(self.tape.batch())
        self._batch_bytes = 0

    def _batch_full(self) -> bool:
        return self._batch_bytes >= BATCH_BYTES or len(self.tape.store.locked_writers) >= BATCH_SESSIONS

    def _commit(self) -> None:
        """End the batch (its one fsync), then keep the positions it wrote in the cache."""
        if self._stack is None:
            return
        stack, self._stack = self._stack, None
        said, self._said = self._said, []
        stack.close()
        for line in said:  # written and synced: only now is it true
            self.echo(line)
        touched, self._touched = self._touched, []
        for p in touched:
            self.cache.put(p)
        if not self.keep or time.monotonic() - self._cache_saved > CACHE_EVERY:
            self.save_cache()
        if not self.keep:  # one pass (--once): memory stays bounded by the batch
            self.save_layouts()
            self.live.clear()

    def save_cache(self) -> None:
        self.cache.save()
        self._cache_saved = time.monotonic()

    def _prune(self, present: set) -> None:
        """Forget the cached positions of files that are gone (the tape keeps their records)."""
        for key, p in list(self.cache.positions.items()):
            if key not in present and not os.path.exists(p.path):
                self.cache.drop(key)

    def save_layouts(self, idle: Optional[float] = None) -> None:
        """Keep the Claude Code layouts of the sources that changed, for the next process;
        with `idle`, forget those not imported from for that many seconds (they are read
        back from the cache when their file grows again)."""
        layouts, self._layouts = self._layouts, {}
        for live in layouts.values():
            save_layout(self.cache, live.pos, live.builder, live.orphans, live.agent)
        if idle is not None:
            now = time.monotonic()
            for key in [k for k, v in self.live.items() if now - v.used > idle and k not in self._layouts]:
                del self.live[key]

    def _checkpoint(self, pos: Optional[Position] = None) -> bool:
        """Mid-file: end the batch when it is large, and start the next. When asked to stop
        (SIGINT/SIGTERM), end it and start none: True, and the caller returns at once
        (`pos`: where the file is imported up to, kept in the cache with the batch; its
        stat is not, so the next pass never takes the file for unchanged)."""
        if not self._batch_full():
            return False
        if self.should_stop():
            if pos is not None:
                self._touched.append(replace(pos, size=-1, mtime=-1))
            self._commit()
            return True
        self._commit()
        self._begin()
        return False

    # -- positions -----------------------------------------------------------------------

    def _known(self, key: str) -> Optional[Position]:
        live = self.live.get(key)
        return live.pos if live else self.cache.get(key)

    def _forget(self, key: str) -> None:
        self.live.pop(key, None)
        self.cache.drop(key)

    def _intact(self, pos: Position) -> bool:
        """The tape still holds the last entry this position imported (it is not an older
        copy of the tape, from before that import)."""
        if pos.session is None:
            return True
        if pos.tip is None:
            return False
        if self.tape.has_entry(pos.tip):
            return True
        self.tape.store.refresh(pos.session)  # the index may not have read the session's files yet
        return self.tape.has_entry(pos.tip)

    def _done(self, pos: Position, st: os.stat_result, live: Optional[Live]) -> None:
        pos.dev, pos.ino, pos.size, pos.mtime = st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
        if live is not None:
            live.used = time.monotonic()
            self.live[pos.key] = live
            if live.builder is not None:
                self._layouts[pos.key] = live
        self._touched.append(pos)

    # -- one source ----------------------------------------------------------------------

    def _source(self, s: Source) -> tuple[int, int]:
        """Import what is new in one source: (records imported, bytes read)."""
        try:
            st = os.stat(s.path)
        except FileNotFoundError:
            return 0, 0
        src_mod.check_regular(st)  # a FIFO is never opened: it would wait for a writer
        pos = self._known(s.key)
        if pos is not None and pos.path == s.path and pos.matches_stat(st) and self._intact(pos):
            return 0, 0
        with ExitStack() as stack:
            # the same file, grown (its bytes up to the position are the ones imported): its
            # format is the position's; anything else may now hold another format
            at = self._resume(s, st, pos)
            if at is not None:
                stack.callback(at.f.close)
            fmt = s.fmt or (pos.fmt if at is not None else None)
            if fmt is None:
                fmt = self._detect(s)
                if fmt is None:
                    return 0, 0  # nothing to tell the format by yet
            if at is not None and fmt != pos.fmt:
                at = None
            if fmt == "codex":
                return self._codex(s, st, pos, at)
            if fmt == "claude-code":
                return self._claude(s, st, pos, at)
            if fmt == "gemini":
                return self._gemini(s, st, pos, at)
            return self._whole(s, st, fmt)

    def _detect(self, s: Source) -> Optional[str]:
        """The format of a source from its first complete lines; None while they cannot tell
        (none yet, one being written, or only lines that are no JSON so far). A file found
        in a folder that is no transcript is passed over in silence (a folder holds other
        files too); one named on the command line is refused (NotATranscript), as `ctape
        import` refuses it, once its lines tell (sources.judged)."""
        lines = src_mod.head_of(s.path, 1 << 20).split(b"\n")
        if len(lines) > 1 or not lines[0].lstrip()[:1] in (b"{", b"["):
            lines.pop()  # the line being written: its format waits for its newline
        # (a file of one line with no newline may be a whole JSON document, as
        # `json.dump(obj, f)` writes it: a `.traj`, a list of messages; judged as import does)
        try:
            fmt = src_mod.detect(lines, s.path)
        except InvalidInput:  # a JSON document that is no transcript
            if s.named:
                raise NotATranscript() from None
            return None
        if fmt is None and s.named and src_mod.judged(lines):
            raise NotATranscript()  # (lines that cannot tell yet, a first line cut or garbage, wait for more)
        return fmt

    def _continuable(self, s: Source, st: os.stat_result, pos: Optional[Position]) -> bool:
        """What the stat and the tape say: the same file, not shorter, not written to without
        growing, and the tape holds what the position imported."""
        return (
            pos is not None
            and pos.path == s.path
            and (pos.dev, pos.ino) == (st.st_dev, st.st_ino)
            and (s.zst or st.st_size >= pos.off)
            and not _rewritten_in_place(pos, st)
            and self._intact(pos)
        )

    def _resume(self, s: Source, st: os.stat_result, pos: Optional[Position]) -> Optional["_At"]:
        """The file's content positioned at pos.off, when its first pos.off bytes are the ones
        imported (the digest of the whole prefix, `ph`); None otherwise (rewritten anywhere,
        replaced, or a position from before prefix digests: the file is read whole again).

        A running watcher that verified a prefix of more than VERIFY_ALL bytes less than
        VERIFY_EVERY seconds ago compares the first and last 4 KiB only, and goes on with the
        digest it keeps in memory: a 1 GB transcript written to every second does not cost
        a read of 1 GB a second. Its next full check finds any change made meanwhile."""
        if not self._continuable(s, st, pos):
            return None
        if pos.off == 0:
            return _At(src_mod.open_stream(s.path), blake3(), True)
        if not pos.ph:
            return None
        live = self.live.get(s.key)
        quick = (
            live is not None and live.pos is pos and live.hasher is not None
            and pos.off > VERIFY_ALL and time.monotonic() - live.verified < VERIFY_EVERY
        )
        f = src_mod.open_stream(s.path)
        try:
            if quick:
                if _ends_match(f, pos):
                    return _At(f, live.hasher.copy(), False)
                f.close()
                return None
            h = blake3()
            n = 0
            while n < pos.off:
                b = f.read(min(src_mod.CHUNK, pos.off - n))
                if not b:
                    break
                h.update(b)
                n += len(b)
            if n != pos.off or h.hexdigest()[:32] != pos.ph:
                f.close()
                return None
            return _At(f, h, True)
        except BaseException:
            f.close()
            raise

    def _is_new(self, h: str) -> bool:
        """Entry h was written by this batch (the tape did not hold it)."""
        return h in self.tape.store.pending

    # -- codex: a chain in file order ------------------------------------------------------

    def _codex(self, s: Source, st: os.stat_result, pos: Optional[Position], at: Optional["_At"]) -> tuple[int, int]:
        from ..formats import codex

        if at is None:
            # no position this process can continue from: the tape's newest one for this source
            name = pos.session if pos is not None and pos.session else self._codex_session(s)
            found = latest_in_tape(self.tape.session(name), s.key) if name else None
            if found is not None:
                at = self._resume(s, st, found)
                if at is not None:
                    pos = found
        if at is not None and (pos.time in (None, c.EPOCH) or (pos.off and not pos.tip)):
            at.f.close()
            at = None
        full = at is None
        if full:
            f, h, verified = src_mod.open_stream(s.path), blake3(), True
            pos = Position(key=s.key, path=s.path, fmt="codex", dev=st.st_dev, ino=st.st_ino)
        else:
            f, h, verified = at.f, at.hasher, at.verified
        # which user and agent events are the only record of their message (codex.Voices):
        # the runs as they stand at the position, kept by a running watcher, else read again
        live = self.live.get(s.key)
        instructions = None  # the entry of Codex's instructions so far (a compacted line keeps it)
        if full:
            voices = codex.Voices()
        elif live is not None and live.pos is pos and live.voices is not None:
            voices, instructions = live.voices, live.instructions
        else:
            voices, instructions = self._codex_voices(s, pos), codex.UNKNOWN
        quiet = [0, 0] if full else pos.quiet  # where no message run was open, at the last look
        count = read = 0
        with f:
            parent, clock, session = pos.tip, c.Clock(pos.time), None
            recent, pending, queue, queued = b"", [], deque(), 0

            def put(ln, spoken: bool) -> None:
                nonlocal parent, count, read, recent, pending, instructions
                if not ln.ok:
                    pending.append(ln)
                    return
                for bad in pending:
                    parent, instructions = codex.put_line(session, bad.number, bad.body, False, parent, clock, instructions=instructions)
                    count += self._is_new(parent)
                    h.update(bad.pre + bad.raw)
                    self._report_raw(s, bad)
                pending = []
                parent, instructions = codex.put_line(session, ln.number, ln.value, True, parent, clock, spoken, instructions)
                count += self._is_new(parent)
                h.update(ln.pre + ln.raw)
                read += ln.end - pos.off
                self._batch_bytes += ln.end - pos.off
                recent = (recent + ln.pre + ln.raw)[-ID_BYTES:]
                pos.off, pos.line = ln.end, ln.number

            def put_waiting() -> None:
                """The lines held for open runs, their events decided with what is known
                (codex.Voices.voiced_so_far)."""
                so_far = voices.voiced_so_far()
                while queue:
                    ln = queue.popleft()
                    put(ln, ln.number in voices.voiced or ln.number in so_far)

            for chunk in complete_lines(f, pos.off, pos.line):
                if session is None:
                    if full:
                        pos.session = self._codex_session(s, chunk)
                        if pos.session is None:
                            return 0, 0  # no Codex record yet
                        first = next((t for t in (codex.record_time(ln.value) for ln in chunk if ln.ok) if t), None)
                        clock = c.Clock(first or c.undated_time(self.tape, self.tape.session(pos.session), s.path))
                    session = self.tape.session(pos.session)
                for ln in chunk:
                    if ln.ok:
                        cls = codex.classify(ln.value)
                        voices.add(ln.number, cls)
                        if cls is not None and cls[0] == "X":  # ends the runs of both sides
                            quiet = [ln.end, ln.number]
                    queue.append(ln)
                    queued += ln.end - ln.offset
                    # a line waits while an event before it (or itself) has an open run: its
                    # run's end (the other side's next record) tells whether it is voiced
                    while queue and queue[0].number not in voices.open:
                        ln = queue.popleft()
                        queued -= ln.end - ln.offset
                        put(ln, ln.number in voices.voiced)
                if queued > QUEUE_MAX:
                    # a run that does not end (no message or tool call for QUEUE_MAX bytes of
                    # other records): its events are decided with what is known, as at the end
                    put_waiting()
                    queued = 0
                if not queue:
                    pos.quiet = quiet
                    self._codex_moved(s, pos, session, parent, clock, recent, h)
                    if self._checkpoint(pos):
                        return count, read  # stopped: the next pass goes on from pos
            # the end of what the file holds now; the runs go on in the next pass
            put_waiting()
            if session is not None:
                pos.quiet = quiet
                self._codex_moved(s, pos, session, parent, clock, recent, h)
        voices.voiced = {n for n in voices.voiced if n > pos.line}  # those still to import
        voices.open -= {n for n in voices.open if n <= pos.line}  # decided, and imported
        if read or not full:
            self._done(pos, st, Live(pos, hasher=h.copy(), verified=time.monotonic() if verified else self._verified(s.key), voices=voices,
                                     instructions=instructions))
        return count, read

    def _codex_moved(self, s: Source, pos: Position, session, parent: Optional[str], clock, recent: bytes, h) -> None:
        """The file's lines are on the tape up to pos: move `main` there, with the position."""
        if parent == pos.tip:
            return
        pos.tip, pos.time = parent, clock.last
        self._seal(s, pos, recent, h)
        changes, notes = c.safe_refs(self.tape, session, {"main": pos.tip})
        session.set_refs("import", changes, source="codex", watch=pos.record())
        self._note(pos, notes)

    def _codex_voices(self, s: Source, pos: Position):
        """codex.Voices fed with the lines before pos (read again: a new process), from the
        last point before it where no run was open (pos.quiet; else the file's start)."""
        from ..formats import codex

        voices = codex.Voices()
        off, line = pos.quiet or (0, 0)
        with src_mod.open_stream(s.path) as f:
            src_mod.skip(f, off)
            lines = (ln for chunk in complete_lines(f, off, line) for ln in chunk)
            for ln in lines:
                if ln.end > pos.off:
                    break
                if ln.ok:
                    voices.add(ln.number, codex.classify(ln.value))
        voices.voiced.clear()
        voices.open.clear()  # imported already: only the runs matter from here
        return voices

    def _verified(self, key: str) -> float:
        live = self.live.get(key)
        return live.verified if live is not None else 0.0

    def _codex_session(self, s: Source, chunk: Optional[list] = None) -> Optional[str]:
        """The session a rollout goes to: its session_meta id (else the file name), as import names it."""
        from ..formats import codex

        if chunk is None:
            with src_mod.open_stream(s.path) as f:
                chunk = next(complete_lines(f, 0, 0, 1 << 20), [])
        if not any(ln.ok and codex.is_record(ln.value) for ln in chunk):
            return None
        sid = next((codex.session_id(ln.value) for ln in chunk if ln.ok and codex.session_id(ln.value)), None)
        return c.check_target(c.session_name(sid, s.key))

    def _seal(self, s: Source, pos: Position, recent: bytes, prefix) -> None:
        """The identity digests of a position that has just moved (`prefix`: the digest of
        every byte before it, kept as they were read)."""
        if pos.idn < ID_BYTES:
            pos.idn = min(ID_BYTES, pos.off)
            pos.idh = digest(src_mod.head_of(s.path, pos.idn))
        want = min(ID_BYTES, pos.off)
        pos.th = digest(recent[-want:] if len(recent) >= want else _tail_of(s, pos))
        pos.ph = prefix.hexdigest()[:32]

    # -- claude code: threads laid out by the importer's Builder ---------------------------------

    def _claude(self, s: Source, st: os.stat_result, pos: Optional[Position], at: Optional["_At"]) -> tuple[int, int]:
        from ..formats import claude_code

        live = self.live.get(s.key)
        grew = at is not None  # the file holds what the position imported, and more
        if grew and (live is None or live.pos is not pos or live.builder is None) and pos.session:
            got = load_layout(self.cache, pos, self.tape.session(pos.session))
            live = Live(pos, *got, verified=self._verified(s.key)) if got is not None else None
        if not grew or live is None or live.builder is None or not hasattr(at.f, "seek"):
            # a compressed file (the Builder reads lines again by offset), or no layout to continue
            return self._claude_full(s, st, pos, grew)
        live.hasher = at.hasher
        if at.verified:
            live.verified = time.monotonic()
        scan = _Scan(at.hasher)
        for chunk in complete_lines(at.f, pos.off, pos.line):
            scan.add(chunk)
        infos = scan.infos()
        if not infos:
            self._done(pos, st, live)
            return 0, 0
        if live.agent and any(i.message and not i.sidechain for i in infos):
            return self._claude_full(s, st, pos, grew)  # not a subagent file after all
        fresh = live.builder.fresh
        with self._checkpoints(live.builder, pos.off):
            if not claude_code.extend(live.builder, at.f, infos, live.orphans):
                return self._claude_full(s, st, pos, grew)
        for ln in scan.raw:
            self._report_raw(s, ln)
        read = scan.end - pos.off
        pos.off, pos.line = scan.end, scan.line
        self._seal(s, pos, scan.recent, at.hasher)
        self._set_claude_refs(live, pos, full=False, grew=True, mine=pos.refs, had=list(pos.branches))
        self._done(pos, st, live)
        return live.builder.fresh - fresh, read

    @contextmanager
    def _checkpoints(self, builder, base: int):
        """While the Builder lays out lines, end the batch every BATCH_BYTES of source (its
        entries are written, the position comes with the last batch): the writes of a
        1 GB transcript are not all held in memory until one fsync at the end."""
        bar, builder.bar = builder.bar, _Batches(self, base)
        builder.is_new = self._is_new
        fresh = builder.fresh
        try:
            yield
        except _Stopped as e:
            e.records = builder.fresh - fresh  # written by the batches ended before the stop
            raise
        finally:
            builder.bar = bar
            builder.is_new = None

    def _claude_full(self, s: Source, st: os.stat_result, old: Optional[Position], grew: bool = False) -> tuple[int, int]:
        """Import the whole file (again): a fresh layout, as `ctape import` makes it."""
        self.live.pop(s.key, None)
        # a compressed file is decompressed once, into a temporary file (bounded): its lines
        # are read from there, and the Builder reads them again there by offset
        data = _unpacked(s) if s.zst else None
        try:
            return self._claude_layout(s, st, old, data, grew)
        finally:
            if data is not None:
                data.close()

    def _claude_layout(self, s: Source, st: os.stat_result, old: Optional[Position], data, grew: bool) -> tuple[int, int]:
        from ..formats import claude_code

        scan = _Scan(blake3())
        with (src_mod.open_stream(s.path) if data is None else nullcontext(data)) as f:
            for chunk in complete_lines(f, 0, 0):
                scan.add(chunk)
        infos = scan.infos()
        if not any(i.message for i in infos):
            return 0, 0  # wait for the first message: it names the session
        agent = claude_code.is_subagent(infos)
        base = c.session_name(scan.sid, s.key)
        name = c.check_target(c.session_name(f"{base}-agent-{agent}", s.key) if agent else base)
        session = self.tape.session(name)
        if old is None or old.session != name:
            grew = False  # another session than the position's: nothing of it is this file's yet
            old = latest_in_tape(session, s.key) or (old if old and old.session == name else None)
        pos = Position(key=s.key, path=s.path, fmt="claude-code", session=name, dev=st.st_dev, ino=st.st_ino)
        live = Live(pos, claude_code.start_builder(session, scan.first_time or c.undated_time(self.tape, session, s.path)), set(), agent,
                    hasher=scan.hasher, verified=time.monotonic())
        fr = data if data is not None else src_mod.open_regular(s.path)
        with fr, self._checkpoints(live.builder, 0):
            claude_code.extend(live.builder, fr, infos, live.orphans)
        for ln in scan.raw:
            self._report_raw(s, ln)
        pos.off, pos.line = scan.end, scan.line
        self._seal(s, pos, scan.recent, scan.hasher)
        mine, had = (old.refs, list(old.branches)) if old is not None else (None, [])
        self._set_claude_refs(live, pos, full=True, old=old, grew=grew, mine=mine, had=had)
        self._done(pos, st, live if not s.zst else None)
        return live.builder.fresh, pos.off

    def _set_claude_refs(self, live: Live, pos: Position, full: bool, grew: bool, mine: Optional[dict], had: list,
                         old: Optional[Position] = None) -> bool:
        """Move the session's refs to the file's layout, with the position; False when a whole
        import found everything as it was (no record written)."""
        refs = live.builder.refs()
        session = self.tape.session(pos.session)
        changes, notes, now = self._claude_changes(session, refs, grew, mine, had)
        pos.branches = sorted(refs)
        pos.refs = {b: h for b, h in refs.items() if now.get(b) == h}
        pos.tip = live.builder.last.tip
        if full and not changes and old is not None and old.record() == pos.record():
            return False  # imported again, found as it was: no record to write
        session.set_refs("import", changes, source="claude-code", watch=pos.record())
        self._note(pos, notes)
        return True

    def _claude_changes(self, session, wanted: dict, grew: bool, mine: Optional[dict], had: list) -> tuple[dict, list, dict]:
        """(ref changes, notes, the branches after them). A file that grew moves the branches
        it set last time and nobody moved since as its layout says, deleting those its
        layout has no more (a thread that became main); every other branch moves as an
        import moves it (c.safe_refs): never removed or rewound."""
        st = session.refs() if session.exists() else None
        current = dict(st.branches) if st else {}
        if grew:
            # positions written before they kept refs (None): the branches the file's layout had
            ours = {b for b in had if b in current} if mine is None else {b for b, h in mine.items() if current.get(b) == h}
        else:
            ours = set()
        changes: dict = {}
        rest = {}
        for b, h in wanted.items():
            if b in ours or (grew and b not in current):
                if current.get(b) != h:
                    changes[b] = h
            else:
                rest[b] = h
        for b in ours - wanted.keys():
            changes[b] = None
        more, notes = c.safe_refs(self.tape, session, rest) if rest else ({}, [])
        changes.update(more)
        if st is None or st.head is None:
            changes[HEAD] = "@main"
        now = {**current, **changes}
        return changes, notes, now

    def _note(self, pos: Position, notes: list[str]) -> None:
        """One line when the file's version did not move a branch: a shorter file, or
        another file of the same session (once per source and message)."""
        notes = [n for n in notes if n]
        if not notes:
            return
        msg = f"watch: {pos.path}: session {pos.session}: " + "; ".join(notes)
        if (pos.key, msg) not in self.reported:
            self.reported.add((pos.key, msg))
            self.warn(msg)

    # -- gemini cli: the whole file whenever it changes, laid out as import lays it out ------------

    def _gemini(self, s: Source, st: os.stat_result, pos: Optional[Position], at: Optional["_At"]) -> tuple[int, int]:
        """A Gemini CLI session file: read whole at each change (a JSON document is written
        again whole; a JSON Lines file is short). The importer continues the thread the
        file's earlier version left (by content: formats/gemini.py), so what is new is
        appended and nothing is rewound. A JSON Lines file that only grew (its bytes up to
        the position unchanged) moves the branches it set, as its layout says (a rewind in
        the file makes a new thread `main`, the old one a branch); anything else moves refs
        as `ctape import` does."""
        from ..formats import gemini
        from ..formats.reading import spooled
        from .position import latest_in_tape

        grew = at is not None
        with spooled([s.path]) as (path,):
            try:
                lay = gemini.layout(self.tape, path, None, after_line=pos.line if grew else 0)
            except (gemini.Incomplete, gemini.Empty):
                return 0, 0  # a document being written again, or no message yet: read at the next change
        session = self.tape.session(lay.name)
        old = pos if pos is not None and pos.session == lay.name else None
        if old is None:
            grew = False
            old = latest_in_tape(session, s.key)
        new = Position(key=s.key, path=s.path, fmt="gemini", session=lay.name, dev=st.st_dev, ino=st.st_ino, off=lay.end, line=lay.line)
        mine, had = (old.refs, list(old.branches)) if old is not None else (None, [])
        changes, notes, now = self._claude_changes(session, lay.refs, grew, mine, had)
        new.branches = sorted(lay.refs)
        new.refs = {b: h for b, h in lay.refs.items() if now.get(b) == h}
        new.tip = lay.refs.get("main")
        new.time = self.tape.read_entry(new.tip).time if new.tip else None
        self._seal(s, new, b"", _prefix_digest(s, lay.end))
        self._batch_bytes += lay.end
        wrote = bool(changes) or old is None or old.record() != new.record()
        if wrote:
            session.set_refs("import", changes, source="gemini", watch=new.record())
        self._note(new, notes + [n for n in lay.notes if n])
        self._done(new, st, Live(new))
        return (lay.new_records if wrote else 0), lay.end

    # -- other formats: the whole file whenever it changes ---------------------------------------

    def _whole(self, s: Source, st: os.stat_result, fmt: str) -> tuple[int, int]:
        from ..formats import import_files

        # in a batch of its own: a file refused half way (an edited export) writes nothing,
        # as `ctape import` of it, where the pass's batch would keep what came before the refusal
        self._commit()
        written = self.tape.store.entries_written
        try:
            with self.tape.batch():
                lines = import_files(self.tape, fmt, [s.path], None)
        finally:
            self._begin()
        for line in lines:
            if not line.startswith(c.NOTHING_NEW):  # a file touched, or written again as it was: silent
                self.echo(f"watch: {line}")
        pos = Position(key=s.key, path=s.path, fmt=fmt, off=st.st_size)
        self._batch_bytes += st.st_size
        self._done(pos, st, None)
        return int(self.tape.store.entries_written > written), st.st_size  # the file, when it brought anything new

    def _report_raw(self, s: Source, ln: _Line) -> None:
        if (s.key, ln.number) not in self.reported:
            self.reported.add((s.key, ln.number))
            self.warn(f"watch: {s.path}: line {ln.number} is not JSON; kept as it is (a hidden entry)")


def _rewritten_in_place(pos: Position, st: os.stat_result) -> bool:
    """Written to, and no longer than when last seen: an append always grows a file, so
    its bytes may have changed anywhere, also between the two digests of the position
    (the first 4 KiB and the 4 KiB before it). Read whole again: this costs a read only
    when a file is touched without growing, never for an append."""
    return pos.size >= 0 and st.st_size <= pos.size and pos.mtime != st.st_mtime_ns


def _unpacked(s: Source):
    """The decompressed content of a `.zst` source in a temporary file, refused (InvalidInput)
    once it passes reading.max_unpacked(): a zstd bomb fills neither the memory nor the disk."""
    from ..formats.reading import unpack

    out = tempfile.TemporaryFile(prefix="ctape-watch-")
    try:
        unpack(s.path, out, "the file is skipped", named=False)
        out.seek(0)
        return out
    except BaseException:
        out.close()
        raise


def _read_exact(f, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        b = f.read(n - len(out))
        if not b:
            break
        out += b
    return bytes(out)


def _tail_of(s: Source, pos: Position) -> bytes:
    """The up to ID_BYTES bytes before pos.off, read from the file."""
    start = max(0, pos.off - ID_BYTES)
    with src_mod.open_stream(s.path) as f:
        if hasattr(f, "seek"):
            f.seek(start)
            return _read_exact(f, pos.off - start)
        return src_mod.skip(f, pos.off, start)


class _At:
    """A source opened at its position: the stream, the digest of the bytes before it, and
    whether those bytes were read and compared now (else only their ends)."""

    __slots__ = ("f", "hasher", "verified")

    def __init__(self, f, hasher, verified: bool):
        self.f, self.hasher, self.verified = f, hasher, verified


class _Scan:
    """The lines of a Claude Code file read in this pass, as the Builder's Infos (their values
    are dropped: the Builder reads each line again by offset, so memory holds one chunk of
    values at a time, not the file). Lines that are not JSON after the last valid one may
    still be being written: they are left for later (not consumed, not in the digest)."""

    def __init__(self, hasher):
        from ..formats import claude_code

        self.Info = claude_code.Info
        self.hasher = hasher
        self.done: list = []
        self.held: list[_Line] = []
        self.raw: list[_Line] = []  # lines kept as they are (not JSON), to report
        self.sid: Optional[str] = None
        self.first_time: Optional[str] = None
        self.recent = b""
        self.end = self.line = 0

    def add(self, chunk: list[_Line]) -> None:
        for ln in chunk:
            if not ln.ok:
                self.held.append(ln)
                continue
            for bad in self.held:
                self._take(bad)
                self.raw.append(bad)
            self.held = []
            v = ln.value
            if isinstance(v, dict):
                if self.sid is None and isinstance(v.get("sessionId"), str):
                    self.sid = v["sessionId"]
                if self.first_time is None:
                    self.first_time = c.valid_time(v.get("timestamp"))
            self._take(ln)

    def _take(self, ln: _Line) -> None:
        self.done.append(self.Info(c.Line(ln.number, ln.offset, len(ln.raw), None, ln.ok), ln.value))
        self.hasher.update(ln.pre)
        self.hasher.update(ln.raw)
        self.recent = (self.recent + ln.pre + ln.raw)[-ID_BYTES:]
        self.end, self.line = ln.end, ln.number

    def infos(self) -> list:
        return self.done


class _Batches:
    """Stands in for the Builder's progress bar while watch lays out lines: counts the source
    bytes done and ends the batch every BATCH_BYTES."""

    def __init__(self, w: Watcher, base: int):
        self.w, self.last = w, base

    def update(self, offset: int) -> None:
        if offset > self.last:
            self.w._batch_bytes += offset - self.last
            self.last = offset
            if self.w._checkpoint():
                raise _Stopped()  # out of the Builder: its layout is cut short, and dropped

    def done(self) -> None:
        pass


def _ends_match(f, pos: Position) -> bool:
    """The file's first `idn` bytes and the 4 KiB before pos.off are those the position saw;
    the stream is left at pos.off."""
    head = _read_exact(f, pos.idn)
    if digest(head) != pos.idh:
        return False
    tail_from = max(0, pos.off - ID_BYTES)
    if hasattr(f, "seek"):
        f.seek(tail_from)
        tail = _read_exact(f, pos.off - tail_from)
    else:
        kept = head[tail_from:] if tail_from < len(head) else b""
        tail = kept + src_mod.skip(f, pos.off - len(head), max(0, tail_from - len(head)))
    return len(tail) == pos.off - tail_from and digest(tail) == pos.th


def _prefix_digest(s: Source, n: int):
    """The digest of the file's first n bytes, read now (a Gemini CLI file is read whole anyway)."""
    h = blake3()
    with src_mod.open_stream(s.path) as f:
        while n > 0:
            b = f.read(min(src_mod.CHUNK, n))
            if not b:
                break
            h.update(b)
            n -= len(b)
    return h
