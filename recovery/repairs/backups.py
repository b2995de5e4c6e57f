"""Backups of a live store, made before repair changes it.

A backup is a consistent single-file copy taken with SQLite's backup API
from a read-only connection (never a file copy of the three files of a
running store) into ``<profile dir>/backups/`` (0700; files 0600), checked
(quick_check) and described by a manifest as `hermes backup create` does,
so doctor and `hermes backup list` count it as verified. A copy
whose content hash equals an existing backup is dropped and the existing
one is reused, and only the newest ``keep`` backups are kept. The free
space is checked before anything is written.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import apsw

from sessiondb.recovery_api import ensure_private_dir, own_entries, publish

from ..source import check_space, copy_live, source_bytes
from .online_backup import DEFAULT_KEEP, BackupInfo, check_copy, newest_commit, write_manifest

BACKUP_DIR = "backups"
PATTERN = "state-*.db"


@dataclass(frozen=True)
class Backup:
    """The backup that now holds the store's pre-repair content."""

    path: str
    sha256: str
    reused: bool
    pruned: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def backup_dir(profile_dir: Path) -> Path:
    return profile_dir / BACKUP_DIR


def list_backups(directory: Path) -> list[Path]:
    """Existing backups, oldest first (names sort by time)."""
    if not directory.is_dir():
        return []
    return own_entries(directory, PATTERN)  # a symlink there is not a backup of ours


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def make_backup(conn: apsw.Connection, db_path: Path, directory: Path, *,
                keep: int = DEFAULT_KEEP) -> Backup:
    """Back up the store behind the read-only ``conn`` into ``directory``."""
    ensure_private_dir(directory)
    check_space({directory: source_bytes(db_path)})
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{time.time_ns() % 10**9:09d}"
    tmp = directory / f".state-{stamp}.db.tmp"
    try:
        copy_live(conn, tmp)
        digest = _sha256(tmp)
        for existing in list_backups(directory):
            if existing.name.endswith(f"-{digest[:16]}.db"):
                tmp.unlink()
                return Backup(str(existing), digest, True, [])
        final = directory / f"state-{stamp}-{digest[:16]}.db"
        _verify(tmp, final, db_path)
        publish(tmp, final)  # fsync, link into place, fsync the directory
    finally:
        tmp.unlink(missing_ok=True)
    return Backup(str(final), digest, False, _prune(directory, keep))


def _verify(tmp: Path, final: Path, db_path: Path) -> None:
    """quick_check the copy and write its manifest (before the copy gets its name).
    A store with a damaged search index is still backed up before repair
    fixes it: the manifest then says unverified, with the check's lines."""
    try:
        problems, counts = check_copy(tmp, None)
        conn = apsw.Connection(str(tmp), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            newest = newest_commit(conn)
        finally:
            conn.close()
    except apsw.Error as e:  # an index too damaged to count through
        problems, counts, newest = [f"{type(e).__name__}: {e}"], {}, None
    write_manifest(final, BackupInfo(str(final), time.time(), tmp.stat().st_size, not problems,
                                     problems or ["ok"], counts, newest, str(db_path)))


def _prune(directory: Path, keep: int) -> list[str]:
    found = list_backups(directory)
    doomed = found[:max(0, len(found) - keep)]
    for path in doomed:
        path.unlink(missing_ok=True)
        Path(f"{path}.json").unlink(missing_ok=True)
    return [str(p) for p in doomed]
