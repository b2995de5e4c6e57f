"""The SQL lanes: row copy in rowid chunks, then bisection around the
damaged pages, steered by the b-tree's interior pages where it is readable."""
from __future__ import annotations

import bisect
import logging
from array import array
from typing import Any, Generator, Iterable

from sessiondb.recovery_api import MAX_ROWID, MIN_ROWID

from ..carve import TreeMap, tree_map
from ..schema import READ_ERRORS, ROWID_KEY, TableSpec, quote
from .context import (Batch, Budget, EVERYTHING, LaneContext, LaneResult, LaneRun, Range,
                      SINGLES_BELOW, TableState, batches, merge_ranges, read_whole, runs)

log = logging.getLogger(__name__)

# -- lane 2: SQL row copy in chunks -----------------------------------------

def row_copy_lane(ctx: LaneContext) -> LaneRun:
    """Read each table forward in rowid chunks until an error, then backward
    from the end; what lies between is left as one gap for bisection."""
    result = LaneResult()
    if ctx.conn is None:
        return result
    for state in ctx.pending():
        if not state.spec.rowid:
            yield from read_whole(ctx, ctx.conn, state.spec, result)
            continue
        gaps: list[Range] = []
        read = [0]
        for gap in list(state.gaps):
            gaps += yield from _copy_range(ctx, state.spec, gap, read)
        result.gaps[state.spec.name] = audit_gaps(ctx, state, gaps)
    return result


def audit_gaps(ctx: LaneContext, state: TableState, gaps: list[Range]) -> list[Range]:
    """``gaps`` plus every rowid an intact index lists that no lane kept.
    SQLite's search can step over a damaged cell without an error (a lookup
    finds nothing, a range scan starts after it): such rows are not absent,
    they are unread, and a later lane must look for them."""
    missing = _index_missing(ctx, state.spec)
    return merge_ranges(gaps + missing) if missing else gaps


def _index_missing(ctx: LaneContext, spec: TableSpec) -> list[Range] | None:
    """Runs of rowids the first cleanly read index lists and the output lacks,
    streamed from the index (a table's rowids are never held at once)."""
    if ctx.catalog is None:
        return None
    for index in ctx.catalog.indexes(spec.name):
        try:
            listed = (r[0] for r in ctx.live.execute(
                f"SELECT rowid FROM {spec.quoted()} INDEXED BY {quote(index)} "
                "ORDER BY rowid"))
            return runs_of_sorted(ctx.missing(spec.name, listed))
        except READ_ERRORS:
            continue
    return None


def runs_of_sorted(rowids: Iterable[int]) -> list[Range]:
    """Ascending rowids as ranges of consecutive values, read once."""
    out: list[Range] = []
    for rowid in rowids:
        if out and rowid <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(rowid, out[-1][1]))
        else:
            out.append((rowid, rowid))
    return out


def _chunks(ctx: LaneContext, spec: TableSpec, start: int, stop: int, forward: bool,
            read: list[int]) -> Generator[Batch, None, int | None]:
    """Read from ``start`` towards ``stop``; the last rowid read, or None if
    the whole range was read."""
    op, order = (">=", "ASC") if forward else ("<=", "DESC")
    bound = ">=" if not forward else "<="
    last: int | None = None
    cursor = start
    sql = (f"SELECT {spec.select_list()} FROM {spec.quoted()} WHERE rowid {op} ? "
           f"AND rowid {bound} ? ORDER BY rowid {order} LIMIT ?")
    while True:
        got = 0
        try:
            for batch in batches(spec.row_dict(r) for r in ctx.live.execute(
                    sql, (cursor, stop, ctx.chunk))):
                last, got = batch[-1][ROWID_KEY], got + len(batch)
                read[0] += len(batch)
                yield spec.name, batch
        except READ_ERRORS:
            return last if last is not None else (start - 1 if forward else start + 1)
        ctx.copied(spec.name, read[0])
        if got < ctx.chunk:
            return None
        cursor = last + 1 if forward else last - 1  # type: ignore[operator]  # full chunk: set


def _copy_range(ctx: LaneContext, spec: TableSpec, gap: Range,
                read: list[int]) -> Generator[Batch, None, list[Range]]:
    lo, hi = gap
    stopped = yield from _chunks(ctx, spec, lo, hi, True, read)
    if stopped is None:
        return []
    lo = stopped + 1
    back = yield from _chunks(ctx, spec, hi, lo, False, read)
    if back is None:
        return []
    return [(lo, back - 1)] if back - 1 >= lo else []


# -- lane 3: rowid-range bisection ------------------------------------------

def bisect_lane(ctx: LaneContext) -> LaneRun:
    """Split each unread range until its readable parts are read, using
    exact single-row lookups on small ranges, within a per-table query
    budget. When an index of the table is intact, its rowids tell exactly
    which rows exist, so only those are looked up (and lost rows are
    counted exactly). Unreadable ranges come back merged as the gaps."""
    result = LaneResult()
    if ctx.conn is None:
        return result
    for state in ctx.pending():
        if not state.spec.rowid:
            continue
        tree = tree_map.open_map(ctx.copy_path, state.spec.root_page)
        try:
            skipped, known, budget = yield from _bisect_table(ctx, state, tree)
        finally:
            if tree is not None:
                tree.image.close()
        name = state.spec.name
        result.gaps[name] = (audit_gaps(ctx, state, merge_ranges(skipped)) if known
                             else merge_ranges(skipped))
        stats = {"queries": budget.used, "budget_exhausted": budget.left <= 0,
                 "rowids_from_index": known, "tree_map": len(tree) if tree else None}
        if known:  # every skipped rowid was listed by an index: an exact count
            stats["rows_lost"] = sum(hi - lo + 1 for lo, hi in result.gaps[name])
        result.stats[name] = stats
    return result


def _bisect_table(ctx: LaneContext, state: TableState, tree: TreeMap | None
                  ) -> Generator[Batch, None, tuple[list[Range], bool, Budget]]:
    """Every gap of one table: (ranges left unread, whether an index listed
    the rowids of every gap, the budget spent)."""
    budget = Budget(ctx.budget.left)
    skipped: list[Range] = []
    known = True
    for gap in list(state.gaps):
        candidates = _index_rowids(ctx, state.spec, gap)
        known = known and candidates is not None
        if candidates is None and not (tree is not None and tree.root_sound()) \
                and _whole_tree_unreadable(ctx, state.spec, gap, budget):
            skipped.append(gap)
            continue
        skipped += yield from _bisect(ctx, state.spec, gap, budget, candidates, tree)
    return skipped, known, budget


def _index_rowids(ctx: LaneContext, spec: TableSpec, gap: Range) -> array | None:
    """Rowids in ``gap`` listed by the first index that reads cleanly (8
    bytes a rowid: an array, not a list of int objects)."""
    if ctx.catalog is None:
        return None
    for index in ctx.catalog.indexes(spec.name):
        try:
            return array("q", (r[0] for r in ctx.live.execute(
                f"SELECT rowid FROM {spec.quoted()} INDEXED BY {quote(index)} "
                "WHERE rowid BETWEEN ? AND ? ORDER BY rowid", gap)))
        except READ_ERRORS:
            continue
    return None


def _whole_tree_unreadable(ctx: LaneContext, spec: TableSpec, gap: Range,
                           budget: Budget) -> bool:
    """Lookups failing at both ends of the rowid space and at every power of
    two in between mean the root cannot be read: bisection would only burn
    budget. (Both edge leaves damaged under a sound root is not enough: the
    rows between them are still reachable.)"""
    if gap != EVERYTHING:
        return False
    probes = (MIN_ROWID, MAX_ROWID) + tuple(1 << k for k in range(63))
    return all(_lookup(ctx, spec, r, budget) is None for r in probes)


def _lookup(ctx: LaneContext, spec: TableSpec, rowid: int, budget: Budget) -> list[dict] | None:
    """Rows with exactly this rowid ([] when none), or None when unreadable."""
    if not budget.take():
        return None
    try:
        return [spec.row_dict(r) for r in ctx.live.execute(
            f"SELECT {spec.select_list()} FROM {spec.quoted()} WHERE rowid = ?", (rowid,))]
    except UnicodeDecodeError:
        return _lookup_raw(ctx, spec, rowid)
    except READ_ERRORS:
        return None


def _lookup_raw(ctx: LaneContext, spec: TableSpec, rowid: int) -> list[dict] | None:
    """The row whose text is not valid UTF-8, read as bytes and decoded leniently."""
    try:
        return [spec.raw_row_dict(r) for r in ctx.live.execute(
            f"SELECT {spec.raw_select_list()} FROM {spec.quoted()} WHERE rowid = ?", (rowid,))]
    except READ_ERRORS:
        return None


def _read_range(ctx: LaneContext, spec: TableSpec, lo: int, hi: int,
                budget: Budget) -> Generator[Batch, None, int | None]:
    """Read [lo, hi] in batches; None when complete, else the first rowid not yet read."""
    if not budget.take():
        return lo
    last = lo - 1
    try:
        for batch in batches(spec.row_dict(r) for r in ctx.live.execute(
                f"SELECT {spec.select_list()} FROM {spec.quoted()} WHERE rowid BETWEEN ? AND ? "
                "ORDER BY rowid", (lo, hi))):
            last = batch[-1][ROWID_KEY]
            yield spec.name, batch
    except READ_ERRORS:
        return last + 1
    return None


def _between(candidates: Any, lo: int, hi: int) -> Any:
    return candidates[bisect.bisect_left(candidates, lo):bisect.bisect_right(candidates, hi)]


def _bisect(ctx: LaneContext, spec: TableSpec, gap: Range, budget: Budget,
            candidates: array | None, tree: TreeMap | None = None
            ) -> Generator[Batch, None, list[Range]]:
    skipped: list[Range] = []
    stack = [gap]
    while stack:
        lo, hi = stack.pop()
        inside = _between(candidates, lo, hi) if candidates is not None else None
        if inside is not None and not len(inside):
            continue
        if budget.left <= 0:
            skipped.append((lo, hi))
        elif (inside is not None and len(inside) < SINGLES_BELOW) or hi - lo < SINGLES_BELOW:
            skipped += yield from _singles(ctx, spec, inside if inside is not None
                                           else range(lo, hi + 1), budget,
                                           listed=inside is not None)
        else:
            resume = yield from _read_range(ctx, spec, lo, hi, budget)
            if resume is not None and resume <= hi:
                step = _step_past(tree, lo, resume, hi, candidates)
                if step is None:
                    stack += _split(resume, hi, candidates)
                else:
                    stack += step[0]
                    skipped += step[1]
    return skipped


def _step_past(tree: TreeMap | None, lo: int, resume: int, hi: int,
               candidates: array | None) -> tuple[list[Range], list[Range]] | None:
    """A read of ``lo``..``hi`` stopped at ``resume``: (ranges still to read,
    ranges no SQL read can reach) from the tree map, or None to halve the
    range as without a map. The page the stop lies on is stepped over: when
    it is not a sound leaf (a destroyed leaf or interior page) no query can
    reach its rows, so they are left for the carver at no cost; the rest of
    a sound leaf (a row with a broken overflow chain, or bad text) is read
    on its own, and halved when that read stops too."""
    span = tree.span(resume) if tree is not None else None
    if span is None or (span.sound and span.lo <= lo and hi <= span.hi):
        return None
    end = min(span.hi, hi)
    rest = [(end + 1, hi)] if end < hi else []
    if span.sound:
        return rest + [(resume, end)], []  # popped first: the rows in rowid order
    if candidates is not None:  # only the rowids an index lists are lost
        return rest, runs(_between(candidates, resume, end))
    return rest, [(resume, end)]


def _split(lo: int, hi: int, candidates: array | None) -> list[Range]:
    """Two halves of [lo, hi]: by candidate count when rowids are known."""
    inside = _between(candidates, lo, hi) if candidates is not None else None
    if inside is not None and len(inside) >= 2:
        mid = inside[len(inside) // 2 - 1]
    else:
        mid = lo + (hi - lo) // 2
    # The stack pops the last half first: explore the half nearer rowid 0
    # first, where SQLite puts rows. A range whose first leaf is damaged
    # fails as a whole; exploring the empty negative space first (rows are
    # never there) would spend the whole budget before any real row.
    if mid < 0:
        return [(lo, mid), (mid + 1, hi)]
    return [(mid + 1, hi), (lo, mid)]


def _singles(ctx: LaneContext, spec: TableSpec, rowids: Any, budget: Budget,
             listed: bool = False) -> Generator[Batch, None, list[Range]]:
    """Look rowids up one by one. A rowid an index ``listed`` that the table
    lookup does not find is unreadable (a damaged cell SQLite's search steps
    over), not absent."""
    skipped: list[Range] = []
    batch: list[dict] = []
    for rowid in rowids:
        found = _lookup(ctx, spec, rowid, budget)
        if found is None or (listed and not found):
            skipped.append((rowid, rowid))
        else:
            batch += found
    if batch:
        yield spec.name, batch
    return skipped
