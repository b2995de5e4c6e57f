"""Turn leases: one holder may write a session's turn at a time.

A lease is a row (session, holder, expiry). Writes that name a holder check
it inside their own write transaction, so a lost lease means nothing of that
write lands.
"""
from __future__ import annotations

from dataclasses import dataclass

import apsw

from ..base import InvalidInput, LeaseLost
from . import sessions


@dataclass(frozen=True)
class Lease:
    session_id: str
    holder: str
    expires_at: float


def _current(conn: apsw.Connection, session_id: str, *,
             checking: bool = False) -> tuple[str, float] | None:
    sql = "SELECT holder, expires_at FROM leases WHERE session_id = ?"
    if checking:
        # A server connection (sessiondb/pg) adds FOR SHARE: the lease row stays
        # as checked until this write commits, so a takeover waits for it. On
        # SQLite the transaction's write lock already does that.
        sql += getattr(conn, "LEASE_LOCK", "")
    row = conn.execute(sql, (session_id,)).fetchone()
    return (row[0], row[1]) if row else None


MAX_TTL_S = 366 * 86400  # bounded, so expires_at stays a time every reader can format


def _validate(holder: str, ttl_s: float) -> None:
    if not isinstance(holder, str) or not holder:
        raise InvalidInput("a lease holder must be a non-empty string")
    if isinstance(ttl_s, bool) or not (isinstance(ttl_s, (int, float))
                                       and 0 < ttl_s <= MAX_TTL_S):
        raise InvalidInput("a lease ttl must be a positive number of seconds, at most "
                           f"{MAX_TTL_S:,} (a year)")


def acquire(conn: apsw.Connection, session_id: str, holder: str, ttl_s: float,
            now: float) -> Lease:
    """Take the lease if it is free, expired, or already ours."""
    _validate(holder, ttl_s)
    sessions.require(conn, session_id)
    cur = _current(conn, session_id)
    if cur and cur[0] != holder and cur[1] > now:
        raise LeaseLost(f"session {session_id!r} is leased by {cur[0]!r} "
                        f"for {cur[1] - now:.1f}s more")
    conn.execute("INSERT INTO leases(session_id, holder, expires_at, acquired_at)"
                 " VALUES (?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET"
                 " holder = excluded.holder, expires_at = excluded.expires_at,"
                 " acquired_at = excluded.acquired_at", (session_id, holder, now + ttl_s, now))
    return Lease(session_id, holder, now + ttl_s)


def refresh(conn: apsw.Connection, session_id: str, holder: str, ttl_s: float,
            now: float) -> Lease:
    """Extend our lease; an expired one still recorded as ours may be renewed."""
    _validate(holder, ttl_s)
    cur = _current(conn, session_id)
    if cur is None or cur[0] != holder:
        owner = "nobody" if cur is None else repr(cur[0])
        raise LeaseLost(f"cannot refresh: session {session_id!r} is held by {owner}")
    conn.execute("UPDATE leases SET expires_at = ? WHERE session_id = ?",
                 (now + ttl_s, session_id))
    return Lease(session_id, holder, now + ttl_s)


def release(conn: apsw.Connection, session_id: str, holder: str) -> bool:
    """Drop our lease; False when it was not ours (nothing changes then)."""
    conn.execute("DELETE FROM leases WHERE session_id = ? AND holder = ?", (session_id, holder))
    return conn.changes() > 0


def check(conn: apsw.Connection, session_id: str, holder: str, now: float) -> None:
    """Raise LeaseLost unless ``holder`` holds an unexpired lease."""
    refused = refusal(_current(conn, session_id, checking=True), session_id, holder, now)
    if refused is not None:
        raise refused


def refusal(found: tuple[str, float] | None, session_id: str, holder: str,
            now: float) -> LeaseLost | None:
    """Why the lease row ``found`` (holder, expiry) does not let ``holder``
    write, or None (also what a server-side check's answer is turned into)."""
    if found is None:
        return LeaseLost(f"{holder!r} holds no lease on session {session_id!r}")
    if found[0] != holder:
        return LeaseLost(f"session {session_id!r} is leased by {found[0]!r}, not {holder!r}")
    if found[1] <= now:
        return LeaseLost(f"the lease of {holder!r} on session {session_id!r} expired")
    return None
