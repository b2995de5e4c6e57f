"""The file-format parser against files SQLite itself wrote.

Varints, every serial type, overflow chains, headers, freelists, pointer
maps, and whole stores at every legal page size with auto_vacuum on and off.
"""
from __future__ import annotations

import random
import shutil
from pathlib import Path

import apsw
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hstate_recovery.carve.carver import carve
from sessiondb.sqlitefile.fileformat import (LEGAL_PAGE_SIZES, FormatError, decode_record, encode_varint,
                                 is_ptrmap_page, parse_cell, parse_header, parse_page_header,
                                 parse_ptrmap, read_overflow, read_varint, signed64,
                                 walk_freelist)
from tests.helpers.carving import (build_store, carved_by_key, randomize_page, read_truth,
                                   zero_page)

VARINTS = [
    (0, b"\x00"), (127, b"\x7f"), (128, b"\x81\x00"), (16383, b"\xff\x7f"),
    (16384, b"\x81\x80\x00"), ((1 << 56) - 1, b"\xff" * 7 + b"\x7f"),
    (1 << 56, b"\x80\xc0" + b"\x80" * 6 + b"\x00"),
    ((1 << 63) - 1, b"\xbf" + b"\xff" * 8), (-1, b"\xff" * 9),
    (-(1 << 63), b"\xc0" + b"\x80" * 7 + b"\x00"),
]


@pytest.mark.parametrize("value,encoded", VARINTS)
def test_varint_edge_cases(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    raw, end = read_varint(encoded + b"junk", 0)
    assert signed64(raw) == value and end == len(encoded)


def test_truncated_varint_is_a_format_error() -> None:
    with pytest.raises(FormatError):
        read_varint(b"\x81\x80", 0)
    with pytest.raises(FormatError):
        read_varint(b"\xff" * 9, 0, end=8)


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_varint_round_trip(value: int) -> None:
    enc = encode_varint(value)
    assert 1 <= len(enc) <= 9
    raw, end = read_varint(enc, 0)
    assert signed64(raw) == value and end == len(enc)


# value, serial type SQLite must choose for it
SERIAL_CASES = [
    (None, 0), (0, 8), (1, 9), (100, 1), (-100, 1), (300, 2), (-300, 2), (70000, 3),
    (-70000, 3), (2**31 - 1, 4), (-(2**31), 4), (2**40, 5), (-(2**40), 5), (2**60, 6),
    (-(2**63), 6), (1.5, 7), (-0.25, 7), (b"", 12), (b"\x00\xff", 16), ("", 13),
    ("héllo", 13 + 2 * len("héllo".encode())),
]


def _one_table(path: Path, page_size: int, values: list) -> int:
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA page_size={page_size}; CREATE TABLE t(v)")
    conn.execute("BEGIN")
    for v in values:
        conn.execute("INSERT INTO t(v) VALUES (?)", (v,))
    conn.execute("COMMIT")
    root = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name='t'").fetchone()[0]
    conn.close()
    return root


def _leaf_records(path: Path, root: int) -> list:
    data = path.read_bytes()
    hdr = parse_header(data[:100])
    ps = hdr.page_size
    page_of = lambda n: data[(n - 1) * ps:n * ps]  # noqa: E731
    page = parse_page_header(page_of(root), root, ps)
    out = []
    for i in range(page.cell_count):
        cell = parse_cell(page_of(root), page, i, ps)
        ov = read_overflow(cell, page_of, ps, len(data) // ps)
        out.append(decode_record(ov.payload, cell.payload_size))
    return out


def test_every_serial_type(tmp_path: Path) -> None:
    path = tmp_path / "types.db"
    root = _one_table(path, 4096, [v for v, _ in SERIAL_CASES])
    records = _leaf_records(path, root)
    assert [r.serial_types for r in records] == [[t] for _, t in SERIAL_CASES]
    assert [r.values[0] for r in records] == [v for v, _ in SERIAL_CASES]
    carved = carve(path)
    assert [row["v"] for row in carved.tables["t"]] == [v for v, _ in SERIAL_CASES]


def test_reserved_serial_types_are_rejected() -> None:
    with pytest.raises(FormatError):
        decode_record(b"\x02\x0a")
    with pytest.raises(FormatError):
        decode_record(b"\x05\x01")  # header longer than the payload


@pytest.mark.parametrize("size,pages", [(1500, 1), (30000, 29)])
def test_overflow_chains(tmp_path: Path, size: int, pages: int) -> None:
    path = tmp_path / "ov.db"
    rng = random.Random(size)
    blob = bytes(rng.getrandbits(8) for _ in range(size))
    root = _one_table(path, 1024, [blob, b"small", blob[::-1]])
    conn = apsw.Connection(str(path))
    (overflow,) = conn.execute("SELECT count(*) FROM dbstat WHERE name='t' "
                               "AND pagetype='overflow'").fetchone()
    conn.close()
    assert overflow == 2 * pages
    data = path.read_bytes()
    page = parse_page_header(data[(root - 1) * 1024:root * 1024], root, 1024)
    cell = parse_cell(data[(root - 1) * 1024:root * 1024], page, 0, 1024)
    ov = read_overflow(cell, lambda n: data[(n - 1) * 1024:n * 1024], 1024, len(data) // 1024)
    assert ov.error is None and len(ov.pages) == pages and ov.payload[-size:] == blob
    assert [r["v"] for r in carve(path).tables["t"]] == [blob, b"small", blob[::-1]]


@pytest.fixture(scope="module")
def deleted_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fmt") / "state.db"
    build_store(path, sessions=4, per_session=120, delete_sessions=1, big_every=9)
    return path


def test_header_and_freelist_match_sqlite(deleted_store: Path) -> None:
    data = deleted_store.read_bytes()
    hdr = parse_header(data[:100])
    conn = apsw.Connection(str(deleted_store), flags=apsw.SQLITE_OPEN_READONLY)
    pragma = lambda p: conn.execute(f"PRAGMA {p}").fetchone()[0]  # noqa: E731
    try:
        assert hdr.problems() == []
        assert hdr.page_size == pragma("page_size")
        assert hdr.page_count == pragma("page_count") == len(data) // hdr.page_size
        assert hdr.freelist_count == pragma("freelist_count") > 0
        assert hdr.schema_cookie == pragma("schema_version")
        assert hdr.encoding == "utf-8" and not hdr.auto_vacuum
    finally:
        conn.close()
    ps = hdr.page_size
    fl = walk_freelist(hdr.first_freelist_trunk, lambda n: data[(n - 1) * ps:n * ps], ps,
                       hdr.page_count)
    assert fl.errors == [] and len(fl.pages) == hdr.freelist_count


def test_tree_walk_matches_dbstat(deleted_store: Path) -> None:
    truth = read_truth(deleted_store)
    conn = apsw.Connection(str(deleted_store), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        for table in ("messages", "sessions"):
            rows = conn.execute("SELECT pageno, pagetype, ncell FROM dbstat WHERE name=?",
                                (table,)).fetchall()
            leaves = {p: n for p, t, n in rows if t == "leaf"}
            ours: dict[int, int] = {}
            for leaf in truth.leaf_of[table].values():
                ours[leaf] = ours.get(leaf, 0) + 1
            assert ours == leaves
            assert {p for p, t, _ in rows if t == "internal"} == set(truth.interior[table])
            overflow = {p for p, t, _ in rows if t == "overflow"}
            assert overflow == {p for ps in truth.overflow_of[table].values() for p in ps}
    finally:
        conn.close()


@pytest.mark.parametrize("page_size", LEGAL_PAGE_SIZES)
@pytest.mark.parametrize("auto_vacuum", [False, True], ids=["plain", "autovacuum"])
def test_every_page_size_and_auto_vacuum(tmp_path: Path, page_size: int,
                                         auto_vacuum: bool) -> None:
    path = tmp_path / "state.db"
    ids = build_store(path, sessions=3, per_session=25, page_size=page_size,
                      auto_vacuum=auto_vacuum, delete_sessions=1, big_every=6)
    truth = read_truth(path)
    result = carve(path)
    for table, rows in truth.rows.items():
        assert carved_by_key(result, table) == rows, table
    assert result.lost_and_found == [] and result.stats.bad_pages == {}
    assert ids[0] not in {m["session_id"] for m in result.tables["messages"]}
    # destroy every interior page of messages: orphaned leaves are found again
    damaged = tmp_path / "damaged.db"
    shutil.copyfile(path, damaged)
    for pgno in truth.interior["messages"]:
        randomize_page(damaged, pgno, page_size, random.Random(pgno))
    again = carve(damaged)
    assert carved_by_key(again, "messages") == truth.rows["messages"]
    assert set(again.stats.bad_pages) == set(truth.interior["messages"])
    # and with page 1 zeroed too: the page size is found by probing
    zero_page(damaged, 1, page_size)
    blind = carve(damaged)
    assert (blind.stats.page_size, blind.stats.page_size_source) == (page_size, "probe")
    assert carved_by_key(blind, "messages") == truth.rows["messages"]
    assert carved_by_key(blind, "sessions") == truth.rows["sessions"]


def test_pointer_map_matches_dbstat(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_store(path, sessions=2, per_session=40, page_size=1024, auto_vacuum=True,
                big_every=5)
    data = path.read_bytes()
    hdr = parse_header(data[:100])
    assert hdr.auto_vacuum
    n, u = hdr.page_count, hdr.usable_size
    entries: dict[int, tuple[int, int]] = {}
    for pgno in range(2, n + 1):
        if is_ptrmap_page(pgno, u):
            entries.update(parse_ptrmap(data[(pgno - 1) * 1024:pgno * 1024], pgno, u, n))
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute("SELECT name, path, pageno, pagetype FROM dbstat "
                            "WHERE pageno > 1").fetchall()
    finally:
        conn.close()
    assert rows
    for _name, p, pgno, ptype in rows:
        kind = entries[pgno][0]
        if p == "/":
            assert kind == 1, (p, pgno)
        elif ptype == "overflow":
            assert kind in (3, 4), (p, pgno)
        else:
            assert kind == 5, (p, pgno)


@pytest.mark.parametrize("encoding", ["UTF-16le", "UTF-16be"])
def test_utf16_databases(tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "u16.db"
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA encoding='{encoding}'; CREATE TABLE t(v TEXT)")
    words = ["héllo", "日本語", "", "x" * 3000]
    conn.executemany("INSERT INTO t(v) VALUES (?)", [(w,) for w in words])
    conn.close()
    assert parse_header(path.read_bytes()[:100]).encoding == encoding.lower().replace(
        "utf-16", "utf-16-")
    assert [r["v"] for r in carve(path).tables["t"]] == words
