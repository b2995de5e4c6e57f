"""`hermes sessions install-recovered NEW`: put a recovered file in place of the store."""
from __future__ import annotations

from pathlib import Path

import click

from hstate_recovery.base import RecoveryError, Severity
from hstate_recovery.salvage import InstallReport, install_recovered

from ..context import AppContext
from ..groups import HermesCommand
from ..output import emit_json
from .doctor import EXIT_BY_SEVERITY


def _print(r: InstallReport) -> None:
    click.echo(f"installed {r.installed_from} as {r.store}")
    if r.owner:
        click.echo(f"the file belongs to another program ({r.owner}); start it again")
    if r.aside_dir:
        click.echo(f"the replaced files are kept in {r.aside_dir}: "
                   + ", ".join(Path(p).name for p in r.moved_aside))
    if r.spool_error:
        click.echo(f"Error: the spool was not imported: {r.spool_error}", err=True)
    elif r.spool and r.spool["files"]:
        click.echo(f"spool: imported {r.spool['imported']} message(s) from "
                   f"{len(r.spool['files'])} file(s); {r.spool['problems']} file(s) kept")
    bad = [f for f in r.findings if f["severity"] in (Severity.WARN, Severity.ERROR)]
    for f in bad:
        click.echo(f"doctor {f['severity']}: {f['check']}: {f['message']}")
    click.echo(f"doctor: worst finding {r.worst}")


@click.command("install-recovered", cls=HermesCommand)
@click.argument("new", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def install_recovered_cmd(app: AppContext, new: Path, as_json: bool) -> None:
    """Install a recovered (or rescued) store file NEW in place of the store.

    Refuses while any process holds the store or NEW. Moves the current
    bundle (state.db, -wal, -shm) aside into a new 0700 directory
    <home>/replaced-<time>/ (nothing is deleted), renames NEW into place,
    imports the spool and runs doctor. Exit 0 installed and healthy, 1
    refused (nothing changed), 3 or 4 installed but doctor warns or errs.

    \b
    Example:
      hermes --home ~/.hermes sessions install-recovered ~/.hermes/state.recovered.db
    """
    try:
        report = install_recovered(new, app.home, app.profile)
    except RecoveryError as e:
        raise click.ClickException(" ".join(str(e).split())) from e
    emit_json(report.to_dict()) if as_json else _print(report)
    raise SystemExit(EXIT_BY_SEVERITY[report.worst])
