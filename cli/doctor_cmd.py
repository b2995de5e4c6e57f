"""`hermes doctor`: run the store checks and print findings."""
from __future__ import annotations

import click

from recovery import run_doctor

from .main import AppContext, cli
from .output import emit_json, table


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def doctor(app: AppContext, as_json: bool) -> None:
    """Check the store and say what is wrong and what to run next.

    Exits 1 when any check is an error.

    \b
    Example:
      hermes --home ~/.hermes doctor --json
    """
    findings = run_doctor(app.home, app.profile)
    errors = [f for f in findings if f.severity == "error"]
    if as_json:
        emit_json({"healthy": not errors, "findings": [f.to_dict() for f in findings]})
    else:
        table(((f.severity, f.check, f.message, f.fix or "") for f in findings),
              ("severity", "check", "finding", "fix"))
    if errors:
        raise SystemExit(1)
