"""The damage record beside the store (``state.db.quarantined``): doctor keeps
it in step with what it finds.

Structural damage found by the store check is recorded, so that every
process refuses to write to the file from then on (not only the handle
that met it); a full check (``--full``) that finds the file clean clears
the record. The record itself is a finding: while it is there, nothing
writes to the store, and the fix says what ends it.
"""
from __future__ import annotations

from sessiondb.recovery_api import (Cause, clear_damage, read_damage_record, record_damage)

from ..base import Severity
from .model import Finding, Target

INTEGRITY_CHECKS = ("quick_check", "integrity_check")


def _structural(findings: list[Finding]) -> Finding | None:
    """The store check's structural-damage finding (not one a deleted -wal explains)."""
    for f in findings:
        if (f.check in INTEGRITY_CHECKS and f.severity is Severity.ERROR
                and "see deleted_wal" not in f.message):
            return f
    return None


def _clean_full(t: Target, findings: list[Finding]) -> bool:
    return t.full and any(f.check == "integrity_check" and f.severity is Severity.OK
                          for f in findings)


def damage_record_findings(t: Target, findings: list[Finding]) -> list[Finding]:
    """Record structural damage, clear the record after a clean full check,
    and report the record (``findings``: the store check's)."""
    damaged = _structural(findings)
    if damaged is not None:
        found = damaged.message.split(f"{damaged.check}: ", 1)[-1]
        record_damage(t.db, f"{damaged.check}: {found}", "doctor")
    elif _clean_full(t, findings) and clear_damage(t.db):
        return [Finding("damage_record", Severity.OK, "cleared the damage record: a full "
                        "integrity check finds the file clean, so it takes writes again")]
    rec = read_damage_record(t.db)
    if rec is None or not rec.names(t.db):
        return [Finding("damage_record", Severity.OK, "no process has recorded damage in the store")]
    if damaged is not None:
        fix = damaged.fix
    else:  # damage this check did not see: only a full check may clear the record
        fix = "; then ".join([t.command("doctor", "--full"),
                              *t.failure(Cause.CORRUPT).actions[:1]])
    return [Finding("damage_record", Severity.ERROR,
                    f"no process writes to {t.db}: {rec.describe()}. Recovering and "
                    "installing the result, a repair, or a full check that finds the file "
                    "clean ends this", fix)]
