"""The PostgreSQL backend: the store API on a server many hosts share.

`open_url(url, ...)` is what `SessionDB.open(url=...)` (and
``$HERMES_STORE_URL``, ``hermes --store-url``) calls. psycopg is an
optional dependency (``pip install 'hermes-state[postgres]'``): without it
the open fails with a typed error that says how to install it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..base import InvalidInput
# None of these import psycopg: doctor reads a server's schema ledger, the
# CLI's transfer and its error lines use them with or without a server.
from .errors import connect_timeout, redact
from .migrations import applied as applied_migrations
from .migrations import pending as pending_migrations
from .migrations import unknown as unknown_migrations
from .search_schema import INDEXES as SEARCH_INDEXES
from .search_schema import TSV_COLUMN
from .transfer import TransferResult, count, ends, url_label
from .transfer import transfer as transfer_store  # the module keeps its name


def open_url(url: str, *, home: str | os.PathLike[str] | None = None,
             profile: str | None = None, **kwargs: Any) -> Any:
    """A `PgSessionDB` on ``url`` (``postgresql://`` or ``postgres://``)."""
    if not isinstance(url, str) or url.split("://", 1)[0] not in ("postgresql", "postgres"):
        raise InvalidInput("a store URL must start with postgresql:// (only PostgreSQL is "
                           "supported besides the SQLite file)")
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as e:
        raise InvalidInput(f"the PostgreSQL backend needs psycopg ({e.name} is missing): "
                           "pip install 'hermes-state[postgres]'") from e
    from .store import PgSessionDB
    return PgSessionDB(url, home=Path(home) if home is not None else None, profile=profile,
                       **kwargs)


__all__ = ["open_url", "connect_timeout", "redact", "applied_migrations", "pending_migrations",
           "unknown_migrations", "SEARCH_INDEXES", "TSV_COLUMN", "TransferResult", "count",
           "ends", "transfer_store", "url_label"]
