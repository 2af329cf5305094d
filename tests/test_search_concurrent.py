"""Search beside writers, redactions and compactions, in real processes sharing one tape and
one search cache (tests/search_workers.py checks each answer against what the writers had
acknowledged when the search began).

Each search brings the shared cache up to date in write transactions; a redaction makes
the next one index the tape again from nothing, renumbering texts and sessions under
processes that keep their index open (`serve`); a compaction moves entries into packs
under a search's feet. CI found a second indexer reusing a text number another had taken
(tests/test_search.py has the deterministic cases); this runs the sequences.

The short run is part of the suite; `CTAPE_SLOW=1` runs a long one (CTAPE_SEARCH_APPENDS
appends per writer, default 3,000, with about 40 redactions each)."""

import os
import subprocess
import sys

import pytest

from ctape import Tape

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "search_workers.py")
SLOW = os.environ.get("CTAPE_SLOW") == "1"


def _run(tmp_path, appends: int, searchers: list[str], seed: int = 1, redactions: int = 10) -> None:
    d, log, stop = str(tmp_path / "tape"), str(tmp_path / "acks.jsonl"), str(tmp_path / "stop")
    Tape.init(d).close()
    open(log, "w").close()
    py = [sys.executable, WORKERS]
    looking = [subprocess.Popen(py + ["searcher", d, log, stop, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for mode in searchers]
    compactor = subprocess.Popen(py + ["compactor", d, stop, str(seed)], stderr=subprocess.PIPE)
    writers = [subprocess.Popen(py + ["writer", d, log, str(appends), str(seed * 10 + i), str(redactions)], stderr=subprocess.PIPE)
               for i in range(2)]
    try:
        for w in writers:
            _, err = w.communicate(timeout=1800)
            assert w.returncode == 0, err.decode()
    finally:
        open(stop, "w").close()
    _, err = compactor.communicate(timeout=600)
    assert compactor.returncode == 0, err.decode()
    outs = [p.communicate(timeout=600) for p in looking]
    failures = [f"searcher {mode}: {err.decode()}" for mode, p, (_, err) in zip(searchers, looking, outs) if p.returncode]
    assert not failures, "\n".join(failures)
    rounds = [tuple(map(int, out.split())) for out, _ in outs]  # (searches checked, "search again")
    print("searchers (rounds, search again):", rounds)
    assert min(r for r, _ in rounds) >= 2, rounds  # each searcher searched while the writers wrote, and after
    assert sum(c for _, c in rounds) <= sum(r for r, _ in rounds) // 4, rounds  # "search again" stays rare


def test_searchers_beside_writers_redactions_and_compactions(tmp_path):
    _run(tmp_path, appends=150, searchers=["long", "fresh"])


@pytest.mark.skipif(not SLOW, reason="long run: CTAPE_SLOW=1")
def test_searchers_beside_writers_redactions_and_compactions_long(tmp_path):
    _run(tmp_path, appends=int(os.environ.get("CTAPE_SEARCH_APPENDS", "3000")), searchers=["long", "long", "fresh"], seed=7, redactions=40)
