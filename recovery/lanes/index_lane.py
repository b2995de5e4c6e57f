"""The `index` lane: rows rebuilt from the columns intact indexes still hold.

Run after bisection, for rowids no lane could read. Every index of a table
that reads cleanly gives some columns of each row it lists; the indexes'
scans are merged in rowid order as they stream, so a table's index values
are never all in memory. A row is kept only when every required column is
known, marked partial so a later lane's whole row replaces it.
"""
from __future__ import annotations

import heapq
import itertools
from typing import Iterator

from ..schema import PARTIAL_KEY, READ_ERRORS, ROWID_KEY, TableSpec, quote
from .context import BATCH_ROWS, LaneContext, LaneResult, LaneRun, Range


# -- lane 4: rows rebuilt from intact indexes --------------------------------

# Columns no index holds but that a rebuilt row may take from a sibling column.
FILL_FROM = {"sessions": {"updated_at": "started_at"}}


def index_lane(ctx: LaneContext) -> LaneRun:
    """For rowids still unread, collect every column the table's intact
    indexes hold. A row is kept only when all its required columns are
    known; it is marked partial (``PARTIAL_KEY`` lists the lost columns) so
    a later lane that finds the whole row replaces it. Gaps stay as they
    are: the rows were not read, only reconstructed."""
    result = LaneResult()
    if ctx.conn is None or ctx.catalog is None:
        return result
    for state in ctx.pending():
        spec = state.spec
        if not spec.rowid:
            continue
        batch: list[dict] = []
        rebuilt = unusable = 0
        for rowid, known in _index_values(ctx, spec, state.gaps):
            for col, source in FILL_FROM.get(spec.name, {}).items():
                if col not in known and source in known:
                    known[col] = known[source]
            if not set(spec.required) <= set(known):
                unusable += 1
                continue
            lost = [c for c in spec.columns if c not in known]
            batch.append({ROWID_KEY: rowid, **known, PARTIAL_KEY: lost})
            rebuilt += 1
            if len(batch) >= BATCH_ROWS:
                yield spec.name, batch
                batch = []
        if batch:
            yield spec.name, batch
        result.stats[spec.name] = {"rebuilt": rebuilt, "unusable": unusable}
    return result


def _index_values(ctx: LaneContext, spec: TableSpec,
                  gaps: list[Range]) -> Iterator[tuple[int, dict]]:
    """(rowid, {column: value}) in rowid order from every index that reads
    cleanly, the indexes' scans merged as they stream."""
    scans = []
    for index in ctx.live_catalog.indexes(spec.name):
        cols = [r[2] for r in ctx.live.execute(f"PRAGMA index_info({quote(index)})")]
        if not cols or any(c is None for c in cols):
            continue  # expression index: its values are not columns
        sql = (f"SELECT rowid, {', '.join(quote(c) for c in cols)} FROM {spec.quoted()} "
               f"INDEXED BY {quote(index)} WHERE rowid BETWEEN ? AND ? ORDER BY rowid")
        scans.append(_index_scan(ctx, sql, cols, list(gaps)))
    for rowid, group in itertools.groupby(heapq.merge(*scans, key=lambda x: x[0]),
                                          key=lambda x: x[0]):
        known: dict = {}
        for _rowid, values in group:
            known.update(values)
        yield rowid, known


def _index_scan(ctx: LaneContext, sql: str, cols: list[str],
                gaps: list[Range]) -> Iterator[tuple[int, dict]]:
    """One index's values over the gaps; a gap that fails to read is skipped
    (what it gave before the error is kept)."""
    for gap in gaps:
        try:
            for r in ctx.live.execute(sql, gap):
                yield r[0], dict(zip(cols, r[1:]))
        except READ_ERRORS:
            continue
