"""`hermes sessions repair`: fix derived damage (search index, triggers, migrations)."""
from __future__ import annotations

import click

from hstate_recovery.base import RecoveryError, RepairStatus
from hstate_recovery.repairs import RepairReport, repair

from ..context import AppContext
from ..groups import HermesCommand
from ..output import emit_json

# Exit codes (docs/state-db-recovery.md): 0 healthy or repaired, 1 refused or
# failed (store unchanged), 3 derived damage found by --check-only, 4 structural.
_EXIT = {RepairStatus.HEALTHY: 0, RepairStatus.REPAIRED: 0, RepairStatus.NEEDS_REPAIR: 3,
         RepairStatus.STRUCTURAL: 4}


def _print(r: RepairReport) -> None:
    click.echo(f"store: {r.db_path}")
    for problem in r.problems:
        click.echo(f"  problem: {problem}")
    if r.status == RepairStatus.STRUCTURAL:
        click.echo(r.summary)
        click.echo("Run, in this order:")
        for command in r.commands:
            click.echo(f"  {command}")
        return
    if r.backup:
        click.echo(f"backup: {r.backup['path']}" + (" (same content as before, reused)"
                                                    if r.backup["reused"] else ""))
    click.echo({RepairStatus.HEALTHY: "status: healthy, nothing to repair",
                RepairStatus.NEEDS_REPAIR: "status: derived damage found; run without "
                                           "--check-only to repair it",
                RepairStatus.REPAIRED: f"status: repaired and verified in {r.seconds:.2f} s",
                }[r.status])


@click.command("repair", cls=HermesCommand)
@click.option("--check-only", is_flag=True, help="Diagnose only; change nothing.")
@click.option("--no-backup", is_flag=True, help="Do not back the store up first.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def repair_cmd(app: AppContext, check_only: bool, no_backup: bool, as_json: bool) -> None:
    """Repair derived damage: search index, sync triggers, fts_stale, migrations.

    Refuses while another process holds the store. Backs the store up into
    <home>/backups/ first, repairs a private copy, verifies it, and writes it
    back under an exclusive lock. Structural damage is never repaired in
    place: the command prints the recover commands instead (exit 4).
    Exit 0 healthy or repaired, 1 refused or failed, 3 damage found with
    --check-only.

    \b
    Example:
      hermes --home ~/.hermes sessions repair --check-only
    """
    try:
        report = repair(app.home, app.profile, check_only=check_only, backup=not no_backup)
    except RecoveryError as e:
        raise click.ClickException(" ".join(str(e).split())) from e
    if as_json:
        emit_json(report.to_dict())
    else:
        _print(report)
    raise SystemExit(_EXIT[report.status])
