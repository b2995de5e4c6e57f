"""The things the benchmarks time, behind one small interface.

A subject opens one file for one conversation (``key``), appends a batch of
messages in one commit, loads the conversation (or its last N messages) and
closes. ``ours`` is `SessionDB`; ``floor`` is raw apsw into our schema; the
peers are what a user might pick instead: the OpenAI Agents SDK's
`SQLiteSession`, LangGraph's `SqliteSaver` under a trivial messages graph, and
`llm` logging responses of its offline `echo` model (the `llm-echo` plugin).

Peers run on the stdlib `sqlite3` as they ship; the benchmark only sets
`journal_mode=WAL` where a peer does not (llm) and the `synchronous` level
under test, so every subject is compared at the same durability setting.
A peer that cannot be imported is reported as unavailable with the reason.
"""
from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import json
import sqlite3
from pathlib import Path
from typing import Any

from common import Floor, floor_load

from sessiondb import SessionDB
from sessiondb.index import search_index
from sessiondb.base.errors import SessionTooLong


class Subject(abc.ABC):
    """The interface every benchmarked store implements."""

    name = "?"
    per_call = 1        # messages one append call must carry (llm: prompt + reply)
    batches = True      # can it write a batch of messages in one commit?
    tail_native = True  # does it have a "last N messages" read?

    @abc.abstractmethod
    def open(self, path: Path, sync: str, key: str) -> None:
        """Open (creating) the subject's store at ``path`` with ``synchronous=sync``."""

    @abc.abstractmethod
    def append(self, batch: list[dict[str, Any]]) -> None:
        """Store ``batch`` in one commit (or ``per_call`` messages per call)."""

    @abc.abstractmethod
    def load(self, tail: int | None = None) -> int:
        """Read the session back (the last ``tail`` messages); returns how many."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close every connection the subject opened."""


class Ours(Subject):
    name = "ours"

    def open(self, path: Path, sync: str, key: str) -> None:
        self.db = SessionDB(path)
        if sync != "NORMAL":  # the store's policy is NORMAL; FULL is set for the comparison
            self.db._writer.execute(f"PRAGMA synchronous={sync}")
        self.sid = key
        try:
            self.db.get_session(key)
        except Exception:
            self.db.create_session(key, source="bench")

    def append(self, batch: list[dict[str, Any]]) -> None:
        self.db.append_messages(self.sid, batch)

    def settle(self) -> None:
        """The search index caught up (the runner times this too: the
        indexer's work is the store's work, even off the commit)."""
        self.db.catch_up_index()

    def load(self, tail: int | None = None) -> int:
        try:
            return len(self.db.get_messages(self.sid, tail=tail))
        except SessionTooLong:  # B2's writers pass the whole-load limit (and archive nothing)
            return self.db.count_messages([self.sid])

    def close(self) -> None:
        self.db.close()


class FloorSubject(Subject):
    name = "floor"

    def open(self, path: Path, sync: str, key: str) -> None:
        self.floor = Floor(path, sync, key)

    def append(self, batch: list[dict[str, Any]]) -> None:
        self.floor.append(batch)

    def load(self, tail: int | None = None) -> int:
        return len(floor_load(self.floor.conn, self.floor.sid, tail))

    def close(self) -> None:
        self.floor.close()


class FloorNoIndex(FloorSubject):
    """The floor with every search trigger dropped (the change log's too): a
    reference line in B1, not a goal. The store's commits no longer write
    the index, so "floor" itself is close to this line now."""

    name = "floor-no-index"

    def open(self, path: Path, sync: str, key: str) -> None:
        super().open(path, sync, key)
        search_index.drop_triggers(self.floor.conn)


class FloorSyncIndex(FloorSubject):
    """Raw inserts plus the sync triggers the store had until m006: both
    FTS5 indexes written inside every commit. The floor of the old design,
    kept as a reference line."""

    name = "floor-sync-index"

    def open(self, path: Path, sync: str, key: str) -> None:
        super().open(path, sync, key)
        put = "".join(f"INSERT INTO {t}(rowid, text) VALUES (new.id, "
                      f"{search_index.text_expr('new')});\n" for t in search_index.TEXT_INDEXES)
        self.floor.conn.execute("CREATE TRIGGER IF NOT EXISTS bench_sync_ai AFTER INSERT ON"
                                f" messages BEGIN\n{put}END")


class OpenAIAgents(Subject):
    """`agents.SQLiteSession`; its calls are async and run in a worker thread."""

    name = "openai-agents"

    def open(self, path: Path, sync: str, key: str) -> None:
        from agents import SQLiteSession
        self.runner = asyncio.Runner()
        # One worker thread, so its thread-local connection is the one we tune.
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.runner.get_loop().set_default_executor(pool)
        self.session = SQLiteSession(key, str(path))

        async def tune() -> None:
            await asyncio.to_thread(
                lambda: self.session._get_connection().execute(f"PRAGMA synchronous={sync}"))
        self.runner.run(tune())

    def append(self, batch: list[dict[str, Any]]) -> None:
        self.runner.run(self.session.add_items(batch))

    def load(self, tail: int | None = None) -> int:
        return len(self.runner.run(self.session.get_items(limit=tail)))

    def close(self) -> None:
        self.session.close()
        self.runner.close()


class LangGraph(Subject):
    """A one-node `MessagesState` graph checkpointed by `SqliteSaver`.

    Each append is one `invoke` with ``durability="sync"`` (the checkpoint is
    on disk when invoke returns). There is no tail read: the state is loaded
    whole and sliced.
    """

    name = "langgraph"
    tail_native = False

    def open(self, path: Path, sync: str, key: str) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, MessagesState, StateGraph
        self.conn = sqlite3.connect(str(path), check_same_thread=False, timeout=5.0)
        self.conn.execute(f"PRAGMA synchronous={sync}")
        graph = StateGraph(MessagesState)
        graph.add_node("noop", lambda state: {"messages": []})
        graph.add_edge(START, "noop")
        graph.add_edge("noop", END)
        self.app = graph.compile(checkpointer=SqliteSaver(self.conn))
        self.config = {"configurable": {"thread_id": key}}

    def append(self, batch: list[dict[str, Any]]) -> None:
        self.app.invoke({"messages": batch}, self.config, durability="sync")

    def load(self, tail: int | None = None) -> int:
        msgs = self.app.get_state(self.config).values.get("messages", [])
        return len(msgs if tail is None else msgs[-tail:])

    def close(self) -> None:
        self.conn.close()


class LLM(Subject):
    """`llm` with the `echo` model: each append is one prompt and its logged
    response (two messages, one `log_to_db` transaction). The prompt text is
    a small JSON carrying the user text and the reply echo should give, so
    llm stores the reply's text twice (prompt and response). A resume is
    `llm.cli.load_conversation`, what ``llm -c`` runs; it has no tail read."""

    name = "llm"
    per_call = 2
    batches = False
    tail_native = False

    def open(self, path: Path, sync: str, key: str) -> None:
        import llm
        import sqlite_utils
        from llm.migrations import migrate
        self.path = path
        self.db = sqlite_utils.Database(str(path))
        self.db.conn.execute("PRAGMA journal_mode=WAL")  # llm's default is a rollback journal
        self.db.conn.execute(f"PRAGMA synchronous={sync}")
        migrate(self.db)
        self.model = llm.get_model("echo")
        self.conversation = self.model.conversation()
        self.conversation.id = key  # a fixed id, so a new process can resume it

    def append(self, batch: list[dict[str, Any]]) -> None:
        for user, reply in zip(batch[::2], batch[1::2]):
            # echo's "raw" mode answers with the given text; plain echo would
            # answer with the whole history each time (quadratic, not llm's fault)
            prompt = json.dumps({"prompt": user["content"], "raw": reply["content"]})
            response = self.conversation.prompt(prompt)
            response.text()
            response.log_to_db(self.db)

    def load(self, tail: int | None = None) -> int:
        from llm.cli import load_conversation
        conv = load_conversation(self.conversation.id, database=str(self.path))
        msgs = list(getattr(conv, "loaded_messages", None) or [])
        return len(msgs if tail is None else msgs[-tail:])

    def close(self) -> None:
        self.db.close()


PEERS: tuple[type[Subject], ...] = (OpenAIAgents, LangGraph, LLM)
_PROBES = {"openai-agents": ("agents",), "langgraph": ("langgraph.checkpoint.sqlite",
                                                      "langgraph.graph"),
           "llm": ("llm", "llm_echo")}


def peer_status() -> dict[str, str]:
    """name -> "ok" or "unavailable: <reason>" for every peer."""
    import importlib
    status = {}
    for cls in PEERS:
        try:
            for module in _PROBES[cls.name]:
                importlib.import_module(module)
            if cls is LLM:
                import llm
                llm.get_model("echo")
            status[cls.name] = "ok"
        except Exception as e:  # any failure to import is a reason to report
            status[cls.name] = f"unavailable: {type(e).__name__}: {e}".splitlines()[0]
    return status


_PRELOAD = {"llm": ("llm.cli", "llm.migrations", "sqlite_utils")}


def preload(name: str) -> None:
    """Import a subject's modules up front, so timings do not include imports."""
    import importlib
    for module in _PROBES.get(name, ()) + _PRELOAD.get(name, ()):
        importlib.import_module(module)


def by_name(name: str) -> type[Subject]:
    return {c.name: c for c in (Ours, FloorSubject, FloorNoIndex, *PEERS)}[name]
