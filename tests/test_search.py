"""Full-text search: the Python API, the command, bad input, and freshness (rsync, compact)."""

import base64
import json
import os
import shutil
import subprocess

import pytest

from ctape import Tape
from ctape.errors import InvalidInput
from ctape.ops.search import fts_expression, parse_query

from conftest import run_cli, snapshot

CLAUDE = os.path.join("/work/shared/fixtures/transcripts/claude-code", "daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl")


def _fill(t: Tape):
    chat = t.session("chat")
    chat.append("system", {"content": "You are a careful coding agent."})
    chat.append("user", {"content": "Why does the parser reject unicode identifiers?"})
    chat.append("tool_call", {"call_id": "c1", "name": "bash", "arguments": {"cmd": "pytest -x tests/test_parser.py"}})
    big = "collected 412 items\n" + "tests/test_parser.py ....F\n" * 80 + "E   AssertionError: zebrafish token rejected\n"
    chat.append("tool_result", {"call_id": "c1", "output": big})  # a large value: stored as a blob
    chat.append("assistant", {"content": "The tokenizer only accepts ASCII letters; I will widen the class."})
    other = t.session("other")
    other.append("user", {"content": "Plan the release notes for version two"})
    other.append("tool_result", {"call_id": "c9", "output": big})  # the same output again: one indexed text
    return chat, other


def test_words_phrases_ranking_and_filters(tape):
    chat, other = _fill(tape)
    hits = tape.search("zebrafish")
    assert {(h.session, h.kind) for h in hits} == {("chat", "tool_result"), ("other", "tool_result")}
    assert all("zebrafish" in h.snippet for h in hits)
    assert [h.hash for h in tape.search("zebrafish", session="other")] == [other.head.hash]
    assert tape.search("zebrafish parser tokenizer") == []  # words are ANDed within one entry
    assert [h.kind for h in tape.search("ASCII tokenizer")] == ["assistant"]
    assert [h.kind for h in tape.search('"only accepts ascii"')] == ["assistant"]  # a phrase, any case
    assert tape.search('"accepts only ascii"') == []  # the words, but not in that order
    assert [h.kind for h in tape.search("unicode", kinds=["user"])] == ["user"]
    assert tape.search("unicode", kinds=["assistant"]) == []
    assert tape.search("zebrafish", since="2999-01-01T00:00:00Z") == []
    assert len(tape.search("zebrafish", until="2999-01-01T00:00:00Z")) == 2
    assert len(tape.search("zebrafish", limit=1)) == 1
    h = tape.search("release notes")[0]
    assert h.to_json() == {"session": "other", "hash": other.log().__next__().parent, "kind": "user",
                           "time": h.time, "snippet": "Plan the release notes for version two", "match": "exact"}
    # bm25: an entry dense in the word ranks before one that mentions it once
    chat.append("user", {"content": "tokenizer tokenizer tokenizer"})
    assert [h.snippet for h in tape.search("tokenizer")][0] == "tokenizer tokenizer tokenizer"


def test_new_entries_and_other_processes_are_found(tape_dir):
    t = Tape.open(tape_dir)
    s = t.session("s")
    s.append("user", {"content": "first quokka"})
    assert len(t.search("quokka")) == 1
    s.append("user", {"content": "second quokka"})
    assert len(t.search("quokka")) == 2  # the cache catches up before each query
    run_cli("--dir", tape_dir, "append", "user", '{"content": "third quokka"}', "-s", "s", check=True)
    assert len(t.search("quokka")) == 3
    t.close()


def test_binary_values_are_not_indexed(tape):
    s = tape.session("s")
    blob = base64.b64encode(os.urandom(3000)).decode()
    s.append("user", {"content": [{"type": "text", "text": "see the screenshot"},
                                  {"type": "image", "source": {"type": "base64", "data": blob}}]})
    s.append("tool_result", {"call_id": "call_secretid", "output": "ok"})
    word = blob[10:40]
    assert tape.search("screenshot")
    assert tape.search(word) == []  # base64 runs stay out of the index
    assert tape.search("call_secretid") == []  # call ids are not text
    assert tape.search("image") == []  # nor the type tags of content parts


@pytest.mark.parametrize("query", ['"', '*', '(', ')', 'NEAR', 'NEAR(a b)', '-x', 'a OR', 'AND', '^', 'x:y', '"unclosed phrase',
                                   'col:value', '{a b}', 'a + b', "'", 'NOT a'])
def test_fts_syntax_never_reaches_fts(tape, query):
    s = tape.session("s")
    s.append("user", {"content": "near and or not a b x y unclosed phrase col value"})
    try:
        terms = parse_query(query)
    except InvalidInput:
        return  # nothing searchable in it: refused as an empty query
    assert fts_expression(terms)
    tape.search(query)  # never an FTS5 syntax error


@pytest.mark.parametrize("query", ["", "   ", '""', "* - ( )", '"   "'])
def test_empty_query_is_refused_and_changes_nothing(tape_dir, query):
    Tape.open(tape_dir).session("s").append("user", {"content": "hello"})
    before = snapshot(tape_dir)
    p = run_cli("--dir", tape_dir, "search", query)
    assert p.returncode == 2
    err = p.stderr.decode()
    assert err.startswith("ctape: error: empty search query") and err.count("\n") == 1
    assert snapshot(tape_dir) == before


def test_bad_options_are_one_line_errors(tape_dir):
    Tape.open(tape_dir).session("s").append("user", {"content": "hello"})
    before = snapshot(tape_dir)
    for args, code in ((["hello", "--kind", "nope"], 2), (["hello", "--since", "yesterday"], 2),
                       (["hello", "-n", "-1"], 2), (["hello", "-s", "nosuch"], 1), (["hello", "-s", "../x"], 2)):
        p = run_cli("--dir", tape_dir, "search", *args)
        assert p.returncode == code, (args, p.stderr)
        assert p.stderr.decode().count("\n") == 1 and "Traceback" not in p.stderr.decode()
    assert snapshot(tape_dir) == before



def test_long_queries_are_bounded(tape_dir):
    """FTS5 takes time quadratic in the terms it ANDs: the same word 30,000 times (a 60 KB
    URL of serve's search box) took 112 s, and 4,000 different words 1.6 s (found by an
    audit). A repeated term is searched once; more than 64 different terms, or a query
    longer than 16,384 characters, is refused in one line with what to do."""
    from ctape.ops.searchtext import MAX_QUERY_CHARS, MAX_TERMS

    t = Tape.open(tape_dir)
    t.session("s").append("user", {"content": "the build passed"})
    assert parse_query("the " * 4_000 + '"the build" the "the build"') == ["the", "the build"]
    assert [h.session for h in t.search("the " * 4_000)] == ["s"]
    assert len(parse_query(" ".join(f"w{i}" for i in range(MAX_TERMS)))) == MAX_TERMS
    t.close()
    before = snapshot(tape_dir)
    for query, says in ((" ".join(f"w{i}" for i in range(MAX_TERMS + 1)), "65 different words and phrases; at most 64"),
                        ('"' + "a" * MAX_QUERY_CHARS + '"', "16,386 characters long; at most 16,384")):
        p = run_cli("--dir", tape_dir, "search", query)
        err = p.stderr.decode()
        assert p.returncode == 2 and err.count("\n") == 1 and says in err, err
    assert snapshot(tape_dir) == before

def test_cli_json_lines_and_human_form(tape_dir):
    with Tape.open(tape_dir) as t:
        _fill(t)
    p = run_cli("--dir", tape_dir, "search", "zebrafish", "--json", check=True)
    rows = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert {r["session"] for r in rows} == {"chat", "other"}
    assert all(set(r) == {"session", "hash", "kind", "time", "snippet", "match"} for r in rows)  # SPEC 13, and how it matched
    p = run_cli("--dir", tape_dir, "search", "zebrafish", "-s", "chat", check=True)
    line = p.stdout.decode().strip()
    assert line.split()[1:3] == ["chat", "tool_result"] and "zebrafish" in line
    p = run_cli("--dir", tape_dir, "search", "absentword", check=True)
    assert p.stdout == b"" and b"no matches" in p.stderr


def test_control_characters_are_escaped(tape_dir):
    with Tape.open(tape_dir) as t:
        t.session("s").append("tool_result", {"call_id": "c", "output": "bell\x07here \x1b[31mred\x1b[0m"})
    p = run_cli("--dir", tape_dir, "search", "bell", check=True)
    assert b"\x07" not in p.stdout and b"\x1b" not in p.stdout and b"\\x07" in p.stdout


def test_search_cache_is_rebuildable(tape_dir):
    t = Tape.open(tape_dir)
    _fill(t)
    assert len(t.search("zebrafish")) == 2
    path = t._search_index().path
    t.close()
    os.unlink(path)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    t = Tape.open(tape_dir)
    assert len(t.search("zebrafish")) == 2
    t.close()


def test_compaction_keeps_results_right(tape_dir):
    t = Tape.open(tape_dir)
    s = t.session("s")
    s.append("user", {"content": "keeper wombat"})
    s.checkout("s", new_branch="tmp")
    doomed = s.append("user", {"content": "doomed wombat"}).hash
    assert len(t.search("wombat")) == 2
    s.checkout("main")
    s.delete_branch("tmp")
    t.compact(expire="now", grace="now")
    assert not t.has_entry(doomed)
    assert [h.snippet for h in t.search("wombat")] == ["keeper wombat"]  # the removed entry is gone
    s.append("user", {"content": "a new wombat after compaction"})
    assert len(t.search("wombat")) == 2
    t.close()
    t = Tape.open(tape_dir)  # another process: reads the pack compaction wrote
    assert sorted(h.snippet for h in t.search("wombat")) == ["a new wombat after compaction", "keeper wombat"]
    t.close()


@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed")
def test_entries_that_arrive_by_rsync_are_found(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    Tape.init(a).close()
    subprocess.run(["rsync", "-a", f"{a}/", f"{b}/"], check=True)
    ta, tb = Tape.open(a), Tape.open(b)
    ta.session("s").append("user", {"content": "platypus from a"})
    assert tb.search("platypus") == []
    big = "platypus " + "lorem ipsum dolor " * 200  # a blob too
    ta.session("t").append("tool_result", {"call_id": "c", "output": big})
    ta.close()
    subprocess.run(["rsync", "-a", f"{a}/", f"{b}/"], check=True)
    assert sorted(h.session for h in tb.search("platypus")) == ["s", "t"]
    tb.close()


def test_shared_entries_are_reported_for_a_session_that_reaches_them(tape):
    s = tape.session("orig")
    s.append("user", {"content": "shared narwhal"})
    h = s.head.hash
    # another session whose branch points into orig's history (what `session cp` does)
    tape.session("copy").set_refs("branch", {"main": h, "HEAD": "@main"})
    assert [x.session for x in tape.search("narwhal", session="copy")] == ["copy"]
    assert [x.session for x in tape.search("narwhal")] == ["orig"]
    assert tape.search("narwhal", session="nobody") == []


def test_hidden_entries_only_on_request(tape):
    s = tape.session("s")
    s.append("system", {"content": "bookkeeping okapi"}, meta={"ctape.hidden": True})
    assert tape.search("okapi") == []
    assert len(tape.search("okapi", hidden=True)) == 1


@pytest.mark.skipif(not os.path.exists(CLAUDE), reason="fixtures not present")
def test_real_transcript(tape_dir):
    run_cli("--dir", tape_dir, "import", "claude-code", CLAUDE, "-s", "cc", check=True)
    p = run_cli("--dir", tape_dir, "search", "session_nav.html", "--json", "-n", "5", check=True)
    rows = [json.loads(x) for x in p.stdout.decode().splitlines()]
    assert len(rows) == 5 and all(r["session"] == "cc" for r in rows)
    p = run_cli("--dir", tape_dir, "search", '"test session starts"', "--kind", "tool_result", "--json", check=True)
    rows = [json.loads(x) for x in p.stdout.decode().splitlines()]
    assert rows and all(r["kind"] == "tool_result" and "test session starts" in r["snippet"] for r in rows)


def test_common_words_are_ranked_in_windows_and_none_is_lost(tape, monkeypatch):
    import ctape.ops.search as search

    monkeypatch.setattr(search, "RANK_WINDOW", 3)
    s = tape.session("s")
    for i in range(10):
        s.append("user", {"content": f"okra number {i}" + " filler" * i})
    hits = tape.search("okra", limit=None)
    assert sorted(h.snippet.split()[2] for h in hits) == [str(i) for i in range(10)]  # every match, once
    # the newest window (texts 7, 8, 9) comes first, ranked within itself: the shortest text first
    assert [h.snippet.split()[2] for h in hits[:3]] == ["7", "8", "9"]
    assert len(tape.search("okra", limit=4)) == 4
    assert [h.snippet.split()[2] for h in tape.search("okra", kinds=["user"], limit=None)][:1] == ["7"]


def test_snippet_of_a_match_deep_in_a_large_output(tape):
    s = tape.session("s")
    s.append("tool_result", {"call_id": "c", "output": "line of filler text\n" * 2000 + "the axolotl appears at the very end"})
    hit = tape.search("axolotl")[0]
    assert "axolotl appears at the very end" in hit.snippet and hit.snippet.startswith("…")
    assert hit.time == s.head.time and hit.hash == s.head.hash


def test_removed_session_is_not_reported_and_its_copy_is(tape):
    s = tape.session("orig")
    s.append("user", {"content": "gone gecko"})
    tape.copy_session("orig", "copy")
    tape.remove_session("orig")
    assert [h.session for h in tape.search("gecko")] == ["copy"]
    tape.remove_session("copy")
    assert tape.search("gecko") == []


def test_processes_indexing_at_once_agree(tape_dir):
    import sys

    with Tape.open(tape_dir) as t:
        s = t.session("s")
        with t.batch():
            for i in range(2500):  # more than one write transaction of the indexer
                s.append("user", {"content": f"entry {i} of the lemur census"})
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, "-m", "ctape", "--dir", str(tape_dir), "search", "lemur", "-n", "0", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(3)]
    outs = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    counts = {len(o.splitlines()) for o, _ in outs}
    assert counts == {2500}



def test_an_indexer_that_waited_for_the_lock_numbers_its_texts_after_the_others(tmp_path):
    # Two processes index one search cache. B holds the write lock mid-update; A, which saw
    # entries B did not, reads the cache and waits for the lock. A numbered its new texts from
    # what it read before waiting: after B committed, A's first text took an id B had used
    # ("UNIQUE constraint failed: texts.id", seen in CI with three `ctape search` at once).
    import threading

    d, cache = str(tmp_path / "t"), str(tmp_path / "cache")
    a = Tape.init(d, cache_dir=cache)
    for i in range(5):
        a.session("s").append("user", {"content": f"tapir {i} seen first"})
    b = Tape.open(d, cache_dir=cache)
    b_inside, a_waits = threading.Event(), threading.Event()
    real_scan = b.store.scan_file

    def scan_then_pause(*args, **kw):
        for n, rec in enumerate(real_scan(*args, **kw)):
            yield rec
            if n == 0:
                b_inside.set()  # B's write transaction is open, its rows not yet committed
                assert a_waits.wait(30)

    class LockWatch:  # A's connection, telling the test when A goes for the write lock
        def __init__(self, db):
            self.db = db

        def execute(self, sql, *args):
            if sql == "BEGIN IMMEDIATE":
                a_waits.set()
            return self.db.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self.db, name)

    b.store.scan_file = scan_then_pause
    got = {}

    def search(name, tape):
        try:
            got[name] = sorted(h.hash for h in tape.search("tapir", limit=None))
        except Exception as e:  # noqa: BLE001 (the test reports it)
            got[name] = e

    tb = threading.Thread(target=search, args=("b", b))
    tb.start()
    assert b_inside.wait(30)
    for i in range(5):  # entries A sees and B's update did not list
        a.session("s").append("user", {"content": f"tapir {i} seen later"})
    ix = a._search_index()
    ix.db = LockWatch(ix.db)
    ta = threading.Thread(target=search, args=("a", a))
    ta.start()
    ta.join(60)
    tb.join(60)
    want = sorted(e.hash for e in a.session("s").log(limit=None))
    assert got["a"] == want, got["a"]
    assert sorted(h.hash for h in b.search("tapir", limit=None)) == want
    a.close()
    b.close()


def test_a_long_lived_searcher_names_the_right_session_after_another_process_rebuilt(tmp_path):
    # `serve` keeps its search index open. Another process's redaction makes the next search
    # there index the tape again from nothing, numbering the sessions anew. The long-lived
    # index kept the old numbers and filed its next entries under another session's.
    from ctape.ops.redact import redact_pattern

    d, cache = str(tmp_path / "t"), str(tmp_path / "cache")
    served = Tape.init(d, cache_dir=cache)
    served.session("b").append("user", {"content": "quokka seen in b"})
    assert [h.session for h in served.search("quokka")] == ["b"]  # b is session number 1
    served.session("a").append("user", {"content": "quokka seen in a"})
    served.session("a").append("user", {"content": "the password is hunter2"})
    other = Tape.open(d, cache_dir=cache)
    redact_pattern(other, "hunter2", ["a"])
    assert {h.session for h in other.search("quokka")} == {"a", "b"}  # rebuilt: a is number 1 now
    served.session("b").append("user", {"content": "quokka seen again in b"})
    want = [("a", "quokka seen in a"), ("b", "quokka seen again in b"), ("b", "quokka seen in b")]
    for t in (served, other):
        assert sorted((h.session, h.snippet.replace("[", "").replace("]", "")) for h in t.search("quokka", limit=None)) == want
    other.close()
    served.close()


def test_a_search_that_other_processes_keep_emptying_says_search_again(tape):
    # Every pass finds the cache emptied under it by another process (a new generation each
    # time it looks): four tries, then a one-line error rather than an answer from rows of
    # an emptied cache or of superseded redactions.
    from ctape.errors import ConflictError

    tape.session("s").append("user", {"content": "a numbat"})
    ix = tape._search_index()
    ix._state = lambda: (os.urandom(8).hex(), "")
    with pytest.raises(ConflictError, match="search again$"):
        tape.search("numbat")
    del ix._state
    assert [h.snippet for h in tape.search("numbat")] == ["a numbat"]
    ix._update_pass = lambda progress: (0, False)  # every pass lost a file to a compaction elsewhere
    with pytest.raises(ConflictError, match="search again$"):
        tape.search("numbat")  # rather than an answer that may miss entries

# -- a search beside a compaction in another process ------------------------------------------
# The first search indexes the files it lists. A compaction in another process (its own index
# cache) moves the entries of those files into a pack: made after the search's listing, or
# after its index's refresh, the pack was not read, the files it replaced were gone when the
# search came to them, and the entries they held were missed (`[]` for an entry the tape held
# all along, until a later search). Deterministic: the compaction runs at the moment named.



def test_a_rebuild_elsewhere_between_the_update_and_the_answer_drops_no_hit(tmp_path):
    # Another process rebuilt the shared index cache from a listing made before a segment
    # existed: the rows of that segment's objects went with the rebuild, until a refresh.
    # The answer checks each hit against the index ("removed by a compaction since?"); a
    # rebuild between the update and that check made those hits look removed. Seen in the
    # long run of tests/test_search_concurrent.py (a compactor makes other processes rebuild).
    from ctape.store.store import Store

    d, cache = str(tmp_path / "t"), str(tmp_path / "cache")
    searcher = Tape.init(d, cache_dir=cache)
    searcher.session("s").append("user", {"content": "an aardwolf in s"})
    w = Tape.open(d, cache_dir=cache)
    newest = w.session("s2").append("user", {"content": "an aardwolf in s2"}).hash
    w.close()
    new_files = set(searcher.store.list_files("s2"))
    rebuilder = Store(d, cache_dir=cache)
    listed = rebuilder.list_files

    def listed_before_s2(*args, **kw):
        return {p: n for p, n in listed(*args, **kw).items() if p not in new_files}

    rebuilder.list_files = listed_before_s2
    ix = searcher._search_index()
    real_update = ix.update

    def update_then_rebuild_elsewhere(*args, **kw):
        out = real_update(*args, **kw)
        rebuilder._full_reindex()
        return out

    ix.update = update_then_rebuild_elsewhere
    hits = searcher.search("aardwolf", limit=None)
    assert sorted(h.session for h in hits) == ["s", "s2"] and newest in {h.hash for h in hits}
    rebuilder.close()
    searcher.close()

@pytest.mark.parametrize("moment", ["after the listing", "after the refresh"])
def test_a_compaction_elsewhere_during_a_search_misses_nothing(tmp_path, moment):
    d = str(tmp_path / "t")
    searcher = Tape.init(d, cache_dir=str(tmp_path / "c1"))
    want = {}
    for name in ("a", "b", "c"):
        want[name] = searcher.session(name).append("user", {"content": f"okapi of {name}"}).hash
    other = Tape.open(d, cache_dir=str(tmp_path / "c2"))
    store, compacted = searcher.store, []
    hooked = "scan_file" if moment == "after the listing" else "refresh"
    real = getattr(store, hooked)

    def compact_once():
        if not compacted:
            compacted.append(other.compact(expire="now", grace="now"))  # a pack in, the listed files out

    def scan_after_compacting(*args, **kw):
        compact_once()
        return real(*args, **kw)

    def refresh_then_compact(*args, **kw):
        out = real(*args, **kw)
        compact_once()
        return out

    setattr(store, hooked, scan_after_compacting if hooked == "scan_file" else refresh_then_compact)
    try:
        hits = searcher.search("okapi", limit=None)
    finally:
        setattr(store, hooked, real)
    assert compacted and compacted[0]["removed_files"] >= 3, compacted
    assert sorted((h.session, h.hash) for h in hits) == sorted(want.items())
    other.close()
    searcher.close()


def test_compaction_takes_freed_text_out_of_the_search_cache(tmp_path):
    """The search cache kept the rows and the words of entries a compaction freed: a removed
    session's text stayed in ~/.cache for good, and a rolling window of sessions grew the
    cache without bound (found by an audit of long-lived processes; docs/privacy.md says
    compact cleans the search cache). The cache file's bytes are read, not the results."""
    cache = tmp_path / "cache"
    t = Tape.init(str(tmp_path / "t"), cache_dir=str(cache))
    t.session("keep").append("user", {"content": "the keeper ocelot"})
    for i in range(3):
        t.session(f"gone{i}").append("user", {"content": f"zanzibarquokka{i} was said here"})
    assert len(t.search("ocelot")) == 1 and len(t.search("zanzibarquokka1")) == 1

    def cache_bytes() -> bytes:
        return b"".join(p.read_bytes() for p in cache.rglob("search*.sqlite*") if p.is_file())

    assert b"zanzibarquokka1" in cache_bytes()  # (the check can fail: the word is there now)
    for i in range(3):
        t.remove_session(f"gone{i}")
    t.compact(expire="now", grace="now")
    assert b"zanzibarquokka" not in cache_bytes()
    assert t.search("zanzibarquokka1") == []
    assert [h.snippet for h in t.search("ocelot")] == ["the keeper ocelot"]  # read again
    t.close()
