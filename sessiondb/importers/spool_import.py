"""The JSONL spool's re-import: spooled messages back into a healthy store.

`spool_write` (sessiondb/spool/) writes ``<store dir>/spool/<session_id>.jsonl``
when a write fails; `import_spool` brings them back into a healthy store
idempotently (by uid) and moves each fully imported file to
``spool/imported/``. The importer takes the same exclusive `flock` as the
writers, so it never moves a file under a concurrent append. It is built
on the face: it inserts through `StoreFace.insert_encoded` (each backend's own
insert), so the store never imports it; the writing side's names are
re-exported here for callers that know the spool as one module.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, IO, Iterator, TYPE_CHECKING

import apsw

from ..base import InvalidInput, InvalidMessage, StorageError, fsync_dir, paths
from ..rows import EncodedMessage, checked_time, encode, messages, sessions
from ..spool import (FORMAT_VERSION, IMPORTED_DIR, SPOOL_CAUSES, SPOOL_DIR, message_records,
                     reserve_for, spool_dir_for, spool_failed_write, spool_file, spool_reserve,
                     write_records)

if TYPE_CHECKING:
    from ..face import StoreFace

# -- import ---------------------------------------------------------------


@dataclass
class SpoolFileResult:
    """What happened to one spool file. Never contains message text."""

    file: str
    session_id: str | None = None
    messages: int = 0
    imported: int = 0
    already_present: int = 0
    truncated_last_line: int | None = None
    bad_lines: list[int] = field(default_factory=list)
    moved_to: str | None = None
    #: Why the file could not be imported at all (a bad session id, a failed
    #: write); the file stays in place and the other files are still imported.
    error: str | None = None
    #: The storage cause of ``error`` when the store refused the write
    #: (``corrupt``, ``disk_full``, ...), for the step that ends it.
    cause: str | None = None
    #: The file held no message (0 bytes, or only a torn line): moved aside.
    empty: bool = False


@dataclass
class SpoolImportReport:
    """The outcome of `import_spool` for every file in the spool directory."""

    spool_dir: str
    dry_run: bool
    files: list[SpoolFileResult] = field(default_factory=list)

    @property
    def imported(self) -> int:
        return sum(f.imported for f in self.files)

    @property
    def already_present(self) -> int:
        return sum(f.already_present for f in self.files)

    @property
    def problems(self) -> list[SpoolFileResult]:
        """Files kept in place: some line could not be read, or the import failed."""
        return [f for f in self.files if f.bad_lines or f.error]

    @property
    def moved(self) -> list[SpoolFileResult]:
        return [f for f in self.files if f.moved_to]

    def to_dict(self) -> dict[str, Any]:
        return {"spool_dir": self.spool_dir, "dry_run": self.dry_run,
                "imported": self.imported, "already_present": self.already_present,
                "problems": len(self.problems),
                "files": [dataclasses.asdict(f) for f in self.files]}


# The import reads a spool file twice, a line at a time (memory stays one line
# and one chunk, whatever the file's size): a checking pass that parses every
# line and encodes every message, then, only if all of them checked out, the
# writing pass, in one transaction, ``CHUNK`` messages at a time.
CHUNK = 500


def _records(f: IO[bytes], result: SpoolFileResult | None) -> Iterator[tuple[int, dict]]:
    """(line number, record) of a spool file from its start; with ``result``,
    an unreadable line is noted (the last one, without its newline, as a torn
    write; any other as bad)."""
    f.seek(0)
    for number, raw in enumerate(f, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except ValueError:
            if result is not None and not raw.endswith(b"\n"):
                result.truncated_last_line = number
            elif result is not None:
                result.bad_lines.append(number)
            continue
        yield number, record


def _encoded(record: dict[str, Any]) -> EncodedMessage | None:
    """A message record's row, or None when it does not check out."""
    try:
        enc = encode(record["message"], uid=str(record["uid"]))
        return enc._replace(timestamp=checked_time(record["timestamp"], "timestamp"))
    except (KeyError, TypeError, ValueError, InvalidInput, InvalidMessage):
        return None


def _scan(f: IO[bytes], result: SpoolFileResult) -> tuple[dict[str, Any], Any]:
    """The checking pass: counts and bad lines into ``result``; returns the
    session line (or {}) and the first message's session id."""
    head: dict[str, Any] | None = None
    first_sid: Any = None
    seen_message = False
    for number, record in _records(f, result):
        kind = record.get("kind")
        if kind == "session" and head is None:
            head = record
        elif kind == "message":
            if not seen_message:
                first_sid, seen_message = record.get("session_id"), True
            if _encoded(record) is None:
                result.bad_lines.append(number)
            else:
                result.messages += 1
    result.bad_lines.sort()
    return head or {}, first_sid


def _chunks(f: IO[bytes]) -> Iterator[list[EncodedMessage]]:
    """The writing pass: the checked messages again, ``CHUNK`` at a time."""
    chunk: list[EncodedMessage] = []
    for _number, record in _records(f, None):
        enc = _encoded(record) if record.get("kind") == "message" else None
        if enc is not None:
            chunk.append(enc)
            if len(chunk) >= CHUNK:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _present_uids(conn: apsw.Connection, session_id: str, uids: list[str]) -> set[str]:
    return messages.present_uids(conn, session_id, uids)  # (the stored uid form is theirs)


def _store_records(db: "StoreFace", session_id: str, meta: dict[str, Any],
                   f: IO[bytes], dry_run: bool) -> int:
    """Insert what is missing (one transaction); returns how many were present."""
    if dry_run:
        with db.core.read() as conn:
            if not sessions.exists(conn, session_id):
                return 0
            return sum(len(_present_uids(conn, session_id, [e.uid for e in chunk]))
                       for chunk in _chunks(f))
    with db.atomic() as conn:
        if not sessions.exists(conn, session_id):
            sessions.create(conn, session_id, source=str(meta.get("source") or "spool"),
                            model=meta.get("model"), title=meta.get("title"),
                            parent_session_id=None, now=db.now())
        present = 0
        for chunk in _chunks(f):
            known = _present_uids(conn, session_id, [e.uid for e in chunk])
            db.insert_encoded(conn, session_id, [e for e in chunk if e.uid not in known])
            present += len(known)
        return present


def _trim(path: Path) -> None:
    """Give back blocks a file holds past its end (an adopted reserve): a
    same-size truncate frees them; imported files need no spare space."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.ftruncate(fd, os.fstat(fd).st_size)
    except OSError:
        pass
    finally:
        os.close(fd)  # a flock lives on the importer's descriptor, not this one


def _move_to_imported(path: Path) -> Path:
    _trim(path)
    target_dir = paths.ensure_private_dir(path.parent / IMPORTED_DIR)
    target = target_dir / f"{path.stem}.{time.time_ns()}.jsonl"
    os.rename(path, target)
    fsync_dir(path.parent)
    fsync_dir(target_dir)
    return target


def _import_file(db: "StoreFace", path: Path, dry_run: bool) -> SpoolFileResult:
    result = SpoolFileResult(file=str(path))
    try:  # O_NOFOLLOW: a symlink swapped in after the listing is refused, not followed
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as e:  # ELOOP for that symlink, or a file gone meanwhile
        result.error = f"cannot open it: {e.strerror or e}"
        return result
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        # a second descriptor of the same open file: the flock stays on ``fd``
        with os.fdopen(os.dup(fd), "rb") as f:
            _import_locked(db, path, f, result, dry_run)
    finally:
        os.close(fd)
    return result


def _import_locked(db: "StoreFace", path: Path, f: IO[bytes], result: SpoolFileResult,
                   dry_run: bool) -> None:
    head, first_sid = _scan(f, result)
    session_id = head.get("session_id") or first_sid
    result.session_id = session_id if isinstance(session_id, str) else None
    if result.bad_lines:
        return
    if not result.messages:  # nothing to import: do not leave it to warn forever
        result.empty = True
        if not dry_run:
            result.moved_to = str(_move_to_imported(path))
        return
    if session_id is None:
        result.error = "no session id in the file"
        return
    try:
        paths.validate_session_id(session_id)
        result.already_present = _store_records(db, session_id, head, f, dry_run)
    except StorageError as e:
        result.error = " ".join(str(e).split())
        result.cause = e.cause.value
        return
    result.imported = result.messages - result.already_present
    if not dry_run:
        result.moved_to = str(_move_to_imported(path))


def import_spool(db: "StoreFace", *, spool_dir: str | os.PathLike[str] | None = None,
                 dry_run: bool = False) -> SpoolImportReport:
    """Re-import every spooled message into ``db`` (idempotent by uid).

    Each file is imported in one transaction and then moved to
    ``imported/``. A torn last line (a write cut short by a crash, never
    acknowledged) is reported and skipped; a file with any other unreadable
    line, or whose import fails (a bad session id, a store error of a cause
    that concerns only that file), is not imported, stays in place and is
    listed in ``problems`` with the reason; the other files are still
    imported. A file without any message is moved aside as ``empty``.
    ``dry_run`` reads and counts, and changes nothing.
    """
    directory = Path(spool_dir) if spool_dir is not None else spool_dir_for(db.path)
    report = SpoolImportReport(spool_dir=str(directory), dry_run=dry_run)
    if not directory.is_dir():
        return report
    for path in paths.own_entries(directory, "*.jsonl"):  # never a symlink's target
        report.files.append(_import_file(db, path, dry_run))
    if not dry_run:
        spool_reserve.ensure(directory)  # space is back: reserve it again
    return report


__all__ = ["spool_failed_write", "write_records", "message_records", "import_spool",
           "spool_dir_for", "SpoolImportReport", "SpoolFileResult", "SPOOL_CAUSES",
           "FORMAT_VERSION", "SPOOL_DIR", "reserve_for", "spool_file"]
