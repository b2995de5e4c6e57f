"""sessiondb: a WAL-aware SQLite store for agent sessions and transcripts."""
from .codec import MARKER_KEY, UID_KEY, Persisted, strip_markers
from .errors import (Cause, DiskFull, InvalidInput, InvalidMessage, InvalidQuery, LeaseLost,
                     SchemaTooNew, SearchIndexCorrupt, SearchRebuildRefused, SessionNotFound,
                     StorageError,
                     StoreCorrupt, StoreIOError, StoreLocked, StoreNotFound, StoreReadOnly,
                     StoreReplaced, UnsafeSQLiteVersion)
from .leases import Lease
from .paths import resolve_home, store_path
from .search import SearchHit
from .search_maintenance import SearchHealth
from .sessions import Session
from .store import SessionDB

__version__ = "0.1.0"

__all__ = [
    "SessionDB", "Session", "Lease", "Persisted", "MARKER_KEY", "UID_KEY", "strip_markers",
    "resolve_home", "store_path", "Cause", "StorageError", "StoreCorrupt", "SearchIndexCorrupt",
    "StoreLocked", "DiskFull", "StoreReadOnly", "StoreIOError", "StoreReplaced", "LeaseLost",
    "SessionNotFound", "StoreNotFound", "InvalidMessage", "InvalidInput", "SchemaTooNew",
    "UnsafeSQLiteVersion", "__version__", "SearchHit", "SearchHealth", "InvalidQuery",
    "SearchRebuildRefused",
]
