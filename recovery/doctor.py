"""`hermes doctor`: a list of checks, each a finding with severity and fix.

An empty list of problems means healthy. Checks only read; none changes
the store.
"""
from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from sessiondb import Cause, SessionDB, StorageError, paths
from sessiondb.classify import classify
from sessiondb.explain import StorageFailure, describe


def _fix(failure: StorageFailure) -> str | None:
    """A finding's fix text, always from the one copy table."""
    return "; then ".join(failure.actions) or None


@dataclass(frozen=True)
class Finding:
    """One check's outcome. ``severity`` is ok, warning or error."""

    check: str
    severity: str
    message: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mode_findings(home: Path, db_path: Path) -> list[Finding]:
    out = []
    home_mode = stat.S_IMODE(os.stat(home).st_mode)
    if home_mode & 0o077:
        out.append(Finding("home_permissions", "warning",
                           f"{home} is mode {home_mode:o}; other users may read it",
                           f"chmod 700 {home}"))
    for suffix in ("",) + paths.SIDECARS:
        f = Path(f"{db_path}{suffix}")
        if f.exists() and stat.S_IMODE(os.stat(f).st_mode) & 0o077:
            out.append(Finding("file_permissions", "warning",
                               f"{f} is readable by other users", f"chmod 600 {f}"))
    if not out:
        out.append(Finding("permissions", "ok", "home is 0700 and store files are 0600"))
    return out


def _store_findings(db: SessionDB) -> list[Finding]:
    out = [Finding("sqlite_version", "ok", f"SQLite {db.sqlite_version} is outside the "
                   "WAL-reset bug band")]
    result = db.quick_check()
    if result == ["ok"]:
        out.append(Finding("quick_check", "ok", "quick_check reports no damage"))
    else:
        failure = describe(Cause.CORRUPT, db_path=db.path, home=db.home, profile=db.profile)
        out.append(Finding("quick_check", "error",
                           f"{failure.summary} quick_check: {'; '.join(result[:5])}",
                           _fix(failure)))
    wal = db.journal_mode() == "wal"
    out.append(Finding("journal_mode", "ok" if wal else "warning",
                       "WAL mode" if wal else "not in WAL mode"))
    pend = db.pending_migrations()
    out.append(Finding("schema", "ok" if not pend else "warning",
                       "schema is current" if not pend else f"pending: {', '.join(pend)}"))
    return out


def run_doctor(home: str | os.PathLike[str] | None = None,
               profile: str | None = None,
               opener: Callable[..., SessionDB] = SessionDB.open) -> list[Finding]:
    """Run every check against a home (creating a fresh store if none exists)."""
    try:
        with opener(home, profile) as db:
            findings = _store_findings(db)
            findings += _mode_findings(paths.profile_dir(home, profile), db.path)
    except StorageError as e:
        failure = describe(classify(e), db_path=e.path or paths.store_path(home, profile),
                           home=paths.resolve_home(home), profile=profile)
        return [Finding("open", "error", f"cannot open the store: {e}. {failure.summary}",
                        _fix(failure))]
    return findings
