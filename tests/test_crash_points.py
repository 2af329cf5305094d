"""Every mutating command killed at any instant loses nothing acknowledged, leaves a tape
that fsck calls ok (or that `fsck --salvage` makes ok), and is finished by a rerun
(SPEC invariants 3, 4, 7; sections 8, 14, 17, 18; docs/design.md "What kill -9 can and
cannot lose"; docs/remotes.md "Interrupted is harmless").

The approach of tests/test_salvage_restart.py, for every other command that changes a
tape: a real `ctape` runs under strace, which kills it with SIGKILL at the N-th call of one
file-system system call, for every N at which the command touches the tape, a remote or
the index cache; then the checks below run, and the command is run again without strace.

Each scenario starts from a small realistic tape: three sessions, two branches, a tag, a
tool call with its result (holding an AWS key), a large tool output stored as a blob, an
earlier compaction (packs beside segments), a deleted branch. Every run of a scenario
happens at the same path (the index cache is found by the tape's path), restored from
the template with each file's access and modification times, so the writer goes on
appending to its own segment as it would have.

After each kill:
1. every entry the template's refs reach reads back with its payload (or, for redact, the
   redacted one), and each session's refs are as before or as the uninterrupted command
   leaves them (the effect of a command on a session is all or nothing);
2. fsck is ok, or `fsck --salvage` makes it ok (then 1. is checked again);
3. the rerun exits 0 and leaves what an uninterrupted run leaves (same sessions, refs and
   entries; for redact: the secret is in no payload, and after `compact` in no file);
4. no temporary file is left that nothing cleans (tape and index cache);
5. remotes: a clone of the remote after the kill holds what was pushed before, and after
   the rerun a clone holds what the local copy holds.

Quick mode: the points where a command's rename/mkdir/link/fsync/fdatasync (and, for
`cache gc`, unlink/rmdir) touch the tape or a remote (remote commands: an even spread of
at most REMOTE_QUICK_POINTS of them). `CTAPE_SLOW=1` adds every point, those in the index
cache too, every write, unlink, ftruncate and openat, and five second cases.

Why not `inject=NAME:signal=SIGKILL` as test_salvage_restart.py: see `run_killed`.
"""

import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from ctape import Tape

from test_privacy_sync import holders

STRACE = shutil.which("strace") or ("/usr/bin/strace" if os.path.exists("/usr/bin/strace") else None)
pytestmark = pytest.mark.skipif(STRACE is None, reason="needs strace (.ci/run installs it with apt-get)")

SLOW_MODE = os.environ.get("CTAPE_SLOW") == "1"
QUICK = ("rename", "renameat", "renameat2", "mkdir", "mkdirat", "fsync", "fdatasync", "link", "linkat")
SLOW = QUICK + ("write", "pwrite64", "unlink", "unlinkat", "ftruncate", "openat", "rmdir")
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "transcripts")
CC_TURN1 = f"{FIXTURES}/claude-code/codemie-ai__codemie-code__incremental-subagents_turn-1.jsonl"
CC_TURN2 = f"{FIXTURES}/claude-code/codemie-ai__codemie-code__incremental-subagents_turn-2.jsonl"
CODEX = f"{FIXTURES}/codex-rollout/madshn__localpush__rollout-2026-02-23T13-19-38-019c8a70-dda7-7f33-98ea-f30553347322.jsonl"
REMOTE_QUICK_POINTS = 8
SECRET = "AKIAZ7Q3VXN2LJ4PW6TR"
T0 = "2026-11-01T10:00:00Z"
LINE = re.compile(r"^(\d+)\s+(\w+)\(")


# -- running ctape --------------------------------------------------------------------

WRITERS = {"tape": "crashlocal", "a": "crashpeer"}


def cli_env(run, tape):
    # A writer's id derives from the tape folder's inode (docs/format.md section 8): fixed
    # here, so that a restored copy goes on appending to its own segment.
    env = dict(os.environ, CTAPE_CACHE_DIR=str(run / "cache"), CTAPE_WRITER=WRITERS.get(tape, "crashother"))
    env.pop("CTAPE_SESSION", None)
    return env


def cli(run, *args, strace=(), input=None, check=False, tape="tape"):
    env = cli_env(run, tape)
    env.pop("CTAPE_SESSION", None)
    argv = [*strace, sys.executable, "-m", "ctape"] + (["--dir", str(run / tape)] if tape else []) + [str(a) for a in args]
    p = subprocess.run(argv, input=input, capture_output=True, env=env, cwd=str(run))
    if check and p.returncode != 0:
        raise AssertionError(f"ctape {args} failed ({p.returncode}): {p.stderr.decode()}")
    return p


def append(run, kind, payload, session, tape="tape", when=None):
    p = cli(run, "append", kind, "-", "-s", session, "--time", when or T0, input=json.dumps(payload).encode(), check=True, tape=tape)
    return p.stdout.decode().strip()


# -- what a tape holds ----------------------------------------------------------------

def state(tape_dir, cache):
    """{session: {"head", "branches", "tags", "entries": {hash: (kind, payload, meta, delta, parent)}}}."""
    t = Tape.open(tape_dir, cache_dir=str(cache))
    try:
        out = {}
        for row in t.sessions():
            s = t.session(row["session"])
            refs = s.refs()
            entries = {}
            for e in s.log(all=True):
                entries[e.hash] = (e.kind, e.payload, e.meta, e.delta, e.parent)
            for h in refs.tags.values():
                for e in s.log(h):
                    if e.hash in entries:
                        break
                    entries[e.hash] = (e.kind, e.payload, e.meta, e.delta, e.parent)
            out[row["session"]] = {"head": refs.head, "branches": dict(refs.branches), "tags": dict(refs.tags), "entries": entries}
        return out
    finally:
        t.close()


def fsck(tape_dir, cache):
    t = Tape.open(tape_dir, cache_dir=str(cache))
    try:
        return t.fsck()
    finally:
        t.close()


def readable(tape_dir, cache, hashes):
    """{hash: payload or the error} of every hash, read by hash."""
    t = Tape.open(tape_dir, cache_dir=str(cache))
    out = {}
    try:
        for h in hashes:
            try:
                e = t.read_entry(h)
                out[h] = (e.kind, e.payload, e.meta, e.delta, e.parent)
            except Exception as exc:  # noqa: BLE001 - reported as what was lost
                out[h] = f"unreadable: {type(exc).__name__}: {exc}"
        return out
    finally:
        t.close()


def refs_of(s):
    return {k: s[k] for k in ("head", "branches", "tags")}


def all_entries(st):
    out = {}
    for s in st.values():
        out.update(s["entries"])
    return out


def strays(run, tape="tape"):
    """Files that are not data: temporaries nobody renamed, in the tape and in the cache."""
    out = []
    root = run / tape
    if root.exists():
        for dirpath, dirs, files in os.walk(root):
            rel = os.path.relpath(dirpath, root)
            for name in files:
                if rel == "." and name == "ctape.json":
                    continue
                if rel.startswith("quarantine"):
                    if name.endswith((".seg", ".pack", ".salvage.json")):
                        continue
                elif rel.startswith("sessions" + os.sep) and rel.count(os.sep) == 1 and name.endswith((".seg", ".pack")):
                    continue
                out.append(os.path.join(rel, name))
    cache = run / "cache"
    if cache.exists():
        for dirpath, dirs, files in os.walk(cache):
            for name in files:
                if "tmp" in name:
                    out.append(os.path.join("cache", os.path.relpath(dirpath, cache), name))
    return out


# -- templates ------------------------------------------------------------------------

def build_base(run, tape="tape"):
    """The shared starting tape (built once, then copied: see `copy_base`)."""
    _cli, _append = globals()["cli"], globals()["append"]

    def cli(run, *a, **k):  # noqa: F811 - every step on `tape`
        return _cli(run, *a, tape=tape, **k)

    def append(run, *a, **k):  # noqa: F811
        return _append(run, *a, tape=tape, **k)

    cli(run, "init", check=True)
    append(run, "system", {"content": "You are a careful coding agent."}, "chat")
    append(run, "user", {"content": "what is in the environment?"}, "chat")
    append(run, "tool_call", {"call_id": "c1", "name": "bash", "arguments": {"cmd": "env"}}, "chat")
    append(run, "tool_result", {"call_id": "c1", "output": f"HOME=/root\nAWS_ACCESS_KEY_ID={SECRET}\nPATH=/usr/bin\n"}, "chat")
    append(run, "tool_call", {"call_id": "c2", "name": "bash", "arguments": {"cmd": "pytest -q"}}, "chat")
    big = "".join(f"tests/test_{i:04d}.py::test_case PASSED [{i % 100:3d}%] " + "." * 40 + "\n" for i in range(2500))
    append(run, "tool_result", {"call_id": "c2", "output": big}, "chat")
    cli(run, "tag", "v1", "-s", "chat", check=True)
    cli(run, "checkout", "-b", "alt", "chat~2", "-s", "chat", check=True)
    append(run, "assistant", {"content": "another way"}, "chat")
    cli(run, "checkout", "main", "-s", "chat", check=True)
    append(run, "user", {"content": "hello from other"}, "other")
    append(run, "assistant", {"content": "hi"}, "other")
    append(run, "user", {"content": "scratch work"}, "scratch")
    cli(run, "compact", "--expire", "now", "--grace", "now", check=True)
    append(run, "assistant", {"content": "all tests pass"}, "chat", when="2026-11-01T10:05:00Z")
    cli(run, "branch", "gone", "-s", "chat", check=True)
    cli(run, "checkout", "gone", "-s", "chat", check=True)
    append(run, "user", {"content": "a dead end"}, "chat", when="2026-11-01T10:06:00Z")
    cli(run, "checkout", "main", "-s", "chat", check=True)
    cli(run, "branch", "-D", "gone", "-s", "chat", check=True)
    append(run, "user", {"content": "more in other"}, "other", when="2026-11-01T10:07:00Z")


BASE = {}


def copy_base(run):
    """The base tape into run/tape, with each file's times (a segment stays unread, so its
    writer appends to it)."""
    src, times = BASE["dir"], BASE["times"]
    shutil.copytree(src, run / "tape", symlinks=True)
    for rel, ns in times.items():
        os.utime(run / "tape" / rel, ns=ns, follow_symlinks=False)


def build_plain(run):
    copy_base(run)


def build_redacted(run):
    copy_base(run)
    cli(run, "redact", "--scan", check=True)


def build_clean_pushed(run):
    """base, redacted and compacted (a push refuses secrets), pushed to a folder remote,
    then more appends, a new session and a new branch."""
    copy_base(run)
    cli(run, "redact", "--scan", check=True)
    cli(run, "compact", "--expire", "now", "--grace", "now", check=True)
    (run / "remote").mkdir()
    cli(run, "remote", "add", "origin", f"file://{run}/remote", check=True)
    cli(run, "push", check=True)
    append(run, "assistant", {"content": "pushed, then this"}, "chat", when="2026-11-01T10:10:00Z")
    cli(run, "checkout", "-b", "later", "-s", "chat", check=True)
    append(run, "user", {"content": "on later"}, "chat", when="2026-11-01T10:11:00Z")
    append(run, "user", {"content": "a session after the push"}, "newer", when="2026-11-01T10:12:00Z")


def build_all_pushed(run):
    build_clean_pushed(run)
    cli(run, "push", check=True)
    append(run, "assistant", {"content": "not pushed yet"}, "other", when="2026-11-01T10:13:00Z")


def build_pull(run):
    """Copy `a` pushes; this copy (`tape`) was cloned before and appended on its own; `a`
    then appended, moved branches and pushed again."""
    build_base(run, tape="a")
    (run / "remote").mkdir()
    cli(run, "redact", "--scan", check=True, tape="a")
    cli(run, "compact", "--expire", "now", "--grace", "now", check=True, tape="a")
    cli(run, "remote", "add", "origin", f"file://{run}/remote", check=True, tape="a")
    cli(run, "push", check=True, tape="a")
    cli(run, "clone", f"file://{run}/remote", run / "tape", check=True, tape=None)
    append(run, "user", {"content": "mine, before the pull"}, "chat", when="2026-11-01T10:20:00Z")
    append(run, "user", {"content": "a session of mine"}, "mine", when="2026-11-01T10:21:00Z")
    append(run, "assistant", {"content": "theirs 1"}, "chat", tape="a", when="2026-11-01T10:22:00Z")
    cli(run, "checkout", "-b", "theirs", "-s", "chat", check=True, tape="a")
    append(run, "assistant", {"content": "theirs 2"}, "chat", tape="a", when="2026-11-01T10:23:00Z")
    append(run, "user", {"content": "their new session"}, "theirs", tape="a", when="2026-11-01T10:24:00Z")
    big = "".join(f"row {i}: " + "y" * 60 + "\n" for i in range(2000))
    append(run, "tool_result", {"call_id": "c9", "output": big}, "theirs", tape="a", when="2026-11-01T10:25:00Z")
    cli(run, "push", check=True, tape="a")


def build_import_grown(run):
    copy_base(run)
    src = run / "src"
    src.mkdir()
    shutil.copyfile(CC_TURN1, src / "session.jsonl")
    cli(run, "import", "claude-code", src / "session.jsonl", "-s", "imp", check=True)
    # the agent goes on writing its transcript: the file grows (turn 2 starts with turn 1)
    shutil.copyfile(CC_TURN2, src / "session.jsonl")


def build_cache_gc(run):
    copy_base(run)
    gone = run / "gone-tape"
    cli(run, "init", check=True, tape="gone-tape")
    append(run, "user", {"content": "x"}, "s", tape="gone-tape")
    for i in range(5):
        append(run, "user", {"content": f"y{i}"}, "s", tape="gone-tape")
    shutil.rmtree(gone)


class Scenario:
    def __init__(self, name, build, argv, *, redact=False, remote=False, clone=None, idempotent=True, is_append=None, slow_only=False):
        self.slow_only = slow_only
        self.name, self.build, self.argv = name, build, argv
        self.redact, self.remote, self.clone = redact, remote, clone
        self.idempotent, self.is_append = idempotent, is_append


BIG_PAYLOAD = {"call_id": "c3", "output": "".join(f"{i:06d} " + "z" * 70 + "\n" for i in range(1500))}

SCENARIOS = [
    Scenario("compact", build_plain, lambda r: ["compact", "--expire", "now", "--grace", "now"]),
    Scenario("compact-default", build_plain, lambda r: ["compact"], slow_only=True),
    Scenario("redact", build_plain, lambda r: ["redact", "--scan"], redact=True),
    Scenario("redact-then-compact", build_redacted, lambda r: ["compact", "--expire", "now", "--grace", "now"], redact=True),
    Scenario("import-new", build_plain, lambda r: ["import", "codex", CODEX, "-s", "cx"]),
    Scenario("import-claude", build_plain, lambda r: ["import", "claude-code", CC_TURN1, "-s", "imp"], slow_only=True),
    Scenario("import-grown", build_import_grown, lambda r: ["import", "claude-code", r / "src" / "session.jsonl", "-s", "imp"]),
    Scenario("append", build_plain, lambda r: ["append", "user", '{"content": "next step"}', "-s", "chat", "--time", T0],
             idempotent=False, is_append="chat"),
    Scenario("append-new-session", build_plain, lambda r: ["append", "user", '{"content": "first"}', "-s", "fresh", "--time", T0],
             idempotent=False, is_append="fresh"),
    Scenario("append-blob", build_plain, lambda r: ["append", "tool_result", json.dumps(BIG_PAYLOAD), "-s", "other", "--time", T0],
             idempotent=False, is_append="other", slow_only=True),
    Scenario("branch", build_plain, lambda r: ["branch", "b2", "chat~1", "-s", "chat"], idempotent=False),
    Scenario("branch-delete", build_plain, lambda r: ["branch", "-d", "alt", "-s", "chat"], idempotent=False, slow_only=True),
    Scenario("checkout", build_plain, lambda r: ["checkout", "alt", "-s", "chat"]),
    Scenario("checkout-b", build_plain, lambda r: ["checkout", "-b", "fork", "chat~2", "-s", "chat"], idempotent=False, slow_only=True),
    Scenario("tag", build_plain, lambda r: ["tag", "v2", "chat~1", "-s", "chat"], idempotent=False),
    Scenario("session-rm", build_plain, lambda r: ["session", "rm", "scratch"], idempotent=False),
    Scenario("cache-gc", build_cache_gc, lambda r: ["cache", "gc", "--unknown"]),
    Scenario("push", build_clean_pushed, lambda r: ["push"], remote=True),
    Scenario("pull", build_pull, lambda r: ["pull"], remote=True),
    Scenario("clone", build_all_pushed, lambda r: ["clone", f"file://{r}/remote", r / "cloned"], clone="cloned"),
    Scenario("compact-remote", build_all_pushed, lambda r: ["compact", "--remote", "origin", "--expire", "now", "--grace", "now"],
             remote=True),
]


# -- the template, restored for every run ---------------------------------------------

def save_template(run, tpl):
    times = {}
    for dirpath, dirs, files in os.walk(run):
        for name in files:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            times[os.path.relpath(full, run)] = (st.st_atime_ns, st.st_mtime_ns)
    shutil.copytree(run, tpl, symlinks=True)
    return times


def restore(tpl, run, times):
    """run as tpl was, keeping the inodes of its top folders: the index cache and this
    copy's settings (its remotes) are found by the tape folder's path and inode."""
    keep = set(os.listdir(tpl))
    for name in os.listdir(run):
        p = run / name
        if name not in keep or not p.is_dir() or p.is_symlink():
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    for name in keep:
        src, dst = tpl / name, run / name
        if not src.is_dir():
            shutil.copy2(src, dst)
            continue
        dst.mkdir(exist_ok=True)
        for x in os.listdir(dst):
            q = dst / x
            shutil.rmtree(q) if q.is_dir() and not q.is_symlink() else q.unlink()
        for x in os.listdir(src):
            if (src / x).is_dir():
                shutil.copytree(src / x, dst / x, symlinks=True)
            else:
                shutil.copy2(src / x, dst / x)
    for rel, ns in times.items():
        os.utime(run / rel, ns=ns, follow_symlinks=False)


def points(log, run, names, slow):
    """(name, N) for every call of a traced name at which the command touches the run's
    folder. N counts the calls of that name by the thread that made it: strace counts
    `inject=...:when=N` per tracee (each thread its own count; tried with two threads that
    write), so where threads share the work (push, pull) the N-th call of any thread is
    held, and a count over every thread would name points no thread reaches."""
    cache = str(run / "cache")
    per = collections.Counter()
    out = []
    for line in log.read_text().splitlines():
        m = LINE.match(line)
        if not m or "resumed>" in line:
            continue
        pid, name = m.groups()
        if name not in names:
            continue
        per[pid, name] += 1
        if str(run) not in line:
            continue  # python's own imports, stdout
        if not slow and cache in line and name not in ("unlink", "unlinkat", "rmdir"):
            continue
        out.append((name, per[pid, name], line))
    seen, uniq = set(), []
    for name, n, line in out:
        if (name, n) not in seen:
            seen.add((name, n))
            uniq.append((name, n, line))
    return uniq


@pytest.fixture(scope="module")
def base_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash")
    run = root / "base"
    run.mkdir()
    build_base(run)
    times = {}
    for dirpath, dirs, files in os.walk(run / "tape"):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            times[os.path.relpath(os.path.join(dirpath, name), run / "tape")] = (st.st_atime_ns, st.st_mtime_ns)
    BASE.update(dir=run / "tape", times=times)
    return root


def _expected_append(sc, before, after):
    """The appended entries (one, or two when the killed run's append landed) on top of the
    template's HEAD of that session."""
    return {h: e for h, e in all_entries(after).items() if h not in all_entries(before)}


def check_after_kill(sc, run, before, expected, label):
    problems = []
    killed = state(run / "tape", run / "cache") if (run / "tape").exists() else {}
    exp_entries = all_entries(expected)
    for s, b in before.items():
        for h, e in readable(run / "tape", run / "cache", list(b["entries"])).items():
            ok = (e == b["entries"][h]) or (sc.redact and h in exp_entries and e == exp_entries[h])
            if not ok:
                problems.append(f"{label}: acknowledged entry {s} {h[:12]} reads {str(e)[:160]!r}, was {str(b['entries'][h])[:80]!r}")
        if s in killed:
            k = refs_of(killed[s])
            if k != refs_of(b) and (s not in expected or k != refs_of(expected[s])):
                if sc.is_append == s and k["head"] == b["head"] and k["tags"] == b["tags"]:
                    pass  # checked below
                else:
                    problems.append(f"{label}: session {s} refs {k} are neither the template's {refs_of(b)} nor the result's")
        elif s in expected:
            problems.append(f"{label}: session {s} is gone")
    for s, k in killed.items():
        if s not in before and s not in expected:
            problems.append(f"{label}: session {s} appeared from nowhere")
    if sc.is_append and sc.is_append in killed:
        s = sc.is_append
        new = [h for h in killed[s]["entries"] if h not in before.get(s, {"entries": {}})["entries"]]
        if len(new) > 1:
            problems.append(f"{label}: one append made {len(new)} entries")
    return problems, killed


# strace's `inject=NAME:signal=SIGKILL` (what tests/test_salvage_restart.py uses) makes
# strace stop the process at every system call (1.4 s for a `ctape compact` here), and with
# --seccomp-bpf (0.3 s) strace 6.1 injects no signal. So the N-th call is held at its entry
# with `delay_enter` (which works with --seccomp-bpf) and the process is killed there with
# SIGKILL from here: the same instant, before the call runs. The strace log then proves it:
# N-1 calls of NAME finished in that thread, and the N-th never did.
SYSCALL_NR = {"write": 1, "pwrite64": 18, "fsync": 74, "fdatasync": 75, "ftruncate": 77, "rename": 82, "mkdir": 83,
              "rmdir": 84, "link": 86, "unlink": 87, "openat": 257, "mkdirat": 258, "unlinkat": 263, "renameat": 264,
              "linkat": 265, "renameat2": 316}


def _descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
                out += kids
                todo += kids
        except OSError:
            pass
    return out


def _held(pid, nr):
    """A thread of pid stopped by strace at the entry of system call nr."""
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()[0]
            if st == "t":
                with open(f"/proc/{pid}/task/{t}/syscall") as f:
                    if f.read().split()[0] == str(nr):
                        return True
    except (OSError, IndexError):
        pass
    return False


def run_killed(run, argv, tape, name, n, log, restore_=None):
    """Run ctape and kill -9 it at the entry of its N-th call of NAME. Returns (killed, exit
    status). A call held only by a busy machine can look like the held one: then again,
    with a longer wait."""
    for hold in (0.05, 0.3, 1.0):
        try:
            return _run_killed(run, argv, tape, name, n, log, hold)
        except WrongCall:
            if restore_ is None or hold == 1.0:
                raise
            restore_()


class WrongCall(AssertionError):
    pass


def _run_killed(run, argv, tape, name, n, log, hold):
    env = cli_env(run, tape)
    cmd = [STRACE, "-f", "-qq", "--seccomp-bpf", "-o", str(log), "-e", f"trace={name}",
           "-e", f"inject={name}:delay_enter=60000000:when={n}",
           sys.executable, "-m", "ctape"] + (["--dir", str(run / tape)] if tape else []) + [str(a) for a in argv]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(run), env=env)
    nr, since, killed = SYSCALL_NR[name], {}, False
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline:
        for pid in _descendants(p.pid):
            if _held(pid, nr):
                since.setdefault(pid, time.monotonic())
                if time.monotonic() - since[pid] > hold:
                    os.kill(pid, 9)
                    killed = True
                    time.sleep(0.05)
                    p.kill()  # strace would sit out its delay timer (SIGTERM too) before it noticed
            else:
                since.pop(pid, None)
        if killed:
            break
        time.sleep(0.01)
    p.communicate(timeout=120)
    # did it die at the N-th call? (the log: N-1 calls of NAME finished, in all threads,
    # and the killed one never did)
    done, cut = 0, False
    for line in log.read_text().splitlines():
        m = LINE.match(line)
        if m and m.group(2) == name:
            if line.rstrip().endswith("= ?"):
                cut = True
            elif "resumed>" not in line:
                done += 1
    threads = len({m.group(1) for m in map(LINE.match, log.read_text().splitlines()) if m})
    if killed and cut and done < n - 1 and threads == 1:
        raise WrongCall(f"killed at {name} #{done + 1}, not #{n}")
    return killed, p.returncode


def run_point(sc, run, tpl, times, before, expected, name, n, extra_checks):
    """Kill at (name, N), then checks 1-5. Returns (killed?, problems, notes)."""
    problems, notes = [], []
    label = f"{sc.name} killed at {name} #{n}"
    restore(tpl, run, times)
    log = run.parent / f"{sc.name}.kill.log"
    argv = sc.argv(run)
    tape = None if sc.clone else "tape"
    t0 = time.monotonic()
    killed, rc = run_killed(run, argv, tape, name, n, log, lambda: restore(tpl, run, times))
    if os.environ.get("CTAPE_CRASH_DEBUG"):
        print(f"  {label}: killed={killed} rc={rc} {time.monotonic() - t0:.2f}s", flush=True)
    if not killed:
        if rc != 0:
            problems.append(f"{label}: not killed, but exit {rc}")
        return False, problems, notes
    # 1. acknowledged data is there, refs are before or after
    p, killed_state = check_after_kill(sc, run, before, expected, label)
    problems += p
    # 2. fsck ok, or made ok by the documented recovery
    rep = fsck(run / "tape", run / "cache")
    if not rep["ok"]:
        notes.append(f"{label}: fsck after the kill: {rep['problems'][:3]}")
        problems.append(f"{label}: fsck after the kill is not ok: {rep['problems'][:3]}")
        sal = cli(run, "fsck", "--salvage")
        rep2 = fsck(run / "tape", run / "cache")
        if not rep2["ok"]:
            problems.append(f"{label}: fsck --salvage does not make it ok (exit {sal.returncode}): {rep2['problems'][:3]}")
        p, killed_state = check_after_kill(sc, run, before, expected, label + " (after salvage)")
        problems += p
    problems += extra_checks("after-kill", run, label)
    # 3. the rerun finishes, with the result of an uninterrupted run
    rr = cli(run, *argv, tape=tape)
    if rr.returncode != 0:
        done = (not sc.idempotent) and killed_state == expected
        if not done:
            problems.append(f"{label}: rerun exit {rr.returncode}: {rr.stderr.decode().strip()[-300:]}")
    after = state(run / "tape", run / "cache")
    if sc.is_append:
        s = sc.is_append
        new = _expected_append(sc, before, after)
        exp_new = _expected_append(sc, before, expected)
        (exp_entry,) = exp_new.values()
        printed = rr.stdout.decode().strip()
        if not (1 <= len(new) <= 2 and all(e[:4] == exp_entry[:4] for e in new.values())
                and after[s]["branches"].get("main") == printed and printed in new):
            problems.append(f"{label}: after the rerun the append left {len(new)} new entries, main at {after[s]['branches'].get('main')}, printed {printed}")
        others = {k: v for k, v in after.items() if k != s}
        if others != {k: v for k, v in expected.items() if k != s}:
            problems.append(f"{label}: the rerun of an append changed other sessions")
    elif after != expected:
        diff = [s for s in set(after) | set(expected) if after.get(s) != expected.get(s)]
        detail = {s: (refs_of(after[s]) if s in after else None, refs_of(expected[s]) if s in expected else None,
                      len(after.get(s, {}).get("entries", {})), len(expected.get(s, {}).get("entries", {}))) for s in diff}
        problems.append(f"{label}: after the rerun the tape differs from an uninterrupted run in {detail}")
    rep = fsck(run / "tape", run / "cache")
    if not rep["ok"]:
        problems.append(f"{label}: fsck after the rerun: {rep['problems'][:3]}")
    # 4. no temporaries left that nothing cleans (a setting's temporary file in the index
    # cache is removed by `ctape cache gc` once it is an hour old: aged here, then gc'd)
    _age_cache_temporaries(run)
    gc = cli(run, "cache", "gc", tape=None)
    if gc.returncode != 0:
        problems.append(f"{label}: cache gc after the rerun: exit {gc.returncode} {gc.stderr.decode()[-200:]}")
    left = strays(run)
    if sc.clone:
        left += [f"{sc.clone}/{x}" for x in strays(run, sc.clone) if not x.startswith("cache")]
    if left:
        problems.append(f"{label}: left behind after the rerun: {left}")
    # 5. and the rest (remote, redaction)
    problems += extra_checks("after-rerun", run, label)
    return True, problems, notes


def _age_cache_temporaries(run):
    cache = run / "cache"
    old = time.time() - 7200
    for dirpath, dirs, files in os.walk(cache):
        for name in files:
            if name.endswith(".tmp"):
                os.utime(os.path.join(dirpath, name), (old, old))


def _clone_state(run, dest):
    """A fresh clone of the remote (in this process, with a cache of its own): its state."""
    from ctape.sync.backend import open_backend
    from ctape.sync.pull import clone

    target, cache = run.parent / dest, run.parent / (dest + "-cache")
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    url = f"file://{run}/remote"
    saved = {k: os.environ.get(k) for k in ("CTAPE_CACHE_DIR", "CTAPE_WRITER")}
    os.environ.update(CTAPE_CACHE_DIR=str(cache), CTAPE_WRITER="crashverify")
    try:
        try:
            clone(open_backend(url), url, None, str(target))
        except Exception as exc:  # noqa: BLE001 - reported
            return None, f"clone: {type(exc).__name__}: {exc}"
        st = state(target, cache)
        rep = fsck(target, cache)
        return st, (None if rep["ok"] else f"fsck of the clone: {rep['problems'][:3]}")
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        shutil.rmtree(target, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)


def make_extra(sc, run, before, expected, remote_before):
    def extra(when, run_, label):
        out = []
        if sc.redact and when == "after-rerun":
            st = state(run / "tape", run / "cache")
            if SECRET in json.dumps(st):
                out.append(f"{label}: the secret reads back after the rerun")
            if sc.name == "redact":
                c = cli(run, "compact", "--expire", "now", "--grace", "now")
                if c.returncode != 0:
                    out.append(f"{label}: compact after the rerun: exit {c.returncode} {c.stderr.decode()[-200:]}")
            found = holders(SECRET.encode(), run / "tape", run / "cache")
            if found:
                out.append(f"{label}: the secret's bytes are still in {found} after redact and compact")
        if (sc.remote or sc.clone) and remote_before is not None:
            st, err = _clone_state(run, "verify-clone")
            if err:
                out.append(f"{label} ({when}): {err}")
            if st is not None:
                if when == "after-kill":
                    have = all_entries(st)
                    # what the remote held before, except what the command itself frees
                    keep = all_entries(expected)
                    lost = [h[:12] for h in all_entries(remote_before) if h not in have and h in keep]
                    if lost:
                        out.append(f"{label}: a clone of the remote after the kill lacks entries it held before: {lost}")
                elif sc.name == "pull":
                    local = all_entries(state(run / "tape", run / "cache"))
                    missing = [h[:12] for h in all_entries(remote_before) if h not in local]
                    if missing:
                        out.append(f"{label}: after the rerun the pull lacks entries the remote holds: {missing}")
                else:
                    local = state(run / "tape", run / "cache") if not sc.clone else None
                    if local is not None and {s: (refs_of(v), set(v["entries"])) for s, v in st.items()} != \
                            {s: (refs_of(v), set(v["entries"])) for s, v in local.items()}:
                        out.append(f"{label}: after the rerun a clone of the remote differs from the local copy: "
                                   f"{sorted(st)} vs {sorted(local)}")
        if sc.clone and when == "after-rerun":
            dest = run / sc.clone
            if not (dest / "ctape.json").exists():
                out.append(f"{label}: no clone after the rerun")
            else:
                st = state(dest, run / "cache")
                want = {s: (refs_of(v), set(v["entries"])) for s, v in remote_before.items()}
                if {s: (refs_of(v), set(v["entries"])) for s, v in st.items()} != want:
                    out.append(f"{label}: the rerun's clone differs from a clone of the remote")
                rep = fsck(dest, run / "cache")
                if not rep["ok"]:
                    out.append(f"{label}: fsck of the rerun's clone: {rep['problems'][:3]}")
        return out
    return extra


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_killed_at_every_point_loses_nothing_and_a_rerun_finishes(sc, base_root):
    if sc.slow_only and not SLOW_MODE:
        pytest.skip("a second case of a command the quick run covers: CTAPE_SLOW=1")
    started = time.monotonic()
    top = base_root / sc.name
    top.mkdir()
    run, tpl = top / "run", top / "tpl"
    run.mkdir()
    sc.build(run)
    times = save_template(run, tpl)
    before = state(run / "tape", run / "cache")
    assert before and all(s["entries"] for s in before.values())
    remote_before = None
    if sc.remote or sc.clone:
        remote_before, err = _clone_state(run, "verify-clone")
        assert err is None, err
        restore(tpl, run, times)
    # the uninterrupted run, traced to count the points (from the restored template, as
    # every killed run starts: the cache then sees the same files)
    restore(tpl, run, times)
    names = SLOW if SLOW_MODE else QUICK + (("unlink", "unlinkat", "rmdir") if sc.name == "cache-gc" else ())
    log = top / "count.log"
    tape = None if sc.clone else "tape"
    r = cli(run, *sc.argv(run), tape=tape, strace=[STRACE, "-f", "-qq", "-y", "--seccomp-bpf", "-o", str(log), "-e", "trace=" + ",".join(names)])
    assert r.returncode == 0, r.stderr.decode()
    pts = points(log, run, names, SLOW_MODE)
    expected = state(run / "tape", run / "cache")
    assert expected != before or sc.name in ("cache-gc", "compact", "compact-default", "redact-then-compact", "clone") or sc.remote, "the command changed nothing"
    assert not strays(run), strays(run)
    if sc.redact:
        assert SECRET not in json.dumps(expected)
    extra = make_extra(sc, run, before, expected, remote_before)
    first = extra("after-rerun", run, "uninterrupted")
    assert not first, first
    assert pts, "no point to kill at"
    if not SLOW_MODE and (sc.remote or sc.clone) and len(pts) > REMOTE_QUICK_POINTS:
        # remote commands make many more calls (pieces, manifests, plans) and each check
        # clones the remote: the quick run takes an even spread of them, CTAPE_SLOW=1 all
        step = -(-len(pts) // REMOTE_QUICK_POINTS)
        pts = pts[::step] + ([pts[-1]] if (len(pts) - 1) % step else [])
    killed, problems, notes = 0, [], []
    for name, n, line in pts:
        k, p, nt = run_point(sc, run, tpl, times, before, expected, name, n, extra)
        killed += k
        problems += p
        notes += nt
    print(f"{sc.name}: {len(pts)} points, {killed} killed, {time.monotonic() - started:.1f}s")
    for x in notes:
        print("  note:", x)
    assert not problems, "\n".join(problems)
    # not vacuous: most points are kills
    # (a command whose threads share the work is killed at fewer of the counted points:
    # a thread's N-th call in the counting run may be no thread's N-th in another, when
    # the work is shared out otherwise)
    assert killed >= max(1, len(pts) // (4 if sc.remote or sc.clone else 2)), (killed, len(pts))
