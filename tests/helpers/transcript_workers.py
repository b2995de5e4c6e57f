"""Worker processes for transcript tests: lease conflicts and concurrent appends.

Importable under the spawn start method; every worker reports instead of raising.
"""
from __future__ import annotations

import time
import traceback
from typing import Any

from sessiondb import LeaseLost, SessionDB, TranscriptWriter


def _msg(tag: str, i: int) -> dict:
    return {"role": "user", "content": f"{tag}-{i}", "tag": tag, "seq": i}


def lease_holder(path: str, sid: str, rounds: int, go: Any, done: Any,
                 taken_over: Any) -> dict[str, Any]:
    """Takes the lease, flushes ``rounds`` times against a competing process,
    then (after the other side takes over) tries once more and must be refused."""
    out: dict[str, Any] = {"errors": [], "flushed": 0, "refused_after_takeover": False}
    try:
        with SessionDB(path) as db:
            db.acquire_lease(sid, "A", 3600)
            writer, msgs = TranscriptWriter(db, sid, holder="A"), []
            go.set()
            for i in range(rounds):
                msgs.append(_msg("A", i))
                writer.flush(msgs)
                out["flushed"] += 1
            done.set()
            taken_over.wait(60)
            msgs.append(_msg("A-late", 0))
            try:
                writer.flush(msgs)
            except LeaseLost:
                out["refused_after_takeover"] = True
                out["unwritten"] = [m["content"] for m in writer.unwritten]
    except Exception:
        out["errors"].append(traceback.format_exc(limit=3))
        go.set()
        done.set()
    return out


def lease_challenger(path: str, sid: str, rounds: int, go: Any, done: Any, taken_over: Any,
                     skew_s: float) -> dict[str, Any]:
    """Flushes without holding the lease while the other process writes (every
    attempt must be refused), then, with a clock past the lease's expiry,
    takes the lease over and writes."""
    out: dict[str, Any] = {"errors": [], "refused": 0, "accepted": 0, "took_over": False}
    try:
        with SessionDB(path) as db:
            writer, msgs = TranscriptWriter(db, sid, holder="B"), []
            go.wait(60)
            for i in range(rounds):
                msgs.append(_msg("B", i))
                try:
                    writer.flush(msgs)
                    out["accepted"] += 1
                except LeaseLost:
                    out["refused"] += 1
                try:
                    db.append_message(sid, _msg("B-append", i), holder="B")
                    out["accepted"] += 1
                except LeaseLost:
                    out["refused"] += 1
        done.wait(60)
        with SessionDB(path, clock=lambda: time.time() + skew_s) as late:
            late.acquire_lease(sid, "B", 60)
            writer = TranscriptWriter(late, sid, holder="B")
            out["took_over"] = writer.flush([_msg("B-owner", 0)]).inserted == 1
        taken_over.set()
    except Exception:
        out["errors"].append(traceback.format_exc(limit=3))
        taken_over.set()
    return out


def tagged_appender(path: str, sid: str, tag: str, count: int, started: Any) -> dict[str, Any]:
    """Append ``count`` messages, one commit each, signalling after the first."""
    out: dict[str, Any] = {"errors": []}
    try:
        with SessionDB(path) as db:
            for i in range(count):
                db.append_message(sid, _msg(tag, i))
                if i == 0:
                    started.set()
    except Exception:
        out["errors"].append(traceback.format_exc(limit=3))
        started.set()
    return out
