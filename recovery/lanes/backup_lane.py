"""Lane 1: an SQLite backup of a structurally sound copy, read in one pass.

The backup is a consistent image of the copy in the work directory. Its
rows go to the output in rowid batches, each offered first as `ImageRows`
(the batch's rowids in the image): our store's sink copies such a batch
with one ``INSERT ... SELECT`` from the image attached read-only when that
is provably the same as writing its rows one by one (`hstate_recovery.output.image_copy`),
and leaves it otherwise; a batch left is read here and sent as row dicts,
so every row, count and classification is the same either way.
"""
from __future__ import annotations

import bisect
import itertools
from pathlib import Path
from typing import Iterator, cast

import apsw

from sessiondb.recovery_api import MAX_ROWID, MIN_ROWID, create_private_file

from ..schema import READ_ERRORS, TableSpec, quote
from .context import (BATCH_BYTES, BATCH_ROWS, Batch, ImageRows, LaneContext, LaneResult, LaneRun,
                      batches, read_whole)


BACKUP_IMAGE = "backup.db"  # in the work dir
BY_STATEMENT = "rows_copied_by_statement"  # lane stat: rows the output took as `ImageRows`


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def backup_lane(ctx: LaneContext) -> LaneRun:
    """When the copy is structurally sound, take an online backup of it and
    read every table from that consistent image in one pass."""
    result = LaneResult(stats={"applicable": ctx.structurally_sound})
    if not ctx.structurally_sound or ctx.conn is None:
        return result
    image = ctx.work_dir / BACKUP_IMAGE
    create_private_file(image)  # 0600 whatever the umask; SQLite would use 0644
    dest = apsw.Connection(str(image))
    try:
        with dest.backup("main", ctx.conn, "main") as b:
            b.step(-1)
        for state in ctx.pending():
            if ctx.offer_image and state.spec.rowid and not _rowid_named(state.spec):
                yield from _read_image(ctx, dest, image, state.spec, result)
            else:
                yield from read_whole(ctx, dest, state.spec, result)
    except READ_ERRORS as e:
        result.stats["error"] = _err(e)
    finally:
        dest.close()
    return result


def _rowid_named(spec: TableSpec) -> bool:
    """A column that hides the rowid's names: its rows are only read as dicts."""
    return any(c.lower() in ("rowid", "oid", "_rowid_") for c in spec.columns)


def _read_image(ctx: LaneContext, conn: apsw.Connection, image: Path, spec: TableSpec,
                result: LaneResult) -> Iterator[Batch]:
    """Every row of the table in rowid batches, each offered to the output as
    `ImageRows` first (one statement for the batch) and read as dicts only
    when the output leaves it; the table is complete when the end is reached."""
    done, start = 0, MIN_ROWID
    rows_sql = (f"SELECT {spec.select_list()} FROM {spec.quoted()} WHERE rowid BETWEEN ? "
                "AND ? ORDER BY rowid")
    try:
        sizes = _sizes(conn, spec)
        while True:
            rowids = _next_rowids(conn, spec, sizes, start)
            if not rowids:
                break
            offer = ImageRows(image, spec, rowids)
            yield spec.name, offer
            if offer.taken:
                result.stats[BY_STATEMENT] = result.stats.get(BY_STATEMENT, 0) + len(rowids)
            else:
                for batch in batches(spec.row_dict(r) for r in conn.execute(
                        rows_sql, (rowids[0], rowids[-1]))):
                    yield spec.name, batch
            done += len(rowids)
            ctx.copied(spec.name, done)
            if rowids[-1] >= MAX_ROWID:
                break
            start = rowids[-1] + 1
    except READ_ERRORS as e:
        result.stats.setdefault("errors", {})[spec.name] = _err(e)
        return
    result.gaps[spec.name] = []


def _sizes(conn: apsw.Connection, spec: TableSpec) -> str:
    """An expression for the bytes of a row's text and blobs, from the record
    header (no value is read). Only columns of TEXT or BLOB affinity are
    counted: turning every number into text to measure it doubled the cost,
    and a number is small."""
    def wide(declared: str) -> bool:
        t = (declared or "").upper()
        return "INT" not in t and (any(k in t for k in ("CHAR", "CLOB", "TEXT", "BLOB"))
                                   or not t)
    cols = [r[1] for r in conn.execute(f"PRAGMA table_info({spec.quoted()})") if wide(r[2])]
    return " + ".join(f"coalesce(octet_length({quote(c)}), 0)" for c in cols) or "0"


def _next_rowids(conn: apsw.Connection, spec: TableSpec, sizes: str, start: int) -> list[int]:
    """The rowids of the next batch from ``start``: at most BATCH_ROWS rows and
    about BATCH_BYTES of text and blobs (`_sizes`), so a batch's transaction
    stays about as small as a batch of row dicts."""
    rows = cast("list[tuple[int, int]]", conn.execute(
        f"SELECT rowid, 64 + {sizes} FROM {spec.quoted()} WHERE rowid >= ? ORDER BY rowid "
        "LIMIT ?", (start, BATCH_ROWS)).fetchall())
    upto = bisect.bisect_left(list(itertools.accumulate(r[1] for r in rows)), BATCH_BYTES)
    return [r[0] for r in rows[:upto + 1]]
