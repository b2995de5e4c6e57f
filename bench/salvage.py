"""Salvage benchmark: `hermes sessions recover` (every lane, the page carver
included) against SQLite's `.recover`, per damage class.

Builds a store of N messages through SessionDB (every 25th message ~18 KB,
so it overflows; an fts5 index over messages), damages one copy per class,
and for each class counts the messages each tool puts back *correctly
attributed*: in its `messages` table with every column (session id
included) equal to what SQLite read from the pristine file. Rows `.recover`
can only put in its anonymous `lost_and_found` table do not count.
"recoverable" is the number of messages whose leaf and overflow pages the
damage left intact (the most any tool can return exactly).

Ours is `hstate_recovery.recover(..., allow_partial=True)`: snapshot, inspect,
lanes backup/rows/bisect/index/carve, write, verify. Theirs is
`sqlite3 damaged.db .recover | sqlite3 out.db`. Both wall times include
writing the new file; the carve lane's own time and throughput (MB/s of
pages read) are reported apart.

`.recover` needs a sqlite3 shell compiled with SQLITE_ENABLE_DBPAGE_VTAB,
which neither Debian's sqlite3 nor apsw's library has. Pass one with
``--sqlite3 PATH``, or let this script build it into bench/.build/ (git-
ignored) from the SQLite amalgamation shipped inside the npm package
``sqlite3`` (needs npm and a C compiler; about a minute).

Files other programs wrote (Hermes Agent, llm, the Agents SDK, LangGraph),
per format and damage class: bench/salvage_foreign.py, or ``--foreign``
here (its own options follow: ``--foreign --quick``).

Usage: python bench/salvage.py [--messages 20000] [--sqlite3 PATH] [--json]
       python bench/salvage.py --foreign [--quick] [--sqlite3 PATH] [--json]
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

import hstate_recovery  # noqa: E402
from sessiondb.sqlitefile.fileformat import parse_cell, parse_page_header  # noqa: E402
from sessiondb import SessionDB  # noqa: E402
from tests.helpers import damage  # noqa: E402
from tests.helpers.carving import (build_store, expected_after_damage, message,  # noqa: E402
                                   patch, randomize_page, read_truth, zero_page)

BUILD = Path(__file__).resolve().parent / ".build"
SAMPLE = 20  # rows hit by each cell-level damage class


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


# -- damage classes: (path, truth, rng) -> (pages hit, rowids hit in place) --

Damage = Callable[[Path, Any, random.Random], tuple[set, set]]


def _pages(pick: Callable[[Path, Any], list[int]], zero: bool = False) -> Damage:
    def hurt(path: Path, truth: Any, rng: random.Random) -> tuple[set, set]:
        hit = set(pick(path, truth))
        for p in hit:
            (zero_page(path, p, truth.page_size) if zero else
             randomize_page(path, p, truth.page_size, rng))
        return hit, set()
    return hurt


def _leaves(path: Path, truth: Any) -> list[int]:
    ordered = sorted(set(truth.leaf_of["messages"].values()))
    step = len(ordered) // 5
    return ordered[step::step][:4]


def _middle_interior(path: Path, truth: Any) -> list[int]:
    inner = [p for p in truth.interior["messages"] if p != truth.roots["messages"]]
    return [inner[len(inner) // 2]] if inner else [truth.roots["messages"]]  # a small tree


def _zero_run(path: Path, truth: Any) -> list[int]:
    pages = path.stat().st_size // truth.page_size
    return list(range(pages // 2 + 1, pages // 2 + 1 + max(pages // 10, 1)))


def _random(fraction: float) -> Damage:
    def hurt(path: Path, truth: Any, rng: random.Random) -> tuple[set, set]:
        pages = path.stat().st_size // truth.page_size
        return _pages(lambda p, t: rng.sample(range(2, pages + 1),
                                              max(1, round(pages * fraction))))(path, truth, rng)
    return hurt


def _truncate(keep_tenths: int) -> Damage:
    def hurt(path: Path, truth: Any, rng: random.Random) -> tuple[set, set]:
        pages = path.stat().st_size // truth.page_size
        keep = pages * keep_tenths // 10
        os.truncate(path, keep * truth.page_size)
        return set(range(keep + 1, pages + 1)), set()
    return hurt


def _header_fields(path: Path, truth: Any, rng: random.Random) -> tuple[set, set]:
    """Page size, versions and payload fractions garbled; page 1's b-tree intact."""
    damage.write_at(path, 16, b"\xab\xcd\x7f\x7f\x00\x01\x02\x03")
    return set(), set()


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
    def hurt(path: Path, truth: Any, rng: random.Random) -> tuple[set, set]:
        chains = [(r, p) for r, p in truth.overflow_of["messages"].items() if len(p) >= 3]
        lost = set()
        for rowid, pages in rng.sample(chains, min(SAMPLE, len(chains))):
            link = pages[0].to_bytes(4, "big") if cycle else (0xFFFFFF00).to_bytes(4, "big")
            patch(path, (pages[1] - 1) * truth.page_size, link)
            lost.add(rowid)
        return set(), lost
    return hurt


CLASSES: dict[str, Damage] = {
    "messages_leaves_4": _pages(_leaves),
    "messages_interior_1": _pages(_middle_interior),
    "messages_interior_all": _pages(lambda p, t: t.interior["messages"]),
    "sessions_root": _pages(lambda p, t: [t.roots["sessions"]]),
    "page1_header_fields": _header_fields,
    "page1_zeroed": _pages(lambda p, t: [1], zero=True),
    "fts_shadow_leaf": _pages(lambda p, t: damage.pages_of(p, "messages_fts_data", "leaf")[:1]),
    "zeroed_run_10pct": _pages(_zero_run, zero=True),
    "random_1pct": _random(0.01),
    "random_5pct": _random(0.05),
    "truncated_70pct": _truncate(7),
    "truncated_60pct": _truncate(6),
    "cell_pointer_outside": _cell_pointers,
    "overflow_broken_link": _overflow(cycle=False),
    "overflow_cycle": _overflow(cycle=True),
}


# -- measuring ---------------------------------------------------------------

def read_messages(db: Path) -> dict[int, dict]:
    """Rows of a tool's output by id (stdlib sqlite3: a file nobody has open)."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(db)
    try:
        conn.row_factory = sqlite3.Row
        if not conn.execute("SELECT 1 FROM sqlite_schema WHERE name='messages'").fetchone():
            return {}
        return {r["id"]: dict(r) for r in conn.execute("SELECT * FROM messages")}
    except sqlite3.DatabaseError:
        return {}
    finally:
        conn.close()


def correct(rows: dict[int, dict], truth: dict[int, dict]) -> int:
    return sum(1 for k, row in rows.items() if truth.get(k) == row)


def run_ours(damaged: Path, work: Path) -> tuple[dict[int, dict], float, dict]:
    out = work / "ours.db"
    started = time.perf_counter()
    report = hstate_recovery.recover(damaged, out, allow_partial=True)
    elapsed = time.perf_counter() - started
    rows = read_messages(Path(report.output)) if report.output else {}
    return rows, elapsed, report.lane_stats.get("carve", {})


def run_recover(cli: Path, damaged: Path, work: Path) -> tuple[dict[int, dict], float, float]:
    """`.recover` piped into a fresh database: its rows, the dump's time and
    the time with loading the dump into the new file."""
    out = work / "theirs.db"
    started = time.perf_counter()
    dump = subprocess.run([str(cli), str(damaged), ".recover"], capture_output=True,
                          check=False).stdout
    dumped = time.perf_counter() - started
    subprocess.run([str(cli), str(out)], input=dump, capture_output=True, check=False)
    return read_messages(out), dumped, time.perf_counter() - started


def measure(name: str, damaged: Path, truth: dict[int, dict], recoverable: int,
            cli: Path, work: Path) -> dict:
    ours, ours_s, carve = run_ours(damaged, work)
    theirs, dump_s, theirs_s = run_recover(cli, damaged, work)
    carve_s = carve.get("seconds")
    return {"class": name, "messages": len(truth), "recoverable": recoverable,
            "ours": correct(ours, truth), "recover": correct(theirs, truth),
            "ours_s": round(ours_s, 2), "recover_s": round(theirs_s, 2),
            "time_ratio": round(ours_s / theirs_s, 2) if theirs_s else None,
            "carve_s": carve_s, "carve_mb_s": carve.get("mb_per_s"),
            "carve_vs_dump": round(carve_s / dump_s, 2) if carve_s and dump_s else None}


def bench_class(name: str, pristine: Path, truth: Any, cli: Path, root: Path) -> dict:
    work = root / name
    work.mkdir()
    damaged = work / "state.db"
    shutil.copyfile(pristine, damaged)
    hit, lost = CLASSES[name](damaged, truth, random.Random(name))
    whole, _ = expected_after_damage(truth, "messages", hit)
    return measure(name, damaged, truth.rows["messages"], len(whole - lost), cli, work)


def bench_wal(pristine: Path, cli: Path, root: Path) -> list[dict]:
    """Uncheckpointed commits in the WAL (no -shm), then the same with its
    last frame torn: SQLite and the carver must both drop that commit."""
    live = root / "live"
    live.mkdir()
    shutil.copyfile(pristine, live / "state.db")
    with SessionDB(live / "state.db") as db:
        sid = db.list_sessions(limit=1)[0].id
        for k in range(10):
            db.append_messages(sid, [message(90_000 + 20 * k + j) for j in range(20)])
            if k == 8:
                before = _snap(live / "state.db", root / "wal_before.db")
        full = _snap(live / "state.db", root / "wal_full.db")
    rows = []
    for name, truth_of, torn in (("wal_uncheckpointed", full, False), ("wal_torn", before, True)):
        work = root / name
        work.mkdir()
        damaged = _snap(full, work / "state.db")
        if torn:
            wal = Path(f"{damaged}-wal")
            os.truncate(wal, wal.stat().st_size - 100)
        t = read_truth(truth_of).rows["messages"]
        rows.append(measure(name, damaged, t, len(t), cli, work))
    return rows


def _snap(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    shutil.copyfile(f"{src}-wal", f"{dst}-wal")
    return dst


def build(path: Path, messages: int) -> None:
    sessions = max(1, messages // 500)
    build_store(path, sessions=sessions, per_session=messages // sessions, big_every=25)
    damage.add_fts(path)


def main() -> None:
    if "--foreign" in sys.argv[1:]:
        import salvage_foreign  # bench/ is on sys.path when run as a script
        sys.argv.remove("--foreign")
        salvage_foreign.main()
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--sqlite3", type=Path, help="a sqlite3 shell that has .recover")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cli = args.sqlite3 or build_sqlite_cli()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        pristine = root / "pristine.db"
        build(pristine, args.messages)
        truth = read_truth(pristine)
        rows = [bench_class(name, pristine, truth, cli, root) for name in CLASSES]
        rows += bench_wal(pristine, cli, root)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join("-" if r[c] is None else str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
