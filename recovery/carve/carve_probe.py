"""Two things the carver needs before it walks anything: the page size of a
file whose header is gone (`probe_page_size`), and, with page 1 lost, the
schema rows that survive on other pages (`harvest_schema`)."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from sessiondb.recovery_api import (DatabaseImage, FormatError, LEGAL_PAGE_SIZES, TABLE_LEAF,
                                    content_accounted, parse_page_header)

BAD_BYTES = (FormatError, struct.error, IndexError, ValueError, OverflowError)
_SCHEMA_TYPES = ("table", "index", "view", "trigger")


@dataclass(frozen=True)
class SchemaEntry:
    type: str
    name: str
    tbl_name: str
    rootpage: int
    sql: str | None



def probe_page_size(image: DatabaseImage, sample: int = 512) -> int | None:
    """Guess the page size of a file whose header is gone: the legal size
    under which the most bytes are b-tree pages whose content area is exactly
    accounted for (see `content_accounted`); sampled on large files."""
    size = image.file_size
    covered: dict[int, int] = {}
    for ps in LEGAL_PAGE_SIZES:
        pages = size // ps
        if pages < 1:
            continue
        step = max(1, pages // sample)
        good = 0
        for pgno in range(2 if pages > 1 else 1, pages + 1, step):
            data = image.raw_file_page(pgno, ps)
            try:
                page = parse_page_header(data, pgno, ps)
                good += page.bad_pointers == 0 and content_accounted(data, page, ps)
            except BAD_BYTES:
                continue
        covered[ps] = good * step * ps
    best = max(covered.values(), default=0)
    if best == 0:
        return None
    return min(ps for ps, c in covered.items() if c == best)


def harvest_schema(carver: Any) -> list[SchemaEntry] | None:
    """With page 1 unusable, the schema's other leaves may survive (a big
    schema spans several pages): take their rows, roots included."""
    entries: list[SchemaEntry] = []
    for pgno in range(2, carver.image.page_count + 1):
        data = carver.image.page(pgno)
        # every schema row but an automatic index's holds SQL SQLite begins
        # with "CREATE ": a page without it is not decoded (decoding every
        # record of every page to find a few schema rows was most of the time)
        if data is None or data[0] != TABLE_LEAF or b"CREATE " not in data:
            continue
        try:
            page = parse_page_header(data, pgno, carver.image.usable_size)
        except BAD_BYTES:
            continue
        found = [r.values for _c, r, err in carver._records(pgno, data, page)
                 if r is not None and not err]
        rows = [v for v in found if len(v) == 5 and v[0] in _SCHEMA_TYPES
                and isinstance(v[3], int) and isinstance(v[1], str) and isinstance(v[2], str)
                and (v[4] is None or (isinstance(v[4], str)
                                      and v[4].upper().startswith("CREATE")))]
        if found and len(rows) == len(found):
            entries += [SchemaEntry(v[0], v[1], v[2], v[3], v[4]) for v in rows]
            carver.skip.add(pgno)
    if not entries:
        return None
    carver.harvested = entries
    carver.stats.notes.append(f"schema page lost: {len(entries)} schema rows found on "
                              "other pages")
    return entries

