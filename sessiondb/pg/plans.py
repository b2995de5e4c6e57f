"""Migration p013: the append's plans stay right while the table grows.

PL/pgSQL caches a statement's plan per connection. A pooled connection
that appends to a new (or just created, not yet analyzed) database plans
``SELECT max(position) ... WHERE session_id = $1`` while ``messages`` is
empty, gets a sequential scan, and keeps it until autovacuum's ANALYZE
invalidates it (up to a minute and 50 rows + 10% later): every append
then reads the whole table, and appends grow O(rows). Measured
(auto_explain inside `hermes_append`, 3,000 rows in one session): the
cached plan was ``Seq Scan on messages`` reading 3,000 rows, 1.1 ms of a
2.4 ms call; bench/postgres.py's B2 starts from an empty database and
ran on that plan for its whole window.

The fix: the position comes from ``ORDER BY position DESC LIMIT 1``, a
backward walk of ``messages_in_order`` that stops at the first entry, and
both append functions run with ``enable_seqscan = off`` (a function
``SET`` clause: restored when the call returns, so nothing leaks into a
caller's transaction). Every statement in them is an equality lookup on
an index, so no plan they could want is a sequential scan; with the
setting off, a plan made on an empty table is the index plan too.
"""
from __future__ import annotations

from typing import Any

from .append import _APPEND

_MAX = "SELECT max(m.position) INTO top FROM messages m WHERE m.session_id = p_session;"
_LAST = ("SELECT m.position INTO top FROM messages m WHERE m.session_id = p_session"
         " ORDER BY m.position DESC LIMIT 1;")
_ARGS = ("text, bigint, double precision, text, text[], text[], text[], text[], text[],"
         " text[], text[], text[], double precision[], bigint[], text[], text[], bigint[]")
_APPEND_ARGS = ("text, text, double precision, text, text[], text[], text[], text[], text[],"
                " text[], text[], text[], double precision[], bigint[], text[], text[],"
                " bigint[], integer, boolean")


def append_body() -> str:
    """p011's `hermes_append` with the position read as a backward walk."""
    assert _MAX in _APPEND, "p011's position query changed: update p013"
    return _APPEND.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION").replace(_MAX, _LAST)


def p013_append_plans(conn: Any) -> None:
    """Index plans for the append functions whatever the table's size at
    plan time (see the module doc)."""
    conn.execute(append_body())
    conn.execute(f"ALTER FUNCTION hermes_append({_APPEND_ARGS}) SET enable_seqscan = off")
    conn.execute(f"ALTER FUNCTION hermes_insert_rows({_ARGS}) SET enable_seqscan = off")
