"""Processes for tests/test_search_concurrent.py, all on one tape and one search cache:
writers that append and redact, a compactor, and searchers that check each answer against
the log of what the writers had acknowledged (one JSON line per append or redaction,
written after the call returned).

    python search_workers.py writer DIR LOG N SEED REDACTIONS
    python search_workers.py compactor DIR STOP SEED
    python search_workers.py searcher DIR LOG STOP long|fresh

A searcher exits 1 with one line per broken promise on stderr:
- every entry acknowledged before a search began is found, under the session it was
  appended to;
- every hit is an entry a writer appended (acknowledged within a few seconds), under
  that session;
- no entry whose redaction was acknowledged before a search began matches its old text.
"""

import json
import os
import random
import sys
import time

from ctape import Tape


def _log(f, kind: str, session: str, h: str) -> None:
    f.write(json.dumps([kind, session, h]) + "\n")  # one write of an O_APPEND file: whole lines
    f.flush()


def writer(d: str, log: str, n: int, seed: int, redactions: int) -> None:
    """n appends, about `redactions` of them redacted soon after (each makes every
    searcher index the whole tape again: a long run keeps them few)."""
    from ctape.ops.redact import redact

    rng = random.Random(seed)
    chance = min(1.0, redactions / (0.15 * n))
    t = Tape.open(d)
    with open(log, "a") as f:
        for i in range(n):
            s = f"s{rng.randrange(3)}"
            if rng.random() < 0.15:
                e = t.session(s).append("user", {"content": f"okapi {seed} {i}"})
                _log(f, "okapi", s, e.hash)
                if rng.random() < chance:  # every searcher then indexes the tape again from nothing
                    redact(t, s, [(e.hash, "$.payload.content", "manual")])
                    _log(f, "redacted", s, e.hash)
            else:
                _log(f, "wombat", s, t.session(s).append("user", {"content": f"wombat {seed} {i}"}).hash)
    t.close()


def compactor(d: str, stop: str, seed: int) -> None:
    rng = random.Random(seed)
    t = Tape.open(d)
    while not os.path.exists(stop):
        t.compact(expire="now", grace="now")
        time.sleep(rng.uniform(0.3, 1.2))
    t.close()


def _read(log: str) -> list:
    with open(log) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def _after(d: str, h: str) -> str:
    """What a new process finds of a missed entry just after the miss (so that a failure
    says which part lost it: the search cache's rows, the tape's index, or the tape)."""
    from ctape.store.index import hash_key

    t = Tape.open(d)
    try:
        row = t._search_index().db.execute("SELECT session, hidden, text FROM entries WHERE key=?", (hash_key(h),)).fetchone()
        found = {x.hash: x.session for x in t.search("wombat", limit=None)}.get(h)
        return f"in the search cache: {row}, in the index: {t.store.index.find_object(h) is not None}, " \
               f"has_object: {t.store.has_object(h)}, found by a new search: {found}"
    except Exception as e:  # noqa: BLE001 (a diagnosis: say what stopped it)
        return f"not diagnosed: {e!r}"
    finally:
        t.close()


def searcher(d: str, log: str, stop: str, mode: str) -> int:
    from ctape.errors import ConflictError

    long_lived = Tape.open(d) if mode == "long" else None
    errors: list[str] = []
    rounds = conflicts = 0
    last = False
    while not last:
        last = os.path.exists(stop)  # one more round after the writers stopped
        before = _read(log)
        t = long_lived or Tape.open(d)
        try:
            wombats = {h.hash: h.session for h in t.search("wombat", limit=None)}
            complete = t._search_index().complete
            okapis = {h.hash: h.session for h in t.search("okapi", limit=None)}
        except ConflictError:  # "search again": other processes kept emptying the cache
            conflicts += 1
            last = False
            continue
        finally:
            if t is not long_lived:
                t.close()
        rounds += 1
        for kind, s, h in before:
            if kind == "wombat" and wombats.get(h) != s:
                errors.append(f"round {rounds}: {h[:12]} appended to {s} before the search began: got {wombats.get(h)}"
                              f"{'' if complete else ' (update incomplete)'}; afterwards {_after(d, h)}")
            if kind == "redacted" and h in okapis:
                errors.append(f"round {rounds}: {h[:12]} redacted before the search began still matches its text")
        deadline = time.monotonic() + 10
        while True:
            known = {(k, h): s for k, s, h in _read(log)}
            unknown = [h for h in wombats if ("wombat", h) not in known] + [h for h in okapis if ("okapi", h) not in known]
            if not unknown or time.monotonic() > deadline:
                break
            time.sleep(0.05)  # appended, its line not written yet
        for h in unknown:
            errors.append(f"round {rounds}: {h[:12]} was found but never appended")
        for kind, hits in (("wombat", wombats), ("okapi", okapis)):
            for h, s in hits.items():
                if (kind, h) in known and known[(kind, h)] != s:
                    errors.append(f"round {rounds}: {h[:12]} appended to {known[(kind, h)]} was reported in {s}")
    if long_lived:
        long_lived.close()
    for e in errors[:20]:
        print(e, file=sys.stderr)
    print(rounds, conflicts)
    return 1 if errors else 0


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "writer":
        writer(args[0], args[1], int(args[2]), int(args[3]), int(args[4]))
    elif role == "compactor":
        compactor(args[0], args[1], int(args[2]))
    else:
        sys.exit(searcher(args[0], args[1], args[2], args[3]))
