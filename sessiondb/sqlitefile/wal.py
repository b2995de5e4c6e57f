"""The write-ahead log and the page image a reader would see through it.

Owns: the WAL header and frame headers (parsed from field tables), salts,
cumulative checksums in the byte order the magic names, commit frames, and
two readers of the committed frames. `scan_wal` checks every frame, as
SQLite's recovery does, and reports the frames SQLite would ignore with the
reason; `DatabaseImage` answers "what are the bytes of page N" through it
(frames up to the last valid commit whose salts match the header, later
frames overriding earlier ones, without the ``-shm`` index). `index_wal`
finds the committed frames of a WAL held in memory checking only its last
transaction, and `frame_ok` checks any one frame on its own, for a reader
that touches a few pages and must not pay for every frame (identification).
Reference: sqlite.org "Database File Format", section 4 (the WAL format).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from .fileformat import (DatabaseHeader, Field, FormatError, HEADER_SIZE, LEGAL_PAGE_SIZES, MAGIC,
                         _uint, parse_header, read_fields)

WAL_MAGIC_LE, WAL_MAGIC_BE = 0x377F0682, 0x377F0683
WAL_HEADER_SIZE, FRAME_HEADER_SIZE = 32, 24

WAL_HEADER_FIELDS = (
    Field("magic", 0, 4, _uint),
    Field("format_version", 4, 4, _uint),
    Field("page_size", 8, 4, _uint),
    Field("checkpoint_seq", 12, 4, _uint),
    Field("salt1", 16, 4, _uint),
    Field("salt2", 20, 4, _uint),
    Field("checksum1", 24, 4, _uint),
    Field("checksum2", 28, 4, _uint),
)
FRAME_HEADER_FIELDS = (
    Field("pgno", 0, 4, _uint),
    Field("commit_size", 4, 4, _uint),
    Field("salt1", 8, 4, _uint),
    Field("salt2", 12, 4, _uint),
    Field("checksum1", 16, 4, _uint),
    Field("checksum2", 20, 4, _uint),
)

# FRAME_HEADER_FIELDS in one unpack: a WAL holds thousands of frames, and
# field-by-field decoding cost more than the rest of a frame's handling.
_FRAME_HEAD = struct.Struct(">6I")
_SUMS = struct.Struct(">2I")  # a stored checksum pair (checksum1, checksum2)

# Why a frame was not applied.
TORN = "torn"                    # the file ends inside this frame
SALT_MISMATCH = "salt_mismatch"  # left over from before the WAL was restarted
CHECKSUM = "checksum"            # cumulative checksum does not match
AFTER_BREAK = "after_break"      # follows an invalid frame; SQLite stops at the first
UNCOMMITTED = "uncommitted"      # valid, but no commit frame follows it
BAD_PAGE_NUMBER = "bad_page_number"


@dataclass(frozen=True)
class WalHeader:
    """The 32-byte WAL header. ``big_endian`` (magic ...83) selects the byte
    order of the checksum words."""

    magic: int
    format_version: int
    page_size: int
    checkpoint_seq: int
    salt1: int
    salt2: int
    checksum1: int
    checksum2: int

    @property
    def big_endian(self) -> bool:
        return self.magic == WAL_MAGIC_BE


@dataclass(frozen=True)
class Frame:
    """One frame header, where its page data starts, and its index (0-based)."""

    index: int
    data_offset: int
    pgno: int
    commit_size: int
    salt1: int
    salt2: int
    checksum1: int
    checksum2: int

    @property
    def is_commit(self) -> bool:
        return self.commit_size != 0


@dataclass(frozen=True)
class IgnoredFrame:
    index: int
    pgno: int
    reason: str


@dataclass
class WalScan:
    """What a WAL holds: the frames SQLite would apply (``committed``), valid
    frames after the last commit (``uncommitted``), and every other frame with
    the reason it is ignored. ``db_size`` is the page count the last commit
    recorded. ``problem`` says why the whole WAL is unusable, if it is."""

    header: WalHeader | None = None
    frame_count: int = 0
    committed: list[Frame] = field(default_factory=list)
    uncommitted: list[Frame] = field(default_factory=list)
    ignored: list[IgnoredFrame] = field(default_factory=list)
    db_size: int = 0
    problem: str | None = None

    @property
    def page_size(self) -> int:
        return self.header.page_size if self.header and not self.problem else 0


def wal_checksum(data: bytes, s0: int, s1: int, big_endian: bool) -> tuple[int, int]:
    """SQLite's cumulative WAL checksum over 8-byte chunks of ``data``."""
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    mask = 0xFFFFFFFF
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & mask
        s1 = (s1 + words[i + 1] + s0) & mask
    return s0, s1


def frame_sums(buf: bytes, at: int, page_size: int, s0: int, s1: int,
               big_endian: bool) -> tuple[int, int]:
    """The running checksum after the frame whose header starts at ``at``
    in ``buf``, from the checksum ``(s0, s1)`` before it: the checksum
    covers the frame header's first 8 bytes, then the page."""
    s0, s1 = wal_checksum(buf[at:at + 8], s0, s1, big_endian)
    start = at + FRAME_HEADER_SIZE
    return wal_checksum(buf[start:start + page_size], s0, s1, big_endian)


def frame_ok(wal: bytes, at: int, page_size: int, big_endian: bool) -> bool:
    """Whether the frame whose header starts at ``at`` in the WAL's bytes
    checks against the checksum stored just before it (in the previous
    frame's header, or the WAL header for the first frame). Each frame
    stores the running checksum, so one frame can be checked from the value
    before it without recomputing its predecessors."""
    # checksum1/2 end both headers: WAL header bytes 24-31, frame header 16-23
    prev = WAL_HEADER_SIZE - 8 if at == WAL_HEADER_SIZE else at - page_size - 8
    s0, s1 = _SUMS.unpack_from(wal, prev)
    return frame_sums(wal, at, page_size, s0, s1, big_endian) == _SUMS.unpack_from(wal, at + 16)


def parse_wal_header(buf: bytes, verify_checksum: bool = True) -> WalHeader:
    """Parse and check the WAL header, its page size and (unless told not to,
    to describe a header whose checksum broke) its own checksum."""
    h = WalHeader(**read_fields(WAL_HEADER_FIELDS, buf))
    if h.magic not in (WAL_MAGIC_LE, WAL_MAGIC_BE):
        raise FormatError("bad WAL magic")
    if h.page_size not in LEGAL_PAGE_SIZES:
        raise FormatError(f"illegal WAL page size {h.page_size}")
    if verify_checksum and wal_checksum(buf[:24], 0, 0, h.big_endian) != (h.checksum1, h.checksum2):
        raise FormatError("WAL header checksum mismatch")
    return h


def scan_wal(path: Path, expect_page_size: int | None = None) -> WalScan:
    """Read every frame of a WAL and decide, as SQLite's recovery would,
    which frames form the latest consistent image."""
    out = WalScan()
    with open(path, "rb") as f:
        head = f.read(WAL_HEADER_SIZE)
        if len(head) < WAL_HEADER_SIZE:
            out.problem = "WAL shorter than its header"
            return out
        try:
            out.header = hdr = parse_wal_header(head)
        except FormatError as e:
            out.problem = str(e)
            return out
        if expect_page_size and hdr.page_size != expect_page_size:
            out.problem = f"WAL page size {hdr.page_size} differs from the database's"
            return out
        _scan_frames(f, hdr, out)
    return out


def _scan_frames(f, hdr: WalHeader, out: WalScan) -> None:
    size = hdr.page_size + FRAME_HEADER_SIZE
    sums = (hdr.checksum1, hdr.checksum2)
    pending: list[Frame] = []
    broken = False
    index = 0
    while raw := f.read(size):
        if len(raw) < size:
            pgno = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else 0
            out.ignored.append(IgnoredFrame(index, pgno, TORN))
            index += 1
            break
        fr = Frame(index, WAL_HEADER_SIZE + index * size + FRAME_HEADER_SIZE,
                   *_FRAME_HEAD.unpack_from(raw))
        index += 1
        reason, sums = _frame_verdict(fr, raw, hdr, sums, broken)
        if reason:
            broken = True
            out.ignored.append(IgnoredFrame(fr.index, fr.pgno, reason))
            if reason in (CHECKSUM, AFTER_BREAK) and fr.pgno > 0:
                out.uncommitted.append(fr)  # salvageable with a flag, never applied
            continue
        pending.append(fr)
        if fr.is_commit:
            out.committed.extend(pending)
            out.db_size = fr.commit_size
            pending = []
    out.frame_count = index
    out.ignored.extend(IgnoredFrame(fr.index, fr.pgno, UNCOMMITTED) for fr in pending)
    out.uncommitted[:0] = pending
    out.ignored.sort(key=lambda fr: fr.index)


def _frame_verdict(fr: Frame, raw: bytes, hdr: WalHeader, sums: tuple[int, int],
                   broken: bool) -> tuple[str | None, tuple[int, int]]:
    """Why SQLite would not apply this frame (None: it would), and the
    running checksum after it. After the first bad frame nothing is applied."""
    if broken:
        return (AFTER_BREAK if _salts_match(fr, hdr) else SALT_MISMATCH), sums
    return _check_frame(fr, raw, hdr, *sums)


def _salts_match(fr: Frame, hdr: WalHeader) -> bool:
    return (fr.salt1, fr.salt2) == (hdr.salt1, hdr.salt2)


def _check_frame(fr: Frame, raw: bytes, hdr: WalHeader, s0: int,
                 s1: int) -> tuple[str | None, tuple[int, int]]:
    if not _salts_match(fr, hdr):
        return SALT_MISMATCH, (s0, s1)
    sums = frame_sums(raw, 0, hdr.page_size, s0, s1, hdr.big_endian)
    if sums != (fr.checksum1, fr.checksum2):
        return CHECKSUM, (s0, s1)
    if fr.pgno < 1:
        return BAD_PAGE_NUMBER, (s0, s1)
    return None, sums


@dataclass(frozen=True)
class WalIndex:
    """The committed frames of a WAL held in memory (see `index_wal`).
    ``frames`` maps a page number to the offset of the page data of its
    newest committed frame; ``db_size`` is the page count the last commit
    recorded. ``page_size`` is the header's even when no frame committed."""

    page_size: int = 0
    big_endian: bool = False
    frames: dict[int, int] = field(default_factory=dict)
    db_size: int = 0


def index_wal(wal: bytes) -> WalIndex:
    """Where the committed pages of a WAL's bytes are; empty when its header
    is not valid.

    Frames count while their salts match the header's. Only the frames of
    the last transaction are checked here (a torn final commit is dropped,
    as SQLite's recovery drops it, and the one before is checked in turn);
    a reader checks any other frame with `frame_ok` when it reads a page
    from it. Checking every frame (`scan_wal`) costs ~80 ms per MiB of WAL
    in Python, too much for a reader that wants a few pages."""
    try:
        hdr = parse_wal_header(wal[:WAL_HEADER_SIZE])
    except FormatError:
        return WalIndex()
    step = FRAME_HEADER_SIZE + hdr.page_size
    commits: list[tuple[range, dict[int, int], int]] = []  # (frame offsets, pages, db size)
    pending: dict[int, int] = {}
    first = offset = WAL_HEADER_SIZE
    while offset + step <= len(wal):
        pgno, commit_size, salt1, salt2, _c1, _c2 = _FRAME_HEAD.unpack_from(wal, offset)
        if (salt1, salt2) != (hdr.salt1, hdr.salt2) or pgno == 0:
            break
        pending[pgno] = offset + FRAME_HEADER_SIZE
        offset += step
        if commit_size:
            commits.append((range(first, offset, step), pending, commit_size))
            pending, first = {}, offset
    while commits and not all(frame_ok(wal, at, hdr.page_size, hdr.big_endian)
                              for at in commits[-1][0]):
        commits.pop()
    frames: dict[int, int] = {}
    for _offsets, pages, _size in commits:
        frames.update(pages)
    return WalIndex(hdr.page_size, hdr.big_endian, frames, commits[-1][2] if commits else 0)


@dataclass
class ImageInfo:
    """How the image was put together: where the page size came from, the
    header (when page 1 is readable), the WAL scan, and the page count."""

    page_size: int = 0
    page_size_source: str = ""
    header: DatabaseHeader | None = None
    header_problems: list[str] = field(default_factory=list)
    wal: WalScan | None = None
    page_count: int = 0
    db_file_pages: int = 0


class DatabaseImage:
    """Page bytes of a database file with its WAL applied, read lazily.

    ``page(n)`` returns the bytes of page ``n`` (WAL frame if one was
    committed for it, else the file), or None past the end of the file.
    Open with ``DatabaseImage.open(db, wal)``; close (or use ``with``).
    """

    def __init__(self, db_path: Path, wal_path: Path | None, page_size: int | None = None):
        self._fd = os.open(db_path, os.O_RDONLY)
        self._wal_fd: int | None = None
        self.info = ImageInfo()
        self.pages_read = 0
        self.bytes_read = 0
        self._wal_map: dict[int, int] = {}
        self.file_size = os.fstat(self._fd).st_size
        self._setup(Path(db_path), Path(wal_path) if wal_path else None, page_size)

    @classmethod
    def open(cls, db_path: str | os.PathLike[str], wal_path: str | os.PathLike[str] | None = None,
             page_size: int | None = None) -> "DatabaseImage":
        return cls(Path(db_path), Path(wal_path) if wal_path else None, page_size)

    def _setup(self, db_path: Path, wal_path: Path | None, forced: int | None) -> None:
        head = os.pread(self._fd, HEADER_SIZE, 0)
        header = parse_header(head) if len(head) == HEADER_SIZE else None
        problems = header.problems() if header else ["file shorter than the header"]
        wal = scan_wal(wal_path) if wal_path and wal_path.exists() else None
        info = self.info
        info.wal = wal
        if forced:
            info.page_size, info.page_size_source = forced, "given"
        elif header is not None and not problems:  # no problems: a header was read
            info.page_size, info.page_size_source = header.page_size, "header"
        elif wal and wal.page_size:
            info.page_size, info.page_size_source = wal.page_size, "wal"
        if wal and info.page_size and wal.page_size and wal.page_size != info.page_size:
            wal.problem = f"WAL page size {wal.page_size} differs from the database's"
        if wal and wal_path and wal.page_size and not wal.problem:  # a wal: scanned at wal_path
            self._wal_fd = os.open(wal_path, os.O_RDONLY)
            self._wal_map = {fr.pgno: fr.data_offset for fr in wal.committed}
        self._settle_header(header, problems)

    def _settle_header(self, header: DatabaseHeader | None, problems: list[str]) -> None:
        """Prefer page 1 from the WAL: it is newer than the file's."""
        info = self.info
        if 1 in self._wal_map and info.page_size:
            wal_head = self.page(1)
            if wal_head and wal_head[:16] == MAGIC:
                header = parse_header(wal_head[:HEADER_SIZE])
                problems = header.problems()
        info.header = header if not problems else None
        info.header_problems = problems
        if info.page_size:
            self._count_pages()

    def _count_pages(self) -> None:
        info = self.info
        info.db_file_pages = self.file_size // info.page_size
        if info.wal and info.wal.db_size and not info.wal.problem:
            info.page_count = info.wal.db_size
        elif info.header and info.header.page_count_trusted:
            info.page_count = info.header.page_count
        else:
            info.page_count = info.db_file_pages

    def set_page_size(self, page_size: int, source: str) -> None:
        """Fix the page size when neither header nor WAL gave one (probed)."""
        self.info.page_size, self.info.page_size_source = page_size, source
        self._count_pages()

    @property
    def page_size(self) -> int:
        return self.info.page_size

    @property
    def usable_size(self) -> int:
        h = self.info.header
        return self.page_size - (h.reserved_bytes if h else 0)

    @property
    def page_count(self) -> int:
        return self.info.page_count

    def from_wal(self, pgno: int) -> bool:
        return pgno in self._wal_map

    def page(self, pgno: int) -> bytes | None:
        """Bytes of page ``pgno`` in the committed image; None if absent or short."""
        ps = self.page_size
        if pgno < 1 or not ps:
            return None
        off = self._wal_map.get(pgno)
        if off is not None and self._wal_fd is not None:
            data = os.pread(self._wal_fd, ps, off)
        elif pgno > self.file_size // ps:  # past the end: a header that says more pages
            return None  # (damage or truncation) costs no read per page that is not there
        else:
            data = os.pread(self._fd, ps, (pgno - 1) * ps)
        self.pages_read += 1
        self.bytes_read += len(data)
        return data if len(data) == ps else None

    def raw_file_page(self, pgno: int, page_size: int) -> bytes:
        """Bytes of the database file at page ``pgno`` for a trial page size."""
        return os.pread(self._fd, page_size, (pgno - 1) * page_size)

    def uncommitted_pages(self) -> Iterator[tuple[int, bytes, int]]:
        """(page number, bytes, frame index) of WAL frames SQLite would not apply."""
        if self._wal_fd is None or not self.info.wal:
            return
        for fr in self.info.wal.uncommitted:
            data = os.pread(self._wal_fd, self.page_size, fr.data_offset)
            if len(data) == self.page_size:
                yield fr.pgno, data, fr.index

    def close(self) -> None:
        for fd in (self._fd, self._wal_fd):
            if fd is not None:
                os.close(fd)
        self._fd, self._wal_fd = -1, None

    def __enter__(self) -> "DatabaseImage":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
