"""A tape's folder: whether a path holds a tape (its identity file, ctape.json names the
format), lies inside one, holds a tape's files without its identity, or is a clone that did
not finish; and the temporary identity files of inits killed before they finished, which
nothing else removes.
"""

from __future__ import annotations

import json
import os
import re
from typing import Optional

from ..model.errors import InvalidInput, NotATape

FORMAT_FILE = "ctape.json"
FORMAT_NAME = "ctape-tape"
FORMAT_VERSION = 2  # 2: segments may hold dictionaries (D) and blocks compressed with them (Z)


_LOST_IDENTITY = (
    "{root} holds sessions but no " + FORMAT_FILE + " (a copy cut short?): restore " + FORMAT_FILE + " from another copy "
    "of the tape (rsync), or clone it again; `ctape init` would give it a new identity, which its copies and remotes refuse"
)


CLONING = ".ctape-clone"  # in a tape's folder while `ctape clone` makes it (sync/pull.py)


def unfinished_clone(root: str) -> Optional[str]:
    """The remote a clone that did not finish was making this folder from ("" when its
    marker says none), or None when no clone is unfinished here."""
    path = os.path.join(root, CLONING)
    if not os.path.lexists(path):
        return None
    try:
        with open(path, "rb") as f:
            url = json.loads(f.read(1 << 16)).get("url")
        return url if isinstance(url, str) else ""
    except (OSError, ValueError, AttributeError):
        return ""  # cut while it was written


def is_tape(path: str) -> bool:
    """Does `path` hold a tape (its identity file names ctape's format)?"""
    try:
        with open(os.path.join(path, FORMAT_FILE), "rb") as f:
            meta = json.loads(f.read(1 << 16))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT_NAME


def absolute(path: str) -> str:
    """A tape's path made absolute as the system reads it: `B/L/../tape` with `B/L` a
    symlink is the `tape` beside the link's target, which open(2), rsync and realpath mean,
    where a lexical normalization took `B/tape` (found by an audit). Without a `..` the
    path is only made absolute (a symlinked tape folder keeps the name it was given)."""
    path = os.fspath(path)
    if ".." not in path.split(os.sep):
        return os.path.abspath(path)
    full = os.path.join(os.getcwd(), path).rstrip(os.sep)
    head, tail = os.path.split(full)
    if tail in ("", ".", ".."):
        return os.path.realpath(full)
    return os.path.join(os.path.realpath(head), tail)


def refuse_inside_tape(root: str, what: str = "init") -> None:
    """A tape is never made inside another one (`init`, `clone`, `demo`, Tape.init): the
    outer tape holds only its own files, would take the inner one's folder for a session
    (or warn of foreign files in it), and write its appends into the inner tape's root."""
    top = absolute(root)
    if os.path.dirname(top) == top:
        # every path of the machine would then be inside it, and no tape could be made
        # anywhere else (an audit's `Tape.init("/")`, as root, did that)
        raise InvalidInput(f"cannot {what} {top}: a tape at the root of the file system holds every other path; give a folder of its own")
    up = tape_around(root)
    if up is not None:
        raise InvalidInput(f"cannot {what} {os.path.abspath(root)}: it is inside the tape {up}, which holds only ctape's own files; "
                           "pick a path outside it")


def tape_around(path: str) -> Optional[str]:
    """The tape whose folder holds `path` (below its top), if any."""
    up = os.path.dirname(os.path.abspath(path))
    while True:
        if is_tape(up):
            return up
        if os.path.dirname(up) == up:
            return None
        up = os.path.dirname(up)


def _refuse_unfinished_clone(root: str) -> None:
    url = unfinished_clone(root)
    if url is not None:
        again = f"ctape clone {url} {root}" if url else f"ctape clone URL {root}"
        raise NotATape(f"{root} is a clone that did not finish (it was stopped): it does not hold the remote's history yet; "
                       f"run `{again}` again to finish it, or remove the folder")


def _remove_dead_temporaries(root: str) -> None:
    """Remove the temporary identity files (ctape.json.tmp<pid>-<hex>) of inits on this
    machine that were killed before they finished: nothing else removes them."""
    for name in os.listdir(root):
        m = re.fullmatch(re.escape(FORMAT_FILE) + r"\.tmp(\d+)-[0-9a-f]+", name)
        if m is None:
            continue
        if _alive(int(m.group(1))):
            continue  # another init right now
        try:
            os.unlink(os.path.join(root, name))
        except OSError:
            pass


def _alive(pid: int) -> bool:
    """Whether process pid runs on this machine (a zombie, killed and not reaped yet, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _holds_history(root: str) -> bool:
    """Does the folder hold a tape's files (sessions or packs) without its identity?"""
    for sub in ("sessions", "packs"):
        try:
            if os.listdir(os.path.join(root, sub)):
                return True
        except OSError:
            pass
    return False
