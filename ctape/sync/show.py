"""remote show: what a remote holds, read from its manifests (every one: a full read)."""

from __future__ import annotations

from . import layout
from .backend import Backend


def show(store, backend: Backend, name: str, warn=lambda s: None) -> dict:
    backend.check()
    layout.check_identity(store, backend, create=False)
    cursor = {"next": {}}
    sessions: dict[str, dict] = {}
    files: dict[tuple[str, str], int] = {}
    ups: dict[str, dict] = {}
    pieces = 0
    for u, n, m in layout.new_manifests(store, backend, cursor, warn):
        ups[u] = {"uploader": u, "pushes": n + 1, "last_push": m.get("time")}
        for f in m["files"]:
            pieces += 1
            k = (f["session"], f["file"])
            files[k] = max(files.get(k, 0), f["end"])
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
        "requests": backend.requests,
    }
