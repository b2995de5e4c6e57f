"""Kill -9 during `import_spool`: nothing spooled is lost or doubled.

A spool of many session files (as failed writes leave them) is imported by
a child process that is killed at a seeded moment; a second import must
then bring the store to exactly the spooled messages, each once, and leave
the spool directory empty (every file moved to ``imported/``).

``python -m tests.reliability.spool_crash --episodes 50 --seed S``
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import apsw

from sessiondb import Cause, SessionDB, import_spool
from sessiondb.rows.codec import encode
from sessiondb.importers.spool_import import message_records, spool_dir_for, write_records

from .checks import store_findings

ROOT = Path(__file__).resolve().parents[2]


def make_spool(store: Path, files: int, per_file: int) -> Counter:
    """Spool files for ``files`` sessions; returns the (session, text) expected."""
    expected: Counter = Counter()
    directory = spool_dir_for(store)
    for f in range(files):
        sid = f"spooled{f:04d}"
        batch = [{"role": "user", "content": f"{sid} message {i}"} for i in range(per_file)]
        encoded = [encode(m, index=i) for i, m in enumerate(batch)]
        write_records(directory, sid, message_records(sid, batch, encoded, Cause.DISK_FULL),
                      {"source": "spool-crash"})
        expected.update((sid, m["content"]) for m in batch)
    return expected


def rows(store: Path) -> Counter:
    conn = apsw.Connection(str(store), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return Counter(conn.execute("SELECT session_id, content FROM messages").fetchall())
    finally:
        conn.close()


def episode(directory: Path, seed: int, files: int = 300, per_file: int = 3
            ) -> tuple[list[str], int]:
    """One spool, one killed import, one finishing import: (findings, files
    the killed import had finished)."""
    directory.mkdir(mode=0o700, parents=True)
    store = directory / "state.db"
    SessionDB(store).close()
    expected = make_spool(store, files, per_file)
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from sessiondb import "
                             "SessionDB, import_spool; db = SessionDB(sys.argv[1]); "
                             "print('ready', flush=True); import_spool(db)", str(store)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        proc.stdout.readline()  # type: ignore[union-attr]
        time.sleep(random.Random(seed).uniform(0.0, 0.002 * files))  # about the import's time
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
    imported_dir = spool_dir_for(store) / "imported"
    done = len(list(imported_dir.iterdir())) if imported_dir.exists() else 0
    with SessionDB(store) as db:
        report = import_spool(db)
    findings = [f"spool file left: {p.name}" for p in spool_dir_for(store).glob("*.jsonl")]
    findings += [f"{f.file}: bad lines {f.bad_lines}" for f in report.problems]
    got = rows(store)
    findings += [f"{k}: expected {expected[k]}, stored {got[k]}"
                 for k in expected | got if expected[k] != got[k]][:10]
    return findings + store_findings(store), done


def run(directory: Path, episodes: int, seed: int, files: int = 300) -> dict:
    master = random.Random(seed)
    findings: list[str] = []
    mid = 0
    for ep in range(episodes):
        found, done = episode(directory / f"ep{ep}", master.randrange(2**32), files)
        findings += [f"episode {ep}: {f}" for f in found]
        mid += 0 < done < files
    return {"episodes": episodes, "seed": seed, "files_per_spool": files,
            "kills_mid_import": mid, "findings": findings}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args(argv)
    out = run(args.dir or Path(tempfile.mkdtemp(prefix="hermes-spool-crash-")), args.episodes,
              args.seed)
    print(json.dumps(out, indent=2))
    return 1 if out["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
