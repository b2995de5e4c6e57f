"""The file under recovery, never opened in place: the private snapshot, read-
only reads of a live store, and the file's headers.
"""
from . import headers, liveread
from .headers import read_db_header
from .liveread import copy_live
from .snapshot import DEFAULT_HEADROOM, Snapshot, check_space, source_bytes, take_snapshot

__all__ = [
    "DEFAULT_HEADROOM",
    "Snapshot",
    "check_space",
    "copy_live",
    "headers",
    "liveread",
    "read_db_header",
    "source_bytes",
    "take_snapshot",
]
