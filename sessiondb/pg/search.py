"""Searching messages on PostgreSQL: the SQLite search contract over tsvector and pg_trgm.

The same query language (sessiondb/search/search_query.py: words, "quoted
phrases", a trailing ``*`` for prefixes, never syntax), the same filters
(`search.Filters`), bounds and result type (`search.SearchHit`,
`search.SearchResults`); docs/search.md, "PostgreSQL", lists where the
answers differ and why.

- words: each term becomes ``phraseto_tsquery`` of its text (which never
  fails on any input: punctuation is just a separator), prefix terms get
  ``:*`` on their last lexeme (``hermes_prefix_tsquery``), terms are AND-ed
  with ``&&``. The expression is part of the one statement, run unprepared
  so the planner folds it to a constant (see `TsQuery`).
- substring (CJK text, no word characters, or words the word index does
  not hold at all): every term is an ``ILIKE`` on the searchable text,
  served by the ``pg_trgm`` GIN index for terms of 3+ characters.
- scan: terms all shorter than a trigram: ILIKE over the ``SCAN_WINDOW``
  most recent rows that pass the filters, within ``SCAN_BUDGET_S``
  (``statement_timeout``); past it the result is empty and partial.
- ranking: ``ts_rank`` among the ``RANK_WINDOW`` most recent matches;
  ``score`` is ``-ts_rank`` so that, as with bm25, lower is better.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from ..base import InvalidQuery
from ..search import (Filters, MARK_CLOSE, MARK_OPEN, Plan, RANK_WINDOW, SCAN_BUDGET_S,
                      SCAN_WINDOW, SNIPPET_TOKENS, SearchHit, SearchResults, check_args, clean,
                      plan as make_plan, scan_snippet, split_terms)
from .search_schema import CONFIG, TSV_COLUMN, text_expr

#: ts_headline reads at most this many characters of a message: its cost
#: grows with the text, and a snippet is one fragment near the first hits.
HEADLINE_CHARS = 20_000
HEADLINE_OPTIONS = (f"StartSel={MARK_OPEN}, StopSel={MARK_CLOSE}, MaxWords={SNIPPET_TOKENS},"
                    " MinWords=6, ShortWord=0, MaxFragments=1, FragmentDelimiter=…")
_COLS = "m.id, m.session_id, m.role, m.timestamp, m.state, s.title"
_FROM = "FROM messages AS m JOIN sessions AS s ON s.id = m.session_id"
_ROW = "m.id, m.session_id, m.role, m.timestamp, m.state"


def _rows_from(filters: Filters) -> str:
    """The messages alone unless a filter names a session column: the word
    paths join sessions (for the title) on the page only, not on every match."""
    return _FROM if filters.source is not None else "FROM messages AS m"


def _where(filters: Filters) -> tuple[str, list[Any]]:
    """The shared filters in psycopg's placeholder style (their SQL has no
    literal '?' or '%')."""
    where, args = filters.sql()
    assert where.startswith("1")  # SQLite's always-true head; PostgreSQL wants a boolean
    return "TRUE" + where[1:].replace("?", "%s"), args


@dataclass(frozen=True)
class TsQuery:
    """The tsquery of a query as an SQL expression of IMMUTABLE functions
    and its arguments. Statements run unprepared (custom plans), so the
    planner folds it to a constant: it then knows how common the terms are
    (walk the newest rows for a common word, the GIN index for a rare one)
    and computes it once, not per row. No round trip of its own."""

    expr: str
    args: tuple[str, ...]


def ts_query(query: str, *, raw: bool = False) -> TsQuery:
    """The words plan's terms (or raw tsquery text) as a `TsQuery`."""
    if raw:
        return TsQuery(f"to_tsquery('{CONFIG}', %s)", (query,))
    terms = [t for t in split_terms(clean(query)) if t.has_word_chars]
    parts = [f"hermes_prefix_tsquery(%s)" if t.prefix else f"phraseto_tsquery('{CONFIG}', %s)"
             for t in terms]
    return TsQuery("(" + " && ".join(parts) + ")", tuple(t.text for t in terms))


def tsquery(conn: psycopg.Connection, query: str, *, raw: bool = False) -> str:
    """The tsquery text for ``query`` (for benchmarks and diagnostics)."""
    q = ts_query(query, raw=raw)
    row = conn.execute(f"SELECT {q.expr}::text", q.args).fetchone()
    return row[0] if row else ""


def _hits(rows: list[tuple], via: str, terms: list[str]) -> list[SearchHit]:
    """Rows of (id, session_id, role, timestamp, state, title, score, snippet
    or text); a row without a marked snippet gets a scan snippet of its text
    (ts_headline saw only HEADLINE_CHARS, or the row came from a substring plan)."""
    out = []
    for mid, sid, role, ts, state, title, score, snip, text in rows:
        if snip is None or MARK_OPEN not in snip:
            snip = scan_snippet(text or "", terms)
        out.append(SearchHit._of(sid, mid, role, ts, snip, title, state, via, score))
    return out


def _page(order: str, limit: int, offset: int) -> str:
    key = "m.id ASC" if order == "oldest" else "m.id DESC"
    return f" ORDER BY {key} LIMIT {int(limit)} OFFSET {int(offset)}"


def _with_headlines(page_sql: str, q: TsQuery, order: str) -> str:
    """The page (at most ``limit`` rows) joined back to its messages for
    ts_headline, in the same statement: snippets for the page rows only.
    The text goes along only where the headline has no mark (rare).
    ``OFFSET 0`` keeps the planner from inlining the lateral subquery, which
    would compute ts_headline twice a row (once for ``snip``, once in the
    CASE): measured at 1M messages, half of a rare word's page time."""
    key = "p.score, p.id DESC" if order == "rank" else (
        "p.id ASC" if order == "oldest" else "p.id DESC")
    head = (f"ts_headline('{CONFIG}', left({text_expr('t')}, {HEADLINE_CHARS}), {q.expr},"
            f" '{HEADLINE_OPTIONS}')")
    return (f"SELECT p.id, p.session_id, p.role, p.timestamp, p.state, u.title, p.score,"
            f" h.snip, CASE WHEN strpos(h.snip, '{MARK_OPEN}') = 0 THEN {text_expr('t')} END"
            f" FROM ({page_sql}) AS p JOIN messages AS t ON t.id = p.id"
            f" JOIN sessions AS u ON u.id = p.session_id"
            f" CROSS JOIN LATERAL (SELECT {head} AS snip OFFSET 0) AS h ORDER BY {key}")


def _words(conn: psycopg.Connection, q: TsQuery, filters: Filters, order: str, limit: int,
           offset: int) -> list[tuple]:
    where, args = _where(filters)
    match = f"m.{TSV_COLUMN} @@ {q.expr} AND {where}"
    rows = _rows_from(filters)
    if order != "rank":
        page = f"SELECT {_ROW}, NULL::float8 AS score {rows} WHERE {match}"
        page += _page(order, limit, offset)
        params: tuple = (*q.args, *args, *q.args)  # placeholders in text order
    else:  # the window: the RANK_WINDOW most recent matches, scored, best first
        # ts_rank for the window's rows only, after the window is cut
        page = (f"SELECT w.id, w.session_id, w.role, w.timestamp, w.state,"
                f" -ts_rank(w.tsv, {q.expr}) AS score FROM (SELECT {_ROW}, m.{TSV_COLUMN} AS tsv"
                f" {rows} WHERE {match} ORDER BY m.id DESC LIMIT {RANK_WINDOW}) AS w"
                f" ORDER BY score, id DESC LIMIT {int(limit)} OFFSET {int(offset)}")
        params = (*q.args, *q.args, *args, *q.args)
    return conn.execute(_with_headlines(page, q, order), params, prepare=False).fetchall()


def _any_word_match(conn: psycopg.Connection, q: TsQuery) -> bool:
    """Whether any message at all matches (no filters), as on SQLite: a
    query whose words the index holds nowhere runs as substrings."""
    return conn.execute(f"SELECT 1 FROM messages WHERE {TSV_COLUMN} @@ {q.expr} LIMIT 1",
                        q.args, prepare=False).fetchone() is not None


def _substring(conn: psycopg.Connection, p: Plan, filters: Filters, order: str, limit: int,
               offset: int) -> list[tuple]:
    """Every term an ILIKE (the trigram index serves those of 3+ characters).
    There is no relevance score: ``rank`` is newest first."""
    where, args = _where(filters)
    likes = "".join(f" AND {text_expr('m')} ILIKE %s" for _ in p.terms)
    patterns = [_like(t) for t in p.terms]
    return conn.execute(f"SELECT {_COLS}, NULL::float8, NULL::text, {text_expr('m')} {_FROM}"
                        f" WHERE {where}{likes}{_page(order, limit, offset)}",
                        (*args, *patterns), prepare=False).fetchall()


def _like(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _scan(conn: psycopg.Connection, p: Plan, filters: Filters, order: str, limit: int,
          offset: int) -> SearchResults:
    """ILIKE over the SCAN_WINDOW most recent rows that pass the filters;
    a scan past SCAN_BUDGET_S is cancelled by the server and comes back
    empty and partial."""
    where, args = _where(filters)
    likes = " AND ".join("w.body ILIKE %s" for _ in p.terms) or "true"
    inner = (f"SELECT {_COLS}, {text_expr('m')} AS body {_FROM} WHERE {where}"
             f" ORDER BY m.id DESC LIMIT {SCAN_WINDOW}")
    key = "ASC" if order == "oldest" else "DESC"
    sql = (f"SELECT w.id, w.session_id, w.role, w.timestamp, w.state, w.title, NULL::float8,"
           f" NULL::text, w.body FROM ({inner}) AS w WHERE {likes} ORDER BY w.id {key}"
           f" LIMIT {int(limit)} OFFSET {int(offset)}")
    try:
        with conn.transaction():
            conn.execute(f"SET LOCAL statement_timeout = {int(SCAN_BUDGET_S * 1000)}")
            rows = conn.execute(sql, (*args, *[_like(t) for t in p.terms])).fetchall()
    except psycopg.errors.QueryCanceled:
        return SearchResults.of([], f"the scan stopped after {SCAN_BUDGET_S:g}s; nothing was "
                                    "found in time (narrow the search with filters)")
    return SearchResults.of(_hits(rows, "scan", p.terms))


def _run_words(conn: psycopg.Connection, q: TsQuery, p: Plan, filters: Filters, order: str,
               limit: int, offset: int) -> list[SearchHit] | None:
    """The word index's page; None when it holds no match at all (then
    the substring plan answers, as on SQLite)."""
    if p.kind != "raw":
        # In storage order the page may walk the primary key newest first,
        # filtering by @@ (right for a common word); for words the index
        # holds nowhere that walk reads every row for nothing (2.7 s at 1M
        # messages, measured), so the cheap unfiltered probe goes first there.
        if order != "rank":
            if not _any_word_match(conn, q):
                return None
            return _hits(_words(conn, q, filters, order, limit, offset), "fts", p.terms)
        rows = _words(conn, q, filters, order, limit, offset)
        return _hits(rows, "fts", p.terms) if rows or _any_word_match(conn, q) else None
    try:
        with conn.transaction():  # a savepoint inside a caller's transaction
            return _hits(_words(conn, q, filters, order, limit, offset), "fts", p.terms)
    except (psycopg.errors.SyntaxError, psycopg.errors.DataException) as e:
        raise InvalidQuery(f"not a valid tsquery: {e.diag.message_primary}") from None
    return None


def search(conn: psycopg.Connection, query: object, *, filters: Filters, limit: int = 20,
           offset: int = 0, order: str = "rank", raw: bool = False) -> SearchResults:
    """One page of hits for ``query``; raises InvalidQuery / InvalidInput."""
    check_args(filters, limit, offset, order)
    p = make_plan(query, raw=raw)
    assert isinstance(query, str)  # make_plan refused anything else
    if p.kind == "scan":
        return _scan(conn, p, filters, order, limit, offset)
    if p.kind in ("words", "raw"):
        hits = _run_words(conn, ts_query(query, raw=raw), p, filters, order, limit, offset)
        if hits is not None:
            return SearchResults.of(hits)
        alt = p.alt
        if alt is None:
            return SearchResults.of([])
        p = alt
    rows = _substring(conn, p, filters, order, limit, offset)
    return SearchResults.of(_hits(rows, "trigram", p.terms))
