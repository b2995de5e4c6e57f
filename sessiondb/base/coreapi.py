"""What a feature module may use of a store core: the `Core` protocol.

Feature modules below the face (compaction, maintenance, export, stats, the
spool's writing side; see docs/architecture.md) run on either backend, so they take
this protocol, which both `StoreCore` (sessiondb/engine/core.py, one SQLite file)
and `PgCore` (sessiondb/pg/core.py, a connection pool) satisfy, never
`SessionDB`. SQLite-only features (search, search_maintenance) take
`StoreCore` itself. The face both backends share (sessiondb/face.py) is
written against it too. The connection a block yields is the backend's own
(apsw, or the `PgConn` adapter that speaks the same ``?`` SQL), hence Any.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable, Protocol


class Core(Protocol):
    """One open store handle's connections, clock and transactions: only what
    the feature modules and the shared face use, so a third backend knows
    what it must provide."""

    #: The store's file (SQLite) or its profile anchor (PostgreSQL): the
    #: spool, holder probes and error messages are placed by it.
    path: Path

    #: The clock given at open (unchecked; `now` checks what it returns).
    clock: Callable[[], float]

    def now(self) -> float:
        """The store's clock, checked: every time a row gets comes from here."""
        ...

    def write(self, *, patience: float | None = None) -> AbstractContextManager[Any]:
        """The one write transaction primitive (a savepoint when nested)."""
        ...

    def read(self) -> AbstractContextManager[Any]:
        """A connection that sees this thread's own uncommitted writes."""
        ...

    def snapshot(self) -> AbstractContextManager[Any]:
        """`read` in one read transaction: several statements, one commit."""
        ...

    def close(self) -> None:
        """Close every connection; safe to call more than once."""
        ...


__all__ = ["Core"]
