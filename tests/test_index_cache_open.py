"""Two processes opening a new (or older-schema) index cache at once make it once.

Both read "no schema" before either had made it; the second's drop then ran after the
first had begun to index (the drop waited for the first's write lock). File ids start
over after a drop, so the first's id of one segment named another session's segment: its
scan's length was recorded for that shorter file, and the next command judged the
session to have lost acknowledged records and refused every write to it. Found by an audit
of the caches several processes share. Deterministic: the second process's first look at
the schema is made to see it missing (it looked before the first had committed)."""

from ctape import Tape
from ctape.store import index as ixmod
from ctape.store.store import Store


def test_a_second_process_that_saw_no_schema_does_not_drop_what_the_first_made(tmp_path):
    d, cache = str(tmp_path / "t"), str(tmp_path / "cache")
    t = Tape.init(d, cache_dir=str(tmp_path / "elsewhere"))
    for i in range(60):
        t.session("s1").append("user", {"content": f"s1 step {i} " + "x" * 200})
    t.session("s2").append("user", {"content": "s2 hello"})
    t.close()

    first = Store(d, cache_dir=cache)  # makes the new cache
    p1 = next(iter(first.list_files("s1")))
    scanned = first._scan_file(p1, 0)  # indexing s1: p1 has its id, its scan under way
    real, looks = ixmod.cache_schema, []

    def looked_before_the_first_committed(db):
        looks.append(1)
        return None if len(looks) == 1 else real(db)

    ixmod.cache_schema = looked_before_the_first_committed
    try:
        second = Store(d, cache_dir=cache)
    finally:
        ixmod.cache_schema = real
    second.refresh("s2")
    p2 = next(p for p in second.list_files("s2") if p.startswith("sessions/"))
    assert second.index.file_id(p2) != first.index.file_id(p1)
    first.index.apply(scanned, scanned=True)

    later = Tape(Store(d, cache_dir=cache))
    later.session("s2").append("user", {"content": "more"})  # was refused: "lost acknowledged records"
    assert later.store.index.lost_rows() == []
    assert len(list(later.session("s1").log(limit=None))) == 60
    later.close()
    first.close()
    second.close()


def test_a_ctape_of_another_schema_version_keeps_its_own_cache_beside_a_running_one(tmp_path, monkeypatch):
    # An upgrade while `watch` (or an agent's Tape) runs: the new ctape found the cache of
    # another schema version and dropped its tables under the running process, whose file
    # ids then named other files; the next append to another session was refused ("lost
    # acknowledged records"). From schema 16 on each version has its own file.
    d, cache = str(tmp_path / "t"), str(tmp_path / "cache")
    Tape.init(d, cache_dir=cache).session("s2").append("user", {"content": "s2 hello"})
    running = Tape.open(d, cache_dir=cache)
    for i in range(30):
        running.session("s1").append("user", {"content": f"s1 step {i} " + "x" * 200})
    running.store.index.sync()

    monkeypatch.setattr(ixmod, "SCHEMA_VERSION", ixmod.SCHEMA_VERSION + 1)  # the next ctape
    newer = Tape(Store(d, cache_dir=cache))
    newer.session("s2").refs()  # reads s2 first: its file ids differ from the running one's
    newer.session("s1").refs()
    assert newer.store.index.path != running.store.index.path
    newer.close()
    monkeypatch.undo()

    running.session("s1").append("user", {"content": "one more " + "y" * 3000})
    running.store.index.sync()
    later = Tape(Store(d, cache_dir=cache))
    later.session("s2").append("user", {"content": "more"})  # was refused
    assert later.store.index.lost_rows() == []
    assert len(list(later.session("s1").log(limit=None))) == 31
    later.close()
    running.close()


def test_a_search_cache_of_another_schema_version_is_kept_beside_a_running_ones(tmp_path, monkeypatch):
    # The same for the search cache: a ctape of the next version emptied `search.sqlite`
    # under a running `serve`, which then indexed the whole tape again at its next search
    # (a new generation). From search schema 5 on each version has its own file.
    from ctape.ops import search as searchmod

    d, cache = str(tmp_path / "t"), str(tmp_path / "cache")
    running = Tape.init(d, cache_dir=cache)
    for i in range(20):
        running.session("s1").append("user", {"content": f"step {i} walrus"})
    assert len(running.search("walrus", limit=None)) == 20
    before = running._search._state()

    monkeypatch.setattr(searchmod, "SCHEMA_VERSION", searchmod.SCHEMA_VERSION + 1)  # the next ctape
    newer = Tape.open(d, cache_dir=cache)
    assert len(newer.search("walrus", limit=None)) == 20
    newer_path = newer._search.path
    newer.close()
    monkeypatch.undo()

    assert running._search._state() == before  # its rows, its generation: nothing to do again
    running.session("s1").append("user", {"content": "one more walrus"})
    assert len(running.search("walrus", limit=None)) == 21
    assert newer_path != running._search.path
    running.close()
