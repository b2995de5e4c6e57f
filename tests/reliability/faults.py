"""I/O fault sweep: fail the k-th write, sync or truncate of a fixed workload.

For each op and each errno kind the shim can inject (see
tests/helpers/faultvfs.py), a dry run counts the op's calls N, then for
k = 1..N the workload runs on a fresh copy of the same store with only the
k-th call failing. Per k it checks: every error reaching a caller is
classified as the unix VFS's result code for that errno says; every
acknowledged message is in the store; after the fault is lifted the store
opens, passes `integrity_check` and the counter checks, and `import_spool`
brings it to exactly the workload's messages, each once.

``python -m tests.reliability.faults [--stride S]`` runs the full sweep.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import apsw

from sessiondb import Cause, SessionDB, StorageError, TranscriptWriter
from sessiondb import classify
from sessiondb.importers.spool_import import import_spool
from tests.helpers.faultvfs import SCRIPTED_OPS, FaultVFS

from .checks import store_findings

_names = itertools.count()
SESSIONS = ("s1", "t1")


def expected_cause(op: str, kind: str) -> Cause:
    """What the caller must be told: SQLITE_FULL is disk_full, IOERR io_error."""
    return Cause.DISK_FULL if SCRIPTED_OPS[op][kind] == apsw.SQLITE_FULL else Cause.IO_ERROR


@dataclass
class Outcome:
    """One workload run under one armed fault."""

    fired: bool = False
    errors: list[tuple[str, Cause]] = field(default_factory=list)  # (step, cause)
    acked: list[tuple[str, str]] = field(default_factory=list)
    attempted: list[tuple[str, str]] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)


def base_store(path: Path, journal_mode: str = "wal") -> None:
    with SessionDB(path, journal_mode=journal_mode) as db:
        for sid in SESSIONS:
            db.create_session(sid, source="faults")


def msg(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"fault workload message {i} "
            + "x" * (i * 37 % 900)}


def _steps(db: SessionDB, out: Outcome) -> list[tuple[str, Callable[[], list[dict]]]]:
    """The fixed workload: (step name, call returning the messages it wrote)."""
    transcript: list[dict] = []
    writer = TranscriptWriter(db, "t1")
    counter = itertools.count()

    def append(n: int) -> Callable[[], list[dict]]:
        batch = [msg(next(counter)) for _ in range(n)]

        def run() -> list[dict]:
            out.attempted += [("s1", m["content"]) for m in batch]
            db.append_messages("s1", batch)
            return batch
        return run

    def flush(n: int) -> Callable[[], list[dict]]:
        def run() -> list[dict]:
            new = [msg(next(counter)) for _ in range(n)]
            out.attempted += [("t1", m["content"]) for m in new]
            transcript.extend(new)
            writer.flush(transcript)
            return new
        return run

    def compact() -> list[dict]:
        ids = [m["_db_persisted"].id for m in transcript[:3] if "_db_persisted" in m]
        if len(ids) == 3:
            writer.compact(transcript, ids, {"role": "assistant", "content": "summary"})
        return []

    def checkpoint() -> list[dict]:
        db.checkpoint()
        return []

    def index() -> list[dict]:  # the indexer's batches, run where a caller sees them
        db.catch_up_index()
        return []
    return ([("append1", append(1)) for _ in range(4)] + [("batch", append(8)), ("flush", flush(3)),
            ("flush", flush(2)), ("checkpoint", checkpoint), ("compact", compact),
            ("index", index), ("batch", append(30)), ("flush", flush(4)),
            ("checkpoint", checkpoint), ("append1", append(1)), ("index", index)])


def run_workload(path: Path, vfs: str, out: Outcome, journal_mode: str = "wal") -> None:
    """The workload through the shim; errors are recorded, never raised.
    The index is caught up by the workload's own steps, not by the
    background thread: the k-th call must be the same call in every run."""
    try:
        db = SessionDB(path, vfs=vfs, journal_mode=journal_mode, background_index=False)
    except StorageError as e:
        out.errors.append(("open", classify(e)))
        return
    try:
        for name, step in _steps(db, out):
            try:
                written = step()
            except StorageError as e:
                out.errors.append((name, classify(e)))
                continue
            sid = "t1" if name == "flush" else "s1"
            out.acked += [(sid, m["content"]) for m in written]
    finally:
        try:
            db.close()  # the checkpoint at close may meet the fault
        except StorageError as e:
            out.errors.append(("close", classify(e)))


def _rows(path: Path) -> Counter:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return Counter(conn.execute("SELECT session_id, content FROM messages"
                                    " WHERE kind IN ('', 'message')").fetchall())  # '': m012
    finally:
        conn.close()


def check_after(path: Path, out: Outcome, cause: Cause, journal_mode: str = "wal") -> None:
    """Classification, acknowledged rows, reopen, integrity, spool import."""
    out.findings += [f"{step}: classified {got.value}, expected {cause.value}"
                     for step, got in out.errors if got is not cause]
    if out.errors and not out.fired:
        out.findings.append(f"errors without an injected fault: {out.errors}")
    before = _rows(path)
    out.findings += [f"acknowledged message missing: {k}" for k in out.acked if not before[k]]
    try:
        with SessionDB(path, journal_mode=journal_mode) as db:
            import_spool(db)
    except StorageError as e:
        out.findings.append(f"reopen or spool import failed: {e}")
        return
    out.findings += store_findings(path)
    after = _rows(path)
    want = Counter(out.attempted)
    if after != want:
        out.findings.append(f"rows after spool import differ: missing "
                            f"{sorted(want - after)[:3]}, extra {sorted(after - want)[:3]}")


def one(template: Path, work: Path, op: str, k: int | None, kind: str,
        journal_mode: str = "wal") -> Outcome:
    """Run the workload on a fresh copy of ``template`` with the fault armed."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(mode=0o700, parents=True)
    path = work / "state.db"
    shutil.copyfile(template, path)
    os.chmod(path, 0o600)
    shim = FaultVFS(f"sweep{os.getpid()}_{next(_names)}")
    out = Outcome()
    try:
        if k is not None:
            shim.faults.arm_call(op, k, kind)
        run_workload(path, shim.name, out, journal_mode)
        out.fired = bool(shim.faults.fired)
        calls = dict(shim.faults.calls)
    finally:
        shim.faults.clear()
        shim.unregister()
    if k is None:
        out.findings = [json.dumps(calls)]  # the dry run reports the call counts
        return out
    check_after(path, out, expected_cause(op, kind), journal_mode)
    return out


@dataclass
class SweepRow:
    op: str
    kind: str
    calls: int
    journal_mode: str = "wal"
    runs: int = 0
    fired: int = 0
    caller_errors: int = 0
    causes: Counter = field(default_factory=Counter)
    findings: list[str] = field(default_factory=list)


def sweep(directory: Path, *, stride: int = 1, ops: tuple[str, ...] = ("write", "sync",
          "truncate"), journal_mode: str = "wal") -> list[SweepRow]:
    """Every (op, kind), k = 1, 1+stride, ... N (and N itself)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    template = directory / f"template-{journal_mode}.db"
    if not template.exists():
        base_store(template, journal_mode)
    dry = one(template, directory / "dry", "write", None, "eio", journal_mode)
    calls = json.loads(dry.findings[0])
    rows = []
    for op in ops:
        n = calls.get(op, 0)
        ks = sorted(set(range(1, n + 1, stride)) | ({n} if n else set()))
        for kind in SCRIPTED_OPS[op]:
            row = SweepRow(op, kind, n, journal_mode)
            for k in ks:
                out = one(template, directory / "run", op, k, kind, journal_mode)
                row.runs += 1
                row.fired += out.fired
                row.caller_errors += len(out.errors)
                row.causes.update(c.value for _, c in out.errors)
                row.findings += [f"k={k}: {f}" for f in out.findings]
            rows.append(row)
    return rows


def table(rows: list[SweepRow]) -> str:
    lines = [f"{'mode':7}{'op':9}{'kind':8}{'N':>5}{'runs':>6}{'fired':>7}{'errors':>8}"
             "  causes / findings"]
    for r in rows:
        lines.append(f"{r.journal_mode:7}{r.op:9}{r.kind:8}{r.calls:5}{r.runs:6}{r.fired:7}"
                     f"{r.caller_errors:8}  "
                     f"{dict(r.causes)} {len(r.findings)} findings")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stride", type=int, default=1)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--journal-mode", choices=("wal", "delete", "both"), default="both")
    args = ap.parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="hermes-faults-"))
    modes = ("wal", "delete") if args.journal_mode == "both" else (args.journal_mode,)
    rows = [r for m in modes for r in sweep(directory, stride=args.stride, journal_mode=m)]
    print(table(rows))
    for r in rows:
        for f in r.findings[:10]:
            print(f"{r.op}/{r.kind} {f}")
    return 1 if any(r.findings for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
