"""PostgreSQL failures as the store's typed errors, decided by SQLSTATE.

The same `Cause`s as SQLite's (errors.py), so the copy table, the spool and
every caller treat both backends alike. Only the SQLSTATE (and, for a
connection that failed before the server said anything, the exception
class) is looked at, never message text. `redact` keeps passwords out of
every message and path a URL appears in.
"""
from __future__ import annotations

import os
import re
from typing import Any

from ..base import (DiskFull, InvalidInput, StorageError, StoreCorrupt, StoreIOError, StoreLocked,
                    StoreNotFound, StoreReadOnly)

#: Retried with backoff (the transaction re-run) until the call's patience.
RETRYABLE = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected

_BY_STATE: dict[str, type[StorageError]] = {
    "40001": StoreLocked, "40P01": StoreLocked,
    "55P03": StoreLocked,     # lock_not_available: lock_timeout (the patience) ran out
    "57014": StoreLocked,     # query_canceled: statement_timeout
    "53100": DiskFull,        # disk_full
    "25006": StoreReadOnly,   # read_only_sql_transaction: a hot standby
    "42501": StoreReadOnly,   # insufficient_privilege: this role may not write
    "3D000": StoreNotFound,   # invalid_catalog_name: no such database
    "XX001": StoreCorrupt,    # data_corrupted
    "XX002": StoreCorrupt,    # index_corrupted
}
# Whole classes: connection exceptions, shutdown, resources, bad data.
_BY_CLASS: dict[str, type[StorageError]] = {
    "08": StoreIOError, "57": StoreIOError, "58": StoreIOError, "53": StoreIOError,
    "28": StoreReadOnly, "22": InvalidInput,
}

_PASSWORD = re.compile(r"(://[^:/@?#]*):[^@/?#]*@")

#: Seconds a connection attempt may take before the server counts as
#: unreachable (``$HERMES_PG_CONNECT_TIMEOUT``, or the URL's own
#: ``connect_timeout``): a closed port or a dead host is reported in
#: seconds, not after a command's whole patience.
DEFAULT_CONNECT_TIMEOUT_S = 3
_URL_TIMEOUT = re.compile(r"(?i)[?&]connect_timeout=(\d+)")


def connect_timeout(url: str) -> int:
    """The connect timeout for ``url`` in whole seconds (libpq's unit), >= 1."""
    found = _URL_TIMEOUT.search(url)
    raw = found.group(1) if found else os.environ.get("HERMES_PG_CONNECT_TIMEOUT")
    try:
        value = int(float(raw)) if raw else DEFAULT_CONNECT_TIMEOUT_S
    except ValueError:
        raise InvalidInput(f"HERMES_PG_CONNECT_TIMEOUT must be a number of seconds, not "
                           f"{raw!r}") from None
    return max(1, value)


def redact(url: str) -> str:
    """``url`` without its password (``postgresql://user@host/db``)."""
    text = _PASSWORD.sub(r"\1@", url)
    return re.sub(r"(?i)(password=)[^&\s]*", r"\1***", text)


def sqlstate(exc: BaseException) -> str | None:
    return getattr(exc, "sqlstate", None)


def from_pg(exc: BaseException, *, url: str, context: str = "") -> StorageError:
    """The typed error for a psycopg (or pool) exception."""
    if isinstance(exc, StorageError):
        return exc
    import psycopg
    state = sqlstate(exc)
    cls: type[StorageError] = StorageError
    if state is not None:
        cls = _BY_STATE.get(state) or _BY_CLASS.get(state[:2], StorageError)
    elif isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) or \
            _is_pool_timeout(exc):
        cls = StoreIOError  # the connection failed or was lost: no SQLSTATE came back
    elif isinstance(exc, psycopg.DataError):
        cls = InvalidInput
    detail = " ".join(str(exc).split()) or type(exc).__name__
    text = f"{context}: {detail}" if context else detail
    err = cls(f"{text} (PostgreSQL store {redact(url)})", path=redact(url))
    err.sqlstate = state  # type: ignore[attr-defined]
    return err


def _is_pool_timeout(exc: BaseException) -> bool:
    from psycopg_pool import PoolTimeout
    return isinstance(exc, PoolTimeout)


def is_retryable(exc: BaseException) -> bool:
    return sqlstate(exc) in RETRYABLE


def is_connection_loss(err: Any) -> bool:
    return isinstance(err, StoreIOError)


class NotOnPostgreSQL(InvalidInput):
    """The operation belongs to the SQLite backend (its file, pages or WAL)."""

