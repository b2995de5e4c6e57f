"""`hermes doctor`: run the checks (and with --fix the safe fixes) and print findings."""
from __future__ import annotations

import click

from hstate_recovery.base import RecoveryError, Severity
from hstate_recovery.doctor import Finding, fix, run_doctor, run_pg_doctor, worst

from ..context import AppContext
from ..groups import HermesCommand
from ..output import emit_json, plural, stderr_is_tty, table

# Exit status from the worst finding (docs/state-db-recovery.md): 0 ok/info,
# 3 warn, 4 error; 1 when --fix was refused or doctor itself failed.
EXIT_BY_SEVERITY = {Severity.OK: 0, Severity.INFO: 0, Severity.WARN: 3,
                    Severity.ERROR: 4}


def _progress(text: str) -> None:
    click.echo(f"doctor: {text}", err=True)


def _print(findings: list[Finding], applied: list[str] | None) -> None:
    """The table names each fix by number; the fixes follow it in full, one
    step a line, never wrapped, so every command can be pasted as printed."""
    for line in applied or []:
        click.echo(f"fixed: {line}")
    fixes: list[str] = []

    def ref(f: Finding) -> str:
        mark = "[--fix] " if f.fixable and f.severity != Severity.OK else ""
        if not f.fix:
            return mark.strip()
        if f.fix not in fixes:
            fixes.append(f.fix)
        return f"{mark}see ({fixes.index(f.fix) + 1})"
    table(((f.severity, f.check, f.message, ref(f)) for f in findings),
          ("severity", "check", "finding", "fix"))
    for n, text in enumerate(fixes, 1):
        steps = text.split("; then ")
        click.echo(f"({n}) {steps[0]}")
        for step in steps[1:]:
            click.echo(f"    then: {step}")
    click.echo(summary_line(findings))


def summary_line(findings: list[Finding]) -> str:
    """``15 checks: 14 ok, 1 info, 0 warn, 0 error; worst: info``."""
    counts = {s: sum(f.severity == s for f in findings) for s in Severity}
    return (f"{plural(len(findings), 'check')}: "
            + ", ".join(f"{n} {s}" for s, n in counts.items()) + f"; worst: {worst(findings)}")


@click.command(cls=HermesCommand)
@click.option("--fix", "do_fix", is_flag=True,
              help="Apply the safe fixes, then check again (refused while another "
                   "process holds the store).")
@click.option("--full", is_flag=True,
              help="Check every page (integrity_check, FTS5 integrity-check), with progress "
                   "and an estimate; by default a store over 128 MiB is sampled.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def doctor(app: AppContext, do_fix: bool, full: bool, as_json: bool) -> None:
    """Check the home and its store; say what is wrong and what to run next.

    With hermes --store-url URL (or HERMES_STORE_URL) the store is a
    PostgreSQL database: connectivity, server version, schema and pending migrations,
    search index health, long-held locks, replication role.

    Read-only unless --fix. Exit status is the worst finding: 0 ok or info,
    3 warn, 4 error; 1 when --fix was refused.

    \b
    Example:
      hermes --home ~/.hermes doctor --fix
    """
    applied, refused = None, None
    store_url = app.store_url
    if store_url and (do_fix or full):
        raise click.UsageError("--fix and --full are for SQLite stores, not --store-url")
    try:
        if store_url:
            findings = run_pg_doctor(store_url, command=app.command)
        elif do_fix:
            report = fix(app.home, app.profile, full=full)
            findings, applied, refused = report.after, report.applied, report.refused
        else:
            findings = run_doctor(app.home, app.profile, full=full,
                                  progress=_progress if stderr_is_tty() else None)
    except RecoveryError as e:
        raise click.ClickException(" ".join(str(e).split())) from e
    severity = worst(findings)
    if as_json:
        emit_json({"healthy": severity in (Severity.OK, Severity.INFO), "worst": severity,
                   "applied": applied, "refused": refused,
                   "findings": [f.to_dict() for f in findings],
                   "size": next((f.data for f in findings if f.check == "size"), None)})
    else:
        _print(findings, applied)
    if refused is not None:
        click.echo(f"Error: not fixed: {refused}", err=True)
        raise SystemExit(1)
    raise SystemExit(EXIT_BY_SEVERITY[severity])
