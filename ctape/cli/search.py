"""Finding and comparing: search, diff, usage."""

from __future__ import annotations

import click

from .base import When, emit_json, json_option, main, need_session, open_tape, session_for, session_option, warn_tape_damage

def _safe(text: str) -> str:
    """Text for a terminal: control characters and bidirectional overrides shown as
    escapes, never passed through (the same rule as log and show: ops/render.py)."""
    from ..ops.render import clean

    return clean(text, keep_newlines=True)


@main.command()
@click.argument("query", nargs=-1, required=True)
@session_option
@click.option("--kind", "kinds", multiple=True, metavar="K", help="Only entries of kind K; repeatable.")
@click.option("--since", type=When(), metavar="T", help="Only entries at or after T (RFC 3339, or a duration back from now: 2h, 3d).")
@click.option("--until", type=When(), metavar="T", help="Only entries at or before T.")
@click.option("-n", "limit", type=click.IntRange(min=0), default=20, show_default=True, help="At most N hits (0: all).")
@click.option("--hidden", is_flag=True, help="Include entries an importer marked hidden (bookkeeping).")
@json_option
@click.pass_context
def search(ctx, query, session, kinds, since, until, limit, hidden, as_json):
    """Full-text search of every entry's payload, best match first.

    The words of QUERY are ANDed; "a phrase" in quotes matches those words in a row,
    literally: hyphens, underscores, dots and slashes in it must be there too (quote it
    for the shell as well: '"combined-transcript-link"'). Case and accents do not
    matter, but matches written exactly as typed come first, then those in another case,
    then the same words with other punctuation (--json says which: "match"). Tool
    outputs and large values are searched too, each entry's first 2 MiB of text (what
    lies past that in a larger one is not found). Without -s, every session and branch is
    searched. The search cache is brought up to date first (the first search of a large
    tape reads it all once). A query holds at most 64 different words and phrases (a
    repeat counts once) and 16,384 characters.

    \b
    Examples:
      ctape search pytest failed
      ctape search '"connection refused"' --kind tool_result --since 3d
      ctape search '"./scripts/build.sh"'
      ctape search session_nav -s chat -n 5 --json
    """
    from ..history.logview import time_window

    time_window(since, until)  # refused when they read the other way round
    tape = open_tape(ctx)
    name = need_session(ctx, session) if session else None  # without -s: every session
    query = " ".join(query)

    def progress(msg):
        click.echo(msg, err=True)

    hits = tape.search(query, name, kinds, since, until, limit or None, hidden, progress=progress)
    for h in hits:
        if as_json:
            emit_json(h.to_json())
        else:
            click.echo(f"{h.hash[:12]}  {h.session or '-'}  {h.kind}  {h.time[:19]}Z  {_safe(h.snippet)}")
    if not hits and not as_json:
        click.echo("no matches", err=True)
    warn_tape_damage(tape, name)


@main.command()
@click.argument("ref1")
@click.argument("ref2")
@session_option
@click.option("--stat", is_flag=True, help="Only count each side: its entries by kind and its bytes (reads every entry of both sides).")
@click.option("-n", "limit", type=click.IntRange(min=0), default=10, show_default=True, help="List at most N entries of each side, oldest first (0: all).")
@json_option
@click.pass_context
def diff(ctx, ref1, ref2, session, stat, limit, as_json):
    """Where two histories part: their common base and the entries after it on each side.

    Prints the common base (or says there is none), each side's entries after it with
    their kinds (oldest first, the first N), then the first diverging pair -- the first
    entry after the base on each side -- as a unified diff of their payloads. --stat
    prints, like `git diff --stat`, each side's entries by kind and bytes instead.
    --json lists every entry of both sides (`left`, `right`, oldest first) with their
    kinds; with --stat it adds the counts.

    \b
    Examples:
      ctape diff main alt -s chat
      ctape diff main alt -s chat --stat
      ctape diff chat~3 chat --json
      ctape diff chat/main other/main -n 0
    """
    from ..ops.diff import diff as diff_of, payload_diff

    tape = open_tape(ctx)
    name = session_for(ctx, ref1, session, also=(ref2,))
    d = diff_of(tape, ref1, ref2, name, limit=None if as_json or limit == 0 else limit, stat=stat)
    if as_json:
        emit_json(d.to_json())
        return
    click.echo(_base_line(tape, d))
    if stat:
        _stat_lines(((ref1, d.left_stat), (ref2, d.right_stat)), d.base is not None)
        return
    sides = ((ref1, d.left, d.left_kinds, d.left_count, d.left_ref), (ref2, d.right, d.right_kinds, d.right_count, d.right_ref))
    width = max((len(k) for k in d.left_kinds + d.right_kinds), default=0)
    for ref, hashes, kinds, count, tip in sides:
        click.echo(f"{_safe(ref)}: {_count_text(count, d.base is not None)}")
        for h, kind in zip(hashes, kinds):
            click.echo(f"  {h[:12]}  {kind.ljust(width)}  {_safe(summary_of(tape, h))}")
        if count > len(hashes):
            click.echo(f"  ... {count - len(hashes):,} more, up to {tip[:12]} (-n 0 lists them all)")
    pair = d.first_pair
    if pair is None or d.base is None:  # one side is the base, or two unrelated histories
        return
    click.echo("")
    click.echo(f"first diverging pair: {pair[0][:12]} ({_safe(ref1)}) and {pair[1][:12]} ({_safe(ref2)})")
    for line in payload_diff(tape, pair[0], pair[1], labels=(ref1, ref2)):
        click.echo(_safe(line))


def _base_line(tape, d) -> str:
    if d.base is None:
        return "no common base: the two histories share no entry"
    e = tape.read_entry(d.base)
    return f"common base {d.base[:12]} (seq {e.seq:,})  {e.kind}  {_safe(summary_of(tape, d.base))}"


def _entries(count: int) -> str:
    return f"{count:,} entr{'y' if count == 1 else 'ies'}"


def _count_text(count: int, based: bool) -> str:
    n = _entries(count)
    if not based:
        return f"{n} (its whole history: no common base)"
    return f"{n} after the base" if count else "nothing after the base (it is the base)"


def _stat_lines(sides, based: bool) -> None:
    """Like `git diff --stat`: a line per side, then the totals."""
    rows = []
    for ref, st in sides:
        kinds = ", ".join(f"{k} {n:,}" for k, n in st["kinds"].items())
        rows.append((_safe(ref), _entries(st["entries"]), f"{st['bytes']:,} bytes", kinds))
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    for ref, n, b, kinds in rows:
        click.echo(f" {ref.ljust(w[0])} | {n.rjust(w[1])}  {b.rjust(w[2])}" + (f"  ({kinds})" if kinds else ""))
    entries, size = sum(st["entries"] for _, st in sides), sum(st["bytes"] for _, st in sides)
    click.echo(f" 2 sides, {_entries(entries)}, {size:,} bytes {'after the base' if based else '(no common base)'}")


def summary_of(tape, h: str) -> str:
    from ..errors import CtapeError, LostToDamage
    from ..ops.render import summary

    try:
        return summary(tape.read_entry(h))
    except CtapeError as e:
        return "(not readable here: " + ("lost to damage, see `ctape fsck`" if isinstance(e, LostToDamage) else
                                         "damaged, see `ctape fsck`" if tape.store.lost_to_damage(h) else "not synced yet?") + ")"


@main.command()
@click.option("--by", type=click.Choice(["session", "model", "day"]), default="session", show_default=True, help="Group the figures.")
@click.option("--since", type=When(), metavar="T", help="Only usage recorded at or after T (RFC 3339, or 2h, 3d, 2w back from now).")
@click.option("--prices", metavar="FILE", envvar="CTAPE_PRICES", help="JSON price table overriding the shipped one (default: $CTAPE_PRICES).")
@json_option
@click.pass_context
def usage(ctx, by, since, prices, as_json):
    """Tokens (input, output, cached) and estimated cost, as the agents recorded them.

    Several rows end with a TOTAL row. `ctape serve` shows the same figures.

    Read from what importers and integrations keep in each entry's meta (Claude Code,
    Codex, Gemini CLI, pydantic-ai, or any `usage` object). Cost is an estimate from list prices
    per million tokens (see docs/usage.md); models without a price show their tokens
    and no cost.

    \b
    Examples:
      ctape usage
      ctape usage --by model --since 7d
      ctape usage --by day --json
      ctape usage --prices my-prices.json
    """
    tape = open_tape(ctx)
    rows = tape.usage(by=by, since=since, prices=prices)
    warn_tape_damage(tape)
    if as_json:
        for r in rows:
            emit_json(r)
        return
    if not rows:
        click.echo("no token usage recorded" + (f" since {since} (`ctape usage` without --since shows all of it)"
                                                if since is not None and tape.usage(by=by, prices=prices) else ""), err=True)
        return
    from ..ops.usage import cost_text, total

    if len(rows) > 1:
        rows = rows + [total(rows, by)]
    head = (by.upper(), "INPUT", "OUTPUT", "CACHED", "CACHE-WRITE", "COST")
    table = [head] + [
        (_safe(str(r[by])), f"{r['input']:,}", f"{r['output']:,}", f"{r['cached']:,}", f"{r['cache_write']:,}", cost_text(r))
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        click.echo("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)).rstrip())
    if any(r["unpriced_tokens"] for r in rows):
        click.echo("cost '-': no price for the model ('*': for some of them); add one with --prices FILE", err=True)
