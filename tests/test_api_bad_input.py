"""Bad input to the Python API: a ctape error of one short line, and the tape unchanged.

Found by an audit (2026-12-05) that fed the documented calls wrong types and sizes:
bare TypeError / UnicodeEncodeError from inside, messages that quoted a 3 MB input whole,
an int of more than 4,300 digits that made the message itself raise ValueError, "empty
ref" for a ref that was a number, and text written after a stream had ended, taken and
dropped without a word.
"""

import os

import pytest

import ctape
from ctape.errors import CtapeError

from conftest import snapshot

BIG = "x" * 3_000_000
HUGE = 10**5000


@pytest.fixture
def s(tmp_path):
    tape = ctape.Tape.init(tmp_path / "t")
    session = tape.session("c")
    session.append("user", {"content": "hello"})
    yield session
    tape.close()


CASES = {
    "context(policies=None)": lambda s: s.context(policies=None),
    "context(policies=5)": lambda s: s.context(policies=5),
    "search(kinds=None)": lambda s: s.tape.search("hello", kinds=None),
    "search(lone surrogate)": lambda s: s.tape.search("hello x\udcffy"),
    "session(HUGE)": lambda s: s.tape.session(HUGE),
    "checkout(HUGE)": lambda s: s.checkout(HUGE),
    "compact(expire=HUGE)": lambda s: s.tape.compact(expire=HUGE),
    "log(since=HUGE)": lambda s: list(s.log(since=HUGE)),
    "context(format=HUGE)": lambda s: s.context(format=HUGE),
    "stream(flush_interval=HUGE)": lambda s: s.stream(flush_interval=HUGE),
    "append(HUGE kind)": lambda s: s.append(HUGE, {"content": "x"}),
    "session([BIG])": lambda s: s.tape.session([BIG]),
    "session(bytes BIG)": lambda s: s.tape.session(BIG.encode()),
    "branch([BIG])": lambda s: s.branch([BIG]),
    "append(time=[BIG])": lambda s: s.append("user", {"content": "x"}, time=[BIG]),
    "log(limit=BIG)": lambda s: list(s.log(limit=BIG)),
    "context(format=BIG)": lambda s: s.context(format=BIG),
    "context(max_tokens=BIG)": lambda s: s.context(max_tokens=BIG),
    "context(policies=[BIG])": lambda s: s.context(policies=[BIG]),
    "Tape.open(BIG path)": lambda s: ctape.Tape.open("/tmp/" + BIG),
    "get(5)": lambda s: s.tape.get(5),
    "get(bytes)": lambda s: s.tape.get(b"c"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_short_ctape_error_and_changes_nothing(s, case):
    before = snapshot(s.tape.path)
    with pytest.raises(CtapeError) as err:
        CASES[case](s)
    text = str(err.value)
    assert len(text) < 400 and "\n" not in text, (case, text[:200])
    if "get(" in case:
        assert "empty ref" not in text and "a REF is a string" in text
    assert snapshot(s.tape.path) == before


def test_one_policy_as_a_string_is_that_policy(s):
    """`policies="last-turn"` was read letter by letter ("unknown policy 'l'"), where
    `log(kinds="user")` takes one kind."""
    assert s.context(policies="last-turn") == s.context(policies=["last-turn"])


def test_a_path_with_undecodable_bytes_is_a_tape_like_any(tmp_path):
    """A folder name that is not UTF-8 comes to Python with surrogates (os.fsdecode):
    init raised UnicodeEncodeError making the cache key, after it had made the folder."""
    path = os.path.join(os.fsdecode(bytes(tmp_path)), "t\udcff")
    tape = ctape.Tape.init(path)
    tape.session("c").append("user", {"content": "hi"})
    tape.close()
    tape = ctape.Tape.open(path)
    assert [e.payload["content"] for e in tape.session("c").log()] == ["hi"]
    tape.close()


def test_text_written_after_a_stream_ended_is_refused(s):
    with s.stream() as w:
        w.write("answer")
    with pytest.raises(CtapeError, match="this stream has ended"):
        w.write(" late")
    assert s.head.payload["content"] == "answer"


def test_no_tape_at_the_root_of_the_file_system():
    """`Tape.init("/")` as root made / a tape: every path of the machine was then inside a
    tape, and every other init refused (found by an audit). The check is tested on its own:
    the code before would have written into / itself."""
    from ctape.errors import InvalidInput
    from ctape.store.store import refuse_inside_tape

    for root in ("/", "//", "/."):
        with pytest.raises(InvalidInput, match="root of the file system"):
            refuse_inside_tape(root)
