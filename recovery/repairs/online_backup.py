"""`hermes backup`: verified online copies of a live store (or any SQLite file).

The copy is taken with SQLite's backup API from a read-only connection that
holds one read transaction from the first page to the last: the copy is
the store as of that moment, writers in other processes go on committing
to the WAL meanwhile, and the backup never restarts (a restart happens only
when the source's snapshot moves under it). It is stepped a few MiB at a
time (``STEP_PAGES``) so a progress callback can be told how far it is.
The copy and its check run in a thread at a lower CPU priority
(``BACKUP_NICE``), so on a busy machine the store's writers go first; the
check is quick_check's parts in parallel (`split_quick_check`).

Crash safety: the copy is written to a hidden temp name in the backups
directory (``.<prefix>-<stamp>-<pid>.db.tmp``), checked (quick_check, and
the row count of every table equal to the source's in the same
snapshot), then given a manifest (``<name>.json``, what was verified) and
renamed to ``<prefix>-<stamp>.db``; a process killed at any point leaves
at most a hidden temp file, which no listing shows and the next create
removes once its process is gone. Rotation runs only after the new backup
is in place. Files are 0600 in a 0700 directory.
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import apsw

from sessiondb.recovery_api import (MAGIC, SIDECARS, create_private_file, ensure_private_dir,
                                    own_entries, publish)

from ..base import RecoveryError
from ..source import check_space, liveread, source_bytes
DEFAULT_KEEP = 5
STEP_PAGES = 1024  # 2 MiB of the store's 2 KiB pages per step: a progress tick
MANIFEST_SUFFIX = ".json"
# the copy and its check run at this CPU priority (nice), so on a busy machine a
# writer's commits come first (measured: p99 append during a backup 3.0 -> 1.2 ms)
BACKUP_NICE = 10
ORPHAN_MANIFEST_S = 60.0  # a manifest this old without its file: its create was killed
# our temp files: the copy (.<prefix>-<stamp>-<pid>.db.tmp) and its manifest's
_TMP_RE = re.compile(r"^\.(?:.+-\d{8}T\d{6}-\d{9}-(?P<pid>\d+)\.db"
                     r"|.+\.db\.json-(?P<mpid>\d+))\.tmp$")
Progress = Callable[[str, int, int], None]


class BackupFailed(RecoveryError):
    """The copy could not be made or did not verify; no backup was kept."""

    code = "backup_failed"


@dataclass
class BackupInfo:
    """One backup file and what is known about it (from its manifest when it has one)."""

    path: str
    created: float
    size: int
    verified: bool
    check: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    newest_commit: float | None = None  # newest row time of the store it copies
    source: str | None = None

    @property
    def sessions(self) -> int | None:
        return self.counts.get("sessions")

    @property
    def messages(self) -> int | None:
        return self.counts.get("messages")

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.update(sessions=self.sessions, messages=self.messages,
                   age_s=round(time.time() - self.created, 1))
        return doc


@dataclass
class CreateReport:
    """What `create_backup` kept and removed."""

    backup: BackupInfo
    removed: list[str]
    stale_temp_removed: list[str]
    copy_seconds: float
    verify_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"backup": self.backup.to_dict(), "removed": self.removed,
                "stale_temp_removed": self.stale_temp_removed,
                "copy_seconds": self.copy_seconds, "verify_seconds": self.verify_seconds}


# -- reading what a file holds -------------------------------------------------

def table_counts(conn: apsw.Connection) -> dict[str, int]:
    """Rows of every ordinary table (virtual tables are counted by their shadows)."""
    names = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND rootpage > 0 "
        "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    return {str(n): _count(conn, str(n)) for n in names}


def _count(conn: apsw.Connection, table: str) -> int:
    quoted = table.replace('"', '""')
    value = conn.execute(f'SELECT count(*) FROM "{quoted}"').fetchall()[0][0]
    return value if isinstance(value, int) else 0  # count(*) is always an integer


def newest_commit(conn: apsw.Connection) -> float | None:
    """Time of the newest row of a store of ours (the latest session update,
    the last message written); None for a file without those tables. The
    last message is the one with the highest rowid: `timestamp` has no
    index, and a scan of every message would cost as much as the copy."""
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not {"sessions", "messages"} <= names:
        return None
    row = conn.execute("SELECT max((SELECT max(updated_at) FROM sessions), "
                       "(SELECT timestamp FROM messages ORDER BY id DESC LIMIT 1))").fetchall()[0]
    return None if row[0] is None else float(row[0])


def check_copy(path: Path, expected: dict[str, int] | None) -> tuple[list[str], dict[str, int]]:
    """quick_check and table counts of a finished copy; problems, or [] when it verifies."""
    check = split_quick_check(path)
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        counts = table_counts(conn)
    finally:
        conn.close()
    problems = [] if check == ["ok"] else [f"quick_check: {line}" for line in check]
    if expected is not None and counts != expected:
        problems += [f"{t}: {counts.get(t)} rows in the copy, {n} in the source"
                     for t, n in expected.items() if counts.get(t) != n]
    return problems, counts


def split_quick_check(path: Path) -> list[str]:
    """SQLite's quick_check of a file: the same checks, in parallel threads.

    quick_check is the b-tree check (every page, the freelist, which pages
    are used) plus each virtual table's own check; FTS5's (its index
    against the text it indexes) is about half the time on a store's copy.
    Here one connection without any virtual-table module runs quick_check
    (every b-tree, the shadow tables' included, the freelist and the page
    accounting; the modules' checks are skipped), while each virtual
    table's quick_check runs on a connection of its own in a thread beside
    it (apsw lets go of the GIL inside SQLite; on Linux the threads inherit
    the caller's CPU priority). ``["ok"]`` when all pass."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        virtual = [str(r[0]) for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND rootpage = 0 "
            "AND upper(sql) LIKE 'CREATE VIRTUAL%' ORDER BY name")]
    except apsw.Error as e:
        conn.close()
        return [f"{type(e).__name__}: {e}"]
    results: dict[str, list[str]] = {}
    threads = [threading.Thread(target=_check_one, args=(path, name, results),
                                name=f"check-{name}", daemon=True) for name in virtual]
    for t in threads:
        t.start()
    try:
        conn.drop_modules(None)  # the b-tree check leaves the modules' checks to the threads
        results[""] = liveread.bounded_check(conn, budget_s=float("inf"))
    finally:
        conn.close()
        for t in threads:
            t.join()
    lines = [ln for key in ["", *virtual] for ln in results.get(key, ["no result"])
             if ln != "ok"]
    return lines[:20] or ["ok"]


def _check_one(path: Path, table: str, results: dict[str, list[str]]) -> None:
    quoted = table.replace('"', '""')
    try:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            results[table] = [ln for r in conn.execute(f'PRAGMA quick_check("{quoted}")')
                              for ln in str(r[0]).splitlines()]
        finally:
            conn.close()
    except apsw.Error as e:
        results[table] = [f"{table}: {type(e).__name__}: {e}"]


# -- the phases of create ------------------------------------------------------

def _stamp() -> str:
    now = time.time_ns()
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now / 1e9)) + f"-{now % 10**9:09d}"


def _copy(src: apsw.Connection, tmp: Path, progress: Progress | None) -> tuple[dict[str, int],
                                                                                float | None]:
    """Stepped backup inside one read transaction; the source's counts in that snapshot."""
    if not create_private_file(tmp):  # our pid is in the name: nobody else's file
        raise BackupFailed(f"{tmp} already exists", path=str(tmp))
    out = apsw.Connection(str(tmp))
    try:
        src.execute("BEGIN")
        try:
            expected = table_counts(src)  # also starts the read transaction
            newest = newest_commit(src)
            with out.backup("main", src, "main") as b:
                while not b.done:
                    b.step(STEP_PAGES)
                    if progress is not None:
                        progress("copying pages", b.pagecount - b.remaining, b.pagecount)
        finally:
            src.execute("COMMIT")
        # a backup is one self-contained file: no -wal beside it, ever
        out.execute("PRAGMA journal_mode = DELETE").fetchall()
    finally:
        out.close()
    return expected, newest


def _remove_temp(tmp: Path) -> None:
    """A temp copy and the sidecars its copy or check left beside it."""
    for f in (tmp, *(Path(f"{tmp}{suffix}") for suffix in SIDECARS)):
        f.unlink(missing_ok=True)


def remove_stale_temps(directory: Path) -> list[str]:
    """Temp files of creates whose process is gone (killed mid-copy or mid-check),
    with their sidecars, also those left after the temp file itself."""
    removed: list[str] = []
    for p in own_entries(directory, ".*.tmp*"):
        base = next((Path(str(p)[:-len(s)]) for s in SIDECARS if p.name.endswith(s)), p)
        m = _TMP_RE.match(base.name)
        if m is None or str(base) in removed or _alive(int(m["pid"] or m["mpid"])):
            continue
        _remove_temp(base)
        removed.append(str(base))
    for p in own_entries(directory, f"*.db{MANIFEST_SUFFIX}"):  # killed before the rename
        if not Path(str(p)[:-len(MANIFEST_SUFFIX)]).exists() and \
                time.time() - p.stat().st_mtime > ORPHAN_MANIFEST_S:
            p.unlink(missing_ok=True)
            removed.append(str(p))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_manifest(final: Path, info: BackupInfo) -> None:
    """``<final>.json``, written under a temp name that carries our pid (so a
    create killed mid-write leaves a file `remove_stale_temps` recognises)."""
    target = Path(f"{final}{MANIFEST_SUFFIX}")
    tmp = target.with_name(f".{target.name}-{os.getpid()}.tmp")
    doc = {k: v for k, v in asdict(info).items() if k != "path"}
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
        publish(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def create_backup(source: Path, directory: Path, *, prefix: str = "state",
                  keep: int | None = DEFAULT_KEEP,
                  progress: Progress | None = None) -> CreateReport:
    """Copy ``source`` (a live store, or any SQLite file, never changed) into
    ``directory`` as ``<prefix>-<time>.db``, verified; then keep the newest ``keep``."""
    if keep is not None and keep < 1:
        raise BackupFailed(f"--keep must be at least 1, not {keep}")
    with open(source, "rb") as f:  # say what the file is, not that a store is damaged
        if f.read(len(MAGIC)) != MAGIC:
            raise BackupFailed(f"{source} is not an SQLite database: nothing to back up",
                               path=str(source))
    ensure_private_dir(directory)
    stale = remove_stale_temps(directory)
    check_space({directory: source_bytes(source)})
    stamp = _stamp()
    tmp = directory / f".{prefix}-{stamp}-{os.getpid()}.db.tmp"
    final = directory / f"{prefix}-{stamp}.db"
    stop = threading.Event()

    def step(phase: str, done: int, total: int) -> None:
        if stop.is_set():  # the caller was interrupted: stop copying at this step
            raise BackupFailed("backup create was interrupted; nothing was kept")
        if progress is not None:
            progress(phase, done, total)
    try:
        info, copy_s, verify_s = _at_low_priority(
            lambda: _copy_and_verify(source, tmp, step), stop)
        info.path = str(final)
        write_manifest(final, info)  # a manifest without its file is ignored
        publish(tmp, final)
    finally:
        _remove_temp(tmp)
    removed = rotate(directory, prefix, keep) if keep is not None else []
    return CreateReport(info, removed, stale, copy_s, verify_s)


def _at_low_priority(work: Callable[[], Any], stop: threading.Event) -> Any:
    """``work()`` in a thread of its own that lowers its own CPU priority first.
    On Linux a nice value belongs to the thread, so the caller's priority is
    untouched; elsewhere it would be the whole process's, so there it runs as is.
    apsw lets go of the GIL inside SQLite, where the time goes. An interrupt
    of the caller (Ctrl-C) sets ``stop``, which ``work`` checks at each step,
    and is raised once the thread has let go of the files."""
    if not sys.platform.startswith("linux"):
        return work()
    result: list[Any] = []
    failure: list[BaseException] = []
    finished = threading.Event()

    def run() -> None:
        try:
            os.nice(BACKUP_NICE)
            result.append(work())
        except BaseException as e:  # handed to the caller's thread, raised there
            failure.append(e)
        finally:
            finished.set()

    # Waited for on an Event, not by join(): an interrupted join() of Python
    # before 3.13 can mark a running thread stopped, and the next join() then
    # returns at once. Daemon: a second Ctrl-C does not wait for the copy.
    # SIGINT is blocked while the thread starts (which it inherits, so a
    # Ctrl-C always reaches this thread): one arriving before the ``try``
    # is then raised inside it, and stops the copy, instead of leaving the
    # copy running on into a file that is being removed.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        threading.Thread(target=run, name="hermes-backup", daemon=True).start()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        raise
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        finished.wait()
    except BaseException:
        stop.set()
        finished.wait()
        raise
    if failure:
        raise failure[0]
    return result[0]


def _copy_and_verify(source: Path, tmp: Path,
                     progress: Progress | None) -> tuple[BackupInfo, float, float]:
    started = time.time()
    src = liveread.open_readonly(source)
    try:
        expected, newest = _copy(src, tmp, progress)
    except apsw.Error as e:
        raise BackupFailed(f"cannot copy {source}: {e}", path=str(source)) from e
    finally:
        src.close()
    copied = time.time()
    if progress is not None:
        progress("verifying the copy", 0, 0)
    try:
        problems, counts = check_copy(tmp, expected)
    except apsw.Error as e:
        problems, counts = [f"{type(e).__name__}: {e}"], {}
    if problems:
        raise BackupFailed(f"the copy of {source} did not verify ({'; '.join(problems[:3])}); "
                           "nothing was kept", path=str(source))
    info = BackupInfo(str(tmp), started, tmp.stat().st_size, True, ["ok"], counts, newest,
                      str(source))
    return info, round(copied - started, 3), round(time.time() - copied, 3)


def rotate(directory: Path, prefix: str, keep: int) -> list[str]:
    """Remove the oldest ``<prefix>-*.db`` (and manifests) beyond the newest ``keep``."""
    found = own_entries(directory, f"{prefix}-*.db")
    doomed = found[:max(0, len(found) - keep)]
    for path in doomed:
        path.unlink(missing_ok=True)
        Path(f"{path}{MANIFEST_SUFFIX}").unlink(missing_ok=True)
    return [str(p) for p in doomed]


# -- list and verify -----------------------------------------------------------

def read_info(path: Path) -> BackupInfo:
    """What the manifest says about ``path``; unverified (with only its size and
    time) when it has none (repair's backups, or a create killed before it)."""
    st = path.stat()
    try:
        doc = json.loads(Path(f"{path}{MANIFEST_SUFFIX}").read_text())
        return BackupInfo(str(path), float(doc["created"]), st.st_size, bool(doc["verified"]),
                          list(doc.get("check", [])), dict(doc.get("counts", {})),
                          doc.get("newest_commit"), doc.get("source"))
    except (OSError, ValueError, KeyError, TypeError):
        return BackupInfo(str(path), st.st_mtime, st.st_size, False)


def list_backup_infos(directory: Path, prefix: str | None = None) -> list[BackupInfo]:
    """Backups in ``directory``, oldest first (by name, which is by time)."""
    pattern = f"{prefix}-*.db" if prefix else "*.db"
    return [read_info(p) for p in own_entries(directory, pattern)] if directory.is_dir() else []


def newest_verified(directory: Path, prefix: str = "state") -> BackupInfo | None:
    verified = [b for b in list_backup_infos(directory, prefix) if b.verified]
    return max(verified, key=lambda b: b.created, default=None)


def verify_backup(path: Path) -> BackupInfo:
    """Check a backup file again: quick_check, and the counts its manifest recorded."""
    if not path.is_file():
        raise BackupFailed(f"{path} is not a file", path=str(path))
    known = read_info(path)
    try:
        problems, counts = check_copy(path, known.counts or None)
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            newest = newest_commit(conn)
        finally:
            conn.close()
    except apsw.Error as e:
        problems, counts, newest = [f"cannot read it as a database: {e}"], {}, None
    return BackupInfo(str(path), known.created, path.stat().st_size, not problems,
                      problems or ["ok"], counts, newest, known.source)


__all__ = ["BackupFailed", "BackupInfo", "CreateReport", "DEFAULT_KEEP", "check_copy",
           "split_quick_check",
           "create_backup", "write_manifest", "list_backup_infos",
           "newest_commit", "newest_verified", "read_info", "remove_stale_temps", "rotate",
           "table_counts", "verify_backup"]
