"""A state machine over the transcript API: after every flush the live rows
equal the in-memory transcript (without markers), with no duplicates.

Besides the writer's edit operations it changes the list by hand between
flushes, as agents do: edits a stored dict in place, pops the last dict and
appends an edited copy of it, replaces a slice with edited copies, inserts
new dicts (at the end, and before stored ones, which the flush must refuse)
and reassigns the transcript to a new list. A hand change inside the run the
cursor trusts is only seen once the list is reassigned or the run's last
(boundary) dict is replaced (the writer's contract), so the machine
reassigns exactly when neither happened. Every flush also checks how many
dicts the cursor let it skip.

The flush cursor has two guards; each must make this machine fail when
removed. To repeat the check, plant one at a time in
sessiondb/transcript.py and run this file (it fails within seconds):

1. In ``TranscriptWriter._resume_point`` drop ``last is not c.boundary or``
   (a boundary dict replaced by a copy carrying its marker is trusted), or
   drop that whole ``if`` (any dict at the boundary's index is trusted).
2. In ``TranscriptWriter._plan`` skip every marked dict whatever its
   fingerprint (replace ``if marker.fingerprint == enc.fingerprint:`` by
   ``if True:``): a dict edited by hand is never rewritten.
"""
from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sessiondb import (MARKER_KEY, UID_KEY, CompactionError, InvalidInput, Persisted, SessionDB,
                       StorageError, TranscriptWriter)

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

    # -- changing the list by hand ---------------------------------------------

    def _trusted_now(self) -> int:
        """The run the cursor may trust (all of it when the model lost count)."""
        return len(self.msgs) if self.trusted is None else self.trusted

    def _seen_by_next_flush(self, lo: int, hi: int, replaced: bool) -> None:
        """``msgs[lo:hi]`` changed by hand: make sure the next flush looks.
        A changed dict after the boundary is scanned anyway; a replaced
        boundary resets the cursor; anything else needs a new list object."""
        trusted = self._trusted_now()
        if lo >= trusted:
            return
        if replaced and lo <= trusted - 1 < hi:
            self.trusted = 0 if self.trusted is not None else None
            return
        self.reassign()

    def _edited_copy(self, m: dict) -> dict:
        return {**m, "content": self._text()}  # keeps the marker and uid: same row

    @rule()
    def reassign(self) -> None:
        """A new list object holding the same dicts: the next flush rescans."""
        self.msgs = list(self.msgs)
        if self.trusted is not None:
            self.trusted = 0

    @precondition(lambda self: self.msgs)
    @rule(data=st.data())
    def hand_edit(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.msgs) - 1))
        self.msgs[i]["content"] = self._text()  # in place: identity and marker unchanged
        self._seen_by_next_flush(i, i + 1, replaced=False)

    @precondition(lambda self: self.msgs)
    @rule()
    def hand_pop_and_append(self) -> None:
        self.msgs.append(self._edited_copy(self.msgs.pop()))
        n = len(self.msgs)
        self._seen_by_next_flush(n - 1, n, replaced=True)

    @precondition(lambda self: self.trusted)
    @rule()
    def hand_replace_boundary(self) -> None:
        """An edited copy in place of the last dict the cursor trusts."""
        i = self._trusted_now() - 1
        self.msgs[i] = self._edited_copy(self.msgs[i])
        self._seen_by_next_flush(i, i + 1, replaced=True)

    @precondition(lambda self: self.msgs)
    @rule(data=st.data())
    def hand_replace_slice(self, data: st.DataObject) -> None:
        lo = data.draw(st.integers(0, len(self.msgs) - 1))
        hi = data.draw(st.integers(lo + 1, min(len(self.msgs), lo + 3)))
        self.msgs[lo:hi] = [self._edited_copy(m) for m in self.msgs[lo:hi]]
        self._seen_by_next_flush(lo, hi, replaced=True)

    def _first_new(self) -> int:
        """Where the trailing run of never-stored dicts starts."""
        i = len(self.msgs)
        while i and MARKER_KEY not in self.msgs[i - 1] and UID_KEY not in self.msgs[i - 1]:
            i -= 1
        return i

    @rule(data=st.data(), role=ROLES)
    def hand_insert_new(self, data: st.DataObject, role: str) -> None:
        """A new dict among the unstored tail: stored in list order."""
        i = data.draw(st.integers(self._first_new(), len(self.msgs)))
        self.msgs.insert(i, {"role": role, "content": self._text()})

    @precondition(lambda self: any(_marked(m) for m in self.msgs))
    @rule(data=st.data())
    def hand_insert_before_stored(self, data: st.DataObject) -> None:
        """A new dict before a stored one is refused and nothing is written."""
        last = max(i for i, m in enumerate(self.msgs) if _marked(m))
        i = data.draw(st.integers(0, last))
        sneaked = {"role": "user", "content": self._text()}
        self.msgs.insert(i, sneaked)
        before = self._rows()
        with pytest.raises(InvalidInput, match="only be added at the end"):
            self.writer.flush(self.msgs)
        assert self._rows() == before
        del self.msgs[i]
        self.trusted = 0 if self.trusted is not None else None

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
