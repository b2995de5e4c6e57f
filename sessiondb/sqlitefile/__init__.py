"""The SQLite file itself: its pages read without SQLite, what a file is,
and which processes hold it.

One reader of the format, in three modules: `fileformat` (the database
header, b-tree pages and cells, varints, records, overflow chains, the
freelist and pointer maps), `wal` (WAL header, frames, salts and checksums;
`scan_wal` and `DatabaseImage` for the carver, `index_wal` and `frame_ok`
for a reader of a few pages) and `journal` (a rollback journal's original
pages). Built on them: `rawfile` (identification's reader of committed
pages and table rows, through the shared per-inode descriptor) and
`identity` (what a file is). `holders` names the processes that hold a
file. Other folders import only the names in ``__all__``; recovery reaches
them through `sessiondb.recovery_api`.
"""
from . import holders
from .fileformat import (BTreePage, DatabaseHeader, FormatError, HEADER_SIZE, INDEX_INTERIOR,
                         INDEX_LEAF, LEGAL_PAGE_SIZES, MAGIC, MAX_ROWID, MIN_ROWID, MISSING,
                         TABLE_INTERIOR, TABLE_LEAF, TEXT_ENCODINGS, content_accounted,
                         decode_record, lock_byte_page, parse_cell, parse_header,
                         parse_page_header, parse_ptrmap, parse_trunk, read_overflow,
                         table_cell_keys, walk_freelist)
from .holders import (Holder, LockLine, PROC, PROC_LOCKS, held_locks, lock_holders, open_holders,
                      other_holders)
from .identity import (EMPTY, HERMES_AGENT, Identity, LLM, OURS, SHADOW_SUFFIXES,
                       check_before_open, identify)
from .wal import (DatabaseImage, FRAME_HEADER_SIZE, UNCOMMITTED, WAL_HEADER_SIZE, WalHeader,
                  parse_wal_header, scan_wal)

__all__ = [
    "BTreePage",
    "DatabaseHeader",
    "DatabaseImage",
    "EMPTY",
    "FRAME_HEADER_SIZE",
    "FormatError",
    "HEADER_SIZE",
    "HERMES_AGENT",
    "Holder",
    "LockLine",
    "INDEX_INTERIOR",
    "INDEX_LEAF",
    "Identity",
    "LEGAL_PAGE_SIZES",
    "LLM",
    "MAGIC",
    "MAX_ROWID",
    "MIN_ROWID",
    "MISSING",
    "OURS",
    "PROC",
    "PROC_LOCKS",
    "SHADOW_SUFFIXES",
    "TABLE_INTERIOR",
    "TABLE_LEAF",
    "TEXT_ENCODINGS",
    "UNCOMMITTED",
    "WAL_HEADER_SIZE",
    "WalHeader",
    "check_before_open",
    "content_accounted",
    "decode_record",
    "holders",
    "identify",
    "lock_byte_page",
    "held_locks",
    "lock_holders",
    "open_holders",
    "other_holders",
    "parse_cell",
    "parse_header",
    "parse_page_header",
    "parse_ptrmap",
    "parse_trunk",
    "parse_wal_header",
    "read_overflow",
    "scan_wal",
    "table_cell_keys",
    "walk_freelist",
]
