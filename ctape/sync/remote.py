"""The remotes of one copy, and what this copy knows about each: kept in the tape's local
settings (its index cache folder, ctape/store/localstate.py), never in the tape, so rsync
never carries them and a copy never inherits another machine's remotes.

    <cache folder>/remotes.json           {"NAME": {"url": URL, "endpoint": URL or null}}
    <cache folder>/remote-NAME.json       state: what the remote is known to hold, the next
                                          manifest to read of each uploader, our own next one

The state is a cache: lost, it is learned again from the remote's manifests (one listing
of m/ and a GET per manifest), and nothing is uploaded twice that the manifests list.
A push, a pull or a remote compaction holds `remote-NAME.json.lock` from the state's load
to its save (`held`), so the operations of one copy on one remote take turns.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from ..model.errors import CtapeError, InvalidInput, StorageError


class NoSuchRemote(CtapeError):
    """A remote NAME this copy does not have: not found (exit 1), as an unknown session or
    branch is. No NAME and no remote to default to stays InvalidInput (exit 2), as no
    default session is; so does a badly written name."""
from ..model.models import NAME_RE
from ..store.localstate import _write, cache_folder, editing
from .backend import Backend, check_endpoint, open_backend, parse_url

CONFIG = "remotes.json"
# 4: a state of 3 may have dropped a piece listed again after its deletion (layout.note_have): learnt again.
# 5: a piece's row names its key's generation (layout.piece_key), and `gens` says which to put under
# 6: `made` notes which creation of the remote the state is about (State.follow)
STATE_VERSION = 6


def _folder(store) -> str:
    d = cache_folder(store)
    if d is None:
        raise StorageError("no writable index cache folder to keep remotes in; set CTAPE_CACHE_DIR")
    return d


def _read_json(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            value = json.loads(f.read(64 << 20))
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def remotes(store) -> dict[str, dict]:
    d = cache_folder(store)
    if d is None:
        return {}
    found = _read_json(os.path.join(d, CONFIG))
    return {k: v for k, v in sorted(found.items()) if NAME_RE.fullmatch(k) and isinstance(v, dict) and isinstance(v.get("url"), str)}


def check_remote_name(name: str, new: bool = False) -> str:
    """`new` (remote add): also not ending in .lock, as for sessions (a remote's files sit
    beside their locks); one added before that rule still works."""
    if not NAME_RE.fullmatch(name or "") or len(name) > 64 or (new and name.endswith(".lock")):
        raise InvalidInput(f"bad remote name {name!r}: use up to 64 letters, digits, '.', '_' or '-', starting with a letter or digit, not ending in .lock")
    return name


def add(store, name: str, url: str, endpoint: Optional[str] = None) -> dict:
    check_remote_name(name, new=True)
    scheme, path, _ = parse_url(url)
    if scheme == "file":
        here, there = os.path.realpath(store.root), os.path.realpath(path)
        if there == here or there.startswith(here + os.sep):
            raise InvalidInput(f"remote {url!r} is inside this tape's folder ({store.root}), which holds only ctape's "
                               "own files (a push would write into it); give a folder outside the tape")
    if endpoint is not None:
        check_endpoint(endpoint)
    with editing(cache_folder(store), CONFIG):
        found = remotes(store)
        if name in found:
            raise InvalidInput(f"remote {name!r} exists already; `ctape remote rm {name}` first")
        found[name] = {"url": url, "endpoint": endpoint}
        _save(store, CONFIG, found)
    return {"name": name, **found[name]}


def remove(store, name: str) -> None:
    with editing(cache_folder(store), CONFIG):
        found = remotes(store)
        if name not in found:
            raise NoSuchRemote(f"no remote {name!r}; `ctape remote list` shows them")
        del found[name]
        _save(store, CONFIG, found)
    with held(store, name):  # after a push or pull under way has saved it, not before
        try:
            os.unlink(os.path.join(_folder(store), f"remote-{name}.json"))
        except FileNotFoundError:
            pass


def resolve(store, name: Optional[str]) -> tuple[str, dict]:
    """NAME, else `origin`, else the only remote."""
    found = remotes(store)
    if name is None:
        if "origin" in found:
            name = "origin"
        elif len(found) == 1:
            name = next(iter(found))
        elif not found:
            raise InvalidInput("this copy has no remote; add one with `ctape remote add NAME URL`")
        else:
            raise InvalidInput(f"several remotes ({', '.join(found)}); name one")
    check_remote_name(name)
    if name not in found:
        raise NoSuchRemote(f"no remote {name!r}; `ctape remote list` shows them")
    return name, found[name]


def connect(store, name: Optional[str]) -> tuple[str, Backend]:
    name, conf = resolve(store, name)
    return name, open_backend(conf["url"], conf.get("endpoint"), name)


def _save(store, file: str, value: dict) -> None:
    path = os.path.join(_folder(store), file)
    try:
        _write(path, json.dumps(value, sort_keys=True) + "\n")
    except OSError as e:
        raise StorageError(f"cannot write {path}: {e.strerror}") from None


@contextmanager
def held(store, name: str, warn: Callable[[str], None] = lambda s: None) -> Iterator[None]:
    """This copy's turn on remote NAME's state, from its load to its save: a push (each of
    `push --follow`), a pull, and the deletions of `compact --remote`. Without it, a pull
    that loaded the state before a `push --follow` pushed saved it back after: the next
    push wrote its manifest under a number taken ("exists on the remote; writing the next
    one") and sent again what the lost update forgot. Another process or thread of this
    copy waits, and `warn` says so once. Not reentrant: hold it around one operation."""
    busy = lambda: warn(f"waiting for another push, pull or compaction of {name} on this copy")  # noqa: E731
    with editing(cache_folder(store), f"remote-{name}.json", busy=busy):
        yield


class State(dict):
    """What this copy knows about one remote. `have`: "session/file" -> the bytes from 0
    that the remote is known to hold; `pieces`: "session/file" -> every piece of it the
    manifests list, [start, end, blake3, g, gen] (layout.note_have); `next`: uploader -> its next manifest number to read;
    `gone`: "session/file" -> [the end up to which a remote compaction deleted it, the
    deletion's number]; `gnext`:
    the next deletion announcement (g/<n>) to look for (one whose manifest has not been
    read yet: `deletions_read` lists those read at or past it, `unlisted` when this copy
    first saw an announcement with no manifest); `g_seen`: how many deletions the remote
    announced, as far as the manifests read and g/ tell (layout.lost_announcements);
    `own`: this copy's next manifest number; `checked`: the remote's tape id was checked;
    `redacted`: object -> the deletion whose manifest said its compactor knew it redacted;
    `losses`: the salvage reports the remote holds (layout.loss_digest -> 1);
    `ignored`: manifest key -> why this copy could not read it (compact --remote sweeps no
    unlisted piece while one is on the remote);
    `gens`: "session/file" -> one more than the last deletion of it learnt (layout.generation:
    a copy puts the file again under keys that deletion's deletes never take);
    `finished`: "session/file" -> the deletion whose pieces a `compact --remote` of this copy
    found gone or deleted (prune._finish_announced lists each one once); `made`: the remote's
    identity's `made` when this copy last read it (layout.identity); `lost_read`: the salvage
    reports the manifests a push read carried (layout.loss_digest -> report), written with
    the files a push brings in (push._bring_in), emptied at a full pull, which writes them."""

    @classmethod
    def load(cls, store, name: str, url: str) -> "State":
        d = cache_folder(store)
        raw = _read_json(os.path.join(d, f"remote-{name}.json")) if d else {}
        st = cls(raw if raw.get("version") == STATE_VERSION and raw.get("url") == url and raw.get("tape_id") == store.tape_id else {})
        st.setdefault("version", STATE_VERSION)
        st.setdefault("url", url)
        st.setdefault("tape_id", store.tape_id)
        for k in ("have", "pieces", "next", "seen", "gone", "gens", "redacted", "unlisted", "losses", "finished"):
            if not isinstance(st.get(k), dict):
                st[k] = {}
        if not isinstance(st.get("deletions_read"), list):
            st["deletions_read"] = []
        st.name = name
        return st

    def forget(self) -> None:
        """The remote no longer holds this tape's identity (emptied, re-created): know nothing."""
        for k in ("have", "pieces", "next", "seen", "gone", "gens", "redacted", "losses", "finished"):
            self[k] = {}
        for k in ("ignored", "own", "own_writer", "made", "checked", "gnext", "g_seen", "deletions_read", "unlisted", "gaps", "relearn", "refill",
                  "lost_read"):
            self.pop(k, None)

    def follow(self, meta: dict) -> None:
        """Read the remote's identity `meta`: when it was created again since this copy last
        read it (emptied, then pushed to by another copy first), what this copy knew is of
        the remote before: forgotten (`checked` too), and learnt again from the manifests it
        holds now (pushed to in full, pulled from the first manifest of each uploader)."""
        made = meta.get("made")
        if "made" in self and self["made"] != made:
            self.forget()
        self["made"] = made

    def save(self, store) -> None:
        if cache_folder(store) is not None:
            _save(store, f"remote-{self.name}.json", dict(self))
