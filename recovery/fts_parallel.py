"""Rebuilding the search index on two cores: the trigram index in a second process.

When the index cannot be taken over from the source (`recovery.search_reuse`)
both indexes are built from the recovered messages; that is most of the
time of a damaged store's recovery, and one core's work. With a second
core the trigram index (the larger of the two) is built at the same time
by a worker process: it reads the finished messages of the output through
a read-only connection (the output is in WAL mode, so the parent's writes
to the word index never block it) and fills the same index, defined by
the same DDL, in a private scratch file; the parent builds the word index
meanwhile, then copies the worker's shadow tables in as rows
(`sessiondb.search_copy.copy_index_tables`) and deletes the scratch file.
If the worker fails in any way, the parent builds the trigram index itself:
the result is the same index either way, and verification checks it.

Run as ``python -m recovery.fts_parallel OUTPUT SCRATCH`` (the worker's side
is `build`); `fill` is the parent's.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import apsw

from sessiondb.recovery_api import (FTS_TABLE, TEXT_VIEW, TRIGRAM_TABLE, attach_readonly,
                                    copy_index_tables, create_private_file, fts_ddl, one,
                                    set_watermark)

log = logging.getLogger(__name__)

Tick = Callable[[str, int, int], None]
WORKER_SECONDS = 3600.0  # never wait forever on a stuck worker


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _scratch(output: Path) -> Path:
    return output.with_name(f"{output.name}.trigram")


def _remove(scratch: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{scratch}{suffix}").unlink(missing_ok=True)


def fill(conn: apsw.Connection, tick: Tick, timings: dict[str, float]) -> int:
    """Fill both indexes of the output on ``conn``; returns how many
    processes built them (2: the trigram index came from the worker);
    ``timings`` gets the seconds of the word index and of the wait after it."""
    from .bulk import fill_search  # (bulk calls this module)
    if cores() < 2:
        fill_search(conn, tick)
        return 1
    output = Path(conn.filename)
    scratch = _scratch(output)
    _remove(scratch)
    create_private_file(scratch)
    worker = subprocess.Popen([sys.executable, "-m", "recovery.fts_parallel", str(output),
                               str(scratch)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        started = time.monotonic()
        fill_search(conn, tick, (FTS_TABLE,))
        timings["search_words_s"] = round(time.monotonic() - started, 3)
        tick("building the trigram index (second process)", 0, 0)
        try:
            _, err = worker.communicate(timeout=WORKER_SECONDS)
        except subprocess.TimeoutExpired:
            worker.kill()
            _, err = worker.communicate()
        timings["search_trigram_wait_s"] = round(time.monotonic() - started, 3) - \
            timings["search_words_s"]
        if worker.returncode == 0 and _take(conn, scratch):
            return 2
        log.warning("trigram worker failed (exit %s): %s", worker.returncode,
                    err.decode(errors="replace")[-300:])
        fill_search(conn, tick, (TRIGRAM_TABLE,))
        return 1
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        _remove(scratch)


def _take(conn: apsw.Connection, scratch: Path) -> bool:
    try:
        with attach_readonly(conn, scratch) as schema:
            with conn:
                copy_index_tables(conn, schema, TRIGRAM_TABLE)
                (top,) = one(conn.execute("SELECT coalesce(max(id), 0) FROM messages"))
                set_watermark(conn, top)
    except apsw.Error:
        log.warning("could not copy the worker's trigram index", exc_info=True)
        return False
    return True


def build(output: Path, scratch: Path) -> None:
    """The worker: the trigram index of ``output``'s messages, in ``scratch``."""
    from .bulk import FTS_BATCH, LOAD_SETTINGS, NORMAL_SETTINGS, fts_settings
    conn = apsw.Connection(str(scratch), flags=apsw.SQLITE_OPEN_READWRITE
                           | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI)
    try:
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA journal_mode=OFF")  # a scratch file: removed on any failure
        conn.execute(fts_ddl(TRIGRAM_TABLE, f", content='{TEXT_VIEW}', content_rowid='id'"))
        fts_settings(conn, LOAD_SETTINGS, (TRIGRAM_TABLE,))
        with attach_readonly(conn, output, "recovered") as src:
            low = None
            while True:
                row = conn.execute(f"SELECT id FROM {src}.messages WHERE id > coalesce(?, "
                                   "-9223372036854775808) ORDER BY id LIMIT 1 OFFSET ?",
                                   (low, FTS_BATCH - 1)).fetchone()
                high = row[0] if row is not None else None
                with conn:
                    conn.execute(f"INSERT INTO {TRIGRAM_TABLE}(rowid, text) SELECT id, text FROM"
                                 f" {src}.{TEXT_VIEW} WHERE id > coalesce(?, "
                                 "-9223372036854775808) AND id <= coalesce(?, "
                                 "9223372036854775807)", (low, high))
                if high is None:
                    break
                low = high
        with conn:
            fts_settings(conn, NORMAL_SETTINGS, (TRIGRAM_TABLE,))
    finally:
        conn.close()


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]))
