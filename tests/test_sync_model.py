"""Model-based test of sync: 2-4 real copies of one tape, random operations, real rsync.

A seeded generator drives each sequence (the seed and the printed trace reproduce a
failure). Each copy has its own CTAPE_WRITER. Operations: appends (Python API, batches,
the CLI), forks, checkouts, branch deletions, session deletions, `rsync -a` between two
copies (whole, or cut off: only some of the files, or `--max-size`), `compact` on one
copy (default grace, or `--grace now`/`--expire now`: no writer runs meanwhile), and a
writer killed with SIGKILL in the middle of its appends.

A plain in-memory model keeps what the copies acknowledged (every entry hash an append
returned, with its parent) and what a user knowingly removed: the entries that a
deletion or a checkout on a copy took off every ref of that copy (they were reachable
there, so the deletion had seen them). After a full mesh of syncs (every copy to every
other, twice) it checks:

- all copies agree on every ref of every session;
- fsck is clean (warnings allowed);
- every acknowledged entry is reachable from a branch or HEAD of every copy, unless a
  deletion that had seen it removed it: it was taken off every ref of a copy, or every
  ref holding it on any copy before the mesh was deleted (by name) on a copy that had it
  there (two copies each deleting one of two refs to it, joined by the sync);
- at the end of a sequence, the same copies synced in another order end with the same
  refs, and `compact --expire now --grace now` keeps the refs and frees every entry no
  ref reaches (a superseded claim pins nothing).

Between syncs, an append, a fork or a compaction never makes a reachable entry
unreachable on its copy.

Writers during an rsync (LiveWorld, SPEC section 14 "Live writers"): the same model with
one more operation, an `rsync -a` from copy X to copy Y that runs file by file, in the
order rsync sends them, while a third actor, a writer on X or on Y, appends, batches or
forks between two files (chosen at random; sometimes as a new process: the copy is
closed first, or the append is the CLI). The source is listed at the start, as rsync
does (a file made after the listing is not sent in that run), or each folder when the
copy gets to it (rsync's incremental recursion: new folders, and new files in folders
not reached yet, are sent). Each file is copied by the real rsync alone, or in this
process the way rsync does it: the listing's size and mtime decide whether it is sent,
its current bytes are read with a plain read (which moves the access time, as rsync's
read does; never O_NOATIME), written to a temporary name beside the destination and
renamed over it with the listing's mtime; folders get their listed mtimes at the end.
A writer cannot run in the middle of one file's copy from here: file granularity only
(tests/test_live_rsync.py has real processes and real timing).

Redactions (RedactWorld, SPEC section 18): the same model with `redact` of an entry's text
on a copy; after every mesh each copy that has the entry reads the marker, and at the end,
once each copy has compacted, no file of any copy nor any index cache holds the text.

`CTAPE_SLOW=1` runs the long mode (CTAPE_MODEL_SEQUENCES sequences, default 2,000;
CTAPE_MODEL_FIRST_SEED, default 1000, picks where the seeds start), for both worlds.
"""

from __future__ import annotations

import json
import os
import random
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from conftest import run_cli as ctape_command
from ctape import Tape
from ctape.errors import CorruptObject, EntryNotFound, RefNotFound
from ctape.store import framing

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed (.ci/run installs it)")

SLOW = os.environ.get("CTAPE_SLOW") == "1"
SESSIONS = ("s1", "s2")

KILLED_WRITER = (
    "import ctape, sys\n"
    "t = ctape.Tape.open(sys.argv[1])\n"
    "s = t.session(sys.argv[2])\n"
    "for i in range(10**6):\n"
    "    e = s.append('user', {'content': sys.argv[3] + str(i)})\n"
    "    print(e.hash, e.parent or '-', flush=True)\n"
)


@contextmanager
def writer_env(w: str):
    old = os.environ.get("CTAPE_WRITER")
    os.environ["CTAPE_WRITER"] = w
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CTAPE_WRITER", None)
        else:
            os.environ["CTAPE_WRITER"] = old


class Failure(AssertionError):
    pass


def fsck_or_fail(t: Tape, what: str) -> None:
    f = t.fsck()
    if not f["ok"]:
        raise Failure(f"fsck of {what} failed: {f['problems'][:3]}")


class World:
    """The copies, the model, and the trace of what was done."""

    def __init__(self, root, rng: random.Random, ncopies: int, cli: bool, sync=None):
        self.root = root
        self.sync = sync or rsync
        self.rng = rng
        self.cli = cli
        self.dirs = [os.path.join(root, f"c{i}") for i in range(ncopies)]
        # random writer ids, so that which writer wins a tie varies between sequences
        # (a list, not a set: a set's order follows PYTHONHASHSEED, and a seed then ran another
        # sequence in every process; seed 6071 failed in 3 runs of 5)
        ids: list[str] = []
        while len(ids) < ncopies:
            w = "w" + "".join(rng.choice("0123456789abcdef") for _ in range(7))
            if w not in ids:
                ids.append(w)
        self.writers = sorted(ids, key=lambda _: rng.random())
        self.tapes: list = [None] * ncopies
        self.parent: dict[str, str | None] = {}  # every entry the model knows -> its parent
        self.acked: set[str] = set()
        self.dropped: set[str] = set()
        # entry -> the refs (session, name) a copy's own operation took it off, having it
        # there (a deletion, a checkout away): with two copies each deleting one of two refs
        # to an entry, neither drops it alone, and the sync that joins them may
        self.released: dict[str, set[tuple]] = {}
        self.trace: list[str] = []
        self.counter = 0
        with writer_env(self.writers[0]):
            t = Tape.init(self.dirs[0])
            e = t.session("s1").append("user", {"content": "start"})
            t.close()
        self.parent[e.hash] = None
        self.acked.add(e.hash)
        for d in self.dirs[1:]:
            rsync(self.dirs[0], d)

    # -- the copies ----------------------------------------------------------------------

    def tape(self, i: int) -> Tape:
        if self.tapes[i] is None:
            with writer_env(self.writers[i]):
                self.tapes[i] = Tape.open(self.dirs[i])
        return self.tapes[i]

    def close(self, i: int) -> None:
        if self.tapes[i] is not None:
            self.tapes[i].close()
            self.tapes[i] = None

    def close_all(self) -> None:
        for i in range(len(self.dirs)):
            self.close(i)

    def note(self, text: str) -> None:
        self.trace.append(self.indent + text)

    indent = ""

    def text(self, i: int) -> str:
        self.counter += 1
        return f"c{i}-{self.counter}"

    # -- what a copy shows ------------------------------------------------------------

    def refs(self, t: Tape) -> dict:
        out = {}
        for name in t.store.sessions():
            st = t.session(name).refs()
            if st.branches or st.head is not None:
                out[name] = {"branches": dict(st.branches), "head": st.head}
        return out

    def reachable(self, t: Tape, refs: dict | None = None) -> set[str]:
        refs = self.refs(t) if refs is None else refs
        roots = []
        for r in refs.values():
            roots.extend(r["branches"].values())
            h = r["head"]
            if h and not h.startswith("@"):
                roots.append(h)
        out: set[str] = set()
        stack = [h for h in roots if h]
        while stack:
            h = stack.pop()
            if h in out:
                continue
            out.add(h)
            if h not in self.parent:
                try:
                    self.parent[h] = t.read_entry(h).parent
                except Exception:  # not arrived on this copy: its ancestors are in the model or nowhere
                    continue
            p = self.parent[h]
            if p is not None:
                stack.append(p)
        return out

    # -- operations ---------------------------------------------------------------------

    def finish(self, p, k: int, before: set[str] | None, first: bytes) -> None:
        """Collect what the writer process acknowledged; check, unless an rsync into its copy
        ran meanwhile (a deletion it brought may take entries off, as any sync may), that its
        append left every entry reachable that was."""
        out, err = p.communicate(timeout=120)
        if p.returncode != 0:
            if isinstance(self, LiveWorld) and self.stale_prefix_refused(k, err.decode()):
                return
            raise Failure(f"the writer process on c{k} failed ({p.returncode}): {err.decode()[-1500:]}")
        for line in (first + out).splitlines():
            if line.startswith(b"entry "):
                _, h, parent = line.decode().split()
                self.parent[h] = None if parent == "-" else parent
                self.acked.add(h)
        if before is not None:
            self.expect_kept(k, before, "an append by a process")

    def pick_session(self, t: Tape) -> str:
        return self.rng.choice(SESSIONS)

    def op_append(self, i: int, hows: list[str] | None = None) -> None:
        t = self.tape(i)
        s = t.session(self.pick_session(t))
        how = self.rng.choice(hows or ["api", "api", "batch"] + (["cli"] if self.cli else []))
        n = self.rng.randint(1, 3)
        head = s.refs().head_hash if s.exists() else None
        if head is not None and not t.has_entry(head):
            # HEAD's entry has not arrived on this copy (a cut-off rsync brought the record
            # that moved HEAD, or this copy compacted the entry away before a claim that
            # needs it arrived): an append must refuse, never start a new root
            self.note(f"append c{i} {s.name}: HEAD {head[:8]} not on this copy yet, refused")
            with writer_env(self.writers[i]), pytest.raises(EntryNotFound):
                s.append("user", {"content": self.text(i)})
            return
        if s.exists() and s.refs().head_missing:
            # HEAD's own record has not arrived, a branch's has (a cut-off rsync): the same,
            # an append must refuse, never start a new root and take the branch from its entries
            self.note(f"append c{i} {s.name}: HEAD's record not on this copy yet, refused")
            with writer_env(self.writers[i]), pytest.raises(RefNotFound, match="HEAD's record has not arrived"):
                s.append("user", {"content": self.text(i)})
            return
        self.note(f"append c{i} {s.name} {how} x{n}")
        before = self.reachable(t)
        with writer_env(self.writers[i]):
            if how == "cli":
                self.close(i)
                for _ in range(n):
                    p = run_cli("--dir", self.dirs[i], "append", "user", json.dumps({"content": self.text(i)}), "-s", s.name)
                    h = p.stdout.decode().strip()
                    self.acked.add(h)
                t = self.tape(i)
            elif how == "batch":
                with t.batch():
                    es = [s.append("user", {"content": self.text(i)}) for _ in range(n)]
                for e in es:
                    self.parent[e.hash] = e.parent
                    self.acked.add(e.hash)
            else:
                for _ in range(n):
                    e = s.append("user", {"content": self.text(i)})
                    self.parent[e.hash] = e.parent
                    self.acked.add(e.hash)
        self.expect_kept(i, before, "append")

    def op_fork(self, i: int) -> None:
        t = self.tape(i)
        s = t.session(self.pick_session(t))
        st = s.refs()
        if st.head_hash is None or not t.has_entry(st.head_hash):
            return  # nothing to fork from yet (HEAD's entry not synced here: see op_append)
        name = f"b{self.rng.randint(1, 4)}"
        if name in st.branches:
            return
        self.note(f"fork c{i} {s.name} {name}")
        before = self.reachable(t)
        with writer_env(self.writers[i]):
            s.checkout(st.head_hash, new_branch=name)
        self.expect_kept(i, before, "fork")

    def op_checkout(self, i: int) -> None:
        t = self.tape(i)
        s = t.session(self.pick_session(t))
        st = s.refs()
        if not st.branches:
            return
        before = self.reachable(t)
        branch = self.rng.choice(sorted(st.branches))
        if self.rng.random() < 0.3:  # detached, at an ancestor of a branch
            h = st.branches[branch]
            for _ in range(self.rng.randint(0, 2)):
                p = self.parent.get(h)
                if p is None:
                    break
                h = p
            if not t.has_entry(h):
                return
            self.note(f"checkout c{i} {s.name} detached {h[:8]}")
            with writer_env(self.writers[i]):
                s.checkout(h)
        else:
            self.note(f"checkout c{i} {s.name} {branch}")
            with writer_env(self.writers[i]):
                s.checkout(f"{s.name}/{branch}")
        self.dropped |= before - self.reachable(t)

    def op_delete_branch(self, i: int) -> None:
        t = self.tape(i)
        s = t.session(self.pick_session(t))
        st = s.refs()
        if not st.branches:
            return
        branch = self.rng.choice(sorted(st.branches))
        before = self.reachable(t)
        if self.cli and self.rng.random() < 0.2 and branch != st.branch:
            self.note(f"branch -d c{i} {s.name} {branch} (cli)")
            self.close(i)
            with writer_env(self.writers[i]):
                run_cli("--dir", self.dirs[i], "branch", "-d", branch, "-s", s.name)
            t = self.tape(i)
        else:
            self.note(f"branch -D c{i} {s.name} {branch}")
            with writer_env(self.writers[i]):
                s.delete_branch(branch)
        self.dropped |= before - self.reachable(t)

    def op_delete_session(self, i: int) -> None:
        t = self.tape(i)
        s = t.session(self.pick_session(t))
        if not s.exists():
            return
        st = s.refs()
        if not st.branches and st.head is None:
            return
        self.note(f"session rm c{i} {s.name}")
        before = self.reachable(t)
        with writer_env(self.writers[i]):
            s.set_refs("session-rm", {**{b: None for b in st.branches}, "HEAD": None})
        self.dropped |= before - self.reachable(t)

    def op_copy_session(self, i: int) -> None:
        # `session cp` shares the source's entries, stored in its files: once the source is
        # removed, compact moves what the copy reaches into the copy's own pack
        t = self.tape(i)
        src = self.pick_session(t)
        new = f"k{self.rng.randint(1, 3)}"  # appends go to SESSIONS only: a copy stays as it was made
        if not t.session(src).exists() or t.session(new).exists() or t.session(src).refs().head is None:
            return
        if t.session(src).refs().head_hash is not None and not t.has_entry(t.session(src).refs().head_hash):
            return  # HEAD's entry has not arrived on this copy (see op_append)
        self.note(f"session cp c{i} {src} {new}")
        before = self.reachable(t)
        with writer_env(self.writers[i]):
            t.copy_session(src, new)
        self.expect_kept(i, before, "session cp")

    def op_sync(self, i: int) -> None:
        j = self.rng.choice([k for k in range(len(self.dirs)) if k != i])
        mode = self.rng.choice(["whole", "whole", "whole", "subset", "max-size"])
        src, dst = self.dirs[i], self.dirs[j]
        if mode == "subset":
            files = sorted(
                os.path.relpath(os.path.join(r, f), src) for r, _, fs in os.walk(src) for f in fs
            )
            chosen = [f for f in files if self.rng.random() < 0.5]
            self.note(f"rsync c{i} -> c{j} subset {len(chosen)}/{len(files)}")
            listing = os.path.join(self.root, "files-from")
            with open(listing, "w") as f:
                f.write("".join(x + "\n" for x in chosen))
            self.sync(src, dst, f"--files-from={listing}")
        elif mode == "max-size":
            limit = self.rng.choice([300, 1000, 3000])
            self.note(f"rsync c{i} -> c{j} --max-size={limit}")
            self.sync(src, dst, f"--max-size={limit}")
        else:
            self.note(f"rsync c{i} -> c{j}")
            self.sync(src, dst)

    def op_compact(self, i: int) -> None:
        t = self.tape(i)
        grace = self.rng.choice(["14d", "now"])
        expire = self.rng.choice(["90d", "now"])
        self.note(f"compact c{i} --grace {grace} --expire {expire}")
        before = self.refs(t)
        reach = self.reachable(t, before)
        with writer_env(self.writers[i]):
            t.compact(grace=grace, expire=expire)
        after = self.refs(t)
        if after != before:
            raise Failure(f"compact changed the refs of c{i}: {before} -> {after}")
        self.expect_kept(i, reach, "compact")

    def op_kill(self, i: int) -> None:
        t = self.tape(i)
        s = self.pick_session(t)
        k = self.rng.randint(1, 6)
        self.note(f"kill -9 c{i} {s} after {k}")
        before = self.reachable(t)
        self.close(i)
        env = dict(os.environ, CTAPE_WRITER=self.writers[i])
        p = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, self.dirs[i], s, self.text(i)], stdout=subprocess.PIPE, env=env)
        lines = []
        try:
            for _ in range(k):
                line = p.stdout.readline()
                if not line:
                    break
                lines.append(line)
        finally:
            p.send_signal(signal.SIGKILL)
            rest = p.communicate()[0]
        for line in lines + rest.splitlines(keepends=True):
            if line.endswith(b"\n") and len(line.split()) == 2:
                h, parent = line.decode().split()
                self.parent[h] = None if parent == "-" else parent
                self.acked.add(h)
        self.expect_kept(i, before, "killed writer")

    def expect_kept(self, i: int, before: set[str], what: str) -> None:
        lost = before - self.reachable(self.tape(i))
        if lost:
            raise Failure(f"{what} on c{i} made {len(lost)} reachable entries unreachable: {sorted(x[:12] for x in lost)}")

    OPS = [
        ("append", 10),
        ("sync", 6),
        ("fork", 2),
        ("checkout", 2),
        ("delete_branch", 2),
        ("delete_session", 1),
        ("compact", 1),
        ("kill", 0.4),
    ]

    def random_op(self) -> None:
        names = [n for n, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        name = self.rng.choices(names, weights)[0]
        i = self.rng.randrange(len(self.dirs))
        if self.rng.random() < 0.1:
            self.close(i)  # the next operation opens the copy afresh, like a new process
        self.run_op(name, i)

    def run_op(self, name: str, i: int) -> None:
        own = name not in ("sync", "compact", "kill", "live_sync", "delete_sync", "push", "pull", "cut_push", "cut_pull", "compact_remote", "cut_compact_remote", "lose_manifest")  # these move refs only by merging, or not at all
        before = self.ref_reach(self.tape(i)) if own else {}
        getattr(self, "op_" + name)(i)
        if own:
            after = self.ref_reach(self.tape(i))
            for ref, reach in before.items():
                for h in reach - after.get(ref, set()):
                    self.released.setdefault(h, set()).add(ref)

    def ref_reach(self, t: Tape) -> dict[tuple, set[str]]:
        """(session, branch or HEAD) -> the entries it reaches on this copy (HEAD attached
        reaches what its branch does: a checkout of the branch at HEAD's entry keeps it)."""
        out = {}
        for s, r in self.refs(t).items():
            for b, h in r["branches"].items():
                out[(s, b)] = self.reachable(t, {s: {"branches": {b: h}, "head": None}})
            head = r["head"]
            if head and head.startswith("@"):
                out[(s, "HEAD")] = out.get((s, head[1:]), set())
            elif head:
                out[(s, "HEAD")] = self.reachable(t, {s: {"branches": {}, "head": head}})
        return out

    def knowingly_unreferenced(self, h: str, holders: dict[str, set[tuple]]) -> bool:
        """Every ref holding `h` on any copy before the mesh was taken off it, by name, on
        some copy whose own operation had it there: deletions that each saw it, joined."""
        return h in self.released and holders.get(h, set()) <= self.released[h]

    # -- the checks ------------------------------------------------------------------

    def mesh(self, dirs: list[str], order_rng: random.Random) -> None:
        """Every copy to every other, twice, in a random order."""
        pairs = [(a, b) for a in range(len(dirs)) for b in range(len(dirs)) if a != b]
        for _ in range(2):
            order_rng.shuffle(pairs)
            for a, b in pairs:
                self.sync(dirs[a], dirs[b])

    def star(self, dirs: list[str], order_rng: random.Random) -> None:
        """Another order that also leaves every copy with everything: all into one, then out."""
        hub = order_rng.randrange(len(dirs))
        others = [i for i in range(len(dirs)) if i != hub]
        order_rng.shuffle(others)
        for i in others:
            self.sync(dirs[i], dirs[hub])
        order_rng.shuffle(others)
        for i in others:
            self.sync(dirs[hub], dirs[i])

    def check(self, epoch: int, final: bool) -> None:
        """The full mesh and the invariants; on the last epoch also the order of the syncs
        and what a compaction keeps (on a copy of the copies, so nothing changes here)."""
        holders: dict[str, set[tuple]] = {}
        for i in range(len(self.dirs)):
            for ref, reach in self.ref_reach(self.tape(i)).items():
                for h in reach:
                    holders.setdefault(h, set()).add(ref)
        self.close_all()
        alt = [os.path.join(self.root, f"alt{epoch}-{i}") for i in range(len(self.dirs))] if final else []
        for d, a in zip(self.dirs, alt):  # like cp -a: contents, modes and times
            shutil.copytree(d, a, symlinks=True)
        self.note("mesh")
        self.mesh(self.dirs, random.Random(self.rng.random()))
        refs = []
        for i, d in enumerate(self.dirs):
            t = self.tape(i)
            r = self.refs(t)
            refs.append(r)
            fsck_or_fail(t, os.path.basename(d))
            hidden = {h for h in self.acked - self.dropped - self.reachable(t, r) if not self.knowingly_unreferenced(h, holders)}
            if hidden:
                raise Failure(
                    f"{os.path.basename(d)}: {len(hidden)} acknowledged entries on no ref: "
                    f"{sorted(h[:12] for h in hidden)}; refs {short(r)}"
                )
        if not alt:
            self.check_agree(self.dirs, refs)
            return
        self.star(alt, random.Random(self.rng.random()))
        for i, d in enumerate(alt):
            with writer_env(self.writers[i]):
                t = Tape.open(d)
            try:
                refs.append(self.refs(t))
            finally:
                t.close()
        self.check_agree(self.dirs + alt, refs)
        # a compaction with nothing young frees everything no ref reaches
        with writer_env(self.writers[0]):
            t = Tape.open(alt[0])
        try:
            t.compact(expire="now", grace="now")
            r = self.refs(t)
            if r != refs[0]:
                raise Failure(f"compact --expire now changed the refs: {short(r)} != {short(refs[0])}")
            reach = self.reachable(t, r)
            stored = t.stats()["entries"]
            if stored != len(reach):
                raise Failure(f"compact --expire now --grace now kept {stored} entries, but refs reach only {len(reach)}")
            fsck_or_fail(t, "the copy compacted with --expire now")
        finally:
            t.close()
        for a in alt:
            shutil.rmtree(a)

    @staticmethod
    def check_agree(dirs, refs) -> None:
        for d, r in zip(dirs[1:], refs[1:]):
            if r != refs[0]:
                raise Failure(f"{os.path.basename(d)} disagrees with c0: {short(r)} != {short(refs[0])}")


class _Cut(Exception):
    """A push or pull stopped after some requests, as a kill would stop it."""


class _Cutting:
    """A remote backend that fails after `left` requests (the rest of the call never runs)."""

    def __init__(self, backend, left: int):
        self.backend, self.left = backend, left

    def __getattr__(self, name):
        attr = getattr(self.backend, name)
        if name not in ("get", "put_if_absent", "list", "delete"):
            return attr

        def call(*args, **kw):
            if self.left <= 0:
                raise _Cut()
            self.left -= 1
            out = attr(*args, **kw)
            return list(out) if name == "list" else out

        return call

    def __setattr__(self, name, value):
        if name in ("backend", "left"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.backend, name, value)


class _Interleaving(_Cutting):
    """A remote backend that runs `hook` once, before its request number `at`: another
    process's work lands between two requests of a push or pull."""

    def __init__(self, backend, at: int, hook):
        object.__setattr__(self, "hook", hook)
        super().__init__(backend, at)

    def __getattr__(self, name):
        attr = getattr(self.backend, name)
        if name not in ("get", "put_if_absent", "list", "delete"):
            return attr

        def call(*args, **kw):
            if self.left == 0:
                self.hook()
            self.left -= 1
            out = attr(*args, **kw)
            return list(out) if name == "list" else out

        return call

    def __setattr__(self, name, value):
        if name in ("backend", "left", "hook"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.backend, name, value)


@contextmanager
def summaries(every: int, worth: int):
    """Summaries of the manifests written at every compact --remote with `every`, read by a
    reader with `worth` manifests to read (ctape/sync/summary.py)."""
    from ctape.sync import summary

    old = summary.SUMMARY_EVERY, summary.SUMMARY_WORTH
    summary.SUMMARY_EVERY, summary.SUMMARY_WORTH = every, worth
    try:
        yield
    finally:
        summary.SUMMARY_EVERY, summary.SUMMARY_WORTH = old


class RemoteWorld(World):
    """The model with a remote (SPEC section 17) beside rsync: push and pull are transports
    like rsync, mixed with it freely. Operations add push and pull of a copy (all its
    sessions or some), and a push or pull cut off after a few requests (as a kill would
    leave it; the copy is then reopened like a new process). The mesh is a push of every
    copy then a pull of every copy, twice, in random orders; the other order (`star`) is
    rsync through a hub after each copy pulled, so the two transports must agree."""

    OPS = World.OPS + [("push", 4), ("pull", 4), ("cut_push", 1), ("cut_pull", 1), ("compact_remote", 1), ("cut_compact_remote", 0.5),
                       ("live_push", 1.5), ("live_pull", 1)]

    def __init__(self, root, rng, ncopies, cli, sync=None):
        super().__init__(root, rng, ncopies, cli, sync)
        self.remote = os.path.join(root, "remote")
        os.mkdir(self.remote)
        self.url = f"file://{self.remote}"
        for i in range(ncopies):
            self._add_remote(self.tape(i))

    def _add_remote(self, t: Tape) -> None:
        from ctape.sync import remote as remotes

        if "origin" not in remotes.remotes(t.store):
            remotes.add(t.store, "origin", self.url)

    def _transfer(self, verb: str, i: int, t: Tape, cut: int | None = None, sessions=(), grace="now", expire="now", hook=None) -> dict:
        from ctape.sync.backend import open_backend
        from ctape.sync.prune import compact_remote
        from ctape.sync.pull import pull
        from ctape.sync.push import push

        backend = open_backend(self.url)
        if cut is not None:
            backend = _Cutting(backend, cut)
        if hook is not None:
            backend = _Interleaving(backend, *hook)
        with writer_env(self.writers[i]), summaries(every=1, worth=1):  # (written at each compact --remote, read by every reader)
            if verb == "push":
                import ctape.sync.push as push_mod

                every = getattr(push_mod, "OWN_CHECK_EVERY", None)
                push_mod.OWN_CHECK_EVERY = 0.0  # each push looks for its own lost manifests (hourly otherwise)
                try:
                    return push(t, backend, "origin", sessions)
                finally:
                    push_mod.OWN_CHECK_EVERY = every
            elif verb == "compact_remote":
                return compact_remote(t, backend, "origin", expire=expire, grace=grace)
            else:
                return pull(t, backend, "origin", sessions)

    def op_push(self, i: int) -> None:
        t = self.tape(i)
        sessions = [s for s in t.store.sessions() if self.rng.random() < 0.5] if self.rng.random() < 0.3 else []
        self.note(f"push c{i}" + (f" -s {' '.join(sessions)}" if sessions else ""))
        self._transfer("push", i, t, sessions=sessions)

    def op_pull(self, i: int) -> None:
        t = self.tape(i)
        sessions = [s for s in SESSIONS if self.rng.random() < 0.5] if self.rng.random() < 0.3 else []
        self.note(f"pull c{i}" + (f" -s {' '.join(sessions)}" if sessions else ""))
        self._transfer("pull", i, t, sessions=sessions)  # like rsync: may bring a deletion

    def op_compact_remote(self, i: int) -> None:
        """compact --remote: mostly `--grace now` (plans carried out at once: the harshest
        case, which pushes after it must repair), sometimes a plan left for later."""
        grace = self.rng.choice(["now", "now", "14d"])
        expire = self.rng.choice(["now", "90d"])
        self.note(f"compact --remote c{i} --grace {grace} --expire {expire}")
        self._transfer("compact_remote", i, self.tape(i), grace=grace, expire=expire)

    def op_cut_compact_remote(self, i: int) -> None:
        self._cut("compact_remote", i, most=40)

    def _cut(self, verb: str, i: int, most: int = 12) -> None:
        n = self.rng.randint(0, most)
        self.note(f"{verb} c{i} cut after {n} requests")
        try:
            self._transfer(verb, i, self.tape(i), cut=n)
        except _Cut:
            pass
        self.close(i)  # what a killed process leaves: the next operation opens it anew

    def op_live_push(self, i: int) -> None:
        self._live("push", i)

    def op_live_pull(self, i: int) -> None:
        self._live("pull", i)

    def _live(self, verb: str, i: int) -> None:
        """A push or pull of copy i while a writer process appends to that copy: the
        writer's appends land between two requests, after the transfer has read some files
        (and sealed them: it reads as a copy does) and before it read others."""
        at, n = self.rng.randint(0, 12), self.rng.randint(1, 3)
        how = self.rng.choice(["api", "batch"])
        self.note(f"{verb} c{i}, a writer process on c{i} appending {how} x{n} before request {at}")
        self._transfer(verb, i, self.tape(i), hook=(at, lambda: self._append_by_process(i, how, n, check=verb == "push")))

    def _append_by_process(self, k: int, how: str, n: int, check: bool) -> None:
        """`check`: nothing reachable before may go (a pull under way may bring a deletion)."""
        t = self.tape(k)
        s = self.pick_session(t)
        st = t.session(s).refs() if t.session(s).exists() else None
        if st is not None and ((st.head_hash is not None and not t.has_entry(st.head_hash)) or st.head_missing):
            return  # the append would refuse (see op_append)
        before = self.reachable(t) if check else None
        env = dict(os.environ, CTAPE_WRITER=self.writers[k])
        p = subprocess.Popen(
            [sys.executable, "-c", PAUSED_WRITER, self.dirs[k], s, how, str(n), str(10**9), self.text(k)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )
        self.note(f"    | append c{k} {s} {how} x{n}: a process")
        self.finish(p, k, before, b"")

    def op_cut_push(self, i: int) -> None:
        self._cut("push", i)

    def op_cut_pull(self, i: int) -> None:
        self._cut("pull", i)

    SETTLE_ROUNDS = 4  # after the mesh's two rounds, push and pull settle within these

    def mesh(self, dirs: list[str], order_rng: random.Random) -> None:
        order = list(range(len(dirs)))
        for _ in range(2):
            for verb in ("push", "pull"):
                order_rng.shuffle(order)
                for i in order:
                    self._transfer(verb, i, self.tape(i))
        # and then they settle: a round of push and pull of every copy that moves nothing
        # comes (a pack uploaded again after a remote compaction deleted it made the others
        # compact at each push and fetch it back at each pull, for good: a black-box audit)
        for _ in range(self.SETTLE_ROUNDS):
            moved = []
            for verb in ("push", "pull"):
                order_rng.shuffle(order)
                for i in order:
                    r = self._transfer(verb, i, self.tape(i))
                    if r.get("files") or r.get("bytes"):
                        moved.append(f"{verb} c{i}: {r.get('files')} files, {r.get('bytes')} bytes")
            if not moved:
                break
        else:
            raise Failure(f"push and pull do not settle: after {self.SETTLE_ROUNDS} more rounds still {moved}")
        self.close_all()

    def check(self, epoch: int, final: bool) -> None:
        super().check(epoch, final)
        self.check_clone(epoch)

    def check_clone(self, epoch: int) -> None:
        """After the mesh, a new clone of the remote shows what every copy shows: the same
        refs, fsck clean, and no warning (a piece a manifest lists and the remote lacks).
        CI found a clone without a session the remote held whole: a piece listed again
        after its deletion was taken for the first listing. The clone's writer id sorts
        before every copy's, so it reads their manifests in the order that found it."""
        from ctape.sync.backend import open_backend
        from ctape.sync.pull import clone

        from ctape.sync.remote import State

        refs = self.refs(self.tape(0))
        self.close_all()
        learnt = []
        # a clone reading every manifest from its key, and one reading what the newest
        # summary holds from it (summary.py): they must learn the same
        for worth in (10**9, 1):
            dest = os.path.join(self.root, f"clone{epoch}")
            warned: list[str] = []
            with writer_env("0000clone"), summaries(every=1, worth=worth):
                clone(open_backend(self.url), self.url, None, dest, warn=warned.append)
                t = Tape.open(dest)
            try:
                if warned:
                    raise Failure(f"a new clone warned{' (through a summary)' if worth == 1 else ''}: {warned[:3]}")
                r = self.refs(t)
                if r != refs:
                    raise Failure(f"a new clone disagrees with c0: {short(r)} != {short(refs)}")
                fsck_or_fail(t, "a new clone")
                learnt.append({k: v for k, v in State.load(t.store, "origin", self.url).items() if k not in ("checked", "made", "summaries")})
            finally:
                t.close()
            shutil.rmtree(dest)
        if learnt[0] != learnt[1]:
            diff = sorted(k for k in set(learnt[0]) | set(learnt[1]) if learnt[0].get(k) != learnt[1].get(k))
            raise Failure(f"a clone through the summary learnt other than one reading every manifest: {diff}")

    def star(self, dirs: list[str], order_rng: random.Random) -> None:
        for i, d in enumerate(dirs):  # copies of the copies: their remotes are not theirs
            with writer_env(self.writers[i]):
                t = Tape.open(d)
            try:
                self._add_remote(t)
                self._transfer("pull", i, t)
            finally:
                t.close()
        super().star(dirs, order_rng)


class LostManifestWorld(RemoteWorld):
    """RemoteWorld with one more operation: a manifest deleted from the remote by another
    tool, or lost to a backup restored over it. Readers read past it, and the copies that
    hold what it listed push that again (docs/remotes.md, "A remote that lost manifests"):
    after the mesh every copy and a new clone agree, and the clone warns of nothing (the
    copy that wrote the lost manifest filled its number). A subclass, so that the named
    seeds of RemoteWorld keep their sequences."""

    OPS = RemoteWorld.OPS + [("lose_manifest", 2)]

    def op_lose_manifest(self, i: int) -> None:
        """Delete one of the remote's manifests (`i` and the sequence's randomness pick it)."""
        found = sorted(os.path.relpath(os.path.join(r, f), self.remote) for r, _, fs in os.walk(os.path.join(self.remote, "m"))
                       for f in fs if f.endswith(".json"))
        if not found:
            return
        key = found[i * 7919 % len(found)] if self.rng.random() < 0.5 else self.rng.choice(found)
        self.note(f"lose {key} from the remote")
        os.remove(os.path.join(self.remote, key))



class RedactWorld(World):
    """The same model with one more operation: `redact` of an entry's text on one copy (the
    entry picked on HEAD's path there). The model keeps each redacted entry's text. After
    every mesh, every copy that has a redacted entry reads the marker where its text was;
    at the end, once each copy has compacted, no file of any copy and no index cache holds
    the text (records decompressed), and every redacted entry a ref reaches is still there."""

    OPS = World.OPS + [("redact", 2)]
    MARKER = "[redacted: manual]"

    def __init__(self, *a, **kw):
        self.secrets: dict[str, str] = {}  # entry -> the text its redaction removed
        super().__init__(*a, **kw)

    def text(self, i: int) -> str:
        # a killed writer appends its own counter to the text it is given: "c1-1" + "1"
        # would be "c1-11", the text of another entry; the dot keeps every text unique
        return super().text(i) + "."

    def op_redact(self, i: int) -> None:
        from ctape.ops.redact import redact

        t = self.tape(i)
        s = t.session(self.pick_session(t))
        h = s.refs().head_hash if s.exists() else None
        for _ in range(self.rng.randrange(4)):
            if h is None or not t.has_entry(h):
                break
            h = t.read_entry(h).parent
        if h is None or not t.has_entry(h):
            self.note(f"redact c{i} {s.name}: no entry at hand")
            return
        e = t.read_entry(h)
        text = e.payload.get("content") if isinstance(e.payload, dict) else None
        if not isinstance(text, str) or text.startswith("[redacted"):
            self.note(f"redact c{i} {s.name}: {h[:8]} already redacted")
            return
        self.note(f"redact c{i} {s.name} {h[:8]} ({text})")
        with writer_env(self.writers[i]):
            redact(t, s.name, [(h, "$.payload.content", "manual")])
        self.secrets[h] = text
        if t.read_entry(h).payload["content"] != self.MARKER:
            raise Failure(f"c{i}: {h[:12]} still reads {t.read_entry(h).payload['content']!r} after its redaction")

    def check(self, epoch: int, final: bool) -> None:
        super().check(epoch, final)
        for i, d in enumerate(self.dirs):
            t = self.tape(i)
            for h, text in self.secrets.items():
                if t.has_entry(h) and t.read_entry(h).payload.get("content") != self.MARKER:
                    raise Failure(f"{os.path.basename(d)}: {h[:12]} reads {t.read_entry(h).payload.get('content')!r} after the mesh, not the marker")
        if not final or not self.secrets:
            return
        from test_privacy_sync import holders

        for i in range(len(self.dirs)):
            t = self.tape(i)
            reached = self.reachable(t) & set(self.secrets)
            with writer_env(self.writers[i]):
                t.compact(expire="now", grace="now")
            for h in reached:
                if t.read_entry(h).payload.get("content") != self.MARKER:
                    raise Failure(f"c{i}: {h[:12]} does not read the marker after compact")
        places = self.compact_elsewhere()
        self.close_all()
        for h, text in self.secrets.items():
            found = holders(json.dumps(text).encode(), *self.dirs, os.environ["CTAPE_CACHE_DIR"], *places)
            if found:
                raise Failure(f"the text of redacted {h[:12]} ({text}) is still in {found} after every copy compacted")

    def compact_elsewhere(self) -> list[str]:
        """Compact what else may hold the texts, once the copies have; the folders to search."""
        return []


class RemoteRedactWorld(RedactWorld, RemoteWorld):
    """RedactWorld with the remote beside rsync: redactions travel by push and pull too,
    and at the end the remote, compacted, holds none of the texts either (its folder
    searched as the copies are: as it is and inside every zstd frame). Along the way, a
    text that a `compact --remote` of a copy knowing its redaction removed from the remote
    never comes back with a push (a copy that has not pulled the redaction refuses), and no
    push or `compact --remote` uploads a text whose redaction its copy knows."""

    OPS = RemoteWorld.OPS + [("redact", 2)]

    def __init__(self, *a, **kw):
        self.cleaned: set[str] = set()  # redacted entries whose text a compaction of the remote removed
        super().__init__(*a, **kw)

    def _transfer(self, verb: str, i: int, t: Tape, *a, **kw) -> dict:
        """A push refuses while a redacted value still has its bytes in the copy's files
        (SPEC 18), or while the copy holds values a compaction of the remote removed as
        redacted elsewhere: do as the refusal says (pull first in the second case; then
        compact) and push again (it must go through then)."""
        from ctape.sync.push import SecretsFound

        sends = verb in ("push", "compact_remote")
        held = self._held_by_remote() if sends else set()
        try:
            r = super()._transfer(verb, i, t, *a, **kw)
        except SecretsFound as e:
            if verb != "push":
                raise
            if "ctape pull" in str(e):
                self.note(f"  push c{i} refused: the remote removed values redacted elsewhere that are here; pull, compact, push again")
                super()._transfer("pull", i, t)
            else:
                self.note(f"  push c{i} refused: redacted bytes still here; compact, push again")
            r = None
        if verb == "push" and r is not None and r["held_back"]:
            # the others went up; the held-back sessions' redacted bytes are still here
            self.note(f"  push c{i} held back {', '.join(sorted(r['held_back']))}: redacted bytes still here; compact, push again")
            r = None
        if r is None:
            with writer_env(self.writers[i]):
                t.compact()
            r = super()._transfer(verb, i, t, *a, **kw)
            if r["held_back"]:
                raise Failure(f"push c{i} held back {r['held_back']} after the compaction its refusal asked for")
        if not sends:
            return r
        now = self._held_by_remote()
        known = t.redactions()
        # a copy never uploads a text whose redaction it knows (whichever of its files holds
        # it: one the index does not name, one rsync brought back after a compaction)
        uploaded = sorted(h for h in now - held if h in known)
        if uploaded:
            raise Failure(f"{verb} c{i} uploaded the text of {uploaded[0][:12]} ({self.secrets[uploaded[0]]}), whose redaction it knew")
        if verb == "push":
            self._still_clean(i, now)
        else:
            # a `compact --remote` of a copy that knew the redaction took the text off the
            # remote (`--grace now`, or a plan of an earlier run carried out): no push may
            # bring it back. (A text the remote never held may arrive with a copy that has
            # not seen its redaction, as before it was made: the next compaction removes it.)
            self.cleaned |= {h for h in held - now if h in known}
        return r

    def _held_by_remote(self) -> set[str]:
        """The redacted entries whose text the remote holds (records decompressed)."""
        from test_privacy_sync import holders

        if not self.secrets:
            return set()
        remote = self._remote_as_tape()
        return {h for h, text in self.secrets.items() if holders(json.dumps(text).encode(), remote)}

    def _still_clean(self, i: int, held: set[str]) -> None:
        back = sorted(self.cleaned & held)
        if back:
            raise Failure(f"push c{i} put the text of redacted {back[0][:12]} ({self.secrets[back[0]]}) back on the remote, which a compaction of a copy that knew the redaction had cleaned")

    def compact_elsewhere(self) -> list[str]:
        self._transfer("compact_remote", 0, self.tape(0))
        return [self._remote_as_tape()]

    def _remote_as_tape(self) -> str:
        """The remote's data files put back together (each is kept as its byte ranges,
        f/SESSION/FILE/START-END) in a tape folder of their own, so that the search reads
        their records as ctape does, blocks decompressed with their dictionaries."""
        out = os.path.join(self.root, "remote-as-tape")
        shutil.rmtree(out, ignore_errors=True)
        Tape.init(out).close()
        base = os.path.join(self.remote, "f")
        for session in os.listdir(base) if os.path.isdir(base) else []:
            for name in os.listdir(os.path.join(base, session)):
                parts = sorted(os.listdir(os.path.join(base, session, name)), key=lambda r: int(r.split("-")[0]))
                os.makedirs(os.path.join(out, "sessions", session), exist_ok=True)
                with open(os.path.join(out, "sessions", session, name), "wb") as f:
                    for part in parts:
                        with open(os.path.join(base, session, name, part), "rb") as src:
                            f.write(src.read())
        return out


class CleanedRemoteWorld(RemoteRedactWorld):
    """RemoteRedactWorld weighted towards what cleans a remote and what could dirty it
    again: appends, pushes and pulls, redactions on one copy, `compact --remote` (rsync
    rarely, which would carry the redactions to every copy). The check of every push
    above (no redacted text back on a remote that a compaction cleaned of it) then meets
    copies that hold a text redacted elsewhere, and their pushes."""

    OPS = [("append", 6), ("push", 4), ("pull", 2), ("redact", 3), ("compact_remote", 2), ("compact", 1), ("fork", 1), ("sync", 0.5)]


class RsyncedRedactionWorld(RemoteRedactWorld):
    """RemoteRedactWorld weighted towards rsync between the copies beside redactions,
    compactions and pushes: files that a copy's compaction replaced come back from a copy
    taken before, and copies hold the same entries in files the index does not name. The
    check of every push (no text goes up from a copy that knows its redaction) then meets
    those files."""

    OPS = [("append", 5), ("sync", 4), ("redact", 3), ("compact", 2), ("push", 3), ("pull", 1), ("compact_remote", 1), ("fork", 0.5)]


class LiveWorld(World):
    """The model with writers working while an rsync runs (see the module's docstring)."""

    OPS = World.OPS + [("live_sync", 5)]
    paused = None  # a writer process stopped in the middle of its append: [process, copy, reachable before]
    paused_files = 0  # files the rsync copies before it goes on

    def op_live_sync(self, i: int) -> None:
        j = self.rng.choice([k for k in range(len(self.dirs)) if k != i])
        incremental = self.rng.random() < 0.4
        real = self.rng.random() < (0.5 if self.sync is rsync else 0.15)
        busy = self.rng.choice([0.15, 0.35, 0.7])  # how often a writer works between two files
        src, dst = self.dirs[i], self.dirs[j]
        self.note(
            f"live rsync c{i} -> c{j}: listed {'folder by folder' if incremental else 'at the start'}, "
            f"{'rsync' if real else 'in-process copy'} per file, writers between {busy:.0%} of files"
        )
        folders = []
        order = rsync_order(src, incremental)  # lists when first asked: a writer may work before
        try:
            while True:
                self.between_files(i, j, busy)
                try:
                    rel, st = next(order)
                except StopIteration:
                    break
                if stat.S_ISDIR(st.st_mode):
                    folders.append((rel, st))
                    os.makedirs(os.path.join(dst, rel), exist_ok=True)
                    continue
                what = rsync_one(src, dst, rel) if real else copy_one_like_rsync(src, dst, rel, st, lambda: self.opened(i, rel, busy))
                self.note(f"  {rel}: {what}")
                if self.paused is not None and self.paused[1] == j and what.startswith("sent"):
                    self.paused[2] = None  # the copy merges what it brought: see finish
        finally:
            if self.paused is not None:
                self.resume()
        for rel, st in reversed(folders):  # rsync sets the folders' times last
            d = os.path.join(dst, rel)
            os.utime(d, ns=(os.lstat(d).st_atime_ns, st.st_mtime_ns))

    def run_op(self, name: str, i: int) -> None:
        try:
            super().run_op(name, i)
        except (CorruptObject, Failure) as e:
            if not self.stale_prefix_refused(i, str(e)):
                raise

    def stale_prefix_refused(self, i: int, message: str) -> bool:
        """Is this refusal on copy i the one docs/sync.md leaves ("Writers appending while
        rsync runs", what is left): a copy whose size was taken before a write and whose
        read came after it holds a prefix of the writer's segment; before the writer sees
        that read (its next write, look or close), the prefix reaches copy i, which had
        read the longer file from the writer's copy, and copy i refuses to write to the
        session until a sync from a copy with the whole file. The writer's own copy never
        takes it (its descriptor repeats what the prefix lacks), and every other refusal
        is a failure; the mesh after it must leave every copy whole and fsck clean."""
        m = re.search(r"lost acknowledged records: (sessions/[^ ]+\.seg) is shorter", message)
        if m is None:
            return False
        rel = m.group(1)
        writer = os.path.basename(rel).split("-")[0]
        if writer not in self.writers or self.writers.index(writer) == i:
            return False
        w = self.writers.index(writer)

        def content(k):  # O_NOATIME: the look must not seal the writer's segment
            try:
                fd = os.open(os.path.join(self.dirs[k], rel), os.O_RDONLY | os.O_NOATIME)
            except FileNotFoundError:
                return None
            with os.fdopen(fd, "rb") as f:
                return f.read()

        here, there = content(i), content(w)
        if here is None or there is None or not (len(here) < len(there) and there.startswith(here)):
            return False
        self.note(f"refused on c{i}: its {rel} is a prefix ({len(here)} of {len(there)} bytes) of c{w}'s, "
                  f"from a copy taken in rsync's open window (docs/sync.md, what is left)")
        return True

    def between_files(self, i: int, j: int, busy: float) -> None:
        if self.paused is not None:
            self.paused_files -= 1
            if self.paused_files < 0:
                self.resume()
        elif self.rng.random() < busy:
            self.writer_between(self.rng.choice([i, j]))

    def opened(self, i: int, rel: str, busy: float) -> None:
        """Between the copy's open of a segment of copy i and its first read: the writer of
        this process on copy i may append (to that very segment: its size is taken, the
        read not done yet). Not a process that exits before the read: nothing can see that
        read then, which is the case docs/sync.md leaves open ("Writers appending while
        rsync runs")."""
        if self.paused is None and rel.endswith(".seg") and self.rng.random() < busy / 2:
            self.note(f"  {rel}: opened, its size taken; a writer works before the first read")
            self.indent = "    | "
            try:
                self.op_append(i, hows=["api", "api", "batch"])
            finally:
                self.indent = ""

    def writer_between(self, k: int) -> None:
        """A writer on copy k appends (one, a batch, the CLI) or forks, between two files;
        or a writer process starts an append and stops in the middle of it (see pause)."""
        self.indent = "    | "
        try:
            if self.rng.random() < 0.4:
                self.pause(k)
                return
            if self.rng.random() < 0.3:
                self.note(f"c{k} reopened")
                self.close(k)  # a new process: what it knows of its segment is what the files say
            self.run_op(self.rng.choice(["append", "append", "append", "fork"]), k)
        finally:
            self.indent = ""

    def pause(self, k: int) -> None:
        """A writer process on copy k starts an append (one or a batch) and stops right after
        its Nth call that changes a file (os.open to write, write, fsync, rename, link,
        utime...: each done for real) or looks at one (fstat), with whatever that left on
        disk: a segment just created and still empty, a write not yet synced, a segment the
        writer has just found unread and is about to append to. The rsync copies a few more files
        (or lists the folder, if it has not yet), then the writer goes on and finishes."""
        t = self.tape(k)
        s = self.pick_session(t)
        st = t.session(s).refs() if t.session(s).exists() else None
        if st is not None and ((st.head_hash is not None and not t.has_entry(st.head_hash)) or st.head_missing):
            return  # the append would refuse (see op_append)
        how = self.rng.choice(["api", "batch"])
        n, at = self.rng.randint(1, 3), self.rng.randint(1, 14)
        before = self.reachable(t)
        self.close(k)
        env = dict(os.environ, CTAPE_WRITER=self.writers[k])
        p = subprocess.Popen(
            [sys.executable, "-c", PAUSED_WRITER, self.dirs[k], s, how, str(n), str(at), self.text(k)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )
        if not select.select([p.stdout], [], [], 120)[0]:
            p.kill()
            raise Failure(f"the writer process on c{k} neither stopped nor ended in 120 s: {p.communicate()[1].decode()[-1500:]}")
        line = p.stdout.readline()
        if line.startswith(b"paused"):
            self.paused, self.paused_files = [p, k, before], self.rng.randint(0, 3)
            self.note(f"append c{k} {s} {how} x{n}: a process, stopped after {line.split()[1].decode()} (call {at})")
            return
        self.note(f"append c{k} {s} {how} x{n}: a process, ran through (fewer than {at} calls)")
        self.finish(p, k, before, line)

    def resume(self) -> None:
        p, k, before = self.paused
        self.paused = None
        self.note(f"    | c{k}'s writer goes on")
        p.stdin.write(b"\n")
        p.stdin.flush()
        self.finish(p, k, before, b"")


PAUSED_WRITER = r"""
import os, sys
import ctape
root, session, how, n, at, text = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
calls, armed = 0, False

def stopping(name):
    real = getattr(os, name)
    def call(*args, **kw):
        global calls
        out = real(*args, **kw)
        if armed and (name != "open" or (args[1] if len(args) > 1 else kw["flags"]) & WRITING):
            calls += 1
            if calls == at:
                print("paused", name, flush=True)
                sys.stdin.readline()
        return out
    return call

# each call done for real, then (at the chosen one) the process waits for a line on stdin;
# only calls that change something count (not an open for reading), and fstat: a writer
# decides from it whether its segment was read, then writes: a copy may come in between
WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT
for name in ("open", "fstat", "write", "fsync", "fdatasync", "rename", "replace", "link", "unlink", "mkdir", "ftruncate", "truncate", "utime"):
    setattr(os, name, stopping(name))
t = ctape.Tape.open(root)
s = t.session(session)
armed = True
if how == "batch":
    with t.batch():
        es = [s.append("user", {"content": f"{text}.{i}"}) for i in range(n)]
else:
    es = [s.append("user", {"content": f"{text}.{i}"}) for i in range(n)]
armed = False
for e in es:
    print("entry", e.hash, e.parent or "-", flush=True)
t.close()
"""

def short(refs: dict) -> dict:
    return {s: {"branches": {b: h[:8] for b, h in r["branches"].items()}, "head": (r["head"] or "")[:9]} for s, r in refs.items()}


class CopyWorld(World):
    """The same model with sessions copied (`session cp`) and removed more often: a copy
    shares the source's entries, stored in the source's files, and once the source is
    removed, compact moves what the copy reaches into the copy's own pack (the removed
    session's folder keeps only its records)."""

    OPS = World.OPS + [("copy_session", 2), ("delete_session", 1.5), ("compact", 1)]

    def check(self, epoch: int, final: bool) -> None:
        super().check(epoch, final)
        for i in range(len(self.dirs)):  # every copy compacted once the mesh brought it all
            self.op_compact(i)

    def op_compact(self, i: int) -> None:
        super().op_compact(i)
        t = self.tape(i)
        reach = self.reachable(t)
        for name in t.store.sessions():
            if t.session(name).exists():
                continue
            held = {r.body[:32].hex() for rel in t.store.list_files(name) for r in t.store.scan_file(rel)
                    if isinstance(r, framing.Record) and r.type == framing.T_OBJECT}
            if held & reach:
                raise Failure(f"compact left {len(held & reach)} entries other sessions reach in removed session {name}'s files on c{i}")


class DeleteWorld(World):
    """The same model with `rsync -a --delete` from one copy to another, on copies that
    were written to (docs/sync.md says not to; people do): the receiver loses its files
    that the sender lacks. It goes on either by `fsck --salvage` (its cache noticed) or
    with a cache that never knew them (a new process with a dropped index), and writes
    more. An entry that only the receiver held is gone for good (the model drops it); every
    other one comes back with the next syncs and must be on a ref of every copy after the
    mesh, the writer's own records it had lost included (docs/format.md section 12, "Gaps")."""

    OPS = World.OPS + [("delete_sync", 4)]

    def op_delete_sync(self, i: int) -> None:
        j = self.rng.choice([k for k in range(len(self.dirs)) if k != i])
        how = self.rng.choice(["salvage", "dropped cache"])
        self.note(f"rsync --delete c{i} -> c{j}, then {how}")
        elsewhere: set[str] = set()
        for k in range(len(self.dirs)):
            if k != j:
                t = self.tape(k)
                elsewhere |= {h for h in self.acked if t.has_entry(h)}
        self.close_all()
        rsync(self.dirs[i], self.dirs[j], "--delete")
        with writer_env(self.writers[j]):
            t = Tape.open(self.dirs[j])
        try:
            if how == "salvage":
                t.salvage()
                cache = None
            else:
                cache = t.store.index.path
        finally:
            t.close()
        if cache and cache != ":memory:":
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(cache + suffix):
                    os.remove(cache + suffix)
        self.dropped |= {h for h in self.acked if h not in elsewhere}


def rsync(src, dst, *flags):
    subprocess.run(["rsync", "-a", *flags, f"{src}/", f"{dst}/"], check=True, capture_output=True)


def copy_like_rsync(src, dst, *flags):
    """What plain `rsync -a SRC/ DST/` does, in this process (the long run's final syncs:
    a process per rsync made them most of its time): a file whose size or modification
    time differs is read whole, written to a temporary name beside its destination and
    renamed over it with the source's mode and times; folders get the source's times.
    Understands the two flags the operations use: --files-from=LIST and --max-size=N."""
    only, max_size = None, None
    for f in flags:
        if f.startswith("--files-from="):
            with open(f.split("=", 1)[1]) as fh:
                only = {line.strip() for line in fh if line.strip()}
        elif f.startswith("--max-size="):
            max_size = int(f.split("=", 1)[1])
    for root, dirs, files in os.walk(src):
        dirs.sort()
        rel = os.path.relpath(root, src)
        droot = dst if rel == "." else os.path.join(dst, rel)
        if only is None:
            os.makedirs(droot, exist_ok=True)
        for name in sorted(files):
            s, d = os.path.join(root, name), os.path.join(droot, name)
            if only is not None and os.path.relpath(s, src) not in only:
                continue
            st = os.lstat(s)
            if max_size is not None and st.st_size > max_size:
                continue
            try:
                dt = os.lstat(d)
                if dt.st_size == st.st_size and dt.st_mtime_ns == st.st_mtime_ns:
                    continue
            except FileNotFoundError:
                pass
            os.makedirs(droot, exist_ok=True)
            tmp = os.path.join(droot, f".{name}.sync")
            shutil.copyfile(s, tmp)
            os.chmod(tmp, st.st_mode & 0o7777)
            os.utime(tmp, ns=(time.time_ns(), st.st_mtime_ns))
            os.rename(tmp, d)
    for root, dirs, _ in os.walk(src, topdown=False):
        rel = os.path.relpath(root, src)
        droot = dst if rel == "." else os.path.join(dst, rel)
        if os.path.isdir(droot):
            os.utime(droot, ns=(os.lstat(droot).st_atime_ns, os.lstat(root).st_mtime_ns))


def rsync_order(src, incremental: bool):
    """(path, lstat) of every folder and file under src, in the order `rsync -a` sends them:
    a folder's files by name, then its subfolders. Listed all at the start (what rsync's
    file list holds: nothing made later is sent), or each folder when the walk gets to it
    (its incremental recursion: folders and files made meanwhile are sent)."""

    def listed(rel):
        d = src if rel == "" else os.path.join(src, rel)
        try:
            names = sorted(os.listdir(d))
        except FileNotFoundError:
            return [], []
        files, folders = [], []
        for n in names:
            r = n if rel == "" else os.path.join(rel, n)
            try:
                st = os.lstat(os.path.join(src, r))
            except FileNotFoundError:
                continue
            (folders if stat.S_ISDIR(st.st_mode) else files).append((r, st))
        return files, folders

    def walk(rel):
        files, folders = listed(rel)
        for f in files:
            yield f
        for r, st in folders:
            yield r, st
            yield from walk(r)

    if incremental:
        yield from walk("")
    else:
        yield from list(walk(""))


def rsync_one(src, dst, rel) -> str:
    """The real rsync, on one file."""
    listing = os.path.join(os.path.dirname(dst), f".one-{os.path.basename(dst)}")
    with open(listing, "w") as f:
        f.write(rel + "\n")
    p = subprocess.run(["rsync", "-a", "-i", f"--files-from={listing}", f"{src}/", f"{dst}/"], capture_output=True)
    if p.returncode == 24:  # vanished since it was listed
        return "vanished"
    if p.returncode != 0:
        raise Failure(f"rsync of {rel} failed ({p.returncode}): {p.stderr.decode()}")
    return "sent" if any(line.startswith(b">f") for line in p.stdout.splitlines()) else "same"


def copy_one_like_rsync(src, dst, rel, st, opened=None) -> str:
    """What `rsync -a` does with one file it listed with lstat `st`: skipped when the
    destination has the listed size and mtime; otherwise the file is opened, its size taken
    (fstat), and that many bytes read with plain reads (the access time moves at the first
    read, as with rsync's sender, which reads the size it found at open and no more),
    written to a temporary name beside the destination and renamed over it, with the
    listed mode and mtime. `opened` runs between the open and the first read (rsync's
    sender may wait there, on the pipe to its receiver, for as long as that takes)."""
    s, d = os.path.join(src, rel), os.path.join(dst, rel)
    try:
        dt = os.lstat(d)
        if dt.st_size == st.st_size and dt.st_mtime_ns == st.st_mtime_ns:
            return "same"
    except FileNotFoundError:
        pass
    try:
        fd = os.open(s, os.O_RDONLY)
    except FileNotFoundError:
        return "vanished"
    try:
        size = os.fstat(fd).st_size
        if opened is not None:
            opened()
        data = bytearray()
        while len(data) < size:
            chunk = os.read(fd, size - len(data))
            if not chunk:
                break
            data += chunk
        data = bytes(data)
    finally:
        os.close(fd)
    os.makedirs(os.path.dirname(d), exist_ok=True)
    tmp = os.path.join(os.path.dirname(d), f".{os.path.basename(d)}.{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, st.st_mode & 0o7777)
    os.utime(tmp, ns=(time.time_ns(), st.st_mtime_ns))
    os.rename(tmp, d)
    return f"sent {len(data)}" + (f" (listed {st.st_size})" if len(data) != st.st_size else "")


def run_cli(*args):
    p = ctape_command(*args)  # a real `ctape` process (conftest.run_cli)
    if p.returncode != 0:
        raise Failure(f"ctape {args} failed ({p.returncode}): {p.stderr.decode()}")
    return p


def run_sequence(seed: int, root: str, cli: bool = True, sync=rsync, world=World) -> World:
    rng = random.Random(seed)
    w = world(root, rng, rng.choice([2, 3, 3, 4]), cli, sync)
    try:
        epochs = rng.choice([1, 2])
        for epoch in range(epochs):
            for _ in range(rng.randint(4, 14)):
                w.random_op()
            w.check(epoch, final=epoch == epochs - 1)
    except Exception as e:  # an operation's own error (an append refusing) shows the trace too
        what = str(e) if isinstance(e, Failure) else f"{type(e).__name__}: {e}"
        raise Failure(f"seed {seed}: {what}\n  " + "\n  ".join(w.trace)) from e
    finally:
        w.close_all()
    return w


def _run_many(tmp_path, seeds, cli, sync=rsync, world=World):
    """cli None: the CLI (a process per command, slow) in every eighth sequence."""
    for seed in seeds:
        root = tmp_path / f"seq{seed}"
        root.mkdir()
        run_sequence(seed, str(root), seed % 8 == 0 if cli is None else cli, sync, world)
        shutil.rmtree(root)


def long_seeds() -> range:
    """The seeds of a long run: CTAPE_MODEL_SEQUENCES (default 2,000) from CTAPE_MODEL_FIRST_SEED (default 1000)."""
    first = int(os.environ.get("CTAPE_MODEL_FIRST_SEED", "1000"))
    return range(first, first + int(os.environ.get("CTAPE_MODEL_SEQUENCES", "2000")))


@pytest.mark.parametrize("block", range(3))
def test_random_sequences_of_syncs_keep_every_entry(tmp_path, block):
    """A short run: a few sequences per block, the CLI in some of them."""
    _run_many(tmp_path, range(block * 3, block * 3 + 3), cli=block == 0)


@pytest.mark.skipif(not SLOW, reason="long run: CTAPE_SLOW=1")
def test_many_random_sequences(tmp_path):
    seeds = long_seeds()
    start = time.monotonic()
    # the real rsync in one sequence of four, the same copying in-process in the others
    # (a process per rsync, on a loaded machine, made it most of the time)
    for seed in seeds:
        _run_many(tmp_path, [seed], cli=None, sync=rsync if seed % 4 == 1 else copy_like_rsync)
    print(f"{len(seeds)} sequences in {time.monotonic() - start:.0f} s")


def _run_live(tmp_path, seeds):
    """LiveWorld sequences as the long run makes them: the CLI in every eighth; the whole
    syncs (the mesh) by the real rsync in one sequence of four, in-process in the others;
    the live syncs use the real rsync per file in some of their runs either way."""
    for seed in seeds:
        _run_many(tmp_path, [seed], cli=None, sync=rsync if seed % 4 == 1 else copy_like_rsync, world=LiveWorld)


@pytest.mark.parametrize("block", range(2))
def test_rsync_delete_then_going_on_keeps_what_other_copies_hold(tmp_path, block):
    """A short run of DeleteWorld: `rsync --delete` onto a copy that was written to, then
    a salvage or a dropped cache, and more writes; what other copies hold comes back."""
    _run_many(tmp_path, range(3000 + block * 4, 3004 + block * 4), cli=block == 0, world=DeleteWorld)


@pytest.mark.parametrize("block", range(2))
def test_copied_and_removed_sessions_keep_every_entry(tmp_path, block):
    """A short run of CopyWorld: sessions copied and removed, compacted, synced (seeds
    where a compaction found a copy's entries in a removed session's files: 5013, 5014,
    5050 and 5051 left them there before 2026-12-07)."""
    _run_many(tmp_path, [range(5011, 5015), range(5050, 5054)][block], cli=False, world=CopyWorld)


@pytest.mark.skipif(not SLOW, reason="long run: CTAPE_SLOW=1")
def test_many_sequences_with_copied_sessions(tmp_path):
    seeds = long_seeds()
    start = time.monotonic()
    for seed in seeds:
        _run_many(tmp_path, [seed], cli=None, sync=rsync if seed % 4 == 1 else copy_like_rsync, world=CopyWorld)
    print(f"{len(seeds)} sequences with copied sessions in {time.monotonic() - start:.0f} s")


@pytest.mark.skipif(not SLOW, reason="long run: CTAPE_SLOW=1")
def test_many_sequences_with_rsync_delete(tmp_path):
    seeds = long_seeds()
    start = time.monotonic()
    for seed in seeds:
        _run_many(tmp_path, [seed], cli=None, sync=rsync if seed % 4 == 1 else copy_like_rsync, world=DeleteWorld)
    print(f"{len(seeds)} sequences with rsync --delete in {time.monotonic() - start:.0f} s")


@pytest.mark.parametrize("block", range(4))
def test_writers_during_rsync_keep_every_entry(tmp_path, block):
    """A short run of LiveWorld: writers append, batch and fork between the files of an
    rsync, or stop in the middle of an append while it copies."""
    _run_live(tmp_path, range(1 + block * 6, 7 + block * 6))


@pytest.mark.skipif(not SLOW, reason="long run: CTAPE_SLOW=1")
def test_many_sequences_with_writers_during_rsync(tmp_path):
    seeds = long_seeds()
    start = time.monotonic()
    _run_live(tmp_path, seeds)
    print(f"{len(seeds)} sequences with writers during rsync in {time.monotonic() - start:.0f} s")


@pytest.mark.parametrize("block", range(3))
def test_push_and_pull_beside_rsync_keep_every_entry(tmp_path, block):
    """A short run of RemoteWorld: push and pull (some cut off) mixed with rsync."""
    _run_many(tmp_path, range(500 + block * 4, 504 + block * 4), cli=False, world=RemoteWorld)


@pytest.mark.parametrize("block", range(2))
def test_manifests_lost_from_the_remote_lose_nothing(tmp_path, block):
    """A short run of LostManifestWorld."""
    _run_many(tmp_path, range(700 + block * 4, 704 + block * 4), cli=False, world=LostManifestWorld)


def _long_run(tmp_path, world, what: str, real_rsync: bool = True) -> None:
    """A long run of `world` over long_seeds(), through the library: the real rsync in one
    sequence of four (with `real_rsync`), copying like rsync in the others."""
    seeds = long_seeds()
    start = time.monotonic()
    for seed in seeds:
        sync = rsync if real_rsync and seed % 4 == 1 else copy_like_rsync
        _run_many(tmp_path, [seed], cli=False, sync=sync, world=world)
    print(f"{len(seeds)} sequences {what} in {time.monotonic() - start:.0f} s")


@pytest.mark.skipif(not SLOW, reason="long run: CTAPE_SLOW=1")
def test_many_sequences_with_lost_manifests(tmp_path):
    _long_run(tmp_path, LostManifestWorld, "with lost manifests")


@pytest.mark.skipif(not SLOW, reason="long run: CTAPE_SLOW=1")
def test_many_sequences_with_remotes(tmp_path):
    _long_run(tmp_path, RemoteWorld, "with remotes")


@pytest.mark.parametrize("block", range(2))
def test_redactions_travel_with_syncs_and_compaction_drops_their_text(tmp_path, block):
    """A short run of RedactWorld: redactions on random copies between appends, forks,
    deletions, syncs (some cut off) and compactions."""
    _run_many(tmp_path, range(700 + block * 4, 704 + block * 4), cli=False, sync=copy_like_rsync, world=RedactWorld)


@pytest.mark.parametrize("block", range(2))
def test_redactions_travel_by_push_and_pull_too(tmp_path, block):
    """A short run of RemoteRedactWorld."""
    _run_many(tmp_path, range(800 + block * 4, 804 + block * 4), cli=False, sync=copy_like_rsync, world=RemoteRedactWorld)


@pytest.mark.parametrize("block", range(2))
def test_a_remote_cleaned_of_a_redacted_text_stays_clean(tmp_path, block):
    """A short run of CleanedRemoteWorld (seeds 934 and 944 failed before push learnt the
    redactions a compaction of the remote named)."""
    _run_many(tmp_path, range(930 + block * 10, 936 + block * 10), cli=False, sync=copy_like_rsync, world=CleanedRemoteWorld)


def test_a_file_rsync_brings_back_is_never_pushed_with_a_redacted_text(tmp_path):
    """A short run of RsyncedRedactionWorld. Seeds 100179 and 100675 failed (most runs:
    the entries' times change their hashes) before push read the files it uploads for
    redacted objects: c1 redacted, compacted and pushed; an rsync from c0 brought c1's old
    segment back to c1, and a later push sent it, the index naming the withheld form."""
    _run_many(tmp_path, [100179, 100675, *range(960, 964)], cli=False, sync=copy_like_rsync, world=RsyncedRedactionWorld)


@pytest.mark.skipif(not SLOW, reason="long run: CTAPE_SLOW=1")
def test_many_sequences_of_rsynced_redactions(tmp_path):
    _long_run(tmp_path, RsyncedRedactionWorld, "of rsynced redactions", real_rsync=False)


@pytest.mark.skipif(not SLOW, reason="long run: CTAPE_SLOW=1")
def test_many_sequences_of_cleaned_remotes(tmp_path):
    _long_run(tmp_path, CleanedRemoteWorld, "of cleaned remotes", real_rsync=False)


@pytest.mark.skipif(not SLOW, reason="long run: CTAPE_SLOW=1")
def test_many_sequences_with_redactions(tmp_path):
    seeds = long_seeds()
    start = time.monotonic()
    for seed in seeds:
        world = RemoteRedactWorld if seed % 2 else RedactWorld
        _run_many(tmp_path, [seed], cli=None if world is RedactWorld else False, sync=rsync if seed % 4 == 1 else copy_like_rsync, world=world)
    print(f"{len(seeds)} sequences with redactions in {time.monotonic() - start:.0f} s")


def test_remote_seed_41276_a_push_never_sends_a_prefix_of_a_longer_own_file(tmp_path):
    """Found by the long RemoteWorld run once writer processes appended between two requests
    of a push: the push checked c1's segment for secrets at 549 bytes, a writer process
    appended (1,099) and exited, then the push read the file under its lock, only up to
    what the check had read, and sealed it. c0 pulled that 549-byte prefix, and
    `rsync c0 -> c1` put it back over the longer file once no writer held it (fsck on
    c1: 547 bytes lost; 2 acknowledged entries on no ref). push now checks what landed
    after the check, under the lock, and sends the file whole."""
    _run_many(tmp_path, [41276], cli=False, sync=copy_like_rsync, world=RemoteWorld)


def test_remote_seed_54307_an_append_where_heads_record_has_not_arrived_refuses(tmp_path):
    """Found by a long RemoteWorld run: c0 compacted its session (the first entry and the
    record attaching HEAD to main went into a pack), appended two more, and an rsync of a
    subset brought c1 the new segment without the pack. On c1, main had a value and HEAD
    no claim at all; an append there took HEAD for unborn, started a new root and moved
    main to it: the three entries main held became unreachable on c1. An append now
    refuses there (RefState.head_missing; tests/test_head_not_arrived.py)."""
    _run_many(tmp_path, [54307], cli=False, sync=copy_like_rsync, world=RemoteWorld)


def test_remote_seed_2141_pull_brings_back_a_file_compaction_removed(tmp_path):
    """Found by the first long RemoteWorld run: c0 deleted a conflict branch and ran
    `compact --grace now --expire now`, freeing the entry only that branch reached; a
    settle on another copy that had not seen the deletion revived the branch (a value beats
    a deletion). rsync would have brought the old segment back; pull only followed new
    manifests, so c0 never got the entry again (fsck: not synced). Pull now brings every
    file the remote holds that the copy lacks, as rsync without --delete does."""
    _run_many(tmp_path, [2141], cli=False, sync=copy_like_rsync, world=RemoteWorld)


def test_remote_seed_9629_push_and_pull_settle_after_a_file_comes_back(tmp_path):
    """Found by the settle rounds of the mesh, once they were added (a black-box audit had
    seen it first): a file a compaction of the remote deleted, uploaded again by a copy
    that still held it, made every other copy fetch it back at each pull and compact it
    away at each push, round after round. Now a file on the remote again asks for no
    compaction, and the copies settle."""
    _run_many(tmp_path, [9629], cli=False, sync=rsync, world=RemoteWorld)


def test_remote_seed_11525_a_deletion_announced_by_a_killed_run_is_finished_by_another_copy(tmp_path):
    """Found by the long run (2026-12-04): a `compact --remote` killed after its manifest
    announced a deletion and before it wrote its execution record left the deleted files'
    pieces on the remote, a redacted text among them, until that copy's next run: another
    copy's compaction only finished deletions that had an execution record. Now it also
    finishes the deletions the manifests announce."""
    _run_many(tmp_path, [11525], cli=False, sync=rsync, world=RemoteRedactWorld)


def test_lost_manifest_seed_3073_a_lost_announcement_whose_number_was_filled_is_learnt(tmp_path):
    """Found by the long run (2026-12-07): the manifest in which a `compact --remote`
    announced its deletion was lost, and its writer filled the number with an empty one at
    its next push, so readers saw no gap and never learnt the deletion: a new clone warned
    that the remote lacked the pieces it took. Readers now learn a deletion that a
    manifest's count says was announced from its execution record."""
    _run_many(tmp_path, [3073], cli=False, sync=copy_like_rsync, world=LostManifestWorld)


def test_live_seed_80_keeps_an_append_to_a_segment_copied_empty(tmp_path):
    """Found by the first LiveWorld run, on the code before segments were created whole
    (issue 20 item 1): a writer stopped right after creating its new segment, an rsync
    copied the empty file, the writer appended to it, and a later rsync put the empty
    copy back (fsck: 568 bytes lost on c0)."""
    _run_live(tmp_path, [80])


def test_live_seeds_40_70_72_a_copy_sized_before_a_write_comes_back(tmp_path):
    """Found once the model's copies read only the size they took at open, as rsync's
    sender does, with a writer appending between the open and the first read: the copy
    lacked the write, the writer's check after it had seen no read yet, and the copy came
    back over the longer file (72: fsck "lost acknowledged data: 262 bytes shorter"; 40,
    70: acknowledged entries on no ref). Writers now keep the descriptors of segments they
    wrote to and repeat what a shorter file behind the name lacks (store/repeats.py, "copies
    that come back"); tests/test_copies_come_back.py has the three orders alone."""
    _run_live(tmp_path, [40, 70, 72])


def test_live_seed_50235_a_stale_copy_reaches_a_third_copy(tmp_path):
    """Found by a long run (fails in about half the runs before the fix, its timing being
    real): c1's writer appended between a copy's open and its read, so c0 got its s2
    segment short; c3 got the long one from c1, then the short one from c0, and c3's next
    append refused ("lost acknowledged records"). c1 repeated those writes only when it
    closed; now its next write, which finds the segment read, repeats them, and c3 gets
    them with the same rsync (tests/test_copies_come_back.py has it alone)."""
    for _ in range(3):
        _run_live(tmp_path, [50235])


def test_live_seed_1010_copy_taken_between_the_unread_check_and_the_write(tmp_path):
    """Found by the long run after 1f725a0: c1's writer found its s2 segment unread (its
    fstat) and stopped there; the rsync c1 -> c0 copied the segment (885 bytes); the
    writer wrote its batch, saw the read and repeated the batch in a new segment (nothing
    lost); `rsync c0 -> c1` then put the 885-byte copy back over the longer sealed file,
    and the next append on c1 refuses (CorruptObject: the index had seen it longer), as
    fsck reports "lost acknowledged data". tests/test_live_rsync.py hits the same with
    real timing. Expected to pass once a sealed file cut back to the start of a write
    it repeated is accepted: the repeating segment's header names the old one and the
    offset (`repeats`), and a copy cut back past it is not loss."""
    _run_many(tmp_path, [1010], cli=False, sync=copy_like_rsync, world=LiveWorld)


def test_seed_4064_keeps_conflict_branch_names_through_compact(tmp_path):
    """Found by a long run: compaction dropped a superseded HEAD claim, an old copy brought
    it back as a spurious conflict, and `compact --expire now` then dropped the deletion
    that had given its branch the name `-N` (tests/test_sync.py has both, made exact)."""
    _run_many(tmp_path, [4064], cli=None, sync=copy_like_rsync)


def test_delete_seed_20064_keeps_a_writers_records_lost_to_an_rsync_delete(tmp_path):
    """The first DeleteWorld run, on the code before gaps: c0 lost two of its appends to an
    `rsync --delete`, wrote again, and when another copy brought them back its new record
    replaced them on every copy (tests/test_cut_off.py has it made exact)."""
    _run_many(tmp_path, [20064], cli=None, sync=copy_like_rsync, world=DeleteWorld)


def test_delete_seed_28004_salvage_settles_a_removed_session(tmp_path):
    """Found by the long DeleteWorld run: `session rm` on one copy, `rsync --delete` onto
    the other, then `fsck --salvage` there. Salvage read the session's ref log with
    `Session.reflog()` to tell what the loss cut off from what was left on purpose, and
    that refuses a removed session (SessionNotFound). It replays the records itself now:
    the removal's record is what says the session's tips were left."""
    _run_many(tmp_path, [28004], cli=None, sync=rsync if 28004 % 4 == 1 else copy_like_rsync, world=DeleteWorld)
