"""The words and files every layer shares: errors, causes and their copy table,
the home's paths and private files, the SQLite build policy, the core
protocol.
"""
from . import paths, policy
from .causes import classify, classify_text
from .coreapi import Core
from .errors import (Cause, DiskFull, ForeignStore, InvalidInput, InvalidMessage, InvalidQuery,
                     LeaseLost, ReadOnlyHandle, SchemaTooNew, SchemaTooOld, SearchIndexCorrupt,
                     SearchRebuildRefused, SessionNotFound, SessionTooLong, StorageError, StoreCorrupt, StoreIOError,
                     StoreLocked, StoreNotFound, StoreReadOnly, StoreReplaced, UnsafeSQLiteVersion,
                     connection_errno, from_apsw, on_readonly_mount)
from .explain import (RECOVERED_NAME, StorageFailure, commands, describe, describe_error,
                      foreign_actions, hermes_command, program_name)
from .forksafe import ForkRegistry, ThreadOwner
from .onerow import one
from .outfile import (OutputError, append_lines, check_output, fsync_dir, private_output, publish,
                      temp_name)
from .paths import (FILE_MODE, HOME_MODE, SIDECARS, STORE_NAME, create_private_file,
                    ensure_private_dir, own_entries, profile_dir, resolve_home, store_path,
                    validate_profile, validate_session_id)
from .policy import in_wal_reset_band, sqlite_library_version
from .vocab import MessageState

__all__ = [
    "Cause",
    "Core",
    "DiskFull",
    "FILE_MODE",
    "ForeignStore",
    "ForkRegistry",
    "HOME_MODE",
    "InvalidInput",
    "InvalidMessage",
    "InvalidQuery",
    "LeaseLost",
    "MessageState",
    "OutputError",
    "RECOVERED_NAME",
    "SIDECARS",
    "STORE_NAME",
    "ReadOnlyHandle",
    "SchemaTooNew",
    "SchemaTooOld",
    "SearchIndexCorrupt",
    "SearchRebuildRefused",
    "SessionNotFound",
    "SessionTooLong",
    "StorageError",
    "StorageFailure",
    "StoreCorrupt",
    "StoreIOError",
    "StoreLocked",
    "StoreNotFound",
    "StoreReadOnly",
    "StoreReplaced",
    "ThreadOwner",
    "UnsafeSQLiteVersion",
    "append_lines",
    "check_output",
    "classify",
    "classify_text",
    "commands",
    "connection_errno",
    "create_private_file",
    "describe",
    "describe_error",
    "ensure_private_dir",
    "foreign_actions",
    "from_apsw",
    "fsync_dir",
    "hermes_command",
    "program_name",
    "in_wal_reset_band",
    "on_readonly_mount",
    "one",
    "own_entries",
    "paths",
    "policy",
    "private_output",
    "profile_dir",
    "publish",
    "resolve_home",
    "sqlite_library_version",
    "store_path",
    "temp_name",
    "validate_profile",
    "validate_session_id",
]
