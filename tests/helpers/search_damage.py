"""Damaging the search index's shadow tables in a real file on disk."""
from __future__ import annotations

import os
import random
from pathlib import Path

import apsw


def _checkpoint_and_read(path: Path, sql: str, args: tuple = ()) -> list[tuple]:
    """Move every committed page into the main file, then read; the caller
    must have closed every other connection."""
    conn = apsw.Connection(str(path))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return list(conn.execute(sql, args))
    finally:
        conn.close()


def junk_fts_blocks(path: Path, *, table: str = "messages_fts", leaves_only: bool = False,
                    seed: int = 7) -> int:
    """Overwrite the bytes of ``<table>_data`` blocks in the file with junk.

    Each block (its first 32 bytes if longer than 256) is located in the file
    and replaced by random bytes, so the b-tree stays intact and FTS5 itself finds the damage. With
    ``leaves_only`` the structure record (id 10) and averages (id 1) are
    spared. Returns how many blocks were damaged.
    """
    where = " WHERE id > 10" if leaves_only else ""
    blocks = _checkpoint_and_read(path, f"SELECT id, block FROM {table}_data{where}")
    data = bytearray(path.read_bytes())
    rng = random.Random(seed)
    damaged = 0
    for _id, block in blocks:
        needle = bytes(block if len(block) <= 256 else block[:32])
        spots = _find_all(data, needle)
        if len(needle) < 16 and len(spots) != 1:
            continue  # too short to tell apart from other bytes: leave it
        for at in spots:  # stale copies in free space too, so no old copy survives
            data[at:at + len(needle)] = bytes(rng.randrange(256) for _ in needle)
        damaged += bool(spots)
    _write_in_place(path, bytes(data))
    return damaged


def junk_pages(path: Path, table: str, *, seed: int = 11) -> list[int]:
    """Overwrite every b-tree page of ``table`` with random bytes."""
    rows = _checkpoint_and_read(path, "SELECT pageno FROM dbstat WHERE name = ?", (table,))
    (page_size,) = _checkpoint_and_read(path, "PRAGMA page_size")[0]
    rng = random.Random(seed)
    with open(path, "r+b") as f:
        for (pageno,) in rows:
            f.seek((pageno - 1) * page_size)
            f.write(bytes(rng.randrange(256) for _ in range(page_size)))
        f.flush()
        os.fsync(f.fileno())
    return [r[0] for r in rows]


def _find_all(data: bytearray, needle: bytes) -> list[int]:
    spots, at = [], data.find(needle)
    while at >= 0:
        spots.append(at)
        at = data.find(needle, at + 1)
    return spots


def _write_in_place(path: Path, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
