"""Several processes making the same tape at once (the first use of a `TapeSaver(path)`
by parallel workers) all get it (found by an audit): one in ~130 failed, with
"cannot write a tape at ...: File exists" (the folder made by another between its look
and its makedirs) or a bare `sqlite3.OperationalError: database is locked` (two switching
a new index cache to WAL at once). Real processes; `CTAPE_SLOW=1` runs 10 times more."""

import multiprocessing as mp
import os

ROUNDS = 400 if os.environ.get("CTAPE_SLOW") else 40


def _init(p, q):
    import ctape

    try:
        ctape.Tape.init(p).close()
        q.put("ok")
    except Exception as e:  # noqa: BLE001 - what the test reports
        q.put(f"{type(e).__module__}.{type(e).__name__}: {e}")


def test_processes_making_one_tape_at_once_all_get_it(tmp_path):
    ctx = mp.get_context("fork")
    fails = []
    for i in range(ROUNDS):
        p, q = str(tmp_path / f"t{i}" / "tape"), ctx.Queue()
        ps = [ctx.Process(target=_init, args=(p, q)) for _ in range(4)]
        for x in ps:
            x.start()
        for x in ps:
            x.join(60)
        fails += [r for r in (q.get(timeout=60) for _ in ps) if r != "ok"]
    assert not fails, sorted(set(fails))[:5]
