"""What every lane shares: the context a lane reads from, the state of each
table, the result a lane returns, and the batching of rows.

A lane is a generator ``lane(ctx: LaneContext)`` that yields ``(table,
rows)`` batches as it reads them (dicts keyed by column name plus
``rowid``) and returns a `LaneResult`: the ranges still unread after it,
rows it could not attribute, and stats. It sees every table still missing
rows (``ctx.pending()``) with the rowid ranges nobody has read yet. Each
batch goes straight to the new file (`hstate_recovery.output.sink`), which keeps the first
copy of a row (by rowid and the table's unique key), so memory does not grow
with the store. (A plain function returning a `LaneResult` with ``rows``
still works: its rows are one batch per table.) The lanes themselves are in
their own modules, listed in order in `registry`.
"""
from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator, Iterable, Iterator, Protocol, cast

import apsw

from sessiondb.recovery_api import MAX_ROWID, MIN_ROWID

from ..schema import Catalog, READ_ERRORS, TableSpec

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
