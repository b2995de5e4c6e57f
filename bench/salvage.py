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

Usage: python bench/salvage.py [--messages 20000] [--sqlite3 PATH] [--json]
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
from tests.helpers.carving import (build_store, expected_after_damage, randomize_page,  # noqa: E402
                                   read_truth, zero_page)

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


Damage = Callable[[Path, Any, random.Random], set]


def _random(fraction: float) -> Damage:
    def damage(path: Path, truth: Any, rng: random.Random) -> set:
        pages = path.stat().st_size // truth.page_size
        hit = set(rng.sample(range(2, pages + 1), max(1, round(pages * fraction))))
        for p in hit:
            randomize_page(path, p, truth.page_size, rng)
        return hit
    return damage


def _truncate(path: Path, truth: Any, rng: random.Random) -> set:
    pages = path.stat().st_size // truth.page_size
    keep = pages * 6 // 10
    os.truncate(path, keep * truth.page_size)
    return set(range(keep + 1, pages + 1))


def _pages(pick: Callable[[Any], list[int]], zero: bool = False) -> Damage:
    def damage(path: Path, truth: Any, rng: random.Random) -> set:
        hit = set(pick(truth))
        for p in hit:
            (zero_page(path, p, truth.page_size) if zero else
             randomize_page(path, p, truth.page_size, rng))
        return hit
    return damage


CLASSES: dict[str, Damage] = {
    "page1_zeroed": _pages(lambda t: [1], zero=True),
    "sessions_root": _pages(lambda t: [t.roots["sessions"]]),
    "interior_pages": _pages(lambda t: t.interior["messages"]),
    "random_1pct": _random(0.01),
    "random_5pct": _random(0.05),
    "truncated_60pct": _truncate,
}


def bench_class(name: str, pristine: Path, truth: Any, cli: Path, work: Path) -> dict:
    damaged = work / f"{name}.db"
    shutil.copyfile(pristine, damaged)
    hit = CLASSES[name](damaged, truth, random.Random(name))
    whole, _ = expected_after_damage(truth, "messages", hit)
    size_mb = damaged.stat().st_size / 1e6
    started = time.perf_counter()
    result = carve(damaged)
    ours_s = time.perf_counter() - started
    ours = {row["id"]: row for row in result.tables.get("messages", [])}
    theirs, recover_s = run_recover(cli, damaged, work)
    t = truth.rows["messages"]
    return {"class": name, "messages": len(t), "recoverable": len(whole),
            "ours": correct(ours, t), "recover": correct(theirs, t),
            "ours_s": round(ours_s, 3), "recover_s": round(recover_s, 3),
            "time_ratio": round(ours_s / recover_s, 2) if recover_s else None,
            "ours_mb_s": round(size_mb / ours_s, 1)}


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
