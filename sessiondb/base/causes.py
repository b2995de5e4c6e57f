"""Classification: which `Cause` an error belongs to.

`classify(exc)` decides from the exception's type and SQLite result codes
only; for apsw exceptions it goes through `errors.from_apsw`, the one
mapping from apsw classes and extended codes to typed errors. Message text
is consulted only by `classify_text`, for errors that reach us as text
(another process's report, a log line), and only against SQLite's own
fixed messages and result-code names, never loose words such as "disk".
"""
from __future__ import annotations

import errno
import re

import apsw

from .errors import Cause, StorageError, from_apsw

# OS errors seen outside SQLite (spool files, stat of the store).
_BY_ERRNO: dict[int, Cause] = {
    errno.ENOSPC: Cause.DISK_FULL,
    errno.EDQUOT: Cause.DISK_FULL,
    errno.EFBIG: Cause.DISK_FULL,
    errno.EROFS: Cause.READONLY,
    errno.EACCES: Cause.READONLY,
    errno.EPERM: Cause.READONLY,
    errno.EIO: Cause.IO_ERROR,
    errno.ENOENT: Cause.NOT_FOUND,
}


def classify(exc: BaseException | str) -> Cause:
    """The cause of ``exc``: typed errors keep theirs, apsw errors are mapped
    by class and extended code, OS errors by errno, text by `classify_text`."""
    if isinstance(exc, str):
        return classify_text(exc)
    if isinstance(exc, StorageError):
        return exc.cause
    if isinstance(exc, apsw.Error):
        return from_apsw(exc).cause
    if isinstance(exc, OSError) and exc.errno in _BY_ERRNO:
        return _BY_ERRNO[exc.errno]
    return Cause.UNKNOWN


# Our own stable codes, as other hermes processes print them.
_CODE_RE = re.compile(r"\bstorage_(" + "|".join(c.value for c in Cause) + r")\b")

# SQLite result-code names (as some drivers and logs print them): the
# longest name wins so SQLITE_CORRUPT_VTAB is not read as SQLITE_CORRUPT.
_NAMES: dict[str, Cause] = {
    "SQLITE_CORRUPT_VTAB": Cause.FTS_INDEX,
    "SQLITE_READONLY_DBMOVED": Cause.REPLACED,
    "SQLITE_CORRUPT": Cause.CORRUPT,
    "SQLITE_NOTADB": Cause.CORRUPT,
    "SQLITE_FULL": Cause.DISK_FULL,
    "SQLITE_READONLY": Cause.READONLY,
    "SQLITE_PERM": Cause.READONLY,
    "SQLITE_IOERR": Cause.IO_ERROR,
    "SQLITE_BUSY": Cause.LOCKED,
    "SQLITE_LOCKED": Cause.LOCKED,
    "SQLITE_CANTOPEN": Cause.NOT_FOUND,
}
_NAME_RE = re.compile(r"\b(SQLITE_[A-Z_]+)\b")

# SQLite's fixed messages (sqlite3_errstr) and FTS5's corruption messages.
# FTS phrases come first: FTS5 may append SQLite's generic corruption text.
_PHRASES: tuple[tuple[str, Cause], ...] = (
    ("fts5: corruption", Cause.FTS_INDEX),
    ("malformed inverted index for fts5 table", Cause.FTS_INDEX),
    ("database disk image is malformed", Cause.CORRUPT),
    ("file is not a database", Cause.CORRUPT),
    ("database or disk is full", Cause.DISK_FULL),
    ("attempt to write a readonly database", Cause.READONLY),
    ("access permission denied", Cause.READONLY),
    ("disk i/o error", Cause.IO_ERROR),
    ("database is locked", Cause.LOCKED),
    ("database table is locked", Cause.LOCKED),
    ("unable to open database file", Cause.NOT_FOUND),
)


def classify_text(text: str) -> Cause:
    """The cause named by an error that arrived only as text."""
    code = _CODE_RE.search(text)
    if code:
        return Cause(code.group(1))
    names = [n for n in _NAME_RE.findall(text)]
    for name in sorted(names, key=len, reverse=True):
        for known, cause in _NAMES.items():
            if name == known or name.startswith(known + "_"):
                return cause
    lowered = text.lower()
    for phrase, cause in _PHRASES:
        if phrase in lowered:
            return cause
    return Cause.UNKNOWN


__all__ = ["classify", "classify_text"]
