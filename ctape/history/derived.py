"""What follows from a path of entries: state, pending tool calls, last error,
and the system messages on the path.

Folding root -> entry is linear in depth, so the result is kept as a keyframe in
the index at every KEY_EVERY-th entry; answering for any entry then folds at
most KEY_EVERY entries on top of the nearest keyframe.

System messages are not carried whole from keyframe to keyframe: a session with
many of them (Codex writes one per turn) would store a longer list at every
keyframe, quadratic in the history. Each keyframe holds the system messages since
the one before it (`systems`) and links to the nearest earlier keyframe that
holds any (`sys_key`); `systems()` follows those links.

Pending tool calls are a list, oldest first. A result (or an error with a
call_id) answers the latest open call of its id before it, like a stack per id:
ids are unique only among the calls open at one time (pydantic-ai's TestModel
reuses `pyd_ai_tool_call_id__<tool>` on every run). Keyframes carry `v`
(KEYFRAME_VERSION); one written by an older ctape (pending keyed by id, which
lost a call whose id was reused while open) is not used, and is written again
the next time the path is folded, so the index schema need not change.

`about` is what a session is about: its title (the first user request on the path) and,
for an imported session, the agent and working directory of the oldest entry that names
them (`ctape sessions`, `status`). It is folded forward like the rest, so a keyframe
answers it without a walk back to the root. A keyframe written before `about` existed
has none; the values derived from it then have none either (never a wrong one), and
`sessions.summary` walks back instead.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Callable, Optional

from ..model.models import HIDDEN, Entry

KEY_EVERY = 256
TITLE_WIDTH = 80
KEYFRAME_VERSION = 4  # 2: pending calls as a list (reused ids); 3: anchors kept too; 4: titles past tagged blocks
RESULT_KINDS = ("tool_result", "error")

# the first user messages an agent writes for itself (instructions, environment), not a request
_NOT_A_REQUEST = ("# AGENTS.md instructions", "Caveat: The messages below", "[Request interrupted by user")
# what agents put before (or instead of) the request, in tags: <environment_context>...</environment_context>,
# <ide_selection>, <command-name>, <uploaded_files>, a <system-reminder/>; a title starts past them
_TAGGED = re.compile(r"<([A-Za-z][\w.:-]*)(?:\s[^<>]*)?(?:/>|>.*?</\1\s*>)\s*", re.S)
_TAGGED_WITHIN = 1 << 16  # characters looked through for the end of such blocks
# meta keys that say an entry was imported (the format's record) or written by an integration
_AGENTS = (
    ("claude-code", "claude-code"),
    ("codex", "codex"),
    ("openai", "openai"),
    ("gemini", "gemini"),
    ("langgraph", "langgraph"),
    ("openai_agents.item", "openai-agents"),
    ("pydantic_ai.message", "pydantic-ai"),
)
_AGENT_KEYS = frozenset(key for key, _ in _AGENTS)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; never modifies its arguments."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def empty() -> dict:
    return {"v": KEYFRAME_VERSION, "state": None, "pending": [], "last_error": None, "systems": [], "sys_key": None, "last_key": None,
            "anchors": [], "anc_key": None, "about": {"title": None, "agent": None, "cwd": None}}


_FIELDS = frozenset(empty())  # what step gives: a keyframe adds prev_key


def step(d: dict, e: Entry) -> dict:
    """The derived values after entry e, given those at its parent (d is not modified)."""
    out = d.copy()  # d as step made it (the writer's running values): every field, no prev_key
    if out.keys() != _FIELDS:  # a keyframe, or one written by an older ctape
        out = {"v": KEYFRAME_VERSION, "state": d["state"], "pending": d["pending"], "last_error": d["last_error"], "systems": d["systems"],
               "sys_key": d.get("sys_key"), "last_key": d.get("last_key"), "anchors": d.get("anchors", []), "anc_key": d.get("anc_key"),
               "about": d.get("about")}
    out["v"] = KEYFRAME_VERSION
    if e.parent is not None and e.parent == out["last_key"]:
        # d is the parent's keyframe: its system messages and anchors stay there, a new run starts
        out["systems"] = []
        out["sys_key"] = out["last_key"] if d["systems"] else out["sys_key"]
        out["anchors"] = []
        out["anc_key"] = out["last_key"] if d.get("anchors") else out["anc_key"]
    if e.seq % KEY_EVERY == 0:
        # keyframes link to the previous one, so `~N` can jump KEY_EVERY entries at a time
        out["prev_key"] = d.get("last_key")
        out["last_key"] = e.hash
    if e.kind == "system" and not (isinstance(e.meta, dict) and e.meta.get(HIDDEN)):
        out["systems"] = out["systems"] + [e.hash]
    if e.kind == "anchor" and isinstance(e.payload, dict) and isinstance(e.payload.get("name"), str):
        out["anchors"] = out["anchors"] + [[e.payload["name"], e.hash]]
    if e.delta is not None:
        out["state"] = merge_patch(d["state"], e.delta)
    if e.kind == "tool_call" and e.call_id:
        name = e.payload.get("name") if isinstance(e.payload, dict) else None
        out["pending"] = d["pending"] + [{"hash": e.hash, "call_id": e.call_id, "name": name}]
    elif e.kind in RESULT_KINDS and e.call_id:
        p = d["pending"]
        for i in range(len(p) - 1, -1, -1):
            if p[i]["call_id"] == e.call_id:
                out["pending"] = p[:i] + p[i + 1 :]
                break
    if e.kind == "error" or (e.kind == "tool_result" and isinstance(e.payload, dict) and e.payload.get("is_error") is True):
        out["last_error"] = e.hash
    about = out["about"]
    if about is not None and (about["title"] is None or (about["agent"] is None or about["cwd"] is None) and _names_source(e)):
        out["about"] = about_after(about, e)
    return out


def _names_source(e: Entry) -> bool:
    """Whether e's meta may name an agent or a working directory (source_of): most
    entries of a session that is not imported do not, and are not looked at further."""
    return not isinstance(e.meta, dict) or not _AGENT_KEYS.isdisjoint(e.meta)


def about_after(about: dict, e: Entry) -> dict:
    """`about` once entry e is on the path (the oldest value of each part wins)."""
    title = about["title"] or title_of(e)
    agent, cwd = about["agent"], about["cwd"]
    if agent is None or cwd is None:
        a, c = source_of(e)
        agent, cwd = agent or a, cwd or c
    if (title, agent, cwd) == (about["title"], about["agent"], about["cwd"]):
        return about
    return {"title": title, "agent": agent, "cwd": cwd}


def title_of(e: Entry) -> Optional[str]:
    """The entry as a session title: a user request, on one line, at most TITLE_WIDTH characters."""
    if e.kind != "user" or (isinstance(e.meta, dict) and e.meta.get(HIDDEN)):
        return None
    text = _past_tags(_text(e.payload))
    text = " ".join(text[:TITLE_WIDTH * 8].split())
    if not text or text.startswith(_NOT_A_REQUEST):
        return None
    return text if len(text) <= TITLE_WIDTH else text[: TITLE_WIDTH - 1] + "…"


def _past_tags(text: str) -> str:
    """The text after the tagged blocks it starts with (a message of nothing else: "")."""
    head = text[:_TAGGED_WITHIN].lstrip()
    pos = 0
    while (m := _TAGGED.match(head, pos)) is not None:
        pos = m.end()
    return head[pos:] if pos < len(head) or len(text) <= _TAGGED_WITHIN else ""


def _text(payload: Any) -> str:
    content = payload.get("content") if isinstance(payload, dict) else payload
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def source_of(e: Entry) -> tuple[Optional[str], Optional[str]]:
    """(agent, working directory) an entry's meta names: imported, or written by an integration."""
    meta = e.meta if isinstance(e.meta, dict) else {}
    if _AGENT_KEYS.isdisjoint(meta):  # most entries: folded at every append until one names its agent
        return None, None
    for key, agent in _AGENTS:
        rec = meta.get(key)
        if rec is None:
            continue
        cwd = None
        if isinstance(rec, dict):
            inner = rec.get("payload")
            cwd = rec.get("cwd") or (inner.get("cwd") if isinstance(inner, dict) else None)
        return agent, cwd if isinstance(cwd, str) and cwd else None
    return None, None


def systems(d: dict, derived_at: Callable[[str], dict]) -> list[str]:
    """Hashes of every system entry on the path d was derived for, oldest first
    (`derived_at` gives the derived values at a keyframe entry)."""
    runs = [d["systems"]]
    k = d.get("sys_key")  # a keyframe written before sys_key existed holds every system message
    while k is not None:
        kd = derived_at(k)
        runs.append(kd["systems"])
        k = kd.get("sys_key")
    return [h for run in reversed(runs) for h in run]


def find_anchor(d: dict, name: str, derived_at: Callable[[str], dict]) -> Optional[str]:
    """The newest anchor entry called `name` on the path d was derived for (None if none);
    follows the keyframes that hold anchors, so a path without any costs one look."""
    runs = d.get("anchors", [])
    k = d.get("anc_key")
    while True:
        for n, h in reversed(runs):
            if n == name:
                return h
        if k is None:
            return None
        kd = derived_at(k)
        runs, k = kd.get("anchors", []), kd.get("anc_key")


def ancestor(h: str, back: int, read: Callable[[str], Entry], load_key: Callable[[str], Optional[dict]]) -> Optional[str]:
    """The entry `back` parents above h (None past the root), jumping between keyframes."""
    while back > 0:
        e = read(h)
        if e.seq % KEY_EVERY == 0 and back >= KEY_EVERY:
            k = load_key(h)
            if k is not None and k.get("prev_key"):
                h, back = k["prev_key"], back - KEY_EVERY
                continue
        if e.parent is None:
            return None
        h, back = e.parent, back - 1
    return h


def derive(
    head: Optional[str],
    read: Callable[[str], Entry],
    load_key: Callable[[str], Optional[dict]],
    save_key: Callable[[str, dict], None],
    known: Callable[[str], Optional[dict]] = lambda h: None,
) -> dict:
    """Derived values at `head`, using and filling keyframes; `known` gives the values at
    any entry when they are at hand (an importer's recent entries)."""
    if head is None:
        return empty()
    path: list[Entry] = []
    base = empty()
    h: Optional[str] = head
    while h is not None:
        k = known(h)
        if k is not None:
            base = k
            break
        e = read(h)
        if e.seq % KEY_EVERY == 0:
            k = load_key(h)
            if k is not None and k.get("v") == KEYFRAME_VERSION:
                base = k
                break
        path.append(e)
        h = e.parent
    d = base
    for e in reversed(path):
        d = step(d, e)
        if e.seq % KEY_EVERY == 0:
            save_key(e.hash, d)
    return d
