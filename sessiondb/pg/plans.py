"""Migration p013: cheaper append calls, with plans that stay right while the table grows.

PL/pgSQL caches a statement's plan per connection. A pooled connection
that appends to a new (or just created, not yet analyzed) database plans
``SELECT max(position) ... WHERE session_id = $1`` while ``messages`` is
empty, gets a sequential scan, and keeps it until autovacuum's ANALYZE
invalidates it (up to a minute and 50 rows + 10% later): every append
then reads the whole table, and appends grow O(rows). Measured
(auto_explain inside `hermes_append`, 3,000 rows in one session): the
cached plan was ``Seq Scan on messages`` reading 3,000 rows, 1.1 ms of a
2.4 ms call. bench/postgres.py's B2 starts from an empty database, so its
writers ran on that plan until autovacuum analyzed the table (server CPU
per relaxed commit 1.12-1.15 ms before p013, 0.63-0.69 ms after, in
alternating runs: docs/benchmarks.md).

The fix: the position comes from ``ORDER BY position DESC LIMIT 1``, a
backward walk of ``messages_in_order`` that stops at the first entry, and
both append functions run with ``enable_seqscan = off`` (a function
``SET`` clause: restored when the call returns, so nothing leaks into a
caller's transaction). Every table they read is read by an equality
lookup on an index, so no plan they could want is a sequential scan; with
the setting off, a plan made on an empty table is the index plan too.

`hermes_append_one` (a commit-each append, the common case) becomes one
flat PL/pgSQL function with p011's checks and writes in p011's order:
lock the session row, check the lease, read the position, insert the row
(``ON CONFLICT DO NOTHING``: idempotent by uid), move the counters. p011's
form was an SQL function (re-planned on every call: its plan lives for
one query) around `hermes_append`, which built 13 one-element arrays and
called `hermes_insert_rows` through ``SELECT ... FROM``. Measured on this
machine (one backend, 3,000 commits in a server-side loop, server CPU per
commit): p011's call chain cost 0.18-0.31 ms without the search indexes
where the same statements run directly cost 0.07-0.14 ms.
"""
from __future__ import annotations

from typing import Any

from .append import _APPEND, _CHECKS, _OUTS

_MAX = "SELECT max(m.position) INTO top FROM messages m WHERE m.session_id = p_session;"
_LAST = ("SELECT m.position INTO top FROM messages m WHERE m.session_id = p_session"
         " ORDER BY m.position DESC LIMIT 1;")
_ARGS = ("text, bigint, double precision, text, text[], text[], text[], text[], text[],"
         " text[], text[], text[], double precision[], bigint[], text[], text[], bigint[]")
_APPEND_ARGS = ("text, text, double precision, text, text[], text[], text[], text[], text[],"
                " text[], text[], text[], double precision[], bigint[], text[], text[],"
                " bigint[], integer, boolean")


_APPEND_ONE = f"""
CREATE OR REPLACE FUNCTION hermes_append_one(p_session text, p_holder text,
  p_now double precision, p_kind text, p_uid text, p_role text, p_content_kind text,
  p_content text, p_tool_calls text, p_tool_call_id text, p_tool_name text,
  p_finish_reason text, p_timestamp double precision, p_token_count bigint, p_meta text,
  p_fingerprint text, p_calls bigint, p_lock_timeout_ms integer, p_relaxed boolean,
{_OUTS}
LANGUAGE plpgsql SET enable_seqscan = off AS $f$
DECLARE pos bigint; new_id bigint;
BEGIN
{_CHECKS}  SELECT m.position INTO pos FROM messages m WHERE m.session_id = p_session
    ORDER BY m.position DESC LIMIT 1;
  pos := coalesce(pos, 0) + 1;
  INSERT INTO messages (session_id, uid, position, role, content_kind, content, tool_calls,
    tool_call_id, tool_name, finish_reason, timestamp, token_count, meta, fingerprint, kind)
  VALUES (p_session, p_uid, pos, p_role, p_content_kind, p_content, p_tool_calls,
    p_tool_call_id, p_tool_name, p_finish_reason, p_timestamp, p_token_count, p_meta,
    p_fingerprint, p_kind)
  ON CONFLICT (session_id, uid) DO NOTHING RETURNING id INTO new_id;
  status := 'ok';
  IF new_id IS NOT NULL THEN
    UPDATE sessions SET message_count = message_count + 1,
      tool_call_count = tool_call_count + p_calls, updated_at = p_now WHERE id = p_session;
    ids := ARRAY[new_id];
    next_position := pos + 1;
    RETURN;
  END IF;
  ids := ARRAY(SELECT m.id FROM messages m WHERE m.session_id = p_session AND m.uid = p_uid);
  next_position := pos;
  IF cardinality(ids) <> 1 THEN  -- the conflicting row is not visible yet (as p011)
    RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
      MESSAGE = 'a message uid is being stored concurrently';
  END IF;
END $f$;
"""


def append_body() -> str:
    """p011's `hermes_append` with the position read as a backward walk."""
    assert _MAX in _APPEND, "p011's position query changed: update p013"
    return _APPEND.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION").replace(_MAX, _LAST)


def p013_append_plans(conn: Any) -> None:
    """Index plans for the append functions whatever the table's size at
    plan time, and a flat `hermes_append_one` (see the module doc)."""
    conn.execute(append_body())
    conn.execute(_APPEND_ONE)
    conn.execute(f"ALTER FUNCTION hermes_append({_APPEND_ARGS}) SET enable_seqscan = off")
    conn.execute(f"ALTER FUNCTION hermes_insert_rows({_ARGS}) SET enable_seqscan = off")
