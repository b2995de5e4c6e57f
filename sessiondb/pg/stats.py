"""Store statistics of a PostgreSQL store: the keys `sessiondb.maintenance.stats` gives
for a SQLite file, with the server's measures where a file's would be.

``pages`` and ``files`` describe a SQLite file and are None here; ``fts``
says no index exists yet (search on PostgreSQL is built separately);
``postgresql`` has the database's size and the server's version.
"""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

from ..maintenance import STATES
from ..rows import usage

if TYPE_CHECKING:
    from .core import PgCore


def store_stats(core: "PgCore") -> dict[str, Any]:
    """One document describing the store (keys documented in docs/cli.md)."""
    with core.snapshot() as conn:
        (count,) = conn.execute("SELECT count(*) FROM sessions").fetchone()
        by_state = dict.fromkeys(STATES, 0)
        by_state.update(conn.execute("SELECT state, count(*) FROM messages GROUP BY state"))
        spent = usage.summary(usage.totals(conn))  # type: ignore[arg-type]  # the adapter
        size, version = conn.execute(
            "SELECT pg_database_size(current_database()), current_setting('server_version')"
        ).fetchone()
    return {
        "path": core.shown, "sessions": count, "messages": sum(by_state.values()),
        "messages_by_state": by_state, "pages": None,
        "fts": {"tables": [], "bytes": 0, "method": "none"}, "usage": spent, "files": None,
        "postgresql": {"database_bytes": size, "server_version": version},
    }
