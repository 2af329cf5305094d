"""The root `ctape` group and what every command module shares.

Errors are mapped to exit codes in one place (CtapeGroup.invoke). Heavy modules
are imported inside commands so that `ctape --help` starts fast.
"""

from __future__ import annotations

import json
import errno
import itertools
import os
import sys
import warnings
from contextlib import contextmanager

import click

from ..model.models import plural

EXIT_FAIL, EXIT_USAGE = 1, 2
SUMMARY_LIMIT = 200  # a command's one-line summary in `ctape --help` is never cut shorter


class CtapeGroup(click.Group):
    def main(self, *args, **kwargs):
        """Usage errors as one line on stderr (exit 2), like every other error."""
        kwargs["standalone_mode"] = False
        utf8_output()
        escape_stderr()
        warnings.showwarning = _show_warning
        sys.unraisablehook = _unraisable
        _hold_closed_descriptors()
        try:
            try:
                rv = self._main_once(*args, **kwargs)
            except KeyboardInterrupt:  # a second Ctrl-C, while the first one was being handled
                _interrupted()
        except SystemExit as e:
            try:
                _leave_lingering_threads(e.code)
            except KeyboardInterrupt:  # (another Ctrl-C meanwhile: the exit already decided stands)
                pass
            raise
        sys.exit(rv if isinstance(rv, int) else 0)

    def _main_once(self, *args, **kwargs):
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.Abort:
            _interrupted()
        except click.ClickException as e:
            hint = ""
            ctx = getattr(e, "ctx", None)
            if ctx is not None and (_no_args_is_help(e) or _only_options(e, ctx)):
                click.echo(ctx.get_help())  # bare `ctape` (or `ctape session`): the help, not an error
                sys.exit(0)
            message = e.format_message()
            if isinstance(e, click.NoSuchOption) and ctx is not None and not e.possibilities:
                hint = _misplaced_option(e.option_name, ctx)
                message = message.rstrip(".") + hint if hint else message
            if isinstance(e, click.UsageError) and ctx is not None:
                if message.endswith("?"):  # "No such command 'lgo'. Did you mean 'log'?"
                    message += f" (see `{ctx.command_path} --help`)"
                else:
                    message = message.rstrip(". ") + f"; see `{ctx.command_path} --help`"
            _fail(message, e.exit_code)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)

    def format_commands(self, ctx, formatter):
        """Each command with its whole one-line summary (the first sentence of its help),
        as git lists its commands: click cuts summaries to the terminal's width with "...";
        here a long one wraps instead."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=SUMMARY_LIMIT)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except BrokenPipeError:
            _quiet_broken_pipe(ctx.meta.get(OUTCOME, 0))
        except KeyboardInterrupt:  # here, before click's own handling prints a blank line first
            _interrupted()
        except Exception as e:  # noqa: BLE001 - the one place errors become exit codes
            from ..errors import CtapeError

            if os.environ.get("CTAPE_DEBUG"):
                raise
            if isinstance(e, CtapeError):
                _fail(str(e), e.exit_code)
            if isinstance(e, KeyboardInterrupt):
                _fail("interrupted", 130)
            if isinstance(e, OSError) and _writing_output(e):
                # the tape's own writes fail as StorageError; this is the printing of a result
                why = ("no space left on the device" if e.errno in (errno.ENOSPC, errno.EDQUOT)
                       else "the output file passed this process's file size limit (`ulimit -f`)" if e.errno == errno.EFBIG
                       else (e.strerror or str(e)))
                if ctx.invoked_subcommand in READING_COMMANDS:  # (it pointed a `log` at itself: found by an audit)
                    _fail(f"cannot write the output: {why}; nothing in the tape changed", EXIT_FAIL)
                _fail(f"cannot write the output: {why}; a command that changes the tape made its change before "
                      "printing, so look (`ctape log`) before running it again", EXIT_FAIL)
            if isinstance(e, OSError) and e.errno == errno.ENOENT and not getattr(e, "filename", None) and _cwd_gone():
                _fail("the current folder no longer exists (it was removed or moved); cd to one that exists, or give --dir an "
                      "absolute path", EXIT_FAIL)
            if isinstance(e, OSError):
                where = f" ({e.filename})" if getattr(e, "filename", None) else ""
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    _fail(f"no space left on the device{where}; free space and retry", EXIT_FAIL)
                if e.errno == errno.EFBIG:
                    from ..store.files import TOO_LARGE

                    _fail(f"cannot write {e.filename or 'a file'}: {TOO_LARGE}", EXIT_FAIL)
                if e.errno == errno.EROFS:
                    _fail(f"read-only file system{where}; use a writable copy", EXIT_FAIL)
                _fail(f"{e.strerror or e}: {getattr(e, 'filename', '') or ''}; check the path and permissions".replace(": ;", ";"), EXIT_FAIL)
            if isinstance(e, OverflowError) and _clock_past_range():
                _fail("this machine's clock reads a time after the year 2262, past what Python's clock can hold; set the "
                      "clock right (`date`) and retry", EXIT_FAIL)
            if isinstance(e, MemoryError):
                _fail("out of memory (a record or value too large for what this process may use?); free memory, or raise "
                      "the limit (`ulimit -v`), and retry", EXIT_FAIL)
            _fail(f"internal error: {type(e).__name__}: {e}; rerun with CTAPE_DEBUG=1 and report it", EXIT_FAIL)


def _clock_past_range() -> bool:
    """Whether the system clock is past 2262-04-11, where CPython's clock (nanoseconds in 64
    bits) overflows: every time.time() raises OverflowError then (found by a clock audit)."""
    import time

    try:
        time.time_ns()
    except OverflowError:
        return True
    return False


@contextmanager
def writing_output():
    """Around a command's own writes to stdout (bytes, past click.echo): a failure there is
    the output's (a full disk under `> file`), never the tape's."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as e:
        e.ctape_output = True  # type: ignore[attr-defined]
        raise


def _cwd_gone() -> bool:
    try:
        os.getcwd()
        return False
    except FileNotFoundError:
        return True


def _writing_output(e: OSError) -> bool:
    """Did `e` come from printing (click.echo, which every command prints through, or a
    write under `writing_output`)?"""
    import traceback

    if getattr(e, "ctape_output", False):
        return True
    tb = traceback.extract_tb(e.__traceback__)
    return bool(tb) and tb[-1].name in ("echo", "secho") and os.sep + "click" + os.sep in tb[-1].filename


def _unraisable(u) -> None:
    """A Ctrl-C that lands in a finalizer (`Popen.__del__` while the collector runs) is
    lost there, and Python prints its traceback as "Exception ignored in ...": no user
    needs that. Anything else is shown as Python shows it."""
    if isinstance(u.exc_value, KeyboardInterrupt) and not os.environ.get("CTAPE_DEBUG"):
        return
    sys.__unraisablehook__(u)


def utf8_output() -> None:
    """Output is UTF-8 whatever the locale, as git writes and as `export` writes bytes: under
    a latin-1 locale (or PYTHONIOENCODING=latin-1) every command whose output held a "…"
    failed with an internal UnicodeEncodeError, and `--json` came out in latin-1, which no
    JSON reader takes (found by an audit). stderr, for people, keeps the locale's encoding,
    with what it cannot show written as escapes."""
    for stream, utf8 in ((sys.stdout, True), (sys.stderr, False)):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding == "utf8" or not hasattr(stream, "reconfigure"):
            continue
        try:
            stream.reconfigure(**({"encoding": "utf-8"} if utf8 else {}), errors="backslashreplace")
        except (ValueError, OSError, LookupError):
            pass  # (a stream already written to, or a wrapper without it: left as it is)


def escape_stderr() -> None:
    """Every line ctape writes to stderr is for a person (errors, warnings, notes,
    progress), and many name what came from outside: a file's path, a remote's address, a
    session's name, a value from the environment. None may pass a terminal control
    character through (SPEC 13: an escape sequence in a file name would clear the screen
    or set the window's title): so stderr itself writes them as \\xNN escapes, whatever
    line is written, keeping only tab, newline and the carriage return of progress lines."""
    if not isinstance(sys.stderr, _EscapingText) and sys.stderr is not None:
        sys.stderr = _EscapingText(sys.stderr)


class _EscapingText:
    """A text stream that writes through another, control characters escaped."""

    def __init__(self, inner):
        self._inner = inner

    def write(self, s: str) -> int:
        from ..ops.render import clean_stderr

        self._inner.write(clean_stderr(s))
        return len(s)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def _only_options(e: click.ClickException, ctx: click.Context) -> bool:
    """`ctape --dir D` with no command: the help, as bare `ctape` gives (it was "Missing
    command", exit 2; found by a contract audit)."""
    return isinstance(e, click.UsageError) and isinstance(ctx.command, click.Group) and e.message.startswith("Missing command")


def _no_args_is_help(e: click.ClickException) -> bool:
    cls = getattr(click.exceptions, "NoArgsIsHelpError", None)
    return cls is not None and isinstance(e, cls)


def _show_warning(message, category, *_args, **_kwargs):
    """ctape's own warnings as one line on stderr, like its errors."""
    from ..errors import CtapeWarning

    if issubclass(category, CtapeWarning):
        from ..ops.render import clean

        click.echo(f"ctape: warning: {clean(' '.join(str(message).split()))}", err=True)


# commands that only read the tape (their printing failing leaves nothing to look at)
READING_COMMANDS = frozenset({"log", "show", "status", "sessions", "export", "context", "state", "diff", "search", "stats",
                              "usage", "reflog", "scan", "cat", "graph"})


def _interrupted():
    """Exit 130 with one line; a further Ctrl-C meanwhile (often there are two: a second
    press, or `timeout` signalling the process and then its group) is not a traceback.
    On a terminal the line starts after the `^C` the terminal echoed; in a log, no blank
    line comes before it."""
    from ..store.files import uninterrupted

    with uninterrupted(reraise=False):
        if _stderr_is_terminal():
            click.echo("", err=True)
        _fail("interrupted", 130)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced, or closed
        return False


OWN_PROCESS = False  # set by the `ctape` command (ctape.__main__.run): the process is ctape's alone


def _misplaced_option(name: str, ctx) -> str:
    """Where an option given in the wrong place goes: `--dir` before the command (it is the
    main command's), `-s` after it (each command's); click said only "No such option"."""
    if name == "--dir" and ctx.parent is not None:
        names, c = [], ctx
        while c.parent is not None:  # (the command's words below the program's own name)
            names.append(c.info_name)
            c = c.parent
        command = " ".join(reversed(names))
        return f" here: --dir goes before the command (ctape --dir DIR {command} ...)"
    if name in ("-s", "--session") and ctx.parent is None:
        return " before the command: -s goes after it (ctape COMMAND -s SESSION)"
    return ""


def _leave_lingering_threads(code) -> None:
    """A command that failed or was interrupted exits now, not once the transfers it left
    under way end: Python waits for every thread of a pool at exit, and against a server
    that hangs that was each request's tries and waits (a Ctrl-C of a clone exited after 82
    s, and warned meanwhile; found by a look at what an audit left). Left as a kill -9
    leaves it, which every write of a tape and of a remote is made for; what was printed is
    flushed first. A command that succeeded has no transfer left. Only in the `ctape`
    command's own process, and only for ctape's transfer threads (backend.TRANSFER_THREADS):
    a program that runs the command line in its process (click's CliRunner) goes on."""
    import threading

    if code in (0, None) or not OWN_PROCESS:
        return
    # (no import here: a second Ctrl-C during one printed a traceback, found by CI; a
    # command that never loaded the transfers has none under way)
    backend = sys.modules.get("ctape.sync.backend")
    if backend is None or not any(t.name.startswith(backend.TRANSFER_THREADS) and t.is_alive() for t in threading.enumerate()):
        return
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001 - closed, replaced or None: nothing more to flush
            pass
    os._exit(code if isinstance(code, int) else EXIT_FAIL)


def _fail(msg: str, code: int):
    from ..ops.render import clean

    msg = clean(" ".join(str(msg).split()))  # escaped here, not only by stderr: click would cut an escape sequence out
    try:
        click.echo(f"ctape: error: {msg}", err=True)
    except OSError:
        pass  # stderr itself cannot be written (a full disk under it): the exit code still tells
    sys.exit(code)


def decided(code: int) -> None:
    """The exit status a command knows before it prints its result (scan found secrets,
    fsck found damage). A reader that leaves early (`ctape scan | head -1`) then keeps it:
    a broken pipe exits 0 otherwise, and `set -o pipefail; ctape scan | head` would read
    as "no secrets" (found by an audit)."""
    click.get_current_context().find_root().meta[OUTCOME] = code


OUTCOME = "ctape.outcome"


def _quiet_broken_pipe(outcome: int = 0):
    """stdout's reader stopped early (`ctape log --json | head -1`): no failure, exit 0
    (or the status the command had `decided`), whatever the command was printing. Only the output `click.echo` writes got 0 before
    (it swallows EPIPE), the JSON, export and search writers 1, so a pipeline under
    `set -o pipefail` passed or failed by the output's format and length. A broken pipe
    that is not stdout's (the write end of a pipe or socket whose reader left shows POLLERR
    or POLLHUP) is a failure, exit 1."""
    import select

    gone = False
    try:
        fd = sys.stdout.fileno()
        p = select.poll()
        p.register(fd, select.POLLOUT)
        gone = any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(0))  # (POLLHUP: BSD pipes, sockets)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
    except (OSError, ValueError, AttributeError):
        pass
    sys.exit(outcome if gone else EXIT_FAIL)


def _hold_closed_descriptors() -> None:
    """Descriptors 0, 1 and 2 that were closed when ctape started get /dev/null: the next
    file opened would otherwise take the number, and a tape file could be read as stdin or
    written as stdout. sys.stdin and sys.stdout stay None, so need_stdin and need_stdout
    still see them closed."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
            except OSError:
                return


def need_stdin(hint: str) -> None:
    """InvalidInput (exit 2) before anything is written when stdin was closed (`<&-`);
    `hint` says what to give instead."""
    from ..errors import InvalidInput

    if sys.stdin is None:
        raise InvalidInput(f"stdin is closed; {hint}")
    try:
        tty = os.isatty(sys.stdin.fileno())
    except (OSError, ValueError, AttributeError):
        tty = False
    if tty:  # typed at a terminal, the input forgotten: say what it waits for, not a silent wait
        click.echo(f"ctape: reading from the terminal (end with Ctrl-D, stop with Ctrl-C); {hint}", err=True)


def need_stdout() -> None:
    """InvalidInput (exit 2) before a command whose output is data starts, when stdout was
    closed (`>&-`): the data would go nowhere."""
    from ..errors import InvalidInput

    if sys.stdout is None:
        raise InvalidInput("stdout is closed; give the command somewhere to write: a file, a pipe or the terminal")


def _is_tape(path: str) -> bool:
    from ..store.store import is_tape

    return is_tape(path)


def find_tape_dir(explicit: str | None) -> str:
    """--dir, else $CTAPE_DIR (either may name the folder that holds .ctape/), else the
    nearest folder upwards that is a tape or holds .ctape/."""
    for given in (explicit, os.environ.get("CTAPE_DIR")):
        if given:
            inner = os.path.join(given, ".ctape")
            if not _is_tape(given) and os.path.isdir(inner):
                return inner
            return given
    here = os.path.abspath(os.getcwd())
    while True:
        if _is_tape(here):
            return here
        cand = os.path.join(here, ".ctape")
        if os.path.isdir(cand):
            return cand
        parent = os.path.dirname(here)
        if parent == here:
            from ..errors import NotATape

            raise NotATape("no tape directory found (.ctape in this or a parent folder); run `ctape init` or pass --dir")
        here = parent


def open_tape(ctx: click.Context):
    from ..tape import Tape

    obj = ctx.find_root().obj
    if obj.get("tape") is None:
        obj["tape"] = Tape.open(find_tape_dir(obj.get("dir")))
        ctx.find_root().call_on_close(obj["tape"].close)
    return obj["tape"]


_MOVES_REFS = {"checkout", "branch", "tag", "recover"}  # commands that change an existing session's refs


def need_session(ctx: click.Context, session: str | None, exists: bool = True) -> str:
    """The session a command works on: -s / $CTAPE_SESSION, else this machine's choice
    (`session use`), else the tape's only session. With `exists`, it must exist."""
    from ..model.models import check_name
    from ..history.sessions import default, require

    if session is not None:  # an empty -s is a bad name, not "no session given"
        check_name(session, "session name")
        if exists:
            found = require(open_tape(ctx), session)
            if found != session and ctx.info_name in _MOVES_REFS:
                # a read by a prefix shows what it read; a write that moves refs says whose
                click.echo(f"note: -s {session} is session {found} (the one whose name starts so)", err=True)
            return found
        _note_new_prefix(open_tape(ctx), session)
        return session
    return default(open_tape(ctx))


def _note_new_prefix(tape, name: str) -> None:
    """A write to a session that does not exist creates it by its whole name, where a
    read takes a unique prefix: say so when the name starts other sessions' names, which
    is what a prefix typed for an existing session looks like."""
    from ..history.sessions import live_names

    if tape._session_exists(name):
        return
    found = [n for n in live_names(tape) if n.startswith(name)]
    if found:
        shown = ", ".join(found[:3]) + (" ..." if len(found) > 3 else "")
        click.echo(f"ctape: warning: new session {name!r} (writes take a session's whole name; {shown} "
                   f"start{'s' if len(found) == 1 else ''} with it: -s {found[0]} writes there)", err=True)


class readable:
    """Entries until one cannot be read (damaged, or not synced yet): then one warning line
    and the walk stops there. `damaged`: it stopped at damage not salvaged yet, and the
    caller exits 1 once it has printed what it could, as SPEC 5 asks of corrupt data (an
    entry a salvage recorded as lost, or one an rsync has yet to bring, is a known gap:
    fsck passes, and so does the listing). When not even the first reads back, that is
    the error."""

    def __init__(self, entries):
        self.entries = entries
        self.damaged = False

    def __iter__(self):
        from ..errors import CorruptObject, EntryNotFound

        it, shown = iter(self.entries), False
        while True:
            try:
                e = next(it)
            except StopIteration:
                return
            except (CorruptObject, EntryNotFound) as err:
                if not shown:
                    raise
                click.echo(f"ctape: warning: history stops here: {str(err).split(';')[0]} (older entries cannot be reached from this one); see `ctape fsck`", err=True)
                self.damaged = isinstance(err, CorruptObject)
                return
            shown = True
            yield e


def warn_damage(tape, session) -> None:
    """One line on stderr when a session is read from damaged files (what reads back is shown)."""
    from ..errors import CtapeError

    if session:
        s = tape.session(session)
        try:  # damage is known once a read meets it: HEAD's entry is read here (usually cached)
            head = s.refs().head_hash
            if head:
                tape.read_entry(head)
        except CtapeError:
            pass  # what cannot be read is the damage found, or the command's own error
        damaged = s.damage()
        if damaged:
            from ..store.files import damage_advice
            from ..store.store import limit_advice

            limit = limit_advice(tape.store)
            what = limit or damage_advice(damaged[0], "run `ctape fsck --salvage` to keep it and write again")
            has = "records this process cannot read under its limit" if limit else "damaged records"
            click.echo(f"ctape: warning: session {session!r} has {has} in {damaged[0]}: showing what is readable; {what}", err=True)


def warn_tape_damage(tape, session=None) -> None:
    """warn_damage for a command that reads the whole tape (search, usage, stats): one line
    when any file holds damaged records, so that what it left out is not taken for none."""
    if session:
        warn_damage(tape, session)
        return
    bad = tape.store.damaged_files()
    if bad:
        more = f" and {len(bad) - 1} more {plural(len(bad) - 1, 'file', 'files')}" if len(bad) > 1 else ""
        click.echo(f"ctape: warning: damaged records in {bad[0]}{more}: what they held is left out; see `ctape fsck`", err=True)


def emit_json(value) -> None:
    click.echo(json.dumps(value, ensure_ascii=False))


def echo_lines(lines, use_pager: bool) -> None:
    """Lines to stdout as they come, through the pager (pager.py) when `use_pager` and they
    are many. Nothing at all for no lines, or a single empty one."""
    from .pager import chunks, page, _write

    lines = iter(lines)
    first = next(lines, None)
    if first is None:
        return
    second = next(lines, None)
    if second is None and not first:
        return
    lines = itertools.chain([first] if second is None else [first, second], lines)
    if use_pager:
        page(lines)
    else:
        _write(chunks(lines))


def session_in_ref(tape, ref: str) -> str | None:
    """The existing session a REF names by its first part (`chat`, `chat/alt`, `chat~2`,
    `chat@{1}`), or None."""
    from ..model.models import NAME_RE

    s = ref.split("~")[0].split("^")[0].split("@{")[0].split("/")[0]
    return s if NAME_RE.fullmatch(s) and tape._session_exists(s) else None


def session_for(ctx: click.Context, ref: str | None, session: str | None, also: tuple = ()) -> str | None:
    """The session a log-like command reads: -s, else the session a REF names, else the
    default session. None when a REF names no session and there is no default, if the REF
    (and each of `also`) needs none: a full hash or a hex prefix. A REF that needs one
    (HEAD, a branch, tag or anchor name, @{N}) with several sessions and none chosen is the
    error that lists them (SPEC 5), as without a REF. An empty REF (`show ''`: an unset
    variable) is its own error, never "no REF"."""
    for r in (ref, *also):
        if r == "":
            from ..model.refspec import parse_ref

            parse_ref(r)  # raises: empty ref
    if session is not None or not ref:
        return need_session(ctx, session)
    from ..errors import CtapeError, NoDefaultSession

    tape = open_tape(ctx)
    named = session_in_ref(tape, ref)
    if named is not None:
        from ..model.refspec import SessionOfRef

        return SessionOfRef(named)
    try:
        return need_session(ctx, None)
    except NoDefaultSession as e:
        needs = next((r for r in (ref, *also) if _needs_session(tape, r)), None)
        if needs is not None:
            raise NoDefaultSession(f"{needs!r} needs a session: {e}") from None
        return None
    except CtapeError:  # a chosen session that is gone: the REF may still name an entry
        return None


def ref_in_session(ctx: click.Context, ref: str, session: str | None) -> tuple[str, str | None]:
    """REF for a command that takes a SESSION or a REF in one argument (`export`, `session
    cp`): as it is when it names a session or an entry by itself (a session, SESSION/BRANCH,
    SESSION~N, a hash) and is no name within the session chosen with -s; else (HEAD,
    HEAD~1, a branch, tag or anchor) the entry it names in the command's session (-s,
    $CTAPE_SESSION, `session use`, the tape's only one), as `show` reads it, by its full
    hash (SPEC 4 and 5). With the session REF was read in (None when it named itself)."""
    from ..errors import RefNotFound
    from ..model.models import NAME_RE

    tape = open_tape(ctx)
    if session is None:
        try:
            tape.resolve(ref)
            return ref, None
        except RefNotFound:
            session = session_for(ctx, ref, None)
            if session is None:
                raise
    elif ref == session:
        return ref, None
    else:
        session = need_session(ctx, session)  # an unknown one is said as such (with the closest names)
        if ref == session or (NAME_RE.fullmatch(ref) and tape._session_exists(ref) and not tape._named_in(tape.session(session), ref)[0]):
            return ref, None
    h = tape.resolve(ref, session)
    if h is None:
        raise RefNotFound(f"{ref!r} names no entry: session {session} has none yet")
    return h, str(session)


def _needs_session(tape, ref: str) -> bool:
    """True when REF can only be read in a session: its base is no session, no
    SESSION/BRANCH and no hex digits that may be an entry's hash or prefix (so HEAD, a
    branch, tag or anchor name), or it takes @{N} without naming a session; and the tape
    has several sessions to choose from."""
    from ..errors import CtapeError
    from ..history.sessions import live_names
    from ..model.refspec import parse_ref

    try:
        spec = parse_ref(ref)
    except CtapeError:
        return False  # the command says what is wrong with it
    if "/" in spec.base or session_in_ref(tape, ref) is not None:
        return False
    if spec.reflog is None and len(spec.base) >= 4 and all(c in "0123456789abcdefABCDEF" for c in spec.base):
        return False  # an entry's hash or prefix: its own error says when none matches
    names = live_names(tape)
    if len(names) < 2:
        return False
    if spec.reflog is not None:
        return True
    # HEAD, a branch, tag or anchor name: it needs a session only if one of them has it.
    # One that names nothing anywhere (a removed session's name, a typo) is unknown (exit 1)
    return any(_may_name(tape, n, spec.base) for n in names)


def _may_name(tape, session: str, name: str) -> bool:
    from ..errors import CtapeError

    try:
        return tape._named_in(tape.session(session), name)[0]
    except CtapeError:  # a damaged session: it may have it (its own commands say what is wrong)
        return True


class Duration(click.ParamType):
    """DUR (now, 30m, 12h, 14d, 2w), as seconds (timespec.parse_duration)."""

    name = "dur"

    def convert(self, value, param, ctx):
        from ..model.timespec import parse_duration

        return value if isinstance(value, float) else parse_duration(value, _opt(param))


class When(click.ParamType):
    """T (an RFC 3339 time, or a duration back from now), as ctape writes times
    (timespec.parse_when)."""

    name = "t"

    def convert(self, value, param, ctx):
        from ..model.timespec import parse_when

        return parse_when(value, _opt(param))


class Seconds(click.FloatRange):
    """A number of seconds in a range (FloatRange lets nan through)."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if rv != rv:
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return rv


def _opt(param) -> str:
    return param.opts[0] if param is not None and param.opts else "value"


def _no_empty_session(ctx, param, value):
    """`-s ''` is a mistake (an unset variable in a script), never "the default": refused as
    every command refuses an empty name (import took it for no -s, and chose a session)."""
    if value == "":  # an empty CTAPE_SESSION reads as unset (None): this came from the command line
        from ..model.models import check_name

        check_name(value, "session name")
    return value


def _print_version(ctx, _param, value) -> None:
    """`ctape --version`: the installed version, else (run from a checkout, not installed:
    click's own option failed with a traceback there) the package's own."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("ctape")
    except PackageNotFoundError:  # the package itself, loaded before any of its modules
        v = getattr(sys.modules.get("ctape"), "__version__", "unknown")
    click.echo(f"ctape, version {v}")
    ctx.exit()


def once(ctx, param, values):
    """The callback of an option that takes one NAME (given with multiple=True, so that a
    second is seen): click kept the last of `branch -d a -d b` and deleted b alone, exit
    0, where more names are a usage error (found by an audit)."""
    if len(values) > 1:
        raise click.UsageError(f"{param.opts[0]} is given {len(values)} times; it takes one NAME (one command for each)")
    return values[0] if values else None


session_option = click.option("-s", "--session", envvar="CTAPE_SESSION", callback=_no_empty_session,
                              help="Session name (default: $CTAPE_SESSION, else `ctape session use`, else the only one).")
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output (JSON Lines for listings).")
pager_option = click.option("--no-pager", is_flag=True, help="Never page the output (else, in a terminal: $CTAPE_PAGER, $PAGER or less, with LESS=FRX unless LESS is set).")


@click.group(cls=CtapeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--dir", "dir_", metavar="DIR", help="Tape directory (default: $CTAPE_DIR, else the nearest .ctape/ upwards).")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version, help="Show the version and exit.")
@click.pass_context
def main(ctx, dir_):
    """Crash-proof, content-addressed history for LLM-agent conversations.

    \b
    Examples:
      ctape init
      ctape append user '{"content": "hi"}' -s chat
      ctape log -s chat --oneline
      ctape demo
    """
    if dir_ == "":  # an unset variable in a script: never "look for a tape" in its place
        from ..errors import InvalidInput

        raise InvalidInput("--dir is empty; give the tape directory, or leave --dir out to use $CTAPE_DIR or the nearest .ctape/")
    if ctx.invoked_subcommand is not None:
        # every command writes to stdout (a listing, a hash, a URL): `search`, `stats`,
        # `usage`, `diff` and `remote list` exited 0 with their output gone (found by an audit)
        need_stdout()
    ctx.ensure_object(dict)
    ctx.obj["dir"] = dir_


@main.result_callback()
@click.pass_context
def _said_after(ctx, *_args, **_kw) -> None:
    """After a command that succeeded: a stream a killed writer left, which its write
    recorded first (SPEC 6: no later than the next write), is said, since it moved HEAD
    before the command read it (`tag v1` then names it; `checkout HEAD~1`, the entry
    `log` showed as HEAD)."""
    tape = (ctx.obj or {}).get("tape")
    for session, h in getattr(tape, "recorded_streams", ()):
        click.echo(f"note: this write first recorded the interrupted stream of session {session} (its writer had died) "
                   f"as entry {h[:12]}, where HEAD was; see `ctape log -s {session}`", err=True)
