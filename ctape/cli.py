"""The `ctape` command: parse arguments, call one operation, format its output.

Heavy modules are imported inside commands so that `ctape --help` starts fast.
Errors are mapped to exit codes in one place (CtapeGroup.invoke).
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
            from .errors import CtapeError

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
            from .errors import NotATape

            raise NotATape("no tape directory found (.ctape in this or a parent folder); run `ctape init` or pass --dir")
        here = parent


def open_tape(ctx: click.Context):
    from .tape import Tape

    obj = ctx.find_root().obj
    if obj.get("tape") is None:
        obj["tape"] = Tape.open(find_tape_dir(obj.get("dir")))
        ctx.find_root().call_on_close(obj["tape"].close)
    return obj["tape"]


def need_session(session: str | None) -> str:
    if not session:
        raise click.UsageError("this command needs a session: pass -s NAME or set CTAPE_SESSION")
    from .models import check_name

    return check_name(session, "session name")


def emit_json(value) -> None:
    click.echo(json.dumps(value, ensure_ascii=False))


def echo_lines(lines, use_pager: bool) -> None:
    text = "\n".join(lines)
    if use_pager and sys.stdout.isatty():
        click.echo_via_pager(text + "\n")
    elif text:
        click.echo(text)


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


@main.command()
@click.argument("path", required=False)
@click.pass_context
def init(ctx, path):
    """Create a tape directory (PATH, else --dir, else ./.ctape).

    \b
    Examples:
      ctape init
      ctape --dir /data/tapes init
    """
    from .store import Store

    target = path or ctx.find_root().obj.get("dir") or os.environ.get("CTAPE_DIR") or ".ctape"
    if Store.init(target):
        click.echo(f"Initialized empty tape in {os.path.abspath(target)}", err=True)
    else:
        click.echo(f"{os.path.abspath(target)} is already a tape; nothing changed", err=True)


def _read_stdin_text() -> str:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        from .errors import InvalidInput

        raise InvalidInput(f"stdin is not valid UTF-8 (byte {e.start}); convert it to UTF-8 first") from None


def _parse_json(text: str, what: str):
    from .errors import InvalidInput

    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidInput(f"{what} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); use --text for plain text") from None
    except RecursionError:
        raise InvalidInput(f"{what} is nested too deeply") from None


@main.command()
@click.argument("kind")
@click.argument("payload", required=False)
@session_option
@click.option("--meta", "metas", multiple=True, metavar="K=V", help="Add a meta field (string value); repeatable.")
@click.option("--delta", metavar="JSON", help="State change as a JSON merge patch.")
@click.option("--text", "as_text", is_flag=True, help="Take PAYLOAD (or stdin) as raw text: {\"content\": TEXT}.")
@click.option("--time", "time_", metavar="RFC3339", help="Entry time (default: now).")
@click.pass_context
def append(ctx, kind, payload, session, metas, delta, as_text, time_):
    """Append an entry of KIND and print its hash.

    KIND is one of system, user, assistant, streaming, tool_call (tool-call),
    tool_result (tool-result), anchor, error. PAYLOAD is JSON; without it, or
    with -, it is read from stdin (use stdin for payloads over 128 KiB).

    \b
    Examples:
      ctape append user '{"content": "fix the tests"}' -s chat
      ctape append tool-call '{"call_id": "c1", "name": "bash", "arguments": {"cmd": "pytest"}}' -s chat
      pytest 2>&1 | ctape append tool-result --text -s chat --meta call_id=c1
      ctape append user --text 'hello' -s chat --delta '{"cwd": "/repo"}'
    """
    from .errors import InvalidInput
    from .models import EntryKind

    name = need_session(session)
    kind_value = EntryKind.parse(kind).value
    meta = {}
    for m in metas:
        k, sep, v = m.partition("=")
        if not sep or not k:
            raise InvalidInput(f"--meta takes KEY=VALUE, got {m!r}")
        meta[k] = v
    text = _read_stdin_text() if payload in (None, "-") else payload
    if as_text:
        value = {"content": text}
        if kind_value == "tool_result" and "call_id" in meta:
            value = {"call_id": meta["call_id"], "output": text}
    else:
        value = _parse_json(text, "payload")
    delta_value = _parse_json(delta, "--delta") if delta is not None else None
    tape = open_tape(ctx)
    e = tape.session(name).append(kind_value, value, meta=meta, delta=delta_value, time=time_)
    click.echo(e.hash)


@main.command()
@click.argument("name")
@session_option
@click.pass_context
def anchor(ctx, name, session):
    """Append an anchor entry {"name": NAME}: a milestone to return to.

    \b
    Examples:
      ctape anchor tests-green -s chat
      ctape log --kind anchor -s chat
    """
    e = open_tape(ctx).session(need_session(session)).append("anchor", {"name": name})
    click.echo(e.hash)


@main.command()
@session_option
@click.option("--interval", default=0.5, show_default=True, help="Seconds between flushes to disk.")
@click.pass_context
def stream(ctx, session, interval):
    """Record an assistant message from stdin as it arrives.

    At EOF the message is appended as `assistant` and its hash printed. If the
    process is killed, the text received up to the last flush survives and
    `ctape recover` (or the next append) records it as one `streaming` entry.

    \b
    Examples:
      my-llm-client | ctape stream -s chat
    """
    from .stream import run_cli_stream

    e = run_cli_stream(open_tape(ctx).session(need_session(session)), interval)
    if e is not None:
        click.echo(e.hash)


@main.command()
@click.argument("ref", required=False)
@session_option
@click.option("-n", "limit", type=int, help="Show at most N entries.")
@click.option("--kind", "kinds", multiple=True, help="Only entries of this kind; repeatable.")
@click.option("--oneline", is_flag=True, help="One line per entry.")
@click.option("--graph", is_flag=True, help="Draw every branch of the session as a graph.")
@json_option
@pager_option
@click.pass_context
def log(ctx, ref, session, limit, kinds, oneline, graph, as_json, no_pager):
    """Show entries newest first from REF (default: the session's HEAD).

    \b
    Examples:
      ctape log -s chat -n 20
      ctape log chat/alt --oneline
      ctape log -s chat --kind anchor
      ctape log -s chat --graph
    """
    from . import render

    tape = open_tape(ctx)
    name = _session_for(tape, ref, session)
    if limit is not None and limit < 0:
        raise click.BadParameter("-n must be 0 or more")
    if graph and not as_json:
        echo_lines(render.graph(tape, name, ref, limit, kinds), not no_pager)
        return
    entries = tape.session(name).log(ref, limit=limit, kinds=kinds) if name else _log_ref(tape, ref, limit, kinds)
    if as_json:
        for e in entries:
            emit_json(e.to_json())
        return
    deco = render.decorations(tape, name) if name else {}
    lines = [render.oneline(e, deco) if oneline else render.full(e, deco) for e in entries]
    echo_lines(lines, not no_pager)


def _session_for(tape, ref, session):
    """The session a log-like command reads: -s, else the session a REF names."""
    if session:
        return need_session(session)
    if ref:
        base = ref.split("~")[0].split("^")[0].split("@{")[0]
        s = base.split("/")[0]
        from .models import NAME_RE

        if NAME_RE.fullmatch(s) and tape._session_exists(s):
            return s
        return None
    raise click.UsageError("give a REF or a session (-s NAME or $CTAPE_SESSION)")


def _log_ref(tape, ref, limit, kinds):
    from .tape import check_kind

    want = {check_kind(k) for k in kinds}
    h = tape.resolve(ref)
    n = 0
    while h is not None and (limit is None or n < limit):
        e = tape.read_entry(h)
        if not want or e.kind in want:
            yield e
            n += 1
        h = e.parent


@main.command()
@click.argument("ref")
@session_option
@json_option
@pager_option
@click.pass_context
def show(ctx, ref, session, as_json, no_pager):
    """Show one entry with its payload.

    \b
    Examples:
      ctape show chat
      ctape show 1a2b3c4d
      ctape show chat/main~2 --json
    """
    from . import render

    tape = open_tape(ctx)
    e = tape.get(ref, session)
    if as_json:
        emit_json(e.to_json())
    else:
        echo_lines(render.show(e), not no_pager)


@main.command()
@click.argument("ref")
@click.option("-b", "new_branch", metavar="NAME", help="Create branch NAME at REF and attach HEAD to it.")
@session_option
@click.pass_context
def checkout(ctx, ref, new_branch, session):
    """Move the session's HEAD to REF (attach to a branch, or detach at an entry).

    Later appends continue from there; nothing is lost or copied.

    \b
    Examples:
      ctape checkout alt -s chat             # attach to chat/alt
      ctape checkout chat~3 -s chat          # detached at an older entry
      ctape checkout -b retry chat~3 -s chat # fork a branch there
    """
    tape = open_tape(ctx)
    name = need_session(session)
    st = tape.session(name).checkout(ref, new_branch)
    h = st.head_hash
    if st.branch:
        click.echo(f"HEAD is now on branch {st.branch} at {h[:12] if h else '(no entries)'}", err=True)
    else:
        click.echo(f"HEAD is now detached at {h[:12] if h else '?'}", err=True)


@main.command()
@click.argument("name", required=False)
@click.argument("ref", required=False)
@click.option("-d", "--delete", "delete", metavar="NAME", help="Delete branch NAME (its entries stay on the tape).")
@session_option
@json_option
@click.pass_context
def branch(ctx, name, ref, delete, session, as_json):
    """List branches, create NAME at REF (default HEAD), or delete one.

    \b
    Examples:
      ctape branch -s chat
      ctape branch experiment chat~2 -s chat
      ctape branch -d experiment -s chat
    """
    tape = open_tape(ctx)
    s = tape.session(need_session(session))
    if delete is not None:
        tip = s.delete_branch(delete)
        click.echo(f"Deleted branch {delete} (was {tip[:12]})", err=True)
        return
    if name is not None:
        h = s.branch(name, ref)
        click.echo(f"Created branch {name} at {h[:12]}", err=True)
        return
    rows = s.branches()
    if as_json:
        for b in rows:
            emit_json(b)
        return
    for b in rows:
        mark = "*" if b["current"] else " "
        note = f"  (conflict: the other tip of {b['conflict_of']})" if "conflict_of" in b else ""
        click.echo(f"{mark} {b['name']:<24} {b['hash'][:12]}{note}")
    st = s.refs()
    if st.branch is None and st.head_hash:
        click.echo(f"* (HEAD detached at {st.head_hash[:12]})")


@main.command()
@click.argument("session_arg", metavar="[SESSION]", required=False)
@session_option
@click.option("-n", "limit", type=int, default=-1, help="Show at most N lines.")
@json_option
@pager_option
@click.pass_context
def reflog(ctx, session_arg, session, limit, as_json, no_pager):
    """Every move of the session's HEAD and branches, newest first.

    HEAD positions are numbered for SESSION@{N}.

    \b
    Examples:
      ctape reflog chat
      ctape checkout chat@{1} -s chat
    """
    from . import render

    name = need_session(session_arg or session)
    tape = open_tape(ctx)
    rows = tape.session(name).reflog()
    if limit is not None and limit >= 0:
        rows = rows[:limit]
    if as_json:
        for r in rows:
            emit_json(r)
        return
    echo_lines([render.reflog_line(r, name) for r in rows], not no_pager)


@main.command()
@json_option
@click.pass_context
def sessions(ctx, as_json):
    """List every session: HEAD, branch, entry count, last activity.

    \b
    Examples:
      ctape sessions
      ctape sessions --json
    """
    rows = open_tape(ctx).sessions()
    for r in rows:
        if as_json:
            emit_json(r)
        else:
            head = r["head"][:12] if r["head"] else "-" * 12
            click.echo(f"{r['session']:<24} {head}  {r['branch'] or '(detached)':<16} {r['entries']:>7}  {r['last_time'] or ''}")


@main.command()
@session_option
@json_option
@click.pass_context
def status(ctx, session, as_json):
    """HEAD, branch, last entry, pending tool calls, interrupted stream, last error.

    \b
    Examples:
      ctape status -s chat
      ctape status -s chat --json
    """
    from . import render

    st = open_tape(ctx).session(need_session(session)).status()
    if as_json:
        emit_json(st)
    else:
        click.echo("\n".join(render.status(st)))


@main.command()
@session_option
@click.pass_context
def recover(ctx, session):
    """Record an interrupted stream as one `streaming` entry; print its hash.

    \b
    Examples:
      ctape recover -s chat
    """
    entries = open_tape(ctx).session(need_session(session)).recover()
    for e in entries:
        click.echo(e.hash)
    if not entries:
        click.echo("nothing to recover", err=True)


@main.command()
@click.argument("ref", required=False)
@session_option
@click.option("--policy", "policies", multiple=True, type=click.Choice(["last-turn", "exclude-errors", "dedupe-tools"]), help="View policy; repeatable.")
@click.option("--format", "fmt", type=click.Choice(["openai", "anthropic", "tape"]), default="openai", show_default=True)
@click.option("--resume", type=click.Choice(["prefix", "drop"]), default="drop", show_default=True, help="What to do with an interrupted stream.")
@click.option("--max-tokens", type=click.IntRange(min=1), help="Drop the oldest non-system messages to fit this estimate.")
@click.pass_context
def context(ctx, ref, session, policies, fmt, resume, max_tokens):
    """Print the prompt built from the path root -> REF as JSON.

    Pending tool calls get a fixed "interrupted" result, so the prompt is
    valid for APIs that reject unanswered calls.

    \b
    Examples:
      ctape context -s chat --format anthropic
      ctape context -s chat --policy last-turn --policy dedupe-tools --max-tokens 8000
      ctape context -s chat --resume prefix
    """
    from .context import build_context

    tape = open_tape(ctx)
    name = _session_for(tape, ref, session)
    s = tape.session(name) if name else None
    out = build_context(s, ref, list(policies), fmt, resume, max_tokens, tape=tape)
    click.echo(json.dumps(out, ensure_ascii=False, indent=2))


@main.command()
@click.argument("ref", required=False)
@session_option
@click.pass_context
def state(ctx, ref, session):
    """Print the state at REF: every delta root -> REF applied in order.

    \b
    Examples:
      ctape state -s chat
      ctape state chat~10
    """
    tape = open_tape(ctx)
    name = _session_for(tape, ref, session)
    if name is None:
        h = tape.resolve(ref)
        click.echo(json.dumps(tape.derived(h)["state"], ensure_ascii=False, indent=2))
        return
    click.echo(json.dumps(tape.session(name).state(ref), ensure_ascii=False, indent=2))


@main.command()
@click.option("--expire", default="90d", show_default=True, help="Ref-log records and anchors older than this stop keeping entries alive.")
@click.option("--grace", default="14d", show_default=True, help="Never remove objects younger than this.")
@click.option("--dry-run", is_flag=True, help="Report what would be removed; change nothing.")
@json_option
@click.pass_context
def compact(ctx, expire, grace, dry_run, as_json):
    """Remove what nothing reaches, and pack small files.

    DUR is like now, 30m, 12h, 14d, 2w. `--grace now` is only for tapes nobody
    is writing to.

    \b
    Examples:
      ctape compact --dry-run
      ctape compact --expire 30d
    """
    from .compact import parse_duration

    parse_duration(expire, "--expire")
    parse_duration(grace, "--grace")
    tape = open_tape(ctx)
    progress = None
    if sys.stderr.isatty():
        progress = lambda msg: click.echo(f"\r{msg}", err=True, nl=False)  # noqa: E731
    report = tape.compact(expire=expire, grace=grace, dry_run=dry_run, progress=progress)
    if progress:
        click.echo("", err=True)
    if as_json:
        emit_json(report)
    else:
        verb = "would free" if dry_run else "freed"
        click.echo(
            f"kept {report['kept_objects']} objects ({report['kept_bytes']} bytes), "
            f"{verb} {report['freed_objects']} objects ({report['freed_bytes']} bytes); "
            f"files {report['files_before']} -> {report['files_after']}"
        )


@main.command()
@json_option
@click.pass_context
def fsck(ctx, as_json):
    """Verify every object, record and reference; exit 1 on corrupt or missing data.

    \b
    Examples:
      ctape fsck
      ctape fsck --json
    """
    report = open_tape(ctx).fsck()
    if as_json:
        emit_json(report)
    else:
        for p in report["problems"]:
            click.echo(f"{p['severity']}: {p['what']}: {p['problem']}")
        for w in report.get("warnings", []):
            click.echo(f"warning: {w['what']}: {w['problem']}", err=True)
        click.echo(f"{'ok' if report['ok'] else 'FAILED'}: checked {report['objects']} objects, {report['records']} ref records in {report['files']} files", err=True)
    if not report["ok"]:
        sys.exit(EXIT_FAIL)


@main.command(name="import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(["jsonl", "claude-code", "codex", "openai"]))
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@session_option
@click.pass_context
def import_(ctx, fmt, files, session):
    """Import transcripts: jsonl (ctape's own export), claude-code, codex, openai.

    \b
    Examples:
      ctape import claude-code ~/.claude/projects/x/SESSION.jsonl -s cc
      ctape import codex rollout-*.jsonl
      ctape import jsonl backup.jsonl
    """
    from .formats import import_files

    for line in import_files(open_tape(ctx), fmt, list(files), session, progress=sys.stderr.isatty()):
        click.echo(line, err=True)


@main.command()
@click.argument("ref")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "openai", "claude-code", "codex"]), default="jsonl", show_default=True)
@click.pass_context
def export(ctx, ref, fmt):
    """Write history to stdout: a whole SESSION, or the path root -> REF.

    \b
    Examples:
      ctape export chat > chat.jsonl
      ctape export chat/alt --format openai
    """
    from .formats import export_ref

    out = sys.stdout
    for line in export_ref(open_tape(ctx), ref, fmt):
        out.write(line)
        out.write("\n")


@main.command()
@json_option
@click.pass_context
def stats(ctx, as_json):
    """Objects, logical bytes, stored bytes, dedupe saving.

    \b
    Examples:
      ctape stats --json
    """
    st = open_tape(ctx).stats()
    if as_json:
        emit_json(st)
    else:
        for k, v in st.items():
            click.echo(f"{k:<20} {v}")


@main.command()
@click.option("--crash/--no-crash", default=True, help="Include a killed stream and its recovery.")
@click.pass_context
def demo(ctx, crash):
    """Record a realistic agent session into a fresh tape, crash it, recover it.

    Uses --dir, $CTAPE_DIR or ./.ctape (created if needed), session `demo`.

    \b
    Examples:
      ctape --dir /tmp/demo-tape demo
    """
    from .demo import run_demo

    target = ctx.find_root().obj.get("dir") or os.environ.get("CTAPE_DIR") or ".ctape"
    run_demo(target, crash=crash, echo=click.echo)


from .watch.command import watch as _watch  # noqa: E402

main.add_command(_watch)


if __name__ == "__main__":
    main()
