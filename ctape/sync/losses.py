"""Salvage reports travel with the tape: what `fsck --salvage` found lost, every copy knows.

A salvage moves a damaged file into quarantine/ and writes a report beside it that names
the entries and values lost with it (docs/format.md section 15); reads show such a value
as `[lost: damaged]` and fsck names it as lost, with a warning. rsync carries quarantine/.
A remote holds no quarantined file (damaged bytes, unchecked for secrets), so a push sends
each report's substance instead, in its manifest (`lost`), and a pull writes it as a
report of the copy's own: a clone of a salvaged tape reads what the salvaging copy reads,
where it would otherwise name the lost values as missing (`fsck` exit 1).

What goes up is what a report says about the loss, never what the file held: the file's
name, the time, the entries and values gone (hashes, or the index's keys of those whose
records no longer said their names), a count of damaged places (the
report's full reasons are kept home: a record that failed its schema could be quoted
there), where the damaged file is kept and by which copy.
"""

from __future__ import annotations

import json
import os
from typing import Iterable

from ..ops.maintenance import quarantine_reports, shareable_loss
from ..store.files import make_folder
from ..store.segment import new_file_whole
from ..store.store import QUARANTINE, REPORT
from . import layout

def _shared(report: dict) -> dict:
    out = {"file": report["file"], "time": report["time"], "lost": shareable_loss(report["lost"]),
           "missing": sorted(set(report["missing"])), "kept_at": report["kept_at"]}
    if report.get("missing_keys"):
        out["missing_keys"] = sorted(set(report["missing_keys"]))
    if report.get("copy"):
        out["copy"] = report["copy"]
    return out


def local(store) -> list[dict]:
    """This copy's final salvage reports (its own and those it pulled or rsync brought), in
    the form a manifest carries; reports that do not read as one are left out (fsck says so)."""
    out = []
    for r in quarantine_reports(store.root):
        x = _shared(r)
        if layout.loss_ok(x):
            out.append(x)
    return out


def to_send(store, state, sessions: Iterable[str]) -> list[dict]:
    """The reports of `sessions` the remote does not hold yet."""
    chosen = set(sessions)
    known = state.get("losses", {})
    return [x for x in local(store) if x["file"].split("/")[1] in chosen and layout.loss_digest(x) not in known]


def sent(state, losses: list[dict]) -> None:
    for x in losses:
        state.setdefault("losses", {})[layout.loss_digest(x)] = 1


def write_pulled(store, losses: list[dict], remote: str, wanted: set) -> int:
    """Write each report a pull read (of a session in `wanted`, or any when empty) that
    this copy does not hold, as quarantine/<session>/<file>.<id>.salvage.json (written
    whole: a new file linked into place). How many were written."""
    held = {layout.loss_digest(x) for x in local(store)}
    written = 0
    for x in losses:
        d = layout.loss_digest(x)
        session, name = x["file"].split("/")[1:]
        if d in held or (wanted and session not in wanted):
            continue
        held.add(d)
        body = dict(x)  # kept_at as the salvaging copy wrote it: fsck adds "on copy W" (a relay adds nothing)
        body["pulled_from"] = remote
        folder = make_folder(os.path.join(store.root, QUARANTINE, session), parents=1)
        if new_file_whole(folder, f"{name}.{d[:16]}{REPORT}", (json.dumps(body, sort_keys=True) + "\n").encode()):
            written += 1
    return written
