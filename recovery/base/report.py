"""The recovery report: what was saved and what was lost, as JSON.

The report holds counts, row-id ranges, session ids, fingerprints and
timings; never message text (no row values are ever put into it). It is
written with exclusive create at 0600, so an existing file is never
overwritten.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sessiondb.recovery_api import OutputError, private_output

from .vocab import Outcome, Verdict

# Exit codes shared by the library's outcome and the CLI (see docs/state-db-recovery.md).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_LOSS = 3
EXIT_NOT_RECOVERABLE = 4
EXIT_UNVERIFIED = 5
EXIT_SOURCE_BUSY = 6

INSPECT_EXIT = {Verdict.HEALTHY: EXIT_OK, Verdict.FTS_ONLY: EXIT_LOSS,
                Verdict.STRUCTURAL: EXIT_LOSS, Verdict.NOT_A_DATABASE: EXIT_NOT_RECOVERABLE,
                Verdict.EMPTY: EXIT_NOT_RECOVERABLE, Verdict.LOCKED: EXIT_SOURCE_BUSY,
                Verdict.SOURCE_CHANGING: EXIT_SOURCE_BUSY}
OUTCOME_EXIT = {Outcome.RECOVERED: EXIT_OK, Outcome.PARTIAL: EXIT_LOSS,
                Outcome.NOT_RECOVERABLE: EXIT_NOT_RECOVERABLE,
                Outcome.UNVERIFIED: EXIT_UNVERIFIED, Outcome.SOURCE_CHANGING: EXIT_SOURCE_BUSY}


@dataclass
class TableReport:
    """One source table: readable in the source, recovered, written, lost."""

    source_readable: int | None
    source_scan_complete: bool
    recovered: int = 0
    copied: int = 0
    quarantined: int = 0
    partial: int = 0  # rows rebuilt from indexes, with some columns lost
    skipped_ranges: list[list[int]] = field(default_factory=list)
    rows_lost: int | None = None  # exact when an intact index listed the rowids
    lanes: dict[str, int] = field(default_factory=dict)
    lane_used: str | None = None
    note: str | None = None
    carved: dict[str, int] = field(default_factory=dict)  # carved rows by carver lane
    from_wal: int = 0  # carved rows whose page came from a WAL frame
    # the carver found this table's rows by scanning pages (no clean tree walk,
    # no intact index): rows on destroyed pages cannot be counted
    unproven: bool = False


@dataclass
class RecoveryReport:
    """Everything `recover` did. ``outcome`` is recovered, partial,
    unverified, not_recoverable or source_changing."""

    source: str
    requested_output: str
    output: str | None = None
    outcome: Outcome = Outcome.NOT_RECOVERABLE
    loss: bool = False
    loss_reasons: list[str] = field(default_factory=list)
    verdict_before: str = ""
    inspect: dict[str, Any] = field(default_factory=dict)
    lanes_run: list[str] = field(default_factory=list)
    lane_stats: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, TableReport] = field(default_factory=dict)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    placeholders: list[str] = field(default_factory=list)
    parent_links_dropped: int = 0
    quarantined_values: int = 0
    lost_and_found: int = 0
    verification: dict[str, Any] = field(default_factory=dict)
    fingerprints: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    report_path: str | None = None
    # what the source is (hstate_recovery.schema.formats) and where its schema came from:
    # file, template, registry, harvested+registry or reference (ours)
    identification: dict[str, Any] = field(default_factory=dict)
    schema_source: str = "file"
    schema_notes: list[str] = field(default_factory=list)  # entries not read or not made
    virtual_tables: dict[str, str] = field(default_factory=dict)  # how each was refilled
    lost_and_found_file: str | None = None  # foreign outputs keep it beside them
    # our store's search index: {"method": "copied" | "rebuilt", "reason": why not copied}
    search_index: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return OUTCOME_EXIT[self.outcome]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["exit_code"] = self.exit_code
        return out


def write_json_exclusive(path: Path, document: dict[str, Any]) -> None:
    """Create ``path`` (0600, failing if it exists) crash-safely: the report
    appears whole or not at all, so a crash mid-write never leaves a torn
    report that makes the rerun refuse ``--report``. An I/O failure raises
    the OSError behind it, as a plain write would."""
    try:
        with private_output(path) as f:
            json.dump(document, f, indent=2, sort_keys=True, default=str)
    except OutputError as e:
        if isinstance(e.__cause__, OSError):
            raise e.__cause__ from None
        raise
