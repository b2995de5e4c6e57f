"""A map of one table b-tree's rowid ranges, read from its interior pages.

When a SQL read of a damaged copy stops at rowid ``r``, bisection used to
halve the rest of the range and try again, one query per halving, until
its budget ran out (on a 1%-damaged 100k-message store: 20,000 queries,
half the rows left to the pure-Python carver). The b-tree itself says
where the damage is: an interior cell's key is the largest rowid of its
left child, so the interior pages give every child page's rowid range.
`TreeMap.span` names the range (and page) the failing rowid lies in, and
whether that page is sound, so a reader can step past exactly that page.

The map is a hint, never the truth about rows: a wrong map only moves
work to a later lane (every rowid a read did not return stays in the
gaps). Only the pages one level above the leaves are remembered (a few
hundred for 100k messages), so the map costs kilobytes at any size; a
leaf's own range is read back from its parent when it is asked for.
"""
from __future__ import annotations

import bisect
import logging
from array import array
from dataclasses import dataclass
from pathlib import Path

from sessiondb.recovery_api import (BTreePage, DatabaseImage, MAX_ROWID, MIN_ROWID, TABLE_INTERIOR,
                                    TABLE_LEAF, parse_page_header, table_cell_keys)

log = logging.getLogger(__name__)

BAD_BYTES = (ValueError, IndexError, OverflowError)  # FormatError is a ValueError
PARENT, HOLE, LEAF = 0, 1, 2  # what an entry of the map is
MAX_INTERIOR = 1 << 20  # interior pages one map visits at most (a cycle cannot run on)


@dataclass(frozen=True)
class Span:
    """The rowids ``lo``..``hi`` (inclusive) all live on page ``pgno`` (or
    under it); ``sound``: that page parses as a table leaf, so SQL may still
    read some of its rows (a damaged overflow chain, bad text), else none."""

    lo: int
    hi: int
    pgno: int
    sound: bool


class TreeMap:
    """Entries sorted by their low rowid: a page whose children are leaves
    (PARENT), a subtree that cannot be read (HOLE), or a root that is a leaf."""

    def __init__(self, image: DatabaseImage) -> None:
        self.image = image
        self.los, self.his, self.pages = array("q"), array("q"), array("q")
        self.kinds = bytearray()
        self._last: tuple[int, list[tuple[int, int, int]]] | None = None

    def add(self, lo: int, hi: int, pgno: int, kind: int) -> None:
        self.los.append(lo)
        self.his.append(hi)
        self.pages.append(pgno)
        self.kinds.append(kind)

    def sort(self) -> None:
        order = sorted(range(len(self.los)), key=self.los.__getitem__)
        self.los = array("q", (self.los[i] for i in order))
        self.his = array("q", (self.his[i] for i in order))
        self.pages = array("q", (self.pages[i] for i in order))
        self.kinds = bytearray(self.kinds[i] for i in order)

    def __len__(self) -> int:
        return len(self.los)

    def root_sound(self) -> bool:
        """Whether the root parsed (as a leaf, or an interior page whose
        children could be listed): then rows below it may be reachable
        whatever single lookups at the edges say."""
        return any(kind != HOLE for kind in self.kinds)

    def span(self, rowid: int) -> Span | None:
        """The page range ``rowid`` falls in, or None when the map has none."""
        i = bisect.bisect_right(self.los, rowid) - 1
        if i < 0 or rowid > self.his[i]:
            return None
        lo, hi, pgno, kind = self.los[i], self.his[i], self.pages[i], self.kinds[i]
        if kind == HOLE:
            return Span(lo, hi, pgno, False)
        if kind == LEAF:
            return Span(lo, hi, pgno, self._leaf(pgno))
        return self._child_span(pgno, lo, hi, rowid)

    def _child_span(self, parent: int, lo: int, hi: int, rowid: int) -> Span:
        children = self._children_of(parent, lo, hi)
        i = bisect.bisect_right(children, rowid, key=lambda c: c[1]) - 1
        if i >= 0 and children[i][1] <= rowid <= children[i][2]:
            child, c_lo, c_hi = children[i]
            return Span(c_lo, c_hi, child, self._leaf(child))
        return Span(lo, hi, parent, False)  # read again, the page no longer parses

    def _children_of(self, parent: int, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """The children of one parent page, kept for the next question: a
        reader stepping through a table asks about one parent many times."""
        if self._last is None or self._last[0] != parent:
            loaded = self._interior(parent)
            found = _children(*loaded, self.image.usable_size, lo, hi) if loaded else None
            self._last = (parent, found or [])
        return self._last[1]

    def _leaf(self, pgno: int) -> bool:
        data = self.image.page(pgno)
        if data is None or data[100 if pgno == 1 else 0] != TABLE_LEAF:
            return False
        try:
            parse_page_header(data, pgno, self.image.usable_size)
        except BAD_BYTES:
            return False
        return True

    def _interior(self, pgno: int) -> tuple[bytes, BTreePage] | None:
        data = self.image.page(pgno)
        if data is None or data[100 if pgno == 1 else 0] != TABLE_INTERIOR:
            return None
        try:
            return data, parse_page_header(data, pgno, self.image.usable_size)
        except BAD_BYTES:
            return None


def _children(data: bytes, page: BTreePage, usable: int, lo: int,
              hi: int) -> list[tuple[int, int, int]] | None:
    """(child page, lowest rowid, highest rowid) of an interior page whose
    own range is ``lo``..``hi``; None when a cell is unreadable or the keys
    are not ascending inside that range (then the page's range is a hole)."""
    out = []
    low = lo
    for found in table_cell_keys(data, page, usable):
        if found is None:
            return None
        child, key = found
        if not low <= key <= hi or child < 1:
            return None
        out.append((child, low, key))
        if key == MAX_ROWID:
            return None  # nothing may follow the largest rowid
        low = key + 1
    out.append((page.right_child, low, hi))
    return out


def _kind_of_level(image: DatabaseImage, children: list[tuple[int, int, int]]) -> int | None:
    """TABLE_LEAF or TABLE_INTERIOR: what the children of one page are (every
    child of a b-tree page is at the same depth), from the first child whose
    type byte says; None when none does."""
    for child, _lo, _hi in children:
        data = image.page(child)
        if data is not None and data[0] in (TABLE_LEAF, TABLE_INTERIOR):
            return data[0]
    return None


def build(image: DatabaseImage, root: int) -> TreeMap:
    """The map of the table b-tree at ``root``; see the module docstring."""
    tree = TreeMap(image)
    n = image.page_count
    seen: set[int] = set()
    stack = [(root, MIN_ROWID, MAX_ROWID)]
    while stack:
        pgno, lo, hi = stack.pop()
        if pgno in seen or not 1 <= pgno <= n or len(seen) >= MAX_INTERIOR:
            tree.add(lo, hi, pgno, HOLE)
            continue
        seen.add(pgno)
        data = image.page(pgno)
        kind = data[100 if pgno == 1 else 0] if data is not None else None
        if kind == TABLE_LEAF and pgno == root:
            tree.add(lo, hi, pgno, LEAF)
            continue
        loaded = tree._interior(pgno) if kind == TABLE_INTERIOR else None
        children = _children(*loaded, image.usable_size, lo, hi) if loaded else None
        if children is None:
            tree.add(lo, hi, pgno, HOLE)
        elif _kind_of_level(image, children) == TABLE_INTERIOR:
            stack.extend(children)
        else:  # leaves below (or none readable: each is checked when asked)
            tree.add(lo, hi, pgno, PARENT)
    tree.sort()
    return tree


def open_map(copy: Path, root: int) -> TreeMap | None:
    """The map of the table at ``root`` in the copy (with its ``-wal``, as
    SQL sees it), or None when the file cannot be read as pages at all.
    The caller closes ``map.image``."""
    if root < 1:
        return None
    wal = Path(f"{copy}-wal")
    try:
        image = DatabaseImage.open(copy, wal if wal.exists() else None)
    except OSError as e:
        log.debug("no tree map for %s: %s", copy, e)
        return None
    if not image.page_size or not image.page_count:
        image.close()
        return None
    try:
        return build(image, root)
    except BAD_BYTES as e:  # defensive: a map is a hint, never worth failing for
        log.debug("no tree map for %s: %s", copy, e)
        image.close()
        return None
