"""Typed recovery errors: why a snapshot, inspection or recovery could not run.

`RecoveryError` is the base; each subclass has a stable `code`. Usage
problems (`RecoveryUsageError`) are detected before any file is copied.
"""
from __future__ import annotations


class RecoveryError(Exception):
    """Base of every error raised by the recovery package."""

    code = "recovery_error"

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class RecoveryUsageError(RecoveryError):
    """The options name an impossible or unsafe combination (checked before any I/O)."""

    code = "recovery_usage"


class SourceMissing(RecoveryError):
    """The source database file does not exist or is not a regular file."""

    code = "recovery_source_missing"


class InsufficientSpace(RecoveryError):
    """A filesystem lacks room for the snapshot, the output and headroom."""

    code = "recovery_no_space"

    def __init__(self, message: str, *, needed: int, free: int, mount: str, **kw) -> None:
        super().__init__(message, **kw)
        self.needed, self.free, self.mount = needed, free, mount


class SourceChanging(RecoveryError):
    """The source bundle changed while it was being copied."""

    code = "recovery_source_changing"

    def __init__(self, message: str, *, changed: list[str], holders: list, **kw) -> None:
        super().__init__(message, **kw)
        self.changed = changed
        self.holders = holders


class RecoveryIOError(RecoveryError):
    """The operating system refused a read or write (disk full, permissions...)."""

    code = "recovery_io_error"


class OutputUnreadable(RecoveryError):
    """The new file does not read back what was written to it (a disk that
    loses writes): it is kept as NEW.unverified, never put at NEW."""

    code = "recovery_output_unreadable"
