"""Read an SQLite file's pages and tables without SQLite, changing nothing.

Identification (see identity.py) must happen before any SQLite connection:
even a read-only connection to a WAL file creates or writes its ``-shm``,
and a writer switches the journal mode. So this module reads the bytes
itself: the 100-byte header, the committed frames of the ``-wal`` (salts
and the cumulative checksum verified, as SQLite's recovery does), and
table b-trees with their overflow chains, decoding records into Python
values. It never opens the ``-shm``, never writes, never changes a mode.

The main file is read through the process-wide descriptor that
containment.py keeps per inode: opening and closing another descriptor
would cancel the POSIX locks a live SQLite connection of this process holds
on that file.
"""
from __future__ import annotations

import os
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..engine import containment

MAGIC = b"SQLite format 3\x00"
WAL_MAGICS = (0x377F0682, 0x377F0683)  # little-, big-endian checksums
_ENCODINGS = {1: "utf-8", 2: "utf-16-le", 3: "utf-16-be"}
_MAX_PAGES_VISITED = 200_000  # a bound for a damaged (cyclic) tree


class RawFileError(Exception):
    """The bytes are not a readable SQLite file (the message says where)."""


@dataclass(frozen=True)
class Header:
    """The fields of the database header identification needs."""

    page_size: int
    reserved: int
    page_count: int
    schema_cookie: int
    user_version: int
    application_id: int
    wal_mode: bool
    text_encoding: str


def parse_header(head: bytes) -> Header:
    if len(head) < 100 or not head.startswith(MAGIC):
        raise RawFileError("the first 16 bytes are not the SQLite header")
    raw = struct.unpack(">H", head[16:18])[0]
    page_size = 65536 if raw == 1 else raw
    if page_size < 512 or page_size & (page_size - 1):
        raise RawFileError(f"invalid page size {raw} in the header")
    return Header(page_size=page_size, reserved=head[20],
                  page_count=struct.unpack(">I", head[28:32])[0],
                  schema_cookie=struct.unpack(">I", head[40:44])[0],
                  user_version=struct.unpack(">i", head[60:64])[0],
                  application_id=struct.unpack(">i", head[68:72])[0],
                  wal_mode=head[18] == 2 and head[19] == 2,
                  text_encoding=_ENCODINGS.get(struct.unpack(">I", head[56:60])[0], "utf-8"))


def _wal_checksum(data: bytes, s0: int, s1: int, big: bool) -> tuple[int, int]:
    words = struct.unpack((">" if big else "<") + f"{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def read_wal_index(wal: bytes) -> tuple[int, dict[int, int], int]:
    """(page size, page -> offset of its newest committed frame, db size in
    pages after the last commit) for a -wal's bytes; empty when none is valid.

    Frames count while their salts match the header's. Each frame's checksum
    is the one stored in the frame before it carried over its header and
    page, so a frame can be checked on its own: the frames of the last
    transaction are checked here (a torn final commit is dropped, as
    SQLite's recovery drops it), every other frame when a page is read from
    it (see `Pages.page`). Checking every frame would cost ~80 ms per MiB of
    -wal in Python, on every open."""
    if len(wal) < 32:
        return 0, {}, 0
    magic, _version, page_size, _seq, salt1, salt2, c0, c1 = struct.unpack(">8I", wal[:32])
    if magic not in WAL_MAGICS or page_size < 512 or page_size & (page_size - 1):
        return 0, {}, 0
    big = magic & 1 == 1
    if _wal_checksum(wal[:24], 0, 0, big) != (c0, c1):
        return 0, {}, 0
    commits: list[tuple[int, dict[int, int], int]] = []  # (first frame offset, pages, size)
    pending: dict[int, int] = {}
    first, offset, step = 32, 32, 24 + page_size
    while offset + step <= len(wal):
        pgno, commit, fs1, fs2 = struct.unpack(">4I", wal[offset:offset + 16])
        if (fs1, fs2) != (salt1, salt2) or pgno == 0:
            break
        pending[pgno] = offset + 24
        offset += step
        if commit:
            commits.append((first, pending, commit))
            pending, first = {}, offset
    while commits and not all(frame_ok(wal, at, page_size, big)
                              for at in range(commits[-1][0], _end(commits[-1][1]), step)):
        commits.pop()
    frames: dict[int, int] = {}
    for _first, pages, _size in commits:
        frames.update(pages)
    return page_size, frames, commits[-1][2] if commits else 0


def _end(pages: dict[int, int]) -> int:
    return max(pages.values()) - 24 + 1


def frame_ok(wal: bytes, at: int, page_size: int, big: bool | None = None) -> bool:
    """Whether the frame whose header starts at ``at`` checks against the
    checksum stored before it (the previous frame's, or the WAL header's)."""
    if big is None:
        big = struct.unpack(">I", wal[:4])[0] & 1 == 1
    prev = wal[24:32] if at == 32 else wal[at - 24 - page_size + 16:at - 24 - page_size + 24]
    s0, s1 = struct.unpack(">2I", prev)
    s0, s1 = _wal_checksum(wal[at:at + 8], s0, s1, big)
    s0, s1 = _wal_checksum(wal[at + 24:at + 24 + page_size], s0, s1, big)
    return (s0, s1) == struct.unpack(">2I", wal[at + 16:at + 24])


JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def read_rollback_journal(journal: bytes) -> tuple[dict[int, bytes], int]:
    """(page -> original content, database size in pages before the
    transaction) from a rollback ``-journal``'s first segment; empty when it
    holds none. Applying these originals gives the last committed state,
    whether the journal is hot (a crash) or its writer is still committing.
    A record whose checksum fails ends the segment, as in SQLite."""
    if len(journal) < 28 or not journal.startswith(JOURNAL_MAGIC):
        return {}, 0
    nrec, nonce, db_size, sector, page_size = struct.unpack(">5I", journal[8:28])
    if page_size < 512 or page_size & (page_size - 1) or not 0 < sector <= 65536:
        return {}, 0
    step = 8 + page_size
    if nrec == 0xFFFFFFFF:
        nrec = (len(journal) - sector) // step
    pages: dict[int, bytes] = {}
    for k in range(nrec):
        at = sector + k * step
        if at + step > len(journal):
            break
        pgno = struct.unpack(">I", journal[at:at + 4])[0]
        data = journal[at + 4:at + 4 + page_size]
        total = nonce + sum(data[i] for i in range(page_size - 200, 0, -200))
        if pgno == 0 or total & 0xFFFFFFFF != struct.unpack(">I", journal[at + step - 4:
                                                                           at + step])[0]:
            break
        pages.setdefault(pgno, data)  # the first record of a page holds its original
    return pages, db_size


class Pages:
    """Pages of one database as its last committed transaction left them."""

    def __init__(self, fd: int | None, main_size: int, wal: bytes,
                 journal: bytes = b"") -> None:
        self._fd, self._main_size, self._wal = fd, main_size, wal
        self._checked: set[int] = set()
        wal_size, self._frames, wal_db_size = read_wal_index(wal)
        self._originals, journal_db_size = read_rollback_journal(journal)
        if 1 in self._frames:
            head = wal[self._frames[1]:self._frames[1] + 100]
        elif 1 in self._originals:
            head = self._originals[1][:100]
        else:
            head = os.pread(fd, 100, 0) if fd is not None else b""
        self.header = parse_header(head)
        if self._frames and wal_size != self.header.page_size:
            raise RawFileError("the -wal's page size differs from the header's")
        self.page_size = self.header.page_size
        self.usable = self.page_size - self.header.reserved
        on_disk = main_size // self.page_size
        if self._originals and any(len(v) != self.page_size for v in self._originals.values()):
            raise RawFileError("the -journal's page size differs from the header's")
        self.page_count = (wal_db_size or (journal_db_size if self._originals else 0)
                           or max(self.header.page_count, on_disk))

    def page(self, pgno: int) -> bytes:
        if pgno < 1 or pgno > self.page_count:
            raise RawFileError(f"page {pgno} is outside the file")
        if pgno in self._frames:
            at = self._frames[pgno]
            if at not in self._checked:
                if not frame_ok(self._wal, at - 24, self.page_size):
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
            page = self.page(pgno)
            base = 100 if pgno == 1 else 0
            kind = page[base]
            ncells = struct.unpack(">H", page[base + 3:base + 5])[0]
            if kind == 0x05:
                pointers = _cell_pointers(page, base + 12, ncells)
                children = [struct.unpack(">I", page[p:p + 4])[0] for p in pointers]
                children.append(struct.unpack(">I", page[base + 8:base + 12])[0])
                stack.extend(reversed(children))
            elif kind == 0x0D:
                for p in _cell_pointers(page, base + 8, ncells):
                    yield self._leaf_cell(page, p)
            else:
                raise RawFileError(f"page {pgno} is not a table b-tree page")

    def _leaf_cell(self, page: bytes, p: int) -> tuple[int, list[Any]]:
        size, p = _varint(page, p)
        rowid, p = _varint(page, p)
        rowid = rowid - (1 << 64) if rowid >= 1 << 63 else rowid
        local = _local_size(size, self.usable)
        payload = page[p:p + local]
        if local < size:
            if p + local + 4 > len(page):  # a damaged cell: garbage size or offset
                raise RawFileError("a table cell runs past the end of its page")
            payload += self._overflow(struct.unpack(">I", page[p + local:p + local + 4])[0],
                                      size - local)
        return rowid, decode_record(payload, self.header.text_encoding)

    def _overflow(self, pgno: int, needed: int) -> bytes:
        out, seen = [], set()
        while needed > 0:
            if pgno == 0 or pgno in seen:
                raise RawFileError("an overflow chain ends early or loops")
            seen.add(pgno)
            page = self.page(pgno)
            chunk = page[4:self.usable][:needed]
            out.append(chunk)
            needed -= len(chunk)
            pgno = struct.unpack(">I", page[:4])[0]
        return b"".join(out)


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


def _cell_pointers(page: bytes, start: int, n: int) -> list[int]:
    pointers = list(struct.unpack(f">{n}H", page[start:start + 2 * n]))
    if any(p < start or p >= len(page) for p in pointers):
        raise RawFileError("a cell pointer is outside its page")
    return pointers


def _local_size(size: int, usable: int) -> int:
    max_local = usable - 35
    if size <= max_local:
        return size
    min_local = ((usable - 12) * 32 // 255) - 23
    k = min_local + (size - min_local) % (usable - 4)
    return k if k <= max_local else min_local


def _varint(buf: bytes, p: int) -> tuple[int, int]:
    value = 0
    for i in range(9):
        if p + i >= len(buf):
            raise RawFileError("a varint runs past its page")
        b = buf[p + i]
        if i == 8:
            return (value << 8) | b, p + 9
        value = (value << 7) | (b & 0x7F)
        if b < 0x80:
            return value, p + i + 1
    raise AssertionError("unreachable")


_INT_SIZES = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}


def decode_record(payload: bytes, encoding: str = "utf-8") -> list[Any]:
    """The values of one record (SQLite's record format)."""
    header_size, p = _varint(payload, 0)
    types = []
    while p < header_size:
        t, p = _varint(payload, p)
        types.append(t)
    values: list[Any] = []
    body = header_size
    for t in types:
        if t == 0 or t in (10, 11):
            values.append(None)
        elif t in _INT_SIZES:
            n = _INT_SIZES[t]
            values.append(int.from_bytes(payload[body:body + n], "big", signed=True))
            body += n
        elif t == 7:
            values.append(struct.unpack(">d", payload[body:body + 8])[0])
            body += 8
        elif t in (8, 9):
            values.append(t - 8)
        else:
            n = (t - 12) // 2
            raw = payload[body:body + n]
            values.append(raw if t % 2 == 0 else raw.decode(encoding, "replace"))
            body += n
    if body > len(payload):
        raise RawFileError("a record is longer than its payload")
    return values
