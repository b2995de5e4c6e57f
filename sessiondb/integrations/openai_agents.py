"""`HermesSession`: the OpenAI Agents SDK's ``Session`` protocol on our store.

``Runner.run(agent, input, session=HermesSession("user-42"))`` keeps the
conversation as a session of the store: each item one message row
(sessiondb/integrations/items.py says how), so ``hermes sessions
search/show/export``, compaction, recover and the PostgreSQL backend treat
it like any other session. The protocol is async and the store is
synchronous: every call runs in a worker thread (``asyncio.to_thread``), so
the event loop never waits on SQLite, and the store's one write primitive
serialises writers from any number of threads and event loops.

Failures are the store's typed errors (`StorageError` and its subclasses).
A write that fails as corrupt, replaced, disk full, read-only or I/O error
is first spooled (``<home>/spool/<session>.jsonl``, re-imported by ``hermes
sessions import-spool``), as every append of the store is; nothing is
retried behind the caller's back. A write the caller's task is cancelled
during still runs to its end (its outcome is known before the
cancellation propagates), as the SDK's own sessions do.

``pop_item`` and ``clear_session`` never delete rows: the rows leave the
session's history as *rewound* (still on disk, still found by search with
archived rows, and by recover). ``hermes sessions prune`` deletes whole
sessions.

Needs the ``openai-agents`` extra (``pip install 'hermes-state[openai-agents]'``).
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, Awaitable, TypeVar

from ..base import SessionNotFound
from ..face import StoreFace
from ..rows import UID_KEY, messages
from .items import from_message, items_from_rows, to_message
from .naming import open_store, store_session_id

try:
    from agents.memory.session_settings import SessionSettings, coerce_session_settings
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("HermesSession needs the OpenAI Agents SDK: "
                      "pip install 'hermes-state[openai-agents]'") from e

T = TypeVar("T")

#: The ``source`` of a session HermesSession creates.
SOURCE = "openai-agents"


class HermesSession:
    """An Agents SDK session kept in a hermes-state store.

    ``db`` is a `SessionDB` (or any store handle, e.g. PostgreSQL's), a path
    to a store file, or None for the default home's store; a store this
    class opened is closed by `close`, one passed in is left open.
    ``session_settings.limit`` is the default of `get_items`. Ids the
    store does not allow as session ids are mapped to ``oa-<hash>``
    (`store_session_id`); ``store_session_id`` is the one used.
    """

    def __init__(self, session_id: str, db: StoreFace | str | os.PathLike[str] | None = None,
                 *, session_settings: SessionSettings | dict[str, Any] | None = None,
                 source: str = SOURCE) -> None:
        self.session_id = session_id
        self.store_session_id = store_session_id(session_id, "oa")
        self.session_settings = coerce_session_settings(session_settings or SessionSettings())
        self.db, self._owns_db = open_store(db)
        self._source = source
        self._created = False
        self._closed = False

    # -- the Session protocol ------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The session's items oldest first; with ``limit`` (or
        ``session_settings.limit``) the newest ``limit`` of them. A limit of
        0 gives none; a negative one, all (the SDK's SQLite session's rules)."""
        self._check_open()
        if limit is None:
            limit = self.session_settings.limit
        return await asyncio.to_thread(self._get_items, limit)

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` in one transaction: all of them or none."""
        self._check_open()
        if not items:
            return
        batch = [to_message(item) for item in items]
        await _run_to_end(asyncio.to_thread(self._append, batch))

    async def pop_item(self) -> Any | None:
        """Take the newest item out of the history and return it (None when empty)."""
        self._check_open()
        return await _run_to_end(asyncio.to_thread(self._pop))

    async def clear_session(self) -> None:
        """Take every item out of the history."""
        self._check_open()
        await _run_to_end(asyncio.to_thread(self._clear))

    def close(self) -> None:
        """Refuse further calls; close the store if this HermesSession opened it."""
        if self._closed:
            return
        self._closed = True
        if self._owns_db:
            self.db.close()

    # -- the work, in a worker thread --------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def _get_items(self, limit: int | None) -> list[Any]:
        if limit == 0:
            return []
        tail = limit if limit is not None and limit > 0 else None
        with self.db.core.read() as conn:  # one statement: the rows of one commit
            rows = messages.live_rows(conn, self.store_session_id, tail=tail)
        return items_from_rows(rows)

    def _append(self, batch: list[dict[str, Any]]) -> None:
        sid = self.store_session_id
        if not self._created:
            self._create()
        try:
            self.db.append_messages(sid, batch)
        except SessionNotFound:  # deleted meanwhile (sessions delete, prune): start again
            self._create()
            self.db.append_messages(sid, batch)

    def _create(self) -> None:
        title = None if self.store_session_id == self.session_id else self.session_id[:200]
        self.db.create_session(self.store_session_id, source=self._source, title=title)
        self._created = True

    def _pop(self) -> Any | None:
        def body(conn: Any) -> Any | None:
            rows = messages.load(conn, self.store_session_id, tail=1)
            if not rows:
                return None
            messages.rewind_uids(conn, self.store_session_id, [rows[0][UID_KEY]])
            return from_message(rows[0])
        try:
            return self.db.locked_write(self.store_session_id, body)
        except SessionNotFound:
            return None

    def _clear(self) -> None:
        try:
            self.db.locked_write(self.store_session_id, lambda conn: messages.rewind_all(
                conn, self.store_session_id))
        except SessionNotFound:
            pass


async def _run_to_end(work: Awaitable[T]) -> T:
    """Await ``work`` to its end even when the caller is cancelled meanwhile,
    then raise the cancellation: a write's outcome is known (and, when it
    failed, raised) before the caller learns it was cancelled."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as e:
            cancelled = cancelled or e
    if cancelled is not None:
        task.exception()  # retrieved: a failure after the cancel is not reported as unhandled
        raise cancelled
    return task.result()


__all__ = ["HermesSession", "SOURCE"]
