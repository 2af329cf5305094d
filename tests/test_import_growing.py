"""Importing a transcript again and again as its agent writes it (docs/import.md, "Importing
the same file again"): whatever points the earlier imports read the file at, the last
import of the finished file leaves the session as one import of it would: `main` at the
same entry, no other branch, and an export that gives the file's records back once.

A black-box audit found two cuts that forked the session: a Codex rollout read between an
agent's `event_msg` and its `response_item` twin (the event became a visible message, then
a hidden echo), and a Claude Code file read while it held only its summary lines (they
took the file's time, then the first message's). Real transcripts, cut at random places
(mid-line too), against a fresh import of the whole file as the oracle.
"""

import json
import os
import shutil

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_watch import CLAUDE, CLAUDE_FORKS, CODEX, CODEX_BIG

from ctape import Tape
from ctape.formats import export_ref, import_files

SLOW = os.environ.get("CTAPE_SLOW") == "1"
FILES = {"codex": [CODEX, CODEX_BIG], "claude-code": [CLAUDE, CLAUDE_FORKS]}


def _import(tape_dir, fmt, path, session="grow"):
    with Tape.open(tape_dir) as t:
        import_files(t, fmt, [str(path)], session)


def _state(tape_dir, fmt, session="grow"):
    """What a user sees of the session: its branches, HEAD, the prompt at HEAD, and the
    export in the file's format."""
    with Tape.open(tape_dir) as t:
        s = t.session(session)
        return {"branches": dict(s.refs().branches), "head": s.head, "context": s.context(),
                "export": [json.loads(x) for x in export_ref(t, session, fmt)]}


_fresh: dict = {}


def _fresh_import(tmp_path_factory, fmt, src):
    """(branches, head) of one import of the whole file: the oracle."""
    if src not in _fresh:
        d = str(tmp_path_factory.mktemp("fresh") / "tape")
        Tape.init(d).close()
        _import(d, fmt, src)
        _fresh[src] = _state(d, fmt)
    return _fresh[src]


def _grow(tmp_path, fmt, src, cuts):
    """Import the file cut at each byte offset in turn (a copy written at that size, as an
    agent's file is at that instant), then whole; return the session's state and tape."""
    d = str(tmp_path / "tape")
    if os.path.exists(d):
        shutil.rmtree(d)
    Tape.init(d).close()
    data = src.read_bytes()
    path = tmp_path / src.name
    for cut in cuts:
        path.write_bytes(data[:cut])
        if data[:cut].strip():
            try:
                _import(d, fmt, path)
            except Exception as e:  # a prefix with no record yet is refused, and changes nothing
                assert "no " in str(e) and "record found" in str(e), e
    path.write_bytes(data)
    _import(d, fmt, path)
    return _state(d, fmt), d


def _line_ends(src):
    data = src.read_bytes()
    return [i + 1 for i, b in enumerate(data) if b == 0x0A]


def _timed(v) -> bool:
    return isinstance(v, dict) and bool(v.get("timestamp"))


def _check(tmp_path, tmp_path_factory, fmt, src, cuts):
    got, d = _grow(tmp_path, fmt, src, cuts)
    fresh = _fresh_import(tmp_path_factory, fmt, src)
    records = [json.loads(x) for x in open(src, encoding="utf-8")]
    assert list(got["branches"]) == ["main"], f"cuts {cuts}: branches {sorted(got['branches'])}"
    assert got["context"] == fresh["context"], f"cuts {cuts}"
    assert got["export"] == records, f"cuts {cuts}"  # each record once, in order
    # the same entries, unless the first import read the file before any record with a time
    # (Claude Code's summary lines): those took the file's time, and keep it as it grows
    data = src.read_bytes()
    first = next((c for c in cuts if data[:c].count(b"\n")), None)
    lines = data[:first].split(b"\n")[:-1] if first else []
    if first is None or any(_timed(json.loads(x)) for x in lines):
        assert got["head"] == fresh["head"] and got["branches"] == fresh["branches"], f"cuts {cuts}"
    return d


def test_a_codex_rollout_read_between_an_agent_event_and_its_echo_grows_on_main(tmp_path, tmp_path_factory):
    ends = _line_ends(CODEX)
    # line 16 is an `event_msg` agent_message, line 17 its `response_item`
    assert json.loads(CODEX.read_bytes()[ends[14]:ends[15]])["payload"]["type"] == "agent_message"
    _check(tmp_path, tmp_path_factory, "codex", CODEX, [ends[15], ends[15] + 40, ends[24]])


def test_a_claude_code_file_read_while_it_held_only_its_summaries_grows_on_main(tmp_path, tmp_path_factory):
    ends = _line_ends(CLAUDE)
    assert all(json.loads(x)["type"] == "summary" for x in CLAUDE.read_text().splitlines()[:11])
    _check(tmp_path, tmp_path_factory, "claude-code", CLAUDE, [ends[10], ends[20]])


@settings(max_examples=200 if SLOW else 12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_cuts_of_real_transcripts_end_as_one_import(tmp_path, tmp_path_factory, data):
    fmt = data.draw(st.sampled_from(sorted(FILES)), label="format")
    src = data.draw(st.sampled_from(FILES[fmt]), label="file")
    size = src.stat().st_size
    ends = _line_ends(src)
    # at line ends (a reader between two writes) and anywhere (a line half written)
    cut = st.one_of(st.sampled_from(ends), st.integers(1, size - 1))
    cuts = sorted(set(data.draw(st.lists(cut, min_size=1, max_size=4), label="cuts")))
    _check(tmp_path, tmp_path_factory, fmt, src, cuts)
