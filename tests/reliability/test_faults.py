"""I/O fault sweep, CI size (every 6th write, every sync and truncate), and
the regression test for a close whose checkpoint fails."""
from __future__ import annotations

from pathlib import Path

import pytest

from sessiondb import Cause, SessionDB, StorageError
from sessiondb import classify
from sessiondb.engine import containment
from tests.helpers.faultvfs import FaultVFS
from tests.reliability import faults


@pytest.mark.parametrize("journal_mode,stride", [("wal", 10), ("delete", 25)])
def test_fault_sweep_every_kind(tmp_path: Path, journal_mode: str, stride: int):
    rows = faults.sweep(tmp_path / "sweep", stride=stride, journal_mode=journal_mode)
    assert {(r.op, r.kind) for r in rows} == {
        (op, kind) for op, kinds in faults.SCRIPTED_OPS.items() for kind in kinds}
    for r in rows:
        # A rollback journal is deleted, never truncated: no truncate calls there.
        if journal_mode == "wal" or r.op != "truncate":
            assert r.calls > 0, f"the workload never calls {r.op}"
        assert r.findings == [], (r.op, r.kind, r.findings[:5])
        assert r.fired == r.runs  # every armed fault was really hit
        if r.runs:
            assert set(r.causes) == {faults.expected_cause(r.op, r.kind).value}
    writes = next(r for r in rows if (r.op, r.kind) == ("write", "short"))
    assert writes.caller_errors >= writes.runs  # failures reached a caller, typed


def test_fault_at_close_is_typed_and_releases_everything(tmp_path: Path):
    """Found by the sweep: a checkpoint-at-close failure escaped as a raw
    apsw.IOError and left the writer and the header descriptor open."""
    shim = FaultVFS("close_fault")
    try:
        db = SessionDB(tmp_path / "state.db", vfs=shim.name)
        db.create_session("s1", source="t")
        db.append_message("s1", {"role": "user", "content": "kept"})
        key = db._guard.key
        db.catch_up_index()  # else the close's first write is the index's
        shim.faults.arm_call("write", 1, "eio")  # the checkpoint's first write
        with pytest.raises(StorageError) as info:
            db.close()
        assert classify(info.value) is Cause.IO_ERROR
        assert shim.faults.fired == [("write", 1, "eio")]
        assert key not in containment._fds
        db.close()  # a second close is still a no-op
    finally:
        shim.faults.clear()
        shim.unregister()
    with SessionDB(tmp_path / "state.db") as again:
        assert [m["content"] for m in again.get_messages("s1")] == ["kept"]
        assert again.quick_check() == ["ok"]
