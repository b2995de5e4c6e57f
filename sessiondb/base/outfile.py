"""Crash-safe, private output files for exports and reports.

An output is written to a 0600 temp file created exclusively beside the
target, fsynced, then moved into place and the directory fsynced. Without
``force`` the move is a hard link, which fails if the target appeared in
the meantime, so an existing file is never replaced by accident. On any
failure the temp file is removed and the target is untouched.

``force`` replaces only a regular file. A device node (``/dev/full``,
``/dev/null``), a FIFO, a socket, a directory or a symbolic link at the
target is refused with `OutputNotRegular` whether or not ``force`` is
given, checked before any work and again just before the rename: renaming
over them would replace the node itself, not write into it. Standard
output is asked for as ``-`` by the CLI, never through a path.

`publish` is the same last step for a file another writer filled under a
temp name (SQLite's backup API, ``VACUUM INTO``): fsync, link into place,
fsync the directory.

`append_lines` is the one append path for a log a crash may cut short
(``hermes chat --unsaved-to``): every line is whole after its fsync, and a
line a crash tore is closed with a newline before the next append, so it
stays one bad line instead of swallowing the next record. The spool keeps
its own append (it locks, reserves space and cuts a failed append back).
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any, IO, Iterable, Iterator

from .errors import Cause, StorageError
from .paths import FILE_MODE


class OutputError(StorageError):
    """An output file cannot be created or written."""

    cause = Cause.IO_ERROR
    concerns_store = False


class OutputExists(OutputError):
    """The output path exists and replacing it was not asked for."""

    cause = Cause.INVALID_INPUT


class OutputNotRegular(OutputError):
    """The output path is a device, FIFO, socket, directory or symlink; ``kind`` says which."""

    cause = Cause.INVALID_INPUT

    def __init__(self, message: str, *, kind: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.kind = kind


_KINDS = ((stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symbolic link"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
          (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "special file")


def check_output(path: Path, *, force: bool) -> None:
    """Refuse early (before any work) a target that exists and is not to be
    replaced, or that is anything but a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise _fail(path, e) from e
    if not stat.S_ISREG(st.st_mode):
        kind = _kind(st.st_mode)
        raise OutputNotRegular(f"{path} is a {kind}, not a regular file; an output replaces "
                               "only regular files (for stdout leave out --output, or pass "
                               "-o -)", kind=kind, path=str(path))
    if not force:
        raise OutputExists(f"{path} already exists; pass --force to replace it", path=str(path))


def _fail(path: Path, e: OSError) -> OutputError:
    return OutputError(f"cannot write {path}: {e.strerror or e}", path=str(path))


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable (the entry itself)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _install(tmp: Path, path: Path, force: bool) -> None:
    if force:
        check_output(path, force=True)  # again: a node may have appeared meanwhile
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise OutputExists(f"{path} already exists; pass --force to replace it",
                           path=str(path)) from None
    except OSError as e:
        # Filesystems without hard links: rename after a last existence check.
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        check_output(path, force=False)
        os.rename(tmp, path)
        return
    os.unlink(tmp)


def temp_name(target: Path) -> Path:
    """A fresh dot-named temp path beside ``target`` (what `doctor` and
    `clean_stale_temps` look for: ``.NAME.*.tmp``)."""
    return target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")


def publish(tmp: Path, target: Path) -> None:
    """Make the finished file ``tmp`` durable and move it to ``target``,
    never replacing an existing file (`OutputExists`); ``tmp`` is gone after."""
    fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _install(tmp, target, False)
    fsync_dir(target.parent)


@contextmanager
def private_output(path: str | os.PathLike[str], *, force: bool = False) -> Iterator[IO[str]]:
    """A text file to write ``path`` through; it appears only if the block succeeds."""
    target = Path(path)
    check_output(target, force=force)
    tmp = temp_name(target)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except OSError as e:
        raise _fail(target, e) from e
    installed = False
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have narrowed the mode; make it exact
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        _install(tmp, target, force)
        installed = True
        fsync_dir(target.parent)
    except OSError as e:
        raise _fail(target, e) from e
    finally:
        if not installed:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def append_lines(path: str | os.PathLike[str], lines: Iterable[str]) -> None:
    """Append ``lines`` (each without its newline) to a regular file, created
    0600 if missing, and fsync; never through a symlink."""
    target = Path(path)
    try:
        fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     FILE_MODE)
    except OSError as e:
        raise _fail(target, e) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OutputNotRegular(f"{target} is a {_kind(st.st_mode)}, not a regular file",
                                   kind=_kind(st.st_mode), path=str(target))
        torn = st.st_size > 0 and os.pread(fd, 1, st.st_size - 1) != b"\n"
        data = ("\n" if torn else "") + "".join(line + "\n" for line in lines)
        view = memoryview(data.encode("utf-8"))
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        if st.st_size == 0:
            fsync_dir(target.parent)  # a new file's entry
    except OSError as e:
        raise _fail(target, e) from e
    finally:
        os.close(fd)
