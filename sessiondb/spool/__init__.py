"""The spool: messages the store could not write, kept as private JSONL."""
from . import spool_reserve, spool_write
from .spool_write import (FORMAT_VERSION, IMPORTED_DIR, SPOOL_CAUSES, SPOOL_DIR, message_records,
                          reserve_for, spool_dir_for, spool_failed_write, spool_file,
                          write_records)

__all__ = [
    "FORMAT_VERSION",
    "IMPORTED_DIR",
    "SPOOL_CAUSES",
    "SPOOL_DIR",
    "message_records",
    "reserve_for",
    "spool_dir_for",
    "spool_failed_write",
    "spool_file",
    "spool_reserve",
    "spool_write",
    "write_records",
]
