"""The 1%-damaged recover beside `.recover`, alternated in one run (scale.py's damaged half).

    python bench/recover_damaged.py --work DIR [--rounds 3] [--sqlite3 PATH]
                                    [--code LABEL=TREE ...] [--json OUT]

Uses the store `bench/scale.py --work DIR` built (``DIR/home/state.db``),
damages a copy the way scale.py does (1% of its pages, seed 7), then runs,
``--rounds`` times in turn: `recover --output` of each ``--code`` tree (a
checkout of this project; default: this one, as "ours"), then `.recover`
piped into a new file. Each run is its own process: wall time, CPU
seconds (user + system of the process tree), peak RSS, the load average
before it, the rows attributed (every column equal to the healthy store's
row with the same id), and for ours the report's phase timings.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scale import attributed, damage_pages, find_sqlite3  # noqa: E402

MEASURE = r"""
import json, os, resource, subprocess, sys, time
t = time.monotonic()
done = subprocess.run(sys.argv[3], shell=True, cwd=sys.argv[2], stdout=open(sys.argv[1], "w"))
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": done.returncode, "seconds": round(time.monotonic() - t, 3),
                  "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
                  "rss_mb": round(ru.ru_maxrss / 1024, 1)}), file=sys.stderr)
"""


def measured(command: str, cwd: Path, out: Path) -> dict[str, Any]:
    """Run a shell command in a fresh wrapper: wall, CPU of its tree, peak RSS."""
    load = os.getloadavg()[0]
    done = subprocess.run([sys.executable, "-c", MEASURE, str(out), str(cwd), command],
                          stderr=subprocess.PIPE, text=True)
    return {**json.loads(done.stderr.strip().splitlines()[-1]), "load_before": round(load, 2)}


def ours(label: str, tree: Path, damaged: Path, truth: Path, work: Path) -> dict[str, Any]:
    out = work / f"rec-{label}.db"
    report = work / f"rec-{label}.json"
    cmd = (f"'{sys.executable}' -c 'import sys; from cli.main import main; sys.exit(main())' "
           f"--home '{work / 'scratch-home'}' sessions recover --source '{damaged}' "
           f"--output '{out}' --allow-partial --json")
    res = measured(cmd, tree, report)
    try:
        data = json.loads(report.read_text())
        res["timings"] = data.get("timings", {})
        res["outcome"] = data.get("outcome")
    except ValueError:
        res["timings"] = {}
    res["attributed"] = attributed(truth, out)
    for p in work.glob(f"rec-{label}.db*"):
        p.unlink()
    report.unlink(missing_ok=True)
    return res


def theirs(cli: Path, damaged: Path, truth: Path, work: Path) -> dict[str, Any]:
    out = work / "dot-damaged.db"
    out.unlink(missing_ok=True)
    res = measured(f"'{cli}' '{damaged}' .recover | '{cli}' '{out}'", work, Path(os.devnull))
    res["attributed"] = attributed(truth, out)
    out.unlink(missing_ok=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sqlite3", type=Path)
    ap.add_argument("--code", action="append", default=[],
                    help="LABEL=TREE: a checkout whose recover to run (repeatable)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    truth = a.work / "home" / "state.db"
    if not truth.exists():
        sys.exit(f"Error: no store at {truth}: build it with bench/scale.py --work {a.work}")
    cli = find_sqlite3(a.sqlite3)
    if cli is None:
        sys.exit("Error: no sqlite3 shell with .recover found (--sqlite3 PATH)")
    codes = [tuple(c.split("=", 1)) for c in a.code] or [("ours", str(ROOT))]
    damaged = a.work / "damaged.db"
    res: dict[str, Any] = {"pages_hit": damage_pages(truth, damaged), "sqlite3": str(cli),
                           "rounds": []}
    (a.work / "scratch-home").mkdir(mode=0o700, exist_ok=True)
    try:
        for i in range(a.rounds):
            row: dict[str, Any] = {}
            for label, tree in codes:
                row[label] = ours(label, Path(tree), damaged, truth, a.work)
            row["dot_recover"] = theirs(cli, damaged, truth, a.work)
            res["rounds"].append(row)
            print(json.dumps({"round": i + 1, **{k: {x: v[x] for x in (
                "seconds", "cpu_s", "rss_mb", "load_before", "attributed")} for k, v in
                row.items()}}), file=sys.stderr, flush=True)
    finally:
        damaged.unlink(missing_ok=True)
        print(json.dumps(res, indent=1))
        if a.json:
            a.json.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
