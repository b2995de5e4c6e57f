"""`HermesSaver`: a LangGraph checkpointer whose threads are sessions of the store.

``graph.compile(checkpointer=HermesSaver(db))`` keeps every checkpoint,
channel value and pending write in the store's own tables
(sessiondb/rows/checkpoints.py), serialized with the saver's ``serde``,
each row naming the thread's session: ``hermes sessions list`` shows the
thread, ``sessions delete``/``prune`` take its checkpoints with it, and
recover, export of the store file, and the PostgreSQL backend carry them
like every other row. A channel value is stored once per version, not once
per checkpoint, so an unchanged value costs nothing in the next one.

When the root graph's state has a ``messages`` channel of LangChain
messages, each new message is also appended to the session's transcript
(once, keyed by the message id, in order) in the same transaction as its
checkpoint, so ``hermes sessions search/show/export`` and the agent's
session search find LangGraph conversations beside ours
(``mirror_messages=False`` turns this off).

The async methods run the sync ones in a worker thread. Needs the
``langgraph`` extra (``pip install 'hermes-state[langgraph]'``).
"""
from __future__ import annotations

import asyncio
import builtins
import os
import random
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, cast

from ..base import InvalidMessage
from ..face import StoreFace
from ..rows import checkpoints as rows, encode, sessions
from .naming import open_store, store_session_id

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (WRITES_IDX_MAP, BaseCheckpointSaver, ChannelVersions,
                                           Checkpoint, CheckpointMetadata, CheckpointTuple,
                                           get_checkpoint_id, get_checkpoint_metadata)
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("HermesSaver needs LangGraph: pip install 'hermes-state[langgraph]'") from e

#: The ``source`` of a session HermesSaver creates for a thread.
SOURCE = "langgraph"
#: LangChain message types and the transcript role each becomes.
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool",
          "function": "tool", "developer": "developer", "chat": "user"}


class HermesSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on a hermes-state store (see the module doc).

    ``db`` is a `SessionDB` (or the PostgreSQL backend's handle), a path to
    a store file, or None for the default home's store; one this saver
    opened is closed by `close`."""

    def __init__(self, db: StoreFace | str | os.PathLike[str] | None = None, *,
                 serde: SerializerProtocol | None = None, mirror_messages: bool = True) -> None:
        super().__init__(serde=serde)
        self.db, self._owns_db = open_store(db)
        self.mirror_messages = mirror_messages
        self._mirrored: dict[str, tuple[int, Any]] = {}  # session -> (count, last message id)

    def close(self) -> None:
        if self._owns_db:
            self.db.close()

    def __enter__(self) -> HermesSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        sid = store_session_id(conf["thread_id"], "lg")
        ns = conf.get("checkpoint_ns", "")
        with self.db.core.snapshot() as conn:
            row = rows.get_checkpoint(conn, sid, ns, get_checkpoint_id(config))
            return None if row is None else self._tuple(conn, row)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None,
             limit: int | None = None) -> Iterator[CheckpointTuple]:
        conf = config["configurable"] if config else {}
        thread = conf.get("thread_id")
        with self.db.core.snapshot() as conn:
            found = rows.list_checkpoints(
                conn, session_id=store_session_id(thread, "lg") if thread else None,
                ns=conf.get("checkpoint_ns"), checkpoint_id=get_checkpoint_id(config)
                if config else None, before=get_checkpoint_id(before) if before else None)
            out: builtins.list[CheckpointTuple] = []
            for row in found:
                if limit is not None and len(out) >= limit:
                    break
                metadata = self.serde.loads_typed((row.metadata_type, row.metadata))
                if filter and not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
                out.append(self._tuple(conn, row, metadata))
        yield from out

    def _tuple(self, conn: Any, row: rows.CheckpointRow,
               metadata: CheckpointMetadata | None = None) -> CheckpointTuple:
        checkpoint = self.serde.loads_typed((row.type, row.checkpoint))
        values = {channel: self.serde.loads_typed((kind, value or b""))
                  for channel, kind, value in rows.blobs_for(
                      conn, row.session_id, row.checkpoint_ns, checkpoint["channel_versions"])
                  if kind != "empty"}
        writes = rows.writes_for(conn, row.session_id, row.checkpoint_ns, row.checkpoint_id)
        return CheckpointTuple(
            config=_config(row.thread, row.checkpoint_ns, row.checkpoint_id),
            checkpoint=cast(Checkpoint, {**checkpoint, "channel_values": values}),
            metadata=metadata if metadata is not None else self.serde.loads_typed(
                (row.metadata_type, row.metadata)),
            parent_config=_config(row.thread, row.checkpoint_ns, row.parent_checkpoint_id)
            if row.parent_checkpoint_id else None,
            pending_writes=[(w.task_id, w.channel,
                             self.serde.loads_typed((w.type, w.value or b""))) for w in writes])

    # -- writing -----------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        conf = config["configurable"]
        thread, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        sid = store_session_id(thread, "lg")
        saved = checkpoint.copy()
        values: dict[str, Any] = saved.pop("channel_values")  # type: ignore[misc]
        blobs = [(channel, str(version),
                  *(self.serde.dumps_typed(values[channel]) if channel in values
                    else ("empty", b""))) for channel, version in new_versions.items()]
        meta = get_checkpoint_metadata(config, metadata)
        kind, blob = self.serde.dumps_typed(saved)
        meta_kind, meta_blob = self.serde.dumps_typed(meta)
        row = rows.CheckpointRow(sid, None if sid == thread else thread, ns, checkpoint["id"],
                                 conf.get("checkpoint_id"), kind, blob, meta_kind, meta_blob)
        mirror = ns == "" and self.mirror_messages and "messages" in new_versions
        with self.db.atomic() as conn:
            self._ensure_session(conn, sid, thread)
            rows.put_blobs(conn, sid, ns, blobs)
            rows.put_checkpoint(conn, row, _run_id(meta), self.db.now(),
                                checkpoint["channel_versions"])
            if mirror:
                self._mirror(conn, sid, values.get("messages"))
        return _config(thread, ns, checkpoint["id"])

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        conf = config["configurable"]
        thread, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        sid = store_session_id(thread, "lg")
        stored = [rows.WriteRow(task_id, task_path, WRITES_IDX_MAP.get(channel, idx), channel,
                                *self.serde.dumps_typed(value))
                  for idx, (channel, value) in enumerate(writes)]
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        with self.db.atomic() as conn:
            self._ensure_session(conn, sid, thread)
            rows.put_writes(conn, sid, ns, conf["checkpoint_id"], stored, replace)

    def _ensure_session(self, conn: Any, sid: str, thread: str) -> None:
        if not sessions.exists(conn, sid):
            sessions.create(conn, sid, source=SOURCE, model=None,
                            title=None if sid == thread else thread[:200],
                            parent_session_id=None, now=self.db.now())
            self._mirrored.pop(sid, None)

    def _mirror(self, conn: Any, sid: str, messages: Any) -> None:
        """Append the messages of the state not yet in the transcript (by id)."""
        if not isinstance(messages, list) or not messages:
            return
        known, last_id = self._mirrored.get(sid, (0, None))
        start = known if 0 < known <= len(messages) and \
            getattr(messages[known - 1], "id", None) == last_id else 0
        encoded = [e for e in (_encoded(m) for m in messages[start:]) if e is not None]
        if encoded:
            self.db.insert_encoded(conn, sid, encoded)
        self._mirrored[sid] = (len(messages), getattr(messages[-1], "id", None))

    # -- deleting and copying ------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints and writes (its session and
        transcript stay; ``hermes sessions delete`` removes those)."""
        sid = store_session_id(thread_id, "lg")
        with self.db.atomic() as conn:
            rows.delete_thread(conn, sid)
        self._mirrored.pop(sid, None)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) these runs made."""
        if not run_ids:
            return
        with self.db.atomic() as conn:
            found = rows.runs_checkpoints(conn, list(run_ids))
            for sid, ns, cid in found:
                rows.delete_checkpoints(conn, sid, ns, [cid])
            for sid in {f[0] for f in found}:
                rows.drop_unused_values(conn, sid)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, value and write of one thread to another."""
        source = store_session_id(source_thread_id, "lg")
        target = store_session_id(target_thread_id, "lg")
        with self.db.atomic() as conn:
            if not sessions.exists(conn, source):
                return
            self._ensure_session(conn, target, target_thread_id)
            rows.copy_thread(conn, source, target,
                             None if target == target_thread_id else target_thread_id,
                             self.db.now())

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep the newest checkpoint of each namespace (and
        the values and writes it needs); ``delete``: delete them all."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}")
        for thread in thread_ids:
            sid = store_session_id(thread, "lg")
            with self.db.atomic() as conn:
                rows.prune_thread(conn, sid, 1 if strategy == "keep_latest" else 0)

    # -- versions, and the async face -------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``<counter>.<random>``, as LangGraph's own savers make them: ordered
        by the counter, unique across forks."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *,
                    filter: dict[str, Any] | None = None, before: RunnableConfig | None = None,
                    limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(lambda: [*self.list(config, filter=filter, before=before,
                                                            limit=limit)])
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def _config(thread: str, ns: str, checkpoint_id: str | None) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ns,
                             "checkpoint_id": checkpoint_id}}


def _run_id(metadata: Mapping[str, Any]) -> str | None:
    run_id = metadata.get("run_id")
    return None if run_id is None else str(run_id)


def _encoded(message: Any) -> Any:
    """A LangChain message as an encoded transcript row (uid: its id), or
    None for what is not a message or cannot be stored."""
    role = _ROLES.get(getattr(message, "type", None) or "")
    if role is None:
        return None
    row: dict[str, Any] = {"role": role, "content": message.content}
    tool_calls = getattr(message, "tool_calls", None)
    if tool_calls:
        row["tool_calls"] = [dict(call) for call in tool_calls]
    if getattr(message, "tool_call_id", None):
        row["tool_call_id"] = message.tool_call_id
    uid = str(message.id).replace("-", "") if getattr(message, "id", None) else None
    try:
        return encode(row, uid=uid)
    except InvalidMessage:
        return encode({"role": role, "content": str(getattr(message, "text", "") or "")},
                      uid=uid)


__all__ = ["HermesSaver", "SOURCE"]
