"""The `carve` lane: rows read from the copy's pages by `hstate_recovery.carve.carver`.

The last lane of `recover`, run only while some table is still missing rows
(or alone, with ``--lane carve``). It carves the private copy and its
``-wal`` once, then hands back, per pending table, the carved rows (each
marked with its `RowOrigin` under ``ORIGIN_KEY``) and the rowid ranges
still missing after it. The orchestrator keeps rows other lanes found
already (same rowid, same unique key), so only new rows count for `carve`.
Rows stream from the pages to the new file in batches (`carve_stream`):
only counters and session-id sets stay behind.

Gaps after carving: a table whose tree the carver walked from its root
without meeting any damage is complete. Otherwise the rows an intact index
lists but nobody found are the exact loss; without an index, only the holes
between known rowids can be named, and the table is marked ``unproven``
(rows on destroyed pages cannot be counted). Records no layout claims go to
the output's lost-and-found table; carved ``state_meta`` and ``migrations``
rows are not used (the new store writes its own), FTS rows never are.
"""
from __future__ import annotations

import bisect
import logging
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Generator

from ..carve import CarveError, CarveResult, CarveStats, LostRecord, Resolver, RowOrigin
from ..schema import (Catalog, Layout, ORIGIN_KEY, READ_ERRORS, ROWID_KEY, format_layouts,
                      format_named, layout_from_sql, parse_columns, quote, registry_layout)
from .carve_stream import carve_stream
from .context import Batch, LOST, LaneContext, LaneResult, LaneRun, Range, TableState, runs

log = logging.getLogger(__name__)

# Tables whose carved rows are not used, and why (said in the lane's stats).
NOT_CARVED = {
    "state_meta": "describes the damaged file; the new store writes its own",
    "migrations": "the migration ledger; the new store writes its own",
}


@dataclass
class _Tally:
    """What the carve handed on, counted as it streams (never the rows)."""

    rows: dict[str, Counter] = field(default_factory=dict)  # table -> carver lane -> rows
    lost: Counter = field(default_factory=Counter)  # lost records by reason
    sessions: set = field(default_factory=set)  # session ids of carved sessions rows
    named: set = field(default_factory=set)  # session ids carved messages name
    span: dict[str, tuple[int, int]] = field(default_factory=dict)  # carved rowid min, max

    def add(self, table: str, row: dict, origin: RowOrigin) -> None:
        c = self.rows.setdefault(table, Counter())
        c[origin.lane] += 1
        c["wal"] += origin.from_wal
        if table == "sessions":
            self.sessions.add(row.get("id"))
        elif table == "messages" and isinstance(row.get("session_id"), str):
            self.named.add(row["session_id"])
        if isinstance(origin.rowid, int):
            lo, hi = self.span.get(table, (origin.rowid, origin.rowid))
            self.span[table] = (min(lo, origin.rowid), max(hi, origin.rowid))


def carve_lane(ctx: LaneContext) -> LaneRun:
    """Carve the copy once, streaming; rows and gaps for every table still pending."""
    result = LaneResult()
    pending = {s.spec.name: s for s in ctx.pending()}
    if not pending:
        return result
    wal = Path(f"{ctx.copy_path}-wal")
    ctx.report_progress("carving pages", 0, 0)
    resolve, fill = layouts_for(ctx.catalog)
    ours = not (ctx.catalog is not None and ctx.catalog.foreign)
    skipped = {n for n in pending if ours and n in NOT_CARVED}
    tally = _Tally()
    try:
        stats = yield from _stream(ctx, carve_stream(
            ctx.copy_path, wal if wal.exists() else None, include_freelist=ctx.include_freelist,
            resolve=resolve, fill=fill, harvest=not ours, want=_wanted(pending, skipped),
            want_span=_wanted_span(pending, skipped)), pending, skipped, tally)
    except (CarveError, OSError) as e:
        result.stats["error"] = f"{type(e).__name__}: {e}"
        return result
    result.stats = _summary(stats, tally)  # counts and stats only, never row values
    tables: dict[str, Any] = {}
    for name, state in pending.items():
        if name in skipped:
            tables[name] = {"skipped": NOT_CARVED[name]}
            continue
        result.gaps[name], tables[name] = _gaps_after(ctx, state, tally, stats)
    result.stats["tables"] = tables
    return result


def _wanted(pending: dict[str, TableState], skipped: set) -> Callable[[str | None, Any], bool]:
    """Rows still missing: a rowid inside a pending table's gaps (read live,
    so a row the tree walk found is not decoded again from an orphan page).
    Rows other lanes kept are never decoded: they would only be duplicates."""
    def want(table: str | None, rowid: Any) -> bool:
        if not isinstance(rowid, int):
            return True
        names = [table] if table is not None else [n for n in pending if n not in skipped]
        return any(_inside(pending[n].gaps, rowid) for n in names
                   if n in pending and n not in skipped)
    return want


def _wanted_span(pending: dict[str, TableState], skipped: set) -> Callable[[str, int, int], bool]:
    """Whether any rowid from ``lo`` to ``hi`` of ``table`` is still missing
    (a tree leaf whose whole span was read needs no rowid asked about)."""
    def want_span(table: str, lo: int, hi: int) -> bool:
        state = pending.get(table)
        if state is None or table in skipped:
            return False
        gaps = state.gaps
        i = bisect.bisect_right(gaps, hi, key=lambda g: g[0]) - 1
        return i >= 0 and gaps[i][1] >= lo
    return want_span


def _inside(gaps: list[Range], rowid: int) -> bool:
    i = bisect.bisect_right(gaps, rowid, key=lambda g: g[0]) - 1
    return i >= 0 and gaps[i][0] <= rowid <= gaps[i][1]


def _stream(ctx: LaneContext, carving: Any, pending: dict[str, TableState], skipped: set,
            tally: _Tally) -> Generator[Batch, None, CarveStats]:
    """Hand the carved rows of pending tables on, per table, batch by batch;
    lost records go on as a `LOST` batch."""
    done = 0
    while True:
        try:
            found, lost = next(carving)
        except StopIteration as stop:
            return stop.value
        by_table: dict[str, list[dict]] = {}
        for table, row, origin in found:
            tally.add(table, row, origin)
            if table in pending and table not in skipped:
                by_table.setdefault(table, []).append(
                    {**row, ROWID_KEY: origin.rowid, ORIGIN_KEY: origin})
        for table, rows in by_table.items():
            yield table, rows
        if lost:
            tally.lost.update(r.reason.split(":")[0] for r in lost)
            yield LOST, [lost_item(r) for r in lost]
        done += len(found)
        ctx.report_progress("carving pages", done, 0)


def _summary(stats: CarveStats, tally: _Tally) -> dict[str, Any]:
    rows = {t: dict(c) for t, c in tally.rows.items()}
    out = CarveResult(stats=stats).summary()
    out.update(rows=rows, lost_and_found=dict(tally.lost),
               orphaned_sessions=len(tally.named - tally.sessions))
    return out


def layouts_for(cat: Catalog | None) -> tuple[Resolver | None, tuple[Layout, ...] | None]:
    """How the carver maps records to this catalog's tables: our layouts for
    our store (the defaults); for a foreign file, the registered layout whose
    column order is the file's own, else one parsed from its CREATE TABLE,
    never ours because a table has our name."""
    if cat is None or not cat.foreign:
        return None, None
    fmt = format_named(cat.identification.label) if cat.identification else None

    def resolve(name: str, sql: str | None) -> Layout | None:
        cols = [c[0] for c in parse_columns(name, sql)] if sql else []
        own = layout_from_sql(name, sql)
        known = registry_layout(fmt, name, cols)
        return own if known is None else with_named_extras(known, own)

    own = [resolve(t.name, t.sql) for t in cat.data_tables()]
    fill = [lay for lay in own if lay is not None]
    orders = {(lay.table, tuple(c.name for c in lay.columns)) for lay in fill}
    fill += [lay for lay in (format_layouts(fmt) if fmt else ())
             if (lay.table, tuple(c.name for c in lay.columns)) not in orders]
    return resolve, tuple(_later_columns_allowed(lay) for lay in fill)


WIDE = 8  # columns from which a registered table's checks pin its records down
LATER_COLUMNS = 8  # trailing columns a later release may have added to it


def _later_columns_allowed(lay: Layout) -> Layout:
    """A page outside every walked tree (page 1 lost) is matched against
    the registered layouts; a later release of the program may have added
    columns at the end of a wide table, whose records the registered layout
    would refuse as too long. Its first columns still decide the fit; the
    unnamed extras are left out of the row (a template names them)."""
    if lay.fmt == "sqlite" or not lay.strict or len(lay.columns) < WIDE \
            or lay.max_extra >= LATER_COLUMNS:
        return lay
    return replace(lay, max_extra=LATER_COLUMNS)


def with_named_extras(known: Layout, own: Layout | None) -> Layout:
    """The registered layout, plus the trailing columns the file's own
    CREATE TABLE adds after the registry's (a later release's column, such
    as one a trigger fills in the inserting transaction): mapped by name
    instead of dropped as unknown extras, so a carved row keeps them."""
    if own is None or len(own.columns) <= len(known.columns):
        return known
    extra = own.columns[len(known.columns):]
    return replace(known, columns=known.columns + extra,
                   max_extra=max(0, known.max_extra - len(extra)),
                   min_columns=known.oldest)


def _gaps_after(ctx: LaneContext, state: TableState, tally: _Tally,
                stats: CarveStats) -> tuple[list[Range], dict[str, Any]]:
    """The rowid ranges still missing, and how sure that is (see module doc).
    The orchestrator has already taken every carved rowid out of
    ``state.gaps`` as the batches went by."""
    name = state.spec.name
    damage = stats.tree_damage.get(name)
    walk = "none" if damage is None else ("clean" if damage == 0 else "damaged")
    carved = tally.rows.get(name, Counter())
    info: dict[str, Any] = {"carved": sum(n for k, n in carved.items() if k != "wal"),
                            "walk": walk}
    if walk == "clean":  # every leaf under the root read, every cell decoded
        info["exact"] = True
        return [], info
    remaining = state.gaps
    listed = _indexed_rowids(ctx, state, remaining)
    if listed is not None:  # an intact index names every row that existed
        info["exact"] = True
        return runs(listed), info
    info["exact"] = False
    ends = [v for v in (state.low, state.high) if v is not None] + list(tally.span.get(name, ()))
    if not ends:
        return [], info
    lo, hi = min(ends), max(ends)  # beyond the known rowids nothing can be named
    return [(max(a, lo), min(b, hi)) for a, b in remaining if a <= hi and b >= lo], info


def _indexed_rowids(ctx: LaneContext, state: TableState, gaps: list[Range]) -> list[int] | None:
    """Rowids inside ``gaps`` that an index of the table lists, when one reads
    cleanly for every gap (else None: the loss cannot be counted)."""
    if ctx.conn is None or ctx.catalog is None or ctx.catalog.reference or not gaps:
        return [] if not gaps else None
    for index in ctx.catalog.indexes(state.spec.name):
        try:
            return [r[0] for lo, hi in gaps for r in ctx.conn.execute(
                f"SELECT rowid FROM {state.spec.quoted()} INDEXED BY {quote(index)} "
                "WHERE rowid BETWEEN ? AND ?", (lo, hi))]
        except READ_ERRORS as e:  # a damaged index: try the next one
            log.debug("index %s unreadable: %s", index, e)
            continue
    return None


def lost_item(record: LostRecord) -> dict[str, Any]:
    """A record no layout claimed, as the output's lost-and-found keeps it:
    where it was and its raw values (never put into the report)."""
    return {"page": record.page, "cell": record.cell, "rowid": record.rowid,
            "reason": record.reason, "carve_lane": record.lane, "from_wal": record.from_wal,
            "values": record.values}
