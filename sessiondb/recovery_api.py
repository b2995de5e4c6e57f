"""The store surface recovery/ is allowed to use: one declared module.

recovery/ (inspect, salvage, verify, repair, doctor) needs more of the
store than an application does: file layout and modes, the identify gate,
the migrations ledger, the names of the derived search tables, holder
probes and the error taxonomy. It imports all of it from here and from
nowhere else in sessiondb (tests/project/test_core_surface.py enforces it), so a
change inside sessiondb that would break recovery shows up as a change to
this file, and the surface recovery depends on can be read in one place.
It declares exactly what recovery/ imports, nothing more.

This module only re-exports, each group from the surface of the
subpackage that owns it. A name gets a longer alias only where the
original reads as something else once it leaves its package: `commands`
(the copy table's commands for a failure), the migration ledgers
(`pending` and the like), and the PostgreSQL ledger and search indexes
beside SQLite's.
"""
from __future__ import annotations

# base: errors and how to explain them, the home's files and modes, the SQLite build policy
from .base import (Cause, FILE_MODE, HOME_MODE, InvalidInput, MessageState,
                   OutputError, RECOVERED_NAME, SIDECARS, STORE_NAME, SearchIndexCorrupt,
                   StorageError, StorageFailure, StoreCorrupt, StoreNotFound, classify,
                   classify_text, commands as explain_commands, connection_errno,
                   create_private_file, describe, ensure_private_dir, from_apsw, fsync_dir,
                   hermes_command, in_wal_reset_band, on_readonly_mount, one, own_entries,
                   private_output, profile_dir, publish, resolve_home, sqlite_library_version,
                   validate_profile)
# index: the derived search index's tables and triggers, and what recover does with them:
# fill a new store's index once, take the source's index over, build the word index apart
from .index import (CHANGES, FTS_TABLE, INDEXES, INDEX_META_KEYS, IndexNotCopyable,
                    ParallelBuild, TEXT_VIEW, TRIGGERS, TERMS_TABLE, LEGACY_TRIGRAM_TABLE,
                    TEXT_INDEXES, fill_terms, term_held, attach_readonly,
                    attach_triggers, copy_search_index, cores, corruption_is_index_only,
                    drop_triggers, index_batch, set_watermark, stale_marker, triggers_attached)
# rows: the row formats (roles and their codes, fingerprints, the compact stored forms)
from .rows import (ROLES, ROLE_CODES, compact_legacy_rows, fingerprint_of, fingerprint_text,
                   logical_meta, role_text)
# engine: a SQLite store's migrations ledger; the damage record that keeps every process
# from writing to a store found structurally damaged
from .engine import (applied as applied_migrations,
                     apply_pending as apply_pending_migrations, clear_damage,
                     pending as pending_migrations, read_record as read_damage_record,
                     record_damage, unknown as unknown_migrations)
# sqlitefile: the file read without SQLite (pages, cells, records, WAL frames), what a file
# is, and which processes hold it
from .sqlitefile import (BTreePage, DatabaseHeader, DatabaseImage, FRAME_HEADER_SIZE, FormatError,
                         HEADER_SIZE, Holder, INDEX_INTERIOR, INDEX_LEAF, Identity,
                         LEGAL_PAGE_SIZES, MAGIC, MAX_ROWID, MIN_ROWID, MISSING, PROC,
                         TABLE_INTERIOR, TABLE_LEAF, TEXT_ENCODINGS, UNCOMMITTED,
                         WAL_HEADER_SIZE, WalHeader, check_before_open, content_accounted,
                         decode_record, held_locks, identify, lock_byte_page, lock_holders,
                         open_holders, other_holders, parse_cell, parse_header, parse_page_header,
                         parse_ptrmap, parse_trunk, parse_wal_header, read_overflow, scan_wal,
                         table_cell_keys, walk_freelist)
# search: the search index's health, probed on a connection
from .search import SearchHealth, health_on
# maintenance: refusing work while another process holds the store
from .maintenance import WHY, refuse_if_held
# store: the store's face
from .store import SessionDB
# spool and importers: where a home keeps its spool, and its re-import
from .importers import import_spool
from .spool import spool_dir_for
# pg: a PostgreSQL store, for `doctor` on --store-url (psycopg is imported there)
from .pg import (SEARCH_INDEXES as PG_SEARCH_INDEXES, TSV_COLUMN,
                 connect_timeout as pg_connect_timeout,
                 applied_migrations as pg_applied_migrations,
                 pending_migrations as pg_pending_migrations,
                 redact as redact_url,
                 unknown_migrations as pg_unknown_migrations, url_label)

__all__ = [
    # base
    "Cause", "InvalidInput", "SearchIndexCorrupt", "StorageError", "StoreCorrupt",
    "StoreNotFound", "connection_errno", "from_apsw", "on_readonly_mount",
    "classify", "classify_text", "StorageFailure", "describe", "hermes_command",
    "explain_commands", "RECOVERED_NAME",
    "FILE_MODE", "HOME_MODE", "SIDECARS", "STORE_NAME", "create_private_file",
    "ensure_private_dir", "own_entries", "profile_dir", "resolve_home", "validate_profile",
    "OutputError", "fsync_dir", "private_output", "publish",
    "in_wal_reset_band", "sqlite_library_version", "one", "MessageState",
    # index
    "FTS_TABLE", "TERMS_TABLE", "LEGACY_TRIGRAM_TABLE", "TEXT_INDEXES", "fill_terms", "term_held", "INDEXES", "TEXT_VIEW", "TRIGGERS", "CHANGES",
    "INDEX_META_KEYS",
    "stale_marker", "triggers_attached", "corruption_is_index_only",
    "attach_triggers", "drop_triggers", "set_watermark", "index_batch",
    "IndexNotCopyable", "attach_readonly", "copy_search_index", "ParallelBuild", "cores",
    # rows
    "ROLES", "ROLE_CODES", "role_text", "fingerprint_of", "fingerprint_text", "logical_meta",
    "compact_legacy_rows",
    # engine
    "applied_migrations", "apply_pending_migrations", "pending_migrations", "unknown_migrations",
    "clear_damage", "read_damage_record", "record_damage",
    # sqlitefile
    "BTreePage", "DatabaseHeader", "DatabaseImage", "FRAME_HEADER_SIZE", "FormatError",
    "HEADER_SIZE", "INDEX_INTERIOR", "INDEX_LEAF", "LEGAL_PAGE_SIZES", "MAGIC", "MAX_ROWID",
    "MIN_ROWID", "MISSING", "TABLE_INTERIOR", "TABLE_LEAF", "TEXT_ENCODINGS", "UNCOMMITTED",
    "WAL_HEADER_SIZE", "WalHeader", "content_accounted", "decode_record", "lock_byte_page",
    "parse_cell", "parse_header", "parse_page_header", "parse_ptrmap", "parse_trunk",
    "parse_wal_header", "read_overflow", "scan_wal", "table_cell_keys", "walk_freelist",
    "Identity", "check_before_open", "identify",
    "Holder", "PROC", "held_locks", "lock_holders", "open_holders", "other_holders",
    # search
    "SearchHealth", "health_on",
    # maintenance
    "WHY", "refuse_if_held",
    # store
    "SessionDB",
    # spool and importers
    "spool_dir_for", "import_spool",
    # pg
    "pg_applied_migrations", "pg_pending_migrations", "pg_unknown_migrations",
    "PG_SEARCH_INDEXES", "TSV_COLUMN", "url_label", "redact_url", "pg_connect_timeout",
]
