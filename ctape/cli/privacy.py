"""Privacy (SPEC section 18): scan for secrets, allow false positives, redact."""

from __future__ import annotations

import click

from ..model.models import plural
from ..ops.render import clean
from .base import EXIT_FAIL, _no_empty_session, decided, emit_json, json_option, main, need_session, open_tape, session_option


def _sessions(ctx, session):
    """The sessions `scan` and `redact --scan/--pattern` look at: the one given with -s, else
    every session, as `push` sends them all. $CTAPE_SESSION and `session use` do not narrow
    it: an agent's own session checked clean said nothing of the others a push then held back."""
    tape = open_tape(ctx)
    if session is None or ctx.get_parameter_source("session") is click.core.ParameterSource.ENVIRONMENT:
        return tape.session_names()
    return [need_session(ctx, session)]


@main.command()
@click.option("-s", "--session", callback=_no_empty_session,
              help="Only this session (default: every session, as `push` sends them all; $CTAPE_SESSION does not narrow it).")
@json_option
@click.option("--allow", "allow_ids", metavar="ID", multiple=True,
              help="Mark finding ID as not a secret (kept on this machine); may be given more than once.")
@click.option("--add-pattern", metavar="REGEX", help="Also look for REGEX from now on (kept on this machine).")
@click.option("--kind", default="pattern", show_default=True, help="The kind a pattern added with --add-pattern reports.")
@click.pass_context
def scan(ctx, session, as_json, allow_ids, add_pattern, kind):
    """Find likely secrets in entries: payloads, large values and meta.

    Prints one line per finding with its id, entry, JSON path, kind and a preview in
    which the secret is masked (it is never printed). Exit 1 when it finds any.
    Take them out with `ctape redact`, or mark a false positive with `--allow ID`.

    \b
    Examples:
      ctape scan
      ctape scan -s chat --json
      ctape scan --allow 5f00c873eaf013f0 --allow 0b1e5c3d9a7f2e64
      ctape scan --add-pattern 'corp-[0-9]{8}' --kind corp-ticket
    """
    from ..history.stream import is_live
    from ..ops import scan as scanmod

    tape = open_tape(ctx)
    if allow_ids or add_pattern is not None:
        if allow_ids:
            for allow_id in allow_ids:  # every id's form first: one bad id allows none (before, a repeated --allow kept the last)
                scanmod.check_finding_id(allow_id)
            for allow_id in allow_ids:
                scanmod.allow(tape, allow_id)
                click.echo(f"allowed {allow_id}")
            # an id may be allowed before its finding reaches this copy (ids are the same on
            # every copy), but a typo would leave push refusing with no clue: say so
            res = scanmod.scan(tape, None, include_allowed=True, on_missing=lambda m: None)
            have = {f.id for f in res["findings"] + res["streams"]}
            for allow_id in allow_ids:
                if allow_id not in have:
                    click.echo(f"ctape: warning: no finding of this copy has id {allow_id} now (allowed anyway, for one another copy "
                               "holds); `ctape scan` lists the findings", err=True)
        if add_pattern is not None:
            scanmod.add_pattern(tape, add_pattern, kind)
            click.echo(f"added pattern {add_pattern!r} ({kind})")
        return
    names = _sessions(ctx, session)
    result = scanmod.scan(tape, names, on_missing=lambda m: click.echo(f"ctape: warning: {m}", err=True))
    found = result["findings"] + result["streams"]
    if found:
        decided(EXIT_FAIL)
    for f in found:
        if as_json:
            emit_json(f.to_json())
        elif f.stream:
            what = "stream being written" if is_live(tape.store, f.hash) else "interrupted stream"
            click.echo(clean(f"{f.id}  {f.session}  stream {f.hash[:8]}  ({what})  {f.kind}  {f.preview}"))
        else:
            click.echo(clean(f"{f.id}  {f.session}  {f.hash[:12]}  {f.path}  {f.kind}  {f.preview}"))  # a preview of any text: no control character reaches the terminal
    if not as_json:
        n = len(found)
        allowed = f", {result['allowed']} allowed" if result["allowed"] else ""
        hint = "; `ctape redact --scan` takes them out, `ctape scan --allow ID` keeps one" if n else ""
        if result["streams"]:
            hint += f"; {scanmod.stream_advice(tape, result['streams'])}, then `ctape redact` reaches it"
        held = len({f.session for f in found})
        where = f"{held} of {len(names)}" if n and held != len(names) else f"{len(names)}"  # sessions with findings, of those scanned
        click.echo(f"{n} finding{'s' if n != 1 else ''} in {where} session{'s' if len(names) != 1 else ''}{allowed}{hint}", err=True)
    if found:
        ctx.exit(EXIT_FAIL)


@main.command()
@session_option
@json_option
@click.option("--scan", "from_scan", is_flag=True, help="Redact every finding of `ctape scan`.")
@click.option("--pattern", metavar="REGEX", help="Redact every value in which REGEX matches.")
@click.option("--path", metavar="JSONPATH", help="With ENTRY: the value to redact, like $.payload.content.")
@click.option("--kind", default=None, help="The kind the marker names (default: manual, or pattern).")
@click.argument("entry", required=False)
@click.pass_context
def redact(ctx, session, as_json, from_scan, pattern, path, kind, entry):
    """Take secret text out of the tape, keeping every hash and branch.

    Reads show `[redacted: KIND]` in its place at once, here and on every copy the
    redaction reaches (it is a record, synced like a branch deletion); each copy's next
    `compact` removes the bytes. Give exactly one of --scan, --pattern REGEX, or
    ENTRY --path JSONPATH. --scan and --pattern look at every session unless -s
    names one ($CTAPE_SESSION does not narrow them, as for `scan`). Exit 1 when
    finds in a stream's text are left: `ctape recover` makes an interrupted
    stream's text an entry (a stream still being written becomes one when its
    writer ends), which a second run redacts.

    \b
    Examples:
      ctape redact --scan
      ctape redact -s chat --pattern 'hunter2'
      ctape redact 3f2a9c --path '$.payload.arguments.cmd' -s chat
    """
    from ..errors import InvalidInput
    from ..ops import redact as red

    given = sum((from_scan, pattern is not None, entry is not None))
    if given != 1 or (entry is None) != (path is None):
        raise InvalidInput("give exactly one of --scan, --pattern REGEX, or ENTRY --path JSONPATH")
    tape = open_tape(ctx)
    streams: list = []
    if entry is not None:
        results = [red.redact_entry(tape, need_session(ctx, session), entry, path, "manual" if kind is None else kind)]
    else:
        names = _sessions(ctx, session)
        results = (red.redact_scan(tape, names, streams) if from_scan
                   else red.redact_pattern(tape, pattern, names, "pattern" if kind is None else kind, streams))
    total = 0
    for r in results:
        for item in r["redacted"]:
            total += 1
            if as_json:
                emit_json({"session": r["session"], "hash": item["object"], "path": item["path"], "kind": item["kind"]})
            else:
                click.echo(clean(f"redacted {r['session']}  {item['object'][:12]}  {item['path']}  ({item['kind']})"))
    if not as_json:
        click.echo(f"{total} value{'s' if total != 1 else ''} redacted" + ("; `ctape compact` removes the bytes from this copy" if total else ""), err=True)
    if streams:
        # scan exits 1 for them; a `redact --scan && push` must not read this as done
        from ..ops.scan import stream_advice

        click.echo(f"ctape: error: {len(streams)} {plural(len(streams), 'find', 'finds')} in the text of a stream not redacted: "
                   f"{stream_advice(tape, streams)}; then run this again", err=True)
        ctx.exit(EXIT_FAIL)
