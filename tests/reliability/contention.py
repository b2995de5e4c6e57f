"""Contention: 4 writer processes, 2 readers (and a searcher when the store
has search) on one store for a fixed duration, with PASSIVE checkpoints.

Writers append singly and in batches to their own session and to a shared
one, and checkpoint now and then; readers count and page every session and
require counts never to go backwards; the searcher (``db.search``, when the
store has it) queries throughout. At the end: every
acknowledged row present exactly once and nothing else, no error reaching a
caller except `locked` after the full patience (counted and reported),
integrity and counter checks clean.

``python -m tests.reliability.contention --seconds 300``
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from sessiondb import SessionDB, StoreLocked

from .checks import store_findings

WRITERS, READERS = 4, 2
SESSIONS = [f"w{i}" for i in range(WRITERS)] + ["shared"]


def _wait(ready_dir: str, name: str, total: int) -> float:
    """A barrier across processes: each says it is open, then waits for all.
    Returns the start time; a fixed head start was too short on a loaded
    machine (the window passed while workers were still importing)."""
    Path(ready_dir, name).touch()
    give_up = time.time() + 120
    while len(list(Path(ready_dir).iterdir())) < total and time.time() < give_up:
        time.sleep(0.005)
    return time.time()


def writer(path: str, w: int, ready: tuple[str, int], seconds: float, seed: int,
           min_rows: int = 0) -> dict[str, Any]:
    """Append until the deadline and at least ``min_rows`` (within a minute
    more); report what was acknowledged."""
    rng = random.Random(seed * 100 + w)
    acked: list[tuple[str, str]] = []
    locked, errors, checkpoints, checkpoints_busy, n = 0, [], 0, 0, 0
    with SessionDB(path) as db:
        start = _wait(ready[0], f"w{w}", ready[1])
        deadline, cap = start + seconds, start + seconds + 60
        while time.time() < deadline or (len(acked) < min_rows and time.time() < cap):
            sid = "shared" if rng.random() < 0.3 else f"w{w}"
            batch = [{"role": "user", "content": f"w{w} n{n + i}"}
                     for i in range(rng.choice((1, 1, 1, 4, 16)))]
            n += len(batch)
            try:
                db.append_messages(sid, batch)
                acked += [(sid, m["content"]) for m in batch]
            except StoreLocked:
                locked += 1
            except Exception:  # reported; the test asserts there are none
                errors.append(traceback.format_exc(limit=3))
            if rng.random() < 0.02:
                try:
                    db.checkpoint()
                    checkpoints += 1
                except StoreLocked:
                    checkpoints_busy += 1
                except Exception:
                    errors.append(traceback.format_exc(limit=3))
    return {"role": "writer", "acked": acked, "locked": locked, "errors": errors,
            "checkpoints": checkpoints, "checkpoints_busy": checkpoints_busy}


def reader(path: str, r: int, ready: tuple[str, int], seconds: float,
           search: bool) -> dict[str, Any]:
    """Count, page (and search) every session; counts must never go backwards."""
    last: dict[str, int] = {}
    reads, errors = 0, []
    with SessionDB(path) as db:
        deadline = _wait(ready[0], f"r{r}", ready[1]) + seconds
        while time.time() < deadline or reads == 0:
            sid = SESSIONS[reads % len(SESSIONS)]
            try:
                if search and hasattr(db, "search"):
                    db.search("n1")  # the search API: query first
                else:
                    n = db.count_messages([sid])
                    if n < last.get(sid, 0):
                        errors.append(f"{sid}: count went backwards {last[sid]} -> {n}")
                    last[sid] = n
                    db.message_page(sid, limit=50)
                reads += 1
            except Exception:
                errors.append(traceback.format_exc(limit=3))
    return {"role": "searcher" if search else "reader", "reads": reads, "errors": errors,
            "locked": 0}


def run(directory: Path, seconds: float, seed: int = 1, min_rows: int = 0) -> dict[str, Any]:
    """Run the contention for ``seconds`` once every process is open (each
    writer also until ``min_rows``); returns the summary and findings."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = str(directory / "state.db")
    with SessionDB(path) as db:
        for sid in SESSIONS:
            db.create_session(sid, source="contention")
        searcher = hasattr(db, "search")
    ctx = mp.get_context("spawn")
    ready_dir = directory / "ready"
    ready_dir.mkdir(mode=0o700)
    ready = (str(ready_dir), WRITERS + READERS + (1 if searcher else 0))
    jobs = ([(writer, (path, w, ready, seconds, seed, min_rows)) for w in range(WRITERS)]
            + [(reader, (path, r, ready, seconds, False)) for r in range(READERS)]
            + ([(reader, (path, 9, ready, seconds, True))] if searcher else []))
    with ctx.Pool(len(jobs)) as pool:
        pending = [pool.apply_async(f, a) for f, a in jobs]
        results = [p.get(timeout=seconds + 300) for p in pending]
    return summarize(Path(path), results, seconds, searcher)


def summarize(path: Path, results: list[dict[str, Any]], seconds: float,
              searcher: bool) -> dict[str, Any]:
    acked = Counter(k for r in results if r["role"] == "writer" for k in map(tuple, r["acked"]))
    with SessionDB(path) as db:
        stored = Counter((m["session"], m["content"]) for m in _all_rows(db))
    findings = [e for r in results for e in r["errors"]]
    findings += [f"duplicate or lost: {k} acked {acked[k]} stored {stored[k]}"
                 for k in (acked | stored) if acked[k] != stored[k]][:20]
    findings += store_findings(path)
    return {"seconds": seconds, "searcher": searcher,
            "acked_rows": sum(acked.values()), "stored_rows": sum(stored.values()),
            "writes_locked": sum(r["locked"] for r in results),
            "checkpoints": sum(r.get("checkpoints", 0) for r in results),
            "checkpoints_busy": sum(r.get("checkpoints_busy", 0) for r in results),
            "reads": sum(r.get("reads", 0) for r in results if r["role"] == "reader"),
            "searches": sum(r.get("reads", 0) for r in results if r["role"] == "searcher"),
            "findings": findings}


def _all_rows(db: SessionDB) -> list[dict[str, str]]:
    """Every stored message, paged: a quick machine writes more into one
    session in a short run than a whole load returns (SessionTooLong)."""
    out = []
    for sid in SESSIONS:
        after = 0
        while page := db.get_messages(sid, include_archived=True, limit=PAGE, after=after):
            out += [{"session": sid, "content": m["content"]} for m in page]
            after = page[-1]["_db_position"]
    return out


PAGE = 2_000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args(argv)
    summary = run(args.dir or Path(tempfile.mkdtemp(prefix="hermes-contention-")),
                  args.seconds, args.seed)
    print(json.dumps(summary, indent=2))
    return 1 if summary["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
