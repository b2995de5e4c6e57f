"""Salvage benchmark: our pure-Python carver against SQLite's `.recover`.

Builds a store of N messages through SessionDB, damages copies of it in
several ways, and for each damage class counts the messages each tool
brings back *correctly attributed* (every column, session id included,
equal to what SQLite read from the pristine file), plus wall times.

`.recover` needs a sqlite3 shell compiled with SQLITE_ENABLE_DBPAGE_VTAB,
which neither Debian's sqlite3 nor apsw's library has. Pass one with
``--sqlite3 PATH``, or let this script build it into bench/.build/ (git-
ignored) from the SQLite amalgamation shipped inside the npm package
``sqlite3`` (needs npm and a C compiler; about a minute).

Usage: python bench/salvage_carver.py [--messages 20000] [--sqlite3 PATH] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recovery.carver import carve  # noqa: E402
from recovery.fileformat import parse_cell, parse_page_header  # noqa: E402
from sessiondb import SessionDB  # noqa: E402
from tests.helpers.carving import (build_store, expected_after_damage, message,  # noqa: E402
                                   patch, randomize_page, read_truth, zero_page)

BUILD = Path(__file__).resolve().parent / ".build"


def build_sqlite_cli() -> Path:
    """A `.recover`-capable sqlite3 from the amalgamation in npm's `sqlite3`."""
    exe = BUILD / "sqlite3"
    if exe.exists():
        return exe
    BUILD.mkdir(exist_ok=True)
    subprocess.run(["npm", "pack", "sqlite3", "--silent"], cwd=BUILD, check=True,
                   stdout=subprocess.DEVNULL)
    pkg = next(BUILD.glob("sqlite3-*.tgz"))
    with tarfile.open(pkg) as t:
        t.extractall(BUILD, filter="data")
    amalgamation = next((BUILD / "package" / "deps").glob("sqlite-autoconf-*.tar.gz"))
    with tarfile.open(amalgamation) as t:
        t.extractall(BUILD, filter="data")
    src = next(BUILD.glob("sqlite-autoconf-*/"))
    subprocess.run(["gcc", "-O2", "-DSQLITE_ENABLE_DBPAGE_VTAB", "-DSQLITE_THREADSAFE=0",
                    "shell.c", "sqlite3.c", "-o", str(exe), "-lm", "-ldl"], cwd=src,
                   check=True)
    return exe


def run_recover(cli: Path, damaged: Path, work: Path) -> tuple[dict[int, dict], float]:
    """`.recover` piped into a fresh database; its messages rows by id, and
    the time of the `.recover` dump alone (loading the SQL it prints into a
    new file is not counted, as our carver's figure excludes writing too)."""
    out = work / "recovered.db"
    out.unlink(missing_ok=True)
    started = time.perf_counter()
    dump = subprocess.run([str(cli), str(damaged), ".recover"], capture_output=True,
                          check=False).stdout
    elapsed = time.perf_counter() - started
    subprocess.run([str(cli), str(out)], input=dump, capture_output=True, check=False)
    rows: dict[int, dict] = {}
    conn = sqlite3.connect(out)  # a file nobody else has open
    try:
        conn.row_factory = sqlite3.Row
        has = conn.execute("SELECT 1 FROM sqlite_schema WHERE name='messages'").fetchone()
        if has:
            rows = {r["id"]: dict(r) for r in conn.execute("SELECT * FROM messages")}
    finally:
        conn.close()
    return rows, elapsed


def correct(rows: dict[int, dict], truth: dict[int, dict]) -> int:
    return sum(1 for k, row in rows.items() if truth.get(k) == row)


Damage = Callable[[Path, Any, random.Random], tuple[set, set]]
SAMPLE = 20  # rows hit by each cell-level damage class


def _random(fraction: float) -> Damage:
    def damage(path: Path, truth: Any, rng: random.Random) -> tuple[set, set]:
        pages = path.stat().st_size // truth.page_size
        hit = set(rng.sample(range(2, pages + 1), max(1, round(pages * fraction))))
        for p in hit:
            randomize_page(path, p, truth.page_size, rng)
        return hit, set()
    return damage


def _truncate(path: Path, truth: Any, rng: random.Random) -> tuple[set, set]:
    pages = path.stat().st_size // truth.page_size
    keep = pages * 6 // 10
    os.truncate(path, keep * truth.page_size)
    return set(range(keep + 1, pages + 1)), set()


def _pages(pick: Callable[[Any], list[int]], zero: bool = False) -> Damage:
    def damage(path: Path, truth: Any, rng: random.Random) -> tuple[set, set]:
        hit = set(pick(truth))
        for p in hit:
            (zero_page(path, p, truth.page_size) if zero else
             randomize_page(path, p, truth.page_size, rng))
        return hit, set()
    return damage


def _cell_pointers(path: Path, truth: Any, rng: random.Random) -> tuple[set, set]:
    """The first cell pointer of SAMPLE message leaves points outside the page."""
    ps, data = truth.page_size, path.read_bytes()
    leaves = sorted(set(truth.leaf_of["messages"].values()))
    lost = set()
    for leaf in rng.sample(leaves, min(SAMPLE, len(leaves))):
        buf = data[(leaf - 1) * ps:leaf * ps]
        page = parse_page_header(buf, leaf, ps)
        lost.add(parse_cell(buf, page, 0, ps).rowid)
        patch(path, (leaf - 1) * ps + 8, (0xFFF0).to_bytes(2, "big"))
    return set(), lost


def _overflow(cycle: bool) -> Damage:
    def damage(path: Path, truth: Any, rng: random.Random) -> tuple[set, set]:
        chains = [(r, p) for r, p in truth.overflow_of["messages"].items() if len(p) >= 3]
        lost = set()
        for rowid, pages in rng.sample(chains, min(SAMPLE, len(chains))):
            link = pages[0].to_bytes(4, "big") if cycle else (0xFFFFFF00).to_bytes(4, "big")
            patch(path, (pages[1] - 1) * truth.page_size, link)
            lost.add(rowid)
        return set(), lost
    return damage


CLASSES: dict[str, Damage] = {
    "page1_zeroed": _pages(lambda t: [1], zero=True),
    "sessions_root": _pages(lambda t: [t.roots["sessions"]]),
    "interior_pages": _pages(lambda t: t.interior["messages"]),
    "random_1pct": _random(0.01),
    "random_5pct": _random(0.05),
    "truncated_60pct": _truncate,
    "cell_pointer_outside": _cell_pointers,
    "overflow_broken_link": _overflow(cycle=False),
    "overflow_cycle": _overflow(cycle=True),
}


def measure(name: str, damaged: Path, wal: Path | None, truth: dict[int, dict],
            recoverable: int, cli: Path, work: Path) -> dict:
    size_mb = (damaged.stat().st_size + (wal.stat().st_size if wal else 0)) / 1e6
    started = time.perf_counter()
    result = carve(damaged, wal)
    ours_s = time.perf_counter() - started
    ours = {row["id"]: row for row in result.tables.get("messages", [])}
    theirs, recover_s = run_recover(cli, damaged, work)
    return {"class": name, "messages": len(truth), "recoverable": recoverable,
            "ours": correct(ours, truth), "recover": correct(theirs, truth),
            "ours_s": round(ours_s, 3), "recover_s": round(recover_s, 3),
            "time_ratio": round(ours_s / recover_s, 2) if recover_s else None,
            "ours_mb_s": round(size_mb / ours_s, 1)}


def bench_class(name: str, pristine: Path, truth: Any, cli: Path, work: Path) -> dict:
    damaged = work / f"{name}.db"
    shutil.copyfile(pristine, damaged)
    hit, lost = CLASSES[name](damaged, truth, random.Random(name))
    whole, _ = expected_after_damage(truth, "messages", hit)
    return measure(name, damaged, None, truth.rows["messages"], len(whole - lost), cli, work)


def bench_wal(pristine: Path, cli: Path, work: Path, rng: random.Random) -> list[dict]:
    """Uncheckpointed commits in the WAL (no -shm), then the same with its
    last frame torn: SQLite and the carver must both drop that commit."""
    live = work / "live"
    live.mkdir()
    shutil.copyfile(pristine, live / "state.db")
    with SessionDB(live / "state.db") as db:
        sid = db.list_sessions(limit=1)[0].id
        for k in range(10):
            db.append_messages(sid, [message(90_000 + 20 * k + j) for j in range(20)])
            if k == 8:
                before = _snap(live / "state.db", work / "wal_before.db")
        full = _snap(live / "state.db", work / "wal_uncheckpointed.db")
    torn = _snap(full, work / "wal_torn.db")
    wal = Path(f"{torn}-wal")
    os.truncate(wal, wal.stat().st_size - 100)
    rows = []
    for name, path, truth_of in (("wal_uncheckpointed", full, full), ("wal_torn", torn, before)):
        t = read_truth(truth_of).rows["messages"]
        rows.append(measure(name, path, Path(f"{path}-wal"), t, len(t), cli, work))
    return rows


def _snap(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    shutil.copyfile(f"{src}-wal", f"{dst}-wal")
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--sqlite3", type=Path, help="a sqlite3 shell that has .recover")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cli = args.sqlite3 or build_sqlite_cli()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        pristine = work / "state.db"
        sessions = max(1, args.messages // 500)
        build_store(pristine, sessions=sessions, per_session=args.messages // sessions,
                    big_every=25)
        truth = read_truth(pristine)
        rows = [bench_class(name, pristine, truth, cli, work) for name in CLASSES]
        rows += bench_wal(pristine, cli, work, random.Random(0))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
