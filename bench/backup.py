"""`hermes backup create` on a large store against sqlite3's `.backup`, same run.

    python bench/backup.py [--messages N] [--work DIR] [--rounds R] [--sqlite3 PATH]

Builds a store of N messages (default 1,000,000, ~230 characters each, 1,000
per session), then alternates for R rounds: the system `sqlite3 DB ".backup
OUT"` (the floor: one backup-API copy, no check) and `hermes backup create`
(the stepped copy, then quick_check and every table's count), and the
command's start alone (Python importing the CLI). Each runs as
its own process under `/usr/bin/time` (wall time, peak RSS; wait4's figure
would include the forked Python parent). Then a writer
process appends at a fixed rate (one commit each) through R rounds of a
quiet window and a window with a `backup create` running; its p99 append
latency over each kind of window. Prints one JSON document.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, message, percentile

WRITER = r"""
import os, sys, time, json
from sessiondb import SessionDB
db = SessionDB.open(sys.argv[1]); sid = db.create_session(source="bench-writer")
rate, stop = float(sys.argv[2]), sys.argv[3]
out = []
print("ready", flush=True)
while not os.path.exists(stop):
    t = time.perf_counter()
    db.append_message(sid, {"role": "user", "content": "writer " + "x" * 200})
    done = time.perf_counter()
    out.append((time.time(), done - t))
    time.sleep(max(0.0, 1.0 / rate - (done - t)))
db.close()
json.dump(out, open(sys.argv[4], "w"))
"""


def build(home: Path, messages: int) -> Path:
    from sessiondb import SessionDB
    started = time.monotonic()
    with SessionDB.open(home, background_index=False) as db:
        for s in range(0, messages, 1000):
            sid = db.create_session(source="bench")
            db.append_messages(sid, [message(s + i) for i in range(min(1000, messages - s))])
        db.checkpoint()
    print(f"built {messages} messages in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return home / "state.db"


def timed(argv: list[str]) -> dict[str, Any]:
    """Wall seconds and peak RSS (MiB) of one process."""
    with tempfile.NamedTemporaryFile("r") as rss:
        started = time.monotonic()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name, *argv],
                              capture_output=True, text=True, cwd=ROOT)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"{argv} failed: {proc.stderr}")
        kib = int(rss.read().split()[-1])
    return {"wall_s": round(wall, 2), "peak_rss_mib": round(kib / 1024, 1),
            "stdout": proc.stdout}


def hermes(home: Path, to: Path) -> list[str]:
    return [sys.executable, "-c", "from hstate_cli.main import main; main()", "--home",
            str(home), "backup", "create", "--keep", "1", "--to", str(to), "--json"]


def rounds(db: Path, work: Path, n: int, shell: str) -> dict[str, list[dict[str, Any]]]:
    res: dict[str, list[dict[str, Any]]] = {"sqlite3_backup": [], "hermes_backup": [],
                                            "python_start": []}
    subprocess.run(["cat", str(db)], stdout=subprocess.DEVNULL, check=True)  # warm, for both
    for _ in range(n):
        out = work / "floor.db"
        out.unlink(missing_ok=True)
        r = timed([shell, str(db), f".backup {out}"])
        r.pop("stdout")
        res["sqlite3_backup"].append(r)
        out.unlink(missing_ok=True)
        r = timed(hermes(db.parent, work / "backups"))
        doc = json.loads(r.pop("stdout"))
        r.update(copy_s=doc["copy_seconds"], verify_s=doc["verify_seconds"])
        res["hermes_backup"].append(r)
        r = timed([sys.executable, "-c", "from hstate_cli.main import main"])
        r.pop("stdout")  # the command's start alone: interpreter and imports
        res["python_start"].append(r)
    return res


def writer_latency(db: Path, work: Path, rate: float, window: float,
                   n: int) -> dict[str, float]:
    """One writer; ``n`` rounds of a quiet window then a window with a
    `backup create` running, so both see the same machine load."""
    stop, out = work / "stop", work / "lat.json"
    stop.unlink(missing_ok=True)
    w = subprocess.Popen([sys.executable, "-c", WRITER, str(db.parent), str(rate), str(stop),
                          str(out)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert w.stdout is not None and w.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    quiet, during = [], []
    for _ in range(n):
        quiet.append((time.time(), time.time() + window))
        time.sleep(window)
        start = time.time()
        subprocess.run(hermes(db.parent, work / "backups"), check=True, capture_output=True,
                       cwd=ROOT)
        during.append((start, time.time()))
        time.sleep(0.5)
    stop.touch()
    w.wait()
    lat = json.loads(out.read_text())
    pick = lambda spans: [d * 1000 for t, d in lat  # noqa: E731
                          if any(a <= t <= b for a, b in spans)]
    q, d = pick(quiet), pick(during)
    return {"rate_per_s": rate, "rounds": n, "quiet_appends": len(q), "during_appends": len(d),
            "p99_quiet_ms": round(percentile(q, 99), 2),
            "p99_during_ms": round(percentile(d, 99), 2),
            "p50_quiet_ms": round(percentile(q, 50), 2),
            "p50_during_ms": round(percentile(d, 50), 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--work", type=Path)
    ap.add_argument("--sqlite3", default="sqlite3", help="the sqlite3 shell for the floor")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-backup-"))
    home = work / "home"
    db = home / "state.db" if (home / "state.db").exists() else build(home, args.messages)
    res = rounds(db, work, args.rounds, args.sqlite3)
    size = db.stat().st_size
    best = {k: min(r["wall_s"] for r in v) for k, v in res.items()}
    window = max(3.0, best["hermes_backup"])
    doc = {"messages": args.messages, "store_bytes": size, "rounds": res,
           "ratio_best_wall": round(best["hermes_backup"] / best["sqlite3_backup"], 2),
           "ratio_best_copy_phase": round(min(r["copy_s"] for r in res["hermes_backup"])
                                          / best["sqlite3_backup"], 2),
           # the command without its start: copy, check, manifest, sync and rename
           "ratio_best_wall_less_start": round(
               min(r["wall_s"] - p["wall_s"] for r, p in zip(res["hermes_backup"],
                                                             res["python_start"]))
               / best["sqlite3_backup"], 2),
           "writer": writer_latency(db, work, args.rate, window, args.rounds)}
    print(json.dumps(doc, indent=1))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
