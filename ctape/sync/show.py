"""remote show: what a remote holds, read from its manifests (every one: a full read)."""

from __future__ import annotations

from . import layout, summary
from .backend import Backend


def show(store, backend: Backend, name: str, warn=lambda s: None) -> dict:
    backend.check()
    layout.check_identity(store, backend, create=False)
    cursor = {"next": {}}
    sessions: dict[str, dict] = {}
    files: dict[tuple[str, str], int] = {}
    ups: dict[str, dict] = {}
    pieces = 0
    state = {"have": {}, "pieces": {}, "gone": {}}
    for u, n, m in layout.new_manifests(store, backend, cursor, warn, summaries=summary.for_reader(store, backend, cursor, warn)):
        ups[u] = {"uploader": u, "pushes": n + 1, "last_push": m.get("time")}
        layout.note_manifest(state, m)
    for k, rows in state["pieces"].items():
        pieces += len(rows)
        s, file = k.split("/", 1)
        files[(s, file)] = max(p[1] for p in rows)
    writers = set()
    for (s, file), size in files.items():
        row = sessions.setdefault(s, {"session": s, "files": 0, "bytes": 0})
        row["files"] += 1
        row["bytes"] += size
        w = layout.segment_owner(file)
        if w:
            writers.add(w)
    return {
        "remote": name,
        "url": backend.url,
        "sessions": [sessions[s] for s in sorted(sessions)],
        "bytes": sum(files.values()),
        "objects": pieces,
        "uploaders": [ups[u] for u in sorted(ups)],
        "writers": sorted(writers),
        "deleted_files": len(state["gone"]),
        "planned_deletions": _plans(store, backend, warn),
        "requests": backend.requests,
    }


def _plans(store, backend: Backend, warn) -> list[dict]:
    """Every compacting copy's plans not carried out yet: {compactor, n, files, bytes, time}."""
    out = []
    for key, _, is_prefix in backend.list("d/", "/"):
        u = key[2:].rstrip("/")
        if not (is_prefix and layout.UPLOADER.fullmatch(u)):
            continue
        done = {k.rsplit("/", 1)[-1] for k, _, p in backend.list(f"x/{u}/") if not p}
        for k, _, p in backend.list(f"d/{u}/"):
            name = k.rsplit("/", 1)[-1]
            if p or name in done or not name.endswith(".json") or not name[:-5].isdigit():
                continue
            m, why = layout.decode_deletion(backend.get(k) or b"", store.tape_id, u, int(name[:-5]), False)
            if m is None:
                warn(f"ignored {k} on the remote: {why}")
                continue
            out.append({"compactor": u, "n": m["n"], "files": len(m["files"]), "bytes": sum(f["end"] for f in m["files"]), "time": m["time"]})
    return out
