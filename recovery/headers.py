"""On-disk headers: the database header of page 1 and the WAL file.

Fields are parsed from tables of (name, offset, size) into plain dicts, read
from bytes with no SQLite involved, so a file SQLite refuses to open can
still be described. `repair_header` fixes provably wrong header fields of
our private copy (never the user's file) so SQLite can read the rest.
"""
from __future__ import annotations

import os
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAGIC = b"SQLite format 3\x00"
WAL_MAGIC_LE, WAL_MAGIC_BE = 0x377F0682, 0x377F0683
WAL_HEADER, FRAME_HEADER = 32, 24
BTREE_TYPES = (2, 5, 10, 13)

# (name, offset, size) of the big-endian integer fields of the 100-byte header.
DB_HEADER_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("page_size_raw", 16, 2), ("write_version", 18, 1), ("read_version", 19, 1),
    ("reserved_bytes", 20, 1), ("max_payload_fraction", 21, 1),
    ("min_payload_fraction", 22, 1), ("leaf_payload_fraction", 23, 1),
    ("change_counter", 24, 4), ("page_count", 28, 4), ("freelist_trunk", 32, 4),
    ("freelist_count", 36, 4), ("schema_cookie", 40, 4), ("schema_format", 44, 4),
    ("default_cache_size", 48, 4), ("largest_root", 52, 4), ("text_encoding", 56, 4),
    ("user_version", 60, 4), ("incremental_vacuum", 64, 4), ("application_id", 68, 4),
    ("version_valid_for", 92, 4), ("sqlite_version_number", 96, 4),
)
WAL_HEADER_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("magic", 0, 4), ("format_version", 4, 4), ("page_size", 8, 4),
    ("checkpoint_seq", 12, 4), ("salt1", 16, 4), ("salt2", 20, 4),
)
ENCODINGS = {1: "utf-8", 2: "utf-16le", 3: "utf-16be"}


def _fields(data: bytes, table: tuple[tuple[str, int, int], ...]) -> dict[str, int]:
    return {name: int.from_bytes(data[off:off + size], "big") for name, off, size in table}


def decode_page_size(raw: int) -> int:
    return 65536 if raw == 1 else raw


def valid_page_size(size: int) -> bool:
    return 512 <= size <= 65536 and size & (size - 1) == 0


@dataclass
class DbHeader:
    """Page 1's header as found, and what is wrong with it."""

    file_size: int
    magic_ok: bool
    all_zero: bool
    fields: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def page_size(self) -> int:
        return decode_page_size(self.fields.get("page_size_raw", 0))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["page_size"] = self.page_size
        out["text_encoding_name"] = ENCODINGS.get(self.fields.get("text_encoding", 0), "invalid")
        return out


def _all_zero(path: Path) -> bool:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            if chunk.strip(b"\x00"):
                return False
    return True


def read_db_header(path: Path) -> DbHeader:
    """Parse the first 100 bytes of ``path`` and list the invalid fields."""
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        data = f.read(100)
    head = DbHeader(size, data[:16] == MAGIC, _all_zero(path))
    if len(data) < 100:
        head.problems.append("file is shorter than the 100-byte header")
        return head
    head.fields = _fields(data, DB_HEADER_FIELDS)
    head.problems = header_problems(head.fields, head.magic_ok, size)
    return head


def header_problems(f: dict[str, int], magic_ok: bool, file_size: int) -> list[str]:
    """Fields whose values SQLite would refuse or that contradict the format."""
    out = [] if magic_ok else ["magic string is not 'SQLite format 3'"]
    page_size = decode_page_size(f["page_size_raw"])
    if not valid_page_size(page_size):
        out.append(f"page size {f['page_size_raw']} is not a power of two in 512..65536")
    elif _count_trusted(f) and f["page_count"] > file_size // page_size:
        out.append(f"header says {f['page_count']} pages but the file holds "
                   f"{file_size // page_size} (truncated?)")
    for name in ("write_version", "read_version"):
        if f[name] not in (1, 2):
            out.append(f"{name} is {f[name]}, not 1 (rollback) or 2 (WAL)")
    if (f["max_payload_fraction"], f["min_payload_fraction"],
            f["leaf_payload_fraction"]) != (64, 32, 32):
        out.append("payload fractions are not 64/32/32")
    if f["schema_format"] not in (1, 2, 3, 4):
        out.append(f"schema format {f['schema_format']} is not 1..4")
    if f["text_encoding"] not in ENCODINGS:
        out.append(f"text encoding {f['text_encoding']} is not 1..3")
    return out


def _count_trusted(f: dict[str, int]) -> bool:
    """SQLite believes the in-header page count only when this matches."""
    return f["page_count"] > 0 and f["version_valid_for"] == f["change_counter"]


def _page1_fits(data: bytes, size: int) -> bool:
    """Whether page 1's b-tree header and cell pointers fit a page of ``size``."""
    if len(data) < 112 or data[100] not in (5, 13):
        return False
    hdr = 12 if data[100] == 5 else 8
    (cells,) = struct.unpack(">H", data[103:105])
    start = 100 + hdr
    pointers = struct.unpack(f">{cells}H", data[start:start + 2 * cells]) if cells else ()
    return all(start + 2 * cells <= p < size for p in pointers)


def infer_page_size(path: Path, wal_page_size: int | None) -> int | None:
    """The page size when the header's is invalid: the WAL's, or the smallest
    size that page 1's cell pointers and the file size agree with."""
    if wal_page_size and valid_page_size(wal_page_size):
        return wal_page_size
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        data = f.read(65536)
    for candidate in (512 << i for i in range(8)):
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
    if not head.problems or head.all_zero or len(head.fields) == 0:
        return []
    with open(path, "rb") as f:
        data = bytearray(f.read(100))
    fixes: list[str] = []
    if not head.magic_ok and data[21:24] != b"\x40\x20\x20":
        return []  # neither the magic nor the fixed fractions: not ours to rewrite
    _fix_fields(data, head, path, wal_page_size, has_wal, fixes)
    if fixes:
        with open(path, "r+b") as f:
            f.write(bytes(data))
            f.flush()
            os.fsync(f.fileno())
    return fixes


def _fix_fields(data: bytearray, head: DbHeader, path: Path, wal_page_size: int | None,
                has_wal: bool, fixes: list[str]) -> None:
    f = head.fields
    if not head.magic_ok:
        data[0:16] = MAGIC
        fixes.append("magic string")
    if not valid_page_size(head.page_size):
        size = infer_page_size(path, wal_page_size)
        if size is not None:
            data[16:18] = (1 if size == 65536 else size).to_bytes(2, "big")
            fixes.append(f"page size -> {size}")
    for name, off in (("write_version", 18), ("read_version", 19)):
        if f[name] not in (1, 2):
            data[off] = 2 if has_wal else 1
            fixes.append(f"{name} -> {data[off]}")
    if bytes(data[21:24]) != b"\x40\x20\x20":
        data[21:24] = b"\x40\x20\x20"
        fixes.append("payload fractions -> 64/32/32")
    if f["schema_format"] not in (1, 2, 3, 4):
        data[44:48] = (4).to_bytes(4, "big")
        fixes.append("schema format -> 4")
    if f["text_encoding"] not in ENCODINGS:
        data[56:60] = (1).to_bytes(4, "big")  # the store only ever writes UTF-8
        fixes.append("text encoding -> utf-8")
    size = decode_page_size(int.from_bytes(data[16:18], "big"))
    if valid_page_size(size) and _count_trusted(f) and f["page_count"] > head.file_size // size:
        # SQLite refuses a file shorter than its header says; count what is there.
        data[28:32] = (head.file_size // size).to_bytes(4, "big")
        fixes.append(f"page count -> {head.file_size // size}")


@dataclass
class WalSummary:
    """What the -wal file holds: frames, how many are valid, the last commit."""

    size: int
    header_ok: bool = False
    page_size: int = 0
    checkpoint_seq: int = 0
    salt1: int = 0
    salt2: int = 0
    frames: int = 0
    valid_frames: int = 0
    committed_frames: int = 0
    last_commit_frame: int | None = None
    last_commit_db_pages: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _checksum(data: bytes, s0: int, s1: int, big: bool) -> tuple[int, int]:
    words = struct.unpack((">" if big else "<") + f"{len(data) // 4}I", data)
    mask = 0xFFFFFFFF
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & mask
        s1 = (s1 + words[i + 1] + s0) & mask
    return s0, s1


def read_wal(path: Path) -> WalSummary:
    """Walk the WAL's frames, checking salts and the running checksum."""
    size = os.stat(path).st_size
    summary = WalSummary(size)
    with open(path, "rb") as f:
        head = f.read(WAL_HEADER)
        if len(head) < WAL_HEADER:
            return summary
        h = _fields(head, WAL_HEADER_FIELDS)
        big = h["magic"] == WAL_MAGIC_BE
        if h["magic"] not in (WAL_MAGIC_LE, WAL_MAGIC_BE) or not valid_page_size(h["page_size"]):
            return summary
        s = _checksum(head[:24], 0, 0, big)
        summary.header_ok = s == struct.unpack(">II", head[24:32])
        summary.page_size, summary.checkpoint_seq = h["page_size"], h["checkpoint_seq"]
        summary.salt1, summary.salt2 = h["salt1"], h["salt2"]
        summary.frames = (size - WAL_HEADER) // (FRAME_HEADER + h["page_size"])
        if summary.header_ok:
            _walk_frames(f, summary, s, big)
    return summary


def _walk_frames(f: Any, summary: WalSummary, s: tuple[int, int], big: bool) -> None:
    for index in range(1, summary.frames + 1):
        frame = f.read(FRAME_HEADER + summary.page_size)
        pgno, db_pages, salt1, salt2, c0, c1 = struct.unpack(">6I", frame[:FRAME_HEADER])
        if (salt1, salt2) != (summary.salt1, summary.salt2) or pgno == 0:
            return
        s = _checksum(frame[:8], *s, big)
        s = _checksum(frame[FRAME_HEADER:], *s, big)
        if s != (c0, c1):
            return
        summary.valid_frames = index
        if db_pages:
            summary.last_commit_frame = index
            summary.committed_frames = index
            summary.last_commit_db_pages = db_pages
