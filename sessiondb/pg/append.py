"""An append as one call: the server-side functions of migration p011.

Measured on the statement path (bench/postgres.py, docs/benchmarks.md): a
commit-each append cost seven round trips (BEGIN with the lock timeout,
the session row lock, the position, the known uids, the INSERT, the
counters, COMMIT), and eight writers spent more time waiting for the
client and server to take turns than writing. `hermes_append` does the
same checks and writes in the same order inside one statement: lock the
session's row (``FOR UPDATE``: appends from every host queue on it, in one
order), check the lease (``FOR SHARE``, as leases.py does) when a holder
is named, read the next position, insert the rows whose uids are new
(``ON CONFLICT DO NOTHING``: idempotent by uid; a uid twice in one batch is
one row) and move the counters. Outside a transaction that statement is
its own transaction, so an append is one round trip; inside one it is one
statement of it. `hermes_insert_rows` is its last part, for the paths that
hold the lock and know the position already (imports, the spool).

Refusals come back as a status, not an exception, so Python raises the
very errors (and messages) the SQLite backend raises; nothing was written
then. The lock timeout (the call's patience) and the relaxed durability
(``synchronous_commit=off``) are set with ``set_config(..., true)``: for
this transaction only.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..rows import EncodedMessage

_ARRAYS = """p_uid text[], p_role text[], p_content_kind text[], p_content text[],
  p_tool_calls text[], p_tool_call_id text[], p_tool_name text[], p_finish_reason text[],
  p_timestamp double precision[], p_token_count bigint[], p_meta text[],
  p_fingerprint text[], p_calls bigint[]"""
_ARRAY_ARGS = ("p_uid, p_role, p_content_kind, p_content, p_tool_calls, p_tool_call_id,"
               " p_tool_name, p_finish_reason, p_timestamp, p_token_count, p_meta,"
               " p_fingerprint, p_calls")

# One message: one indexed INSERT (a known uid: one indexed SELECT). A
# batch: its stored uids in one indexed lookup, positions for the first
# occurrence of each new uid in the batch's order (array work, no table
# access), the new rows in one INSERT ... SELECT FROM unnest(), the ids
# back in the batch's order. Measured on this machine (server CPU per
# message, loaded): the batch form 0.13-0.15 ms in batches of 100 against
# 0.19-0.31 ms for a loop of one-row INSERTs, while for one message the
# row form is cheaper (0.8-0.9 against 1.05 ms); a first form that
# anti-joined the unnested rows against messages in a CTE took 2.5 ms a
# one-row call (pg_stat_user_functions), growing with the session's rows.
_INSERT_ROWS = f"""
CREATE FUNCTION hermes_insert_rows(p_session text, p_start bigint, p_now double precision,
  p_kind text, {_ARRAYS}, OUT ids bigint[], OUT next_position bigint)
LANGUAGE plpgsql AS $f$
DECLARE
  have text[]; have_ids bigint[]; seen text[]; pos bigint[] := '{{}}'; calls bigint := 0;
  new_uids text[] := '{{}}'; new_ids bigint[] := '{{}}';
BEGIN
  IF array_length(p_uid, 1) = 1 THEN  -- one message: one indexed INSERT, no array work
    INSERT INTO messages (session_id, uid, position, role, content_kind, content, tool_calls,
      tool_call_id, tool_name, finish_reason, timestamp, token_count, meta, fingerprint, kind)
    VALUES (p_session, p_uid[1], p_start, p_role[1], p_content_kind[1], p_content[1],
      p_tool_calls[1], p_tool_call_id[1], p_tool_name[1], p_finish_reason[1], p_timestamp[1],
      p_token_count[1], p_meta[1], p_fingerprint[1], p_kind)
    ON CONFLICT (session_id, uid) DO NOTHING RETURNING ARRAY[id] INTO ids;
    next_position := p_start + 1;
    IF ids IS NULL THEN
      ids := ARRAY(SELECT m.id FROM messages m WHERE m.session_id = p_session
                   AND m.uid = p_uid[1]);
      next_position := p_start;
    ELSE
      UPDATE sessions SET message_count = message_count + 1,
        tool_call_count = tool_call_count + p_calls[1], updated_at = p_now WHERE id = p_session;
    END IF;
    IF cardinality(ids) = 1 THEN
      RETURN;
    END IF;  -- the conflicting row is not visible: as below
    RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
      MESSAGE = 'a message uid is being stored concurrently';
  END IF;
  SELECT coalesce(array_agg(m.uid), '{{}}'), coalesce(array_agg(m.id), '{{}}')
    INTO have, have_ids FROM messages m WHERE m.session_id = p_session AND m.uid = ANY(p_uid);
  seen := have;
  next_position := p_start;
  FOR i IN 1 .. coalesce(array_length(p_uid, 1), 0) LOOP
    IF p_uid[i] = ANY(seen) THEN
      pos := pos || NULL::bigint;  -- stored, or earlier in this batch: no new row
    ELSE
      seen := seen || p_uid[i];
      pos := pos || next_position;
      next_position := next_position + 1;
      calls := calls + p_calls[i];
    END IF;
  END LOOP;
  IF next_position > p_start THEN
    WITH ins AS (
      INSERT INTO messages (session_id, uid, position, role, content_kind, content, tool_calls,
        tool_call_id, tool_name, finish_reason, timestamp, token_count, meta, fingerprint, kind)
      SELECT p_session, t.uid, t.pos, t.role, t.content_kind, t.content, t.tool_calls,
        t.tool_call_id, t.tool_name, t.finish_reason, t.ts, t.token_count, t.meta,
        t.fingerprint, p_kind
      FROM unnest(p_uid, p_role, p_content_kind, p_content, p_tool_calls, p_tool_call_id,
        p_tool_name, p_finish_reason, p_timestamp, p_token_count, p_meta, p_fingerprint, pos)
        AS t(uid, role, content_kind, content, tool_calls, tool_call_id, tool_name,
             finish_reason, ts, token_count, meta, fingerprint, pos)
      WHERE t.pos IS NOT NULL ORDER BY t.pos
      ON CONFLICT (session_id, uid) DO NOTHING RETURNING uid, id)
    SELECT coalesce(array_agg(ins.uid), '{{}}'), coalesce(array_agg(ins.id), '{{}}')
      INTO new_uids, new_ids FROM ins;
    IF coalesce(array_length(new_uids, 1), 0) <> next_position - p_start THEN
      -- A row with one of these uids is being stored by a writer that did not
      -- lock the session: re-run the whole transaction (the caller retries).
      RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
        MESSAGE = 'a message uid is being stored concurrently';
    END IF;
    UPDATE sessions SET message_count = message_count + (next_position - p_start),
      tool_call_count = tool_call_count + calls, updated_at = p_now WHERE id = p_session;
  END IF;
  ids := (SELECT coalesce(array_agg(k.id ORDER BY u.ord), '{{}}')
            FROM unnest(p_uid) WITH ORDINALITY AS u(uid, ord)
            JOIN unnest(have || new_uids, have_ids || new_ids) AS k(uid, id) ON k.uid = u.uid);
END $f$;
"""

# What every append function answers, and the checks it makes first, in
# this order: the call's lock timeout and durability, the session row
# locked (or 'no_session'), the lease checked FOR SHARE (or 'lease').
_OUTS = """  OUT status text, OUT ids bigint[], OUT next_position bigint, OUT lease_holder text,
  OUT lease_expires double precision)"""
_CHECKS = """  IF p_lock_timeout_ms IS NOT NULL THEN
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text, true);
  END IF;
  IF p_relaxed THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  PERFORM 1 FROM sessions WHERE id = p_session FOR UPDATE;
  IF NOT FOUND THEN
    status := 'no_session';
    RETURN;
  END IF;
  IF p_holder IS NOT NULL THEN
    SELECT l.holder, l.expires_at INTO lease_holder, lease_expires FROM leases l
      WHERE l.session_id = p_session FOR SHARE;
    IF lease_holder IS NULL OR lease_holder <> p_holder OR lease_expires <= p_now THEN
      status := 'lease';
      RETURN;
    END IF;
  END IF;
"""

_APPEND = f"""
CREATE FUNCTION hermes_append(p_session text, p_holder text, p_now double precision,
  p_kind text, {_ARRAYS}, p_lock_timeout_ms integer, p_relaxed boolean,
{_OUTS}
LANGUAGE plpgsql AS $f$
DECLARE top bigint;
BEGIN
{_CHECKS}  SELECT max(m.position) INTO top FROM messages m WHERE m.session_id = p_session;
  SELECT r.ids, r.next_position INTO ids, next_position
    FROM hermes_insert_rows(p_session, coalesce(top, 0) + 1, p_now, p_kind, {_ARRAY_ARGS}) r;
  status := 'ok';
END $f$;
"""


# One message as 13 scalars: the client then sends plain values, which
# psycopg dumps in C, instead of 13 one-element arrays (measured: the array
# dumpers were a third of the client's CPU of a commit-each append).
_SCALARS = """p_uid text, p_role text, p_content_kind text, p_content text,
  p_tool_calls text, p_tool_call_id text, p_tool_name text, p_finish_reason text,
  p_timestamp double precision, p_token_count bigint, p_meta text, p_fingerprint text,
  p_calls bigint"""
_APPEND_ONE = f"""
CREATE FUNCTION hermes_append_one(p_session text, p_holder text, p_now double precision,
  p_kind text, {_SCALARS}, p_lock_timeout_ms integer, p_relaxed boolean,
{_OUTS}
LANGUAGE sql AS $f$
  SELECT * FROM hermes_append(p_session, p_holder, p_now, p_kind, ARRAY[p_uid], ARRAY[p_role],
    ARRAY[p_content_kind], ARRAY[p_content], ARRAY[p_tool_calls], ARRAY[p_tool_call_id],
    ARRAY[p_tool_name], ARRAY[p_finish_reason], ARRAY[p_timestamp], ARRAY[p_token_count],
    ARRAY[p_meta], ARRAY[p_fingerprint], ARRAY[p_calls], p_lock_timeout_ms, p_relaxed) $f$;
"""


def p011_append_function(conn: Any) -> None:
    """One-call appends: `hermes_insert_rows`, `hermes_append` and its
    one-message form `hermes_append_one` (see the module doc)."""
    conn.execute(_INSERT_ROWS)
    conn.execute(_APPEND)
    conn.execute(_APPEND_ONE)


_ARRAY_PARAMS = ", ".join(["%s::text[]"] * 8 + ["%s::float8[]", "%s::int8[]", "%s::text[]",
                                                 "%s::text[]", "%s::int8[]"])
APPEND_SQL = ("SELECT status, ids, next_position, lease_holder, lease_expires FROM"
              f" hermes_append(%s, %s, %s, %s, {_ARRAY_PARAMS}, %s, %s)")
_SCALAR_PARAMS = ", ".join(["%s::text"] * 8 + ["%s::float8", "%s::int8", "%s::text",
                                               "%s::text", "%s::int8"])
APPEND_ONE_SQL = ("SELECT status, ids, next_position, lease_holder, lease_expires FROM"
                  f" hermes_append_one(%s, %s, %s, %s, {_SCALAR_PARAMS}, %s, %s)")
INSERT_ROWS_SQL = ("SELECT ids, next_position FROM"
                   f" hermes_insert_rows(%s, %s, %s, %s, {_ARRAY_PARAMS})")


def columns(encoded: Sequence[EncodedMessage]) -> list[list[Any]]:
    """The batch as the functions' 13 arrays, one per column."""
    return [[e.uid for e in encoded], [e.role for e in encoded],
            [e.content_kind for e in encoded], [e.content for e in encoded],
            [e.tool_calls for e in encoded], [e.tool_call_id for e in encoded],
            [e.tool_name for e in encoded], [e.finish_reason for e in encoded],
            [e.timestamp for e in encoded], [e.token_count for e in encoded],
            [e.meta for e in encoded], [e.fingerprint for e in encoded],
            [e.tool_call_total for e in encoded]]


def call_append(raw: Any, session_id: str, holder: str | None, now: float, kind: str,
                encoded: Sequence[EncodedMessage], lock_timeout_ms: int | None,
                relaxed: bool) -> tuple[str, list[int], int, str | None, float | None]:
    """(status, ids, next position, lease holder, lease expiry) of one
    `hermes_append` on a psycopg connection."""
    if len(encoded) == 1:
        e = encoded[0]
        row = raw.execute(APPEND_ONE_SQL, (
            session_id, holder, now, kind, e.uid, e.role, e.content_kind, e.content,
            e.tool_calls, e.tool_call_id, e.tool_name, e.finish_reason, e.timestamp,
            e.token_count, e.meta, e.fingerprint, e.tool_call_total, lock_timeout_ms,
            relaxed)).fetchone()
    else:
        row = raw.execute(APPEND_SQL, (session_id, holder, now, kind, *columns(encoded),
                                       lock_timeout_ms, relaxed)).fetchone()
    return row[0], list(row[1] or ()), row[2], row[3], row[4]


def call_insert_rows(raw: Any, session_id: str, start: int, now: float, kind: str,
                     encoded: Sequence[EncodedMessage]) -> tuple[list[int], int]:
    """(ids in the batch's order, next position) of one `hermes_insert_rows`."""
    ids, after = raw.execute(INSERT_ROWS_SQL, (session_id, start, now, kind,
                                               *columns(encoded))).fetchone()
    return list(ids), after
