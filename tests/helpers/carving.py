"""Build real stores for carver tests and compute their ground truth.

Stores are written by SQLite itself through `SessionDB` (or raw apsw). The
ground truth of rows comes from SQLite reading a pristine copy; which page
holds which row comes from our parser on that pristine copy, which
`test_carver_format` checks against SQLite's own `dbstat` table.
"""
from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from sessiondb.sqlitefile.fileformat import (TABLE_INTERIOR, TABLE_LEAF, parse_cell, parse_header,
                                 parse_page_header, read_overflow)
from sessiondb import SessionDB


def init_file(path: Path, page_size: int = 4096, auto_vacuum: bool | int = False) -> None:
    """Create an empty database with a chosen page size and auto_vacuum mode
    (0 none, 1 or True full, 2 incremental) before SessionDB opens it."""
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA page_size={page_size}; PRAGMA auto_vacuum={int(auto_vacuum)}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    os.chmod(path, 0o600)


def message(i: int, big: int = 0) -> dict[str, Any]:
    """A message whose content size cycles, so some rows overflow."""
    roles = ("user", "assistant", "tool", "system")
    text = f"message {i} " + ("lorem ipsum " * ((i * 37) % 50 if not big else big))
    m: dict[str, Any] = {"role": roles[i % 4], "content": text, "timestamp": 1.7e9 + i}
    if i % 4 == 1:
        m["tool_calls"] = [{"id": f"call_{i}", "type": "function",
                            "function": {"name": "f", "arguments": "{}"}}]
    if i % 4 == 2:
        m["tool_call_id"] = f"call_{i - 1}"
    return m


def build_store(path: Path, *, sessions: int = 4, per_session: int = 60, page_size: int = 4096,
                auto_vacuum: bool | int = False, delete_sessions: int = 0,
                big_every: int = 0, before_delete: Path | None = None) -> list[str]:
    """A store with ``sessions`` x ``per_session`` messages; the first
    ``delete_sessions`` sessions are deleted afterwards (rows on freelist pages);
    ``before_delete`` gets a checkpointed copy of the file from before that."""
    init_file(path, page_size, auto_vacuum)
    ids = []
    # Indexing at fixed points (not by the background thread) keeps the layout
    # the same from build to build; deleted sessions pass through the change
    # log, which the close applies, so their pages end up free.
    with SessionDB(path, background_index=False) as db:
        for s in range(sessions):
            sid = db.create_session(f"20250101_0000{s:02d}_abcd{s:04d}", source="test",
                                    model="m", title=f"title {s}")
            batch = [message(s * 1000 + i, big=(1500 if big_every and i % big_every == 0
                                                else 0)) for i in range(per_session)]
            if s < delete_sessions:
                # A delete logs each row's indexed text (the change log), and the
                # log reuses the pages the delete frees: rows to be deleted carry
                # more than their text, so some of their pages stay free.
                for m in batch:
                    m["pad"] = "p" * 200
            db.append_messages(sid, batch)
            ids.append(sid)
        db.catch_up_index()
        db.checkpoint()
        if before_delete is not None:
            shutil.copyfile(path, before_delete)
        for sid in ids[:delete_sessions]:
            db.delete_session(sid)
        db.catch_up_index()
        db.checkpoint()
    return ids


@dataclass
class Truth:
    """What SQLite reads from a pristine copy, and where each row lives."""

    rows: dict[str, dict[Any, dict[str, Any]]] = field(default_factory=dict)
    leaf_of: dict[str, dict[Any, int]] = field(default_factory=dict)
    overflow_of: dict[str, dict[Any, list[int]]] = field(default_factory=dict)
    roots: dict[str, int] = field(default_factory=dict)
    interior: dict[str, list[int]] = field(default_factory=dict)
    page_size: int = 0


TABLE_KEYS = {"messages": "id", "sessions": "id", "state_meta": "key",
              "migrations": "name", "leases": "session_id"}


def read_truth(path: Path) -> Truth:
    """Rows by key per table (SQLite), and pages per row (our parser)."""
    scratch = path.with_name(path.name + ".truth")
    shutil.copyfile(path, scratch)
    wal = Path(f"{path}-wal")
    if wal.exists():
        shutil.copyfile(wal, f"{scratch}-wal")
    truth = Truth()
    conn = apsw.Connection(str(scratch))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        truth.page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        for name, root in conn.execute("SELECT name, rootpage FROM sqlite_schema "
                                       "WHERE type='table'").fetchall():
            if name not in TABLE_KEYS:
                continue
            truth.roots[name] = root
            cols = ["_rowid_"] + [c[1] for c in conn.execute(f"PRAGMA table_info({name})")]
            truth.rows[name] = {}
            for r in conn.execute(f"SELECT rowid AS _rowid_, * FROM {name}"):
                d = dict(zip(cols, r))
                truth.rows[name][d.pop("_rowid_")] = d
    finally:
        conn.close()
    _map_pages(scratch, truth)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{scratch}{suffix}").unlink(missing_ok=True)
    return truth


def _map_pages(path: Path, truth: Truth) -> None:
    data = path.read_bytes()
    hdr = parse_header(data[:100])
    ps, usable = hdr.page_size, hdr.usable_size
    count = len(data) // ps

    def page(n: int) -> bytes | None:
        return data[(n - 1) * ps:n * ps] if 1 <= n <= count else None

    for name, root in truth.roots.items():
        truth.leaf_of[name], truth.overflow_of[name], truth.interior[name] = {}, {}, []
        stack = [root]
        while stack:
            n = stack.pop()
            buf = page(n)
            pg = parse_page_header(buf, n, usable)
            cells = [parse_cell(buf, pg, i, usable) for i in range(pg.cell_count)]
            if pg.page_type == TABLE_INTERIOR:
                truth.interior[name].append(n)
                stack.extend([pg.right_child] + [c.left_child for c in cells])
                continue
            assert pg.page_type == TABLE_LEAF
            for c in cells:
                truth.leaf_of[name][c.rowid] = n
                if c.overflow_page:
                    ov = read_overflow(c, page, usable, count)
                    assert ov.error is None
                    truth.overflow_of[name][c.rowid] = ov.pages


def expected_after_damage(truth: Truth, table: str, damaged: set[int]) -> tuple[set, set]:
    """(rowids whose leaf and overflow pages are intact, rowids whose leaf is
    intact but whose overflow chain crosses a damaged page)."""
    whole, partial = set(), set()
    for rowid, leaf in truth.leaf_of[table].items():
        if leaf in damaged:
            continue
        if set(truth.overflow_of[table].get(rowid, ())) & damaged:
            partial.add(rowid)
        else:
            whole.add(rowid)
    return whole, partial


def write_page(path: Path, pgno: int, page_size: int, data: bytes) -> None:
    assert len(data) == page_size
    with open(path, "r+b") as f:
        f.seek((pgno - 1) * page_size)
        f.write(data)


def randomize_page(path: Path, pgno: int, page_size: int, rng: random.Random) -> None:
    write_page(path, pgno, page_size, bytes(rng.getrandbits(8) for _ in range(page_size)))


def zero_page(path: Path, pgno: int, page_size: int) -> None:
    write_page(path, pgno, page_size, bytes(page_size))


def patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def carved_by_key(result: Any, table: str) -> dict[Any, dict[str, Any]]:
    """Carved rows of a table keyed by rowid (from their origins)."""
    return {o.rowid: row for row, o in result.rows(table)}
