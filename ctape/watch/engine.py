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

The Watcher here makes the passes and the batches and decides, for each source, what to
read; the parts each format needs are its mixins: codex.py, claude.py and whole.py
(Gemini CLI and the formats read whole), with state.py (each source's position) and
reading.py (complete lines, and the checks of the bytes before a position).
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from blake3 import blake3

from ..errors import ConflictError, CtapeError, InvalidInput
from ..formats import CUT
from ..formats import _common as c
from . import sources as src_mod
from .claude import _Claude
from .codex import _Codex
from .position import Cache, Position, save_layout
from .reading import _At, _ends_match, _Line, too_long
from .sources import Source
from .state import Live, _Positions
from .whole import _Whole

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


@dataclass
class PassReport:
    files: int = 0  # sources looked at
    transcripts: int = 0  # of them, files read as a transcript (the others: no transcript, or empty so far)
    changed: int = 0  # sources with something imported
    records: int = 0  # records imported that the tape did not hold
    bytes: int = 0  # source bytes read
    errors: list = field(default_factory=list)
    stopped: bool = False  # asked to stop (SIGINT, SIGTERM, SIGHUP): sources were left for the next pass


HEAD_BYTES = 1 << 20  # read to tell a source's format: its first lines


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


class Watcher(_Codex, _Claude, _Whole, _Positions):
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
        self._counted: set[str] = set()  # (_is_new)
        self._tips_checked = -TIPS_EVERY  # when _prune last looked for positions whose tip the tape lacks
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
                    rep.stopped = True
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
            rep.stopped = True
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
        rep.transcripts += n > 0 or p is not None
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
        self._counted = set()  # entries of this batch a file's "+N records" counted

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
        if time.monotonic() - self._cache_saved > CACHE_EVERY:
            # (the file holds every position: saved at each batch, a pass over 5,000 small
            # files was quadratic, 103 s; found by an audit. The pass's end saves it too)
            self.save_cache()
        if not self.keep:  # one pass (--once): memory stays bounded by the batch
            self.save_layouts()
            self.live.clear()

    def save_cache(self) -> None:
        self.cache.save()
        self._cache_saved = time.monotonic()

    def _prune(self, present: set) -> None:
        """Forget the cached positions of files that are gone (the tape keeps their records),
        and those whose entries the tape no longer holds: the tape was replaced by an older
        copy (a backup restored, an rsync --delete from a copy that had not imported them),
        and its file, unchanged since, was passed over in silence while `sessions` lacked
        it (found by an audit). Such a file is read again, as on a fresh tape."""
        lost = False
        # (at most once a minute: a follower without inotify makes a full pass every second)
        tips = self.cache.positions and time.monotonic() - self._tips_checked >= TIPS_EVERY
        if tips:
            self._tips_checked = time.monotonic()
            self.tape.store.refresh()  # (files gone since the index looked: their objects are no longer held)
        for key, p in list(self.cache.positions.items()):
            if key not in present and not os.path.exists(p.path):
                self.cache.drop(key)
            elif tips and p.tip and not self.tape.has_entry(p.tip):
                self.cache.drop(key)
                self.live.pop(key, None)
                lost = True
        if lost:
            self.cache.save()  # (the workers of a split pass read the positions from it)

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
        head = src_mod.head_of(s.path, HEAD_BYTES)
        lines = head.split(b"\n")
        if len(lines) == 1 and len(head) == HEAD_BYTES and s.path.endswith((".jsonl", ".jsonl" + src_mod.ZST)):
            # a first line with no end in the head: one over the record limit is an error
            # line, as any later line over it is (it said "not a transcript", or nothing for
            # a file found in a folder, which was then never imported; found by an audit)
            most = c.max_record()
            if src_mod.first_line_longer_than(s.path, most):
                raise too_long(1, most)
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
        settled = not self.keep and any(x.strip() for x in lines) and src_mod.ends_a_line(s.path)
        if fmt is None and s.named and (src_mod.judged(lines) or settled):
            # (lines that cannot tell yet, a first line cut or garbage, wait for more; but in a
            # single pass, --once, complete lines with none being written after them are all
            # there is: a short file of garbled lines was passed over in silence, exit 0,
            # where `ctape import` refuses it: found by an audit)
            raise NotATranscript()
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
        """Entry h was written by this batch (the tape did not hold it), and no file before
        in the batch counted it: two files of one session in a pass (a copy and a longer
        copy) counted the records they share twice (found by an audit)."""
        if h in self._counted or h not in self.tape.store.pending:
            return False
        self._counted.add(h)
        return True

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

    def _report_cut(self, s: Source) -> None:
        if (s.key, "cut") not in self.reported:
            self.reported.add((s.key, "cut"))
            self.warn(f"watch: {s.path}: {CUT}; read up to the cut, the rest once the file is whole")

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


TIPS_EVERY = 60.0  # seconds between two looks for cached positions the tape no longer holds (_prune)


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
