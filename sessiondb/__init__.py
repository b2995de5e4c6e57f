"""sessiondb: a WAL-aware SQLite store for agent sessions and transcripts."""
from .rows import (CompactionError, CompactionNotFound, CompactionResult, RestoreResult,
                   apply_compaction)
from .base import classify
from .rows import MARKER_KEY, UID_KEY, Persisted, strip_markers
from .base import (Cause, DiskFull, InvalidInput, InvalidMessage, InvalidQuery, LeaseLost,
                   SchemaTooNew, SearchIndexCorrupt, SearchRebuildRefused, SessionNotFound,
                   SessionTooLong, StorageError, StoreCorrupt, StoreIOError, StoreLocked,
                   StoreNotFound, StoreReadOnly, StoreReplaced, UnsafeSQLiteVersion)
from .base import ForeignStore
from .base import StorageFailure, describe, describe_error
from .sqlitefile import Identity
from .rows import Lease
from .base import private_output
from .base import FILE_MODE, ensure_private_dir, resolve_home, store_path
from .search import SearchHit
from .search import SearchHealth
from .rows import Session
from .importers import import_spool
from .spool import SPOOL_CAUSES, spool_failed_write
from .face import StoreFace
from .store import SessionDB
from .transcript import FlushResult, TranscriptWriter
from .rows import UsageRow
from .base import MessageState

__version__ = "0.1.0"

__all__ = [
    "SessionDB", "StoreFace", "Session", "Lease", "Persisted", "MARKER_KEY", "UID_KEY", "strip_markers",
    "resolve_home", "store_path", "Cause", "StorageError", "StoreCorrupt", "SearchIndexCorrupt",
    "StoreLocked", "DiskFull", "StoreReadOnly", "StoreIOError", "StoreReplaced", "LeaseLost",
    "SessionNotFound", "SessionTooLong", "StoreNotFound", "InvalidMessage", "InvalidInput",
    "SchemaTooNew",
    "UnsafeSQLiteVersion", "__version__",
    "TranscriptWriter", "FlushResult", "CompactionResult", "RestoreResult", "CompactionError",
    "CompactionNotFound", "apply_compaction",
    "classify", "describe", "describe_error", "StorageFailure", "import_spool",
    "SearchHit", "SearchHealth", "InvalidQuery", "SearchRebuildRefused",
    "ForeignStore", "Identity", "UsageRow", "MessageState",
    # what agent/ needs beyond the above: private home files, spooling a failed write
    "private_output", "FILE_MODE", "ensure_private_dir", "SPOOL_CAUSES", "spool_failed_write",
]
