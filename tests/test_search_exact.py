"""search: exact matches first, and a quoted phrase keeps identifier punctuation
(issue 24 item 7), on a real Claude Code transcript and on small made-up ones."""

import json
import os

import pytest

from ctape import Tape
from ctape.ops.searchtext import payload_text

from conftest import run_cli

CLAUDE = os.path.join("/work/shared/fixtures/transcripts/claude-code", "daaain__claude-code-log__37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl")


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The real transcript where `combined-transcript-link` (a CSS class) sits beside
    `combined_transcript_link` (a template variable) and "combined transcript link" (prose)."""
    d = tmp_path_factory.mktemp("claude")
    env = {"CTAPE_CACHE_DIR": str(d / "cache")}
    run_cli("--dir", d / "tape", "init", env=env, check=True)
    run_cli("--dir", d / "tape", "import", "claude-code", CLAUDE, "-s", "cc", env=env, check=True)
    with Tape.open(d / "tape", cache_dir=d / "cache") as t:
        texts = _texts(t)
    return d, env, texts


def _texts(t):
    """Every entry's searchable text, by hash (walking every branch of the session)."""
    out = {}
    s = t.session("cc")
    for tip in {b["hash"] for b in s.branches()}:
        h = tip
        while h is not None and h not in out:
            e = t.read_entry(h)
            out[h] = payload_text(e.payload)
            h = e.parent
    return out


def _search(imported, *args):
    d, env, _ = imported
    p = run_cli("--dir", d / "tape", "search", *args, "-n", "0", "--json", env=env, check=True)
    return [json.loads(line) for line in p.stdout.decode().splitlines()]


def test_a_quoted_identifier_matches_only_where_it_is_written(imported):
    texts = imported[2]
    literal = {h for h, text in texts.items() if "combined-transcript-link" in text.lower()}
    variants = {h for h, text in texts.items() if "combined_transcript_link" in text and h not in literal}
    assert len(literal) >= 10 and len(variants) >= 20  # the transcript has both, many times
    hits = _search(imported, '"combined-transcript-link"')
    assert {r["hash"] for r in hits} == literal  # every one, and none of the variants
    assert all(r["match"] == "exact" for r in hits)
    assert all("combined-transcript-link" in r["snippet"] for r in hits)  # the snippet shows it


def test_exact_matches_rank_first(imported):
    texts = imported[2]
    hits = _search(imported, "combined-transcript-link")  # unquoted: the words, punctuation aside
    flags = ["combined-transcript-link" in texts[r["hash"]] for r in hits]
    assert True in flags and False in flags
    assert flags == sorted(flags, reverse=True), "an entry without the literal string ranks above one with it"
    assert [r["match"] for r in hits] == ["exact"] * flags.count(True) + ["words"] * flags.count(False)
    under = _search(imported, '"combined_transcript_link"')
    assert under and all("combined_transcript_link" in texts[r["hash"]] for r in under)
    assert not {r["hash"] for r in under} & {h for h, t in texts.items() if "combined_transcript_link" not in t}


def test_case_then_accents_then_words(tape):
    s = tape.session("s")
    words = s.append("user", {"content": "parser_failed in the log"}).hash
    upper = s.append("user", {"content": "PARSER FAILED twice"}).hash
    exact = s.append("user", {"content": "the Parser failed on café"}).hash
    got = tape.search('"Parser failed"')
    assert [h.hash for h in got] == [exact, upper] and [h.match for h in got] == ["exact", "literal"]
    got = tape.search("Parser failed")  # two words, each found as typed or in another case
    assert got[0].hash == exact and {h.hash for h in got[1:]} == {upper, words}
    assert [h.match for h in got] == ["exact", "literal", "literal"]
    assert [h.hash for h in tape.search('"failed on cafe"')] == [exact]  # accents do not matter
    assert tape.search('"failed on cafe"')[0].match == "literal"


def test_a_quoted_phrase_keeps_dots_slashes_hyphens_and_underscores(tape):
    s = tape.session("s")
    path = s.append("tool_call", {"name": "bash", "arguments": {"cmd": "sh ./scripts/build.sh --force"}, "call_id": "c"}).hash
    s.append("user", {"content": "the scripts build sh step, force it"})
    s.append("user", {"content": "scripts_build_sh"})
    assert [h.hash for h in tape.search('"./scripts/build.sh"')] == [path]
    assert [h.hash for h in tape.search('"--force"')] == [path]
    assert len(tape.search("scripts build sh")) == 3  # unquoted: the words, as before
    assert [h.hash for h in tape.search("scripts/build.sh")][0] == path  # the literal one first


def test_a_quoted_phrase_past_the_kept_head_of_a_long_text(tape):
    s = tape.session("s")
    filler = "line of filler text\n" * 2000
    deep = s.append("tool_result", {"call_id": "a", "output": filler + "error in net-link-state here"}).hash
    s.append("tool_result", {"call_id": "b", "output": filler + "error in net_link_state here"})
    got = tape.search('"net-link-state"')
    assert [h.hash for h in got] == [deep] and "net-link-state" in got[0].snippet


@pytest.mark.parametrize(
    "query, text, grade",
    [
        ('"a-b"', "x a-b y", 0),
        ('"a-b"', "x A-B y", 1),
        ('"a-b"', "x a_b y", None),
        ('"a-b"', "x a b y", None),
        ('"a b"', "x a, b y", 0),  # other punctuation between the words of a phrase
        ('"a b"', "x a-b y", None),  # but identifier punctuation is part of a word
        ("a-b", "x a_b y", 2),
        ('"foo(bar)"', "foo(bar)", 0),
        ('"naïve"', "NAIVE", 1),
    ],
)
def test_grades(query, text, grade):
    from ctape.ops.searchtext import Matcher, parse_terms

    assert Matcher(parse_terms(query)).grade(text) == grade


def test_an_exact_match_past_the_kept_head_ranks_first_and_says_exact(tape):
    """A black-box audit: a text was graded by its kept head (4 KB), so an exact match
    further in (a long tool output: where `make_release` or `./scripts/build.sh` is
    searched for) was said "words" and ranked after the other-case and other-punctuation
    matches of short texts; a quoted phrase there ranked after everything, so `-n 1`
    gave the other-case hit. Such texts are now read whole to be graded."""
    a = tape.session("a").append("user", {"content": "filler " * 1000 + "run make_release now"}).hash
    b = tape.session("b").append("user", {"content": "run make release now"}).hash
    c = tape.session("c").append("user", {"content": "run MAKE_RELEASE now"}).hash
    got = tape.search("make_release")
    assert [(h.hash, h.match) for h in got] == [(a, "exact"), (c, "literal"), (b, "words")]
    assert "make_release" in got[0].snippet
    d = tape.session("d").append("tool_result", {"call_id": "x", "output": "filler " * 100000 + "run make_release now"}).hash
    got = tape.search('"run make_release now"', limit=2)
    assert {h.hash for h in got} == {a, d} and all(h.match == "exact" for h in got)
