"""Searching messages: running a query plan, bounded ranking, the fallback.

Bounded work, by design (documented in docs/search.md):

- ``order="rank"`` ranks with bm25 only among the ``RANK_WINDOW`` most
  recently stored matches. FTS5 streams matches in rowid order, newest
  first; the first RANK_WINDOW are scored in that same pass (on the index
  alone unless filters need the rows) and only the best few are joined to
  their rows and given snippets. So a term in every message costs about
  the same as one in 5,000. Older matches stay reachable with
  ``order="oldest"`` or filters.
- a ``session_id`` filter bounds FTS5 to the session's rowid range.
- ``order="newest"``/``"oldest"`` follow storage order (message id), which
  FTS5 streams without sorting.
- Substrings go through the word index's terms: the terms holding the
  query's longest run of word characters (the term table), then the rows
  holding any of them, each verified against its text. A run held by more
  than ``TERM_CAP`` terms (a common fragment: ``ing``), or a query with no
  run of 3 word characters (``:::``, ``a.b``), is answered by the scan.
- Scans (queries shorter than a trigram, substrings as above, and the
  fallback while the index is stale) look at the ``SCAN_WINDOW`` most
  recent rows that pass the filters and match them with LIKE (ASCII
  case-insensitive substrings); a substring's terms of 3+ characters are
  verified as the indexed path verifies them.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import apsw

from ..base import (Cause, InvalidInput, InvalidQuery, MessageState, SearchIndexCorrupt,
                    StorageError, one)
from ..index import search_index
from ..rows import ROLE_CODES, role_key, role_text
from . import search_tail
from .search_query import Plan, fts_string, like_pattern, plan as make_plan

if TYPE_CHECKING:
    from ..engine import StoreCore

log = logging.getLogger(__name__)

RANK_WINDOW = 5_000
SCAN_WINDOW = 50_000
SCAN_BUDGET_S = 0.5  # a scan past this returns what it found, flagged partial
# A substring run held by more terms than this goes to the scan: the word
# index's OR over the terms costs ~25-35 us a term, while a common fragment
# is found in the newest rows at once (docs/row-format.md).
TERM_CAP = 500
MAX_LIMIT = 1_000
ORDERS = ("rank", "newest", "oldest")
MARK_OPEN, MARK_CLOSE, ELLIPSIS = "**", "**", "…"
SNIPPET_TOKENS = 16
SCAN_SNIPPET_CHARS = 60
SNIPPET_MAX_HITS = 256  # more hits in one document: a scan snippet (see _snippet_sql)
LONG_MARK = "\x00"
_COLS = "m.id, m.session_id, m.role, m.timestamp, m.state, s.title"


@dataclass(frozen=True)
class SearchHit:
    """One matching message. ``via`` says which path found it: ``fts``
    (word index), ``terms`` (a substring, through the word index's terms),
    ``scan`` (bounded scan: very short queries, substrings without a word
    run or held by too many terms) or ``fallback`` (bounded scan while the
    index is stale). (PostgreSQL stores answer substrings with ``trigram``.)"""

    session_id: str
    message_id: int
    role: str
    timestamp: float
    snippet: str
    session_title: str | None
    state: str
    via: str
    score: float | None = None

    @property
    def archived(self) -> bool:
        return self.state == MessageState.ARCHIVED

    @property
    def fallback(self) -> bool:
        return self.via == "fallback"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "archived": self.archived, "fallback": self.fallback}

    @classmethod
    def _of(cls, session_id: str, message_id: int, role: str, timestamp: float, snippet: str,
            session_title: str | None, state: str, via: str,
            score: float | None = None) -> "SearchHit":
        """The same hit as ``SearchHit(...)``, built without the frozen
        ``__init__`` (one ``object.__setattr__`` per field: about 1 us a hit,
        16 us for a page of 20). Nothing is derived or checked at init."""
        hit = object.__new__(cls)
        hit.__dict__.update(session_id=session_id, message_id=message_id, role=role,
                            timestamp=timestamp, snippet=snippet, session_title=session_title,
                            state=state, via=via, score=score)
        return hit


@dataclass(frozen=True)
class Filters:
    """Row filters shared by every search path."""

    session_id: str | None = None
    role: str | None = None
    source: str | None = None
    since: float | None = None
    until: float | None = None
    include_archived: bool = False
    #: False leaves out sessions archived by `hermes sessions archive`.
    archived_sessions: bool = True
    exclude_changed: bool = False  # leave out rows whose indexed text is out of date

    @property
    def narrowing(self) -> bool:
        """Filters beyond row state (those can exclude most matches)."""
        return not self.archived_sessions or any(
            v is not None for v in (self.session_id, self.role, self.source, self.since,
                                    self.until))

    def sql(self, coded_roles: bool = False) -> tuple[str, list[Any]]:
        """The WHERE clause and its arguments. ``coded_roles``: the rows
        store roles as codes (SQLite since m012): the role is bound as its
        code, and a name outside the role set matches nothing (a code
        given as a name must not match)."""
        where, args = ["1"], []
        role = self.role
        if coded_roles and role is not None:
            if role not in ROLE_CODES:
                where.append("0")
            role = role_key(role)
        if not self.include_archived:
            where.append("m.state = 'active'")
        if self.exclude_changed:
            where.append(f"m.id NOT IN (SELECT message_id FROM {search_index.CHANGES})")
        for clause, value in (("m.session_id = ?", self.session_id), ("m.role = ?", role),
                              ("s.source = ?", self.source), ("m.timestamp >= ?", self.since),
                              ("m.timestamp < ?", self.until)):
            if value is not None:
                where.append(clause)
                args.append(value)
        if not self.archived_sessions:
            where.append("m.session_id NOT IN (SELECT session_id FROM session_flags"
                         " WHERE archived_at IS NOT NULL)")
        return " AND ".join(where), args


def check_args(filters: Filters, limit: int, offset: int, order: str) -> None:
    if order not in ORDERS:
        raise InvalidInput(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
    for name, value, low, high in (("limit", limit, 1, MAX_LIMIT),
                                   ("offset", offset, 0, RANK_WINDOW)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidInput(f"{name} must be an integer from {low} to {high}")
    for name in ("since", "until"):
        value = getattr(filters, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InvalidInput(f"{name} must be a number (epoch seconds)")
    for name in ("session_id", "role", "source"):
        value = getattr(filters, name)
        if value is not None and not isinstance(value, str):
            raise InvalidInput(f"{name} must be a string")


# -- indexed paths -----------------------------------------------------------

# LIMIT and OFFSET of statements on an FTS5 table are written into the SQL as
# integer literals (validated ints), not bound: measured with SQLite 3.54, a
# bound LIMIT costs 15-20 us a statement (about a rare word's whole raw FTS5
# query). Rowid bounds stay bound: as literals every statement's text would
# be new, and preparing one costs more than that.

def _page_sql(limit: int, offset: int) -> str:
    return f" LIMIT {int(limit)} OFFSET {int(offset)}"


def _snippet_sql(table: str) -> str:
    """FTS5's snippet, for documents with few hits: it scores every hit
    against every other (quadratic: 20 KB of zeros searched for 0000 took
    seconds). A document with more hits gets a marker, and its snippet is
    cut in Python around the first occurrence (`_long_snippets`)."""
    return (f"CASE WHEN {search_index.HITS_FUNCTION}({table}) <= {SNIPPET_MAX_HITS}"
            f" THEN snippet({table}, 0, '{MARK_OPEN}', '{MARK_CLOSE}', '{ELLIPSIS}',"
            f" {SNIPPET_TOKENS}) ELSE char(0) END")


def _long_snippets(conn: apsw.Connection, rows: list[tuple], terms: list[str],
                   text_sql: str | None) -> list[tuple]:
    """Rows whose snippet is the many-hits marker get a scan snippet instead."""
    long = [r[0] for r in rows if r[6] == LONG_MARK]
    if not long:
        return rows
    view, column = ((search_index.TEXT_VIEW, "text") if text_sql is None
                    else ("messages", "body"))
    texts = dict(conn.execute(f"SELECT id, {column} FROM {view} WHERE id IN"
                              f" ({','.join('?' * len(long))})", long))
    return [(*r[:6], scan_snippet(texts.get(r[0]) or "", terms), *r[7:])
            if r[6] == LONG_MARK else r for r in rows]


def _window_floor(conn: apsw.Connection, table: str, match: str | None) -> int | None:
    """The oldest rowid among the RANK_WINDOW most recent matches in the
    index (any state), for the joined re-rank of `_rank_unjoined`."""
    (floor,) = one(conn.execute(f"SELECT min(id) FROM (SELECT rowid AS id FROM {table}"
                            f" WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT {RANK_WINDOW})",
                            (match,)))
    return floor


def _with_snippets(conn: apsw.Connection, table: str, match: str | None,
                   rows: list[tuple], snippet: str | None = None) -> list[tuple]:
    """Snippets for the final page only (a ranked query would build one for
    every row it sorts). One pass over the page's rowid range, so a prefix
    or trigram expression is expanded once, not once per hit."""
    if not rows:
        return rows
    wanted = [r[0] for r in rows]
    marks = ",".join("?" * len(wanted))
    found = dict(conn.execute(
        f"SELECT rowid, {snippet or _snippet_sql(table)} FROM {table} WHERE {table} MATCH ?"
        f" AND rowid BETWEEN ? AND ? AND +rowid IN ({marks})",
        (match, min(wanted), max(wanted), *wanted)))
    return [(*r[:6], found.get(r[0], ""), r[6]) for r in rows]


def _rank_unjoined(conn: apsw.Connection, table: str, p: Plan, filters: Filters,
                   base: str, params: list[Any], limit: int,
                   offset: int) -> list[tuple] | None:
    """Rank the window on the index alone, then join only the best rows
    (None when the index holds no match at all).

    One pass over the index: the RANK_WINDOW most recent matches, streamed
    in rowid order, scored, and the best ``2 x (offset + limit)`` kept. That
    is enough whenever enough of them pass the state filter (nearly always:
    few rows are not active); otherwise the joined query ranks the window."""
    want = offset + limit
    best = list(conn.execute(
        f"SELECT id, score FROM (SELECT rowid AS id, bm25({table}) AS score FROM {table}"
        f" WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT {RANK_WINDOW})"
        f" ORDER BY score, id DESC LIMIT {int(2 * want)}", (p.match,)))
    if len(best) <= offset:
        return None if not best else []
    page = _page_if_all_pass(conn, table, p.match, filters, best[:want], offset)
    if page is not None:
        return page
    where, args = filters.sql(coded_roles=True)
    marks = ",".join("?" * len(best))
    rows = {r[0]: r for r in conn.execute(
        f"SELECT {_COLS} FROM messages AS m JOIN sessions AS s ON s.id = m.session_id"
        f" WHERE m.id IN ({marks}) AND {where}", (*[b[0] for b in best], *args))}
    kept = [(*rows[rid], score) for rid, score in best if rid in rows]
    if len(kept) >= want or len(best) < 2 * want:
        return _with_snippets(conn, table, p.match, kept[offset:want])
    floor = _window_floor(conn, table, p.match)
    sql = (f"SELECT {_COLS}, bm25({table}) AS score{base} AND f.rowid >= ?"
           f" ORDER BY score, m.id DESC{_page_sql(limit, offset)}")
    return _with_snippets(conn, table, p.match, list(conn.execute(sql, (*params, floor))))


def _page_if_all_pass(conn: apsw.Connection, table: str, match: str | None,
                      filters: Filters, head: list[tuple], offset: int) -> list[tuple] | None:
    """The page when every row of ``head`` (the best ``offset + limit``)
    passes the state filter, the common case: one statement joins them and
    builds snippets for the page rows only. None when some row does not."""
    where, args = filters.sql(coded_roles=True)
    ids = [rid for rid, _ in head]
    page = ids[offset:] if offset else []
    snippet = _snippet_sql(table)
    if page:  # rows before the page are checked, not shown; the CASE costs 10-20 us
        snippet = f"CASE WHEN f.rowid IN ({','.join('?' * len(page))}) THEN {snippet} END"
    found = {r[0]: r for r in conn.execute(
        f"SELECT {_COLS}, {snippet} FROM {table} AS f JOIN messages AS m ON m.id = f.rowid"
        f" JOIN sessions AS s ON s.id = m.session_id WHERE f.{table} MATCH ?"
        f" AND f.rowid BETWEEN ? AND ? AND +f.rowid IN ({','.join('?' * len(ids))}) AND {where}",
        (*page, match, min(ids), max(ids), *ids, *args))}
    if len(found) < len(ids):
        return None
    return [(*found[rid], score) for rid, score in head[offset:]]


def _rank_joined(conn: apsw.Connection, table: str, base: str, params: list[Any],
                 limit: int, offset: int) -> list[tuple]:
    """Rank the RANK_WINDOW most recent matches that pass the filters (and
    LIKE checks), in one pass: FTS5 streams them in rowid order through the
    join, and only those are scored."""
    sql = (f"SELECT * FROM (SELECT {_COLS}, bm25({table}) AS score{base}"
           f" ORDER BY f.rowid DESC LIMIT {RANK_WINDOW}) ORDER BY score, id DESC"
           f"{_page_sql(limit, offset)}")
    return list(conn.execute(sql, params))


def _at_most(conn: apsw.Connection, table: str, match: str | None, n: int) -> bool:
    """Whether the index holds at most ``n`` documents for ``match``."""
    (count,) = one(conn.execute(f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {table}"
                                f" MATCH ? LIMIT {int(n) + 1})", (match,)))
    return int(count) <= n


def _rank_checking_best_first(conn: apsw.Connection, table: str, match: str | None,
                              filters: Filters, checks: tuple[str, list[Any]], limit: int,
                              offset: int) -> list[tuple]:
    """A ranked substring page when the index holds no more matches than the
    window: every match is scored on the index alone, then joined, filtered
    and checked in score order until the page is full. The same page as
    `_rank_joined` (the window is every match that passes), but the text
    of a candidate is read and verified only until the page is full, not
    for every match (a common fragment has thousands)."""
    want = offset + limit
    ranked = list(conn.execute(f"SELECT rowid, bm25({table}) AS score FROM {table}"
                               f" WHERE {table} MATCH ? ORDER BY score, rowid DESC", (match,)))
    where, args = filters.sql(coded_roles=True)
    sql_checks, check_args = checks
    kept: list[tuple] = []
    step = max(2 * want, 50)
    for at in range(0, len(ranked), step):
        chunk = ranked[at:at + step]
        marks = ",".join("?" * len(chunk))
        found = {r[0]: r for r in conn.execute(
            f"SELECT {_COLS}, char(0) FROM messages AS m JOIN sessions AS s"
            f" ON s.id = m.session_id WHERE m.id IN ({marks}) AND {where}{sql_checks}",
            (*[c[0] for c in chunk], *args, *check_args))}
        kept += [(*found[rid], score) for rid, score in chunk if rid in found]
        if len(kept) >= want:
            break
    return kept[offset:want]


def _session_bounds(conn: apsw.Connection, session_id: str) -> tuple[int, int] | None:
    """The rowid range a session's messages occupy, so FTS5 seeks inside it
    instead of walking every match of a common term to find the session's
    few (None when the session has no messages)."""
    lo, hi = one(conn.execute("SELECT min(id), max(id) FROM messages WHERE session_id = ?",
                          (session_id,)))
    return None if lo is None else (lo, hi)


def _indexed(conn: apsw.Connection, p: Plan, table: str, filters: Filters, order: str,
             limit: int, offset: int, text_sql: str | None = None,
             via: str = "fts") -> list[SearchHit] | None:
    """One page of hits from ``table``; None when the ranked path saw that
    the index holds no match for ``p.match`` at all."""
    where, args = filters.sql(coded_roles=True)
    span = ""
    bounds: tuple[int, ...] = ()
    if filters.session_id is not None:
        found = _session_bounds(conn, filters.session_id)
        if found is None:
            return []
        bounds = found
        span = " AND f.rowid BETWEEN ? AND ?"
    text = text_sql or search_index.text_expr('m')
    likes = "".join(f" AND {text} LIKE ? ESCAPE '\\'" for _ in p.likes)
    # A substring's terms only name candidates: each long term is verified
    # in the text (after the cheaper filters, so only candidates are folded).
    likes += "".join(f" AND {search_index.CONTAINS_FUNCTION}({text}, ?)" for _ in p.verify)
    base = (f" FROM {table} AS f JOIN messages AS m ON m.id = f.rowid"
            f" JOIN sessions AS s ON s.id = m.session_id"
            f" WHERE f.{table} MATCH ?{span} AND {where}{likes}")
    params = [p.match, *bounds, *args, *p.likes, *p.verify]
    # A substring's snippet marks the substring in the text (`scan_snippet`),
    # not the whole terms holding it that FTS5 would mark.
    snippet = "char(0)" if via == "terms" else _snippet_sql(table)
    rows: list[tuple[Any, ...]] | None
    if order == "rank":
        checks = (likes, [*p.likes, *p.verify])
        if via == "terms" and not filters.narrowing and _at_most(conn, table, p.match,
                                                                  RANK_WINDOW):
            rows = _rank_checking_best_first(conn, table, p.match, filters, checks,
                                             limit, offset)
        elif filters.narrowing or p.likes or p.verify:
            rows = _with_snippets(conn, table, p.match,
                                  _rank_joined(conn, table, base, params, limit, offset),
                                  snippet)
        else:
            rows = _rank_unjoined(conn, table, p, filters, base, params, limit, offset)
            if rows is None:
                return None
    else:
        direction = "DESC" if order == "newest" else "ASC"
        sql = (f"SELECT {_COLS}, {snippet}, NULL{base}"
               f" ORDER BY f.rowid {direction}{_page_sql(limit, offset)}")
        rows = list(conn.execute(sql, params))
    rows = _long_snippets(conn, rows, p.terms, text_sql)
    return [SearchHit._of(sid, mid, role_text(role), ts, snip or "", title, state, via, score)
            for mid, sid, role, ts, state, title, snip, score in rows]


# -- bounded scans -----------------------------------------------------------

def scan_snippet(text: str, terms: list[str]) -> str:
    """A window around the first occurrence of any term, marked like FTS5's."""
    folded = text.casefold()
    spots = [(folded.find(t.casefold()), t) for t in terms if t]
    spots = [(i, t) for i, t in spots if i >= 0]
    if not spots:
        return text[:2 * SCAN_SNIPPET_CHARS] + (ELLIPSIS if len(text) > 2 * SCAN_SNIPPET_CHARS else "")
    at, term = min(spots)
    start, end = max(at - SCAN_SNIPPET_CHARS, 0), at + len(term) + SCAN_SNIPPET_CHARS
    return ((ELLIPSIS if start else "") + text[start:at] + MARK_OPEN + text[at:at + len(term)]
            + MARK_CLOSE + text[at + len(term):end] + (ELLIPSIS if end < len(text) else ""))


def _scan(conn: apsw.Connection, p: Plan, filters: Filters, order: str, limit: int,
          offset: int, via: str) -> "SearchResults":
    """LIKE over the SCAN_WINDOW most recent rows that pass the filters,
    within SCAN_BUDGET_S: past it, SQLite is interrupted and the hits found
    so far (newest first) come back flagged partial."""
    where, args = filters.sql(coded_roles=True)
    checks = ([f"body LIKE ? ESCAPE '\\'" for _ in p.likes]
              + [f"{search_index.CONTAINS_FUNCTION}(body, ?)" for _ in p.verify])
    likes = " AND ".join(checks) or "1"
    inner = (f"SELECT {_COLS}, {search_index.text_expr('m')} AS body"
             f" FROM messages AS m JOIN sessions AS s ON s.id = m.session_id WHERE {where}"
             f" ORDER BY m.id DESC LIMIT {SCAN_WINDOW}")
    if order == "oldest":  # the whole window must be matched before the first page
        sql = f"SELECT * FROM ({inner}) WHERE {likes} ORDER BY id ASC LIMIT ? OFFSET ?"
        params: tuple = (*args, *p.likes, *p.verify, limit, offset)
    else:  # streams newest first: stops at the page's end
        sql, params = f"SELECT * FROM ({inner}) WHERE {likes}", (*args, *p.likes, *p.verify)
    rows: list[tuple] = []
    reason = None
    deadline = time.monotonic() + SCAN_BUDGET_S
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 2_000)
    try:
        for i, row in enumerate(conn.execute(sql, params)):
            if order == "oldest" or i >= offset:
                rows.append(row)
            if order != "oldest" and len(rows) >= limit:
                break
    except apsw.InterruptError:
        reason = (f"the scan stopped after {SCAN_BUDGET_S:g}s; older rows were not "
                  "searched (narrow the search with filters)")
    finally:
        conn.set_progress_handler(None)
    hits = [SearchHit._of(sid, mid, role_text(role), ts, scan_snippet(body or "", p.terms),
                          title, state, via) for mid, sid, role, ts, state, title, body in rows]
    return SearchResults.of(hits, reason)


def _any_match(conn: apsw.Connection, table: str, match: str | None,
               exclude_changed: bool = False) -> bool:
    """Whether the index holds any document for ``match`` (no filters): the
    cheapest FTS5 query, so every page of a query takes the same path."""
    skip = (f" AND rowid NOT IN (SELECT message_id FROM {search_index.CHANGES})"
            if exclude_changed else "")
    return conn.execute(f"SELECT 1 FROM {table} WHERE {table} MATCH ?{skip} LIMIT 1",
                        (match,)).fetchone() is not None


def fallback_plan(p: Plan) -> Plan:
    """The scan that stands in for ``p`` while the index is stale."""
    if p.kind == "raw":
        raise SearchIndexCorrupt(
            "the full-text index is stale, so raw FTS5 queries cannot run; search without "
            "raw=True (a bounded scan) or rebuild the index")
    return Plan("scan", likes=[like_pattern(t) for t in p.terms], terms=p.terms)


class SearchResults(list):
    """The hits of one search (a list), and whether they may be incomplete:
    ``partial`` is True when a bound cut the search short (``reason`` says
    which); the hits found are all real."""

    partial: bool = False
    reason: str | None = None

    @classmethod
    def of(cls, hits: list[SearchHit], reason: str | None = None) -> "SearchResults":
        out = cls(hits)
        out.partial, out.reason = reason is not None, reason
        return out


def _on(conn: apsw.Connection, p: Plan, table: str, filters: Filters, order: str,
        limit: int, offset: int, text_sql: str | None = None) -> list[SearchHit] | None:
    if p.kind == "substring":
        if not p.match:  # no term holds the substring's run
            return []
        return _indexed(conn, p, table, filters, order, limit, offset, text_sql, "terms")
    try:
        return _indexed(conn, p, table, filters, order, limit, offset, text_sql)
    except apsw.SQLError as e:
        if p.kind == "raw":  # FTS5 reports syntax errors as SQLITE_ERROR
            raise InvalidQuery(f"not a valid FTS5 query: {e}") from None
        raise


def _order_key(order: str):  # type: ignore[no-untyped-def]
    if order == "newest":
        return lambda h: -h.message_id
    if order == "oldest":
        return lambda h: h.message_id
    return lambda h: (h.score if h.score is not None else 0.0, -h.message_id)


def _merged(conn: apsw.Connection, tail: search_tail.Tail, p: Plan, table: str,
            filters: Filters, order: str, limit: int, offset: int,
            tail_plan: Plan | None = None) -> list[SearchHit] | None:
    """The page over the index (without changed rows) and the tail together:
    the best ``offset + limit`` of each, merged in the query's order.
    ``tail_plan``: the tail's own plan (a substring's terms differ there)."""
    want = offset + limit
    main = _on(conn, p, table, replace(filters, exclude_changed=tail.changed), order, want, 0)
    extra = _on(tail.conn, tail_plan or p, table, filters, order, want, 0, "m.body")
    if main is None and not extra:
        return None
    hits = sorted([*(main or []), *(extra or [])], key=_order_key(order))
    return hits[offset:want]


def _any_anywhere(conn: apsw.Connection, tail: search_tail.Tail | None,
                  match: str | None) -> bool:
    table = search_index.FTS_TABLE
    if tail is None:
        return _any_match(conn, table, match)
    return _any_match(conn, table, match, tail.changed) or _any_match(tail.conn, table, match)


def run(conn: apsw.Connection, p: Plan, filters: Filters, order: str, limit: int,
        offset: int, tail: search_tail.Tail | None = None) -> list[SearchHit]:
    """Execute ``p`` on a healthy index (plus the not-yet-indexed ``tail``)."""
    if p.kind == "scan":
        return _scan(conn, p, filters, order, limit, offset, "scan")
    if p.kind == "substring":
        return _substring(conn, p, filters, order, limit, offset, tail)
    table = search_index.FTS_TABLE
    if tail is None:
        hits = _on(conn, p, table, filters, order, limit, offset)
    else:
        hits = _merged(conn, tail, p, table, filters, order, limit, offset)
    # Words the word index does not hold at all run as substrings. Checked
    # only when the page is empty (a hit proves the index holds a match),
    # and on the whole index, so every page of a query takes the same path.
    if p.alt is not None and (hits is None or not hits and not _any_anywhere(
            conn, tail, p.match)):
        return run(conn, p.alt, filters, order, limit, offset, tail)
    return hits or []


def _terms_match(terms: list[str]) -> str:
    return " OR ".join(fts_string(t) for t in terms)


def substring_run(conn: apsw.Connection, p: Plan) -> str | None:
    """The longest run of word characters of ``p``'s long terms, folded as the
    word index folds terms; None when no run has MIN_TERM_CHARS."""
    runs = [t for piece in p.verify for t in search_index.word_tokens(conn, piece)]
    best = max(runs, key=len, default="")
    return best if len(best) >= search_index.MIN_TERM_CHARS else None


def _substring(conn: apsw.Connection, p: Plan, filters: Filters, order: str, limit: int,
               offset: int, tail: search_tail.Tail | None) -> list[SearchHit]:
    """A substring through the word index's terms: the terms holding its
    longest word run, the rows holding any of them (each verified against
    its text); the scan when there is no such run or too many terms hold it."""
    run_ = substring_run(conn, p)
    terms = None if run_ is None else search_index.terms_holding(conn, run_, TERM_CAP)
    if terms is None or run_ is None:
        return _scan(conn, p, filters, order, limit, offset, "scan")
    main = replace(p, match=_terms_match(terms))
    table = search_index.FTS_TABLE
    if tail is None:
        return _on(conn, main, table, filters, order, limit, offset) or []
    extra = replace(p, match=_terms_match(search_tail.terms_holding(tail, run_)))
    return _merged(conn, tail, main, table, filters, order, limit, offset, extra) or []


def _too_long(backlog: search_index.Backlog | None) -> bool:
    return (backlog is not None and backlog.work
            and backlog.tail + backlog.changes > search_tail.TAIL_ROWS)


def _catch_up(core: "StoreCore") -> None:
    """Index a backlog longer than the tail bound before searching (see
    search_tail); a failure leaves the search to cover part of it."""
    try:
        core.catch_up_index()
    except StorageError as e:
        log.info("could not catch the search index up before searching: %s", e)


def _run_indexed(conn: apsw.Connection, backlog: search_index.Backlog | None, p: Plan,
                 filters: Filters, order: str, limit: int, offset: int) -> SearchResults:
    tail = (search_tail.load(conn, backlog)
            if backlog is not None and p.kind != "scan" else None)
    try:
        hits = run(conn, p, filters, order, limit, offset, tail)
    finally:
        if tail is not None:
            tail.close()
    reason = getattr(hits, "reason", None)
    if tail is not None and tail.partial:
        reason = (f"the index is behind by more than {search_tail.TAIL_ROWS} rows and could "
                  "not be caught up; newer rows were not searched")
    return SearchResults.of(hits, reason)


class _IndexDamaged(Exception):
    """Leaves a read snapshot whose index read failed, so the snapshot ends
    by ROLLBACK: FTS5 keeps a damaged read's error and its COMMIT would
    report it again, as if the store were damaged."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _on_index(core: "StoreCore", p: Plan, filters: Filters, order: str, limit: int,
             offset: int) -> SearchResults | None:
    """Search on the index and its tail; None when the index is stale or a
    long backlog must be indexed first and could be. Index damage raises
    `_IndexDamaged`, decided where the read failed."""
    for attempt in (1, 2):  # the second after indexing a long backlog
        with core.snapshot() as conn:
            backlog = search_index.backlog(conn)
            stale = (backlog.stale if backlog is not None
                     else search_index.stale_marker(conn) is not None)
            if stale:
                return None
            if attempt == 2 or not (_too_long(backlog) and core.can_index_now()):
                try:
                    return _run_indexed(conn, backlog, p, filters, order, limit, offset)
                except search_index.INDEX_DAMAGE_ERRORS as e:
                    if not search_index.is_index_scoped(conn, e):
                        raise
                    raise _IndexDamaged(e) from e
        _catch_up(core)  # what is still left after it is searched partially
    return None  # not reached: the second attempt always returns or raises


def _index_only(core: "StoreCore", error: StorageError) -> bool:
    """Whether a corruption reported outside the failing read (for example
    by the snapshot's end) lies in the search index alone."""
    if error.cause not in (Cause.CORRUPT, Cause.FTS_INDEX):
        return False
    try:
        with core.snapshot() as conn:
            return search_index.corruption_is_index_only(conn)
    except (StorageError, _IndexDamaged):
        return False


def search(core: "StoreCore", query: object, *, filters: Filters, limit: int, offset: int,
           order: str, raw: bool) -> SearchResults:
    """Plan, run on the index and its tail, and fail open to a bounded scan
    when the index is damaged."""
    check_args(filters, limit, offset, order)
    p = make_plan(query, raw=raw)
    damage: BaseException | None = None
    try:
        found = _on_index(core, p, filters, order, limit, offset)
        if found is not None:
            return found
    except _IndexDamaged as d:
        damage = d.error
    except StorageError as e:
        if not _index_only(core, e):
            raise
        damage = e.__cause__ or e
    if damage is not None:
        mark_stale(core, f"search failed: {damage}", search_index.code_of(damage))
    with core.snapshot() as conn:
        return _scan(conn, fallback_plan(p), filters, order, limit, offset, "fallback")


def mark_stale(core: "StoreCore", reason: str, code: int | None) -> None:
    """Set the marker, unless another process did."""
    try:
        with core.write() as conn:
            if search_index.stale_marker(conn) is not None:
                return
            search_index.mark_stale(conn, reason, code)
    except StorageError as e:  # a read-only or quarantined handle: scan anyway
        log.info("could not mark the search index stale: %s", e)
        return
    log.warning("full-text index damaged (%s); search falls back to scanning until "
                "`hermes sessions repair` rebuilds it", reason)
