"""The page carver for files of any size: rows handed on as pages are mapped.

`carve_stream` runs the same passes as `hstate_recovery.carve.carver.carve` but yields
what it finds about every ``batch`` rows instead of collecting a whole
`CarveResult`, so carving a multi-gigabyte file holds one batch of rows
(plus a bitmap of the pages seen) at a time.
"""
from __future__ import annotations

import os
import time
from typing import Any, Generator

from ..carve import CarveStats, Carver, LostRecord, Resolver, RowOrigin, Want, WantSpan, open_source
from ..schema import Layout
from .context import BATCH_BYTES, row_size

Found = tuple[str, dict[str, Any], RowOrigin]  # (table, row, origin) as carve_stream yields


def carve_stream(db_path: str | os.PathLike[str],
                 wal_path: str | os.PathLike[str] | None = None, *,
                 include_freelist: bool = False, resolve: Resolver | None = None,
                 fill: tuple[Layout, ...] | None = None, harvest: bool = False,
                 batch: int = 2000, want: Want | None = None,
                 want_span: WantSpan | None = None
                 ) -> Generator[tuple[list[Found], list[LostRecord]], None, CarveStats]:
    """`carve` for files of any size: yields (rows, lost records) about every
    ``batch`` rows as pages are mapped and returns the stats, never holding
    more than a batch. Rows are not deduplicated here: the passes run in
    lane order (tree walks, orphan scan, freelist), so a consumer keeping
    the first copy of a (table, rowid) keeps the gentlest lane's. ``want``
    limits decoding to the rows the caller still needs (`Carver`), and
    ``want_span`` answers it for a leaf's whole span of rowids at once."""
    started = time.perf_counter()
    with open_source(db_path, wal_path) as image:
        carver = Carver(image, resolve=resolve, fill=fill, harvest=harvest, want=want,
                        want_span=want_span)
        size = seen = 0
        for _ in carver.steps(include_freelist, False):
            size += sum(row_size(f.row) for f in carver.found[seen:])
            seen = len(carver.found)
            if seen + len(carver.lost) >= batch or size >= BATCH_BYTES:
                yield carver.drain()
                size = seen = 0
        if carver.found or carver.lost:
            yield carver.drain()
        carver.stats.pages_read, carver.stats.bytes_read = image.pages_read, image.bytes_read
    carver.stats.seconds = time.perf_counter() - started
    return carver.stats
