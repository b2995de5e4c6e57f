"""`hermes backup create|list|verify|restore`: verified online copies of the store."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable

import click

from hstate_recovery.base import RecoveryError
from hstate_recovery.repairs import (DEFAULT_KEEP, backup_dir, create_backup, list_backup_infos,
                                     verify_backup)
from hstate_recovery.salvage import RestoreReport, restore_backup

from ..context import AppContext
from .doctor import EXIT_BY_SEVERITY
from ..groups import HermesCommand
from ..output import emit_json, fmt_time
from ..phase_progress import PhaseBar


def _store(app: AppContext) -> Path:
    from sessiondb.base import STORE_NAME, profile_dir
    if app.store_url:
        raise click.UsageError("backup copies a SQLite store; for a PostgreSQL store use "
                               "pg_dump (docs/postgresql.md)")
    return profile_dir(app.home, app.profile) / STORE_NAME


def _dir(app: AppContext, to: Path | None) -> Path:
    return to if to is not None else backup_dir(_store(app).parent)


def _call(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except RecoveryError as e:
        raise click.ClickException(" ".join(str(e).split())) from e


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB"


def _age(seconds: float) -> str:
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds / span:.0f}{unit}"
    return f"{seconds:.0f}s"


@click.group()
def backup() -> None:
    """Make, list, verify and restore online backups of the store.

    A backup is a consistent copy taken while agents keep writing (SQLite's
    backup API), verified before it is kept, 0600 in <home>/backups/ (0700).
    For continuous replication see docs/backups.md (Litestream).

    \b
    Example:
      hermes backup create --keep 7
      hermes backup list
    """


@backup.command("create", cls=HermesCommand)
@click.option("--keep", type=click.IntRange(min=1), default=DEFAULT_KEEP, show_default=True,
              help="Keep the newest N backups; older ones are removed after the new one "
                   "verified.")
@click.option("--to", "to", type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the backup (default: <home>/backups/).")
@click.option("--source", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Copy this SQLite file instead of the store (never changed; named "
                   "copy-<name>-<time>.db).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def create_cmd(app: AppContext, keep: int, to: Path | None, source: Path | None,
               as_json: bool) -> None:
    """Copy the live store into a new verified backup, then rotate.

    Writers keep going while it runs. The copy is checked (quick_check, and
    every table's row count equal to the store's at the moment of the copy)
    before it gets its name; an interrupted create leaves no backup file.

    \b
    Example:
      hermes backup create --keep 7 --to /mnt/backups/hermes
    """
    db = source if source is not None else _store(app)
    if not db.is_file():
        raise click.ClickException(f"no store at {db}")
    prefix = f"copy-{db.stem}" if source is not None else "state"
    bar = PhaseBar() if sys.stderr.isatty() and not as_json else None
    try:
        report = _call(lambda: create_backup(db, _dir(app, to), prefix=prefix, keep=keep,
                                             progress=bar))
    finally:
        if bar is not None:
            bar.done()
    if as_json:
        emit_json(report.to_dict())
        return
    b = report.backup
    click.echo(f"backup: {b.path} ({_size(b.size)}, {b.sessions or 0} sessions, "
               f"{b.messages or 0} messages, verified)")
    for path in report.removed:
        click.echo(f"removed (beyond --keep {keep}): {path}")


@backup.command("list", cls=HermesCommand)
@click.option("--to", "to", type=click.Path(file_okay=False, path_type=Path),
              help="Directory to list (default: <home>/backups/).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def list_cmd(app: AppContext, to: Path | None, as_json: bool) -> None:
    """List backups, oldest first: time, age, size, sessions, messages, verified.

    \b
    Example:
      hermes backup list --json
    """
    found = list_backup_infos(_dir(app, to))
    if as_json:
        emit_json([b.to_dict() for b in found])
        return
    if not found:
        click.echo(f"no backups in {_dir(app, to)}")
    now = time.time()
    for b in found:
        click.echo(f"{fmt_time(b.created)}  {_age(now - b.created):>4} ago  {_size(b.size):>10}  "
                   f"{_n(b.sessions):>6} sessions  {_n(b.messages):>8} messages  "
                   f"{'verified' if b.verified else 'not verified'}  {b.path}")


def _n(v: int | None) -> str:
    return "?" if v is None else str(v)


@backup.command("verify", cls=HermesCommand)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def verify_cmd(file: Path, as_json: bool) -> None:
    """Check a backup again: quick_check, and the counts recorded when it was made.

    Exit 0 when it verifies, 1 when it does not.

    \b
    Example:
      hermes backup verify ~/.hermes/backups/state-20260101T000000-000000000.db
    """
    info = _call(lambda: verify_backup(file))
    if as_json:
        emit_json(info.to_dict())
    else:
        click.echo(f"{file}: {'verified' if info.verified else 'does NOT verify'}; "
                   f"{_n(info.sessions)} sessions, {_n(info.messages)} messages")
        for line in info.check if not info.verified else []:
            click.echo(f"  {line}")
    if not info.verified:
        raise SystemExit(1)


def _print_restore(r: RestoreReport) -> None:
    click.echo(f"restored {r.restored_from} as {r.store}" + (" (--force)" if r.forced else ""))
    if r.aside_dir:
        click.echo(f"the replaced files are kept in {r.aside_dir}: "
                   + ", ".join(Path(p).name for p in r.moved_aside))
    click.echo(f"after: {r.counts_after.get('sessions', 0)} sessions, "
               f"{r.counts_after.get('messages', 0)} messages, "
               f"{'verified' if r.verified_after else 'NOT verified'}; doctor: worst {r.worst}")


@backup.command("restore", cls=HermesCommand)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True,
              help="Restore even when the backup is older than the store's newest commit.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def restore_cmd(app: AppContext, file: Path, force: bool, as_json: bool) -> None:
    """Put backup FILE in place of the store; the replaced files are kept.

    Refuses while another process holds the store, and refuses a backup
    older than the store's newest commit unless --force. The current files
    move into <home>/replaced-<time>/; FILE itself is not changed. Exit 0
    restored and healthy, 1 refused (nothing changed), 3 or 4 restored but
    doctor warns or errs.

    \b
    Example:
      hermes backup restore ~/.hermes/backups/state-20260101T000000-000000000.db
    """
    _store(app)
    report = _call(lambda: restore_backup(file, app.home, app.profile, force=force))
    emit_json(report.to_dict()) if as_json else _print_restore(report)
    raise SystemExit(EXIT_BY_SEVERITY[report.worst] if report.verified_after else 4)
