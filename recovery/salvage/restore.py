"""`hermes backup restore FILE`: put a verified backup in place of the store.

The backup itself is never consumed: it is verified, copied (backup API)
into a hidden 0600 file beside the store, and that copy is installed by
the same sequence as `install-recovered` (refused while any process holds
the store; the replaced bundle kept in ``replaced-<time>/``; the spool
imported; doctor run). Before anything moves, a backup older than the
live store's newest commit is refused unless ``force``: the store would
lose what was written after the backup. A store that cannot be read at all
has no known newest commit; that is refused too unless ``force`` (recover
may bring back more than the backup holds). After installing, the store's
row counts are checked against the backup's.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw

from sessiondb.recovery_api import STORE_NAME, StorageError, profile_dir, resolve_home

from ..base import RecoveryError, Severity
from ..repairs import online_backup
from ..source import liveread
from .install import InstallRefused, install_recovered


class RestoreRefused(RecoveryError):
    """The backup was not restored; the store was not changed."""

    code = "restore_refused"


@dataclass
class RestoreReport:
    """What restore did: where the replaced files are, and the check after."""

    store: str
    restored_from: str
    backup_newest_commit: float | None
    store_newest_commit: float | None
    forced: bool
    aside_dir: str | None
    moved_aside: list[str] = field(default_factory=list)
    counts_after: dict[str, int] = field(default_factory=dict)
    verified_after: bool = False
    worst: Severity = Severity.OK
    findings: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _live_newest(db: Path) -> tuple[bool, float | None]:
    """(readable, newest commit) of the live store, read-only."""
    if not db.exists():
        return True, None
    try:
        conn = liveread.open_readonly(db)
    except StorageError:
        return False, None
    try:
        return True, online_backup.newest_commit(conn)
    except apsw.Error:
        return False, None
    finally:
        conn.close()


def _guard_age(backup: online_backup.BackupInfo, db: Path, force: bool) -> float | None:
    readable, live = _live_newest(db)
    if force:
        return live
    if not readable:
        raise RestoreRefused(f"{db} cannot be read, so it is unknown whether it holds messages "
                             "newer than the backup; `sessions recover --inspect-only` shows "
                             "what it still holds; pass --force to restore anyway",
                             path=str(db))
    if live is not None and (backup.newest_commit is None or live > backup.newest_commit):
        raise RestoreRefused(f"the backup is older than the store: its newest commit is "
                             f"{_when(backup.newest_commit)}, the store's {_when(live)}; "
                             "restoring would lose what was written since; pass --force to "
                             "restore anyway", path=str(db))
    return live


def _when(t: float | None) -> str:
    return "none" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _stage(backup: Path, db: Path) -> Path:
    """A copy of the backup beside the store (a rename must put it in place)."""
    staged = db.parent / f".{db.name}.restoring-{os.getpid()}-{time.time_ns() % 10**9:09d}"
    src = liveread.open_readonly(backup)
    try:
        liveread.copy_live(src, staged)
    finally:
        src.close()
    return staged


def restore_backup(backup: str | os.PathLike[str], home: str | os.PathLike[str] | None = None,
                   profile: str | None = None, *, force: bool = False) -> RestoreReport:
    """Restore ``backup`` as the store of ``home``/``profile``; see the module doc."""
    started = time.monotonic()
    db = profile_dir(resolve_home(home), profile) / STORE_NAME
    info = online_backup.verify_backup(Path(backup))
    if not info.verified:
        raise RestoreRefused(f"{backup} does not verify ({'; '.join(info.check[:2])}); "
                             "choose another backup", path=str(backup))
    live = _guard_age(info, db, force)
    db.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    staged = _stage(Path(backup), db)
    try:
        installed = install_recovered(staged, home, profile)
    except InstallRefused as e:
        raise RestoreRefused(str(e), path=str(db)) from e
    finally:
        staged.unlink(missing_ok=True)
    after = online_backup.verify_backup(db)
    ok = after.check == ["ok"] and all(after.counts.get(t, 0) >= info.counts.get(t, 0)
                                       for t in ("sessions", "messages"))
    return RestoreReport(str(db), str(backup), info.newest_commit, live, force,
                         installed.aside_dir, installed.moved_aside, after.counts, ok,
                         installed.worst, installed.findings,
                         round(time.monotonic() - started, 3))


__all__ = ["RestoreRefused", "RestoreReport", "restore_backup"]
