"""B1 durable append: messages/s, ratio to the floor, bytes per message.

10,000 messages, one commit per message (the agent's pattern) and in
batches of 100, in WAL with ``synchronous=NORMAL`` and ``FULL``. Ours is
`SessionDB.append_messages`; the floor is raw apsw inserts into the same
schema (see `common.Floor`); peers as in `subjects`. A reference line,
``floor-no-index``, is the floor with the search index's triggers dropped:
it is not a goal, it shows what search indexing costs per message. Peers that slow down
with the length of the conversation are stopped at a message cap or a time
budget, whichever comes first, and the line says how many they wrote.

    python bench/append.py [--quick] [--messages 10000] [--corpus b1|prose|real|scale] [--sync NORMAL] [--page-size N]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (CORPORA, PROSE_SESSION, SYNC_MODES, apply_page_size,  # noqa: E402
                    page_size_option, store_bytes)
from subjects import (PEERS, FloorNoIndex, FloorSubject, FloorSyncIndex, Ours, Subject,  # noqa: E402
                      peer_status)

# Peer caps (messages) per pattern: (quick, full). LangGraph re-serializes
# the whole message list in every checkpoint, so its cost grows with length.
CAPS = {"openai-agents": (2000, 10000), "langgraph": (300, 1000), "llm": (1000, 4000)}
BATCH_CAPS = {"langgraph": (2000, 5000)}
BUDGET_S = (5.0, 45.0)
QUICK_FULL_COMMITS = 2000


class Runner:
    """One subject appending its own file, timed block by block."""

    def __init__(self, cls: type[Subject], root: Path, sync: str, batch: int, n: int,
                 budget: float, corpus: str = "b1") -> None:
        self.cls, self.n, self.budget = cls, n, budget
        self.path = root / f"{cls.name}-{sync}-{batch}.db"
        self.step = max(batch, cls.per_call)
        self.subject = cls()
        self.subject.open(self.path, sync, "b1" if corpus == "b1" else PROSE_SESSION)
        self.msgs = [CORPORA[corpus](i) for i in range(n)]
        self.done, self.elapsed = 0, 0.0
        self.error: str | None = None

    @property
    def active(self) -> bool:
        return self.error is None and self.done < self.n and self.elapsed < self.budget

    def block(self, count: int) -> None:
        stop = min(self.n, self.done + count)
        started = time.perf_counter()
        try:
            while self.done < stop:
                self.subject.append(self.msgs[self.done:self.done + self.step])
                self.done += self.step
            settle = getattr(self.subject, "settle", None)
            if settle is not None:
                settle()
        except Exception as e:  # a peer failing mid-run is reported, never dropped
            self.error = f"failed after {self.done} messages: {type(e).__name__}: {e}"
        self.elapsed += time.perf_counter() - started

    def result(self) -> dict[str, Any]:
        self.subject.close()
        if self.error or not self.done:
            return {"unavailable": (self.error or "wrote nothing").splitlines()[0]}
        size = store_bytes(self.path)
        return {"messages": self.done, "seconds": self.elapsed,
                "msg_per_s": self.done / self.elapsed, "bytes_per_msg": size / self.done,
                "capped": self.done < self.n}


def race(runners: list[Runner], block: int) -> None:
    """Interleave blocks of every runner so machine noise hits all alike."""
    while any(r.active for r in runners):
        for r in runners:
            if r.active:
                r.block(block)


def run(quick: bool, messages: int = 10000, corpus: str = "b1",
        syncs: tuple[str, ...] = SYNC_MODES) -> dict[str, Any]:
    status = peer_status()
    out: dict[str, Any] = {"peers": status, "messages": messages, "corpus": corpus,
                           "cases": []}
    q = 0 if quick else 1
    with tempfile.TemporaryDirectory(prefix="hermes-b1-") as tmp:
        for sync in syncs:
            for batch in (1, 100):
                # FULL with a commit per message is bound by fsync (~3 ms a
                # commit here): --quick writes fewer, and the line says so.
                n = QUICK_FULL_COMMITS if quick and sync == "FULL" and batch == 1 else messages
                out["cases"].append(_case(Path(tmp), status, sync, batch, min(n, messages), q,
                                          corpus))
                print(line(out["cases"][-1]), flush=True)
    return out


def _case(root: Path, status: dict[str, str], sync: str, batch: int, messages: int,
          q: int, corpus: str = "b1") -> dict[str, Any]:
    runners = [Runner(cls, root, sync, batch, messages, 1e9, corpus)
               for cls in (FloorSubject, Ours, FloorNoIndex, FloorSyncIndex)]
    results: dict[str, Any] = {}
    for cls in PEERS:
        why = _unavailable(cls, status, batch)
        if why:
            results[cls.name] = {"unavailable": why}
            continue
        cap = (BATCH_CAPS if batch > 1 else CAPS).get(cls.name, CAPS[cls.name])[q]
        runners.append(Runner(cls, root, sync, batch, cap, BUDGET_S[q], corpus))
    race(runners, 500 if batch == 1 else 2000)
    ordered = {r.cls.name: r.result() for r in runners}
    ordered.update(results)
    return {"sync": sync, "batch": batch, "messages": messages, "results": ordered}


def _unavailable(cls: type[Subject], status: dict[str, str], batch: int) -> str | None:
    if status[cls.name] != "ok":
        return status[cls.name].removeprefix("unavailable: ")
    if batch > 1 and not cls.batches:
        return "no API writes a batch of messages in one commit"
    return None


def line(case: dict[str, Any]) -> str:
    res = case["results"]
    floor = res["floor"]["msg_per_s"]
    parts = []
    for name, r in res.items():
        if "unavailable" in r:
            parts.append(f"{name} unavailable: {r['unavailable']}")
            continue
        ratio = "" if name == "floor" else f" {r['msg_per_s'] / floor:.2f}x"
        capped = f" (over {r['messages']:,})" if r["messages"] < case["messages"] else ""
        parts.append(f"{name} {r['msg_per_s']:,.0f}/s{ratio} {r['bytes_per_msg']:,.0f}B/msg"
                     f"{capped}")
    label = "commit each" if case["batch"] == 1 else f"batch {case['batch']}"
    return (f"B1 append {case['messages']:,} {label} {case['sync']} | "
            + " | ".join(parts))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--messages", type=int, default=10000)
    ap.add_argument("--corpus", choices=sorted(CORPORA), default="b1",
                    help="b1: ~240-character turns; prose: 8-160 words, ~340 characters,"
                         " in a session with a generated 24-character id; scale: the scale"
                         " benchmark's messages (200 B - 4 KB, tool calls), same session id")
    ap.add_argument("--sync", choices=SYNC_MODES, action="append",
                    help="only this synchronous mode (repeatable; default both)")
    ap.add_argument("--json", help="also write the results to this file")
    page_size_option(ap)
    args = ap.parse_args()
    apply_page_size(args.page_size)
    result = run(args.quick, args.messages, args.corpus, tuple(args.sync or SYNC_MODES))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
