"""Appending and reading history: append, anchor, stream, log, show, context, state."""

from __future__ import annotations

import json
import sys

import click

from .base import (
    echo_lines,
    emit_json,
    json_option,
    main,
    need_session,
    open_tape,
    pager_option,
    session_for,
    session_option,
)


def _read_stdin_text() -> str:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        from ..errors import InvalidInput

        raise InvalidInput(f"stdin is not valid UTF-8 (byte {e.start}); convert it to UTF-8 first") from None


def _parse_json(text: str, what: str):
    from ..errors import InvalidInput

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
    from ..errors import InvalidInput
    from ..models import EntryKind

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
    from ..stream import run_cli_stream

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
    from .. import render

    tape = open_tape(ctx)
    name = session_for(tape, ref, session)
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


def _log_ref(tape, ref, limit, kinds):
    from ..tape import check_kind

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
    from .. import render

    tape = open_tape(ctx)
    e = tape.get(ref, session)
    if as_json:
        emit_json(e.to_json())
    else:
        echo_lines(render.show(e), not no_pager)


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
    from ..context import build_context

    tape = open_tape(ctx)
    name = session_for(tape, ref, session)
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
    name = session_for(tape, ref, session)
    if name is None:
        h = tape.resolve(ref)
        click.echo(json.dumps(tape.derived(h)["state"], ensure_ascii=False, indent=2))
        return
    click.echo(json.dumps(tape.session(name).state(ref), ensure_ascii=False, indent=2))
