"""The writer's busy handler: short growing waits, a hard budget, installed on
every connection the store opens."""
from __future__ import annotations

import apsw

from sessiondb import SessionDB, StoreLocked
from sessiondb.base.policy import BUSY_TIMEOUT_MS, BusyWait


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_waits_start_short_grow_and_stop_at_the_budget():
    t = FakeTime()
    wait = BusyWait(0.1, clock=t.clock, sleep=t.sleep)
    calls = 0
    while wait(calls):
        calls += 1
    # The first retries come well under SQLite's own 1 ms first sleep...
    assert t.slept[0] <= BusyWait.FIRST_S * 1.5
    # ...no single sleep is long, and the whole wait stays within the budget
    # plus at most one last sleep.
    assert max(t.slept) <= BusyWait.LONGEST_S * 1.5
    assert 0.1 <= sum(t.slept) <= 0.1 + BusyWait.LONGEST_S * 1.5
    assert t.slept[10] > t.slept[0]


def test_a_new_wait_gets_a_fresh_budget():
    t = FakeTime()
    wait = BusyWait(0.01, clock=t.clock, sleep=t.sleep)
    calls = 0
    while wait(calls):
        calls += 1
    assert wait(0) is True  # prior_calls == 0: another statement's wait begins


def test_store_gives_up_with_a_typed_error_while_another_writer_holds_the_lock(tmp_path):
    path = tmp_path / "locked.db"
    with SessionDB(path) as db:
        sid = db.create_session("s", source="test")
    other = apsw.Connection(str(path))
    other.execute("BEGIN IMMEDIATE")
    try:
        with SessionDB(path, patience=BUSY_TIMEOUT_MS / 1000 * 2) as db:
            try:
                db.append_message(sid, {"role": "user", "content": "x"})
                raised = None
            except StoreLocked as e:
                raised = e
            assert raised is not None
            assert db.get_messages(sid) == []
    finally:
        other.execute("ROLLBACK")
        other.close()
