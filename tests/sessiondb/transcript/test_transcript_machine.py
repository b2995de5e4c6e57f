"""A state machine over the transcript API: after every flush the live rows
equal the in-memory transcript (without markers), with no duplicates."""
from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sessiondb import (MARKER_KEY, CompactionError, Persisted, SessionDB, StorageError,
                       TranscriptWriter)

ROLES = st.sampled_from(["user", "assistant", "tool"])


def _marked(m: dict) -> bool:
    return isinstance(m.get(MARKER_KEY), Persisted)


class TranscriptMachine(RuleBasedStateMachine):
    """Every example works on its own session of one shared store file
    (creating a file per example would dominate the run time)."""

    path: Path
    sessions = itertools.count()

    def __init__(self) -> None:
        super().__init__()
        self.db = SessionDB(self.path)
        self.sid = self.db.create_session(f"s{next(self.sessions)}", source="test")
        self.writer = TranscriptWriter(self.db, self.sid)
        self.msgs: list[dict] = []
        self.counter = 0
        self.trusted: int | None = 0  # what the cursor should let the next flush skip
        self.compactions: list[str] = []

    def teardown(self) -> None:
        self.db.close()

    # -- helpers -------------------------------------------------------------

    def _text(self) -> str:
        self.counter += 1
        return f"text {self.counter}"

    def _rows(self) -> list[tuple]:
        with self.db._read() as conn:
            return conn.execute("SELECT id, uid, position, content, meta, state, compaction_id"
                                " FROM messages WHERE session_id = ? ORDER BY id",
                                (self.sid,)).fetchall()

    def _pull_back(self, index: int) -> None:
        if self.trusted is not None:
            self.trusted = min(self.trusted, index)

    def _check_store(self) -> None:
        assert self.writer.verify(self.msgs) == []
        with self.db._read() as conn:
            (dupes,) = conn.execute(
                "SELECT count(*) FROM (SELECT position FROM messages WHERE state = 'active'"
                " AND session_id = ? GROUP BY position HAVING count(*) > 1)",
                (self.sid,)).fetchone()
        assert dupes == 0

    # -- building the transcript -----------------------------------------------

    @rule(role=ROLES, count=st.integers(1, 3))
    def append(self, role: str, count: int) -> None:
        for _ in range(count):
            self.msgs.append({"role": role, "content": self._text()})

    @rule()
    def append_empty_assistant(self) -> None:
        self.msgs.append({"role": "assistant", "content": None})

    @precondition(lambda self: self.msgs)
    @rule(data=st.data(), field=st.sampled_from(["content", "finish_reason", "extra"]))
    def edit(self, data: st.DataObject, field: str) -> None:
        i = data.draw(st.integers(0, len(self.msgs) - 1))
        self.writer.update(self.msgs, i, **{field: self._text()})
        self._pull_back(i)

    @precondition(lambda self: self.msgs)
    @rule(data=st.data(), role=ROLES)
    def replace(self, data: st.DataObject, role: str) -> None:
        i = data.draw(st.integers(0, len(self.msgs) - 1))
        self.writer.replace(self.msgs, i, {"role": role, "content": self._text()})
        self._pull_back(i)

    @precondition(lambda self: self.msgs and self.msgs[-1].get("role") == "assistant"
                  and self.msgs[-1].get("content") is None)
    @rule()
    def fill_tail(self) -> None:
        self.writer.fill_tail(self.msgs, self._text(), finish_reason="stop")
        self._pull_back(len(self.msgs) - 1)

    @precondition(lambda self: self.msgs)
    @rule(data=st.data())
    def rewind(self, data: st.DataObject) -> None:
        n = data.draw(st.integers(0, min(3, len(self.msgs))))
        self.writer.rewind(self.msgs, n)
        self._pull_back(len(self.msgs))

    @precondition(lambda self: any(_marked(m) for m in self.msgs))
    @rule(data=st.data(), supersede=st.booleans())
    def compact(self, data: st.DataObject, supersede: bool) -> None:
        marked = [i for i, m in enumerate(self.msgs) if _marked(m)]
        start = data.draw(st.sampled_from(marked))
        span = data.draw(st.integers(1, 4))
        ids = [m[MARKER_KEY].id for m in self.msgs[start:start + span] if _marked(m)]
        result = self.writer.compact(self.msgs, ids, {"role": "user", "content": self._text()},
                                     supersede_previous=supersede)
        self.compactions.append(result.compaction_id)
        self.trusted = None  # recomputed by the writer; checked loosely below

    # -- persisting ------------------------------------------------------------

    @rule()
    def flush(self) -> None:
        result = self.writer.flush(self.msgs)
        assert result.scanned + result.skipped == len(self.msgs)
        if self.trusted is not None:
            assert result.skipped == max(self.trusted - 1, 0)
        self._check_store()
        again = self.writer.flush(self.msgs)
        assert (again.inserted, again.updated, again.scanned) == (0, 0, min(1, len(self.msgs)))
        self.trusted = len(self.msgs)

    @rule()
    def failing_flush(self) -> None:
        """A real SQLite failure on every message write during this flush."""
        with self.db.atomic() as conn:
            conn.execute("CREATE TEMP TRIGGER f1 BEFORE INSERT ON main.messages"
                         " BEGIN SELECT RAISE(ABORT, 'injected'); END;"
                         "CREATE TEMP TRIGGER f2 BEFORE UPDATE ON main.messages"
                         " BEGIN SELECT RAISE(ABORT, 'injected'); END;")
        before = self._rows()
        try:
            result = self.writer.flush(self.msgs)
        except StorageError:
            assert self._rows() == before
            assert self.writer.unwritten
            self.trusted = 0
        else:
            assert (result.inserted, result.updated) == (0, 0)
            self.trusted = len(self.msgs)
        finally:
            with self.db.atomic() as conn:
                conn.execute("DROP TRIGGER temp.f1; DROP TRIGGER temp.f2")

    @precondition(lambda self: self.msgs)
    @rule(data=st.data())
    def crash_after_commit(self, data: st.DataObject) -> None:
        """The flush committed but the process died before marking: a new
        handle and writer get the same list with some markers missing."""
        self.writer.flush(self.msgs)
        lost = data.draw(st.integers(1, len(self.msgs)))
        for m in self.msgs[-lost:]:
            m.pop(MARKER_KEY, None)
        self.restart()

    @rule()
    def restart(self) -> None:
        self.db.close()
        self.db = SessionDB(self.path)
        self.writer = TranscriptWriter(self.db, self.sid)
        self.trusted = 0

    @precondition(lambda self: self.compactions)
    @rule()
    def restore_last_compaction(self) -> None:
        """Undo the newest compaction; the agent then reloads its transcript."""
        self.flush()
        before = self._rows()
        try:
            self.db.restore_compaction(self.compactions.pop())
        except CompactionError:  # its summary was rewound or absorbed since
            assert self._rows() == before
            return
        self.msgs = self.db.get_messages(self.sid)
        self.trusted = 0

    @invariant()
    def no_row_is_lost(self) -> None:
        # Rows are never deleted: every uid ever stored stays on disk.
        with self.db._read() as conn:
            (n, distinct) = conn.execute("SELECT count(*), count(DISTINCT uid) FROM messages"
                                         " WHERE session_id = ?", (self.sid,)).fetchone()
        assert n == distinct
        assert n >= getattr(self, "_high_water", 0)
        self._high_water = n


# Each example creates a store file and restarts fsync on close, so the
# count is kept modest for CI; HERMES_MACHINE_EXAMPLES=1500 runs a long
# search (it passed with 1500 examples of 50 steps during development).
TranscriptMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("HERMES_MACHINE_EXAMPLES", "80")),
    stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True, scope="module")
def _shared_store(tmp_path_factory: pytest.TempPathFactory):
    TranscriptMachine.path = tmp_path_factory.mktemp("machine") / "machine.db"
    yield


test_transcript_state_machine = TranscriptMachine.TestCase
