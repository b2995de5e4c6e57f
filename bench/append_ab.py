"""A/B of the append path: ours against the floor, CPU and wall per message.

For commit-each and batch-of-100 appends in WAL with ``synchronous``
NORMAL and FULL, every round appends ``n`` messages with the floor and with
`SessionDB.append_messages` into fresh files, alternating which goes first,
and takes process CPU time and wall time of the append loop alone. It
prints medians over the rounds: messages/s, ratio to the floor, and CPU
microseconds per message (ours minus floor is our Python around the SQL).

``--tree DIR`` also loads the ``sessiondb`` of another checkout (e.g. an
exported baseline commit) under the name ``sessiondb_base`` and runs it
as the subject ``base``, interleaved with the others in the same process,
so two versions are compared under the same machine noise.

    python bench/append_ab.py [--rounds 5] [--commits 2000] [--batched 10000]
                              [--tree DIR] [--json FILE]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--commits", type=int, default=2000, help="messages per commit-each run")
    ap.add_argument("--batched", type=int, default=10000, help="messages per batch-100 run")
    ap.add_argument("--tree", help="import sessiondb from this checkout instead")
    ap.add_argument("--json", help="also write the medians to this file")
    return ap.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Floor, message  # noqa: E402

from sessiondb import SessionDB  # noqa: E402

CASES = (("NORMAL", 1), ("FULL", 1), ("NORMAL", 100), ("FULL", 100))


def _floor(path: Path, sync: str) -> tuple[Callable[[list], None], Callable[[], None]]:
    floor = Floor(path, sync, "ab")
    return floor.append, floor.close


def _ours(path: Path, sync: str) -> tuple[Callable[[list], None], Callable[[], None]]:
    db = SessionDB(path)
    if sync != "NORMAL":  # as bench/subjects.py: the store's policy is NORMAL
        db._writer.execute(f"PRAGMA synchronous={sync}")
    db.create_session("ab", source="bench")
    return (lambda batch: db.append_messages("ab", batch)), db.close


SUBJECTS = {"floor": _floor, "ours": _ours}


def load_base(tree: Path) -> None:
    """Load ``tree/sessiondb`` as the package ``sessiondb_base`` (its imports
    are relative, so it runs its own modules) and add the subject ``base``."""
    pkg = tree.resolve() / "sessiondb"
    spec = importlib.util.spec_from_file_location(
        "sessiondb_base", pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sessiondb_base"] = module
    spec.loader.exec_module(module)

    def _base(path: Path, sync: str) -> tuple[Callable[[list], None], Callable[[], None]]:
        db = module.SessionDB(path)
        if sync != "NORMAL":
            db._writer.execute(f"PRAGMA synchronous={sync}")
        db.create_session("ab", source="bench")
        return (lambda batch: db.append_messages("ab", batch)), db.close
    SUBJECTS["base"] = _base


def one_run(name: str, root: Path, sync: str, batch: int, n: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of appending ``n`` messages."""
    path = root / f"{name}-{sync}-{batch}-{time.monotonic_ns()}.db"
    append, close = SUBJECTS[name](path, sync)
    chunks = [[message(i) for i in range(s, min(n, s + batch))] for s in range(0, n, batch)]
    try:
        w0, c0 = time.perf_counter(), time.process_time()
        for chunk in chunks:
            append(chunk)
        return time.perf_counter() - w0, time.process_time() - c0
    finally:
        close()


def run(rounds: int, commits: int, batched: int) -> list[dict[str, Any]]:
    names = list(SUBJECTS)
    samples: dict[tuple, dict[str, list[tuple[float, float]]]] = {
        c: {name: [] for name in names} for c in CASES}
    with tempfile.TemporaryDirectory(prefix="hermes-ab-") as tmp:
        for r in range(rounds):
            for sync, batch in CASES:
                n = commits if batch == 1 else batched
                order = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
                for name in order:
                    samples[(sync, batch)][name].append(one_run(name, Path(tmp), sync, batch, n))
    return [_summary(sync, batch, commits if batch == 1 else batched, samples[(sync, batch)])
            for sync, batch in CASES]


def _summary(sync: str, batch: int, n: int, s: dict[str, list]) -> dict[str, Any]:
    """Medians of wall and CPU per subject; ratio = messages/s over the floor's
    (median of the per-round ratios, each from runs next to each other)."""
    out: dict[str, Any] = {"sync": sync, "batch": batch, "messages": n}
    for name, runs in s.items():
        wall = statistics.median(w for w, _ in runs)
        out[name] = {"msg_per_s": n / wall,
                     "cpu_us_per_msg": statistics.median(c for _, c in runs) / n * 1e6,
                     "cpu_us_min": min(c for _, c in runs) / n * 1e6}
        if name != "floor":
            out[name]["ratio"] = statistics.median(
                f / o for (o, _), (f, _) in zip(runs, s["floor"]))
    return out


def line(c: dict[str, Any]) -> str:
    label = "commit each" if c["batch"] == 1 else f"batch {c['batch']}"
    parts = []
    for name in SUBJECTS:
        r = c[name]
        ratio = f" {r['ratio']:.3f}x" if "ratio" in r else ""
        parts.append(f"{name} {r['msg_per_s']:7,.0f}/s{ratio} cpu {r['cpu_us_per_msg']:5.1f}"
                     f" (min {r['cpu_us_min']:5.1f})us")
    return f"{label:11} {c['sync']:6} | " + " | ".join(parts)


def main() -> int:
    assert ARGS is not None
    if ARGS.tree:
        load_base(Path(ARGS.tree))
    results = run(ARGS.rounds, ARGS.commits, ARGS.batched)
    for c in results:
        print(line(c), flush=True)
    if ARGS.json:
        Path(ARGS.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
