"""Verification of a recovered store before it is put in place.

`verify_output` returns a list of findings; an empty list means verified.
It checks SQLite's integrity and foreign keys, that the schema is the
current one, every fts5 table present (integrity-check and a MATCH probe),
and that each table holds exactly the rows we wrote.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import AbstractSet, Any, Callable

import apsw

from sessiondb.recovery_api import applied_migrations, one, pending_migrations, unknown_migrations

from ..inspection import fts_health, integrity_lines, match_probe, virtual_tables
from ..schema import quote, read_catalog


@dataclass
class Verification:
    """Each check's outcome and the findings (problems) it produced."""

    findings: list[str] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # each check's, for the timings

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        out = {"ok": self.ok, **asdict(self)}
        del out["seconds"]  # in the report's timings
        return out


def _integrity(conn: apsw.Connection, v: Verification) -> None:
    """``PRAGMA integrity_check(20)``, its b-tree part and each virtual
    table's part at once on connections of their own (`hstate_recovery.inspection.integrity`)."""
    lines = integrity_lines(Path(conn.filename), virtual_tables(conn), 20,
                            conn.vfsname("main") or None)
    v.checks["integrity_check"] = lines
    if lines != ["ok"]:
        v.findings.append(f"integrity_check: {'; '.join(lines[:3])}")


def _foreign_keys(conn: apsw.Connection, v: Verification) -> None:
    bad = conn.execute("PRAGMA foreign_key_check").fetchall()
    v.checks["foreign_key_violations"] = len(bad)
    if bad:
        v.findings.append(f"foreign_key_check: {len(bad)} rows point at missing parents")


def _schema(conn: apsw.Connection, v: Verification) -> None:
    pending, unknown = pending_migrations(conn), unknown_migrations(conn)
    v.checks["schema"] = {"applied": applied_migrations(conn), "pending": pending,
                          "unknown": unknown}
    if pending or unknown:
        v.findings.append(f"schema is not current (pending {pending}, unknown {unknown})")


def _fts(conn: apsw.Connection, v: Verification) -> None:
    """Each fts5 table: FTS5's own integrity-check, and a MATCH probe. The
    integrity_check pragma runs FTS5's check on every fts5 table already
    (SQLite >= 3.44), so when it said ok only the probe runs: the check
    reads the whole index, as long again as the rest of verification."""
    sound = v.checks.get("integrity_check") == ["ok"]
    results = [match_probe(conn, name) if sound else fts_health(conn, name)
               for name in read_catalog(conn).fts5]
    v.checks["fts"] = [asdict(r) for r in results]
    for r in results:
        if not (r.integrity_ok and r.probe_ok):
            v.findings.append(f"fts table {r.name}: {r.error}")


def _counts(conn: apsw.Connection, v: Verification, expected: dict[str, int]) -> None:
    found = {}
    for table, want in expected.items():
        (have,) = one(conn.execute(f"SELECT count(*) FROM {quote(table)}"))
        found[table] = have
        if have != want:
            v.findings.append(f"table {table}: {have} rows in the output, {want} written")
    v.checks["counts"] = found


def source_shortfall(readable: dict[str, int], kept: dict[str, int]) -> list[str]:
    """Tables that kept fewer rows than the source let SQL read straight through."""
    return [f"table {t}: {kept.get(t, 0)} rows kept, the source had {n} readable"
            for t, n in readable.items() if kept.get(t, 0) < n]


Check = Callable[[apsw.Connection, "Verification"], None]


def verify_output(path: Path, expected: dict[str, int],
                  readable: dict[str, int] | None = None,
                  progress: Callable[[str, int, int], None] | None = None) -> Verification:
    """Run every check on ``path``; a check that cannot run is a finding.

    ``expected`` is the rows written per table; ``readable`` (optional) the
    rows the source had readable, which the output must not fall short of
    (rows kept in quarantine count as kept).
    """
    named: list[tuple[str, Check]] = [
        (check.__name__.strip("_"), check) for check in (_integrity, _foreign_keys, _schema, _fts)]
    named.append(("counts", lambda c, v: _counts(c, v, expected)))
    return _run_checks(path, expected, readable, named, progress)


def _run_checks(path: Path, expected: dict[str, int], readable: dict[str, int] | None,
                checks: list[tuple[str, Check]],
                progress: Callable[[str, int, int], None] | None = None) -> Verification:
    """Open the output once and run ``checks`` on it; a check that raises
    becomes a finding under its name, and the others still run."""
    v = Verification()
    if readable:
        v.findings += source_shortfall(readable, expected)
    try:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
    except apsw.Error as e:
        v.findings.append(f"cannot open the output: {type(e).__name__}: {e}")
        return v
    try:
        for i, (name, check) in enumerate(checks):
            if progress is not None:
                progress(f"verifying: {name}", i, len(checks))
            started = time.monotonic()
            try:
                check(conn, v)
            except apsw.Error as e:
                v.findings.append(f"{name}: {type(e).__name__}: {e}")
            v.seconds[name] = round(time.monotonic() - started, 3)
        if progress is not None:
            progress("verifying", len(checks), len(checks))
    finally:
        conn.close()
    return v


def _foreign_keys_info(conn: apsw.Connection, v: Verification) -> None:
    """A foreign file's foreign keys are its program's business (many never
    enforce them, and a key SQLite cannot check, such as a parent column
    without a unique index, is the schema's own): counted, never failed."""
    try:
        v.checks["foreign_key_violations"] = len(conn.execute("PRAGMA foreign_key_check")
                                                 .fetchall())
    except apsw.SQLError as e:
        v.checks["foreign_key_violations"] = None
        v.checks["foreign_key_note"] = f"the source's schema declares keys SQLite cannot check: {e}"


def _same_schema(conn: apsw.Connection, v: Verification, want: list[tuple]) -> None:
    """Every table, index, view and trigger of the source is in the output,
    tables with the same columns in the same order."""
    have = {(k, n): s for k, n, _t, s in conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master")}
    missing = [f"{k} {n}" for k, n, _t, s in want if s and (k, n) not in have
               and not n.startswith("sqlite_")]
    v.checks["schema"] = {"source_entries": len(want), "missing": missing}
    if missing:
        v.findings.append(f"schema: {len(missing)} entries of the source are missing: "
                          f"{', '.join(missing[:5])}")


def verify_foreign(path: Path, entries: list[tuple], expected: dict[str, int],
                   readable: dict[str, int] | None = None, *,
                   allowed_missing: AbstractSet[str] = frozenset()) -> Verification:
    """`verify_output` for a file in its own (foreign) schema: integrity,
    the source's schema present (``entries``, less what could not be
    created and is reported as such), FTS, counts; foreign keys counted."""
    want = [e for e in entries if f"{e[0]} {e[1]}" not in allowed_missing]
    checks: list[Check] = [_integrity, _foreign_keys_info,
                           lambda c, v: _same_schema(c, v, want), _fts,
                           lambda c, v: _counts(c, v, expected)]
    return _run_checks(path, expected, readable, [("check", c) for c in checks])
