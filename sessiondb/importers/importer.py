"""Import a stream of session and message records into a store, idempotently.

Records come from a reader (`read_export_jsonl` for our own JSONL export,
`llm_import.read_llm_logs` for llm's logs.db). Every import first runs a
read-only pass that validates the whole stream and counts what it would
add (that pass alone is the dry run); only a stream that checks out is then
applied. Messages go through the store's `insert_encoded` path, so a uid
the session already holds is skipped: re-importing a file adds nothing.

A session missing from the store is created with the exported row's
values (start/update/end times, token usage), its message and tool-call
counters derived from the rows actually inserted, never taken from the
file; a session that exists keeps its row and only gains the messages it
lacks (its counters move with them). A LangGraph thread's checkpoints,
channel values and pending writes (the export's ``graph_*`` records) go
into their session after its messages; a row the session already holds
under its table's key is kept. Messages are written in chunks of
``CHUNK``, and the writing pass commits every ``BATCH_ROWS`` rows (one
transaction spans many short sessions; each session's writes are savepoints
in it), so a large import never holds the write lock for long, memory holds
one chunk, and an interrupted import can simply be re-run.

The bulk path. Into a session this import created, a chunk goes in as one
``executemany`` (positions kept in memory and checked against the store,
known uids dropped by one query, once per chunk), with the session's
counters moved once per chunk, not per message. The import writes
canonical rows only: the search index is the off-commit indexer's (rows
above its watermark are searched exactly through the tail scan as soon as
their batch commits), and after the last batch the import drives the
indexer in short batches of its own (see import_index.py). Into a store
with no messages, builder processes index the rows beside it while they
are written and the result is copied in when nobody else wrote meanwhile
(fts_build.py, see import_index.py); otherwise the batches.
"""
from __future__ import annotations

import base64
import binascii
import itertools
import json
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, TYPE_CHECKING

import apsw

from ..base import (Cause, InvalidInput, InvalidMessage, MessageState, StorageError,
                    validate_session_id)
from ..maintenance import EXPORT_FORMAT, EXPORT_VERSION
from ..rows import (EncodedMessage, MAX_COLUMN_INT, Session, TIME_RANGE_TEXT, checkpoints, encode,
                    key_for, messages as rows, sessions as session_rows, time_in_range, uid_text,
                    usage)
from . import import_index
from .import_spill import Spill, SpillWriter, encoded_from

if TYPE_CHECKING:  # for type hints only
    from ..face import StoreFace

CHUNK = 500
#: rows per transaction of the writing pass (~20-40 ms of writing); its chunks
#: (one executemany each) stay CHUNK long, so memory holds one chunk
BATCH_ROWS = 2_000
STATES = frozenset(s.value for s in MessageState)  # plain: named in error text


class ImportFileError(StorageError):
    """An import file is malformed; ``line`` says where (1-based), if known."""

    cause = Cause.INVALID_INPUT

    def __init__(self, message: str, *, line: int | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.line = line


@dataclass(frozen=True)
class SessionIn:
    """A session to import. Counters of ``None`` are derived from the rows."""

    row: dict[str, Any]
    line: int | None = None
    #: the session's usage ledger rows (checked: `usage.check_ledger_rows`)
    usage: tuple[dict[str, Any], ...] = ()

    @property
    def id(self) -> str:
        return self.row["id"]


class MessageIn(NamedTuple):
    """A message to import (a NamedTuple: one is built per message, twice, and
    a frozen dataclass costs a few microseconds more each time)."""

    session_id: str
    uid: str
    timestamp: float
    state: str  # a MessageState's plain value: records are marshalled to the spill
    compaction_id: str | None
    kind: str
    message: dict[str, Any] | None
    line: int | None = None
    #: the checked row (from the spill); then ``message`` is None
    encoded: EncodedMessage | None = None

    def row(self) -> EncodedMessage:
        if self.encoded is not None:
            return self.encoded
        return _at(encode(self.message, uid=self.uid), self.timestamp)


def _at(enc: EncodedMessage, timestamp: float) -> EncodedMessage:
    """``enc`` with the record's own time (``_replace`` builds a dict a call)."""
    return EncodedMessage._make((*enc[:8], timestamp, *enc[9:]))


class GraphIn(NamedTuple):
    """A LangGraph row to import: ``values`` in `checkpoints.EXPORT_COLUMNS`
    order of ``table``, bytes decoded."""

    table: str
    session_id: str
    values: tuple[Any, ...]
    line: int | None = None


@dataclass(frozen=True)
class EndIn:
    sessions: int
    messages: int
    line: int | None = None
    #: rows per graph table the file says it holds (None: not said, older files)
    graph_rows: dict[str, int] | None = None


Record = SessionIn | MessageIn | GraphIn | EndIn


@dataclass
class ImportResult:
    """What an import added (or, for a dry run, would add)."""

    source_format: str
    path: str
    dry_run: bool
    sessions_in_file: int = 0
    sessions_created: int = 0
    sessions_existing: int = 0
    messages_in_file: int = 0
    messages_added: int = 0
    messages_skipped: int = 0
    #: the search index when the import returned (see import_index.py):
    #: "caught_up", "pending" (``index_backlog`` rows left to the indexer; search
    #: is exact meanwhile) or "stale" (untrusted before the import: reindex)
    search_index: str = "caught_up"
    index_backlog: int = 0
    #: how the import brought the index to date: "batches" (the store's indexer,
    #: short transactions) or "parallel" (built beside an empty store's index
    #: while the rows were written, then copied in: import_index.ParallelIndex)
    index_build: str = "batches"
    usage_rows_in_file: int = 0
    usage_rows_added: int = 0
    #: LangGraph rows (checkpoints, channel values, pending writes) per table
    graph_rows_in_file: dict[str, int] = field(default_factory=dict)
    graph_rows_added: dict[str, int] = field(default_factory=dict)
    #: Rows per table of a foreign source, and what was not carried over (why).
    tables: dict[str, int] = field(default_factory=dict)
    not_carried: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# -- validation of our own JSONL -------------------------------------------------

_TEXT = ("parent_session_id", "model", "title", "end_reason")
_TIMES = ("started_at", "updated_at")
_COUNTERS = ("message_count", "tool_call_count", "input_tokens", "output_tokens",
             "cache_read_tokens", "cache_write_tokens")


def _bad(line: int | None, text: str) -> ImportFileError:
    where = f"line {line}: " if line is not None else ""
    return ImportFileError(where + text, line=line)


def _is_time(v: Any) -> bool:
    return time_in_range(v)


def check_session_row(row: Any, line: int | None) -> dict[str, Any]:
    """A session row as exported, each field of the right type; fields other
    than id, source and the start/update times may be absent (null)."""
    if not isinstance(row, dict):
        raise _bad(line, "session record must carry a 'session' object")
    unknown = sorted(set(row) - set(Session.__dataclass_fields__))
    if unknown:
        raise _bad(line, f"session has unknown fields: {', '.join(unknown)}")
    missing = [k for k in ("id", "source", *_TIMES) if k not in row]
    if missing:
        raise _bad(line, f"session lacks {', '.join(missing)}")
    row = {k: row.get(k) for k in Session.__dataclass_fields__}
    try:
        validate_session_id(row["id"])
    except StorageError as e:
        raise _bad(line, str(e)) from None
    if not isinstance(row["source"], str) or not row["source"]:
        raise _bad(line, "session 'source' must be a non-empty string")
    for key in _TEXT:
        if row[key] is not None and not isinstance(row[key], str):
            raise _bad(line, f"session {key!r} must be a string or null")
    for key in _TIMES:
        if not _is_time(row[key]):
            raise _bad(line, f"session {key!r} must be {TIME_RANGE_TEXT}")
    if row["ended_at"] is not None and not _is_time(row["ended_at"]):
        raise _bad(line, f"session 'ended_at' must be {TIME_RANGE_TEXT} or null")
    for key in _COUNTERS:
        v = row[key]
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)
                              or not 0 <= v <= MAX_COLUMN_INT):
            raise _bad(line, f"session {key!r} must be a non-negative 64-bit integer")
    return row


def _message_in(rec: dict[str, Any], line: int) -> MessageIn:
    try:
        return MessageIn(rec["session_id"], rec["uid"], rec["timestamp"], rec["state"],
                         rec["compaction_id"], rec["kind"], rec["message"], line)
    except KeyError as e:
        raise _bad(line, f"message record has no {e.args[0]!r}") from None


def check_message(m: MessageIn) -> EncodedMessage:
    """Field types of a message record, and the message itself via the codec;
    returns the encoded row (with the record's timestamp)."""
    if not isinstance(m.uid, str) or not m.uid:
        raise _bad(m.line, "message 'uid' must be a non-empty string")
    if not _is_time(m.timestamp):
        raise _bad(m.line, f"message 'timestamp' must be {TIME_RANGE_TEXT}")
    if m.state not in STATES:
        raise _bad(m.line, f"message 'state' must be one of {sorted(STATES)}")
    if m.compaction_id is not None and not isinstance(m.compaction_id, str):
        raise _bad(m.line, "message 'compaction_id' must be a string or null")
    if not isinstance(m.kind, str) or not m.kind:
        raise _bad(m.line, "message 'kind' must be a non-empty string")
    if m.encoded is not None:  # encoded by a reader ahead of the import (log_prescan.py)
        return m.encoded
    try:
        return _at(encode(m.message, uid=m.uid), m.timestamp)
    except InvalidMessage as e:
        raise _bad(m.line, str(e)) from None


def _graph_in(rec: dict[str, Any], line: int) -> GraphIn:
    """A graph record: its session and its row, each column checked."""
    table = checkpoints.RECORD_TYPES[rec["type"]]
    sid, row = rec.get("session_id"), rec.get("row")
    if not isinstance(sid, str) or not isinstance(row, dict):
        raise _bad(line, f"{rec['type']} record needs a 'session_id' and a 'row' object")
    columns = checkpoints.EXPORT_COLUMNS[table]
    odd = sorted(set(row) ^ set(columns))
    if odd:
        raise _bad(line, f"{rec['type']} row has unknown or missing columns: {', '.join(odd)}")
    return GraphIn(table, sid, tuple(_graph_value(c, row[c], line) for c in columns), line)


def _graph_value(column: str, value: Any, line: int) -> Any:
    """One column of a graph row as the store takes it (bytes from base64)."""
    if value is None:
        if column in checkpoints.NULLABLE_COLUMNS:
            return None
        raise _bad(line, f"graph row column {column!r} must not be null")
    if column == "created_at":
        if not _is_time(value):
            raise _bad(line, f"graph row 'created_at' must be {TIME_RANGE_TEXT}")
        return value
    if column == "idx":
        if isinstance(value, bool) or not isinstance(value, int) \
                or not -MAX_COLUMN_INT - 1 <= value <= MAX_COLUMN_INT:
            raise _bad(line, "graph row 'idx' must be a 64-bit integer")
        return value
    if not isinstance(value, str):
        raise _bad(line, f"graph row column {column!r} must be a string")
    try:
        value.encode("utf-8")
        if column in checkpoints.BYTES_COLUMNS:
            return base64.b64decode(value, validate=True)
        if column == "channel_versions" and not isinstance(json.loads(value), dict):
            raise ValueError("not an object")
    except (UnicodeError, binascii.Error, ValueError):
        raise _bad(line, f"graph row column {column!r} is not valid "
                   f"{'base64' if column in checkpoints.BYTES_COLUMNS else 'text'}") from None
    return value


def _end_in(rec: dict[str, Any], line: int) -> EndIn:
    n, m, graph = rec.get("sessions"), rec.get("messages"), rec.get("graph_rows")
    if not isinstance(n, int) or not isinstance(m, int):
        raise _bad(line, "end record needs integer 'sessions' and 'messages'")
    if graph is not None and (not isinstance(graph, dict) or set(graph) - set(checkpoints.TABLES)
                              or not all(type(v) is int for v in graph.values())):
        raise _bad(line, "end record 'graph_rows' must map graph tables to integers")
    return EndIn(n, m, line, graph)
def encoded_ahead(m: MessageIn) -> tuple[Any, ...] | None:
    """The row `check_message` would make of ``m``, as a plain tuple (for a
    reader that encodes in a worker process, ahead of the import); None when
    it refuses ``m``: the import then checks it again and names the line."""
    try:
        return tuple(check_message(m))
    except ImportFileError:
        return None


def _parse_line(raw: str, line: int) -> dict[str, Any]:
    try:
        rec = json.loads(raw)
    except RecursionError:
        raise _bad(line, "not readable: JSON nested too deeply") from None
    except ValueError as e:  # JSONDecodeError has .msg; the int-digits limit does not
        raise _bad(line, f"not valid JSON ({getattr(e, 'msg', None) or e})") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
        raise _bad(line, "each line must be a JSON object with a 'type'")
    return rec


def _check_header(rec: dict[str, Any]) -> None:
    if rec["type"] != "header" or rec.get("format") != EXPORT_FORMAT:
        raise _bad(1, "not a hermes JSONL export (the first line must be its header)")
    if rec.get("version") != EXPORT_VERSION:
        raise _bad(1, f"export version {rec.get('version')!r} is not supported "
                      f"(this hermes reads version {EXPORT_VERSION})")


def read_export_jsonl(path: str | Path) -> Iterator[Record]:
    """Records of a hermes JSONL export, validated one line at a time."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise ImportFileError(f"cannot read {path}: {e.strerror or e}", path=str(path)) from e
    with f:
        try:
            yield from _records(f)
        except UnicodeDecodeError as e:
            raise ImportFileError(f"{path} is not UTF-8 text ({e.reason})") from None


def _usage_rows(rows: Any, line: int) -> tuple[dict[str, Any], ...]:
    """A session record's ledger rows (absent in older exports: none)."""
    try:
        return usage.check_ledger_rows(rows)
    except InvalidInput as e:
        raise _bad(line, str(e)) from None


def _json_export(raw: str) -> bool:
    """Whether a first line that is not a JSON record opens an export in the
    json format (one document over many lines, for reading, not importing)."""
    head = "".join(raw.split())
    return head.startswith("{") and '"format":"hermes-export"' in head


def _records(lines: Iterable[str]) -> Iterator[Record]:
    for line, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        if line == 1 and _json_export(raw):
            try:
                json.loads(raw)
            except ValueError:
                raise _bad(1, "this is an export in the json format (export --format json), "
                              "which import does not read; import reads the jsonl format: "
                              "export again with --format jsonl (the default)") from None
        rec = _parse_line(raw, line)
        if line == 1:
            _check_header(rec)
            continue
        kind = rec["type"]
        if kind == "session":
            yield SessionIn(check_session_row(rec.get("session"), line), line,
                            _usage_rows(rec.get("usage", []), line))
        elif kind == "message":
            yield _message_in(rec, line)
        elif kind in checkpoints.RECORD_TYPES:
            yield _graph_in(rec, line)
        elif kind == "end":
            yield _end_in(rec, line)
        else:
            raise _bad(line, f"unknown record type {kind!r}")


# -- applying (or planning) a record stream -----------------------------------

def _session_exists(conn: apsw.Connection, session_id: str) -> bool:
    return conn.execute("SELECT 1 FROM sessions WHERE id = ?",
                        (session_id,)).fetchone() is not None


Progress = Callable[[int], None]


@dataclass
class _Run:
    """State of one pass over a record stream."""

    db: StoreFace
    result: ImportResult
    progress: Progress | None = None
    spill: SpillWriter | None = None
    session: SessionIn | None = None
    created: bool = False
    ended: bool = False
    chunk: list[MessageIn] = field(default_factory=list)
    orphan_parents: dict[str, str] = field(default_factory=dict)
    next_position: int = 1  # of the session this import created (bulk path)
    #: the writing pass's open transaction: it spans sessions (each session's
    #: own writes are savepoints inside it) and commits every BATCH_ROWS rows,
    #: so a store of short sessions is not written at three commits a session
    batch: ExitStack | None = None
    batch_rows: int = 0

    def feed(self, rec: Record) -> None:
        if not self.result.dry_run and self.batch is None:
            self.batch = ExitStack()
            self.batch.enter_context(self.db.atomic())
        self._feed(rec)
        if self.batch_rows >= BATCH_ROWS:
            self.commit()

    def commit(self) -> None:
        """End the writing pass's transaction (none open: nothing to do)."""
        batch, self.batch, self.batch_rows = self.batch, None, 0
        if batch is not None:
            batch.close()

    def abort(self, exc: BaseException) -> None:
        """Roll the open transaction back (the rows of this batch, not earlier ones)."""
        batch, self.batch = self.batch, None
        if batch is not None:
            batch.__exit__(type(exc), exc, exc.__traceback__)

    def _feed(self, rec: Record) -> None:
        if self.ended:
            raise _bad(rec.line, "records after the end record")
        if isinstance(rec, SessionIn):
            self.finish_session()
            self.start_session(rec)
            if self.spill is not None:
                self.spill(("s", rec.row, rec.line, rec.usage))
        elif isinstance(rec, MessageIn):
            if self.session is None or rec.session_id != self.session.id:
                raise _bad(rec.line, "message does not follow its session's record")
            if self.result.dry_run:  # the planning pass validates (and spills the rows)
                enc = check_message(rec)
                if self.spill is not None:
                    self.spill(("m", rec.session_id, rec.uid, rec.timestamp, rec.state,
                                rec.compaction_id, rec.kind, tuple(enc), rec.line))
            self.result.messages_in_file += 1
            self.chunk.append(rec)
            if len(self.chunk) >= CHUNK:
                self.flush()
        elif isinstance(rec, GraphIn):
            self.graph_row(rec)
        else:
            self.finish_session()
            self.ended = True
            if self.spill is not None:
                self.spill(("e", rec.sessions, rec.messages, rec.line, rec.graph_rows))
            self.check_end(rec)

    def check_end(self, rec: EndIn) -> None:
        r = self.result
        if (rec.sessions, rec.messages) != (r.sessions_in_file, r.messages_in_file):
            raise _bad(rec.line, f"end record counts {rec.sessions} sessions and "
                       f"{rec.messages} messages, the file holds {r.sessions_in_file} "
                       f"and {r.messages_in_file}")
        said = {t: n for t, n in (rec.graph_rows or {}).items() if n}
        if rec.graph_rows is not None and said != r.graph_rows_in_file:
            raise _bad(rec.line, f"end record counts graph rows {said}, the file holds "
                       f"{r.graph_rows_in_file}")

    def graph_row(self, rec: GraphIn) -> None:
        """A checkpoint, channel value or pending write of the current session."""
        if self.session is None or rec.session_id != self.session.id:
            raise _bad(rec.line, "graph row does not follow its session's record")
        self.flush()  # the session's messages first, as in the file
        if self.spill is not None:
            self.spill(("g", rec.table, rec.session_id, rec.values, rec.line))
        r, dry = self.result, self.result.dry_run
        with (self.db.core.read() if dry else self.db.atomic()) as conn:
            added = checkpoints.insert_exported(conn, rec.table, rec.session_id, rec.values,
                                                dry_run=dry)
        r.graph_rows_in_file[rec.table] = r.graph_rows_in_file.get(rec.table, 0) + 1
        r.graph_rows_added[rec.table] = r.graph_rows_added.get(rec.table, 0) + added
        self.batch_rows += 1

    def start_session(self, rec: SessionIn) -> None:
        self.result.sessions_in_file += 1
        self.result.usage_rows_in_file += len(rec.usage)
        dry, now = self.result.dry_run, self.db.now()
        # Ledger rows go in with the session (or fill the keys an existing one
        # lacks) in the same transaction: a re-run adds none twice.
        with (self.db.core.read() if dry else self.db.atomic()) as conn:
            created = not _session_exists(conn, rec.id)
            if created and not dry:
                self._insert_session(conn, rec.row)
            added = usage.import_rows(conn, rec.id, rec.usage, now, dry_run=dry)
        self.result.usage_rows_added += added  # counted once the transaction committed
        self.session, self.created = rec, created
        self.next_position = 1
        if created:
            self.result.sessions_created += 1
        else:
            self.result.sessions_existing += 1

    def _insert_session(self, conn: apsw.Connection, row: dict[str, Any]) -> None:
        parent = row["parent_session_id"]
        if parent is not None and not _session_exists(conn, parent):
            self.orphan_parents[row["id"]] = parent  # linked once the parent arrives
            parent = None
        conn.execute(
            "INSERT INTO sessions(id, parent_session_id, source, model, title, started_at,"
            " updated_at, ended_at, end_reason, input_tokens, output_tokens,"
            " cache_read_tokens, cache_write_tokens) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (row["id"], parent, row["source"], row["model"], row["title"], row["started_at"],
             row["updated_at"], row["ended_at"], row["end_reason"],
             row["input_tokens"] or 0, row["output_tokens"] or 0,
             row["cache_read_tokens"] or 0, row["cache_write_tokens"] or 0))

    def finish_session(self) -> None:
        self.flush()
        rec, self.session = self.session, None
        if rec is None or not self.created or self.result.dry_run:
            return
        row = rec.row
        with self.db.atomic() as conn:
            # Appends moved updated_at; restore the exported value. The message
            # and tool-call counters are what the rows just inserted made them:
            # a file's own counters are never trusted (message_count: 999999 for
            # a session with no messages was once taken as given).
            conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?",
                         (row["updated_at"], row["id"]))

    def flush(self) -> None:
        chunk, self.chunk = self.chunk, []
        if not chunk:
            return
        assert self.session is not None
        if self.result.dry_run:
            added = len(self._fresh(self.db, chunk)) if not self.created else \
                len({m.uid for m in chunk})
        elif self.created:
            with self.db.atomic() as conn:
                added = self._write_bulk(conn, chunk)
        else:
            with self.db.atomic() as conn:
                added = self._write(conn, chunk)
        self.result.messages_added += added
        self.result.messages_skipped += len(chunk) - added
        self.batch_rows += len(chunk)
        if self.progress is not None:
            self.progress(len(chunk))

    @staticmethod
    def _fresh(db: StoreFace, chunk: list[MessageIn]) -> list[MessageIn]:
        """Messages of the chunk whose uid the session does not hold (first of duplicates)."""
        sid = chunk[0].session_id
        uids = [m.uid for m in chunk]
        with db.core.read() as conn:
            known = {uid_text(r[0]) for r in conn.execute(
                f"SELECT uid FROM messages WHERE session_id = ? AND uid IN "
                f"({','.join('?' * len(uids))})", (sid, *(key_for(conn, u) for u in uids)))}
        fresh = []
        for m in chunk:
            if m.uid not in known:
                known.add(m.uid)
                fresh.append(m)
        return fresh

    def _write(self, conn: apsw.Connection, chunk: list[MessageIn]) -> int:
        fresh = self._fresh(self.db, chunk)  # inside the write transaction: current
        sid = chunk[0].session_id
        for kind, group in itertools.groupby(fresh, key=lambda m: m.kind):
            batch = list(group)
            encoded = [m.row() for m in batch]
            ids = self.db.insert_encoded(conn, sid, encoded, kind=kind)
            for m, rid in zip(batch, ids):
                if m.state != MessageState.ACTIVE or m.compaction_id is not None:
                    rows.set_state(conn, [rid], m.state, m.compaction_id)
        return len(fresh)

    def _write_bulk(self, conn: apsw.Connection, chunk: list[MessageIn]) -> int:
        """One chunk into a session this import created: one executemany, the
        counters once. Falls back to the row path when the session moved on
        since the last chunk (someone else appended to it)."""
        sid = chunk[0].session_id
        # The store's own seek: on a server it also locks the session's row, so
        # no other host appends between it and the insert.
        if self.db.next_position(conn, sid) != self.next_position:
            return self._write(conn, chunk)
        batch, calls = [], 0
        position = self.next_position
        for m in self._fresh(self.db, chunk):  # one indexed query a chunk: uids are new
            enc = m.row()
            batch.append((enc, position, m.kind, m.state, m.compaction_id))
            position += 1
            calls += enc.tool_call_total
        rows.insert_many(conn, sid, batch)
        session_rows.add_message_counts(conn, sid, self.db.now(), len(batch), calls)
        self.next_position = position  # set last: a re-run of the body starts from the old one
        return len(batch)

    def link_parents(self) -> None:
        if self.result.dry_run or not self.orphan_parents:
            return
        with self.db.atomic() as conn:
            for child, parent in self.orphan_parents.items():
                conn.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ? AND"
                             " EXISTS (SELECT 1 FROM sessions WHERE id = ?)",
                             (parent, child, parent))


def _run(db: StoreFace, records: Iterable[Record], result: ImportResult,
         progress: Progress | None, require_end: bool,
         spill: SpillWriter | None = None) -> ImportResult:
    run = _Run(db, result, progress, spill)
    try:
        for rec in records:
            run.feed(rec)
        if not run.ended:
            if require_end:
                raise ImportFileError("the file ends without its end record (truncated?); "
                                      "nothing was imported")
            run.finish_session()
        run.link_parents()
    except BaseException as e:
        run.abort(e)
        raise
    run.commit()
    return result


#: called with the planned count (and "indexing" for the index's catch-up)
ProgressFor = Callable[..., Progress | None]


def import_records(db: StoreFace, open_records: Callable[[], Iterable[Record]], *,
                   source_format: str, path: str, dry_run: bool = False,
                   require_end: bool = True,
                   progress_for: ProgressFor | None = None) -> ImportResult:
    """Validate the whole stream (read-only), then, unless ``dry_run``, apply it.

    ``open_records`` is called once: the checking pass spills each checked
    record (see import_spill.py) and the writing pass reads them back.
    ``progress_for`` gets the planned message count before the writing pass
    and returns a callback that is told how many messages each chunk handled;
    after the rows, it is called again with the index backlog and
    ``"indexing"`` for the catch-up (see import_index.py).
    """
    if dry_run:
        planned = _run(db, open_records(), ImportResult(source_format, path, True), None,
                       require_end)
        planned.search_index, planned.index_backlog = import_index.state(db)
        return planned
    with ExitStack() as scratch_files:
        with Spill(db.path.parent) as spill:
            plan = _run(db, open_records(), ImportResult(source_format, path, True), None,
                        require_end, spill.write)
            # Checked: an empty store's index is built beside it as the rows commit.
            parallel = import_index.ParallelIndex.start_if_empty(db, plan.messages_in_file)
            if parallel is not None:
                scratch_files.enter_context(parallel)
            progress = progress_for(plan.messages_in_file) if progress_for is not None else None
            result = ImportResult(source_format, path, False)
            _run(db, _unspill(spill.read()), result, progress, require_end)
        _catch_up(db, result, progress_for, parallel)
    return result


def _catch_up(db: StoreFace, result: ImportResult, progress_for: ProgressFor | None,
              parallel: import_index.ParallelIndex | None = None) -> None:
    """The rows are committed: install the index built beside the store
    (import_index.ParallelIndex), or else bring it to date in short batches."""
    total = import_index.backlog_rows(db)
    progress = progress_for(total, "indexing") if progress_for and total else None
    if parallel is not None and parallel.install():
        result.search_index, result.index_backlog = "caught_up", 0
        result.index_build = "parallel"
        if progress is not None:
            progress(total)
        return
    result.search_index, result.index_backlog = import_index.catch_up(db, progress)


def _unspill(spilled: Iterable[tuple[Any, ...]]) -> Iterator[Record]:
    """The checked records back from the spill (see import_spill.py)."""
    for rec in spilled:
        if rec[0] == "m":
            yield MessageIn(rec[1], rec[2], rec[3], rec[4], rec[5], rec[6], None, rec[8],
                            encoded_from(rec[7]))
        elif rec[0] == "s":
            yield SessionIn(rec[1], rec[2], tuple(rec[3]))
        elif rec[0] == "g":
            yield GraphIn(rec[1], rec[2], tuple(rec[3]), rec[4])
        else:
            yield EndIn(rec[1], rec[2], rec[3], rec[4])


def import_export_file(db: StoreFace, path: str | Path, *, dry_run: bool = False,
                       progress_for: ProgressFor | None = None) -> ImportResult:
    """Import a hermes JSONL export (see `export`), idempotent by message uid."""
    return import_records(db, lambda: read_export_jsonl(path), source_format="hermes-jsonl",
                          path=str(path), dry_run=dry_run, progress_for=progress_for)
