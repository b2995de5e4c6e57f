"""Salvage of files other programs wrote: `recover` against SQLite's `.recover`.

For each registered foreign format (Hermes Agent state.db v31 fresh and
upgraded from v1, llm 0.36 logs.db and its older responses layout, the
Agents SDK's SQLiteSession, LangGraph's SqliteSaver; built by
tests/helpers/foreign_dbs.py with each program's own DDL) and each damage
class, count the rows each tool puts back *attributed*: in their own table,
under their rowid, every column equal to what SQLite read from the pristine
file, summed over every data table (virtual tables and their shadows are
derived and not counted). Rows `.recover` can only put in its anonymous
`lost_and_found` do not count. "recoverable" is the number of rows whose
leaf the damage left intact (what any tool can return exactly).

Ours: `hstate_recovery.recover(..., allow_partial=True)` (the template class adds
``template=`` a healthy file of the same program). Theirs:
`sqlite3 damaged.db .recover | sqlite3 out.db`, with a sqlite3 shell that
has `.recover` (see bench/salvage.py: --sqlite3 PATH or a local build).

Usage: python bench/salvage_foreign.py [--quick] [--sqlite3 PATH] [--json]
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
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hstate_recovery  # noqa: E402
from tests.helpers import foreign_dbs as f  # noqa: E402
from tests.helpers.damage import TableTree, pages_of, write_at  # noqa: E402

PS = 4096


def formats(quick: bool) -> dict[str, Callable[..., f.GroundTruth]]:
    k = 4 if quick else 1
    return {
        "hermes-agent": lambda p, **kw: f.build_hermes_agent(p, 40, 300 // k, **kw),
        "hermes-agent-upgraded": lambda p, **kw: f.build_hermes_agent(p, 40, 300 // k,
                                                                      upgraded=True, **kw),
        "llm": lambda p, **kw: f.build_llm(p, 200 // k, 10, **kw),
        "llm-responses": lambda p, **kw: f.build_llm(p, 400 // k, 10, layout="responses", **kw),
        "openai-agents": lambda p, **kw: f.build_openai_agents(p, 100 // k, 100, **kw),
        "langgraph": lambda p, **kw: f.build_langgraph(p, 100 // k, 20, **kw),
    }


def _smash(path: Path, pages: set[int]) -> None:
    for p in pages:
        write_at(path, (p - 1) * PS, b"\xde\xad\xbe\xef" * (PS // 4))


def _leaves(truth: f.GroundTruth, path: Path, rng: random.Random) -> set[int]:
    tree = TableTree(path, truth.main_table)
    ordered = sorted(tree.leaves, key=lambda p: tree.leaves[p][0])
    step = max(1, len(ordered) // 5)
    return set(ordered[step::step][:4])


def _interior(truth: f.GroundTruth, path: Path, rng: random.Random) -> set[int]:
    tree = TableTree(path, truth.main_table)
    inner = [p for p in tree.interior if p != tree.root] or tree.interior
    return {inner[len(inner) // 2]}


def _random(fraction: float):
    def pick(truth: f.GroundTruth, path: Path, rng: random.Random) -> set[int]:
        schema = set(pages_of(path, "sqlite_schema"))
        pages = [p for p in range(2, path.stat().st_size // PS + 1) if p not in schema]
        return set(rng.sample(pages, max(1, round(len(pages) * fraction))))
    return pick


def _fts(truth: f.GroundTruth, path: Path, rng: random.Random) -> set[int]:
    return {p for vt in truth.virtual for s in ("_data", "_idx") for p in pages_of(path, vt + s)}


PAGE_CLASSES = {"leaves_4": _leaves, "interior_1": _interior, "random_1pct": _random(0.01),
                "random_5pct": _random(0.05), "fts_pages": _fts}


def read_rows(db: Path, tables: list[str]) -> dict[str, dict[int, tuple]]:
    """Rows per table by rowid (stdlib sqlite3: a file nobody has open)."""
    out: dict[str, dict[int, tuple]] = {t: {} for t in tables}
    if not db.exists():
        return out
    conn = sqlite3.connect(db)
    conn.text_factory = bytes
    try:
        have = {r[0].decode() for r in conn.execute("SELECT name FROM sqlite_schema "
                                                    "WHERE type='table'")}
        for t in tables:
            if t in have:
                try:
                    cols = [r[1].decode() for r in conn.execute(f'PRAGMA table_info("{t}")')]
                    sel = ", ".join(f'"{c}"' for c in sorted(cols))
                    out[t] = {r[0]: r[1:] for r in conn.execute(f'SELECT rowid, {sel} FROM "{t}"')}
                except sqlite3.DatabaseError:
                    continue
    finally:
        conn.close()
    return out


def attributed(got: dict[str, dict[int, tuple]], truth: dict[str, dict[int, tuple]]) -> int:
    return sum(1 for t, rows in truth.items() for k, v in rows.items() if got[t].get(k) == v)


def run_ours(damaged: Path, work: Path, template: Path | None) -> tuple[Path | None, float]:
    started = time.perf_counter()
    report = hstate_recovery.recover(damaged, work / "ours.db", allow_partial=True, work_dir=work,
                              template=template)
    return (Path(report.output) if report.output else None), time.perf_counter() - started


def run_theirs(cli: Path, damaged: Path, work: Path) -> tuple[Path, float]:
    out = work / "theirs.db"
    started = time.perf_counter()
    dump = subprocess.run([str(cli), str(damaged), ".recover"], capture_output=True,
                          check=False).stdout
    subprocess.run([str(cli), str(out)], input=dump, capture_output=True, check=False)
    return out, time.perf_counter() - started


def measure(fmt: str, cls: str, damaged: Path, truth_rows: dict, recoverable: int,
            cli: Path, work: Path, template: Path | None = None) -> dict[str, Any]:
    tables = list(truth_rows)
    ours_out, ours_s = run_ours(damaged, work, template)
    theirs_out, theirs_s = run_theirs(cli, damaged, work)
    total = sum(len(r) for r in truth_rows.values())
    ours = attributed(read_rows(ours_out, tables) if ours_out else
                      {t: {} for t in tables}, truth_rows)
    theirs = attributed(read_rows(theirs_out, tables), truth_rows)
    return {"format": fmt, "class": cls, "rows": total, "recoverable": recoverable,
            "ours": ours, "recover": theirs, "ours_pct": round(100 * ours / total, 1),
            "recover_pct": round(100 * theirs / total, 1), "ours_s": round(ours_s, 2),
            "recover_s": round(theirs_s, 2)}


def _recoverable(trees: dict[str, TableTree], truth: f.GroundTruth, bad: set[int]) -> int:
    lost = sum(len(rows) for t in trees.values() for leaf, rows in t.leaves.items()
               if leaf in bad)
    return truth.total - lost


def bench_format(fmt: str, build: Callable[..., f.GroundTruth], cli: Path,
                 root: Path) -> list[dict]:
    base = root / fmt
    base.mkdir()
    truth = build(base / "pristine.db", page_size=PS)
    rows = read_rows(truth.path, list(truth.rowids))
    trees = {t: TableTree(truth.path, t) for t in truth.rowids}
    template = base / "template.db"
    build(template, page_size=PS)  # another healthy file of the same program
    out = []

    def case(cls: str, hurt: Callable[[Path], set[int]], tmpl: Path | None = None) -> None:
        work = base / cls
        work.mkdir()
        damaged = work / "state.db"
        shutil.copyfile(truth.path, damaged)
        bad = hurt(damaged)
        out.append(measure(fmt, cls, damaged, rows, _recoverable(trees, truth, bad), cli,
                           work, tmpl))

    case("healthy", lambda p: set())
    for cls, pick in PAGE_CLASSES.items():
        if cls == "fts_pages" and not truth.virtual:
            continue

        def hurt(p: Path, pick=pick, cls=cls) -> set[int]:
            bad = pick(truth, p, random.Random(cls))
            _smash(p, bad)
            return bad
        case(cls, hurt)
    n = truth.path.stat().st_size // PS
    case("truncated_70pct", lambda p: (os.truncate(p, (n * 7 // 10) * PS)
                                       or set(range(n * 7 // 10 + 1, n + 1))))
    case("page1_zeroed", lambda p: (write_at(p, 0, bytes(PS)) or set()))
    case("page1_zeroed_template", lambda p: (write_at(p, 0, bytes(PS)) or set()), template)
    out.append(_wal_case(fmt, build, cli, base))
    return out


def _wal_case(fmt: str, build: Callable[..., f.GroundTruth], cli: Path, base: Path) -> dict:
    work = base / "wal_live_no_shm"
    work.mkdir()
    truth = build(work / "state.db", page_size=PS, wal_tail=200)
    shutil.copyfile(truth.path, work / "t.db")
    shutil.copyfile(f"{truth.path}-wal", work / "t.db-wal")
    rows = read_rows(work / "t.db", list(truth.rowids))  # with the WAL, as SQLite reads it
    return measure(fmt, "wal_live_no_shm", truth.path, rows, truth.total, cli, work)


def goals(results: list[dict]) -> dict[str, Any]:
    behind = [(r["format"], r["class"]) for r in results if r["ours"] < r["recover"]]
    p1 = {r["format"]: r["ours_pct"] for r in results if r["class"] == "page1_zeroed"}
    return {"ours_ge_recover_everywhere": not behind, "behind": behind,
            "page1_zeroed_pct": p1, "page1_zeroed_ge_95": all(v >= 95 for v in p1.values()),
            "healthy_100": all(r["ours"] == r["rows"] for r in results
                               if r["class"] == "healthy")}


def main() -> None:
    from salvage import build_sqlite_cli

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a quarter of the rows")
    ap.add_argument("--sqlite3", type=Path, help="a sqlite3 shell that has .recover")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cli = args.sqlite3 or build_sqlite_cli()
    with tempfile.TemporaryDirectory() as d:
        results = [r for fmt, b in formats(args.quick).items()
                   for r in bench_format(fmt, b, cli, Path(d))]
    summary = goals(results)
    if args.json:
        print(json.dumps({"results": results, "goals": summary}, indent=2))
        return
    cols = list(results[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in results:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    print()
    print("goals: " + json.dumps(summary))


if __name__ == "__main__":
    main()
