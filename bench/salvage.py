"""Salvage benchmark: rows recovered per damage class, ours vs SQLite's `.recover`.

Builds a store of 20k messages, damages a copy per class, then counts the
messages each tool put back *correctly attributed* (same id, same session,
same content as the ground truth) and the wall time of each. `.recover`
needs a sqlite3 shell built with SQLITE_ENABLE_DBPAGE_VTAB (see
docs/benchmarks.md for how); without `--sqlite3` only our side runs.

    python bench/salvage.py --sqlite3 /path/to/sqlite3 [--messages 20000]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import recovery  # noqa: E402
from tests.helpers import damage  # noqa: E402

Damage = Callable[[Path], None]


def _leaves(path: Path) -> Damage:
    tree = damage.TableTree(path, "messages")
    ordered = sorted(tree.leaves, key=lambda p: tree.leaves[p][0])
    picks = ordered[len(ordered) // 5::len(ordered) // 5][:4]
    return lambda p: [damage.smash_page(p, pg, PAGE) for pg in picks]


def _interior(path: Path) -> Damage:
    tree = damage.TableTree(path, "messages")
    inner = tree.middle_interior()
    return lambda p: damage.smash_page(p, inner, PAGE)


def _truncate(p: Path) -> None:
    os.truncate(p, (os.stat(p).st_size // PAGE) * 7 // 10 * PAGE)


def _zero_run(p: Path) -> None:
    pages = os.stat(p).st_size // PAGE
    damage.write_at(p, pages // 2 * PAGE, b"\x00" * (PAGE * max(pages // 10, 1)))


def _fts(p: Path) -> None:
    damage.smash_page(p, damage.pages_of(p, "messages_fts_data", "leaf")[0], PAGE)


PAGE = 4096


def classes(pristine: Path) -> dict[str, Damage]:
    sroot = damage.root_page(pristine, "sessions")
    return {
        "messages leaves (4)": _leaves(pristine),
        "messages interior": _interior(pristine),
        "sessions root": lambda p: damage.smash_page(p, sroot, PAGE),
        "page 1 header": lambda p: damage.write_at(p, 16, b"\xab\xcd\x7f\x7f\x00\x01\x02\x03"),
        "truncated 70%": _truncate,
        "zeroed 10% run": _zero_run,
        "fts shadow": _fts,
    }


def truth_of(path: Path) -> dict[int, tuple]:
    return {r[0]: r[1:] for r in damage.sql(path, "SELECT id, session_id, content FROM messages")}


def correct(out: Path, truth: dict[int, tuple]) -> int:
    try:
        rows = damage.sql(out, "SELECT id, session_id, content FROM messages")
    except Exception:  # the tool produced no messages table
        return 0
    return sum(1 for r in rows if truth.get(r[0]) == tuple(r[1:]))


def run_ours(src: Path, work: Path, truth: dict[int, tuple]) -> tuple[int, float]:
    started = time.monotonic()
    report = recovery.recover(src, work / "ours.db", allow_partial=True)
    elapsed = time.monotonic() - started
    return (correct(Path(report.output), truth) if report.output else 0), elapsed


def run_theirs(sqlite3: str, src: Path, work: Path, truth: dict[int, tuple]) -> tuple[int, float]:
    out = work / "theirs.db"
    started = time.monotonic()
    dump = subprocess.run([sqlite3, str(src), ".recover"], capture_output=True, check=False)
    subprocess.run([sqlite3, str(out)], input=dump.stdout, capture_output=True, check=False)
    return correct(out, truth), time.monotonic() - started


def build(path: Path, messages: int) -> None:
    damage.build_store(path, sessions=messages // 200, per_session=200, page_size=PAGE)
    damage.add_fts(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sqlite3", help="a .recover-capable sqlite3 shell")
    ap.add_argument("--messages", type=int, default=20000)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="hermes-bench-"))
    try:
        pristine = root / "pristine.db"
        build(pristine, args.messages)
        truth = truth_of(pristine)
        print(f"{len(truth)} messages; page size {PAGE}")
        print(f"{'class':22} {'ours':>7} {'.recover':>9} {'ratio':>6} {'ours s':>7} {'.rec s':>7}")
        for name, hurt in classes(pristine).items():
            work = root / name.replace(" ", "_")
            work.mkdir()
            src = work / "state.db"
            shutil.copyfile(pristine, src)
            hurt(src)
            ours, t_ours = run_ours(src, work, truth)
            theirs, t_theirs = (run_theirs(args.sqlite3, src, work, truth)
                                if args.sqlite3 else (0, 0.0))
            ratio = f"{ours / theirs:.2f}" if theirs else "-"
            print(f"{name:22} {ours:7d} {theirs:9d} {ratio:>6} {t_ours:7.2f} {t_theirs:7.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
