"""Build real stores and damage real pages, with the ground truth to compare.

`build_store` makes a store through `SessionDB` with a small page size (so
the messages table has interior pages) and returns what it holds.
`TableTree` walks a table's b-tree straight from the file bytes, so a test
knows which rowids sit on which leaf and which rows stay reachable when
given pages are destroyed. Damage is done by writing bytes into the file.
"""
from __future__ import annotations

import hashlib
import os
import random
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from sessiondb import SessionDB

PAGE_SIZE = 1024


@dataclass
class Truth:
    """What a freshly built store holds."""

    path: Path
    sessions: list[str]
    messages: dict[int, str] = field(default_factory=dict)  # rowid -> session id
    texts: list[str] = field(default_factory=list)


def message_text(session: int, i: int) -> str:
    # ~200 bytes per message: a few rows per 1 KiB leaf, no overflow pages.
    return f"session {session} message {i} " + "lorem ipsum dolor sit amet " * 6


def build_store(path: Path, *, sessions: int = 6, per_session: int = 50,
                page_size: int = PAGE_SIZE, deterministic: bool = False) -> Truth:
    """A closed, checkpointed store (no -wal left) with known contents.

    ``deterministic`` fixes session timestamps and message uids, so every
    build has the same page layout (random uids reorder the uid index's
    page splits, and with them where every later page lands)."""
    pre = apsw.Connection(str(path))
    pre.execute(f"PRAGMA page_size={page_size}; CREATE TABLE t(x); DROP TABLE t;")
    pre.close()
    os.chmod(path, 0o600)
    truth = Truth(path, [])
    clock = {"clock": lambda: 1_700_000_000.25} if deterministic else {}
    # Indexed after each session, not by the background thread: its batches
    # would land at moments that differ between builds, and the layout with them.
    with SessionDB(path, background_index=False, **clock) as db:
        for s in range(sessions):
            sid = db.create_session(f"s{s}", source="test", title=f"session {s}")
            truth.sessions.append(sid)
            batch = [{"role": "user" if i % 2 else "assistant", "content": message_text(s, i),
                      "timestamp": 1_700_000_000 + s * 1000 + i} for i in range(per_session)]
            if deterministic:
                for i, m in enumerate(batch):
                    m["_db_uid"] = f"{s:04d}-{i:06d}"
            for rid in db.append_messages(sid, batch):
                truth.messages[rid] = sid
            db.catch_up_index()  # index pages between the sessions' pages, as users' files
            truth.texts += [m["content"] for m in batch]
    return truth


def add_fts(path: Path) -> None:
    """Give the store an external-content fts5 index over messages, unless
    the schema already has one (the search migration creates it)."""
    conn = apsw.Connection(str(path))
    try:
        has = conn.execute("SELECT 1 FROM sqlite_master WHERE name='messages_fts'").fetchone()
        if not has:
            conn.execute("CREATE VIRTUAL TABLE messages_fts USING fts5(content, "
                         "content='messages', content_rowid='id');"
                         "INSERT INTO messages_fts(messages_fts) VALUES('rebuild');")
    finally:
        conn.close()


def sql(path: Path, statement: str, args: tuple = ()) -> list[tuple]:
    """Run SQL on a test-built file nobody else has open (foreign keys off)."""
    conn = apsw.Connection(str(path))
    try:
        return conn.execute(statement, args).fetchall()
    finally:
        conn.close()


def sql_read(path: Path, statement: str, args: tuple = ()) -> list[tuple]:
    """Run a query on a file through a read-only connection."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute(statement, args).fetchall()
    finally:
        conn.close()


def private_copy(path: Path, tmp_path: Path) -> Path:
    """A copy of the store at ``path`` in a private directory, for one test to damage."""
    src = tmp_path / "src"
    src.mkdir(mode=0o700)
    shutil.copyfile(path, src / "state.db")
    return src / "state.db"


def message_ids(path: Path) -> set[int]:
    return {r[0] for r in sql(path, "SELECT id FROM messages")}


def root_page(path: Path, name: str) -> int:
    return sql(path, "SELECT rootpage FROM sqlite_master WHERE name = ?", (name,))[0][0]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for i in range(9):
        b = data[pos + i]
        if i == 8:
            return (value << 8) | b, pos + 9
        value = (value << 7) | (b & 0x7F)
        if b < 0x80:
            return value, pos + i + 1
    raise AssertionError("unreachable")


class TableTree:
    """A table b-tree read from the file: interior pages and leaf rowids."""

    def __init__(self, path: Path, table: str) -> None:
        self.data = Path(path).read_bytes()
        self.page_size = struct.unpack(">H", self.data[16:18])[0] or 65536
        self.root = root_page(path, table)
        self.interior: list[int] = []
        self.leaves: dict[int, list[int]] = {}
        self.parent: dict[int, int] = {}
        self._walk(self.root)

    def _page(self, pgno: int) -> tuple[bytes, int]:
        start = (pgno - 1) * self.page_size
        return self.data[start:start + self.page_size], 100 if pgno == 1 else 0

    def _walk(self, pgno: int) -> None:
        page, off = self._page(pgno)
        kind, ncells = page[off], struct.unpack(">H", page[off + 3:off + 5])[0]
        if kind == 13:
            ptrs = struct.unpack(f">{ncells}H", page[off + 8:off + 8 + 2 * ncells])
            rowids = []
            for p in ptrs:
                _size, pos = _varint(page, p)
                rowids.append(_varint(page, pos)[0])
            self.leaves[pgno] = rowids
            return
        assert kind == 5, f"page {pgno} is not a table b-tree page"
        self.interior.append(pgno)
        ptrs = struct.unpack(f">{ncells}H", page[off + 12:off + 12 + 2 * ncells])
        children = [struct.unpack(">I", page[p:p + 4])[0] for p in ptrs]
        children.append(struct.unpack(">I", page[off + 8:off + 12])[0])
        for child in children:
            self.parent[child] = pgno
            self._walk(child)

    def rowids(self) -> set[int]:
        return {r for rows in self.leaves.values() for r in rows}

    def reachable(self, bad: set[int]) -> set[int]:
        """Rowids whose leaf and every page above it are undamaged."""
        out = set()
        for leaf, rows in self.leaves.items():
            page, ok = leaf, True
            while True:
                if page in bad:
                    ok = False
                    break
                if page == self.root:
                    break
                page = self.parent[page]
            if ok:
                out.update(rows)
        return out

    def middle_leaf(self) -> int:
        leaves = sorted(self.leaves, key=lambda p: self.leaves[p][0])
        return leaves[len(leaves) // 2]

    def middle_interior(self) -> int:
        """A non-root interior page (needs a tree at least three levels deep)."""
        inner = [p for p in self.interior if p != self.root]
        assert inner, "the tree has no interior page below the root"
        return inner[len(inner) // 2]


def page_count(path: Path) -> int:
    return os.stat(path).st_size // PAGE_SIZE


def write_at(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def smash_page(path: Path, pgno: int, page_size: int = PAGE_SIZE) -> None:
    """Overwrite a whole page with a pattern SQLite cannot take for a b-tree page."""
    write_at(path, (pgno - 1) * page_size, b"\xde\xad\xbe\xef" * (page_size // 4))


def bundle_hashes(path: Path) -> dict[str, str]:
    out = {}
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = Path(f"{path}{suffix}")
        if p.exists():
            out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def copy_open_bundle(db: SessionDB, dest: Path, *, with_shm: bool = True) -> Path:
    """Copy a live store's files as a crash would leave them (WAL not checkpointed)."""
    dest.mkdir(mode=0o700, exist_ok=True)
    target = dest / db.path.name
    for suffix in ("", "-wal") + (("-shm",) if with_shm else ()):
        src = Path(f"{db.path}{suffix}")
        if src.exists():
            shutil.copyfile(src, Path(f"{target}{suffix}"))
    return target


def pages_of(path: Path, name: str, pagetype: str | None = None) -> list[int]:
    """Pages of a table or index, from SQLite's dbstat table (read before damage)."""
    rows = sql(path, "SELECT pageno, pagetype FROM dbstat WHERE name = ? ORDER BY pageno",
               (name,))
    return [p for p, kind in rows if pagetype is None or kind == pagetype]


def smash_middle_leaves(db: Path, table: str, count: int = 1) -> None:
    """Random bytes (seed 3) over ``count`` leaf pages of ``table`` from its
    middle on, at the file's page size; the WAL is checkpointed into the
    file first, so the damage is what every reader sees."""
    conn = apsw.Connection(str(db))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        leaves = [r[0] for r in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno",
            (table,))]
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    finally:
        conn.close()
    rng = random.Random(3)
    middle = len(leaves) // 2
    with open(db, "r+b") as f:
        for page in leaves[middle:middle + count]:
            f.seek((page - 1) * size)
            f.write(rng.randbytes(size))
