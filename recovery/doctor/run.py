"""`hermes doctor`: checks of a home and its store, each returning findings.

A finding has an id, a severity (ok, info, warn, error), a message, whether
`doctor --fix` can fix it, and the command or action for the operator.
Every check reads only: the store through a read-only connection, the
search index on a private copy (see `liveread`); the one file a check
writes is the damage record beside the store (doctor_damage.py). Opening `SessionDB` would
run migrations, a write, so doctor never does that for a check. Fix texts
come from the one copy table (`sessiondb.base.explain`) where a failure cause
applies. `doctor_fix` applies the safe fixes.
"""
from __future__ import annotations

import os
from typing import Callable

from sessiondb.recovery_api import STORE_NAME, profile_dir, resolve_home

from ..base import Severity
from . import doctor_health
from .checks import (check_disk, check_holders, check_permissions, check_quarantine,
                     check_sidecars, check_spool, check_sqlite, check_temp)
from .doctor_backups import check_backups, check_replication
from .doctor_foreign import check_foreign_store
from .doctor_identity import check_identity, identity_of
from .doctor_scale import check_size, check_store_scaled
from .doctor_wal import check_wal_checkpoint
from .model import Finding, SEVERITIES, Target

HOME_CHECKS: tuple[Callable[[Target], list[Finding]], ...] = (
    check_permissions, check_disk, check_sqlite)
STORE_CHECKS: tuple[Callable[[Target], list[Finding]], ...] = (
    check_identity, check_sidecars, check_holders, check_store_scaled, check_spool,
    check_temp, check_quarantine, check_backups, check_replication, check_size,
    doctor_health.check_write_lock, doctor_health.check_write_probe,
    doctor_health.check_deleted_wal)
# Another program's file: every check that needs none of our schema, its contents
# read only from inspect's private snapshot, and no fix of ours (doctor_foreign.py).
FOREIGN_CHECKS: tuple[Callable[[Target], list[Finding]], ...] = (
    check_identity, check_disk, check_sqlite, check_sidecars, check_holders,
    check_wal_checkpoint, check_foreign_store, doctor_health.check_deleted_wal)


def target(home: str | os.PathLike[str] | None, profile: str | None,
           full: bool = False, progress: Callable[[str], None] | None = None) -> Target:
    root = resolve_home(home)
    pdir = profile_dir(root, profile)
    return Target(root, profile, pdir, pdir / STORE_NAME, full, progress)


def run_doctor(home: str | os.PathLike[str] | None = None, profile: str | None = None,
               *, full: bool = False,
               progress: Callable[[str], None] | None = None) -> list[Finding]:
    """Run every check; read-only. A home without a store gets one info finding.
    ``progress`` is told each phase of the exhaustive (``full``) check."""
    t = target(home, profile, full, progress)
    if not t.db.is_file():
        return doctor_health.no_store(t)
    ident = identity_of(t)
    checks = FOREIGN_CHECKS if ident is not None and ident.foreign else HOME_CHECKS + STORE_CHECKS
    out: list[Finding] = []
    for check in checks:
        out += check(t)
    return out


def worst(findings: list[Finding]) -> Severity:
    return max((f.severity for f in findings), key=SEVERITIES.index, default=Severity.OK)
