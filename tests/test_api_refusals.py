"""Bad input through the lower-level Python API and inside batches (found by an audit of
the Python API): each refusal is an InvalidInput, and the tape stays byte-identical --
also inside `tape.batch()`, where nothing is discarded after a refused call, and after
the batch ends. fsck stays clean."""

import math
import os
import subprocess
import sys

import pytest

from conftest import snapshot
from ctape import Tape
from ctape.errors import InvalidInput

SECRET = "API_KEY=sk-" + "q" * 3000  # a large string: a blob of its own


@pytest.fixture
def chat(tmp_path):
    path = tmp_path / "tape"
    t = Tape.init(path)
    first = t.session("chat").append("user", {"content": "hello"}).hash
    yield t, path, first
    t.close()


def fsck_ok(path):
    p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(path), "fsck"], capture_output=True, text=True)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and out.startswith("ok:") and len(out.splitlines()) == 1, out


@pytest.mark.parametrize("meta", [["not", "an", "object"], "x", 5])
def test_put_entry_refuses_a_meta_that_is_not_an_object(chat, meta):
    t, path, first = chat
    before = snapshot(path)
    with pytest.raises(InvalidInput, match="meta must be a JSON object"):
        t.session("chat").put_entry("user", {"content": "x"}, meta=meta, parent=first)
    assert snapshot(path) == before
    fsck_ok(path)


@pytest.mark.parametrize("op, changes, extra, says", [
    (None, {"b": "FIRST"}, {}, "op must be a non-empty string"),
    (7, {"b": "FIRST"}, {}, "op must be a non-empty string"),
    ("", {"b": "FIRST"}, {}, "op must be a non-empty string"),
    ("x", ["main"], {}, "changes must be a dict"),
    ("x", {1: None}, {}, "changes must be a dict"),
    ("x", {"b": "FIRST"}, {"s": "other"}, "own field"),
    ("x", {"b": "FIRST"}, {"set": {"../evil": "zz"}}, "own field"),
    ("x", {"b": "FIRST"}, {"n": -1, "lc": -1}, "own fields"),
    ("x", {"b": "FIRST"}, {"t": "not a time"}, "own field"),
    ("x", {"b": "FIRST"}, {"seen": [1]}, "own field"),
    ("x", {"b": "FIRST"}, {"time": "not a time"}, "time"),
    ("x", {"b": "FIRST"}, {"note": math.nan}, "not plain JSON"),
])
def test_set_refs_refuses_what_would_make_a_record_readers_call_damaged(chat, op, changes, extra, says):
    t, path, first = chat
    changes = {k: (first if v == "FIRST" else v) for k, v in changes.items()} if isinstance(changes, dict) else changes
    before = snapshot(path)
    for in_batch in (False, True):
        with pytest.raises(InvalidInput, match=says):
            if in_batch:
                with t.batch():
                    try:
                        t.session("chat").set_refs(op, changes, **extra)
                    finally:
                        t.session("chat").append("user", {"content": "in the batch"})  # the batch goes on
            else:
                t.session("chat").set_refs(op, changes, **extra)
        assert snapshot(path) == before
    with t.batch():  # refused inside a batch that ends normally: the rest is written, nothing of it
        with pytest.raises(InvalidInput):
            t.session("chat").set_refs(op, changes, **extra)
        t.session("chat").append("user", {"content": "after"})
    fsck_ok(path)
    with pytest.raises(InvalidInput, match=says):  # and through append's own op / record_extra
        if type(op) is not str or not op:
            t.session("chat").append("user", {"content": "x"}, op=op)
        elif isinstance(changes, dict) and all(type(k) is str for k in changes):
            t.session("chat").append("user", {"content": "x"}, record_extra=extra)
        else:
            raise InvalidInput("changes must be a dict")  # not a parameter of append
    fsck_ok(path)
    # the ref log of the session still reads: a new process appends to it
    p = subprocess.run([sys.executable, "-m", "ctape", "--dir", str(path), "append", "user", '{"content": "next"}', "-s", "chat"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_set_refs_keeps_extra_fields_and_takes_a_time(chat):
    t, path, first = chat
    s = t.session("chat")
    s.set_refs("import", {"b": first}, source="mine", time="2026-01-02T03:04:05+01:00")
    rec = [r for r in s.reflog() if r.get("op") == "import"]
    assert rec and s.refs().branches["b"] == first
    fsck_ok(path)


@pytest.mark.parametrize("how", ["append", "extend"])
def test_a_call_refused_inside_a_batch_queues_nothing(chat, how):
    """The large string comes before the NaN that makes the value refused: before, it was
    queued as a blob while the body was encoded, and written when the batch ended."""
    t, path, first = chat
    s = t.session("chat")
    with t.batch():
        kept = s.append("user", {"content": "kept"}).hash
        with pytest.raises(InvalidInput):
            if how == "append":
                s.append("tool_result", {"call_id": "c1", "content": SECRET, "z": math.nan})
            else:
                s.extend([("user", {"content": "first of three"}), ("user", {"content": SECRET}),
                          ("user", {"content": "x", "z": math.nan})])
        after = s.append("user", {"content": "after"}).hash
    raw = b"".join(p.read_bytes() for p in path.rglob("*") if p.is_file())
    assert b"qqqqqqqqqqqqqqqq" not in raw and b"first of three" not in raw
    log = [e.hash for e in s.log()]
    assert log[:3] == [after, kept, first]
    with Tape.open(path) as other:  # a new process's view
        assert [e.hash for e in other.session("chat").log()][:3] == [after, kept, first]
    fsck_ok(path)


def test_a_closed_tape_says_so(chat):
    t, path, first = chat
    s = t.session("chat")
    t.close()
    before = snapshot(path)
    for call in (lambda: s.append("user", {"content": "x"}), lambda: t.get(first), lambda: list(s.log()),
                 lambda: t.sessions(), lambda: s.refs()):
        with pytest.raises(InvalidInput, match="this Tape is closed"):
            call()
    t.close()  # twice: nothing to do
    assert snapshot(path) == before
    pid = os.fork()  # a closed Tape across a fork: nothing to let go of
    if pid == 0:
        os._exit(0)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


@pytest.mark.parametrize("interval", [0, -1, math.nan, math.inf, "x", None, True])
def test_a_stream_refuses_a_flush_interval_that_is_no_time(chat, interval):
    t, path, first = chat
    before = snapshot(path)
    with pytest.raises(InvalidInput, match="flush_interval"):
        with t.session("chat").stream(flush_interval=interval) as st:
            st.write("never")
    assert snapshot(path) == before


def test_usage_refuses_prices_that_are_no_path(chat):
    t, path, first = chat
    with pytest.raises(InvalidInput, match="path of a price table"):
        t.usage(prices=5)
    t.session("chat").append("user", {"content": "the index is still open"})


def test_search_reads_times_and_kinds_as_log_does(chat):
    t, path, first = chat
    s = t.session("chat")
    s.append("assistant", {"content": "old news"}, time="2020-01-01T00:00:00Z")
    s.append("assistant", {"content": "fresh news"})
    assert [h.hash for h in t.search("news", since="3d")] == [e.hash for e in s.log(since="3d", grep="news")]
    for bad in ({"since": "garbage"}, {"until": "yesterday"}):
        with pytest.raises(InvalidInput, match="RFC 3339"):
            t.search("news", **bad)
    assert len(t.search("news", kinds="assistant")) == 2  # one kind, not its letters
    assert [e.kind for e in s.log(kinds="user")] == ["user"]


def test_falsy_values_are_refused_not_taken_for_their_default(chat):
    t, path, first = chat
    s = t.session("chat")
    before = snapshot(path)
    for call in (lambda: s.append("user", {"content": "x"}, time=0), lambda: s.append("user", {"content": "x"}, time=""),
                 lambda: s.branch("b", ref=""), lambda: s.tag("v", ref="")):
        with pytest.raises(InvalidInput):
            call()
    assert snapshot(path) == before


def test_a_session_never_written_has_no_tags_as_it_has_no_branches(chat):
    t, path, first = chat
    assert t.session("fresh").tags() == [] == t.session("fresh").branches()


def test_a_second_tape_in_the_thread_that_holds_the_lock_is_refused_not_a_hang(chat):
    """Two Tapes on one folder in one process (a library opened its own): inside the first
    one's batch, this thread appending through the second waited on itself for ever."""
    import threading

    t, path, first = chat
    t2 = Tape.open(path)
    result = {}

    def same_thread():
        try:
            with t.batch():
                t.session("chat").append("user", {"content": "in the batch"})
                t2.session("chat").append("user", {"content": "through the other Tape"})
        except InvalidInput as e:
            result["error"] = str(e)

    th = threading.Thread(target=same_thread, daemon=True)
    th.start()
    th.join(30)
    assert not th.is_alive(), "the thread waits on itself"
    assert "locked by another Tape this thread uses" in result.get("error", ""), result
    assert [e.hash for e in t2.session("chat").log()] == [first]  # the batch raised: nothing written
    # from another thread, the second Tape waits for the batch as any writer does
    done = threading.Event()
    with t.batch():
        h = t.session("chat").append("user", {"content": "batched"}).hash
        other = threading.Thread(target=lambda: (t2.session("chat").append("user", {"content": "waited"}), done.set()), daemon=True)
        other.start()
        assert not done.wait(0.5)
    other.join(30)
    assert done.is_set()
    assert [e.hash for e in t2.session("chat").log()][1:] == [h, first]
    t2.close()
    fsck_ok(path)


def test_wrongly_typed_arguments_are_ctape_errors(chat):
    """Each was a TypeError, AttributeError or ValueError from inside ctape (audit, F13)."""
    t, path, first = chat
    s = t.session("chat")
    s.branch("alt")
    before = snapshot(path)
    calls = [
        lambda: s.checkout(5), lambda: s.checkout(b"alt"), lambda: s.checkout(["alt"]),
        lambda: list(s.log(kinds=5)), lambda: list(s.log(grep=5)), lambda: list(s.log(grep=b"hi")),
        lambda: t.get("HEAD", session=5), lambda: t.get("HEAD", session=b"chat"), lambda: t.diff("main", "alt", session=5),
        lambda: t.search("hello", session=5), lambda: t.search("hello", limit="3"),
        lambda: s.put_entry("user", {"content": "x"}, parent="zz"), lambda: s.put_entry("user", {"content": "x"}, parent=5),
        lambda: s.set_refs("x", ["main"]), lambda: s.set_refs("x", {1: None}), lambda: s.set_refs("x", {"b": first}, old=5),
        lambda: s.extend(5), lambda: s.extend("user"), lambda: t.copy_session(None, "x"),
    ]
    from ctape.errors import CtapeError

    for i, call in enumerate(calls):
        with pytest.raises(CtapeError):
            call()
    assert snapshot(path) == before


class _Key(str):
    pass


@pytest.mark.parametrize("where, value", [
    ("payload", {"content": "x", "lines": {9: "nine", 10: "ten"}}),  # written "9" before "10": not canonical
    ("payload", {"content": "x", "parts": [{"a": {1.5: "x", 2: "y"}}]}),
    ("payload", {"content": "x", "flags": {True: 1}}),
    ("payload", {"content": "x", "none": {None: 1}}),
    ("payload", {"content": "x", "t": ({"deep": {3: 1}},)}),  # inside a tuple
    ("payload", {"content": SECRET, "lines": {9: "nine", 10: "ten"}}),  # beside a blob
    ("meta", {"tokens": {0: 5, 10: 6}}),
    ("delta", {"by_line": {2: "b", 11: "a"}}),
])
@pytest.mark.parametrize("batched", [False, True])
def test_object_keys_that_are_not_strings_are_refused(chat, where, value, batched):
    """Python's encoder turned such keys into strings but sorted them as numbers: the body
    was not canonical, and an export of it failed to import ("does not hash to its name")."""
    t, path, first = chat
    s = t.session("chat")
    before = snapshot(path)
    args = {"payload": {"content": "x"}, where: value}
    with pytest.raises(InvalidInput, match="keys of a JSON object are strings"):
        if batched:
            with t.batch():
                s.append("user", args["payload"], meta=args.get("meta"), delta=args.get("delta"))
        else:
            s.append("user", args["payload"], meta=args.get("meta"), delta=args.get("delta"))
    with pytest.raises(InvalidInput, match="keys of a JSON object are strings"):
        s.extend([("user", {"content": "first"}), ("user", args["payload"], args.get("meta"), args.get("delta"))])
    with pytest.raises(InvalidInput, match="keys of a JSON object are strings"):
        s.set_refs("note", {"b": first}, note=value)
    assert snapshot(path) == before
    fsck_ok(path)


def test_string_keys_of_any_kind_are_kept_and_an_export_imports_again(chat, tmp_path):
    """Keys that are strings (a subclass too, an OrderedDict) are fine, sorted as text."""
    from collections import OrderedDict

    t, path, first = chat
    s = t.session("chat")
    e = s.append("user", {"content": "x", "lines": OrderedDict([("9", "nine"), ("10", "ten")]), "k": {_Key("b"): 1, "a": 2}})
    assert t.read_entry(e.hash).payload["lines"] == {"10": "ten", "9": "nine"}
    out = tmp_path / "chat.jsonl"
    run = lambda *a: subprocess.run([sys.executable, "-m", "ctape", *a], capture_output=True, text=True)
    p = run("--dir", str(path), "export", "chat")
    assert p.returncode == 0, p.stderr
    out.write_text(p.stdout)
    other = tmp_path / "other"
    Tape.init(other).close()
    p = run("--dir", str(other), "import", "jsonl", str(out), "-s", "again")
    assert p.returncode == 0, p.stderr
    with Tape.open(other) as t2:
        assert e.hash in [x.hash for x in t2.session("again").log()]


def test_paths_with_a_nul_a_cache_dir_that_is_no_path_and_a_progress_that_is_no_function(chat, tmp_path):
    """Raw ValueError / TypeError before (the audit's F13 leftovers)."""
    t, path, first = chat
    with pytest.raises(InvalidInput, match="NUL"):
        Tape.init(str(tmp_path / "a\0b"))
    with pytest.raises(InvalidInput, match="NUL"):
        Tape.open(str(path) + "\0")
    for bad in (5, str(tmp_path / "c\0d")):
        with pytest.raises(InvalidInput, match="cache_dir"):
            Tape.open(path, cache_dir=bad)
    before = snapshot(path)
    with pytest.raises(InvalidInput, match="progress"):
        t.compact(progress=5)
    assert snapshot(path) == before
    assert not (tmp_path / "a").exists()


def test_a_batch_over_more_sessions_than_descriptors_says_so_and_writes_nothing(chat):
    """A batch holds the lock of every session it writes until it ends: past the
    process's limit of open files it failed with a raw OSError (audit F11), and the
    descriptors stayed open, so that every later call failed too."""
    t, path, first = chat
    t.close()
    before = snapshot(path)
    code = r"""
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from ctape import Tape
from ctape.errors import StorageError
t = Tape.open(sys.argv[1])
try:
    with t.batch():
        for i in range(300):
            t.session(f"s{i}").append("user", {"content": "hi"})
except StorageError as e:
    print("refused:", e)
t.session("chat").append("user", {"content": "after"})
with t.batch():
    for i in range(100):
        t.session(f"n{i}").append("user", {"content": "hi"})
print(sum(1 for s in t.store.sessions() if t.session(s).refs().branches))  # (a folder made before the error may stay, empty)
"""
    p = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    assert lines[0].startswith("refused: too many open files") and "ulimit -n" in lines[0]
    assert lines[1] == "101"  # chat and the second batch's 100: nothing of the first
    assert before.keys() <= snapshot(path).keys()
    with Tape.open(path) as t2:
        assert [e.payload["content"] for e in t2.session("chat").log()] == ["after", "hello"]
        assert not any(s.startswith("s") and t2.session(s).refs().branches for s in t2.store.sessions())
    fsck_ok(path)


def test_arguments_an_audit_found_unchecked_are_refused_in_one_line(chat):
    """(audit, 2026-12-06) A dict item of extend() with a misspelt key ("metadata") was
    stored without it; from_head(5) and save_messages(s, None) raised bare TypeErrors;
    log(hidden="no") read as true; search's limit was named by the CLI's -n only; and a
    closed Tape still gave sessions and batches."""
    t, path, first = chat
    s = t.session("chat")
    before = snapshot(path)
    with pytest.raises(InvalidInput, match="key 'metadata'; its keys are kind, payload, meta, delta and time"):
        s.extend([{"kind": "user", "payload": {"content": "x"}, "metadata": {"tokens": 3}}])
    with pytest.raises(InvalidInput, match="from_head takes a function"):
        s.from_head(5)
    with pytest.raises(InvalidInput, match="hidden is True or False"):
        list(s.log(hidden="no"))
    with pytest.raises(InvalidInput, match=r"limit \(-n\) is a number of hits"):
        t.search("hello", limit=-1)
    try:
        from ctape.integrations.pydantic_ai import save_messages
    except ImportError:
        pass
    else:
        for bad in (None, 5, "text"):
            with pytest.raises(InvalidInput, match="save_messages takes a list of pydantic-ai messages"):
                save_messages(s, bad)
    assert snapshot(path) == before
    t.close()
    with pytest.raises(InvalidInput, match="this Tape is closed"):
        t.session("chat")
    with pytest.raises(InvalidInput, match="this Tape is closed"):
        with t.batch():
            pass
