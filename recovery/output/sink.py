"""Where recovered rows go as lanes read them: the new file, batch by batch.

A `RowSink` takes each batch a lane yields and writes it into the output
at once, so memory holds one batch, never the table. The output's own keys
resolve duplicates across lanes (the first copy of a row wins, by rowid
and by the table's unique key), and each table's `TableState` counts what
was kept, by lane, for the report. Rows rebuilt in part from indexes wait
in memory (there are only as many as there are unread rows an index still
lists) until a whole copy replaces them or the sink finishes. Subclasses
say how one row goes into the file: `hstate_recovery.output.rebuild.StoreSink` for our
store, `hstate_recovery.output.foreign_write.ForeignSink` for a file in its own schema.
A subclass may also take a batch the backup lane left in its image in one
statement (`copy_image`, counted as `add` counts); the base class declines,
and the lane then sends the batch as rows.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import apsw

from sessiondb.recovery_api import from_apsw

from ..base import OutputUnreadable
from ..carve import FREELIST, UNCOMMITTED
from ..lanes import ImageRows, PRESENT_CHUNK, TableState
from ..schema import ORIGIN_KEY, PARTIAL_KEY, ROWID_KEY, quote

NEW, DUPLICATE, QUARANTINED = "new", "duplicate", "quarantined"
MARKED_LANES = (FREELIST, UNCOMMITTED)  # carved rows that were not live data


@contextmanager
def output_errors(path: Path | str) -> Iterator[None]:
    """Errors of the new file, typed: one that does not read back what was
    written (corruption in a file we just made: the disk loses writes) is
    `OutputUnreadable`; any other is the store's typed error (disk full, I/O)."""
    try:
        yield
    except apsw.CorruptError as e:
        raise OutputUnreadable(f"the new file does not read back what was written: {e}",
                               path=str(path)) from e
    except apsw.Error as e:
        raise from_apsw(e, path=str(path), context="cannot write the new file") from e


class RowSink:
    """Dedupe, count and hand rows to `insert`; see the module docstring."""

    def __init__(self, path: Path, conn: apsw.Connection, states: dict[str, TableState],
                 progress: Callable[[str, int, int], None] | None = None) -> None:
        self.path = path
        self.conn = conn
        self.states = states
        self.progress = progress
        self.partial: dict[tuple[str, Any], tuple[str, dict]] = {}  # (table, rowid) -> lane, row
        self.rejected: set[tuple[str, Any]] = set()  # (table, rowid) kept out of its table
        self.written: dict[str, int] = {}  # rows this sink wrote, per table (for progress)
        self.lost_items = 0

    # -- what subclasses provide ------------------------------------------

    def insert(self, table: str, row: dict) -> str:
        """Write one whole row: NEW, DUPLICATE (its key is taken) or QUARANTINED."""
        raise NotImplementedError

    def keep_lost(self, lane: str, items: list[dict]) -> None:
        """Keep finds no table claims (never dropped)."""
        raise NotImplementedError

    def mark(self, table: str, rowid: Any, mark: str) -> None:
        """Record that a kept row was not live data (deleted, uncommitted)."""

    def writable(self, table: str) -> bool:
        """Whether rows of ``table`` can be written at all (else `insert` is not called)."""
        return True

    def copy_image(self, table: str, lane: str, batch: ImageRows) -> bool:
        """Write a batch of whole rows straight from the backup image, counted
        as `add` would count them (True); False leaves it to be sent as rows,
        which is all a sink that cannot prove them the same says."""
        return False

    def untouched(self, table: str, lo: int, hi: int) -> bool:
        """No row of ``table`` between rowids ``lo`` and ``hi`` is held in part
        or rejected (a batch there can skip the per-row bookkeeping)."""
        return not any(t == table and isinstance(r, int) and lo <= r <= hi
                       for t, r in (*self.partial, *self.rejected))

    # -- batches ------------------------------------------------------------

    def add(self, table: str, lane: str, rows: list[dict]) -> int:
        """Write one batch in one transaction; returns the rows kept."""
        state = self.states.get(table)
        if state is None or not rows:
            return 0
        kept = 0
        with output_errors(self.path), self.conn:
            for row in rows:
                kept += self._one(state, table, lane, row)
        self.written[table] = self.written.get(table, 0) + kept
        if self.progress is not None:
            self.progress(f"writing {table}", self.written[table], 0)
        return kept

    def lost(self, lane: str, items: list[dict]) -> None:
        if items:
            with output_errors(self.path), self.conn:
                self.keep_lost(lane, items)
            self.lost_items += len(items)

    def _one(self, state: TableState, table: str, lane: str, row: dict) -> int:
        rowid = row.get(ROWID_KEY)
        if PARTIAL_KEY in row:
            return self._hold_partial(state, table, lane, row)
        held = self.partial.pop((table, rowid), None) if rowid is not None else None
        if (table, rowid) in self.rejected and rowid is not None:
            return 0
        outcome = self.insert(table, row) if self.writable(table) else QUARANTINED
        if outcome == DUPLICATE:
            if held is not None:
                self.partial[(table, rowid)] = held
            return 0
        if outcome == QUARANTINED and rowid is not None:
            self.rejected.add((table, rowid))
        if held is not None:
            state.move(held[0], lane)  # the whole row now counts for this lane only
        else:
            state.count(lane, 1)
        state.span(rowid)
        origin = row.get(ORIGIN_KEY)
        if origin is not None and outcome == NEW:
            state.carved[origin.lane] = state.carved.get(origin.lane, 0) + 1
            state.from_wal += bool(origin.from_wal)
            if origin.lane in MARKED_LANES:
                self.mark(table, rowid, origin.lane)
        return 1

    def _hold_partial(self, state: TableState, table: str, lane: str, row: dict) -> int:
        rowid = row.get(ROWID_KEY)
        key = (table, rowid)
        if key in self.partial or key in self.rejected or (
                isinstance(rowid, int) and self.present(table, [rowid])):
            return 0
        self.partial[key] = (lane, row)
        state.count(lane, 1)
        state.partial += 1
        state.span(rowid)
        return 1

    def held_partial(self) -> list[tuple[str, str, dict]]:
        """(table, lane, row) of rows still only rebuilt in part, emptied."""
        out = [(t, lane, row) for (t, _r), (lane, row) in self.partial.items()]
        self.partial = {}
        return out

    # -- what the output holds ----------------------------------------------

    def present(self, table: str, rowids: list[int]) -> set[int]:
        """Which of ``rowids`` are kept (in the table, held in part, or rejected)."""
        have = {r for r in rowids if (table, r) in self.partial or (table, r) in self.rejected}
        if not self.has_table(table):
            return have
        for start in range(0, len(rowids), PRESENT_CHUNK):
            chunk = json.dumps([r for r in rowids[start:start + PRESENT_CHUNK]
                                if isinstance(r, int)])
            have.update(r for (r,) in self.conn.execute(
                f"SELECT rowid FROM {quote(table)} WHERE rowid IN "
                "(SELECT value FROM json_each(?))", (chunk,)))
        return have

    def close(self) -> None:
        self.conn.close()

    def has_table(self, table: str) -> bool:
        return self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                 "name = ?", (table,)).fetchone() is not None
