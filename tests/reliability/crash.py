"""Crash torture: kill -9 a writer at seeded random moments, then check.

Each episode starts `crash_writer` on the same store, waits until it is
writing, sleeps a seeded random delay and SIGKILLs it. Then, with no
process holding the store, it checks: every acknowledged message present
exactly once, no batch present in part (acknowledged or not), every
acknowledged compaction whole, `integrity_check` ok, FTS integrity ok
(when the search tables exist), counters equal to the rows, and the store
opens and takes a write again.

The seed fixes every episode's operation sequence and kill delay; where in
a commit the kill lands also depends on the machine's scheduling.

``python -m tests.reliability.crash --episodes 500 --seed S [--dir D]``
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from sessiondb import SessionDB

from .checks import store_findings

ROOT = Path(__file__).resolve().parents[2]
EARLY_WINDOW_S = 0.6  # python start-up, imports, open and migrate take about this long
TAG = re.compile(r"^b(\d+)\.(\d+)/(\d+)#(\d+)$")


@dataclass
class CrashStats:
    """What a run did and found."""

    episodes: int = 0
    acked_messages: int = 0
    acked_compactions: int = 0
    rows_checked: int = 0
    torn_journal_lines: int = 0
    early_kills: int = 0
    unacked_rows_present: int = 0
    findings: list[str] = field(default_factory=list)


def read_journal(path: Path, stats: CrashStats) -> list[dict]:
    """Acknowledged records; a torn last line was never acknowledged."""
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1]:
        stats.torn_journal_lines += 1
    return [json.loads(line) for line in lines[:-1] if line]


def _rows(path: Path) -> list[tuple]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute("SELECT id, session_id, content, state, compaction_id FROM messages"
                            ).fetchall()
    finally:
        conn.close()


def check_rows(path: Path, records: list[dict], stats: CrashStats) -> list[str]:
    """Exactly once, no half batch, acknowledged compactions whole."""
    rows = _rows(path)
    stats.rows_checked += len(rows)
    seen = Counter((sid, text) for _, sid, text, _, _ in rows)
    out = [f"duplicate row {k} x{n}" for k, n in seen.items() if n > 1]
    acked = {(r["session"], t) for r in records if r["op"] == "append" for t in r["texts"]}
    out += [f"acknowledged message missing: {k}" for k in sorted(acked - set(seen))]
    stats.unacked_rows_present = len({k for k in seen if TAG.match(k[1] or "")} - acked)
    batches: dict[tuple, set[int]] = {}
    for _, sid, text, _, _ in rows:
        m = TAG.match(text or "")
        if m:
            batches.setdefault((sid, m[1], m[2], int(m[3])), set()).add(int(m[4]))
    out += [f"half batch {k}: {sorted(v)}" for k, v in batches.items() if len(v) != k[3]]
    by_id = {rid: (state, cid) for rid, _, _, state, cid in rows}
    for r in records:
        if r["op"] == "compact":
            bad = [i for i in r["absorbed"] if by_id.get(i) != ("archived", r["cid"])]
            if bad or r["summary"] not in by_id:
                out.append(f"acknowledged compaction {r['cid']} not whole: rows {bad}")
    return out


def reopen_and_write(path: Path) -> list[str]:
    """The store opens through SessionDB after the crash and takes a write."""
    try:
        with SessionDB(path) as db:
            db.create_session("after-crash", source="crash")
            db.append_message("after-crash", {"role": "user", "content": "alive"})
            db.delete_session("after-crash")
    except Exception as e:  # any failure here is a finding, not a crash of the runner
        return [f"reopen failed: {type(e).__name__}: {e}"]
    return []


def episode(path: Path, journal: Path, seed: int, ep: int, max_delay: float,
            early: bool = False) -> None:
    """One writer run, killed after a seeded delay (or when it dies itself).
    ``early``: killed at a seeded moment of its start-up instead (opening,
    migrating a new store, creating the sessions)."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.reliability.crash_writer", str(path),
                             str(journal), str(seed), str(ep)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if early:
            time.sleep(random.Random(seed).uniform(0.0, EARLY_WINDOW_S))
            os.kill(proc.pid, signal.SIGKILL)
            return
        ready = proc.stdout.readline()  # type: ignore[union-attr]
        if ready.strip() != b"ready":
            raise RuntimeError(f"writer did not start: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        time.sleep(random.Random(seed).uniform(0.0, max_delay))
        if proc.poll() is not None:
            raise RuntimeError(f"writer died: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]


def run(directory: Path, episodes: int, seed: int, max_delay: float = 0.25,
        check_every: int = 1, log=None, early_rate: float = 0.0) -> CrashStats:
    """``episodes`` kills on one store in ``directory``; checks after each
    ``check_every``-th episode and after the last. A share ``early_rate`` of
    the episodes kills the writer during its start-up instead."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path, journal = directory / "state.db", directory / "acks.jsonl"
    stats = CrashStats()
    master = random.Random(seed)
    for ep in range(episodes):
        early = master.random() < early_rate
        stats.early_kills += early
        episode(path, journal, master.randrange(2**32), ep, max_delay, early)
        if not path.exists():
            continue  # killed before the store was created: nothing to check yet
        stats.episodes += 1
        if (ep + 1) % check_every and ep + 1 != episodes:
            continue
        records = read_journal(journal, stats)
        # Reopen first: a kill during the very first open may leave a file
        # whose schema is not there yet; opening must finish the migration.
        found = reopen_and_write(path)
        found += check_rows(path, records, stats) + store_findings(path)
        stats.findings += [f"episode {ep}: {f}" for f in found]
        if log:
            log(f"episode {ep + 1}/{episodes}: {stats.rows_checked} rows checked, "
                f"{len(stats.findings)} findings")
    records = read_journal(journal, CrashStats())
    stats.acked_messages = sum(len(r["texts"]) for r in records if r["op"] == "append")
    stats.acked_compactions = sum(1 for r in records if r["op"] == "compact")
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-delay", type=float, default=0.25)
    ap.add_argument("--check-every", type=int, default=1)
    ap.add_argument("--early-rate", type=float, default=0.1,
                    help="share of episodes killed during the writer's start-up")
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="hermes-crash-"))
    started = time.monotonic()
    stats = run(directory, args.episodes, args.seed, args.max_delay, args.check_every,
                log=lambda s: print(s, file=sys.stderr, flush=True), early_rate=args.early_rate)
    summary = {k: v for k, v in vars(stats).items() if k != "findings"}
    summary.update(seed=args.seed, store=str(directory / "state.db"),
                   findings=stats.findings[:50], elapsed_s=round(time.monotonic() - started, 1))
    print(json.dumps(summary, indent=2))
    return 1 if stats.findings else 0


if __name__ == "__main__":
    sys.exit(main())
