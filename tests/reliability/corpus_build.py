"""Pristine stores for the corruption corpus, with their ground truth.

`Pristine` is a closed, checkpointed store (1 KiB pages, 6 sessions x 100
messages) with the trees of its tables; `WalBundle` is a store copied while
open, so its newest commits live only in the ``-wal`` (the ids of each
commit and the WAL's frame layout are known); `Other` is a second, smaller
store used for the "another store copied over the file" classes.
"""
from __future__ import annotations

import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from sessiondb import SessionDB
from tests.helpers import damage
from tests.helpers.damage import TableTree, sql

WAL_HEADER, FRAME_HEADER = 32, 24


@dataclass
class Pristine:
    path: Path
    texts: dict[int, str]  # message id -> content
    messages: TableTree
    sessions: TableTree
    fts_path: Path | None = None

    @property
    def ids(self) -> set[int]:
        return set(self.texts)

    def on_leaves(self, bad: set[int]) -> set[int]:
        """Rows whose leaf page is intact (what a page carver could still read)."""
        return {r for leaf, rows in self.messages.leaves.items() if leaf not in bad
                for r in rows}


@dataclass
class WalBundle:
    directory: Path  # holds state.db, state.db-wal, state.db-shm
    texts: dict[int, str]
    checkpointed: set[int]
    commits: list[list[int]] = field(default_factory=list)  # ids per WAL commit, in order

    def commit_frames(self) -> list[int]:
        """Index of the first frame of each commit in the WAL."""
        data = (self.directory / "state.db-wal").read_bytes()
        page = struct.unpack(">I", data[8:12])[0]
        starts, frame, start = [], 0, 0
        while WAL_HEADER + (frame + 1) * (FRAME_HEADER + page) <= len(data):
            off = WAL_HEADER + frame * (FRAME_HEADER + page)
            if struct.unpack(">I", data[off + 4:off + 8])[0]:  # commit frame
                starts.append(start)
                start = frame + 1
            frame += 1
        return starts

    def frame_offset(self, frame: int) -> int:
        data = (self.directory / "state.db-wal").read_bytes()[:32]
        page = struct.unpack(">I", data[8:12])[0]
        return WAL_HEADER + frame * (FRAME_HEADER + page)


def texts_of(path: Path) -> dict[int, str]:
    return dict(sql(path, "SELECT id, content FROM messages"))


def build_pristine(directory: Path) -> Pristine:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / "pristine.db"
    damage.build_store(path, per_session=100, deterministic=True)
    fts = directory / "pristine-fts.db"
    shutil.copyfile(path, fts)
    damage.add_fts(fts)
    return Pristine(path, texts_of(path), TableTree(path, "messages"),
                    TableTree(path, "sessions"), fts)


def build_wal_bundle(directory: Path, commits: int = 8) -> WalBundle:
    """A store whose last ``commits`` commits are only in its -wal."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    src = directory / "live.db"
    damage.build_store(src, sessions=3, per_session=40, deterministic=True)
    checkpointed = set(texts_of(src))
    bundle = WalBundle(directory / "bundle", {}, checkpointed)
    with SessionDB(src, background_index=False) as db:  # only these commits in the -wal
        db._writer.execute("PRAGMA wal_autocheckpoint=0")  # keep every commit in the -wal
        for c in range(commits):
            batch = [{"role": "user", "content": f"wal commit {c} row {i} " + "z" * 150}
                     for i in range(6)]
            bundle.commits.append(db.append_messages(f"s{c % 3}", batch))
        copied = damage.copy_open_bundle(db, bundle.directory)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{copied}{suffix}").rename(bundle.directory / f"state.db{suffix}")
    bundle.texts = texts_of_bundle(bundle.directory / "state.db")
    return bundle


def texts_of_bundle(path: Path) -> dict[int, str]:
    """Read a bundle copy (the copy is ours; reading applies its -wal)."""
    scratch = path.parent.parent / "read-scratch"
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(mode=0o700)
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{path}{suffix}").exists():
            shutil.copyfile(f"{path}{suffix}", scratch / f"state.db{suffix}")
    conn = apsw.Connection(str(scratch / "state.db"))
    try:
        return dict(conn.execute("SELECT id, content FROM messages").fetchall())
    finally:
        conn.close()
        shutil.rmtree(scratch)


def build_other(directory: Path) -> tuple[Path, dict[int, str]]:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / "other.db"
    damage.build_store(path, sessions=2, per_session=30, deterministic=True)
    return path, texts_of(path)
