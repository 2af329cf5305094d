"""What one machine keeps about a tape outside it, in the tape's index cache folder.

    <cache root>/<key>/tape.json     {"tape": realpath, "tape_id": id}: whose folder this is
    <cache root>/<key>/session       the session chosen with `ctape session use`

Both live beside index.sqlite (docs/format.md section 11), so rsync never carries them
and a copy of a tape never inherits another machine's choice. `gc` removes the cache
folders whose tape is gone, judged by that marker.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from ..model.errors import StorageError
from .files import lock_within
from .index import default_cache_root
from ..model.models import NAME_RE
from .store import FORMAT_FILE, cache_folder_of

MARKER = "tape.json"
CHOICE = "session"
_KEY = re.compile(r"[0-9a-f]{20}")


def cache_folder(store) -> Optional[str]:
    """The tape's cache folder, or None when there is none (the index in memory from the
    start: no cache folder could be made). A cache whose writes fail later (its disk full)
    keeps its folder: the remotes and settings there are still this copy's, where they
    read as none at all (found by an audit: "this copy has no remote; add one")."""
    path = getattr(store.index, "home", None) or store.index.path
    if path == ":memory:":
        return None
    folder = os.path.dirname(path)
    return folder if os.path.isdir(folder) else None


def _write(path: str, text: str) -> None:
    tmp = f"{path}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


BUSY_AFTER = 1.0  # seconds of waiting for a settings lock before saying so


def _wait_then_say(fd: int, busy: Optional[Callable[[], None]]) -> None:
    """flock `fd`; `busy` is called once the wait passes BUSY_AFTER (a short wait,
    another command's quick turn, goes unsaid)."""
    if busy is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    if lock_within(fd, BUSY_AFTER):
        return
    busy()
    fcntl.flock(fd, fcntl.LOCK_EX)


@contextmanager
def editing(folder: Optional[str], name: str, busy: Optional[Callable[[], None]] = None) -> Iterator[None]:
    """Hold `<folder>/<name>.lock` (flock) while a settings file there is read, changed and
    written whole: two commands editing it at once (`--add-pattern` beside `--allow`, two
    `remote add`) each see the other's change instead of keeping only the last one. No
    folder: nothing to lock (the write then says why it cannot be done). `busy` is called
    once when another has held the lock for BUSY_AFTER seconds of this wait."""
    if folder is None:
        yield
        return
    try:
        fd = os.open(os.path.join(folder, name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise StorageError(f"cannot write in {folder}: {e.strerror}; check the cache folder's permissions or set CTAPE_CACHE_DIR") from None
    try:
        _wait_then_say(fd, busy)
        yield
    finally:
        os.close(fd)


def adopt(store, name: str) -> Optional[str]:
    """Copy `name` from another cache folder of the same tape (its marker names the tape's
    id; the newest such file) into this one, when this one has none: a tape moved or copied
    on this machine gets a new folder, and its settings stayed in the old one. Returns the
    tape path the other folder was for, or None when nothing was copied."""
    folder = cache_folder(store)
    if folder is None or os.path.exists(os.path.join(folder, name)):
        return None
    root = os.path.dirname(folder)
    best = None
    try:
        names = os.listdir(root)
    except OSError:
        return None
    for key in names:
        other = os.path.join(root, key)
        if other == folder or not _KEY.fullmatch(key):
            continue
        try:
            with open(os.path.join(other, MARKER), "rb") as f:
                marker = json.loads(f.read(1 << 16))
            if not isinstance(marker, dict) or marker.get("tape_id") != store.tape_id:
                continue
            with open(os.path.join(other, name), "rb") as f:
                text = f.read(1 << 24)
            when = os.stat(os.path.join(other, name)).st_mtime
        except (OSError, ValueError):
            continue
        if best is None or when > best[0]:
            best = (when, text, marker.get("tape"))
    if best is None:
        return None
    try:
        _write(os.path.join(folder, name), best[1].decode("utf-8", "replace"))
    except OSError:
        return None
    return str(best[2])


def mark(store) -> None:
    """Name the tape in its cache folder (once), so that `cache gc` can tell when it is gone."""
    d = cache_folder(store)
    if d is None or os.path.exists(os.path.join(d, MARKER)):
        return
    try:
        _write(os.path.join(d, MARKER), json.dumps({"tape": os.path.realpath(store.root), "tape_id": store.tape_id}) + "\n")
    except OSError:
        pass  # a cache that cannot be written costs only the clean-up


def chosen_session(store) -> Optional[str]:
    """The session chosen on this machine with `session use`, if any."""
    d = cache_folder(store)
    if d is None:
        return None
    try:
        with open(os.path.join(d, CHOICE), encoding="utf-8") as f:
            name = f.read(256).strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name if NAME_RE.fullmatch(name) else None


def choose_session(store, name: Optional[str]) -> None:
    """Keep `name` as this machine's default session for the tape (None forgets the choice)."""
    d = cache_folder(store)
    if d is None:
        raise StorageError("no writable index cache folder to keep the choice in; set CTAPE_CACHE_DIR, or use -s / $CTAPE_SESSION")
    path = os.path.join(d, CHOICE)
    try:
        if name is None:
            if os.path.exists(path):
                os.unlink(path)
        else:
            _write(path, name + "\n")
    except OSError as e:
        raise StorageError(f"cannot write {path}: {e.strerror}; check the cache folder's permissions") from None


# -- cache gc ------------------------------------------------------------------------------


def _folder_bytes(d: str) -> int:
    total = 0
    for root, _, files in os.walk(d):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _tape_state(marker: dict, key: str) -> tuple[str, str]:
    """("live" | "gone", why) for the tape a marker names."""
    tape, tape_id = marker.get("tape"), marker.get("tape_id")
    if not isinstance(tape, str) or not isinstance(tape_id, str):
        return "gone", "the marker names no tape"
    try:
        with open(os.path.join(tape, FORMAT_FILE), "rb") as f:
            meta = json.loads(f.read(1 << 16))
    except FileNotFoundError:
        return "gone", f"{tape} no longer exists"
    except (OSError, ValueError):
        return "live", f"{tape} cannot be read; kept"
    if not isinstance(meta, dict) or str(meta.get("tape_id", "")) != tape_id:
        return "gone", f"{tape} is another tape now"
    # the folder's name is the key of format.md section 11: a tape re-created or copied
    # back to the same path has another inode, so another folder
    try:
        now = os.path.basename(cache_folder_of(tape, tape_id))
    except FileNotFoundError:
        return "gone", f"{tape} no longer exists"
    except OSError:
        return "live", f"{tape} cannot be read; kept"
    if now != key:
        return "gone", f"{tape} was re-created or replaced (its cache is another folder)"
    return "live", tape


def gc(root: Optional[str] = None, dry_run: bool = False, unknown: bool = False) -> list[dict]:
    """Every cache folder under `root` with what became of it: the folders of tapes that are
    gone are removed (not with dry_run); folders without a marker (made by an older ctape)
    are kept unless `unknown`."""
    root = root or default_cache_root()
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    rows = []
    for name in names:
        d = os.path.join(root, name)
        if not _KEY.fullmatch(name) or os.path.islink(d) or not os.path.isdir(d):
            continue
        try:
            with open(os.path.join(d, MARKER), "rb") as f:
                marker = json.loads(f.read(1 << 16))
            state, why = _tape_state(marker if isinstance(marker, dict) else {}, name)
            tape = marker.get("tape") if isinstance(marker, dict) else None
        except FileNotFoundError:
            state, why, tape = "unknown", "no marker (made by an older ctape)", None
        except (OSError, ValueError):
            state, why, tape = "gone", "the marker is damaged", None
        remove = state == "gone" or (unknown and state == "unknown")
        row = {"folder": d, "tape": tape, "state": state, "why": why, "bytes": _folder_bytes(d), "removed": False}
        if remove and not dry_run:
            try:
                shutil.rmtree(d)
                row["removed"] = True
            except OSError as e:
                row["why"] += f"; not removed: {e.strerror}"
        elif not remove:
            row["temporaries"] = _old_temporaries(d, dry_run)
        rows.append(row)
    return rows


TEMPORARY_AGE = 3600.0  # seconds: a setting's temporary file this old was left by a command that was killed


def _old_temporaries(d: str, dry_run: bool) -> int:
    """Remove (unless dry_run) and count the temporary files of a cache folder that a
    command killed while it saved a setting left behind (`<name>.<random>.tmp`: it writes
    one, then renames it over the setting); a running command's is seconds old."""
    n = 0
    now = time.time()
    try:
        names = os.listdir(d)
    except OSError:
        return 0
    for name in names:
        path = os.path.join(d, name)
        try:
            if not name.endswith(".tmp") or now - os.lstat(path).st_mtime < TEMPORARY_AGE or not os.path.isfile(path):
                continue
            if not dry_run:
                os.unlink(path)
            n += 1
        except OSError:
            continue
    return n
