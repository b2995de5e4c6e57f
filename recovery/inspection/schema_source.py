"""Where a recovery's schema comes from when the file cannot say.

The file's own ``sqlite_master`` comes first (`catalog.read_catalog`).
When page 1 is unreadable: a ``--template`` (a healthy file from the same
program, or a ``.sql`` schema), else the schema rows that survive on other
pages (a large schema spans several) completed by the registry of known
formats (`hstate_recovery.schema.formats`), the format chosen by which registered
layouts the file's pages fit best. Our own store falls back to our current
schema, as before. Every catalog made here is marked ``reference`` (not the
file's own: no SQL lane reads the file through it).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import apsw

from ..base import RecoveryUsageError
from ..carve import CarveError, estimate
from ..schema import (Catalog, FORMATS, Format, GENERIC, Identification, KNOWN_LAYOUTS,
                      LLM_RESPONSES, LLM_THREADS, Layout, OURS, OUR_STORE, all_layouts,
                      format_named, layout_for_schema, parse_columns, read_catalog,
                      reference_catalog, registry_layout, registry_statements)

_ORDER = {"table": 0, "index": 1, "view": 2, "trigger": 3}


def catalog_from_statements(statements: Sequence[tuple[str, str, str, str | None]],
                            source: str) -> Catalog:
    """A catalog of the schema these (type, name, tbl_name, sql) rows make,
    built by SQLite in a private in-memory database; a statement SQLite
    refuses is named in ``unreadable`` and left out."""
    conn = apsw.Connection(":memory:")
    bad: list[str] = []
    try:
        rows = sorted((r for r in statements if r[3] and not r[1].startswith("sqlite_")),
                      key=lambda r: _ORDER.get(r[0], 9))
        for kind, name, _t, sql in rows:
            try:
                conn.execute(sql)  # type: ignore[arg-type]  # rows without sql left out above
            except apsw.Error as e:
                bad.append(f"{kind} {name!r}: {type(e).__name__}")
        cat = read_catalog(conn)
    finally:
        conn.close()
    cat.reference, cat.source = True, source
    cat.unreadable += bad
    return cat


def catalog_from_template(path: Path) -> Catalog:
    """The schema of a healthy file from the same program (read-only,
    immutable: the template is never changed), or of a ``.sql`` file."""
    if not path.is_file():
        raise RecoveryUsageError(f"template {path} does not exist or is not a file")
    head = path.read_bytes()[:16]
    if head.startswith(b"SQLite format 3\x00"):
        uri = f"file:{path.resolve()}?immutable=1"
        try:
            conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
            try:
                rows: list[tuple[Any, ...]] = conn.execute(
                    "SELECT type, name, tbl_name, sql FROM sqlite_master"
                                    ).fetchall()
            finally:
                conn.close()
        except (apsw.Error, UnicodeDecodeError) as e:
            raise RecoveryUsageError(f"template {path} cannot be read: {e}") from e
        return catalog_from_statements(rows, "template")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RecoveryUsageError(f"template {path} is neither an SQLite file nor SQL text: "
                                 f"{e}") from e
    return catalog_from_statements(_split_sql(text), "template")


def _split_sql(text: str) -> list[tuple[str, str, str, str]]:
    """Statements of a .sql schema as schema rows (SQLite says where each ends)."""
    out: list[tuple[str, str, str, str]] = []
    rest = text
    while rest.strip():
        end = _statement_end(rest)
        stmt, rest = rest[:end].strip().rstrip(";"), rest[end:]
        words = stmt.split()
        if len(words) < 3 or words[0].upper() != "CREATE":
            continue
        kind = next((w.lower() for w in words[1:4] if w.lower() in _ORDER), None)
        if kind is not None:
            out.append((kind, f"stmt{len(out)}", "", stmt))
    return out


def _statement_end(text: str) -> int:
    for i, ch in enumerate(text):
        if ch == ";" and apsw.complete(text[:i + 1]):
            return i + 1
    return len(text)


def _registry_format(kind: str, rows: dict[str, int]) -> Format | None:
    if kind == "llm":
        threads = any(rows.get(t) for t in ("threads", "turns", "parts"))
        return LLM_THREADS if threads else LLM_RESPONSES
    return next((f for f in FORMATS if f.kind == kind and f.tables), None)


def _any_format_layout(name: str, sql: str | None) -> Layout | None:
    """A surviving schema row's layout: a registered format's whose column
    order is the row's own (so cells count for that format), else ours or
    one parsed from the statement."""
    cols = [c[0] for c in parse_columns(name, sql)] if sql else []
    for fmt in FORMATS:
        lay = registry_layout(fmt, name, cols) if fmt.tables else None
        if lay is not None:
            return lay
    return layout_for_schema(name, sql)


_SURVEYED: dict[tuple, Any] = {}  # the last survey, by its files' identity


def _identity(path: Path) -> tuple:
    try:
        st = path.stat()
    except FileNotFoundError:
        return (str(path), None)
    return (str(path), st.st_ino, st.st_size, st.st_mtime_ns)


def survey(copy: Path) -> Any:
    """A count of the copy's cells by registered format (page 1 lost). The
    last one is kept while its files stay as they were: inspect's carving
    estimate and the fallback schema of the recover that follows read the
    same unchanged copy, and each survey walks every page."""
    wal = Path(f"{copy}-wal")
    key = (_identity(copy), _identity(wal))
    if key in _SURVEYED:
        return _SURVEYED[key]
    est = estimate(copy, wal if wal.exists() else None, resolve=_any_format_layout,
                   fill=all_layouts() + KNOWN_LAYOUTS, harvest=True)
    _SURVEYED.clear()
    _SURVEYED[key] = est
    return est


def guess(est: Any) -> tuple[Identification | None, Catalog | None]:
    """What a file whose schema page is lost is: the identification of the
    schema rows that survived, else the format most of its cells fit."""
    harvested = [(e.type, e.name, e.tbl_name, e.sql) for e in est.harvested]
    found = catalog_from_statements(harvested, "harvested") if harvested else None
    ident = found.identification if found is not None else None
    if ident is not None and (ident.ours or ident.registered):
        return ident, found
    kind = _dominant({k: n for k, n in est.formats.items() if k != GENERIC})
    if kind is None:
        return ident, found
    if kind == OURS:
        return Identification(OURS, OUR_STORE.label), found
    fmt = _registry_format(kind, est.rows)
    return (Identification(fmt.kind, fmt.label, None, fmt.commands) if fmt else ident), found


def fallback_catalog(copy: Path, template: Path | None = None) -> Catalog:
    """The schema to recover ``copy`` by when its own cannot be read."""
    if template is not None:
        return catalog_from_template(template)
    try:
        est = survey(copy)
    except (CarveError, OSError):
        return reference_catalog()
    ident, found = guess(est)
    if ident is None or ident.ours:
        return reference_catalog()
    fmt = format_named(ident.label)
    if fmt is None:  # an unknown format whose table statements survived
        return found if found is not None and found.data_tables() else reference_catalog()
    harvested = found.entries if found is not None else []
    have = {e[1] for e in harvested}
    rows = harvested + [r for r in registry_statements(fmt) if r[1] not in have]
    cat = catalog_from_statements(rows, "harvested+registry" if harvested else "registry")
    return cat


def _dominant(formats: dict[str, int]) -> str | None:
    if not formats:
        return None
    return max(formats, key=lambda k: formats[k])

