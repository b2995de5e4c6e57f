"""The rollback journal: the original pages a ``-journal`` holds.

Owns the journal header (magic, record count, nonce, the database size
before the transaction, sector and page size) and its page records (page
number, original content, a checksum over a sample of the page). In
rollback mode a writer copies each page's original here before changing
the file; applying the originals gives the last committed state, whether
the journal is hot (a crash) or its writer is still committing.
Reference: sqlite.org "Database File Format", section 3 (the rollback
journal).
"""
from __future__ import annotations

import struct

from .fileformat import LEGAL_PAGE_SIZES

JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")
JOURNAL_HEADER_SIZE = 28  # the magic, then five big-endian 32-bit fields
_HEAD = struct.Struct(">5I")  # records, nonce, database pages, sector size, page size
_U32 = struct.Struct(">I")
_ALL_RECORDS = 0xFFFFFFFF  # the record count a journal in sync mode OFF leaves
_MAX_SECTOR = 65536


def read_rollback_journal(journal: bytes) -> tuple[dict[int, bytes], int]:
    """(page -> original content, database size in pages before the
    transaction) from a ``-journal``'s bytes, first segment only; empty
    when it holds none. A record whose checksum fails ends the segment, as
    in SQLite's playback."""
    if len(journal) < JOURNAL_HEADER_SIZE or not journal.startswith(JOURNAL_MAGIC):
        return {}, 0
    nrec, nonce, db_size, sector, page_size = _HEAD.unpack_from(journal, len(JOURNAL_MAGIC))
    if page_size not in LEGAL_PAGE_SIZES or not 0 < sector <= _MAX_SECTOR:
        return {}, 0
    step = 4 + page_size + 4
    if nrec == _ALL_RECORDS:
        nrec = (len(journal) - sector) // step
    pages: dict[int, bytes] = {}
    for k in range(nrec):
        at = sector + k * step
        if at + step > len(journal):
            break
        (pgno,) = _U32.unpack_from(journal, at)
        data = journal[at + 4:at + 4 + page_size]
        (stored,) = _U32.unpack_from(journal, at + 4 + page_size)
        if pgno == 0 or _record_checksum(data, nonce) != stored:
            break
        pages.setdefault(pgno, data)  # the first record of a page holds its original
    return pages, db_size


def _record_checksum(data: bytes, nonce: int) -> int:
    """SQLite's journal checksum: the nonce plus every 200th byte of the
    page, counted from its end (a cheap check that the record was written)."""
    return (nonce + sum(data[i] for i in range(len(data) - 200, 0, -200))) & 0xFFFFFFFF
