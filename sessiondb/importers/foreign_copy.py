"""A private, stable copy of another program's database, for importers to read.

Importers never open the user's file with SQLite: even a read-only
connection to a WAL file creates or writes its ``-shm``. They read a copy of
the database and its ``-wal`` (never the ``-shm``; SQLite rebuilds it from
the ``-wal`` in the copy's directory) taken into a 0700 temporary directory,
retried while the source changes under the copy, and removed afterwards.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TYPE_CHECKING
from urllib.parse import quote

from ..base import Cause, StorageError

if TYPE_CHECKING:  # for type hints only
    from ..sqlitefile import Identity

ATTEMPTS = 3


class CopyUnstable(StorageError):
    """The source kept changing while it was copied (a program is writing it)."""

    cause = Cause.LOCKED
    concerns_store = False  # the source's trouble, not the store's: one line


class CopyNoSpace(StorageError):
    """The temporary directory cannot hold a private copy of the source."""

    cause = Cause.DISK_FULL
    concerns_store = False


def _fingerprint(path: Path) -> tuple:
    out: list[tuple[int, int, int] | None] = []
    for p in (path, Path(f"{path}-wal")):
        try:
            st = p.stat()
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)


def _copy_file(src: Path, dst: Path) -> None:
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(src, "rb") as r, os.fdopen(fd, "wb") as w:
        shutil.copyfileobj(r, w, 1 << 20)


@contextmanager
def foreign_copy(path: str | os.PathLike[str], *,
                 after_copy: Callable[[], None] | None = None) -> Iterator[Path]:
    """The path of a private copy of ``path`` (and its -wal), removed on exit.

    ``after_copy`` runs after each attempt's copy (a seam for tests that
    change the source while it is copied)."""
    src = Path(path)
    need = sum(p.stat().st_size for p in (src, Path(f"{src}-wal")) if p.exists())
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if free < need + (16 << 20):
        raise CopyNoSpace(f"{tempfile.gettempdir()} has {free} bytes free, a private copy of "
                          f"{src} needs {need}; point TMPDIR at a larger disk", path=str(src))
    work = Path(tempfile.mkdtemp(prefix="hermes-import-"))  # mkdtemp makes it 0700
    try:
        dst = work / "source.db"
        for _ in range(ATTEMPTS):
            before = _fingerprint(src)
            for p in (dst, Path(f"{dst}-wal")):
                p.unlink(missing_ok=True)
            _copy_file(src, dst)
            if before[1] is not None:
                _copy_file(Path(f"{src}-wal"), Path(f"{dst}-wal"))
            if after_copy is not None:
                after_copy()
            if _fingerprint(src) == before:
                break
        else:
            raise CopyUnstable(f"{src} kept changing while it was copied; stop the program "
                               "writing it, or try again", path=str(src))
        yield dst
    finally:
        shutil.rmtree(work, ignore_errors=True)


def connect_copy(copy: Path) -> sqlite3.Connection:
    """A stdlib connection to a private copy (no live process has it open)."""
    conn = sqlite3.connect(f"file:{quote(str(copy))}", uri=True)
    conn.row_factory = sqlite3.Row
    return conn


def identify_source(path: Path) -> Identity:
    """The identity of an import source; a file that is not SQLite (or whose
    schema cannot be read) is an ImportFileError, not a damaged store."""
    from ..sqlitefile import identify
    from .importer import ImportFileError
    try:
        return identify(path)
    except StorageError as e:
        raise ImportFileError(f"cannot read {path} as SQLite: {e}", path=str(path)) from e
