"""`hermes sessions import-spool`: bring spooled messages back into the store."""
from __future__ import annotations

import click

from sessiondb.spool import SpoolImportReport, import_spool

from .main import AppContext
from .output import emit_json, table
from .sessions_cmd import sessions


def _print_report(report: SpoolImportReport) -> None:
    if not report.files:
        click.echo(f"nothing to import: {report.spool_dir} has no spool files")
        return
    table(((f.session_id or "?", f.messages, f.imported, f.already_present,
            "" if f.truncated_last_line is None else f"torn line {f.truncated_last_line}",
            f"unreadable lines {f.bad_lines}" if f.bad_lines else
            ("would import" if report.dry_run else "moved to imported/"))
           for f in report.files),
          ("session", "spooled", "imported" if not report.dry_run else "to import",
           "already present", "note", "status"))
    verb = "would import" if report.dry_run else "imported"
    click.echo(f"{verb} {report.imported} message(s); {report.already_present} were "
               "already in the store")


@sessions.command("import-spool")
@click.option("--dry-run", is_flag=True, help="Count what would be imported; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def import_spool_cmd(app: AppContext, dry_run: bool, as_json: bool) -> None:
    """Import messages that were spooled because the store could not take them.

    Safe to run more than once: messages already in the store are skipped.
    Fully imported spool files move to spool/imported/. Exits 1 when a spool
    file has unreadable lines (it is then left in place, untouched).

    \b
    Example:
      hermes --home ~/.hermes sessions import-spool --dry-run
    """
    with app.open_store() as db:
        report = import_spool(db, dry_run=dry_run)
    if as_json:
        emit_json(report.to_dict())
    else:
        _print_report(report)
    if report.problems:
        raise SystemExit(1)
