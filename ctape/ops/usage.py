"""Token counts and estimated cost, from what importers and integrations recorded.

Nothing here is measured: ctape reads the usage the agents themselves wrote, kept in
each entry's meta by the importer or integration that wrote it:

- Claude Code (`meta["claude-code"]`, the raw line): `message.usage` and `message.model`
  of assistant lines. One response is split into one line per content block, each
  carrying the usage so far: a response counts once (by `message.id`), at its largest.
- Codex (`meta["codex"]`): `token_count` events. They repeat identical snapshots; each
  distinct cumulative total counts its `last_token_usage` once. The model is the one the
  last `turn_context` before it named.
- Gemini CLI (`meta["gemini"]`): a `gemini` message's `tokens` and `model`. A message is
  written again when it changes: it counts once (by its `id`), at its largest. `input`
  (promptTokenCount) holds the cached tokens and `output` (candidatesTokenCount) leaves
  out the thoughts: cached is moved out of input, thoughts and `tool`
  (toolUsePromptTokenCount) are added to output and input.
- pydantic-ai (`meta["pydantic_ai.message"]`): a response's `usage` and `model_name`.
- Anything else that keeps a `usage` object (and a `model`) at the top of its meta or
  one level down: OpenAI-style `prompt_tokens` / `completion_tokens` included.

Counts: `input` is input not read from a cache, `cached` is input read from a cache,
`cache_write` is input written to Anthropic's prompt cache, `output` includes reasoning.
OpenAI counts cached tokens inside its input; they are moved out so that every source
adds up the same way.

Cost: per million tokens from a price table (ctape/prices.json: its `_about` says where
the prices come from and when), which a JSON file of the same shape overrides entry by
entry (`prices=` / `--prices FILE`, or $CTAPE_PRICES). A model matches a table name
exactly or followed by a date suffix (`claude-sonnet-4-20250514`); an unknown model's
tokens are counted and its cost is left out (`unpriced_tokens`).

An entry reachable from several sessions counts once: for the session whose files hold it
(the one it was appended to) when that session reaches it, else for the first by name.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from importlib import resources
from typing import Any, Iterator, Optional

from ..model.errors import CorruptObject, CtapeError, CtapeWarning, InvalidInput, UnsafePath
from ..model.models import time_seconds
from ..model.timespec import parse_when

GROUPS = ("session", "model", "day")
FIELDS = ("input", "output", "cached", "cache_write")
_DATE_SUFFIX = re.compile(r"-20\d\d")


# -- prices --------------------------------------------------------------------------------


PRICE_FIELDS = ("input", "output", "cached", "cache_write")  # dollars per million tokens of each kind


def load_prices(path: Optional[str] = None) -> dict[str, dict]:
    """The shipped table, overridden by the file at `path` (else $CTAPE_PRICES) if any."""
    table = json.loads(resources.files("ctape").joinpath("prices.json").read_text(encoding="utf-8"))
    if path is not None and not isinstance(path, (str, os.PathLike)):
        # open() takes an int for a descriptor: it would read and close one of the process's
        raise InvalidInput(f"prices must be the path of a price table (docs/usage.md), not {type(path).__name__}")
    path = path or os.environ.get("CTAPE_PRICES")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                extra = json.load(f)
        except OSError as e:
            raise InvalidInput(f"cannot read the price table {path}: {e.strerror}; check the path") from None
        except ValueError:
            raise InvalidInput(f"the price table {path} is not JSON; see docs/usage.md for its shape") from None
        shape = f'the price table {path} must map model names to {{"input": N, "output": N, ...}} (dollars per million tokens)'
        if not isinstance(extra, dict):
            raise InvalidInput(shape)
        for model, entry in extra.items():
            if model.startswith("_"):
                continue
            if not isinstance(entry, dict):
                raise InvalidInput(shape)
            for field, x in entry.items():
                if field not in PRICE_FIELDS:  # a typo would price the model at $0
                    raise InvalidInput(f"the price table {path}: {model}.{field} is not a price; use {', '.join(PRICE_FIELDS)}")
                if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
                    raise InvalidInput(f"the price table {path}: {model}.{field} must be a number of dollars, at least 0")
        table.update(extra)
    return {k: v for k, v in table.items() if not k.startswith("_")}


def price_of(model: Optional[str], prices: dict[str, dict]) -> Optional[dict]:
    if not model:
        return None
    if model in prices:
        return prices[model]
    best = None
    for name in prices:
        if model.startswith(name) and _DATE_SUFFIX.match(model, len(name)) and (best is None or len(name) > len(best)):
            best = name
    return prices[best] if best else None


def cost_of(counts: dict, price: dict) -> float:
    return sum(counts.get(f, 0) * price.get(f, price.get("input", 0.0) if f == "cache_write" else 0.0) for f in FIELDS) / 1e6


# -- reading usage from meta -------------------------------------------------------------------


MAX_COUNT = 10**15  # tokens in one record: far above any real one (10**309 made the whole tape's usage an OverflowError)


def _int(v: Any) -> int:
    """A recorded token count; anything but a positive integer up to MAX_COUNT counts 0."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_COUNT else 0


def normalize(u: dict) -> dict:
    """Any provider's usage object as {input, output, cached, cache_write}."""
    cached = _int(u.get("cache_read_input_tokens")) or _int(u.get("cache_read_tokens"))
    write = _int(u.get("cache_creation_input_tokens")) or _int(u.get("cache_write_tokens"))
    inp = _int(u.get("input_tokens")) or _int(u.get("prompt_tokens")) or _int(u.get("request_tokens"))
    out = _int(u.get("output_tokens")) or _int(u.get("completion_tokens")) or _int(u.get("response_tokens"))
    if "cache_read_input_tokens" not in u:
        # OpenAI and pydantic-ai count cache reads (and writes) inside the input
        openai_cached = _int(u.get("cached_input_tokens"))
        for details in ("prompt_tokens_details", "input_tokens_details"):
            d = u.get(details)
            if isinstance(d, dict):
                openai_cached = openai_cached or _int(d.get("cached_tokens"))
        cached = cached or openai_cached
        inp = max(0, inp - cached - write)
    return {"input": inp, "output": out, "cached": cached, "cache_write": write}


def gemini_counts(t: dict) -> dict:
    """Gemini CLI's `tokens` ({input, output, cached, thoughts, tool, total}) as counts."""
    cached = _int(t.get("cached"))
    return {"input": max(0, _int(t.get("input")) - cached) + _int(t.get("tool")), "output": _int(t.get("output")) + _int(t.get("thoughts")),
            "cached": cached, "cache_write": 0}


class _Reader:
    """Usage records of entries read oldest first; keeps what dedupes across entries."""

    def __init__(self):
        self.claude: dict[str, tuple] = {}  # message id -> (index in out, counts)
        self.codex_totals: set[str] = set()
        self.codex_model: Optional[str] = None

    def read(self, meta: Any) -> Iterator[tuple[Optional[str], dict, Optional[str]]]:
        """(model, counts, dedupe key or None) of one entry's meta."""
        if not isinstance(meta, dict):
            return
        cc = meta.get("claude-code")
        if isinstance(cc, dict):
            msg = cc.get("message")
            if isinstance(msg, dict) and isinstance(msg.get("usage"), dict) and msg.get("model") != "<synthetic>":
                key = msg.get("id") if isinstance(msg.get("id"), str) else None
                yield _model(msg), normalize(msg["usage"]), key and "cc:" + key
            return
        gm = meta.get("gemini")
        if isinstance(gm, dict):
            if gm.get("type") == "gemini" and isinstance(gm.get("tokens"), dict) and isinstance(gm.get("id"), str):
                yield (gm.get("model") if isinstance(gm.get("model"), str) else None), gemini_counts(gm["tokens"]), "gemini:" + gm["id"]
            return
        cx = meta.get("codex")
        if isinstance(cx, dict):
            p = cx.get("payload")
            if not isinstance(p, dict):
                return
            if cx.get("type") == "turn_context" and isinstance(p.get("model"), str):
                self.codex_model = p["model"]
            elif p.get("type") == "token_count" and isinstance(p.get("info"), dict):
                total, last = p["info"].get("total_token_usage"), p["info"].get("last_token_usage")
                mark = json.dumps(total, sort_keys=True)
                if isinstance(last, dict) and mark not in self.codex_totals:
                    self.codex_totals.add(mark)
                    yield self.codex_model, normalize(last), None
            return
        for k, v in meta.items():
            if k == "usage" and isinstance(v, dict):
                yield _model(meta), normalize(v), None
                return
            if isinstance(v, dict) and isinstance(v.get("usage"), dict):
                yield _model(v), normalize(v["usage"]), None
                return


def _model(d: dict) -> Optional[str]:
    for k in ("model", "model_name"):
        if isinstance(d.get(k), str):
            return d[k]
    return None


# -- the report ----------------------------------------------------------------------------------


def _session_entries(tape, name: str) -> list[tuple]:
    """(seq, time, hash, what usage needs of its meta: _light) of the entries reachable
    from a session's branches, tags and HEAD, oldest first. Not the entries: a session of
    1,000,000 held them all and took 1.07 GB (found by an audit of scale)."""
    st = tape.session(name).refs()
    out, seen = [], set()
    for tip in {*st.branches.values(), *st.tags.values(), st.head_hash} - {None}:
        h = tip
        while h is not None and h not in seen:
            seen.add(h)
            try:
                e = tape.read_entry(h)
            except CtapeError:
                break  # not synced yet, or damaged: fsck says which
            out.append((e.seq, e.time, e.hash, _light(e.meta)))
            h = e.parent
    out.sort(key=lambda x: (x[0], x[1]))
    return out


def _light(meta: Any) -> tuple:
    """What the reader needs of one entry's meta, small: ("read", its usage records) for
    the records that depend on no other entry (Claude Code, Gemini CLI, any `usage`
    object), ("codex", the fields read) for a Codex record, whose model and totals come
    from the records before it. The same order of checks as _Reader.read."""
    if isinstance(meta, dict) and not isinstance(meta.get("claude-code"), dict) and not isinstance(meta.get("gemini"), dict):
        cx = meta.get("codex")
        if isinstance(cx, dict):
            p = cx.get("payload")
            kept = {k: p[k] for k in ("model", "type", "info") if k in p} if isinstance(p, dict) else None
            return ("codex", {"codex": {"type": cx.get("type"), "payload": kept}})
    return ("read", list(_Reader().read(meta)))


def _home(tape, h: str) -> Optional[str]:
    """The session whose files hold an entry (the one it was appended to)."""
    loc = tape.store.index.find_object(h)
    path = tape.store.index.path_of(loc[0]) if loc else None
    return path.split("/")[1] if path and path.startswith("sessions/") else None


def _records(tape, name: str) -> list[tuple]:
    """(entry hash, time, model, counts) of every usage record a session reaches."""
    reader = _Reader()
    records: list = []
    by_key: dict[str, int] = {}
    for _, when, eh, (how, what) in _session_entries(tape, name):
        for model, counts, key in (reader.read(what) if how == "codex" else what):
            model = model if isinstance(model, str) else None  # a record's own field: any JSON (an object stopped usage; audit)
            if key is not None and key in by_key:  # a split response: keep its largest counts
                i = by_key[key]
                h, t, old_model, old = records[i]
                records[i] = (h, t, model or old_model, {f: max(old[f], counts[f]) for f in FIELDS})
                continue
            if key is not None:
                by_key[key] = len(records)
            records.append((eh, when, model, counts))
    return records


def _every_session(tape) -> dict[str, list[tuple]]:
    """_records of every session, read after one refresh of the whole tape (Store.settled_all)."""
    per_session = {}
    for n in tape.store.sessions():
        try:
            if n in tape.store.unsafe_sessions:
                tape.store.list_files(n)  # UnsafePath, which names the symlink
            if not tape._session_exists(n):
                continue
            per_session[n] = _records(tape, n)
        except (UnsafePath, CorruptObject) as e:
            # damage in one session never stops the others (SPEC 14): left out, and said
            warnings.warn(f"session {n!r} left out of usage: {str(e).split(';')[0]}; see `ctape fsck`", CtapeWarning, stacklevel=3)
    return per_session


def usage(tape, by: str = "session", since: Optional[str] = None, prices: Optional[str] = None) -> list[dict]:
    """One row per group, largest cost first (then most tokens): {by: key, "input",
    "output", "cached", "cache_write", "total", "cost", "unpriced_tokens", "models"}."""
    if by not in GROUPS:
        raise InvalidInput(f"cannot group usage by {by!r}; use one of: {', '.join(GROUPS)}")
    cutoff = time_seconds(parse_when(since)) if since else None
    table = load_prices(prices)
    per_session = tape.store.settled_all(lambda: _every_session(tape))
    names = list(per_session)
    reached: dict[str, list[str]] = {}  # entry -> sessions whose records hold it
    for n in names:
        for h, _, _, _ in per_session[n]:
            reached.setdefault(h, []).append(n)
    rows: dict[str, dict] = {}
    for name in names:
        for h, t, model, counts in per_session[name]:
            holders = reached[h]
            if len(holders) > 1:  # shared history counts once: for its home, else the first
                home = _home(tape, h)
                if name != (home if home in holders else holders[0]):
                    continue
            if cutoff is not None and time_seconds(t) < cutoff:
                continue
            group = name if by == "session" else (model or "(unknown)") if by == "model" else t[:10]
            row = rows.setdefault(group, {by: group, **{f: 0 for f in FIELDS}, "total": 0, "cost": None, "unpriced_tokens": 0, "models": set()})
            for f in FIELDS:
                row[f] += counts[f]
            n = sum(counts.values())
            row["total"] += n
            if model:
                row["models"].add(model)
            price = price_of(model, table)
            if price is None:
                row["unpriced_tokens"] += n
            else:
                row["cost"] = (row["cost"] or 0.0) + cost_of(counts, price)
    out = []
    for row in rows.values():
        row["models"] = sorted(row["models"])
        if row["cost"] is not None:
            row["cost"] = round(row["cost"], 6)
        out.append(row)
    key = (lambda r: r["day"]) if by == "day" else (lambda r: (-(r["cost"] or 0), -r["total"], r[by]))
    out.sort(key=key)
    return out


def total(rows: list[dict], by: str = "session") -> dict:
    """The TOTAL row of `usage` rows: each figure summed (cost: of the priced ones, None
    when none is priced), models merged. `ctape usage` and the web both print it."""
    row: dict[str, Any] = {by: "TOTAL", **{f: sum(r[f] for r in rows) for f in FIELDS}}
    row["total"] = sum(r["total"] for r in rows)
    costs = [r["cost"] for r in rows if r["cost"] is not None]
    row["cost"] = round(sum(costs), 6) if costs else None
    row["unpriced_tokens"] = sum(r["unpriced_tokens"] for r in rows)
    row["models"] = sorted({m for r in rows for m in r["models"]})
    return row


def cost_text(row: dict) -> str:
    """A row's cost as shown: $N.NN, '*' when some of its tokens have no price, '-' for none."""
    return "-" if row["cost"] is None else f"${row['cost']:,.2f}" + ("*" if row["unpriced_tokens"] else "")
