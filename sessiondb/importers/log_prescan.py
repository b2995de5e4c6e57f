"""The first pass over transcript files in a worker process, ahead of the import.

A reader's first pass (parse every line's JSON, map the messages, spill
them; see the readers) is most of a transcript import's own work: the
files carry whole file contents beside tool results, so there is much JSON
for few messages. For a run of several files it runs in worker processes
(``python -m sessiondb.importers.prescan_worker``, one per core, at most
``WORKERS``; file ``i`` goes to worker ``i % n``), a few files ahead of the
import, which meanwhile checks the files before: on two cores two files
are parsed at once while the import's own pass mostly waits for them. The worker writes each file's mapped records
to named files in a private directory (0700) and the reader's state (its
report, sessions and title) beside them; the import adopts both (each file
is unlinked as soon as it is opened) and yields the records as if it had
read the file itself.

The workers only pay when a core is free for them: each is an interpreter
that takes about 0.2 s of CPU to start, and the mapped records travel
through files, so on a machine whose cores are all busy the same run is
slower with them (docs/benchmarks.md measured it). So they run only when
the load average leaves a core idle (`cores_free`).

A worker is a new interpreter, not a fork: the importing process holds
SQLite connections and threads a child must not inherit, and nothing of
the caller's program runs again in it. When no worker can run, or for a
run too small to pay for starting one, every file is read in the importing
process as before; a file the worker could not finish is read there too.
"""
from __future__ import annotations

import importlib
import json
import logging
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Callable

log = logging.getLogger(__name__)

#: files read ahead of the one being imported, per worker
AHEAD = 2
#: worker processes at most (one per core below that)
WORKERS = 2
#: a run of less than this many bytes of transcripts is read in-process
MIN_BYTES = 4 << 20
WORKER = "sessiondb.importers.prescan_worker"


class Prescan:
    """Reads files ahead in a worker process; `take(i)` gives file ``i``'s reader its pass."""

    def __init__(self, make: Callable[[Path], Any], readers: list[Any]) -> None:
        self.kind = f"{make.__module__}:{make.__qualname__}"
        self.readers = readers
        self.scratch = tempfile.TemporaryDirectory(prefix="hermes-prescan-")
        self.procs: list[subprocess.Popen[str]] = []
        self.sent = 0  # files asked for
        self.done: list[int] = []  # per worker: the last file it answered for
        self.taken = -1  # the last file given to its reader

    @classmethod
    def start(cls, make: Callable[[Path], Any], readers: list[Any]) -> "Prescan | None":
        """A running prescan, or None when the run is read in-process."""
        if len(readers) < 2 or _size(readers) < MIN_BYTES or not cores_free():
            return None
        pre = cls(make, readers)
        try:
            for _ in range(max(1, min(WORKERS, os.cpu_count() or 1, len(readers)))):
                pre.procs.append(subprocess.Popen(
                    [sys.executable, "-m", WORKER, pre.scratch.name], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, text=True, env=_child_env()))
                pre.done.append(-1)
            pre._ask_ahead(0)
        except OSError as e:
            log.info("transcripts are read in-process: no worker (%s)", e)
            pre.close()
            return None
        return pre

    def _ask_ahead(self, current: int) -> None:
        if not self.procs:
            return
        try:
            while (self.sent < len(self.readers)
                   and self.sent <= current + AHEAD * len(self.procs)):
                proc = self.procs[self.sent % len(self.procs)]
                assert proc.stdin is not None
                path = str(self.readers[self.sent].path)
                proc.stdin.write(json.dumps({"n": self.sent, "kind": self.kind,
                                             "path": path}) + "\n")
                proc.stdin.flush()
                self.sent += 1
        except OSError:  # a worker is gone: the rest is read in-process
            self._stop()

    def take(self, i: int) -> None:
        """Wait for file ``i``'s pass and give it to its reader (which then
        only yields); a read error is raised here, as the reader would."""
        if not self.procs or i >= self.sent or i <= self.taken:
            return  # never asked for, or already taken: read in-process
        self.taken = i
        state = self._answer(i)
        self._ask_ahead(i)
        if state is None:
            return
        scanned, names, error = state
        if error is not None:
            raise error
        self.readers[i].adopt(scanned, names)

    def _answer(self, i: int) -> tuple[Any, list[str], BaseException | None] | None:
        """The worker's state for file ``i`` (None: it could not give it)."""
        w = i % len(self.procs)
        stdout = self.procs[w].stdout
        assert stdout is not None
        while self.done[w] < i:
            line = stdout.readline()
            if not line:
                log.info("a transcript worker ended early; reading the rest here")
                self._stop()
                return None
            self.done[w] = int(line)
            if self.done[w] < i:  # not taken (a retry read it here): drop it
                _load(self.scratch.name, self.done[w])
        return _load(self.scratch.name, i)

    def _stop(self) -> None:
        procs, self.procs = self.procs, []
        for proc in procs:
            _end(proc)

    def close(self) -> None:
        """Stop the worker and remove what it wrote and nobody adopted."""
        self._stop()
        self.scratch.cleanup()


def _end(proc: subprocess.Popen[str]) -> None:
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _load(directory: str, n: int) -> tuple[Any, list[str], BaseException | None] | None:
    path = Path(directory) / f"{n}.state"
    try:
        with open(path, "rb") as f:
            state = pickle.load(f)  # our own worker's file, in our private directory
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        log.info("no state from the transcript worker for file %d (%s)", n, e)
        return None
    finally:
        path.unlink(missing_ok=True)
    return state  # type: ignore[no-any-return]


def serve(directory: str, requests: IO[str], answers: IO[str]) -> None:
    """The worker's loop: for each request line, the reader's first pass over
    its file, its state pickled beside the records, the file's number answered."""
    for line in requests:
        req = json.loads(line)
        module, _, name = req["kind"].partition(":")
        make = getattr(importlib.import_module(module), name)
        reader = make(Path(req["path"]))
        try:
            state: tuple[Any, list[str], BaseException | None] = (
                reader, reader.prescan(directory), None)
        except (OSError, UnicodeDecodeError) as e:
            state = (None, [], e)
        tmp = Path(directory) / f"{req['n']}.state.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, Path(directory) / f"{req['n']}.state")
        answers.write(f"{req['n']}\n")
        answers.flush()


def cores_free() -> bool:
    """Whether the last minute's load average leaves at least one core idle."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform: do not guess
        return False
    return load <= (os.cpu_count() or 1) - 1


def _child_env() -> dict[str, str]:
    """This environment, with the directory this package is imported from
    first on the path (a checkout run from elsewhere finds the same code)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _size(readers: list[Any]) -> int:
    total = 0
    for r in readers:
        try:
            total += r.path.stat().st_size
        except OSError:
            pass
    return total


__all__ = ["AHEAD", "MIN_BYTES", "Prescan", "WORKERS", "cores_free", "serve"]
