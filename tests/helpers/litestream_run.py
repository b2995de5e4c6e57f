"""A minute of appends beside the real Litestream binary, run in the background
of the test session.

The issue's WAL test is "our checkpointer and Litestream together for 60 s
of appends leave the WAL bounded". A minute in the foreground would add a
minute to the suite, so `WalRun` starts when the session's tests have been
collected (tests/conftest.py), runs beside them at an agent's pace (one
commit, then a short pause: a few hundred commits a second at most, so it
does not starve the other tests of the two CPUs), and the test that asserts
on it runs last and only waits for whatever is left of the minute.

Synchronisation: the writer's "ready" line and its acknowledgement lines,
an Event set by the sampler when the minute is over, and the processes'
exit. The sampler reads the WAL's size and salts every `SAMPLE_S` (a
measurement tick; nothing waits on a sleep to know that something
happened).
"""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_S = 0.05
AGENT_PAUSE_S = 0.004  # after each acknowledged commit


def litestream_binary() -> str:
    return shutil.which("litestream") or str(Path(sys.executable).parent / "litestream")


def wal_salts(wal: Path) -> tuple[int, int] | None:
    try:
        with open(wal, "rb") as f:
            head = f.read(32)
    except OSError:
        return None
    return struct.unpack(">II", head[16:24]) if len(head) == 32 else None


@dataclass
class WalResult:
    seconds: float
    acks: int = 0
    salts: set[tuple[int, int]] = field(default_factory=set)
    peak_bytes: int = 0
    replication: dict = field(default_factory=dict)  # doctor's finding, Litestream running
    litestream_pid: int = 0
    writer_error: str = ""


class WalRun:
    """Litestream replicating a fresh store to a file replica while a writer
    appends, for ``seconds``; then doctor is asked and both stop; `result`
    waits for that."""

    def __init__(self, seconds: float = 60.0, pause: float = AGENT_PAUSE_S) -> None:
        self.seconds, self.pause = seconds, pause
        self.work = Path(tempfile.mkdtemp(prefix="hermes-litestream-run-"))
        self.home = self.work / "home"
        self.res = WalResult(seconds)
        self.over = threading.Event()  # the minute is over (or the writer died)
        self.stop = threading.Event()
        self.procs: list[subprocess.Popen[str]] = []
        self.lock = threading.Lock()
        self.started = 0.0

    def start(self) -> WalRun:
        """Start in the background: the caller goes on at once."""
        threading.Thread(target=self._run, name="litestream-run", daemon=True).start()
        return self

    def _run(self) -> None:
        try:
            writer = self._launch()
        except Exception as e:  # noqa: BLE001 - reported by the test that asserts
            self.res.writer_error = f"could not start: {type(e).__name__}: {e}"
            self.over.set()
            return
        self.started = time.monotonic()
        threading.Thread(target=self._sample, daemon=True).start()
        assert writer.stdout is not None
        for _ in writer.stdout:
            self.res.acks += 1
        if not self.stop.is_set():  # the writer ended before it was stopped
            self.res.writer_error = writer.stderr.read() if writer.stderr else "?"
            self.over.set()

    def _launch(self) -> subprocess.Popen[str]:
        from sessiondb import SessionDB
        SessionDB.open(self.home).close()
        ls = subprocess.Popen([litestream_binary(), "replicate", str(self.home / "state.db"),
                               (self.work / "replica").as_uri()],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        self._own(ls)
        self.res.litestream_pid = ls.pid
        writer = subprocess.Popen([sys.executable, "-m", "tests.helpers.backup_workers",
                                   str(self.home), "w", str(10**9), str(self.pause)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  cwd=ROOT)
        self._own(writer)
        assert writer.stdout is not None
        if writer.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the writer did not start: {writer.stderr.read()}")
        return writer

    def _own(self, proc: subprocess.Popen[str]) -> None:
        """Ours to stop; at once if the session already closed the run."""
        with self.lock:
            self.procs.append(proc)
            if self.stop.is_set():
                proc.kill()
                raise RuntimeError("the run was closed while it started")

    def _sample(self) -> None:
        wal = self.home / "state.db-wal"
        while not self.stop.wait(SAMPLE_S):
            salt = wal_salts(wal)
            if salt is not None:
                self.res.salts.add(salt)
            try:
                self.res.peak_bytes = max(self.res.peak_bytes, wal.stat().st_size)
            except FileNotFoundError:
                pass
            if time.monotonic() - self.started >= self.seconds:  # the minute of appends
                self._finish()
                return

    def _finish(self) -> None:
        """Ask doctor about the replica while Litestream still runs, then
        stop the writer and Litestream at once: they do not run on beside the
        rest of the session. Doctor is a process of its own (CliRunner would
        swap this process's stdout under the test running meanwhile)."""
        self.res.seconds = time.monotonic() - self.started
        try:
            out = subprocess.run([sys.executable, "-c", "from hstate_cli.main import main; "
                                  "main()", "--home", str(self.home), "doctor", "--json"],
                                 capture_output=True, text=True, cwd=ROOT, timeout=120).stdout
            self.res.replication = [f for f in json.loads(out)["findings"]
                                    if f["id"] == "replication"][0]
        except (subprocess.SubprocessError, ValueError, IndexError, KeyError) as e:
            self.res.writer_error = f"doctor: {type(e).__name__}: {e}"
        finally:
            self.close()
            self.over.set()

    def result(self) -> WalResult:
        """The run's result, once the minute is over (waiting for the rest of it)."""
        self.over.wait(self.seconds + 180)
        self.close()
        return self.res

    def close(self) -> None:
        with self.lock:
            self.stop.set()
            procs = list(self.procs)
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
        shutil.rmtree(self.work, ignore_errors=True)  # a second close finds nothing left
