"""Old graph checkpoints reclaimed, the newest of each thread kept.

A LangGraph thread keeps a checkpoint per step, and each keeps its state's
changed channel values, so a long thread grows without end. This keeps the
newest ``keep`` checkpoints of each thread's namespaces with their writes
and the values they point at, and deletes the rest (sessiondb/rows/
checkpoints.py's `prune_thread`), one thread per transaction, on either
backend; the session and its transcript stay. ``hermes sessions optimize``
then gives the space back to the filesystem.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..base import Core, InvalidInput
from ..rows import checkpoints


@dataclass
class CheckpointPrune:
    """What a checkpoint prune deleted (or, with ``dry_run``, would delete)."""

    keep: int
    dry_run: bool
    threads: int = 0
    checkpoints_deleted: int = 0
    values_deleted: int = 0
    per_thread: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prune_checkpoints(core: Core, *, keep: int = 1, session_ids: list[str] | None = None,
                      dry_run: bool = False) -> CheckpointPrune:
    """Keep the newest ``keep`` (>= 1) checkpoints of each namespace of each
    thread (``session_ids``: these threads only; None: every thread)."""
    if not isinstance(keep, int) or keep < 1:
        raise InvalidInput("keep must be at least 1 (deleting a whole thread is "
                           "`hermes sessions delete` or `prune`)")
    with core.read() as conn:
        found = checkpoints.threads(conn)
    chosen = found if session_ids is None else [s for s in found if s in set(session_ids)]
    report = CheckpointPrune(keep=keep, dry_run=dry_run, threads=len(chosen))
    for sid in chosen:
        if dry_run:
            with core.read() as conn:
                counts: dict[str, int] = {}
                for ns, _ in checkpoints.checkpoint_keys(conn, sid):
                    counts[ns] = counts.get(ns, 0) + 1
            gone = sum(max(0, n - keep) for n in counts.values())
        else:
            with core.write() as conn:
                gone, values = checkpoints.prune_thread(conn, sid, keep)
            report.values_deleted += values
        report.checkpoints_deleted += gone
        report.per_thread[sid] = gone
    return report


__all__ = ["CheckpointPrune", "prune_checkpoints"]
