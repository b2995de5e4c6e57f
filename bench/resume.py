"""B3 resume: load a 10,000-message conversation whole (cold and warm) and
its last 50 messages (warm).

"Cold" here means a new process and a new connection: the child process
imports everything first, then times opening the store and loading the
conversation. The OS page cache is NOT dropped (that needs root on the
host), so the file's pages are most likely in memory: cold measures
connection setup, schema parse and an empty SQLite page cache, not disk
reads. "Warm" is the same open handle loading again (median of repeats).

Ours is `SessionDB.get_messages`; the floor is SELECT plus JSON decode with
raw apsw on the very same file (see `common.floor_load`); peers load their
own file built with the same messages.

    python bench/resume.py [--quick] [--messages 10000]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import median, message  # noqa: E402
from subjects import PEERS, FloorSubject, Ours, Subject, by_name, peer_status, preload  # noqa: E402

TAIL = 50
# llm logs one response per transaction and cannot be built faster through
# its API; in --quick its conversation is smaller, and the line says so.
BUILD_CAPS = {"llm": (2000, 10000)}


def build(cls: type[Subject], path: Path, n: int) -> int:
    """Write ``n`` messages (in commits of up to 1,000) and return how many."""
    subject = cls()
    subject.open(path, "NORMAL", "b3")
    step = 1000 if cls.batches else cls.per_call
    for start in range(0, n, step):
        subject.append([message(i) for i in range(start, min(n, start + step))])
    subject.close()
    return n


def measure(name: str, path: Path, repeats: int) -> dict[str, Any]:
    """Cold (in this fresh process), then warm full and tail loads."""
    cls = by_name(name)
    preload(name)
    t0 = time.perf_counter()
    subject = cls()
    subject.open(path, "NORMAL", "b3")
    count = subject.load()
    cold = time.perf_counter() - t0
    warm, tail, tail_count = [], [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        subject.load()
        warm.append(time.perf_counter() - t0)
    for _ in range(repeats * 5):
        t0 = time.perf_counter()
        tail_count = subject.load(TAIL)
        tail.append(time.perf_counter() - t0)
    subject.close()
    return {"count": count, "tail_count": tail_count, "cold_s": cold,
            "warm_s": median(warm), "tail_s": median(tail)}


def child(name: str, path: Path, repeats: int) -> dict[str, Any]:
    """Run `measure` in a new interpreter (imports are not timed)."""
    proc = subprocess.run([sys.executable, __file__, "--child", name, str(path),
                           "--repeats", str(repeats)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"unavailable": f"failed: {tail}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def subject_results(names: tuple[str, ...], path: Path, repeats: int,
                    colds: int) -> dict[str, dict[str, Any]]:
    """Children for each subject, alternating subjects so noise hits all alike;
    the first child of each also times the warm loads."""
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for i in range(colds):
        for name in names:
            runs[name].append(child(name, path, repeats if i == 0 else 0))
    out = {}
    for name, results in runs.items():
        bad = [r for r in results if "unavailable" in r]
        out[name] = bad[0] if bad else {**results[0],
                                        "cold_s": median([r["cold_s"] for r in results])}
    return out


def run(quick: bool, messages: int = 10000) -> dict[str, Any]:
    status = peer_status()
    q = 0 if quick else 1
    repeats, colds = (5, 3) if quick else (9, 5)
    out: dict[str, Any] = {"peers": status, "messages": messages, "results": {}}
    with tempfile.TemporaryDirectory(prefix="hermes-b3-") as tmp:
        ours_path = Path(tmp) / "ours.db"
        build(Ours, ours_path, messages)
        res = out["results"]
        res.update(subject_results((FloorSubject.name, Ours.name), ours_path, repeats, colds))
        for cls in PEERS:
            if status[cls.name] != "ok":
                res[cls.name] = {"unavailable": status[cls.name].removeprefix("unavailable: ")}
                continue
            path = Path(tmp) / f"{cls.name}.db"
            try:
                build(cls, path, BUILD_CAPS.get(cls.name, (messages, messages))[q])
            except Exception as e:  # reported, never dropped
                res[cls.name] = {"unavailable": f"build failed: {type(e).__name__}: {e}"}
                continue
            res.update(subject_results((cls.name,), path, repeats, colds))
    for kind in ("cold_s", "warm_s", "tail_s"):
        print(line(out, kind), flush=True)
    return out


def line(out: dict[str, Any], kind: str) -> str:
    label = {"cold_s": "load all, cold", "warm_s": "load all, warm",
             "tail_s": f"last {TAIL}, warm"}[kind]
    res = out["results"]
    floor = res["floor"][kind]
    parts = []
    for name, r in res.items():
        if "unavailable" in r:
            parts.append(f"{name} unavailable: {r['unavailable']}")
            continue
        ratio = "" if name == "floor" else f" {r[kind] / floor:.2f}x"
        size = "" if r["count"] == out["messages"] else f" (of {r['count']})"
        slice_ = "" if kind != "tail_s" or by_name(name).tail_native else " (loads all)"
        parts.append(f"{name} {r[kind] * 1e3:.2f}ms{ratio}{size}{slice_}")
    return f"B3 resume {label:16} | " + " | ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--messages", type=int, default=10000)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--child", nargs=2, metavar=("SUBJECT", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--repeats", type=int, default=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], Path(args.child[1]), args.repeats)))
        return 0
    result = run(args.quick, args.messages)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
