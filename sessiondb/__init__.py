"""sessiondb: a WAL-aware SQLite store for agent sessions and transcripts."""
from .compaction import (CompactionError, CompactionNotFound, CompactionResult, RestoreResult,
                         apply_compaction)
from .classify import classify
from .codec import MARKER_KEY, UID_KEY, Persisted, strip_markers
from .errors import (Cause, DiskFull, InvalidInput, InvalidMessage, InvalidQuery, LeaseLost,
                     SchemaTooNew, SearchIndexCorrupt, SearchRebuildRefused, SessionNotFound,
                     SessionTooLong,
                     StorageError, StoreCorrupt, StoreIOError, StoreLocked, StoreNotFound, StoreReadOnly,
                     StoreReplaced, UnsafeSQLiteVersion)
from .errors import ForeignStore
from .explain import StorageFailure, describe, describe_error
from .identify import Identity
from .leases import Lease
from .outfile import private_output
from .paths import FILE_MODE, ensure_private_dir, resolve_home, store_path
from .search import SearchHit
from .search_maintenance import SearchHealth
from .sessions import Session
from .spool import import_spool
from .spool_write import SPOOL_CAUSES, spool_failed_write
from .store import SessionDB
from .transcript import FlushResult, TranscriptWriter
from .usage import UsageRow
from .vocab import MessageState

__version__ = "0.1.0"

__all__ = [
    "SessionDB", "Session", "Lease", "Persisted", "MARKER_KEY", "UID_KEY", "strip_markers",
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
