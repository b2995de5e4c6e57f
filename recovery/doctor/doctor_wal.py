"""Checkpoint starvation: a reader whose snapshot keeps checkpoints from finishing.

In WAL mode a checkpoint copies committed frames from ``-wal`` into the
database file and, once every frame is copied and no reader uses the WAL,
starts the WAL over. A reader pins the snapshot it began with: no
checkpoint copies frames past it (a reader of the file alone, slot 0, pins
the file itself), and the WAL cannot restart while it lasts, so the WAL
grows with every commit however often checkpoints run. The size check sees
the result late; this one names the reader.

Read from the ``-shm`` (the WAL-index header: ``mxFrame`` at byte 16 of each
of its two 48-byte copies; then ``nBackfill`` at byte 96 and the five read
marks at 100, native byte order) and from ``/proc/locks`` (a reader holds
read slot ``i`` as a shared lock on byte ``120 + 3 + i`` of the ``-shm``).
The ``-shm`` is read with a plain descriptor, which closing would drop this
process's own POSIX locks on the file with: only done for a file doctor
has no SQLite connection to (another program's file, whose checks read a
private snapshot).
"""
from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sessiondb.recovery_api import held_locks

from ..base import Severity
from ..source import liveread

if TYPE_CHECKING:
    from .model import Finding, Target

_HEADER = 48  # one copy of the WAL-index header
_READ_SLOT0 = 123  # -shm byte of read lock 0 (WALINDEX_LOCK_OFFSET 120 + 3)
_SLOTS = 5
WATCH_S = 1.0  # a reader held past this is not a passing read


@dataclass(frozen=True)
class Reader:
    pid: int
    command: str
    slot: int
    mark: int  # the last WAL frame its snapshot sees (slot 0: none, the file alone)


@dataclass(frozen=True)
class WalProgress:
    """How far checkpoints got, and the readers that pin older snapshots."""

    frames: int  # committed frames in the WAL (mxFrame)
    backfilled: int  # frames copied into the database file (nBackfill)
    pinning: tuple[Reader, ...]


def _shm_header(shm: Path) -> tuple[int, int, list[int]] | None:
    try:
        with open(shm, "rb") as f:
            raw = f.read(136)
    except OSError:
        return None
    if len(raw) < 136 or raw[:_HEADER] != raw[_HEADER:2 * _HEADER] or not raw[12]:
        return None  # not initialised, or a writer is between the two copies
    (frames,) = struct.unpack_from("=I", raw, 16)
    backfilled, *marks = struct.unpack_from("=6I", raw, 96)
    return frames, backfilled, marks


def _read_slots(shm: Path) -> list[tuple[int, int]]:
    """(pid, slot) of other processes holding a read lock on the ``-shm``."""
    try:
        inode = os.stat(shm).st_ino
    except OSError:
        return []
    out = []
    for lk in held_locks() or []:
        if lk.inode == inode:
            out += [(lk.pid, i) for i in range(_SLOTS) if lk.start <= _READ_SLOT0 + i <= lk.end]
    return out


def wal_progress(db: Path) -> WalProgress | None:
    """None without a WAL-index to read (no ``-shm``, or not in WAL mode)."""
    shm = Path(f"{db}-shm")
    header = _shm_header(shm)
    if header is None:
        return None
    frames, backfilled, marks = header
    pinning = tuple(Reader(pid, liveread.cmdline_of(pid), slot, 0 if slot == 0 else marks[slot])
                    for pid, slot in _read_slots(shm)
                    if (marks[slot] if slot else 0) < frames)
    return WalProgress(frames, backfilled, pinning)


def _still_pinned(db: Path, first: WalProgress) -> WalProgress | None:
    """The progress after WATCH_S, when the same reader still pins the same
    snapshot and frames still wait behind it (a passing read lets go)."""
    time.sleep(WATCH_S)
    now = wal_progress(db)
    if now is None or now.backfilled >= now.frames:
        return None
    same = [r for r in now.pinning if r in first.pinning]
    return WalProgress(now.frames, now.backfilled, tuple(same)) if same else None


def check_wal_checkpoint(t: "Target") -> list["Finding"]:
    from .model import Finding
    first = wal_progress(t.db)
    if first is None:
        return [Finding("wal_checkpoint", Severity.OK, "no WAL-index to read: nothing waits "
                        "for a checkpoint")]
    waiting = first.frames - first.backfilled
    starved = _still_pinned(t.db, first) if waiting > 0 and first.pinning else None
    if starved is None:
        return [Finding("wal_checkpoint", Severity.OK, f"checkpoints keep up: {first.backfilled}"
                        f" of {first.frames} WAL frames copied into the file, no reader "
                        "holding an older snapshot")]
    r = min(starved.pinning, key=lambda x: x.mark)
    seen = ("the file alone, before any WAL frame" if r.slot == 0 else
            f"WAL frame {r.mark}")
    return [Finding("wal_checkpoint", Severity.WARN,
                    f"checkpoint starvation: process {r.pid} ({r.command}) has read a snapshot "
                    f"at {seen} for over {WATCH_S:.0f} s, so no checkpoint can copy the "
                    f"{starved.frames - starved.backfilled} frames after it into the file "
                    f"({starved.backfilled} of {starved.frames} copied) or start the WAL "
                    "over: the -wal grows with every commit while that read lasts",
                    f"end the long read in process {r.pid} (let it finish, or restart it); "
                    f"the owning program's next checkpoint then catches up; then: "
                    f"{t.command('doctor')}",
                    data={"frames": starved.frames, "backfilled": starved.backfilled,
                          "readers": [{"pid": x.pid, "slot": x.slot, "mark": x.mark}
                                      for x in starved.pinning]})]
