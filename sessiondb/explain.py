"""The one copy table: what a storage failure means and what to run next.

`describe(cause, db_path=..., home=..., profile=...)` returns a
`StorageFailure`: a stable machine code, one sentence a non-expert
understands, and the exact `hermes` commands to run next, pinned to the
failing home, profile and database path. The CLI, the agent and `doctor`
read this table; no other module writes its own explanation.

Rules the table keeps (tests enforce them): never a raw `sqlite3` shell on
the live file, never deleting a `-wal` file, never "free disk space" for a
damaged file. Every command must parse with the real CLI.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import Cause, StorageError

# Where `recover --output` writes by default: a new file beside the store.
RECOVERED_NAME = "state.recovered.db"


@dataclass(frozen=True)
class StorageFailure:
    """A failure explained: ``code`` is stable, ``actions`` are shell lines."""

    code: str
    cause: Cause
    summary: str
    actions: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["cause"] = self.cause.value
        doc["actions"] = list(self.actions)
        return doc


def _hermes(home: Path | None, profile: str | None, *args: str) -> str:
    words = ["hermes"]
    if home is not None:
        words += ["--home", str(home)]
    if profile:
        words += ["--profile", profile]
    return shlex.join(words + list(args))


def commands(db: Path, home: Path | None, profile: str | None) -> dict[str, str]:
    """Every action the table names, by key, pinned to this store (for a
    caller such as inspect that takes one step of an entry, not all)."""
    out = db.parent / RECOVERED_NAME
    return {
        "inspect": _hermes(home, profile, "sessions", "recover", "--source", str(db),
                           "--inspect-only"),
        "recover": _hermes(home, profile, "sessions", "recover", "--source", str(db),
                           "--output", str(out)),
        "import": _hermes(home, profile, "sessions", "import-spool"),
        "doctor": _hermes(home, profile, "doctor"),
        "reindex": _hermes(home, profile, "sessions", "reindex"),
        "list": _hermes(home, profile, "sessions", "list"),
    }


# cause -> (summary, action keys). Summaries may name the store's path.
_TABLE: dict[Cause, tuple[str, tuple[str, ...]]] = {
    Cause.CORRUPT: (
        "The session database {db} is damaged; hermes will not write to it, so the damage "
        "cannot spread, and messages it could not save are kept in the spool.",
        ("inspect", "recover", "import")),
    Cause.FTS_INDEX: (
        "Only the search index of {db} is damaged; your messages are intact, but search may "
        "miss results until the index is rebuilt.",
        ("reindex", "doctor")),
    Cause.LOCKED: (
        "Another program kept the session database {db} busy for too long, so this "
        "operation did not happen; see which program holds it, then try again.",
        ("inspect", "doctor")),
    Cause.DISK_FULL: (
        "The disk holding {db} is full (or a size limit was reached); messages that could "
        "not be saved are kept in the spool. Free space on that disk, then import them.",
        ("doctor", "import")),
    Cause.READONLY: (
        "The session database {db} cannot be written (read-only file, folder or disk); "
        "messages that could not be saved are kept in the spool. Make it writable, then "
        "import them.",
        ("doctor", "import")),
    Cause.IO_ERROR: (
        "The operating system reported a read/write error for {db}; the disk or the file may "
        "be failing, and messages that could not be saved are kept in the spool.",
        ("inspect", "doctor", "import")),
    Cause.REPLACED: (
        "The session database {db} was replaced or its write-ahead log was removed while "
        "hermes was using it; hermes stopped writing to it, and messages it could not save "
        "are kept in the spool.",
        ("inspect", "recover", "import")),
    Cause.LEASE_LOST: (
        "Another agent took over this session's turn, so this one stopped writing to it.",
        ("list",)),
    Cause.FOREIGN: (
        "The file {db} was written by another program, not by hermes-state; hermes never "
        "changes it, but can inspect it, recover it in its own schema or import its sessions "
        "into a store of its own.",
        ("inspect", "recover")),
    Cause.NOT_FOUND: (
        "The session or the session database was not found.",
        ("list",)),
    Cause.INVALID_INPUT: (
        "The request was not valid, so nothing was written.",
        ()),
    Cause.UNKNOWN: (
        "An unexpected storage error happened while using {db}.",
        ("doctor", "inspect")),
}


def describe(cause: Cause | str, *, db_path: str | os.PathLike[str],
             home: str | os.PathLike[str] | None = None,
             profile: str | None = None) -> StorageFailure:
    """Explain ``cause`` for the store at ``db_path`` of ``home``/``profile``."""
    cause = Cause(cause)
    db = Path(db_path)
    summary, keys = _TABLE[cause]
    actions = commands(db, Path(home) if home is not None else None, profile)
    return StorageFailure(code=f"storage_{cause.value}", cause=cause,
                          summary=summary.format(db=db),
                          actions=tuple(actions[k] for k in keys))


def describe_error(err: StorageError, *, home: str | os.PathLike[str] | None = None,
                   profile: str | None = None,
                   db_path: str | os.PathLike[str] | None = None) -> StorageFailure:
    """`describe` for a raised error; the error's own path wins when known."""
    path = err.path or db_path
    if path is None:
        from .paths import store_path
        path = store_path(home, profile)
    failure = describe(err.cause, db_path=path, home=home, profile=profile)
    if err.cause is Cause.FOREIGN:
        failure = StorageFailure(failure.code, failure.cause, failure.summary, foreign_actions(
            err, Path(path), Path(home) if home is not None else None, profile))
    if err.code != failure.code:  # e.g. storage_unsafe_sqlite keeps its own code
        failure = StorageFailure(err.code, failure.cause, failure.summary, failure.actions)
    return failure


def import_home(home: Path | None, db: Path) -> Path:
    """Where `sessions import --from KIND` should put a foreign file's sessions:
    a home of ours beside the foreign file's, never the foreign file itself."""
    base = home if home is not None else db.parent
    return base.with_name(base.name + "-state")


def foreign_actions(err: StorageError, db: Path, home: Path | None,
                    profile: str | None) -> tuple[str, ...]:
    """Inspect and recover (the table's), then the import that reads this kind."""
    keys = _TABLE[Cause.FOREIGN][1]
    actions = commands(db, home, profile)
    out = tuple(actions[k] for k in keys)
    kind = getattr(err, "kind", None)
    if "import" in getattr(err, "applies", ()) and kind:
        out += (_hermes(import_home(home, db), None, "sessions", "import", "--from", kind,
                        str(db)),)
    return out


def all_causes() -> tuple[Cause, ...]:
    """Every cause the table explains (tests iterate over it)."""
    return tuple(_TABLE)


__all__ = ["StorageFailure", "describe", "describe_error", "all_causes", "commands",
           "foreign_actions", "import_home",
           "RECOVERED_NAME"]
