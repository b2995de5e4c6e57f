"""The bulk path into a fresh store of ours: loading settings, and the work
done once at the end instead of once a row.

`start` puts a connection to a new, private file in loading mode: no
fsync (the file is a temporary name, removed on any failure; a crash
leaves only that), foreign keys off (rows
of a table may arrive before the rows they point at), the secondary
indexes and the change-log triggers dropped. `finish` ties the rows
together and builds what was deferred, each step one transaction or a
batch of them: parent links to lost sessions dropped, a labelled
placeholder session for each session id that only messages name, rows
whose parent is still missing moved to the quarantine, sessions
recounted, the secondary indexes created, the search index copied from
the source (`hstate_recovery.output.search_reuse`) or built again, the file
checkpointed and synced.

Built again, on two cores: the word index by a builder process
(`sessiondb.index.fts_build`, the import's too, through recovery_api),
started as soon as the messages are final (after the linking step, so it
reads while the secondary indexes are created; for a damaged source it
follows the lanes as they write); then the builder's shadow tables are
copied in as rows, the term table is filled from the word index's
vocabulary and the watermark set at the top. If the builder fails in any
way the word index is built here, in rowid batches: the same index either
way, and verification checks it.
"""
from __future__ import annotations

import json
import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import apsw

from sessiondb.recovery_api import (FTS_TABLE, ParallelBuild, TEXT_INDEXES, TEXT_VIEW,
                                    attach_triggers, compact_legacy_rows, cores, drop_triggers,
                                    fill_terms, one, set_watermark)

from ..schema import quote
from . import search_reuse
from .write_stats import PLACEHOLDER_SOURCE, PLACEHOLDER_TITLE, WriteStats

FTS_BATCH = 10000  # messages indexed per transaction
# FTS5 while the index is filled in bulk, and its defaults (put back after)
LOAD_SETTINGS = (("automerge", 0), ("crisismerge", 2000), ("hashsize", 32 << 20))
NORMAL_SETTINGS = (("automerge", 4), ("crisismerge", 16), ("hashsize", 1 << 20))
CACHE_KIB = 8192  # page cache while loading: interior pages of every b-tree stay hot
BUILDER_SECONDS = 3600.0  # never wait forever on a stuck builder
log = logging.getLogger(__name__)
Quarantine = Callable[[str, Any, "str | None", str, Any], None]
Progress = Callable[[str, int, int], None]


@dataclass
class Deferred:
    """What `start` took out of the schema for `finish` to put back."""

    indexes: list[tuple[str, str]] = field(default_factory=list)  # (name, CREATE INDEX)


def start(conn: apsw.Connection) -> Deferred:
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    deferred = Deferred()
    with conn:
        deferred.indexes = [(n, s) for n, s in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")]
        for name, _sql in deferred.indexes:
            conn.execute(f"DROP INDEX {quote(name)}")
        drop_triggers(conn)
    return deferred


def finish(conn: apsw.Connection, stats: WriteStats, deferred: Deferred,
           quarantine: Quarantine, progress: Progress | None = None, *,
           search_from: Path | None = None, not_copied: str | None = None,
           follower: ParallelBuild | None = None) -> None:
    """Tie the rows together, build what `start` deferred, and fill the
    search index: taken over from ``search_from`` (the source's copy) when
    the caller found that safe (`hstate_recovery.output.search_reuse`), else rebuilt
    (``not_copied`` says why it was not taken over), the word index by
    ``follower`` when one has been following the rows (`follow_rows`)."""
    def tick(what: str, done: int, total: int) -> None:
        if progress is not None:
            progress(what, done, total)

    clock = _Clock(stats.timings)
    with conn:
        tick("linking sessions", 0, 0)
        _parent_links(conn, stats)
        _placeholders(conn, stats)
        _orphans_to_quarantine(conn, stats, quarantine)
        _recount_sessions(conn)
        # rows carved from a file before m010 hold the old forms; the new
        # store is compact throughout (a hex uid must not be in both forms)
        compact_legacy_rows(conn, keep_twins=True)
    clock.lap("link_s")
    # the messages are final now: a rebuild's word-index builder can start reading
    builder = None
    if search_from is None:
        builder = follower if follower is not None else _start_builder(conn)
    try:
        with conn:
            for i, (_name, sql) in enumerate(deferred.indexes, 1):
                conn.execute(sql)
                tick("building indexes", i, len(deferred.indexes))
            attach_triggers(conn)
        clock.lap("indexes_s")
        _search(conn, stats, tick, search_from, not_copied, builder)
        if builder is not None and builder is follower:
            stats.search_index["followed"] = stats.search_index.get("processes") == 2
    finally:
        if builder is not None:
            builder.close()
    clock.lap("search_s")
    stats.per_session = dict(conn.execute(  # type: ignore[arg-type]  # (id, n)
        "SELECT session_id, count(*) FROM messages GROUP BY session_id"))
    conn.execute("PRAGMA synchronous=FULL")  # the checkpoint syncs the file, then the WAL goes
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    clock.lap("checkpoint_s")


def _search(conn: apsw.Connection, stats: WriteStats, tick: Progress,
            search_from: Path | None, not_copied: str | None,
            builder: ParallelBuild | None) -> None:
    """The search index taken over from ``search_from``, or else rebuilt."""
    if search_from is not None:
        not_copied = search_reuse.take_over(conn, search_from, stats, tick)
        if not_copied is None:
            stats.search_index = {"method": "copied", "reason": None}
            return
    with ExitStack() as stack:
        if builder is None:  # (the caller closes its own)
            builder = _start_builder(conn)
            if builder is not None:
                stack.enter_context(builder)
        stats.search_index = {"method": "rebuilt", "reason": not_copied,
                              "processes": _rebuild(conn, tick, stats.timings, builder)}


def follow_rows(path: Path) -> ParallelBuild | None:
    """A word-index builder that follows the output's rows while the lanes
    write them (the source is damaged, so its index will not be taken
    over): it tokenizes on the second core meanwhile instead of after the
    linking. It keeps what it indexed, so rows written below its position
    are added at the copy and a row changed after it read it sends the
    index back to an in-place build (`ParallelBuild.correct`). None on one
    core, or when no process can be started."""
    if cores() < 2:
        return None
    try:
        return ParallelBuild(path, (FTS_TABLE,), follow=True, track=True)
    except OSError:
        return None


def _start_builder(conn: apsw.Connection) -> ParallelBuild | None:
    """A word-index builder on the output's committed messages (None on one
    core, or when no process can be started: the index is built here)."""
    if cores() < 2:
        return None
    try:
        return ParallelBuild(Path(conn.filename), (FTS_TABLE,), follow=False)
    except OSError:
        return None


def _rebuild(conn: apsw.Connection, tick: Progress, timings: dict[str, float],
             builder: ParallelBuild | None) -> int:
    """The word index from the messages, by ``builder`` (copied in) or here,
    then the term table from its vocabulary and the watermark at the top;
    returns how many processes built it. ``timings`` gets the seconds of the
    wait for the builder (and of the term table)."""
    if builder is None:
        fill_search(conn, tick)
        return 1
    started = time.monotonic()
    # the messages are final (linking is done, and nothing here writes them
    # again): a following builder is told so now, and its rows are checked
    # against them once it is done
    tick("building the word index (second process)", 0, 0)
    top, stale = (_finish_and_check(builder) if builder.track
                  else (builder.finish(BUILDER_SECONDS), None))
    timings["search_words_s"] = round(time.monotonic() - started, 3)
    (last,) = one(conn.execute("SELECT coalesce(max(id), 0) FROM messages"))
    if top is not None and top == last and _take(conn, builder, stale):
        started = time.monotonic()
        with conn:
            fill_terms(conn)
            set_watermark(conn, last)
        timings["search_terms_s"] = round(time.monotonic() - started, 3)
        timings["search_builder_cpu_s"] = builder.cpu_seconds()
        return 2
    log.warning("the word-index builder's index was not used (built here instead)")
    fill_search(conn, tick)
    return 1


def _finish_and_check(builder: ParallelBuild) -> tuple[int | None, int | None]:
    """A tracking builder's `finish`, then its `stale_rows` (None when the
    builder failed, or the count could not be made: `_take` counts then)."""
    top = builder.finish(BUILDER_SECONDS)
    if top is None:
        return None, None
    try:
        return top, builder.stale_rows()
    except apsw.Error:
        log.info("could not check the builder's rows beside the word index", exc_info=True)
        return top, None


def _take(conn: apsw.Connection, builder: ParallelBuild, stale: int | None = None) -> bool:
    """The builder's word index copied in, in one transaction (the caller
    then fills the term table and sets the watermark), on a connection of
    its own: FTS5 caches an index's structure per connection, and ``conn``
    may have read the word index since its DDL
    (a take-over that failed empties it on ``conn``). ``stale``: a tracking
    builder's changed rows, counted already (`_finish_and_check`)."""
    try:
        fresh = apsw.Connection(conn.filename, flags=apsw.SQLITE_OPEN_READWRITE
                                | apsw.SQLITE_OPEN_URI, vfs=conn.vfsname("main"))
    except apsw.Error:
        log.warning("could not open the output to copy the word index", exc_info=True)
        return False
    try:
        fresh.execute("PRAGMA synchronous=OFF")  # as `start` set the loading connection
        with builder.attached(fresh), fresh:
            builder.copy(fresh)
            if builder.track and not builder.correct(fresh, stale):
                raise _Stale()  # rolls the copy back
    except _Stale:
        log.info("rows changed after the word-index builder read them: built here instead")
        return False
    except apsw.Error:
        log.warning("could not copy the builder's word index", exc_info=True)
        return False
    finally:
        fresh.close()
    return True


class _Stale(Exception):
    """A following builder's index does not match the final rows."""


class _Clock:
    """Seconds of each step of `finish`, for the report's timings."""

    def __init__(self, into: dict[str, float]) -> None:
        self.into, self.last = into, time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.into[name] = round(now - self.last, 3)
        self.last = now


def _parent_links(conn: apsw.Connection, stats: WriteStats) -> None:
    """A parent that did not survive is unlinked (the child stays)."""
    conn.execute("UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IS NOT"
                 " NULL AND parent_session_id NOT IN (SELECT id FROM sessions)")
    stats.parent_links_dropped += conn.changes()


def _placeholders(conn: apsw.Connection, stats: WriteStats) -> None:
    """A labelled session for every session id whose row did not survive."""
    now = time.time()
    orphans = conn.execute(
        "SELECT session_id, min(t), max(t), count(*) FROM (SELECT session_id, CASE WHEN "
        "typeof(timestamp) IN ('integer', 'real') THEN timestamp END AS t FROM messages "
        "WHERE typeof(session_id) = 'text' AND session_id NOT IN (SELECT id FROM sessions))"
        " GROUP BY session_id ORDER BY session_id").fetchall()
    for sid, first, last, n in orphans:
        conn.execute(
            "INSERT INTO sessions(id, source, title, started_at, updated_at, message_count)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (sid, PLACEHOLDER_SOURCE, PLACEHOLDER_TITLE, now if first is None else first,
             now if last is None else last, n))
        stats.placeholders.append(str(sid))
        stats.table("sessions").inserted += 1


def _orphans_to_quarantine(conn: apsw.Connection, stats: WriteStats,
                           quarantine: Quarantine) -> None:
    """Rows whose parent row is lost (and no placeholder stands in) leave
    their table for the quarantine, with their values."""
    bad = sorted({(t, rowid) for t, rowid, _parent, _fk in
                  conn.execute("PRAGMA foreign_key_check")})
    for table, rowid in bad:
        cur = conn.execute(f"SELECT * FROM {quote(table)} WHERE rowid = ?", (rowid,))
        cols = [d[0] for d in cur.getdescription()]
        row = cur.fetchone()
        if row is None:
            continue
        quarantine(table, rowid, None, "rejected by the schema: its parent row is lost",
                   json.dumps(dict(zip(cols, row)), default=repr))
        conn.execute(f"DELETE FROM {quote(table)} WHERE rowid = ?", (rowid,))
        stats.table(table).inserted -= 1
        stats.table(table).quarantined += 1


def _recount_sessions(conn: apsw.Connection) -> None:
    """Every session's counters are what was recovered, never the source row's:
    a session that lost 4 of 250 rows says 246 (it said 250 once), and one
    rebuilt from indexes gets counters it had lost. Tool calls are counted
    the way appends count them (the length of each row's tool_calls list)."""
    conn.execute(
        "UPDATE sessions SET message_count = (SELECT count(*) FROM messages AS m"
        " WHERE m.session_id = sessions.id), tool_call_count = (SELECT coalesce(sum("
        "CASE WHEN json_valid(m.tool_calls) AND json_type(m.tool_calls) = 'array'"
        " THEN json_array_length(m.tool_calls) ELSE 0 END), 0) FROM messages AS m"
        " WHERE m.session_id = sessions.id)")


def fill_search(conn: apsw.Connection, tick: Progress,
                indexes: tuple[str, ...] = TEXT_INDEXES) -> None:
    """The word index from the messages, a rowid range per transaction,
    then the term table from its vocabulary and the watermark at the top
    (nothing left for an indexer). While
    filling, FTS5 keeps a larger pending-terms buffer and does not merge
    segments (`LOAD_SETTINGS`): each batch becomes a few large segments, about
    half the time of merging as it goes, and queries as fast afterwards. The
    index's normal settings are put back at the end, so later writes merge."""
    fts_settings(conn, LOAD_SETTINGS, indexes)
    (total,) = one(conn.execute("SELECT count(*) FROM messages"))
    done, low = 0, None
    while True:
        row = conn.execute("SELECT id FROM messages WHERE id > coalesce(?, -9223372036854775808)"
                           " ORDER BY id LIMIT 1 OFFSET ?", (low, FTS_BATCH - 1)).fetchone()
        high = row[0] if row is not None else None
        with conn:
            for table in indexes:
                conn.execute(f"INSERT INTO {table}(rowid, text) SELECT id, text FROM "
                             f"{TEXT_VIEW} WHERE id > coalesce(?, "
                             "-9223372036854775808) AND id <= coalesce(?, 9223372036854775807)",
                             (low, high))
        done = min(total, done + FTS_BATCH)
        tick("building the search index", done, total)
        if high is None:
            break
        low = high
    with conn:
        fts_settings(conn, NORMAL_SETTINGS, indexes)
        fill_terms(conn)
        (top,) = one(conn.execute("SELECT coalesce(max(id), 0) FROM messages"))
        set_watermark(conn, top)


def fts_settings(conn: apsw.Connection, settings: tuple[tuple[str, int], ...],
                 indexes: tuple[str, ...] = TEXT_INDEXES) -> None:
    for table in indexes:
        for key, value in settings:
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES (?, ?)", (key, value))
