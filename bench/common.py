"""Shared pieces of the side-by-side benchmarks: the message shape, the
machine record, the floor (raw apsw into our own schema) and small stats.

The floor's schema is built by running our own migrations
(`sessiondb.engine.migrations.MIGRATIONS`) on a raw apsw connection, so it always
has exactly the store's tables, indexes and triggers (the FTS sync triggers
included, once the search migration is in the tuple).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import apsw  # noqa: E402

from sessiondb.engine import migrations
from sessiondb.base import policy  # noqa: E402
from sessiondb.rows.codec import ROLE_NAMES  # noqa: E402

SYNC_MODES = ("NORMAL", "FULL")
LOREM = "lorem ipsum dolor sit amet " * 8


def message(i: int) -> dict[str, Any]:
    """A realistic small turn (~230 characters of text); replies carry a
    finish_reason, so half the rows have an extra key to keep and decode."""
    if i % 2:
        return {"role": "assistant", "content": f"message {i}: " + LOREM, "finish_reason": "stop"}
    return {"role": "user", "content": f"message {i}: " + LOREM}


# The prose corpus: user and assistant turns of 8-160 words drawn by a Zipf
# law from a fixed vocabulary (~344 characters a message on average), in a
# session with a generated 24-character id, as a real store holds them.
PROSE_SESSION = "20260101_120000_5eed5eed"
_PROSE_SYLLABLES = [c + v for c in "bcdfghklmnprstvw" for v in "aeiou"]


def _prose_vocabulary() -> tuple[list[str], list[float]]:
    import itertools
    import random
    rng = random.Random(344)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < 8_000:
        w = "".join(rng.choice(_PROSE_SYLLABLES) for _ in range(rng.choice((1, 1, 1, 2, 2, 3))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words, list(itertools.accumulate(1.0 / r ** 1.15 for r in range(1, len(words) + 1)))


_PROSE: tuple[list[str], list[float]] | None = None


def prose_message(i: int) -> dict[str, Any]:
    """A turn of the prose corpus; deterministic in ``i``. Replies carry a
    finish_reason, as in `message`."""
    import bisect
    import random
    global _PROSE
    if _PROSE is None:
        _PROSE = _prose_vocabulary()
    words, cum = _PROSE
    rng = random.Random(i)
    n = int(rng.triangular(8, 160, 39))
    text = " ".join(words[bisect.bisect_left(cum, rng.random() * cum[-1])] for _ in range(n))
    text = text[0].upper() + text[1:] + "."
    if i % 2:
        return {"role": "assistant", "content": text, "finish_reason": "stop"}
    return {"role": "user", "content": text}


_SCALE: list[dict[str, Any]] = []
_SCALE_TEXTS: Any = None


def scale_message(i: int) -> dict[str, Any]:
    """Message ``i`` of the scale benchmark's corpus (bench/scale_data.py:
    200 B - 4 KB texts, a tool call and its result every fifth turn, every
    message with its timestamp), generated in order and kept."""
    global _SCALE_TEXTS
    import random
    from scale_data import Texts, _messages
    if _SCALE_TEXTS is None:
        _SCALE_TEXTS = Texts(random.Random(7))
    while len(_SCALE) <= i:
        _SCALE.extend(_messages(_SCALE_TEXTS, 1000, len(_SCALE), 1.7e9))
    return dict(_SCALE[i])


def real_message(i: int) -> dict[str, Any]:
    """Message ``i`` of real text from this machine's files (bench/real_text.py)."""
    from real_text import real_message as real
    return real(i)


CORPORA = {"b1": message, "prose": prose_message, "real": real_message, "scale": scale_message}


def page_size_option(ap: Any) -> None:
    """``--page-size N``: our stores and the floor's created with that page size."""
    ap.add_argument("--page-size", type=int,
                    help="create our stores and the floor's with this page size (default: the store's)")


def apply_page_size(size: int | None) -> None:
    if size:
        policy.PAGE_SIZE = size  # read when a new file is created


def store_bytes(path: Path) -> int:
    """Bytes on disk of a database and its -wal/-journal sidecars."""
    total = 0
    for suffix in ("", "-wal", "-journal", "-shm"):
        p = Path(str(path) + suffix)
        if p.exists() and suffix != "-shm":  # -shm is an index, not data
            total += p.stat().st_size
    return total


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), nearest-rank, of a non-empty list."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


# -- machine record ----------------------------------------------------------

def fsync_probe(samples: int = 200) -> float:
    """Median seconds of write + fsync of 4 KiB in the temp dir."""
    fd, name = tempfile.mkstemp(prefix="hermes-fsync-")
    block = os.urandom(4096)
    times = []
    try:
        for _ in range(samples):
            t0 = time.perf_counter()
            os.pwrite(fd, block, 0)
            os.fsync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(name)
    return median(times)


def machine() -> dict[str, Any]:
    import sqlite3  # the peers' SQLite: stdlib, only asked for its version
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return {
        "cpus": os.cpu_count(),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "sqlite_ours": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
        "sqlite_peers": sqlite3.sqlite_version,
        "fsync_4k_median_us": round(fsync_probe() * 1e6, 1),
        "tempdir": tempfile.gettempdir(),
        "loadavg_1m": round(load, 2),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_line(m: dict[str, Any]) -> str:
    return (f"machine: {m['cpus']} CPU ({m['cpu']}), Python {m['python']}, "
            f"SQLite ours {m['sqlite_ours']} (apsw {m['apsw']}), peers {m['sqlite_peers']} "
            f"(stdlib sqlite3), fsync 4 KiB median {m['fsync_4k_median_us']} us, "
            f"load {m['loadavg_1m']}, temp dir {m['tempdir']}")


# -- the floor: raw apsw into the same schema -------------------------------

def floor_connection(path: Path, sync: str) -> apsw.Connection:
    """A raw apsw connection to ``path`` with our schema, WAL and ``sync``.

    The schema comes from running our migrations, so it has the store's
    indexes and triggers; nothing else of the store (no policy module, no
    guard, no codec) is involved.
    """
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA page_size={policy.PAGE_SIZE}")  # the store's page size
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={sync}")
    conn.execute("PRAGMA foreign_keys=ON")
    if migrations.pending(conn):
        migrations.apply_pending(conn, lambda: conn.execute("BEGIN IMMEDIATE"))
    return conn


_FLOOR_INSERT = (
    "INSERT INTO messages(session_id, uid, position, role, content_kind, content,"
    " timestamp, meta, fingerprint) VALUES (?, ?, ?, ?, 'text', ?, ?, ?, '')")


class Floor:
    """Raw inserts: one INSERT per row, the commit the caller asks for.

    It writes what a row needs (a random uid like ours, the position, the
    extra keys as JSON) and nothing else: no validation, no fingerprint, no
    session counters, no containment checks."""

    def __init__(self, path: Path, sync: str, session_id: str = "floor") -> None:
        self.conn = floor_connection(path, sync)
        self.sid = session_id
        self.position = 0
        self.conn.execute("INSERT OR IGNORE INTO sessions(id, source, started_at, updated_at)"
                          " VALUES (?, 'bench', ?, ?)", (session_id, time.time(), time.time()))

    def append(self, batch: list[dict[str, Any]]) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        for m in batch:
            self.position += 1
            extra = {k: v for k, v in m.items() if k not in ("role", "content")}
            # the uid as its 16 bytes, as the store keeps a generated one (m010)
            conn.execute(_FLOOR_INSERT, (self.sid, os.urandom(16), self.position, m["role"],
                                         m["content"], time.time(), json.dumps(extra)))
        conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


_FLOOR_COLUMNS = "role, content_kind, content, meta, finish_reason"
_FLOOR_LOAD = (f"SELECT {_FLOOR_COLUMNS} FROM messages WHERE session_id = ?"
               " AND state = 'active' ORDER BY position, id")
_FLOOR_TAIL = (f"SELECT {_FLOOR_COLUMNS} FROM messages WHERE session_id = ?"
               " AND state = 'active' ORDER BY position DESC, id DESC LIMIT ?")


def floor_rows(rows: Any) -> list[dict[str, Any]]:
    """The floor's decode: a dict per row, JSON content and meta parsed. It
    reads the store's rows too (B3): a coded role (m012), an empty meta
    stored as '' and finish_reason in its own column (m010)."""
    out = []
    for role, kind, content, meta, finish in rows:
        m = {"role": ROLE_NAMES.get(role, role),
             "content": json.loads(content) if kind == "json" else content}
        if meta:
            m.update(json.loads(meta))
        if finish is not None:
            m["finish_reason"] = finish
        out.append(m)
    return out


def floor_load(conn: apsw.Connection, sid: str, tail: int | None = None) -> list[dict]:
    if tail is None:
        return floor_rows(conn.execute(_FLOOR_LOAD, (sid,)))
    return floor_rows(reversed(list(conn.execute(_FLOOR_TAIL, (sid, tail)))))
