"""Run every benchmark, print one line per benchmark, write bench/results.json.

Order: the machine record (SQLite versions, an fsync probe, CPU count),
B1 durable append, B2 contention, B3 resume, B4 search (bench/search.py,
when present), flush scaling and B5 salvage (their own scripts, run as
subprocesses with their output kept). Peers come from the ``bench`` extra
(``pip install -e '.[bench]'``); a peer that is not installed or fails is
printed as ``unavailable: <reason>``.

    python bench/run_all.py [--quick] [--sqlite3 PATH] [--out bench/results.json]

``--quick`` (under 5 minutes on 2 cores) keeps every benchmark but shortens
peers' caps and time budgets, B2's duration and the flush-scaling sample.
``--sqlite3`` names a ``.recover``-capable sqlite3 shell for the salvage
comparison (see docs/benchmarks.md for how to build one).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import append  # noqa: E402
import contention  # noqa: E402
import resume  # noqa: E402
from common import machine, machine_line  # noqa: E402
from subjects import peer_status  # noqa: E402


def script(name: str, args: list[str], timeout: float) -> dict[str, Any]:
    """Run another bench script; its stdout is kept whole in the results."""
    path = HERE / name
    if not path.exists():
        return {"status": "not present", "stdout": ""}
    started = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(path), *args], capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"status": f"timed out after {timeout:.0f}s", "stdout": ""}
    status = "ok" if proc.returncode == 0 else (
        f"failed (exit {proc.returncode}): "
        + ((proc.stderr.strip().splitlines() or ["no error output"])[-1]))
    return {"status": status, "stdout": proc.stdout, "args": args,
            "seconds": time.perf_counter() - started}


def flush_scaling(quick: bool) -> dict[str, Any]:
    args = ["--flushes", "400", "--rescans", "1"] if quick else []
    res = script("flush_scaling.py", args, 900)
    found = re.search(r"ratio flush median \d+ / \d+: ([0-9.]+)", res["stdout"])
    res["ratio"] = float(found.group(1)) if found else None
    table = [ln for ln in res["stdout"].splitlines() if re.match(r"\s+\d+\s", ln)]
    medians = " ".join(f"{ln.split()[0]}:{ln.split()[1]}" for ln in table)
    res["line"] = (f"flush scaling | {res['status']}" if res["ratio"] is None else
                   f"flush scaling | flush median by size {medians} | ratio largest/smallest "
                   f"{res['ratio']:.3f} (goal <= 1.2)")
    return res


def salvage(sqlite3: str | None) -> dict[str, Any]:
    res = script("salvage.py", ["--sqlite3", sqlite3] if sqlite3 else [], 900)
    classes = _salvage_rows(res["stdout"])
    res["classes"] = classes
    res["line"] = salvage_line(classes, compared=bool(sqlite3)) if classes else \
        f"B5 salvage | {res['status']}"
    return res


def salvage_line(classes: list[dict[str, Any]], compared: bool) -> str:
    """The summary line; without a ``.recover`` run there is nothing to be
    ahead of, so it says that instead of claiming a comparison."""
    if not compared:
        rows = sum(c["ours"] for c in classes)
        return (f"B5 salvage | ours {rows} rows over {len(classes)} classes | not compared: "
                ".recover unavailable (no --sqlite3 shell given)")
    behind = [c["class"] for c in classes if c["ours"] < c["recover"]]
    ahead = ", ".join(f"{c['class']} {c['ours']}/{c['recover']}" for c in classes
                      if c["ours"] > c["recover"])
    return (f"B5 salvage ours/.recover rows | equal or ahead on "
            f"{len(classes) - len(behind)}/{len(classes)} classes | ahead on: "
            f"{ahead or 'none'} | behind on: {', '.join(behind) or 'none'}")


def _salvage_rows(stdout: str) -> list[dict[str, Any]]:
    """The per-class rows of salvage.py's markdown table, by column name."""
    table = [[c.strip() for c in ln.strip().strip("|").split("|")]
             for ln in stdout.splitlines() if ln.lstrip().startswith("|")]
    if not table:
        return []
    head = table[0]
    classes = []
    for cells in table[1:]:
        row = dict(zip(head, cells))
        if row.get("ours", "").isdigit() and row.get("recover", "").isdigit():
            classes.append({"class": row["class"], "ours": int(row["ours"]),
                            "recover": int(row["recover"]),
                            "seconds_ours": float(row.get("ours_s") or "nan")})
    return classes


def search(quick: bool) -> dict[str, Any]:
    path = HERE / "search.py"
    if not path.exists():
        return {"status": "not present", "line": "B4 search | not present (bench/search.py "
                "is missing from this checkout)"}
    # --quick: a 50,000-message corpus (the full run uses the script's 1,000,000)
    args = ["--messages", "50000"] if quick else []
    res = script("search.py", args, 900)
    last = [ln for ln in res["stdout"].splitlines() if ln.strip()][-3:]
    res["line"] = f"B4 search | {res['status']} | " + " / ".join(s.strip() for s in last)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="all benchmarks in under 5 minutes")
    ap.add_argument("--sqlite3", help="a .recover-capable sqlite3 shell for B5")
    ap.add_argument("--out", default=str(HERE / "results.json"))
    args = ap.parse_args()
    started = time.time()
    results: dict[str, Any] = {"command": " ".join(["python bench/run_all.py", *sys.argv[1:]]),
                               "quick": args.quick,
                               "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                            time.gmtime(started))}
    results["machine"] = machine()
    print(machine_line(results["machine"]), flush=True)
    results["peers"] = peer_status()
    print("peers | " + " | ".join(f"{k} {v}" for k, v in results["peers"].items()), flush=True)
    results["B1_append"] = append.run(args.quick)
    results["B2_contention"] = contention.run(args.quick)
    results["B3_resume"] = resume.run(args.quick)
    for key, fn in (("B4_search", lambda: search(args.quick)),
                    ("flush_scaling", lambda: flush_scaling(args.quick)),
                    ("B5_salvage", lambda: salvage(args.sqlite3))):
        results[key] = fn()
        print(results[key]["line"], flush=True)
    results["seconds"] = time.time() - started
    Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    print(f"done in {results['seconds']:.0f}s; results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
