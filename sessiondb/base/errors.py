"""Typed storage errors, built from apsw's exception class and extended code.

Every error the store raises is a `StorageError` carrying a `cause` (one of
`Cause`), a stable `code`, the `path` of the store and, when SQLite produced
it, the extended `sqlite_code`. The mapping from apsw exceptions looks only
at the exception class and result codes, never at message text.
"""
from __future__ import annotations

import enum
import errno
import os
from typing import Any

import apsw


class Cause(str, enum.Enum):
    """Why a storage operation failed; the key of the explanation table."""

    CORRUPT = "corrupt"
    FTS_INDEX = "fts_index"
    LOCKED = "locked"
    #: A search-index rebuild refused because another process has the store
    #: open: nothing is damaged or busy, the rebuild needs the store alone.
    REBUILD_REFUSED = "rebuild_refused"
    #: Another maintenance operation (optimize, prune, archive) refused for the
    #: same reason: another process has the store open.
    HELD = "held"
    DISK_FULL = "disk_full"
    READONLY = "readonly"
    IO_ERROR = "io_error"
    REPLACED = "replaced"
    LEASE_LOST = "lease_lost"
    NOT_FOUND = "not_found"
    FOREIGN = "foreign"
    INVALID_INPUT = "invalid_input"
    UNKNOWN = "unknown"


class StorageError(Exception):
    """Base of every error raised by sessiondb."""

    cause: Cause = Cause.UNKNOWN
    #: Where the messages of a failed write were kept (see sessiondb.importers.spool_import).
    spooled_to: str | None = None
    #: Messages of a failed write that could not be spooled either: saved
    #: nowhere, so they are handed back to the caller (never silently dropped).
    unsaved: tuple[dict[str, Any], ...] = ()
    #: A copy of what a quarantined handle could still read (deleted -wal).
    rescued_to: str | None = None
    #: False for failures of other files (an export's output): the store's
    #: explanation table does not apply to them.
    concerns_store: bool = True

    def __init__(self, message: str, *, path: str | None = None,
                 sqlite_code: int | None = None, cause: Cause | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.sqlite_code = sqlite_code
        if cause is not None:
            self.cause = cause

    @property
    def code(self) -> str:
        """Stable machine code, e.g. ``storage_corrupt``."""
        return f"storage_{self.cause.value}"


class StoreCorrupt(StorageError):
    """The database file is structurally damaged."""

    cause = Cause.CORRUPT


class SearchIndexCorrupt(StorageError):
    """Only the derived full-text index is damaged; canonical rows are fine."""

    cause = Cause.FTS_INDEX


class StoreLocked(StorageError):
    """Another connection held the write lock past this call's patience."""

    cause = Cause.LOCKED


class DiskFull(StorageError):
    """The filesystem (or a size limit) refused to grow the database."""

    cause = Cause.DISK_FULL


class StoreReadOnly(StorageError):
    """The file, directory or filesystem does not allow writing."""

    cause = Cause.READONLY


class ReadOnlyHandle(StoreReadOnly):
    """A write through a handle opened with ``read_only=True``: refused before
    anything reaches the store (and, unlike a read-only disk, nothing is
    spooled: the caller asked for a handle that never writes)."""

    @property
    def code(self) -> str:
        return "storage_read_only_handle"


class StoreIOError(StorageError):
    """The operating system reported an I/O failure."""

    cause = Cause.IO_ERROR


class StoreReplaced(StorageError):
    """The file under an open handle was replaced or its WAL removed."""

    cause = Cause.REPLACED


class LeaseLost(StorageError):
    """The writer's turn lease is missing, expired or held by someone else."""

    cause = Cause.LEASE_LOST


class SessionNotFound(StorageError):
    """The named session does not exist."""

    cause = Cause.NOT_FOUND


class StoreNotFound(StorageError):
    """The database path does not exist or cannot be opened as a file."""

    cause = Cause.NOT_FOUND


class ForeignStore(StorageError):
    """The file is another program's database; hermes never changes it.

    ``kind`` and ``label`` come from `identify.Identity` (e.g. ``hermes-agent``,
    "Hermes Agent state.db, schema v31"); ``applies`` names the commands
    that do work on it (``inspect``, ``recover``, ``import``)."""

    cause = Cause.FOREIGN

    def __init__(self, message: str, *, kind: str = "sqlite", label: str = "",
                 applies: tuple[str, ...] = (), **kw: Any) -> None:
        super().__init__(message, **kw)
        self.kind = kind
        self.label = label
        self.applies = applies


class InvalidMessage(StorageError):
    """A message (or one of its fields) cannot be stored as given."""

    cause = Cause.INVALID_INPUT

    def __init__(self, message: str, *, field: str | None = None,
                 index: int | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.field = field
        self.index = index


class InvalidInput(StorageError):
    """An argument (session id, path, option) is not acceptable."""

    cause = Cause.INVALID_INPUT


class InvalidQuery(InvalidInput):
    """Search text that cannot be turned into a query (the message says why)."""


class SessionTooLong(StorageError):
    """A session has more rows than a whole load may return; page it or stream it."""

    cause = Cause.INVALID_INPUT

    def __init__(self, message: str, *, session_id: str, rows: int, limit: int,
                 command: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.session_id, self.rows, self.limit, self.command = session_id, rows, limit, command


class SearchRebuildRefused(StorageError):
    """Rebuilding the search index is unsafe now: another process holds the store."""

    cause = Cause.REBUILD_REFUSED

    def __init__(self, message: str, *, holders: list[int] | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.holders = holders or []


class UnsafeSQLiteVersion(StorageError):
    """The SQLite library is in the WAL-reset corruption band."""

    cause = Cause.UNKNOWN

    @property
    def code(self) -> str:
        return "storage_unsafe_sqlite"


class SchemaTooNew(StorageError):
    """The file was written by a newer hermes-state than this one."""

    cause = Cause.UNKNOWN

    @property
    def code(self) -> str:
        return "storage_schema_too_new"


class SchemaTooOld(StorageError):
    """A read-only open of a store whose schema this version cannot read
    before its pending migrations run (the message names the command)."""

    cause = Cause.UNKNOWN

    @property
    def code(self) -> str:
        return "storage_schema_too_old"


# apsw exception class -> our class. Order matters only for subclasses.
_BY_CLASS: tuple[tuple[type[BaseException], type[StorageError]], ...] = (
    (apsw.BusyError, StoreLocked),
    (apsw.LockedError, StoreLocked),
    (apsw.FullError, DiskFull),
    (apsw.ReadOnlyError, StoreReadOnly),
    (apsw.NotADBError, StoreCorrupt),
    (apsw.CorruptError, StoreCorrupt),
    (apsw.IOError, StoreIOError),
    (apsw.CantOpenError, StoreNotFound),
    (apsw.PermissionsError, StoreReadOnly),
)

# Extended codes that mean something other than their primary class says.
_BY_EXTENDED: dict[int, type[StorageError]] = {
    apsw.SQLITE_CORRUPT_VTAB: SearchIndexCorrupt,
    apsw.SQLITE_IOERR_NOMEM: StorageError,
    apsw.SQLITE_READONLY_DBMOVED: StoreReplaced,
    # Growing the -shm failed: in practice the filesystem is full (the unix
    # VFS reports ENOSPC from its allocation as this code, not SQLITE_FULL).
    apsw.SQLITE_IOERR_SHMSIZE: DiskFull,
}

# The OS errno SQLite saw (sqlite3_system_errno) behind an open or I/O error:
# a full or read-only filesystem is not a failing disk or a missing file.
_BY_ERRNO: dict[int, type[StorageError]] = {
    errno.ENOSPC: DiskFull, errno.EDQUOT: DiskFull,
    errno.EROFS: StoreReadOnly, errno.EACCES: StoreReadOnly, errno.EPERM: StoreReadOnly,
}


def extended_code(exc: BaseException) -> int | None:
    """The extended result code apsw attached to ``exc``, if any."""
    code = getattr(exc, "extendedresult", None)
    return code if isinstance(code, int) else None


def on_readonly_mount(path: str | os.PathLike[str]) -> bool:
    """True when the nearest existing directory of ``path`` is on a read-only mount."""
    p = os.path.abspath(os.fspath(path))
    while p and not os.path.isdir(p):
        parent = os.path.dirname(p)
        if parent == p:
            return False
        p = parent
    try:
        return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def connection_errno(conn: Any) -> int | None:
    """The OS errno behind the connection's last failure (None when unknown)."""
    try:
        value = conn.system_errno
    except (AttributeError, apsw.Error):
        return None
    return value or None


def from_apsw(exc: BaseException, *, path: str | None = None,
              context: str = "", system_errno: int | None = None) -> StorageError:
    """Build the typed error for an apsw exception (class and codes only).

    ``system_errno`` (the connection's ``system_errno`` right after the
    failure) refines an I/O or open error whose errno says disk full or
    read-only."""
    if isinstance(exc, StorageError):
        return exc
    code = extended_code(exc)
    cls: type[StorageError] = StorageError
    if code is not None and code in _BY_EXTENDED:
        cls = _BY_EXTENDED[code]
    else:
        for apsw_cls, ours in _BY_CLASS:
            if isinstance(exc, apsw_cls):
                cls = ours
                break
    if cls in (StoreIOError, StoreNotFound):
        if system_errno in _BY_ERRNO:
            cls = _BY_ERRNO[system_errno]  # type: ignore[index]
        elif cls is StoreNotFound and path is not None and on_readonly_mount(path):
            cls = StoreReadOnly  # the -shm could not be created: ENOENT, not "missing"
    text = f"{context}: {exc}" if context else str(exc)
    return cls(text, path=path, sqlite_code=code)
