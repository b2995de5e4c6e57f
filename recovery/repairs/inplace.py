"""`hermes sessions repair`: fix derived damage of a store in place, safely.

Derived damage is what can be rebuilt from the canonical rows: the search
indexes and their sync triggers, a stale `fts_stale` marker, and a schema
with pending migrations. Structural damage (pages of the canonical tables,
the header, the schema) is never repaired in place; repair says so and
gives the recover commands of the one copy table.

Order of work: refuse when another process holds the store; diagnose
read-only; check the attempt ledger; back up; copy the store with the
backup API into a 0700 scratch directory; fix and verify the copy (the
canonical rows must hash the same as before); then, holding an exclusive
lock on the live file and after checking it did not change, write the
copy over it with the backup API. A failure leaves the live file as it
was and counts against the file's fingerprint in the ledger; after
`MAX_FAILURES` failures on the same file content repair stops trying.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import apsw

from sessiondb.recovery_api import (Cause, STORE_NAME, SearchIndexCorrupt, SessionDB, StorageError,
                                    StoreCorrupt, StoreNotFound, check_before_open, clear_damage,
                                    describe,
                                    ensure_private_dir, health_on, pending_migrations,
                                    private_output, profile_dir, resolve_home)

from ..base import RecoveryError, RepairStatus
from ..source import check_space, liveread, source_bytes
from . import backups, fts_rebuild

LEDGER_NAME = "repair-ledger.json"
MAX_FAILURES = 2
LEDGER_ENTRIES = 50


class RepairRefused(RecoveryError):
    """Repair will not run now (another process holds the store, or too many failures)."""

    code = "repair_refused"

    def __init__(self, message: str, *, holders: list[str] | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.holders = holders or []


class RepairFailed(RecoveryError):
    """The fix or its verification failed; the live store was not changed."""

    code = "repair_failed"


@dataclass
class RepairReport:
    """What repair found and did. ``status``: healthy, needs_repair (check-only),
    repaired, or structural (nothing done; see ``commands``)."""

    db_path: str
    status: RepairStatus
    problems: list[str] = field(default_factory=list)
    summary: str = ""
    commands: list[str] = field(default_factory=list)
    backup: dict[str, Any] | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- the attempt ledger ------------------------------------------------------

def file_fingerprint(db_path: Path) -> str:
    """Content hash of the database file and its -wal: a failed repair leaves
    both as they were, so repeated failures on the same damage share it."""
    digest = hashlib.sha256()
    for f in (db_path, Path(f"{db_path}-wal")):
        if f.exists():
            with open(f, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()


class Ledger:
    """Failed repair attempts per file fingerprint, in a 0600 JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def failures(self, fp: str) -> int:
        return int(self.load().get(fp, {}).get("failures", 0))

    def record_failure(self, fp: str, error: str) -> int:
        data = self.load()
        entry = data.setdefault(fp, {"failures": 0})
        entry.update(failures=entry["failures"] + 1, last=time.time(), error=error[:300])
        # Bounded: only the most recent fingerprints are remembered.
        kept = sorted(data.items(), key=lambda kv: kv[1].get("last", 0))[-LEDGER_ENTRIES:]
        self._write(dict(kept))
        return entry["failures"]

    def clear(self, fp: str) -> None:
        data = self.load()
        if data.pop(fp, None) is not None:
            self._write(data)

    def _write(self, data: dict[str, Any]) -> None:
        ensure_private_dir(self.path.parent)
        with private_output(self.path, force=True) as f:  # temp, fsync, rename, 0600
            json.dump(data, f, indent=1, sort_keys=True)


# -- the repair --------------------------------------------------------------

def _structural_report(db_path: Path, home: Path, profile: str | None,
                       problems: list[str]) -> RepairReport:
    failure = describe(Cause.CORRUPT, db_path=db_path, home=home, profile=profile)
    return RepairReport(str(db_path), RepairStatus.STRUCTURAL, problems,
                        "Structural damage is never repaired in place. " + failure.summary,
                        list(failure.actions))


def refuse_if_held(db_path: Path) -> None:
    """Raise RepairRefused unless the lock table proves nobody else holds the store."""
    names = liveread.holder_names(db_path)
    if names is None:
        raise RepairRefused(f"cannot tell whether another process has {db_path} open "
                            "(no /proc/locks on this platform); refusing to change it",
                            path=str(db_path))
    if names:
        raise RepairRefused(f"{db_path} is held by process {', '.join(names)}; stop it "
                            "and run the command again", holders=names, path=str(db_path))


def repair(home: str | os.PathLike[str] | None = None, profile: str | None = None, *,
           check_only: bool = False, backup: bool = True, keep: int = backups.DEFAULT_KEEP,
           after_copy: Callable[[], None] | None = None) -> RepairReport:
    """Diagnose, and unless ``check_only``, repair the derived damage of a store.

    ``after_copy`` runs once the scratch copy is taken (a seam for tests
    that change the store while it is being repaired)."""
    started = time.monotonic()
    root = resolve_home(home)
    pdir = profile_dir(root, profile)
    db_path = pdir / STORE_NAME
    if not db_path.is_file():
        raise StoreNotFound(f"no store at {db_path}", path=str(db_path))
    try:  # another program's file: ForeignStore, before anything reads or copies it
        check_before_open(db_path, create=False, home=root, profile=profile)
    except StoreCorrupt as e:
        return _structural_report(db_path, root, profile, [str(e)])
    try:
        diag = liveread.diagnose(db_path)
    except StorageError as e:
        if e.cause == Cause.CORRUPT:
            return _structural_report(db_path, root, profile, [str(e)])
        raise
    if diag.structural:
        return _structural_report(db_path, root, profile,
                                  [ln for ln in diag.check if not ln.startswith("***")][:5])
    if diag.unknown:
        raise RepairRefused(f"{db_path} has migrations this version does not know "
                            f"({', '.join(diag.unknown)}); upgrade hermes-state",
                            path=str(db_path))
    if diag.search_error:
        raise RepairRefused(f"could not check the search index of {db_path}: "
                            f"{diag.search_error}", path=str(db_path))
    report = RepairReport(str(db_path), RepairStatus.HEALTHY, diag.derived_problems)
    if report.problems and check_only:
        report.status = RepairStatus.NEEDS_REPAIR
    elif report.problems:
        report.backup = _repair_now(db_path, pdir, backup=backup, keep=keep,
                                    after_copy=after_copy)
        report.status = RepairStatus.REPAIRED
        clear_damage(db_path)  # the repaired file was verified whole
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _repair_now(db_path: Path, pdir: Path, *, backup: bool, keep: int,
                after_copy: Callable[[], None] | None) -> dict | None:
    refuse_if_held(db_path)
    ledger = Ledger(backups.backup_dir(pdir) / LEDGER_NAME)
    fp = file_fingerprint(db_path)
    done = ledger.failures(fp)
    if done >= MAX_FAILURES:
        raise RepairRefused(
            f"repair already failed {done} times on this exact file ({db_path}); it will "
            "not try again. Recover into a new file instead: "
            + describe(Cause.CORRUPT, db_path=db_path).actions[1], path=str(db_path))
    # The scratch copy (and the backup) go beside the store: fail closed first.
    check_space({pdir: source_bytes(db_path) * (2 if backup else 1)})
    conn = liveread.open_readonly(db_path)
    work = liveread.scratch_dir(pdir)
    try:
        digest = liveread.canonical_digest(conn)
        made = (backups.make_backup(conn, db_path, backups.backup_dir(pdir), keep=keep)
                if backup else None)
        copy = work / STORE_NAME
        liveread.copy_live(conn, copy)
        conn.close()
        if after_copy is not None:
            after_copy()
        try:
            _fix_copy(copy)
            verify_copy(copy, digest)
            promote_copy(db_path, copy, digest)
        except (StorageError, RepairFailed, apsw.Error) as e:
            n = ledger.record_failure(fp, str(e))
            raise RepairFailed(f"repair failed (attempt {n} of {MAX_FAILURES} on this file); "
                               f"{db_path} was not changed: {e}", path=str(db_path)) from e
    finally:
        conn.close()
        shutil.rmtree(work, ignore_errors=True)
    ledger.clear(fp)
    return made.to_dict() if made else None


def _fix_copy(copy: Path) -> None:
    """Open the private copy as a store (applies pending migrations), then
    rebuild both search indexes, their triggers, and clear `fts_stale`. When
    the index's b-tree pages are damaged (no rebuild in place can free them),
    rebuild the copy from its canonical tables instead (`fts_rebuild`), and
    check that every row of every canonical table came through."""
    with SessionDB(copy) as db:
        try:
            db.rebuild_search_index(force=True)
            db.checkpoint()
            return
        except SearchIndexCorrupt:
            pass
    before = _digest_of(copy)
    fts_rebuild.strip_search_index(copy)
    with SessionDB(copy) as db:
        db.rebuild_search_index(force=True)
        db.checkpoint()
    if _digest_of(copy) != before:
        raise RepairFailed("rebuilding the copy from its canonical tables changed their rows")


def _digest_of(path: Path) -> str:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return fts_rebuild.digest(conn)
    finally:
        conn.close()


def verify_copy(copy: Path, digest: str) -> None:
    conn = apsw.Connection(str(copy))
    try:
        check = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        if check != ["ok"]:
            raise RepairFailed(f"the repaired copy fails integrity_check: {check[:3]}")
        if pending_migrations(conn):
            raise RepairFailed("the repaired copy still has pending migrations")
        if liveread.canonical_digest(conn) != digest:
            raise RepairFailed("the repaired copy's sessions or messages differ from the store's")
        conn.execute("BEGIN IMMEDIATE")
        try:
            health = health_on(conn)
        finally:
            conn.execute("ROLLBACK")
        if not health.ok:
            raise RepairFailed(f"the repaired copy's search index is not healthy: "
                               f"{health.to_dict()}")
    finally:
        conn.close()


def promote_copy(db_path: Path, copy: Path, digest: str) -> None:
    """Write the verified copy over the live store with the backup API, holding
    an exclusive lock taken first (locking_mode=EXCLUSIVE keeps it after the
    check transaction), and only if the store did not change meanwhile."""
    dest = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        dest.set_busy_timeout(liveread.BUSY_MS)
        dest.execute("PRAGMA locking_mode=EXCLUSIVE").fetchall()
        dest.execute("BEGIN EXCLUSIVE")
        same = liveread.canonical_digest(dest) == digest
        dest.execute("COMMIT")
        if not same:
            raise RepairFailed(f"{db_path} changed while it was being repaired")
        refuse_if_held(db_path)
        src = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            with dest.backup("main", src, "main") as b:
                b.step(-1)
        finally:
            src.close()
    finally:
        dest.close()
