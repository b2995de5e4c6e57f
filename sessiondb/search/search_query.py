"""Turning user search text into a safe query plan.

User text is words and "quoted phrases"; nothing in it is ever FTS5
syntax. Each word or phrase becomes an FTS5 string literal (quotes
doubled), so ``(``, ``*``, ``NEAR``, ``:``, ``-`` and ``.`` are just
characters the tokenizer treats as it treats them in messages. A trailing
``*`` on a bare word asks for a prefix match. ``raw=True`` hands the text
to FTS5 unchanged, for experts.

The plan picks one of:

- ``words``: the word index (``messages_fts``), terms AND-ed; when the
  index holds no match at all, the same terms run as a substring plan
  (so ``onnectio`` finds "connection");
- ``substring``: for CJK text and for queries with no word characters:
  the query's longest run of word characters picks the word index's terms
  holding it (the term table, ``messages_terms``), the word index gives
  the rows holding any of them, and each term of 3+ characters is then
  verified in the candidate's text (``verify``), shorter terms are checked
  with LIKE (sessiondb/search/hits.py; a run held by too many terms, or no
  run of 3 word characters, goes to the bounded scan with the same checks);
- ``scan``: a bounded LIKE scan over the most recent rows, for queries
  whose every term is shorter than a trigram (e.g. ``a``, ``中文``);
- ``raw``: the caller's FTS5 expression on the word index.
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

from ..base import InvalidQuery

MAX_QUERY_CHARS = 2_000
MAX_TERMS = 32


@dataclass(frozen=True)
class Term:
    """One word or quoted phrase of the user's query."""

    text: str
    phrase: bool = False
    prefix: bool = False

    @property
    def has_word_chars(self) -> bool:
        return any(ch.isalnum() for ch in self.text)


@dataclass(frozen=True)
class Plan:
    """How a query runs: which index, with what expression and LIKE patterns."""

    kind: str                       # words | substring | scan | raw
    match: str | None = None        # FTS5 expression for the chosen index (substring: set at run)
    likes: list[str] = field(default_factory=list)   # LIKE patterns checked on candidates
    verify: list[str] = field(default_factory=list)  # substrings checked on candidates
    terms: list[str] = field(default_factory=list)   # plain terms, for scan snippets

    @property
    def alt(self) -> "Plan | None":
        """Words only: the substring plan used when the word index holds no
        match (derived on demand: most queries never need it)."""
        if self.kind != "words":
            return None
        alt = _substring_plan(self.terms)
        return alt if alt.kind == "substring" else None


def _is_cjk(ch: str) -> bool:
    name = unicodedata.name(ch, "")
    return name.startswith(("CJK ", "HIRAGANA", "KATAKANA", "HANGUL", "HALFWIDTH KATAKANA",
                            "IDEOGRAPHIC"))


def has_cjk(text: str) -> bool:
    return any(ord(ch) >= 0x2E80 and _is_cjk(ch) for ch in text)


def fts_string(text: str) -> str:
    """An FTS5 string literal: the tokenizer sees only characters."""
    return '"' + text.replace('"', '""') + '"'


def like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def clean(text: object) -> str:
    """Validate raw input; NUL counts as a separator; lone surrogates refused."""
    if not isinstance(text, str):
        raise InvalidQuery(f"a query must be a string, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidQuery(f"the query contains a lone surrogate at offset {e.start}; "
                           "it cannot match stored text") from None
    text = text.replace("\x00", " ").strip()
    if not text:
        raise InvalidQuery("the query is empty")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidQuery(f"the query is {len(text)} characters long; "
                           f"the limit is {MAX_QUERY_CHARS}")
    return text


def split_terms(text: str) -> list[Term]:
    """Words and quoted phrases; an unbalanced quote runs to the end."""
    if '"' not in text:   # the common case, the same words as the loop below
        return [_word(w) for w in text.split()]
    terms: list[Term] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch == '"':
            end = text.find('"', i + 1)
            end = n if end < 0 else end
            body = text[i + 1:end].strip()
            if body:
                terms.append(Term(body, phrase=True))
            i = end + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] != '"':
                j += 1
            terms.append(_word(text[i:j]))
            i = j
    return terms


def _word(word: str) -> Term:
    prefix = len(word) > 1 and word.endswith("*")
    return Term(word.rstrip("*") if prefix else word, prefix=prefix)


def _words_plan(terms: list[Term]) -> Plan:
    words = [t for t in terms if t.has_word_chars]
    parts = [fts_string(t.text) + ("*" if t.prefix else "") for t in words]
    return Plan("words", match=" AND ".join(parts), terms=[t.text for t in words])


def _substring_plan(pieces: list[str]) -> Plan:
    long = [p for p in pieces if len(p) >= 3]
    likes = [like_pattern(p) for p in pieces]
    if not long:
        return Plan("scan", likes=likes, terms=pieces)
    short = [like_pattern(p) for p in pieces if len(p) < 3]
    return Plan("substring", likes=short, verify=long, terms=pieces)


def plan(query: object, *, raw: bool = False) -> Plan:
    """The plan for ``query``; raises InvalidQuery with a reason."""
    text = clean(query)
    if raw:
        return Plan("raw", match=text)
    terms = split_terms(text)
    if len(terms) > MAX_TERMS:
        raise InvalidQuery(f"the query has {len(terms)} terms; the limit is {MAX_TERMS}")
    if not terms:
        raise InvalidQuery("the query has no words to search for")
    if len(text) <= 2:
        return _substring_plan([t.text for t in terms])
    if has_cjk(text) or not any(t.has_word_chars for t in terms):
        return _substring_plan([t.text for t in terms])
    return _words_plan(terms)
