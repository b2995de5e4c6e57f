"""`hermes doctor --fix`: apply only the safe fixes, then check again.

Safe means: nothing canonical is rewritten and nothing another process
relies on is touched. The fixes are: tighten modes, remove our own stale
scratch/temp files, rebuild the search index, a PASSIVE checkpoint of a
quiet WAL, and importing the spool. All are refused while another process
holds the store (named), and the store-writing ones also when a check found
structural damage (that is recover's job, never a fix).
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sessiondb.recovery_api import (FILE_MODE, HOME_MODE, SIDECARS, SearchIndexCorrupt, SessionDB,
                                    import_spool)

from ..base import RecoveryError, RepairStatus, Severity
from ..repairs import repair
from ..source import liveread
from . import checks
from .model import Finding, Target
from .run import run_doctor, target

STORE_FIXES = {"search_index", "fts_stale", "wal_size", "spool"}


class FixRefused(RecoveryError):
    """`doctor --fix` will not change anything now (another process holds the store)."""

    code = "doctor_fix_refused"


@dataclass
class FixReport:
    """What --fix did (one line per action) and the findings before and after."""

    before: list[Finding]
    applied: list[str] = field(default_factory=list)
    after: list[Finding] = field(default_factory=list)
    refused: str | None = None  # why the store's own fixes were not applied

    def to_dict(self) -> dict[str, Any]:
        return {"before": [f.to_dict() for f in self.before], "applied": self.applied,
                "refused": self.refused, "findings": [f.to_dict() for f in self.after]}


def _tighten(t: Target) -> list[str]:
    done = []
    for d in dict.fromkeys([t.home, t.pdir]):
        if d.is_dir() and checks.mode_of(d) & 0o077:
            os.chmod(d, HOME_MODE)
            done.append(f"chmod 700 {d}")
    for suffix in ("",) + SIDECARS:
        f = Path(f"{t.db}{suffix}")
        if f.exists() and checks.mode_of(f) & 0o077:
            os.chmod(f, FILE_MODE)
            done.append(f"chmod 600 {f}")
    return done


def _remove_scratch(t: Target) -> list[str]:
    done = []
    for p in checks.leftover_scratch(t):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        done.append(f"removed {p}")
    return done


def _store_fixes(t: Target, wanted: set[str]) -> list[str]:
    done = []
    pages_damaged = False
    with SessionDB(t.db, home=t.home, profile=t.profile) as db:
        if wanted & {"search_index", "fts_stale"}:
            try:
                stats = db.rebuild_search_index()
                done.append(f"rebuilt the search index ({stats['messages']} messages)")
            except SearchIndexCorrupt:
                pages_damaged = True  # its b-tree pages: only a rebuilt store heals it
        if "spool" in wanted:
            report = import_spool(db)
            if report.moved:  # "fixed" only for files that really left the spool
                done.append(f"imported the spool: {len(report.moved)} file(s), "
                            f"{report.imported} message(s), {report.already_present} "
                            "already present")
        if "wal_size" in wanted:
            frames, copied = db.checkpoint()
            done.append(f"PASSIVE checkpoint ({copied} of {frames} WAL frames copied back)")
    if pages_damaged:
        rebuilt = repair(t.home, t.profile)
        if rebuilt.status == RepairStatus.REPAIRED:
            done.append("rebuilt the store from its canonical tables (search index pages "
                        f"were damaged); backup of the damaged file: "
                        f"{(rebuilt.backup or {}).get('path', 'none')}")
    return done


def fix(home: str | os.PathLike[str] | None = None, profile: str | None = None,
        *, full: bool = False) -> FixReport:
    """Run the checks, apply the safe fixes they allow, and run the checks again."""
    t = target(home, profile, full)
    report = FixReport(run_doctor(home, profile, full=full))
    if t.db.is_file():
        names = liveread.holder_names(t.db)
        if names is None or names:
            who = ", ".join(names) if names else "unknown processes (no /proc/locks)"
            raise FixRefused(f"{t.db} is held by {who}; doctor --fix changes nothing while "
                             "another process holds the store. Stop it and run again",
                             path=str(t.db))
    problems = {f.check for f in report.before if f.fixable and f.severity != Severity.OK}
    structural = any(f.severity == Severity.ERROR for f in report.before
                     if f.check in ("quick_check", "integrity_check", "open", "schema"))
    report.applied += _tighten(t) if "permissions" in problems else []
    report.applied += _remove_scratch(t) if "temp_files" in problems else []
    if problems & STORE_FIXES and not structural:
        report.applied += _store_fixes(t, problems & STORE_FIXES)
    elif structural:
        report.refused = (f"{t.db} has structural damage; --fix changes nothing in a damaged "
                          "store (that could spread the damage): recover it into a new file "
                          "and install that (doctor's fixes for quick_check)")
    report.after = run_doctor(home, profile, full=full)
    return report
