"""Per-flush cost of `TranscriptWriter.flush` as the transcript grows.

For transcripts of 100, 10,000 and 100,000 messages, each flush adds one new
message. Prints the median cost per flush, the ratio largest/smallest (goal:
<= 1.2, i.e. O(new messages), not O(transcript)), and beside it in the same
run:
- floor: `SessionDB.append_message` of one message in the same store (the
  store's own single-row transaction, no transcript at all);
- no cursor: the same flush by a fresh writer each time, which must rescan
  the whole list (what the cursor saves).

Sizes are measured in interleaved blocks so machine noise hits all alike;
after each block the added messages are rewound (untimed), so a transcript
stays within [N, N + block] messages throughout.

    python bench/flush_scaling.py [--sizes 100,10000,100000] [--flushes 2000]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sessiondb import SessionDB, TranscriptWriter  # noqa: E402


def message(i: int) -> dict:
    # A realistic small turn: text plus a few metadata keys.
    return {"role": "assistant" if i % 2 else "user",
            "content": f"message {i}: " + "lorem ipsum dolor sit amet " * 8,
            "finish_reason": "stop" if i % 2 else None}


class Subject:
    """One store with one session holding an N-message transcript."""

    def __init__(self, root: Path, size: int) -> None:
        self.size = size
        self.db = SessionDB(root / f"flush-{size}.db")
        self.sid = self.db.create_session(f"bench-{size}", source="bench")
        self.writer = TranscriptWriter(self.db, self.sid)
        self.msgs = [message(i) for i in range(size)]
        self.writer.flush(self.msgs)
        self.db.checkpoint()
        self.flush_s: list[float] = []
        self.floor_s: list[float] = []
        self.scanned: set[int] = set()

    def flush_block(self, count: int) -> None:
        for _ in range(count):
            self.msgs.append(message(len(self.msgs)))
            t0 = time.perf_counter()
            result = self.writer.flush(self.msgs)
            self.flush_s.append(time.perf_counter() - t0)
            self.scanned.add(result.scanned)
        self.writer.rewind(self.msgs, count)  # untimed: back to N messages

    def floor_block(self, count: int) -> None:
        # Appends go to a side session so the transcript under test is untouched.
        side = self.db.create_session(f"floor-{self.size}", source="bench")
        for i in range(count):
            m = message(i)
            t0 = time.perf_counter()
            self.db.append_message(side, m)
            self.floor_s.append(time.perf_counter() - t0)

    def no_cursor(self, count: int) -> float:
        times = []
        for _ in range(count):
            self.msgs.append(message(len(self.msgs)))
            t0 = time.perf_counter()
            TranscriptWriter(self.db, self.sid).flush(self.msgs)
            times.append(time.perf_counter() - t0)
            self.writer.rewind(self.msgs, 1)
        return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,10000,100000")
    ap.add_argument("--flushes", type=int, default=2000, help="timed flushes per size")
    ap.add_argument("--block", type=int, default=20, help="flushes per interleaved block")
    ap.add_argument("--rescans", type=int, default=3, help="timed no-cursor flushes per size")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        subjects = [Subject(Path(tmp), n) for n in sizes]
        for s in subjects:
            s.flush_block(50)  # warm caches and statements
            s.flush_s.clear()
        for _ in range(max(1, args.flushes // args.block)):
            for s in subjects:
                s.flush_block(args.block)
                s.floor_block(max(1, args.block // 4))
        rescans = {s.size: s.no_cursor(args.rescans) for s in subjects}
        report(subjects, rescans)
        for s in subjects:
            s.db.close()
    return 0


def report(subjects: list[Subject], rescans: dict[int, float]) -> None:
    print(f"{'messages':>9}  {'flush median':>12}  {'p90':>8}  {'scanned':>7}  "
          f"{'floor median':>12}  {'no-cursor median':>16}")
    medians = {}
    for s in subjects:
        med = statistics.median(s.flush_s)
        p90 = statistics.quantiles(s.flush_s, n=10)[-1]
        medians[s.size] = med
        print(f"{s.size:>9}  {med * 1e6:>10.1f}us  {p90 * 1e6:>6.1f}us  "
              f"{','.join(map(str, sorted(s.scanned))):>7}  "
              f"{statistics.median(s.floor_s) * 1e6:>10.1f}us  "
              f"{rescans[s.size] * 1e3:>14.2f}ms")
    lo, hi = min(medians), max(medians)
    ratio = medians[hi] / medians[lo]
    print(f"ratio flush median {hi} / {lo}: {ratio:.3f} (goal <= 1.2)")


if __name__ == "__main__":
    raise SystemExit(main())
