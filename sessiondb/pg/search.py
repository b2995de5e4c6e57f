"""Searching messages on PostgreSQL: the SQLite search contract over tsvector and pg_trgm.

The same query language (sessiondb/search_query.py: words, "quoted
phrases", a trailing ``*`` for prefixes, never syntax), the same filters
(`search.Filters`), bounds and result type (`search.SearchHit`,
`search.SearchResults`); docs/search.md, "PostgreSQL", lists where the
answers differ and why.

- words: each term becomes ``phraseto_tsquery`` of its text (which never
  fails on any input: punctuation is just a separator), prefix terms get
  ``:*`` on their last lexeme, terms are AND-ed with ``&&``. The tsquery is
  built by the server in its own round trip and then bound as a constant,
  so the planner sees it and uses the GIN index.
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

from typing import Any

import psycopg

from ..errors import InvalidQuery
from ..search import (MARK_CLOSE, MARK_OPEN, RANK_WINDOW, SCAN_BUDGET_S, SCAN_WINDOW,
                      SNIPPET_TOKENS, Filters, SearchHit, SearchResults, _check_args,
                      scan_snippet)
from ..search_query import Plan, clean, plan as make_plan, split_terms
from .search_schema import CONFIG, TSV_COLUMN, text_expr

#: ts_headline reads at most this many characters of a message: its cost
#: grows with the text, and a snippet is one fragment near the first hits.
HEADLINE_CHARS = 20_000
HEADLINE_OPTIONS = (f"StartSel={MARK_OPEN}, StopSel={MARK_CLOSE}, MaxWords={SNIPPET_TOKENS},"
                    " MinWords=6, ShortWord=0, MaxFragments=1, FragmentDelimiter=…")
_COLS = "m.id, m.session_id, m.role, m.timestamp, m.state, s.title"
_FROM = "FROM messages AS m JOIN sessions AS s ON s.id = m.session_id"


def _where(filters: Filters) -> tuple[str, list[Any]]:
    """The shared filters in psycopg's placeholder style (their SQL has no
    literal '?' or '%')."""
    where, args = filters.sql()
    assert where.startswith("1")  # SQLite's always-true head; PostgreSQL wants a boolean
    return "TRUE" + where[1:].replace("?", "%s"), args


def _term_sql(text: str, prefix: bool) -> str:
    one = f"phraseto_tsquery('{CONFIG}', %s)"
    if not prefix:
        return one
    # ':*' after the last lexeme; an empty query (no lexemes) stays empty.
    return (f"(SELECT CASE WHEN numnode(q) = 0 THEN q ELSE (q::text || ':*')::tsquery END"
            f" FROM {one} AS q)")


def tsquery(conn: psycopg.Connection, query: str, *, raw: bool = False) -> str:
    """The tsquery text for ``query`` (words plan or raw), built by the server."""
    if raw:
        try:
            with conn.transaction():
                row = conn.execute(f"SELECT to_tsquery('{CONFIG}', %s)::text",
                                   (query,)).fetchone()
        except (psycopg.errors.SyntaxError, psycopg.errors.DataException) as e:
            raise InvalidQuery(f"not a valid tsquery: {e.diag.message_primary}") from None
        return row[0] if row else ""
    terms = [t for t in split_terms(clean(query)) if t.has_word_chars]
    sql = " && ".join(_term_sql(t.text, t.prefix) for t in terms)
    row = conn.execute(f"SELECT ({sql})::text", [t.text for t in terms]).fetchone()
    return row[0] if row else ""


def _hits(rows: list[tuple], snippets: dict[int, str], via: str) -> list[SearchHit]:
    return [SearchHit._of(sid, mid, role, ts, snippets.get(mid, ""), title, state, via, score)
            for mid, sid, role, ts, state, title, score in rows]


def _headlines(conn: psycopg.Connection, ids: list[int], q: str,
               terms: list[str]) -> dict[int, str]:
    """ts_headline for the page rows; a row whose first hits lie past
    HEADLINE_CHARS gets a scan snippet around the first occurrence."""
    if not ids:
        return {}
    found = dict(conn.execute(
        f"SELECT id, ts_headline('{CONFIG}', left({text_expr('m')}, {HEADLINE_CHARS}),"
        f" %s::tsquery, %s) FROM messages AS m WHERE id = ANY(%s)",
        (q, HEADLINE_OPTIONS, ids)).fetchall())
    unmarked = [i for i in ids if MARK_OPEN not in (found.get(i) or "")]
    if unmarked:
        found.update(_scan_snippets(conn, unmarked, terms))
    return found


def _scan_snippets(conn: psycopg.Connection, ids: list[int],
                   terms: list[str]) -> dict[int, str]:
    if not ids:
        return {}
    rows = conn.execute(f"SELECT id, {text_expr('m')} FROM messages AS m WHERE id = ANY(%s)",
                        (ids,)).fetchall()
    return {mid: scan_snippet(text or "", terms) for mid, text in rows}


def _page(order: str, limit: int, offset: int) -> str:
    key = "m.id ASC" if order == "oldest" else "m.id DESC"
    return f" ORDER BY {key} LIMIT {int(limit)} OFFSET {int(offset)}"


def _words(conn: psycopg.Connection, q: str, filters: Filters, order: str, limit: int,
           offset: int) -> list[tuple]:
    where, args = _where(filters)
    match = f"m.{TSV_COLUMN} @@ %s::tsquery AND {where}"
    if order != "rank":
        return conn.execute(f"SELECT {_COLS}, NULL::float8 {_FROM} WHERE {match}"
                            f"{_page(order, limit, offset)}", (q, *args)).fetchall()
    # The window: the RANK_WINDOW most recent matches, scored, best first.
    return conn.execute(
        f"SELECT * FROM (SELECT {_COLS}, -ts_rank(m.{TSV_COLUMN}, %s::tsquery) AS score"
        f" {_FROM} WHERE {match} ORDER BY m.id DESC LIMIT {RANK_WINDOW}) AS w"
        f" ORDER BY score, id DESC LIMIT {int(limit)} OFFSET {int(offset)}",
        (q, q, *args)).fetchall()


def _any_word_match(conn: psycopg.Connection, q: str) -> bool:
    """Whether any message at all matches (no filters), as on SQLite: a
    query whose words the index holds nowhere runs as substrings."""
    return conn.execute(f"SELECT 1 FROM messages WHERE {TSV_COLUMN} @@ %s::tsquery LIMIT 1",
                        (q,)).fetchone() is not None


def _substring(conn: psycopg.Connection, p: Plan, filters: Filters, order: str, limit: int,
               offset: int) -> list[tuple]:
    """Every term an ILIKE (the trigram index serves those of 3+ characters).
    There is no relevance score: ``rank`` is newest first within the window."""
    where, args = _where(filters)
    likes = "".join(f" AND {text_expr('m')} ILIKE %s" for _ in p.terms)
    patterns = [_like(t) for t in p.terms]
    return conn.execute(f"SELECT {_COLS}, NULL::float8 {_FROM} WHERE {where}{likes}"
                        f"{_page(order, limit, offset)}", (*args, *patterns)).fetchall()


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
    sql = (f"SELECT w.id, w.session_id, w.role, w.timestamp, w.state, w.title, w.body"
           f" FROM ({inner}) AS w WHERE {likes} ORDER BY w.id {key}"
           f" LIMIT {int(limit)} OFFSET {int(offset)}")
    try:
        with conn.transaction():
            conn.execute(f"SET LOCAL statement_timeout = {int(SCAN_BUDGET_S * 1000)}")
            rows = conn.execute(sql, (*args, *[_like(t) for t in p.terms])).fetchall()
    except psycopg.errors.QueryCanceled:
        return SearchResults.of([], f"the scan stopped after {SCAN_BUDGET_S:g}s; nothing was "
                                    "found in time (narrow the search with filters)")
    return SearchResults.of([SearchHit._of(sid, mid, role, ts, scan_snippet(body or "", p.terms),
                                           title, state, "scan")
                             for mid, sid, role, ts, state, title, body in rows])


def search(conn: psycopg.Connection, query: object, *, filters: Filters, limit: int = 20,
           offset: int = 0, order: str = "rank", raw: bool = False) -> SearchResults:
    """One page of hits for ``query``; raises InvalidQuery / InvalidInput."""
    _check_args(filters, limit, offset, order)
    p = make_plan(query, raw=raw)
    assert isinstance(query, str)  # make_plan refused anything else
    if p.kind == "scan":
        return _scan(conn, p, filters, order, limit, offset)
    if p.kind in ("words", "raw"):
        q = tsquery(conn, query, raw=raw)
        rows = _words(conn, q, filters, order, limit, offset) if q else []
        if rows or p.kind == "raw" or (q and _any_word_match(conn, q)):
            ids = [r[0] for r in rows]
            return SearchResults.of(_hits(rows, _headlines(conn, ids, q, p.terms), "fts"))
        alt = p.alt
        if alt is None:
            return SearchResults.of([])
        p = alt
    rows = _substring(conn, p, filters, order, limit, offset)
    snippets = _scan_snippets(conn, [r[0] for r in rows], p.terms)
    return SearchResults.of(_hits(rows, snippets, "trigram"))
