"""Appending and reading history: append, anchor, stream, log, show, context, state."""

from __future__ import annotations

import json
import sys

import click

from .base import (
    Seconds,
    When,
    readable,
    warn_damage,
    echo_lines,
    emit_json,
    json_option,
    main,
    need_session,
    need_stdin,
    need_stdout,
    open_tape,
    pager_option,
    session_for,
    session_option,
)
from .refs import warn_ambiguous


FEW = 256  # `log -n N` up to this many: labels looked up for the entries shown only


def _read_stdin_text() -> str:
    from ..errors import InvalidInput
    from ..formats._common import max_record

    limit = max_record()  # one record, as an import reads it (docs/import.md)
    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise InvalidInput(f"stdin holds more than {limit:,} bytes, the limit for one entry; set CTAPE_MAX_RECORD to allow more")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInput(f"stdin is not valid UTF-8 (byte {e.start}); convert it to UTF-8 first") from None


def _parse_json(text: str, what: str, hint: str = "use --text for plain text"):
    from ..model.canonical import parse_json
    from ..errors import InvalidInput

    try:
        return parse_json(text)
    except json.JSONDecodeError as e:
        raise InvalidInput(f"{what} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); {hint}") from None
    except ValueError as e:
        raise InvalidInput(f"{what} cannot be stored: {e}") from None


def _meta_option(metas) -> dict:
    """append's --meta K=V options as meta: values are strings, except the one key of ctape's
    own (`ctape.`) a user may give, ctape.hidden, whose only value is true (JSON true, the
    marker importers write): "false" was a non-empty string, so it hid the entry it meant
    to show (an audit found it)."""
    from ..errors import InvalidInput
    from ..model.models import HIDDEN

    meta: dict = {}
    for m in metas:
        k, sep, v = m.partition("=")
        if not sep or not k:
            raise InvalidInput(f"--meta takes KEY=VALUE, got {m!r}")
        if k in meta:
            raise InvalidInput(f"--meta {k} is given twice; give each key once")
        if k == HIDDEN:
            if v != "true":
                raise InvalidInput(f"--meta {HIDDEN} takes only true (it hides the entry from log and context); "
                                   "leave it out to keep the entry shown")
            meta[k] = True
        elif k.startswith("ctape."):
            raise InvalidInput(f"--meta {k[:60]}: keys starting with ctape. are ctape's own, set by its importers; "
                               f"give another key name, or {HIDDEN}=true to hide the entry")
        else:
            meta[k] = v
    return meta


@main.command()
@click.argument("kind")
@click.argument("payload", required=False)
@session_option
@click.option("--meta", "metas", multiple=True, metavar="K=V", help="Add a meta field (string value); repeatable. Keys starting with ctape. are ctape's own: only ctape.hidden=true is taken (it hides the entry as bookkeeping).")
@click.option("--delta", metavar="JSON", help="State change as a JSON merge patch.")
@click.option("--text", "as_text", is_flag=True, help="Take PAYLOAD (or stdin) as raw text: {\"content\": TEXT} (a tool_result's output with --meta call_id=ID; an error's message).")
@click.option("--time", "time_", metavar="RFC3339", help="Entry time (default: now); one without an offset (2024-01-01T09:00:00, 2024-01-01) is UTC, not local time.")
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
    from ..model.models import EntryKind

    name = need_session(ctx, session, exists=False)
    kind_value = EntryKind.parse(kind).value
    meta = _meta_option(metas)
    if payload in (None, "-"):
        need_stdin("give PAYLOAD as an argument, or pipe it in")
    text = _read_stdin_text() if payload in (None, "-") else payload
    if as_text:
        # {"content": TEXT} (SPEC 5); for the kinds whose text lives elsewhere, the field
        # their payload convention gives it (SPEC 3), which {"content"} would leave out
        value = {"content": text}
        if kind_value == "tool_result" and "call_id" not in meta:
            from ..errors import InvalidInput

            raise InvalidInput("a tool_result answers a call: give its id with --meta call_id=ID "
                               "(`ctape status` lists the pending calls)")
        if kind_value == "tool_result":
            value = {"call_id": meta["call_id"], "output": text}
        elif kind_value == "error":
            value = {"message": text, **({"call_id": meta["call_id"]} if "call_id" in meta else {})}
    elif not text.strip():
        from ..errors import InvalidInput

        # (it said "payload is not valid JSON (Expecting value at line 1 column 1)": an audit)
        raise InvalidInput("no payload given: give it as an argument (JSON) or on stdin, or plain text with --text")
    else:
        value = _parse_json(text, "payload")
    # --text is about the payload: the state change is always JSON (a merge patch)
    delta_hint = "--text is for the payload only; give the keys to set as a JSON object, quoted for the shell: --delta '{\"cwd\": \"/repo\"}'"
    delta_value = _parse_json(delta, "--delta", delta_hint) if delta is not None else None
    if delta_value is not None and not isinstance(delta_value, dict):
        # a merge patch that is not an object replaces the whole state (RFC 7396): kept, as
        # the API keeps it, but a typo for '{"key": ...}' would wipe the state unsaid
        click.echo(f"ctape: warning: --delta {delta.strip()[:40]!r} is not a JSON object: it replaces the whole state "
                   "(a merge patch); to set keys, give an object: --delta '{\"key\": value}'", err=True)
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
    from ..model.models import check_name

    check_name(name, "anchor name")  # a name a REF can give back (checkout NAME, log NAME)
    e = open_tape(ctx).session(need_session(ctx, session, exists=False)).append("anchor", {"name": name})
    click.echo(e.hash)


@main.command()
@session_option
@click.option("--interval", type=Seconds(0.01, 86400), metavar="SECONDS", default=0.5, show_default=True, help="Seconds between flushes to disk.")
@click.pass_context
def stream(ctx, session, interval):
    """Record an assistant message from stdin as it arrives.

    At EOF the message is appended as `assistant` and its hash printed. If the
    process is killed, the text received up to the last flush survives and
    `ctape recover` (or the next write to the session: an append, an import, a
    checkout, a branch or a tag) records it as one `streaming` entry where
    HEAD was, first: a write that does says so in a note (HEAD~1 and a tag
    at HEAD then count from that entry). Input that is not UTF-8 is refused (exit 2) and records nothing, unless a
    flush had already put part of the message on disk: then the text before
    the bad byte is kept as a `streaming` entry, as after a kill.

    \b
    Examples:
      my-llm-client | ctape stream -s chat
    """
    from ..history.stream import run_cli_stream

    need_stdin("pipe the assistant message in: my-llm-client | ctape stream -s NAME")
    e = run_cli_stream(open_tape(ctx).session(need_session(ctx, session, exists=False)), interval)
    if e is not None:
        click.echo(e.hash)


@main.command()
@click.argument("refs", metavar="[REF...]", nargs=-1)
@session_option
@click.option("-n", "limit", type=click.IntRange(min=0), help="Show at most N entries.")
@click.option("--kind", "kinds", multiple=True, help="Only entries of this kind; repeatable.")
@click.option("--grep", metavar="TEXT", help="Only entries whose payload text holds TEXT (any case).")
@click.option("--since", type=When(), metavar="T", help="Only entries at or after T: RFC 3339, or a duration back from now (2h, 3d). "
              "As git's, the walk stops after 1,000 entries in a row older than T (entries from a machine whose clock was "
              "behind may hide newer ones below them; `ctape search --since` reads every entry).")
@click.option("--until", type=When(), metavar="T", help="Only entries at or before T (as --since).")
@click.option("--reverse", is_flag=True, help="Oldest first (of the entries -n selects).")
@click.option("--all", "all_", is_flag=True, help="From every branch of the session (conflict branches too) and HEAD.")
@click.option("--hidden", is_flag=True, help="Include hidden bookkeeping entries (import records, snapshots).")
@click.option("--oneline", is_flag=True, help="One line per entry.")
@click.option("--graph", is_flag=True, help="Draw the history as a graph, each line of history together (as git); with --all, every branch, HEAD's first.")
@json_option
@pager_option
@click.pass_context
def log(ctx, refs, session, limit, kinds, grep, since, until, reverse, all_, hidden, oneline, graph, as_json, no_pager):
    """Show entries newest first from REF (default: the session's HEAD).

    Several REFs (or --all) show everything reachable from any of them, newest
    first, each entry once. Entries an importer or integration marked hidden are
    left out unless --hidden; a branch, tag or HEAD on one is shown on the next
    entry below it, with how far up it is ("HEAD -> main +2 hidden").

    \b
    Examples:
      ctape log -n 20
      ctape log chat/alt --oneline
      ctape log --kind anchor
      ctape log --grep pytest --since 2h
      ctape log --all --graph
    """
    from ..ops import render
    from ..history.logview import Filter, start_points, walk

    need_stdout()
    tape = open_tape(ctx)
    name = session_for(ctx, refs[0] if refs else None, session, also=refs[1:])
    flt = Filter.make(kinds, grep, since, until, hidden)
    for r in refs:
        warn_ambiguous(tape, r, name)
    if all_ and name is None:
        raise click.UsageError("--all needs a session: pass -s NAME")
    tips = start_points(tape, name, refs, every_branch=all_)
    if graph and not as_json:
        if reverse:
            raise click.UsageError("--graph and --reverse cannot be combined")
        shown = readable(render.graph(tape, name, tips, limit, flt))
        echo_lines(shown, not no_pager)
    else:
        above: dict = {}  # labels on hidden entries left out are shown on the next entry below
        shown = entries = readable(walk(tape, tips, flt, limit, above))
        if reverse or (limit is not None and limit <= FEW):
            entries = list(entries)
        if reverse:
            entries.reverse()
        if as_json:
            for e in entries:
                emit_json(e.to_json())
        else:
            # a few entries: only the refs at them are looked up (a session may have 300,000 branches)
            few = [e.hash for e in entries] + [h for over in above.values() for h, _ in over] if isinstance(entries, list) and len(entries) <= FEW else None
            deco = render.decorations(tape, name, few) if name else {}
            labelled = render.carry_labels(entries, deco, above)
            echo_lines((render.oneline(e, deco) if oneline else render.full(e, deco) for e in labelled), not no_pager)
    warn_damage(tape, name)  # after the listing: reading it may be what found the damage
    if shown.damaged:
        ctx.exit(1)  # what reads back is printed; a script must not take it for the whole history


@main.command()
@click.argument("ref")
@session_option
@click.option("--meta", "with_meta", is_flag=True, help="Also print the importer's raw source record kept in meta.")
@click.option("--hidden", is_flag=True, help="Mark the entry [hidden] if an importer or integration hid it.")
@json_option
@pager_option
@click.pass_context
def show(ctx, ref, session, with_meta, hidden, as_json, no_pager):
    """Show one entry: its payload readably, then its delta and meta.

    Text is shown as text, a tool call as its name and arguments, a tool
    result's output as text. The record an importer kept (meta keys
    claude-code, codex, openai) is shown only with --meta or --json.

    \b
    Examples:
      ctape show chat
      ctape show 1a2b3c4d --meta
      ctape show chat/main~2 --json
    """
    from ..ops import render

    need_stdout()
    tape = open_tape(ctx)
    name = session_for(ctx, ref, session)
    warn_ambiguous(tape, ref, name)
    e = tape.get(ref, name)
    if as_json:
        emit_json(e.to_json())
    else:
        echo_lines(render.show(e, meta=with_meta, hidden=hidden), not no_pager)
    warn_damage(tape, name)


@main.command()
@click.argument("ref", required=False)
@session_option
@click.option("--policy", "policies", multiple=True, type=click.Choice(["last-turn", "exclude-errors", "dedupe-tools", "whole-tape"]), help="View policy; repeatable. whole-tape: go back past an imported agent's compaction.")
@click.option("--format", "fmt", type=click.Choice(["openai", "anthropic", "tape"]), default="openai", show_default=True)
@click.option("--resume", type=click.Choice(["prefix", "drop"]), default="drop", show_default=True, help="What to do with an interrupted stream.")
@click.option("--max-tokens", type=click.IntRange(min=1), help="Drop the oldest non-system messages to fit this estimate.")
@click.pass_context
def context(ctx, ref, session, policies, fmt, resume, max_tokens):
    """Print the prompt built from the path root -> REF as JSON.

    Pending tool calls get a fixed "interrupted" result, so the prompt is
    valid for APIs that reject unanswered calls. An imported session whose
    agent compacted its history starts where the agent's next prompt did
    (the summary); --policy whole-tape shows the whole tape instead.

    \b
    Examples:
      ctape context -s chat --format anthropic
      ctape context -s chat --policy last-turn --policy dedupe-tools --max-tokens 8000
      ctape context -s chat --resume prefix
    """
    from ..ops.context import build_context

    need_stdout()
    tape = open_tape(ctx)
    name = session_for(ctx, ref, session)
    warn_ambiguous(tape, ref, name)
    s = tape.session(name) if name else None
    out = build_context(s, ref, list(policies), fmt, resume, max_tokens, tape=tape)
    click.echo(json.dumps(out, ensure_ascii=False, indent=2))
    warn_damage(tape, name)


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
    need_stdout()
    tape = open_tape(ctx)
    name = session_for(ctx, ref, session)
    warn_ambiguous(tape, ref, name)
    if name is None:
        h = tape.resolve(ref)
        click.echo(json.dumps(tape.derived(h)["state"], ensure_ascii=False, indent=2))
        return
    click.echo(json.dumps(tape.session(name).state(ref), ensure_ascii=False, indent=2))
    warn_damage(tape, name)
