"""sessiondb: a WAL-aware SQLite store for agent sessions and transcripts."""
from .base import (Cause, DiskFull, FILE_MODE, ForeignStore, InvalidInput, InvalidMessage,
                   InvalidQuery, LeaseLost, MessageState, ReadOnlyHandle, SchemaTooNew,
                   SchemaTooOld, SearchIndexCorrupt,
                   SearchRebuildRefused, SessionNotFound, SessionTooLong, StorageError,
                   StorageFailure, StoreCorrupt, StoreIOError, StoreLocked, StoreNotFound,
                   StoreReadOnly, StoreReplaced, UnsafeSQLiteVersion, classify, describe,
                   describe_error, ensure_private_dir, private_output, resolve_home, store_path)
from .face import StoreFace
from .importers import import_spool
from .rows import (CompactionError, CompactionNotFound, CompactionResult, Lease, MARKER_KEY,
                   Persisted, RestoreResult, Session, UID_KEY, UsageRow, apply_compaction,
                   new_session_id, strip_markers)
from .search import SearchHealth, SearchHit
from .spool import SPOOL_CAUSES, spool_failed_write
from .sqlitefile import Identity
from .store import SessionDB
from .transcript import FlushResult, TranscriptWriter

__version__ = "0.1.0"

__all__ = [
    "SessionDB", "StoreFace", "Session", "Lease", "Persisted", "MARKER_KEY", "UID_KEY", "strip_markers",
    "resolve_home", "store_path", "Cause", "StorageError", "StoreCorrupt", "SearchIndexCorrupt",
    "StoreLocked", "DiskFull", "StoreReadOnly", "StoreIOError", "StoreReplaced", "LeaseLost",
    "SessionNotFound", "SessionTooLong", "StoreNotFound", "InvalidMessage", "InvalidInput",
    "SchemaTooNew", "SchemaTooOld", "ReadOnlyHandle",
    "UnsafeSQLiteVersion", "__version__",
    "TranscriptWriter", "FlushResult", "CompactionResult", "RestoreResult", "CompactionError",
    "CompactionNotFound", "apply_compaction",
    "classify", "describe", "describe_error", "StorageFailure", "import_spool",
    "SearchHit", "SearchHealth", "InvalidQuery", "SearchRebuildRefused",
    "ForeignStore", "Identity", "UsageRow", "MessageState",
    # what agent/ needs beyond the above: private home files, spooling a failed write
    "private_output", "FILE_MODE", "ensure_private_dir", "SPOOL_CAUSES", "spool_failed_write",
    "new_session_id",
]
