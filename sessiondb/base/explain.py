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

import glob
import os
import shlex
import sys
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


# The CLI's second name: beside Hermes Agent (whose own script is `hermes`)
# this one may be the only name that runs hermes-state.
ALT_PROGRAM = "hermes-state"


def program_name() -> str:
    """The name printed commands start with: ``hermes-state`` when the running
    program was invoked by that name, otherwise ``hermes``."""
    return ALT_PROGRAM if os.path.basename(sys.argv[0] if sys.argv else "") == ALT_PROGRAM \
        else "hermes"


def _hermes(home: Path | None, profile: str | None, *args: str) -> str:
    words = [program_name()]
    if home is not None:
        words += ["--home", str(home)]
    if profile:
        words += ["--profile", profile]
    return shlex.join(words + list(args))


def hermes_command(home: Path | None, profile: str | None, *args: str) -> str:
    """A `hermes` command line pinned to a home and profile, shell-quoted."""
    return _hermes(home, profile, *args)


def recovered_output(directory: Path) -> Path:
    """Where `recover --output` can write now: ``RECOVERED_NAME`` unless an
    earlier recover left a file of that name (the file, ``.partial``,
    ``.unverified``, a sidecar: recover refuses them all), else
    ``state.recovered-2.db`` and so on, so a printed command still runs."""
    stem = RECOVERED_NAME.removesuffix(".db")
    for n in range(1, 100):
        name = RECOVERED_NAME if n == 1 else f"{stem}-{n}.db"
        if not any(directory.glob(glob.escape(name) + "*")):
            return directory / name
    return directory / RECOVERED_NAME


def commands(db: Path, home: Path | None, profile: str | None) -> dict[str, str]:
    """Every action the table names, by key, pinned to this store (for a
    caller such as inspect that takes one step of an entry, not all)."""
    out = recovered_output(db.parent)
    return {
        "inspect": _hermes(home, profile, "sessions", "recover", "--source", str(db),
                           "--inspect-only"),
        "recover": _hermes(home, profile, "sessions", "recover", "--source", str(db),
                           "--output", str(out)),
        "import": _hermes(home, profile, "sessions", "import-spool"),
        "doctor": _hermes(home, profile, "doctor"),
        "reindex": _hermes(home, profile, "sessions", "reindex"),
        "repair": _hermes(home, profile, "sessions", "repair"),
        "list": _hermes(home, profile, "sessions", "list"),
    }


# cause -> (summary, action keys). Summaries may name the store's path and
# never claim a spool: that sentence is added only when something was spooled
# (`spool_note`), and so is the "import" step.
_TABLE: dict[Cause, tuple[str, tuple[str, ...]]] = {
    Cause.CORRUPT: (
        "The session database {db} is damaged; hermes will not write to it, so the damage "
        "cannot spread.",
        ("inspect", "recover", "import")),
    Cause.FTS_INDEX: (
        "Only the search index of {db} is damaged; your messages are intact, but search may "
        "miss results until the index is rebuilt.",
        ("repair", "doctor")),
    Cause.LOCKED: (
        "Another program kept the session database {db} busy for too long, so this "
        "operation did not happen; doctor names the program that holds it: stop it or let "
        "it finish, then try again.",
        ("doctor",)),
    Cause.REBUILD_REFUSED: (
        "Another process holds the session database {db}, so the search index was not "
        "rebuilt (a rebuild needs the store to itself); stop it or run again when it has "
        "closed: doctor names the process.",
        ("doctor",)),
    Cause.HELD: (
        "Another process holds the session database {db}, so this operation did not run "
        "(it needs the store to itself); stop it or run again when it has closed: doctor "
        "names the process.",
        ("doctor",)),
    Cause.DISK_FULL: (
        "The disk holding {db} is full (or a size limit was reached); free space on that "
        "disk, then try again.",
        ("doctor", "import")),
    Cause.READONLY: (
        "The session database {db} cannot be written (read-only file, folder or disk); "
        "make it writable, then try again.",
        ("doctor", "import")),
    Cause.IO_ERROR: (
        "The operating system reported a read/write error for {db}; the disk or the file may "
        "be failing.",
        ("inspect", "doctor", "import")),
    Cause.REPLACED: (
        "The session database {db} was replaced or its write-ahead log was removed while "
        "hermes was using it; hermes stopped writing to it.",
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


# A PostgreSQL store (``db`` is its URL, password removed): the causes whose
# meaning or next step differs from a file's. Recovery of a file does not
# apply; PostgreSQL has its own tools, which the summaries name.
_PG_TABLE: dict[Cause, tuple[str, tuple[str, ...]]] = {
    Cause.CORRUPT: (
        "The PostgreSQL server reported damaged data in {db}; hermes recovery works on SQLite "
        "files only: check the database with PostgreSQL's own tools (pg_amcheck) or restore "
        "it from a backup.",
        ("doctor", "import")),
    Cause.LOCKED: (
        "Another writer kept rows of the PostgreSQL store {db} locked longer than this call "
        "would wait (or the server kept aborting it as a deadlock), so this operation did not "
        "happen; doctor lists long-held locks: let that writer finish, then try again.",
        ("doctor",)),
    Cause.DISK_FULL: (
        "The PostgreSQL server of {db} has run out of disk space; free space on the server's "
        "data disk (or raise its quota), then try again.",
        ("doctor", "import")),
    Cause.READONLY: (
        "The PostgreSQL server of {db} does not accept writes (a read-only standby, or a role "
        "without write permission); point --store-url at the primary, then try again.",
        ("doctor", "import")),
    Cause.IO_ERROR: (
        "The connection to the PostgreSQL server of {db} failed or was lost; check that the "
        "server is running and reachable (pg_isready), then try again: the next call "
        "connects afresh.",
        ("doctor", "import")),
    Cause.UNKNOWN: (
        "An unexpected error happened while using the PostgreSQL store {db}.",
        ("doctor",)),
}


def is_store_url(target: str | os.PathLike[str]) -> bool:
    """Whether ``target`` names a PostgreSQL store rather than a file."""
    return str(target).startswith(("postgresql://", "postgres://"))


def server_commands(url: str, home: Path | None, profile: str | None) -> dict[str, str]:
    """The table's actions for a PostgreSQL store, pinned to its URL."""
    at = ("--store-url", url)
    def pinned(*args: str) -> str:
        words = shlex.split(_hermes(home, profile))
        return shlex.join([*words, *at, *args])
    return {"import": pinned("sessions", "import-spool"), "doctor": pinned("doctor"),
            "list": pinned("sessions", "list")}


def _describe_server(cause: Cause, url: str, home: Path | None, profile: str | None,
                     spooled_to: str | None, unsaved: int) -> StorageFailure:
    summary, keys = _PG_TABLE.get(cause, _TABLE[cause])
    note = spool_note(spooled_to, unsaved)
    summary = summary.format(db=url) + (f" {note}" if note else "")
    actions = server_commands(url, home, profile)
    keys = tuple(k for k in keys if k in actions and (k != "import" or spooled_to))
    return StorageFailure(code=f"storage_{cause.value}", cause=cause, summary=summary,
                          actions=tuple(actions[k] for k in keys))


def spool_note(spooled_to: str | None, unsaved: int = 0) -> str:
    """The sentence about the messages of a failed write: where they are kept,
    or that they are nowhere. Empty when the failure left no messages behind."""
    if spooled_to:
        return (f"The messages it could not save are kept in the spool ({spooled_to}); "
                "import them once the store can take them.")
    if unsaved:
        return (f"{unsaved} message(s) could not be saved anywhere: the spool could not be "
                "written either; they are handed back to you.")
    return ""


def describe(cause: Cause | str, *, db_path: str | os.PathLike[str],
             home: str | os.PathLike[str] | None = None,
             profile: str | None = None, spooled_to: str | None = None,
             unsaved: int = 0) -> StorageFailure:
    """Explain ``cause`` for the store at ``db_path`` of ``home``/``profile``.
    ``spooled_to``/``unsaved``: what happened to the failed write's messages;
    only when some were spooled does the explanation mention the spool."""
    cause = Cause(cause)
    if is_store_url(db_path):
        return _describe_server(cause, str(db_path), Path(home) if home is not None else None,
                                profile, spooled_to, unsaved)
    db = Path(db_path)
    summary, keys = _TABLE[cause]
    summary = summary.format(db=db)
    note = spool_note(spooled_to, unsaved)
    if note:
        summary = f"{summary} {note}"
    if not spooled_to:
        keys = tuple(k for k in keys if k != "import")
    actions = commands(db, Path(home) if home is not None else None, profile)
    return StorageFailure(code=f"storage_{cause.value}", cause=cause, summary=summary,
                          actions=tuple(actions[k] for k in keys))


def describe_error(err: StorageError, *, home: str | os.PathLike[str] | None = None,
                   profile: str | None = None,
                   db_path: str | os.PathLike[str] | None = None) -> StorageFailure:
    """`describe` for a raised error; the error's own path wins when known."""
    path = err.path or db_path
    if path is None:
        from .paths import store_path
        path = store_path(home, profile)
    failure = describe(err.cause, db_path=path, home=home, profile=profile,
                       spooled_to=err.spooled_to, unsaved=len(err.unsaved))
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
           "spool_note", "hermes_command", "foreign_actions", "import_home", "is_store_url",
           "RECOVERED_NAME"]
