"""Query translation: user text becomes FTS5 string literals, never syntax."""
from __future__ import annotations

import os

import pytest

from sessiondb import InvalidQuery
from sessiondb.sqlitefile.holders import LockLine, other_holders, parse_lock_line
from sessiondb.search.search_query import plan, split_terms


@pytest.mark.parametrize("text, kind, match", [
    ("hello world", "words", '"hello" AND "world"'),
    ('"exact phrase" extra', "words", '"exact phrase" AND "extra"'),
    ("pref*", "words", '"pref"*'),
    ("NEAR(a b)", "words", '"NEAR(a" AND "b)"'),
    ("col:value", "words", '"col:value"'),
    ('say "unbalanced rest', "words", '"say" AND "unbalanced rest"'),
    ("- foo", "words", '"foo"'),
    ("a", "scan", None),
    ("(", "scan", None),
    ("東京", "scan", None),
    # substrings: the terms holding the longest word run are found at run time
    ("東京タワー", "substring", None),
    ("東京 タワー", "substring", None),
    (":::", "substring", None),
])
def test_plans(text, kind, match):
    p = plan(text)
    assert (p.kind, p.match) == (kind, match)


def test_substring_short_terms_become_like_filters():
    p = plan("東京 タワー 100%")
    assert p.likes == ["%東京%"] and p.match is None
    assert p.verify == ["タワー", "100%"]  # every term of 3+ characters is verified in the text
    assert plan("a_b").kind == "words"
    assert plan("_%").likes == ["%\\_\\%%"]


def test_quotes_inside_terms_cannot_escape():
    assert split_terms('a"b c"d') == split_terms('a "b c" d')
    for t in split_terms('x"y'):
        assert '"' not in t.text


def test_raw_passes_through():
    assert plan("a OR b", raw=True).match == "a OR b"
    with pytest.raises(InvalidQuery):
        plan("\udc80", raw=True)


def test_holders_parse_and_self_exclusion(tmp_path):
    assert parse_lock_line("1: POSIX  ADVISORY  READ 7449 fe:00:2188086 128 128") == \
        LockLine(7449, 2188086, "READ", 128, 128)
    assert parse_lock_line("2: POSIX  ADVISORY  WRITE 7449 fe:00:2188086 0 EOF").end > 1 << 40
    assert parse_lock_line("1: -> POSIX  ADVISORY  WRITE 7450 fe:00:2188086 128 128") is None
    assert parse_lock_line("garbage") is None
    from sessiondb import SessionDB
    with SessionDB(tmp_path / "x.db"):
        assert other_holders(tmp_path / "x.db") == []   # our own locks never count
    assert os.getpid() not in (other_holders(tmp_path / "x.db") or [])


def test_unquoted_text_splits_as_the_quote_aware_scanner_does():
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40)
           | st.text(alphabet=" \t\n\u3000\u00a0\u2028*ab東", max_size=20))
    def check(text):
        text = text.replace('"', "")
        # a trailing lone quote opens an empty phrase: no term, but the scanner runs
        assert split_terms(text) == split_terms(text + ' "')

    check()


def test_substring_alternative_of_word_plans():
    alt = plan("onnectio").alt
    assert alt.kind == "substring" and alt.verify == ["onnectio"] and alt.match is None
    assert plan("ab cd").alt is None              # no term of 3+ characters: no substring plan
    assert plan("東京タワー").alt is None            # not a words plan


def test_long_terms_are_filtered_by_a_bounded_spread_of_their_trigrams():
    from sessiondb.index.search_index import MAX_TRIGRAMS, trigrams
    term = "".join(chr(0x4E00 + i) for i in range(60))
    grams = trigrams(term)
    assert len(grams) == MAX_TRIGRAMS and grams[0] == term[:3] and grams[-1] == term[-3:]
    assert trigrams("aaaaaa") == ["aaa"]  # repeats count once
