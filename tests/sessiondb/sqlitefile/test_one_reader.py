"""One reader of the SQLite file format.

rawfile.py (identification's reader) builds on fileformat.py, wal.py and
journal.py, the parsers the page carver uses: the structure tests fail if
rawfile.py grows a parser of its own again, or if a second definition of a
format function appears anywhere; the behaviour tests hold identification
and the carver to the same header and rows on a real store read through
its -wal, and identification to typed errors on damaged bytes.
"""
from __future__ import annotations

import ast
import random
import shutil
from pathlib import Path

import apsw
import pytest

from hstate_recovery.carve import Carver, open_source
from sessiondb import SessionDB, StoreCorrupt
from sessiondb.sqlitefile.fileformat import read_fields
from sessiondb.sqlitefile.identity import identify
from sessiondb.sqlitefile.rawfile import open_pages
from sessiondb.sqlitefile.wal import FRAME_HEADER_FIELDS, FRAME_HEADER_SIZE, scan_wal

ROOT = Path(__file__).resolve().parents[3]
SQLITEFILE = ROOT / "sessiondb" / "sqlitefile"
#: The modules that parse the format; every other module reads through them.
FORMAT_MODULES = ("fileformat.py", "wal.py", "journal.py")
#: Words in the name of a function that parses the format.
PARSER_WORDS = ("varint", "record", "cell", "checksum", "overflow", "frame", "payload",
                "serial", "journal", "wal_index", "local_size")
#: Operators that take bytes apart (`|` is left out: it also spells type unions).
BIT_OPS = (ast.LShift, ast.RShift, ast.BitAnd, ast.BitXor)
#: What rawfile.py must take from the format modules rather than spell out.
SHARED = {"fileformat": {"parse_header", "parse_page_header", "parse_cell", "decode_record",
                         "read_overflow"},
          "wal": {"index_wal", "frame_ok"},
          "journal": {"read_rollback_journal"}}
#: Format functions: each is defined once, in sessiondb/ and recovery/ together.
FORMAT_FUNCTIONS = {"read_varint", "signed64", "decode_record", "serial_type_size",
                    "parse_header", "parse_page_header", "parse_cell", "local_payload_size",
                    "read_overflow", "table_cell_keys", "wal_checksum", "frame_sums",
                    "frame_ok", "parse_wal_header", "scan_wal", "index_wal",
                    "read_rollback_journal"}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _parsing_in(path: Path) -> list[str]:
    """What in ``path`` takes bytes apart itself, one line per finding."""
    out = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import) and any(a.name == "struct" for a in node.names):
            out.append(f"line {node.lineno}: imports struct")
        elif isinstance(node, ast.ImportFrom) and node.module == "struct":
            out.append(f"line {node.lineno}: imports from struct")
        elif isinstance(node, ast.Attribute) and node.attr in ("from_bytes", "unpack",
                                                                "unpack_from", "pack"):
            out.append(f"line {node.lineno}: calls {node.attr}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, BIT_OPS):
            out.append(f"line {node.lineno}: bit operation {type(node.op).__name__}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                w in node.name.lower() for w in PARSER_WORDS):
            out.append(f"line {node.lineno}: defines {node.name}")
    return out


def test_rawfile_parses_no_format_itself() -> None:
    assert _parsing_in(SQLITEFILE / "rawfile.py") == []


@pytest.mark.parametrize("name", sorted(p.name for p in SQLITEFILE.glob("*.py")
                                        if p.name not in FORMAT_MODULES))
def test_only_the_format_modules_take_bytes_apart(name: str) -> None:
    assert _parsing_in(SQLITEFILE / name) == []


def test_rawfile_reads_through_the_shared_parsers() -> None:
    taken: dict[str, set[str]] = {}
    for node in ast.walk(_tree(SQLITEFILE / "rawfile.py")):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            taken.setdefault(node.module, set()).update(a.name for a in node.names)
    for module, names in SHARED.items():
        assert names <= taken.get(module, set()), (module, names - taken.get(module, set()))


def test_each_format_function_is_defined_once() -> None:
    where: dict[str, list[str]] = {}
    for folder in ("sessiondb", "recovery"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(_tree(path)):
                if isinstance(node, ast.FunctionDef) and node.name in FORMAT_FUNCTIONS:
                    where.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert {n: p for n, p in where.items() if len(p) > 1} == {}
    assert set(where) == FORMAT_FUNCTIONS


# -- behaviour -------------------------------------------------------------

def _live_copy(tmp_path: Path) -> Path:
    """A copy of a store of ours taken while it was open: the newest rows
    (some with overflow chains) and the schema's page only in the -wal."""
    live = tmp_path / "live" / "state.db"
    with SessionDB(live, checkpoint_pages=10**7, background_index=False) as db:
        db.create_session("s1", source="cli", title="first")
        db.create_session("s2", source="cli", title="ünïcode")
        for i in range(120):
            body = f"message {i} " + "lorem ipsum " * (i * 53 % 1400)
            db.append_message("s1" if i % 3 else "s2", {"role": "user", "content": body})
        copy = tmp_path / "copy" / "state.db"
        copy.parent.mkdir()
        shutil.copyfile(live, copy)
        shutil.copyfile(f"{live}-wal", f"{copy}-wal")
    return copy


def _columns(path: Path, table: str) -> tuple[list[str], list[tuple]]:
    """Column names and rows of ``table`` as SQLite reads them (on a copy,
    so the file under test never meets a connection)."""
    other = path.parent / "truth.db"
    shutil.copyfile(path, other)
    shutil.copyfile(f"{path}-wal", f"{other}-wal")
    conn = apsw.Connection(str(other), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        names = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        rows = conn.execute(f"SELECT rowid, * FROM {table} ORDER BY rowid").fetchall()
    finally:
        conn.close()
    return names, rows


def test_identification_and_the_carver_read_the_same_header_and_rows(tmp_path: Path) -> None:
    path = _live_copy(tmp_path)
    wal = Path(f"{path}-wal")
    assert scan_wal(wal).committed  # the rows below are read through the -wal
    with open_pages(path) as pages:
        schema = {v[1]: v[3] for _r, v in pages.table_rows(1) if v[0] == "table"}
        ours = dict(pages.table_rows(schema["messages"]))
        header, page_count, usable = pages.header, pages.page_count, pages.usable
    with open_source(path, wal) as image:
        assert (image.info.header, image.page_count, image.usable_size) == \
            (header, page_count, usable)
        carver = Carver(image)
        carver.run(False, False)
        result = carver.result()
    names, truth = _columns(path, "messages")
    carved = {o.rowid: [row[n] for n in names]
              for o, row in zip(result.origins["messages"], result.tables["messages"])}
    # the record stores NULL for the INTEGER PRIMARY KEY; the rowid is its value
    ours = {rowid: [rowid if n == "id" else v for n, v in zip(names, values)]
            for rowid, values in ours.items()}
    assert len(ours) == 120 and max(len(str(v)) for v in ours.values()) > 2 * 4096
    assert ours == carved == {r[0]: list(r[1:]) for r in truth}
    assert identify(path).kind == "hermes-state"


def test_the_wal_frame_header_table_and_the_frames_read_agree(tmp_path: Path) -> None:
    """Frames are read with one unpack; the field table documents the same layout."""
    wal = Path(f"{_live_copy(tmp_path)}-wal")
    raw = wal.read_bytes()
    frames = scan_wal(wal).committed
    assert frames
    for fr in frames:
        fields = read_fields(FRAME_HEADER_FIELDS, raw, fr.data_offset - FRAME_HEADER_SIZE)
        assert fields == {k: getattr(fr, k) for k in fields}


def test_damaged_bytes_are_a_store_corrupt_or_an_identity(tmp_path: Path) -> None:
    """Random damage to the schema's pages and the -wal: identification
    answers, or raises StoreCorrupt; no other exception escapes."""
    source = _live_copy(tmp_path)
    pristine, pristine_wal = source.read_bytes(), Path(f"{source}-wal").read_bytes()
    rng = random.Random(20240611)
    path = tmp_path / "damaged" / "state.db"
    path.parent.mkdir()
    outcomes = set()
    for _ in range(150):
        db, wal = bytearray(pristine), bytearray(pristine_wal)
        target = wal if rng.random() < 0.5 else db
        span = min(len(target), 3 * 4096 + 32)  # the header and the first pages or frames
        for _ in range(rng.randint(1, 12)):
            at = rng.randrange(span)
            target[at:at + rng.randint(1, 16)] = rng.randbytes(rng.randint(1, 16))
        path.write_bytes(bytes(db))
        Path(f"{path}-wal").write_bytes(bytes(wal))
        try:
            outcomes.add(identify(path).kind)
        except StoreCorrupt:
            outcomes.add("corrupt")
    assert "corrupt" in outcomes and len(outcomes) > 1


@pytest.mark.parametrize("field,value", [(1, b"\xff\xf0"), (7, b"\x3d")],
                         ids=["first-freeblock-out-of-place", "fragmented-over-60"])
def test_page1_free_space_fields_off_still_identify_as_ours(tmp_path: Path, field: int,
                                                            value: bytes) -> None:
    """The schema page's free-space accounting (first freeblock, fragmented
    bytes) is not read by identification, and SQLite still reads such a page:
    the store opens as it did before, and the carver's strict reader still
    calls the page damaged."""
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", source="cli")
        db.append_messages("s1", [{"role": "user", "content": "kept"}])
        db.checkpoint()
    with path.open("r+b") as f:  # page 1's b-tree header starts at byte 100
        f.seek(100 + field)
        f.write(value)
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    assert conn.execute("SELECT count(*) FROM sqlite_schema").fetchall()[0][0] > 0
    conn.close()
    assert identify(path).kind == "hermes-state"
    with SessionDB(path) as db:
        assert [m["content"] for m in db.get_messages("s1")] == ["kept"]
    from sessiondb.sqlitefile import FormatError, parse_page_header
    with pytest.raises(FormatError):
        parse_page_header(path.read_bytes()[:2048], 1, 2048)
