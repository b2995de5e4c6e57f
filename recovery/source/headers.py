"""Inspect's judgement of the on-disk headers: page 1's database header and the WAL.

Parsing belongs to the carver's modules (`fileformat.parse_header` into
`DatabaseHeader`, `wal.scan_wal` into `WalScan`); this module only judges
and reports: which header fields SQLite would refuse (`header_problems`),
the page size when the header's is invalid (`infer_page_size`), a repair of
provably wrong fields of our private copy, never the user's file
(`repair_header`), and the WAL summary inspect prints (`summarize_wal`).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sessiondb.recovery_api import (DatabaseHeader, FRAME_HEADER_SIZE, FormatError, HEADER_SIZE,
                                    LEGAL_PAGE_SIZES, MAGIC, TEXT_ENCODINGS, UNCOMMITTED,
                                    WAL_HEADER_SIZE, WalHeader, parse_header, parse_page_header,
                                    parse_wal_header, scan_wal)

FRACTIONS = b"\x40\x20\x20"  # max/min/leaf payload fractions 64/32/32, fixed by the format


def valid_page_size(size: int) -> bool:
    return size in LEGAL_PAGE_SIZES


@dataclass
class HeaderReport:
    """Page 1's header as found (None when the file is shorter than it), and
    what is wrong with it."""

    file_size: int
    magic_ok: bool
    all_zero: bool
    header: DatabaseHeader | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def page_size(self) -> int:
        return self.header.page_size if self.header else 0

    def to_dict(self) -> dict[str, Any]:
        fields = asdict(self.header) if self.header else {}
        fields.pop("magic", None)  # bytes; ``magic_ok`` says what matters
        code = self.header.text_encoding if self.header else 0
        return {"file_size": self.file_size, "magic_ok": self.magic_ok,
                "all_zero": self.all_zero, "fields": fields, "problems": self.problems,
                "page_size": self.page_size,
                "text_encoding_name": TEXT_ENCODINGS.get(code, "invalid")}


def _all_zero(path: Path) -> bool:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            if chunk.strip(b"\x00"):
                return False
    return True


def read_db_header(path: Path) -> HeaderReport:
    """Parse the first 100 bytes of ``path`` and list the invalid fields."""
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        data = f.read(HEADER_SIZE)
    head = HeaderReport(size, data[:16] == MAGIC, _all_zero(path))
    if len(data) < HEADER_SIZE:
        head.problems.append("file is shorter than the 100-byte header")
        return head
    head.header = parse_header(data)
    head.problems = header_problems(head.header, size)
    return head


def header_problems(h: DatabaseHeader, file_size: int) -> list[str]:
    """Fields whose values SQLite would refuse or that contradict the format."""
    out = [] if h.magic == MAGIC else ["magic string is not 'SQLite format 3'"]
    if not valid_page_size(h.page_size):
        out.append(f"page size {h.page_size_raw} is not a power of two in 512..65536")
    elif h.page_count_trusted and h.page_count > file_size // h.page_size:
        out.append(f"header says {h.page_count} pages but the file holds "
                   f"{file_size // h.page_size} (truncated?)")
    for name in ("write_version", "read_version"):
        if getattr(h, name) not in (1, 2):
            out.append(f"{name} is {getattr(h, name)}, not 1 (rollback) or 2 (WAL)")
    if (h.max_payload_fraction, h.min_payload_fraction,
            h.leaf_payload_fraction) != (64, 32, 32):
        out.append("payload fractions are not 64/32/32")
    if h.schema_format not in (1, 2, 3, 4):
        out.append(f"schema format {h.schema_format} is not 1..4")
    if h.text_encoding not in TEXT_ENCODINGS:
        out.append(f"text encoding {h.text_encoding} is not 1..3")
    return out


def _page1_fits(data: bytes, size: int) -> bool:
    """Whether page 1's b-tree header and cell pointers fit a page of ``size``
    (its free-space fields are not asked: they do not depend on the size)."""
    try:
        page = parse_page_header(data[:size], 1, size, free_space_checked=False)
    except FormatError:
        return False
    return page.is_table and None not in page.cell_pointers


def infer_page_size(path: Path, wal_page_size: int | None) -> int | None:
    """The page size when the header's is invalid: the WAL's, or the smallest
    size that page 1's cell pointers and the file size agree with."""
    if wal_page_size and valid_page_size(wal_page_size):
        return wal_page_size
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        data = f.read(65536)
    for candidate in LEGAL_PAGE_SIZES:
        if size % candidate == 0 and _page1_fits(data, candidate):
            return candidate
    return None


def repair_header(path: Path, wal_page_size: int | None, has_wal: bool) -> list[str]:
    """Fix invalid header fields of our copy in place; returns what was fixed.

    Only fields with one right value (or a value the rest of the file
    proves) are rewritten; nothing is guessed for a file that is not
    recognisably SQLite.
    """
    head = read_db_header(path)
    if not head.problems or head.all_zero or head.header is None:
        return []
    with open(path, "rb") as f:
        data = bytearray(f.read(HEADER_SIZE))
    fixes: list[str] = []
    if not head.magic_ok and data[21:24] != FRACTIONS:
        return []  # neither the magic nor the fixed fractions: not ours to rewrite
    _fix_fields(data, head, path, wal_page_size, has_wal, fixes)
    if fixes:
        with open(path, "r+b") as f:
            f.write(bytes(data))
            f.flush()
            os.fsync(f.fileno())
    return fixes


def _fix_fields(data: bytearray, head: HeaderReport, path: Path, wal_page_size: int | None,
                has_wal: bool, fixes: list[str]) -> None:
    h = head.header
    assert h is not None  # repair_header returns early without one
    if not head.magic_ok:
        data[0:16] = MAGIC
        fixes.append("magic string")
    if not valid_page_size(h.page_size):
        size = infer_page_size(path, wal_page_size)
        if size is not None:
            data[16:18] = (1 if size == 65536 else size).to_bytes(2, "big")
            fixes.append(f"page size -> {size}")
    for name, off in (("write_version", 18), ("read_version", 19)):
        if getattr(h, name) not in (1, 2):
            data[off] = 2 if has_wal else 1
            fixes.append(f"{name} -> {data[off]}")
    if bytes(data[21:24]) != FRACTIONS:
        data[21:24] = FRACTIONS
        fixes.append("payload fractions -> 64/32/32")
    if h.schema_format not in (1, 2, 3, 4):
        data[44:48] = (4).to_bytes(4, "big")
        fixes.append("schema format -> 4")
    if h.text_encoding not in TEXT_ENCODINGS:
        data[56:60] = (1).to_bytes(4, "big")  # the store only ever writes UTF-8
        fixes.append("text encoding -> utf-8")
    size = parse_header(bytes(data)).page_size
    if h.reserved_bytes and valid_page_size(size) and _reserved_disproved(path, size,
                                                                          h.reserved_bytes):
        data[20] = 0
        fixes.append("reserved bytes -> 0 (the pages keep cells there)")
    if valid_page_size(size) and h.page_count_trusted and h.page_count > head.file_size // size:
        # SQLite refuses a file shorter than its header says; count what is there.
        data[28:32] = (head.file_size // size).to_bytes(4, "big")
        fixes.append(f"page count -> {head.file_size // size}")


def _reserved_disproved(path: Path, page_size: int, reserved: int, sample: int = 64) -> bool:
    """Whether b-tree pages point at cells inside the last ``reserved`` bytes
    of a page, which SQLite never writes to: the header's count is then
    damage, and trusting it would cut every page's cells short."""
    limit = page_size - reserved
    with open(path, "rb") as f:
        f.seek(page_size)  # page 2 on: page 1's b-tree header sits after the file header
        for _ in range(sample):
            data = f.read(page_size)
            if len(data) < page_size:
                break
            if data[0] not in (2, 5, 10, 13):
                continue
            start = 12 if data[0] in (2, 5) else 8
            count = min(int.from_bytes(data[3:5], "big"), (page_size - start) // 2)
            pointers = [int.from_bytes(data[start + 2 * i:start + 2 * i + 2], "big")
                        for i in range(count)]
            if pointers and all(start < p < page_size for p in pointers) \
                    and max(pointers) >= limit:
                return True
    return False


def _header_despite_checksum(path: Path) -> WalHeader | None:
    """The WAL header's fields when only its own checksum is wrong (SQLite
    then ignores the whole WAL, but its page size and salts still tell us
    something); None when the magic or page size is invalid too."""
    with open(path, "rb") as f:
        head = f.read(WAL_HEADER_SIZE)
    try:
        return parse_wal_header(head, verify_checksum=False)
    except FormatError:
        return None


def summarize_wal(path: Path) -> dict[str, Any]:
    """What the -wal file holds, from `scan_wal`: whole frames, how many are
    valid before the first bad one (a torn tail, stale salts, a checksum
    break), the last commit frame (1-based) and the page count it recorded."""
    size = os.stat(path).st_size
    scan = scan_wal(path)
    hdr = scan.header or _header_despite_checksum(path)
    out: dict[str, Any] = {"size": size, "header_ok": scan.header is not None,
                           "page_size": 0, "checkpoint_seq": 0, "salt1": 0, "salt2": 0,
                           "frames": 0, "valid_frames": 0, "committed_frames": 0,
                           "last_commit_frame": None, "last_commit_db_pages": None}
    if hdr is None:
        return out
    committed = len(scan.committed)
    out.update(page_size=hdr.page_size, checkpoint_seq=hdr.checkpoint_seq, salt1=hdr.salt1,
               salt2=hdr.salt2,
               frames=(size - WAL_HEADER_SIZE) // (FRAME_HEADER_SIZE + hdr.page_size),
               # valid frames after the last commit are reported as uncommitted
               valid_frames=committed + sum(1 for fr in scan.ignored
                                            if fr.reason == UNCOMMITTED),
               committed_frames=committed,
               last_commit_frame=committed or None,
               last_commit_db_pages=scan.db_size or None)
    return out
