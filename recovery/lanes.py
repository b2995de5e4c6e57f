"""Copy lanes: ways of getting rows out of the snapshot copy, gentle to forceful.

A lane is a generator ``lane(ctx: LaneContext)`` that yields ``(table,
rows)`` batches as it reads them (dicts keyed by column name plus
``rowid``) and returns a `LaneResult`: the ranges still unread after it,
rows it could not attribute, and stats. It sees every table still missing
rows (``ctx.pending()``) with the rowid ranges nobody has read yet. Each
batch goes straight to the new file (`recovery.sink`), which keeps the first
copy of a row (by rowid and the table's unique key), so memory does not grow
with the store and adding a lane is one entry in ``LANES``. (A plain
function returning a `LaneResult` with ``rows`` still works: its rows are one
batch per table.) The first lane, the SQLite backup, is in `recovery.backup_lane`, the last,
the page carver, in `recovery.carve_lane`.
"""
from __future__ import annotations

import bisect
import logging
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator, Iterable, Iterator, Protocol, cast

import apsw

from sessiondb.recovery_api import create_private_file

from . import tree_map
from .catalog import PARTIAL_KEY, READ_ERRORS, ROWID_KEY, Catalog, TableSpec, quote
from .fileformat import MAX_ROWID, MIN_ROWID
from .tree_map import TreeMap

log = logging.getLogger(__name__)

EVERYTHING = (MIN_ROWID, MAX_ROWID)
DEFAULT_CHUNK = 500
DEFAULT_BUDGET = 20000
SINGLES_BELOW = 16  # a failing range this small is read one rowid at a time
BATCH_ROWS = 2000  # rows a lane hands to the output at a time, at most
BATCH_BYTES = 4 << 20  # and about this many bytes of values (rows may be megabytes each)

Range = tuple[int, int]
Progress = Callable[[str, int, int], None]  # (what, done, total), for a progress bar
PRESENT_CHUNK = 5000  # rowids asked of the output at a time


class RowsKept(Protocol):
    """What the output already holds (rows written, rebuilt in part, or
    quarantined), asked by lanes that must know which rows nobody read yet."""

    def present(self, table: str, rowids: list[int]) -> set[int]: ...


@dataclass
class TableState:
    """What is known about one source table while lanes run: counters only,
    the rows themselves are in the output."""

    spec: TableSpec
    gaps: list[Range] = field(default_factory=lambda: [EVERYTHING])
    by_lane: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    recovered: int = 0  # rows kept (written, quarantined or rebuilt in part)
    partial: int = 0  # of which rebuilt from indexes and not replaced by a whole row
    carved: dict[str, int] = field(default_factory=dict)  # kept carved rows by carver lane
    from_wal: int = 0  # kept carved rows whose page came from a WAL frame
    low: int | None = None  # the lowest and highest rowid kept
    high: int | None = None

    @property
    def complete(self) -> bool:
        return not self.gaps

    def count(self, lane: str, n: int) -> None:
        if n:
            self.by_lane[lane] = self.by_lane.get(lane, 0) + n
            self.recovered += n

    def move(self, before: str, lane: str) -> None:
        """A whole row from ``lane`` replaced one ``before`` rebuilt in part."""
        self.by_lane[lane] = self.by_lane.get(lane, 0) + 1
        self.by_lane[before] -= 1
        if not self.by_lane[before]:
            del self.by_lane[before]
        self.partial -= 1

    def span(self, rowid: Any) -> None:
        if isinstance(rowid, int):
            self.low = rowid if self.low is None else min(self.low, rowid)
            self.high = rowid if self.high is None else max(self.high, rowid)


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
    include_freelist: bool = False  # the carve lane also reads free pages (deleted rows)
    kept: RowsKept | None = None  # the output, asked which rowids it holds
    readable: dict[str, int] = field(default_factory=dict)  # rows inspect could count
    offer_image: bool = True  # the backup lane offers its batches as `ImageRows`

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

    def copied(self, table: str, done: int) -> None:
        """Rows of ``table`` a lane has read so far (out of what inspect counted)."""
        self.report_progress(f"copying {table}", done, max(self.readable.get(table, 0), done))

    def pending(self) -> list[TableState]:
        return [s for s in self.states.values() if not s.complete]

    def missing(self, table: str, rowids: Iterable[int]) -> Iterator[int]:
        """The rowids (in their order) no lane has kept yet, asked of the
        output a chunk at a time so a whole table's rowids are never held."""
        chunk: list[int] = []
        for rowid in rowids:
            chunk.append(rowid)
            if len(chunk) >= PRESENT_CHUNK:
                yield from self._missing(table, chunk)
                chunk = []
        yield from self._missing(table, chunk)

    def _missing(self, table: str, chunk: list[int]) -> list[int]:
        have = self.kept.present(table, chunk) if self.kept is not None and chunk else set()
        return [r for r in chunk if r not in have]


@dataclass
class ImageRows:
    """A batch of whole rows left in the backup image (rowids ascending, one
    after another in the table): an output that can copy them in one
    statement does so and sets ``taken``; otherwise the lane reads them and
    sends them as row dicts, so the result is the same either way."""

    image: Path
    spec: TableSpec
    rowids: list[int]
    taken: bool = False


@dataclass
class LaneResult:
    """The gaps a lane leaves (only for tables it worked on), rows it could
    not attribute to a table, and its stats. ``rows`` is for lanes that are
    plain functions (their rows, per table); generator lanes yield theirs."""

    rows: dict[str, list[dict]] = field(default_factory=dict)
    gaps: dict[str, list[Range]] = field(default_factory=dict)
    lost_and_found: list[dict] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


Batch = tuple[str, "list[dict] | ImageRows"]  # (table, rows) as a lane read them
LOST = "\0lost-and-found"  # a batch of finds no table claims (never a table's name)
LaneRun = Generator[Batch, None, LaneResult]
Lane = Callable[[LaneContext], "LaneRun | LaneResult"]


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
    """``ranges`` (sorted, disjoint) without the given rowids, which split the
    ranges they hit. Only the ranges between the lowest and highest rowid are
    rebuilt, so a batch costs O(batch log batch + touched ranges) however
    many ranges the table has (it is called once per batch of rows)."""
    ordered = sorted(set(rowids))
    if not ordered or not ranges:
        return list(ranges)
    first = max(bisect.bisect_right(ranges, ordered[0], key=lambda r: r[0]) - 1, 0)
    last = bisect.bisect_right(ranges, ordered[-1], key=lambda r: r[0])
    out: list[Range] = []
    for lo, hi in ranges[first:last]:
        start = lo
        for rowid in ordered[bisect.bisect_left(ordered, lo):bisect.bisect_right(ordered, hi)]:
            if rowid > start:
                out.append((start, rowid - 1))
            start = rowid + 1
        if start <= hi:
            out.append((start, hi))
    return ranges[:first] + out + ranges[last:]


def runs(rowids: Any) -> list[Range]:
    """Sorted rowids as ranges of consecutive values (each range holds only them)."""
    out: list[Range] = []
    for rowid in sorted(set(rowids)):
        if out and rowid == out[-1][1] + 1:
            out[-1] = (out[-1][0], rowid)
        else:
            out.append((rowid, rowid))
    return out


def row_size(row: dict) -> int:
    """About how many bytes a row dict holds (its text and blobs)."""
    return 64 + sum(len(v) for v in row.values() if isinstance(v, (str, bytes)))


def batches(rows: Iterable[dict]) -> Iterator[list[dict]]:
    """``rows`` in lists of at most BATCH_ROWS rows and about BATCH_BYTES.
    A read error hands on the rows read before it, then is raised: a lane
    resumes after the last row it was given, so rows read are never read
    again (bisection used to lose up to a batch at every damaged page)."""
    batch: list[dict] = []
    size = 0
    try:
        for row in rows:
            batch.append(row)
            size += row_size(row)
            if len(batch) >= BATCH_ROWS or size >= BATCH_BYTES:
                yield batch
                batch, size = [], 0
    except READ_ERRORS:
        if batch:
            yield batch
        raise
    if batch:
        yield batch


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


# -- reading a whole table (the backup lane, and tables without rowids)

def read_whole(ctx: LaneContext, conn: apsw.Connection, spec: TableSpec,
                result: LaneResult) -> Iterator[Batch]:
    """Every row of the table, in batches; the table is complete only when
    the scan reached its end (rows before an error are kept all the same)."""
    done = 0
    try:
        cursor = conn.execute(f"SELECT {spec.select_list()} FROM {spec.quoted()}")
        for batch in batches(spec.row_dict(r) for r in cursor):
            done += len(batch)
            yield spec.name, batch
            ctx.copied(spec.name, done)
    except READ_ERRORS as e:
        result.stats.setdefault("errors", {})[spec.name] = _err(e)
        return
    result.gaps[spec.name] = []


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


# The backup, index and page carver lanes live in their own modules (they import this one).
from .backup_lane import backup_lane  # noqa: E402
from .carve_lane import carve_lane  # noqa: E402
from .index_lane import index_lane  # noqa: E402

LANES: dict[str, Lane] = {
    "backup": backup_lane,
    "rows": row_copy_lane,
    "bisect": bisect_lane,
    "index": index_lane,
    "carve": carve_lane,
}
