"""Identification's reader: a file's committed pages and table rows, read
without SQLite and changing nothing.

Identification (see identity.py) must happen before any SQLite connection:
even a read-only connection to a WAL file creates or writes its ``-shm``,
and a writer switches the journal mode. So this module reads the bytes
itself, and owns only the reading: which bytes make page N of the last
committed state (the main file, the committed ``-wal`` frames, or the
originals of a ``-journal``), and a walk of a table b-tree bounded against
cyclic trees. It never opens the ``-shm``, never writes, never changes a
mode. The format itself (header, page headers, cells, varints, records,
overflow chains, WAL frames and checksums, journal records) is parsed by
fileformat.py, wal.py and journal.py, the same code the page carver uses;
any damage they find comes out of here as a `RawFileError`.

The main file is read through the process-wide descriptor that
containment.py keeps per inode: opening and closing another descriptor
would cancel the POSIX locks a live SQLite connection of this process holds
on that file.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..engine import containment
from .fileformat import (BTreePage, Cell, DatabaseHeader, FormatError, HEADER_SIZE,
                         LEGAL_PAGE_SIZES, MAGIC, decode_record, parse_cell, parse_header,
                         parse_page_header, read_overflow)
from .journal import read_rollback_journal
from .wal import FRAME_HEADER_SIZE, frame_ok, index_wal

_MAX_PAGES_VISITED = 200_000  # a bound for a damaged (cyclic) tree


class RawFileError(Exception):
    """The bytes are not a readable SQLite file (the message says where)."""


def _checked_header(head: bytes) -> DatabaseHeader:
    """The header at the start of ``head``, or RawFileError when there is
    none or its page size is not one SQLite allows. (Nothing else is
    checked: a file SQLite opens must identify.)"""
    if len(head) < HEADER_SIZE or not head.startswith(MAGIC):
        raise RawFileError("the first 16 bytes are not the SQLite header")
    header = parse_header(head)
    if header.page_size not in LEGAL_PAGE_SIZES:
        raise RawFileError(f"invalid page size {header.page_size_raw} in the header")
    return header


class Pages:
    """Pages of one database as its last committed transaction left them."""

    def __init__(self, fd: int | None, main_size: int, wal: bytes,
                 journal: bytes = b"") -> None:
        self._fd, self._wal = fd, wal
        self._checked: set[int] = set()
        self._wal_index = index_wal(wal)
        self._frames = self._wal_index.frames
        self._originals, journal_db_size = read_rollback_journal(journal)
        self.header = _checked_header(self._first_page_head())
        if self._frames and self._wal_index.page_size != self.header.page_size:
            raise RawFileError("the -wal's page size differs from the header's")
        self.page_size = self.header.page_size
        self.usable = self.header.usable_size
        if self._originals and any(len(v) != self.page_size for v in self._originals.values()):
            raise RawFileError("the -journal's page size differs from the header's")
        on_disk = main_size // self.page_size
        self.page_count = (self._wal_index.db_size
                           or (journal_db_size if self._originals else 0)
                           or max(self.header.page_count, on_disk))

    def _first_page_head(self) -> bytes:
        """The header's bytes: a committed frame or a journal's original of
        page 1 is newer than the main file's."""
        if 1 in self._frames:
            return self._wal[self._frames[1]:self._frames[1] + HEADER_SIZE]
        if 1 in self._originals:
            return self._originals[1][:HEADER_SIZE]
        return os.pread(self._fd, HEADER_SIZE, 0) if self._fd is not None else b""

    def page(self, pgno: int) -> bytes:
        if pgno < 1 or pgno > self.page_count:
            raise RawFileError(f"page {pgno} is outside the file")
        if pgno in self._frames:
            at = self._frames[pgno]
            if at not in self._checked:
                if not frame_ok(self._wal, at - FRAME_HEADER_SIZE, self.page_size,
                                self._wal_index.big_endian):
                    raise RawFileError(f"the -wal frame of page {pgno} fails its checksum")
                self._checked.add(at)
            return self._wal[at:at + self.page_size]
        if pgno in self._originals:
            return self._originals[pgno]
        start = (pgno - 1) * self.page_size
        data = os.pread(self._fd, self.page_size, start) if self._fd is not None else b""
        if len(data) != self.page_size:
            raise RawFileError(f"page {pgno} is beyond the end of the file")
        return data

    def table_rows(self, root: int) -> Iterator[tuple[int, list[Any]]]:
        """(rowid, values) of every row of the table b-tree at ``root``."""
        stack = [root]
        seen: set[int] = set()
        while stack:
            pgno = stack.pop()
            if pgno in seen or len(seen) > _MAX_PAGES_VISITED:
                raise RawFileError(f"the b-tree at page {root} loops")
            seen.add(pgno)
            page, cells = self._table_page(pgno)
            if not page.is_leaf:
                stack.extend(reversed([c.left_child for c in cells] + [page.right_child]))
                continue
            for cell in cells:
                yield cell.rowid or 0, self._values(pgno, cell)  # parse_cell sets a leaf's rowid

    def _table_page(self, pgno: int) -> tuple[BTreePage, list[Cell]]:
        """Page ``pgno``'s header and cells; RawFileError unless it is a
        table b-tree page whose cells all fit it."""
        data = self.page(pgno)
        try:
            # free-space fields are not read here, and do not stop SQLite either
            page = parse_page_header(data, pgno, self.usable, free_space_checked=False)
            if not page.is_table:
                raise RawFileError(f"page {pgno} is not a table b-tree page")
            return page, [parse_cell(data, page, i, self.usable) for i in range(page.cell_count)]
        except FormatError as e:
            raise RawFileError(f"page {pgno}: {e}") from e

    def _values(self, pgno: int, cell: Cell) -> list[Any]:
        """The values of a table leaf cell's record, its overflow chain read."""
        payload = cell.local
        if len(payload) < cell.payload_size:
            chain = read_overflow(cell, self.page, self.usable, self.page_count)
            # A chain that runs on past the payload still gave all of it, and
            # SQLite reads such a row; only a payload cut short is an error.
            if len(chain.payload) < cell.payload_size:
                raise RawFileError(f"page {pgno} cell {cell.index}: {chain.error}")
            payload = chain.payload
        encoding = self.header.encoding
        try:
            record = decode_record(payload, cell.payload_size, encoding)
        except FormatError as e:
            raise RawFileError(f"page {pgno} cell {cell.index}: {e}") from e
        values = record.values
        for i in record.bad_text:  # SQLite returns such text as it is: compare it as text
            values[i] = values[i].decode(encoding, "replace")
        return values


@contextmanager
def open_pages(path: Path) -> Iterator[Pages]:
    """The pages of ``path`` (and its -wal), read through the shared per-inode
    descriptor of the main file; raises RawFileError when they are unreadable."""
    wal, journal = _sidecar(Path(f"{path}-wal")), _sidecar(Path(f"{path}-journal"))
    size = path.stat().st_size
    if size == 0:
        yield Pages(None, 0, wal, journal)
        return
    with containment.shared_descriptor(path) as fd:
        yield Pages(fd, os.fstat(fd).st_size, wal, journal)


def _sidecar(path: Path) -> bytes:
    """A -wal or -journal's bytes (SQLite holds no POSIX locks on these, so
    opening and closing them here cancels nobody's)."""
    try:
        return path.read_bytes() if path.is_file() else b""
    except OSError:
        return b""
