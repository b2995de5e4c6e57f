"""`hermes sessions install-recovered NEW`: put a recovered (or rescued) file in
place of a home's store, the runbook's manual `mv` sequence as one command.
The file in the store's place may also be another program's (Hermes Agent's
state.db, a registered format): NEW must then be a file of that program's
format and version (what `recover` writes for it), the spool is left alone
(it holds messages for a store of ours), and the report names the program,
which must be stopped first and started again afterwards.

Order of work: check NEW (a regular file of ours that passes quick_check,
on the store's filesystem, not the store itself, held by nobody); refuse
while any process holds the store (lock table and open descriptors); move
the current bundle (db, -wal, -shm, -journal) aside into a new 0700
directory ``<store dir>/replaced-<time>/``; rename NEW (and its own
sidecars) into place; fsync both directories; then import the spool into
the installed store and run doctor. Nothing is deleted: the damaged bundle
stays in the aside directory for as long as the operator wants it.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw

from sessiondb.recovery_api import (FILE_MODE, HOME_MODE, SIDECARS, STORE_NAME, Identity,
                                    SessionDB, StorageError, clear_damage, fsync_dir, identify,
                                    import_spool, lock_holders, open_holders, profile_dir,
                                    resolve_home, unknown_migrations)

from ..base import Outcome, RecoveryError, Severity
from ..doctor import run_doctor, worst
from ..source import liveread

ASIDE_PREFIX = "replaced-"
OUR_TABLES = {"sessions", "messages", "migrations"}
# An SQLite file of no registered format: no program is known to own it, so
# nothing says which file may take its place.
UNREGISTERED = "sqlite"


class InstallRefused(RecoveryError):
    """The recovered file cannot be installed now; nothing was changed."""

    code = "install_refused"

    def __init__(self, message: str, *, holders: list[str] | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.holders = holders or []


@dataclass
class InstallReport:
    """What install-recovered did. ``worst`` is doctor's verdict afterwards."""

    store: str
    installed_from: str
    aside_dir: str | None
    moved_aside: list[str] = field(default_factory=list)
    spool: dict[str, Any] | None = None
    spool_error: str | None = None
    #: the program whose file was replaced (another program's file), else None
    owner: str | None = None
    worst: Severity = Severity.OK
    findings: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _bundle(db: Path) -> list[Path]:
    return [p for p in [db] + [Path(f"{db}{s}") for s in SIDECARS] if p.exists()]


def _check_new(new: Path, db: Path) -> None:
    """NEW must be a readable store of ours beside the store, and not the store."""
    names, unknown = _check_readable(new, db)
    if not OUR_TABLES <= names:
        raise InstallRefused(f"{new} is not a hermes session store", path=str(new))
    if unknown:
        raise InstallRefused(f"{new} was written by a newer hermes-state "
                             f"({', '.join(unknown)})", path=str(new))


def _check_readable(new: Path, db: Path) -> tuple[set[str], list[str]]:
    """NEW is a regular file beside the store, not the store, passing quick_check;
    returns its table names and the migrations this version does not know."""
    if not new.is_file() or new.is_symlink():
        raise InstallRefused(f"{new} is not a regular file", path=str(new))
    if db.exists() and os.path.samefile(new, db):
        raise InstallRefused(f"{new} is the store itself", path=str(new))
    if os.stat(new).st_dev != os.stat(db.parent).st_dev:
        raise InstallRefused(f"{new} is on another filesystem than {db.parent}; move it "
                             "there first (a rename must put it in place)", path=str(new))
    try:
        conn = liveread.open_readonly(new)
    except StorageError as e:
        raise InstallRefused(f"{new} cannot be read as a database: {e}", path=str(new)) from e
    try:
        check = liveread.bounded_check(conn)
        unknown = unknown_migrations(conn)
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    except apsw.Error as e:
        raise InstallRefused(f"{new} cannot be read as a database: {e}", path=str(new)) from e
    finally:
        conn.close()
    if check != ["ok"]:
        raise InstallRefused(f"{new} fails quick_check ({'; '.join(check[:2])}); it is not "
                             "a store to install", path=str(new))
    return names, unknown


def _foreign_owner(new: Path, db: Path) -> Identity | None:
    """The source's identity when it is another program's file (then NEW must
    be a file of the same format and version); None for a store of ours."""
    try:
        source = identify(db) if db.exists() else None
    except StorageError:
        source = None  # a damaged store of ours may not identify: what this replaces
    try:
        made = identify(new)
    except StorageError:
        made = None
    if source is None or not source.foreign:
        if made is not None and made.foreign:
            raise InstallRefused(f"{new} is {made.label}, and {db} is not a file of that "
                                 "program (or cannot be told to be one); nothing was changed",
                                 path=str(new))
        return None
    if source.kind == UNREGISTERED:
        raise InstallRefused(f"{db} is {source.label}, of no format hermes-state knows; "
                             "install-recovered does not replace it", path=str(db))
    if made is None or (made.kind, made.version) != (source.kind, source.version):
        what = made.label if made is not None else "not a file it can identify"
        raise InstallRefused(f"{db} is {source.label}: only a file of that program's format "
                             f"and version replaces it, and {new} is {what}; nothing was "
                             "changed", path=str(new))
    return source


def _refuse_if_held(db: Path, new: Path) -> None:
    """Refuse unless nobody has the store's bundle (or NEW's) open or locked."""
    files = _bundle(db) + _bundle(new)
    found = open_holders(files)
    locks = lock_holders(db)
    if locks is None:
        raise InstallRefused(f"cannot tell whether another process has {db} open (no "
                             "/proc/locks on this platform); refusing to replace it",
                             path=str(db))
    busy = sorted({f"{h.pid} ({h.command})" for h in found + locks if h.pid != os.getpid()})
    if busy:
        raise InstallRefused(f"{db} is held by process {', '.join(busy)}; stop it and run "
                             "the command again; nothing was changed", holders=busy,
                             path=str(db))


def _move_aside(db: Path) -> tuple[Path | None, list[str]]:
    bundle = _bundle(db)
    if not bundle:
        return None, []
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{time.time_ns() % 10**6:06d}"
    aside = db.parent / f"{ASIDE_PREFIX}{stamp}"
    aside.mkdir(mode=HOME_MODE)
    os.chmod(aside, HOME_MODE)
    moved = []
    for f in bundle:
        os.rename(f, aside / f.name)
        moved.append(str(aside / f.name))
    fsync_dir(aside)
    return aside, moved


def _put_in_place(new: Path, db: Path) -> None:
    for suffix in SIDECARS:  # NEW's own -wal first: it belongs to NEW's pages
        side = Path(f"{new}{suffix}")
        if side.exists():
            os.rename(side, f"{db}{suffix}")
    os.rename(new, db)
    os.chmod(db, FILE_MODE)
    fsync_dir(db.parent)
    if new.parent != db.parent:
        fsync_dir(new.parent)


def install_recovered(new: str | os.PathLike[str], home: str | os.PathLike[str] | None = None,
                      profile: str | None = None) -> InstallReport:
    """Install ``new`` as the store of ``home``/``profile``; see the module doc."""
    started = time.monotonic()
    root = resolve_home(home)
    db = profile_dir(root, profile) / STORE_NAME
    new_path = Path(new).absolute()
    if not db.parent.is_dir():
        raise InstallRefused(f"{db.parent} does not exist; there is no store to replace",
                             path=str(db))
    owner = _foreign_owner(new_path, db)
    if owner is None:
        _check_new(new_path, db)
    else:  # another program's file, replaced by its recovered copy in its own format
        _check_readable(new_path, db)
    _refuse_if_held(db, new_path)
    aside, moved = _move_aside(db)
    _put_in_place(new_path, db)
    clear_damage(db)  # the damaged file is aside now (its record named that file only)
    report = InstallReport(str(db), str(new_path), str(aside) if aside else None, moved,
                           owner=owner.label if owner is not None else None)
    if owner is None:  # the spool holds messages for a store of ours only
        _import_spool(root, profile, report)
    findings = run_doctor(root, profile)
    report.worst = worst(findings)
    report.findings = [f.to_dict() for f in findings]
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _import_spool(root: Path, profile: str | None, report: InstallReport) -> None:
    try:
        with SessionDB.open(root, profile) as store:
            report.spool = import_spool(store).to_dict()
    except StorageError as e:
        report.spool_error = " ".join(str(e).split())


def _is_ours(path: Path) -> bool:
    """Whether ``path`` has our tables; opened immutable, so no -wal/-shm appear."""
    try:
        conn = apsw.Connection(path.absolute().as_uri() + "?immutable=1",
                               flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    except apsw.Error:
        return False
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    except apsw.Error:
        return False
    finally:
        conn.close()
    return OUR_TABLES <= names


def next_after_recover(source: str | os.PathLike[str], output: str | None,
                       outcome: str, source_tables: list[str] | None = None) -> str | None:
    """The command that follows a `recover --output`: install the result into
    the home whose store was the source (a `.partial` too, once its losses are
    read); None when there is nothing to install, no home to install into, or
    the source was another program's file (``source_tables``: what inspect read)."""
    from sessiondb.recovery_api import hermes_command
    from ..inspection import store_place
    place = store_place(Path(source))
    if output is None or outcome not in (Outcome.RECOVERED, Outcome.PARTIAL) or place is None:
        return None
    if not (_is_ours(Path(output)) or _same_program(Path(source), Path(output))):
        return None
    home, profile = place
    return hermes_command(home, profile, "sessions", "install-recovered", str(output))


def _same_program(source: Path, output: Path) -> bool:
    """Whether ``output`` is a file of the same registered format (and version)
    as the other program's file ``source``: install-recovered puts it back."""
    try:
        a, b = identify(source), identify(output)
    except StorageError:
        return False
    return a.foreign and a.kind != UNREGISTERED and (a.kind, a.version) == (b.kind, b.version)


__all__ = ["install_recovered", "next_after_recover", "InstallReport", "InstallRefused"]
