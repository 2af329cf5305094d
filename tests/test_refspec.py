"""The REF parser (SPEC section 4): generated refs parse back to what built them."""

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctape.errors import InvalidInput
from ctape.model.refspec import RefSpec, parse_ref

NAME_CHARS = string.ascii_letters + string.digits + "._-"
names = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from(string.ascii_letters + string.digits),
    st.text(alphabet=NAME_CHARS, max_size=127),
).filter(lambda n: not n.endswith(".lock"))
hex_prefixes = st.text(alphabet="0123456789abcdef", min_size=4, max_size=64)
bases = st.one_of(
    names,
    st.builds(lambda s, b: f"{s}/{b}", names, names),
    hex_prefixes,
)
# one ancestry step: (text, how many parents it walks)
steps = st.one_of(
    st.just(("^", 1)),
    st.just(("~", 1)),
    st.integers(min_value=0, max_value=10**6).map(lambda n: (f"~{n}", n)),
)


@given(bases, st.one_of(st.none(), st.integers(min_value=0, max_value=10**6)), st.lists(steps, max_size=6))
@settings(max_examples=400)
def test_generated_refs_parse_back(base, reflog, suffix):
    text = base + ("" if reflog is None else f"@{{{reflog}}}") + "".join(s for s, _ in suffix)
    assert parse_ref(text) == RefSpec(base=base, reflog=reflog, back=sum(n for _, n in suffix))


@pytest.mark.parametrize(
    "text,expected",
    [
        ("chat", RefSpec("chat", None, 0)),
        ("chat~", RefSpec("chat", None, 1)),
        ("chat~0", RefSpec("chat", None, 0)),
        ("chat^^", RefSpec("chat", None, 2)),
        ("chat/alt~3^", RefSpec("chat/alt", None, 4)),
        ("chat@{0}", RefSpec("chat", 0, 0)),
        ("chat@{12}~2", RefSpec("chat", 12, 2)),
        ("abcd~10", RefSpec("abcd", None, 10)),
        ("a" * 64 + "^", RefSpec("a" * 64, None, 1)),
    ],
)
def test_known_refs(text, expected):
    assert parse_ref(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "~1", "^", "@{1}", "chat@{}", "chat@{x}", "chat@{1", "chat@{-1}", "chat~x", "chat~1@{2}", "chat@{1}}", "chat^x", "chat~1 "],
)
def test_malformed_refs_are_invalid_input(text):
    with pytest.raises(InvalidInput):
        parse_ref(text)


@given(st.text(max_size=40))
@settings(max_examples=500)
def test_any_text_parses_or_is_invalid_input(text):
    """Never another exception: the CLI maps InvalidInput to exit 2 and anything else to an internal error."""
    try:
        spec = parse_ref(text)
    except InvalidInput:
        return
    assert spec.base and spec.back >= 0 and (spec.reflog is None or spec.reflog >= 0)


def test_superscript_digit_in_reflog_is_invalid_input():
    with pytest.raises(InvalidInput):
        parse_ref("chat@{²}")


@pytest.mark.parametrize("text", ["chat~٣", "chat@{٣}", "chat~３"])
def test_non_ascii_digits_are_refused(text):
    with pytest.raises(InvalidInput):
        parse_ref(text)
