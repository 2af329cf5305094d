"""Context views: the prompt a model sees, built from the path root -> REF.

The tape keeps everything; a view picks. Steps, in order:

1. the window: the path root -> REF, from the newest compaction on (an anchor with
   `compaction: true`: where the agent itself replaced its history by a summary; the
   `whole-tape` policy goes back past it); with --max-tokens or last-turn only as far
   back as needed; system messages come from the whole path either way, except past a
   compaction: then only those the anchor lists in `keep` (instructions the agent sends
   with every request);
2. neutral messages: system / user / assistant (+ tool calls) / tool results;
   entries marked hidden (ctape.hidden) and anchors are left out;
3. policies: exclude-errors, dedupe-tools, then a fixed "interrupted" result for
   every pending tool call, then last-turn and --max-tokens (the newest message that
   shows something stays, past the budget if need be: no API takes a prompt without one);
   results pair with calls by position: a result answers the latest open call of
   its call_id before it (ids are unique only among the calls open at one time:
   pydantic-ai's TestModel and others reuse them), so steps 3-5 name a call by
   its entry hash, never by its id;
4. --resume prefix: the partial text of an interrupted stream as a final
   assistant message (prefill);
5. a format: openai (Chat Completions), anthropic ({"system", "messages"}), tape.
   Both API formats give a reused call id the same suffix (`t`, `t_2`: ids are unique in
   a request), and an id the API refuses a valid one made from it (anthropic: outside
   `^[a-zA-Z0-9_-]+$`, `functions.ls:0` -> `functions_ls_0`; openai: an empty one), the
   same in the call and its result; they keep images as image parts where the API
   takes them (user messages; Anthropic tool results); from elsewhere (tool messages, assistant and system content)
   an image moves to a user message (after the turn's results; the anthropic view puts
   the system prompt's first), and a note in the text says where it went. Images,
   documents and audio are read in every shape the integrations write (pydantic-ai's
   parts, LangChain's standard blocks, the APIs' own: `media_of`); a user message's
   document or audio becomes the API's part for it where there is one, and anywhere
   else a short note saying what was left out, never its base64 as text. Neither
   writes a message or text part that is empty or only white space (both APIs refuse
   some): such messages are left out, as if not on the tape (last-turn does not start at
   one); an anthropic tool result without text says NO_OUTPUT, and a final assistant
   turn (a prefill) loses its trailing white space.

Every step is a pure function of the entries, so the output is deterministic.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from blake3 import blake3

from ..model.errors import InvalidInput
from ..history import derived as derived_mod
from ..model.models import brief, Entry, HIDDEN
from .media import TEXT_PARTS, anthropic_part, image_url, image_url_of, is_image, left_out, media_of, openai_part

if TYPE_CHECKING:
    from ..history.session import Session

INTERRUPTED = "[interrupted: this tool call did not complete and no result was recorded]"
POLICIES = ("last-turn", "exclude-errors", "dedupe-tools", "whole-tape")
FORMATS = ("openai", "anthropic", "tape")


@dataclass
class Call:
    id: str
    name: str
    arguments: Any
    hash: str  # the tool_call entry: names this call, whatever its id


@dataclass
class Msg:
    role: str  # system | user | assistant | tool
    content: Any = None
    calls: list[Call] = field(default_factory=list)
    call_id: Optional[str] = None  # tool results
    answers: Optional[str] = None  # tool results: the hash of the call they answer (None: no open call)
    is_error: bool = False
    hashes: list[str] = field(default_factory=list)
    error: bool = False  # an `error` entry
    synthetic: bool = False
    same_as: Optional[str] = None  # dedupe-tools: the call whose result has this output (its hash)


def build_context(session: Optional["Session"], ref: Optional[str], policies: list[str], fmt: str, resume: str, max_tokens: Optional[int], tape=None) -> Any:
    """The prompt for the path root -> REF (default: the session's HEAD).

    Without a session, REF must name an entry on its own (a hash or prefix)."""
    if isinstance(policies, str):
        policies = [policies]  # one policy, as `log(kinds=...)` takes one kind
    elif not isinstance(policies, (list, tuple)):
        raise InvalidInput(f"policies is a policy or a list of them ({', '.join(POLICIES)}), not {brief(policies)}")
    for p in policies:
        if p not in POLICIES:
            raise InvalidInput(f"unknown policy {brief(p)}; use {', '.join(POLICIES)}")
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown format {brief(fmt)}; use {', '.join(FORMATS)}")
    if resume not in ("prefix", "drop"):
        raise InvalidInput("--resume takes prefix or drop")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
        raise InvalidInput(f"max_tokens is a number of tokens (1 or more), not {brief(max_tokens)}")
    tape = session.tape if session is not None else tape
    if ref is None and session is None:
        raise InvalidInput("context needs a REF or a session")
    if ref:
        head = tape.resolve(ref, session.name if session else None)
    else:  # HEAD's entry read first: one that moved under a compaction is followed (Session.from_head)
        head = session.from_head(lambda st: st.head_hash and tape.read_entry(st.head_hash).hash, full=True)
    whole = "whole-tape" in policies
    window, compaction = _window(tape, head, "last-turn" in policies, max_tokens, not whole)
    in_window = {e.hash for e in window}
    dv = tape.derived(head) if head is not None else None
    before = derived_mod.systems(dv, tape.derived) if dv is not None else []
    if compaction is None and not whole and dv is not None and window and window[0].parent is not None:
        compaction = newest_compaction(tape, dv)  # the window stopped before reaching it
    if compaction is not None:
        keep = compaction.payload.get("keep")
        kept = [h for h in keep if isinstance(h, str) and tape.has_entry(h)] if isinstance(keep, list) else []
        before = kept + [h for h in before if tape.read_entry(h).seq > compaction.seq]
    systems = [tape.read_entry(h) for h in before if h not in in_window]
    entries = systems + window
    partial = None
    if window and window[-1].kind == "streaming" and not _hidden(window[-1]):
        partial = _text(window[-1].payload.get("content") if isinstance(window[-1].payload, dict) else "")
        entries = entries[:-1]
    elif session is not None:
        # a stream not recorded yet, begun at the entry the prompt ends at: HEAD's, however
        # REF names it (the session, SESSION/BRANCH, HEAD, a hash), as before `recover`
        from ..history.stream import open_streams

        streams = open_streams(session) if session.exists() else []
        if streams and streams[-1]["base"] == head:
            partial = streams[-1]["content"]
    msgs = to_messages(entries)
    if "exclude-errors" in policies:
        msgs = exclude_errors(msgs)
    if "dedupe-tools" in policies:
        msgs = dedupe_tools(msgs)
    msgs = answer_pending(msgs)
    if "last-turn" in policies:
        msgs = last_turn(msgs, window)
    if max_tokens is not None:
        msgs = fit_tokens(msgs, max_tokens)
    if resume == "prefix" and partial:
        if fmt == "anthropic":
            partial = partial.rstrip()  # the Messages API refuses a prefill that ends in white space
        if partial:
            msgs.append(Msg("assistant", partial, hashes=[], synthetic=True))
    if fmt == "openai":
        return to_openai(msgs)
    if fmt == "anthropic":
        return to_anthropic(msgs)
    return to_tape(msgs, tape)


# -- 1. the window -----------------------------------------------------------------------


def _window(tape, head: Optional[str], last_turn: bool, max_tokens: Optional[int], compactions: bool = True) -> tuple[list[Entry], Optional[Entry]]:
    """The entries of the view, oldest first, and the compaction anchor it starts at (if any)."""
    out: list[Entry] = []
    budget = None if max_tokens is None else max_tokens * 2 + 64
    used = 0
    said = False  # the window holds a message with text: the budget never stops it before one
    h = head
    while h is not None:
        e = tape.read_entry(h)
        out.append(e)
        if compactions and is_compaction(e):
            out.reverse()
            return out, e
        # what no view shows takes no room: an anchor, bookkeeping, the interrupted stream
        # at REF (--resume prefix adds it after the budget, --resume drop leaves it out)
        if e.kind not in ("system", "anchor") and not _hidden(e) and not (e.kind == "streaming" and h == head):
            used += estimate(e.payload)
            said = said or (e.kind in ("user", "assistant", "streaming") and not _blank(_content(e)))
        if last_turn and not _hidden(e) and (e.kind == "anchor" or e.kind == "user" and not _blank(_content(e))):
            break  # a user message the views leave out (empty) starts no turn
        if budget is not None and used > budget and said:
            break
        h = e.parent
    out.reverse()
    return out, None


def is_compaction(e: Entry) -> bool:
    """An anchor an importer wrote where the agent compacted its history (Claude Code's
    compact_boundary, Codex's compacted): the agent's next prompt starts there."""
    return e.kind == "anchor" and isinstance(e.payload, dict) and e.payload.get("compaction") is True


COMPACTION_NAMES = ("compact_boundary", "compacted")  # the names importers give them


def newest_compaction(tape, dv: dict) -> Optional[Entry]:
    found = [h for h in (derived_mod.find_anchor(dv, n, tape.derived) for n in COMPACTION_NAMES) if h]
    entries = [e for e in (tape.read_entry(h) for h in found) if is_compaction(e)]
    return max(entries, key=lambda e: e.seq, default=None)


def _hidden(e: Entry) -> bool:
    return isinstance(e.meta, dict) and bool(e.meta.get(HIDDEN))


def _content(e: Entry) -> Any:
    return e.payload.get("content") if isinstance(e.payload, dict) else e.payload


def _blank(c: Any) -> bool:
    """True when a content shows nothing in some view: None, empty or white-space text, or a
    list of such text parts and structure the views leave out (thinking, tool_use...).
    The Messages API refuses a text block without non-white-space text, and Chat
    Completions an empty content array, so the views leave such messages and parts out."""
    if c is None or isinstance(c, str):
        return not (c or "").strip()
    if isinstance(c, list):
        return all(_blank_part(p) for p in c)
    return False


def _blank_part(p: Any) -> bool:
    if not isinstance(p, dict):
        return isinstance(p, str) and not p.strip()
    if p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str):
        return not p["text"].strip()
    return p.get("type") in STRUCTURE_PARTS


def estimate(value: Any) -> int:
    """A rough token count: about four characters of JSON text per token."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return len(text) // 4 + 4


# -- 2. neutral messages -----------------------------------------------------------------------


def _text(c: Any) -> Any:
    """A message's content for the views: "" for none, and a list of parts as _neutral makes it."""
    return "" if c is None else _neutral(c)


def _neutral(c: Any) -> Any:
    """A list of parts in the form the views read, for parts that other writers keep in
    forms of their own:
    - a refusal part (the Responses API's `{"type": "refusal", "refusal": text}`, which
      the Agents SDK keeps) is the text it says; the views sent it as JSON text (a
      black-box audit);
    - pydantic-ai's `{"kind": "text-content", "content": text}` (a file's text handed to
      the model) is a text part, and its `{"kind": "cache-point"}` (where a provider's
      prompt cache may end: no content) is left out; both went out as JSON text.
    Anything else is as it is."""
    if not isinstance(c, list) or not any(_own_form(p) for p in c):
        return c
    out = []
    for p in c:
        kind = _own_form(p)
        if kind == "refusal":
            out.append({"type": "text", "text": p["refusal"]})
        elif kind == "text-content":
            out.append({"type": "text", "text": p["content"]})
        elif kind is None:
            out.append(p)
    return out


def _own_form(p: Any) -> Optional[str]:
    """Which of _neutral's forms the part `p` is in, if any."""
    if not isinstance(p, dict):
        return None
    if p.get("type") == "refusal" and isinstance(p.get("refusal"), str):
        return "refusal"
    if "type" not in p and p.get("kind") == "text-content" and isinstance(p.get("content"), str):
        return "text-content"
    if "type" not in p and p.get("kind") == "cache-point":
        return "cache-point"
    return None


def to_messages(entries: list[Entry]) -> list[Msg]:
    msgs: list[Msg] = []
    open_calls: dict[str, list[str]] = {}  # call_id -> hashes of its open calls, oldest first

    def answer(call_id: str) -> Optional[str]:
        stack = open_calls.get(call_id)
        return stack.pop() if stack else None

    for e in entries:
        if _hidden(e) or e.kind == "anchor":
            continue
        p = e.payload if isinstance(e.payload, dict) else {"content": e.payload}
        if e.kind in ("system", "user"):
            msgs.append(Msg(e.kind, _text(p.get("content")), hashes=[e.hash]))
        elif e.kind in ("assistant", "streaming"):
            msgs.append(Msg("assistant", _text(p.get("content")), hashes=[e.hash]))
        elif e.kind == "tool_call":
            call = Call(str(p.get("call_id")), str(p.get("name")), p.get("arguments"), e.hash)
            open_calls.setdefault(call.id, []).append(e.hash)
            last = msgs[-1] if msgs else None
            if last is not None and last.role == "assistant" and not last.synthetic and _calls_open(msgs):
                last.calls.append(call)
                last.hashes.append(e.hash)
            else:
                msgs.append(Msg("assistant", None, calls=[call], hashes=[e.hash]))
        elif e.kind == "tool_result":
            cid = str(p.get("call_id"))
            msgs.append(Msg("tool", _neutral(p.get("output")), call_id=cid, answers=answer(cid), is_error=p.get("is_error") is True, hashes=[e.hash]))
        elif e.kind == "error":
            if isinstance(p.get("call_id"), str):
                cid = p["call_id"]
                msgs.append(Msg("tool", f"Error: {p.get('message')}", call_id=cid, answers=answer(cid), is_error=True, hashes=[e.hash], error=True))
            else:
                msgs.append(Msg("user", f"[error] {p.get('message')}", hashes=[e.hash], error=True))
    return msgs


def _calls_open(msgs: list[Msg]) -> bool:
    """True when the last message is an assistant message that tool results have not followed yet."""
    return bool(msgs) and msgs[-1].role == "assistant"


# -- 3. policies --------------------------------------------------------------------------------


def _drop_calls(msgs: list[Msg], drop: set[str]) -> list[Msg]:
    """Remove the tool calls with these entry hashes, and their results, keeping the rest valid."""
    out = []
    for m in msgs:
        if m.role == "assistant" and m.calls:
            kept = [c for c in m.calls if c.hash not in drop]
            if not kept and not m.content:
                continue
            m = Msg(m.role, m.content, kept, hashes=[h for h in m.hashes if h not in drop])
        elif m.role == "tool" and m.answers in drop:
            continue
        out.append(m)
    return out


def exclude_errors(msgs: list[Msg]) -> list[Msg]:
    failed = {m.answers for m in msgs if m.role == "tool" and (m.is_error or m.error) and m.answers}
    return [m for m in _drop_calls(msgs, failed) if not m.error]


def dedupe_tools(msgs: list[Msg]) -> list[Msg]:
    """Repeated calls (same name and arguments) keep only the last; equal outputs are said once."""
    answered = {m.answers for m in msgs if m.role == "tool" and m.answers}
    last_of: dict[str, str] = {}
    order: list[tuple[str, str]] = []
    for m in msgs:
        for c in m.calls:
            if c.hash in answered:
                key = c.name + "\0" + json.dumps(c.arguments, sort_keys=True, ensure_ascii=False)
                last_of[key] = c.hash
                order.append((key, c.hash))
    drop = {h for key, h in order if last_of[key] != h}
    msgs = _drop_calls(msgs, drop)
    # identical outputs under different calls: keep the newest, point the older ones at it
    newest: dict[str, Msg] = {}
    for m in msgs:
        if m.role == "tool" and m.answers:
            newest[_digest(m.content)] = m
    out = []
    for m in msgs:
        if m.role == "tool" and m.answers:
            other = newest[_digest(m.content)]
            if other is not m and estimate(m.content) > 16:
                m = Msg("tool", _same_output(other.call_id), call_id=m.call_id, answers=m.answers, is_error=m.is_error, hashes=m.hashes, same_as=other.answers)
        out.append(m)
    return out


def _same_output(call_id: str) -> str:
    return f"[same output as the result of call {call_id}, below]"


def _digest(value: Any) -> str:
    return blake3(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def answer_pending(msgs: list[Msg]) -> list[Msg]:
    """Put each call's result right after its assistant message; a fixed result for pending ones.

    Provider APIs want every tool call answered before the next turn, and no
    result without its call, so results that answer no call in view are left out.
    """
    results = {m.answers: m for m in msgs if m.role == "tool" and m.answers}
    out: list[Msg] = []
    for m in msgs:
        if m.role == "tool":
            continue
        out.append(m)
        for c in m.calls:
            r = results.pop(c.hash, None)
            out.append(r if r is not None else Msg("tool", INTERRUPTED, call_id=c.id, answers=c.hash, is_error=True, synthetic=True))
    return out


def last_turn(msgs: list[Msg], window: list[Entry]) -> list[Msg]:
    start = None
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].role == "user" and not msgs[i].error and not _blank(msgs[i].content):
            start = i
            break
    anchors = [e.hash for e in window if e.kind == "anchor" and not _hidden(e)]  # bookkeeping starts no turn
    if anchors:
        # the newest anchor wins when it is newer than the newest user message
        pos = {h: i for i, e in enumerate(window) for h in [e.hash]}
        anchor_pos = pos[anchors[-1]]
        after = [i for i, m in enumerate(msgs) if m.hashes and pos.get(m.hashes[0], -1) > anchor_pos]
        if after and (start is None or after[0] > start):
            start = after[0]
    if start is None:
        return msgs
    return [m for m in msgs[:start] if m.role == "system"] + msgs[start:]


def fit_tokens(msgs: list[Msg], max_tokens: int) -> list[Msg]:
    """Drop the oldest non-system turns (an assistant message goes with its tool results).

    The newest turn that shows something (text, an image or a tool call) stays, and what
    follows it, even past the budget: a prompt of system messages alone (or an anthropic
    `{"messages": []}`) is one no API takes."""
    groups: list[list[Msg]] = []
    for m in msgs:
        if m.role == "tool" and groups and groups[-1][0].role == "assistant":
            groups[-1].append(m)
        else:
            groups.append([m])
    cost = lambda g: sum(estimate(m.content) + sum(estimate(c.arguments) for c in m.calls) for m in g)  # noqa: E731
    shows = [i for i, g in enumerate(groups) if g[0].role != "system" and (g[0].calls or not _blank(g[0].content))]
    last = shows[-1] if shows else len(groups) - 1
    total = sum(cost(g) for g in groups)
    keep = [True] * len(groups)
    for i, g in enumerate(groups):
        if total <= max_tokens:
            break
        if g[0].role != "system" and i < last:
            keep[i] = False
            total -= cost(g)
    return [m for g, k in zip(groups, keep) if k for m in g]


# -- 5. formats ------------------------------------------------------------------------------------


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


NO_OUTPUT = "[no output]"  # the anthropic view's text for a tool result that has none


def _openai_content(c: Any) -> Any:
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        parts = []
        for p in c:
            if isinstance(p, dict) and p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str):
                if p["text"].strip():  # an empty or white-space part says nothing
                    parts.append({"type": "text", "text": p["text"]})
            elif (media := media_of(p)) is not None:
                parts.append(openai_part(media))  # an image stays an image part; one without a URL says so
            elif isinstance(p, dict) and p.get("type") in STRUCTURE_PARTS:
                continue  # thinking and the like: no text, as in the other views (_blank agrees)
            elif _as_text(p).strip():
                parts.append({"type": "text", "text": _as_text(p)})
        return parts
    return _as_text(c)


def _images_of(c: Any) -> list[dict]:
    """The image parts of a tool result's output (a list of parts, or one part), if any."""
    return [p for p in _parts(c) if is_image(p)] if isinstance(c, (list, dict)) else []


def _parts(c: Any) -> Any:
    """A tool output as a list of parts when it is one media part (pydantic-ai stores a
    tool's returned image or file so); any other output as it is."""
    return [c] if isinstance(c, dict) and media_of(c) is not None else c


def _moved_images(c: Any) -> list[dict]:
    """The images of a system or assistant message that the view moves to a user message:
    neither API takes an image there (Chat Completions system and assistant content are
    text; the Messages API's system is text and it refuses an image block in an assistant
    turn). An image without a URL stays where it is, as the NO_IMAGE text."""
    return [p for p in c if image_url(p)] if isinstance(c, list) else []


def _images_note(n: int, where: str = "in the next user message") -> str:
    return f"[{n} image{'s' if n > 1 else ''}: {where}]"


def _with_note(text: str, images: list[dict], where: str = "in the next user message") -> str:
    """A message's text, with a note saying where its images went (if it had any)."""
    if not images:
        return text
    note = _images_note(len(images), where)
    return f"{text}\n{note}" if text else note


def _carried(label: str, images: list[dict]) -> list[dict]:
    """The parts of a user message that carry moved images: a label, then the images."""
    return [{"type": "text", "text": f"[the image{'s' if len(images) > 1 else ''} of {label}]"}] + _openai_content(images)


def to_openai(msgs: list[Msg]) -> list[dict]:
    out = []
    ids = _unique_ids(msgs, across_turns=False, valid=_openai_id_ok)
    seen: list[dict] = []  # images moved out of the messages just written (tool results take
    # text only, system and assistant content too): they follow as one user message, once
    # the results of that turn are all written (nothing may come between a call and its result)
    for m in msgs:
        if m.role != "tool" and seen:
            out.append({"role": "user", "content": seen})
            seen = []
        if m.role == "tool":
            cid = ids.get(m.answers, m.call_id)
            images = _images_of(m.content)
            if images:
                rest = [p for p in _parts(m.content) if p not in images]
                text = _tool_text(rest) if rest else ""
                out.append({"role": "tool", "tool_call_id": cid, "content": _with_note(text, images)})
                seen += _carried(f"the result of tool call {cid}", images)
            else:
                content = _same_output(ids[m.same_as]) if m.same_as in ids else m.content
                out.append({"role": "tool", "tool_call_id": cid, "content": _tool_text(content)})
        elif m.role == "assistant":
            images = _moved_images(m.content)
            text = _with_note(_assistant_text(m.content) if m.content else "", images)
            if not text.strip():
                text = ""
                if not m.calls:
                    continue  # empty, or only structure Chat Completions has no place for (thinking)
            d: dict = {"role": "assistant", "content": text if (text or not m.calls) else None}
            if m.calls:
                d["tool_calls"] = [
                    {"id": ids[c.hash], "type": "function", "function": {"name": c.name, "arguments": c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments, ensure_ascii=False, sort_keys=True)}}
                    for c in m.calls
                ]
            out.append(d)
            if images:
                seen += _carried("the assistant message above", images)
        elif m.role == "system":
            images = _moved_images(m.content)
            text = _with_note(_assistant_text(m.content), images)
            if text.strip():
                out.append({"role": "system", "content": text})
            if images:
                seen += _carried("the system message above", images)
        else:
            content = _openai_content(m.content)
            # Chat Completions refuses an empty content array; an empty message (imports
            # carry some) is left out, as the anthropic view leaves it out
            if content and (not isinstance(content, str) or content.strip()):
                out.append({"role": m.role, "content": content})
    if seen:
        out.append({"role": "user", "content": seen})
    return out


STRUCTURE_PARTS = ("thinking", "redacted_thinking", "reasoning", "tool_use", "tool_result")


def _assistant_text(c: Any) -> str:
    """The text of a message: text parts joined; thinking and other structure left out,
    and images too (the caller moves them: _moved_images)."""
    if isinstance(c, list):
        out = []
        for p in c:
            if isinstance(p, dict) and p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str):
                out.append(p["text"])
            elif (media := media_of(p)) is not None:
                if not image_url_of(media):  # an image with a URL is moved (_moved_images), never text
                    out.append(left_out(media))
            elif not (isinstance(p, dict) and p.get("type") in STRUCTURE_PARTS):
                out.append(_as_text(p))
        return "".join(out)
    return _as_text(c)


def _tool_text(c: Any) -> str:
    """A tool result as the text the model reads: a list of text parts joined by lines; a
    list with media parts (or one media part) too, each media part as its note."""
    c = _parts(c)
    if isinstance(c, list) and c and all(isinstance(p, dict) and p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str) for p in c):
        return "\n".join(p["text"] for p in c)
    if _has_media(c):
        return "\n".join(_part_text(p) for p in c)
    return _as_text(c)


def _has_media(c: Any) -> bool:
    c = _parts(c)
    return isinstance(c, list) and any(media_of(p) is not None for p in c)


def _part_text(p: Any) -> str:
    if isinstance(p, dict) and p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str):
        return p["text"]
    media = media_of(p)
    return left_out(media) if media is not None else _as_text(p)


def _anthropic_blocks(c: Any, user: bool = True) -> list[dict]:
    """The blocks of a content; `user`: a user message's, where documents are blocks too
    (elsewhere an image stays an image block, any other media part becomes a note)."""
    # the Messages API refuses a text block without non-white-space text: such text is left out
    if isinstance(c, str):
        return [{"type": "text", "text": c}] if c.strip() else []
    if isinstance(c, list):
        out = []
        for p in c:
            if isinstance(p, dict) and p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str):
                if p["text"].strip():
                    out.append({"type": "text", "text": p["text"]})
            elif (media := media_of(p)) is not None:
                out.append(anthropic_part(media, user))
            elif isinstance(p, dict) and p.get("type") in ("thinking", "redacted_thinking", "tool_use", "tool_result"):
                continue  # structure that the tape holds as entries of its own
            elif _as_text(p).strip():
                out.append({"type": "text", "text": _as_text(p)})
        return out
    return [{"type": "text", "text": _as_text(c)}] if c is not None else []


def _unique_ids(msgs: list[Msg], across_turns: bool = True, valid=None) -> dict[str, str]:
    """Call entry hash -> the id it has in the request, so that no result names two calls:
    a reused id gets a suffix (`t`, `t_2`, ...). The Messages API refuses a request in which
    two tool_use blocks share an id anywhere (`across_turns`). A Chat Completions tool
    message names its call by id alone, but an id may come back once its call is answered
    (agents do: the SWE-agent trajectories were sent so), so there only an id that is
    still open, or twice in one message, gets one; the request keeps the agent's ids.

    An id the API would refuse (`valid`: the view's rule) becomes a valid one made from it
    (`_valid_id`), suffixed the same way: never one that another call of the tape holds or
    that the request already gives. The tool result uses the same id as its call."""
    taken = {c.id for m in msgs for c in m.calls}
    seen: set[str] = set()  # ids that a new call may not take: every one, or the open ones
    out: dict[str, str] = {}
    for m in msgs:
        if not across_turns and m.role == "tool" and m.answers in out:
            seen.discard(out[m.answers])
        for c in m.calls:
            base = c.id if valid is None or valid(c.id) else _valid_id(c.id)
            new, n = base, 2
            while new in seen or (new != c.id and new in taken):
                new, n = f"{base}_{n}", n + 1
            seen.add(new)
            out[c.hash] = new
    return out


ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")  # what the Messages API takes as a tool_use id
NO_ID = "call"  # the id a call without one gets (suffixed when taken)


def _anthropic_id_ok(cid: str) -> bool:
    return ANTHROPIC_ID.fullmatch(cid) is not None


def _openai_id_ok(cid: str) -> bool:
    """Chat Completions takes any string as a call id; only an empty (or white-space) one,
    which names no call, is replaced."""
    return bool(cid.strip())


def _valid_id(cid: str) -> str:
    """A tool_use id the Messages API takes, made from CID: each other character becomes
    `_` (Kimi's `functions.ls:0` -> `functions_ls_0`); an empty id becomes NO_ID."""
    new = re.sub(r"[^a-zA-Z0-9_-]", "_", cid.strip())
    return new if new.strip("_") else NO_ID


def _anthropic_moved(label: str, images: list[dict]) -> list[dict]:
    return [{"type": "text", "text": f"[the image{'s' if len(images) > 1 else ''} of {label}]"}] + _anthropic_blocks(images)


SYSTEM_IMAGES = "at the start of the first user message"  # where the anthropic view puts them


def to_anthropic(msgs: list[Msg]) -> dict:
    texts = [_with_note(_assistant_text(m.content), _moved_images(m.content), SYSTEM_IMAGES) for m in msgs if m.role == "system"]
    system = "\n\n".join(t for t in texts if t.strip())
    turns: list[dict] = []
    ids = _unique_ids(msgs, valid=_anthropic_id_ok)
    first: list[dict] = []  # the images of the system prompt (it takes text blocks only)
    seen: list[dict] = []  # the images of the assistant message just written (the API refuses
    # an image block in an assistant turn): they follow in the next user turn, after the results

    def add(role: str, blocks: list[dict]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": list(blocks)})

    for m in msgs:
        if m.role != "tool" and seen:
            add("user", seen)
            seen = []
        if m.role == "system":
            images = _moved_images(m.content)
            if images:
                first += _anthropic_moved("the system prompt", images)
        elif m.role == "user":
            add("user", _anthropic_blocks(m.content))
        elif m.role == "assistant":
            images = _moved_images(m.content)
            content = [p for p in m.content if p not in images] if images else m.content
            blocks = _anthropic_blocks(content, user=False)
            if images:
                blocks.append({"type": "text", "text": _images_note(len(images))})
                seen = _anthropic_moved("the assistant message above", images)
            for c in m.calls:
                blocks.append({"type": "tool_use", "id": ids[c.hash], "name": c.name, "input": _tool_input(c.arguments)})
            add("assistant", blocks)
        else:
            # a result with images keeps them as image blocks (the Messages API takes text
            # and image blocks in a tool_result), never as base64 inside JSON text; any other
            # media part is a note (_tool_text)
            output = _same_output(ids[m.same_as]) if m.same_as in ids else m.content
            if _images_of(output):
                content = _anthropic_blocks(_parts(output), user=False)
            else:
                content = _tool_text(output)  # a list of text parts as its text, as the openai view gives it
            if not content or (isinstance(content, str) and not content.strip()):
                content = NO_OUTPUT  # refused when empty with is_error, or only white space
            block = {"type": "tool_result", "tool_use_id": ids.get(m.answers) or _valid_id(m.call_id), "content": content}
            if m.is_error:
                block["is_error"] = True
            add("user", [block])
    if seen:
        add("user", seen)
    if first:
        if turns and turns[0]["role"] == "user":
            turns[0]["content"][:0] = first
        else:
            turns.insert(0, {"role": "user", "content": first})
    if turns and turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "(conversation start)"}]})
    if turns and turns[-1]["role"] == "assistant":
        _strip_prefill(turns)
    out: dict = {"messages": turns}
    if system:
        out["system"] = system
    return out


def _strip_prefill(turns: list[dict]) -> None:
    """A final assistant turn is a prefill, and the Messages API refuses one whose text ends
    in white space: its last text block loses it (the block was not blank: _anthropic_blocks)."""
    blocks = turns[-1]["content"]
    if blocks[-1]["type"] == "text":
        blocks[-1] = {**blocks[-1], "text": blocks[-1]["text"].rstrip()}


def _tool_input(args: Any) -> dict:
    if isinstance(args, dict):
        return args
    if isinstance(args, str):
        try:
            v = json.loads(args)
            if isinstance(v, dict):
                return v
        except ValueError:
            pass
    return {"input": args}


def to_tape(msgs: list[Msg], tape) -> list[dict]:
    out = []
    for m in msgs:
        if m.synthetic:
            if m.role == "tool":
                out.append({"hash": None, "kind": "tool_result", "payload": {"call_id": m.call_id, "output": m.content, "is_error": True}, "synthetic": True})
            else:
                out.append({"hash": None, "kind": "streaming", "payload": {"content": m.content}, "synthetic": True})
            continue
        for h in m.hashes:
            e = tape.read_entry(h)
            d = e.to_json()
            if m.role == "tool" and m.content != (e.payload or {}).get("output") and e.kind == "tool_result":
                d["view"] = {"output": m.content}
            out.append(d)
    return out
