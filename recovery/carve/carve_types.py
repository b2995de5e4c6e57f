"""What the carver returns: rows with their origins, lost records, stats.

Owns the result types of `hstate_recovery.carve.carver` (kept apart so readers of a
result, such as the recover command, need not import the carving machinery)
and the lane names a row's origin carries.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

TREE, ORPHAN, FREELIST, UNCOMMITTED = "tree", "orphan", "freelist", "uncommitted"
MAX_NOTES = 200


class CarveError(Exception):
    """The carver cannot start (the database file cannot be opened)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class PageSet:
    """A set of page numbers as a bitmap: one bit a page, so the pages a
    carve has seen of a multi-gigabyte file cost kilobytes, not a set of
    a million ints."""

    def __init__(self) -> None:
        self._bits = bytearray()

    def add(self, pgno: int) -> None:
        if pgno < 0:
            return
        byte = pgno >> 3
        if byte >= len(self._bits):
            self._bits.extend(bytes(byte - len(self._bits) + 1 + len(self._bits) // 2))
        self._bits[byte] |= 1 << (pgno & 7)

    def update(self, pages: Any) -> None:
        for pgno in pages:
            self.add(pgno)

    def __ior__(self, pages: Any) -> "PageSet":
        self.update(pages)
        return self

    def __contains__(self, pgno: object) -> bool:
        if not isinstance(pgno, int) or pgno < 0:
            return False
        byte = pgno >> 3
        return byte < len(self._bits) and bool(self._bits[byte] & (1 << (pgno & 7)))

    def clear(self) -> None:
        self._bits = bytearray()


@dataclass(frozen=True)
class RowOrigin:
    """Where a carved row came from. ``lane`` is tree, orphan, freelist or
    uncommitted; ``from_wal`` when its page was read from a WAL frame."""

    page: int
    cell: int
    rowid: int | None
    lane: str
    from_wal: bool
    confidence: float


@dataclass
class LostRecord:
    """A record no layout claimed, or whose payload was cut short; ``values``
    are raw (bytes for blobs and undecodable text, None for lost bytes)."""

    page: int
    cell: int
    rowid: int | None
    values: list[Any]
    reason: str
    lane: str
    from_wal: bool = False


@dataclass
class CarveStats:
    """What the carver read and skipped. ``bad_pages`` maps page -> reason."""

    page_size: int = 0
    page_size_source: str = ""
    page_count: int = 0
    schema_readable: bool = False
    pages_read: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    bad_pages: dict[int, str] = field(default_factory=dict)
    bad_cells: int = 0
    orphan_pages: int = 0  # table leaves no tree walk reached
    freelist_pages: int = 0
    frames_applied: int = 0
    frames_ignored: dict[str, int] = field(default_factory=dict)
    wal_problem: str | None = None
    derived_records: int = 0
    unknown_columns: int = 0  # rows carved with trailing columns no layout names
    duplicates: int = 0
    differing_copies: int = 0  # duplicates whose values differ (the note names the one taken)
    # table -> damage met walking its tree from the schema's root (bad pages,
    # child pointers out of the file); a table walked with 0 was read whole
    tree_damage: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    notes_dropped: int = 0

    def note(self, text: str) -> None:
        """Keep a finding; damage can repeat one, so at most MAX_NOTES kept."""
        if len(self.notes) < MAX_NOTES:
            self.notes.append(text)
        else:
            self.notes_dropped += 1

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def bad_page_reasons(self) -> dict[str, int]:
        return dict(Counter(r.split(":")[0] for r in self.bad_pages.values()))


@dataclass
class CarveResult:
    """Rows per table (dicts by column name, rowid alias filled in), with a
    parallel list of `RowOrigin` per table, the lost-and-found records, stats."""

    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    origins: dict[str, list[RowOrigin]] = field(default_factory=dict)
    lost_and_found: list[LostRecord] = field(default_factory=list)
    stats: CarveStats = field(default_factory=CarveStats)
    harvested: list[Any] = field(default_factory=list)  # schema rows found off page 1

    def rows(self, table: str) -> Iterator[tuple[dict[str, Any], RowOrigin]]:
        return zip(self.tables.get(table, []), self.origins.get(table, []))

    def counts_by_lane(self) -> dict[str, dict[str, int]]:
        """table -> lane -> rows; WAL-sourced rows also counted under ``wal``."""
        out: dict[str, dict[str, int]] = {}
        for table, origins in self.origins.items():
            c = Counter(o.lane for o in origins)
            c["wal"] = sum(o.from_wal for o in origins)
            out[table] = dict(c)
        return out

    def orphaned_sessions(self) -> dict[str, float | None]:
        """Session ids that carved messages name but no carved session row
        has, each with its messages' earliest timestamp: what a placeholder
        session needs (messages are never dropped for lack of a session)."""
        known = {row.get("id") for row in self.tables.get("sessions", [])}
        out: dict[str, float | None] = {}
        for row in self.tables.get("messages", []):
            sid, ts = row.get("session_id"), row.get("timestamp")
            if sid in known or not isinstance(sid, str):
                continue
            if not isinstance(ts, (int, float)):
                out.setdefault(sid, None)
            elif (prev := out.get(sid)) is None or ts < prev:
                out[sid] = float(ts)
        return out

    def summary(self) -> dict[str, Any]:
        """A JSON-ready account of the carve for reports: counts per table and
        lane, lost records by reason, and the stats; never any row values."""
        st = self.stats
        return {
            "rows": self.counts_by_lane(),
            "lost_and_found": dict(Counter(r.reason.split(":")[0]
                                           for r in self.lost_and_found)),
            "page_size": st.page_size, "page_size_source": st.page_size_source,
            "page_count": st.page_count, "schema_readable": st.schema_readable,
            "pages_read": st.pages_read, "bad_pages": st.bad_page_reasons(),
            "bad_cells": st.bad_cells, "orphan_pages": st.orphan_pages,
            "freelist_pages": st.freelist_pages, "frames_applied": st.frames_applied,
            "frames_ignored": st.frames_ignored, "wal_problem": st.wal_problem,
            "derived_records": st.derived_records, "unknown_columns": st.unknown_columns,
            "duplicates": st.duplicates, "seconds": round(st.seconds, 3),
            "mb_per_s": round(st.mb_per_s, 1), "notes": st.notes[:20],
        }


@dataclass
class CarveEstimate:
    """What `carve()` would find, from page headers only: rows per table
    (tree-walked or attributed by a leaf's first record), cells no layout
    claimed, and the pages that could not be read."""

    rows: dict[str, int] = field(default_factory=dict)
    unattributed: int = 0
    schema_readable: bool = False
    page_count: int = 0
    bad_pages: int = 0
    formats: dict[str, int] = field(default_factory=dict)  # cells by layout format
    harvested: list[Any] = field(default_factory=list)  # schema rows found off page 1

    @property
    def total(self) -> int:
        return sum(self.rows.values())
