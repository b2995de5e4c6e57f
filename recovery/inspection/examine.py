"""`inspect`: describe a store bundle from a private snapshot and give a verdict.

Everything here reads the snapshot copy in the work directory; the user's
files are only hashed and copied by `snapshot`. The verdict names what to
do next: the copy table `sessiondb.base.explain` words every damage verdict
(`advice` maps verdicts to its entries).
"""
from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import apsw

from sessiondb.recovery_api import (Cause, InvalidInput, STORE_NAME, applied_migrations, describe,
                                    explain_commands, pending_migrations, unknown_migrations,
                                    validate_profile)

from ..base import RecoveryIOError, SourceChanging, Verdict
from ..carve import CarveError
from ..schema import Catalog, READ_ERRORS, quote, read_catalog
from ..source import Snapshot, headers, take_snapshot
from .inspect_fts import FULL_CHECK_BYTES, FtsHealth, check_fts
from .schema_source import guess, survey

QUICK_CHECK_SECONDS = 20.0
SOUND = (Verdict.HEALTHY, Verdict.FTS_ONLY)  # the b-trees are sound: a backup reads them
VERDICTS = tuple(v for v in Verdict if v is not Verdict.UNKNOWN)  # UNKNOWN: data only


@dataclass
class TableHealth:
    """Whether a table could be read to the end, and how many rows came back."""

    name: str
    kind: str
    readable: bool
    rows: int
    error: str | None = None


@dataclass
class InspectReport:
    """Everything inspect found; ``verdict`` is the headline, ``data_verdict``
    the health of the copy alone (ignoring processes holding the files)."""

    source: str
    verdict: Verdict
    data_verdict: Verdict
    explanation: str = ""
    next_command: str | None = None
    header: dict[str, Any] = field(default_factory=dict)
    header_fixes: list[str] = field(default_factory=list)
    wal: dict[str, Any] | None = None
    shm_present: bool = False
    journal_present: bool = False
    schema_readable: bool = False
    schema_error: str | None = None
    migrations: dict[str, list[str]] = field(default_factory=dict)
    tables: list[TableHealth] = field(default_factory=list)
    fts: list[FtsHealth] = field(default_factory=list)
    fts_stale: bool = False
    quick_check: dict[str, Any] = field(default_factory=dict)
    holders: list[dict[str, Any]] = field(default_factory=list)
    changed_files: list[str] = field(default_factory=list)
    free_disk: dict[str, int] = field(default_factory=dict)
    fingerprints: dict[str, Any] = field(default_factory=dict)
    # what the page carver would find (rows per table from page headers), or
    # {"error": ...}; None when not asked for (recover carves instead)
    carve_estimate: dict[str, Any] | None = None
    elapsed_s: float = 0.0
    # what the file is (hstate_recovery.schema.formats): kind, label, version, commands;
    # with page 1 lost, what its pages look like (``guessed``)
    identification: dict[str, Any] = field(default_factory=dict)
    # what is wrong besides the verdict (a format version the registry does not know)
    warnings: list[str] = field(default_factory=list)

    def table(self, name: str) -> TableHealth | None:
        return next((t for t in self.tables if t.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# verdict -> (the copy table's cause, the one action of its entry inspect
# names next). The table (sessiondb.base.explain) holds every explanation of a
# damaged or held store; damage verdicts skip the entry's "inspect" step,
# which has just been done.
FROM_TABLE: dict[Verdict, tuple[Cause, str]] = {
    Verdict.STRUCTURAL: (Cause.CORRUPT, "recover"),
    Verdict.FTS_ONLY: (Cause.FTS_INDEX, "repair"),  # repair also heals b-tree damage
    # doctor names the holder; inspect again would loop
    Verdict.LOCKED: (Cause.LOCKED, "doctor"),
}
# Verdicts that are no storage failure, so the table has no entry for them.
OWN_WORDS: dict[Verdict, tuple[str, str | None]] = {
    Verdict.HEALTHY: ("The store is readable and consistent; nothing to do.", None),
    Verdict.NOT_A_DATABASE: ("The file is not an SQLite database; nothing can be read from "
                             "it; "
                       "restore it from a backup.", None),
    Verdict.EMPTY: ("The file holds no data; nothing to recover.", None),
    Verdict.SOURCE_CHANGING: ("The store changed while it was copied; stop the process "
                              "writing "
                        "it, then inspect again.", "inspect"),
}


def store_place(source: Path) -> tuple[Path, str | None] | None:
    """(home, profile) whose store ``source`` is, from the path's layout
    (``<home>/state.db``, ``<home>/profiles/<name>/state.db``); None for a
    file by another name, which only ``--source`` commands can reach."""
    if source.name != STORE_NAME:
        return None
    parent = source.parent
    if parent.parent.name == "profiles":
        try:
            return parent.parent.parent, validate_profile(parent.name)
        except InvalidInput:
            pass  # not a profile's directory; the file is then a home's store
    return parent, None


def advice(verdict: Verdict | str, source: Path) -> tuple[str, str | None]:
    """The explanation and next command for a verdict, pinned to the home
    and profile ``source`` belongs to."""
    verdict = Verdict(verdict)
    place = store_place(source)
    home, profile = place or (None, None)
    actions = explain_commands(source, home, profile)
    if verdict not in FROM_TABLE:
        text, action = OWN_WORDS[verdict]
        return text, actions[action] if action else None
    cause, action = FROM_TABLE[verdict]
    if action == "repair" and place is None:
        action = "recover"  # repair reaches a home's store only; a copy is indexed anew
    if action == "doctor" and place is None:  # doctor reaches a home's store only; the
        return describe(cause, db_path=source).summary, None  # report lists the holders
    return describe(cause, db_path=source, home=home, profile=profile).summary, actions[action]


def open_copy(path: Path) -> apsw.Connection:
    """Open our private copy; read-write because it is ours (WAL recovery may run)."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
    # Keep the copy's -wal as it was found (no checkpoint on close): later
    # lanes, the page carver in particular, read the bundle itself.
    conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    conn.set_busy_timeout(1000)
    conn.execute("PRAGMA trusted_schema=OFF")
    # check every cell of a page as it is loaded: a damaged cell then fails the
    # read (a lane sees a gap) instead of being stepped over silently
    conn.execute("PRAGMA cell_size_check=ON")
    return conn


def _read_table(conn: apsw.Connection, cat: Catalog, name: str) -> TableHealth:
    spec = cat.tables[name]
    count = 0
    try:
        for _row in conn.execute(f"SELECT {spec.select_list()} FROM {spec.quoted()}"):
            count += 1
    except READ_ERRORS as e:
        return TableHealth(name, spec.kind, False, count, _err(e))
    return TableHealth(name, spec.kind, True, count)


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _check_one(conn: apsw.Connection, name: str) -> list[str]:
    try:
        return [r[0] for r in conn.execute(f"PRAGMA quick_check({quote(name)})")]
    except apsw.InterruptError:
        raise
    except READ_ERRORS as e:
        return [_err(e)]


FILE_CHECK = "(file)"  # quick_check findings that belong to no table


def _check_one_file(conn: apsw.Connection) -> list[str]:
    try:
        return [r[0] for r in conn.execute("PRAGMA quick_check")]
    except apsw.InterruptError:
        raise
    except READ_ERRORS as e:
        return [_err(e)]


def bounded_quick_check(conn: apsw.Connection, cat: Catalog, seconds: float,
                        steps: int = 1000, stop: Callable[[], bool] | None = None
                        ) -> dict[str, Any]:
    """``PRAGMA quick_check``, interrupted after ``seconds`` on large files.
    The whole file once (it covers every table, the freelist and the page
    accounting); only when it finds damage, table by table, so the damage
    can be placed in data or in derived tables. The deadline is looked at
    every ``steps`` SQLite steps (each look takes the GIL: a check on a
    thread beside busy Python code looks less often); ``stop`` returning
    True ends the check as the deadline would."""
    deadline = time.monotonic() + seconds
    conn.set_progress_handler(lambda: time.monotonic() > deadline or bool(stop and stop()),
                              steps)
    per_table: dict[str, list[str]] = {}
    timed_out = False
    try:
        whole = _check_one_file(conn)
        if whole != ["ok"]:
            for name, spec in cat.tables.items():
                if spec.kind != "internal":
                    per_table[name] = _check_one(conn, name)
            if all(lines == ["ok"] for lines in per_table.values()):
                per_table[FILE_CHECK] = whole  # damage no table owns (freelist, pages)
    except apsw.InterruptError:
        timed_out = True
    finally:
        conn.set_progress_handler(None)
    bad = {n: lines[:5] for n, lines in per_table.items() if lines != ["ok"]}
    data_bad = [n for n in bad if n not in cat.tables or cat.tables[n].kind != "derived"]
    return {"ok": None if timed_out and not bad else not bad, "timed_out": timed_out,
            "damaged": bad, "derived_only": bool(bad) and not data_bad}


def _fts_stale(conn: apsw.Connection, cat: Catalog) -> bool:
    if "state_meta" not in cat.tables:
        return False
    try:
        row = conn.execute("SELECT value FROM state_meta WHERE key = 'fts_stale'").fetchone()
    except READ_ERRORS:
        return False
    return row is not None and str(row[0]).strip().lower() not in ("", "0", "false", "no")


def _schema_version(conn: apsw.Connection) -> dict[str, list[str]]:
    return {"applied": applied_migrations(conn), "pending": pending_migrations(conn),
            "unknown": unknown_migrations(conn)}


Phase = Callable[[str], None]  # told each phase of a long check, for a terminal


def analyse_copy(snap: Snapshot, report: InspectReport,
                 quick_seconds: float = QUICK_CHECK_SECONDS, *, fts_full: bool | None = None,
                 progress: Phase | None = None, defer_quick_check: bool = False
                 ) -> Catalog | None:
    """Fill ``report`` from the snapshot copy; returns the catalog if readable.
    ``fts_full`` None: the exhaustive FTS5 check only up to FULL_CHECK_BYTES.
    ``defer_quick_check``: see `inspect_snapshot`."""
    copy = snap.db_copy
    wal = Path(f"{copy}-wal")
    report.wal = headers.summarize_wal(wal) if wal.exists() else None
    report.header = headers.read_db_header(copy).to_dict()
    report.header_fixes = headers.repair_header(
        copy, (report.wal or {}).get("page_size"), wal.exists())
    if fts_full is None:
        fts_full = sum(p.stat().st_size for p in (copy, wal) if p.exists()) <= FULL_CHECK_BYTES
    try:
        conn = open_copy(copy)
    except READ_ERRORS as e:
        report.schema_error = _err(e)
        return None
    try:
        return _analyse_open(conn, report, quick_seconds, fts_full, progress or _quiet,
                             defer_quick_check)
    finally:
        conn.close()


def _quiet(_phase: str) -> None:
    pass


def read_catalog_tolerant(conn: apsw.Connection, report: InspectReport) -> Catalog | None:
    """The catalog; if SQLite refuses to parse the schema (a root page past
    the end of a truncated file, say), read it again with writable_schema on,
    which makes SQLite skip the bad entries. Only ever done on our copy."""
    try:
        cat = read_catalog(conn)
    except READ_ERRORS as e:
        report.schema_error = _err(e)
        try:
            conn.execute("PRAGMA writable_schema=ON")
            cat = read_catalog(conn)
            cat.tolerant = True
        except READ_ERRORS:
            return None
    report.schema_readable = True
    return cat


def _analyse_open(conn: apsw.Connection, report: InspectReport, quick_seconds: float,
                  fts_full: bool, progress: Phase, defer: bool = False) -> Catalog | None:
    cat = read_catalog_tolerant(conn, report)
    if cat is None:
        return None
    if cat.identification is not None:
        report.identification = cat.identification.to_dict()
        check = report.identification.get("version_check") or {}
        if check.get("warns"):
            report.warnings.append(f"format version: {check['message']}")
    if cat.unreadable:
        report.schema_error = (report.schema_error or "") + (
            f"schema entries not readable (not valid UTF-8): {', '.join(cat.unreadable[:5])}")
    progress("reading every table")
    for name, spec in cat.tables.items():
        if spec.kind in ("data", "ledger"):
            report.tables.append(_read_table(conn, cat, name))
    try:  # our migration ledger means nothing in a file we did not write
        report.migrations = {} if cat.foreign else _schema_version(conn)
    except READ_ERRORS as e:
        report.migrations = {"error": [_err(e)]}
    if cat.fts5:
        progress("checking the search index" + ("" if fts_full else " (sampled)"))
    report.fts = [check_fts(conn, name, full=fts_full) for name in cat.fts5]
    report.fts_stale = _fts_stale(conn, cat)
    if defer and not cat.tolerant and data_verdict(report) in SOUND:
        return cat  # only quick_check can still call the copy unsound: the caller runs it
    progress("quick_check of every page")
    report.quick_check = bounded_quick_check(conn, cat, quick_seconds)
    return cat


def data_verdict(report: InspectReport) -> Verdict:
    """The verdict from the copy's health alone."""
    head = report.header
    if (head.get("file_size", 0) == 0 or head.get("all_zero")) and not _wal_frames(report):
        return Verdict.EMPTY
    if not head.get("magic_ok") and not report.header_fixes and not report.schema_readable:
        # page 1 gone, yet the carver finds rows on other pages
        est = report.carve_estimate or {}
        # cells of table leaves, attributed or not (a --template can place them)
        carvable = est.get("total", 0) + est.get("unattributed", 0) > 0
        return Verdict.STRUCTURAL if carvable else Verdict.NOT_A_DATABASE
    if not report.schema_readable or report.schema_error:
        return Verdict.STRUCTURAL
    data = [t for t in report.tables if t.kind == "data"]
    if not data:
        return Verdict.EMPTY
    qc = report.quick_check
    if (report.header_fixes or any(not t.readable for t in report.tables)
            or (qc.get("ok") is False and not qc.get("derived_only"))):
        return Verdict.STRUCTURAL
    if (report.fts_stale or qc.get("derived_only")
            or any(not (f.integrity_ok and f.probe_ok) for f in report.fts)):
        return Verdict.FTS_ONLY
    return Verdict.HEALTHY


def _wal_frames(report: InspectReport) -> int:
    return (report.wal or {}).get("valid_frames", 0)


def finish(report: InspectReport, snap: Snapshot | None) -> InspectReport:
    """Set the headline verdict and the advice."""
    if snap is not None and snap.holders and report.verdict != Verdict.SOURCE_CHANGING:
        report.verdict = Verdict.LOCKED
    elif report.verdict != Verdict.SOURCE_CHANGING:
        report.verdict = report.data_verdict
    report.explanation, report.next_command = advice(report.verdict, Path(report.source))
    _foreign_advice(report)
    return report


def _foreign_advice(report: InspectReport) -> None:
    """A file we did not write is never reindexed (that would make it ours):
    its damage of any kind is recovered into a new file in its own schema.
    With page 1 lost and no registered format recognised, the recovery
    needs the schema from a healthy file of the same program."""
    ident = report.identification
    source = Path(report.source)
    recover_cmd = advice(Verdict.STRUCTURAL, source)[1]
    if ident.get("kind") not in (None, "hermes-state") and report.verdict == Verdict.FTS_ONLY:
        report.explanation = (f"Only the search index of this {ident.get('label')} is "
                              "damaged; its rows are intact. Recover it into a new file, "
                              "which rebuilds the index in the file's own schema.")
        report.next_command = recover_cmd
    elif report.verdict == Verdict.STRUCTURAL and not report.schema_readable:
        if ident.get("kind") in (None, "sqlite") and recover_cmd:
            report.next_command = recover_cmd + " --template TEMPLATE"
            report.explanation += (" The file's schema page is lost and its format is not "
                                   "one recovery knows: give --template, a healthy file (or "
                                   "a .sql schema) from the program that wrote it.")


def _free_disk(source: Path, snap: Snapshot | None) -> dict[str, int]:
    out = {"source_dir": shutil.disk_usage(source.parent).free}
    if snap is not None:
        out["work_dir"] = shutil.disk_usage(snap.directory).free
    return out


def estimate_carving(copy: Path) -> dict[str, Any]:
    """`carver.estimate` of the copy (with its -wal): rows carving would find,
    by the layouts of every registered format (ours too), and by format."""
    try:
        est = survey(copy)
    except (CarveError, OSError) as e:
        return {"error": _err(e)}
    ident, _found = guess(est)
    return {"rows": est.rows, "total": est.total, "unattributed": est.unattributed,
            "schema_readable": est.schema_readable, "page_count": est.page_count,
            "bad_pages": est.bad_pages, "formats": est.formats,
            "schema_rows_found": len(est.harvested),
            "identification": ident.to_dict() if ident else None}


def _guess(report: InspectReport) -> None:
    """With the schema lost, say what the file's pages look like."""
    ident = (report.carve_estimate or {}).get("identification")
    if report.schema_readable or not ident:
        return
    report.identification = {**ident, "guessed": True}


def inspect_snapshot(snap: Snapshot, *, quick_seconds: float = QUICK_CHECK_SECONDS,
                     estimate: bool | str | None = True, fts_full: bool | None = None,
                     progress: Phase | None = None, defer_quick_check: bool = False,
                     ) -> tuple[InspectReport, Catalog | None]:
    """Analyse a snapshot taken by the caller. ``estimate`` None (what
    recover uses) estimates carving only when SQLite cannot read the schema,
    since only then does the verdict depend on it; "damaged" (what inspect
    uses) also when the copy is not healthy (on a healthy file the rows read
    are exact, and the estimate walks every page in Python).
    ``defer_quick_check``: when everything else finds the copy sound, leave
    ``quick_check`` empty (its verdict provisional) for the caller to run
    beside other work and hand to `complete_quick_check` (what recover does:
    `hstate_recovery.salvage.early_check`); otherwise it is run here as always."""
    started = time.monotonic()
    report = InspectReport(str(snap.source), Verdict.HEALTHY, Verdict.HEALTHY)
    report.shm_present = snap.has("-shm")
    report.journal_present = snap.has("-journal")
    report.holders = [h.to_dict() for h in snap.holders]
    report.fingerprints = snap.to_dict()
    cat = analyse_copy(snap, report, quick_seconds, fts_full=fts_full, progress=progress,
                       defer_quick_check=defer_quick_check)
    if _wants_estimate(estimate, report):
        if progress is not None:
            progress("estimating what carving would find")
        # after analyse_copy: on the copy as its header was repaired
        report.carve_estimate = estimate_carving(snap.db_copy)
        _guess(report)
    report.data_verdict = data_verdict(report)
    report.free_disk = _free_disk(snap.source, snap)
    report.elapsed_s = round(time.monotonic() - started, 3)
    return finish(report, snap), cat


def complete_quick_check(report: InspectReport, snap: Snapshot, quick_check: dict[str, Any],
                         seconds: float) -> InspectReport:
    """A deferred quick_check's result into ``report`` (see `inspect_snapshot`):
    the verdict and advice as if it had been run in place."""
    report.quick_check = quick_check
    report.data_verdict = data_verdict(report)
    report.elapsed_s = round(report.elapsed_s + seconds, 3)
    return finish(report, snap)


def _wants_estimate(estimate: bool | str | None, report: InspectReport) -> bool:
    if not report.schema_readable:
        return estimate is not False
    if estimate == "damaged":
        return data_verdict(report) != Verdict.HEALTHY
    return estimate is True


def inspect(source: str | Path, *, work_dir: str | Path | None = None,
            quick_seconds: float = QUICK_CHECK_SECONDS, keep_work: bool = False,
            fts_full: bool | None = None, progress: Phase | None = None,
            **snapshot_kw: Any) -> InspectReport:
    """Snapshot ``source`` into a private work dir and describe it.

    A source that changes during the copy yields verdict ``source_changing``
    rather than an exception; other snapshot failures raise RecoveryError.
    ``fts_full`` None checks the search index exhaustively up to
    FULL_CHECK_BYTES, by samples above (see inspect_fts.py); ``progress`` is
    told each phase.
    """
    source = Path(source)
    if progress is not None:
        progress("copying the store into a private snapshot")
    try:
        snap = take_snapshot(source, Path(work_dir) if work_dir else None, **snapshot_kw)
    except SourceChanging as e:
        report = InspectReport(str(source), Verdict.SOURCE_CHANGING, Verdict.UNKNOWN,
                               holders=[h.to_dict() for h in e.holders],
                               changed_files=e.changed)
        report.free_disk = _free_disk(source, None)
        return finish(report, None)
    except OSError as e:
        raise RecoveryIOError(f"cannot copy {source}: {e}", path=str(source)) from e
    try:
        return inspect_snapshot(snap, quick_seconds=quick_seconds, estimate="damaged",
                                fts_full=fts_full, progress=progress)[0]
    except OSError as e:
        raise RecoveryIOError(f"inspection stopped by an I/O error: {e}",
                              path=getattr(e, "filename", None)) from e
    finally:
        if not keep_work:
            snap.cleanup()
