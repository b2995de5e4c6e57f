"""inspect's quick_check of a sound-looking copy, run beside the backup lane.

On a healthy copy quick_check is the longest part of inspect (it reads every
page), and the only part whose verdict is still open once every table has
been read and the search index checked. Recover therefore runs it on a
thread of its own, on its own read-only connection to the copy (SQLite
runs without the GIL), while the backup lane copies the rows. The lane's
work counts only if the check agrees: when it finds damage, the verdict is
what it always was and recover throws the new file away and runs the lanes
again on that verdict, exactly as if the check had come first.
"""
from __future__ import annotations

import copy
import threading
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import apsw

from ..base import RecoveryReport
from ..inspection import (InspectReport, QUICK_CHECK_SECONDS, bounded_quick_check,
                          complete_quick_check, open_copy)
from ..lanes import BACKUP_IMAGE
from ..schema import Catalog
from ..source import Snapshot

THREAD_STEPS = 100_000  # SQLite steps between deadline looks (each takes the GIL)


def _open_readonly(path: Path) -> apsw.Connection:
    """The copy, read-only, with the settings inspect reads it with."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(1000)
    conn.execute("PRAGMA trusted_schema=OFF")
    conn.execute("PRAGMA cell_size_check=ON")  # as `inspect.open_copy`: same findings
    return conn


class QuickCheck:
    """`inspect.bounded_quick_check` of the copy on a thread; `result` waits
    for it. When the copy cannot be opened a second time or no thread can
    start, `result` runs the check itself, in the caller's thread, as inspect would."""

    def __init__(self, copy: Path, cat: Catalog, seconds: float = QUICK_CHECK_SECONDS) -> None:
        self.copy, self.cat, self.seconds = copy, cat, seconds
        self.outcome: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.elapsed = 0.0
        self.stopping = False
        self.thread: threading.Thread | None = None
        self.conn: apsw.Connection | None = None
        try:
            self.conn = _open_readonly(copy)
            self.thread = threading.Thread(target=self._run, name="quick_check", daemon=True)
            self.thread.start()
        except (apsw.Error, RuntimeError):
            self._close()
            self.thread = None

    def _run(self) -> None:
        started = time.monotonic()
        try:
            assert self.conn is not None  # opened before the thread starts
            self.outcome = bounded_quick_check(self.conn, self.cat, self.seconds, THREAD_STEPS,
                                               stop=lambda: self.stopping)
        except BaseException as e:  # handed to the caller in `result`
            self.error = e
        finally:
            self.elapsed = time.monotonic() - started
            self._close()

    def _close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            conn.close()

    def result(self) -> dict[str, Any]:
        """The check's findings, as `inspect` records them."""
        if self.thread is None and self.outcome is None:
            started = time.monotonic()
            conn = open_copy(self.copy)  # the connection inspect itself would have used
            try:
                self.outcome = bounded_quick_check(conn, self.cat, self.seconds)
            finally:
                conn.close()
                self.elapsed = time.monotonic() - started
        elif self.thread is not None:
            self.thread.join()
        if self.error is not None:
            raise self.error
        assert self.outcome is not None
        return self.outcome

    def stop(self) -> None:
        """End the check now, as its deadline would (``timed_out``): what it
        found so far still counts. A check that never got a thread is not run."""
        self.stopping = True
        if self.thread is None:
            self.outcome = {"ok": None, "timed_out": True, "damaged": {},
                            "derived_only": False}

    def cancel(self) -> None:
        """Stop a check nobody will wait for (recover failed meanwhile)."""
        if self.thread is not None and self.thread.is_alive():
            conn = self.conn
            if conn is not None:
                try:
                    conn.interrupt()
                except apsw.Error:
                    pass
            self.thread.join()


class Unsound(Exception):
    """The quick_check run beside the lanes found the copy unsound after all."""


def settle(check: QuickCheck, snap: Snapshot, insp: InspectReport,
           report: RecoveryReport) -> None:
    """Wait for the quick_check run beside the lanes and complete inspect
    with it; `Unsound` when that changes the verdict the lanes ran on."""
    provisional = insp.data_verdict
    complete_quick_check(insp, snap, check.result(), check.elapsed)
    report.timings["inspect_quick_check_s"] = round(check.elapsed, 3)
    report.inspect, report.verdict_before = insp.to_dict(), insp.data_verdict
    if insp.data_verdict != provisional:
        raise Unsound()


def forget_lanes(before: RecoveryReport, report: RecoveryReport, work_dir: Path) -> None:
    """``report`` as it was (``before``) ahead of the lanes of a run thrown
    away, with inspect's final word and the timings of what is kept, and
    no backup image left in the work dir."""
    kept = {"inspect": report.inspect, "verdict_before": report.verdict_before,
            "timings": {k: v for k, v in report.timings.items()
                        if not k.startswith(("lane", "finish"))}}
    for f in fields(report):
        setattr(report, f.name, kept[f.name] if f.name in kept
                else copy.deepcopy(getattr(before, f.name)))
    (work_dir / BACKUP_IMAGE).unlink(missing_ok=True)
