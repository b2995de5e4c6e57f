"""Copying a store between SQLite and PostgreSQL (`hermes sessions migrate`).

Streaming: rows move in chunks of ``CHUNK`` (keyset on the source's row
order), so memory stays bounded whatever the store's size. Idempotent:
every row is inserted with its natural key (sessions by id, messages by
``(session_id, uid)``, compactions by id, usage rows by their primary key)
and a row already there is left alone, so a rerun after an interruption,
even a ``kill -9`` mid-chunk, ends with exactly one copy of each message.
Resumable: each message chunk commits together with a checkpoint (the last
source row id copied, in the target's ``state_meta`` under a key naming the
source), so a rerun continues after the last committed chunk.

Into PostgreSQL, messages go by COPY (bulk.py: the same contract, chunk
by chunk); into SQLite, and with ``PgSide(bulk=False)``, by INSERT statements.

Message row ids are the target's own (a PostgreSQL store may already hold
other hosts' rows); rows keep their order, uid, position and state, and a
compaction's ``summary_id`` is mapped through the summary row's uid.

The source is only read: a SQLite source is opened read-only and must be
one of our stores (`identify`); nothing is written to it.
"""
from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

import apsw

from ..base import ForeignStore, InvalidInput, StoreIOError, StoreNotFound
from ..rows import (fingerprint_key, fingerprint_text, kind_key, kind_text, logical_meta, role_key,
                    role_text, stored_meta, uid_key, uid_text)
from ..sqlitefile import EMPTY, OURS, identify
from ..store import SessionDB
from . import bulk
from .errors import connect_timeout, redact

CHUNK = 1_000
#: Messages per chunk: fewer, since a message may be large (tool output is
#: often tens of KB); the chunk is what a migrate holds in memory.
MESSAGE_CHUNK = 250
#: Copied in this order (foreign keys); ``messages`` is streamed by row id.
TABLES = ("sessions", "session_flags", "messages", "compactions", "usage_ledger",
          "graph_checkpoints", "graph_blobs", "graph_writes")
KEYS = {"sessions": ("id",), "session_flags": ("session_id",),
        "messages": ("session_id", "uid"), "compactions": ("id",),
        "usage_ledger": ("session_id", "task", "model", "provider"),
        "graph_checkpoints": ("session_id", "checkpoint_ns", "checkpoint_id"),
        "graph_blobs": ("session_id", "checkpoint_ns", "channel", "version"),
        "graph_writes": ("session_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx")}
#: Columns that are each store's own: row ids, generated columns.
OWN_COLUMNS = {"messages": {"id", "search_tsv"}, "compactions": {"seq"},
               "graph_checkpoints": {"id"}, "graph_blobs": {"id"}, "graph_writes": {"id"}}
COUNTED = ("sessions", "messages", "compactions", "usage_ledger", "graph_checkpoints",
           "graph_blobs", "graph_writes")
#: Rows per chunk of tables whose values may be large (a graph's channel
#: values hold its whole state), instead of `CHUNK`.
SMALLER_CHUNKS = {"graph_checkpoints": 100, "graph_blobs": 50, "graph_writes": 100}


class Side(Protocol):
    """One end of a transfer: a SQLite file or a PostgreSQL database."""

    label: str

    def columns(self, table: str) -> list[str]: ...
    def select(self, sql: str, args: tuple = ()) -> Iterator[tuple]: ...
    def write(self, statements: list[tuple[str, list[tuple]]]) -> None: ...
    def one(self, sql: str, args: tuple = ()) -> Any: ...
    def any_of(self, column: str, ids: list[Any]) -> tuple[str, tuple]: ...


@dataclass
class TransferResult:
    """What a migrate copied, and the verification counts of both ends."""

    source: str
    target: str
    copied: dict[str, int] = field(default_factory=dict)
    source_counts: dict[str, int] = field(default_factory=dict)
    target_counts: dict[str, int] = field(default_factory=dict)
    resumed_after: int = 0

    @property
    def verified(self) -> bool:
        return self.source_counts == self.target_counts

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "copied": self.copied,
                "source_counts": self.source_counts, "target_counts": self.target_counts,
                "resumed_after": self.resumed_after, "verified": self.verified}


class SqliteSide:
    """A SQLite store of ours: read-only as a source; as a target, written
    through a `SessionDB` (its migrations, its one transaction primitive)."""

    def __init__(self, path: str, *, writable: bool = False) -> None:
        if not writable and not os.path.exists(path):
            raise StoreNotFound(f"no store at {path}", path=path)
        who = identify(path)
        if who.kind != OURS and not (writable and who.kind == EMPTY):
            raise ForeignStore(f"{path} is not a hermes-state store ({who.label})", path=path,
                               kind=who.kind, label=who.label, applies=who.applies)
        self.db: SessionDB | None = None
        if writable:
            self.db = SessionDB(path)
            self.conn = self.db.core.writer
        else:
            self.conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
            self.conn.execute("PRAGMA busy_timeout = 5000")
        self.label = os.path.realpath(path)

    def columns(self, table: str) -> list[str]:
        return [r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")]

    def select(self, sql: str, args: tuple = ()) -> Iterator[tuple]:
        yield from self.conn.execute(sql.replace("%s", "?"), args)

    def one(self, sql: str, args: tuple = ()) -> Any:
        row = self.conn.execute(sql.replace("%s", "?"), args).fetchone()
        return None if row is None else row[0]

    def write(self, statements: list[tuple[str, list[tuple]]]) -> None:
        assert self.db is not None, "a source is never written"
        with self.db.atomic() as conn:
            for sql, rows in statements:
                conn.executemany(sql.replace("%s", "?"), rows)

    def any_of(self, column: str, ids: list[Any]) -> tuple[str, tuple]:
        return f"{column} IN ({', '.join('?' * len(ids))})", tuple(ids)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
        else:
            self.conn.close()


class PgSide:
    """A PostgreSQL database holding the current schema. As a target,
    messages go in by COPY (`bulk`) unless ``bulk`` is off (the
    statement-per-row path every target has)."""

    def __init__(self, conn: Any, label: str, *, bulk: bool = True) -> None:
        self.conn = conn
        self.label = label
        self.bulk = bulk

    def columns(self, table: str) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
            " AND table_schema = current_schema() ORDER BY ordinal_position", (table,))]

    def select(self, sql: str, args: tuple = ()) -> Iterator[tuple]:
        """Rows streamed by a server-side cursor (bounded memory), in a
        read transaction of their own."""
        with self.conn.transaction(), self.conn.cursor(name="hermes_transfer") as cur:
            cur.itersize = CHUNK
            yield from cur.execute(sql, args)

    def one(self, sql: str, args: tuple = ()) -> Any:
        row = self.conn.execute(sql, args).fetchone()
        return None if row is None else row[0]

    def write(self, statements: list[tuple[str, list[tuple]]]) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur:
            for sql, rows in statements:
                if rows:
                    cur.executemany(sql, rows)

    def any_of(self, column: str, ids: list[Any]) -> tuple[str, tuple]:
        return f"{column} = ANY(%s)", (ids,)


def _shared(src: Side, dst: Side, table: str) -> list[str]:
    own = OWN_COLUMNS.get(table, set())
    theirs = set(dst.columns(table))
    return [c for c in src.columns(table) if c in theirs and c not in own]


def _insert_sql(table: str, cols: list[str]) -> str:
    return (f"INSERT INTO {table} ({', '.join(cols)}) VALUES"
            f" ({', '.join(['%s'] * len(cols))}) ON CONFLICT DO NOTHING")


def _checkpoint_key(src: Side) -> str:
    digest = hashlib.sha256(src.label.encode()).hexdigest()[:16]
    return f"migrated_from:{digest}"


def _copy_small(src: Side, dst: Side, table: str, result: TransferResult) -> None:
    """A table without message-sized rows, in chunks, keyed by its natural key."""
    cols = _shared(src, dst, table)
    if table == "compactions":
        return _copy_compactions(src, dst, cols, result)
    # A parent may sort after its child: sessions go in unlinked, then linked.
    picked = ["NULL" if table == "sessions" and c == "parent_session_id" else c for c in cols]
    sql, batch, n = _insert_sql(table, cols), [], 0
    size = SMALLER_CHUNKS.get(table, CHUNK)
    for row in src.select(f"SELECT {', '.join(picked)} FROM {table} ORDER BY"
                          f" {', '.join(KEYS[table])}"):
        batch.append(tuple(row))
        if len(batch) >= size:
            dst.write([(sql, batch)])
            n, batch = n + len(batch), []
    dst.write([(sql, batch)])
    result.copied[table] = n + len(batch)
    if table == "sessions":
        _link_parents(src, dst)


def _link_parents(src: Side, dst: Side) -> None:
    """Sessions go in without their parent link (see `_copy_small`'s order)
    and get it once every session is there."""
    sql = ("UPDATE sessions SET parent_session_id = %s WHERE id = %s"
           " AND parent_session_id IS NULL")
    rows = [(p, i) for i, p in src.select("SELECT id, parent_session_id FROM sessions"
                                          " WHERE parent_session_id IS NOT NULL ORDER BY id")]
    for i in range(0, len(rows), CHUNK):
        dst.write([(sql, rows[i:i + CHUNK])])


def _copy_compactions(src: Side, dst: Side, cols: list[str], result: TransferResult) -> None:
    """Compactions name their summary row by id: mapped through its uid."""
    picked = ", ".join(f"c.{c}" if c != "summary_id" else "t.uid" for c in cols)
    rows = list(src.select(f"SELECT {picked} FROM compactions AS c JOIN messages AS t"
                           " ON t.id = c.summary_id ORDER BY c.session_id, c.id"))
    at = cols.index("summary_id")
    sid_at = cols.index("session_id")
    mapped = []
    for row in rows:
        uid = uid_text(row[at])  # (a SQLite side stores hex uids as bytes: m010)
        target = dst.one("SELECT id FROM messages WHERE session_id = %s AND uid = %s",
                         (row[sid_at], uid_key(uid) if isinstance(dst, SqliteSide) else uid))
        mapped.append((*row[:at], target, *row[at + 1:]))
    dst.write([(_insert_sql("compactions", cols), mapped)])
    result.copied["compactions"] = len(mapped)


def _copy_messages(src: Side, dst: Side, result: TransferResult,
                   progress: Callable[[int], None] | None) -> None:
    """Messages in source row order, each chunk committed with its checkpoint."""
    cols = _shared(src, dst, "messages")
    key = _checkpoint_key(src)
    after = int(dst.one("SELECT value FROM state_meta WHERE key = %s", (key,)) or 0)
    result.resumed_after = after
    if progress is not None and after:
        progress(int(src.one("SELECT count(*) FROM messages WHERE id <= %s", (after,))))
    if isinstance(dst, PgSide) and dst.bulk:
        result.copied["messages"] = _copy_messages_bulk(src, dst, cols, key, after, progress)
        return
    insert, n = _insert_sql("messages", cols), 0
    save = ("INSERT INTO state_meta (key, value) VALUES (%s, %s)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value")
    while True:
        rows = list(src.select(f"SELECT id, {', '.join(cols)} FROM messages WHERE id > %s"
                               f" ORDER BY id LIMIT {MESSAGE_CHUNK}", (after,)))
        if not rows:
            break
        after = rows[-1][0]
        out = _row_forms(src, dst, cols, [tuple(r[1:]) for r in rows])
        dst.write([(insert, out), (save, [(key, str(after))])])
        n += len(rows)
        if progress is not None:
            progress(len(rows))
    result.copied["messages"] = n


def _row_forms(src: Side, dst: Side, cols: list[str], rows: list[tuple]) -> list[tuple]:
    """Message rows from the source's stored forms into the target's: a
    SQLite store keeps uid and fingerprint as bytes and no finish_reason
    copy in meta (m010), role, kind and an empty meta coded (m012,
    docs/row-format.md); PostgreSQL keeps the text."""
    from_sqlite, to_sqlite = isinstance(src, SqliteSide), isinstance(dst, SqliteSide)
    if from_sqlite == to_sqlite or not {"uid", "fingerprint", "meta"} <= set(cols):
        return rows
    u, f, m = cols.index("uid"), cols.index("fingerprint"), cols.index("meta")
    reason = cols.index("finish_reason") if "finish_reason" in cols else None
    coded = [(cols.index(c), text, key) for c, text, key in (
        ("role", role_text, role_key), ("kind", kind_text, kind_key)) if c in cols]
    out = []
    for row in rows:
        r = list(row)
        why = r[reason] if reason is not None else None
        if from_sqlite:
            r[u], r[f], r[m] = uid_text(r[u]), fingerprint_text(r[f]), logical_meta(r[m], why)
        else:
            r[u], r[f], r[m] = uid_key(r[u]), fingerprint_key(r[f]), stored_meta(r[m], why)
        for at, text, key in coded:
            r[at] = text(r[at]) if from_sqlite else key(r[at])
        out.append(tuple(r))
    return out


def _copy_messages_bulk(src: Side, dst: PgSide, cols: list[str], key: str, after: int,
                        progress: Callable[[int], None] | None) -> int:
    """The COPY path (bulk.py)."""
    select = (f"SELECT id, {', '.join(cols)} FROM messages WHERE id > %s"
              f" ORDER BY id LIMIT {bulk.COPY_CHUNK}")

    def chunk(last: int) -> list[tuple]:  # (source id, *cols), the target's row forms
        rows = list(src.select(select, (last,)))
        forms = _row_forms(src, dst, cols, [tuple(r[1:]) for r in rows])
        return [(r[0], *form) for r, form in zip(rows, forms)]
    return bulk.copy_messages(chunk, dst.conn, cols, key, after, progress)


def count(side: Side, table: str, sessions: Side | None = None) -> int:
    """Rows of ``table``; with ``sessions``, only those of the sessions the
    ``sessions`` side holds (a PostgreSQL target may hold other stores' too)."""
    if sessions is None:
        return int(side.one(f"SELECT count(*) FROM {table}"))
    column = "id" if table == "sessions" else "session_id"
    total, ids = 0, [r[0] for r in sessions.select("SELECT id FROM sessions ORDER BY id")]
    for i in range(0, len(ids), CHUNK):
        where, args = side.any_of(column, ids[i:i + CHUNK])
        total += int(side.one(f"SELECT count(*) FROM {table} WHERE {where}", args))
    return total


def transfer(src: Side, dst: Side, *, progress: Callable[[int], None] | None = None,
             ) -> TransferResult:
    """Copy every session of ``src`` into ``dst``, then count both ends."""
    if src.label == dst.label:
        raise InvalidInput("the source and the target are the same store")
    result = TransferResult(src.label, dst.label)
    for table in TABLES:
        if table == "messages":
            _copy_messages(src, dst, result, progress)
        else:
            _copy_small(src, dst, table, result)
    for table in COUNTED:
        result.source_counts[table] = count(src, table)
        result.target_counts[table] = count(dst, table, src)
    return result


def url_label(url: str) -> str:
    """A PostgreSQL URL without its password, for reports and terminals."""
    from psycopg.conninfo import conninfo_to_dict
    try:
        parts = conninfo_to_dict(url)
    except Exception as e:  # psycopg.ProgrammingError on a malformed URL
        raise InvalidInput(f"not a PostgreSQL URL: {type(e).__name__}") from None
    host = parts.get("host") or "localhost"
    return f"postgresql://{parts.get('user') or ''}@{host}/{parts.get('dbname') or ''}"


def connect(url: str) -> Any:
    """An autocommit connection to ``url`` with the current schema applied
    (under the migration advisory lock); typed errors for a bad URL or an
    unreachable server."""
    import psycopg

    from . import migrations
    from .adapter import register_numeric_loader, register_text_codec
    if not url.startswith(("postgresql://", "postgres://")):
        raise InvalidInput("a store URL starts with postgresql://")
    label = url_label(url)
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=connect_timeout(url))
    except psycopg.OperationalError as e:
        # The server's URL as the path: explained as a server, not a failing disk.
        raise StoreIOError(f"cannot connect to {label}: {_first_line(e)}",
                           path=redact(url)) from None
    # Text as the store writes it (NUL escaped, adapter.py), sums as ints.
    register_text_codec(conn)
    register_numeric_loader(conn)
    migrations.apply_pending(conn)
    return conn


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or ["connection failed"])[0]


@contextmanager
def ends(sqlite_path: str, url: str, *, to_pg: bool) -> Iterator[tuple[Side, Side]]:
    """The (source, target) pair of a migrate: the SQLite store and the
    PostgreSQL database, in the direction asked; both closed afterwards."""
    import psycopg
    conn = connect(url)
    pg = PgSide(conn, url_label(url))
    try:
        lite = SqliteSide(sqlite_path, writable=not to_pg)
    except BaseException:
        conn.close()
        raise
    try:
        yield (lite, pg) if to_pg else (pg, lite)
    except psycopg.Error as e:  # the server's words only, never row data
        raise StoreIOError(f"PostgreSQL refused the copy ({e.sqlstate or 'no SQLSTATE'}): "
                           f"{e.diag.message_primary or type(e).__name__}; nothing committed "
                           "is lost, run the command again") from None
    finally:
        lite.close()
        conn.close()
