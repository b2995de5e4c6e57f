"""The store surface recovery/ is allowed to use: one declared module.

recovery/ (inspect, salvage, verify, repair, doctor) needs more of the
store than an application does: file layout and modes, the identify gate,
the migrations ledger, the names of the derived search tables, holder
probes and the error taxonomy. It imports all of it from here and from
nowhere else in sessiondb (tests/test_core_surface.py enforces it), so a
change inside sessiondb that would break recovery shows up as a change to
this file, and the surface recovery depends on can be read in one place.

This module only re-exports; the code stays in the module that owns it.
A few names are re-exported under a longer alias where the original
(`migrations.pending`, `explain.commands`) reads as something else once
it leaves its module.
"""
from __future__ import annotations

from .classify import classify, classify_text
from .codec import ROLE_CODES, ROLES, fingerprint_of, fingerprint_text, logical_meta, role_text
from .messages import compact_legacy_rows
from .errors import (Cause, ForeignStore, InvalidInput, SearchIndexCorrupt, StorageError,
                     StoreCorrupt, StoreNotFound, connection_errno, from_apsw, on_readonly_mount)
from .explain import RECOVERED_NAME, StorageFailure, describe, hermes_command
from .explain import commands as explain_commands
from .holders import PROC, PROC_LOCKS, Holder, lock_holders, open_holders, other_holders
from .identify import Identity, check_before_open, identify
from .maintenance import WHY, refuse_if_held
from .migrations import applied as applied_migrations
from .migrations import apply_pending as apply_pending_migrations
from .migrations import pending as pending_migrations
from .migrations import unknown as unknown_migrations
from .pg.migrations import applied as pg_applied_migrations
from .pg.migrations import pending as pg_pending_migrations
from .pg.migrations import unknown as pg_unknown_migrations
from .pg.search_schema import INDEXES as PG_SEARCH_INDEXES
from .pg.search_schema import TSV_COLUMN as PG_TSV_COLUMN
from .pg.transfer import url_label as pg_url_label
from .outfile import OutputError, fsync_dir, private_output, publish
from .paths import (FILE_MODE, HOME_MODE, SIDECARS, STORE_NAME, create_private_file,
                    ensure_private_dir, own_entries, profile_dir, resolve_home, validate_profile)
from .policy import in_wal_reset_band, sqlite_library_version
from .rows import one
from .fts_build import ParallelBuild, cores
from .search_copy import IndexNotCopyable, attach_readonly, copy_search_index
from .search_index import (CHANGES, FTS_TABLE, INDEXES, TEXT_VIEW, TRIGGERS, TRIGRAM_TABLE,
                           attach_triggers, corruption_is_index_only, drop_triggers,
                           index_batch, set_watermark, stale_marker, triggers_attached)
from .search_maintenance import SearchHealth, health_on
from .spool import import_spool
from .spool_write import spool_dir_for
from .store import SessionDB
from .vocab import MessageState

__all__ = [
    # the store and its errors
    "SessionDB", "Cause", "StorageError", "ForeignStore", "InvalidInput", "SearchIndexCorrupt",
    "StoreCorrupt", "StoreNotFound", "connection_errno", "from_apsw", "on_readonly_mount",
    # classifying and explaining a failure
    "classify", "classify_text", "StorageFailure", "describe", "hermes_command",
    "explain_commands", "RECOVERED_NAME",
    # files: layout, modes, durable renames
    "FILE_MODE", "HOME_MODE", "SIDECARS", "STORE_NAME", "create_private_file",
    "ensure_private_dir", "own_entries", "profile_dir", "resolve_home", "validate_profile",
    "fsync_dir", "private_output", "publish", "OutputError",
    # what a file is, and who holds it
    "Identity", "identify", "check_before_open", "Holder", "PROC", "PROC_LOCKS",
    "lock_holders", "open_holders", "other_holders", "refuse_if_held", "WHY",
    # schema ledger and SQLite build policy
    "applied_migrations", "pending_migrations", "unknown_migrations",
    "apply_pending_migrations", "in_wal_reset_band", "sqlite_library_version",
    # the derived search index
    "FTS_TABLE", "TRIGRAM_TABLE", "INDEXES", "TEXT_VIEW", "TRIGGERS", "stale_marker",
    "triggers_attached", "corruption_is_index_only", "SearchHealth", "health_on",
    # recover's bulk path fills a new store's index once (recovery/bulk.py)
    "attach_triggers", "drop_triggers", "set_watermark",
    # ... or takes the source's index over as rows (recovery/search_reuse.py)
    "CHANGES", "IndexNotCopyable", "attach_readonly", "copy_search_index", "index_batch",
    # ... or builds the trigram index in a builder process (sessiondb/fts_build.py)
    "ParallelBuild", "cores",
    # a PostgreSQL store, for `doctor` on --store-url (psycopg is imported there)
    "pg_applied_migrations", "pg_pending_migrations", "pg_unknown_migrations",
    "PG_SEARCH_INDEXES", "PG_TSV_COLUMN", "pg_url_label",
    # row formats and the spool
    "ROLES", "MessageState", "fingerprint_of", "one", "import_spool", "spool_dir_for",
    # the compact row format (m010): stored uid/fingerprint/meta forms
    "fingerprint_text", "logical_meta", "compact_legacy_rows",
    # the coded row fields (m012)
    "ROLE_CODES", "role_text",
]
