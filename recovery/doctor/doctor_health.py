"""Doctor checks that the store can take a write now: who holds the write lock
and since when, a rolled-back write probe, and a ``-wal`` deleted under a
process that still has it open.

A store that reads fine can still refuse every write: another process sat
on the write lock for minutes, the file is immutable (``chattr +i``) or on a
read-only mount, or its ``-wal`` was deleted while a writer kept it open
(then that writer's descriptor holds the only copy of the newest
transactions). These checks name the cause and the person-step that ends it.
They never change the store: the probe's transaction is rolled back on a
connection that never checkpoints, and it runs on a private copy when
another process holds the store.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import apsw

from sessiondb.recovery_api import (Cause, PROC, StorageError, from_apsw, held_locks,
                                    on_readonly_mount, read_damage_record)

from ..base import Severity
from ..source import liveread

if TYPE_CHECKING:
    from .model import Finding, Target

# SQLite's unix VFS: the WAL write lock is byte 120 of the -shm (WAL_WRITE_LOCK
# 0 at WALINDEX_LOCK_OFFSET 120); in rollback mode a writer holds RESERVED,
# the byte after PENDING (0x40000000) of the database file.
WAL_WRITE_LOCK = 120
RESERVED_BYTE = 0x40000001
LOCK_WATCH_S = 1.0  # a commit takes milliseconds; still held after this is not one
IDLE_ERROR_S = 10.0  # a writer's default patience: past it, writes fail with locked
PROBE_COPY_MAX_BYTES = 64 << 20  # larger held stores are not copied just to probe
FS_IOC_GETFLAGS = 0x80086601
FS_IMMUTABLE_FL = 0x10


@dataclass(frozen=True)
class LockHolder:
    pid: int
    command: str


def write_lock_holder(db: Path) -> LockHolder | None:
    """The other process holding the store's write lock (from /proc/locks)."""
    locks = held_locks()
    if locks is None:
        return None
    targets: dict[int, int] = {}
    for suffix, byte in (("-shm", WAL_WRITE_LOCK), ("", RESERVED_BYTE)):
        try:
            targets[os.stat(f"{db}{suffix}").st_ino] = byte
        except OSError:
            continue
    for lk in locks:
        held = targets.get(lk.inode)
        if lk.kind == "WRITE" and held is not None and lk.start <= held <= lk.end:
            return LockHolder(lk.pid, liveread.cmdline_of(lk.pid))
    return None


def _bundle_idle_s(db: Path) -> float:
    """Seconds since any file of the bundle last changed."""
    mtimes = []
    for suffix in ("", "-wal"):
        try:
            mtimes.append(os.stat(f"{db}{suffix}").st_mtime)
        except OSError:
            continue
    return max(0.0, time.time() - max(mtimes)) if mtimes else 0.0


def check_write_lock(t: "Target") -> list["Finding"]:
    from .model import Finding
    holder = write_lock_holder(t.db)
    deadline = time.monotonic() + LOCK_WATCH_S
    while holder is not None and time.monotonic() < deadline:
        time.sleep(0.05)  # a commit in progress lets go within milliseconds
        holder = write_lock_holder(t.db)
    if holder is None:
        return [Finding("write_lock", Severity.OK, "no process is sitting on the write lock")]
    idle = _bundle_idle_s(t.db)
    who = f"process {holder.pid} ({holder.command})"
    fix = f"stop {who} or let it finish its transaction; then: {t.command('doctor')}"
    if idle >= IDLE_ERROR_S:
        return [Finding("write_lock", Severity.ERROR, f"{who} holds the write lock (still held "
                        f"after {LOCK_WATCH_S:.0f} s of watching) and the store has not "
                        f"changed for {idle:.0f} s: every write waits for it and fails "
                        "with 'locked'", fix)]
    return [Finding("write_lock", Severity.WARN, f"{who} has held the write lock for more than "
                    f"{LOCK_WATCH_S:.0f} s (a commit takes milliseconds); writes wait "
                    "for it", fix)]


def immutable(path: Path) -> bool:
    """True when ``path`` has the immutable attribute (``chattr +i``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        raw = fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("l", 0))
        return bool(struct.unpack("l", raw)[0] & FS_IMMUTABLE_FL)
    except OSError:
        return False
    finally:
        os.close(fd)


def probe_write(db: Path) -> str | None:
    """A rolled-back ``BEGIN IMMEDIATE`` plus a schema write on ``db``, on a
    connection that never checkpoints; None when the store takes it, else why
    not (a cause value)."""
    try:
        conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READWRITE)
    except apsw.Error as e:
        return from_apsw(e, path=str(db)).cause.value
    try:
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        conn.set_busy_timeout(int(LOCK_WATCH_S * 1000))
        if conn.readonly("main"):
            return Cause.READONLY.value  # SQLite fell back to a read-only open
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE main._hermes_write_probe(x)")  # dirties page 1
        finally:
            conn.execute("ROLLBACK")
    except apsw.Error as e:
        return from_apsw(e, path=str(db)).cause.value
    finally:
        conn.close()
    return None


def _probe_copy(t: "Target") -> str | None:
    """The probe on a private copy (another process holds the live file)."""
    work = liveread.scratch_dir(t.pdir)
    try:
        conn = liveread.open_readonly(t.db)
        try:
            liveread.copy_live(conn, work / "probe.db")
        finally:
            conn.close()
        return probe_write(work / "probe.db")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_write_probe(t: "Target") -> list["Finding"]:
    from .model import Finding
    if read_damage_record(t.db) is not None:
        return [Finding("write_probe", Severity.INFO, "write probe not run: the store is "
                        "refused for writing (see damage_record)")]
    held = bool(liveread.holder_names(t.db))
    if held and os.path.getsize(t.db) > PROBE_COPY_MAX_BYTES:
        return [Finding("write_probe", Severity.INFO, "write probe not run: another process holds "
                        f"the store and it is larger than {PROBE_COPY_MAX_BYTES >> 20} MiB "
                        "to copy for the probe")]
    try:
        cause = _probe_copy(t) if held else probe_write(t.db)
    except (StorageError, OSError, apsw.Error) as e:
        return [Finding("write_probe", Severity.INFO, f"write probe not run: {e}")]
    where = "a private copy of the store" if held else "the store"
    if cause is None:
        return [Finding("write_probe", Severity.OK, f"{where} takes a write (probe rolled back)")]
    if cause == Cause.LOCKED.value:
        return [Finding("write_probe", Severity.WARN, "the write probe waited for the write lock "
                        "and gave up; see write_lock", t.command("doctor"))]
    if cause == Cause.READONLY.value and immutable(t.db):
        return [Finding("write_probe", Severity.ERROR, f"{t.db} is immutable (chattr +i): every "
                        "write fails; reading still works",
                        f"as root: chattr -i {t.db}; then: {t.command('doctor')}")]
    failure = t.failure(Cause(cause))
    return [Finding("write_probe", Severity.ERROR, f"{where} refuses a write: {failure.summary}",
                    t.fix_text(Cause(cause)))]


def _nearest_dir(path: Path) -> Path:
    while not path.is_dir() and path.parent != path:
        path = path.parent
    return path


def no_store(t: "Target") -> list["Finding"]:
    """A home without a store: fine if one can be created there, else say why not
    (so an unwritable home does not loop between doctor and "sessions list")."""
    from .model import Finding
    where = _nearest_dir(t.db.parent)
    if on_readonly_mount(where) or not os.access(where, os.W_OK | os.X_OK):
        return [Finding("store", Severity.ERROR, f"no store at {t.db}, and none can be created: "
                        f"{where} is not writable (permissions or a read-only mount)",
                        f"make {where} writable for this user (chmod/chown, or mount it "
                        f"read-write); then: {t.command('doctor')}")]
    return [Finding("store", Severity.INFO, f"no store at {t.db} yet; the first chat or import "
                    "creates it", t.command("chat"))]


# -- a -wal deleted under a live process -----------------------------------------

@dataclass(frozen=True)
class DeletedWal:
    pid: int
    fd: int
    command: str

    @property
    def proc_path(self) -> str:
        return f"/proc/{self.pid}/fd/{self.fd}"


def deleted_wal_holders(db: Path, proc: Path = PROC) -> list[DeletedWal]:
    """Processes with the store's ``-wal`` open after it was deleted: each
    descriptor (``/proc/PID/fd/N -> .../state.db-wal (deleted)``) is then the
    only copy of the transactions in it."""
    wanted = f"{os.path.abspath(db)}-wal (deleted)"
    found: list[DeletedWal] = []
    try:
        entries = [e for e in proc.iterdir() if e.name.isdigit()]
    except OSError:
        return found
    for entry in entries:
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) == wanted:
                    found.append(DeletedWal(int(entry.name), int(fd.name),
                                            liveread.cmdline_of(int(entry.name))))
            except (OSError, ValueError):
                continue
    return sorted(found, key=lambda d: (d.pid, d.fd))


def check_deleted_wal(t: "Target") -> list["Finding"]:
    from .model import Finding
    held = deleted_wal_holders(t.db)  # even if a reader has made a new, empty -wal
    if not held:
        return [Finding("deleted_wal", Severity.OK, "no process holds a deleted -wal")]
    h = held[0]
    return [Finding("deleted_wal", Severity.ERROR, f"the -wal of {t.db} was deleted while process "
                    f"{h.pid} ({h.command}) kept it open: its descriptor {h.proc_path} is "
                    "the only copy of the newest transactions. Do not stop that process "
                    "before copying it out", rescue_fix(t, h))]


def rescue_fix(t: "Target", h: DeletedWal) -> str:
    """Copy the store and the deleted -wal (from the holder's descriptor) into
    a private directory, then inspect that pair."""
    rescue = t.pdir / f"wal-rescue-{h.pid}"
    copy = rescue / t.db.name
    return (f"mkdir -m 700 {rescue} && cp {t.db} {copy} && cp {h.proc_path} {copy}-wal; "
            "then: " + t.command("sessions", "recover", "--source", str(copy),
                                 "--inspect-only"))
