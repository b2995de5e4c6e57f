"""The agent's side of persistence: lease, flush, usage, spool, compaction.

Everything the loop writes goes through here so a storage failure is
handled in one place: the unwritten messages are spooled, the cause and
the copy-table explanation travel up as `PersistenceFailed`, and the turn
stops writing (fails closed) until the next turn.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from sessiondb import (Cause, MARKER_KEY, SPOOL_CAUSES, SessionNotFound, SessionTooLong,
                       StorageError, StorageFailure, StoreFace, TranscriptWriter, UID_KEY,
                       describe_error, spool_failed_write)

log = logging.getLogger(__name__)

LEASE_TTL_S = 120.0
RESUME_TAIL = 2000
PROVIDER = "anthropic"  # the one provider the loop speaks to (the SDK's Messages API)
# A failed turn is over: nobody retries its writes, so a lock timeout spools too.
AGENT_SPOOL_CAUSES = SPOOL_CAUSES | {Cause.LOCKED}


class PersistenceFailed(Exception):
    """Storage failed mid-turn (control flow inside the agent loop)."""

    def __init__(self, error: StorageError, failure: StorageFailure) -> None:
        super().__init__(str(error))
        self.error = error
        self.failure = failure
        self.cause = error.cause.value


class TurnPersistence:
    """Writes one session's transcript for an agent, under a turn lease.

    The session row is written by the first turn that stores a message
    (``source`` and ``model`` are its values), so an agent that never runs
    a turn, or whose turn ends before anything is stored, leaves no empty
    session behind, and a store that refuses writes fails the turn (whose
    line is then spooled), not the agent's construction."""

    def __init__(self, db: StoreFace, session_id: str, holder: str, *,
                 source: str = "agent", model: str | None = None) -> None:
        self.db, self.session_id, self.holder = db, session_id, holder
        self.source, self.model = source, model
        self._created = False
        self.writer = TranscriptWriter(db, session_id, holder=holder)
        self.failed: PersistenceFailed | None = None
        self._lease_until = 0.0
        self._spooled: set[str] = set()  # uids already in the spool

    def load(self) -> list[dict[str, Any]]:
        """The session's live transcript (marked), for resuming. A session too
        long to load whole resumes from its last `RESUME_TAIL` rows plus the
        live rolling summary before them (what the model is sent anyway)."""
        try:
            return self.db.get_messages(self.session_id)
        except SessionNotFound:
            return []  # a new session: its row comes with the first turn
        except SessionTooLong as e:
            log.info("session %s has %d live rows; resuming from the last %d and its "
                     "rolling summary", self.session_id, e.rows, RESUME_TAIL)
            return self.db.get_messages(self.session_id, tail=RESUME_TAIL, with_summary=True)

    def _fail(self, err: StorageError, messages: list[dict[str, Any]], *,
              causes: frozenset[Cause] = AGENT_SPOOL_CAUSES) -> PersistenceFailed:
        """Spool what is not stored yet (once per message), explain, fail closed.
        What the spool could not take either is in ``err.unsaved``."""
        unwritten = [m for m in messages if MARKER_KEY not in m
                     and m.get(UID_KEY) not in self._spooled]
        spool_failed_write(self.db.core, self.session_id, unwritten, err, causes=causes)
        if getattr(err, "spooled_to", None):
            self._spooled.update(m[UID_KEY] for m in unwritten)
        failure = describe_error(err, home=self.db.home, profile=self.db.profile)
        self.failed = PersistenceFailed(err, failure)
        return self.failed

    def begin_turn(self, messages: list[dict[str, Any]]) -> None:
        """Take the turn lease and store the new user line. If the store refuses,
        the turn did not start: a lock timeout spools nothing (the caller
        withdraws the line and the user sends it again); other causes keep it
        in the spool."""
        self.failed = None
        try:
            if not self._created:
                self.db.create_session(self.session_id, source=self.source, model=self.model)
                self._created = True
            self._lease_until = self.db.acquire_lease(self.session_id, self.holder,
                                                      LEASE_TTL_S).expires_at
            self.writer.flush(messages)
        except StorageError as e:
            if getattr(e, "spooled_to", None):
                self._spooled.update(m[UID_KEY] for m in self.writer.unwritten)
            raise self._fail(e, messages, causes=SPOOL_CAUSES) from e

    def _keep_lease(self) -> None:
        """Renew when half the lease is gone: one extra write per minute, not per flush."""
        if time.time() > self._lease_until - LEASE_TTL_S / 2:
            self._lease_until = self.db.refresh_lease(self.session_id, self.holder,
                                                      LEASE_TTL_S).expires_at

    def flush(self, messages: list[dict[str, Any]]) -> None:
        """Store what is new; on failure spool it and stop writing this turn."""
        if self.failed is not None:
            raise self.failed
        try:
            self._keep_lease()
            self.writer.flush(messages)
        except StorageError as e:
            if getattr(e, "spooled_to", None):  # the writer spooled its batch itself
                self._spooled.update(m[UID_KEY] for m in self.writer.unwritten)
            raise self._fail(e, messages) from e

    def compact(self, messages: list[dict[str, Any]], span: tuple[int, int],
                summary: dict[str, Any]) -> None:
        """Archive ``messages[span]`` behind ``summary`` (store and memory)."""
        ids = [m["_db_persisted"].id for m in messages[span[0]:span[1]]]
        self.writer.compact(messages, ids, summary)

    def end_turn(self, usage: Any, model: str | None = None) -> None:
        """Record the turn's token usage (one write: the session's counters and
        its ledger row) and release the lease. A store that already failed
        this turn is left alone."""
        if self.failed is not None:
            return
        try:
            self.db.record_usage(self.session_id, model=model, provider=PROVIDER,
                                 **usage.ledger())
            self.db.release_lease(self.session_id, self.holder)
        except StorageError:
            log.warning("could not record usage or release the lease on %s", self.session_id,
                        exc_info=True)
