"""The store surface recovery/ is allowed to use: one declared module.

recovery/ (inspect, salvage, verify, repair, doctor) needs more of the
store than an application does: file layout and modes, the identify gate,
the migrations ledger, the names of the derived search tables, holder
probes and the error taxonomy. It imports all of it from here and from
nowhere else in sessiondb (tests/project/test_core_surface.py enforces it), so a
change inside sessiondb that would break recovery shows up as a change to
this file, and the surface recovery depends on can be read in one place.

This module only re-exports; the code stays in the module that owns it.
A few names are re-exported under a longer alias where the original
(`migrations.pending`, `explain.commands`) reads as something else once
it leaves its module.
"""
from __future__ import annotations

from .base import classify, classify_text
from .rows import ROLE_CODES, ROLES, fingerprint_of, fingerprint_text, logical_meta, role_text
from .rows import compact_legacy_rows
from .base import (Cause, ForeignStore, InvalidInput, SearchIndexCorrupt, StorageError,
                   StoreCorrupt, StoreNotFound, connection_errno, from_apsw, on_readonly_mount)
from .base import RECOVERED_NAME, StorageFailure, describe, hermes_command
from .base import commands as explain_commands
from .sqlitefile import PROC, PROC_LOCKS, Holder, lock_holders, open_holders, other_holders
from .sqlitefile import (BTreePage, DatabaseHeader, DatabaseImage, FRAME_HEADER_SIZE, FormatError, HEADER_SIZE, INDEX_INTERIOR, INDEX_LEAF, LEGAL_PAGE_SIZES, MAGIC, MAX_ROWID, MIN_ROWID, MISSING, TABLE_INTERIOR, TABLE_LEAF, TEXT_ENCODINGS, UNCOMMITTED, WAL_HEADER_SIZE, WalHeader, content_accounted, decode_record, lock_byte_page, parse_cell, parse_header, parse_page_header, parse_ptrmap, parse_trunk, parse_wal_header, read_overflow, scan_wal, table_cell_keys, walk_freelist)
from .sqlitefile import Identity, check_before_open, identify
from .maintenance import WHY, refuse_if_held
from .engine import applied as applied_migrations
from .engine import apply_pending as apply_pending_migrations
from .engine import pending as pending_migrations
from .engine import unknown as unknown_migrations
from .pg import applied_migrations as pg_applied_migrations
from .pg import pending_migrations as pg_pending_migrations
from .pg import unknown_migrations as pg_unknown_migrations
from .pg import SEARCH_INDEXES as PG_SEARCH_INDEXES
from .pg import TSV_COLUMN as PG_TSV_COLUMN
from .pg import url_label as pg_url_label
from .base import OutputError, fsync_dir, private_output, publish
from .base import (FILE_MODE, HOME_MODE, SIDECARS, STORE_NAME, create_private_file,
                   ensure_private_dir, own_entries, profile_dir, resolve_home, validate_profile)
from .base import in_wal_reset_band, sqlite_library_version
from .base import one
from .index import ParallelBuild, cores
from .index import IndexNotCopyable, attach_readonly, copy_search_index
from .index import (CHANGES, FTS_TABLE, INDEXES, TEXT_VIEW, TRIGGERS, TRIGRAM_TABLE,
                    attach_triggers, corruption_is_index_only, drop_triggers, index_batch,
                    set_watermark, stale_marker, triggers_attached)
from .search import SearchHealth, health_on
from .importers import import_spool
from .spool import spool_dir_for
from .store import SessionDB
from .base import MessageState

__all__ = [
    # the one reader of the SQLite file format: pages, cells, records, WAL frames
    "BTreePage", "DatabaseHeader", "DatabaseImage", "FRAME_HEADER_SIZE", "FormatError", "HEADER_SIZE", "INDEX_INTERIOR", "INDEX_LEAF", "LEGAL_PAGE_SIZES", "MAGIC", "MAX_ROWID", "MIN_ROWID", "MISSING", "TABLE_INTERIOR", "TABLE_LEAF", "TEXT_ENCODINGS", "UNCOMMITTED", "WAL_HEADER_SIZE", "WalHeader", "content_accounted", "decode_record", "lock_byte_page", "parse_cell", "parse_header", "parse_page_header", "parse_ptrmap", "parse_trunk", "parse_wal_header", "read_overflow", "scan_wal", "table_cell_keys", "walk_freelist",
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
    # recover's bulk path fills a new store's index once (recovery/output/bulk.py)
    "attach_triggers", "drop_triggers", "set_watermark",
    # ... or takes the source's index over as rows (recovery/output/search_reuse.py)
    "CHANGES", "IndexNotCopyable", "attach_readonly", "copy_search_index", "index_batch",
    # ... or builds the trigram index in a builder process (sessiondb/index/fts_build.py)
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
