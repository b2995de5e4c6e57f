"""The usage ledger: model usage per (session, task, model, provider).

A session's own counters (``sessions.input_tokens`` ...) keep counting the
tokens of its turns only. The ledger also records what other model calls
made on the session's behalf cost: micro-compaction's summaries, titles,
the background review. ``task`` names the kind of call (``turn``,
``compaction``, ``title``, ``background_review``, ...); one row per key is
kept and added to, so the table stays as small as the number of distinct
(task, model) pairs a session used.

Functions here take a connection the caller has put in a transaction.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

import apsw

from ..base import InvalidInput

TASK_TURN = "turn"
_TASK_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
COUNTERS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
            "reasoning_tokens", "api_calls")

DDL = """
CREATE TABLE usage_ledger (
    session_id         TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    task               TEXT NOT NULL,
    model              TEXT NOT NULL DEFAULT '',
    provider           TEXT NOT NULL DEFAULT '',
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens   INTEGER NOT NULL DEFAULT 0,
    api_calls          INTEGER NOT NULL DEFAULT 0,
    cost_usd           REAL,
    first_at           REAL NOT NULL,
    last_at            REAL NOT NULL,
    PRIMARY KEY (session_id, task, model, provider)
);
"""


def install(conn: apsw.Connection) -> None:
    """The ledger table (migration m007_usage_ledger)."""
    conn.execute(DDL)


@dataclass(frozen=True)
class UsageRow:
    """Usage of one (task, model, provider), for a session or summed over many."""

    task: str
    model: str
    provider: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    api_calls: int
    cost_usd: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _counts(values: dict[str, Any]) -> list[int]:
    out = []
    for name in COUNTERS:
        v = values.get(name, 0) or 0
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise InvalidInput(f"{name} must be a non-negative integer, not {v!r}")
        out.append(v)
    return out


def validate_task(task: object) -> str:
    if not isinstance(task, str) or not _TASK_RE.match(task):
        raise InvalidInput(f"invalid usage task {task!r}: lower-case letters, digits and '_'")
    return task


def add(conn: apsw.Connection, session_id: str, now: float, *, task: str,
        model: str | None, provider: str | None, cost_usd: float | None = None,
        **counters: Any) -> bool:
    """Add one call's (or one turn's) usage to the ledger row of its key.

    Returns False (and writes nothing) when every counter is zero. An
    unknown cost stays unknown (NULL) until some call reports one.
    """
    validate_task(task)
    unknown = set(counters) - set(COUNTERS)
    if unknown:
        raise InvalidInput(f"unknown usage counters: {', '.join(sorted(unknown))}")
    values = _counts(counters)
    if not any(values) and not cost_usd:
        return False
    conn.execute(
        "INSERT INTO usage_ledger(session_id, task, model, provider, input_tokens,"
        " output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, api_calls,"
        " cost_usd, first_at, last_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(session_id, task, model, provider) DO UPDATE SET"
        "  input_tokens = usage_ledger.input_tokens + excluded.input_tokens,"
        "  output_tokens = usage_ledger.output_tokens + excluded.output_tokens,"
        "  cache_read_tokens = usage_ledger.cache_read_tokens + excluded.cache_read_tokens,"
        "  cache_write_tokens = usage_ledger.cache_write_tokens + excluded.cache_write_tokens,"
        "  reasoning_tokens = usage_ledger.reasoning_tokens + excluded.reasoning_tokens,"
        "  api_calls = usage_ledger.api_calls + excluded.api_calls,"
        "  cost_usd = CASE WHEN usage_ledger.cost_usd IS NULL AND excluded.cost_usd IS NULL"
        "             THEN NULL ELSE coalesce(usage_ledger.cost_usd, 0)"
        "             + coalesce(excluded.cost_usd, 0) END,"
        "  last_at = excluded.last_at",
        (session_id, task, model or "", provider or "", *values, cost_usd, now, now))
    return True


_SUMS = ", ".join(f"sum({c})" for c in COUNTERS)
_GROUP = (f"SELECT task, model, provider, {_SUMS}, "
          "CASE WHEN count(cost_usd) = 0 THEN NULL ELSE sum(cost_usd) END FROM usage_ledger")


def for_session(conn: apsw.Connection, session_id: str) -> list[UsageRow]:
    """A session's ledger rows, turns first, then tasks by name."""
    sql = (f"{_GROUP} WHERE session_id = ? GROUP BY task, model, provider "
           "ORDER BY task != 'turn', task, model, provider")
    return [UsageRow(*r) for r in conn.execute(sql, (session_id,))]


def totals(conn: apsw.Connection) -> list[UsageRow]:
    """The whole store's usage by task, model and provider."""
    sql = (f"{_GROUP} GROUP BY task, model, provider "
           "ORDER BY task != 'turn', task, model, provider")
    return [UsageRow(*r) for r in conn.execute(sql)]


def summary(rows: list[UsageRow]) -> dict[str, Any]:
    """The JSON shape `sessions show --usage` and `sessions stats` print."""
    total = {c: sum(getattr(r, c) for r in rows) for c in COUNTERS}
    costs = [r.cost_usd for r in rows if r.cost_usd is not None]
    total["cost_usd"] = sum(costs) if costs else None
    by_task: dict[str, dict[str, int]] = {}
    for r in rows:
        t = by_task.setdefault(r.task, dict.fromkeys(COUNTERS, 0))
        for c in COUNTERS:
            t[c] += getattr(r, c)
    return {"rows": [r.to_dict() for r in rows], "by_task": by_task, "total": total}


def record_turn(conn: apsw.Connection, session_id: str, now: float, *,
                model: str | None = None, provider: str | None = None,
                cost_usd: float | None = None, **counters: Any) -> bool:
    """The ledger row of a turn; the model defaults to the session's."""
    if model is None:
        row = conn.execute("SELECT model FROM sessions WHERE id = ?", (session_id,)).fetchone()
        model = row[0] if row else None
    counters.setdefault("api_calls", 0)
    return add(conn, session_id, now, task=TASK_TURN, model=model, provider=provider,
               cost_usd=cost_usd, **counters)


# -- carried by export and import ------------------------------------------------

LEDGER_FIELDS = ("task", "model", "provider", *COUNTERS, "cost_usd", "first_at", "last_at")


def ledger_rows(conn: apsw.Connection, session_id: str) -> list[dict[str, Any]]:
    """A session's ledger rows as stored, by key (what an export carries)."""
    sql = (f"SELECT {', '.join(LEDGER_FIELDS)} FROM usage_ledger WHERE session_id = ?"
           " ORDER BY task, model, provider")
    return [dict(zip(LEDGER_FIELDS, r)) for r in conn.execute(sql, (session_id,))]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_ledger_row(row: Any) -> dict[str, Any]:
    """One exported ledger row, each field of the right type; counters, cost
    and times may be absent (zero, unknown, the import's time)."""
    if not isinstance(row, dict):
        raise InvalidInput("a usage row must be an object")
    unknown = sorted(set(row) - set(LEDGER_FIELDS))
    if unknown:
        raise InvalidInput(f"usage row has unknown fields: {', '.join(unknown)}")
    validate_task(row.get("task"))
    for key in ("model", "provider"):
        if not isinstance(row.get(key, ""), str):
            raise InvalidInput(f"usage row {key!r} must be a string")
    _counts(row)
    cost = row.get("cost_usd")
    if cost is not None and not (_is_number(cost) and cost >= 0):
        raise InvalidInput("usage row 'cost_usd' must be a non-negative number or null")
    for key in ("first_at", "last_at"):
        if row.get(key) is not None and not _is_number(row[key]):
            raise InvalidInput(f"usage row {key!r} must be a number")
    return {k: row.get(k) for k in LEDGER_FIELDS}


def check_ledger_rows(rows: Any) -> tuple[dict[str, Any], ...]:
    """A session's exported ledger rows: a list of rows, each key once."""
    if not isinstance(rows, list):
        raise InvalidInput("'usage' must be a list of ledger rows")
    checked = tuple(check_ledger_row(r) for r in rows)
    keys = {(r["task"], r["model"] or "", r["provider"] or "") for r in checked}
    if len(keys) != len(checked):
        raise InvalidInput("'usage' lists a (task, model, provider) more than once")
    return checked


def import_rows(conn: apsw.Connection, session_id: str, rows: tuple[dict[str, Any], ...],
                now: float, *, dry_run: bool = False) -> int:
    """Add the rows whose (task, model, provider) the session's ledger lacks;
    a row it has is kept as it is, so importing the same rows again adds
    nothing. Returns how many were (or, ``dry_run``, would be) added."""
    added = 0
    for r in rows:
        key = (session_id, r["task"], r["model"] or "", r["provider"] or "")
        if dry_run:
            added += conn.execute(
                "SELECT 1 FROM usage_ledger WHERE session_id = ? AND task = ? AND model = ?"
                " AND provider = ?", key).fetchone() is None
            continue
        first = r["first_at"] if r["first_at"] is not None else now
        conn.execute(
            "INSERT INTO usage_ledger(session_id, task, model, provider, input_tokens,"
            " output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, api_calls,"
            " cost_usd, first_at, last_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(session_id, task, model, provider) DO NOTHING",
            (*key, *_counts(r), r["cost_usd"], first,
             r["last_at"] if r["last_at"] is not None else first))
        added += conn.changes()
    return added
