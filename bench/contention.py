"""B2 contention: 2 writer processes + 1 reader process on one file.

For a fixed time each writer appends one message (llm: one prompt and its
reply) per commit to its own conversation, and the reader keeps loading the
last 50 messages of writer 0's conversation. Reported per subject:
commits/s (both writers together), p99 and max commit latency, errors that
reached the caller (exceptions out of the subject's own API, by type), and
afterwards `PRAGMA integrity_check` plus whether the stored messages equal
the acknowledged ones. Processes are forked after the parent closed every
connection; each opens its own.

    python bench/contention.py [--quick] [--seconds 20]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import apsw  # noqa: E402

from common import message, percentile  # noqa: E402
from subjects import PEERS, Ours, Subject, by_name, peer_status  # noqa: E402

TAIL = 50


def _writer(name: str, path: str, key: str, go: Any, stop_at: Any, out: Any) -> None:
    subject = by_name(name)()
    subject.open(Path(path), "NORMAL", key)
    lat: list[float] = []
    errors: Counter[str] = Counter()
    acked = seq = 0
    go.wait()
    while time.time() < stop_at.value:
        batch = [message(seq + i) for i in range(subject.per_call)]
        seq += subject.per_call
        t0 = time.perf_counter()
        try:
            subject.append(batch)
        except Exception as e:  # what reaches a caller is what we count
            errors[f"{type(e).__name__}: {str(e)[:60]}"] += 1
            continue
        lat.append(time.perf_counter() - t0)
        acked += len(batch)
    subject.close()
    out.put({"role": "writer", "key": key, "commits": len(lat), "acked": acked,
             "p50": percentile(lat, 50), "p99": percentile(lat, 99),
             "max": max(lat, default=float("nan")), "errors": dict(errors)})


def _reader(name: str, path: str, go: Any, stop_at: Any, out: Any) -> None:
    subject = by_name(name)()
    subject.open(Path(path), "NORMAL", "w0")
    lat: list[float] = []
    errors: Counter[str] = Counter()
    go.wait()
    while time.time() < stop_at.value:
        t0 = time.perf_counter()
        try:
            subject.load(TAIL)
        except Exception as e:
            errors[f"reader {type(e).__name__}: {str(e)[:60]}"] += 1
            continue
        lat.append(time.perf_counter() - t0)
    subject.close()
    out.put({"role": "reader", "reads": len(lat), "p99": percentile(lat, 99),
             "errors": dict(errors)})


def one(name: str, root: Path, seconds: float) -> dict[str, Any]:
    path = root / f"{name}.db"
    for key in ("w0", "w1"):  # create both conversations before the race
        s = by_name(name)()
        s.open(path, "NORMAL", key)
        s.close()
    ctx = mp.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    stop_at = ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_writer, args=(name, str(path), k, go, stop_at, out))
             for k in ("w0", "w1")]
    procs.append(ctx.Process(target=_reader, args=(name, str(path), go, stop_at, out)))
    for p in procs:
        p.start()
    time.sleep(1.0)  # let every process open its connection before the clock starts
    stop_at.value = time.time() + seconds
    go.set()
    reports = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    return summarize(name, path, reports, seconds)


def summarize(name: str, path: Path, reports: list[dict[str, Any]],
              seconds: float) -> dict[str, Any]:
    writers = [r for r in reports if r["role"] == "writer"]
    reader = next(r for r in reports if r["role"] == "reader")
    errors: Counter[str] = Counter()
    for r in reports:
        errors.update(r["errors"])
    stored = {}
    for w in writers:
        s = by_name(name)()
        s.open(path, "NORMAL", w["key"])
        stored[w["key"]] = s.load()
        s.close()
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    integrity = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    conn.close()
    return {"commits_per_s": sum(w["commits"] for w in writers) / seconds,
            "p99_ms": max(w["p99"] for w in writers) * 1e3,
            "max_ms": max(w["max"] for w in writers) * 1e3,
            "reads_per_s": reader["reads"] / seconds, "read_p99_ms": reader["p99"] * 1e3,
            "errors": dict(errors), "integrity": integrity == ["ok"],
            "integrity_detail": integrity[:3],
            "acked_equals_stored": all(stored[w["key"]] == w["acked"] for w in writers),
            "acked": {w["key"]: w["acked"] for w in writers}, "stored": stored}


def run(quick: bool, seconds: float | None = None) -> dict[str, Any]:
    seconds = seconds or (5.0 if quick else 20.0)
    status = peer_status()
    out: dict[str, Any] = {"peers": status, "seconds": seconds, "results": {}}
    with tempfile.TemporaryDirectory(prefix="hermes-b2-") as tmp:
        for cls in (Ours, *PEERS):
            if cls is not Ours and status[cls.name] != "ok":
                out["results"][cls.name] = {
                    "unavailable": status[cls.name].removeprefix("unavailable: ")}
                continue
            try:
                out["results"][cls.name] = one(cls.name, Path(tmp), seconds)
            except Exception as e:  # reported, never dropped
                out["results"][cls.name] = {"unavailable": f"{type(e).__name__}: {e}"}
    print(line(out), flush=True)
    return out


def line(out: dict[str, Any]) -> str:
    parts = []
    for name, r in out["results"].items():
        if "unavailable" in r:
            parts.append(f"{name} unavailable: {r['unavailable']}")
            continue
        errs = sum(r["errors"].values())
        parts.append(f"{name} {r['commits_per_s']:,.0f} commits/s p99 {r['p99_ms']:.1f}ms "
                     f"errors {errs} integrity {'ok' if r['integrity'] else 'FAILED'}"
                     f"{'' if r['acked_equals_stored'] else ' stored!=acked'}")
    return f"B2 contention 2w+1r {out['seconds']:.0f}s | " + " | ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    result = run(args.quick, args.seconds)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
