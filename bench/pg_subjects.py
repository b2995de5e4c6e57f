"""PostgreSQL subjects for bench/postgres.py, and the benchmark's own server.

Every PostgreSQL subject writes to its own database on one server, so
they share its WAL, fsync and CPU like tenants of a real one:

- ``pg-ours``: our store on PostgreSQL (`SessionDB.open(url=...)`);
- ``pg-floor``: raw psycopg INSERTs into our PostgreSQL schema (search
  column and both GIN indexes included): what a row costs the server;
- ``pg-floor-no-search``: the same schema without the search migrations,
  a reference line that shows what synchronous indexing costs a commit;
- ``langgraph-postgres``: LangGraph's `PostgresSaver` checkpointing a
  one-node `MessagesState` graph, each append one ``invoke`` with
  ``durability="sync"`` (as bench/subjects.py's SQLite LangGraph).

The server keeps PostgreSQL's durable defaults (``fsync=on``,
``synchronous_commit=on``): a commit returns once its WAL is flushed, as
SQLite's ``synchronous=FULL``; `relaxed` turns synchronous_commit off per
connection, the counterpart of SQLite's ``NORMAL``. Databases are created with
``LC_CTYPE 'C.UTF-8'`` so pg_trgm extracts trigrams from CJK text.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sessiondb.pg import migrations  # noqa: E402
from tests.helpers.pgserver import PgServer  # noqa: E402

FLOOR_INSERT = ("INSERT INTO messages (session_id, uid, position, role, content_kind, content,"
                " timestamp, meta, fingerprint) VALUES (%s, %s, %s, %s, 'text', %s, %s, %s, 'x')")


class BenchServer(PgServer):
    """A throwaway cluster with durable settings (the test server turns fsync off).
    With ``keep``, the cluster lives in that directory and outlives the run
    (`destroy` only stops it), so a large search corpus is loaded once."""

    def __init__(self, keep: Path | None = None) -> None:
        super().__init__()
        self.keep = keep
        if keep is not None:
            shutil.rmtree(self.root)  # the fresh temp dir PgServer made: unused
            keep.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.root, self.data, self.log = keep, keep / "data", keep / "server.log"
            if self.as_root:
                self._wrap_identity()

    def destroy(self) -> None:
        if self.keep is None:
            return super().destroy()
        self.stop("fast")

    def start(self) -> "BenchServer":
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-U", "hermes", "--auth=trust", "-E",
                      "UTF8", "--locale=C", "--lc-ctype=C.UTF-8", "--no-instructions")
        options = (f"-k {self.root} -c listen_addresses='' -c max_connections=100"
                   " -c shared_buffers=256MB -c max_wal_size=2GB")
        done = self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data),
                         "-l", str(self.log), "-o", options, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"PostgreSQL did not start: {done.stderr.strip()}")
        return self

    def database(self, name: str, *, search: bool = True) -> str:
        """A new database with our schema (without the search migrations if asked)."""
        import psycopg
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 LC_CTYPE 'C.UTF-8'")
        url = self.url(name)
        known = migrations.MIGRATIONS if search else tuple(
            m for m in migrations.MIGRATIONS if "search" not in m.__name__)
        with psycopg.connect(url, autocommit=True) as conn:
            migrations.apply_pending(conn, known)
        return url

    def cpu_by_process(self) -> dict[int, float]:
        """User+system CPU seconds of the postmaster and of every process it
        started, by pid (from /proc)."""
        master = int((self.data / "postmaster.pid").read_text().split()[0])
        tick = os.sysconf("SC_CLK_TCK")
        found = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited meanwhile
            pid = int(stat.parent.name)
            if pid == master or int(fields[1]) == master:
                found[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        return found

    def empty_database(self, name: str) -> str:
        import psycopg
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


def relaxed(url: str) -> str:
    """The same database with ``synchronous_commit=off``: a commit returns
    before its WAL is flushed (the walwriter flushes within 200 ms), the
    closest PostgreSQL gets to SQLite's WAL with ``synchronous=NORMAL``
    (which loses nothing when the process dies, only on power loss; a
    PostgreSQL crash may lose the last 200 ms of commits)."""
    return url + "&options=-csynchronous_commit%3Doff"


class PgFloor:
    """Raw inserts on one connection, the caller's batch in one transaction."""

    name = "pg-floor"
    batches = True

    def __init__(self, url: str, key: str, pool: Any = None) -> None:
        import psycopg
        self.pool = pool
        self.conn = None if pool else psycopg.connect(url)
        self.sid, self.position = key, 0
        with self._conn() as conn:
            conn.execute("INSERT INTO sessions (id, source, started_at, updated_at) VALUES"
                         " (%s, 'bench', %s, %s) ON CONFLICT DO NOTHING",
                         (key, time.time(), time.time()))

    def _conn(self) -> Any:
        if self.pool is not None:
            return self.pool.connection()
        return _Reuse(self.conn)

    def append(self, batch: list[dict[str, Any]]) -> None:
        rows = []
        for m in batch:
            self.position += 1
            extra = {k: v for k, v in m.items() if k not in ("role", "content")}
            rows.append((self.sid, os.urandom(16).hex(), self.position, m["role"], m["content"],
                         time.time(), json.dumps(extra)))
        with self._conn() as conn, conn.cursor() as cur:
            cur.executemany(FLOOR_INSERT, rows)

    def count(self) -> int:
        with self._conn() as conn:
            return conn.execute("SELECT count(*) FROM messages WHERE session_id = %s",
                                (self.sid,)).fetchone()[0]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.pool is not None:
            self.pool.close()


class _Reuse:
    """One connection as a context manager that commits (like a pool's)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def __enter__(self) -> Any:
        return self.conn

    def __exit__(self, kind: Any, *rest: Any) -> None:
        if kind is None:
            self.conn.commit()
        else:
            self.conn.rollback()


class PgOurs:
    """Our store on PostgreSQL, through the public store API."""

    name = "pg-ours"
    batches = True

    def __init__(self, url: str, key: str, pool: Any = None) -> None:
        from sessiondb import SessionDB
        self.db = SessionDB.open(url=url)
        self.sid = key
        try:
            self.db.get_session(key)
        except Exception:
            self.db.create_session(key, source="bench")

    def append(self, batch: list[dict[str, Any]]) -> None:
        self.db.append_messages(self.sid, batch)

    def count(self) -> int:  # the session's counter: a whole load stops at load_limit
        return self.db.get_session(self.sid).message_count

    def close(self) -> None:
        self.db.close()


def pg_ours_status() -> str:
    """"ok", or why our PostgreSQL store cannot be benchmarked in this tree."""
    import inspect

    from sessiondb import SessionDB
    if "url" not in inspect.signature(SessionDB.open).parameters:
        return "unavailable: SessionDB.open(url=...) is not in this tree yet"
    return "ok"


class LangGraphPostgres:
    """LangGraph's PostgresSaver; the state is re-serialized every checkpoint."""

    name = "langgraph-postgres"
    batches = True

    def __init__(self, url: str, key: str, pool: Any = None) -> None:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.graph import END, START, MessagesState, StateGraph
        from psycopg.rows import dict_row
        self.conn = psycopg.connect(url, autocommit=True, prepare_threshold=0,
                                    row_factory=dict_row)
        saver = PostgresSaver(self.conn)
        saver.setup()
        graph = StateGraph(MessagesState)
        graph.add_node("noop", lambda state: {"messages": []})
        graph.add_edge(START, "noop")
        graph.add_edge("noop", END)
        self.app = graph.compile(checkpointer=saver)
        self.config = {"configurable": {"thread_id": key}}

    def append(self, batch: list[dict[str, Any]]) -> None:
        self.app.invoke({"messages": batch}, self.config, durability="sync")

    def count(self) -> int:
        return len(self.app.get_state(self.config).values.get("messages", []))

    def close(self) -> None:
        self.conn.close()


def langgraph_status() -> str:
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
    except ImportError as e:
        return f"unavailable: {e.name} not installed (pip install '.[bench]')"
    return "ok"
