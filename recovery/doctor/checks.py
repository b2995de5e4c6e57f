"""doctor's checks of a home and its store, each returning findings. Every
check reads only: the store through a read-only connection, the search index
on a private copy (see `liveread`)."""
from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

from sessiondb.recovery_api import (Cause, RECOVERED_NAME, SIDECARS, StorageError, classify,
                                    in_wal_reset_band, own_entries, spool_dir_for,
                                    sqlite_library_version)

from ..base import Severity
from ..repairs import backups
from ..source import liveread
from . import doctor_health
from .model import Finding, Target

WAL_WARN_BYTES = 64 << 20
DISK_ERROR_BYTES = 16 << 20
STALE_SCRATCH_S = 3600.0



def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def check_permissions(t: Target) -> list[Finding]:
    out = []
    for d in dict.fromkeys([t.home, t.pdir]):
        if d.is_dir() and mode_of(d) & 0o077:
            out.append(Finding("permissions", Severity.WARN, f"{d} is mode {mode_of(d):o}; other "
                               "users may read it", f"chmod 700 {d}", True))
    for suffix in ("",) + SIDECARS:
        f = Path(f"{t.db}{suffix}")
        if f.exists() and mode_of(f) & 0o077:
            out.append(Finding("permissions", Severity.WARN, f"{f} is mode {mode_of(f):o}; other "
                               "users may read it", f"chmod 600 {f}", True))
    return out or [Finding("permissions", Severity.OK, "home is 0700 and store files are 0600")]


def check_disk(t: Target) -> list[Finding]:
    free = shutil.disk_usage(t.pdir).free
    size = liveread_bundle(t.db)
    need = 2 * size + DISK_ERROR_BYTES  # a backup plus a scratch copy, with headroom
    if free < DISK_ERROR_BYTES:
        return [Finding("free_disk", Severity.ERROR, f"{free} bytes free beside {t.db}",
                        f"free space on that filesystem; then: {t.command('doctor')}")]
    if free < need:
        return [Finding("free_disk", Severity.WARN, f"{free} bytes free; repair and recover need "
                        f"about {need}", "free space on that filesystem")]
    return [Finding("free_disk", Severity.OK, f"{free // (1 << 20)} MiB free")]


def liveread_bundle(db: Path) -> int:
    return sum(os.stat(f).st_size for f in [db] + [Path(f"{db}{s}") for s in SIDECARS]
               if f.exists())


def check_sqlite(t: Target) -> list[Finding]:
    version = sqlite_library_version()
    if in_wal_reset_band(version):
        return [Finding("sqlite_version", Severity.ERROR, f"SQLite {version} is in the WAL-reset "
                        "corruption band; hermes refuses to open stores with it",
                        "upgrade apsw (pip install -U apsw)")]
    return [Finding("sqlite_version", Severity.OK,
                    f"SQLite {version} is outside the WAL-reset bug band")]


def check_sidecars(t: Target) -> list[Finding]:
    wal, shm = Path(f"{t.db}-wal"), Path(f"{t.db}-shm")
    out = []
    if wal.exists() and wal.stat().st_size > WAL_WARN_BYTES:
        out.append(Finding("wal_size", Severity.WARN, f"{wal} is {wal.stat().st_size} bytes; a "
                           "checkpoint is overdue", "doctor --fix runs a PASSIVE checkpoint "
                           "when no other process holds the store", True))
    else:
        out.append(Finding("wal_size", Severity.OK,
                           f"-wal is {wal.stat().st_size if wal.exists() else 0} bytes"))
    if wal.exists() and not shm.exists():
        out.append(Finding("sidecars", Severity.WARN, f"{wal} exists without {shm.name} (copied "
                           "separately, or a crash); it may hold your newest messages: "
                           "never delete it", t.command("doctor")))
    elif shm.exists() and not wal.exists():
        if doctor_health.deleted_wal_holders(t.db):  # see deleted_wal: not harmless
            out.append(Finding("sidecars", Severity.ERROR, f"{shm.name} without -wal: the -wal was "
                               "deleted while a process still has it open (see deleted_wal)"))
        else:
            out.append(Finding("sidecars", Severity.INFO, f"{shm.name} without -wal: harmless, "
                               "SQLite rebuilds it"))
    else:
        out.append(Finding("sidecars", Severity.OK, "-wal and -shm are consistent"))
    return out


def check_holders(t: Target) -> list[Finding]:
    names = liveread.holder_names(t.db)
    if names is None:
        return [Finding("holders", Severity.INFO, "cannot tell which processes hold the store "
                        "(no /proc/locks)")]
    if names:
        return [Finding("holders", Severity.INFO, f"held open by {', '.join(names)}; --fix and "
                        "repair will not change the store while it is")]
    return [Finding("holders", Severity.OK, "no other process holds the store")]


def check_store(t: Target) -> list[Finding]:
    """Journal mode, schema, quick_check, FTS and `fts_stale`, read-only."""
    try:
        diag = liveread.diagnose(t.db, full=t.full)
        conn = liveread.open_readonly(t.db)
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchall()[0][0]
        finally:
            conn.close()
    except StorageError as e:
        cause = classify(e)
        deleted = doctor_health.deleted_wal_holders(t.db) if cause is Cause.IO_ERROR else []
        if deleted:  # the -shm describes a -wal that was deleted: not a failing disk
            failure = t.failure(Cause.REPLACED)
            return [Finding("open", Severity.ERROR, f"cannot read the store: {e}. "
                            f"{failure.summary}", doctor_health.rescue_fix(t, deleted[0]))]
        failure = t.failure(cause)
        return [Finding("open", Severity.ERROR, f"cannot read the store: {e}. {failure.summary}",
                        t.fix_text(cause))]
    out = [journal_finding(mode), quick_check_finding(t, diag)]
    if diag.structural:
        return out
    return out + schema_findings(t, diag) + search_findings(t, diag)


def journal_finding(mode: object) -> Finding:  # the PRAGMA journal_mode value
    if mode == "wal":
        return Finding("journal_mode", Severity.OK, "WAL mode")
    return Finding("journal_mode", Severity.INFO, f"journal mode is {mode}, not WAL (chosen for "
                   "filesystems where WAL cannot work; readers then wait for writers)")


def quick_check_finding(t: Target, diag: liveread.Diagnosis) -> Finding:
    name = "integrity_check" if t.full else "quick_check"
    if diag.check == ["ok"]:
        return Finding(name, Severity.OK, f"{name} reports no damage")
    if diag.check[0].startswith("stopped after"):
        return Finding(name, Severity.INFO, f"{name} {diag.check[0]}",
                       t.command("sessions", "recover", "--source", str(t.db),
                                 "--inspect-only"))
    cause = Cause.CORRUPT if diag.structural else Cause.FTS_INDEX
    failure = t.failure(cause)
    return Finding(name, Severity.ERROR if diag.structural else Severity.WARN,
                   f"{failure.summary} {name}: {_brief(diag.check)}",
                   "; then ".join(failure.actions))


def _brief(lines: list[str]) -> str:
    shown = [ln for ln in lines if not ln.startswith("***")][:3]
    more = len(lines) - len(shown) - sum(ln.startswith("***") for ln in lines)
    return "; ".join(shown) + (f" (+{more} more)" if more > 0 else "")


def schema_findings(t: Target, diag: liveread.Diagnosis) -> list[Finding]:
    if diag.unknown:
        return [Finding("schema", Severity.ERROR, f"written by a newer hermes-state "
                        f"({', '.join(diag.unknown)})", "pip install -U hermes-state")]
    if diag.pending:
        return [Finding("schema", Severity.WARN, f"pending migrations: {', '.join(diag.pending)}",
                        t.command("sessions", "repair"))]
    return [Finding("schema", Severity.OK, "schema is current")]


def search_findings(t: Target, diag: liveread.Diagnosis) -> list[Finding]:
    s = diag.search
    if s is None:
        if diag.search_error:  # not a finding about the index: it was not checked
            return [Finding("search_index", Severity.INFO, "search index not checked: "
                            + diag.search_error, t.command("doctor"))]
        return [Finding("search_index", Severity.INFO, "no search index yet (pending migration)")]
    bad = [f"{i.name}: {i.integrity if i.integrity != 'ok' else i.probe}"
           for i in s.indexes if i.integrity != "ok" or i.probe != "ok"]
    if not s.triggers_attached and s.stale is None:
        bad.append("sync triggers missing")
    out = [Finding("search_index", Severity.WARN, t.failure(Cause.FTS_INDEX).summary + " "
                   + "; ".join(bad), t.fix_text(Cause.FTS_INDEX), True) if bad else
           Finding("search_index", Severity.OK, "integrity-check and MATCH probe pass")]
    if s.stale is not None:
        out.append(Finding("fts_stale", Severity.WARN, "the search index is marked stale "
                           f"({s.stale.get('reason', '?')}); search scans rows instead",
                           t.fix_text(Cause.FTS_INDEX), True))
    else:
        out.append(Finding("fts_stale", Severity.OK, "the search index is not marked stale"))
    return out


def check_spool(t: Target) -> list[Finding]:
    spooled = own_entries(spool_dir_for(t.db), "*.jsonl")
    if spooled:
        return [Finding("spool", Severity.WARN, f"{len(spooled)} spool file(s) with messages not "
                        f"yet in the store", t.command("sessions", "import-spool"), True)]
    return [Finding("spool", Severity.OK, "no pending spool files")]


def leftover_scratch(t: Target, *, now: float | None = None) -> list[Path]:
    """Our own scratch directories and temp outputs older than an hour."""
    now = time.time() if now is None else now
    found = [*own_entries(t.pdir, f"{liveread.SCRATCH_PREFIX}*", dirs=True),
             *own_entries(t.pdir, ".*.recovering-*", dirs=True),
             *own_entries(backups.backup_dir(t.pdir), ".state-*.db.tmp")]
    return sorted(p for p in found if now - p.lstat().st_mtime > STALE_SCRATCH_S)


def check_temp(t: Target) -> list[Finding]:
    stale = leftover_scratch(t)
    if stale:
        return [Finding("temp_files", Severity.WARN, f"{len(stale)} stale hermes scratch/temp "
                        f"file(s): {', '.join(p.name for p in stale[:3])}",
                        "doctor --fix removes them", True)]
    return [Finding("temp_files", Severity.OK, "no leftover scratch or temp files")]


def check_quarantine(t: Target) -> list[Finding]:
    """Files containment and recover leave for the operator: rescued copies
    and recovered stores waiting to be installed."""
    rescued = own_entries(t.pdir, f"{t.db.name}.rescued-*")
    recovered = [p for p in (t.pdir / RECOVERED_NAME,
                             t.pdir / f"{RECOVERED_NAME}.partial",
                             t.pdir / f"{RECOVERED_NAME}.unverified") if p.exists()]
    out = []
    if rescued:  # what the handle could still read: a whole store, ready to install
        out.append(Finding("quarantine", Severity.WARN, f"a handle quarantined the store and "
                           f"saved {', '.join(p.name for p in rescued)}; install it (the "
                           "replaced files are kept, the spool is imported)",
                           t.command("sessions", "install-recovered", str(rescued[-1]))))
    installable = [p for p in recovered if not p.name.endswith(".unverified")]
    if installable:
        out.append(Finding("quarantine", Severity.INFO, f"recovered store(s) waiting to be "
                           f"installed: {', '.join(p.name for p in recovered)}"
                           + (" (.partial: read its report's losses first)"
                              if installable[0].name.endswith(".partial") else ""),
                           t.command("sessions", "install-recovered", str(installable[0]))))
    elif recovered:
        out.append(Finding("quarantine", Severity.WARN, f"{recovered[0].name} failed verification; "
                           "recover again into a new file and read the report",
                           t.command("sessions", "recover", "--source", str(t.db),
                                     "--inspect-only")))
    return out or [Finding("quarantine", Severity.OK, "no rescued or recovered files waiting")]

