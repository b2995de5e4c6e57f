"""The writer process the crash harness kills: it writes forever, and after
each commit it appends an fsynced line to an acknowledgement journal.

Run as ``python -m tests.reliability.crash_writer STORE JOURNAL SEED EPISODE``.
Operations, chosen by the seeded generator: single appends, batched appends,
`TranscriptWriter` flushes (continuing the transcript stored by earlier
episodes) and micro-compactions. Message text names the episode, operation
and batch (``b<ep>.<op>/<size>#<i>``), so the checker can find a half batch
or a duplicate even among rows nobody acknowledged.
"""
from __future__ import annotations

import json
import os
import random
import sys
from typing import Any

from sessiondb import MARKER_KEY, Persisted, SessionDB, TranscriptWriter

SESSIONS = ("single", "batch", "flush")
SUMMARY_KIND = "rolling_summary"


class Journal:
    """Acknowledgements: one JSON line per successful commit, fsynced."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def ack(self, record: dict[str, Any]) -> None:
        os.write(self.fd, (json.dumps(record) + "\n").encode())
        os.fsync(self.fd)


def message(tag: str, rng: random.Random) -> dict[str, Any]:
    """A message whose text is ``tag``; some carry tool calls (counters)."""
    m: dict[str, Any] = {"role": rng.choice(("user", "assistant")), "content": tag}
    if m["role"] == "assistant" and rng.random() < 0.3:
        m["tool_calls"] = [{"id": f"{tag}-c{j}", "type": "function",
                            "function": {"name": "f", "arguments": "{}"}}
                           for j in range(rng.randint(1, 3))]
    return m


def batch(ep: int, op: int, size: int, rng: random.Random) -> list[dict[str, Any]]:
    return [message(f"b{ep}.{op}/{size}#{i}", rng) for i in range(size)]


def compact_some(writer: TranscriptWriter, transcript: list[dict[str, Any]],
                 rng: random.Random, tag: str) -> dict[str, Any] | None:
    """Compact a few leading live messages (never summaries) of the transcript."""
    live = [m for m in transcript if isinstance(m.get(MARKER_KEY), Persisted)
            and m.get("kind") != SUMMARY_KIND and not m["content"].startswith("summary")]
    if len(live) < 4:
        return None
    absorbed = live[:rng.randint(2, min(6, len(live) - 1))]
    ids = [m[MARKER_KEY].id for m in absorbed]
    summary = {"role": "assistant", "content": f"summary {tag}"}
    result = writer.compact(transcript, ids, summary)
    return {"op": "compact", "cid": result.compaction_id, "absorbed": ids,
            "summary": result.summary_id}


def run(path: str, journal_path: str, seed: int, ep: int) -> None:
    rng = random.Random(seed)
    journal = Journal(journal_path)
    with SessionDB(path) as db:
        for sid in SESSIONS:
            db.create_session(sid, source="crash")
        transcript = db.get_messages("flush")  # marked dicts from earlier episodes
        writer = TranscriptWriter(db, "flush")
        print("ready", flush=True)
        for op in range(10**9):
            roll = rng.random()
            if roll < 0.3:
                texts = batch(ep, op, 1, rng)
                db.append_messages("single", texts)
                journal.ack({"op": "append", "session": "single",
                             "texts": [m["content"] for m in texts]})
            elif roll < 0.6:
                texts = batch(ep, op, rng.randint(2, 12), rng)
                db.append_messages("batch", texts)
                journal.ack({"op": "append", "session": "batch",
                             "texts": [m["content"] for m in texts]})
            elif roll < 0.93:
                new = batch(ep, op, rng.randint(1, 5), rng)
                transcript.extend(new)
                writer.flush(transcript)
                journal.ack({"op": "append", "session": "flush",
                             "texts": [m["content"] for m in new]})
            else:
                record = compact_some(writer, transcript, rng, f"{ep}.{op}")
                if record:
                    journal.ack(record)


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
