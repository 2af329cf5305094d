"""The root `ctape` group and what every command module shares.

Errors are mapped to exit codes in one place (CtapeGroup.invoke). Heavy modules
are imported inside commands so that `ctape --help` starts fast.
"""

from __future__ import annotations

import json
import os
import sys

import click

EXIT_FAIL, EXIT_USAGE = 1, 2


class CtapeGroup(click.Group):
    def main(self, *args, **kwargs):
        """Usage errors as one line on stderr (exit 2), like every other error."""
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.exceptions.Abort:
            _fail("interrupted", 130)
        except click.ClickException as e:
            hint = ""
            ctx = getattr(e, "ctx", None)
            if isinstance(e, click.UsageError) and ctx is not None:
                hint = f"; see `{ctx.command_path} --help`"
            _fail(e.format_message() + hint, e.exit_code)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except BrokenPipeError:
            _quiet_broken_pipe()
        except Exception as e:  # noqa: BLE001 - the one place errors become exit codes
            from ..errors import CtapeError

            if os.environ.get("CTAPE_DEBUG"):
                raise
            if isinstance(e, CtapeError):
                _fail(str(e), e.exit_code)
            if isinstance(e, KeyboardInterrupt):
                _fail("interrupted", 130)
            if isinstance(e, OSError):
                _fail(f"{e.strerror or e}: {getattr(e, 'filename', '') or ''}; check the path and permissions".replace(": ;", ";"), EXIT_FAIL)
            _fail(f"internal error: {type(e).__name__}: {e}; rerun with CTAPE_DEBUG=1 and report it", EXIT_FAIL)


def _fail(msg: str, code: int):
    msg = " ".join(str(msg).split())
    click.echo(f"ctape: error: {msg}", err=True)
    sys.exit(code)


def _quiet_broken_pipe():
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    sys.exit(EXIT_FAIL)


def find_tape_dir(explicit: str | None) -> str:
    if explicit:
        return explicit
    env = os.environ.get("CTAPE_DIR")
    if env:
        return env
    here = os.path.abspath(os.getcwd())
    while True:
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


def need_session(session: str | None) -> str:
    if not session:
        raise click.UsageError("this command needs a session: pass -s NAME or set CTAPE_SESSION")
    from ..models import check_name

    return check_name(session, "session name")


def emit_json(value) -> None:
    click.echo(json.dumps(value, ensure_ascii=False))


def echo_lines(lines, use_pager: bool) -> None:
    text = "\n".join(lines)
    if use_pager and sys.stdout.isatty():
        click.echo_via_pager(text + "\n")
    elif text:
        click.echo(text)


def session_for(tape, ref, session):
    """The session a log-like command reads: -s, else the session a REF names."""
    if session:
        return need_session(session)
    if ref:
        base = ref.split("~")[0].split("^")[0].split("@{")[0]
        s = base.split("/")[0]
        from ..models import NAME_RE

        if NAME_RE.fullmatch(s) and tape._session_exists(s):
            return s
        return None
    raise click.UsageError("give a REF or a session (-s NAME or $CTAPE_SESSION)")


session_option = click.option("-s", "--session", envvar="CTAPE_SESSION", help="Session name (default: $CTAPE_SESSION).")
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output (JSON Lines for listings).")
pager_option = click.option("--no-pager", is_flag=True, help="Never page the output.")


@click.group(cls=CtapeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--dir", "dir_", metavar="DIR", help="Tape directory (default: $CTAPE_DIR, else the nearest .ctape/ upwards).")
@click.version_option(package_name="ctape", prog_name="ctape")
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
    ctx.ensure_object(dict)
    ctx.obj["dir"] = dir_
