"""The SQLite database file format, parsed defensively from raw bytes.

Owns: the 100-byte database header, b-tree page headers, the four cell
formats, varints, record headers and every serial type, overflow chains,
the freelist (trunk and leaf pages) and pointer-map pages. Header fields are
read from tables of (name, offset, size, decoder) into dataclasses.

Every offset, length and pointer read here may be garbage: functions raise
`FormatError` (never anything else on bad bytes) and every loop is bounded,
so a caller can skip one bad page and carry on. Both readers of a file
parse it here: the page carver (recovery), which skips what fails, and
identification (rawfile.py), which stops at the first failure. The carver
calls these functions once per page and cell of multi-GB files: keep their
per-call cost down. Reference: the "Database File Format" page of
sqlite.org (sections 1.3, 1.5, 1.6, 2.1, 2.3).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple

MAGIC = b"SQLite format 3\x00"
HEADER_SIZE = 100
LEGAL_PAGE_SIZES = tuple(1 << n for n in range(9, 17))  # 512 .. 65536
PENDING_BYTE = 0x40000000  # the lock-byte page holds this offset; never a b-tree page
MAX_PAYLOAD = 0x7FFFFFFF  # SQLite's hard upper bound on a string or blob (2^31 - 1)
MIN_ROWID, MAX_ROWID = -(1 << 63), (1 << 63) - 1  # a rowid is a signed 64-bit integer

# b-tree page types (first byte of the page header)
INDEX_INTERIOR, TABLE_INTERIOR, INDEX_LEAF, TABLE_LEAF = 2, 5, 10, 13
PAGE_TYPES = {INDEX_INTERIOR: "index_interior", TABLE_INTERIOR: "table_interior",
              INDEX_LEAF: "index_leaf", TABLE_LEAF: "table_leaf"}
TEXT_ENCODINGS = {1: "utf-8", 2: "utf-16-le", 3: "utf-16-be"}


class FormatError(ValueError):
    """Bytes that do not follow the file format where they should."""


class Missing:
    """A column whose bytes were lost (payload cut short by a broken overflow chain)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = Missing()


# -- field tables ----------------------------------------------------------

Decoder = Callable[[bytes], Any]


def _u8(b: bytes) -> int:
    return b[0]


def _uint(b: bytes) -> int:
    """A big-endian unsigned integer of any width."""
    return int.from_bytes(b, "big")


def _raw(b: bytes) -> bytes:
    return bytes(b)


@dataclass(frozen=True)
class Field:
    """One fixed-position field: where it is and how to decode it."""

    name: str
    offset: int
    size: int
    decode: Decoder


def read_fields(table: Iterable[Field], buf: bytes, base: int = 0) -> dict[str, Any]:
    """Decode every field of ``table`` at ``base`` in ``buf``; FormatError if short."""
    out: dict[str, Any] = {}
    for f in table:
        start = base + f.offset
        if start + f.size > len(buf):
            raise FormatError(f"field {f.name} lies past the end of the buffer")
        out[f.name] = f.decode(buf[start:start + f.size])
    return out


# -- database header -------------------------------------------------------

DB_HEADER_FIELDS = (
    Field("magic", 0, 16, _raw),
    Field("page_size_raw", 16, 2, _uint),
    Field("write_version", 18, 1, _u8),
    Field("read_version", 19, 1, _u8),
    Field("reserved_bytes", 20, 1, _u8),
    Field("max_payload_fraction", 21, 1, _u8),
    Field("min_payload_fraction", 22, 1, _u8),
    Field("leaf_payload_fraction", 23, 1, _u8),
    Field("change_counter", 24, 4, _uint),
    Field("page_count", 28, 4, _uint),
    Field("first_freelist_trunk", 32, 4, _uint),
    Field("freelist_count", 36, 4, _uint),
    Field("schema_cookie", 40, 4, _uint),
    Field("schema_format", 44, 4, _uint),
    Field("default_cache_size", 48, 4, _uint),
    Field("largest_root_page", 52, 4, _uint),
    Field("text_encoding", 56, 4, _uint),
    Field("user_version", 60, 4, _uint),
    Field("incremental_vacuum", 64, 4, _uint),
    Field("application_id", 68, 4, _uint),
    Field("version_valid_for", 92, 4, _uint),
    Field("sqlite_version_number", 96, 4, _uint),
)


@dataclass(frozen=True)
class DatabaseHeader:
    """The first 100 bytes of page 1.

    ``page_size_raw`` 1 means 65536. ``page_count`` is trusted by SQLite only
    when ``version_valid_for == change_counter``. ``largest_root_page`` is
    non-zero exactly when auto_vacuum (and so pointer-map pages) is on.
    """

    magic: bytes
    page_size_raw: int
    write_version: int
    read_version: int
    reserved_bytes: int
    max_payload_fraction: int
    min_payload_fraction: int
    leaf_payload_fraction: int
    change_counter: int
    page_count: int
    first_freelist_trunk: int
    freelist_count: int
    schema_cookie: int
    schema_format: int
    default_cache_size: int
    largest_root_page: int
    text_encoding: int
    user_version: int
    incremental_vacuum: int
    application_id: int
    version_valid_for: int
    sqlite_version_number: int

    @property
    def page_size(self) -> int:
        return 65536 if self.page_size_raw == 1 else self.page_size_raw

    @property
    def usable_size(self) -> int:
        return self.page_size - self.reserved_bytes

    @property
    def auto_vacuum(self) -> bool:
        return self.largest_root_page != 0

    @property
    def encoding(self) -> str:
        return TEXT_ENCODINGS.get(self.text_encoding, "utf-8")

    @property
    def page_count_trusted(self) -> bool:
        return self.page_count > 0 and self.version_valid_for == self.change_counter

    @property
    def wal_mode(self) -> bool:
        """Both version bytes 2: SQLite sets them when the journal mode is WAL."""
        return self.write_version == 2 and self.read_version == 2

    @property
    def signed_application_id(self) -> int:
        """application_id as ``PRAGMA application_id`` reports it: the field
        is a big-endian two's-complement 32-bit integer."""
        return signed32(self.application_id)

    def problems(self) -> list[str]:
        """Why this header cannot be trusted; empty when it looks sane."""
        out = []
        if self.magic != MAGIC:
            out.append("bad magic")
        if self.page_size not in LEGAL_PAGE_SIZES:
            out.append(f"illegal page size {self.page_size_raw}")
        elif self.usable_size < 480:
            out.append(f"reserved bytes {self.reserved_bytes} leave too little space")
        if (self.max_payload_fraction, self.min_payload_fraction,
                self.leaf_payload_fraction) != (64, 32, 32):
            out.append("bad payload fractions")
        return out


def parse_header(buf: bytes) -> DatabaseHeader:
    """Parse the database header from the start of page 1 (no sanity checks)."""
    return DatabaseHeader(**read_fields(DB_HEADER_FIELDS, buf))


# -- varints and records ---------------------------------------------------

def read_varint(buf: bytes, pos: int, end: int | None = None) -> tuple[int, int]:
    """A 1-9 byte big-endian varint at ``pos``: (unsigned value, next position)."""
    limit = len(buf) if end is None else min(end, len(buf))
    if pos < limit and buf[pos] < 0x80:  # the common case: one byte
        return buf[pos], pos + 1
    value = 0
    for i in range(8):
        if pos + i >= limit:
            raise FormatError("varint runs past the end")
        byte = buf[pos + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos + i + 1
    if pos + 8 >= limit:
        raise FormatError("varint runs past the end")
    return (value << 8) | buf[pos + 8], pos + 9


def signed64(value: int) -> int:
    """Reinterpret an unsigned 64-bit varint as SQLite's signed integer."""
    return value - (1 << 64) if value >= (1 << 63) else value


def signed32(value: int) -> int:
    """Reinterpret an unsigned 32-bit header field as a signed integer."""
    return value - (1 << 32) if value >= (1 << 31) else value


def encode_varint(value: int) -> bytes:
    """The varint SQLite would write for ``value`` (negative: two's complement)."""
    v = value & 0xFFFFFFFFFFFFFFFF
    if v >> 56:
        out = [v & 0xFF]
        v >>= 8
        for _ in range(8):
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        return bytes(reversed(out))
    parts = [v & 0x7F]
    v >>= 7
    while v:
        parts.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(reversed(parts))


_INT_SIZES = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}


def serial_type_size(st: int) -> int:
    """Bytes a value of serial type ``st`` occupies in the record body."""
    if st in _INT_SIZES:
        return _INT_SIZES[st]
    if st == 7:
        return 8
    if st in (0, 8, 9):
        return 0
    if st in (10, 11):
        raise FormatError(f"reserved serial type {st}")
    return (st - 12) // 2 if st % 2 == 0 else (st - 13) // 2


def storage_class(st: int) -> str:
    """null, integer, real, text or blob for a serial type."""
    if st == 0:
        return "null"
    if st in _INT_SIZES or st in (8, 9):
        return "integer"
    if st == 7:
        return "real"
    return "blob" if st % 2 == 0 else "text"


@dataclass
class Record:
    """A decoded record. ``values`` holds MISSING for columns whose bytes were
    lost; text that is not valid in the database encoding stays bytes and its
    column index is listed in ``bad_text``."""

    serial_types: list[int]
    values: list[Any]
    truncated: bool = False
    bad_text: list[int] = field(default_factory=list)

    def classes(self) -> list[str]:
        return [storage_class(st) for st in self.serial_types]


def _decode_value(st: int, raw: bytes, encoding: str) -> tuple[Any, bool]:
    if st == 0:
        return None, True
    if st == 8 or st == 9:
        return st - 8, True
    if st in _INT_SIZES:
        return int.from_bytes(raw, "big", signed=True), True
    if st == 7:
        return struct.unpack(">d", raw)[0], True
    if st % 2 == 0:
        return bytes(raw), True
    try:
        return raw.decode(encoding), True
    except UnicodeDecodeError:
        return bytes(raw), False


def decode_record(payload: bytes, total_size: int | None = None,
                  encoding: str = "utf-8") -> Record:
    """Decode a record; ``payload`` may be shorter than ``total_size`` when an
    overflow chain broke, then the columns past the cut are MISSING."""
    total = len(payload) if total_size is None else total_size
    header_size, pos = read_varint(payload, 0)
    if header_size < 1 or header_size > total or header_size > len(payload):
        raise FormatError(f"record header size {header_size} does not fit the payload")
    types: list[int] = []
    while pos < header_size:
        st, pos = read_varint(payload, pos, header_size)
        serial_type_size(st)  # rejects reserved types
        types.append(st)
    if pos != header_size:
        raise FormatError("record header overruns its declared size")
    record = Record(types, [], truncated=len(payload) < total)
    body = header_size
    for i, st in enumerate(types):
        size = serial_type_size(st)
        if body + size > total:
            raise FormatError("record body is longer than the payload")
        if body + size > len(payload):
            record.values.append(MISSING)
        else:
            value, ok = _decode_value(st, payload[body:body + size], encoding)
            record.values.append(value)
            if not ok:
                record.bad_text.append(i)
        body += size
    if body != total:
        raise FormatError("record body does not end where the payload does")
    return record


# -- b-tree pages and cells ------------------------------------------------

PAGE_HEADER_FIELDS = (
    Field("page_type", 0, 1, _u8),
    Field("first_freeblock", 1, 2, _uint),
    Field("cell_count", 3, 2, _uint),
    Field("content_start_raw", 5, 2, _uint),
    Field("fragmented_bytes", 7, 1, _u8),
)
RIGHT_CHILD_FIELD = (Field("right_child", 8, 4, _uint),)


class BTreePage(NamedTuple):
    """A b-tree page header plus its cell pointer array.

    ``cell_pointers`` holds one offset per cell, or None where the pointer
    points outside the cell content area (that cell is skipped and counted).
    ``right_child`` is 0 on leaf pages. (A named tuple, not a frozen
    dataclass: one is made for every page a carve reads, and a frozen
    dataclass took longer to build than the page took to parse.)
    """

    pgno: int
    page_type: int
    first_freeblock: int
    cell_count: int
    content_start_raw: int
    fragmented_bytes: int
    right_child: int
    header_offset: int
    cell_pointers: tuple[int | None, ...]

    @property
    def is_leaf(self) -> bool:
        return self.page_type in (TABLE_LEAF, INDEX_LEAF)

    @property
    def is_table(self) -> bool:
        return self.page_type in (TABLE_LEAF, TABLE_INTERIOR)

    @property
    def bad_pointers(self) -> int:
        return sum(1 for p in self.cell_pointers if p is None)


_PAGE_HEAD = struct.Struct(">BHHHB")  # PAGE_HEADER_FIELDS, unpacked at once
_U32 = struct.Struct(">I")


def parse_page_header(data: bytes, pgno: int, usable: int, *,
                      free_space_checked: bool = True) -> BTreePage:
    """Parse and sanity-check a b-tree page header and cell pointer array.
    (The fields of PAGE_HEADER_FIELDS, read with one struct: the carver
    parses every page of a file, and field-by-field decoding was most of it.)
    ``free_space_checked=False`` leaves out the checks of the free-space
    fields (first freeblock, fragmented bytes): a reader of cells does not use
    them, and SQLite still reads a page whose free-space accounting is off."""
    base = HEADER_SIZE if pgno == 1 else 0
    if base + 8 > len(data):
        raise FormatError("page header lies past the end of the buffer")
    page_type, first_freeblock, cell_count, content_raw, fragmented = \
        _PAGE_HEAD.unpack_from(data, base)
    if page_type not in PAGE_TYPES:
        raise FormatError(f"not a b-tree page (type byte {page_type})")
    leaf = page_type in (TABLE_LEAF, INDEX_LEAF)
    right_child = 0
    if not leaf:
        if base + 12 > len(data):
            raise FormatError("field right_child lies past the end of the buffer")
        (right_child,) = _U32.unpack_from(data, base + 8)
    header_end = base + (8 if leaf else 12)
    ptr_end = header_end + 2 * cell_count
    content = content_raw or 65536
    if ptr_end > usable or ptr_end > len(data) or (
            cell_count and not ptr_end <= content <= usable):
        raise FormatError("cell count or content area does not fit the page")
    if free_space_checked:
        if first_freeblock and not content <= first_freeblock < usable:
            raise FormatError("first freeblock lies outside the content area")
        if fragmented > 60:
            raise FormatError("too many fragmented bytes")
    if not leaf and right_child < 1:
        raise FormatError("interior page without a right child")
    limit = usable - 3
    pointers = tuple(p if content <= p < limit else None
                     for p in struct.unpack_from(f">{cell_count}H", data, header_end))
    return BTreePage(pgno, page_type, first_freeblock, cell_count, content_raw, fragmented,
                     right_child, base, pointers)


def table_cell_keys(data: bytes, page: BTreePage, usable: int) -> list[tuple[int, int] | None]:
    """(left child, rowid) of each cell of a table page (left child 0 on a
    leaf), or None for a cell whose key cannot be read: the keys alone,
    without `parse_cell`'s payload, for walks that need only where rows are."""
    interior = page.page_type == TABLE_INTERIOR
    out: list[tuple[int, int] | None] = []
    for off in page.cell_pointers:
        if off is None:
            out.append(None)
            continue
        try:
            if interior:
                left = int.from_bytes(data[off:off + 4], "big")
                key, _ = read_varint(data, off + 4, usable)
            else:
                left = 0
                _size, pos = read_varint(data, off, usable)
                key, _ = read_varint(data, pos, usable)
        except FormatError:
            out.append(None)
            continue
        out.append((left, signed64(key)))
    return out


def local_payload_size(payload_size: int, usable: int, table_leaf: bool) -> int:
    """How much of a payload is stored on the b-tree page itself."""
    max_local = usable - 35 if table_leaf else (usable - 12) * 64 // 255 - 23
    if payload_size <= max_local:
        return payload_size
    min_local = (usable - 12) * 32 // 255 - 23
    k = min_local + (payload_size - min_local) % (usable - 4)
    return k if k <= max_local else min_local


@dataclass(slots=True)
class Cell:
    """One cell. ``rowid`` is set for table cells, ``left_child`` for interior
    cells, ``payload_size``/``local``/``overflow_page`` for cells with a payload.
    (Slots, not frozen: a frozen dataclass took as long to build as the cell
    took to parse; nothing changes a cell once made.)"""

    index: int
    offset: int
    size: int = 0
    left_child: int = 0
    rowid: int | None = None
    payload_size: int = 0
    local: bytes = b""
    overflow_page: int = 0


def parse_cell(data: bytes, page: BTreePage, index: int, usable: int) -> Cell:
    """Parse cell ``index`` of ``page``; FormatError if it does not fit."""
    off = page.cell_pointers[index]
    if off is None:
        raise FormatError("cell pointer points outside the page")
    pos, left = off, 0
    if not page.is_leaf:
        left = int.from_bytes(data[pos:pos + 4], "big")
        pos += 4
    if page.page_type == TABLE_INTERIOR:
        key, end = read_varint(data, pos, usable)
        return Cell(index, off, max(4, end - off), left_child=left, rowid=signed64(key))
    size, pos = read_varint(data, pos, usable)
    if size > MAX_PAYLOAD:
        raise FormatError(f"cell claims a payload of {size} bytes")
    rowid = None
    if page.page_type == TABLE_LEAF:
        key, pos = read_varint(data, pos, usable)
        rowid = signed64(key)
    local = local_payload_size(size, usable, page.page_type == TABLE_LEAF)
    end = pos + local
    overflow = 0
    if local < size:
        if end + 4 > usable:
            raise FormatError("cell overflow pointer lies past the page")
        overflow = int.from_bytes(data[end:end + 4], "big")
    elif end > usable:
        raise FormatError("cell payload runs past the page")
    cell_end = end + (4 if overflow or local < size else 0)
    return Cell(index, off, max(4, cell_end - off), left, rowid, size, bytes(data[pos:end]),
                overflow)


def content_accounted(data: bytes, page: BTreePage, usable: int) -> bool:
    """Whether cells, freeblocks and fragments exactly fill the content area,
    as in every page SQLite writes. Read at the wrong page size, a real page
    fails this (its content area seems to stop short of the page end)."""
    content = page.content_start_raw or 65536
    used = page.fragmented_bytes
    for i in range(page.cell_count):
        used += parse_cell(data, page, i, usable).size
    block, blocks = page.first_freeblock, 0
    while block:
        if block + 4 > usable or blocks > usable // 4:
            return False
        nxt = int.from_bytes(data[block:block + 2], "big")
        used += int.from_bytes(data[block + 2:block + 4], "big")
        if nxt and nxt <= block:
            return False
        block, blocks = nxt, blocks + 1
    return used == usable - content


PageReader = Callable[[int], "bytes | None"]
BROKEN_CHAIN = "broken overflow chain"


@dataclass
class OverflowResult:
    """A payload reassembled from its overflow chain, and what went wrong."""

    payload: bytes
    pages: list[int]
    error: str | None = None


def read_overflow(cell: Cell, read_page: PageReader, usable: int,
                  page_count: int) -> OverflowResult:
    """Follow ``cell``'s overflow chain; bounded by the pages the payload
    needs, with cycle detection. A broken chain returns what was read."""
    parts = [cell.local]
    pages: list[int] = []
    remaining = cell.payload_size - len(cell.local)
    nxt = cell.overflow_page
    seen: set[int] = set()
    if remaining > page_count * (usable - 4):
        return OverflowResult(cell.local, pages, f"{BROKEN_CHAIN}: payload larger than the file")
    while remaining > 0:
        if not 2 <= nxt <= page_count:
            return OverflowResult(b"".join(parts), pages, f"{BROKEN_CHAIN}: link to page {nxt}")
        if nxt in seen:
            return OverflowResult(b"".join(parts), pages, f"{BROKEN_CHAIN}: cycle at page {nxt}")
        seen.add(nxt)
        data = read_page(nxt)
        if data is None:
            return OverflowResult(b"".join(parts), pages, f"{BROKEN_CHAIN}: page {nxt} unreadable")
        pages.append(nxt)
        take = min(usable - 4, remaining)
        parts.append(data[4:4 + take])
        remaining -= take
        nxt = int.from_bytes(data[:4], "big")
    if cell.overflow_page and nxt != 0:
        return OverflowResult(b"".join(parts), pages, f"{BROKEN_CHAIN}: it does not end where the payload does")
    return OverflowResult(b"".join(parts), pages)


# -- freelist and pointer map ----------------------------------------------

@dataclass
class Freelist:
    """Pages on the freelist: trunk pages (lists of leaves) and free leaves."""

    trunks: list[int] = field(default_factory=list)
    leaves: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def pages(self) -> set[int]:
        return set(self.trunks) | set(self.leaves)


def parse_trunk(data: bytes, usable: int, page_count: int) -> tuple[int, list[int]]:
    """A freelist trunk page: (next trunk, leaf page numbers)."""
    nxt = int.from_bytes(data[0:4], "big")
    count = int.from_bytes(data[4:8], "big")
    if count > usable // 4 - 2:
        raise FormatError(f"freelist trunk claims {count} leaves")
    leaves = [int.from_bytes(data[8 + 4 * i:12 + 4 * i], "big") for i in range(count)]
    if any(not 2 <= p <= page_count for p in leaves):
        raise FormatError("freelist trunk lists a page outside the file")
    return nxt, leaves


def walk_freelist(first_trunk: int, read_page: PageReader, usable: int,
                  page_count: int) -> Freelist:
    """Every trunk and leaf page reachable from the header's first trunk."""
    out = Freelist()
    nxt = first_trunk
    while nxt:
        if not 2 <= nxt <= page_count or nxt in out.trunks:
            out.errors.append(f"bad freelist trunk link {nxt}")
            break
        data = read_page(nxt)
        if data is None:
            out.errors.append(f"freelist trunk {nxt} unreadable")
            break
        out.trunks.append(nxt)
        try:
            nxt, leaves = parse_trunk(data, usable, page_count)
        except FormatError as e:
            out.errors.append(f"freelist trunk {out.trunks[-1]}: {e}")
            break
        out.leaves.extend(leaves)
    return out


PTRMAP_TYPES = {1: "root", 2: "free", 3: "overflow1", 4: "overflow2", 5: "btree"}


def is_ptrmap_page(pgno: int, usable: int) -> bool:
    """Pointer-map pages sit at page 2 and then every usable/5 + 1 pages."""
    return pgno >= 2 and (pgno - 2) % (usable // 5 + 1) == 0


def lock_byte_page(page_size: int) -> int:
    return PENDING_BYTE // page_size + 1


def parse_ptrmap(data: bytes, pgno: int, usable: int, page_count: int) -> dict[int, tuple[int, int]]:
    """page number -> (entry type, parent page) for the pages this map covers."""
    out = {}
    for i in range(usable // 5):
        target = pgno + 1 + i
        if target > page_count:
            break
        kind = data[5 * i]
        if kind in PTRMAP_TYPES:
            out[target] = (kind, int.from_bytes(data[5 * i + 1:5 * i + 5], "big"))
    return out
