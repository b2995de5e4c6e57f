"""Where stores live: home and profile resolution, private file creation.

The home is resolved at call time (argument, then ``HERMES_HOME``, then
``~/.hermes``) so nothing about paths is frozen at import.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from .errors import InvalidInput, StorageError

HOME_MODE = 0o700
FILE_MODE = 0o600
STORE_NAME = "state.db"
SIDECARS = ("-wal", "-shm", "-journal")

_PROFILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_SESSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@+=-]{0,127}$")


def os_error(e: OSError, what: str, path: str | os.PathLike[str]) -> StorageError:
    """An OS failure creating one of our files or folders, typed by its errno
    (read-only, full, missing parent), as one line: ``what: reason``."""
    from .causes import classify
    reason = e.strerror or str(e)
    return StorageError(f"{what}: {reason}", path=str(path), cause=classify(e))


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The home directory: explicit argument, ``HERMES_HOME``, ``~/.hermes``."""
    if home is not None:
        return Path(home).expanduser()
    env = os.environ.get("HERMES_HOME")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".hermes"


def validate_profile(profile: str) -> str:
    """A profile name is a single safe path component."""
    if not isinstance(profile, str) or not _PROFILE_RE.match(profile) or ".." in profile:
        raise InvalidInput(f"invalid profile name {profile!r}: use letters, digits, '.', '_', '-'")
    return profile


def validate_session_id(session_id: object) -> str:
    """Session ids end up in file names (spool), so they are safe components."""
    if not isinstance(session_id, str) or not _SESSION_RE.match(session_id) or ".." in session_id:
        raise InvalidInput(
            f"invalid session id {session_id!r}: 1-128 characters from letters, digits "
            "and . _ : @ + = -, starting with a letter or digit, without '..'")
    return session_id


def profile_dir(home: str | os.PathLike[str] | None = None, profile: str | None = None) -> Path:
    """The directory that holds a home's (or a profile's) store."""
    base = resolve_home(home)
    if profile:
        return base / "profiles" / validate_profile(profile)
    return base


def store_path(home: str | os.PathLike[str] | None = None, profile: str | None = None) -> Path:
    """``<home>/state.db`` or ``<home>/profiles/<name>/state.db``."""
    return profile_dir(home, profile) / STORE_NAME


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) with mode 0700 where we create them."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    if not p.is_dir():
        raise InvalidInput(f"{p} exists and is not a directory", path=str(p))
    for d in reversed(missing):
        try:
            d.mkdir(mode=HOME_MODE)
        except FileExistsError:
            continue
        except OSError as e:
            raise os_error(e, f"cannot create the directory {d}", d) from e
        os.chmod(d, HOME_MODE)  # mkdir's mode is filtered by the umask
    return path


def create_private_file(path: Path) -> bool:
    """Create an empty 0600 file unless it exists; True when created.

    SQLite gives ``-wal``/``-shm`` the same mode as the database file, so
    creating the database ourselves at 0600 makes the whole bundle private.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return False
    except OSError as e:
        raise os_error(e, f"cannot create {path}", path) from e
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return True


def own_entries(directory: Path, pattern: str, *, dirs: bool = False) -> list[Path]:
    """Entries of a directory of ours (spool, backups, the profile directory)
    matching ``pattern``, sorted by name: only what we write there, regular
    files (and real directories with ``dirs``). A symlink, FIFO, device or
    socket with a matching name was put there by someone else: it is never
    read, listed as ours, moved or removed, so its target stays untouched."""
    try:
        candidates = sorted(directory.glob(pattern))
    except OSError:
        return []
    found = []
    for p in candidates:
        try:
            mode = os.lstat(p).st_mode
        except OSError:  # gone meanwhile, or unreadable: not ours to report
            continue
        if stat.S_ISREG(mode) or (dirs and stat.S_ISDIR(mode)):
            found.append(p)
    return found
