"""The JSONL spool's writing side: messages a failed write could not store.

When a write of messages fails because the store is damaged, replaced,
full, read-only or failing, the messages go to
``<store dir>/spool/<session_id>.jsonl`` (for a home's store that is
``<home>/spool/``): 0600, appended and fsynced, one JSON object per line,
a session line first. Writers take an exclusive `flock` on the spool file,
so an import (sessiondb/importers/spool_import.py, which reads these files
back through `SessionDB`) never moves a file under a concurrent append. It
sits below the face: the store calls `spool_failed_write` with its core
(docs/architecture.md).
"""
from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import stat
import time
from pathlib import Path
from typing import Any, TYPE_CHECKING

import apsw

from ..base import Cause, ReadOnlyHandle, StorageError, fsync_dir, paths
from ..rows import EncodedMessage, UID_KEY, encode, public_fields, sessions
from . import spool_reserve

if TYPE_CHECKING:
    from ..base import Core

log = logging.getLogger(__name__)

SPOOL_DIR = "spool"
IMPORTED_DIR = "imported"
FORMAT_VERSION = 1
# Causes after which the store cannot take the messages now; `locked` is
# transient (the caller retries) and `fts_index` leaves the store writable.
SPOOL_CAUSES = frozenset({Cause.CORRUPT, Cause.REPLACED, Cause.DISK_FULL, Cause.READONLY,
                          Cause.IO_ERROR})


def spool_dir_for(db_path: str | os.PathLike[str]) -> Path:
    """The spool directory beside a store (``<home>/spool`` for a home's store)."""
    return Path(db_path).parent / SPOOL_DIR


def reserve_for(db_path: str | os.PathLike[str]) -> bool:
    """Reserve space for the spool beside ``db_path`` (see `spool_reserve`)."""
    return spool_reserve.ensure(spool_dir_for(db_path))


def spool_file(directory: Path, session_id: str) -> Path:
    return directory / f"{paths.validate_session_id(session_id)}.jsonl"


def _open_locked_for_append(path: Path) -> tuple[int, bool]:
    """An fd on ``path`` holding LOCK_EX; retried if an import moved it meanwhile."""
    while True:
        created = False
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL |
                         os.O_CLOEXEC, paths.FILE_MODE)
            created = True
            os.fchmod(fd, paths.FILE_MODE)
        except FileExistsError:
            # Never through a symlink and never blocking on a FIFO someone put
            # here: only a regular file is appended to (a file we did not write
            # is never changed).
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
                         | os.O_NONBLOCK)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise OSError(errno.EINVAL, "the spool path is not a regular file", str(path))
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd, created
        os.close(fd)  # imported and moved between open and lock: start a new file


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_records(directory: Path, session_id: str, records: list[dict[str, Any]],
                  session_meta: dict[str, Any]) -> Path:
    """Append ``records`` (one JSON line each) to the session's spool file.

    The session line goes first when the file is new or empty. A new file
    takes the space reserved ahead of need (see `spool_reserve`); otherwise
    the reserve is released right before the write. Returns only after the
    data (and a new file's directory entry) is fsynced; on failure the file
    is cut back to where it was (no torn line for a later append to bury, no
    empty file left behind) and the OSError propagates.
    """
    paths.ensure_private_dir(directory)
    path = spool_file(directory, session_id)
    adopted = spool_reserve.adopt(directory, path)
    if not adopted:
        spool_reserve.release(directory)
    fd, created = _open_locked_for_append(path)
    start = os.fstat(fd).st_size
    try:
        lines = []
        if start == 0:
            lines.append({"kind": "session", "version": FORMAT_VERSION,
                          "session_id": session_id, **session_meta})
        lines.extend(records)
        data = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in lines)
        _write_all(fd, data.encode("utf-8"))
        os.fsync(fd)
    except OSError:
        _undo_append(fd, path, start)
        raise
    finally:
        os.close(fd)  # releases the flock
    if created or adopted:
        fsync_dir(directory)
    spool_reserve.ensure(directory)  # for the next failure, when space allows
    return path


def _undo_append(fd: int, path: Path, start: int) -> None:
    """Cut a failed append back to ``start``; remove the file if it was empty."""
    try:
        os.ftruncate(fd, start)
        if start == 0 and os.stat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    except OSError:
        pass


def message_records(session_id: str, batch: list[dict[str, Any]],
                    encoded: list[EncodedMessage], cause: Cause) -> list[dict[str, Any]]:
    """Spool lines for messages: public fields, uid and the resolved timestamp."""
    now = time.time()
    return [{"kind": "message", "session_id": session_id, "uid": enc.uid,
             "timestamp": enc.timestamp, "message": public_fields(m), "cause": cause.value,
             "spooled_at": now} for m, enc in zip(batch, encoded)]


def _session_meta(core: "Core", session_id: str, err: StorageError) -> dict[str, Any]:
    meta: dict[str, Any] = {"db_path": str(core.path), "cause": err.cause.value,
                            "spooled_at": time.time()}
    if err.cause is Cause.REPLACED:
        return meta  # the file under the path is not this session's store
    try:
        with core.read() as conn:
            s = sessions.get(conn, session_id)
    except (StorageError, apsw.Error):
        return meta
    meta.update(source=s.source, model=s.model, title=s.title, started_at=s.started_at)
    return meta


def spool_failed_write(core: "Core", session_id: str, batch: list[dict[str, Any]],
                       err: StorageError, *, encoded: list[EncodedMessage] | None = None,
                       causes: frozenset[Cause] = SPOOL_CAUSES) -> Path | None:
    """Spool the messages of a write that failed with ``err``, when its cause
    is one of ``causes``; sets ``err.spooled_to``. When the spool cannot take
    them either, they are saved nowhere: ``err.unsaved`` hands them back to
    the caller and one warning is logged; never raised over the original
    error. (The agent also spools on `locked`: its turn ends there, so nobody
    would retry the write.)"""
    if err.cause not in causes or not batch or err.spooled_to or err.unsaved:
        return None  # not for the spool, or already tried (one warning per failure)
    if isinstance(err, ReadOnlyHandle):
        return None  # a handle opened read-only writes nothing, not even to the spool
    try:
        if encoded is None:
            encoded = [encode(m, index=i, uid=m.get(UID_KEY)) for i, m in enumerate(batch)]
            for m, enc in zip(batch, encoded):
                m.setdefault(UID_KEY, enc.uid)  # a later retry of this dict is a no-op
        records = message_records(session_id, batch, encoded, err.cause)
        path = write_records(spool_dir_for(core.path), session_id, records,
                             _session_meta(core, session_id, err))
    except (OSError, StorageError) as e:
        err.unsaved = tuple(batch)
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        log.warning("%d message(s) of session %s could not be saved anywhere: the store "
                    "failed (%s) and the spool could not be written either (%s)",
                    len(batch), session_id, err.cause.value, reason)
        return None
    err.spooled_to = str(path)
    err.unsaved = ()
    return path


__all__ = ["spool_failed_write", "write_records", "message_records", "spool_dir_for",
           "spool_file", "reserve_for", "SPOOL_CAUSES", "SPOOL_DIR", "IMPORTED_DIR",
           "FORMAT_VERSION"]
