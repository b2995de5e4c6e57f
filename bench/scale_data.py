"""Realistic exports for the scale benchmark: written straight as JSONL (fast), then
imported through the bulk path to make a store.

Sessions of 40-160 messages: user turns and replies of 200 B - 4 KB of text
drawn from a word pool, an assistant tool call followed by its tool result
every fifth turn, and a few 1 MB tool outputs (one per ``BIG_EVERY``
messages). Deterministic for a given seed.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from sessiondb.maintenance.export import EXPORT_FORMAT, EXPORT_VERSION

BIG_EVERY = 25_000
BIG_BYTES = 1 << 20
WORDS = ("session store index query commit page vacuum prune archive backup restore agent "
         "model token reply tool output error retry lock writer reader shard cache python "
         "sqlite journal frame header cursor search result summary compaction lease "
         "postgres network timeout config deploy branch merge review test bench doctor").split()


def _pool(rng: random.Random, size: int = 1 << 20) -> str:
    parts, n = [], 0
    while n < size:
        w = rng.choice(WORDS) + (str(rng.randrange(1000)) if rng.random() < 0.1 else "")
        parts.append(w)
        n += len(w) + 1
    return " ".join(parts)


class Texts:
    """Slices of a word pool: text of a given length without a call per word."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.pool = rng, _pool(rng)

    def text(self, lo: int = 200, hi: int = 4000) -> str:
        n = self.rng.randint(lo, hi)
        at = self.rng.randrange(len(self.pool) - n)
        return self.pool[at:at + n]


def _messages(texts: Texts, count: int, start: int, t0: float) -> list[dict]:
    out = []
    i = 0
    while len(out) < count:
        n = start + len(out)
        ts = t0 + n
        if i % 5 == 4 and len(out) + 2 <= count:
            call_id = f"call_{n}"
            out.append({"role": "assistant", "content": texts.text(200, 600), "timestamp": ts,
                        "tool_calls": [{"id": call_id, "type": "function", "function": {
                            "name": "run", "arguments": json.dumps({"cmd": texts.text(20, 80)})}}]})
            big = (n + 1) % BIG_EVERY == 0
            body = (texts.text(3000, 4000) * (BIG_BYTES // 3500 + 1))[:BIG_BYTES] if big \
                else texts.text()
            out.append({"role": "tool", "tool_call_id": call_id, "content": body,
                        "timestamp": ts + 0.5})
        else:
            role = "user" if i % 2 == 0 else "assistant"
            m = {"role": role, "content": texts.text(), "timestamp": ts}
            if role == "assistant":
                m["finish_reason"] = "stop"
            out.append(m)
        i += 1
    return out


def write_export(path: Path, messages: int, *, seed: int = 7, single_session: bool = False,
                 t0: float = 1.7e9) -> dict[str, int]:
    """Write a hermes JSONL export of ``messages`` messages; returns counts."""
    rng = random.Random(seed)
    texts = Texts(rng)
    written = sessions = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"type": "header", "format": EXPORT_FORMAT,
                            "version": EXPORT_VERSION, "exported_at": "2026-01-01T00:00:00Z"}) + "\n")
        while written < messages:
            n = messages if single_session else min(rng.randint(40, 160), messages - written)
            sid = f"20250101_000000_{sessions:08x}"
            start = t0 + written * 10
            ended = start + n if sessions % 3 else None
            row = {"id": sid, "parent_session_id": None, "source": ("cli", "agent", "api")[sessions % 3],
                   "model": "m", "title": f"session {sessions}", "started_at": start,
                   "updated_at": start + n, "ended_at": ended, "end_reason": None,
                   "message_count": n, "tool_call_count": None, "input_tokens": 0,
                   "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0}
            f.write(json.dumps({"type": "session", "session": row}) + "\n")
            for k in range(0, n, 1000):
                for j, m in enumerate(_messages(texts, min(1000, n - k), written + k, start)):
                    f.write(json.dumps({"type": "message", "session_id": sid,
                                        "uid": f"u{written + k + j}", "timestamp": m["timestamp"],
                                        "state": "active", "compaction_id": None,
                                        "kind": "message", "message": m}) + "\n")
            written += n
            sessions += 1
        f.write(json.dumps({"type": "end", "sessions": sessions, "messages": written}) + "\n")
    return {"sessions": sessions, "messages": written, "bytes": path.stat().st_size}
