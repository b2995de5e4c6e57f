"""The page-level carver: rows of our tables read straight from a file's pages.

Owns `carve()` and `estimate()`. The carver reads the committed page image
(database file plus valid WAL frames), walks each table's b-tree from the
root sqlite_schema names when page 1 is readable, then scans every other
page for table leaves no walk reached (orphaned by a damaged interior page,
or everything when page 1 is gone) and maps their records to a table by the
physical layouts in `hstate_recovery.schema.layouts`. Freelist pages (deleted rows) and
WAL frames past the last commit are read only on request, and their rows
are marked. Records that fit no layout are kept as `LostRecord`s.
Nothing here writes anything; a bad page is skipped and counted.
"""
from __future__ import annotations

import logging
import os
import struct
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from sessiondb.recovery_api import (BTreePage, DatabaseImage, FormatError, INDEX_INTERIOR,
                                    INDEX_LEAF, MAX_ROWID, MIN_ROWID, MISSING, TABLE_INTERIOR,
                                    TABLE_LEAF, decode_record, lock_byte_page, parse_cell,
                                    parse_page_header, parse_ptrmap, parse_trunk, read_overflow,
                                    table_cell_keys, walk_freelist)

from ..schema import (FTS_SHADOW, FTS_TERMS, KNOWN_LAYOUTS, Layout, SQLITE_SCHEMA, is_derived,
                      is_without_rowid, layout_for_schema)
from .carve_probe import SchemaEntry, harvest_schema, probe_page_size
from .carve_types import (CarveError, CarveEstimate, CarveResult, CarveStats, FREELIST, LostRecord,
                          ORPHAN, PageSet, RowOrigin, TREE, UNCOMMITTED)

__all__ = ["FREELIST", "ORPHAN", "TREE", "UNCOMMITTED", "CarveError", "CarveEstimate",
           "CarveResult", "CarveStats", "LostRecord", "RowOrigin", "Carver", "carve",
           "estimate", "probe_page_size"]
_LANE_RANK = {TREE: 0, ORPHAN: 1, FREELIST: 2, UNCOMMITTED: 3}

log = logging.getLogger(__name__)

# Errors that mean "these bytes are not what the format says": skip, count, go on.
BAD_BYTES = (FormatError, struct.error, IndexError, ValueError, OverflowError)


@dataclass
class _Found:
    """One decoded record before deduplication."""

    table: str
    row: dict[str, Any]
    origin: RowOrigin


def open_source(db_path: str | os.PathLike[str],
                wal_path: str | os.PathLike[str] | None) -> DatabaseImage:
    """The file's image (with its WAL); a missing or unreadable one is a CarveError."""
    path = Path(db_path)
    if not path.is_file():
        raise CarveError(f"{path} is not a readable file", path=str(path))
    try:
        return DatabaseImage.open(path, wal_path)
    except OSError as e:
        raise CarveError(f"cannot read {path}: {e}", path=str(path)) from e


Resolver = Callable[[str, "str | None"], "Layout | None"]
Bounds = Optional[tuple[int, int]]  # the rowids a leaf's parent allows it (inclusive)
Leaf = tuple[int, bytes, BTreePage, Bounds]


def _inside(cells: list[Any], bounds: tuple[int, int] | None) -> bool:
    """Every cell's rowid lies inside ``bounds`` (never true without bounds)."""
    if bounds is None or not cells:
        return False
    lo, hi = bounds
    return all(c.rowid is not None and lo <= c.rowid <= hi for c in cells)
# (table or None for any, rowid) -> whether the caller still needs that row
Want = Callable[["str | None", "int | None"], bool]
# (table, lowest, highest rowid) -> whether the caller needs any row in that span
WantSpan = Callable[[str, int, int], bool]
SAMPLE = 4  # records an orphan page decodes whatever is wanted: the page votes by them


def carve(db_path: str | os.PathLike[str], wal_path: str | os.PathLike[str] | None = None, *,
          include_freelist: bool = False, include_uncommitted: bool = False,
          resolve: Resolver | None = None, fill: tuple[Layout, ...] | None = None,
          harvest: bool = False) -> CarveResult:
    """Carve every row we can attribute out of ``db_path`` (and its WAL).

    Deleted rows (freelist pages) and rows only in WAL frames after the last
    valid commit are left out unless asked for, and then marked by lane.
    ``resolve`` maps a schema entry (name, CREATE TABLE) to the layout its
    records have, ``fill`` are the layouts a page outside every walked tree
    may belong to; both default to our own store's (`layout_for_schema`,
    `KNOWN_LAYOUTS`). A foreign file's caller passes its format's, and
    ``harvest``: with page 1 lost, schema rows left on other pages give the
    roots of the trees they name.
    """
    started = time.perf_counter()
    with open_source(db_path, wal_path) as image:
        carver = Carver(image, resolve=resolve, fill=fill, harvest=harvest)
        carver.run(include_freelist, include_uncommitted)
        result = carver.result()
    result.stats.seconds = time.perf_counter() - started
    return result


def estimate(db_path: str | os.PathLike[str],
             wal_path: str | os.PathLike[str] | None = None, *,
             resolve: Resolver | None = None,
             fill: tuple[Layout, ...] | None = None, harvest: bool = False) -> CarveEstimate:
    """A cheap count for ``--inspect-only``: cells of table leaves by table
    (and by format, for layouts of several), without decoding records
    except one per orphaned leaf; with page 1 lost, the schema rows found on
    other pages come back too."""
    with open_source(db_path, wal_path) as image:
        carver = Carver(image, count_only=True, resolve=resolve, fill=fill, harvest=harvest)
        carver.run(False, False)
        est = CarveEstimate(rows={t: n for t, n in carver.counts.items() if n},
                            unattributed=carver.counts_lost,
                            schema_readable=carver.stats.schema_readable,
                            page_count=carver.stats.page_count,
                            bad_pages=len(carver.stats.bad_pages),
                            formats=dict(carver.format_counts),
                            harvested=list(carver.harvested))
    return est


class Carver:
    """One carving pass over one image; see the module docstring for the order."""

    def __init__(self, image: DatabaseImage, count_only: bool = False,
                 resolve: Resolver | None = None, fill: tuple[Layout, ...] | None = None,
                 harvest: bool = False, want: Want | None = None,
                 want_span: WantSpan | None = None) -> None:
        self.image = image
        self.harvest = harvest
        self.want = want  # None: every row; else only rows it names are decoded and kept
        self.want_span = want_span  # with want: one question for a leaf's whole span
        self.count_only = count_only
        self.resolve: Resolver = resolve or layout_for_schema
        self.fill: tuple[Layout, ...] = KNOWN_LAYOUTS if fill is None else fill
        self.format_counts: Counter[str] = Counter()
        self.harvested: list[SchemaEntry] = []  # schema rows found off page 1
        self.stats = CarveStats()
        self.found: list[_Found] = []
        self.lost: list[LostRecord] = []
        self.owned = PageSet()  # pages some tree walk reached
        self.skip = PageSet()   # freelist, pointer-map, lock-byte pages
        self.free_leaves: list[int] = []
        self.roots: dict[int, Layout] = {}
        self.index_roots: list[int] = []  # WITHOUT ROWID tables: index b-trees
        extra = tuple(lay for lay in (FTS_SHADOW, FTS_TERMS, SQLITE_SCHEMA)
                      if lay not in self.fill)
        self.layouts: tuple[Layout, ...] = extra + self.fill
        self.ptrmap = False  # auto_vacuum: pointer-map entries are read where needed
        self._last_map: tuple[int, bytes | None] = (0, None)  # the last map page read
        self.counts: Counter[str] = Counter()
        self.counts_lost = 0
        self.encoding = "utf-8"
        self.damage_seen = 0  # bad pages, bad child pointers, misfit leaves met so far

    # -- the passes ----------------------------------------------------------

    def run(self, include_freelist: bool, include_uncommitted: bool) -> None:
        for _ in self.steps(include_freelist, include_uncommitted):
            pass

    def drain(self) -> tuple[list[tuple[str, dict[str, Any], RowOrigin]], list[LostRecord]]:
        """(table, row, origin) and lost records found since the last drain."""
        found = [(f.table, f.row, f.origin) for f in self.found]
        lost, self.found, self.lost = self.lost, [], []
        return found, lost

    def steps(self, include_freelist: bool, include_uncommitted: bool) -> Iterator[None]:
        """The passes, pausing after each leaf page mapped."""
        if not self._settle_page_size():
            return
        schema = self._read_schema()
        if schema is None and self.image.info.page_size_source == "header":
            if self._recheck_page_size():
                self.owned.clear()
                self.stats.bad_pages.clear()
                schema = self._read_schema()
        if schema is None and self.harvest:
            schema = self._harvest_schema()
        elif schema is not None and self.harvest and self.damage_seen:
            schema = self._complete_schema(schema)
        self._plan(schema)
        for root, layout in sorted(self.roots.items()):
            yield from self._walk(root, layout)
        for root in self.index_roots:
            self._walk_index(root)
        yield from self._orphan_scan()
        if include_freelist:
            yield from self._freelist_lane()
        if include_uncommitted:
            yield from self._uncommitted_lane()

    def _settle_page_size(self) -> bool:
        info, st = self.image.info, self.stats
        if info.wal:
            st.frames_applied = len(info.wal.committed) if not info.wal.problem else 0
            st.frames_ignored = dict(Counter(f.reason for f in info.wal.ignored))
            st.wal_problem = info.wal.problem
        if not self.image.page_size:
            ps = probe_page_size(self.image)
            if ps is None:
                st.notes.append("no page size: header, WAL and page probe all failed")
                return False
            self.image.set_page_size(ps, "probe")
        st.page_size, st.page_size_source = self.image.page_size, info.page_size_source
        st.page_count = self.image.page_count
        if info.header:
            self.encoding = info.header.encoding
        return True

    def _recheck_page_size(self) -> bool:
        """Page 1 does not parse at the header's page size: the size field
        itself may be damaged, so trust a probe that disagrees (True then)."""
        ps = probe_page_size(self.image)
        if not ps or ps == self.image.page_size:
            return False
        self.stats.notes.append(f"header page size {self.image.page_size} looks wrong; "
                                f"probed {ps}")
        self.image.set_page_size(ps, "probe")
        self.stats.page_size, self.stats.page_size_source = ps, "probe"
        self.stats.page_count = self.image.page_count
        return True

    def _read_schema(self) -> list[SchemaEntry] | None:
        """sqlite_schema rows, or None when page 1 (the schema root) is unusable."""
        if self.image.info.header is None:
            self.stats.notes.append("database header unusable: "
                                    + "; ".join(self.image.info.header_problems))
            return None
        entries: list[SchemaEntry] = []
        for v in self._walk_records(1):
            if len(v) == 5 and all(isinstance(x, str) for x in v[:3]) and isinstance(v[3], int):
                entries.append(SchemaEntry(v[0], v[1], v[2], v[3], v[4]
                                           if isinstance(v[4], str) else None))
        if 1 in self.stats.bad_pages or not any(e.type == "table" for e in entries):
            return None
        self.stats.schema_readable = True
        return entries

    def _plan(self, schema: list[SchemaEntry] | None) -> None:
        """Decide roots, layouts and the pages no scan may read as rows."""
        img, hdr = self.image, self.image.info.header
        usable, n = img.usable_size, img.page_count
        self.skip.add(lock_byte_page(img.page_size))
        if hdr is not None:
            fl = walk_freelist(hdr.first_freelist_trunk, img.page, usable, n)
            self.stats.notes.extend(fl.errors)
            self.free_leaves = fl.leaves
            self.skip |= fl.pages
            if fl.errors or len(fl.pages) < hdr.freelist_count:
                self._guess_freelist()  # a broken chain: find the other trunks by shape
            if hdr.auto_vacuum and self._is_pointer_map(2):
                self._load_ptrmap()
            elif hdr.auto_vacuum:
                self.stats.note("the header says auto_vacuum, but page 2 is no pointer map: "
                                "the header field is taken for damage")
        else:
            self._guess_freelist()
        self.stats.freelist_pages = len(self.free_leaves)
        if schema is not None:
            self._plan_schema(schema)

    def _plan_schema(self, schema: list[SchemaEntry]) -> None:
        virtual = {e.name for e in schema if e.type == "table" and e.rootpage == 0}
        layouts: list[Layout] = [FTS_SHADOW, FTS_TERMS, SQLITE_SCHEMA]
        for e in schema:
            if e.type != "table" or not 2 <= e.rootpage <= self.image.page_count:
                continue
            if is_without_rowid(e.sql):
                # an index b-tree holding no rows we carve (FTS5's _idx and
                # _config shadows): walked only to own its pages
                self.index_roots.append(e.rootpage)
                if not is_derived(e.name, virtual):
                    self.stats.note(f"table {e.name}: WITHOUT ROWID, not carved")
                continue
            if is_derived(e.name, virtual) or e.name.startswith("sqlite_"):
                self.roots[e.rootpage] = FTS_SHADOW  # walked only to own its pages
                continue
            layout = self.resolve(e.name, e.sql)
            if layout is None:
                self.stats.notes.append(f"table {e.name}: schema not understood")
                continue
            self.roots[e.rootpage] = layout
            layouts.append(layout)
        # a damaged schema page may have lost tables we still know by shape
        named = {lay.table for lay in layouts}
        layouts += [lay for lay in self.fill if lay.table not in named
                    and lay not in (FTS_SHADOW, FTS_TERMS, SQLITE_SCHEMA)]
        self.layouts = tuple(layouts)

    def _harvest_schema(self) -> list[SchemaEntry] | None:
        return harvest_schema(self)

    def _complete_schema(self, schema: list[SchemaEntry]) -> list[SchemaEntry]:
        """Page 1 read, but the schema's tree met damage (a scribbled child
        pointer): the leaves it no longer reaches still hold schema rows.
        Those are added to what the tree gave (which wins for a name), and
        the whole is kept as harvested: SQLite cannot read such a schema,
        and a recovery's catalog is made from these rows."""
        found = harvest_schema(self) or []
        have = {(e.type, e.name) for e in schema}
        schema = schema + [e for e in found if (e.type, e.name) not in have]
        self.harvested = list(schema)
        return schema

    def _is_pointer_map(self, pgno: int) -> bool:
        """Whether the page reads as a pointer map: nearly every entry it has
        for a page of the file names a map entry type. A header scribbled on
        page 1 can claim auto_vacuum; taking a b-tree page for the map then
        marks live pages as free, and their rows as lost."""
        data = self.image.page(pgno)
        usable, n = self.image.usable_size, self.image.page_count
        if data is None:
            return False
        entries = min(usable // 5, n - pgno)
        if entries <= 0:
            return True
        good = len(parse_ptrmap(data, pgno, usable, n))
        return good >= 0.9 * entries

    def _load_ptrmap(self) -> None:
        """Own the pointer-map pages and take the free pages they list. The
        other entries are read where needed (`_ptrmap_entry`), not kept: a
        dict of every page's entry grew with the file (~300 bytes a page)."""
        usable, n = self.image.usable_size, self.image.page_count
        self.ptrmap = True
        free: set[int] = set()
        pgno = 2
        while pgno <= n:
            self.skip.add(pgno)
            data = self.image.page(pgno)
            if data is not None:  # type 2: free
                free.update(p for p, (kind, _) in parse_ptrmap(data, pgno, usable, n).items()
                            if kind == 2)
            pgno += usable // 5 + 1
        self.free_leaves += sorted(p for p in free if p not in self.skip)  # the map knows free pages too
        self.skip |= free

    def _guess_freelist(self) -> None:
        """Without page 1 the freelist head is lost; find trunk pages by shape
        so deleted rows on free leaves still stay deleted."""
        usable, n = self.image.usable_size, self.image.page_count
        for pgno in range(2, n + 1):
            data = self.image.page(pgno)
            if data is None or data[0] in (2, 5, 10, 13):
                continue
            try:
                nxt, leaves = parse_trunk(data, usable, n)
            except BAD_BYTES:
                continue
            if leaves and nxt <= n and len(set(leaves)) == len(leaves):
                self.skip.add(pgno)
                self.free_leaves.extend(p for p in leaves if p not in self.skip)
                self.skip.update(leaves)

    # -- tree walks ------------------------------------------------------------

    def _bad(self, pgno: int, reason: str) -> None:
        self.damage_seen += 1
        self.stats.bad_pages.setdefault(pgno, reason)

    def _load(self, pgno: int) -> tuple[bytes, BTreePage] | None:
        data = self.image.page(pgno)
        if data is None:
            self._bad(pgno, "missing: page lies past the end of the file")
            return None
        try:
            page = parse_page_header(data, pgno, self.image.usable_size)
        except BAD_BYTES as e:
            self._bad(pgno, f"malformed: {e}")
            return None
        self.stats.bad_cells += page.bad_pointers
        self.damage_seen += page.bad_pointers
        return data, page

    def _tree_leaves(self, root: int, light: bool = False
                     ) -> Iterator[tuple[int, bytes, BTreePage]]:
        """Leaf pages of the table b-tree at ``root``, each page at most once;
        ``light``: only owned (a tree whose rows are not wanted: its leaves
        are not parsed)."""
        for pgno, data, page, _bounds in self._bounded_leaves(root, light):
            yield pgno, data, page

    def _bounded_leaves(self, root: int, light: bool = False) -> Iterator[Leaf]:
        """`_tree_leaves`, each leaf with the rowids its parent's keys allow
        it (None for the root, or when the parent's keys are not in order)."""
        stack: list[tuple[int, Bounds]] = [(root, (MIN_ROWID, MAX_ROWID))]
        n = self.image.page_count
        while stack:
            pgno, bounds = stack.pop()
            if pgno in self.owned or pgno in self.skip or not 1 <= pgno <= n:
                if not 1 <= pgno <= n:
                    self.damage_seen += 1
                    self.stats.note(f"child pointer to page {pgno} outside the file")
                elif pgno in self.skip:
                    self.damage_seen += 1
                    self.stats.note(f"tree points at page {pgno}, a free or map page")
                continue
            self.owned.add(pgno)
            if light and (raw := self.image.page(pgno)) is not None \
                    and raw[100 if pgno == 1 else 0] == TABLE_LEAF:
                continue
            loaded = self._load(pgno)
            if loaded is None:
                continue
            data, page = loaded
            if page.page_type == TABLE_LEAF:
                yield pgno, data, page, None if pgno == root else bounds
            elif page.page_type == TABLE_INTERIOR:
                stack.extend(reversed(self._keyed_children(data, page, bounds)))
            else:
                self._bad(pgno, "wrong page type: an index page inside a table tree")

    def _walk_index(self, root: int) -> None:
        """Own the pages of the index b-tree at ``root`` (after every table
        walk, so a damaged index pointer cannot take a table's page away).
        A pointer to a page of another type is the parent's damage: noted,
        and the page left for whichever walk or scan it belongs to."""
        stack, n = [root], self.image.page_count
        while stack:
            pgno = stack.pop()
            if pgno in self.owned or pgno in self.skip or not 1 <= pgno <= n:
                if not 1 <= pgno <= n:
                    self.stats.note(f"child pointer to page {pgno} outside the file")
                continue
            data = self.image.page(pgno)
            if data is None:
                self._bad(pgno, "missing: page lies past the end of the file")
                continue
            if pgno != root and data[0] not in (INDEX_INTERIOR, INDEX_LEAF):
                self.stats.note(f"index tree points at page {pgno}, not an index page")
                continue
            loaded = self._load(pgno)
            if loaded is None:
                continue
            data, page = loaded
            if page.is_table:  # a wrong root: the orphan scan reads its rows
                self.stats.note(f"index root {pgno} is a table page")
                continue
            self.owned.add(pgno)
            if page.page_type == INDEX_INTERIOR:
                stack.append(page.right_child)
                stack.extend(self._children(data, page))

    def _keyed_children(self, data: bytes, page: BTreePage,
                        bounds: Bounds) -> list[tuple[int, Bounds]]:
        """Children of an interior page in key order, the right child last,
        each with its rowid bounds: a cell's key is the largest rowid of its
        left child. Keys out of order, or outside the page's own bounds,
        bound no child (damage: every leaf below is judged by its records)."""
        lo, hi = bounds if bounds is not None else (MIN_ROWID, MAX_ROWID)
        out: list[tuple[int, Bounds]] = []
        ordered = bounds is not None
        for found in table_cell_keys(data, page, self.image.usable_size):
            if found is None:
                continue
            child, key = found
            ordered = ordered and lo <= key <= hi
            out.append((child, (lo, key) if ordered else None))
            lo = key + 1 if ordered else lo
        out.append((page.right_child, (lo, hi) if ordered and lo <= hi else None))
        return out

    def _children(self, data: bytes, page: BTreePage) -> list[int]:
        out = []
        for i in range(page.cell_count):
            try:
                out.append(parse_cell(data, page, i, self.image.usable_size).left_child)
            except BAD_BYTES:
                continue
        return out

    def _walk_records(self, root: int) -> Iterator[list[Any]]:
        """Decoded values of every record in a tree (used for sqlite_schema)."""
        for pgno, data, page in self._tree_leaves(root):
            for cell, record, _err in self._records(pgno, data, page):
                if record is not None:
                    yield record.values

    def _walk(self, root: int, layout: Layout) -> Iterator[None]:
        before = self.damage_seen
        yield from self._walk_leaves(root, layout)
        if not layout.ignore:  # what a caller needs to trust a clean walk as complete
            trees = self.stats.tree_damage
            trees[layout.table] = trees.get(layout.table, 0) + self.damage_seen - before

    def _walk_leaves(self, root: int, layout: Layout) -> Iterator[None]:
        light = layout.ignore and bool(self.want)
        for pgno, data, page, bounds in self._bounded_leaves(root, light):
            if layout.ignore:
                continue
            if self.count_only:
                self.counts[layout.table] += page.cell_count - page.bad_pointers
                self.format_counts[layout.fmt] += page.cell_count - page.bad_pointers
                continue
            self._map_page(pgno, data, page, TREE, layout, bounds=bounds)
            yield

    # -- records -------------------------------------------------------------

    def _records(self, pgno: int, data: bytes, page: BTreePage, limit: int | None = None,
                 table: str | None = None, filtered: bool = False, bounds: Bounds = None
                 ) -> Iterator[tuple[Any, Any, str | None]]:
        """(cell, record or None, error) for each cell of a table leaf; with
        ``want`` and ``filtered`` (rows, not the schema), only cells whose
        rowid it names (for ``table``, or any) are decoded, plus a sample the
        page's layout is judged by (decoding is the carver's cost; rows other
        lanes read need not be decoded again). A tree leaf whose rowids all
        lie inside the ``bounds`` its parent's keys give it is where the tree
        says: with no wanted row it needs no judging either."""
        usable, n = self.image.usable_size, self.image.page_count
        if self._settled(data, page, table, filtered, bounds):
            return
        cells = self._cells(pgno, data, page, limit)
        if self.want is not None and filtered:
            wanted = [self.want(table, c.rowid) for c in cells]
            # a tree page is judged by one record, an orphan page votes by a few;
            # an orphan page holding no wanted rowid is not decoded at all
            if table is not None:
                sample = 0 if any(wanted) or _inside(cells, bounds) else 1
            else:
                sample = SAMPLE if any(wanted) else 0
            cells = [c for i, c in enumerate(cells) if wanted[i] or i < sample]
        for cell in cells:
            payload, err = cell.local, None
            if cell.overflow_page:
                ov = read_overflow(cell, self.image.page, usable, n)
                payload, err = ov.payload, ov.error
                self.owned.update(ov.pages)
            try:
                record = decode_record(payload, cell.payload_size, self.encoding)
            except BAD_BYTES as e:
                yield cell, None, f"undecodable record: {e}"
                continue
            if err is None and record.bad_text:
                err = "text not valid in the database encoding"
            yield cell, record, err

    def _settled(self, data: bytes, page: BTreePage, table: str | None, filtered: bool,
                 bounds: Bounds) -> bool:
        """A tree leaf with nothing to decode, told from its keys alone (no
        payload copied): every cell's rowid is readable, inside its parent's
        bounds and not wanted. Any doubt takes the full path."""
        if self.want is None or not filtered or table is None or bounds is None:
            return False
        lo, hi = bounds
        # nothing wanted anywhere in the span: no cell need be asked about
        ask = self.want_span is None or self.want_span(table, lo, hi)
        for found in table_cell_keys(data, page, self.image.usable_size):
            if found is None or not lo <= found[1] <= hi or (ask and self.want(table, found[1])):
                return False
        return True

    def _cells(self, pgno: int, data: bytes, page: BTreePage, limit: int | None) -> list[Any]:
        cells = []
        for i in range(page.cell_count if limit is None else min(limit, page.cell_count)):
            if page.cell_pointers[i] is None:
                continue
            try:
                cells.append(parse_cell(data, page, i, self.image.usable_size))
            except BAD_BYTES as e:
                self.stats.bad_cells += 1
                self.damage_seen += 1
                log.debug("page %d cell %d: %s", pgno, i, e)
        return cells

    def _map_page(self, pgno: int, data: bytes, page: BTreePage, lane: str,
                  layout: Layout | None, from_wal: bool | None = None,
                  bounds: Bounds = None) -> None:
        """Map every record of one table leaf, to ``layout`` or by page vote."""
        wal = self.image.from_wal(pgno) if from_wal is None else from_wal
        cells = list(self._records(pgno, data, page, table=layout.table if layout else None,
                                   filtered=True, bounds=bounds))
        decoded = [r for _, r, err in cells if r is not None and not err]
        agreement = 1.0
        scores: list[float] = []
        if layout is not None:
            scores = [layout.score(r.values, r.classes()) for r in decoded]
            if lane == TREE and 2 * sum(1 for x in scores if x > 0) < len(decoded):
                # a damaged parent pointed into another table: let the page vote
                self.stats.note(f"page {pgno} reached from {layout.table} fits it poorly")
                self.damage_seen += 1
                layout, lane = None, ORPHAN
        if layout is None:
            layout, scores = self._vote(decoded)
            agreement = sum(1 for x in scores if x > 0) / max(1, len(cells))
            if layout is not None:  # outside its tree, a loose fit is no fit
                scores = [x if x >= layout.orphan_min else 0.0 for x in scores]
        score_of = {id(r): x for r, x in zip(decoded, scores)}
        for cell, record, err in cells:
            if record is None or err or layout is None:
                self._lose(pgno, cell, record, err or "no layout fits this page", lane, wal)
            elif layout.ignore:
                self.stats.derived_records += 1
            elif self.want is not None and not self.want(layout.table, cell.rowid):
                continue  # decoded only to judge the page's layout
            elif score_of[id(record)] == 0.0:
                self._lose(pgno, cell, record, f"does not fit {layout.table}", lane, wal)
            elif lane == FREELIST and layout.self_check(record.values) is False:
                # a free page's overflow chain may since hold other data (the
                # indexer or a later insert reused the pages): not the deleted row
                self._lose(pgno, cell, record, "deleted row whose pages were reused", lane, wal)
            else:
                self._keep(layout, cell, record, RowOrigin(
                    pgno, cell.index, cell.rowid, lane, wal,
                    round(score_of[id(record)] * agreement, 3)))

    def _keep(self, layout: Layout, cell: Any, record: Any, origin: RowOrigin) -> None:
        if len(record.values) > len(layout.columns):
            self.stats.unknown_columns += 1
        self.found.append(_Found(layout.table, layout.to_row(record.values, cell.rowid),
                                 origin))

    def _vote(self, decoded: list) -> tuple[Layout | None, list[float]]:
        """The layout most records of one page fit best (all cells of a leaf
        belong to one table), and each record's score under it."""
        totals: Counter[int] = Counter()
        vectors = []
        for record in decoded:
            classes = record.classes()
            vec = [lay.rank(record.values, classes) for lay in self.layouts]
            vectors.append(vec)
            top = max(vec, default=(0.0, 0))
            if top[0] > 0 and vec.count(top) == 1:  # a tie between tables votes for neither
                best = vec.index(top)
                if top[0] >= self.layouts[best].orphan_min:
                    totals[best] += top[0]  # type: ignore[assignment]  # float weights
        if not totals:
            return None, []
        best = totals.most_common(1)[0][0]
        return self.layouts[best], [vec[best][0] for vec in vectors]

    def _lose(self, pgno: int, cell: Any, record: Any, reason: str, lane: str,
              wal: bool) -> None:
        self.damage_seen += 1
        values = [None if v is MISSING else v for v in record.values] if record else []
        self.lost.append(LostRecord(pgno, cell.index, cell.rowid, values, reason, lane, wal))

    # -- scans -----------------------------------------------------------------

    def _orphan_scan(self) -> Iterator[None]:
        """Table leaves no walk reached: everything, when page 1 is gone."""
        for pgno in range(1, self.image.page_count + 1):
            if pgno in self.owned or pgno in self.skip:
                continue
            data = self.image.page(pgno)
            if data is None:
                self._bad(pgno, "missing: page lies past the end of the file")
                continue
            if data[100 if pgno == 1 else 0] != TABLE_LEAF:
                continue
            loaded = self._load(pgno)
            if loaded is None:
                continue
            self.stats.orphan_pages += 1
            layout = self._layout_via_ptrmap(pgno)
            if self.count_only:
                self._count_orphan(pgno, *loaded, layout)
            else:
                self._map_page(pgno, *loaded, ORPHAN, layout)
                yield

    def _count_orphan(self, pgno: int, data: bytes, page: BTreePage,
                      layout: Layout | None) -> None:
        if layout is None:
            first = [r for _, r, err in self._records(pgno, data, page, limit=1)
                     if r is not None and not err]
            layout, _ = self._vote(first)
        cells = page.cell_count - page.bad_pointers
        if layout is None:
            self.counts_lost += cells
        elif not layout.ignore:
            self.counts[layout.table] += cells
            self.format_counts[layout.fmt] += cells

    def _ptrmap_entry(self, pgno: int) -> tuple[int, int] | None:
        """(entry type, parent) of ``pgno`` from the map page covering it."""
        span = self.image.usable_size // 5 + 1
        base = 2 + (pgno - 2) // span * span if pgno > 2 else 0
        if not self.ptrmap or base == 0 or base == pgno:
            return None
        if self._last_map[0] != base:
            self._last_map = (base, self.image.page(base))
        data, at = self._last_map[1], 5 * (pgno - base - 1)
        if data is None or data[at] not in (1, 2, 3, 4, 5):
            return None
        return data[at], int.from_bytes(data[at + 1:at + 5], "big")

    def _layout_via_ptrmap(self, pgno: int) -> Layout | None:
        """With auto_vacuum, parent pointers lead an orphan back to its root."""
        seen = set()
        while (entry := self._ptrmap_entry(pgno)) is not None and pgno not in seen:
            seen.add(pgno)
            kind, parent = entry
            if kind == 1:
                return self.roots.get(pgno)
            if kind != 5:
                return None
            pgno = parent
        return None

    def _freelist_lane(self) -> Iterator[None]:
        for pgno in self.free_leaves:
            data = self.image.page(pgno)
            if data is None or data[0] != TABLE_LEAF:
                continue
            try:
                page = parse_page_header(data, pgno, self.image.usable_size)
            except BAD_BYTES:
                continue
            self._map_page(pgno, data, page, FREELIST, None)
            yield

    def _uncommitted_lane(self) -> Iterator[None]:
        for pgno, data, _frame in self.image.uncommitted_pages():
            if data[100 if pgno == 1 else 0] != TABLE_LEAF:
                continue
            try:
                page = parse_page_header(data, pgno, self.image.usable_size)
            except BAD_BYTES:
                continue
            self._map_page(pgno, data, page, UNCOMMITTED, None, from_wal=True)
            yield

    # -- result ----------------------------------------------------------------

    def result(self) -> CarveResult:
        """Deduplicate by (table, rowid): the gentlest lane wins, then confidence;
        uncommitted or freelist copies of a row already found are dropped.
        The lanes rank the live version first: a tree walk reads only cell
        pointer arrays (never freeblocks or unallocated space) of the newest
        committed image of each page (WAL frames over the main file), so an
        older copy can only come from a free page or an uncommitted frame.
        When two copies differ, a note says which was taken."""
        best: dict[tuple[str, int | None], _Found] = {}
        for f in self.found:
            key = (f.table, f.origin.rowid)
            old = best.get(key)
            if old is None:
                best[key] = f
                continue
            self.stats.duplicates += 1
            if (_LANE_RANK[f.origin.lane], -f.origin.confidence) < (
                    _LANE_RANK[old.origin.lane], -old.origin.confidence):
                best[key] = f
            if f.row != old.row:  # two versions of one row: say which one was taken
                taken, other = best[key], (old if best[key] is f else f)
                self.stats.differing_copies += 1
                self.stats.note(f"{key[0]} rowid {key[1]}: took the {taken.origin.lane} copy "
                                f"on page {taken.origin.page} over a different "
                                f"{other.origin.lane} copy on page {other.origin.page}")
        out = CarveResult(lost_and_found=self.lost, stats=self.stats,
                          harvested=list(self.harvested))
        for (table, _rowid), f in sorted(best.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
            out.tables.setdefault(table, []).append(f.row)
            out.origins.setdefault(table, []).append(f.origin)
        self.stats.pages_read = self.image.pages_read
        self.stats.bytes_read = self.image.bytes_read
        return out
