"""`hermes sessions import-spool`: bring spooled messages back into the store."""
from __future__ import annotations

from pathlib import Path

import click

from sessiondb.base import describe
from sessiondb.importers import SpoolFileResult, SpoolImportReport, import_spool

from ..context import AppContext
from ..groups import HermesCommand
from ..output import emit_json, table


def _status(f: SpoolFileResult, dry_run: bool) -> str:
    """What happened to one file, as it really happened."""
    if f.error:
        return f"not imported: {f.error}"
    if f.bad_lines:
        return f"kept in place: unreadable lines {f.bad_lines}"
    if dry_run:
        return "nothing to import" if f.empty else "would import"
    if f.moved_to:
        return "empty, moved to imported/" if f.empty else "moved to imported/"
    return "kept in place"


def _print_report(app: AppContext, db_path: Path, report: SpoolImportReport) -> None:
    if not report.files:
        click.echo(f"nothing to import: {report.spool_dir} has no spool files")
        return
    table(((f.session_id or "?", Path(f.file).name, f.messages, f.imported,
            f.already_present,
            "" if f.truncated_last_line is None else f"torn line {f.truncated_last_line}",
            _status(f, report.dry_run))
           for f in report.files),
          ("session", "file", "spooled", "imported" if not report.dry_run else "to import",
           "already present", "note", "status"))
    verb = "would import" if report.dry_run else "imported"
    click.echo(f"{verb} {report.imported} message(s); {report.already_present} were "
               "already in the store")
    for f in report.problems:
        click.echo(f"Error: {f.file}: {f.error or f'unreadable lines {f.bad_lines}'}",
                   err=True)
    cause = next((f.cause for f in report.problems if f.cause), None)
    if cause is not None:  # the store refused: what ends that, as for any storage error
        failure = describe(cause, db_path=db_path, home=app.home, profile=app.profile)
        click.echo(failure.summary, err=True)
        if failure.actions:
            click.echo(f"Next: {failure.actions[0]}", err=True)


@click.command("import-spool", cls=HermesCommand)
@click.option("--dry-run", is_flag=True, help="Count what would be imported; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def import_spool_cmd(app: AppContext, dry_run: bool, as_json: bool) -> None:
    """Import messages that were spooled because the store could not take them.

    Safe to run more than once: messages already in the store are skipped.
    Fully imported spool files move to spool/imported/. Exits 1 when a spool
    file has unreadable lines or cannot be imported (it is then left in
    place, untouched, and named on stderr); the other files are imported.

    \b
    Example:
      hermes --home ~/.hermes sessions import-spool --dry-run
    """
    with app.open_store() as db:
        report = import_spool(db, dry_run=dry_run)
        db_path = db.path
    if as_json:
        emit_json(report.to_dict())
    else:
        _print_report(app, db_path, report)
    if report.problems:
        raise SystemExit(1)
