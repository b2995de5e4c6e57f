"""Copy lanes: ways of getting rows out of the snapshot copy, gentle to forceful.

A lane is a function ``lane(ctx: LaneContext) -> LaneResult``. It sees every
table still missing rows (``ctx.pending()``) with the rowid ranges nobody
has read yet, and returns the rows it found per table (dicts keyed by
column name plus ``rowid``), the ranges still unread after it, and stats.
The orchestrator merges rows by rowid (first lane wins), so adding a lane
is one entry in ``LANES``; the last one, the page carver, is in
`recovery.carve_lane`.
"""
from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, cast

import apsw

from sessiondb.recovery_api import create_private_file

from .catalog import PARTIAL_KEY, READ_ERRORS, ROWID_KEY, Catalog, TableSpec, quote

log = logging.getLogger(__name__)

MIN_ROWID, MAX_ROWID = -(1 << 63), (1 << 63) - 1
EVERYTHING = (MIN_ROWID, MAX_ROWID)
DEFAULT_CHUNK = 500
DEFAULT_BUDGET = 20000
SINGLES_BELOW = 16  # a failing range this small is read one rowid at a time

Range = tuple[int, int]
Progress = Callable[[str, int, int], None]  # (what, done, total), for a progress bar


@dataclass
class TableState:
    """What is known about one source table while lanes run."""

    spec: TableSpec
    rows: dict[Any, dict] = field(default_factory=dict)
    gaps: list[Range] = field(default_factory=lambda: [EVERYTHING])
    by_lane: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    partial_from: dict[Any, str] = field(default_factory=dict)  # key of a partial row -> lane

    @property
    def complete(self) -> bool:
        return not self.gaps


@dataclass
class Budget:
    """How many SQL queries the bisection lane may still spend on one table."""

    left: int
    used: int = 0

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        self.used += 1
        return True


@dataclass
class LaneContext:
    """What a lane works on: the copy, its tables and what is still missing."""

    copy_path: Path
    work_dir: Path
    conn: apsw.Connection | None
    catalog: Catalog | None
    states: dict[str, TableState]
    budget: Budget
    structurally_sound: bool = False
    chunk: int = DEFAULT_CHUNK
    progress: Progress | None = None
    lost_and_found: list[tuple[str, dict]] = field(default_factory=list)  # (lane, item)
    include_freelist: bool = False  # the carve lane also reads free pages (deleted rows)

    @property
    def live(self) -> apsw.Connection:
        """``conn`` for the lane steps their lane entered only after ruling
        out None (the checker cannot follow that; nothing is checked here)."""
        return cast(apsw.Connection, self.conn)

    @property
    def live_catalog(self) -> Catalog:
        """``catalog``, on the same terms as ``live``."""
        return cast(Catalog, self.catalog)

    def report_progress(self, what: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(what, done, total)

    def pending(self) -> list[TableState]:
        return [s for s in self.states.values() if not s.complete]


@dataclass
class LaneResult:
    """Rows a lane found per table, the gaps it leaves (only for tables it
    worked on), rows it could not attribute to a table, and its stats."""

    rows: dict[str, list[dict]] = field(default_factory=dict)
    gaps: dict[str, list[Range]] = field(default_factory=dict)
    lost_and_found: list[dict] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


Lane = Callable[[LaneContext], LaneResult]


def merge_ranges(ranges: list[Range]) -> list[Range]:
    """Sort and merge overlapping or adjacent inclusive ranges."""
    out: list[Range] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def subtract_rowids(ranges: list[Range], rowids: Any) -> list[Range]:
    """``ranges`` without the given rowids (which split the ranges they hit);
    O(n log n), as the carver may return every row of a large table."""
    ordered = sorted(set(rowids))
    out: list[Range] = []
    for lo, hi in ranges:
        start = lo
        for rowid in ordered[bisect.bisect_left(ordered, lo):bisect.bisect_right(ordered, hi)]:
            if rowid > start:
                out.append((start, rowid - 1))
            start = rowid + 1
        if start <= hi:
            out.append((start, hi))
    return out


def runs(rowids: Any) -> list[Range]:
    """Sorted rowids as ranges of consecutive values (each range holds only them)."""
    out: list[Range] = []
    for rowid in sorted(set(rowids)):
        if out and rowid == out[-1][1] + 1:
            out[-1] = (out[-1][0], rowid)
        else:
            out.append((rowid, rowid))
    return out


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


# -- lane 1: SQLite backup of a sound copy ----------------------------------

def backup_lane(ctx: LaneContext) -> LaneResult:
    """When the copy is structurally sound, take an online backup of it and
    read every table from that consistent image in one pass."""
    result = LaneResult(stats={"applicable": ctx.structurally_sound})
    if not ctx.structurally_sound or ctx.conn is None:
        return result
    image = ctx.work_dir / "backup.db"
    create_private_file(image)  # 0600 whatever the umask; SQLite would use 0644
    dest = apsw.Connection(str(image))
    try:
        with dest.backup("main", ctx.conn, "main") as b:
            b.step(-1)
        for state in ctx.pending():
            _read_whole(dest, state.spec, result)
            done = len(result.rows.get(state.spec.name, []))
            ctx.report_progress(f"copying {state.spec.name}", done, done)
    except READ_ERRORS as e:
        result.stats["error"] = _err(e)
    finally:
        dest.close()
    return result


def _read_whole(conn: apsw.Connection, spec: TableSpec, result: LaneResult) -> None:
    try:
        rows = [spec.row_dict(r) for r in
                conn.execute(f"SELECT {spec.select_list()} FROM {spec.quoted()}")]
    except READ_ERRORS as e:
        result.stats.setdefault("errors", {})[spec.name] = _err(e)
        return
    result.rows[spec.name] = rows
    result.gaps[spec.name] = []


# -- lane 2: SQL row copy in chunks -----------------------------------------

def row_copy_lane(ctx: LaneContext) -> LaneResult:
    """Read each table forward in rowid chunks until an error, then backward
    from the end; what lies between is left as one gap for bisection."""
    result = LaneResult()
    if ctx.conn is None:
        return result
    for state in ctx.pending():
        if not state.spec.rowid:
            _read_whole(ctx.conn, state.spec, result)
            continue
        rows: list[dict] = []
        gaps = [g2 for g in state.gaps for g2 in _copy_range(ctx, state.spec, g, rows)]
        result.gaps[state.spec.name] = audit_gaps(ctx, state, rows, gaps)
        result.rows[state.spec.name] = rows
    return result


def audit_gaps(ctx: LaneContext, state: TableState, rows: list[dict],
               gaps: list[Range]) -> list[Range]:
    """``gaps`` plus every rowid an intact index lists that no lane returned.
    SQLite's search can step over a damaged cell without an error (a lookup
    finds nothing, a range scan starts after it): such rows are not absent,
    they are unread, and a later lane must look for them."""
    listed = _index_rowids(ctx, state.spec, EVERYTHING)
    if not listed:
        return gaps
    have = {r.get(ROWID_KEY) for r in rows} | {r.get(ROWID_KEY) for r in state.rows.values()}
    missing = [rowid for rowid in listed if rowid not in have]
    return merge_ranges(gaps + runs(missing)) if missing else gaps


def _chunks(ctx: LaneContext, spec: TableSpec, start: int, stop: int, forward: bool,
            rows: list[dict]) -> int | None:
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
            for r in ctx.live.execute(sql, (cursor, stop, ctx.chunk)):
                rows.append(spec.row_dict(r))
                last, got = r[0], got + 1
        except READ_ERRORS:
            return last if last is not None else (start - 1 if forward else start + 1)
        ctx.report_progress(f"copying {spec.name}", len(rows), 0)
        if got < ctx.chunk:
            return None
        cursor = last + 1 if forward else last - 1  # type: ignore[operator]  # full chunk: set


def _copy_range(ctx: LaneContext, spec: TableSpec, gap: Range, rows: list[dict]) -> list[Range]:
    lo, hi = gap
    stopped = _chunks(ctx, spec, lo, hi, True, rows)
    if stopped is None:
        return []
    lo = stopped + 1
    back = _chunks(ctx, spec, hi, lo, False, rows)
    if back is None:
        return []
    return [(lo, back - 1)] if back - 1 >= lo else []


# -- lane 3: rowid-range bisection ------------------------------------------

def bisect_lane(ctx: LaneContext) -> LaneResult:
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
        budget = Budget(ctx.budget.left)
        rows: list[dict] = []
        skipped: list[Range] = []
        known = True
        for gap in state.gaps:
            candidates = _index_rowids(ctx, state.spec, gap)
            known = known and candidates is not None
            if candidates is None and _whole_tree_unreadable(ctx, state.spec, gap, budget):
                skipped.append(gap)
                continue
            skipped += _bisect(ctx, state.spec, gap, rows, budget, candidates)
        result.rows[state.spec.name] = rows
        result.gaps[state.spec.name] = (audit_gaps(ctx, state, rows, merge_ranges(skipped))
                                        if known else merge_ranges(skipped))
        stats = {"queries": budget.used, "budget_exhausted": budget.left <= 0,
                 "rowids_from_index": known}
        if known:  # every skipped rowid was listed by an index: an exact count
            stats["rows_lost"] = sum(hi - lo + 1 for lo, hi in result.gaps[state.spec.name])
        result.stats[state.spec.name] = stats
    return result


def _index_rowids(ctx: LaneContext, spec: TableSpec, gap: Range) -> list[int] | None:
    """Rowids in ``gap`` listed by the first index that reads cleanly."""
    if ctx.catalog is None:
        return None
    for index in ctx.catalog.indexes(spec.name):
        try:
            return [r[0] for r in ctx.live.execute(
                f"SELECT rowid FROM {spec.quoted()} INDEXED BY {quote(index)} "
                "WHERE rowid BETWEEN ? AND ? ORDER BY rowid", gap)]
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
                rows: list[dict], budget: Budget) -> int | None:
    """Read [lo, hi]; None when complete, else the first rowid not yet read."""
    if not budget.take():
        return lo
    last = lo - 1
    try:
        for r in ctx.live.execute(f"SELECT {spec.select_list()} FROM {spec.quoted()} "
                                  "WHERE rowid BETWEEN ? AND ? ORDER BY rowid", (lo, hi)):
            rows.append(spec.row_dict(r))
            last = r[0]
    except READ_ERRORS:
        return last + 1
    return None


def _between(candidates: list[int], lo: int, hi: int) -> list[int]:
    return candidates[bisect.bisect_left(candidates, lo):bisect.bisect_right(candidates, hi)]


def _bisect(ctx: LaneContext, spec: TableSpec, gap: Range, rows: list[dict], budget: Budget,
            candidates: list[int] | None) -> list[Range]:
    skipped: list[Range] = []
    stack = [gap]
    while stack:
        lo, hi = stack.pop()
        inside = _between(candidates, lo, hi) if candidates is not None else None
        if inside == []:
            continue
        if budget.left <= 0:
            skipped.append((lo, hi))
        elif (inside is not None and len(inside) < SINGLES_BELOW) or hi - lo < SINGLES_BELOW:
            skipped += _singles(ctx, spec, inside or range(lo, hi + 1), rows, budget,
                                listed=inside is not None)
        else:
            resume = _read_range(ctx, spec, lo, hi, rows, budget)
            if resume is not None and resume <= hi:
                stack += _split(resume, hi, candidates)
    return skipped


def _split(lo: int, hi: int, candidates: list[int] | None) -> list[Range]:
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


def _singles(ctx: LaneContext, spec: TableSpec, rowids: Any, rows: list[dict],
             budget: Budget, listed: bool = False) -> list[Range]:
    """Look rowids up one by one. A rowid an index ``listed`` that the table
    lookup does not find is unreadable (a damaged cell SQLite's search steps
    over), not absent."""
    skipped: list[Range] = []
    for rowid in rowids:
        found = _lookup(ctx, spec, rowid, budget)
        if found is None or (listed and not found):
            skipped.append((rowid, rowid))
        else:
            rows += found
    return skipped


# -- lane 4: rows rebuilt from intact indexes --------------------------------

# Columns no index holds but that a rebuilt row may take from a sibling column.
FILL_FROM = {"sessions": {"updated_at": "started_at"}}


def index_lane(ctx: LaneContext) -> LaneResult:
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
        rows, unusable = [], 0
        for rowid, known in sorted(_index_values(ctx, spec, state.gaps).items()):
            for col, source in FILL_FROM.get(spec.name, {}).items():
                if col not in known and source in known:
                    known[col] = known[source]
            if not set(spec.required) <= set(known):
                unusable += 1
                continue
            lost = [c for c in spec.columns if c not in known]
            rows.append({ROWID_KEY: rowid, **known, PARTIAL_KEY: lost})
        result.rows[spec.name] = rows
        result.stats[spec.name] = {"rebuilt": len(rows), "unusable": unusable}
    return result


def _index_values(ctx: LaneContext, spec: TableSpec, gaps: list[Range]) -> dict[int, dict]:
    """rowid -> {column: value} from every index that reads cleanly."""
    found: dict[int, dict] = {}
    for index in ctx.live_catalog.indexes(spec.name):
        cols = [r[2] for r in ctx.live.execute(f"PRAGMA index_info({quote(index)})")]
        if not cols or any(c is None for c in cols):
            continue  # expression index: its values are not columns
        sql = (f"SELECT rowid, {', '.join(quote(c) for c in cols)} FROM {spec.quoted()} "
               f"INDEXED BY {quote(index)} WHERE rowid BETWEEN ? AND ?")
        for gap in gaps:
            try:
                for r in ctx.live.execute(sql, gap):
                    found.setdefault(r[0], {}).update(zip(cols, r[1:]))
            except READ_ERRORS:
                continue
    return found


# The page carver's lane lives in its own module (it imports this one).
from .carve_lane import carve_lane  # noqa: E402

LANES: dict[str, Lane] = {
    "backup": backup_lane,
    "rows": row_copy_lane,
    "bisect": bisect_lane,
    "index": index_lane,
    "carve": carve_lane,
}
