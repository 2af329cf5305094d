"""derived.step, the fold behind state, pending calls, keyframes and session titles, takes
shortcuts on the append path (a copy of the running values; no look for an agent in
entries that name none). Folded over random entries, from running values, keyframes and
keyframes of older ctapes alike, it must give what the plain definition gives."""

import random

from ctape.history import derived
from ctape.model.models import HIDDEN, Entry


def reference_step(d, e):
    """derived.step as first written: every field rebuilt, `about` looked at for every entry."""
    out = {"v": derived.KEYFRAME_VERSION, "state": d["state"], "pending": d["pending"], "last_error": d["last_error"], "systems": d["systems"],
           "sys_key": d.get("sys_key"), "last_key": d.get("last_key"), "anchors": d.get("anchors", []), "anc_key": d.get("anc_key"),
           "about": d.get("about")}
    if e.parent is not None and e.parent == out["last_key"]:
        out["systems"] = []
        out["sys_key"] = out["last_key"] if d["systems"] else out["sys_key"]
        out["anchors"] = []
        out["anc_key"] = out["last_key"] if d.get("anchors") else out["anc_key"]
    if e.seq % derived.KEY_EVERY == 0:
        out["prev_key"] = d.get("last_key")
        out["last_key"] = e.hash
    if e.kind == "system" and not (isinstance(e.meta, dict) and e.meta.get(HIDDEN)):
        out["systems"] = out["systems"] + [e.hash]
    if e.kind == "anchor" and isinstance(e.payload, dict) and isinstance(e.payload.get("name"), str):
        out["anchors"] = out["anchors"] + [[e.payload["name"], e.hash]]
    if e.delta is not None:
        out["state"] = derived.merge_patch(d["state"], e.delta)
    if e.kind == "tool_call" and e.call_id:
        out["pending"] = d["pending"] + [{"hash": e.hash, "call_id": e.call_id, "name": e.payload.get("name")}]
    elif e.kind in derived.RESULT_KINDS and e.call_id:
        p = d["pending"]
        for i in range(len(p) - 1, -1, -1):
            if p[i]["call_id"] == e.call_id:
                out["pending"] = p[:i] + p[i + 1:]
                break
    if e.kind == "error" or (e.kind == "tool_result" and isinstance(e.payload, dict) and e.payload.get("is_error") is True):
        out["last_error"] = e.hash
    about = out["about"]
    if about is not None and (about["title"] is None or about["agent"] is None or about["cwd"] is None):
        out["about"] = derived.about_after(about, e)
    return out


METAS = [{}, {"model": "m"}, {HIDDEN: True}, {"codex": {"payload": {"cwd": "/w"}}}, {"claude-code": {"cwd": "/r"}},
         {"openai": {}}, {"langgraph": {"x": 1}}, {"claude-code": {"cwd": ""}}]


def random_entry(rnd, parent, seq, i):
    kind = rnd.choice(["user", "assistant", "system", "tool_call", "tool_result", "error", "anchor"])
    call = f"c{rnd.randrange(3)}"
    payload = {"content": rnd.choice(["", "hello there", "<env>", "fix the bug " * rnd.randrange(1, 12)])}
    if kind == "tool_call":
        payload = {"call_id": call, "name": "t", "arguments": {}}
    elif kind == "tool_result":
        payload = {"call_id": call, "output": "x", "is_error": rnd.random() < 0.3}
    elif kind == "error" and rnd.random() < 0.5:
        payload = {"message": "boom", "call_id": call}
    elif kind == "anchor":
        payload = {"name": rnd.choice(["a", "b"])}
    delta = rnd.choice([None, None, {"k": rnd.randrange(5)}, {"k": None}, {"n": {"m": 1}}])
    return Entry(hash=f"{i:064x}", parent=parent, seq=seq, kind=kind, time="2026-01-01T00:00:00.000000Z",
                 payload=payload, meta=dict(rnd.choice(METAS)), delta=delta)


def older(d, rnd):
    """d as a keyframe of an older ctape may hold it: fields missing."""
    d = dict(d)
    for k in rnd.sample(["sys_key", "last_key", "anchors", "anc_key", "about"], rnd.randrange(1, 4)):
        d.pop(k, None)
    if "about" not in d:
        d["about"] = None  # a keyframe before `about`
    return d


def test_step_matches_its_definition_over_random_paths():
    rnd = random.Random(7)
    for run in range(60):
        d_new = d_ref = derived.empty()
        parent = None
        for seq in range(1, 700):
            e = random_entry(rnd, parent, seq, run * 10_000 + seq)
            d_new, d_ref = derived.step(d_new, e), reference_step(d_ref, e)
            assert d_new == d_ref, (run, seq)
            parent = e.hash
            if rnd.random() < 0.01:  # go on from a keyframe of an older ctape, as a reader may
                d_new = older(d_new, rnd)
                d_ref = dict(d_new)
